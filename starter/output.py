"""How `colonyctl` shows things: `-o table|json|yaml`, one-line errors, and the live `--wait` view.

Tables and progress are rich renderables on the terminal; JSON and YAML are the models' own
camelCase shapes (the same as the API's), so scripts read what the workflow reports.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.alias_generators import to_camel
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from models.cluster import ClusterStatus
from models.operations import Operation, OperationState

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class OutputFormat(StrEnum):
    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


def plain(data: Any) -> Any:
    """Models as their JSON shape (camelCase), recursively."""
    if isinstance(data, BaseModel):
        return data.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(data, list | tuple):
        return [plain(item) for item in data]
    if isinstance(data, dict):
        return {key: plain(value) for key, value in data.items()}
    return data


def emit(data: Any, fmt: OutputFormat) -> bool:
    """Print `data` as JSON or YAML; False for the table format (the caller draws the table)."""
    if fmt is OutputFormat.JSON:
        out.print_json(json.dumps(plain(data)), highlight=False)
        return True
    if fmt is OutputFormat.YAML:
        out.print(yaml.safe_dump(plain(data), sort_keys=False).rstrip(), markup=False)
        return True
    return False


def error_line(message: str) -> None:
    """One line on stderr: `error: <message>` (newlines folded, for scripts that read one line)."""
    err.print(Text(f"error: {' '.join(message.split())}"))


def _field(location: Sequence[int | str]) -> str:
    path = ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += ("." if path else "") + to_camel(part)
    return path


def validation_message(exc: ValidationError) -> str:
    """The first problem of a validation error as `<field>: <rule>`."""
    first = exc.errors(include_url=False)[0]
    location = [part for part in first["loc"] if not str(part).startswith("function-")]
    field = _field(location) or to_camel(str(first["type"]))
    return f"{field}: {first['msg']}"


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Table:
    view = Table(title=title, title_justify="left", box=None, header_style="bold", pad_edge=False)
    for column in columns:
        view.add_column(column)
    for row in rows:
        view.add_row(*(str(cell) for cell in row))
    return view


def cluster_table(status: ClusterStatus) -> Group:
    """`colonyctl cluster get` as text."""
    head = Text.assemble(
        ("cluster ", "bold"),
        (status.name, "bold cyan"),
        f"  location {status.location_id}  phase ",
        (status.phase.value, _phase_style(status.phase.value)),
    )
    parts: list[Any] = [head]
    if status.reason:
        parts.append(Text(f"reason: {status.reason}", style="yellow"))
    parts.append(
        table(
            "node pools",
            ["NAME", "SKU", "COUNT", "READY", "LABELS", "TAINTS"],
            [
                (
                    pool.name,
                    str(pool.sku),
                    pool.count,
                    pool.ready_count,
                    ",".join(f"{k}={v}" for k, v in pool.labels.items()) or "-",
                    ",".join(f"{t.key}={t.value}:{t.effect}" for t in pool.taints) or "-",
                )
                for pool in status.node_pools
            ],
        )
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
    if operations:
        parts.append(operation_table(operations))
    return Group(*parts)


def node_rows(status: ClusterStatus) -> list[tuple[str, ...]]:
    return [
        (node.name, pool.name, node.host_id, node.address, node.state.value, node.kubernetes_status)
        for pool in status.node_pools
        for node in pool.nodes
    ]


NODE_COLUMNS = ("NAME", "POOL", "HOST", "ADDRESS", "STATE", "KUBERNETES")


def operation_table(operations: Sequence[Operation]) -> Table:
    return table(
        "operations",
        ["ID", "KIND", "STATE", "DETAIL"],
        [(op.id, op.kind.value, op.state.value, describe(op)) for op in operations],
    )


def describe(op: Operation) -> str:
    """One line about an operation's progress or outcome."""
    if op.state in (OperationState.FAILED, OperationState.CANCELLED):
        return op.reason
    progress = op.progress
    bits: list[str] = []
    if progress.nodes_expected:
        bits.append(f"joined {progress.nodes_joined}/{progress.nodes_expected}")
    if progress.nodes:
        evicted = sum(node.pods_evicted for node in progress.nodes)
        done = sum(1 for node in progress.nodes if node.step == "removed")
        bits.append(f"removed {done}/{len(progress.nodes)}, {evicted} pods evicted")
        blocked = [pod for node in progress.nodes for pod in node.blocking_pods]
        if blocked:
            bits.append(f"blocked by {'; '.join(blocked)}")
    return ", ".join(bits)


def live_view(status: ClusterStatus, operation: Operation | None, elapsed: float) -> Group:
    """What `--wait` shows while it waits."""
    state = operation.state.value if operation else "?"
    head = Text.assemble(
        (
            f"{operation.id if operation else ''} {operation.kind.value if operation else ''}",
            "bold",
        ),
        f"  {state}  ",
        (f"cluster {status.name} {status.phase.value}", _phase_style(status.phase.value)),
        f"  {elapsed:.0f}s",
    )
    parts: list[Any] = [head]
    if status.reason and status.phase.value != "ready":
        parts.append(Text(status.reason, style="dim"))
    if status.node_pools:
        parts.append(
            table(
                None,
                ["POOL", "COUNT", "READY"],
                [(pool.name, pool.count, pool.ready_count) for pool in status.node_pools],
            )
        )
    if operation is not None and operation.progress.nodes:
        parts.append(
            table(
                None,
                ["NODE", "STEP", "EVICTED", "REMAINING", "BLOCKED BY"],
                [
                    (
                        node.node,
                        node.step,
                        node.pods_evicted,
                        node.pods_remaining,
                        "; ".join(node.blocking_pods) or "-",
                    )
                    for node in operation.progress.nodes
                ],
            )
        )
    return Group(*parts)


def _phase_style(phase: str) -> str:
    return {"ready": "green", "failed": "red", "deleting": "yellow", "creating": "cyan"}.get(
        phase, ""
    )
