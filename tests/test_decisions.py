"""Pure decisions the workflow takes: which pods a drain evicts, which nodes go first, and which
operations the validators refuse (against the state the queue will produce)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from models.activity_api import NodeInfo, PodInfo, Toleration
from models.advice import for_command_line
from models.capacity import GpuHolder
from models.cluster import ClusterPhase, ClusterState
from models.drain import PodDrainClass, choose_nodes_to_remove, classify_pod, pods_to_evict
from models.node_pool import (
    NodePoolSpec,
    NodePoolStatus,
    NodeSku,
    NodeState,
    NodeStatus,
    Taint,
    TaintEffect,
)
from models.operations import (
    AddNodePoolRequest,
    DeleteClusterRequest,
    DeleteNodePoolRequest,
    DeleteNodeRequest,
    Operation,
    OperationRequest,
    ScaleNodePoolRequest,
)
from models.rules import gpu_holders_problem, operation_problem

# --- Pods ----------------------------------------------------------------------------------------


def pod(**extra: Any) -> PodInfo:
    return PodInfo(namespace="ns", name=extra.pop("name", "p"), **extra)


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        pytest.param(pod(controller_kind="ReplicaSet"), PodDrainClass.EVICT, id="replicaset"),
        pytest.param(pod(), PodDrainClass.EVICT, id="bare-pod"),
        pytest.param(
            pod(controller_kind="DaemonSet"), PodDrainClass.SKIP_DAEMONSET, id="daemonset"
        ),
        pytest.param(pod(mirror=True), PodDrainClass.SKIP_MIRROR, id="mirror"),
        pytest.param(pod(phase="Succeeded"), PodDrainClass.SKIP_FINISHED, id="succeeded"),
        pytest.param(pod(phase="Failed"), PodDrainClass.SKIP_FINISHED, id="failed"),
        pytest.param(
            pod(
                tolerations=[Toleration(key="node.kubernetes.io/unschedulable", operator="Exists")]
            ),
            PodDrainClass.SKIP_TOLERATES_CORDON,
            id="tolerates-cordon",
        ),
        pytest.param(
            pod(
                tolerations=[
                    Toleration(
                        key="node.kubernetes.io/unschedulable",
                        operator="Exists",
                        effect="NoSchedule",
                    )
                ]
            ),
            PodDrainClass.SKIP_TOLERATES_CORDON,
            id="tolerates-cordon-noschedule",
        ),
        pytest.param(
            pod(tolerations=[Toleration(operator="Exists")]),
            PodDrainClass.SKIP_TOLERATES_CORDON,
            id="tolerates-everything",
        ),
        pytest.param(
            pod(
                tolerations=[
                    Toleration(
                        key="node.kubernetes.io/unschedulable",
                        operator="Exists",
                        effect="NoExecute",
                    )
                ]
            ),
            PodDrainClass.EVICT,
            id="wrong-effect",
        ),
        pytest.param(
            pod(tolerations=[Toleration(key="nvidia.com/gpu", operator="Exists")]),
            PodDrainClass.EVICT,
            id="other-toleration",
        ),
    ],
)
def test_classify_pod(info: PodInfo, expected: PodDrainClass) -> None:
    assert classify_pod(info) is expected


def test_pods_to_evict_keeps_evictable_in_stable_order() -> None:
    pods = [
        pod(name="b"),
        pod(name="ds", controller_kind="DaemonSet"),
        pod(name="a", terminating=True),
    ]
    assert [p.name for p in pods_to_evict(pods)] == ["a", "b"]


# --- Nodes ---------------------------------------------------------------------------------------


def node(name: str, *, ready: bool = True, pods: int = 0, minute: int = 0) -> NodeInfo:
    return NodeInfo(
        name=name,
        ready=ready,
        evictable_pod_count=pods,
        created_at=datetime(2025, 1, 1, 0, minute, tzinfo=UTC),
    )


@pytest.mark.parametrize(
    ("nodes", "count", "expected"),
    [
        pytest.param(
            [node("a", pods=0), node("b", ready=False, pods=9)], 1, ["b"], id="not-ready-first"
        ),
        pytest.param(
            [node("a", pods=3), node("b", pods=1), node("c", pods=2)],
            2,
            ["b", "c"],
            id="fewest-pods",
        ),
        pytest.param(
            [node("old", pods=1, minute=1), node("new", pods=1, minute=9)],
            1,
            ["new"],
            id="newest-on-a-tie",
        ),
        pytest.param([node("b"), node("a")], 1, ["a"], id="name-breaks-full-ties"),
        pytest.param([node("a")], 0, [], id="none"),
        pytest.param([node("a")], 5, ["a"], id="more-than-there-are"),
    ],
)
def test_choose_nodes_to_remove(nodes: list[NodeInfo], count: int, expected: list[str]) -> None:
    assert [n.name for n in choose_nodes_to_remove(nodes, count)] == expected


# --- Validation against the planned state --------------------------------------------------------

GPU = NodeSku(gpu_model_id="h100")
NO_EXECUTE = [Taint(key="dedicated", effect=TaintEffect.NO_EXECUTE)]


def pool_status(name: str, nodes: int, taints: list[Taint] | None = None) -> NodePoolStatus:
    return NodePoolStatus(
        name=name,
        sku=GPU,
        count=nodes,
        taints=taints or [],
        nodes=[
            NodeStatus(
                name=f"{name}-{i}",
                host_id=f"h-{name}-{i}",
                address=f"10.0.0.{i}",
                state=NodeState.JOINED,
            )
            for i in range(nodes)
        ],
    )


def state(
    *pools: NodePoolStatus,
    phase: ClusterPhase = ClusterPhase.READY,
    queue: Sequence[OperationRequest] = (),
) -> ClusterState:
    return ClusterState(
        phase=phase,
        reason="boom" if phase is ClusterPhase.FAILED else "",
        node_pools=list(pools),
        queue=[Operation(id=f"op-{i}", request=request) for i, request in enumerate(queue)],
    )


def add(name: str, count: int = 1, taints: list[Taint] | None = None) -> AddNodePoolRequest:
    return AddNodePoolRequest(
        pool=NodePoolSpec(name=name, sku=GPU, count=count, taints=taints or [])
    )


FREE = (
    "cluster 'c' would have no node free of NoSchedule and NoExecute taints; "
    "the GPU operator, MPI operator and cluster DNS need one: keep at least one pool without such taints"
)


@pytest.mark.parametrize(
    ("cluster", "request_", "message"),
    [
        pytest.param(
            state(phase=ClusterPhase.DELETED),
            DeleteClusterRequest(),
            "cluster 'c' is deleted",
            id="deleted",
        ),
        pytest.param(
            state(phase=ClusterPhase.DELETING),
            add("x"),
            "cluster 'c' is being deleted: no other operation is accepted",
            id="deleting",
        ),
        pytest.param(
            state(phase=ClusterPhase.CREATING),
            add("x"),
            "cluster 'c' is still being created: only delete is accepted until it is ready",
            id="creating",
        ),
        pytest.param(
            state(phase=ClusterPhase.FAILED),
            add("x"),
            "cluster 'c' failed (boom): only delete is accepted",
            id="failed",
        ),
        pytest.param(
            state(pool_status("gpu", 2)),
            ScaleNodePoolRequest(pool="cpu", count=1),
            "node pool 'cpu' does not exist in cluster 'c' (its node pools: gpu)",
            id="scale-unknown-pool",
        ),
        pytest.param(
            state(pool_status("gpu", 2)),
            # Built without validation, as a raw API client could; the rule still holds.
            ScaleNodePoolRequest.model_construct(pool="gpu", count=101),
            "a node pool's count must be from 1 to 100, got 101",
            id="count-out-of-range",
        ),
        pytest.param(
            state(pool_status("gpu", 2)),
            DeleteNodePoolRequest(pool="cpu"),
            "node pool 'cpu' does not exist in cluster 'c' (its node pools: gpu)",
            id="delete-unknown-pool",
        ),
        pytest.param(
            state(pool_status("gpu", 2)),
            DeleteNodeRequest(node="nope"),
            "node 'nope' does not exist in cluster 'c'",
            id="unknown-node",
        ),
        pytest.param(
            state(pool_status("gpu", 1)),
            DeleteNodeRequest(node="gpu-0"),
            "node 'gpu-0' is the last node of node pool 'gpu' and cannot be deleted on its own: delete the pool",
            id="last-node",
        ),
        pytest.param(
            state(pool_status("gpu", 1)),
            DeleteNodeRequest(node="h-gpu-0"),
            "node 'h-gpu-0' is the last node of node pool 'gpu' and cannot be deleted on its own: delete the pool",
            id="last-node-by-host-id",
        ),
        pytest.param(
            state(pool_status("gpu", 1)),
            add("gpu"),
            "node pool 'gpu' already exists in cluster 'c'",
            id="duplicate",
        ),
        pytest.param(
            state(pool_status("gpu", 1), pool_status("tainted", 1, NO_EXECUTE)),
            DeleteNodePoolRequest(pool="gpu"),
            FREE,
            id="delete-last-free-pool",
        ),
        pytest.param(state(), add("tainted", taints=NO_EXECUTE), FREE, id="first-pool-tainted"),
        # Against the queue: what is queued counts.
        pytest.param(
            state(pool_status("gpu", 1), queue=[add("cpu")]),
            add("cpu"),
            "node pool 'cpu' already exists in cluster 'c'",
            id="queued-duplicate",
        ),
        pytest.param(
            state(
                pool_status("gpu", 1),
                pool_status("cpu", 1),
                queue=[DeleteNodePoolRequest(pool="cpu")],
            ),
            ScaleNodePoolRequest(pool="cpu", count=3),
            "node pool 'cpu' does not exist in cluster 'c' (its node pools: gpu)",
            id="queued-delete",
        ),
        pytest.param(
            state(pool_status("gpu", 3), queue=[ScaleNodePoolRequest(pool="gpu", count=1)]),
            DeleteNodeRequest(node="gpu-2"),
            "node 'gpu-2' is the last node of node pool 'gpu' and cannot be deleted on its own: delete the pool",
            id="queued-scale-down",
        ),
        pytest.param(
            state(pool_status("gpu", 2), queue=[DeleteNodeRequest(node="gpu-0")]),
            DeleteNodeRequest(node="gpu-0"),
            "node 'gpu-0' does not exist in cluster 'c'",
            id="queued-node-delete",
        ),
    ],
)
def test_operation_problem(
    cluster: ClusterState, request_: OperationRequest, message: str | None
) -> None:
    problem = operation_problem("c", cluster, None, request_)
    assert (problem.message if problem else None) == message
    # A refusal because something does not exist says so in a form clients read without parsing.
    gone = "does not exist" in (message or "") or (message or "").endswith("is deleted")
    assert (problem.not_found if problem else False) == gone


@pytest.mark.parametrize(
    "request_",
    [
        pytest.param(add("cpu", 2), id="add"),
        pytest.param(ScaleNodePoolRequest(pool="gpu", count=100), id="scale"),
        pytest.param(DeleteNodeRequest(node="gpu-1"), id="delete-node"),
        pytest.param(DeleteNodePoolRequest(pool="gpu"), id="delete-only-pool"),
        pytest.param(DeleteClusterRequest(), id="delete-cluster"),
    ],
)
def test_accepted_operations(request_: OperationRequest) -> None:
    assert operation_problem("c", state(pool_status("gpu", 2)), None, request_) is None


@pytest.mark.parametrize(
    "phase",
    [
        pytest.param(p, id=p.value)
        for p in (ClusterPhase.CREATING, ClusterPhase.FAILED, ClusterPhase.DELETING)
    ],
)
def test_delete_is_accepted_in_every_open_phase(phase: ClusterPhase) -> None:
    assert operation_problem("c", state(phase=phase), None, DeleteClusterRequest()) is None


def test_the_running_operation_is_not_counted_twice() -> None:
    # A running node delete has already lowered the count and marked its node.
    pool = pool_status("gpu", 3)
    pool.count = 2
    pool.nodes[0].removed_by = "op-1"
    running = Operation(id="op-1", request=DeleteNodeRequest(node="gpu-0"))
    assert operation_problem("c", state(pool), running, DeleteNodeRequest(node="gpu-1")) is None
    refused = operation_problem("c", state(pool), running, DeleteNodeRequest(node="gpu-0"))
    assert refused is not None
    assert refused.message == ("node 'gpu-0' does not exist in cluster 'c'")


def test_an_unknown_pool_of_a_cluster_without_pools_says_so() -> None:
    problem = operation_problem("c", state(), None, DeleteNodePoolRequest(pool="gpu"))
    assert problem is not None
    assert problem.message == "node pool 'gpu' does not exist in cluster 'c' (it has no node pools)"


HOLDERS = [
    GpuHolder(workspace="nb", request_id="r", gpus=1, nodes=["gpu-0"]),
    GpuHolder(workspace="nb", request_id="r", gpus=1, nodes=["gpu-1"]),
]
"""Both nodes of pool gpu hold GPUs of workspace nb."""
TAKES = "would take GPUs from running workspaces: nb; delete or suspend them first, or "


@pytest.mark.parametrize(
    ("request_", "field", "what"),
    [
        pytest.param(
            ScaleNodePoolRequest(pool="gpu", count=1),
            "count",
            "scaling node pool 'gpu' of cluster 'c' to 1",
            id="scale-down",
        ),
        pytest.param(
            DeleteNodePoolRequest(pool="gpu"),
            "pool",
            "deleting node pool 'gpu' of cluster 'c'",
            id="delete-pool",
        ),
        pytest.param(DeleteNodeRequest(node="gpu-0"), "node", "deleting node 'gpu-0'", id="node"),
    ],
)
def test_taking_running_workspaces_gpus_names_its_field_and_the_option_that_forces_it(
    request_: OperationRequest, field: str, what: str
) -> None:
    problem = gpu_holders_problem("c", state(pool_status("gpu", 2)), request_, HOLDERS)
    assert problem is not None
    assert problem.field == field
    # The API's words; colonyctl names its flag.
    assert problem.message == (
        f"{what} {TAKES}set force to true (they go back to waiting for GPUs)"
    )
    assert for_command_line(problem.message) == (
        f"{what} {TAKES}add --force (they go back to waiting for GPUs)"
    )
    forced = request_.model_copy(update={"force": True})
    assert gpu_holders_problem("c", state(pool_status("gpu", 2)), forced, HOLDERS) is None
