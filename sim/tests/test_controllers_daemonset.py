"""Tests of the DaemonSet and Deployment controllers with the scheduler and kubelet on a bare store."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sim.apiserver.registry import DAEMONSETS, DEPLOYMENTS, NODES, PODS
from sim.apiserver.store import ClusterStore
from sim.controllers.daemonset import DaemonSetController, DeploymentController
from sim.controllers.kubelet import Kubelet
from sim.controllers.scheduler import Scheduler
from sim.tests.test_controllers_scheduler import node
from sim.timing import SimTiming
from tests.helpers import eventually, unique


@pytest.fixture
async def store() -> AsyncIterator[ClusterStore]:
    cluster = ClusterStore(unique("ds"))
    controllers: list[Scheduler | Kubelet | DaemonSetController | DeploymentController] = [
        Scheduler(cluster),
        Kubelet(cluster, SimTiming.instant()),
        DaemonSetController(cluster),
        DeploymentController(cluster),
    ]
    tasks = [asyncio.create_task(c.run()) for c in controllers]
    try:
        yield cluster
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def daemonset(name: str, *, node_selector: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "agent", "image": "x", "resources": {"requests": {"cpu": "100m"}}}]
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


def owned_pods(store: ClusterStore, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
    pods, _ = store.list(PODS, namespace)
    return [
        p
        for p in pods
        if any(
            r.get("kind") == kind and r.get("name") == name and r.get("controller")
            for r in p["metadata"].get("ownerReferences") or []
        )
        and not p["metadata"].get("deletionTimestamp")
    ]


async def pods_by_node(store: ClusterStore, name: str, expected: set[str]) -> dict[str, Any]:
    async def probe() -> dict[str, Any]:
        return {
            p["spec"].get("nodeName"): p
            for p in owned_pods(store, "kube-system", "DaemonSet", name)
            if p["status"].get("phase") == "Running"
        }

    return await eventually(
        probe,
        until=lambda got: (
            set(got) == expected
            and len(owned_pods(store, "kube-system", "DaemonSet", name)) == len(expected)
        ),
        what=f"daemonset {name} pods on {sorted(expected)}",
    )


async def test_one_pod_per_eligible_node_with_owner_and_status(store: ClusterStore) -> None:
    name = unique("agent")
    store.create(NODES, node(f"{name}-a"))
    store.create(NODES, node(f"{name}-b", unschedulable=True))  # cordoned: still gets its pod
    store.create(NODES, node(f"{name}-c", ready=False))  # NotReady: none
    store.create(
        NODES,
        node(f"{name}-d", taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]),
    )
    store.create(DAEMONSETS, daemonset(name))
    pods = await pods_by_node(store, name, {f"{name}-a", f"{name}-b"})
    ref = pods[f"{name}-a"]["metadata"]["ownerReferences"][0]
    assert ref["kind"] == "DaemonSet"
    assert ref["controller"] is True
    tolerated = {t.get("key") for t in pods[f"{name}-a"]["spec"]["tolerations"]}
    assert "node.kubernetes.io/unschedulable" in tolerated

    async def status() -> dict[str, Any]:
        return dict(store.get(DAEMONSETS, "kube-system", name).get("status") or {})

    got = await eventually(status, until=lambda s: s.get("numberReady") == 2)
    assert got["desiredNumberScheduled"] == 2
    assert got["currentNumberScheduled"] == 2


async def test_follows_nodes_joining_readying_and_leaving(store: ClusterStore) -> None:
    name = unique("agent")
    store.create(DAEMONSETS, daemonset(name, node_selector={"role": "gpu"}))
    store.create(NODES, node(f"{name}-gpu", labels={"role": "gpu"}, ready=False))
    store.create(NODES, node(f"{name}-cpu"))
    await pods_by_node(store, name, set())

    def set_ready(obj: dict[str, Any]) -> None:
        obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]

    store.mutate(NODES, None, f"{name}-gpu", set_ready)
    await pods_by_node(store, name, {f"{name}-gpu"})
    store.delete(NODES, None, f"{name}-gpu")
    await pods_by_node(store, name, set())


async def test_deleted_daemon_pod_is_recreated(store: ClusterStore) -> None:
    name = unique("agent")
    store.create(NODES, node(f"{name}-a"))
    store.create(DAEMONSETS, daemonset(name))
    pods = await pods_by_node(store, name, {f"{name}-a"})
    old = pods[f"{name}-a"]["metadata"]["name"]
    store.delete(PODS, "kube-system", old, grace_period_seconds=0)
    pods = await pods_by_node(store, name, {f"{name}-a"})
    assert pods[f"{name}-a"]["metadata"]["name"] != old


async def test_deployment_scales_and_reports_ready(store: ClusterStore) -> None:
    name = unique("web")
    store.create(NODES, node(f"{name}-n", cpu="8"))
    store.create(
        DEPLOYMENTS,
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "containers": [
                            {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}
                        ]
                    },
                },
            },
        },
    )

    async def status() -> dict[str, Any]:
        return dict(store.get(DEPLOYMENTS, "default", name).get("status") or {})

    await eventually(status, until=lambda s: s.get("readyReplicas") == 3)
    store.mutate(DEPLOYMENTS, "default", name, lambda d: d["spec"].update(replicas=1))
    await eventually(status, until=lambda s: s.get("readyReplicas") == 1 and s.get("replicas") == 1)

    async def count() -> int:
        return len(owned_pods(store, "default", "Deployment", name))

    await eventually(count, until=lambda n: n == 1)
    # An evicted (deleted) pod comes back, as with a ReplicaSet.
    victim = owned_pods(store, "default", "Deployment", name)[0]["metadata"]["name"]
    store.delete(PODS, "default", victim, grace_period_seconds=0)

    async def replaced() -> list[str]:
        return [p["metadata"]["name"] for p in owned_pods(store, "default", "Deployment", name)]

    names = await eventually(replaced, until=lambda n: len(n) == 1 and victim not in n)
    assert names
