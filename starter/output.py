"""How `colonyctl` shows things: `-o table|json|yaml`, one-line errors, and the live views.

JSON and YAML are the models' own camelCase shapes (the same as the API's), written as plain text.
Tables follow kubectl: when stdout is not a terminal every cell is printed whole, in columns padded
to the widest cell (a pipe or a file never gets truncated or wrapped cells); only a terminal gets
rich's fitted, coloured columns. rich is imported only for a terminal and the live `--wait` and
`-w` views: piped output and the JSON path stay cheap.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from models.catalog import SkuKind
from models.cluster import ClusterPhase, ClusterStatus
from models.node_pool import NodePoolStatus, Taint
from models.operations import Operation, OperationState
from starter.options import OutputFormat

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from clients.clusters import ClusterSummary
    from clients.colonies import ColonySummary
    from models.catalog import LocationStock
    from models.colony import ColonyStatus

COLUMN_GAP = "   "
"""Three spaces between columns, as kubectl's printers use."""
NODE_COLUMNS = ("NAME", "POOL", "HOST", "ADDRESS", "STATE", "KUBERNETES")
OPERATION_COLUMNS = (
    "ID", "KIND", "STATE", "SUBMITTED", "STARTED", "FINISHED", "DURATION", "DETAIL",
)  # fmt: skip
PHASE_STYLES = {
    "ready": "green",
    "failed": "red",
    "deleting": "yellow",
    "creating": "cyan",
    "waiting": "yellow",
    "degraded": "red",
}


# --- plain text ------------------------------------------------------------------------------


def plain(data: Any) -> Any:
    """Models as their JSON shape (camelCase), recursively."""
    if isinstance(data, BaseModel):
        return data.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(data, list | tuple):
        return [plain(item) for item in data]
    if isinstance(data, dict):
        return {key: plain(value) for key, value in data.items()}
    return data


def records(items: Iterable[Any], *fields: str, keys: Mapping[str, str] = {}) -> list[Any]:
    """Each item as a JSON record of its `fields` (attributes), under their camelCase names or
    the name `keys` gives (a list's `-o json` rows)."""
    named = {f: keys.get(f) or re.sub(r"_([a-z])", lambda m: m.group(1).upper(), f) for f in fields}
    return [{key: getattr(item, field) for field, key in named.items()} for item in items]


def started(data: Any, fmt: OutputFormat, line: str, *, repeated: bool) -> None:
    """What a start shows: `data` as JSON or YAML, or for the table format `line`, noting when its
    request id had started it already (`repeated`)."""
    if not emit(data, fmt):
        write(line + (" (already started by this request id)" if repeated else ""))


def write(text: str = "") -> None:
    """A line on stdout."""
    sys.stdout.write(text + "\n")


def info(text: str) -> None:
    """A line on stderr: links and notes that must not mix with what scripts parse."""
    sys.stderr.write(text + "\n")


def error_line(message: str) -> None:
    """One line on stderr: `error: <message>` (newlines folded, for scripts that read one line)."""
    sys.stderr.write(f"error: {' '.join(message.split())}\n")


def emit(data: Any, fmt: OutputFormat, *, compact: bool = False) -> bool:
    """Print `data` as JSON or YAML; False for the table format (the caller draws the table).

    Args:
        compact: one JSON document per line (a stream of changes, as `-w -o json`).
    """
    if fmt is OutputFormat.JSON:
        write(json.dumps(plain(data), indent=None if compact else 2))
        return True
    if fmt is OutputFormat.YAML:
        import yaml  # only -o yaml needs it

        if compact:
            write("---")
        write(yaml.safe_dump(plain(data), sort_keys=False).rstrip())
        return True
    return False


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def cell(value: Any) -> str:
    """A table cell on one line (a reason may hold newlines)."""
    return " ".join(str(value).split()) if value not in (None, "") else "-"


def plain_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Whole cells in columns padded to the widest one; the last column is not padded."""
    text_rows = [list(columns), *([cell(value) for value in row] for row in rows)]
    widths = [max(len(row[i]) for row in text_rows) for i in range(len(columns))]
    lines = []
    for row in text_rows:
        padded = [value.ljust(widths[i]) for i, value in enumerate(row[:-1])]
        lines.append(COLUMN_GAP.join([*padded, row[-1]]).rstrip())
    return "\n".join(lines)


# --- rich, for terminals and live views ------------------------------------------------------


def console(*, stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def rich_table(
    title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]
) -> RenderableType:
    from rich.table import Table

    view = Table(title=title, title_justify="left", box=None, header_style="bold", pad_edge=False)
    for column in columns:
        view.add_column(column)
    for row in rows:
        view.add_row(*(cell(value) for value in row))
    return view


def print_table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None
) -> None:
    """A table on stdout: fitted on a terminal, whole cells otherwise."""
    if stdout_is_terminal():
        console().print(rich_table(title, columns, rows))
        return
    if title:
        write(title.upper())
    write(plain_table(columns, rows))


# --- what the commands show ------------------------------------------------------------------


def taint_text(taint: Taint) -> str:
    """As kubectl prints a taint: `key=value:Effect`, or `key:Effect` without a value."""
    head = f"{taint.key}={taint.value}" if taint.value else taint.key
    return f"{head}:{taint.effect.value}"


def pool_rows(pools: Sequence[NodePoolStatus]) -> list[tuple[Any, ...]]:
    return [
        (
            pool.name,
            str(pool.sku),
            pool.count,
            pool.ready_count,
            ",".join(f"{k}={v}" for k, v in pool.labels.items()) or "-",
            ",".join(taint_text(t) for t in pool.taints) or "-",
            pool.drain_parallelism or "-",
        )
        for pool in pools
    ]


POOL_COLUMNS = ("NAME", "SKU", "COUNT", "READY", "LABELS", "TAINTS", "DRAIN-PARALLELISM")


def node_rows(status: ClusterStatus) -> list[tuple[str, ...]]:
    return [
        (node.name, pool.name, node.host_id, node.address, node.state.value, node.kubernetes_status)
        for pool in status.node_pools
        for node in pool.nodes
    ]


def timestamp(moment: datetime | None) -> str:
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z") if moment else "-"


def duration_text(operation: Operation, now: datetime | None = None) -> str:
    """How long the operation ran (or has been running, given `now`); "-" before it started."""
    if operation.started_at is None:
        return "-"
    end = operation.finished_at or now
    if end is None:
        return "-"
    seconds = int((end - operation.started_at).total_seconds())
    minutes, seconds = divmod(max(seconds, 0), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


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


def operation_rows(
    operations: Sequence[Operation], now: datetime | None = None
) -> list[tuple[str, ...]]:
    return [
        (
            op.id,
            op.kind.value,
            op.state.value,
            timestamp(op.submitted_at),
            timestamp(op.started_at),
            timestamp(op.finished_at),
            duration_text(op, now),
            describe(op) or "-",
        )
        for op in operations
    ]


def recent_operations(status: ClusterStatus) -> list[Operation]:
    """The last five finished, the running and the queued operations."""
    return [
        op
        for op in [
            *status.completed_operations[-5:],
            status.current_operation,
            *status.queued_operations,
        ]
        if op is not None
    ]


def cluster_head(status: ClusterStatus) -> str:
    return f"cluster {status.name}  location {status.location_id}  phase {status.phase.value}"


def print_cluster(status: ClusterStatus) -> None:
    """`colonyctl cluster get` as text on stdout."""
    if stdout_is_terminal():
        console().print(cluster_view(status))
        return
    write(cluster_head(status))
    if status.reason:
        write(f"reason: {cell(status.reason)}")
    for condition in status.conditions:
        if status.phase is ClusterPhase.DEGRADED and condition.status != "True":
            write(f"condition: {condition.type}={condition.status} ({condition.reason})")
    write()
    write("NODE POOLS")
    write(plain_table(POOL_COLUMNS, pool_rows(status.node_pools)))
    operations = recent_operations(status)
    if operations:
        write()
        write("OPERATIONS")
        write(plain_table(OPERATION_COLUMNS, operation_rows(operations, status.updated_at)))


def print_clusters(clusters: Sequence[ClusterSummary]) -> None:
    """`colonyctl cluster list` as a table on stdout."""
    print_table(
        ["ORGANIZATION", "NAME", "PHASE", "STARTED", "WORKFLOW"],
        [(c.organization or "-", c.name, c.phase, c.started, c.web_ui) for c in clusters],
    )


def cluster_view(status: ClusterStatus) -> RenderableType:
    """The cluster as rich renderables, for a terminal (and the live `-w` view)."""
    from rich.console import Group
    from rich.text import Text

    head = Text.assemble(
        ("cluster ", "bold"),
        (status.name, "bold cyan"),
        f"  location {status.location_id}  phase ",
        (status.phase.value, PHASE_STYLES.get(status.phase.value, "")),
    )
    parts: list[RenderableType] = [head]
    if status.reason:
        parts.append(Text(f"reason: {status.reason}", style="yellow"))
    parts.append(rich_table("node pools", POOL_COLUMNS, pool_rows(status.node_pools)))
    operations = recent_operations(status)
    if operations:
        parts.append(
            rich_table(
                "operations", OPERATION_COLUMNS, operation_rows(operations, status.updated_at)
            )
        )
    return Group(*parts)


def operation_fields(operation: Operation, now: datetime | None = None) -> list[tuple[str, str]]:
    """`colonyctl operation get` as (label, value) lines."""
    request = operation.request.model_dump(mode="json", by_alias=True, exclude={"kind"})
    return [
        ("ID", operation.id),
        ("KIND", operation.kind.value),
        ("STATE", operation.state.value),
        ("REQUEST", json.dumps(request, separators=(", ", ": "))),
        ("SUBMITTED", timestamp(operation.submitted_at)),
        ("STARTED", timestamp(operation.started_at)),
        ("FINISHED", timestamp(operation.finished_at)),
        ("DURATION", duration_text(operation, now)),
        ("REASON", operation.reason or "-"),
        ("PROGRESS", describe(operation) or "-"),
        ("UPDATE ID", operation.update_id or "-"),
    ]


NODE_PROGRESS_COLUMNS = (
    "NODE",
    "STEP",
    "EVICTED",
    "REMAINING",
    "DEADLINE",
    "TIME LEFT",
    "BLOCKED BY",
)


def time_left(deadline: datetime | None, now: datetime) -> str:
    """What is left of a node's own drain deadline, as "41m07s" ("-" when it has none)."""
    if deadline is None:
        return "-"
    seconds = max(int((deadline - now).total_seconds()), 0)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def node_progress_rows(operation: Operation, now: datetime | None = None) -> list[tuple[Any, ...]]:
    moment = now or datetime.now(UTC)
    return [
        (
            node.node,
            node.step,
            node.pods_evicted,
            node.pods_remaining,
            timestamp(node.drain_deadline),
            time_left(node.drain_deadline, moment) if node.step == "draining" else "-",
            "; ".join(node.blocking_pods) or "-",
        )
        for node in operation.progress.nodes
    ]


def print_operation(operation: Operation, now: datetime | None = None) -> None:
    """One operation in detail, as `kubectl describe` lays out an object."""
    fields = operation_fields(operation, now)
    width = max(len(label) for label, _ in fields) + 2
    for label, value in fields:
        write(f"{label + ':':<{width}}{cell(value)}")
    if operation.progress.nodes:
        write()
        print_table(NODE_PROGRESS_COLUMNS, node_progress_rows(operation, now), title="nodes")


def print_colony(status: ColonyStatus) -> None:
    """`colonyctl colony get` as text on stdout: the colony, then its clusters."""
    write(
        f"colony {status.name}: {status.phase.value}, "
        f"{status.ready_clusters}/{status.total_clusters} clusters ready"
    )
    print_table(
        ("CLUSTER", "PHASE", "NODES", "READY", "GPUS", "REASON"),
        [
            (
                c.cluster,
                c.phase,
                c.nodes,
                c.ready_nodes,
                ", ".join(f"{g.total}x {g.model}" for g in c.gpus) or "-",
                c.reason or "-",
            )
            for c in status.clusters
        ],
    )


def print_colonies(colonies: Sequence[ColonySummary]) -> None:
    """`colonyctl colony list` as a table on stdout."""
    print_table(
        ("ORGANIZATION", "NAME", "PHASE"),
        [(c.organization or "-", c.name, c.phase) for c in colonies],
    )


def stock_cell(stock: LocationStock, kind: SkuKind) -> str:
    """`h100-80gb 6/8 free, a100-80gb 6/6 free`: free/total per SKU of one kind."""
    return ", ".join(f"{s.id} {s.free}/{s.total}" for s in stock.of_kind(kind)) or "-"


def print_locations(locations: Sequence[LocationStock]) -> None:
    """`colonyctl catalog location list` as a table on stdout."""
    print_table(
        ["ID", "NAME", "COUNTRY", "GPU (FREE/TOTAL)", "CPU (FREE/TOTAL)"],
        [
            (
                s.id,
                s.name,
                s.country,
                stock_cell(s, SkuKind.GPU),
                stock_cell(s, SkuKind.CPU),
            )
            for s in locations
        ],
    )


def print_location(stock: LocationStock) -> None:
    """`colonyctl catalog location get` as text on stdout: the location, then its SKUs."""
    write(f"location {stock.id}  {stock.name}  {stock.country}")
    write()
    print_table(
        ["KIND", "SKU", "FREE", "TOTAL"],
        [(s.kind.value, s.id, s.free, s.total) for s in stock.skus],
    )


def live_head(status: ClusterStatus, operation: Operation | None, elapsed: float) -> str:
    """The first line of what `--wait` shows: the operation, the cluster, the time waited."""
    what = f"{operation.id} {operation.kind.value}" if operation else ""
    state = operation.state.value if operation else "?"
    return f"{what}  {state}  cluster {status.name} {status.phase.value}  {elapsed:.0f}s"


def live_text(status: ClusterStatus, operation: Operation | None, elapsed: float) -> str:
    """What `--wait` shows, as plain text for a pipe or a file: `live_view`'s lines with the
    tables' cells whole (`plain_table`), so a drain's blocking pods are never cut."""
    lines = [live_head(status, operation, elapsed)]
    if status.reason and status.phase.value != "ready":
        lines.append(cell(status.reason))
    if status.node_pools:
        lines.append(
            plain_table(
                ["POOL", "COUNT", "READY"],
                [(pool.name, pool.count, pool.ready_count) for pool in status.node_pools],
            )
        )
    if operation is not None and operation.progress.nodes:
        lines.append(plain_table(NODE_PROGRESS_COLUMNS, node_progress_rows(operation)))
    return "\n".join(lines)


def live_view(status: ClusterStatus, operation: Operation | None, elapsed: float) -> RenderableType:
    """What `--wait` shows while it waits, on a terminal (`live_text` elsewhere)."""
    from rich.console import Group
    from rich.text import Text

    state = operation.state.value if operation else "?"
    head = Text.assemble(
        (
            f"{operation.id if operation else ''} {operation.kind.value if operation else ''}",
            "bold",
        ),
        f"  {state}  ",
        (
            f"cluster {status.name} {status.phase.value}",
            PHASE_STYLES.get(status.phase.value, ""),
        ),
        f"  {elapsed:.0f}s",
    )
    parts: list[RenderableType] = [head]
    if status.reason and status.phase.value != "ready":
        parts.append(Text(status.reason, style="dim"))
    if status.node_pools:
        parts.append(
            rich_table(
                None,
                ["POOL", "COUNT", "READY"],
                [(pool.name, pool.count, pool.ready_count) for pool in status.node_pools],
            )
        )
    if operation is not None and operation.progress.nodes:
        parts.append(rich_table(None, NODE_PROGRESS_COLUMNS, node_progress_rows(operation)))
    return Group(*parts)
