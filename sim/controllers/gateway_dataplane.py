"""SIMULATOR. The tenant gateway's data plane: real local listeners that route to the simulated
workloads, so the URLs Colony prints for a workspace can be opened.

One `TenantGatewayDataPlane` per child cluster (`SimChildCluster` owns it). `listen(tcp_count,
keep)` gives the tenant Gateway its ports (`sim.controllers.tenant_gateway` writes them into the
Gateway's listeners): one for HTTPS, one for HTTP and `tcp_count` for the TCP pool, all on the
loopback address (`127.0.0.1`, the Gateway's `status.addresses`), picked by the OS so that any
number of simulated worlds share a machine, the ports in `keep` first when they are free (a world
restarted with its state keeps its URLs). Whatever the Gateway says at the time of a connection
decides where it goes, as a Gateway API implementation programs its proxy from the objects:

- HTTPS (TLS terminated with the listener's certificateRefs Secret, read at each handshake: the
  sim CA's `*.<domain>` certificate) and HTTP: per request, the listener by local port, the
  HTTPRoutes attached to it (a parentRef to this Gateway with that sectionName or port and an
  Accepted entry in the route's status) whose hostnames match the Host header (and the listener's
  `*.<domain>`), the rule whose path match (PathPrefix, the default `/`, or Exact) is the most
  specific, one of its backendRefs by weight, the Service's ready endpoint in turn
  (`sim.podnet.network.Backends`), and the request goes to that pod's port
  (`sim.podnet.network.connect_pod`). Envoy's answers when that fails: 404 (no route), 500 (route
  without a usable backend), 503 `no healthy upstream` or `upstream connect error ...`.
- TCP: per connection, the TCPRoute attached to the listener that receives its connections (the
  oldest: see `sim.controllers.gateway`), bytes copied both ways to its backend's pod; without one
  the connection is closed at once.

Gaps: no WebSocket or other upgrades through HTTP listeners, no HTTP/2, request and response
bodies are buffered whole, filters, header/query matches and timeouts of HTTPRoutes are ignored.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import random
import socket
import ssl
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h11
from aiohttp import web
from aiohttp.web_request import BaseRequest

from sim.apiserver.registry import GATEWAYS, HTTPROUTES, SECRETS, TCPROUTES
from sim.apiserver.store import ClusterStore
from sim.clusterapi import ClusterApi, cluster_api
from sim.controllers.gateway import CONTROLLER_NAME, TRAFFIC_CONDITION
from sim.podnet.network import Backends, NoEndpoints, PortRefused, connect_pod
from sim.podnet.pipe import PipeEnd
from sim.tasks import cancel_and_wait

log = logging.getLogger(__name__)

GROUP = "gateway.networking.k8s.io"
LISTEN_ADDRESS = "127.0.0.1"
"""Where tenant gateways listen (the Gateway's status.addresses)."""
_HOP_BY_HOP = frozenset(
    {
        "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
        "trailer", "transfer-encoding", "upgrade", "content-length", "host",
    }
)  # fmt: skip
_MAX_RESPONSE = 16 * 1024 * 1024
_CONNECT_FAILURE = (
    "upstream connect error or disconnect/reset before headers. reset reason: remote connection "
    "failure, transport failure reason: delayed connect error: Connection refused"
)


@dataclass(frozen=True)
class ListenerPorts:
    """The local ports of the tenant Gateway's listeners."""

    https: int
    http: int
    tcp: tuple[int, ...]


@dataclass
class _Served:
    kind: str  # "https" | "http" | "tcp"
    server: asyncio.Server
    http: web.Server | None = None


@dataclass
class _Choice:
    """Where one request or connection goes: a Service port in a namespace."""

    namespace: str
    service: str
    port: int


class TenantGatewayDataPlane:
    """Serves one child cluster's tenant Gateway on local ports (see the module docstring)."""

    def __init__(
        self,
        cluster: ClusterStore | ClusterApi,
        gateway_namespace: str,
        gateway_name: str,
        host: str = LISTEN_ADDRESS,
    ) -> None:
        self.api = cluster_api(cluster)
        # Reads at request and handshake time come from the watched objects (the informer cache
        # of a real cluster: the Gateway controller keeps the types it needs watched).
        self.store = self.api.cache
        self.gateway_namespace = gateway_namespace
        self.gateway_name = gateway_name
        self.host = host
        self.backends = Backends()
        self._served: dict[int, _Served] = {}
        self._tcp_connections: dict[int, set[asyncio.Task[Any]]] = {}
        """Open TCP connections by listener port, dropped when the listener closes."""
        self._tls: tuple[str, ssl.SSLContext] | None = None
        self._weighted = random.Random()
        """Picks a route's backend by weight (its own: the `random` module's state is not the
        simulator's)."""

    @property
    def ports(self) -> ListenerPorts | None:
        """The ports served now, None before the first `listen`."""
        by_kind: dict[str, list[int]] = {}
        for port, served in self._served.items():
            by_kind.setdefault(served.kind, []).append(port)
        if "https" not in by_kind or "http" not in by_kind:
            return None
        return ListenerPorts(by_kind["https"][0], by_kind["http"][0], tuple(sorted(by_kind.get("tcp", []))))  # fmt: skip

    async def listen(self, tcp_count: int, keep: ListenerPorts | None = None) -> ListenerPorts:
        """Serve HTTPS, HTTP and `tcp_count` TCP ports (the ones served already stay; `keep`'s
        are tried first for new ones); more TCP ports than wanted are closed, highest first."""
        current = self.ports
        https = current.https if current else await self._open("https", keep.https if keep else 0)
        http = current.http if current else await self._open("http", keep.http if keep else 0)
        tcp = list(current.tcp if current else ())
        while len(tcp) > tcp_count:
            await self._close(tcp.pop())
        wanted = [p for p in (keep.tcp if keep else ()) if p not in tcp]
        while len(tcp) < tcp_count:
            tcp.append(await self._open("tcp", wanted.pop(0) if wanted else 0))
        ports = ListenerPorts(https, http, tuple(sorted(tcp)))
        if ports != current:
            log.info(
                "tenant gateway %s/%s of %s listens on %s: https %d, http %d, tcp %s",
                self.gateway_namespace, self.gateway_name, self.api.name, self.host,
                ports.https, ports.http, ", ".join(map(str, ports.tcp)) or "none",
            )  # fmt: skip
        return ports

    async def stop(self) -> None:
        """Close every listener and drop the connections still open on them."""
        for port in list(self._served):
            await self._close(port)

    async def _open(self, kind: str, preferred: int) -> int:
        sock = _bind(self.host, preferred)
        port = int(sock.getsockname()[1])
        loop = asyncio.get_running_loop()
        http: web.Server | None = None
        if kind == "tcp":
            server = await asyncio.start_server(lambda r, w: self._tcp(port, r, w), sock=sock)
        else:
            http = web.Server(lambda request: self._http(kind, port, request), access_log=None)
            server = await loop.create_server(
                http, sock=sock, ssl=self._ssl_context() if kind == "https" else None
            )
        self._served[port] = _Served(kind, server, http)
        return port

    async def _close(self, port: int) -> None:
        served = self._served.pop(port, None)
        if served is None:
            return
        # Stop accepting, then drop what is open. Nothing here waits on the server: a timed wait
        # (wait_for) could swallow the cancellation of the controller that stops a cluster.
        served.server.close()
        if served.http is not None:
            for connection in served.http.connections:
                connection.force_close()
        connections = list(self._tcp_connections.pop(port, ()))
        for task in connections:
            task.cancel()
        await asyncio.gather(*connections, return_exceptions=True)

    # ------------------------------------------------------------------ the Gateway's objects

    def _gateway(self) -> dict[str, Any] | None:
        return self.store.try_get(GATEWAYS, self.gateway_namespace, self.gateway_name)

    def _listener(self, gateway: Mapping[str, Any], port: int, protocols: Iterable[str]) -> dict[str, Any] | None:  # fmt: skip
        return next(
            (
                dict(listener)
                for listener in (gateway.get("spec") or {}).get("listeners") or []
                if int(listener.get("port") or 0) == port and listener.get("protocol") in protocols
            ),
            None,
        )

    def _attached(self, route: Mapping[str, Any], listener: Mapping[str, Any]) -> bool:
        """Whether `route` is attached to `listener` of our Gateway and accepted there."""
        namespace = route["metadata"]["namespace"]
        entries = [
            p
            for p in (route.get("status") or {}).get("parents") or []
            if p.get("controllerName") == CONTROLLER_NAME
        ]
        for ref in (route.get("spec") or {}).get("parentRefs") or []:
            if (ref.get("group") or GROUP) != GROUP or (ref.get("kind") or "Gateway") != "Gateway":
                continue
            if ref.get("name") != self.gateway_name:
                continue
            if (ref.get("namespace") or namespace) != self.gateway_namespace:
                continue
            if ref.get("sectionName") and ref["sectionName"] != listener.get("name"):
                continue
            if ref.get("port") and int(ref["port"]) != int(listener.get("port") or 0):
                continue
            entry = next(
                (
                    e
                    for e in entries
                    if (e.get("parentRef") or {}).get("name") == ref.get("name")
                    and (e.get("parentRef") or {}).get("sectionName") == ref.get("sectionName")
                ),
                None,
            )
            conditions = {c.get("type"): c.get("status") for c in (entry or {}).get("conditions") or []}  # fmt: skip
            if (
                conditions.get("Accepted") == "True"
                and conditions.get(TRAFFIC_CONDITION) != "False"
            ):
                return True
        return False

    # ------------------------------------------------------------------ TLS

    def _ssl_context(self) -> ssl.SSLContext:
        """The HTTPS listener's context: the certificate is chosen per handshake by SNI, as the
        listener's hostname and Secret say then (no SNI or another name: the handshake fails, as
        with Envoy's filter chains matched on server names)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.sni_callback = self._sni
        return context

    def _sni(self, sock: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> int | None:
        gateway = self._gateway()
        listener = None if gateway is None else self._https_listener(gateway)
        if listener is None or not server_name:
            return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
        hostname = str(listener.get("hostname") or "")
        if hostname and not _host_matches(hostname, server_name.lower()):
            return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
        context = self._certificate(listener)
        if context is None:
            return ssl.ALERT_DESCRIPTION_INTERNAL_ERROR
        sock.context = context
        return None

    @staticmethod
    def _https_listener(gateway: Mapping[str, Any]) -> Mapping[str, Any] | None:
        return next(
            (
                x
                for x in (gateway.get("spec") or {}).get("listeners") or []
                if x.get("protocol") == "HTTPS"
            ),
            None,
        )

    def _certificate(self, listener: Mapping[str, Any]) -> ssl.SSLContext | None:
        """A TLS context with the listener's certificateRefs Secret, rebuilt when it changes."""
        refs = (listener.get("tls") or {}).get("certificateRefs") or []
        if not refs:
            return None
        ref = refs[0]
        secret = self.store.try_get(
            SECRETS, ref.get("namespace") or self.gateway_namespace, str(ref.get("name", ""))
        )
        if secret is None:
            return None
        version = f"{secret['metadata'].get('uid')}-{secret['metadata'].get('resourceVersion')}"
        if self._tls is not None and self._tls[0] == version:
            return self._tls[1]
        data = secret.get("data") or {}
        try:
            pem = base64.b64decode(data["tls.crt"]) + b"\n" + base64.b64decode(data["tls.key"])
        except (KeyError, ValueError):
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        # ssl loads certificates from files only: a private temporary one, removed at once.
        with tempfile.TemporaryDirectory(prefix="colony-sim-gateway-") as workdir:
            path = Path(workdir) / "tls.pem"
            path.write_bytes(pem)
            try:
                context.load_cert_chain(path)
            except ssl.SSLError as exc:
                log.warning("tenant gateway: certificate Secret %s unusable: %s", ref.get("name"), exc)  # fmt: skip
                return None
        self._tls = (version, context)
        return context

    # ------------------------------------------------------------------ HTTP

    def _route_for(self, gateway: Mapping[str, Any], listener: Mapping[str, Any], host: str, path: str) -> tuple[_Choice | None, int]:  # fmt: skip
        """The backend a request goes to, or (None, status) when none: 404 without a matching
        route, 500 when the matching rule has no usable backend."""
        listener_host = str(listener.get("hostname") or "")
        if listener_host and not _host_matches(listener_host, host):
            return None, 404
        best: tuple[tuple[int, int], Mapping[str, Any], Mapping[str, Any]] | None = None
        for route in self.store.list(HTTPROUTES):
            spec = route.get("spec") or {}
            hostnames = [str(h) for h in spec.get("hostnames") or []]
            if hostnames and not any(_host_matches(h, host) for h in hostnames):
                continue
            if not self._attached(route, listener):
                continue
            for rule in spec.get("rules") or [{}]:
                for match in rule.get("matches") or [{}]:
                    rank = _path_rank(match.get("path") or {}, path)
                    if rank is not None and (best is None or rank > best[0]):
                        best = (rank, route, rule)
        if best is None:
            return None, 404
        _, chosen, rule = best
        refs = [
            r
            for r in rule.get("backendRefs") or []
            if (r.get("kind") or "Service") == "Service" and not r.get("group") and r.get("port")
        ]
        weights = [int(r.get("weight", 1)) for r in refs]
        if not refs or sum(weights) <= 0:
            return None, 500
        ref = self._weighted.choices(refs, weights)[0]
        namespace = str(ref.get("namespace") or chosen["metadata"]["namespace"])
        return _Choice(namespace, str(ref["name"]), int(ref["port"])), 200

    async def _http(self, kind: str, port: int, request: BaseRequest) -> web.StreamResponse:
        gateway = self._gateway()
        listener = None if gateway is None else self._listener(gateway, port, (kind.upper(),))
        if gateway is None or listener is None:
            return web.Response(status=404)
        host = _hostname(request.headers.get("Host", ""))
        choice, status = self._route_for(gateway, listener, host, request.path)
        if choice is None:
            return web.Response(status=status)
        try:
            pod, target = self.backends.pick(
                self.store, choice.namespace, choice.service, choice.port
            )
        except NoEndpoints:
            return web.Response(status=503, text="no healthy upstream")
        try:
            conn = connect_pod(pod, target)
        except PortRefused:
            return web.Response(status=503, text=_CONNECT_FAILURE)
        try:
            body = await request.read()
            return await _exchange(conn, request, body, kind)
        except (h11.ProtocolError, ConnectionResetError, ValueError) as exc:
            log.info("tenant gateway: upstream %s/%s failed: %s", choice.namespace, choice.service, exc)  # fmt: skip
            return web.Response(
                status=503,
                text="upstream connect error or disconnect/reset before headers. reset reason: connection termination",
            )
        finally:
            conn.close()

    # ------------------------------------------------------------------ TCP

    async def _tcp(self, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:  # fmt: skip
        task = asyncio.current_task()
        if task is not None:
            open_here = self._tcp_connections.setdefault(port, set())
            open_here.add(task)
            task.add_done_callback(open_here.discard)
        try:
            conn = self._tcp_backend(port)
            if conn is None:
                return
            await splice(reader, writer, conn)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _tcp_backend(self, port: int) -> PipeEnd | None:
        gateway = self._gateway()
        listener = None if gateway is None else self._listener(gateway, port, ("TCP",))
        if listener is None:
            return None
        routes = [r for r in self.store.list(TCPROUTES) if self._attached(r, listener)]
        for route in routes:
            for rule in (route.get("spec") or {}).get("rules") or []:
                for ref in rule.get("backendRefs") or []:
                    namespace = str(ref.get("namespace") or route["metadata"]["namespace"])
                    try:
                        pod, target = self.backends.pick(self.store, namespace, str(ref.get("name")), int(ref.get("port") or 0))  # fmt: skip
                        return connect_pod(pod, target)
                    except (NoEndpoints, PortRefused) as exc:
                        log.info("tenant gateway: TCP port %d: %s", port, exc)
                        return None
        return None


def _bind(host: str, preferred: int) -> socket.socket:
    """A listening-ready socket on `preferred` when it is free, else on a port the OS picks."""
    for port in (preferred, 0) if preferred else (0,):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            continue
        return sock
    raise OSError(f"no free port on {host}")


def _host_matches(pattern: str, host: str) -> bool:
    """Whether a listener or route hostname admits a request's host (`*.a.b` admits `x.a.b` and
    `x.y.a.b`, not `a.b`, as the Gateway API says)."""
    pattern = pattern.lower()
    if pattern.startswith("*."):
        return host.endswith(pattern[1:])
    return host == pattern


def _hostname(host_header: str) -> str:
    """The Host header without its port, lowercase."""
    if host_header.startswith("["):
        return host_header.split("]", 1)[0][1:].lower()
    return (
        host_header.rsplit(":", 1)[0].lower()
        if host_header.count(":") == 1
        else host_header.lower()
    )


def _path_rank(path: Mapping[str, Any], request_path: str) -> tuple[int, int] | None:
    """How specifically a path match matches (Exact over PathPrefix, longer prefixes first), or
    None when it does not."""
    kind = path.get("type") or "PathPrefix"
    value = str(path.get("value") or "/")
    if kind == "Exact":
        return (2, len(value)) if request_path == value else None
    if kind == "PathPrefix":
        prefix = value.rstrip("/")
        if request_path == prefix or request_path.startswith(prefix + "/") or not prefix:
            return (1, len(prefix))
    return None


async def _exchange(conn: PipeEnd, request: BaseRequest, body: bytes, scheme: str) -> web.Response:
    """Send `request` to the backend over `conn` (HTTP/1.1) and return its answer."""
    client = h11.Connection(h11.CLIENT)
    headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP]
    peer = request.remote or ""
    headers += [
        ("Host", request.host or ""),
        ("Content-Length", str(len(body))),
        ("X-Forwarded-For", peer),
        ("X-Forwarded-Proto", scheme),
        ("Connection", "close"),
    ]
    await conn.write(client.send(h11.Request(method=request.method, target=request.path_qs, headers=headers)))  # fmt: skip
    if body:
        await conn.write(client.send(h11.Data(data=body)))
    await conn.write(client.send(h11.EndOfMessage()))
    status, reply_headers, chunks, size = 502, [], [], 0
    while True:
        event = client.next_event()
        if event is h11.NEED_DATA:
            client.receive_data(await conn.read())
            continue
        if isinstance(event, h11.Response):
            status = event.status_code
            reply_headers = [
                (k.decode("latin-1"), v.decode("latin-1"))
                for k, v in event.headers
                if k.decode("latin-1").lower() not in _HOP_BY_HOP
            ]
        elif isinstance(event, h11.Data):
            size += len(event.data)
            if size > _MAX_RESPONSE:
                raise ValueError("response too large for the simulated gateway")
            chunks.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
            break
    response = web.Response(status=status, body=b"".join(chunks))
    for key, value in reply_headers:
        response.headers.add(key, value)
    return response


async def splice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: PipeEnd) -> None:  # fmt: skip
    """Copy a client socket and a pod connection into each other until both ends finished."""

    async def up() -> None:
        with contextlib.suppress(ConnectionResetError):
            while data := await reader.read(65536):
                await conn.write(data)
            conn.write_eof()

    async def down() -> None:
        with contextlib.suppress(ConnectionError):
            while data := await conn.read():
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()

    tasks = [asyncio.create_task(up()), asyncio.create_task(down())]
    try:
        _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        if pending:
            await asyncio.wait(pending, timeout=1.0)
    finally:
        await cancel_and_wait(tasks)
        conn.close()
