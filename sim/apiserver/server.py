"""`ClusterServer`: one emulated kube-apiserver for one cluster store, over HTTPS on loopback.

Several servers (one per simulated cluster) run in one process and one event loop, each on its own
port with its own tokens; one `CertificateAuthority` signs all their certificates.

    ca = CertificateAuthority()
    server = ClusterServer("mgmt", ClusterStore("mgmt"), ca)
    await server.start()
    kubernetes.config.load_kube_config_from_dict(server.kubeconfig(), client_configuration=cfg)
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from typing import Any

from aiohttp import web

from sim.apiserver.auth import CertificateAuthority
from sim.apiserver.http import create_app
from sim.apiserver.requests import RequestCounter
from sim.apiserver.store import ClusterStore
from sim.faults import FaultInjector
from sim.records import WorldRecords

ADMIN_USER = "kubernetes-admin"


class ClusterServer:
    """HTTPS front of one `ClusterStore` (see the module docstring)."""

    def __init__(
        self,
        name: str,
        store: ClusterStore,
        ca: CertificateAuthority,
        *,
        faults: FaultInjector | None = None,
        records: WorldRecords | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        admin_token: str | None = None,
        routes: Iterable[web.AbstractRouteDef] = (),
    ) -> None:
        self.name = name
        self.store = store
        self.ca = ca
        self.faults = faults
        self.records = records
        self.host = host
        self.port = port
        # A restored cluster keeps the admin token its kubeconfigs already carry.
        self.admin_token = admin_token or store.tokens.issue(ADMIN_USER)[0]
        self.routes = tuple(routes)
        self.requests = RequestCounter()
        """Every Kubernetes API request this server answered (`sim.apiserver.requests`)."""
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        if self._runner is None:
            raise RuntimeError(f"cluster server {self.name} is not started")
        return f"https://{self.host}:{self.port}"

    async def start(self) -> None:
        """Listen (port 0 picks a free port, readable from `.port` / `.url` afterwards)."""
        app = create_app(
            self.store,
            faults=self.faults,
            records=self.records,
            routes=self.routes,
            requests=self.requests,
        )
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
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        for sock in sockets:
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                self.port = int(sock.getsockname()[1])
                break
        self._runner = runner

    async def stop(self) -> None:
        """Stop listening and end open watches."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def kubeconfig(self, token: str | None = None, *, namespace: str = "default") -> dict[str, Any]:
        """A kubeconfig dict for this cluster (admin token unless `token` is given)."""
        user = f"{self.name}-admin" if token is None else f"{self.name}-user"
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "preferences": {},
            "clusters": [
                {
                    "name": self.name,
                    "cluster": {"server": self.url, "certificate-authority-data": self.ca.cert_b64},
                }
            ],
            "users": [{"name": user, "user": {"token": token or self.admin_token}}],
            "contexts": [
                {
                    "name": self.name,
                    "context": {"cluster": self.name, "user": user, "namespace": namespace},
                }
            ],
            "current-context": self.name,
        }
