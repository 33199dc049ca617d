"""SIMULATOR. The servers simulated containers run on their ports: small stand-ins that name
themselves, so a user who opens a workspace sees which pod answered, and that it is simulated.

`serve(conn, app, pod)` plays one app on one accepted connection (`sim/podnet/pipe.py`) until the
client leaves. Apps, by `ServedApp.kind`:

- `http` (any port nobody said more about): a page naming the pod, its namespace, container,
  image, Helm chart, node and port, at `/`; `404` elsewhere.
- `jupyter` (Jupyter Server 2.14.2, as the notebook images print at start): `/` redirects to
  `/lab` as Jupyter does, `/lab` and `/tree` are the page, `/api` answers `{"version": "2.14.2"}`,
  `/api/status` and `/api/kernels` as a server with no kernel; no token is asked.
- `openai` (vLLM 0.9.1's OpenAI-compatible server): `GET /v1/models` lists the one model
  (`ServedApp.model`), `/health` is 200, `/version` `{"version": "0.9.1"}`; anything else is
  FastAPI's `{"detail": "Not Found"}`.
- `ssh`: the identification line `SSH-2.0-OpenSSH_9.6p1 SIMULATED ...`, then, once the client sent
  its own, an SSH_MSG_DISCONNECT ("by application") saying there is no real sshd: `ssh` prints it.

Every HTTP answer carries `X-Colony-Simulated: <namespace>/<pod>` and every page says SIMULATED.
HTTP/1.1 with keep-alive (h11); bodies are read and ignored.
"""

from __future__ import annotations

import html
import json
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import h11

from sim.podnet.pipe import PipeEnd

log = logging.getLogger(__name__)

JUPYTER_SERVER_VERSION = "2.14.2"
VLLM_VERSION = "0.9.1"
SSH_IDENTIFICATION = "SSH-2.0-OpenSSH_9.6p1"
SIMULATED_HEADER = "X-Colony-Simulated"
_SSH_DISCONNECT = 1
_SSH_DISCONNECT_BY_APPLICATION = 11
_MAX_REQUEST_BODY = 1 << 20


@dataclass(frozen=True)
class ServedApp:
    """What a container serves on one port: the app's kind and its parameters."""

    kind: str = "http"
    model: str = ""
    """The model an `openai` app serves."""


@dataclass(frozen=True)
class PodIdentity:
    """Who answers: the pod and container behind a port, as its pages name them."""

    namespace: str
    name: str
    container: str
    image: str
    port: int
    node: str = ""
    pod_ip: str = ""
    chart: str = ""
    """The Helm chart label (`helm.sh/chart`), when a chart made the pod."""
    started_at: float = field(default_factory=time.time)


@dataclass
class HttpRequest:
    method: str
    target: str
    headers: dict[str, str]

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]


@dataclass
class HttpResponse:
    status: int
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)


Handler = Callable[[HttpRequest], HttpResponse]


# ---------------------------------------------------------------------- HTTP/1.1 over a pipe


async def serve_http(conn: PipeEnd, pod: PodIdentity, handler: Handler) -> None:
    """Answer HTTP/1.1 requests on `conn` with `handler` until the client closes or asks to."""
    protocol = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
    request: HttpRequest | None = None
    body_size = 0
    while True:
        try:
            event = protocol.next_event()
        except h11.RemoteProtocolError as exc:
            if protocol.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                await _send(
                    conn, protocol, pod, HttpResponse(400, f"{exc}\n".encode(), "text/plain")
                )
            return
        if event is h11.NEED_DATA:
            data = await conn.read()
            protocol.receive_data(data)
            continue
        if isinstance(event, h11.Request):
            request = HttpRequest(
                event.method.decode("latin-1"),
                event.target.decode("latin-1"),
                {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers},
            )
            body_size = 0
        elif isinstance(event, h11.Data):
            body_size += len(event.data)
            if body_size > _MAX_REQUEST_BODY:
                await _send(conn, protocol, pod, HttpResponse(413, b"", "text/plain"))
                return
        elif isinstance(event, h11.EndOfMessage) and request is not None:
            await _send(conn, protocol, pod, handler(request))
            if protocol.our_state is h11.MUST_CLOSE or protocol.their_state is h11.MUST_CLOSE:
                return
            protocol.start_next_cycle()
            request = None
        else:  # ConnectionClosed, PAUSED
            return


async def _send(
    conn: PipeEnd, protocol: h11.Connection, pod: PodIdentity, response: HttpResponse
) -> None:
    headers = [
        ("Content-Type", response.content_type),
        ("Content-Length", str(len(response.body))),
        (SIMULATED_HEADER, f"{pod.namespace}/{pod.name}"),
        *response.headers,
    ]
    try:
        reason = HTTPStatus(response.status).phrase.encode()
        await conn.write(
            protocol.send(h11.Response(status_code=response.status, headers=headers, reason=reason))
        )
        await conn.write(protocol.send(h11.Data(data=response.body)))
        await conn.write(protocol.send(h11.EndOfMessage()))
    except (h11.LocalProtocolError, ConnectionResetError):
        pass


def _page(title: str, what: str, pod: PodIdentity, extra: str = "") -> HttpResponse:
    rows = [
        ("pod", pod.name),
        ("namespace", pod.namespace),
        ("container", pod.container),
        ("image", pod.image),
        ("chart", pod.chart or "(none)"),
        ("node", pod.node),
        ("pod IP", pod.pod_ip),
        ("port", str(pod.port)),
    ]
    cells = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    text = (
        '<!doctype html>\n<html><head><meta charset="utf-8">'
        f"<title>SIMULATED {html.escape(title)} - {html.escape(pod.name)}</title></head>\n"
        f"<body><h1>SIMULATED {html.escape(title)}</h1>\n"
        f"<p>{html.escape(what)} This page comes from Colony's simulator: no real workload runs "
        "behind it.</p>\n"
        f"<table>{cells}</table>{extra}\n</body></html>\n"
    )
    return HttpResponse(200, text.encode())


def _json(status: int, value: Any) -> HttpResponse:
    return HttpResponse(status, json.dumps(value).encode(), "application/json")


def _method_not_allowed(request: HttpRequest) -> HttpResponse | None:
    if request.method in ("GET", "HEAD"):
        return None
    return HttpResponse(405, b"405: Method Not Allowed\n", "text/plain")


def http_page(pod: PodIdentity) -> Handler:
    def handle(request: HttpRequest) -> HttpResponse:
        refused = _method_not_allowed(request)
        if refused is not None:
            return refused
        if request.path == "/":
            return _page("web server", f"Port {pod.port} of {pod.name}.", pod)
        return HttpResponse(404, b"404 page not found\n", "text/plain")

    return handle


def jupyter(pod: PodIdentity) -> Handler:
    def handle(request: HttpRequest) -> HttpResponse:
        refused = _method_not_allowed(request)
        if refused is not None:
            return refused
        path = request.path.rstrip("/") or "/"
        if path == "/":
            # Jupyter Server's default_url with JupyterLab installed.
            return HttpResponse(302, b"", "text/html; charset=utf-8", [("Location", "/lab")])
        if path in ("/lab", "/tree") or path.startswith(("/lab/", "/tree/")):
            return _page(
                "JupyterLab",
                f"Jupyter Server {JUPYTER_SERVER_VERSION} of {pod.name}.",
                pod,
                "<p>No kernels: notebooks cannot run here.</p>",
            )
        if path == "/api":
            return _json(200, {"version": JUPYTER_SERVER_VERSION})
        if path == "/api/status":
            started = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(pod.started_at))
            return _json(
                200,
                {"started": started, "last_activity": started, "connections": 0, "kernels": 0},
            )
        if path in ("/api/kernels", "/api/sessions"):
            return _json(200, [])
        return HttpResponse(
            404,
            b"<!doctype html><html><body><h1>404 : Not Found</h1></body></html>\n",
        )

    return handle


def openai(pod: PodIdentity, model: str) -> Handler:
    def handle(request: HttpRequest) -> HttpResponse:
        if request.method not in ("GET", "HEAD"):
            return _json(405, {"detail": "Method Not Allowed"})
        if request.path == "/v1/models":
            created = int(pod.started_at)
            return _json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": model,
                            "object": "model",
                            "created": created,
                            "owned_by": "vllm",
                            "root": model,
                            "parent": None,
                            "max_model_len": 8192,
                            "permission": [
                                {
                                    "id": f"modelperm-{pod.name}",
                                    "object": "model_permission",
                                    "created": created,
                                    "allow_create_engine": False,
                                    "allow_sampling": True,
                                    "allow_logprobs": True,
                                    "allow_search_indices": False,
                                    "allow_view": True,
                                    "allow_fine_tuning": False,
                                    "organization": "*",
                                    "group": None,
                                    "is_blocking": False,
                                }
                            ],
                        }
                    ],
                },
            )
        if request.path == "/health":
            return HttpResponse(200, b"", "application/json")
        if request.path == "/version":
            return _json(200, {"version": VLLM_VERSION})
        return _json(404, {"detail": "Not Found"})

    return handle


# ---------------------------------------------------------------------- SSH


def ssh_banner(pod: PodIdentity) -> bytes:
    """The server's identification line: software version, then a comment saying it is simulated
    (RFC 4253 4.2: `SSH-2.0-softwareversion SP comments CR LF`, at most 255 bytes)."""
    line = f"{SSH_IDENTIFICATION} SIMULATED colony-sim {pod.namespace}/{pod.name}"
    return line[:253].encode() + b"\r\n"


def ssh_disconnect(description: str) -> bytes:
    """An unencrypted SSH_MSG_DISCONNECT packet (RFC 4253 6 and 11.1), as sent before key
    exchange: length, padding length, payload, padding to a multiple of 8 (at least 4 bytes)."""
    text = description.encode()
    payload = (
        bytes([_SSH_DISCONNECT])
        + struct.pack(">I", _SSH_DISCONNECT_BY_APPLICATION)
        + struct.pack(">I", len(text))
        + text
        + struct.pack(">I", 0)  # language tag
    )
    padding = 8 - (5 + len(payload)) % 8
    if padding < 4:
        padding += 8
    return struct.pack(">IB", 1 + len(payload) + padding, padding) + payload + bytes(padding)


async def serve_ssh(conn: PipeEnd, pod: PodIdentity) -> None:
    """Identify, read the client's identification line, then disconnect (no real sshd here)."""
    try:
        await conn.write(ssh_banner(pod))
        line = await conn.reader.readline()
        if line.startswith(b"SSH-"):
            await conn.write(
                ssh_disconnect(
                    f"SIMULATED: {pod.namespace}/{pod.name} runs no sshd (Colony's simulator)"
                )
            )
    except (ConnectionResetError, ValueError):
        pass


# ---------------------------------------------------------------------- dispatch


async def serve(conn: PipeEnd, app: ServedApp, pod: PodIdentity) -> None:
    """Play `app` for `pod` on the server end `conn` of a connection, then close it."""
    try:
        await _APPS.get(app.kind, _APPS["http"])(conn, app, pod)
    except Exception:  # a broken stub must not take the sim down, but must be seen
        log.exception("simulated app %s of %s/%s failed", app.kind, pod.namespace, pod.name)
    finally:
        conn.close()


def _http(make: Callable[[PodIdentity], Handler]) -> Callable[[PipeEnd, ServedApp, PodIdentity], Awaitable[None]]:  # fmt: skip
    async def run(conn: PipeEnd, app: ServedApp, pod: PodIdentity) -> None:
        del app
        await serve_http(conn, pod, make(pod))

    return run


async def _openai(conn: PipeEnd, app: ServedApp, pod: PodIdentity) -> None:
    await serve_http(conn, pod, openai(pod, app.model or pod.name))


async def _ssh(conn: PipeEnd, app: ServedApp, pod: PodIdentity) -> None:
    del app
    await serve_ssh(conn, pod)


_APPS: dict[str, Callable[[PipeEnd, ServedApp, PodIdentity], Awaitable[None]]] = {
    "http": _http(http_page),
    "jupyter": _http(jupyter),
    "openai": _openai,
    "ssh": _ssh,
}
APP_KINDS = tuple(sorted(_APPS))
