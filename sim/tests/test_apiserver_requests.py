"""The per-request counter: every Kubernetes API request a sim server answers is counted by verb
and resource (`sim.apiserver.requests`), and the world serves every cluster's counts on
`GET /sim/v1/requests`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client

from sim.apiserver.auth import CertificateAuthority
from sim.apiserver.requests import NON_RESOURCE, classify
from sim.apiserver.server import ClusterServer
from sim.apiserver.store import ClusterStore
from sim.faults import FaultInjector
from sim.tests.conftest import call, make_api_client
from sim.tests.test_world_node_faults import child_api
from sim.timing import SimTiming
from sim.world import KCM_NAMESPACE, MANAGEMENT_NAME, REQUESTS_PATH, SimWorld, WorldConfig
from tests.helpers import unique


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        pytest.param("GET", "/api/v1/nodes", {}, ("list", "nodes"), id="list-cluster-scoped"),
        pytest.param("GET", "/api/v1/nodes/n1", {}, ("get", "nodes"), id="get"),
        pytest.param(
            "GET", "/api/v1/namespaces/a/pods", {"watch": "true"}, ("watch", "pods"), id="watch"
        ),
        pytest.param(
            "POST", "/api/v1/namespaces/a/pods/p/eviction", {}, ("create", "pods/eviction"),
            id="subresource",
        ),
        pytest.param("PATCH", "/api/v1/nodes/n1", {}, ("patch", "nodes"), id="patch"),
        pytest.param("PUT", "/api/v1/nodes/n1/status", {}, ("update", "nodes/status"), id="put"),
        pytest.param(
            "DELETE", "/api/v1/namespaces/a/pods", {}, ("deletecollection", "pods"),
            id="deletecollection",
        ),
        pytest.param("DELETE", "/api/v1/namespaces/a", {}, ("delete", "namespaces"), id="ns"),
        pytest.param(
            "PUT", "/api/v1/namespaces/a/finalize", {}, ("update", "namespaces/finalize"),
            id="namespace-subresource",
        ),
        pytest.param(
            "GET", "/apis/k0rdent.mirantis.com/v1beta1/namespaces/kcm-system/clusterdeployments",
            {}, ("list", "clusterdeployments.k0rdent.mirantis.com"), id="group",
        ),
        pytest.param("GET", "/apis/apps/v1", {}, ("get", NON_RESOURCE), id="discovery"),
        pytest.param("GET", "/version", {}, ("get", NON_RESOURCE), id="version"),
    ],
)  # fmt: skip
def test_requests_are_classified_as_kube_apiserver_does(
    method: str, path: str, query: dict[str, str], expected: tuple[str, str]
) -> None:
    assert classify(method, path, query) == expected


@pytest.fixture
async def faulty_server(sim_ca: CertificateAuthority) -> AsyncIterator[ClusterServer]:
    name = unique("counted")
    server = ClusterServer(name, ClusterStore(name), sim_ca, faults=FaultInjector())
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def test_a_server_counts_what_it_answers(faulty_server: ClusterServer) -> None:
    core: Any = client.CoreV1Api(make_api_client(faulty_server))
    before = faulty_server.requests.snapshot()
    pod = {
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }
    await call(core.create_namespaced_pod, "default", pod)
    await call(core.read_namespaced_pod, "p", "default")
    await call(core.list_namespaced_pod, "default")
    await call(core.list_namespaced_pod, "default")
    eviction = {"metadata": {"name": "p", "namespace": "default"}}
    await call(core.create_namespaced_pod_eviction, "p", "default", eviction)
    # A request the fault injector fails was sent all the same: it counts.
    assert faulty_server.faults is not None
    faulty_server.faults.fail_next(503, path="/api/v1/namespaces/default/pods")
    with pytest.raises(client.ApiException):
        await call(core.list_namespaced_pod, "default")
    after = faulty_server.requests.snapshot()
    grown = {key: n - before.get(key, 0) for key, n in after.items() if n != before.get(key, 0)}
    assert grown == {
        "create pods": 1,
        "get pods": 1,
        "list pods": 3,
        "create pods/eviction": 1,
    }


async def test_the_world_serves_every_clusters_counts(tmp_path: Path) -> None:
    config = WorldConfig(state_dir=tmp_path, timing=SimTiming.instant())
    async with SimWorld(config) as world:
        name = unique("counted")
        core = await child_api(world, name)
        await call(core.list_node)
        async with httpx.AsyncClient(verify=False) as http:  # the sim's own CA; loopback only
            answer = await http.get(f"{world.management.url}{REQUESTS_PATH}")
        answer.raise_for_status()
        counts = answer.json()
        child = counts[f"{KCM_NAMESPACE}/{name}"]
        # At least two lists of nodes: the wait for them to be Ready, and the one above.
        assert child["list nodes"] >= 2
        assert counts[MANAGEMENT_NAME] == world.management.requests.snapshot()
        assert counts == world.request_counts()
