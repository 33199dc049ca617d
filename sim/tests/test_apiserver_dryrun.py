"""dryRun=All on every write verb: checked and answered like the real thing, nothing persisted.

The `kube` tests run on the emulator and a real control plane; the `cluster` ones also prove, on
the emulator's store, that a dry run emits no watch event.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sim.apiserver.registry import CONFIGMAPS, PODS
from sim.apiserver.server import ClusterServer
from sim.apiserver.store import ClusterStore, WatchEvent
from sim.tests.conftest import NO_SCHEDULER, Kube
from sim.tests.test_apiserver_kubectl import KUBECTL, kubectl

call = asyncio.to_thread


def pod(name: str, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": NO_SCHEDULER,
        "containers": [{"name": "c", "image": "busybox"}],
    }
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "labels": {"app": name}}, "spec": spec}


async def nothing_emitted(
    store: ClusterStore, since: int, action: Callable[[], Awaitable[Any]]
) -> Any:
    """Run `action`, then prove no event was emitted: the first event after it is a marker write."""
    watcher = store.watch(CONFIGMAPS, "kube-public", resource_version=since)
    watcher_pods = store.watch(PODS, None, resource_version=since)
    try:
        result = await action()
        assert store.resource_version == since
        store.create(CONFIGMAPS, {"metadata": {"name": "marker"}}, namespace="kube-public")
        event: WatchEvent = await asyncio.wait_for(watcher.__anext__(), 5)
        assert (event.type, event.object["metadata"]["name"]) == ("ADDED", "marker")
        assert watcher_pods._queue.empty()
        return result
    finally:
        watcher.close()
        watcher_pods.close()


async def test_dry_run_create_answers_what_would_be_stored(
    cluster: ClusterServer, api_client: client.ApiClient
) -> None:
    store = cluster.store
    core = client.CoreV1Api(api_client)
    body = {"metadata": {"generateName": "cfg-"}, "data": {"a": "1"}}
    created = await nothing_emitted(
        store, store.resource_version,
        lambda: call(core.create_namespaced_config_map, "default", body, dry_run="All"),
    )  # fmt: skip
    assert created.metadata.name.startswith("cfg-")
    assert created.metadata.uid
    assert created.metadata.creation_timestamp is not None
    assert created.metadata.resource_version is None
    assert created.data == {"a": "1"}
    assert store.try_get(CONFIGMAPS, "default", created.metadata.name) is None


async def test_dry_run_create_still_validates(kube: Kube) -> None:
    core = client.CoreV1Api(kube.api)
    with pytest.raises(ApiException) as err:
        await call(
            core.create_namespaced_config_map, kube.namespace, {"metadata": {"name": "Bad_Name"}},
            dry_run="All",
        )  # fmt: skip
    assert err.value.status == 422


async def test_dry_run_update_and_patch_keep_the_stored_object(
    cluster: ClusterServer, api_client: client.ApiClient
) -> None:
    store = cluster.store
    stored = store.create(PODS, pod("web"), namespace="default")
    rv = stored["metadata"]["resourceVersion"]
    core = client.CoreV1Api(api_client)
    replaced_body = {**stored, "metadata": {**stored["metadata"], "labels": {"app": "changed"}}}
    replaced = await nothing_emitted(
        store, store.resource_version,
        lambda: call(core.replace_namespaced_pod, "web", "default", replaced_body, dry_run="All"),
    )  # fmt: skip
    assert replaced.metadata.labels == {"app": "changed"}
    assert replaced.metadata.resource_version == rv
    patched = await call(
        core.patch_namespaced_pod, "web", "default", {"metadata": {"labels": {"tier": "x"}}},
        dry_run="All",
    )  # fmt: skip
    assert patched.metadata.labels == {"app": "web", "tier": "x"}
    status = await call(
        core.patch_namespaced_pod_status, "web", "default", {"status": {"phase": "Running"}},
        dry_run="All",
    )  # fmt: skip
    assert status.status.phase == "Running"
    after = store.get(PODS, "default", "web")
    assert after["metadata"]["resourceVersion"] == rv
    assert after["metadata"]["labels"] == {"app": "web"}
    assert after["status"]["phase"] == "Pending"


async def test_dry_run_delete_removes_nothing(
    cluster: ClusterServer, api_client: client.ApiClient
) -> None:
    store = cluster.store
    store.create(CONFIGMAPS, {"metadata": {"name": "keep"}}, namespace="default")
    store.create(PODS, pod("bound", node="worker-1"), namespace="default")
    core = client.CoreV1Api(api_client)
    status = await nothing_emitted(
        store, store.resource_version,
        lambda: call(core.delete_namespaced_config_map, "keep", "default", dry_run="All"),
    )  # fmt: skip
    assert status["status"] == "Success", status
    graceful = await call(core.delete_namespaced_pod, "bound", "default", dry_run="All")
    assert graceful.metadata.deletion_timestamp is not None
    await call(
        core.create_namespaced_pod_eviction, "bound", "default",
        {"metadata": {"name": "bound"}, "deleteOptions": {"dryRun": ["All"]}},
    )  # fmt: skip
    await call(core.delete_collection_namespaced_config_map, "default", dry_run="All")
    assert store.try_get(CONFIGMAPS, "default", "keep") is not None
    assert not store.get(PODS, "default", "bound")["metadata"].get("deletionTimestamp")


async def exists(read: Callable[..., Any], *args: Any) -> bool:
    try:
        await call(read, *args)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


async def test_dry_runs_persist_nothing(kube: Kube) -> None:
    """Every write verb with dryRun=All answers as if done; reading back shows nothing changed."""
    core = client.CoreV1Api(kube.api)
    ns = kube.namespace
    body = {"metadata": {"generateName": "cfg-"}, "data": {"a": "1"}}
    created = await call(core.create_namespaced_config_map, ns, body, dry_run="All")
    assert created.metadata.name.startswith("cfg-")
    assert created.metadata.uid
    assert created.metadata.creation_timestamp is not None
    assert created.metadata.resource_version is None
    assert not await exists(core.read_namespaced_config_map, created.metadata.name, ns)

    stored = await call(core.create_namespaced_pod, ns, pod("web", node="worker-1"))
    rv = stored.metadata.resource_version
    stored.metadata.labels = {"app": "changed"}
    replaced = await call(core.replace_namespaced_pod, "web", ns, stored, dry_run="All")
    assert replaced.metadata.labels == {"app": "changed"}
    assert replaced.metadata.resource_version == rv
    patched = await call(
        core.patch_namespaced_pod, "web", ns, {"metadata": {"labels": {"tier": "x"}}},
        dry_run="All",
    )  # fmt: skip
    assert patched.metadata.labels == {"app": "web", "tier": "x"}
    status = await call(
        core.patch_namespaced_pod_status, "web", ns, {"status": {"phase": "Running"}},
        dry_run="All",
    )  # fmt: skip
    assert status.status.phase == "Running"
    graceful = await call(core.delete_namespaced_pod, "web", ns, dry_run="All")
    assert graceful.metadata.deletion_timestamp is not None
    await call(
        core.create_namespaced_pod_eviction, "web", ns,
        {"metadata": {"name": "web"}, "deleteOptions": {"dryRun": ["All"]}},
    )  # fmt: skip
    await call(core.create_namespaced_config_map, ns, {"metadata": {"name": "keep"}})
    deleted = await call(core.delete_namespaced_config_map, "keep", ns, dry_run="All")
    assert deleted["status"] == "Success"  # a Status (the client does not type it)
    await call(core.delete_collection_namespaced_config_map, ns, dry_run="All")
    after = await call(core.read_namespaced_pod, "web", ns)
    assert after.metadata.resource_version == rv
    assert after.metadata.labels == {"app": "web"}
    assert after.metadata.deletion_timestamp is None
    assert after.status.phase == "Pending"
    assert await exists(core.read_namespaced_config_map, "keep", ns)


@pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl is not installed in the venv")
async def test_kubectl_server_dry_run(kube: Kube) -> None:
    manifest = kube.kubeconfig_file.parent / "planned.yaml"
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "planned"}, "data": {"a": "1"}}))  # fmt: skip
    ns = ("-n", kube.namespace)
    out = await kubectl(
        kube.kubeconfig_file, *ns, "create", "-f", str(manifest), "--dry-run=server"
    )
    assert "configmap/planned created (server dry run)" in out
    core = client.CoreV1Api(kube.api)
    assert not await exists(core.read_namespaced_config_map, "planned", kube.namespace)
    await call(core.create_namespaced_config_map, kube.namespace, {"metadata": {"name": "kept"}})
    out = await kubectl(
        kube.kubeconfig_file, *ns, "delete", "configmap", "kept", "--dry-run=server"
    )
    assert f'configmap "kept" deleted from {kube.namespace} namespace (server dry run)' in out
    assert await exists(core.read_namespaced_config_map, "kept", kube.namespace)


def _create_with(core: client.CoreV1Api, dry_run: str) -> Any:
    return core.create_namespaced_config_map("default", {"metadata": {"name": "x"}}, dry_run=dry_run)  # fmt: skip


def _delete_with(core: client.CoreV1Api, dry_run: str) -> Any:
    return core.delete_namespaced_config_map("x", "default", dry_run=dry_run)


@pytest.mark.parametrize(
    "verb",
    [
        pytest.param(_create_with, id="create"),
        pytest.param(_delete_with, id="delete"),
    ],
)
async def test_unsupported_dry_run_value_is_422(
    kube: Kube, verb: Callable[[client.CoreV1Api, str], Any]
) -> None:
    core = client.CoreV1Api(kube.api)
    with pytest.raises(ApiException) as err:
        await call(verb, core, "Some")
    assert err.value.status == 422
    assert 'supported values: "All"' in json.loads(err.value.body)["message"]


@pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl is not installed in the venv")
async def test_kubectl_server_dry_run_create_and_delete(
    cluster: ClusterServer, kubeconfig_file: Path
) -> None:
    store = cluster.store
    manifest = kubeconfig_file.parent / "planned.yaml"
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "planned"}, "data": {"a": "1"}}))  # fmt: skip
    out = await kubectl(kubeconfig_file, "create", "-f", str(manifest), "--dry-run=server")
    assert "configmap/planned created (server dry run)" in out
    assert store.try_get(CONFIGMAPS, "default", "planned") is None
    store.create(CONFIGMAPS, {"metadata": {"name": "kept"}}, namespace="default")
    out = await kubectl(kubeconfig_file, "delete", "configmap", "kept", "--dry-run=server")
    assert 'configmap "kept" deleted' in out
    assert "(server dry run)" in out
    assert store.try_get(CONFIGMAPS, "default", "kept") is not None
