"""SIMULATOR. The real management cluster's front: what clients of the real world reach it by.

In the emulator every cluster's own HTTP layer counts requests, injects faults and records what
clients create; a real kube-apiserver does none of that. So in the real world Colony, `kubectl`
and the tests reach the management cluster through this thin HTTPS front, which does those three
things and passes everything else to the real kube-apiserver unchanged, byte for byte (watches
streamed as they come): every answer a client gets is the real server's.

- Clients authenticate with the front's bearer token (the world's `management.kubeconfig`); the
  front speaks to kube-apiserver as its admin (a client certificate in `system:masters`). A
  client that brings another bearer token (a ServiceAccount's) is passed through as itself, so
  the real server's RBAC answers it.
- Faults: `FaultInjector.before_request("management", ...)` first, as the emulator's server asks
  it (latency, 429/5xx rates, scripted answers); `/sim/v1/faults` and `/sim/v1/records` as on
  every simulator server.
- Records: every object a client creates (a 201 to a POST), for the reliability suite's checks.
- Not passed: connection upgrades (exec, attach, port-forward): the management cluster runs no
  workloads.

The child clusters of the real world have no front: their kubeconfig Secrets name their real
kube-apiservers (so faults scoped to a child cluster do not apply there).
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import ssl
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from sim.apiserver.auth import CertificateAuthority
from sim.apiserver.errors import ApiError, unauthorized
from sim.apiserver.requests import RequestCounter
from sim.faults import FaultInjector, add_fault_routes
from sim.records import WorldRecords, add_records_routes

TARGET = "management"
"""The name faults and records know the management cluster by (as in the emulator)."""
_HOP_BY_HOP = frozenset(
    {
        "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
        "trailer", "transfer-encoding", "upgrade", "content-length", "host", "authorization",
    }
)  # fmt: skip


class ManagementFront:
    """The HTTPS front of a real management cluster (see the module docstring).

    Args:
        upstream: the real kube-apiserver's admin kubeconfig (server, CA, client certificate).
        ca: signs the front's serving certificate (the simulator's CA, as for every server).
        routes: extra routes (the world's identity and request counts).
    """

    def __init__(
        self,
        upstream: Mapping[str, Any],
        ca: CertificateAuthority,
        faults: FaultInjector,
        records: WorldRecords,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        routes: Iterable[web.RouteDef] = (),
    ) -> None:
        self.ca = ca
        self.faults = faults
        self.records = records
        self.host = host
        self.port = port
        self.admin_token = secrets.token_urlsafe(32)
        self.requests = RequestCounter()
        self._upstream = upstream
        self._routes = tuple(routes)
        self._runner: web.AppRunner | None = None
        self._admin: aiohttp.ClientSession | None = None
        self._anyone: aiohttp.ClientSession | None = None
        """Without the admin's certificate: kube-apiserver authenticates a client certificate
        before a bearer token, so a passed-through token must come alone."""
        self._server = str(_only(upstream, "clusters")["cluster"]["server"])

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    async def start(self) -> None:
        self._admin = _session(_client_context(self._upstream, admin=True))
        self._anyone = _session(_client_context(self._upstream, admin=False))
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_routes(self._routes)
        add_fault_routes(app, self.faults)
        add_records_routes(app, self.records)
        app.router.add_route("*", "/{path:.*}", self._forward)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(
            runner,
            self.host,
            self.port,
            ssl_context=self.ca.server_ssl_context(),
            reuse_address=True,
        )
        await site.start()
        self.port = int(runner.addresses[0][1])
        self._runner = runner

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        for session in (self._admin, self._anyone):
            if session is not None:
                await session.close()
        self._admin = self._anyone = None

    def kubeconfig(self, *, namespace: str = "default") -> dict[str, Any]:
        """The kubeconfig of the front's admin, as the emulator's management cluster writes it."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": TARGET,
                    "cluster": {"server": self.url, "certificate-authority-data": self.ca.cert_b64},
                }
            ],
            "users": [{"name": f"{TARGET}-admin", "user": {"token": self.admin_token}}],
            "contexts": [
                {
                    "name": TARGET,
                    "context": {
                        "cluster": TARGET,
                        "user": f"{TARGET}-admin",
                        "namespace": namespace,
                    },
                }
            ],
            "current-context": TARGET,
        }

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        self.requests.count(request.method, request.path, request.query)
        try:
            headers = self._headers(request)
            await self.faults.before_request(TARGET, request.method, request.path_qs)
        except ApiError as error:
            refused = web.json_response(error.status_body(), status=error.code)
            retry = error.details.get("retryAfterSeconds")
            if retry is not None:
                refused.headers["Retry-After"] = str(retry)
            return refused
        if request.headers.get("Upgrade"):
            return web.Response(status=400, text="the management cluster runs no workloads")
        session = self._anyone if "Authorization" in headers else self._admin
        assert session is not None
        body = await request.read()
        async with session.request(
            request.method,
            self._server + request.path_qs,
            data=body or None,
            headers=headers,
            # kube-apiserver reads a body without a Content-Type as JSON (the official Python
            # client sends none with custom objects); aiohttp's default would be octet-stream.
            skip_auto_headers=() if "Content-Type" in request.headers else ("Content-Type",),
        ) as answer:
            if request.query.get("watch") in ("true", "1"):
                return await _stream(request, answer)
            content = await answer.read()
            if request.method == "POST" and answer.status == 201:
                self._record(request.path, content)
            return web.Response(status=answer.status, body=content, headers=_passed(answer))

    def _headers(self, request: web.Request) -> dict[str, str]:
        """The request's headers for kube-apiserver: the front's own token stays here (the front
        is the admin there), another bearer token is passed as it is."""
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise unauthorized()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        if not secrets.compare_digest(token.strip(), self.admin_token):
            headers["Authorization"] = f"Bearer {token.strip()}"
        return headers

    def _record(self, path: str, content: bytes) -> None:
        parts = [part for part in path.split("/") if part]
        group = "" if parts[:1] == ["api"] else (parts[1] if len(parts) > 1 else "")
        with contextlib.suppress(ValueError):
            created = json.loads(content)
            if isinstance(created, dict) and parts:
                self.records.object_created(TARGET, group, parts[-1], created)


async def _stream(request: web.Request, answer: aiohttp.ClientResponse) -> web.StreamResponse:
    """A watch: kube-apiserver's answer passed on as it arrives."""
    response = web.StreamResponse(status=answer.status, headers=_passed(answer))
    await response.prepare(request)
    with contextlib.suppress(ConnectionError, aiohttp.ClientError):
        async for chunk in answer.content.iter_any():
            await response.write(chunk)
    with contextlib.suppress(ConnectionError):
        await response.write_eof()
    return response


def _passed(answer: aiohttp.ClientResponse) -> dict[str, str]:
    return {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_BY_HOP}


def _only(kubeconfig: Mapping[str, Any], section: str) -> dict[str, Any]:
    entries = kubeconfig.get(section) or []
    if len(entries) != 1:
        raise ValueError(f"the upstream kubeconfig has {len(entries)} {section}, not 1")
    entry: dict[str, Any] = entries[0]
    return entry


def _session(context: ssl.SSLContext) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=context),
        auto_decompress=False,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
    )


def _client_context(kubeconfig: Mapping[str, Any], *, admin: bool) -> ssl.SSLContext:
    """TLS to kube-apiserver: its CA, and with `admin` the admin's client certificate (ssl loads
    it from files only: private temporary ones, removed at once)."""
    cluster = _only(kubeconfig, "clusters")["cluster"]
    user = _only(kubeconfig, "users")["user"]
    context = ssl.create_default_context(
        cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
    )
    if not admin:
        return context
    with tempfile.TemporaryDirectory(prefix="colony-sim-front-") as workdir:
        cert, key = Path(workdir) / "admin.crt", Path(workdir) / "admin.key"
        cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
        key.write_bytes(base64.b64decode(user["client-key-data"]))
        context.load_cert_chain(cert, key)
    return context
