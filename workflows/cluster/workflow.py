"""`ClusterWorkflow`: one durable workflow per cluster, id `cluster/[<organization>/]<name>`, from
create to delete (its contract: `workflows/cluster/__init__.py`).

It owns the cluster's state. Users change the cluster through updates (`add_node_pool`,
`scale_node_pool`, `delete_node_pool`, `delete_node`, `delete_cluster`, `cancel_operation`); each
is checked at once by its validator against the state the queue will produce (`models.rules`), then
queued with its update id (a retried update returns the operation it queued). The entity kit
(`workflows/kit/`) runs the queue one operation at a time and carries the whole state across
continue-as-new; the `status` query shows the running operation, the queue and recent results.

Plans, by concern: creating is `create.py`, deleting `delete.py`, growing a pool `scale_up.py`,
draining and removing nodes `drain.py`; this module says which plan each operation runs and what
follows every operation (the GPU ledger reads the cluster's GPUs again, the colony hears where the
cluster stands). All IO is in activities (`workflows.cluster_calls`); every wait is a heartbeating
activity, so the history grows with what happens, not with how long anything takes.

Stopping: `delete_cluster` jumps the queue: the queue is cancelled, the running operation is
interrupted and settles (its compensation runs, every activity it started has stopped), then the
delete runs and sweeps by owner whatever landed late. A workflow cancel (Web UI, `temporal workflow
cancel`) interrupts the running operation the same way and drops the queue, but the cluster stays
and can still be managed: only a delete removes it. A delete cannot be cancelled, and a second
delete joins the first.

Quotas (its organization's, `models.quota`): the client admitted the cluster's create; a pool's
add or scale-up is admitted here, in its update's handler, before the operation is queued
(`admitted_update`, the `admit_quota` activity), with the need worked out from the state and the
queue as they are then; refused, nothing is queued and the caller reads the ledger's words. After
every operation the cluster tells its ledger what it holds if that went down (a failed create's
hosts, a scale-down), and once deleted that it is gone.

Signals: `refresh` looks at the nodes now (between operations; an idle ready cluster also looks
every `FALLBACK_REFRESH` by itself); `node_event` records a Node's change reported by a watcher;
`delete_requested` is its colony's delete; `gpu_holders` is its ledger's report of which
workspaces hold GPUs where (carried: the ledger reports changes only). Each carries a request id;
a repeated id is ignored.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from workflows.cluster.context import ClusterContext
from workflows.cluster.create import create
from workflows.cluster.delete import delete
from workflows.cluster.drain import NodeRemoval
from workflows.cluster.scale_up import ScaleUp
from workflows.cluster_calls import ADMIT_QUOTA, LIST_NODES
from workflows.kit.engine import (
    Chore,
    Interrupted,
    Refresh,
    error_type_of,
    is_failure,
    reason_of,
    settle,
)
from workflows.kit.entity import EntityWorkflow, admitted_update, final, queued_update
from workflows.kit.service import tell
from workflows.search_attributes import (
    COLONY_CLUSTER,
    COLONY_KIND,
    COLONY_NAME,
    COLONY_ORGANIZATION,
    COLONY_PHASE,
)

with workflow.unsafe.imports_passed_through():
    from models.activity_api import NODE_POOL_LABEL, ListNodesRequest
    from models.cluster import (
        ClusterPhase,
        ClusterSpec,
        ClusterState,
        ClusterStatus,
        ClusterWorkflowInput,
    )
    from models.colony import ClusterReport
    from models.errors import REJECTED_FIELD, ErrorType, over_quota, rejected
    from models.identity import owner_key
    from models.node_pool import NodePoolStatus, NodeState
    from models.operations import (
        AddNodePoolRequest,
        CancelOperationRequest,
        CreateClusterRequest,
        DeleteClusterRequest,
        DeleteNodePoolRequest,
        Operation,
        OperationAccepted,
        OperationRequest,
        OperationState,
        ScaleNodePoolRequest,
    )
    from models.operations import DeleteNodeRequest as DeleteNodeOperation
    from models.quota import HoldingReport, QuotaClaim, QuotaHolding, cluster_need
    from models.rules import gpu_holders_problem, operation_problem
    from models.signals import NodeEvent, NodeEventType, RefreshRequest, ScaleRequested
    from models.workspace_api import (
        CapacityMessage,
        CapacityMessageKind,
        DeleteRequested,
        GpuHoldersMessage,
    )
    from workflows.capacity import CAPACITY
    from workflows.cluster import CLUSTER
    from workflows.colony import COLONY
    from workflows.quota import QUOTA

FALLBACK_REFRESH = timedelta(minutes=10)
"""An idle cluster looks at its nodes this often when nothing told it of a change: the watcher
reports changes within a second; this only bounds how stale status gets without one."""
KIND = "cluster"
"""The `ColonyKind` search attribute of cluster workflows."""
QUOTA_PATCH = "quota-ledger"
"""`workflow.patched` id of the quota reports and admissions: clusters that ran before them
replay without them."""


@workflow.defn(name=CLUSTER.workflow_type)
class ClusterWorkflow(EntityWorkflow[Operation, OperationRequest, OperationAccepted]):
    """The life of one cluster: create, queued operations, delete."""

    @workflow.init
    def __init__(self, input: ClusterWorkflowInput) -> None:
        self._spec: ClusterSpec = input.spec
        self._state = input.state or self._fresh_state()
        self._cluster = ClusterContext(self._spec, self._state, shown_changed=self.show_phase)
        self._quotas = self._state.quota is not None and workflow.patched(QUOTA_PATCH)
        """Its organization's quotas are kept (`_admit_growth`, `_report_quota`)."""
        self._admitting_need: QuotaHolding | None = None
        """What an admission on its way asks for (a report meanwhile reports no less)."""
        super().__init__(
            input, self._state, Operation, CLUSTER.delete_cluster, CreateClusterRequest()
        )
        self._node_look = Refresh(
            self._state,
            self.engine.request_ids,
            self._observe_nodes,
            every=lambda: FALLBACK_REFRESH if self._state.phase is ClusterPhase.READY else None,
        )
        """A look at the nodes, when a signal asks, and every `FALLBACK_REFRESH` while ready."""

    def _fresh_state(self) -> ClusterState:
        """A new cluster: its pools are known from the start (so validators see them), and so is
        what its create was admitted with (an organization's)."""
        info = workflow.info()
        return ClusterState(
            owner=owner_key(info.workflow_id, info.run_id),
            created_at=workflow.now(),
            node_pools=[NodePoolStatus.of(pool) for pool in self._spec.node_pools],
            quota=self._spec.quota_need() if self._spec.organization else None,
        )

    # --- The main loop -------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: ClusterWorkflowInput) -> ClusterStatus:
        """Run queued operations one at a time until the cluster is deleted."""
        if self._quotas and input.state is None:
            # The ledger hears from the cluster itself: its holder is confirmed (never dropped
            # as a create that did not start).
            await self._report_quota(force=True)
        await self.live()
        return self.status()

    def chore(self) -> Chore:
        return self._node_look.chore()

    async def execute(self, operation: Operation) -> None:
        """The plan of every kind of operation."""
        if isinstance(operation.request, DeleteClusterRequest):
            try:
                await final(
                    delete(self._cluster),
                    failed=lambda reason: self._cluster.set_phase(ClusterPhase.FAILED, reason),
                )
            finally:
                await settle(self._report_to_colony())
                await settle(self._report_quota(closed=self._state.phase is ClusterPhase.DELETED))
            return
        try:
            await self._plan(operation)
        except Interrupted as error:
            if isinstance(
                operation.request, CreateClusterRequest | AddNodePoolRequest | ScaleNodePoolRequest
            ):
                # Every branch has settled: a claim that landed after an interruption is swept.
                await settle(self._sweep_after(operation, error))
            raise
        finally:
            if self._state.kubeconfig is not None:
                # The cluster's GPUs may have changed: its ledger (if any) reads them again.
                await settle(self._tell_ledger(operation))
            await settle(self._report_to_colony())
            await settle(self._report_quota())

    async def _plan(self, operation: Operation) -> None:
        cluster = self._cluster
        match operation.request:
            case CreateClusterRequest():
                await create(cluster, operation)
            case AddNodePoolRequest(pool=spec, wait_for_capacity=wait):
                self._state.node_pools.append(NodePoolStatus.of(spec))
                try:
                    await ScaleUp(cluster, operation).run(spec.name, wait_for_capacity=wait)
                finally:
                    cluster.drop_if_empty(spec.name)
                self._state.settle_shortfall(spec.name)
            case ScaleNodePoolRequest() as request:
                await self._scale(operation, request)
                self._state.settle_shortfall(request.pool)
            case DeleteNodePoolRequest(pool=name, force=force, drain_parallelism=limit):
                pool = cluster.pool(name)
                pool.count = 0
                removal = NodeRemoval(
                    cluster, operation, pool, drain=True, force=force, parallelism=limit
                )
                try:
                    await removal.run(list(pool.nodes))
                finally:
                    cluster.drop_if_empty(name)
                self._state.settle_shortfall(name)
            case DeleteNodeOperation(node=node, drain=drain, force=force):
                pool, status = cluster.find_node(node)
                pool.count -= 1
                removal = NodeRemoval(
                    cluster, operation, pool, drain=drain, force=force, parallelism=1
                )
                await removal.run([status])

    async def _scale(self, operation: Operation, request: ScaleNodePoolRequest) -> None:
        """Up through `ScaleUp`; down through `NodeRemoval`, nodes without GPU holders first."""
        cluster = self._cluster
        pool = cluster.pool(request.pool)
        pool.count = request.count
        present = len([n for n in pool.nodes if not n.removed_by])
        if request.count >= present:
            await ScaleUp(cluster, operation).run(
                request.pool, wait_for_capacity=request.wait_for_capacity
            )
            return
        removal = NodeRemoval(
            cluster,
            operation,
            pool,
            drain=True,
            force=request.force,
            parallelism=request.drain_parallelism,
        )
        held = {node for holder in self._state.gpu_holders for node in holder.nodes}
        await removal.run(await removal.choose(present - request.count, held=held))

    async def _sweep_after(self, operation: Operation, error: BaseException) -> None:
        try:
            strays = await self._cluster.sweep_unrecorded_hosts()
        except Interrupted as sweep_error:
            if not is_failure(sweep_error):
                raise
            operation.reason = f"could not check for hosts claimed late: {reason_of(sweep_error)}"
            return
        if strays:
            workflow.logger.info("released hosts claimed late: %s", ", ".join(strays))

    async def _tell_ledger(self, operation: Operation) -> None:
        # Workspaces name their cluster by its ClusterDeployment, and so do ledgers.
        kind = CapacityMessageKind.CHANGED
        await tell(
            CAPACITY.capacity,
            CAPACITY.workflow_id(self._spec.deployment_name),
            CapacityMessage(
                request_id=f"{workflow.info().workflow_id}/{operation.id}/{kind.value}",
                kind=kind,
                reason=f"cluster operation {operation.id} {operation.kind.value}",
            ),
        )

    async def _report_to_colony(self) -> None:
        """Tell the cluster's colony (if any) where the cluster stands, after every operation."""
        if not self._spec.colony:
            return
        pools = self._state.node_pools
        info = workflow.info()
        await tell(
            COLONY.cluster_report,
            COLONY.workflow_id(self._spec.colony, self._spec.organization),
            ClusterReport(
                # Unique and deterministic: the history length at the moment it is sent.
                request_id=f"{info.workflow_id}/report/{info.get_current_history_length()}",
                cluster=self._spec.name,
                phase=self._state.phase.value,
                reason=self._state.reason,
                nodes=sum(len(pool.nodes) for pool in pools),
                ready_nodes=sum(pool.ready_count for pool in pools),
            ),
        )

    # --- Quotas --------------------------------------------------------------------------------

    def _quota_need(self, *more: OperationRequest) -> QuotaHolding:
        """What the cluster holds, or will once the running and queued operations (and `more`)
        have run (`models.quota.cluster_need`)."""
        running = [self.engine.running.request] if self.engine.running else []
        queued = [*running, *(op.request for op in self._state.queue), *more]
        return cluster_need(self._spec.location_id, self._state.node_pools, queued)

    async def _admit_growth(self, request: OperationRequest) -> None:
        """Before a pool's add or scale is queued: the ledger admits what the cluster would then
        hold, unless it holds that much already; refused, the caller reads the ledger's words."""
        known = self._state.quota
        if not self._quotas or known is None:
            return
        need = self._quota_need(request)
        if need.within(known):
            return
        info = workflow.current_update_info()
        self._admitting_need = need
        try:
            await ADMIT_QUOTA(
                QuotaClaim(
                    organization=self._spec.organization,
                    holder=workflow.info().workflow_id,
                    request_id=info.id if info else f"{self._state.owner}/growth",
                    need=need,
                )
            )
        except Exception as error:
            if not is_failure(error):
                raise
            raise _passed_on(error) from error
        finally:
            self._admitting_need = None
        # A report sent meanwhile counted this need too (`_report_quota`): merge into the latest.
        self._state.quota = (self._state.quota or known).merged(need)
        try:
            self._check(request)  # the state may have moved while the ledger answered
        except Exception:
            await self._report_quota()
            raise

    async def _report_quota(self, *, closed: bool = False, force: bool = False) -> None:
        """Tell the ledger what the cluster holds, when that went down (or `force`), or that it
        is gone (`closed`, once no admission is on its way: it would come after)."""
        known = self._state.quota
        if not self._quotas or known is None:
            return
        if closed:
            await workflow.wait_condition(lambda: not self.admitting.locked())
            holding = QuotaHolding()
        else:
            holding = self._quota_need()
            if self._admitting_need is not None:
                holding = holding.merged(self._admitting_need)
            if holding == known and not force:
                return
        self._state.quota_reports += 1
        self._state.quota = holding
        await tell(
            QUOTA.holding,
            QUOTA.workflow_id(self._spec.organization),
            HoldingReport(
                request_id=f"{self._state.owner}/quota/{self._state.quota_reports}",
                holder=workflow.info().workflow_id,
                holding=holding,
                closed=closed,
            ),
        )

    # --- Observing the world -------------------------------------------------------------------

    async def _observe_nodes(self) -> None:
        """The look: read every node of the cluster's pools and record whether each is Ready."""
        if self._state.kubeconfig is None or self._state.phase is not ClusterPhase.READY:
            return
        try:
            listed = await LIST_NODES(
                ListNodesRequest(kubeconfig=self._state.kubeconfig, label_selector=NODE_POOL_LABEL)
            )
        except Interrupted as error:
            if not is_failure(error):
                raise
            workflow.logger.warning("refresh failed: %s", reason_of(error))
            return
        found = {node.name: node for node in listed.nodes}
        for pool in self._state.node_pools:
            for node in pool.nodes:
                if node.state is NodeState.REGISTERED:
                    continue
                info = found.get(node.name)
                # The same words a watcher's `node_event` uses for the Ready condition.
                node.kubernetes_status = (
                    "NotFound"
                    if info is None
                    else {"True": "Ready", "False": "NotReady"}.get(info.ready_status, "Unknown")
                )
            self._cluster.count_ready(pool)

    # --- Updates -------------------------------------------------------------------------------

    def _check(self, request: OperationRequest) -> None:
        problem = operation_problem(
            self._spec.name, self._state, self.engine.running, request
        ) or gpu_holders_problem(self._spec.name, self._state, request, self._state.gpu_holders)
        if problem:
            raise rejected(problem.message, not_found=problem.not_found, field=problem.field)

    add_node_pool = admitted_update(CLUSTER.add_node_pool, _check, _admit_growth)
    """Queue a new node pool, once the organization's quotas admit its hosts."""
    scale_node_pool = admitted_update(CLUSTER.scale_node_pool, _check, _admit_growth)
    """Queue a change of a pool's count, once the organization's quotas admit a scale-up."""
    delete_node_pool = queued_update(CLUSTER.delete_node_pool, _check)
    """Queue the deletion of a pool and its nodes."""
    delete_node = queued_update(CLUSTER.delete_node, _check)
    """Queue the deletion of one node."""

    @workflow.update(name=CLUSTER.delete_cluster.name)
    async def delete_cluster(self, request: DeleteClusterRequest) -> OperationAccepted:
        """Delete the cluster now: cancel the queue, interrupt the running operation, then remove
        everything. While a delete is queued or runs, asking again returns that delete."""
        return self.accepted(self.engine.known_update() or self._delete_first(request))

    @delete_cluster.validator
    def _validate_delete_cluster(self, request: DeleteClusterRequest) -> None:
        self.validate(lambda: self._check(request))

    def _delete_first(self, request: DeleteClusterRequest, why: str = "") -> Operation:
        operation = self.delete_first(request, why=why)
        self._cluster.set_phase(ClusterPhase.DELETING)
        return operation

    @workflow.update(name=CLUSTER.cancel_operation.name)
    async def cancel_operation(self, request: CancelOperationRequest) -> Operation:
        """Cancel a queued operation (dropped) or the running one (interrupted, its compensation
        runs); answers once it has settled."""
        operation = self.engine.find(request.operation_id)
        if operation is None:
            raise rejected(
                f"operation '{request.operation_id}' not found", not_found=True, field="operation"
            )
        if not operation.state.finished:
            reason = f"cancelled: {request.reason}" if request.reason else "cancelled on request"
            self.engine.cancel(operation, reason)
            await workflow.wait_condition(lambda: operation.state.finished)
        return operation

    @cancel_operation.validator
    def _validate_cancel_operation(self, request: CancelOperationRequest) -> None:
        operation = self.engine.find(request.operation_id)
        if operation is None:
            raise rejected(
                f"operation '{request.operation_id}' does not exist in cluster '{self._spec.name}'",
                not_found=True,
                field="operation",
            )
        if isinstance(operation.request, DeleteClusterRequest) and not operation.state.finished:
            raise rejected(
                f"operation '{operation.id}' deletes cluster '{self._spec.name}' and cannot be "
                "cancelled: a delete is final (repeat it to finish one that failed)",
                field="operation",
            )
        if operation.state.finished and operation.state is not OperationState.CANCELLED:
            raise rejected(
                f"operation '{operation.id}' has already {operation.state.value}",
                field="operation",
            )

    # --- Signals -------------------------------------------------------------------------------

    @workflow.signal(name=CLUSTER.refresh.name)
    def refresh(self, request: RefreshRequest) -> None:
        """Look at the nodes now (between operations), instead of at the next operation."""
        self._node_look.ask(request.request_id)

    @workflow.signal(name=CLUSTER.node_event.name)
    def node_event(self, event: NodeEvent) -> None:
        """Record a Node's change (Ready, NotReady, gone) reported by a watcher."""
        if not self.engine.request_ids.first_time(event.request_id):
            return
        last = self._state.node_versions.get(event.node, "")
        if event.resource_version and last and _older(event.resource_version, last):
            return  # an older event arriving late never overwrites a newer one
        for pool in self._state.node_pools:
            for node in pool.nodes:
                if (
                    event.node not in (node.name, node.host_id)
                    or node.state is NodeState.REGISTERED
                ):
                    continue
                if event.resource_version:
                    self._state.node_versions[event.node] = event.resource_version
                if event.type is NodeEventType.DELETED:
                    node.kubernetes_status = "NotFound"
                else:
                    node.kubernetes_status = {"True": "Ready", "False": "NotReady"}.get(
                        event.ready_status, "Unknown"
                    )
                self._cluster.count_ready(pool)
                self.engine.show_details()
                return

    @workflow.signal(name=CLUSTER.delete_requested.name)
    def delete_requested(self, request: DeleteRequested) -> None:
        """Delete the cluster (its colony is deleted, or it left the colony's manifest): the same
        as the `delete_cluster` update, for senders that cannot send updates (workflows)."""
        if not self.engine.request_ids.first_time(request.request_id):
            return
        if self._state.phase is not ClusterPhase.DELETED:
            self._delete_first(DeleteClusterRequest(), why=request.reason)

    @workflow.signal(name=CLUSTER.scale_requested.name)
    def scale_requested(self, request: ScaleRequested) -> None:
        """Queue a pool's scale, checked by the rules `scale_node_pool` is (its colony re-applied
        a template entry with another `workersNumber`); refused, it is logged and dropped."""
        if not self.engine.request_ids.first_time(request.request_id):
            return
        pool = self._state.pool(request.pool)
        if pool is not None and pool.count == request.count:
            return  # nothing to change
        problem = None if 1 <= request.count <= 100 else "a node pool's count must be from 1 to 100"
        scale = ScaleNodePoolRequest(pool=request.pool, count=max(min(request.count, 100), 1))
        found = operation_problem(self._spec.name, self._state, self.engine.running, scale)
        problem = problem or (found.message if found else None)
        if problem is not None:
            workflow.logger.warning("scale of %s refused: %s", request.pool, problem)
            return
        self.engine.enqueue(lambda op_id: self._operation(id=op_id, request=scale))

    @workflow.signal(name=CLUSTER.gpu_holders.name)
    def gpu_holders(self, message: GpuHoldersMessage) -> None:
        """The cluster's GPU ledger reports which workspaces hold GPUs on which nodes (for the
        validators: a scale-down that would take them is refused unless forced)."""
        if self.engine.request_ids.first_time(message.request_id):
            self._state.gpu_holders = message.holders

    # --- Queries -------------------------------------------------------------------------------

    @workflow.query(name=CLUSTER.status.name)
    def status(self) -> ClusterStatus:
        """The cluster as it is: phase, pools and nodes, running and queued operations, results."""
        state = self._state
        phase, reason = state.shown()
        return ClusterStatus(
            name=self._spec.name,
            location_id=self._spec.location_id,
            organization=self._spec.organization,
            phase=phase,
            reason=reason,
            conditions=state.conditions_shown(),
            node_pools=state.node_pools,
            current_operation=self.engine.running,
            queued_operations=state.queue,
            completed_operations=state.completed,
            kubeconfig=state.kubeconfig,
            held_hosts=sorted(state.hosts),
            created_at=state.created_at,
            updated_at=workflow.now(),
        )

    # --- Small helpers -------------------------------------------------------------------------

    def headline(self) -> list[str]:
        phase, reason = self._state.shown()
        lines = [f"**{self._spec.name}** in `{self._spec.location_id}`: {phase.value}"]
        pools = ", ".join(
            f"{pool.name} {pool.ready_count}/{pool.count}" for pool in self._state.node_pools
        )
        if pools:
            lines.append(f"pools (ready/count): {pools}")
        if reason:
            lines.append(reason)
        return lines

    def subject(self) -> str:
        return f"cluster '{self._spec.name}'"

    def show_phase(self) -> None:
        """What users see changed (`ClusterState.shown`: `waiting` while a pool waits for hosts)."""
        self.show(
            [
                (COLONY_KIND, KIND),
                (COLONY_CLUSTER, self._spec.name),
                (COLONY_ORGANIZATION, self._spec.organization),
                (COLONY_NAME, self._spec.colony),
                (COLONY_PHASE, self._state.shown()[0].value),
            ]
        )


def _passed_on(error: BaseException) -> Exception:
    """The admission's failure as the update's: the ledger's refusal in its own words (and field),
    anything else as why it could not be asked."""
    cause = error.cause if isinstance(error, ActivityError) else None
    if error_type_of(error) == ErrorType.QUOTA_EXCEEDED and isinstance(cause, ApplicationError):
        first = cause.details[0] if cause.details else {}
        field = first.get(REJECTED_FIELD, "") if isinstance(first, dict) else ""
        return over_quota(cause.message, str(field))
    return rejected(f"the organization's quotas could not be asked: {reason_of(error)}")


def _older(version: str, than: str) -> bool:
    """resourceVersions are opaque, but Kubernetes' are integers: compare them when they are."""
    if version.isdigit() and than.isdigit():
        return int(version) < int(than)
    return False
