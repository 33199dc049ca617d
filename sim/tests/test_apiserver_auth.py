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
from sim.tests.conftest import Kube, make_api_client
from tests.helpers import eventually, unique

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


async def test_a_bad_token_is_401(kube: Kube) -> None:
    api = kube.client_with_token("not-a-token")
    with pytest.raises(ApiException) as err:
        await call(client.CoreV1Api(api).list_namespace)
    assert err.value.status == 401
    assert json.loads(err.value.body)["reason"] == "Unauthorized"
    api.close()


async def test_no_credentials_is_401_on_the_emulator_and_403_anonymous_on_real(
    kube: Kube,
) -> None:
    """A real server takes a request without credentials as system:anonymous (RBAC then refuses
    it: 403); the emulator has no anonymous user (401). Colony always sends credentials."""
    api = kube.client_with_token("x")
    api.configuration.api_key = {}
    with pytest.raises(ApiException) as err:
        await call(client.CoreV1Api(api).list_namespace)
    assert err.value.status == (403 if kube.real else 401)
    api.close()


async def test_a_service_account_token_is_that_service_account(kube: Kube) -> None:
    """TokenRequest (what `colonyctl token` asks for: no audiences, the API server's own): the
    token works, for its expiry, as the service account (RBAC: cluster-admin bound to it here)."""
    core = client.CoreV1Api(kube.api)
    ns = kube.namespace
    await call(core.create_namespaced_service_account, ns, {"metadata": {"name": "bot"}})
    await call(
        client.RbacAuthorizationV1Api(kube.api).create_namespaced_role_binding,
        ns,
        {
            "metadata": {"name": "bot"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": ns}],
        },
    )  # fmt: skip
    before = dt.datetime.now(dt.UTC)
    issued = await call(
        core.create_namespaced_service_account_token,
        "bot",
        ns,
        {"spec": {"audiences": [], "expirationSeconds": 900}},
    )
    assert issued.spec.expiration_seconds == 900
    expires = issued.status.expiration_timestamp
    assert before + dt.timedelta(seconds=895) <= expires <= before + dt.timedelta(seconds=960)
    user = kube.client_with_token(issued.status.token)
    listed = await eventually(
        lambda: call(client.CoreV1Api(user).list_namespaced_config_map, ns),
        what="the token accepted",
    )
    assert listed is not None
    user.close()


async def test_a_token_for_another_audience_is_refused(kube: Kube) -> None:
    """kube-apiserver accepts only tokens for its own audiences (--api-audiences, by default its
    issuer); one asked for without audiences gets those."""
    core = client.CoreV1Api(kube.api)
    await call(core.create_namespaced_service_account, kube.namespace, {"metadata": {"name": "a"}})
    issued = await call(
        core.create_namespaced_service_account_token,
        "a",
        kube.namespace,
        {"spec": {"audiences": ["colony"], "expirationSeconds": 900}},
    )
    assert issued.spec.audiences == ["colony"]
    user = kube.client_with_token(issued.status.token)
    with pytest.raises(ApiException) as refused:
        await call(client.CoreV1Api(user).list_namespaced_config_map, kube.namespace)
    assert refused.value.status == 401
    user.close()
    own = await call(
        core.create_namespaced_service_account_token, "a", kube.namespace, {"spec": {}}
    )
    assert len(own.spec.audiences) == 1
    assert own.spec.audiences[0].startswith("https://")


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
    request = {"spec": {"expirationSeconds": 900}}
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
