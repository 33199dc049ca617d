"""`colonyctl operation list|get|cancel`: a cluster's queue and the history of its operations.

Operations are what the cluster's workflow reports in its status: the finished ones it keeps
(the last 20), the running one and the queued ones. Cancelling is the workflow's
`cancel_operation` update: a queued operation is dropped, a running one is interrupted and
compensated, and the update answers once the operation has settled.
Imports beyond Typer happen inside each command (see `starter/commands/__init__.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from starter.commands import Group
from starter.options import ClusterArgument, OutputFormat, OutputOption, RequestIdOption

if TYPE_CHECKING:
    from models.operations import Operation

app = typer.Typer(help="List, inspect and cancel a cluster's operations.", no_args_is_help=True)
GROUP = Group("operation", rank=40, operations=True)

OperationArgument = Annotated[
    str, typer.Argument(help="Operation id (op-0003).", show_default=False)
]


@app.command("list")
def list_(cluster: ClusterArgument, fmt: OutputOption = OutputFormat.TABLE) -> None:
    """Running, queued and finished operations, oldest first, with durations."""
    from clients.clusters import operations as operations_of
    from starter import output
    from starter.backend import clusters
    from starter.session import print_link, run

    colony = clusters()
    status = run(lambda: colony.get(cluster))
    print_link(colony.workflow(cluster))
    operations = operations_of(status)
    if not output.emit(operations, fmt):
        output.print_table(
            output.OPERATION_COLUMNS, output.operation_rows(operations, status.updated_at)
        )


@app.command("get")
def get(
    cluster: ClusterArgument, operation: OperationArgument, fmt: OutputOption = OutputFormat.TABLE
) -> None:
    """One operation in detail: its request, times, outcome and per-node progress."""
    from datetime import UTC, datetime

    from starter import output
    from starter.backend import clusters
    from starter.session import show

    colony = clusters()
    show(
        lambda: colony.get_operation(cluster, operation),
        fmt,
        lambda found: output.print_operation(found, datetime.now(UTC)),
    )


@app.command("cancel")
def cancel(
    cluster: ClusterArgument,
    operation: OperationArgument,
    reason: Annotated[str, typer.Option("--reason", help="Shown on the cancelled operation.")] = "",
    request_id: RequestIdOption = None,
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """Cancel a queued or running operation; answers once it has settled (compensation done)."""
    from starter import output
    from starter.backend import clusters
    from starter.session import print_link, run

    colony = clusters()

    async def go() -> Operation:
        cancelled = await colony.cancel_operation(
            cluster, operation, reason=reason, request_id=request_id
        )
        print_link(colony.workflow(cluster))
        return cancelled

    cancelled = run(go)
    if not output.emit(cancelled, fmt):
        output.write(
            f"{cancelled.id} {cancelled.kind.value} {cancelled.state.value}"
            + (f": {cancelled.reason}" if cancelled.reason else "")
        )
