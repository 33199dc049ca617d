"""The rules an operation must pass against the cluster's state, for `ClusterWorkflow`'s update validators.

Pure and deterministic (it runs inside the workflow sandbox, in read-only validators). An operation is
checked against the cluster as the queue will leave it, so two requests that are each fine alone but
not together are refused at once rather than failing later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

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


class Problem(NamedTuple):
    """Why an operation is refused, and whether it is because what it names does not exist."""

    message: str
    not_found: bool = False


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
        return Problem(f"cluster '{cluster}' is deleted", not_found=True)
    if isinstance(request, DeleteClusterRequest):
        return None
    if state.phase is ClusterPhase.DELETING:
        return Problem(f"cluster '{cluster}' is being deleted: no other operation is accepted")
    if state.phase is ClusterPhase.CREATING:
        return Problem(
            f"cluster '{cluster}' is still being created: only delete is accepted until it is ready"
        )
    if state.phase is ClusterPhase.FAILED:
        return Problem(f"cluster '{cluster}' failed ({state.reason}): only delete is accepted")

    if isinstance(request, ScaleNodePoolRequest) and (problem := count_problem(request.count)):
        return Problem(problem)
    before = plan(state, running)
    match request:
        case AddNodePoolRequest(pool=spec) if spec.name in before:
            return Problem(f"node pool '{spec.name}' already exists in cluster '{cluster}'")
        case ScaleNodePoolRequest(pool=name) | DeleteNodePoolRequest(pool=name) if (
            name not in before
        ):
            return Problem(
                f"node pool '{name}' does not exist in cluster '{cluster}'", not_found=True
            )
        case DeleteNodeRequest(node=node):
            owner = next((p for p in before.values() if any(node in ids for ids in p.nodes)), None)
            if owner is None:
                return Problem(
                    f"node '{node}' does not exist in cluster '{cluster}'", not_found=True
                )
            if owner.count <= 1:
                return Problem(
                    f"node '{node}' is the last node of node pool '{owner.name}' and cannot be "
                    "deleted on its own: delete the pool"
                )
        case _:
            pass

    after = plan(state, running)
    _apply(after, request)
    if _without_free_node(after) and not _without_free_node(before):
        return Problem(FREE_NODE_MESSAGE.format(cluster=cluster))
    return None
