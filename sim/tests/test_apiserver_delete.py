"""Deletion semantics: finalizers, garbage collection, pod grace periods with the kubelet, eviction."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sim.apiserver.server import ClusterServer
from sim.controllers.kubelet import Kubelet
from tests.helpers import eventually

call = asyncio.to_thread


@pytest.fixture
async def kubelet(cluster: ClusterServer) -> AsyncIterator[Kubelet]:
    """An instant kubelet (pods start at once, grace periods scaled to zero)."""
    kubelet = Kubelet(cluster.store, grace_scale=0.0)
    task = asyncio.create_task(kubelet.run())
    try:
        yield kubelet
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def pod(name: str, node: str | None = "n1", labels: dict[str, str] | None = None, grace: int = 30) -> dict[str, Any]:  # fmt: skip
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "image": "busybox"}],
        "terminationGracePeriodSeconds": grace,
    }
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


async def exists(fn: Any, *args: Any) -> bool:
    try:
        await call(fn, *args)
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


async def test_finalizers_hold_deletion_until_emptied(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    body = {"metadata": {"name": "f", "finalizers": ["sim.io/hold"]}}
    await call(core.create_namespaced_config_map, "default", body)
    await call(core.delete_namespaced_config_map, "f", "default")
    held = await call(core.read_namespaced_config_map, "f", "default")
    assert held.metadata.deletion_timestamp is not None
    await call(
        core.patch_namespaced_config_map,
        "f",
        "default",
        {"metadata": {"finalizers": None}},
        _content_type="application/merge-patch+json",
    )
    assert not await exists(core.read_namespaced_config_map, "f", "default")


def _owned(name: str, owner: Any, kind: str = "ConfigMap") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": kind,
                    "name": owner.metadata.name,
                    "uid": owner.metadata.uid,
                    "blockOwnerDeletion": True,
                }
            ],
        }
    }


async def test_gc_background_deletes_dependents(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    owner = await call(core.create_namespaced_config_map, "default", {"metadata": {"name": "o"}})
    await call(core.create_namespaced_config_map, "default", _owned("d1", owner))
    await call(core.create_namespaced_secret, "default", _owned("d2", owner))
    await call(core.delete_namespaced_config_map, "o", "default", propagation_policy="Background")
    assert not await exists(core.read_namespaced_config_map, "d1", "default")
    assert not await exists(core.read_namespaced_secret, "d2", "default")


async def test_gc_orphan_keeps_dependents(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    owner = await call(core.create_namespaced_config_map, "default", {"metadata": {"name": "o"}})
    await call(core.create_namespaced_config_map, "default", _owned("d", owner))
    await call(core.delete_namespaced_config_map, "o", "default", propagation_policy="Orphan")
    dep = await call(core.read_namespaced_config_map, "d", "default")
    assert not dep.metadata.owner_references


async def test_gc_foreground_waits_for_dependents(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    owner = await call(core.create_namespaced_config_map, "default", {"metadata": {"name": "o"}})
    held = _owned("d", owner)
    held["metadata"]["finalizers"] = ["sim.io/hold"]
    await call(core.create_namespaced_config_map, "default", held)
    await call(core.delete_namespaced_config_map, "o", "default", propagation_policy="Foreground")
    waiting = await call(core.read_namespaced_config_map, "o", "default")
    assert waiting.metadata.deletion_timestamp is not None
    assert "foregroundDeletion" in waiting.metadata.finalizers
    dep = await call(core.read_namespaced_config_map, "d", "default")
    assert dep.metadata.deletion_timestamp is not None
    await call(core.patch_namespaced_config_map, "d", "default", {"metadata": {"finalizers": []}})
    assert not await exists(core.read_namespaced_config_map, "d", "default")
    assert not await exists(core.read_namespaced_config_map, "o", "default")


async def test_delete_preconditions(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    await call(core.create_namespaced_config_map, "default", {"metadata": {"name": "p"}})
    body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="wrong"))
    with pytest.raises(ApiException) as err:
        await call(core.delete_namespaced_config_map, "p", "default", body=body)
    assert err.value.status == 409


@pytest.mark.parametrize(
    ("node", "grace", "terminating"),
    [
        pytest.param("n1", None, True, id="bound-default-grace"),
        pytest.param("n1", 0, False, id="bound-grace-zero"),
        pytest.param(None, None, False, id="unbound"),
    ],
)
async def test_pod_grace_period(
    api_client: client.ApiClient, node: str | None, grace: int | None, terminating: bool
) -> None:
    core = client.CoreV1Api(api_client)
    await call(core.create_namespaced_pod, "default", pod("g", node))
    deleted = await call(core.delete_namespaced_pod, "g", "default", grace_period_seconds=grace)
    assert deleted.metadata.name == "g"
    still_there = await exists(core.read_namespaced_pod, "g", "default")
    assert still_there == terminating
    if terminating:
        current = await call(core.read_namespaced_pod, "g", "default")
        assert current.metadata.deletion_grace_period_seconds == 30
        assert current.metadata.deletion_timestamp is not None


async def test_kubelet_starts_and_removes_pods(
    api_client: client.ApiClient, kubelet: Kubelet
) -> None:
    core = client.CoreV1Api(api_client)
    await call(core.create_namespaced_pod, "default", pod("k"))
    running = await eventually(
        lambda: call(core.read_namespaced_pod, "k", "default"),
        until=lambda p: p.status.phase == "Running",
        what="pod running",
    )
    conditions = {c.type: c.status for c in running.status.conditions}
    assert (
        conditions["Ready"] == conditions["ContainersReady"] == conditions["PodScheduled"] == "True"
    )
    assert running.status.pod_ip
    assert running.status.start_time is not None
    assert running.status.container_statuses[0].ready
    await call(core.delete_namespaced_pod, "k", "default")
    await eventually(
        lambda: exists(core.read_namespaced_pod, "k", "default"),
        until=lambda present: not present,
        what="pod removed after grace",
    )


async def test_kubelet_honours_grace_period(
    cluster: ClusterServer, api_client: client.ApiClient
) -> None:
    kubelet = Kubelet(cluster.store, grace_scale=1.0)
    task = asyncio.create_task(kubelet.run())
    try:
        core = client.CoreV1Api(api_client)
        await call(core.create_namespaced_pod, "default", pod("slow", grace=1))
        await call(core.delete_namespaced_pod, "slow", "default")
        assert await exists(core.read_namespaced_pod, "slow", "default")
        await eventually(
            lambda: exists(core.read_namespaced_pod, "slow", "default"),
            until=lambda present: not present,
            timeout=5,
            what="pod removed after 1s grace",
        )
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def _running_pods(
    api_client: client.ApiClient, names: list[str], labels: dict[str, str]
) -> None:
    """Running pods controlled by a Deployment of matching scale (budgets read its scale)."""
    core = client.CoreV1Api(api_client)
    apps = client.AppsV1Api(api_client)
    template = {
        "metadata": {"labels": labels},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    owner = await call(
        apps.create_namespaced_deployment,
        "default",
        {
            "metadata": {"name": names[0] + "-deploy"},
            "spec": {
                "replicas": len(names),
                "selector": {"matchLabels": labels},
                "template": template,
            },
        },
    )
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": owner.metadata.name, "uid": owner.metadata.uid, "controller": True}  # fmt: skip
    for name in names:
        body = pod(name, labels=labels)
        body["metadata"]["ownerReferences"] = [ref]
        await call(core.create_namespaced_pod, "default", body)
    for name in names:
        await eventually(
            lambda name=name: call(core.read_namespaced_pod, name, "default"),
            until=lambda p: p.status.phase == "Running",
            what=f"{name} running",
        )


def _eviction(name: str) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": "default"}}  # fmt: skip


@pytest.mark.parametrize(
    ("budget", "allowed"),
    [
        pytest.param({"minAvailable": 2}, 0, id="min-available-int"),
        pytest.param({"minAvailable": "50%"}, 1, id="min-available-percent"),
        pytest.param({"maxUnavailable": 0}, 0, id="max-unavailable-int"),
        pytest.param({"maxUnavailable": "50%"}, 1, id="max-unavailable-percent"),
    ],
)
async def test_eviction_respects_pdb(
    api_client: client.ApiClient, kubelet: Kubelet, budget: dict[str, Any], allowed: int
) -> None:
    core = client.CoreV1Api(api_client)
    policy = client.PolicyV1Api(api_client)
    await _running_pods(api_client, ["e1", "e2"], {"app": "e"})
    pdb = {"metadata": {"name": "b"}, "spec": {**budget, "selector": {"matchLabels": {"app": "e"}}}}
    await call(policy.create_namespaced_pod_disruption_budget, "default", pdb)
    status = (await call(policy.read_namespaced_pod_disruption_budget, "b", "default")).status
    assert (status.current_healthy, status.expected_pods, status.disruptions_allowed) == (
        2,
        2,
        allowed,
    )
    if allowed:
        await call(core.create_namespaced_pod_eviction, "e1", "default", _eviction("e1"))
        await eventually(
            lambda: exists(core.read_namespaced_pod, "e1", "default"),
            until=lambda present: not present,
            what="evicted pod gone",
        )
        status = (await call(policy.read_namespaced_pod_disruption_budget, "b", "default")).status
        assert (status.current_healthy, status.disruptions_allowed) == (1, 0)
        victim = "e2"
    else:
        victim = "e1"
    with pytest.raises(ApiException) as err:
        await call(core.create_namespaced_pod_eviction, victim, "default", _eviction(victim))
    assert err.value.status == 429
    body = json.loads(err.value.body)
    assert body["reason"] == "TooManyRequests"
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"


async def test_eviction_without_budget_deletes_gracefully(
    cluster: ClusterServer, api_client: client.ApiClient
) -> None:
    core = client.CoreV1Api(api_client)
    await call(core.create_namespaced_pod, "default", pod("free"))
    await call(core.create_namespaced_pod_eviction, "free", "default", _eviction("free"))
    terminating = await call(core.read_namespaced_pod, "free", "default")
    assert terminating.metadata.deletion_grace_period_seconds == 30
    cluster.store.finalize_pod("default", "free")  # what the kubelet does after the grace period
    assert not await exists(core.read_namespaced_pod, "free", "default")


async def test_eviction_with_two_budgets_is_500(
    api_client: client.ApiClient, kubelet: Kubelet
) -> None:
    core = client.CoreV1Api(api_client)
    policy = client.PolicyV1Api(api_client)
    await _running_pods(api_client, ["t1"], {"app": "t"})
    for name in ("b1", "b2"):
        pdb = {"metadata": {"name": name}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "t"}}}}  # fmt: skip
        await call(policy.create_namespaced_pod_disruption_budget, "default", pdb)
    with pytest.raises(ApiException) as err:
        await call(core.create_namespaced_pod_eviction, "t1", "default", _eviction("t1"))
    assert err.value.status == 500


async def test_eviction_of_missing_pod_is_404(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    with pytest.raises(ApiException) as err:
        await call(core.create_namespaced_pod_eviction, "none", "default", _eviction("none"))
    assert err.value.status == 404


async def test_accepted_evictions_are_counted(
    cluster: ClusterServer, api_client: client.ApiClient, kubelet: Kubelet
) -> None:
    """`store.evictions` holds every eviction answered 201, and nothing else: not a budget's
    refusal, not a dry run, not a pod that does not exist."""
    core = client.CoreV1Api(api_client)
    policy = client.PolicyV1Api(api_client)
    await _running_pods(api_client, ["c1", "c2"], {"app": "c"})
    await call(core.create_namespaced_pod, "default", pod("elsewhere", node="n2"))
    uid = (await call(core.read_namespaced_pod, "c1", "default")).metadata.uid
    pdb = {"metadata": {"name": "c"}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "c"}}}}  # fmt: skip
    await call(policy.create_namespaced_pod_disruption_budget, "default", pdb)
    dry = {**_eviction("c1"), "deleteOptions": {"dryRun": ["All"]}}
    await call(core.create_namespaced_pod_eviction, "c1", "default", dry)
    assert list(cluster.store.evictions) == []
    await call(core.create_namespaced_pod_eviction, "c1", "default", _eviction("c1"))
    with pytest.raises(ApiException) as refused:
        await call(core.create_namespaced_pod_eviction, "c2", "default", _eviction("c2"))
    assert refused.value.status == 429
    with pytest.raises(ApiException) as missing:
        await call(core.create_namespaced_pod_eviction, "none", "default", _eviction("none"))
    assert missing.value.status == 404
    await call(core.create_namespaced_pod_eviction, "elsewhere", "default", _eviction("elsewhere"))
    assert [(e.name, e.uid, e.node) for e in cluster.store.evictions] == [
        ("c1", uid, "n1"),
        ("elsewhere", cluster.store.evictions[1].uid, "n2"),
    ]
    assert all(e.namespace == "default" for e in cluster.store.evictions)
