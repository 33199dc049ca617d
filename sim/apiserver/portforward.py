"""`pods/{name}/portforward`: what kube-apiserver, the node's kubelet and containerd do together
when a client forwards a local port to a pod, served by the emulated apiserver itself.

The apiserver finds the pod (404), refuses one without a node (400 `pod p does not have a host
assigned`), then hands the upgrade to the kubelet, which speaks one of three wire protocols:

- SPDY/3.1 (`Connection: Upgrade`, `Upgrade: SPDY/3.1`, `X-Stream-Protocol-Version:
  portforward.k8s.io`): older kubectl, and kubectl >= 1.30 when the WebSocket attempt fails or
  `KUBECTL_PORT_FORWARD_WEBSOCKETS=false`. The client opens, per local connection, an error stream
  then a data stream (headers `streamType`, `port`, `requestID`); the pair forwards one TCP
  connection; a failure is written on the error stream, then both streams are closed.
- SPDY tunnelled through a WebSocket (subprotocol `SPDY/3.1+portforward.k8s.io`, binary messages
  carrying the SPDY byte stream): kubectl's default since 1.31 (PortForwardWebsockets), which the
  apiserver's TunnelingHandler bridges to the kubelet's SPDY.
- The WebSocket channel protocol (`v4.channel.k8s.io`, `v4.base64.channel.k8s.io` or none): the
  official Python client's `portforward`. Ports come from the `ports` query; port i uses channel 2i
  for data and 2i+1 for errors, each first carrying the port (uint16, little endian); one
  connection per port, for the WebSocket's life.

Per forwarded connection, containerd dials the port inside the pod's network namespace
(`sim.podnet.network.connect_pod`) and copies both ways until one direction ends (the other gets
one second more). Nothing listening gives containerd's error, prefixed as the kubelet does:

    error forwarding port 8888 to pod <sandbox id>, uid : failed to execute portforward in network
    namespace "/var/run/netns/cni-<uuid>": failed to connect to localhost:8888 inside namespace
    "<sandbox id>", IPv4: dial tcp4 127.0.0.1:8888: connect: connection refused IPv6 dial tcp6
    [::1]:8888: connect: connection refused

Services have no portforward subresource: `kubectl port-forward svc/x` resolves the Service to a
pod and its target port on the client side, then forwards to the pod.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import WSMsgType, web
from multidict import CIMultiDictProxy

from sim.apiserver import errors
from sim.apiserver.registry import NODES, PODS
from sim.apiserver.spdy import SpdySession, SpdyStream
from sim.apiserver.store import ClusterStore
from sim.faults import FaultInjector
from sim.podnet.network import PortRefused, connect_pod

log = logging.getLogger(__name__)

PORT_FORWARD_V1 = "portforward.k8s.io"
TUNNELING_PREFIX = "SPDY/3.1+"
KUBERNETES_SUFFIX = ".k8s.io"
V4_BINARY = "v4.channel.k8s.io"
V4_BASE64 = "v4.base64.channel.k8s.io"
STREAM_PROTOCOL_HEADER = "X-Stream-Protocol-Version"
ACCEPTED_PROTOCOLS_HEADER = "X-Accepted-Stream-Protocol-Versions"
STREAM_CREATION_TIMEOUT = 30.0
"""The kubelet's default: a data stream whose error stream does not follow (or the reverse)."""
FORWARD_LINGER = 1.0
"""containerd waits this long for the second direction once the first ended."""


class ByteStream(Protocol):
    """The client's side of one forwarded connection."""

    async def read(self) -> bytes: ...

    async def write(self, data: bytes) -> None: ...


@dataclass(frozen=True)
class PodSandbox:
    """The pod as containerd knows it: sandbox id and network namespace, from its uid."""

    store: ClusterStore
    namespace: str
    name: str
    uid: str

    @property
    def sandbox_id(self) -> str:
        return hashlib.sha256(f"sandbox/{self.uid}".encode()).hexdigest()

    @property
    def netns(self) -> str:
        return f"/var/run/netns/cni-{uuid.uuid5(uuid.NAMESPACE_OID, self.uid)}"

    def refused(self, port: int) -> str:
        return (
            f'failed to execute portforward in network namespace "{self.netns}": failed to '
            f'connect to localhost:{port} inside namespace "{self.sandbox_id}", IPv4: dial tcp4 '
            f"127.0.0.1:{port}: connect: connection refused IPv6 dial tcp6 [::1]:{port}: connect: "
            "connection refused "
        )

    def failure(self, port: int, cause: str) -> str:
        """The kubelet's message on the error stream."""
        return f"error forwarding port {port} to pod {self.sandbox_id}, uid : {cause}"

    async def forward(self, port: int, stream: ByteStream) -> str | None:
        """Forward one connection to `port`; the error message when it could not be made."""
        pod = self.store.try_get(PODS, self.namespace, self.name)
        if pod is None or pod["metadata"].get("uid") != self.uid:
            return f'failed to find sandbox "{self.sandbox_id}" in store: not found'
        try:
            conn = connect_pod(pod, port)
        except PortRefused:
            return self.refused(port)

        async def upstream() -> None:
            while data := await stream.read():
                await conn.write(data)
            conn.write_eof()

        async def downstream() -> None:
            while data := await conn.read():
                await stream.write(data)

        copies = [asyncio.create_task(upstream()), asyncio.create_task(downstream())]
        try:
            _, pending = await asyncio.wait(copies, return_when=asyncio.FIRST_COMPLETED)
            if pending:
                await asyncio.wait(pending, timeout=FORWARD_LINGER)
        finally:
            for task in copies:
                task.cancel()
            for task in copies:
                with contextlib.suppress(asyncio.CancelledError, ConnectionResetError):
                    await task
            conn.close()
        return None


# ---------------------------------------------------------------------- the request


async def serve(
    request: web.Request,
    store: ClusterStore,
    namespace: str,
    name: str,
    faults: FaultInjector | None,
) -> web.StreamResponse:
    """Answer a `pods/{name}/portforward` request (GET or POST)."""
    pod = store.get(PODS, namespace, name, copy_objects=False)
    node_name = (pod.get("spec") or {}).get("nodeName")
    if not node_name:
        raise errors.bad_request(f"pod {name} does not have a host assigned")
    if faults is not None and faults.kubelet_stopped(store.name, node_name):
        raise errors.internal(
            f"error dialing backend: dial tcp {_node_ip(store, node_name)}:10250: connect: no route to host"
        )
    sandbox = PodSandbox(store, namespace, name, str(pod["metadata"]["uid"]))
    if (pod.get("status") or {}).get("phase") != "Running":
        raise errors.internal(
            f'rpc error: code = Unknown desc = sandbox container "{sandbox.sandbox_id}" is not running'
        )
    if _is_websocket(request):
        offered = _websocket_protocols(request)
        if any(p.startswith(TUNNELING_PREFIX) for p in offered):
            return await _tunnelled_spdy(request, sandbox, offered)
        return await _websocket_channels(request, sandbox, offered)
    return await _raw_spdy(request, sandbox)


def _node_ip(store: ClusterStore, node_name: str) -> str:
    node = store.try_get(NODES, None, node_name) or {}
    addresses = (node.get("status") or {}).get("addresses") or []
    return next((a["address"] for a in addresses if a.get("type") == "InternalIP"), node_name)


def _is_websocket(request: web.Request) -> bool:
    # wsstream.IsWebSocketRequest: Connection contains "upgrade" and Upgrade is "websocket".
    connection = request.headers.get("Connection", "").lower()
    return "upgrade" in connection and request.headers.get("Upgrade", "").lower() == "websocket"


def _websocket_protocols(request: web.Request) -> list[str]:
    return [
        p.strip()
        for header in request.headers.getall("Sec-WebSocket-Protocol", ())
        for p in header.split(",")
        if p.strip()
    ]


def _stream_protocols(headers: CIMultiDictProxy[str]) -> list[str]:
    return [
        p.strip()
        for header in headers.getall(STREAM_PROTOCOL_HEADER, ())
        for p in header.split(",")
        if p.strip()
    ]


def _forbidden_protocols(client: list[str]) -> web.Response:
    """httpstream.Handshake's answer when no protocol is common."""
    text = (
        f"unable to upgrade: unable to negotiate protocol: client supports [{' '.join(client)}], "
        f"server accepts [{PORT_FORWARD_V1}]\n"
    )
    response = web.Response(status=403, text=text)
    response.headers[ACCEPTED_PROTOCOLS_HEADER] = PORT_FORWARD_V1
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


async def _raw_spdy(request: web.Request, sandbox: PodSandbox) -> web.StreamResponse:
    """The kubelet's handleHTTPStreams: protocol handshake, `Upgrade: SPDY/3.1`, then streams."""
    offered = _stream_protocols(request.headers)
    if not offered:
        # Handshake fails before anything is written: the Go server then answers 200, empty.
        return web.Response(status=200)
    if PORT_FORWARD_V1 not in offered:
        return _forbidden_protocols(offered)
    connection = request.headers.get("Connection", "").lower()
    if "upgrade" not in connection or "spdy/3.1" not in request.headers.get("Upgrade", "").lower():
        shown = ", ".join(
            f'"{k}":[]string{{"{v}"}}' for k, v in sorted(request.headers.items())
            if k.lower() != "authorization"
        )  # fmt: skip
        return web.Response(
            status=400,
            text=f"unable to upgrade: missing upgrade headers in request: http.Header{{{shown}}}\n",
        )
    incoming = asyncio.StreamReader()
    protocol = request.protocol
    # From here on the connection carries SPDY frames: aiohttp hands every byte it receives to
    # this parser (set before the 101 goes out, so no frame can reach the HTTP parser).
    protocol.set_parser(_Feed(incoming))  # type: ignore[arg-type]
    response = web.StreamResponse(
        status=101,
        headers={
            "Connection": "Upgrade",
            "Upgrade": "SPDY/3.1",
            STREAM_PROTOCOL_HEADER: PORT_FORWARD_V1,
        },
    )
    response.force_close()
    await response.prepare(request)
    transport = request.transport
    if transport is None:
        return response

    async def send(frame: bytes) -> None:
        # No drain: frames are at most 32 KiB and what the simulated apps answer is small, so the
        # transport's buffer stays small too.
        if not transport.is_closing():
            transport.write(frame)

    try:
        await _serve_streams(sandbox, incoming, send)
    finally:
        transport.close()
    return response


class _Feed:
    """aiohttp's payload-parser interface over a StreamReader (the bytes after the upgrade)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        self._reader.feed_data(data)
        return False, b""

    def feed_eof(self) -> None:
        self._reader.feed_eof()


async def _tunnelled_spdy(
    request: web.Request, sandbox: PodSandbox, offered: list[str]
) -> web.StreamResponse:
    """The apiserver's TunnelingHandler: WebSocket to the client, the SPDY bytes in binary
    messages, negotiated as the kubelet's SPDY handshake would."""
    spdy_protocols = [
        p.removeprefix(TUNNELING_PREFIX)
        for p in offered
        if p.startswith(TUNNELING_PREFIX) and p.endswith(KUBERNETES_SUFFIX)
    ]
    if not spdy_protocols:
        return web.Response(
            status=400, text="unable to upgrade: no tunneling spdy protocols provided\n"
        )
    if PORT_FORWARD_V1 not in spdy_protocols:
        return _forbidden_protocols(spdy_protocols)
    ws = web.WebSocketResponse(protocols=(TUNNELING_PREFIX + PORT_FORWARD_V1,), autoping=True)
    await ws.prepare(request)
    incoming = asyncio.StreamReader()

    async def receive() -> None:
        async for message in ws:
            if message.type == WSMsgType.BINARY:
                incoming.feed_data(message.data)
            elif message.type != WSMsgType.TEXT:
                break
        incoming.feed_eof()

    async def send(frame: bytes) -> None:
        if not ws.closed:
            await ws.send_bytes(frame)

    receiver = asyncio.create_task(receive())
    try:
        await _serve_streams(sandbox, incoming, send)
    finally:
        receiver.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await receiver
        await ws.close()
    return ws


# ---------------------------------------------------------------------- SPDY streams


def _parse_port(text: str) -> tuple[int, str | None]:
    """strconv.ParseUint(text, 10, 16) with its error wording, and the kubelet's > 0 check."""
    if not text.isdigit():
        return 0, f'unable to parse "{text}" as a port: strconv.ParseUint: parsing "{text}": invalid syntax'  # fmt: skip
    if int(text) > 65535:
        return 0, f'unable to parse "{text}" as a port: strconv.ParseUint: parsing "{text}": value out of range'  # fmt: skip
    if int(text) < 1:
        return 0, f'port "{text}" must be > 0'
    return int(text), None


def _accept(stream: SpdyStream) -> str | None:
    """The kubelet's httpStreamReceived: a port and a known stream type, else the stream is reset."""
    port = stream.header("port")
    if not port:
        return '"port" header is required'
    _, problem = _parse_port(port)
    if problem is not None:
        return problem
    kind = stream.header("streamType")
    if not kind:
        return '"streamType" header is required'
    if kind not in ("error", "data"):
        return f'invalid stream type "{kind}"'
    return None


@dataclass
class _Pair:
    request_id: str
    data: SpdyStream | None = None
    error: SpdyStream | None = None
    complete: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, stream: SpdyStream) -> str | None:
        if stream.header("streamType") == "error":
            if self.error is not None:
                return "error stream already assigned"
            self.error = stream
        else:
            if self.data is not None:
                return "data stream already assigned"
            self.data = stream
        if self.error is not None and self.data is not None:
            self.complete.set()
        return None

    async def print_error(self, text: str) -> None:
        if self.error is not None:
            await self.error.write(text.encode())


class _SpdyData:
    """A SPDY data stream as the client's side of a forwarded connection."""

    def __init__(self, stream: SpdyStream) -> None:
        self._stream = stream

    async def read(self) -> bytes:
        return await self._stream.reader.read(65536)

    async def write(self, data: bytes) -> None:
        await self._stream.write(data)


async def _serve_streams(
    sandbox: PodSandbox,
    incoming: asyncio.StreamReader,
    send: Callable[[bytes], Awaitable[None]],
) -> None:
    """The kubelet's httpStreamHandler over one SPDY session: pair streams by request id, forward
    each complete pair, time out pairs that stay incomplete."""
    session = SpdySession(incoming, send, _accept)
    pairs: dict[str, _Pair] = {}
    work: set[asyncio.Task[None]] = set()

    def spawn(coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        work.add(task)
        task.add_done_callback(work.discard)

    async def monitor(pair: _Pair) -> None:
        try:
            async with asyncio.timeout(STREAM_CREATION_TIMEOUT):
                await pair.complete.wait()
        except TimeoutError:
            await pair.print_error(
                f"(conn={id(session):#x}, request={pair.request_id}) timed out waiting for streams"
            )
        pairs.pop(pair.request_id, None)

    async def port_forward(pair: _Pair) -> None:
        assert pair.data is not None
        assert pair.error is not None
        port, _ = _parse_port(pair.data.header("port"))
        try:
            problem = await sandbox.forward(port, _SpdyData(pair.data))
            if problem is not None:
                log.info("port-forward to %s/%s: %s", sandbox.namespace, sandbox.name, problem)
                await pair.error.write(sandbox.failure(port, problem).encode())
        finally:
            await pair.error.close()
            await pair.data.close()

    runner = asyncio.create_task(session.run())
    try:
        async for stream in session.streams():
            request_id = stream.header("requestID")
            if not request_id:
                # Clients older than request ids: consecutive stream ids, error stream first.
                offset = 0 if stream.header("streamType") == "error" else 2
                request_id = str(stream.id - offset)
            pair = pairs.get(request_id)
            if pair is None:
                pair = pairs[request_id] = _Pair(request_id)
                spawn(monitor(pair))
            problem = pair.add(stream)
            if problem is not None:
                await pair.print_error(f"error processing stream for request {request_id}: {problem}")  # fmt: skip
            elif pair.complete.is_set():
                spawn(port_forward(pair))
    finally:
        session.end()
        for task in [runner, *work]:
            task.cancel()
        for task in [runner, *work]:
            with contextlib.suppress(asyncio.CancelledError):
                await task


# ---------------------------------------------------------------------- WebSocket channels


def _query_ports(request: web.Request) -> tuple[list[int], str | None]:
    """The kubelet's NewV4Options over the ports the apiserver passes on (`ports` query)."""
    values = list(request.query.getall("ports", ()))
    if not values:
        return [], 'query parameter "port" is required'
    ports: list[int] = []
    for value in values:
        if not value:
            return [], 'query parameter "port" cannot be empty'
        for part in value.split(","):
            port, problem = _parse_port(part)
            if problem is not None:
                return [], problem.replace(f'"{part}"', f'"{value}"', 1)
            ports.append(port)
    return ports, None


async def _websocket_channels(
    request: web.Request, sandbox: PodSandbox, offered: list[str]
) -> web.StreamResponse:
    """The kubelet's handleWebSocketStreams (see the module docstring)."""
    ports, problem = _query_ports(request)
    if problem is not None:
        return web.Response(status=400, text=problem)
    allowed = ("", V4_BINARY, V4_BASE64)
    chosen = next((p for p in (offered or [""]) if p in allowed), None)
    if chosen is None:
        # x/net/websocket refuses a failed subprotocol handshake with a bare 403.
        return web.Response(status=403)
    ws = web.WebSocketResponse(protocols=(chosen,) if chosen else (), autoping=True)
    await ws.prepare(request)
    text = chosen == V4_BASE64
    inbound = [asyncio.StreamReader() for _ in ports]
    lock = asyncio.Lock()

    async def send(channel: int, data: bytes) -> None:
        async with lock:
            if ws.closed:
                return
            if text:
                await ws.send_str(chr(ord("0") + channel) + base64.b64encode(data).decode())
            else:
                await ws.send_bytes(bytes([channel]) + data)

    async def receive() -> None:
        async for message in ws:
            if message.type == WSMsgType.BINARY and message.data:
                channel, data = message.data[0], message.data[1:]
            elif message.type == WSMsgType.TEXT and message.data:
                channel, data = ord(message.data[0]) - ord("0"), base64.b64decode(message.data[1:])
            elif message.type in (WSMsgType.BINARY, WSMsgType.TEXT):
                continue
            else:
                break
            if channel % 2 == 0 and channel // 2 < len(inbound) and data:
                inbound[channel // 2].feed_data(data)
        for reader in inbound:
            reader.feed_eof()

    class Channel:
        def __init__(self, index: int) -> None:
            self.index = index

        async def read(self) -> bytes:
            return await inbound[self.index].read(65536)

        async def write(self, data: bytes) -> None:
            await send(2 * self.index, data)

    async def forward(index: int, port: int) -> None:
        problem = await sandbox.forward(port, Channel(index))
        if problem is not None:
            log.info("port-forward to %s/%s: %s", sandbox.namespace, sandbox.name, problem)
            await send(2 * index + 1, sandbox.failure(port, problem).encode())

    for index, port in enumerate(ports):
        prefix = port.to_bytes(2, "little")
        await send(2 * index, prefix)
        await send(2 * index + 1, prefix)
    receiver = asyncio.create_task(receive())
    try:
        await asyncio.gather(*(forward(i, p) for i, p in enumerate(ports)))
    finally:
        receiver.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await receiver
        await ws.close()
    return ws
