"""Tests of the sim's scheduler on a bare store: filters, accounting, Unschedulable and retries."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest

from sim.apiserver.errors import ApiError
from sim.apiserver.registry import NODES, PODS
from sim.apiserver.store import ClusterStore
from sim.controllers.scheduler import Scheduler, parse_quantity, pod_requests
from tests.helpers import eventually, unique


def node(
    name: str,
    *,
    cpu: str = "16",
    memory: str = "64Gi",
    gpus: int = 0,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    ready: bool = True,
) -> dict[str, Any]:
    capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(
    name: str,
    *,
    cpu: str = "1",
    memory: str = "1Gi",
    gpus: int = 0,
    node_selector: dict[str, str] | None = None,
    tolerations: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": memory}
    limits: dict[str, str] = {}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {
        "containers": [
            {"name": "main", "image": "x", "resources": {"requests": requests, "limits": limits}}
        ]
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    return {"metadata": {"name": name, "namespace": "default"}, "spec": spec}


@pytest.fixture
async def store() -> AsyncIterator[ClusterStore]:
    cluster = ClusterStore(unique("sched"))
    task = asyncio.create_task(Scheduler(cluster).run())
    try:
        yield cluster
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def bound_node(store: ClusterStore, name: str) -> str:
    async def probe() -> str:
        return str(store.get(PODS, "default", name)["spec"].get("nodeName") or "")

    return await eventually(probe, what=f"pod {name} bound")


async def unschedulable_message(store: ClusterStore, name: str) -> str:
    async def probe() -> str:
        for condition in store.get(PODS, "default", name).get("status", {}).get("conditions", []):
            if condition["type"] == "PodScheduled" and condition["status"] == "False":
                assert condition["reason"] == "Unschedulable"
                return str(condition["message"])
        return ""

    return await eventually(probe, what=f"pod {name} Unschedulable")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("100m", Decimal("0.1"), id="milli"),
        pytest.param("8Gi", Decimal(8 * 2**30), id="gibi"),
        pytest.param("2", Decimal(2), id="plain"),
        pytest.param(3, Decimal(3), id="int"),
        pytest.param("1e3", Decimal(1000), id="exponent"),
        pytest.param("1.5G", Decimal(1_500_000_000), id="giga"),
    ],
)
def test_parse_quantity(value: Any, expected: Decimal) -> None:
    assert parse_quantity(value) == expected


def test_requests_default_to_limits_and_init_containers_count_as_max() -> None:
    spec = pod("p", cpu="1", gpus=2)
    spec["spec"]["initContainers"] = [
        {"name": "init", "resources": {"requests": {"cpu": "3", "memory": "1Mi"}}}
    ]
    requests = pod_requests(spec)
    assert requests["nvidia.com/gpu"] == 2
    assert requests["cpu"] == 3


@pytest.mark.parametrize(
    ("nodes", "the_pod", "expected_node", "reason"),
    [
        pytest.param([node("gpu", gpus=8)], pod("p", gpus=8), "gpu", None, id="gpu-fits"),
        pytest.param(
            [node("gpu", gpus=8)],
            pod("p", gpus=9),
            None,
            "Insufficient nvidia.com/gpu",
            id="gpu-too-many",
        ),
        pytest.param(
            [node("cpu-only")],
            pod("p", gpus=1),
            None,
            "Insufficient nvidia.com/gpu",
            id="no-gpu-node",
        ),
        pytest.param(
            [node("small", cpu="2")], pod("p", cpu="3"), None, "Insufficient cpu", id="cpu-too-many"
        ),
        pytest.param(
            [node("small", memory="1Gi")],
            pod("p", memory="2Gi"),
            None,
            "Insufficient memory",
            id="memory",
        ),
        pytest.param(
            [node("cordoned", unschedulable=True), node("open")],
            pod("p"),
            "open",
            None,
            id="cordon-skipped",
        ),
        pytest.param(
            [node("cordoned", unschedulable=True)],
            pod("p"),
            None,
            "node(s) were unschedulable",
            id="cordon-only",
        ),
        pytest.param(
            [node("down", ready=False)],
            pod("p"),
            None,
            "node.kubernetes.io/not-ready",
            id="not-ready",
        ),
        pytest.param(
            [node("tainted", taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}])],
            pod("p"),
            None,
            "untolerated taint {gpu: yes}",
            id="taint-untolerated",
        ),
        pytest.param(
            [node("tainted", taints=[{"key": "gpu", "value": "yes", "effect": "NoExecute"}])],
            pod("p", tolerations=[{"key": "gpu", "operator": "Equal", "value": "yes"}]),
            "tainted",
            None,
            id="taint-tolerated",
        ),
        pytest.param(
            [node("soft", taints=[{"key": "gpu", "effect": "PreferNoSchedule"}])],
            pod("p"),
            "soft",
            None,
            id="prefer-no-schedule-ignored",
        ),
        pytest.param(
            [node("h100", gpus=8, labels={"nvidia.com/gpu.product": "H100"}), node("l40", gpus=8)],
            pod("p", gpus=1, node_selector={"nvidia.com/gpu.product": "H100"}),
            "h100",
            None,
            id="node-selector-match",
        ),
        pytest.param(
            [node("l40", gpus=8, labels={"nvidia.com/gpu.product": "L40"})],
            pod("p", gpus=1, node_selector={"nvidia.com/gpu.product": "H100"}),
            None,
            "didn't match Pod's node affinity/selector",
            id="node-selector-mismatch",
        ),
    ],
)
async def test_filters(
    store: ClusterStore,
    nodes: list[dict[str, Any]],
    the_pod: dict[str, Any],
    expected_node: str | None,
    reason: str | None,
) -> None:
    for item in nodes:
        store.create(NODES, item)
    store.create(PODS, the_pod)
    if expected_node is not None:
        assert await bound_node(store, "p") == expected_node
    else:
        assert reason is not None
        message = await unschedulable_message(store, "p")
        assert message.startswith(f"0/{len(nodes)} nodes are available")
        assert reason in message
        assert not store.get(PODS, "default", "p")["spec"].get("nodeName")


async def test_requests_of_bound_pods_are_accounted(store: ClusterStore) -> None:
    store.create(NODES, node("gpu", gpus=8))
    store.create(PODS, pod("first", gpus=5))
    assert await bound_node(store, "first") == "gpu"
    store.create(PODS, pod("second", gpus=5))
    assert "Insufficient nvidia.com/gpu" in await unschedulable_message(store, "second")


async def test_unschedulable_pod_retried_when_a_node_joins(store: ClusterStore) -> None:
    store.create(PODS, pod("waiting", gpus=4))
    await unschedulable_message(store, "waiting")
    store.create(NODES, node("late", gpus=4))
    assert await bound_node(store, "waiting") == "late"


async def test_unschedulable_pod_retried_when_capacity_frees(store: ClusterStore) -> None:
    store.create(NODES, node("gpu", gpus=8))
    store.create(PODS, pod("hog", gpus=8))
    await bound_node(store, "hog")
    store.create(PODS, pod("next", gpus=2))
    await unschedulable_message(store, "next")
    store.delete(PODS, "default", "hog", grace_period_seconds=0)
    assert await bound_node(store, "next") == "gpu"


async def test_uncordon_lets_pending_pods_in(store: ClusterStore) -> None:
    store.create(NODES, node("n", unschedulable=True))
    store.create(PODS, pod("p"))
    await unschedulable_message(store, "p")
    store.mutate(NODES, None, "n", lambda n: n["spec"].pop("unschedulable"))
    assert await bound_node(store, "p") == "n"


async def test_least_allocated_spreads_pods(store: ClusterStore) -> None:
    store.create(NODES, node("a", cpu="8"))
    store.create(NODES, node("b", cpu="8"))
    store.create(PODS, pod("p1", cpu="4"))
    first = await bound_node(store, "p1")
    store.create(PODS, pod("p2", cpu="4"))
    second = await bound_node(store, "p2")
    assert {first, second} == {"a", "b"}


async def test_gpus_of_pods_placed_by_others_are_accounted(store: ClusterStore) -> None:
    """GPUs held by pods the scheduler never placed (spec.nodeName set by their creator, or by
    another scheduler) count against the node like any other, and so do pods still terminating."""
    store.create(NODES, node("gpu-1", gpus=8))
    direct = pod("direct", gpus=5)
    direct["spec"]["nodeName"] = "gpu-1"
    store.create(PODS, direct)
    other = pod("other-scheduler", gpus=2)
    other["spec"]["schedulerName"] = "volcano"
    store.create(PODS, other)
    store.bind("default", "other-scheduler", "gpu-1")
    store.create(PODS, pod("wants-two", gpus=2))
    message = await unschedulable_message(store, "wants-two")
    assert "1 Insufficient nvidia.com/gpu" in message
    store.create(PODS, pod("wants-one", gpus=1))
    assert await bound_node(store, "wants-one") == "gpu-1"


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        pytest.param(
            {"requests": {"nvidia.com/gpu": "1"}},
            "Required value: Limit must be set for non overcommitable resources",
            id="request-without-limit",
        ),
        pytest.param(
            {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}},
            'Invalid value: "1": must be equal to nvidia.com/gpu limit of 2',
            id="request-below-limit",
        ),
        pytest.param(
            {"limits": {"nvidia.com/gpu": "500m"}},
            'Invalid value: "500m": must be an integer',
            id="fraction",
        ),
    ],
)
def test_gpu_requests_are_validated_like_kube(resources: dict[str, Any], message: str) -> None:
    cluster = ClusterStore(unique("validate"))
    spec = {"containers": [{"name": "c", "image": "x", "resources": resources}]}
    with pytest.raises(ApiError) as err:
        cluster.create(PODS, {"metadata": {"name": "p"}, "spec": spec})
    assert err.value.code == 422
    assert message in err.value.message


@pytest.mark.parametrize(
    ("resources", "qos"),
    [
        pytest.param({}, "BestEffort", id="best-effort"),
        pytest.param({"limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}}, "Guaranteed", id="limits-only"),
        pytest.param({"requests": {"cpu": "1"}}, "Burstable", id="requests-only"),
        pytest.param({"limits": {"nvidia.com/gpu": "1"}}, "BestEffort", id="gpu-only"),
    ],
)  # fmt: skip
def test_limits_default_requests_and_set_the_qos_class(resources: dict[str, Any], qos: str) -> None:
    cluster = ClusterStore(unique("defaults"))
    spec = {"containers": [{"name": "c", "image": "x", "resources": resources}]}
    created = cluster.create(PODS, {"metadata": {"name": "p"}, "spec": spec})
    got = created["spec"]["containers"][0]["resources"]
    assert got.get("requests", {}) == {
        **resources.get("limits", {}),
        **resources.get("requests", {}),
    }
    assert created["status"]["qosClass"] == qos
    # DefaultTolerationSeconds: 300 s on a not-ready or unreachable node before eviction.
    assert {(t["key"], t["tolerationSeconds"]) for t in created["spec"]["tolerations"]} == {
        ("node.kubernetes.io/not-ready", 300),
        ("node.kubernetes.io/unreachable", 300),
    }


def test_a_pass_copies_only_the_pending_pods(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scheduling pass runs on every pod change: it reads the store's bound pods in place and
    copies only those it may bind (copying all 1,000 pods of a drained pool's cluster per change
    was nine tenths of the simulator's time in `bench.drain_scale`)."""
    from sim.apiserver import store as store_module
    from sim.controllers import scheduler as scheduler_module

    bare = ClusterStore(unique("copies"))
    bare.create(NODES, node("n1", cpu="64"))
    for index in range(50):
        placed = pod(f"bound-{index}", cpu="10m")
        placed["spec"]["nodeName"] = "n1"
        bare.create(PODS, placed)
    bare.create(PODS, pod("waiting", cpu="10m"))
    copied: list[str] = []
    original = store_module.clone

    def counting(value: Any) -> Any:
        if isinstance(value, dict):
            copied.append(str((value.get("metadata") or {}).get("name", "")))
        return original(value)

    monkeypatch.setattr(store_module, "clone", counting)
    monkeypatch.setattr(scheduler_module, "clone", counting)
    assert Scheduler(bare).schedule_pending() == 1
    assert "waiting" in copied
    assert not [name for name in copied if name.startswith("bound-")]
