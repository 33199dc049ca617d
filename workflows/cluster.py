"""`ClusterWorkflow`: one durable workflow per cluster, id `cluster/<name>`, from create to delete.

It owns the cluster's state. Users change the cluster through updates (`add_node_pool`,
`scale_node_pool`, `delete_node_pool`, `delete_node`, `delete_cluster`, `cancel_operation`); each
is checked at once by its validator against the state the queue will produce (`models.rules`), then
queued with its update id (a retried update returns the operation it queued). The entity engine
(`workflows.engine`) runs the queue one operation at a time and carries the state across
continue-as-new; the `status` query shows the running operation, the queue and recent results.

Plans, by concern: create and delete are here; growing a pool is `workflows.cluster_scale_up`;
draining and removing nodes is `workflows.cluster_drain`. All IO is in activities
(`workflows.activity_calls`); every wait is a heartbeating activity, so the history grows with what
happens, not with how long anything takes.

Stopping: `delete_cluster` jumps the queue: the queue is cancelled, the running operation is
interrupted and settles (its compensation runs, every activity it started has stopped), then the
delete runs and sweeps by owner whatever landed late. A workflow cancel (Web UI, `temporal workflow
cancel`) interrupts the running operation the same way and drops the queue, but the cluster stays
and can still be managed: only a delete removes it. A delete cannot be cancelled, and a second
delete joins the first.

Signals (`models.signals`): `refresh` looks at the nodes now; `node_event` records a Node's change
reported by a watcher. Both carry a request id; a repeated id is ignored.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow

from workflows.activity_calls import (
    AWAIT_CLUSTER_DEPLOYMENT,
    CHECK_CLUSTER_PREREQUISITES,
    CREATE_CLUSTER_DEPLOYMENT,
    DELETE_CLUSTER_DEPLOYMENT,
    LIST_NODES,
)
from workflows.cluster_context import ClusterContext, human
from workflows.cluster_drain import NodeRemoval
from workflows.cluster_scale_up import ScaleUp
from workflows.engine import (
    EntityEngine,
    Interrupted,
    Interruption,
    error_type_of,
    is_failure,
    reason_of,
    settle,
    upsert_search_attributes,
)
from workflows.search_attributes import (
    COLONY_CLUSTER,
    COLONY_KIND,
    COLONY_NAME,
    COLONY_ORGANIZATION,
    COLONY_PHASE,
)
from workflows.workspace_calls import AWAIT_WORKFLOWS_CLOSED, LIST_WORKFLOWS, SIGNAL_WORKFLOW

with workflow.unsafe.imports_passed_through():
    from models.activity_api import (
        NODE_POOL_LABEL,
        AwaitClusterDeploymentRequest,
        CheckClusterPrerequisitesRequest,
        Condition,
        CreateClusterDeploymentRequest,
        DeleteClusterDeploymentRequest,
        DeploymentOutcome,
        DeploymentWait,
        KubeconfigRef,
        ListNodesRequest,
    )
    from models.capacity import GpuHolder
    from models.cluster import (
        KUBERNETES_VERSION,
        POD_CIDR,
        SERVICE_CIDR,
        ClusterPhase,
        ClusterSpec,
        ClusterState,
        ClusterStatus,
        ClusterWorkflowInput,
        kubeconfig_secret_name,
    )
    from models.colony import ClusterReport, colony_workflow_id
    from models.errors import ErrorType, permanent, rejected
    from models.identity import (
        Entity,
        capacity_workflow_id,
        owner_key,
        parse_entity_workflow_id,
    )
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
    from models.ownership import Owner
    from models.rules import gpu_holders_problem, operation_problem
    from models.signals import NodeEvent, NodeEventType, RefreshRequest, SignalName
    from models.workspace_api import (
        AwaitWorkflowsClosedRequest,
        CapacityMessage,
        CapacityMessageKind,
        DeleteRequested,
        GpuHoldersMessage,
        ListWorkflowsRequest,
        SignalWorkflowRequest,
        WorkspaceSignal,
    )

FALLBACK_REFRESH = timedelta(minutes=10)
"""An idle cluster looks at its nodes this often when nothing told it of a change: the watcher
reports changes within a second; this only bounds how stale status gets without one."""
WORKSPACES_DELETE_DEADLINE = timedelta(minutes=30)
"""How long a cluster's delete waits for its workspaces to be deleted first."""
DELETE_DEADLINE = timedelta(minutes=30)
"""Tearing down a ClusterDeployment (machines reset over SSH) takes minutes, rarely more."""
KIND = "cluster"
"""The `ColonyKind` search attribute of cluster workflows."""
WAITING_PHASE_PATCH = "pool-waiting-phase"
"""`workflow.patched` id of the phase upserts made while a pool waits for hosts."""


def _waiting_on(conditions: list[Condition]) -> str:
    return "; ".join(
        f"{c.type}={c.status}" + (f" ({c.reason}: {c.message})" if c.reason or c.message else "")
        for c in conditions
        if c.status != "True"
    )


@workflow.defn
class ClusterWorkflow:
    """The life of one cluster: create, queued operations, delete."""

    @workflow.init
    def __init__(self, input: ClusterWorkflowInput) -> None:
        self._spec: ClusterSpec = input.spec
        self._continue_as_new_after = input.continue_as_new_after_operations
        self._refresh_requested = False
        self._gpu_holders: list[GpuHolder] = []
        if input.state is not None:
            self._state = input.state
        else:
            # A fresh cluster: its pools are known from the start (so validators see them), and
            # its creation is the first operation, queued before any update can arrive.
            info = workflow.info()
            self._state = ClusterState(
                owner=owner_key(info.workflow_id, info.run_id),
                created_at=workflow.now(),
                node_pools=[
                    NodePoolStatus(
                        name=pool.name,
                        sku=pool.sku,
                        count=pool.count,
                        labels=pool.labels,
                        taints=pool.taints,
                        drain_parallelism=pool.drain_parallelism,
                    )
                    for pool in self._spec.node_pools
                ],
            )
        self._cluster = ClusterContext(self._spec, self._state, shown_changed=self._show_phase)
        self._engine: EntityEngine[Operation] = EntityEngine(
            self._state.book, self._state.queue, self._state.completed, headline=self._headline
        )
        if input.state is None:
            self._engine.enqueue(lambda op_id: Operation(id=op_id, request=CreateClusterRequest()))

    # --- The main loop -------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: ClusterWorkflowInput) -> ClusterStatus:
        """Run queued operations one at a time until the cluster is deleted."""
        self._upsert_search_attributes()
        self._engine.show_details()
        while True:
            await self._engine.run_until(
                lambda: self._state.phase is ClusterPhase.DELETED or self._refresh_requested,
                self._execute,
                continue_as_new=self._continue_as_new,
                on_workflow_cancel=self._on_workflow_cancel,
                continue_as_new_after=self._continue_as_new_after,
                idle=(FALLBACK_REFRESH, self._fallback_refresh),
            )
            if self._state.phase is ClusterPhase.DELETED:
                break
            # Idle, and asked to look at the world: between operations, never during one.
            self._refresh_requested = False
            await self._observe_nodes()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self.status()

    def _fallback_refresh(self) -> None:
        if self._state.phase is ClusterPhase.READY:
            self._refresh_requested = True

    def _continue_as_new(self) -> None:
        workflow.continue_as_new(
            ClusterWorkflowInput(
                spec=self._spec,
                state=self._state,
                continue_as_new_after_operations=self._continue_as_new_after,
            )
        )

    def _on_workflow_cancel(self, running: Operation | None) -> bool:
        """A workflow cancel stops the running operation (not a delete) and drops the queue (but a
        delete); the cluster stays."""
        reason = "cancelled: the workflow was cancelled"
        self._engine.cancel_queue(
            reason, keep=lambda op: isinstance(op.request, DeleteClusterRequest)
        )
        return running is not None and not isinstance(running.request, DeleteClusterRequest)

    async def _execute(self, operation: Operation) -> None:
        """The plan of every kind of operation."""
        request = operation.request
        if isinstance(request, DeleteClusterRequest):
            try:
                await self._delete()
            finally:
                await settle(self._report_to_colony())
            return
        claims = isinstance(
            request, CreateClusterRequest | AddNodePoolRequest | ScaleNodePoolRequest
        )
        try:
            await self._plan(operation)
        except Interrupted as error:
            if claims:
                # Every branch has settled: a claim that landed after an interruption is swept.
                await settle(self._sweep_after(operation, error))
            raise
        finally:
            if self._state.kubeconfig is not None:
                # The cluster's GPUs may have changed: its ledger (if any) reads them again.
                await settle(self._tell_ledger(operation, CapacityMessageKind.CHANGED))
            await settle(self._report_to_colony())

    async def _plan(self, operation: Operation) -> None:
        cluster = self._cluster
        match operation.request:
            case CreateClusterRequest():
                await self._create(operation)
            case AddNodePoolRequest(pool=spec, wait_for_capacity=wait):
                self._state.node_pools.append(
                    NodePoolStatus(
                        name=spec.name,
                        sku=spec.sku,
                        count=spec.count,
                        labels=spec.labels,
                        taints=spec.taints,
                        drain_parallelism=spec.drain_parallelism,
                    )
                )
                try:
                    await ScaleUp(cluster, operation).run(spec.name, wait_for_capacity=wait)
                finally:
                    self._drop_if_empty(spec.name)
            case ScaleNodePoolRequest(
                pool=name, count=count, force=force, drain_parallelism=limit, wait_for_capacity=wait
            ):
                pool = cluster.pool(name)
                pool.count = count
                present = len([n for n in pool.nodes if not n.removed_by])
                if count >= present:
                    await ScaleUp(cluster, operation).run(name, wait_for_capacity=wait)
                else:
                    removal = NodeRemoval(
                        cluster, operation, pool, drain=True, force=force, parallelism=limit
                    )
                    held = {node for holder in self._gpu_holders for node in holder.nodes}
                    await removal.run(await removal.choose(present - count, held=held))
            case DeleteNodePoolRequest(pool=name, force=force, drain_parallelism=limit):
                pool = cluster.pool(name)
                pool.count = 0
                removal = NodeRemoval(
                    cluster, operation, pool, drain=True, force=force, parallelism=limit
                )
                try:
                    await removal.run(list(pool.nodes))
                finally:
                    self._drop_if_empty(name)
            case DeleteNodeOperation(node=node, drain=drain, force=force):
                pool, status = cluster.find_node(node)
                pool.count -= 1
                removal = NodeRemoval(
                    cluster, operation, pool, drain=drain, force=force, parallelism=1
                )
                await removal.run([status])

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

    async def _tell_ledger(self, operation: Operation, kind: CapacityMessageKind) -> None:
        try:
            await SIGNAL_WORKFLOW(
                SignalWorkflowRequest(
                    # Workspaces name their cluster by its ClusterDeployment, and so do ledgers.
                    workflow_id=capacity_workflow_id(self._spec.deployment_name),
                    signal="capacity",
                    payload=CapacityMessage(
                        request_id=f"{workflow.info().workflow_id}/{operation.id}/{kind.value}",
                        kind=kind,
                        reason=f"cluster operation {operation.id} {operation.kind.value}",
                    ).model_dump(mode="json"),
                )
            )
        except Exception as error:
            if not is_failure(error):
                raise
            workflow.logger.warning("the GPU ledger was not told: %s", reason_of(error))

    async def _report_to_colony(self) -> None:
        """Tell the cluster's colony (if any) where the cluster stands, after every operation."""
        if not self._spec.colony:
            return
        pools = self._state.node_pools
        report = ClusterReport(
            # Unique and deterministic: the history length at the moment it is sent.
            request_id=f"{workflow.info().workflow_id}/report/"
            f"{workflow.info().get_current_history_length()}",
            cluster=self._spec.name,
            phase=self._state.phase.value,
            reason=self._state.reason,
            nodes=sum(len(pool.nodes) for pool in pools),
            ready_nodes=sum(pool.ready_count for pool in pools),
        )
        try:
            await SIGNAL_WORKFLOW(
                SignalWorkflowRequest(
                    workflow_id=colony_workflow_id(self._spec.colony, self._spec.organization),
                    signal="cluster_report",
                    payload=report.model_dump(mode="json"),
                )
            )
        except Exception as error:
            if not is_failure(error):
                raise
            workflow.logger.warning("the colony was not told: %s", reason_of(error))

    def _drop_if_empty(self, pool_name: str) -> None:
        """A pool whose nodes are all gone (its add failed, or it was deleted) is not a pool: it is
        removed, so the same request can be sent again and status says what exists."""
        pool = self._state.pool(pool_name)
        if pool is not None and not pool.nodes:
            self._state.node_pools.remove(pool)

    # --- Create --------------------------------------------------------------------------------

    async def _create(self, operation: Operation) -> None:
        """Check the template and credential, create the ClusterDeployment, wait for its control
        plane, then add the pools of the create request in parallel."""
        try:
            await self._check_prerequisites()
            await self._create_deployment()
            await self._wait_control_plane_ready()
        except Interrupted as error:
            if is_failure(error):
                self._set_phase(ClusterPhase.FAILED, reason_of(error))
            else:
                self._set_phase(
                    ClusterPhase.FAILED,
                    "the create was cancelled before the control plane was ready: delete the "
                    "cluster to remove what it created",
                )
            self._state.node_pools = []
            raise
        # By reference only: activities read the Secret; the kubeconfig never enters history.
        self._state.kubeconfig = KubeconfigRef(
            namespace=self._spec.namespace,
            secret_name=kubeconfig_secret_name(self._spec.deployment_name),
        )
        self._set_phase(ClusterPhase.READY)
        pools = [pool.name for pool in self._state.node_pools]
        scale_up = ScaleUp(self._cluster, operation)
        try:
            results = await asyncio.gather(
                *(
                    scale_up.run(pool, wait_for_capacity=self._spec.wait_for_capacity)
                    for pool in pools
                ),
                return_exceptions=True,
            )
        finally:
            for name in pools:
                self._drop_if_empty(name)
        failures = [(name, r) for name, r in zip(pools, results, strict=True) if r is not None]
        for _, result in failures:
            if isinstance(result, BaseException) and not is_failure(result):
                raise result
        if failures:
            # One reason for every failed pool keeps its type (HostsUnavailable stays that).
            types = {error_type_of(r) for _, r in failures if isinstance(r, BaseException)}
            only = next(iter(types)) if len(types) == 1 else None
            known = {str(member) for member in ErrorType}
            raise permanent(
                ErrorType(only) if only in known else ErrorType.NODE_POOLS_FAILED,
                "; ".join(
                    f"node pool '{name}': {reason_of(result)}"
                    for name, result in failures
                    if isinstance(result, BaseException)
                ),
            )

    async def _check_prerequisites(self) -> None:
        spec = self._spec
        found = await CHECK_CLUSTER_PREREQUISITES(
            CheckClusterPrerequisitesRequest(
                namespace=spec.namespace, template=spec.template, credential=spec.credential
            )
        )
        where = f"in namespace '{spec.namespace}'"
        if not found.template_found:
            raise permanent(
                ErrorType.TEMPLATE_NOT_FOUND, f"ClusterTemplate '{spec.template}' not found {where}"
            )
        if not found.template_valid:
            raise permanent(
                ErrorType.TEMPLATE_INVALID,
                f"ClusterTemplate '{spec.template}' {where} is not valid: {found.template_message}",
            )
        if not found.credential_found:
            raise permanent(
                ErrorType.CREDENTIAL_NOT_FOUND, f"Credential '{spec.credential}' not found {where}"
            )
        if not found.credential_ready:
            raise permanent(
                ErrorType.CREDENTIAL_NOT_READY,
                f"Credential '{spec.credential}' {where} is not ready: {found.credential_message}",
            )

    async def _create_deployment(self) -> None:
        spec = self._spec
        await CREATE_CLUSTER_DEPLOYMENT(
            CreateClusterDeploymentRequest(
                namespace=spec.namespace,
                name=spec.deployment_name,
                template=spec.template,
                credential=spec.credential,
                workflow_id=workflow.info().workflow_id,
                organization=spec.organization,
                owner=self._state.owner,
                kubernetes_version=KUBERNETES_VERSION,
                pod_cidr=POD_CIDR,
                service_cidr=SERVICE_CIDR,
                deployment_spec=spec.deployment_spec,
                labels=spec.cluster_labels,
                annotations=spec.cluster_annotations,
                tenant_gateway_domain=spec.tenant_gateway_domain,
            )
        )
        self._state.deployment_created = True

    async def _wait_control_plane_ready(self) -> None:
        """Wait (inside one heartbeating activity per change of conditions) until Ready; a terminal
        failure fails at once with the condition's reason and message."""
        spec = self._spec
        deadline = workflow.now() + spec.ready_deadline
        known: list[Condition] = []
        while True:
            left = max(deadline - workflow.now(), timedelta(seconds=1))
            seen = await AWAIT_CLUSTER_DEPLOYMENT(
                AwaitClusterDeploymentRequest(
                    namespace=spec.namespace,
                    name=spec.deployment_name,
                    want=DeploymentWait.READY,
                    deadline=deadline,
                    owner=self._owner(),
                    known_conditions=known,
                ),
                wait=left,
            )
            known = seen.status.conditions
            self._state.conditions = known
            waiting_on = _waiting_on(known)
            match seen.outcome:
                case DeploymentOutcome.READY:
                    self._state.reason = ""
                    return
                case DeploymentOutcome.FAILED:
                    raise permanent(
                        ErrorType.CLUSTER_DEPLOYMENT_FAILED,
                        f"ClusterDeployment '{spec.deployment_name}' failed: {waiting_on or 'no conditions'}",
                    )
                case DeploymentOutcome.GONE:
                    raise permanent(
                        ErrorType.CLUSTER_DEPLOYMENT_FAILED,
                        f"ClusterDeployment '{spec.deployment_name}' was deleted while the cluster was created",
                    )
                case DeploymentOutcome.DEADLINE:
                    raise permanent(
                        ErrorType.CLUSTER_DEPLOYMENT_FAILED,
                        f"the control plane was not ready within "
                        f"{human(spec.ready_deadline.total_seconds())}: "
                        f"{waiting_on or 'no conditions reported'}",
                    )
                case _:
                    self._state.reason = (
                        f"waiting for the control plane: {waiting_on or 'no conditions yet'}"
                    )
                    self._engine.show_details()

    # --- Delete --------------------------------------------------------------------------------

    async def _delete(self) -> None:
        """Tear down workspaces, delete the ClusterDeployment (if it is this cluster's) and wait
        until it is gone, then release every host: those recorded and any the provider still lists
        for this cluster's owner key."""
        spec, state = self._spec, self._state
        self._set_phase(ClusterPhase.DELETING)
        try:
            await self._tear_down_workspaces()
            deleted = await DELETE_CLUSTER_DEPLOYMENT(
                DeleteClusterDeploymentRequest(
                    namespace=spec.namespace, name=spec.deployment_name, owner=state.owner
                )
            )
            if deleted.existed and not deleted.foreign:
                await self._wait_deployment_gone()
            # The ClusterDeployment is gone, and every node with it: status says so even if
            # releasing the hosts fails below.
            state.node_pools = []
            state.kubeconfig = None
            await self._cluster.release(state.hosts)
            await self._cluster.sweep_unrecorded_hosts()
        except Interrupted as error:
            if not is_failure(error):
                raise
            self._set_phase(
                ClusterPhase.FAILED,
                f"delete did not finish: {reason_of(error)}; repeat the delete to finish it",
            )
            raise
        self._set_phase(ClusterPhase.DELETED)

    async def _wait_deployment_gone(self) -> None:
        spec = self._spec
        deadline = workflow.now() + DELETE_DEADLINE
        known: list[Condition] = []
        while True:
            left = max(deadline - workflow.now(), timedelta(seconds=1))
            seen = await AWAIT_CLUSTER_DEPLOYMENT(
                AwaitClusterDeploymentRequest(
                    namespace=spec.namespace,
                    name=spec.deployment_name,
                    want=DeploymentWait.GONE,
                    deadline=deadline,
                    owner=self._owner(),
                    known_conditions=known,
                ),
                wait=left,
            )
            if seen.outcome is DeploymentOutcome.GONE:
                return
            if seen.outcome is DeploymentOutcome.DEADLINE:
                raise permanent(
                    ErrorType.CLUSTER_DEPLOYMENT_FAILED,
                    f"ClusterDeployment '{spec.deployment_name}' still exists "
                    f"{human(DELETE_DEADLINE.total_seconds())} after its deletion",
                )
            known = seen.status.conditions
            self._state.conditions = known

    async def _tear_down_workspaces(self) -> None:
        """Delete the cluster's workspaces first (each uninstalls its release and frees its GPUs),
        wait until they are gone, then end the cluster's GPU ledger. Workspaces and the ledger name
        the cluster by its ClusterDeployment (`models.identity`: injective across organizations),
        never by its name, which another organization's cluster may share; and only workspaces of
        the cluster's own organization are ever told to go."""
        cluster = self._spec.name
        deployment = self._spec.deployment_name
        listed = await LIST_WORKFLOWS(
            ListWorkflowsRequest(
                query=f"ColonyKind = 'workspace' AND ColonyCluster = '{deployment}'"
            )
        )
        workspaces = [
            workflow_id
            for workflow_id in listed.workflow_ids
            if _workspace_of(workflow_id, self._spec.organization)
        ]
        me = workflow.info().workflow_id
        for workspace_id in workspaces:
            await SIGNAL_WORKFLOW(
                SignalWorkflowRequest(
                    workflow_id=workspace_id,
                    signal=WorkspaceSignal.DELETE_REQUESTED,
                    payload=DeleteRequested(
                        request_id=f"{me}/{self._state.owner}/delete",
                        reason=f"cluster '{cluster}' is being deleted",
                    ).model_dump(mode="json"),
                )
            )
        if workspaces:
            left = await AWAIT_WORKFLOWS_CLOSED(
                AwaitWorkflowsClosedRequest(
                    workflow_ids=workspaces,
                    deadline=workflow.now() + WORKSPACES_DELETE_DEADLINE,
                ),
                wait=WORKSPACES_DELETE_DEADLINE,
            )
            if left.open:
                raise permanent(
                    ErrorType.CLUSTER_DEPLOYMENT_FAILED,
                    f"workspaces of cluster '{cluster}' were not deleted within "
                    f"{human(WORKSPACES_DELETE_DEADLINE.total_seconds())}: {', '.join(left.open)}",
                )
        await SIGNAL_WORKFLOW(
            SignalWorkflowRequest(
                workflow_id=capacity_workflow_id(deployment),
                signal="capacity",
                payload=CapacityMessage(
                    request_id=f"{me}/{self._state.owner}/close", kind=CapacityMessageKind.CLOSE
                ).model_dump(mode="json"),
            )
        )

    # --- Observing the world -------------------------------------------------------------------

    async def _observe_nodes(self) -> None:
        """`refresh`: read every node of the cluster's pools and record whether each is Ready."""
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
        self._engine.show_details()

    # --- Updates -------------------------------------------------------------------------------

    def _accepted(self, operation: Operation) -> OperationAccepted:
        return OperationAccepted(
            operation_id=operation.id,
            kind=operation.kind,
            position=self._engine.position(operation),
        )

    def _validate(self, request: OperationRequest) -> None:
        if self._engine.known_update() is not None:
            return  # a retried update: it was accepted once, it is answered the same way
        problem = operation_problem(
            self._spec.name, self._state, self._engine.running, request
        ) or gpu_holders_problem(self._spec.name, self._state, request, self._gpu_holders)
        if problem:
            raise rejected(problem.message, not_found=problem.not_found, field=problem.field)

    def _submit(self, request: OperationRequest) -> OperationAccepted:
        known = self._engine.known_update()
        if known is not None:
            return self._accepted(known)
        return self._accepted(
            self._engine.enqueue(lambda op_id: Operation(id=op_id, request=request))
        )

    @workflow.update
    async def add_node_pool(self, request: AddNodePoolRequest) -> OperationAccepted:
        """Queue a new node pool."""
        return self._submit(request)

    @add_node_pool.validator
    def _validate_add_node_pool(self, request: AddNodePoolRequest) -> None:
        self._validate(request)

    @workflow.update
    async def scale_node_pool(self, request: ScaleNodePoolRequest) -> OperationAccepted:
        """Queue a change of a pool's count."""
        return self._submit(request)

    @scale_node_pool.validator
    def _validate_scale_node_pool(self, request: ScaleNodePoolRequest) -> None:
        self._validate(request)

    @workflow.update
    async def delete_node_pool(self, request: DeleteNodePoolRequest) -> OperationAccepted:
        """Queue the deletion of a pool and its nodes."""
        return self._submit(request)

    @delete_node_pool.validator
    def _validate_delete_node_pool(self, request: DeleteNodePoolRequest) -> None:
        self._validate(request)

    @workflow.update
    async def delete_node(self, request: DeleteNodeOperation) -> OperationAccepted:
        """Queue the deletion of one node."""
        return self._submit(request)

    @delete_node.validator
    def _validate_delete_node(self, request: DeleteNodeOperation) -> None:
        self._validate(request)

    @workflow.update
    async def delete_cluster(self, request: DeleteClusterRequest) -> OperationAccepted:
        """Delete the cluster now: cancel the queue, interrupt the running operation, then remove
        everything. While a delete is queued or runs, asking again returns that delete."""
        engine = self._engine
        known = engine.known_update()
        if known is not None:
            return self._accepted(known)
        pending = [
            op
            for op in [engine.running, *engine.queue]
            if op is not None and isinstance(op.request, DeleteClusterRequest)
        ]
        if pending:
            return self._accepted(pending[0])
        reason = f"cancelled: cluster '{self._spec.name}' is being deleted"
        engine.cancel_queue(reason)
        engine.interrupt(Interruption(f"interrupted: cluster '{self._spec.name}' is being deleted"))
        self._set_phase(ClusterPhase.DELETING)
        operation = engine.enqueue(lambda op_id: Operation(id=op_id, request=request), front=True)
        return self._accepted(operation)

    @delete_cluster.validator
    def _validate_delete_cluster(self, request: DeleteClusterRequest) -> None:
        self._validate(request)

    @workflow.update
    async def cancel_operation(self, request: CancelOperationRequest) -> Operation:
        """Cancel a queued operation (dropped) or the running one (interrupted, its compensation
        runs); answers once it has settled."""
        operation = self._engine.find(request.operation_id)
        if operation is None:
            raise rejected(
                f"operation '{request.operation_id}' not found", not_found=True, field="operation"
            )
        if not operation.state.finished:
            reason = f"cancelled: {request.reason}" if request.reason else "cancelled on request"
            self._engine.cancel(operation, reason)
            await workflow.wait_condition(lambda: operation.state.finished)
        return operation

    @cancel_operation.validator
    def _validate_cancel_operation(self, request: CancelOperationRequest) -> None:
        operation = self._engine.find(request.operation_id)
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

    @workflow.signal(name=SignalName.REFRESH)
    def refresh(self, request: RefreshRequest) -> None:
        """Look at the nodes now (between operations), instead of at the next operation."""
        if self._engine.request_ids.first_time(request.request_id):
            self._refresh_requested = True

    @workflow.signal(name=SignalName.NODE_EVENT)
    def node_event(self, event: NodeEvent) -> None:
        """Record a Node's change (Ready, NotReady, gone) reported by a watcher."""
        if not self._engine.request_ids.first_time(event.request_id):
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
                self._engine.show_details()
                return

    @workflow.signal(name="delete_requested")
    def delete_requested(self, request: DeleteRequested) -> None:
        """Delete the cluster (its colony is deleted, or it left the colony's manifest): the same
        as the `delete_cluster` update, for senders that cannot send updates (workflows)."""
        if not self._engine.request_ids.first_time(request.request_id):
            return
        if self._state.phase is ClusterPhase.DELETED:
            return
        engine = self._engine
        pending = [
            op
            for op in [engine.running, *engine.queue]
            if op is not None and isinstance(op.request, DeleteClusterRequest)
        ]
        if pending:
            return
        engine.cancel_queue(f"cancelled: cluster '{self._spec.name}' is being deleted")
        engine.interrupt(
            Interruption(
                f"interrupted: cluster '{self._spec.name}' is being deleted ({request.reason})"
            )
        )
        self._set_phase(ClusterPhase.DELETING)
        engine.enqueue(
            lambda op_id: Operation(id=op_id, request=DeleteClusterRequest()), front=True
        )

    @workflow.signal(name="gpu_holders")
    def gpu_holders(self, message: GpuHoldersMessage) -> None:
        """The cluster's GPU ledger reports which workspaces hold GPUs on which nodes (for the
        validators: a scale-down that would take them is refused unless forced)."""
        if self._engine.request_ids.first_time(message.request_id):
            self._gpu_holders = message.holders

    # --- Queries -------------------------------------------------------------------------------

    @workflow.query
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
            conditions=state.conditions,
            node_pools=state.node_pools,
            current_operation=self._engine.running,
            queued_operations=state.queue,
            completed_operations=state.completed,
            kubeconfig=state.kubeconfig,
            held_hosts=sorted(state.hosts),
            created_at=state.created_at,
            updated_at=workflow.now(),
        )

    # --- Small helpers -------------------------------------------------------------------------

    def _headline(self) -> list[str]:
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

    def _owner(self) -> Owner:
        """The marks the cluster's ClusterDeployment carries: this workflow, its organization."""
        return Owner(workflow_id=workflow.info().workflow_id, organization=self._spec.organization)

    def _set_phase(self, phase: ClusterPhase, reason: str = "") -> None:
        self._state.phase = phase
        self._state.reason = reason
        self._upsert_search_attributes()
        self._engine.show_details()

    def _show_phase(self) -> None:
        # Histories recorded before pools could be seen waiting have no upsert here.
        if workflow.patched(WAITING_PHASE_PATCH):
            self._upsert_search_attributes()
        self._engine.show_details()

    def _upsert_search_attributes(self) -> None:
        upsert_search_attributes(
            COLONY_KIND.value_set(KIND),
            COLONY_CLUSTER.value_set(self._spec.name),
            COLONY_ORGANIZATION.value_set(self._spec.organization),
            COLONY_NAME.value_set(self._spec.colony),
            COLONY_PHASE.value_set(self._state.shown()[0].value),
        )


def _workspace_of(workflow_id: str, organization: str) -> bool:
    """True for the workflow id of a workspace of `organization`."""
    found = parse_entity_workflow_id(workflow_id)
    return found is not None and found[:2] == (Entity.WORKSPACE, organization)


def _older(version: str, than: str) -> bool:
    """resourceVersions are opaque, but Kubernetes' are integers: compare them when they are."""
    if version.isdigit() and than.isdigit():
        return int(version) < int(than)
    return False
