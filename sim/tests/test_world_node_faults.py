"""Nodes changing outside any operation, as an event watcher sees them: a kubelet that stops
posting (Ready Unknown, unreachable taints, pods not ready then evicted by the taint manager), its
return, and a machine that vanishes and comes back. Driven through the fault injector (in process
and over HTTP), observed through the official client's watch from a resourceVersion.
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from sim.apiserver.auth import CertificateAuthority
from sim.apiserver.registry import NODES
from sim.apiserver.server import ClusterServer
from sim.apiserver.store import ClusterStore
from sim.faults import FAULTS_PATH, FaultInjector
from sim.tests.conftest import call, make_api_client
from sim.timing import SimTiming
from sim.world import KCM_NAMESPACE, REMOTE_CREDENTIAL, REMOTE_TEMPLATE, SimWorld, WorldConfig
from tests.helpers import eventually, unique

GROUP = "k0rdent.mirantis.com"
MACHINES = [
    {"address": "192.0.2.10", "port": 22, "user": "root"},
    {"address": "192.0.2.11", "port": 22, "user": "root"},
]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[SimWorld]:
    async with SimWorld(WorldConfig(state_dir=tmp_path, timing=SimTiming.instant())) as started:
        yield started


async def child_api(world: SimWorld, name: str) -> Any:
    """A Ready two-node cluster `name`; the official client's CoreV1Api on its child (typed Any:
    its generated hints make every field optional)."""
    rt = world.store.registry.get(GROUP, "clusterdeployments")
    world.store.create(
        rt,
        {
            "metadata": {"name": name, "namespace": KCM_NAMESPACE},
            "spec": {
                "template": REMOTE_TEMPLATE,
                "credential": REMOTE_CREDENTIAL,
                "config": {"machines": MACHINES},
            },
        },
    )

    async def kubeconfig() -> str:
        secret = world.store.try_get(
            world.store.registry.get("", "secrets"), KCM_NAMESPACE, f"{name}-kubeconfig"
        )
        return str(((secret or {}).get("data") or {}).get("value") or "")

    encoded = await eventually(kubeconfig, what="child kubeconfig")
    configuration = client.Configuration()
    config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]  # untyped in the client
        yaml.safe_load(base64.b64decode(encoded)),
        client_configuration=configuration,
        persist_config=False,
    )
    core: Any = client.CoreV1Api(client.ApiClient(configuration))

    async def ready_nodes() -> list[Any]:
        nodes = (await call(core.list_node)).items
        return [n for n in nodes if _ready(n) == "True"]

    await eventually(ready_nodes, until=lambda n: len(n) == 2, what="2 Ready nodes")
    return core


def _ready(node: Any) -> str:
    for condition in node.status.conditions or []:
        if condition.type == "Ready":
            return str(condition.status)
    return ""


def _watch_nodes(core: Any, resource_version: str) -> list[tuple[str, str, str]]:
    """(type, node name, resourceVersion) of every node event after `resource_version`."""
    events = []
    stream = watch.Watch().stream(  # type: ignore[no-untyped-call]  # untyped in the client
        core.list_node, resource_version=resource_version, timeout_seconds=1
    )
    for event in stream:
        obj = event["object"]
        events.append((event["type"], obj.metadata.name, obj.metadata.resource_version))
    return events


async def test_kubelet_stops_then_returns(world: SimWorld) -> None:
    name = unique("flaky")
    core = await child_api(world, name)
    nodes = (await call(core.list_node)).items
    target = nodes[0].metadata.name
    since = (await call(core.list_node)).metadata.resource_version
    workload = {
        "metadata": {"name": "trainer"},
        "spec": {
            "nodeName": target,
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"]}],
        },
    }
    await call(core.create_namespaced_pod, "default", workload)

    async def trainer() -> Any:
        return await call(core.read_namespaced_pod, "trainer", "default")

    await eventually(trainer, until=lambda p: p.status.phase == "Running", what="trainer runs")

    world.faults.stop_kubelet(target, cluster=name)

    async def node() -> Any:
        return await call(core.read_node, target)

    unknown = await eventually(node, until=lambda n: _ready(n) == "Unknown", what="Ready Unknown")
    ready = next(c for c in unknown.status.conditions if c.type == "Ready")
    assert (ready.reason, ready.message) == (
        "NodeStatusUnknown",
        "Kubelet stopped posting node status.",
    )
    taints = {(t.key, t.effect) for t in unknown.spec.taints}
    assert taints >= {
        ("node.kubernetes.io/unreachable", "NoSchedule"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
    }

    # The taint manager evicts after the 300 s default toleration (scaled): the pod is marked and
    # stays Terminating, since no kubelet is there to confirm; DaemonSet pods stay untouched.
    evicted = await eventually(
        trainer, until=lambda p: p.metadata.deletion_timestamp is not None, what="eviction"
    )
    conditions = {c.type: c for c in evicted.status.conditions}
    assert conditions["Ready"].status == "False"
    assert conditions["DisruptionTarget"].reason == "DeletionByTaintManager"
    system = (await call(core.list_namespaced_pod, "kube-system")).items
    cilium = [
        p for p in system if p.metadata.name.startswith("cilium") and p.spec.node_name == target
    ]
    assert cilium
    assert cilium[0].metadata.deletion_timestamp is None

    # An event watcher resuming from the resourceVersion it listed at sees every change since.
    events = await call(_watch_nodes, core, since)
    changes = [e for e in events if e[1] == target]
    assert changes
    assert all(kind == "MODIFIED" for kind, _, _ in changes)
    versions = [int(rv) for _, _, rv in events]
    assert versions == sorted(versions)
    assert versions[0] > int(since)

    world.faults.start_kubelet(target, cluster=name)
    back = await eventually(node, until=lambda n: _ready(n) == "True", what="Ready again")
    assert not any(t.key == "node.kubernetes.io/unreachable" for t in back.spec.taints or [])

    async def gone() -> bool:
        try:
            await trainer()
        except ApiException as err:
            return bool(err.status == 404)
        return False

    # Back, the kubelet confirms the eviction: the pod is removed.
    await eventually(gone, what="evicted pod removed")


async def test_machine_vanishes_then_returns_over_http(world: SimWorld) -> None:
    name = unique("lossy")
    core = await child_api(world, name)
    target = (await call(core.list_node)).items[1].metadata.name
    since = (await call(core.list_node)).metadata.resource_version

    trust = ssl.create_default_context(cafile=str(world.ca.ca_file))
    async with httpx.AsyncClient(base_url=world.management.url, verify=trust) as http:
        current = (await http.get(FAULTS_PATH)).json()
        current["nodes_lost"] = [{"node": target, "cluster": name}]
        assert (await http.put(FAULTS_PATH, json=current)).status_code == 200

        async def names() -> set[str]:
            return {n.metadata.name for n in (await call(core.list_node)).items}

        await eventually(names, until=lambda n: target not in n, what="node deleted")
        events = await call(_watch_nodes, core, since)
        assert ("DELETED", target) in {(kind, node) for kind, node, _ in events}

        rt = world.store.registry.get(GROUP, "clusterdeployments")

        async def summary() -> str:
            cd = world.store.get(rt, KCM_NAMESPACE, name)
            for condition in cd["status"]["conditions"]:
                if condition["type"] == "CAPIClusterSummary":
                    return str(condition["message"])
            return ""

        message = await eventually(summary, until=lambda m: "unreachable" in m)
        assert target in message

        current["nodes_lost"] = []
        assert (await http.put(FAULTS_PATH, json=current)).status_code == 200

    async def ready_again() -> list[Any]:
        return [n for n in (await call(core.list_node)).items if _ready(n) == "True"]

    await eventually(ready_again, until=lambda n: len(n) == 2, what="node registered again")


async def test_node_watch_from_a_compacted_version_is_410(sim_ca: CertificateAuthority) -> None:
    """A watcher that was away too long gets 410 Gone and must list again."""
    name = unique("short")
    store = ClusterStore(name, history_size=5)
    server = ClusterServer(name, store, sim_ca)
    await server.start()
    api = make_api_client(server)
    try:
        store.create(NODES, {"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}})  # fmt: skip
        stale = str(store.resource_version)
        for i in range(10):

            def relabel(node: dict[str, Any], i: int = i) -> None:
                node["metadata"].setdefault("labels", {})["round"] = str(i)

            store.mutate(NODES, None, "n1", relabel)
        with pytest.raises(ApiException) as err:
            await call(_watch_nodes, client.CoreV1Api(api), stale)
        assert err.value.status == 410
    finally:
        api.close()  # type: ignore[no-untyped-call]  # untyped in the client
        await server.stop()


def test_node_faults_notify_their_listeners() -> None:
    """Controllers learn of a fault change at once (PUT /sim/v1/faults writes no object)."""
    changes: list[int] = []
    injector = FaultInjector()
    unsubscribe = injector.on_change(lambda: changes.append(1))
    injector.stop_kubelet("n1", cluster="c1")
    assert injector.kubelet_stopped("c1", "n1")
    assert not injector.kubelet_stopped("c2", "n1")
    injector.start_kubelet("n1", cluster="c1")
    assert not injector.kubelet_stopped("c1", "n1")
    injector.lose_node("n2")
    assert injector.node_lost("any", "n2")
    unsubscribe()
    injector.restore_node("n2")
    assert changes == [1, 1, 1]
