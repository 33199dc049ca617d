"""Shared fixtures of the sim tests: a started `ClusterServer` and official-client `ApiClient`s.

Approach: the servers run on the test's (session-scoped) event loop, so async tests and fixtures
can also reach the store and controllers directly; the official `kubernetes` client is blocking,
so tests call it through `asyncio.to_thread` (never on the loop itself, which would deadlock).
Every client is built from the server's kubeconfig into its own `Configuration` / `ApiClient`,
never the global default.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from sim.apiserver.auth import CertificateAuthority
from sim.apiserver.server import ClusterServer
from sim.apiserver.store import ClusterStore
from tests.helpers import unique


@pytest.fixture(scope="session")
def sim_ca() -> CertificateAuthority:
    """One certificate authority for every sim server of the test session."""
    return CertificateAuthority()


def make_api_client(server: ClusterServer, token: str | None = None) -> client.ApiClient:
    """An official-client ApiClient for `server` (admin token unless `token` is given)."""
    configuration = client.Configuration()
    config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]  # untyped in the client
        server.kubeconfig(token), client_configuration=configuration, persist_config=False
    )
    return client.ApiClient(configuration)


@pytest.fixture
async def cluster(sim_ca: CertificateAuthority) -> AsyncIterator[ClusterServer]:
    """A started cluster server with a fresh, empty store (namespaces default, kube-system...)."""
    name = unique("cluster")
    server = ClusterServer(name, ClusterStore(name), sim_ca)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def api_client(cluster: ClusterServer) -> Iterator[client.ApiClient]:
    """An admin ApiClient for `cluster`; call its APIs with `asyncio.to_thread`."""
    api = make_api_client(cluster)
    try:
        yield api
    finally:
        api.close()  # type: ignore[no-untyped-call]  # untyped in the client


@pytest.fixture
def kubeconfig_file(cluster: ClusterServer, tmp_path: Path) -> Path:
    """The admin kubeconfig of `cluster` written to a file (for kubectl)."""
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(cluster.kubeconfig()))
    return path


# Re-exported so tests read `await call(api.list_node)`.
call = asyncio.to_thread
