"""`pods/portforward` as clients use it: the venv's real `kubectl port-forward` (WebSocket
tunnelling by default, SPDY when told to), `svc/...` resolved by kubectl itself, and the official
Python client's `portforward` (the v4 WebSocket channel protocol), against pods whose simulated
containers answer on their ports. Plus the server's refusals and the SPDY session's rules, with
frames written by hand.

Each test gets a cluster served over HTTPS with a kubelet (instant timing) and one node; pods are
created bound to it, as the sim's scheduler would bind them.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client
from kubernetes.stream import portforward

from sim.apiserver import portforward as pf
from sim.apiserver import spdy
from sim.apiserver.auth import CertificateAuthority
from sim.apiserver.registry import NODES, PODS, SERVICES
from sim.apiserver.server import ClusterServer
from sim.apiserver.store import ClusterStore
from sim.controllers.kubelet import Kubelet
from sim.faults import FaultInjector
from sim.podnet.apps import JUPYTER_SERVER_VERSION, SSH_IDENTIFICATION
from sim.tests.conftest import call, make_api_client
from sim.timing import SimTiming
from tests.access import KUBECTL, kubectl_port_forward
from tests.helpers import eventually, unique

NODE = "node-1"
SPDY_ONLY = {"KUBECTL_PORT_FORWARD_WEBSOCKETS": "false"}

needs_kubectl = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl is not in the venv")


@dataclass
class Env:
    server: ClusterServer
    faults: FaultInjector
    kubeconfig: Path
    api: client.ApiClient

    @property
    def store(self) -> ClusterStore:
        return self.server.store


@pytest.fixture
async def env(sim_ca: CertificateAuthority, tmp_path: Path) -> AsyncIterator[Env]:
    name = unique("pf")
    faults = FaultInjector()
    server = ClusterServer(name, ClusterStore(name), sim_ca, faults=faults)
    await server.start()
    capacity = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    server.store.create(NODES, {
        "metadata": {"name": NODE},
        "status": {"capacity": capacity, "allocatable": capacity,
                   "conditions": [{"type": "Ready", "status": "True"}],
                   "addresses": [{"type": "InternalIP", "address": "192.0.2.7"}]},
    })  # fmt: skip
    kubelet = asyncio.create_task(Kubelet(server.store, SimTiming.instant(), faults=faults).run())
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(server.kubeconfig()))
    api = make_api_client(server)
    try:
        yield Env(server, faults, kubeconfig, api)
    finally:
        api.close()  # type: ignore[no-untyped-call]  # untyped in the client
        kubelet.cancel()
        await asyncio.gather(kubelet, return_exceptions=True)
        await server.stop()


async def running_pod(
    env: Env,
    name: str,
    serves: dict[str, Any],
    ports: list[dict[str, Any]],
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    env.store.create(PODS, {
        "metadata": {"name": name, "namespace": "default", "labels": labels or {"app": name},
                     "annotations": {"sim.colony.dev/serves": json.dumps(serves)}},
        "spec": {"nodeName": NODE,
                 "containers": [{"name": "main", "image": f"example.com/{name}:1", "ports": ports}]},
    })  # fmt: skip

    async def phase() -> dict[str, Any]:
        return env.store.get(PODS, "default", name)

    return await eventually(
        phase,
        until=lambda p: (p.get("status") or {}).get("phase") == "Running",
        what=f"{name} Running",
    )


async def get(port: int, path: str) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.get(f"http://127.0.0.1:{port}{path}", timeout=30)


# ---------------------------------------------------------------------- kubectl


@needs_kubectl
@pytest.mark.parametrize(
    "client_env", [pytest.param({}, id="websocket-tunnel"), pytest.param(SPDY_ONLY, id="spdy")]
)
async def test_kubectl_port_forward_reaches_the_notebook(
    env: Env, client_env: dict[str, str]
) -> None:
    await running_pod(env, "nb", {"8888": "jupyter"}, [{"name": "http", "containerPort": 8888}])
    async with kubectl_port_forward(env.kubeconfig, "pod/nb", 8888, env=client_env) as forward:
        api = await get(forward.port, "/api")
        lab = await get(forward.port, "/lab")
        root = await get(forward.port, "/")
    assert api.json() == {"version": JUPYTER_SERVER_VERSION}
    assert api.headers["X-Colony-Simulated"] == "default/nb"
    assert lab.status_code == 200
    assert "SIMULATED JupyterLab" in lab.text
    assert "<td>nb</td>" in lab.text
    assert "<td>example.com/nb:1</td>" in lab.text
    assert (root.status_code, root.headers["Location"]) == (302, "/lab")
    assert "error" not in forward.stderr.lower(), forward.stderr


@needs_kubectl
async def test_kubectl_resolves_a_service_to_its_pod_and_named_target_port(env: Env) -> None:
    await running_pod(env, "web", {}, [{"name": "web", "containerPort": 8080}], {"app": "web"})
    env.store.create(SERVICES, {
        "metadata": {"name": "front", "namespace": "default"},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "web"}]},
    })  # fmt: skip
    async with kubectl_port_forward(env.kubeconfig, "svc/front", 80) as forward:
        page = await get(forward.port, "/")
    assert page.status_code == 200
    assert "SIMULATED web server" in page.text
    assert "<th>port</th><td>8080</td>" in page.text


@needs_kubectl
@pytest.mark.parametrize(
    "client_env", [pytest.param({}, id="websocket-tunnel"), pytest.param(SPDY_ONLY, id="spdy")]
)
async def test_nothing_listening_is_containerds_error(env: Env, client_env: dict[str, str]) -> None:
    pod = await running_pod(env, "quiet", {}, [{"containerPort": 8080}])
    async with kubectl_port_forward(env.kubeconfig, "pod/quiet", 9999, env=client_env) as forward:
        with pytest.raises(httpx.HTTPError):
            await get(forward.port, "/")
        assert await forward.exited() == 1  # kubectl >= 1.31 stops on a lost connection
    sandbox = pf.PodSandbox(env.store, "default", "quiet", pod["metadata"]["uid"])
    assert f"error forwarding port 9999 to pod {sandbox.sandbox_id}, uid : " in forward.stderr
    assert (
        'failed to connect to localhost:9999 inside namespace \\"'
        f'{sandbox.sandbox_id}\\", IPv4: dial tcp4 127.0.0.1:9999: connect: connection refused'
    ) in forward.stderr
    assert "lost connection to pod" in forward.stderr


# ---------------------------------------------------------------------- the official Python client


def read_all(sock: Any) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


async def test_python_client_port_forward(env: Env) -> None:
    serves = {"8000": {"app": "openai", "model": "Qwen/Qwen3-1.7B"}, "22": "ssh"}
    await running_pod(env, "llm", serves, [{"containerPort": 8000}])
    core = client.CoreV1Api(env.api)

    def models() -> bytes:
        forward = portforward(core.connect_get_namespaced_pod_portforward, "llm", "default", ports="8000")  # fmt: skip
        sock = forward.socket(8000)
        sock.setblocking(True)
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: llm\r\nConnection: close\r\n\r\n")
        try:
            return read_all(sock)
        finally:
            sock.close()

    def ssh_and_refused() -> tuple[bytes, bytes, str | None]:
        forward = portforward(core.connect_get_namespaced_pod_portforward, "llm", "default", ports="22,7777")  # fmt: skip
        ssh, refused = forward.socket(22), forward.socket(7777)
        ssh.setblocking(True)
        refused.setblocking(True)
        banner = ssh.recv(1024)
        nothing = refused.recv(1024)
        error = forward.error(7777)
        ssh.close()
        refused.close()
        return banner, nothing, error

    head, _, body = (await call(models)).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK")
    listed = json.loads(body)
    assert [m["id"] for m in listed["data"]] == ["Qwen/Qwen3-1.7B"]
    banner, nothing, error = await call(ssh_and_refused)
    assert banner.startswith(f"{SSH_IDENTIFICATION} SIMULATED colony-sim default/llm".encode())
    assert nothing == b""
    assert error is not None
    assert "failed to connect to localhost:7777" in error


# ---------------------------------------------------------------------- refusals


async def upgrade(env: Env, name: str, headers: dict[str, str], token: str | None = None) -> httpx.Response:  # fmt: skip
    """A SPDY upgrade request to pods/NAME/portforward, as kubectl sends it."""
    trust = ssl.create_default_context(cafile=str(env.server.ca.ca_file))
    async with httpx.AsyncClient(verify=trust) as http:
        return await http.post(
            f"{env.server.url}/api/v1/namespaces/default/pods/{name}/portforward",
            headers={"Authorization": f"Bearer {token or env.server.admin_token}", **headers},
            timeout=30,
        )


SPDY_HEADERS = {
    "Connection": "Upgrade",
    "Upgrade": "SPDY/3.1",
    "X-Stream-Protocol-Version": "portforward.k8s.io",
}


async def test_refusals_before_the_upgrade(env: Env) -> None:
    assert (await upgrade(env, "ghost", SPDY_HEADERS)).status_code == 404
    assert (await upgrade(env, "ghost", SPDY_HEADERS, token="wrong")).status_code == 401
    env.store.create(PODS, {"metadata": {"name": "unbound", "namespace": "default"},
                            "spec": {"containers": [{"name": "c", "image": "i"}]}})  # fmt: skip
    unbound = await upgrade(env, "unbound", SPDY_HEADERS)
    assert unbound.status_code == 400
    assert unbound.json()["message"] == "pod unbound does not have a host assigned"

    await running_pod(env, "up", {}, [{"containerPort": 80}])
    other = await upgrade(env, "up", {**SPDY_HEADERS, "X-Stream-Protocol-Version": "v9.example"})
    assert other.status_code == 403
    assert other.headers["X-Accepted-Stream-Protocol-Versions"] == "portforward.k8s.io"
    plain = await upgrade(env, "up", {"X-Stream-Protocol-Version": "portforward.k8s.io"})
    assert plain.status_code == 400
    assert plain.text.startswith("unable to upgrade: missing upgrade headers in request")

    # A pod whose containers have ended has no sandbox left to forward into.
    env.store.create(PODS, {
        "metadata": {"name": "done", "namespace": "default"},
        "spec": {"nodeName": NODE, "restartPolicy": "Never",
                 "containers": [{"name": "c", "image": "busybox", "command": ["true"]}]},
    })  # fmt: skip

    async def finished() -> str:
        return str((env.store.get(PODS, "default", "done").get("status") or {}).get("phase"))

    await eventually(finished, until=lambda phase: phase == "Succeeded", what="done Succeeded")
    ended = await upgrade(env, "done", SPDY_HEADERS)
    assert ended.status_code == 500
    assert ended.json()["message"].endswith("is not running")

    env.faults.stop_kubelet(NODE)
    down = await upgrade(env, "up", SPDY_HEADERS)
    assert down.status_code == 500
    assert down.json()["message"] == (
        "error dialing backend: dial tcp 192.0.2.7:10250: connect: no route to host"
    )


async def test_discovery_lists_the_subresource(env: Env) -> None:
    resources = await call(client.CoreV1Api(env.api).get_api_resources)
    (entry,) = [r for r in resources.resources if r.name == "pods/portforward"]
    assert (entry.kind, sorted(entry.verbs)) == ("PodPortForwardOptions", ["create", "get"])
    # Services have none, as in kube-apiserver: kubectl resolves svc/x to a pod itself.
    assert not [r for r in resources.resources if r.name == "services/portforward"]
    trust = ssl.create_default_context(cafile=str(env.server.ca.ca_file))
    async with httpx.AsyncClient(verify=trust) as http:
        answer = await http.post(
            f"{env.server.url}/api/v1/namespaces/default/services/front/portforward",
            headers={"Authorization": f"Bearer {env.server.admin_token}", **SPDY_HEADERS},
        )
    assert answer.status_code == 404


# ---------------------------------------------------------------------- the SPDY session


class SpdyClient:
    """Plays client-go's side of a port-forward SPDY session, in memory."""

    def __init__(self, sandbox: pf.PodSandbox) -> None:
        self.to_server = asyncio.StreamReader()
        self.from_server = asyncio.StreamReader()
        self.compressor = spdy.HeaderCompressor()
        self.decompressor = spdy.HeaderDecompressor()

        async def send(frame: bytes) -> None:
            self.from_server.feed_data(frame)

        self.task = asyncio.create_task(pf._serve_streams(sandbox, self.to_server, send))

    def open(self, stream_id: int, headers: dict[str, str]) -> None:
        block = {k: [v] for k, v in headers.items()}
        self.to_server.feed_data(spdy.syn_stream(self.compressor, stream_id, block))

    def send(self, stream_id: int, data: bytes, *, fin: bool = False) -> None:
        self.to_server.feed_data(spdy.data_frame(stream_id, data, fin=fin))

    async def frame(self) -> spdy.Frame:
        frame = await asyncio.wait_for(spdy.read_frame(self.from_server), 30)
        assert frame is not None
        return frame

    async def close(self) -> None:
        self.to_server.feed_data(spdy.goaway_frame())
        await asyncio.wait_for(self.task, 30)


async def test_spdy_session_pairs_streams_and_refuses_bad_ones(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    pod = await running_pod(env, "raw", {}, [{"containerPort": 8080}])
    session = SpdyClient(pf.PodSandbox(env.store, "default", "raw", pod["metadata"]["uid"]))

    session.to_server.feed_data(spdy.ping_frame(7))
    ping = await session.frame()
    assert (ping.frame_type, struct.unpack(">I", ping.payload)) == (spdy.PING, (7,))

    session.open(1, {"streamType": "error", "port": "0", "requestID": "0"})
    reset = await session.frame()
    assert (reset.frame_type, struct.unpack(">II", reset.payload)) == (spdy.RST_STREAM, (1, spdy.RST_CANCEL))  # fmt: skip

    session.open(3, {"streamType": "error", "port": "8080", "requestID": "1"})
    session.open(5, {"streamType": "data", "port": "8080", "requestID": "1"})
    replies = [await session.frame(), await session.frame()]
    assert [f.frame_type for f in replies] == [spdy.SYN_REPLY, spdy.SYN_REPLY]
    session.send(5, b"GET / HTTP/1.1\r\nHost: raw\r\nConnection: close\r\n\r\n", fin=True)
    received, finished = b"", set[int]()
    while finished != {3, 5}:
        frame = await session.frame()
        assert not frame.control
        received += frame.payload if frame.stream_id == 5 else b""
        assert frame.stream_id == 5 or not frame.payload, "nothing on the error stream"
        if frame.fin:
            finished.add(frame.stream_id)
    assert received.startswith(b"HTTP/1.1 200 OK")
    assert b"SIMULATED web server" in received

    # A data stream whose error stream never comes: the pair times out (30 s in the kubelet).
    monkeypatch.setattr(pf, "STREAM_CREATION_TIMEOUT", 0.1)
    session.open(7, {"streamType": "error", "port": "8080", "requestID": "2"})
    assert (await session.frame()).frame_type == spdy.SYN_REPLY
    timeout = await session.frame()
    assert timeout.stream_id == 7
    assert timeout.payload.endswith(b", request=2) timed out waiting for streams")
    await session.close()
