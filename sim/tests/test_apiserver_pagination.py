"""List pagination (limit / continue) through the official client and kubectl's 500-item chunks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sim.apiserver.auth import CertificateAuthority
from sim.apiserver.registry import CONFIGMAPS, NAMESPACES, PODS
from sim.apiserver.server import ClusterServer
from sim.apiserver.store import ClusterStore
from sim.tests.conftest import Kube, make_api_client
from sim.tests.test_apiserver_kubectl import KUBECTL, kubectl
from tests.helpers import unique

call = asyncio.to_thread


def pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": "paged"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


async def test_list_pages_with_limit_and_continue(
    cluster: ClusterServer, api_client: client.ApiClient
) -> None:
    for i in range(5):
        cluster.store.create(PODS, pod(f"p{i}"), namespace="default")
    core = client.CoreV1Api(api_client)
    first = await call(core.list_namespaced_pod, "default", limit=2)
    assert [p.metadata.name for p in first.items] == ["p0", "p1"]
    assert first.metadata._continue
    assert first.metadata.remaining_item_count == 3
    names = [p.metadata.name for p in first.items]
    token = first.metadata._continue
    while token:
        page = await call(core.list_namespaced_pod, "default", limit=2, _continue=token)
        # Every page reports the resourceVersion of the first one, as kube does.
        assert page.metadata.resource_version == first.metadata.resource_version
        names += [p.metadata.name for p in page.items]
        token = page.metadata._continue
    assert names == [f"p{i}" for i in range(5)]
    assert page.metadata.remaining_item_count is None


async def test_pages_see_objects_created_meanwhile_and_skip_deleted(
    cluster: ClusterServer, api_client: client.ApiClient
) -> None:
    store = cluster.store
    for name in ("a", "c", "e"):
        store.create(CONFIGMAPS, {"metadata": {"name": name}}, namespace="default")
    core = client.CoreV1Api(api_client)
    first = await call(core.list_namespaced_config_map, "default", limit=1)
    assert [c.metadata.name for c in first.items] == ["a"]
    store.delete(CONFIGMAPS, "default", "c")
    store.create(CONFIGMAPS, {"metadata": {"name": "d"}}, namespace="default")
    rest = await call(
        core.list_namespaced_config_map, "default", limit=10, _continue=first.metadata._continue
    )
    assert [c.metadata.name for c in rest.items] == ["d", "e"]
    assert not rest.metadata._continue


async def test_selector_pages_omit_remaining_item_count(
    cluster: ClusterServer, api_client: client.ApiClient
) -> None:
    for i in range(3):
        cluster.store.create(PODS, pod(f"p{i}"), namespace="default")
    core = client.CoreV1Api(api_client)
    page = await call(core.list_namespaced_pod, "default", limit=1, label_selector="app=paged")
    assert page.metadata._continue
    assert page.metadata.remaining_item_count is None


@pytest.mark.parametrize(
    ("token", "why"),
    [
        pytest.param("not-base64!", "illegal base64 data at input byte 10", id="garbage"),
        pytest.param(
            "eyJ2IjoibWV0YS5rOHMuaW8vdjAifQ",
            "server does not recognize this encoded version meta.k8s.io/v0",
            id="wrong-version",
        ),
    ],
)
async def test_invalid_continue_is_400(kube: Kube, token: str, why: str) -> None:
    message = f"invalid continue token: continue key is not valid: {why}"
    core = client.CoreV1Api(kube.api)
    with pytest.raises(ApiException) as err:
        await call(core.list_namespaced_pod, kube.namespace, limit=1, _continue=token)
    assert err.value.status == 400
    assert json.loads(err.value.body)["message"] == message


@pytest.fixture
async def short_history_cluster(sim_ca: CertificateAuthority) -> AsyncIterator[ClusterServer]:
    name = unique("cluster")
    server = ClusterServer(name, ClusterStore(name, history_size=5), sim_ca)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def test_compacted_continue_token_is_410_with_an_inconsistent_token(
    short_history_cluster: ClusterServer,
) -> None:
    store = short_history_cluster.store
    for i in range(3):
        store.create(CONFIGMAPS, {"metadata": {"name": f"c{i}"}}, namespace="default")
    api = make_api_client(short_history_cluster)
    try:
        core = client.CoreV1Api(api)
        first = await call(core.list_namespaced_config_map, "default", limit=1)
        for i in range(10):  # push the first page's resourceVersion out of the kept history
            store.create(NAMESPACES, {"metadata": {"name": f"filler-{i}"}})
        with pytest.raises(ApiException) as err:
            await call(
                core.list_namespaced_config_map, "default", limit=1,
                _continue=first.metadata._continue,
            )  # fmt: skip
        assert err.value.status == 410
        body = json.loads(err.value.body)
        assert body["reason"] == "Expired"
        assert body["message"].startswith("The provided continue parameter is too old")
        rest = await call(
            core.list_namespaced_config_map, "default", limit=5,
            _continue=body["metadata"]["continue"],
        )  # fmt: skip
        assert [c.metadata.name for c in rest.items] == ["c1", "c2"]
        assert int(rest.metadata.resource_version) == store.resource_version
    finally:
        api.close()


@pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl is not installed in the venv")
async def test_kubectl_get_pods_all_namespaces_follows_500_chunks(
    cluster: ClusterServer, kubeconfig_file: Path
) -> None:
    store = cluster.store
    store.create(NAMESPACES, {"metadata": {"name": "second"}})
    for i in range(520):
        store.create(PODS, pod(f"pod-{i:04d}"), namespace="default" if i % 2 else "second")
    out = await kubectl(kubeconfig_file, "get", "pods", "-A", "--no-headers", "-v=6")
    lines = [line for line in out.splitlines() if line.startswith(("default ", "second "))]
    assert len(lines) == 520
    assert "limit=500" in out
    assert "continue=" in out
