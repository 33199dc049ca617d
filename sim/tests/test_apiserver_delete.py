"""Deletion semantics: finalizers, garbage collection, pod grace periods with the kubelet, eviction.

Against the emulator and a real control plane (`kube`): garbage collection, PodDisruptionBudget
status and a kubelet's work are kube-controller-manager's and KWOK's there, and come an instant
later, so the tests wait for them (`eventually`), which the emulator passes at once.
"""

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
from sim.tests.conftest import Kube
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


NO_SCHEDULER = "colony-test-none"
"""A scheduler nobody runs: pods stay where the test puts them (a real control plane schedules)."""
NOWHERE = "n1"
"""A node name with no Node and no kubelet: a pod bound there is never run nor finished."""


def pod(name: str, node: str | None = NOWHERE, labels: dict[str, str] | None = None, grace: int = 30) -> dict[str, Any]:  # fmt: skip
    spec: dict[str, Any] = {
        "schedulerName": NO_SCHEDULER,
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


async def test_finalizers_hold_deletion_until_emptied(kube: Kube) -> None:
    core = client.CoreV1Api(kube.api)
    ns = kube.namespace
    body = {"metadata": {"name": "f", "finalizers": ["sim.io/hold"]}}
    await call(core.create_namespaced_config_map, ns, body)
    await call(core.delete_namespaced_config_map, "f", ns)
    held = await call(core.read_namespaced_config_map, "f", ns)
    assert held.metadata.deletion_timestamp is not None
    await call(
        core.patch_namespaced_config_map,
        "f",
        ns,
        {"metadata": {"finalizers": None}},
        _content_type="application/merge-patch+json",
    )
    assert not await exists(core.read_namespaced_config_map, "f", ns)


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


async def gone(read: Any, *args: Any, what: str) -> None:
    await eventually(lambda: exists(read, *args), until=lambda present: not present, what=what)


async def test_gc_background_deletes_dependents(kube: Kube) -> None:
    core = client.CoreV1Api(kube.api)
    ns = kube.namespace
    owner = await call(core.create_namespaced_config_map, ns, {"metadata": {"name": "o"}})
    await call(core.create_namespaced_config_map, ns, _owned("d1", owner))
    await call(core.create_namespaced_secret, ns, _owned("d2", owner))
    await call(core.delete_namespaced_config_map, "o", ns, propagation_policy="Background")
    await gone(core.read_namespaced_config_map, "d1", ns, what="the ConfigMap collected")
    await gone(core.read_namespaced_secret, "d2", ns, what="the Secret collected")


async def test_gc_orphan_keeps_dependents(kube: Kube) -> None:
    core = client.CoreV1Api(kube.api)
    ns = kube.namespace
    owner = await call(core.create_namespaced_config_map, ns, {"metadata": {"name": "o"}})
    await call(core.create_namespaced_config_map, ns, _owned("d", owner))
    await call(core.delete_namespaced_config_map, "o", ns, propagation_policy="Orphan")
    await gone(core.read_namespaced_config_map, "o", ns, what="the owner gone")
    dep = await call(core.read_namespaced_config_map, "d", ns)
    assert not dep.metadata.owner_references


async def test_gc_foreground_waits_for_dependents(kube: Kube) -> None:
    core = client.CoreV1Api(kube.api)
    ns = kube.namespace
    owner = await call(core.create_namespaced_config_map, ns, {"metadata": {"name": "o"}})
    held = _owned("d", owner)
    held["metadata"]["finalizers"] = ["sim.io/hold"]
    await call(core.create_namespaced_config_map, ns, held)
    await call(core.delete_namespaced_config_map, "o", ns, propagation_policy="Foreground")
    waiting = await call(core.read_namespaced_config_map, "o", ns)
    assert waiting.metadata.deletion_timestamp is not None
    assert "foregroundDeletion" in waiting.metadata.finalizers
    dep = await eventually(
        lambda: call(core.read_namespaced_config_map, "d", ns),
        until=lambda d: d.metadata.deletion_timestamp is not None,
        what="the dependent deleted",
    )
    assert dep.metadata.finalizers == ["sim.io/hold"]
    release = {"metadata": {"$deleteFromPrimitiveList/finalizers": ["sim.io/hold"]}}
    await call(core.patch_namespaced_config_map, "d", ns, release)
    await gone(core.read_namespaced_config_map, "d", ns, what="the dependent gone")
    await gone(core.read_namespaced_config_map, "o", ns, what="the owner gone")


async def test_delete_preconditions(kube: Kube) -> None:
    core = client.CoreV1Api(kube.api)
    await call(core.create_namespaced_config_map, kube.namespace, {"metadata": {"name": "p"}})
    body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="wrong"))
    with pytest.raises(ApiException) as err:
        await call(core.delete_namespaced_config_map, "p", kube.namespace, body=body)
    assert err.value.status == 409


@pytest.mark.parametrize(
    ("node", "grace", "terminating"),
    [
        pytest.param(NOWHERE, None, True, id="bound-default-grace"),
        pytest.param(NOWHERE, 0, False, id="bound-grace-zero"),
        pytest.param(None, None, False, id="unbound"),
    ],
)
async def test_pod_grace_period(
    kube: Kube, node: str | None, grace: int | None, terminating: bool
) -> None:
    core = client.CoreV1Api(kube.api)
    ns = kube.namespace
    await call(core.create_namespaced_pod, ns, pod("g", node))
    deleted = await call(core.delete_namespaced_pod, "g", ns, grace_period_seconds=grace)
    assert deleted.metadata.name == "g"
    still_there = await exists(core.read_namespaced_pod, "g", ns)
    assert still_there == terminating
    if terminating:
        current = await call(core.read_namespaced_pod, "g", ns)
        assert current.metadata.deletion_grace_period_seconds == 30
        assert current.metadata.deletion_timestamp is not None
        await call(core.delete_namespaced_pod, "g", ns, grace_period_seconds=0)


async def test_kubelet_starts_and_removes_pods(kube: Kube, node: str) -> None:
    core = client.CoreV1Api(kube.api)
    ns = kube.namespace
    await call(core.create_namespaced_pod, ns, pod("k", node))
    running = await eventually(
        lambda: call(core.read_namespaced_pod, "k", ns),
        until=lambda p: p.status.phase == "Running",
        what="pod running",
    )
    conditions = {c.type: c.status for c in running.status.conditions}
    assert conditions["Ready"] == conditions["ContainersReady"] == "True"
    assert running.status.pod_ip
    assert running.status.start_time is not None
    assert running.status.container_statuses[0].ready
    await call(core.delete_namespaced_pod, "k", ns)
    await gone(core.read_namespaced_pod, "k", ns, what="pod removed after grace")


async def test_a_kubelet_reports_the_pod_scheduled_condition_only_on_the_emulator(
    kube: Kube, node: str
) -> None:
    """A pod created with spec.nodeName never met a scheduler: a real kubelet (and KWOK) reports
    no PodScheduled condition for it; the sim's kubelet reports it True."""
    core = client.CoreV1Api(kube.api)
    await call(core.create_namespaced_pod, kube.namespace, pod("k", node))
    running = await eventually(
        lambda: call(core.read_namespaced_pod, "k", kube.namespace),
        until=lambda p: p.status.phase == "Running",
        what="pod running",
    )
    conditions = {c.type: c.status for c in running.status.conditions}
    assert conditions.get("PodScheduled") == (None if kube.real else "True")


async def test_kubelet_honours_grace_period(
    cluster: ClusterServer, api_client: client.ApiClient
) -> None:
    """The sim's kubelet keeps a deleted pod for its grace period (KWOK's stages do not)."""
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
    api: client.ApiClient, namespace: str, node: str, names: list[str], labels: dict[str, str]
) -> None:
    """Running pods on `node` controlled by a Deployment of matching scale (budgets read its
    scale). The Deployment is paused: a real deployment controller then makes no ReplicaSet and
    no pods of its own, and these are the only pods its scale counts."""
    core = client.CoreV1Api(api)
    apps = client.AppsV1Api(api)
    template = {
        "metadata": {"labels": labels},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    owner = await call(
        apps.create_namespaced_deployment,
        namespace,
        {
            "metadata": {"name": names[0] + "-deploy"},
            "spec": {
                "paused": True,
                "replicas": len(names),
                "selector": {"matchLabels": labels},
                "template": template,
            },
        },
    )
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": owner.metadata.name, "uid": owner.metadata.uid, "controller": True}  # fmt: skip
    for name in names:
        body = pod(name, node, labels=labels)
        body["metadata"]["ownerReferences"] = [ref]
        await call(core.create_namespaced_pod, namespace, body)
    for name in names:
        await eventually(
            lambda name=name: call(core.read_namespaced_pod, name, namespace),
            until=lambda p: (
                p.status.phase == "Running"
                and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
            ),
            what=f"{name} running",
        )


def _eviction(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}  # fmt: skip


async def budget_status(kube: Kube, name: str, **wanted: int) -> Any:
    """The budget's status once it is current (observedGeneration) and has the wanted values (a
    real disruption controller writes it an instant after each change)."""
    policy = client.PolicyV1Api(kube.api)

    def current(pdb: Any) -> bool:
        status = pdb.status
        return (
            status is not None
            and status.observed_generation == pdb.metadata.generation
            and all(getattr(status, key) == value for key, value in wanted.items())
        )

    pdb = await eventually(
        lambda: call(policy.read_namespaced_pod_disruption_budget, name, kube.namespace),
        until=current,
        what=f"budget {name} at {wanted}",
    )
    return pdb.status


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
    kube: Kube, node: str, budget: dict[str, Any], allowed: int
) -> None:
    core = client.CoreV1Api(kube.api)
    policy = client.PolicyV1Api(kube.api)
    ns = kube.namespace
    await _running_pods(kube.api, kube.namespace, node, ["e1", "e2"], {"app": "e"})
    pdb = {"metadata": {"name": "b"}, "spec": {**budget, "selector": {"matchLabels": {"app": "e"}}}}
    await call(policy.create_namespaced_pod_disruption_budget, ns, pdb)
    await budget_status(kube, "b", current_healthy=2, expected_pods=2, disruptions_allowed=allowed)
    if allowed:
        await call(core.create_namespaced_pod_eviction, "e1", ns, _eviction("e1", ns))
        await gone(core.read_namespaced_pod, "e1", ns, what="evicted pod gone")
        await budget_status(kube, "b", current_healthy=1, disruptions_allowed=0)
        victim = "e2"
    else:
        victim = "e1"
    with pytest.raises(ApiException) as err:
        await call(core.create_namespaced_pod_eviction, victim, ns, _eviction(victim, ns))
    assert err.value.status == 429
    body = json.loads(err.value.body)
    assert body["reason"] == "TooManyRequests"
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"


async def test_eviction_without_budget_deletes_gracefully(kube: Kube) -> None:
    core = client.CoreV1Api(kube.api)
    ns = kube.namespace
    await call(core.create_namespaced_pod, ns, pod("free"))
    await call(core.create_namespaced_pod_eviction, "free", ns, _eviction("free", ns))
    terminating = await call(core.read_namespaced_pod, "free", ns)
    assert terminating.metadata.deletion_grace_period_seconds == 30
    # What the kubelet does after the grace period (no kubelet runs the pod here).
    await call(core.delete_namespaced_pod, "free", ns, grace_period_seconds=0)
    assert not await exists(core.read_namespaced_pod, "free", ns)


async def test_eviction_with_two_budgets_is_500(kube: Kube, node: str) -> None:
    core = client.CoreV1Api(kube.api)
    policy = client.PolicyV1Api(kube.api)
    ns = kube.namespace
    await _running_pods(kube.api, kube.namespace, node, ["t1"], {"app": "t"})
    for name in ("b1", "b2"):
        pdb = {"metadata": {"name": name}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "t"}}}}  # fmt: skip
        await call(policy.create_namespaced_pod_disruption_budget, ns, pdb)
    with pytest.raises(ApiException) as err:
        await call(core.create_namespaced_pod_eviction, "t1", ns, _eviction("t1", ns))
    assert err.value.status == 500
    assert json.loads(err.value.body)["message"] == (
        "This pod has more than one PodDisruptionBudget, which the eviction subresource "
        "does not support."
    )


async def test_eviction_of_missing_pod_is_404(kube: Kube) -> None:
    core = client.CoreV1Api(kube.api)
    ns = kube.namespace
    with pytest.raises(ApiException) as err:
        await call(core.create_namespaced_pod_eviction, "none", ns, _eviction("none", ns))
    assert err.value.status == 404


async def test_accepted_evictions_are_counted(
    cluster: ClusterServer, api_client: client.ApiClient
) -> None:
    """`store.evictions` holds every eviction answered 201, and nothing else: not a budget's
    refusal, not a dry run, not a pod that does not exist."""
    kubelet = Kubelet(cluster.store, grace_scale=0.0)
    task = asyncio.create_task(kubelet.run())
    try:
        await _accepted_evictions_are_counted(cluster, api_client)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def _accepted_evictions_are_counted(
    cluster: ClusterServer, api_client: client.ApiClient
) -> None:
    core = client.CoreV1Api(api_client)
    policy = client.PolicyV1Api(api_client)
    await _running_pods(api_client, "default", NOWHERE, ["c1", "c2"], {"app": "c"})
    await call(core.create_namespaced_pod, "default", pod("elsewhere", node="n2"))
    uid = (await call(core.read_namespaced_pod, "c1", "default")).metadata.uid
    pdb = {"metadata": {"name": "c"}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "c"}}}}  # fmt: skip
    await call(policy.create_namespaced_pod_disruption_budget, "default", pdb)
    dry = {**_eviction("c1", "default"), "deleteOptions": {"dryRun": ["All"]}}
    await call(core.create_namespaced_pod_eviction, "c1", "default", dry)
    assert list(cluster.store.evictions) == []
    await call(core.create_namespaced_pod_eviction, "c1", "default", _eviction("c1", "default"))
    with pytest.raises(ApiException) as refused:
        await call(core.create_namespaced_pod_eviction, "c2", "default", _eviction("c2", "default"))
    assert refused.value.status == 429
    with pytest.raises(ApiException) as missing:
        await call(
            core.create_namespaced_pod_eviction, "none", "default", _eviction("none", "default")
        )
    assert missing.value.status == 404
    await call(
        core.create_namespaced_pod_eviction,
        "elsewhere",
        "default",
        _eviction("elsewhere", "default"),
    )
    assert [(e.name, e.uid, e.node) for e in cluster.store.evictions] == [
        ("c1", uid, NOWHERE),
        ("elsewhere", cluster.store.evictions[1].uid, "n2"),
    ]
    assert all(e.namespace == "default" for e in cluster.store.evictions)


async def test_a_namespace_terminates_until_its_contents_are_gone(kube: Kube) -> None:
    """Namespace deletion as the namespace controller does it: the namespace is Terminating
    (new content refused) while anything in it waits for a finalizer; then it goes."""
    core = client.CoreV1Api(kube.api)
    name = kube.name("ending")
    await call(core.create_namespace, {"metadata": {"name": name}})
    held = {"metadata": {"name": "held", "finalizers": ["sim.io/hold"]}}
    await call(core.create_namespaced_config_map, name, held)
    await call(core.create_namespaced_config_map, name, {"metadata": {"name": "free"}})
    await call(core.delete_namespace, name)
    terminating = await call(core.read_namespace, name)
    assert terminating.status.phase == "Terminating"
    assert terminating.metadata.deletion_timestamp is not None
    with pytest.raises(ApiException) as refused:
        await call(core.create_namespaced_config_map, name, {"metadata": {"name": "late"}})
    assert refused.value.status == 403
    assert json.loads(refused.value.body)["message"] == (
        f'configmaps "late" is forbidden: unable to create new content in namespace {name} '
        "because it is being terminated"
    )
    await gone(core.read_namespaced_config_map, "free", name, what="the free ConfigMap deleted")
    waiting = await call(core.read_namespaced_config_map, "held", name)
    assert waiting.metadata.deletion_timestamp is not None
    assert await exists(core.read_namespace, name)
    release = {"metadata": {"$deleteFromPrimitiveList/finalizers": ["sim.io/hold"]}}
    await call(core.patch_namespaced_config_map, "held", name, release)
    await gone(core.read_namespace, name, what="the namespace finalized")
