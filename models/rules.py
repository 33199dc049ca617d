"""The rules an operation must pass against the cluster's state, for `ClusterWorkflow`'s update validators.

Pure and deterministic (it runs inside the workflow sandbox, in read-only validators). An operation is
checked against the cluster as the queue will leave it, so two requests that are each fine alone but
not together are refused at once rather than failing later.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from models.advice import set_option
from models.capacity import GpuHolder
from models.cluster import (
    FREE_NODE_MESSAGE,
    ClusterPhase,
    ClusterState,
    cluster_without_free_node,
)
from models.node_pool import count_problem
from models.operations import (
    AddNodePoolRequest,
    DeleteClusterRequest,
    DeleteNodePoolRequest,
    DeleteNodeRequest,
    Operation,
    OperationRequest,
    ScaleNodePoolRequest,
)


@dataclass
class PlannedPool:
    """A pool as the accepted operations will leave it."""

    name: str
    count: int
    untainted: bool
    nodes: list[set[str]] = field(default_factory=list)
    """Each node's identities (its Kubernetes name and its host id)."""


def _apply(pools: dict[str, PlannedPool], request: OperationRequest) -> None:
    # Idempotent for the running operation, which has already marked its own effects on the state.
    match request:
        case AddNodePoolRequest(pool=spec):
            pools.setdefault(
                spec.name, PlannedPool(spec.name, spec.count, spec.schedulable_for_system_pods)
            )
        case ScaleNodePoolRequest(pool=name, count=count) if name in pools:
            pools[name].count = count
        case DeleteNodePoolRequest(pool=name):
            pools.pop(name, None)
        case DeleteNodeRequest(node=node):
            for pool in pools.values():
                for ids in pool.nodes:
                    if node in ids:
                        pool.nodes.remove(ids)
                        pool.count -= 1
                        return
        case DeleteClusterRequest():
            pools.clear()
        case _:
            pass


def plan(state: ClusterState, running: Operation | None) -> dict[str, PlannedPool]:
    """The pools once the running operation and the queue are done, assuming they succeed."""
    pools = {
        pool.name: PlannedPool(
            name=pool.name,
            count=pool.count,
            untainted=pool.schedulable_for_system_pods,
            nodes=[{node.name, node.host_id} for node in pool.nodes if not node.removed_by],
        )
        for pool in state.node_pools
    }
    for operation in [*([running] if running else []), *state.queue]:
        _apply(pools, operation.request)
    return pools


def unknown_pool(cluster: str, pool: str, pools: Iterable[str]) -> str:
    """The refusal of a node pool the cluster does not have, naming those it has (the workflow's
    validators and the HTTP API say it alike)."""
    names = sorted(pools)
    have = f"its node pools: {', '.join(names)}" if names else "it has no node pools"
    return f"node pool '{pool}' does not exist in cluster '{cluster}' ({have})"


class Problem(NamedTuple):
    """Why an operation is refused, whether it is because what it names does not exist, and the
    request field it is about."""

    message: str
    not_found: bool = False
    field: str = ""


def _without_free_node(pools: dict[str, PlannedPool]) -> bool:
    return cluster_without_free_node((pool.count, pool.untainted) for pool in pools.values())


def operation_problem(
    cluster: str, state: ClusterState, running: Operation | None, request: OperationRequest
) -> Problem | None:
    """Why `request` is refused for the cluster in `state`, or None when it may be queued.

    Args:
        cluster: the cluster's name, for the message.
        state: the workflow's state (queue included).
        running: the operation running now, if any.
        request: the operation asked for.
    """
    if state.phase is ClusterPhase.DELETED:
        return Problem(f"cluster '{cluster}' is deleted", not_found=True, field="cluster")
    if isinstance(request, DeleteClusterRequest):
        return None
    if state.phase is ClusterPhase.DELETING:
        return Problem(
            f"cluster '{cluster}' is being deleted: no other operation is accepted",
            field="cluster",
        )
    if state.phase is ClusterPhase.CREATING:
        return Problem(
            f"cluster '{cluster}' is still being created: only delete is accepted until it is "
            "ready",
            field="cluster",
        )
    if state.phase is ClusterPhase.FAILED:
        return Problem(
            f"cluster '{cluster}' failed ({state.reason}): only delete is accepted",
            field="cluster",
        )

    if isinstance(request, ScaleNodePoolRequest) and (problem := count_problem(request.count)):
        return Problem(problem, field="count")
    before = plan(state, running)
    match request:
        case AddNodePoolRequest(pool=spec) if spec.name in before:
            return Problem(
                f"node pool '{spec.name}' already exists in cluster '{cluster}'", field="name"
            )
        case ScaleNodePoolRequest(pool=name) | DeleteNodePoolRequest(pool=name) if (
            name not in before
        ):
            return Problem(unknown_pool(cluster, name, before), not_found=True, field="pool")
        case DeleteNodeRequest(node=node):
            owner = next((p for p in before.values() if any(node in ids for ids in p.nodes)), None)
            if owner is None:
                return Problem(
                    f"node '{node}' does not exist in cluster '{cluster}'",
                    not_found=True,
                    field="node",
                )
            if owner.count <= 1:
                return Problem(
                    f"node '{node}' is the last node of node pool '{owner.name}' and cannot be "
                    "deleted on its own: delete the pool",
                    field="node",
                )
        case _:
            pass

    after = plan(state, running)
    _apply(after, request)
    if _without_free_node(after) and not _without_free_node(before):
        return Problem(
            FREE_NODE_MESSAGE.format(cluster=cluster), field=_FREE_NODE_FIELDS[type(request)]
        )
    return None


_FREE_NODE_FIELDS: dict[type, str] = {
    AddNodePoolRequest: "taints",
    ScaleNodePoolRequest: "count",
    DeleteNodePoolRequest: "pool",
    DeleteNodeRequest: "node",
}
"""What an operation that would leave no node free of taints changes: the field it is refused on."""


def gpu_holders_problem(
    cluster: str,
    state: ClusterState,
    request: OperationRequest,
    holders: list[GpuHolder],
) -> Problem | None:
    """Why `request` would take GPUs that running workspaces hold, or None.

    A scale-down removes nodes without holders first (`workflows/cluster_drain.py`), so it is
    refused only when the pool has fewer such nodes than it removes; deleting a pool, or a node,
    is refused when a workspace holds GPUs there. `force` (on each of them) lets it through: the
    nodes are drained and their workspaces go back to waiting for GPUs.

    Args:
        cluster: the cluster's name, for the message.
        state: the cluster's state (its pools and nodes).
        request: the operation asked for.
        holders: which workspaces hold GPUs on which nodes (the ledger's last report).
    """
    if not holders or getattr(request, "force", False):
        return None
    held_on = {node: [h for h in holders if node in h.nodes] for h in holders for node in h.nodes}

    def refusal(what: str, nodes: list[str], field: str) -> Problem:
        named = sorted({h.workspace for node in nodes for h in held_on.get(node, [])})
        return Problem(
            f"{what} would take GPUs from running workspaces: {', '.join(named)}; delete or "
            f"suspend them first, or {set_option('force')} (they go back to waiting for GPUs)",
            field=field,
        )

    match request:
        case ScaleNodePoolRequest(pool=name, count=count):
            pool = state.pool(name)
            if pool is None:
                return None
            nodes = [node.name for node in pool.nodes if not node.removed_by]
            free = [node for node in nodes if node not in held_on]
            if len(nodes) - count > len(free):
                return refusal(
                    f"scaling node pool '{name}' of cluster '{cluster}' to {count}",
                    [n for n in nodes if n in held_on],
                    "count",
                )
        case DeleteNodePoolRequest(pool=name):
            pool = state.pool(name)
            held = [node.name for node in pool.nodes if node.name in held_on] if pool else []
            if held:
                return refusal(f"deleting node pool '{name}' of cluster '{cluster}'", held, "pool")
        case DeleteNodeRequest(node=node):
            for pool in state.node_pools:
                for status in pool.nodes:
                    if node in (status.name, status.host_id) and status.name in held_on:
                        return refusal(f"deleting node '{node}'", [status.name], "node")
        case _:
            pass
    return None
