"""Where a pool's nodes come from: the seam between the cluster's plans and its pools' supplies.

A pool's nodes come either from hosts claimed from the host provider (`PoolSupply.HOSTS`: the
remote-cluster template's machines; `scale_up.ScaleUp` and `drain.NodeRemoval` as they always
were), or from the Cluster API MachineDeployment of the cluster's template
(`PoolSupply.MACHINE_DEPLOYMENT`: the cloud templates; `MachineDeploymentSupply`, here). The plans
ask the seam, `supply_of(pool)`, and everything around the supply stays one implementation for
both: the choice of nodes, the cordon, Colony's own drain with its deadline, blockers, `--force`
and `--drain=false`, the GPU-holder guard, the operation queue and the ledger.

What a machine-deployment pool does:
- **grow** (create's pool, scale up): set `workersNumber` to the pool's count (never over a value
  changed outside Colony: that is reported, `WorkersChangedOutside`), wait per node for its Machine
  and its Node (`await_machines`), then label the Nodes and wait until they are Ready
  (`await_nodes`), all under the join deadline. Machines that do not come up are given back with
  CAPI's reasons (their Machine conditions) in the failure, as a host pool gives back its hosts.
- **remove** (scale down, node delete, pool delete): before the cordon, mark the chosen nodes'
  Machines with Colony's pre-drain hook and `cluster.x-k8s.io/delete-machine`; Colony drains them;
  once every drain is over, lower `workersNumber` by the drained ones (never raising it), take the
  hook off and wait until those Machines are gone. CAPI deletes the marked Machines first, and
  cannot drain or delete one before its hook goes, so it deletes exactly the drained ones, after
  Colony's drain. A node whose drain failed is unmarked and uncordoned before anything is lowered;
  an interruption before the lowering does the same; after it, the removal is finished (hook off,
  Machine waited for). Every step is idempotent, so a worker killed anywhere repeats it safely.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from temporalio import workflow

from workflows.cluster.context import ClusterContext, human
from workflows.cluster_calls import AWAIT_MACHINES, MARK_MACHINES, SCALE_MACHINE_DEPLOYMENT
from workflows.kit.until import until

with workflow.unsafe.imports_passed_through():
    from models.activity_api import (
        AwaitMachinesRequest,
        AwaitMachinesResult,
        MachineInfo,
        MarkMachinesRequest,
        ScaleMachineDeploymentRequest,
    )
    from models.errors import ErrorType, permanent
    from models.node_pool import NodePoolStatus, NodeStatus, PoolSupply
    from models.operations import Operation

FIRST_REPORT = 1.0
LAST_REPORT = 30.0
"""Seconds `await_machines` batches changes, doubling (as `await_nodes` does)."""
MACHINES_GONE_DEADLINE = timedelta(minutes=30)
"""How long a removal waits for CAPI to delete the drained Machines (its own drain finds nothing:
Colony drained them; a cloud instance's termination takes minutes)."""


def is_machine_deployment(pool: NodePoolStatus) -> bool:
    return pool.supply is PoolSupply.MACHINE_DEPLOYMENT


class MachineDeploymentSupply:
    """A pool of the template's MachineDeployment, for one operation (module docstring)."""

    def __init__(self, cluster: ClusterContext, operation: Operation) -> None:
        self._cluster = cluster
        self._operation = operation

    # --- the size ----------------------------------------------------------------------------

    async def set_workers(self, pool: NodePoolStatus, count: int, *, only_lower: bool) -> None:
        """Write `workersNumber` (reported, never fought, when changed outside Colony)."""
        cluster = self._cluster
        expected = pool.workers_number if pool.workers_number is not None else count
        await SCALE_MACHINE_DEPLOYMENT(
            ScaleMachineDeploymentRequest(
                namespace=cluster.spec.namespace,
                name=cluster.deployment,
                owner=cluster.state.owner,
                count=count,
                expected=expected,
                only_lower=only_lower,
            )
        )
        pool.workers_number = count

    async def _await(
        self, count: int, gone: Sequence[str], deadline_in: timedelta, seen: object = None
    ) -> AwaitMachinesResult:
        cluster = self._cluster
        deadline = workflow.now() + deadline_in
        nothing: tuple[list[MachineInfo], float] = ([], FIRST_REPORT)
        return await until(
            lambda known, left: AWAIT_MACHINES(
                AwaitMachinesRequest(
                    namespace=cluster.spec.namespace,
                    cluster=cluster.deployment,
                    count=count,
                    gone=list(gone),
                    known=known[0],
                    deadline=deadline,
                    min_interval_seconds=known[1],
                ),
                wait=left,
            ),
            known=nothing,
            learn=lambda found, known: (found.machines, min(known[1] * 2, LAST_REPORT)),
            settled=lambda found: found.settled or found.deadline_passed,
            deadline=deadline,
            seen=seen if callable(seen) else lambda _: None,
        )

    # --- growing -----------------------------------------------------------------------------

    async def grow(self, pool: NodePoolStatus) -> list[NodeStatus]:
        """Bring the MachineDeployment to the pool's count and record each new Machine's Node as
        it appears; the new nodes (the caller labels them and waits until Ready). Fails with the
        Machines' own reasons when they do not get a Node within the join deadline."""
        cluster, operation = self._cluster, self._operation
        await self.set_workers(pool, pool.count, only_lower=False)
        new: list[NodeStatus] = []

        def seen(found: AwaitMachinesResult) -> None:
            known = {node.host_id for node in pool.nodes}
            for machine in found.machines:
                if machine.deleting or not machine.node_name or machine.name in known:
                    continue
                node = NodeStatus(
                    name=machine.node_name,
                    host_id=machine.name,
                    address="",
                    registered_at=workflow.now(),
                )
                pool.nodes.append(node)
                new.append(node)
                operation.progress.nodes_expected += 1

        found = await self._await(pool.count, [], cluster.spec.join_deadline, seen)
        if found.settled:
            return new
        late = [m for m in found.machines if not m.deleting and not m.node_name]
        reasons = "; ".join(f"Machine {m.name}: {m.problem or m.phase or 'no Node'}" for m in late)
        raise permanent(
            ErrorType.NODES_DID_NOT_JOIN,
            f"{len(late)} Machine(s) of node pool '{pool.name}' got no Node within "
            f"{human(cluster.spec.join_deadline.total_seconds())}: {reasons}",
        )

    # --- removing ----------------------------------------------------------------------------

    async def mark(self, nodes: Sequence[NodeStatus]) -> None:
        """Colony's pre-drain hook and delete-machine on the nodes' Machines (before the cordon)."""
        await self._mark(nodes, mark=True)

    async def unmark(self, nodes: Sequence[NodeStatus]) -> None:
        """Both marks off: the Machines stay (a failed or cancelled removal)."""
        await self._mark(nodes, mark=False)

    async def _mark(
        self, nodes: Sequence[NodeStatus], *, mark: bool, hook_only: bool = False
    ) -> None:
        if not nodes:
            return
        await MARK_MACHINES(
            MarkMachinesRequest(
                namespace=self._cluster.spec.namespace,
                cluster=self._cluster.deployment,
                machines=[node.host_id for node in nodes],
                mark=mark,
                hook_only=hook_only,
            )
        )

    async def remove(self, pool: NodePoolStatus, nodes: Sequence[NodeStatus]) -> None:
        """Lower `workersNumber` by the drained `nodes`, let their Machines go (hook off) and wait
        until they are gone; then they leave the pool."""
        if not nodes:
            return
        current = pool.workers_number if pool.workers_number is not None else len(pool.nodes)
        await self.set_workers(pool, max(current - len(nodes), 0), only_lower=True)
        await self._mark(nodes, mark=False, hook_only=True)
        await self.finish(pool, nodes)

    async def finish(self, pool: NodePoolStatus, nodes: Sequence[NodeStatus]) -> None:
        """The hook off (again: idempotent) and the Machines waited for until gone."""
        await self._mark(nodes, mark=False, hook_only=True)
        remaining = len([n for n in pool.nodes if n not in nodes])
        found = await self._await(
            pool.workers_number if pool.workers_number is not None else remaining,
            [node.host_id for node in nodes],
            MACHINES_GONE_DEADLINE,
        )
        names = {m.name for m in found.machines}
        still = [node for node in nodes if node.host_id in names]
        for node in nodes:
            if node not in still and node in pool.nodes:
                pool.nodes.remove(node)
        self._cluster.count_ready(pool)
        if still:
            raise permanent(
                ErrorType.NODE_REMOVAL_FAILED,
                "Machine(s) "
                + ", ".join(node.host_id for node in still)
                + f" still there {human(MACHINES_GONE_DEADLINE.total_seconds())} after "
                "workersNumber was lowered",
            )
