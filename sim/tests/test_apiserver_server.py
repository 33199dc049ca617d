"""Server-level behaviour: discovery, fault injection hook, throughput and memory footprint."""

from __future__ import annotations

import asyncio
import base64
import json
import tempfile
import tracemalloc
from collections.abc import AsyncIterator

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sim.apiserver.auth import CertificateAuthority
from sim.apiserver.registry import NODES, PODS
from sim.apiserver.server import ClusterServer
from sim.apiserver.store import ClusterStore
from sim.faults import FaultInjector
from sim.tests.conftest import Kube, make_api_client
from tests.helpers import unique

call = asyncio.to_thread


@pytest.fixture
async def faulty(
    sim_ca: CertificateAuthority,
) -> AsyncIterator[tuple[ClusterServer, FaultInjector]]:
    faults = FaultInjector()
    name = unique("faulty")
    server = ClusterServer(name, ClusterStore(name), sim_ca, faults=faults)
    await server.start()
    yield server, faults
    await server.stop()


async def test_fault_injector_is_consulted(faulty: tuple[ClusterServer, FaultInjector]) -> None:
    server, faults = faulty
    api = make_api_client(server)
    core = client.CoreV1Api(api)
    faults.fail_next(503, path="/api/v1/namespaces")
    with pytest.raises(ApiException) as err:
        await call(core.list_namespace)
    assert err.value.status == 503
    assert json.loads(err.value.body)["kind"] == "Status"
    await call(core.list_namespace)
    # 429 carries Retry-After (urllib3 inside the official client honours it by retrying).
    faults.fail_next(429, path="/api/v1/namespaces")
    with tempfile.NamedTemporaryFile(suffix=".crt") as ca_file:
        ca_file.write(base64.b64decode(server.ca.cert_b64))
        ca_file.flush()
        pool = urllib3.PoolManager(ca_certs=ca_file.name, cert_reqs="CERT_REQUIRED", retries=False)
        response = await call(
            pool.request, "GET", f"{server.url}/api/v1/namespaces",
            headers={"Authorization": f"Bearer {server.admin_token}"},
        )  # fmt: skip
    assert response.status == 429
    assert response.headers["Retry-After"] == "1"
    api.close()


async def test_eviction_fault(faulty: tuple[ClusterServer, FaultInjector]) -> None:
    server, faults = faulty
    server.store.create(
        PODS, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    )
    faults.evict_429("default", "p")
    api = make_api_client(server)
    core = client.CoreV1Api(api)
    eviction = {"metadata": {"name": "p", "namespace": "default"}}
    with pytest.raises(ApiException) as err:
        await call(core.create_namespaced_pod_eviction, "p", "default", eviction)
    assert err.value.status == 429
    assert list(server.store.evictions) == [], "a refused eviction is not counted"
    await call(core.create_namespaced_pod_eviction, "p", "default", eviction)
    assert server.store.try_get(PODS, "default", "p") is None  # unbound: deleted at once
    assert [e.name for e in server.store.evictions] == ["p"]
    api.close()


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        pytest.param("/api", "APIVersions", id="api"),
        pytest.param("/api/v1", "APIResourceList", id="core-v1"),
        pytest.param("/apis", "APIGroupList", id="apis"),
        pytest.param("/apis/policy", "APIGroup", id="group"),
        pytest.param("/apis/policy/v1", "APIResourceList", id="policy-v1"),
        pytest.param("/apis/gateway.networking.k8s.io/v1", "APIResourceList", id="gateway-v1"),
    ],
)
async def test_discovery(
    cluster: ClusterServer, api_client: client.ApiClient, path: str, kind: str
) -> None:
    response = await call(
        api_client.call_api, "GET", cluster.url + path,
        header_params={"Authorization": f"Bearer {cluster.admin_token}"},
    )  # fmt: skip
    body = json.loads(response.read())
    assert body["kind"] == kind


async def test_discovery_lists_eviction(kube: Kube) -> None:
    resources = await call(client.CoreV1Api(kube.api).get_api_resources)
    eviction = next(r for r in resources.resources if r.name == "pods/eviction")
    assert (eviction.group, eviction.version, eviction.kind) == ("policy", "v1", "Eviction")
    version = await call(client.VersionApi(kube.api).get_code)
    assert version.major == "1"


def test_store_memory_footprint() -> None:
    """100 nodes and 1,000 running pods per cluster must stay well under 30 MB (x10 < 300 MB)."""
    tracemalloc.start()
    try:
        store = ClusterStore("mem")
        for n in range(100):
            store.create(NODES, {"metadata": {"name": f"node-{n}"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}})  # fmt: skip
        for p in range(1000):
            store.create(PODS, {"metadata": {"name": f"pod-{p}", "labels": {"app": "x"}}, "spec": {"nodeName": f"node-{p % 100}", "containers": [{"name": "c", "image": "busybox"}]}})  # fmt: skip
            store.update_status(PODS, "default", f"pod-{p}", {"phase": "Running"})
        used, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert used < 30_000_000, f"{used / 1e6:.1f} MB"


@pytest.mark.parametrize(
    "content_type",
    [
        pytest.param("application/vnd.kubernetes.protobuf", id="protobuf"),
        pytest.param("application/cbor", id="cbor"),
    ],
)
async def test_binary_encodings_are_unsupported_media_type(
    cluster: ClusterServer, content_type: str
) -> None:
    """The sim speaks JSON and YAML only; other encodings get 415 (kubectl's typed `create
    configmap|secret|namespace` generators send protobuf, so they fail clearly against the sim)."""
    with tempfile.NamedTemporaryFile(suffix=".crt") as ca_file:
        ca_file.write(base64.b64decode(cluster.ca.cert_b64))
        ca_file.flush()
        pool = urllib3.PoolManager(ca_certs=ca_file.name, cert_reqs="CERT_REQUIRED")
        response = await asyncio.to_thread(
            pool.request,
            "POST",
            f"{cluster.url}/api/v1/namespaces/default/configmaps",
            body=b"k8s\x00\x0a\x0f",
            headers={
                "Authorization": f"Bearer {cluster.admin_token}",
                "Content-Type": content_type,
            },
        )
    assert response.status == 415
    status = json.loads(response.data)
    assert status["reason"] == "UnsupportedMediaType"
    assert content_type in status["message"]
