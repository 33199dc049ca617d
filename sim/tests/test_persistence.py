"""A persisted world (`WorldConfig.persist`, `python -m sim --persist`): stopped, or killed, then
started again from the same state directory, it serves what it served, to clients built before.

Read back with the official client, as Colony's worker and kubectl read it: objects keep their uid
and resourceVersion, new resourceVersions are higher than any seen before (even after a SIGKILL
between two saves), a watch from before the restart gets 410 Gone, Ready clusters and installed
services stay as they were (no status write at all), and work in flight goes on.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from sim.apiserver.registry import NAMESPACES, NODES, PODS, SECRETS
from sim.persistence import RESERVATIONS_FILE, STATE_FILE, StateMismatch
from sim.timing import DEFAULT_DELAYS, SimTiming
from sim.world import IDENTITY_KIND, IDENTITY_PATH, KCM_NAMESPACE, SimWorld, WorldConfig
from tests.helpers import eventually, unique

call = asyncio.to_thread
GROUP = "k0rdent.mirantis.com"
H100_HOST = {"address": "192.0.2.10", "port": 22, "user": "root"}


@asynccontextmanager
async def persisted(
    state_dir: Path, timing: SimTiming | None = None, **config_: Any
) -> AsyncIterator[SimWorld]:
    world = SimWorld(
        WorldConfig(
            state_dir=state_dir, timing=timing or SimTiming.instant(), persist=True, **config_
        )
    )
    async with world:
        yield world


def api_from(kubeconfig: dict[str, Any]) -> client.ApiClient:
    configuration = client.Configuration()
    config.load_kube_config_from_dict(
        kubeconfig, client_configuration=configuration, persist_config=False
    )
    return client.ApiClient(configuration)


def management_api(world: SimWorld) -> client.ApiClient:
    return api_from(yaml.safe_load(world.management_kubeconfig_path.read_text()))


def only_delays(**delays: float) -> SimTiming:
    """Every simulated step immediate but the named ones (seconds at scale 1)."""
    return SimTiming(time_scale=1.0, delays=dict.fromkeys(DEFAULT_DELAYS, 0.0)).with_delays(
        **delays
    )


# --------------------------------------------------------------------------- objects, versions


async def test_a_restarted_world_serves_what_it_served_to_clients_built_before(
    tmp_path: Path,
) -> None:
    async with persisted(tmp_path) as world:
        state_id = world.state_id
        api = management_api(world)  # kept across the restart: same port, CA and token
        core = client.CoreV1Api(api)
        kept = await call(
            core.create_namespaced_config_map,
            "default",
            {"metadata": {"name": "kept"}, "data": {"answer": "42"}},
        )
        await call(
            core.create_namespaced_service_account, "default", {"metadata": {"name": "robot"}}
        )
        token = await call(
            core.create_namespaced_service_account_token,
            "robot",
            "default",
            {"spec": {"expirationSeconds": 3600}},
        )
        listed_before = (await call(core.list_namespaced_config_map, "default")).metadata
        hostprovider = json.loads(world.hostprovider_json_path.read_text())
        async with httpx.AsyncClient(
            base_url=hostprovider["url"],
            headers={"Authorization": f"Bearer {hostprovider['apiKey']}"},
        ) as provider:
            claimed = await provider.post(
                "/v1/claims",
                json={
                    "location": "fra1",
                    "sku": {"gpuModelId": "h100-80gb"},
                    "count": 2,
                    "idempotencyKey": "kept-claim",
                },
            )
        assert claimed.status_code == 201, claimed.text
    assert (tmp_path / STATE_FILE).stat().st_mode & 0o777 == 0o600  # the CA key, the tokens

    async with persisted(tmp_path) as world:
        assert world.state_id == state_id
        again = await call(core.read_namespaced_config_map, "kept", "default")
        assert again.metadata.uid == kept.metadata.uid
        assert again.metadata.resource_version == kept.metadata.resource_version
        assert again.data == {"answer": "42"}
        listed_after = (await call(core.list_namespaced_config_map, "default")).metadata
        assert int(listed_after.resource_version) > int(listed_before.resource_version)
        newer = await call(
            core.create_namespaced_config_map, "default", {"metadata": {"name": "newer"}}
        )
        assert int(newer.metadata.resource_version) > int(listed_before.resource_version)
        # A token issued before the restart still authenticates.
        robot = api_from(
            {
                **world.management.kubeconfig(token.status.token),
                "current-context": world.management.name,
            }
        )
        names = await call(client.CoreV1Api(robot).list_namespaced_config_map, "default")
        assert {"kept", "newer"} <= {c.metadata.name for c in names.items}
        robot.close()
        # The host provider kept its key and its claims.
        assert (
            json.loads(world.hostprovider_json_path.read_text())["apiKey"] == hostprovider["apiKey"]
        )
        async with httpx.AsyncClient(
            base_url=world.hostprovider.url,
            headers={"Authorization": f"Bearer {hostprovider['apiKey']}"},
        ) as provider:
            claim = (await provider.get("/v1/claims/kept-claim")).json()
            hosts = (await provider.get("/v1/hosts", params={"state": "claimed"})).json()
    assert claim["state"] == "active"
    assert sorted(h["id"] for h in claim["hosts"]) == sorted(h["id"] for h in hosts["items"])
    assert len(claim["hosts"]) == 2
    api.close()


def first_event(core: client.CoreV1Api, resource_version: str) -> tuple[str, str]:
    """Blocking: the first (type, name) of a config map watch from `resource_version`."""
    stream = watch.Watch()
    for event in stream.stream(
        core.list_namespaced_config_map,
        "default",
        resource_version=resource_version,
        timeout_seconds=20,
    ):
        stream.stop()
        return event["type"], event["object"].metadata.name
    raise AssertionError("the watch ended without an event")


async def test_a_watch_from_before_a_restart_is_gone_one_from_after_resumes(
    tmp_path: Path,
) -> None:
    async with persisted(tmp_path) as world:
        api = management_api(world)
        core = client.CoreV1Api(api)
        await call(core.create_namespaced_config_map, "default", {"metadata": {"name": "a"}})
        before = (await call(core.list_namespaced_config_map, "default")).metadata.resource_version
    async with persisted(tmp_path):
        with pytest.raises(ApiException) as gone:
            await call(first_event, core, before)
        assert gone.value.status == 410  # the client lists again, as after an etcd compaction
        after = (await call(core.list_namespaced_config_map, "default")).metadata.resource_version
        watching = asyncio.create_task(call(first_event, core, after))
        await call(core.create_namespaced_config_map, "default", {"metadata": {"name": "b"}})
        assert await watching == ("ADDED", "b")
    api.close()


def start_sim(state_dir: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sim",
            "--state-dir",
            str(state_dir),
            "--persist",
            "--instant",
            *args,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


async def serving(state_dir: Path, sim: subprocess.Popen[bytes]) -> client.ApiClient:
    """The sim's management client once the sim process `sim` announced itself in world.json."""

    async def announced() -> bool:
        assert sim.poll() is None, sim.stderr.read() if sim.stderr else sim.returncode
        world = state_dir / "world.json"
        return world.exists() and json.loads(world.read_text())["pid"] == sim.pid

    await eventually(announced, timeout=60, what="the sim serving")
    return api_from(yaml.safe_load((state_dir / "management.kubeconfig").read_text()))


async def test_resource_versions_keep_growing_after_a_kill(tmp_path: Path) -> None:
    sim = start_sim(tmp_path)
    try:
        core = client.CoreV1Api(await serving(tmp_path, sim))
        saved = await call(
            core.create_namespaced_config_map, "default", {"metadata": {"name": "saved"}}
        )

        async def in_state_file() -> bool:
            return b'"saved"' in (tmp_path / STATE_FILE).read_bytes()

        await eventually(in_state_file, timeout=30, what="the world saved with the config map")
        seen = int(saved.metadata.resource_version)
        # Written after that save, then a SIGKILL before (most likely) the next one.
        for index in range(40):
            created = await call(
                core.create_namespaced_config_map,
                "default",
                {"metadata": {"name": f"late-{index}"}},
            )
            seen = max(seen, int(created.metadata.resource_version))
        sim.send_signal(signal.SIGKILL)
        sim.wait()
    finally:
        if sim.poll() is None:
            sim.kill()
            sim.wait()

    again = start_sim(tmp_path)
    try:
        core = client.CoreV1Api(await serving(tmp_path, again))
        listed = await call(core.list_namespaced_config_map, "default")
        assert int(listed.metadata.resource_version) >= seen
        survivor = next(c for c in listed.items if c.metadata.name == "saved")
        assert survivor.metadata.uid == saved.metadata.uid
        created = await call(
            core.create_namespaced_config_map, "default", {"metadata": {"name": "after"}}
        )
        assert int(created.metadata.resource_version) > seen
    finally:
        again.send_signal(signal.SIGTERM)
        again.wait(timeout=30)
    assert again.returncode == 0
    assert json.loads((tmp_path / RESERVATIONS_FILE).read_text())["management"] > seen


async def test_a_world_of_another_development_state_is_refused(tmp_path: Path) -> None:
    async with persisted(tmp_path, state_id="first"):
        pass
    with pytest.raises(StateMismatch, match="belongs to development state first, not second"):
        SimWorld(WorldConfig(state_dir=tmp_path, persist=True, state_id="second"))
    refused = await call(
        subprocess.run,
        [sys.executable, "-m", "sim", "--state-dir", str(tmp_path), "--persist", "--state-id", "x"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        f"sim: {tmp_path / STATE_FILE} belongs to development state first, not x"
    )


async def test_without_persistence_nothing_is_kept(tmp_path: Path) -> None:
    async with SimWorld(WorldConfig(state_dir=tmp_path, timing=SimTiming.instant())) as world:
        assert world.state_id is None
    assert not (tmp_path / STATE_FILE).exists()
    assert not (tmp_path / RESERVATIONS_FILE).exists()


async def test_every_server_says_which_world_it_is(tmp_path: Path) -> None:
    # verify=False: the sim's own CA, on loopback.
    async with (
        persisted(tmp_path, state_id="mine") as world,
        httpx.AsyncClient(verify=False) as http,
    ):
        management = (await http.get(f"{world.management.url}{IDENTITY_PATH}")).json()
        provider = (await http.get(f"{world.hostprovider.url}{IDENTITY_PATH}")).json()
    assert management == {
        "kind": IDENTITY_KIND, "stateId": "mine", "pid": os.getpid(), "server": "management",
    }  # fmt: skip
    assert provider["kind"] == IDENTITY_KIND
    assert (provider["stateId"], provider["server"]) == ("mine", "hostProvider")


# --------------------------------------------------------------------------- clusters, services


def cluster_deployment(name: str, config_: dict[str, Any], template: str) -> dict[str, Any]:
    credential = (
        "remote-cluster-credential" if template.startswith("remote") else "docker-stub-credential"
    )
    return {
        "apiVersion": f"{GROUP}/v1beta1",
        "kind": "ClusterDeployment",
        "metadata": {"name": name, "namespace": KCM_NAMESPACE},
        "spec": {"template": template, "credential": credential, "config": config_},
    }


def notebook_service_set(name: str, cluster: str, release: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1beta1",
        "kind": "ServiceSet",
        "metadata": {"name": name, "namespace": KCM_NAMESPACE},
        "spec": {
            "cluster": cluster,
            "provider": {"name": "ksm-projectsveltos"},
            "services": [
                {
                    "name": release,
                    "namespace": release,
                    "template": "jupyter-notebook-0-3-0",
                    "values": yaml.safe_dump({"notebookPassword": "secret"}),
                }
            ],
        },
    }


def ready(obj: dict[str, Any] | None) -> bool:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


async def wait_ready(world: SimWorld, name: str) -> dict[str, Any]:
    rt = world.store.registry.get(GROUP, "clusterdeployments")

    async def probe() -> dict[str, Any] | None:
        return world.store.try_get(rt, KCM_NAMESPACE, name)

    found = await eventually(probe, until=ready, timeout=60, what=f"{name} Ready")
    assert found is not None
    return found


async def test_clusters_and_services_resume_as_they_were(tmp_path: Path) -> None:
    # Real delays: a cluster whose progress the controller forgot would go back through its
    # steps (Ready=False, a status write), a forgotten release would be reinstalled.
    timing = SimTiming.scaled(0.3)
    cluster, service_set, release = unique("kept"), unique("ss"), unique("nb")
    async with persisted(tmp_path, timing) as world:
        cd_rt = world.store.registry.get(GROUP, "clusterdeployments")
        ss_rt = world.store.registry.get(GROUP, "servicesets")
        world.store.create(
            cd_rt, cluster_deployment(cluster, {"machines": [H100_HOST]}, "remote-cluster-1-0-0")
        )
        await wait_ready(world, cluster)
        world.store.create(ss_rt, notebook_service_set(service_set, cluster, release))

        async def deployed() -> dict[str, Any] | None:
            return world.store.try_get(ss_rt, KCM_NAMESPACE, service_set)

        await eventually(
            deployed,
            until=lambda s: bool(((s or {}).get("status") or {}).get("deployed")),
            timeout=60,
            what="the notebook deployed",
        )
        child = world.child(KCM_NAMESPACE, cluster)
        assert child is not None

        async def pod_running() -> list[dict[str, Any]]:
            return [
                p
                for p in child.store.list(PODS, release)[0]
                if (p.get("status") or {}).get("phase") == "Running"
            ]

        await eventually(pod_running, timeout=60, what="the notebook's pod running")
        before_cd = world.store.get(cd_rt, KCM_NAMESPACE, cluster)
        before_ss = world.store.get(ss_rt, KCM_NAMESPACE, service_set)
        secret = world.store.get(SECRETS, KCM_NAMESPACE, f"{cluster}-kubeconfig")
        kubeconfig = yaml.safe_load(base64.b64decode(secret["data"]["value"]))
        node_uids = [n["metadata"]["uid"] for n in child.store.list(NODES)[0]]
        pod_uids = [p["metadata"]["uid"] for p in await pod_running()]
        pod_ips = {(p.get("status") or {}).get("podIP") for p in child.store.list(PODS)[0]}

    async with persisted(tmp_path, timing) as world:
        # A second cluster going Ready shows the controller went through the restored one first.
        second = unique("after")
        world.store.create(
            cd_rt, cluster_deployment(second, {"workersNumber": 1}, "docker-hosted-cp-1-0-0")
        )
        await wait_ready(world, second)
        assert world.store.get(cd_rt, KCM_NAMESPACE, cluster) == before_cd, "no status write"
        assert world.store.get(ss_rt, KCM_NAMESPACE, service_set) == before_ss, "no reinstall"
        child_api = api_from(kubeconfig)  # the kubeconfig handed out before the restart
        child_core = client.CoreV1Api(child_api)
        nodes = await call(child_core.list_node)
        assert [n.metadata.uid for n in nodes.items] == node_uids
        pods = await call(child_core.list_namespaced_pod, release)
        assert [(p.metadata.uid, p.status.phase) for p in pods.items] == [
            (uid, "Running") for uid in pod_uids
        ]
        # A pod started after the restart gets an IP no pod from before it holds.
        restored = world.child(KCM_NAMESPACE, cluster)
        assert restored is not None
        restored.store.create(
            PODS,
            {
                "metadata": {"name": "newcomer", "namespace": "default"},
                "spec": {
                    "nodeName": nodes.items[0].metadata.name,
                    "containers": [{"name": "main", "image": "busybox"}],
                },
            },
        )

        async def newcomer_ip() -> str:
            pod = restored.store.get(PODS, "default", "newcomer")
            return str((pod.get("status") or {}).get("podIP") or "")

        assert await eventually(newcomer_ip, timeout=30, what="an IP") not in pod_ips
        # Removing the service after the restart uninstalls what was installed before it.
        world.store.delete(ss_rt, KCM_NAMESPACE, service_set)

        async def uninstalled() -> bool:
            restored = world.child(KCM_NAMESPACE, cluster)
            assert restored is not None
            return (
                world.store.try_get(ss_rt, KCM_NAMESPACE, service_set) is None
                and restored.store.try_get(NAMESPACES, None, release) is None
            )

        await eventually(uninstalled, timeout=60, what="the notebook uninstalled")
        child_api.close()


async def test_work_in_flight_goes_on_after_a_restart(tmp_path: Path) -> None:
    # First a world where a machine takes an hour to get Ready and a pod's grace period two
    # minutes; then the same world, resumed faster: the machine joins, the pod goes.
    cluster = unique("joining")
    async with persisted(tmp_path, only_delays(node_ready=3600)) as world:
        cd_rt = world.store.registry.get(GROUP, "clusterdeployments")
        world.store.create(
            cd_rt, cluster_deployment(cluster, {"workersNumber": 1}, "docker-hosted-cp-1-0-0")
        )

        async def registered() -> list[dict[str, Any]]:
            child = world.child(KCM_NAMESPACE, cluster)
            return [] if child is None else child.store.list(NODES)[0]

        node = (await eventually(registered, timeout=60, what="the node registered"))[0]
        assert not ready(node)
        child = world.child(KCM_NAMESPACE, cluster)
        assert child is not None
        child.store.create(
            PODS,
            {
                "metadata": {"name": "leaving", "namespace": "default"},
                "spec": {
                    "nodeName": node["metadata"]["name"],
                    "terminationGracePeriodSeconds": 3600,
                    "containers": [
                        {"name": "main", "image": "busybox", "command": ["sleep", "infinity"]}
                    ],
                },
            },
        )

        async def running() -> dict[str, Any] | None:
            return child.store.try_get(PODS, "default", "leaving")

        await eventually(
            running,
            until=lambda p: ((p or {}).get("status") or {}).get("phase") == "Running",
            what="the pod running",
        )
        child.store.delete(PODS, "default", "leaving")
        assert child.store.get(PODS, "default", "leaving")["metadata"]["deletionTimestamp"]

    async with persisted(tmp_path, SimTiming.scaled(0.01)) as world:
        await wait_ready(world, cluster)
        child = world.child(KCM_NAMESPACE, cluster)
        assert child is not None
        joined = child.store.get(NODES, None, node["metadata"]["name"])
        assert joined["metadata"]["uid"] == node["metadata"]["uid"], "the same machine, joined"
        assert ready(joined)

        async def gone() -> bool:
            return child.store.try_get(PODS, "default", "leaving") is None

        await eventually(gone, timeout=30, what="the terminating pod removed")
