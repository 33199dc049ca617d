"""Shrinking a cluster: choose the nodes to remove, cordon them all, drain each, remove it, release
its host. Called by `ClusterWorkflow` for a scale-down, a pool delete and a node delete.

Why it is shaped this way:
- Every leaving node is cordoned before the first eviction, as `kubectl drain` does: otherwise a pod
  evicted from one of them could be rescheduled onto the next.
- Each node's drain is ONE heartbeating `drain_node` activity (evict, retry what a budget refuses,
  wait until the pods are gone) with the node's own deadline, counted from when its drain starts:
  a node waiting for a parallelism slot has spent none of it. A budget that blocks for an hour
  costs the history nothing while it blocks; the live counts and blockers are in the activity's
  heartbeat details (the Web UI's pending activities; `colonyctl` merges them into status), and the
  final ones in its result.
- Undoing: a node whose drain failed, or whose removal had not started when the operation was
  interrupted, is uncordoned and stays in its pool; a node whose machine was already removed is
  finished off (its Node deleted, its host released), because it is leaving whatever happens. Each
  of these runs on its own under `settle`; one that fails is reported on the operation and the
  node's recorded state stays what it really is (still cordoned, still removing), never a ghost.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow

from workflows.cluster.context import ClusterContext, human
from workflows.cluster.supply import MachineDeploymentSupply, is_machine_deployment
from workflows.cluster_calls import (
    CORDON_NODE,
    DELETE_NODE,
    DRAIN_NODE,
    LIST_NODES,
    REMOVE_CLUSTER_MACHINES,
    UNCORDON_NODE,
)
from workflows.kit.engine import (
    Interrupted,
    error_type_of,
    is_failure,
    reason_of,
    settle,
    settle_all,
)

with workflow.unsafe.imports_passed_through():
    from models.activity_api import (
        NODE_POOL_LABEL,
        CordonNodeRequest,
        DeleteNodeRequest,
        DrainNodeRequest,
        ListNodesRequest,
        NodeInfo,
        RemoveClusterMachinesRequest,
        UncordonNodeRequest,
        drain_activity_id,
    )
    from models.drain import choose_nodes_to_remove
    from models.errors import ErrorType, permanent
    from models.node_pool import NodePoolStatus, NodeState, NodeStatus
    from models.operations import NodeProgress, Operation

NODE_GONE_DEADLINE = timedelta(minutes=5)
"""A deleted Node disappears in seconds; five minutes means something holds it."""
SLOT_ENDS_WITH_DRAIN = "drain-slot-ends-with-drain"
"""`workflow.patched` id: a node gives its parallelism slot back when its drain ends, not after
its removal (histories recorded before hold it through the removal)."""


class NodeRemoval:
    """Drains (unless told not to) and removes nodes of one pool for one operation."""

    def __init__(
        self,
        cluster: ClusterContext,
        operation: Operation,
        pool: NodePoolStatus,
        *,
        drain: bool,
        force: bool,
        parallelism: int | None,
    ) -> None:
        self._cluster = cluster
        self._operation = operation
        self._pool = pool
        self._drain = drain
        self._force = force
        # The operation's own parallelism, else the pool's setting, else the cluster's.
        slots = parallelism or pool.drain_parallelism or cluster.spec.drain_parallelism
        self._slots = asyncio.Semaphore(slots)
        self._removals = asyncio.Semaphore(slots)
        self._machines = (
            MachineDeploymentSupply(cluster, operation) if is_machine_deployment(pool) else None
        )
        """The template's MachineDeployment supplies the pool: its Machines are marked before the
        cordon and removed together once drained (`workflows.cluster.supply`)."""

    async def choose(self, count: int, held: set[str] | None = None) -> list[NodeStatus]:
        """The `count` nodes a scale-down removes: nodes where no workspace holds GPUs first, then
        not-Ready, then the fewest evictable pods, then the newest (`models.drain.removal_order`);
        nodes still booting count as not Ready."""
        listed = await LIST_NODES(
            ListNodesRequest(
                kubeconfig=self._cluster.kubeconfig(),
                label_selector=f"{NODE_POOL_LABEL}={self._pool.name}",
                count_pods=True,
            )
        )
        found = {node.name: node for node in listed.nodes}
        candidates = [node for node in self._pool.nodes if not node.removed_by]
        infos = [
            found.get(node.name)
            or NodeInfo(name=node.name, ready=False, created_at=node.registered_at)
            for node in candidates
        ]
        taken = held or set()
        free = [info for info in infos if info.name not in taken]
        busy = [info for info in infos if info.name in taken]
        chosen = [info.name for info in choose_nodes_to_remove(free, count)]
        chosen += [info.name for info in choose_nodes_to_remove(busy, count - len(chosen))]
        return [node for name in chosen for node in candidates if node.name == name]

    async def run(self, nodes: list[NodeStatus]) -> None:
        """Remove `nodes`; those whose drain or removal fails stay (uncordoned) and the operation
        fails, naming each with its reason."""
        progress = [NodeProgress(node=node.name, host_id=node.host_id) for node in nodes]
        self._operation.progress.nodes = progress
        for node in nodes:
            node.removed_by = self._operation.id
        try:
            if self._machines is not None:
                await self._machines.mark(nodes)
            if self._drain:
                await asyncio.gather(
                    *(
                        self._cordon(node, entry)
                        for node, entry in zip(nodes, progress, strict=True)
                        if node.state is not NodeState.REGISTERED
                    )
                )
            results = await asyncio.gather(
                *(self._one(node, entry) for node, entry in zip(nodes, progress, strict=True)),
                return_exceptions=True,
            )
        except Interrupted:
            await settle(self._undo(nodes, progress))
            raise
        failed = [
            (node, entry, result)
            for node, entry, result in zip(nodes, progress, results, strict=True)
            if isinstance(result, BaseException)
        ]
        for _, _, result in failed:
            if not is_failure(result):
                # Interrupted (or a bug): undo everything not removed, then let it propagate.
                await settle(self._undo(nodes, progress))
                raise result
        if self._machines is not None:
            await self._remove_machines(nodes, progress, failed)
            return
        if not failed:
            return
        for _, entry, _ in failed:
            entry.step = "failed"
        await settle(self._undo([node for node, _, _ in failed], [e for _, e, _ in failed]))
        types = {error_type_of(result) for _, _, result in failed}
        error_type = ErrorType.DRAIN_TIMEOUT if types == {ErrorType.DRAIN_TIMEOUT} else None
        raise permanent(
            error_type or ErrorType.NODE_REMOVAL_FAILED,
            "; ".join(f"node '{node.name}': {reason_of(result)}" for node, _, result in failed),
        )

    async def _remove_machines(
        self,
        nodes: list[NodeStatus],
        progress: list[NodeProgress],
        failed: list[tuple[NodeStatus, NodeProgress, BaseException]],
    ) -> None:
        """A machine-deployment pool's nodes leave together once their drains are over: those
        whose drain failed are unmarked and uncordoned first (nothing is lowered for them), then
        the count is lowered by the drained ones, which CAPI deletes (`supply.remove`)."""
        assert self._machines is not None
        failed_nodes = [node for node, _, _ in failed]
        for _, entry, _ in failed:
            entry.step = "failed"
        if failed:
            await settle(self._undo(failed_nodes, [e for _, e, _ in failed]))
        leaving = [
            (node, entry)
            for node, entry in zip(nodes, progress, strict=True)
            if node not in failed_nodes and node in self._pool.nodes
        ]
        try:
            for node, entry in leaving:
                node.state = NodeState.REMOVING
                entry.step = "removing"
            await self._machines.remove(self._pool, [node for node, _ in leaving])
        except Interrupted as error:
            if is_failure(error) and error_type_of(error) == ErrorType.WORKERS_CHANGED_OUTSIDE:
                # Refused before anything was written (someone else set workersNumber): the
                # nodes stay, unmarked and uncordoned. Any other interruption may have come after
                # the count was lowered: the removal is finished (only marked Machines can go).
                for node, entry in leaving:
                    node.state = NodeState.DRAINING
                    entry.step = "failed"
            await settle(self._undo([n for n, _ in leaving], [e for _, e in leaving]))
            raise
        for _, entry in leaving:
            entry.step = "removed"
        if failed:
            types = {error_type_of(result) for _, _, result in failed}
            error_type = ErrorType.DRAIN_TIMEOUT if types == {ErrorType.DRAIN_TIMEOUT} else None
            raise permanent(
                error_type or ErrorType.NODE_REMOVAL_FAILED,
                "; ".join(f"node '{node.name}': {reason_of(result)}" for node, _, result in failed),
            )

    async def _cordon(self, node: NodeStatus, progress: NodeProgress) -> None:
        await CORDON_NODE(
            CordonNodeRequest(kubeconfig=self._cluster.kubeconfig(), node_name=node.name)
        )
        node.state = NodeState.CORDONED
        progress.cordoned = True
        progress.step = "cordoned"

    async def _one(self, node: NodeStatus, progress: NodeProgress) -> None:
        if self._machines is not None:
            # Removed together once every drain is over (`_remove_machines`).
            async with self._slots:
                if self._drain and node.state is not NodeState.REGISTERED:
                    await self._drain_node(node, progress)
            return
        async with self._slots:
            if self._drain and node.state is not NodeState.REGISTERED:
                await self._drain_node(node, progress)
            if not workflow.patched(SLOT_ENDS_WITH_DRAIN):
                await self._remove(node, progress)  # as histories recorded before the patch did
                return
        # The slot bounds the disruption (pods evicted at once); a drained node's removal evicts
        # nothing, so the next node's drain starts now. Removals have a bound of their own: each
        # rewrites the ClusterDeployment's machines (read-modify-write, retried on a conflict).
        async with self._removals:
            await self._remove(node, progress)

    async def _drain_node(self, node: NodeStatus, progress: NodeProgress) -> None:
        cluster = self._cluster
        started = workflow.now()
        deadline = started + cluster.spec.drain_deadline
        progress.drain_started_at = started
        progress.drain_deadline = deadline
        progress.step = "draining"
        node.state = NodeState.DRAINING
        result = await DRAIN_NODE(
            DrainNodeRequest(
                kubeconfig=cluster.kubeconfig(),
                node_name=node.name,
                deadline=deadline,
                force=self._force,
            ),
            # A stable id, so `colonyctl` finds this drain's heartbeat among the pending activities.
            activity_id=drain_activity_id(self._operation.id, node.name),
            wait=cluster.spec.drain_deadline,
        )
        progress.pods_evicted = result.progress.pods_evicted
        progress.pods_remaining = result.progress.pods_remaining
        progress.blocking_pods = result.progress.blocking_pods
        if not result.drained:
            left = result.progress.blocking_pods or [f"{result.progress.pods_remaining} pod(s)"]
            raise permanent(
                ErrorType.DRAIN_TIMEOUT,
                f"drain did not finish within {human(cluster.spec.drain_deadline.total_seconds())}; "
                f"blocked by: {', '.join(left)}",
            )
        progress.step = "drained"

    async def _remove(self, node: NodeStatus, progress: NodeProgress) -> None:
        # From here on the node is leaving whatever happens: once its machine may be gone from the
        # ClusterDeployment (even by a call that completed while the operation was interrupted),
        # giving it back would leave a node whose host k0rdent is resetting.
        node.state = NodeState.REMOVING
        progress.step = "removing"
        await self._finish_removal(node, progress)

    async def _finish_removal(self, node: NodeStatus, progress: NodeProgress) -> None:
        """Remove the machine (idempotent), delete the Node and wait until it is gone, release the
        host, and drop the node from its pool."""
        cluster = self._cluster
        await REMOVE_CLUSTER_MACHINES(
            RemoveClusterMachinesRequest(
                namespace=cluster.spec.namespace,
                name=cluster.deployment,
                addresses=[cluster.machine_ref(node)],
            )
        )
        deleted = await DELETE_NODE.within(
            NODE_GONE_DEADLINE,
            lambda until: DeleteNodeRequest(
                kubeconfig=cluster.kubeconfig(), node_name=node.name, wait_until=until
            ),
        )
        if not deleted.gone:
            raise permanent(
                ErrorType.NODE_REMOVAL_FAILED,
                f"node '{node.name}' was still there "
                f"{human(NODE_GONE_DEADLINE.total_seconds())} after its deletion",
            )
        await cluster.release([node.host_id])
        if node in self._pool.nodes:
            self._pool.nodes.remove(node)
        cluster.count_ready(self._pool)
        progress.step = "removed"

    async def _undo(self, nodes: list[NodeStatus], progress: list[NodeProgress]) -> None:
        """Give each node not removed back to its pool, or finish removing it when its machine is
        already gone; each on its own, failures noted on the operation."""
        works = []
        for node, entry in zip(nodes, progress, strict=True):
            if node not in self._pool.nodes:
                continue  # removed already
            if node.state is NodeState.REMOVING:
                works.append(self._finish_or_report(node, entry))
            else:
                works.append(self._keep(node))
        failures = await settle_all(*works)
        for failure in failures:
            if not is_failure(failure):
                raise failure
        self._pool.count = sum(
            1 for node in self._pool.nodes if node.state is not NodeState.REMOVING
        )
        self._cluster.count_ready(self._pool)

    async def _keep(self, node: NodeStatus) -> None:
        """Make a node whose removal failed or was cancelled schedulable again, in its pool (its
        Machine unmarked first, so CAPI never takes it for another's removal)."""
        if self._machines is not None:
            await self._machines.unmark([node])
        node.removed_by = ""
        if node.state is NodeState.REGISTERED:
            return  # still booting: never cordoned, nothing to undo
        if node.state in (NodeState.CORDONED, NodeState.DRAINING):
            try:
                await UNCORDON_NODE(
                    UncordonNodeRequest(kubeconfig=self._cluster.kubeconfig(), node_name=node.name)
                )
            except Interrupted as error:
                node.state = NodeState.CORDONED  # what is really there
                self._note(f"node '{node.name}' stays cordoned: {reason_of(error)}")
                raise
        node.state = NodeState.JOINED

    async def _finish_or_report(self, node: NodeStatus, progress: NodeProgress) -> None:
        try:
            if self._machines is not None:
                await self._machines.finish(self._pool, [node])
                progress.step = "removed"
                return
            await self._finish_removal(node, progress)
        except Interrupted as error:
            self._note(
                f"node '{node.name}' could not be removed ({reason_of(error)}); its machine is gone "
                "and it is listed as removing until a later delete finishes it"
            )
            raise

    def _note(self, text: str) -> None:
        op = self._operation
        op.reason = f"{op.reason}; {text}" if op.reason else text
