"""Whether a workflow can answer: what Temporal says of its pending workflow task (how many times
in a row it failed, whether a worker has it) and the last failure its history records.

Read by the clients (`clients.temporal`: a list or a read of an entity whose workflow does
not answer shows why, and a delete of one that cannot make progress purges it) and by the
activities that wait on other workflows or end them (`activities.temporal`). The decision itself
is `models.purge.task_trouble`; this module only reads what it decides on.
"""

from __future__ import annotations

from datetime import UTC, datetime

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, PendingWorkflowTaskState
from temporalio.api.failure.v1 import Failure
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import Client, WorkflowExecutionDescription
from temporalio.service import RPCError

from models.purge import Unresponsive, task_trouble

LAST_EVENTS = 50
"""Events read back from the end of a history for the last workflow task failure: a failing task
is recorded once, then retried without new events, so it is among the last few."""
SHOWN = 300
"""Characters of a failure's message shown."""


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= SHOWN else line[:SHOWN] + "..."


def failure_text(failure: Failure) -> str:
    """A failure and its first cause, one line each joined (`Failed decoding arguments: 1
    validation error for WorkspaceWorkflowInput`)."""
    text = _first_line(failure.message)
    if failure.HasField("cause") and failure.cause.message:
        text += f": {_first_line(failure.cause.message)}"
    return text


async def last_task_failure(client: Client, workflow_id: str, run_id: str) -> str:
    """The last workflow task failure the run's history records ("" when none, or when the
    server cannot read histories backwards)."""
    try:
        page = await client.workflow_service.get_workflow_execution_history_reverse(
            GetWorkflowExecutionHistoryReverseRequest(
                namespace=client.namespace,
                execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
                maximum_page_size=LAST_EVENTS,
            )
        )
    except RPCError:
        return ""
    for event in page.history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            return failure_text(event.workflow_task_failed_event_attributes.failure)
    return ""


async def unresponsive_of(
    client: Client, description: WorkflowExecutionDescription
) -> Unresponsive | None:
    """What is wrong with the workflow's pending workflow task (`models.purge.task_trouble`), or
    None when nothing is (no task pending, or one on its first attempt and taken in time)."""
    raw = description.raw_description
    if not raw.HasField("pending_workflow_task"):
        return None
    pending = raw.pending_workflow_task
    scheduled = (
        pending.original_scheduled_time.ToDatetime(tzinfo=UTC)
        if pending.HasField("original_scheduled_time")
        else None
    )
    failure = ""
    if pending.attempt > 1:
        failure = await last_task_failure(client, description.id, description.run_id)
    return task_trouble(
        description.id,
        attempt=pending.attempt,
        started=pending.state == PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_STARTED,
        scheduled=scheduled,
        now=datetime.now(UTC),
        failure=failure,
    )
