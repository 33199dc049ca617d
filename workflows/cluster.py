"""`ClusterWorkflow`: one durable workflow per cluster, id `cluster/<name>`, from create to delete.

It owns the cluster's state. Users change the cluster through updates (`add_node_pool`,
`scale_node_pool`, `delete_node_pool`, `delete_node`, `delete_cluster`); each is checked at once by
its validator against the state the queue will produce (`models.rules`), then queued. The main loop
runs the queue one operation at a time, in arrival order, and the `status` query shows the running
operation, the queue and the last results. `delete_cluster` jumps the queue: it cancels what is
queued, interrupts what runs (a create included) and removes everything.

All IO happens in activities, called by name (`models.activity_api`); waiting is done with workflow
timers between short polling activities, so progress shows in `status` while it happens.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel

    from models.activity_api import (
        HOST_ID_LABEL,
        NODE_POOL_LABEL,
        SKU_LABEL,
        ActivityName,
        AddClusterMachinesRequest,
        CheckClusterPrerequisitesRequest,
        CheckClusterPrerequisitesResult,
        ClaimHostsRequest,
        ClaimHostsResult,
        ClusterMachinesResult,
        CordonNodeRequest,
        CordonNodeResult,
        CreateClusterDeploymentRequest,
        CreateClusterDeploymentResult,
        DeleteClusterDeploymentRequest,
        DeleteClusterDeploymentResult,
        DeleteNodeRequest,
        DeleteNodeResult,
        DeletePodRequest,
        DeletePodResult,
        EvictionOutcome,
        EvictPodRequest,
        EvictPodResult,
        GetClusterDeploymentStatusRequest,
        GetClusterDeploymentStatusResult,
        KubeconfigRef,
        LabelNodeRequest,
        LabelNodeResult,
        ListClaimedHostsRequest,
        ListClaimedHostsResult,
        ListNodesRequest,
        ListNodesResult,
        ListPodsOnNodeRequest,
        ListPodsOnNodeResult,
        NodeInfo,
        NodeTaint,
        PodInfo,
        ReleaseHostsRequest,
        ReleaseHostsResult,
        RemoveClusterMachinesRequest,
        UncordonNodeRequest,
        UncordonNodeResult,
    )
    from models.cluster import (
        COMPLETED_OPERATIONS_KEPT,
        KUBERNETES_VERSION,
        POD_CIDR,
        SERVICE_CIDR,
        ClaimedHost,
        ClusterPhase,
        ClusterSpec,
        ClusterState,
        ClusterStatus,
        ClusterWorkflowInput,
        kubeconfig_secret_name,
    )
    from models.drain import choose_nodes_to_remove, pods_to_evict
    from models.errors import NON_RETRYABLE, ErrorType, permanent, rejected
    from models.node_pool import NodePoolStatus, NodeState, NodeStatus
    from models.operations import (
        AddNodePoolRequest,
        CreateClusterRequest,
        DeleteClusterRequest,
        DeleteNodePoolRequest,
        NodeProgress,
        Operation,
        OperationAccepted,
        OperationRequest,
        OperationState,
        ScaleNodePoolRequest,
    )
    from models.operations import DeleteNodeRequest as DeleteNodeOperation
    from models.rules import operation_problem
    from workflows.search_attributes import COLONY_CLUSTER, COLONY_PHASE

ResultT = TypeVar("ResultT", bound=BaseModel)

FIRST_POLL = timedelta(seconds=1)
"""Every wait starts by looking again after a second (a small cluster answers in seconds) and
backs off to its own cap (`_Poll`), so a thirty-minute wait costs tens of polls, not hundreds."""
CONTROL_PLANE_POLL = timedelta(seconds=10)
"""Cap between looks at the ClusterDeployment; a control plane takes minutes."""
JOIN_POLL = timedelta(seconds=5)
"""Cap between looks for new nodes, so readyCount rises visibly as they join."""
EVICTION_RETRY = timedelta(seconds=5)
"""Evictions refused by a budget are retried, not failed: the budget may relax."""
NODE_GONE_POLL = timedelta(seconds=5)
NODE_GONE_DEADLINE = timedelta(minutes=5)
"""A deleted Node disappears in seconds; five minutes means something holds it."""
DELETE_POLL = timedelta(seconds=10)
DELETE_DEADLINE = timedelta(minutes=30)
"""Tearing down a ClusterDeployment (machines reset over SSH) takes minutes, rarely more."""


def _unique_addresses(nodes: Sequence[NodeInfo]) -> dict[str, NodeInfo]:
    """Nodes by address, for the addresses exactly one node has."""
    owners: dict[str, list[NodeInfo]] = {}
    for node in nodes:
        for address in node.addresses:
            owners.setdefault(address, []).append(node)
    return {address: found[0] for address, found in owners.items() if len(found) == 1}


class _Poll:
    """Workflow-timer waits between polls: 1 s, 2 s, 4 s ... up to `cap`."""

    def __init__(self, cap: timedelta) -> None:
        self._cap = cap
        self._next = min(FIRST_POLL, cap)

    async def wait(self) -> None:
        await workflow.sleep(self._next)
        self._next = min(self._next * 2, self._cap)


@dataclass(frozen=True)
class _Profile:
    """Timeouts of one kind of activity call."""

    start_to_close: timedelta
    schedule_to_close: timedelta


_KUBE = _Profile(start_to_close=timedelta(seconds=30), schedule_to_close=timedelta(minutes=5))
"""One Kubernetes API round trip (or a list): seconds; retried for up to five minutes."""
_HOSTS = _Profile(start_to_close=timedelta(minutes=1), schedule_to_close=timedelta(minutes=10))
"""The host provider answers claims after it has reserved the hosts: slower, retried longer."""

_PROFILES: dict[ActivityName, _Profile] = {
    ActivityName.CLAIM_HOSTS: _HOSTS,
    ActivityName.RELEASE_HOSTS: _HOSTS,
    ActivityName.LIST_CLAIMED_HOSTS: _HOSTS,
}
"""Activities not listed are single Kubernetes calls (`_KUBE`). None runs long: every wait is a
workflow timer between polls, so no activity needs a heartbeat."""

_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    non_retryable_error_types=NON_RETRYABLE,
)
"""Temporary failures are retried until `schedule_to_close`; permanent ones never are."""


def _human(duration: timedelta) -> str:
    """`timedelta(minutes=30)` as "30m", for messages."""
    seconds = int(duration.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [
        f"{hours}h" if hours else "",
        f"{minutes}m" if minutes else "",
        f"{seconds}s" if seconds else "",
    ]
    return "".join(parts) or "0s"


def _reason(error: BaseException) -> str:
    """The message a user should read for a failed operation."""
    if isinstance(error, ActivityError) and isinstance(error.cause, ApplicationError):
        return f"{error.activity_type}: {error.cause.message}"
    if isinstance(error, ActivityError) and error.cause is not None:
        return f"{error.activity_type}: {error.cause}"
    if isinstance(error, ApplicationError):
        return error.message
    return str(error)


@workflow.defn
class ClusterWorkflow:
    """The life of one cluster: create, queued operations, delete."""

    @workflow.init
    def __init__(self, input: ClusterWorkflowInput) -> None:
        self._spec: ClusterSpec = input.spec
        self._continue_as_new_after = input.continue_as_new_after_operations
        self._operations_this_run = 0
        self._running: Operation | None = None
        self._running_task: asyncio.Task[None] | None = None
        if input.state is not None:
            self._state = input.state
            return
        # A fresh cluster: its pools are known from the start (so validators see them), and
        # its creation is the first operation, queued before any update can arrive.
        info = workflow.info()
        self._state = ClusterState(
            owner=f"{info.workflow_id}/{info.run_id}",
            created_at=workflow.now(),
            node_pools=[
                NodePoolStatus(
                    name=pool.name,
                    sku=pool.sku,
                    count=pool.count,
                    labels=pool.labels,
                    taints=pool.taints,
                )
                for pool in self._spec.node_pools
            ],
        )
        self._enqueue(CreateClusterRequest())

    # --- The main loop -------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: ClusterWorkflowInput) -> ClusterStatus:
        """Run queued operations one at a time until the cluster is deleted."""
        self._upsert_search_attributes()
        while self._state.phase is not ClusterPhase.DELETED:
            if self._should_continue_as_new():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(
                    ClusterWorkflowInput(
                        spec=self._spec,
                        state=self._state,
                        continue_as_new_after_operations=self._continue_as_new_after,
                    )
                )
            await workflow.wait_condition(lambda: bool(self._state.queue))
            await self._run_operation(self._state.queue.pop(0))
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self.status()

    def _should_continue_as_new(self) -> bool:
        if self._operations_this_run == 0:
            return False
        if self._continue_as_new_after is not None:
            return self._operations_this_run >= self._continue_as_new_after
        return workflow.info().is_continue_as_new_suggested()

    async def _run_operation(self, operation: Operation) -> None:
        operation.state = OperationState.RUNNING
        operation.started_at = workflow.now()
        self._running = operation
        self._show_details()
        task: asyncio.Task[None] | None = None
        try:
            self._begin(operation)
            task = asyncio.create_task(self._execute(operation))
            self._running_task = task
            await task
            operation.state = OperationState.SUCCEEDED
        except asyncio.CancelledError:
            if task is None or not task.cancelled():
                raise  # the workflow itself is cancelled, not the operation
            operation.state = OperationState.CANCELLED
        except (ActivityError, ApplicationError) as error:
            operation.state = OperationState.FAILED
            operation.reason = _reason(error)
            workflow.logger.warning("operation %s failed: %s", operation.id, operation.reason)
        finally:
            self._running = None
            self._running_task = None
        self._finish(operation)

    def _finish(self, operation: Operation) -> None:
        self._show_details()
        operation.finished_at = workflow.now()
        self._state.completed = [*self._state.completed, operation][-COMPLETED_OPERATIONS_KEPT:]
        self._state.operations_run += 1
        self._operations_this_run += 1

    def _begin(self, operation: Operation) -> None:
        """Mark what the operation is about to change, before its first await, so that the
        validators of operations arriving meanwhile see it (see `models.rules.plan`)."""
        match operation.request:
            case AddNodePoolRequest(pool=spec):
                self._state.node_pools.append(
                    NodePoolStatus(
                        name=spec.name,
                        sku=spec.sku,
                        count=spec.count,
                        labels=spec.labels,
                        taints=spec.taints,
                    )
                )
            case ScaleNodePoolRequest(pool=name, count=count):
                self._pool(name).count = count
            case DeleteNodeOperation(node=node):
                pool, status = self._find_node(node)
                pool.count -= 1
                status.removed_by = operation.id
            case _:
                pass

    async def _execute(self, operation: Operation) -> None:
        """The plan of every kind of operation."""
        match operation.request:
            case CreateClusterRequest():
                await self._create(operation)
            case AddNodePoolRequest(pool=spec):
                await self._scale_up(spec.name, operation)
            case ScaleNodePoolRequest(pool=name, count=count, force=force, drain_parallelism=limit):
                pool = self._pool(name)
                if count >= len(pool.nodes):
                    await self._scale_up(name, operation)
                else:
                    victims = await self._choose_victims(pool, len(pool.nodes) - count)
                    await self._remove_nodes(
                        pool, victims, operation, drain=True, force=force, limit=limit
                    )
            case DeleteNodePoolRequest(pool=name, force=force, drain_parallelism=limit):
                pool = self._pool(name)
                pool.count = 0
                await self._remove_nodes(
                    pool, list(pool.nodes), operation, drain=True, force=force, limit=limit
                )
                self._state.node_pools.remove(pool)
            case DeleteNodeOperation(node=node, drain=drain, force=force):
                pool, status = self._find_node(node)
                await self._remove_nodes(
                    pool, [status], operation, drain=drain, force=force, limit=1
                )
            case DeleteClusterRequest():
                await self._delete(operation)

    # --- Create --------------------------------------------------------------------------------

    async def _create(self, operation: Operation) -> None:
        """Check the template and credential, create the ClusterDeployment, wait for its control
        plane, then add the pools of the create request in parallel."""
        spec = self._spec
        try:
            await self._check_prerequisites()
            await self._call(
                ActivityName.CREATE_CLUSTER_DEPLOYMENT,
                CreateClusterDeploymentRequest(
                    namespace=spec.namespace,
                    name=spec.name,
                    template=spec.template,
                    credential=spec.credential,
                    workflow_id=workflow.info().workflow_id,
                    kubernetes_version=KUBERNETES_VERSION,
                    pod_cidr=POD_CIDR,
                    service_cidr=SERVICE_CIDR,
                ),
                CreateClusterDeploymentResult,
            )
            self._state.deployment_created = True
            await self._wait_control_plane_ready()
        except (ActivityError, ApplicationError) as error:
            self._set_phase(ClusterPhase.FAILED, _reason(error))
            raise
        # By reference only: activities read the Secret; the kubeconfig never enters history.
        self._state.kubeconfig = KubeconfigRef(
            namespace=spec.namespace, secret_name=kubeconfig_secret_name(spec.name)
        )
        self._set_phase(ClusterPhase.READY)

        pools = [pool.name for pool in self._state.node_pools]
        results = await asyncio.gather(
            *(self._scale_up(pool, operation) for pool in pools), return_exceptions=True
        )
        failures = [_reason(result) for result in results if isinstance(result, BaseException)]
        for result in results:
            if isinstance(result, BaseException) and not isinstance(
                result, ActivityError | ApplicationError
            ):
                raise result
        if failures:
            raise permanent(ErrorType.NODES_DID_NOT_JOIN, "; ".join(failures))

    async def _check_prerequisites(self) -> None:
        spec = self._spec
        found = await self._call(
            ActivityName.CHECK_CLUSTER_PREREQUISITES,
            CheckClusterPrerequisitesRequest(
                namespace=spec.namespace, template=spec.template, credential=spec.credential
            ),
            CheckClusterPrerequisitesResult,
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

    async def _wait_control_plane_ready(self) -> None:
        spec = self._spec
        deadline = workflow.now() + spec.ready_deadline
        poll = _Poll(CONTROL_PLANE_POLL)
        while True:
            status = await self._call(
                ActivityName.GET_CLUSTER_DEPLOYMENT_STATUS,
                GetClusterDeploymentStatusRequest(namespace=spec.namespace, name=spec.name),
                GetClusterDeploymentStatusResult,
            )
            self._state.conditions = status.conditions
            # Ready counts only once the controller has seen the latest spec.
            if status.ready and status.observed_generation == status.generation:
                return
            waiting_on = "; ".join(
                f"{c.type}={c.status}"
                + (f" ({c.reason}: {c.message})" if c.reason or c.message else "")
                for c in status.conditions
                if c.status != "True"
            )
            self._state.reason = (
                f"waiting for the control plane: {waiting_on or 'no conditions yet'}"
            )
            if workflow.now() >= deadline:
                raise permanent(
                    ErrorType.CLUSTER_DEPLOYMENT_FAILED,
                    f"the control plane was not ready within {_human(spec.ready_deadline)}: "
                    f"{waiting_on or 'no conditions reported'}",
                )
            await poll.wait()

    # --- Scale up ------------------------------------------------------------------------------

    async def _scale_up(self, pool_name: str, operation: Operation) -> None:
        """Claim hosts until the pool has `count` nodes, add them as machines, label them as they
        register, and wait until they are Ready; hosts that do not join in time are given back."""
        pool = self._pool(pool_name)
        missing = pool.count - len(pool.nodes)
        if missing <= 0:
            return
        try:
            claimed = await self._call(
                ActivityName.CLAIM_HOSTS,
                ClaimHostsRequest(
                    location_id=self._spec.location_id,
                    sku=pool.sku,
                    count=missing,
                    # Same key on every retry of this claim: the provider hands out the same hosts.
                    idempotency_key=f"{self._state.owner}/{operation.id}/{pool.name}",
                    owner=self._state.owner,
                ),
                ClaimHostsResult,
            )
        except BaseException:
            pool.count = len(pool.nodes)
            raise
        now = workflow.now()
        for host in claimed.hosts:
            self._state.hosts[host.id] = ClaimedHost(host=host, pool=pool.name)
            pool.nodes.append(
                NodeStatus(name=host.id, host_id=host.id, address=host.address, registered_at=now)
            )
        operation.progress.hosts_claimed += len(claimed.hosts)
        operation.progress.nodes_expected += len(claimed.hosts)
        await self._call(
            ActivityName.ADD_CLUSTER_MACHINES,
            AddClusterMachinesRequest(
                namespace=self._spec.namespace,
                name=self._spec.name,
                machines=[host.machine for host in claimed.hosts],
            ),
            ClusterMachinesResult,
        )
        await self._wait_nodes_joined(pool, [host.id for host in claimed.hosts], operation)

    async def _wait_nodes_joined(
        self, pool: NodePoolStatus, host_ids: list[str], operation: Operation
    ) -> None:
        deadline = workflow.now() + self._spec.join_deadline
        poll = _Poll(JOIN_POLL)
        pending = [node for node in pool.nodes if node.host_id in host_ids]
        while True:
            found = await self._list_nodes()
            by_name = {node.name: node for node in found}
            by_address = _unique_addresses(found)
            for status in pending:
                # A node registers under its host's name; hosts behind one bastion share an
                # address, so the address only identifies a node when no other node has it.
                node = by_name.get(status.host_id) or by_address.get(status.address)
                if node is None:
                    continue
                if status.state is NodeState.REGISTERED:
                    await self._label(pool, status, node)
                    status.name = node.name
                    status.state = NodeState.JOINED
                    operation.progress.nodes_joined += 1
                status.kubernetes_status = "Ready" if node.ready else "NotReady"
            self._count_ready(pool)
            pending = [status for status in pending if status.kubernetes_status != "Ready"]
            if not pending:
                return
            if workflow.now() >= deadline:
                await self._give_back(pool, pending)
                hosts = ", ".join(f"{status.host_id} ({status.address})" for status in pending)
                raise permanent(
                    ErrorType.NODES_DID_NOT_JOIN,
                    f"{len(pending)} of {len(host_ids)} new nodes of node pool '{pool.name}' were not "
                    f"Ready within {_human(self._spec.join_deadline)}: {hosts}; their hosts were released",
                )
            await poll.wait()

    async def _label(self, pool: NodePoolStatus, status: NodeStatus, node: NodeInfo) -> None:
        labels = {
            **pool.labels,
            NODE_POOL_LABEL: pool.name,
            SKU_LABEL: pool.sku.id,
            HOST_ID_LABEL: status.host_id,
        }
        taints = [NodeTaint(key=t.key, value=t.value, effect=t.effect.value) for t in pool.taints]
        await self._call(
            ActivityName.LABEL_NODE,
            LabelNodeRequest(
                kubeconfig=self._kubeconfig(), node_name=node.name, labels=labels, taints=taints
            ),
            LabelNodeResult,
        )

    async def _give_back(self, pool: NodePoolStatus, nodes: Sequence[NodeStatus]) -> None:
        """Remove nodes that never became Ready without a drain (nothing runs there) and release
        their hosts, so the pool's count is what is really there."""
        await self._call(
            ActivityName.REMOVE_CLUSTER_MACHINES,
            RemoveClusterMachinesRequest(
                namespace=self._spec.namespace,
                name=self._spec.name,
                addresses=[self._machine_ref(node) for node in nodes],
            ),
            ClusterMachinesResult,
        )
        for node in nodes:
            if node.state is not NodeState.REGISTERED:
                await self._call(
                    ActivityName.DELETE_NODE,
                    DeleteNodeRequest(kubeconfig=self._kubeconfig(), node_name=node.name),
                    DeleteNodeResult,
                )
        await self._release([node.host_id for node in nodes])
        for node in nodes:
            pool.nodes.remove(node)
        pool.count = len(pool.nodes)
        self._count_ready(pool)

    # --- Scale down, node and pool delete: drain, then remove ----------------------------------

    async def _choose_victims(self, pool: NodePoolStatus, count: int) -> list[NodeStatus]:
        """Not-Ready nodes first, then the fewest evictable pods, then the newest
        (`models.drain.removal_order`); nodes still booting count as not Ready."""
        found = {node.name: node for node in await self._list_nodes()}
        candidates = [node for node in pool.nodes if not node.removed_by]
        infos = [
            found.get(node.name)
            or NodeInfo(name=node.name, ready=False, created_at=node.registered_at)
            for node in candidates
        ]
        chosen = [info.name for info in choose_nodes_to_remove(infos, count)]
        return [node for name in chosen for node in candidates if node.name == name]

    async def _remove_nodes(
        self,
        pool: NodePoolStatus,
        nodes: list[NodeStatus],
        operation: Operation,
        *,
        drain: bool,
        force: bool,
        limit: int | None,
    ) -> None:
        """Drain (unless told not to) and remove `nodes`, up to `limit` at once. Nodes whose drain
        misses the deadline are made schedulable again and stay; the operation then fails."""
        deadline = workflow.now() + self._spec.drain_deadline
        slots = asyncio.Semaphore(limit or self._spec.drain_parallelism)
        progress = [NodeProgress(node=node.name, host_id=node.host_id) for node in nodes]
        operation.progress.nodes = progress
        for node in nodes:
            node.removed_by = operation.id

        async def drain_and_remove(node: NodeStatus, progress: NodeProgress) -> None:
            async with slots:
                if drain and node.state is not NodeState.REGISTERED:
                    await self._drain(node, progress, deadline=deadline, force=force)
                await self._remove(pool, node, progress)

        if drain:
            # Every node leaving is cordoned before the first eviction, as `kubectl drain` does:
            # otherwise a pod evicted from one of them may be rescheduled onto the next.
            try:
                await asyncio.gather(
                    *(
                        self._cordon(node, entry)
                        for node, entry in zip(nodes, progress, strict=True)
                        if node.state is not NodeState.REGISTERED
                    )
                )
            except BaseException:
                for node in nodes:
                    await self._keep(pool, node)
                raise
        results = await asyncio.gather(
            *(drain_and_remove(node, entry) for node, entry in zip(nodes, progress, strict=True)),
            return_exceptions=True,
        )
        failures: list[str] = []
        error_type = ErrorType.DRAIN_TIMEOUT
        for node, entry, result in zip(nodes, progress, results, strict=True):
            if result is None:
                continue
            if not isinstance(result, ActivityError | ApplicationError):
                raise result
            cause = result.cause if isinstance(result, ActivityError) else result
            if not isinstance(cause, ApplicationError) or cause.type != ErrorType.DRAIN_TIMEOUT:
                error_type = ErrorType.NODE_REMOVAL_FAILED
            failures.append(f"node '{node.name}': {_reason(result)}")
            entry.step = "failed"
            await self._keep(pool, node)
        if failures:
            raise permanent(error_type, "; ".join(failures))

    async def _drain(
        self, node: NodeStatus, progress: NodeProgress, *, deadline: datetime, force: bool
    ) -> None:
        """Cordon the node, evict its pods (DaemonSet, mirror and cordon-tolerating pods excepted,
        and not waited for), retry what a budget refuses, and wait until the evicted pods are gone."""
        kubeconfig = self._kubeconfig()
        if not progress.cordoned:
            await self._cordon(node, progress)
        evicted: list[str] = []
        poll = _Poll(EVICTION_RETRY)
        while True:
            listed = await self._call(
                ActivityName.LIST_PODS_ON_NODE,
                ListPodsOnNodeRequest(kubeconfig=kubeconfig, node_name=node.name),
                ListPodsOnNodeResult,
            )
            remaining = pods_to_evict(listed.pods)
            progress.pods_remaining = len(remaining)
            if not remaining:
                break
            node.state = NodeState.DRAINING
            progress.step = "draining"
            to_evict = [pod for pod in remaining if not pod.terminating]
            outcomes = await asyncio.gather(*(self._evict(kubeconfig, pod) for pod in to_evict))
            blocking: list[str] = []
            for pod, outcome in zip(to_evict, outcomes, strict=True):
                if outcome.outcome is EvictionOutcome.BLOCKED_BY_BUDGET:
                    blocking.append(f"{pod.ref}: {outcome.message}" if outcome.message else pod.ref)
                elif pod.ref not in evicted:
                    evicted.append(pod.ref)
            progress.pods_evicted = len(evicted)
            progress.blocking_pods = blocking
            if workflow.now() >= deadline:
                if not force:
                    left = blocking or [pod.ref for pod in remaining]
                    raise permanent(
                        ErrorType.DRAIN_TIMEOUT,
                        f"drain did not finish within {_human(self._spec.drain_deadline)}; "
                        f"blocked by: {', '.join(left)}",
                    )
                # A forced drain deletes what the budgets protect, and does not wait for it.
                for pod in remaining:
                    await self._call(
                        ActivityName.DELETE_POD,
                        DeletePodRequest(
                            kubeconfig=kubeconfig, namespace=pod.namespace, name=pod.name
                        ),
                        DeletePodResult,
                    )
                break
            await poll.wait()
        progress.pods_remaining = 0
        progress.step = "drained"

    async def _cordon(self, node: NodeStatus, progress: NodeProgress) -> None:
        await self._call(
            ActivityName.CORDON_NODE,
            CordonNodeRequest(kubeconfig=self._kubeconfig(), node_name=node.name),
            CordonNodeResult,
        )
        node.state = NodeState.CORDONED
        progress.cordoned = True
        progress.step = "cordoned"

    async def _evict(self, kubeconfig: KubeconfigRef, pod: PodInfo) -> EvictPodResult:
        return await self._call(
            ActivityName.EVICT_POD,
            EvictPodRequest(
                kubeconfig=kubeconfig, namespace=pod.namespace, name=pod.name, uid=pod.uid
            ),
            EvictPodResult,
        )

    async def _remove(self, pool: NodePoolStatus, node: NodeStatus, progress: NodeProgress) -> None:
        """Remove the machine, delete the Node and wait until it is gone, then release the host."""
        node.state = NodeState.REMOVING
        progress.step = "removing"
        await self._call(
            ActivityName.REMOVE_CLUSTER_MACHINES,
            RemoveClusterMachinesRequest(
                namespace=self._spec.namespace,
                name=self._spec.name,
                addresses=[self._machine_ref(node)],
            ),
            ClusterMachinesResult,
        )
        await self._call(
            ActivityName.DELETE_NODE,
            DeleteNodeRequest(kubeconfig=self._kubeconfig(), node_name=node.name),
            DeleteNodeResult,
        )
        deadline = workflow.now() + NODE_GONE_DEADLINE
        poll = _Poll(NODE_GONE_POLL)
        while any(found.name == node.name for found in await self._list_nodes()):
            if workflow.now() >= deadline:
                raise permanent(
                    ErrorType.NOT_FOUND,
                    f"node '{node.name}' was still there {_human(NODE_GONE_DEADLINE)} after its deletion",
                )
            await poll.wait()
        await self._release([node.host_id])
        pool.nodes.remove(node)
        self._count_ready(pool)
        progress.step = "removed"

    async def _keep(self, pool: NodePoolStatus, node: NodeStatus) -> None:
        """Give a node whose removal failed back to its pool, schedulable again."""
        if node.state in (NodeState.CORDONED, NodeState.DRAINING):
            await self._call(
                ActivityName.UNCORDON_NODE,
                UncordonNodeRequest(kubeconfig=self._kubeconfig(), node_name=node.name),
                UncordonNodeResult,
            )
        if node in pool.nodes and node.state is not NodeState.REGISTERED:
            node.state = NodeState.JOINED
        node.removed_by = ""
        pool.count = len(pool.nodes)

    # --- Delete --------------------------------------------------------------------------------

    async def _delete(self, operation: Operation) -> None:
        """Tear down workspaces, delete the ClusterDeployment and wait until it is gone, release
        every host (those recorded and any the provider still lists for this cluster)."""
        spec = self._spec
        self._set_phase(ClusterPhase.DELETING)
        try:
            await self._tear_down_workspaces()
            await self._call(
                ActivityName.DELETE_CLUSTER_DEPLOYMENT,
                DeleteClusterDeploymentRequest(namespace=spec.namespace, name=spec.name),
                DeleteClusterDeploymentResult,
            )
            deadline = workflow.now() + DELETE_DEADLINE
            poll = _Poll(DELETE_POLL)
            while True:
                status = await self._call(
                    ActivityName.GET_CLUSTER_DEPLOYMENT_STATUS,
                    GetClusterDeploymentStatusRequest(namespace=spec.namespace, name=spec.name),
                    GetClusterDeploymentStatusResult,
                )
                if not status.exists:
                    break
                if workflow.now() >= deadline:
                    raise permanent(
                        ErrorType.CLUSTER_DEPLOYMENT_FAILED,
                        f"ClusterDeployment '{spec.name}' still exists {_human(DELETE_DEADLINE)} after its deletion",
                    )
                await poll.wait()
            # The sweep finds hosts claimed by a call whose answer was lost (an interrupted create).
            swept = await self._call(
                ActivityName.LIST_CLAIMED_HOSTS,
                ListClaimedHostsRequest(owner=self._state.owner),
                ListClaimedHostsResult,
            )
            host_ids = list(self._state.hosts)
            host_ids += [host.id for host in swept.hosts if host.id not in self._state.hosts]
            await self._release(host_ids)
        except (ActivityError, ApplicationError) as error:
            self._set_phase(
                ClusterPhase.FAILED,
                f"delete did not finish: {_reason(error)}; repeat the delete to finish it",
            )
            raise
        self._state.node_pools = []
        self._state.kubeconfig = None
        self._set_phase(ClusterPhase.DELETED)

    async def _tear_down_workspaces(self) -> None:
        """Hook: workspaces running on the cluster are torn down before it goes. A no-op until
        workspaces exist."""

    # --- Updates and queries -------------------------------------------------------------------

    def _validate(self, request: OperationRequest) -> None:
        problem = operation_problem(self._spec.name, self._state, self._running, request)
        if problem:
            raise rejected(problem)

    @workflow.update
    async def add_node_pool(self, request: AddNodePoolRequest) -> OperationAccepted:
        """Queue a new node pool."""
        return self._enqueue(request)

    @add_node_pool.validator
    def _validate_add_node_pool(self, request: AddNodePoolRequest) -> None:
        self._validate(request)

    @workflow.update
    async def scale_node_pool(self, request: ScaleNodePoolRequest) -> OperationAccepted:
        """Queue a change of a pool's count."""
        return self._enqueue(request)

    @scale_node_pool.validator
    def _validate_scale_node_pool(self, request: ScaleNodePoolRequest) -> None:
        self._validate(request)

    @workflow.update
    async def delete_node_pool(self, request: DeleteNodePoolRequest) -> OperationAccepted:
        """Queue the deletion of a pool and its nodes."""
        return self._enqueue(request)

    @delete_node_pool.validator
    def _validate_delete_node_pool(self, request: DeleteNodePoolRequest) -> None:
        self._validate(request)

    @workflow.update
    async def delete_node(self, request: DeleteNodeOperation) -> OperationAccepted:
        """Queue the deletion of one node."""
        return self._enqueue(request)

    @delete_node.validator
    def _validate_delete_node(self, request: DeleteNodeOperation) -> None:
        self._validate(request)

    @workflow.update
    async def delete_cluster(self, request: DeleteClusterRequest) -> OperationAccepted:
        """Delete the cluster now: cancel the queue, interrupt the running operation, then remove
        everything. While a delete runs, asking again returns that delete."""
        running = self._running
        if running is not None and isinstance(running.request, DeleteClusterRequest):
            return OperationAccepted(operation_id=running.id, kind=running.kind, position=0)
        for queued in self._state.queue:
            queued.state = OperationState.CANCELLED
            queued.reason = f"cancelled: cluster '{self._spec.name}' is being deleted"
            self._finish(queued)
        self._state.queue = []
        if running is not None and self._running_task is not None:
            running.reason = f"interrupted: cluster '{self._spec.name}' is being deleted"
            self._running_task.cancel()
        self._set_phase(ClusterPhase.DELETING)
        return self._enqueue(request)

    @delete_cluster.validator
    def _validate_delete_cluster(self, request: DeleteClusterRequest) -> None:
        self._validate(request)

    @workflow.query
    def status(self) -> ClusterStatus:
        """The cluster as it is: phase, pools and nodes, running and queued operations, results."""
        state = self._state
        return ClusterStatus(
            name=self._spec.name,
            location_id=self._spec.location_id,
            phase=state.phase,
            reason=state.reason,
            conditions=state.conditions,
            node_pools=state.node_pools,
            current_operation=self._running,
            queued_operations=state.queue,
            completed_operations=state.completed,
            kubeconfig=state.kubeconfig,
            created_at=state.created_at,
            updated_at=workflow.now(),
        )

    # --- Small helpers -------------------------------------------------------------------------

    def _enqueue(self, request: OperationRequest) -> OperationAccepted:
        operation = Operation(
            id=f"op-{self._state.next_operation:04d}", request=request, submitted_at=workflow.now()
        )
        self._state.next_operation += 1
        self._state.queue.append(operation)
        self._show_details()
        return OperationAccepted(
            operation_id=operation.id, kind=operation.kind, position=len(self._state.queue)
        )

    def _set_phase(self, phase: ClusterPhase, reason: str = "") -> None:
        self._state.phase = phase
        self._state.reason = reason
        self._upsert_search_attributes()
        self._show_details()

    def _show_details(self) -> None:
        """The Web UI's "current details" of this workflow: phase, running operation and queue
        (metadata for people; it adds nothing to the history)."""
        lines = [f"**{self._spec.name}** in `{self._spec.location_id}`: {self._state.phase.value}"]
        if self._state.reason:
            lines.append(self._state.reason)
        if self._running is not None:
            lines.append(f"running: {self._running.id} {self._running.kind.value}")
        if self._state.queue:
            queued = ", ".join(f"{op.id} {op.kind.value}" for op in self._state.queue)
            lines.append(f"queued: {queued}")
        workflow.set_current_details("\n\n".join(lines))

    def _upsert_search_attributes(self) -> None:
        workflow.upsert_search_attributes(
            [
                COLONY_CLUSTER.value_set(self._spec.name),
                COLONY_PHASE.value_set(self._state.phase.value),
            ]
        )

    def _pool(self, name: str) -> NodePoolStatus:
        pool = self._state.pool(name)
        if pool is None:
            # Validators refuse unknown pools; reaching this means the pool went away meanwhile.
            raise permanent(
                ErrorType.NOT_FOUND,
                f"node pool '{name}' does not exist in cluster '{self._spec.name}'",
            )
        return pool

    def _find_node(self, node: str) -> tuple[NodePoolStatus, NodeStatus]:
        for pool in self._state.node_pools:
            for status in pool.nodes:
                if node in (status.name, status.host_id):
                    return pool, status
        raise permanent(
            ErrorType.NOT_FOUND, f"node '{node}' does not exist in cluster '{self._spec.name}'"
        )

    def _count_ready(self, pool: NodePoolStatus) -> None:
        pool.ready_count = sum(
            1
            for node in pool.nodes
            if node.state is NodeState.JOINED and node.kubernetes_status == "Ready"
        )

    def _machine_ref(self, node: NodeStatus) -> str:
        """The node's machine entry as `address:port` (hosts behind one bastion share an address)."""
        claimed = self._state.hosts.get(node.host_id)
        return f"{claimed.host.address}:{claimed.host.ssh_port}" if claimed else node.address

    def _kubeconfig(self) -> KubeconfigRef:
        if self._state.kubeconfig is None:
            raise permanent(
                ErrorType.NOT_FOUND, f"cluster '{self._spec.name}' has no kubeconfig yet"
            )
        return self._state.kubeconfig

    async def _list_nodes(self) -> list[NodeInfo]:
        listed = await self._call(
            ActivityName.LIST_NODES,
            ListNodesRequest(kubeconfig=self._kubeconfig()),
            ListNodesResult,
        )
        return listed.nodes

    async def _release(self, host_ids: list[str]) -> None:
        if not host_ids:
            return
        await self._call(
            ActivityName.RELEASE_HOSTS,
            ReleaseHostsRequest(host_ids=host_ids, owner=self._state.owner),
            ReleaseHostsResult,
        )
        for host_id in host_ids:
            self._state.hosts.pop(host_id, None)

    async def _call(
        self, name: ActivityName, request: BaseModel, result_type: type[ResultT]
    ) -> ResultT:
        """Run one activity with its explicit timeouts and retry policy (see `_PROFILES`)."""
        profile = _PROFILES.get(name, _KUBE)
        result: ResultT = await workflow.execute_activity(
            name,
            request,
            result_type=result_type,
            start_to_close_timeout=profile.start_to_close,
            schedule_to_close_timeout=profile.schedule_to_close,
            retry_policy=_RETRY,
        )
        return result
