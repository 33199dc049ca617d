"""How `colonyctl` shows workspaces and workspace classes as text (`-o table`, the default).

JSON and YAML are the models' own shapes, printed by `starter.output.emit`; this module draws the
tables and the `kubectl describe`-like views, with `starter.output`'s conventions: whole cells
when stdout is not a terminal, rich's fitted columns on one. Called by
`starter/commands/workspace.py`, `workspace_class.py` and `apply.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from models.workspace import AdmissionState, WorkspaceStatus
from models.workspace_class import WorkspaceClassSpec
from starter import output

if TYPE_CHECKING:
    from clients.workspaces import WorkspaceSummary

LIST_COLUMNS = ("ORGANIZATION", "NAME", "CLUSTER", "CLASS", "PHASE", "STARTED")
WIDE_COLUMNS = (
    "ORGANIZATION", "NAME", "CLUSTER", "CLASS", "PHASE", "GPUS", "POSITION", "AGE", "STARTED",
)  # fmt: skip
ACCESS_COLUMNS = ("ENDPOINT", "PROTOCOL", "URL", "READY", "STATE", "HOW")
CONDITION_COLUMNS = ("TYPE", "STATUS", "REASON", "MESSAGE")
PREREQUISITE_COLUMNS = ("TEMPLATE", "PHASE", "NAMESPACE", "SOURCE", "MESSAGE")
OPERATION_COLUMNS = ("ID", "KIND", "STATE", "STARTED", "FINISHED", "REASON")
CLASS_COLUMNS = ("NAME", "DISPLAY NAME", "TEMPLATE", "GPUS", "ENDPOINTS", "PREREQUISITES")
PROMPT_COLUMNS = ("VALUE PATH", "NAME", "TYPE", "REQUIRED", "DEFAULT", "OPTIONS")


def resources_text(status: WorkspaceStatus) -> str:
    """`1 x (2 cpu, 8Gi memory, 20Gi storage, 4 GPU h100-80gb)`."""
    resolved = status.resolved_resources
    if resolved is None:
        return "-"
    per = resolved.per_replica
    parts = [f"{per.cpu} cpu" if per.cpu else "", f"{per.memory} memory" if per.memory else ""]
    parts.append(f"{per.storage} storage" if per.storage else "")
    if per.gpu_count:
        which = per.gpu_type or ",".join(
            f"{k}={v}" for k, v in (per.gpu_node_selector or {}).items()
        )
        parts.append(f"{per.gpu_count} GPU {which}".strip())
    return f"{resolved.replicas or 1} x ({', '.join(p for p in parts if p)})"


LEDGER_WAITING = "waiting for GPU capacity"
"""How the GPU ledger's message of a waiting request begins (`models.capacity`), after what
happened to it, if anything (`its GPUs' node left the cluster; `)."""


def gpus_text(status: WorkspaceStatus) -> str:
    """The GPUs a workspace asks for: `2 x 4 GPUs h100-80gb` (empty when it asks for none)."""
    resolved = status.resolved_resources
    if resolved is None or not resolved.per_replica.gpu_count:
        return ""
    per = resolved.per_replica
    which = per.gpu_type or ",".join(f"{k}={v}" for k, v in (per.gpu_node_selector or {}).items())
    unit = "GPU" if per.gpu_count == 1 else "GPUs"
    return f"{resolved.replicas or 1} x {per.gpu_count} {unit} {which or 'of any model'}"


def admission_text(status: WorkspaceStatus) -> str:
    """Where the workspace stands in its cluster's GPU ledger, on one line."""
    admission = status.admission
    if admission is None:
        if status.resolved_resources is None:
            return "-"
        if not status.resolved_resources.gpus:
            return "no GPUs requested"
        return "GPUs released (suspended)" if status.suspended else "no GPUs held"
    if admission.state is AdmissionState.WAITING:
        # Said once: the ledger's own message repeats the position and the request, so only what
        # happened before it waited (a node lost) is kept of it.
        happened, waits, _ = admission.message.partition(LEDGER_WAITING)
        asked = gpus_text(status)
        return (
            (happened if waits else "")
            + f"waiting for GPUs: position {admission.position}"
            + (f" in the queue for {asked}" if asked else "")
        )
    nodes = sorted({p.node for p in admission.placements})
    return f"admitted: GPUs reserved on {', '.join(nodes) or 'its nodes'}"


def age_text(started: str, now: datetime | None = None) -> str:
    """How long ago `started` (ISO 8601) was, as kubectl's AGE column says it: `45s`, `12m`,
    `5h`, `3d` ("-" when unknown)."""
    try:
        since = datetime.fromisoformat(started)
    except ValueError:
        return "-"
    if since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    seconds = max(int(((now or datetime.now(UTC)) - since).total_seconds()), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def workspace_rows(
    found: Sequence[WorkspaceSummary], *, wide: bool = False, now: datetime | None = None
) -> tuple[Sequence[str], list[tuple[Any, ...]]]:
    """`workspace list`'s columns and rows; `wide` (`-o wide`) adds the GPUs each asks for, its
    place in line for them and its age."""
    if not wide:
        return LIST_COLUMNS, [
            (
                w.organization or "-",
                w.name,
                w.cluster,
                w.class_name,
                f"{w.phase} (position {w.position})" if w.position else w.phase,
                w.started,
            )
            for w in found
        ]
    return WIDE_COLUMNS, [
        (
            w.organization or "-",
            w.name,
            w.cluster,
            w.class_name,
            w.phase,
            "-" if w.gpus is None else w.gpus,
            w.position or "-",
            age_text(w.started, now),
            w.started,
        )
        for w in found
    ]


def access_rows(status: WorkspaceStatus) -> list[tuple[Any, ...]]:
    return [
        (
            entry.name,
            entry.protocol.value,
            entry.url or "-",
            "yes" if entry.ready else "no",
            entry.reason or "-",
            (entry.command if entry.ready else entry.message or entry.command) or "-",
        )
        for entry in status.access
    ]


def workspace_fields(status: WorkspaceStatus) -> list[tuple[str, str]]:
    """The head of `workspace get`, as (label, value) lines."""
    fields = [
        ("NAME", status.name),
        ("CLASS", status.class_name),
        ("CLUSTER", status.cluster),
        ("PHASE", status.phase.value),
        ("MESSAGE", status.message or "-"),
        ("NAMESPACE", status.namespace or "-"),
        ("SERVICESET", status.service_set or "-"),
        ("RESOURCES", resources_text(status)),
        ("ADMISSION", admission_text(status)),
        ("CREATED", output.timestamp(status.created_at)),
    ]
    return fields


def _section(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    if not rows:
        return
    output.write()
    output.print_table(columns, rows, title=title)


def print_workspace(status: WorkspaceStatus) -> None:
    """`colonyctl workspace get` as text: phase, access, prerequisites, conditions, failure."""
    fields = workspace_fields(status)
    width = max(len(label) for label, _ in fields) + 2
    for label, value in fields:
        output.write(f"{label + ':':<{width}}{output.cell(value)}")
    _section("access", ACCESS_COLUMNS, access_rows(status))
    if any(entry.command for entry in status.access):
        output.write(
            f"(port-forward with the cluster's kubeconfig: colonyctl kubeconfig "
            f"{status.cluster} --output FILE, then kubectl --kubeconfig FILE ...)"
        )
    _section(
        "prerequisites",
        PREREQUISITE_COLUMNS,
        [
            (p.name, p.phase.value, p.namespace, p.source.value if p.source else "-", p.message)
            for p in status.prerequisites
        ],
    )
    _section(
        "conditions",
        CONDITION_COLUMNS,
        [(c.type, c.status.value, c.reason, c.message) for c in status.conditions],
    )
    failure = status.failure_context
    if failure is not None:
        output.write()
        output.write("FAILURE")
        output.write(f"phase when failed: {failure.phase_when_failed.value}")
        output.write(f"reason: {output.cell(failure.reason)}")
        if failure.message:
            output.write(f"message: {output.cell(failure.message)}")
        if failure.service_set_status is not None:
            for service in failure.service_set_status.services:
                output.write(
                    f"service {service.name}: {service.state or '-'}"
                    + (
                        f": {output.cell(service.failure_message)}"
                        if service.failure_message
                        else ""
                    )
                )
        for event in failure.recent_events:
            output.write(
                f"event {output.timestamp(event.last_seen)} {event.type} {event.reason}: "
                f"{output.cell(event.message)}"
            )
    operations = [
        op
        for op in [
            *status.completed_operations[-5:],
            status.current_operation,
            *status.queued_operations,
        ]
        if op is not None
    ]
    _section(
        "operations",
        OPERATION_COLUMNS,
        [
            (
                op.id,
                op.kind.value,
                op.state.value,
                output.timestamp(op.started_at),
                output.timestamp(op.finished_at),
                op.reason or "-",
            )
            for op in operations
        ],
    )


def progress_line(status: WorkspaceStatus) -> str:
    """One line per change while `--wait` follows a workspace (on stderr)."""
    line = f"workspace {status.name}: {status.phase.value}"
    if status.message:
        line += f" ({status.message})"
    return line


def access_lines(status: WorkspaceStatus) -> list[str]:
    """How to reach a running workspace: `http: https://nb.dos-lab.example`, or the command."""
    lines = []
    for entry in status.access:
        how = entry.url or entry.message
        if entry.command:
            how = f"{entry.url} after `{entry.command}`"
        lines.append(f"{entry.name}: {how}")
    return lines


def class_rows(classes: Sequence[WorkspaceClassSpec]) -> list[tuple[Any, ...]]:
    return [
        (
            c.name,
            c.display_name,
            c.service_template.name,
            c.default_resources.per_replica.gpu_count or 0,
            ", ".join(f"{e.name}/{e.protocol.value}:{e.port}" for e in c.access_endpoints) or "-",
            ", ".join(p.service_template.name for p in c.prerequisites) or "-",
        )
        for c in classes
    ]


def print_class(spec: WorkspaceClassSpec) -> None:
    """`colonyctl class get` as text."""
    per = spec.default_resources.per_replica
    fields = [
        ("NAME", spec.name),
        ("DISPLAY NAME", spec.display_name),
        ("DESCRIPTION", spec.description or "-"),
        ("TEMPLATE", f"{spec.service_template.namespace or '-'}/{spec.service_template.name}"),
        (
            "RESOURCES",
            f"{spec.default_resources.replicas or 1} x ({per.cpu or '-'} cpu, "
            f"{per.memory or '-'} memory, {per.storage or '-'} storage, {per.gpu_count or 0} GPU"
            + (f" {per.gpu_vendor.value}" if per.gpu_vendor else "")
            + ")",
        ),
        ("DEPLOY TIMEOUT", str(spec.deploy_timeout)),
        (
            "PREREQUISITES",
            ", ".join(
                f"{p.service_template.name} in {p.namespace or 'default'}"
                for p in spec.prerequisites
            )
            or "-",
        ),
    ]
    width = max(len(label) for label, _ in fields) + 2
    for label, value in fields:
        output.write(f"{label + ':':<{width}}{output.cell(value)}")
    _section(
        "endpoints",
        ("NAME", "PROTOCOL", "PORT", "DESCRIPTION"),
        [(e.name, e.protocol.value, e.port, e.description) for e in spec.access_endpoints],
    )
    _section(
        "prompts",
        PROMPT_COLUMNS,
        [
            (
                p.helm_value_path,
                p.display_name,
                p.type.value,
                "yes" if p.required else "no",
                "-" if p.default is None else p.default,
                ", ".join(p.options or []) or "-",
            )
            for p in spec.prompts
        ],
    )
