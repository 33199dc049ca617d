"""The simulated pod network without a server: in-memory connections, which pod ports listen,
what the simulated apps answer, and Services resolved to ready endpoints."""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any

import pytest

from sim.apiserver.registry import PODS, SERVICES
from sim.apiserver.store import ClusterStore
from sim.podnet import apps, network
from sim.podnet.apps import ServedApp
from sim.podnet.pipe import BUFFER_LIMIT, pipe

# ---------------------------------------------------------------------- pipes


async def test_pipe_carries_bytes_both_ways_and_half_closes() -> None:
    client, server = pipe()
    await client.write(b"hello")
    client.write_eof()
    assert await server.read() == b"hello"
    assert await server.read() == b"", "the client half-closed"
    await server.write(b"still open")
    assert await client.read() == b"still open"
    server.close()
    assert await client.read() == b""
    with pytest.raises(ConnectionResetError):
        await client.write(b"too late")


async def test_a_writer_waits_while_its_reader_is_full() -> None:
    client, server = pipe()
    chunk = b"x" * (BUFFER_LIMIT // 4)
    blocked = asyncio.create_task(client.write(chunk * 8))
    await asyncio.sleep(0)
    assert not blocked.done(), "twice the buffer is unread: the writer waits"
    received = 0
    while received < len(chunk) * 8:
        received += len(await server.read(len(chunk)))
    await asyncio.wait_for(blocked, 5)


async def test_closing_wakes_a_blocked_writer_with_a_reset() -> None:
    client, server = pipe()
    blocked = asyncio.create_task(client.write(b"x" * (BUFFER_LIMIT * 2)))
    await asyncio.sleep(0)
    server.close()
    with pytest.raises(ConnectionResetError):
        await asyncio.wait_for(blocked, 5)


# ---------------------------------------------------------------------- what listens


def pod(
    *,
    phase: str = "Running",
    running: bool = True,
    ports: list[dict[str, Any]] | None = None,
    serves: Any = None,
    labels: dict[str, str] | None = None,
    name: str = "p",
    ready: bool = True,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "labels": labels or {}}
    if serves is not None:
        meta["annotations"] = {network.SERVES_ANNOTATION: serves if isinstance(serves, str) else json.dumps(serves)}  # fmt: skip
    state = {"running": {"startedAt": "2026-01-01T00:00:00Z"}} if running else {"waiting": {}}
    return {
        "metadata": meta,
        "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "img:1", "ports": ports or []}]},
        "status": {
            "phase": phase,
            "podIP": "10.244.0.9",
            "containerStatuses": [{"name": "c", "state": state}],
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "port", "kind"),
    [
        pytest.param({"ports": [{"containerPort": 80}]}, 80, "http", id="declared-port"),
        pytest.param({"ports": [{"containerPort": 80}]}, 81, None, id="undeclared-port"),
        pytest.param(
            {"ports": [{"containerPort": 53, "protocol": "UDP"}]}, 53, None, id="udp-port"
        ),
        pytest.param({"serves": {"22": "ssh"}}, 22, "ssh", id="annotation-only-port"),
        pytest.param(
            {"ports": [{"containerPort": 8888}], "serves": {"8888": "jupyter"}},
            8888,
            "jupyter",
            id="annotated",
        ),
        pytest.param(
            {"ports": [{"containerPort": 80}], "serves": {"80": "gopher"}},
            80,
            "http",
            id="unknown-kind",
        ),
        pytest.param(
            {"ports": [{"containerPort": 80}], "serves": "not json"},
            80,
            "http",
            id="bad-annotation",
        ),
        pytest.param(
            {"ports": [{"containerPort": 80}], "phase": "Pending"}, 80, None, id="pending"
        ),
        pytest.param({"ports": [{"containerPort": 80}], "running": False}, 80, None, id="waiting"),
    ],
)
def test_what_listens(kwargs: dict[str, Any], port: int, kind: str | None) -> None:
    found = network.listener(pod(**kwargs), port)
    assert (found.app.kind if found else None) == kind


def test_openai_annotation_names_the_model() -> None:
    served = network.served_apps(pod(serves={"8000": {"app": "openai", "model": "m/x"}}))
    assert served == {8000: ServedApp("openai", "m/x")}


async def test_connecting_to_a_closed_port_is_refused() -> None:
    with pytest.raises(network.PortRefused, match=r"dial tcp 10\.244\.0\.9:81: connect: connection refused"):  # fmt: skip
        network.connect_pod(pod(ports=[{"containerPort": 80}]), 81)


# ---------------------------------------------------------------------- the apps


async def request(app: ServedApp, text: bytes, **kwargs: Any) -> bytes:
    """Send `text` to a pod serving `app` on port 80, return everything it answered."""
    client = network.connect_pod(pod(ports=[{"containerPort": 80}], serves={"80": {"app": app.kind, "model": app.model}}, **kwargs), 80)  # fmt: skip
    await client.write(text)
    client.write_eof()
    answer = b""
    while chunk := await asyncio.wait_for(client.read(), 5):
        answer += chunk
    return answer


def http(path: str, method: str = "GET") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


def body_of(answer: bytes) -> Any:
    return json.loads(answer.partition(b"\r\n\r\n")[2])


async def test_jupyter_answers_like_jupyter_server() -> None:
    jupyter = ServedApp("jupyter")
    assert body_of(await request(jupyter, http("/api"))) == {"version": "2.14.2"}
    redirect = await request(jupyter, http("/"))
    assert redirect.startswith(b"HTTP/1.1 302 Found")
    assert b"\r\nlocation: /lab\r\n" in redirect.lower()
    page = await request(jupyter, http("/lab"))
    assert page.startswith(b"HTTP/1.1 200 OK")
    assert b"SIMULATED JupyterLab" in page
    assert b"<td>img:1</td>" in page
    assert body_of(await request(jupyter, http("/api/kernels"))) == []
    assert (await request(jupyter, http("/nope"))).startswith(b"HTTP/1.1 404")


async def test_keep_alive_serves_several_requests_on_one_connection() -> None:
    answer = await request(ServedApp("jupyter"), http("/api") + http("/api/status"))
    assert answer.count(b"HTTP/1.1 200 OK") == 2


async def test_openai_lists_its_model() -> None:
    openai = ServedApp("openai", "Qwen/Qwen3-1.7B")
    models = body_of(await request(openai, http("/v1/models")))
    assert models["object"] == "list"
    assert [(m["id"], m["owned_by"]) for m in models["data"]] == [("Qwen/Qwen3-1.7B", "vllm")]
    assert body_of(await request(openai, http("/nope"))) == {"detail": "Not Found"}
    assert body_of(await request(openai, http("/v1/models", "POST"))) == {"detail": "Method Not Allowed"}  # fmt: skip


async def test_generic_page_and_bad_requests() -> None:
    page = await request(ServedApp("http"), http("/"))
    assert b"SIMULATED web server" in page
    assert b"<th>pod IP</th><td>10.244.0.9</td>" in page
    assert (await request(ServedApp("http"), b"NOT HTTP\r\n\r\n")).startswith(b"HTTP/1.1 400")


async def test_ssh_identifies_then_disconnects_by_application() -> None:
    answer = await request(ServedApp("ssh"), b"SSH-2.0-OpenSSH_9.0\r\n")
    banner, _, packet = answer.partition(b"\r\n")
    assert banner == b"SSH-2.0-OpenSSH_9.6p1 SIMULATED colony-sim ns/p"
    length, padding = struct.unpack(">IB", packet[:5])
    assert (4 + length) % 8 == 0
    assert padding >= 4
    payload = packet[5 : 4 + length - padding]
    assert payload[0] == 1, "SSH_MSG_DISCONNECT"
    reason, size = struct.unpack(">II", payload[1:9])
    assert reason == 11, "SSH_DISCONNECT_BY_APPLICATION"
    assert payload[9 : 9 + size].decode().startswith("SIMULATED: ns/p runs no sshd")


def test_every_app_kind_is_known() -> None:
    assert set(apps.APP_KINDS) == {"http", "jupyter", "openai", "ssh"}


# ---------------------------------------------------------------------- Services


def service_store(*pods: dict[str, Any], target: Any = "web") -> ClusterStore:
    store = ClusterStore("svc")
    store.create(
        SERVICES,
        {
            "metadata": {"name": "front", "namespace": "default"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": target}]},
        },
    )
    for item in pods:
        item = json.loads(json.dumps(item))
        item["metadata"]["namespace"] = "default"
        status = item.pop("status")
        store.create(PODS, item)
        store.update_status(PODS, "default", item["metadata"]["name"], status)
    return store


WEB = [{"name": "web", "containerPort": 8080}]


def test_a_service_goes_to_ready_endpoints_in_turn() -> None:
    store = service_store(
        pod(name="a", labels={"app": "web"}, ports=WEB),
        pod(name="b", labels={"app": "web"}, ports=WEB),
        pod(name="c", labels={"app": "web"}, ports=WEB, ready=False),
        pod(name="d", labels={"app": "other"}, ports=WEB),
    )
    backends = network.Backends()
    picked = [backends.pick(store, "default", "front", 80) for _ in range(4)]
    assert [(p["metadata"]["name"], port) for p, port in picked] == [
        ("a", 8080), ("b", 8080), ("a", 8080), ("b", 8080),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("service", "port", "message"),
    [
        pytest.param("ghost", 80, 'service "default/ghost" not found', id="no-service"),
        pytest.param("front", 81, 'service "default/front" has no port 81', id="no-port"),
        pytest.param("front", 80, "no healthy upstream", id="no-ready-endpoint"),
    ],
)
def test_services_without_endpoints(service: str, port: int, message: str) -> None:
    store = service_store(pod(name="a", labels={"app": "web"}, ports=WEB, ready=False))
    with pytest.raises(network.NoEndpoints, match=message):
        network.Backends().pick(store, "default", service, port)


def test_a_named_target_port_skips_pods_without_it() -> None:
    store = service_store(
        pod(name="a", labels={"app": "web"}, ports=[{"name": "other", "containerPort": 9}]),
        pod(name="b", labels={"app": "web"}, ports=WEB),
    )
    chosen, port = network.Backends().pick(store, "default", "front", 80)
    assert (chosen["metadata"]["name"], port) == ("b", 8080)
