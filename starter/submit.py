"""Submit an operation to a cluster, follow it live, and report how it ended.

The life of every mutating command after its input is valid: send the update (with its update id),
print the workflow's Web UI link, and either print what was accepted or, with `--wait`, follow
the operation until it finishes and exit 1 when it did not succeed. Called by the command modules.
"""

from __future__ import annotations

import sys
import time

from clients.base import WorkflowRef
from clients.clusters import ClusterRequest, Clusters
from clients.errors import OperationFailedError
from models.cluster import ClusterStatus
from models.operations import Operation, OperationAccepted, OperationState
from starter import output
from starter.backend import clusters
from starter.options import OutputFormat, Submission
from starter.session import print_link, run


async def follow(
    colony: Clusters, cluster: str, operation_id: str, give_up_after: float | None
) -> Operation | None:
    """Show the operation live (on stderr) until it finishes; its final state. Off a terminal
    (a pipe, a file) the last view is written once, at the end, as plain text with whole cells:
    rich would fit its tables to 80 columns there, cutting a drain's blocking pods."""
    if not sys.stderr.isatty():
        return await _follow_plainly(colony, cluster, operation_id, give_up_after)
    from rich.live import Live

    err = output.console(stderr=True)
    started = time.monotonic()
    with Live(console=err, refresh_per_second=4, transient=False) as live:

        def show(status: ClusterStatus, operation: Operation | None) -> None:
            live.update(output.live_view(status, operation, time.monotonic() - started))

        try:
            return await colony.wait_for_operation(
                cluster, operation_id, show, give_up_after=give_up_after
            )
        finally:
            live.stop()


async def _follow_plainly(
    colony: Clusters, cluster: str, operation_id: str, give_up_after: float | None
) -> Operation | None:
    started = time.monotonic()
    last: list[str] = []

    def show(status: ClusterStatus, operation: Operation | None) -> None:
        last[:] = [output.live_text(status, operation, time.monotonic() - started)]

    try:
        return await colony.wait_for_operation(
            cluster, operation_id, show, give_up_after=give_up_after
        )
    finally:
        for view in last:
            output.info(view)


def finish(
    operation: Operation | None, operation_id: str, *, gone_ok: bool = False, fmt: OutputFormat
) -> None:
    """Report the outcome of a waited-for operation; `OperationFailedError` unless it succeeded."""
    if operation is None:
        if gone_ok:
            return
        raise OperationFailedError(
            f"{operation_id}: the cluster's workflow ended before the operation finished"
        )
    output.emit(operation, fmt)
    if operation.state is OperationState.SUCCEEDED:
        if fmt is OutputFormat.TABLE:
            output.write(
                f"{operation.id} {operation.kind.value} succeeded "
                f"({output.describe(operation) or 'done'})"
            )
        return
    raise OperationFailedError(
        f"{operation.id} {operation.kind.value} {operation.state.value}: {operation.reason}"
    )


def accepted_output(
    workflow: WorkflowRef, cluster: str, accepted: OperationAccepted, fmt: OutputFormat
) -> None:
    data = {
        "cluster": cluster,
        "workflowId": workflow.workflow_id,
        "operationId": accepted.operation_id,
        "kind": accepted.kind.value,
        "position": accepted.position,
        "webUi": workflow.link,
    }
    if accepted.purge_workflow_id:
        data["purgeWorkflowId"] = accepted.purge_workflow_id
    if not output.emit(data, fmt):
        output.write(
            purged_line(f"cluster {cluster}", accepted.purge_workflow_id)
            or (
                f"{accepted.kind.value} accepted as {accepted.operation_id} "
                f"(queue position {accepted.position})"
            )
        )


def purged_line(entity: str, purge_workflow_id: str | None) -> str:
    """What a delete that purged says (its workflow could not make progress); "" for any other."""
    if not purge_workflow_id:
        return ""
    return (
        f"{entity} cannot make progress: {purge_workflow_id} ends its workflow and removes what "
        "it made"
    )


def submit(
    cluster: str, request: ClusterRequest, submission: Submission, *, gone_ok: bool = False
) -> None:
    """Send an operation (checked by the client as its transport checks it: against the
    location's stock for an add or a scale); with --wait, follow it to the end.

    Args:
        gone_ok: a workflow that ends before reporting the operation is success (a delete).
    """
    colony = clusters()

    async def go() -> tuple[OperationAccepted, Operation | None]:
        accepted = await colony.send(cluster, request, request_id=submission.request_id)
        print_link(colony.workflow(cluster))
        if not submission.wait:
            return accepted, None
        operation = await follow(colony, cluster, accepted.operation_id, submission.timeout)
        return accepted, operation

    accepted, operation = run(go)
    if not submission.wait:
        accepted_output(colony.workflow(cluster), cluster, accepted, submission.fmt)
        return
    finish(operation, accepted.operation_id, gone_ok=gone_ok, fmt=submission.fmt)
