"""The simulator's real world (`sim.real`) on its own: one `RealWorld` for the module (etcd, a real
management control plane behind the simulator's front, the host provider, k0rdent acting through
the official client), and what it promises:

- the seam: the same tests as `sim/tests/test_kubeapi.py` (which run them on the emulator in
  process and over HTTP) pass on the real kube-apiserver;
- the front: every answer is the real server's, faults are injected as on an emulated server,
  another bearer token is passed as itself (the real RBAC answers it: 403), clients' creates are
  recorded;
- a ClusterDeployment's child is a real control plane (Kubernetes v1.37.2) whose Nodes are KWOK's,
  carrying their host's GPUs and labels; deleting the ClusterDeployment stops its processes and
  empties its etcd prefix, even while its control plane is still starting.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from infra.kube import api_client_from_dict, close_client
from sim.apiserver.registry import SECRETS
from sim.clusterapi import ClusterApi
from sim.faults import RequestFault
from sim.real.world import RealWorld
from sim.tests import test_kubeapi
from sim.world import KCM_NAMESPACE, REAL
from tests.helpers import eventually, unique
from tests.simenv import call, started_world

pytestmark = [pytest.mark.real, pytest.mark.slow]

K0RDENT = "k0rdent.mirantis.com"


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RealWorld]:
    async with started_world(tmp_path_factory.mktemp("real"), world=REAL) as started:
        assert isinstance(started, RealWorld)
        yield started


def front_client(world: RealWorld, token: str | None = None) -> client.ApiClient:
    """A client of the management cluster through its front (the admin's token by default)."""
    kubeconfig = yaml.safe_load(world.management_kubeconfig_path.read_text())
    if token is not None:
        kubeconfig["users"][0]["user"]["token"] = token
    return api_client_from_dict(kubeconfig)


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(test_kubeapi.test_create_get_list_and_errors, id="crud"),
        pytest.param(test_kubeapi.test_mutate_writes_what_changed_and_nothing_else, id="mutate"),
        pytest.param(
            test_kubeapi.test_mutate_and_update_status_write_a_status_subresource, id="status"
        ),
        pytest.param(
            test_kubeapi.test_a_finalizer_holds_a_delete_until_a_mutate_removes_it, id="finalizer"
        ),
        pytest.param(test_kubeapi.test_subscribe_delivers_changes_and_keeps_the_cache, id="watch"),
        pytest.param(test_kubeapi.test_a_crd_created_later_is_served_and_validated, id="crd"),
        pytest.param(test_kubeapi.test_pods_by_field_selector, id="field-selector"),
    ],
)
async def test_the_seam_means_the_same_on_a_real_server(
    world: RealWorld, case: Callable[[ClusterApi], Awaitable[None]]
) -> None:
    assert world.api is not None
    await case(world.api)
    world.api.rejected.clear()  # the cases send invalid objects on purpose


async def test_the_front_passes_the_real_answers_and_injects_faults(world: RealWorld) -> None:
    api = front_client(world)
    core = client.CoreV1Api(api)
    try:
        version = await call(client.VersionApi(api).get_code)
        assert version.git_version == "v1.37.2", "the real server answers through the front"
        name = unique("cm")
        await call(core.create_namespaced_config_map, "default", {"metadata": {"name": name}})
        created = [r for r in world.records.since(0) if getattr(r, "name", "") == name]
        assert [(r.cluster, r.resource, r.kind) for r in created] == [
            ("management", "configmaps", "ConfigMap")
        ]
        world.faults.add_rule(
            RequestFault(target="management", path="/configmaps", error_rate=1.0, error_codes=[503])
        )
        with pytest.raises(ApiException) as faulted:
            await call(core.read_namespaced_config_map, name, "default")
        assert faulted.value.status == 503
        world.faults.clear()
        assert (await call(core.read_namespaced_config_map, name, "default")).metadata.name == name
        counts = world.request_counts()["management"]
        assert counts.get("get configmaps", 0) >= 2
    finally:
        world.faults.clear()
        close_client(api)


async def test_another_token_is_passed_as_itself_and_rbac_answers(world: RealWorld) -> None:
    assert world.plane is not None
    token = await asyncio.to_thread(
        world.plane.service_account_token, unique("team"), "reader", seconds=600
    )
    api = front_client(world, token)
    try:
        with pytest.raises(ApiException) as refused:
            await call(client.CoreV1Api(api).list_namespaced_secret, KCM_NAMESPACE)
        assert refused.value.status == 403
        assert "cannot list resource" in str(refused.value.body)
    finally:
        close_client(api)


def cluster_deployment(world: RealWorld, name: str) -> dict[str, Any]:
    (host,) = [h for h in world.inventory.hosts(location="fra1", state="free") if h.gpu_count][:1]
    return {
        "apiVersion": f"{K0RDENT}/v1beta1",
        "kind": "ClusterDeployment",
        "metadata": {"name": name, "namespace": KCM_NAMESPACE},
        "spec": {
            "template": "remote-cluster-1-0-0",
            "credential": "remote-cluster-credential",
            "config": {
                "machines": [{"address": host.address, "port": host.ssh_port, "user": "root"}]
            },
        },
    }


def processes_of(prefix: str) -> list[int]:
    """Pids of processes whose command line names control plane `prefix` (its etcd prefix or
    its directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"/{prefix}" in command and "guard.py" not in command:
            found.append(int(entry.name))
    return found


async def keys_under(world: RealWorld, prefix: str) -> int:
    """How many etcd keys control plane `prefix` still has (etcd's v3 JSON gateway)."""
    assert world.etcd is not None
    start, end = f"/colony/{prefix}/".encode(), f"/colony/{prefix}0".encode()
    async with httpx.AsyncClient() as http:
        answer = await http.post(
            f"{world.etcd.url}/v3/kv/range",
            json={
                "key": base64.b64encode(start).decode(),
                "range_end": base64.b64encode(end).decode(),
                "count_only": True,
            },
        )
    return int(answer.json().get("count") or 0)


async def test_a_ready_cluster_deployment_is_a_real_control_plane_with_kwok_gpu_nodes(
    world: RealWorld,
) -> None:
    assert world.api is not None
    assert world.k0rdent is not None
    rt = world.api.registry.get(K0RDENT, "clusterdeployments")
    name = unique("real")
    await world.api.create(rt, cluster_deployment(world, name))

    async def ready() -> Any:
        obj = await world.api.get(rt, KCM_NAMESPACE, name)  # type: ignore[union-attr]
        return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == "Ready"), {})  # fmt: skip

    await eventually(ready, until=lambda c: c.get("status") == "True", timeout=180, what="Ready")
    secret = await world.api.get(SECRETS, KCM_NAMESPACE, f"{name}-kubeconfig")
    kubeconfig = yaml.safe_load(base64.b64decode(secret["data"]["value"]))
    child_client = api_client_from_dict(kubeconfig)
    try:
        version = await call(client.VersionApi(child_client).get_code)
        assert version.git_version == "v1.37.2"
        nodes = await call(client.CoreV1Api(child_client).list_node)
    finally:
        close_client(child_client)
    (node,) = nodes.items
    assert node.metadata.annotations["kwok.x-k8s.io/node"] == "fake"
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    assert node.metadata.labels["nvidia.com/gpu.count"] == "8"
    assert node.metadata.labels["nvidia.com/gpu.product"]

    child = world.k0rdent.child(KCM_NAMESPACE, name)
    assert child is not None
    prefix = child.plane.name  # type: ignore[attr-defined]
    assert processes_of(prefix), "its control plane runs"
    await world.api.delete(rt, KCM_NAMESPACE, name)
    await eventually(
        lambda: world.api.try_get(rt, KCM_NAMESPACE, name),  # type: ignore[union-attr]
        until=lambda found: found is None,
        timeout=120,
        what="the ClusterDeployment gone",
    )
    assert processes_of(prefix) == []
    assert await keys_under(world, prefix) == 0


async def test_a_cluster_deleted_while_its_control_plane_starts_leaves_nothing(
    world: RealWorld,
) -> None:
    """Whether the delete meets the start under way (the usual case: the control plane takes
    seconds) or just after it (a loaded machine): nothing is left. `sim/tests/test_bootstrap.py`
    shows the first case on its own."""
    assert world.api is not None
    rt = world.api.registry.get(K0RDENT, "clusterdeployments")
    name = unique("brief")
    await world.api.create(rt, cluster_deployment(world, name))

    async def starting() -> list[str]:
        return [
            p.name
            for p in (world.state_dir / "real").iterdir()
            if p.name.startswith("child-") and p.name.endswith(name)
        ]

    (prefix,) = await eventually(
        starting, until=bool, timeout=60, what="its control plane starting"
    )
    await world.api.delete(rt, KCM_NAMESPACE, name)
    await eventually(
        lambda: world.api.try_get(rt, KCM_NAMESPACE, name),  # type: ignore[union-attr]
        until=lambda found: found is None,
        timeout=120,
        what="the ClusterDeployment gone",
    )

    async def left() -> tuple[list[int], int]:
        return processes_of(prefix), await keys_under(world, prefix)

    await eventually(left, until=lambda x: x == ([], 0), timeout=120, what="nothing left running")
