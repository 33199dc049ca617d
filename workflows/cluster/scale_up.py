"""Growing a node pool: claim hosts, add them as machines, wait until their nodes join and are Ready.

Called by `ClusterWorkflow` for a create's pools (in parallel), `add_node_pool` and a scale-up.

The join wait is one heartbeating `await_nodes` activity that labels nodes as they register and
returns only when what it sees has changed (batched, at most every 30 s) or at the join deadline:
the history grows with the nodes that join, never with the minutes a boot takes, and `readyCount`
still rises in the status as nodes come up.

Undoing: new nodes that are not Ready (still booting, or registered but never Ready) are given back
(machine removed, Node deleted, host released) when the join deadline passes, when the operation
fails elsewhere, and when it is interrupted; Ready nodes stay, and the pool's count becomes what is
really there. A claim that lands after an
interruption is not in the state yet: the operation's owner sweep (`sweep_unrecorded_hosts`, run
once every branch has settled) releases it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from temporalio import workflow

from workflows.cluster.context import ClusterContext, human
from workflows.cluster.supply import MachineDeploymentSupply, is_machine_deployment
from workflows.cluster_calls import (
    ADD_CLUSTER_MACHINES,
    AWAIT_FREE_HOSTS,
    AWAIT_NODES,
    CLAIM_HOSTS,
    DELETE_NODE,
    REMOVE_CLUSTER_MACHINES,
)
from workflows.kit.engine import Interrupted, error_type_of, is_failure, settle
from workflows.kit.until import until

with workflow.unsafe.imports_passed_through():
    from models.activity_api import (
        AddClusterMachinesRequest,
        AwaitFreeHostsRequest,
        AwaitNodesRequest,
        AwaitNodesResult,
        ClaimHostsRequest,
        DeleteNodeRequest,
        ExpectedNode,
        Host,
        NodeTaint,
        ObservedNode,
        RemoveClusterMachinesRequest,
    )
    from models.cluster import ClaimedHost
    from models.errors import ErrorType, permanent
    from models.node_pool import NodePoolStatus, NodeState, NodeStatus
    from models.operations import Operation

FIRST_REPORT = 1.0
"""Seconds `await_nodes` batches changes at first (a small pool answers in seconds) ..."""
LAST_REPORT = 30.0
"""... doubling up to this, so a long boot costs a few returns, not one per node state."""
GIVE_BACK_NODE_GONE = timedelta(minutes=2)
"""How long giving back a never-Ready node waits for its Node object to go."""


class ScaleUp:
    """Grows one pool of the cluster for one operation."""

    def __init__(self, cluster: ClusterContext, operation: Operation) -> None:
        self._cluster = cluster
        self._operation = operation

    async def run(self, pool_name: str, *, wait_for_capacity: bool) -> None:
        """Bring `pool_name` up to its count (see the module docstring)."""
        pool = self._cluster.pool(pool_name)
        missing = pool.count - len(pool.nodes)
        if missing <= 0:
            return
        if is_machine_deployment(pool):
            await self._grow_machine_deployment(pool)
            return
        new: list[NodeStatus] = []
        try:
            hosts = await self._claim(pool, missing, wait_for_capacity=wait_for_capacity)
            new = self._record(pool, hosts)
            await ADD_CLUSTER_MACHINES(
                AddClusterMachinesRequest(
                    namespace=self._cluster.spec.namespace,
                    name=self._cluster.deployment,
                    machines=[host.machine for host in hosts],
                )
            )
            await self._await_joined(pool, new)
        except Interrupted as error:
            # Undone as the join deadline undoes them: the new nodes that are not Ready (still
            # booting, or in the cluster but never Ready) are given back; Ready ones stay.
            if not is_failure(error) or error_type_of(error) != ErrorType.NODES_DID_NOT_JOIN:
                not_ready = [n for n in new if n.kubernetes_status != "Ready"]
                await settle(self.give_back(pool, not_ready))
            pool.count = len(pool.nodes)
            raise

    async def _grow_machine_deployment(self, pool: NodePoolStatus) -> None:
        """The template's MachineDeployment grows (`workflows.cluster.supply`); its new nodes are
        labelled and waited on as claimed hosts' are; those not Ready are given back."""
        supply = MachineDeploymentSupply(self._cluster, self._operation)
        new: list[NodeStatus] = []
        try:
            new = await supply.grow(pool)
            await self._await_joined(pool, new)
        except Interrupted as error:
            if not is_failure(error) or error_type_of(error) != ErrorType.NODES_DID_NOT_JOIN:
                not_ready = [n for n in new if n.kubernetes_status != "Ready"]
                await settle(self.give_back(pool, not_ready))
            # Machines that never got a Node go first when the count is lowered (CAPI's deletion
            # priority): the MachineDeployment ends as big as the pool really is.
            await settle(supply.set_workers(pool, len(pool.nodes), only_lower=True))
            pool.count = len(pool.nodes)
            raise

    async def _claim(
        self, pool: NodePoolStatus, count: int, *, wait_for_capacity: bool
    ) -> list[Host]:
        cluster, operation = self._cluster, self._operation
        deadline = workflow.now() + cluster.spec.join_deadline
        attempt = 0
        while True:
            request = ClaimHostsRequest(
                location_id=cluster.spec.location_id,
                sku=pool.sku,
                count=count,
                # The same key on every retry of this claim: the provider hands out the same hosts.
                idempotency_key=f"{cluster.state.owner}/{operation.id}/{pool.name}/{attempt}",
                owner=cluster.state.owner,
            )
            try:
                claimed = await CLAIM_HOSTS(request)
                return claimed.hosts
            except Interrupted as error:
                unavailable = error_type_of(error) == ErrorType.HOSTS_UNAVAILABLE
                if not (wait_for_capacity and unavailable and workflow.now() < deadline):
                    raise
            # Asked to wait for capacity: one heartbeating wait until enough hosts are free, then
            # claim again under a new key (the failed key's answer is remembered by the provider).
            left = deadline - workflow.now()
            operation.reason = (
                f"waiting for {count} free host(s) of {pool.sku} in {cluster.spec.location_id}"
            )
            # Seen while it waits: the pool waits for hosts, and the cluster's phase is `waiting`.
            pool.waiting_for_hosts = count
            cluster.shown_changed()
            try:
                free = await AWAIT_FREE_HOSTS(
                    AwaitFreeHostsRequest(
                        location_id=cluster.spec.location_id,
                        sku=pool.sku,
                        count=count,
                        deadline=deadline,
                    ),
                    wait=left,
                )
            finally:
                pool.waiting_for_hosts = 0
                cluster.shown_changed()
            operation.reason = ""
            if not free.enough:
                raise permanent(
                    ErrorType.HOSTS_UNAVAILABLE,
                    f"only {free.free} host(s) of {pool.sku} were free in {cluster.spec.location_id} "
                    f"after waiting {human(cluster.spec.join_deadline.total_seconds())}; {count} needed",
                )
            attempt += 1

    def _record(self, pool: NodePoolStatus, hosts: Sequence[Host]) -> list[NodeStatus]:
        now = workflow.now()
        new: list[NodeStatus] = []
        for host in hosts:
            self._cluster.state.hosts[host.id] = ClaimedHost(host=host, pool=pool.name)
            if any(node.host_id == host.id for node in pool.nodes):
                continue  # a repeated claim answer: already recorded
            node = NodeStatus(
                name=host.id, host_id=host.id, address=host.address, registered_at=now
            )
            pool.nodes.append(node)
            new.append(node)
        self._operation.progress.hosts_claimed += len(new)
        self._operation.progress.nodes_expected += len(new)
        return new

    async def _await_joined(self, pool: NodePoolStatus, nodes: list[NodeStatus]) -> None:
        cluster, operation = self._cluster, self._operation
        deadline = workflow.now() + cluster.spec.join_deadline
        # A Machine's Node is known by its name (from `status.nodeRef`); a host's by the host's id.
        machines = is_machine_deployment(pool)
        expected = [
            ExpectedNode(
                host_id=node.name if machines else node.host_id,
                address=node.address,
                labels=cluster.node_labels(pool, node.host_id),
                taints=[
                    NodeTaint(key=t.key, value=t.value, effect=t.effect.value) for t in pool.taints
                ],
            )
            for node in nodes
        ]
        by_host = {(node.name if machines else node.host_id): node for node in nodes}

        def seen(found: AwaitNodesResult) -> None:
            for observed in found.observed:
                node = by_host.get(observed.host_id)
                if node is None or not observed.node_name or not observed.labelled:
                    continue
                if node.state is NodeState.REGISTERED:
                    node.name = observed.node_name
                    node.state = NodeState.JOINED
                    operation.progress.nodes_joined += 1
                node.kubernetes_status = "Ready" if observed.ready else "NotReady"
            cluster.count_ready(pool)

        # What the workflow knows: the nodes as last observed, and how long `await_nodes` batches
        # changes (doubling, so a long boot costs a few returns, not one per node state).
        nothing_seen: tuple[list[ObservedNode], float] = ([], FIRST_REPORT)
        joined = await until(
            lambda known, left: AWAIT_NODES(
                AwaitNodesRequest(
                    kubeconfig=cluster.kubeconfig(),
                    expected=expected,
                    known=known[0],
                    deadline=deadline,
                    min_interval_seconds=known[1],
                ),
                wait=left,
            ),
            known=nothing_seen,
            learn=lambda found, known: (found.observed, min(known[1] * 2, LAST_REPORT)),
            settled=lambda found: (
                found.all_ready or found.deadline_passed or workflow.now() >= deadline
            ),
            deadline=deadline,
            seen=seen,
        )
        if joined.all_ready:
            return
        late = [node for node in nodes if node.kubernetes_status != "Ready"]
        await settle(self.give_back(pool, late))
        if machines:
            raise permanent(
                ErrorType.NODES_DID_NOT_JOIN,
                f"{len(late)} of {len(nodes)} new nodes of node pool '{pool.name}' were not Ready "
                f"within {human(cluster.spec.join_deadline.total_seconds())}: "
                + ", ".join(f"{node.name} (Machine {node.host_id})" for node in late)
                + "; their Machines were deleted",
            )
        hosts = ", ".join(f"{node.host_id} ({node.address})" for node in late)
        raise permanent(
            ErrorType.NODES_DID_NOT_JOIN,
            f"{len(late)} of {len(nodes)} new nodes of node pool '{pool.name}' were not Ready "
            f"within {human(cluster.spec.join_deadline.total_seconds())}: {hosts}; "
            "their hosts were released",
        )

    async def give_back(self, pool: NodePoolStatus, nodes: Sequence[NodeStatus]) -> None:
        """Remove nodes that are not (or not yet) part of the cluster without a drain (nothing of the
        user's runs there) and release their hosts, so the pool's count is what is really there."""
        if not nodes:
            return
        cluster = self._cluster
        if is_machine_deployment(pool):
            # Nothing of the user's runs there: no drain. Marked first, so CAPI deletes exactly
            # these when the count is lowered.
            supply = MachineDeploymentSupply(cluster, self._operation)
            await supply.mark(nodes)
            await supply.remove(pool, nodes)
            pool.count = len(pool.nodes)
            cluster.count_ready(pool)
            return
        await REMOVE_CLUSTER_MACHINES(
            RemoveClusterMachinesRequest(
                namespace=cluster.spec.namespace,
                name=cluster.deployment,
                addresses=[cluster.machine_ref(node) for node in nodes],
            )
        )
        for node in nodes:
            if node.state is not NodeState.REGISTERED:
                await DELETE_NODE(
                    DeleteNodeRequest(
                        kubeconfig=cluster.kubeconfig(),
                        node_name=node.name,
                        wait_until=workflow.now() + GIVE_BACK_NODE_GONE,
                    ),
                    wait=GIVE_BACK_NODE_GONE,
                )
        await cluster.release(node.host_id for node in nodes)
        for node in nodes:
            if node in pool.nodes:
                pool.nodes.remove(node)
        pool.count = len(pool.nodes)
        cluster.count_ready(pool)
