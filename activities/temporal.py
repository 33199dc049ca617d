"""Activities that talk to Temporal itself: how one workflow reaches another it does not own.

`TemporalActivities` receives the worker's Temporal client and task queue (`worker.py`). Called by
`WorkspaceWorkflow` (to reach its cluster's `CapacityLedgerWorkflow` and a `PrerequisiteWorkflow`,
and to wait until its cluster's `ClusterWorkflow` has finished creating it), by `ClusterWorkflow`
(to tell its workspaces and ledger about changes, and to wait until its workspaces are gone or
cannot answer) and by `PurgeWorkflow` (to look at the workflow it ends, terminate it, and ask a
ledger what a workspace holds), through the declarations in `workflows.workspace_calls` and
`workflows.purge_calls`.

Why activities: a workflow can signal a running workflow itself, but only Temporal's
signal-with-start makes "start it unless it runs, then signal it" one atomic step, so that two
workspaces asking at the same moment meet in one ledger (and one prerequisite installation), and
it exists only on the client. A signal to a workflow that does not run is a result, not an error.
Likewise a workflow cannot query another: a wait on another workflow's status is an activity that
queries it every `CLUSTER_POLL` seconds and heartbeats.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowQueryFailedError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from activities.declarations import implements, purge_calls, search_attributes, workspace_calls
from activities.errors import CONFLICT, UNAVAILABLE
from activities.heartbeat import previous_details, report
from activities.workflow_health import unresponsive_of
from models.cluster import ClusterStatus
from models.purge import (
    InspectWorkflowRequest,
    InspectWorkflowResult,
    TerminateWorkflowRequest,
    TerminateWorkflowResult,
    Unresponsive,
)
from models.workspace_api import (
    AwaitClusterCreatedRequest,
    AwaitClusterCreatedResult,
    AwaitWorkflowsClosedProgress,
    AwaitWorkflowsClosedRequest,
    AwaitWorkflowsClosedResult,
    ClusterCreatedOutcome,
    ClusterCreateWait,
    LedgerHoldings,
    ListWorkflowsRequest,
    ListWorkflowsResult,
    ReadLedgerHoldingsRequest,
    SignalWithStartRequest,
    SignalWithStartResult,
    cluster_created_outcome,
)

START_RACES = 3
"""Signal-with-start attempts within one activity attempt when the server answers "already
started" (see `TemporalActivities.signal_with_start`)."""
CLOSED_POLL = 1.0
"""Seconds between looks at workflows being waited for."""
CLUSTER_POLL = 1.0
"""Seconds between looks at a cluster being created (one query each: cheap for the cluster)."""


class TemporalActivities:
    """Signal-with-start, signals and listings on the worker's own Temporal namespace."""

    def __init__(self, client: Client, task_queue: str) -> None:
        self._client = client
        self._task_queue = task_queue

    @implements(workspace_calls.SIGNAL_WITH_START)
    async def signal_with_start(self, request: SignalWithStartRequest) -> SignalWithStartResult:
        """Signal the workflow, starting it first when it does not run.

        Signal-with-start is one atomic step on the server. A server that still answers "already
        started" to one of two callers racing (Temporal's time-skipping test server does) is
        answered in two steps with the same outcome: the run that exists is signalled (the two
        callers meet in it), and one that ended in between is started again. Raised as is, that
        answer could not even be reported as the attempt's failure.

        Raises:
            ApplicationError: `Conflict` (retried) when runs keep starting and ending under it.
        """
        for _ in range(START_RACES):
            try:
                handle = await self._client.start_workflow(
                    request.workflow,
                    request.input,
                    id=request.workflow_id,
                    task_queue=self._task_queue,
                    start_signal=request.signal,
                    start_signal_args=[request.payload],
                    id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                    static_summary=request.static_summary or None,
                )
                return SignalWithStartResult(run_id=handle.result_run_id or "")
            except WorkflowAlreadyStartedError:
                run_id = await self._signal_running(request)
                if run_id is not None:
                    return SignalWithStartResult(run_id=run_id)
        raise ApplicationError(
            f"workflow {request.workflow_id} kept starting and ending while it was signalled",
            type=CONFLICT,
        )

    async def _signal_running(self, request: SignalWithStartRequest) -> str | None:
        """Signal the workflow's running run; its run id, or None when none runs any more."""
        try:
            described = await self._client.get_workflow_handle(request.workflow_id).describe()
            if described.status != WorkflowExecutionStatus.RUNNING:
                return None
            run = self._client.get_workflow_handle(request.workflow_id, run_id=described.run_id)
            await run.signal(request.signal, request.payload)
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return None  # it ended between the look and the signal
            raise
        return described.run_id

    @implements(workspace_calls.LIST_WORKFLOWS)
    async def list_workflows(self, request: ListWorkflowsRequest) -> ListWorkflowsResult:
        """Running workflows matching a visibility query."""
        ids = [
            execution.id
            async for execution in self._client.list_workflows(
                f"({request.query}) AND ExecutionStatus = 'Running'"
            )
        ]
        return ListWorkflowsResult(workflow_ids=sorted(set(ids)))

    @implements(workspace_calls.AWAIT_WORKFLOWS_CLOSED)
    async def await_workflows_closed(
        self, request: AwaitWorkflowsClosedRequest
    ) -> AwaitWorkflowsClosedResult:
        """Wait until none of the workflows runs any more (or the deadline); report those still
        open, and (with `stop_when_unresponsive`) return as soon as one of them cannot answer,
        saying why (`activities.workflow_health`)."""
        while True:
            still: list[str] = []
            unresponsive: list[Unresponsive] = []
            for workflow_id in request.workflow_ids:
                try:
                    described = await self._client.get_workflow_handle(workflow_id).describe()
                except RPCError as exc:
                    if exc.status == RPCStatusCode.NOT_FOUND:
                        continue
                    raise
                if described.status != WorkflowExecutionStatus.RUNNING:
                    continue
                still.append(workflow_id)
                if request.stop_when_unresponsive:
                    trouble = await unresponsive_of(self._client, described)
                    if trouble is not None and (trouble.stuck or not trouble.failed_tasks):
                        unresponsive.append(trouble)
            report(AwaitWorkflowsClosedProgress(open=still))
            left = (request.deadline - datetime.now(UTC)).total_seconds()
            if not still or unresponsive or left <= 0:
                return AwaitWorkflowsClosedResult(open=still, unresponsive=unresponsive)
            await asyncio.sleep(min(CLOSED_POLL, left))

    @implements(purge_calls.INSPECT_WORKFLOW)
    async def inspect_workflow(self, request: InspectWorkflowRequest) -> InspectWorkflowResult:
        """The workflow as Temporal describes it: running or how it ended, its runs, its marks,
        what is wrong with its workflow task, and how many of its activities a worker runs."""
        try:
            described = await self._client.get_workflow_handle(request.workflow_id).describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return InspectWorkflowResult(found=False)
            raise
        raw = described.raw_description
        running = described.status == WorkflowExecutionStatus.RUNNING
        marks = described.typed_search_attributes
        return InspectWorkflowResult(
            found=True,
            running=running,
            status=described.status.name.lower() if described.status else "",
            run_id=described.run_id,
            first_run_id=raw.workflow_execution_info.first_run_id,
            organization=marks.get(search_attributes.COLONY_ORGANIZATION) or "",
            cluster_mark=marks.get(search_attributes.COLONY_CLUSTER) or "",
            trouble=await unresponsive_of(self._client, described) if running else None,
            activities_running=sum(
                1
                for pending in raw.pending_activities
                if pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
            ),
        )

    @implements(purge_calls.TERMINATE_WORKFLOW)
    async def terminate_workflow(
        self, request: TerminateWorkflowRequest
    ) -> TerminateWorkflowResult:
        """Terminate that run of the workflow (a later run of the same id is never touched); one
        that has ended already is the same outcome."""
        handle = self._client.get_workflow_handle(request.workflow_id, run_id=request.run_id)
        try:
            await handle.terminate(reason=request.reason)
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return TerminateWorkflowResult(terminated=False)
            raise
        return TerminateWorkflowResult(terminated=True)

    @implements(purge_calls.READ_LEDGER_HOLDINGS)
    async def read_ledger_holdings(self, request: ReadLedgerHoldingsRequest) -> LedgerHoldings:
        """What the ledger holds for a workspace (its `holdings` query); nothing when the ledger
        does not run (never started, or closed with its cluster)."""
        handle = self._client.get_workflow_handle(request.ledger_workflow_id)
        try:
            described = await handle.describe()
            if described.status != WorkflowExecutionStatus.RUNNING:
                return LedgerHoldings()
            held: LedgerHoldings = await handle.query(
                request.query_name, request.query, result_type=LedgerHoldings
            )
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return LedgerHoldings()
            raise
        except WorkflowQueryFailedError as exc:
            # The ledger cannot answer now (its task failing, a worker without the query yet):
            # retried, as any temporary failure.
            raise ApplicationError(
                f"ledger {request.ledger_workflow_id} did not answer: {exc}", type=UNAVAILABLE
            ) from exc
        return held

    @implements(workspace_calls.AWAIT_CLUSTER_CREATED)
    async def await_cluster_created(
        self, request: AwaitClusterCreatedRequest
    ) -> AwaitClusterCreatedResult:
        """Wait until the cluster's workflow has finished creating it (`cluster_created_outcome`),
        or the deadline.

        No such workflow is nothing to wait for: the workspace's ClusterDeployment check, which
        follows, is what says whether the cluster is there and the organization's.
        """
        handle = self._client.get_workflow_handle(request.workflow_id)
        progress = previous_details(ClusterCreateWait) or ClusterCreateWait()
        while True:
            try:
                status = await handle.query(request.status_query, result_type=ClusterStatus)
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND:
                    return AwaitClusterCreatedResult(outcome=ClusterCreatedOutcome.CREATED)
                raise
            found = cluster_created_outcome(
                request.cluster, status, saw_creating=progress.saw_creating
            )
            if found is not None:
                return found
            progress = ClusterCreateWait(saw_creating=True)
            report(progress)
            described = await handle.describe()
            if described.status != WorkflowExecutionStatus.RUNNING:
                # Ended mid-create (terminated): nothing will finish the creation.
                return AwaitClusterCreatedResult(
                    outcome=ClusterCreatedOutcome.FAILED,
                    message=f"cluster '{request.cluster}' is no longer being created: its "
                    f"workflow ended ({described.status.name.lower() if described.status else 'closed'})",
                )
            left = (request.deadline - datetime.now(UTC)).total_seconds()
            if left <= 0:
                return AwaitClusterCreatedResult(outcome=ClusterCreatedOutcome.DEADLINE)
            await asyncio.sleep(min(CLUSTER_POLL, left))
