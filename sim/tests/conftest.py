"""Shared fixtures of the sim tests: a started `ClusterServer`, official-client `ApiClient`s, and
`kube`, the Kubernetes API of a conformance test: the emulator or a real control plane.

Approach: the servers run on the test's (session-scoped) event loop, so async tests and fixtures
can also reach the store and controllers directly; the official `kubernetes` client is blocking,
so tests call it through `asyncio.to_thread` (never on the loop itself, which would deadlock).
Every client is built from the server's kubeconfig into its own `Configuration` / `ApiClient`,
never the global default.

Differential conformance: a test that takes `kube` runs twice, as the same code, against the
emulator (`emulator`: a fresh `ClusterServer`) and against this process's real control plane
(`real`, marker `real`: kube-apiserver 1.37.2 with kube-controller-manager, kube-scheduler and
KWOK; tests/realcluster.py). Each run gets a namespace of its own on both sides (the real control
plane is shared by the process's tests) and names cluster-scoped objects with `kube.name()`.
Where the two servers differ on purpose the test says so with `kube.real`, and
sim/CONTRACT.md ("Differences from a real API server") lists the difference.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from components.controlplane import ControlPlane
from infra.kube import api_client_from_dict
from sim.apiserver.auth import CertificateAuthority
from sim.apiserver.registry import NAMESPACES, NODES
from sim.apiserver.server import ClusterServer
from sim.apiserver.store import ClusterStore
from sim.controllers.kubelet import Kubelet
from tests import realcluster
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


@pytest.fixture(scope="session")
def real_control_plane() -> Iterator[ControlPlane]:
    """This test process's real control plane (tests/realcluster.py), shared by its tests."""
    yield realcluster.real_control_plane()
    realcluster.stop_all()


@dataclass
class Kube:
    """The Kubernetes API a conformance test talks to.

    Attributes:
        side: "emulator" or "real".
        api: an admin `ApiClient` (call it with `asyncio.to_thread`).
        namespace: a namespace of this test's own, on either side.
        kubeconfig: the admin kubeconfig (token on the emulator, client certificate on real).
        kubeconfig_file: the same, as a file (for kubectl).
        emulator: the emulator's server, for emulator-only checks (None on real).
        plane: the real control plane (None on the emulator).
    """

    side: str
    api: client.ApiClient
    namespace: str
    kubeconfig: dict[str, Any]
    kubeconfig_file: Path
    emulator: ClusterServer | None = None
    plane: ControlPlane | None = None

    @property
    def real(self) -> bool:
        return self.side == "real"

    @staticmethod
    def name(prefix: str) -> str:
        """A name no other test uses, for cluster-scoped objects (the real server is shared)."""
        return unique(prefix)

    def client_with_token(self, token: str) -> client.ApiClient:
        """An `ApiClient` for this server that authenticates with `token` only."""
        if self.emulator is not None:
            return make_api_client(self.emulator, token=token)
        assert self.plane is not None
        return realcluster.token_client(self.plane, token)


NO_SCHEDULER = "colony-test-none"
"""A scheduler nobody runs: a test's pods that name it stay where the test puts them (a real
control plane's kube-scheduler would bind them to whatever node other tests left Ready)."""

SIDES = [
    pytest.param("emulator", id="emulator"),
    pytest.param("real", id="real", marks=pytest.mark.real),
]


@pytest.fixture(params=SIDES)
async def kube(
    request: pytest.FixtureRequest, sim_ca: CertificateAuthority, tmp_path: Path
) -> AsyncIterator[Kube]:
    """The same test against the emulator and against a real control plane (see the module)."""
    kubeconfig_path = tmp_path / "kubeconfig"
    if request.param == "emulator":
        name = unique("cluster")
        server = ClusterServer(name, ClusterStore(name), sim_ca)
        await server.start()
        api = make_api_client(server)
        try:
            namespace = unique("t")
            server.store.create(NAMESPACES, {"metadata": {"name": namespace}})
            kubeconfig_path.write_text(yaml.safe_dump(server.kubeconfig()))
            yield Kube(
                "emulator", api, namespace, server.kubeconfig(), kubeconfig_path, emulator=server
            )
        finally:
            api.close()  # type: ignore[no-untyped-call]  # untyped in the client
            await server.stop()
        return
    plane: ControlPlane = request.getfixturevalue("real_control_plane")
    namespace = await asyncio.to_thread(realcluster.fresh_namespace, plane)
    api = api_client_from_dict(plane.admin_kubeconfig)
    kubeconfig_path.write_text(yaml.safe_dump(plane.admin_kubeconfig))
    try:
        yield Kube("real", api, namespace, plane.admin_kubeconfig, kubeconfig_path, plane=plane)
    finally:
        api.close()  # type: ignore[no-untyped-call]  # untyped in the client
        await asyncio.to_thread(realcluster.delete_namespace, plane, namespace)


@pytest.fixture
async def node(kube: Kube) -> AsyncIterator[str]:
    """A Ready node whose pods run: on the emulator a Node with the sim's kubelet (instant:
    pods start at once, a deleted one goes at once), on real a KWOK node (which also finishes a
    deleted pod at once, whatever its grace period). Answers its name."""
    name = kube.name("node")
    capacity = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    if kube.plane is not None:
        await asyncio.to_thread(kube.plane.add_node, name, capacity=capacity)
        try:
            yield name
        finally:
            await asyncio.to_thread(client.CoreV1Api(kube.api).delete_node, name)
        return
    assert kube.emulator is not None

    ready = [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]
    kube.emulator.store.create(
        NODES,
        {
            "metadata": {"name": name},
            "status": {"capacity": capacity, "allocatable": capacity, "conditions": ready},
        },
    )
    kubelet = Kubelet(kube.emulator.store, grace_scale=0.0)
    task = asyncio.create_task(kubelet.run())
    try:
        yield name
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# Re-exported so tests read `await call(api.list_node)`.
call = asyncio.to_thread
