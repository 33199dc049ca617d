"""Transport and authentication: HTTPS with the sim CA, per-cluster bearer tokens, TokenRequest."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import AsyncIterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sim.apiserver.auth import CertificateAuthority
from sim.apiserver.server import ClusterServer
from sim.apiserver.store import ClusterStore
from sim.tests.conftest import make_api_client
from tests.helpers import unique

call = asyncio.to_thread


class FakeClock:
    def __init__(self) -> None:
        self.now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now


@pytest.fixture
async def clocked(sim_ca: CertificateAuthority) -> AsyncIterator[tuple[ClusterServer, FakeClock]]:
    clock = FakeClock()
    name = unique("clocked")
    server = ClusterServer(name, ClusterStore(name, clock=clock), sim_ca)
    await server.start()
    yield server, clock
    await server.stop()


@pytest.mark.parametrize(
    "token",
    [
        pytest.param("", id="missing"),
        pytest.param("not-a-token", id="unknown"),
    ],
)
async def test_bad_token_is_401(cluster: ClusterServer, token: str) -> None:
    api = make_api_client(cluster, token=token or None)
    if not token:
        api.configuration.api_key = {}
    with pytest.raises(ApiException) as err:
        await call(client.CoreV1Api(api).list_namespace)
    assert err.value.status == 401
    assert json.loads(err.value.body)["reason"] == "Unauthorized"
    api.close()


async def test_token_of_another_cluster_is_rejected(
    cluster: ClusterServer, clocked: tuple[ClusterServer, FakeClock]
) -> None:
    other, _ = clocked
    assert cluster.url != other.url
    api = make_api_client(cluster, token=other.admin_token)
    with pytest.raises(ApiException) as err:
        await call(client.CoreV1Api(api).list_namespace)
    assert err.value.status == 401
    api.close()


async def test_token_request_expires(clocked: tuple[ClusterServer, FakeClock]) -> None:
    server, clock = clocked
    admin = make_api_client(server)
    core = client.CoreV1Api(admin)
    await call(core.create_namespaced_service_account, "default", {"metadata": {"name": "bot"}})
    request = {"spec": {"audiences": ["colony"], "expirationSeconds": 900}}
    issued = await call(core.create_namespaced_service_account_token, "bot", "default", request)
    assert issued.status.expiration_timestamp == clock.now + dt.timedelta(seconds=900)
    assert issued.spec.expiration_seconds == 900
    user = make_api_client(server, token=issued.status.token)
    names = await call(client.CoreV1Api(user).list_namespace)
    assert "default" in [n.metadata.name for n in names.items]
    clock.now += dt.timedelta(seconds=901)
    with pytest.raises(ApiException) as err:
        await call(client.CoreV1Api(user).list_namespace)
    assert err.value.status == 401
    admin.close()
    user.close()


async def test_token_request_default_expiry(clocked: tuple[ClusterServer, FakeClock]) -> None:
    server, clock = clocked
    admin = make_api_client(server)
    core = client.CoreV1Api(admin)
    await call(core.create_namespaced_service_account, "default", {"metadata": {"name": "bot"}})
    issued = await call(
        core.create_namespaced_service_account_token, "bot", "default", {"spec": {}}
    )
    assert issued.status.expiration_timestamp == clock.now + dt.timedelta(seconds=3600)
    admin.close()


async def test_kubeconfig_shape(cluster: ClusterServer) -> None:
    kubeconfig = cluster.kubeconfig()
    assert kubeconfig["clusters"][0]["cluster"]["server"] == cluster.url
    assert kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"]
    assert kubeconfig["users"][0]["user"]["token"] == cluster.admin_token
    assert cluster.url.startswith("https://127.0.0.1:")
