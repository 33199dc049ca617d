"""SIMULATOR. `kubectl port-forward` to a real child cluster's pods reaches the simulator's
workloads (`sim.podnet`), as it reaches the emulator's.

On a real control plane the way is kube-apiserver -> the pod's Node's kubelet (KWOK,
`sim.real.kwok`) -> wherever KWOK's PortForward object for that pod says. So for every Running pod
with something listening (its declared container ports, and the ports its
`sim.colony.dev/serves` annotation names: `sim.podnet.network.listening_ports`) this controller
opens one local TCP listener per port on 127.0.0.1, each connection of which is the pod's
simulated app on that port (`connect_pod`), and keeps a PortForward (`kwok.x-k8s.io/v1alpha1`,
named as the pod, owned by it so the garbage collector takes it with the pod) sending each port
to its listener. A pod that stops running, or goes, closes its listeners.

Started per real child cluster by `sim.real.child.RealChildCluster`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sim.apiserver.errors import ApiError
from sim.apiserver.registry import PODS, ResourceType
from sim.apiserver.store import WatchEvent
from sim.clusterapi import ClusterApi
from sim.controllers.gateway_dataplane import splice
from sim.controllers.workqueue import ReconcileLoop
from sim.podnet.network import PortRefused, connect_pod, listening_ports

log = logging.getLogger(__name__)

PORT_FORWARDS = ResourceType(
    group="kwok.x-k8s.io",
    version="v1alpha1",
    plural="portforwards",
    kind="PortForward",
    namespaced=True,
)
LISTEN_ADDRESS = "127.0.0.1"

PodKey = tuple[str, str]


@dataclass
class _Forwarded:
    """One pod's listeners: the pod's uid and, by pod port, the local server."""

    uid: str
    servers: dict[int, asyncio.Server] = field(default_factory=dict)


class PodPortForwards:
    """Keeps the listeners and PortForwards of one child's pods (see the module docstring)."""

    def __init__(self, api: ClusterApi) -> None:
        self.api = api
        self._pods: dict[PodKey, _Forwarded] = {}
        self._loop: ReconcileLoop[PodKey] = ReconcileLoop(
            api, f"podforward[{api.name}]", self._keys_for, self._reconcile, self._all_keys,
            watched=(PODS.key,),
        )  # fmt: skip

    async def run(self) -> None:
        try:
            await self._loop.run()
        finally:
            for forwarded in self._pods.values():
                _close(forwarded)
            self._pods.clear()

    def _all_keys(self) -> list[PodKey]:
        return [
            (p["metadata"]["namespace"], p["metadata"]["name"]) for p in self.api.cache.list(PODS)
        ]

    @staticmethod
    def _keys_for(event: WatchEvent) -> list[PodKey]:
        meta = event.object.get("metadata") or {}
        return [(str(meta.get("namespace")), str(meta.get("name")))]

    async def _reconcile(self, key: PodKey) -> float | None:
        pod = self.api.cache.try_get(PODS, *key)
        deleting = pod is None or bool(pod["metadata"].get("deletionTimestamp"))
        ports = [] if pod is None or deleting else listening_ports(pod)
        forwarded = self._pods.get(key)
        if forwarded is not None and (pod is None or forwarded.uid != pod["metadata"]["uid"]):
            _close(self._pods.pop(key))  # another pod under the same name
            forwarded = None
        if not ports:
            if forwarded is not None:
                _close(self._pods.pop(key))
            return None
        assert pod is not None
        forwarded = forwarded or self._pods.setdefault(key, _Forwarded(pod["metadata"]["uid"]))
        for port in [p for p in forwarded.servers if p not in ports]:
            forwarded.servers.pop(port).close()
        for port in ports:
            if port not in forwarded.servers:
                forwarded.servers[port] = await asyncio.start_server(
                    self._connection_to(key, port), LISTEN_ADDRESS, 0
                )
        await self._ensure_port_forward(pod, forwarded)
        return None

    async def _ensure_port_forward(self, pod: dict[str, Any], forwarded: _Forwarded) -> None:
        meta = pod["metadata"]
        forwards = [
            {"ports": [port], "target": {"address": LISTEN_ADDRESS, "port": _port_of(server)}}
            for port, server in sorted(forwarded.servers.items())
        ]
        existing = await self.api.try_get(PORT_FORWARDS, meta["namespace"], meta["name"])
        if existing is not None and existing.get("spec") == {"forwards": forwards}:
            return
        if existing is not None:
            await self.api.mutate(
                PORT_FORWARDS, meta["namespace"], meta["name"],
                lambda o: o.update(spec={"forwards": forwards}),
            )  # fmt: skip
            return
        owner = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
        body = {
            "metadata": {"name": meta["name"], "ownerReferences": [owner]},
            "spec": {"forwards": forwards},
        }
        with contextlib.suppress(ApiError):  # gone meanwhile, or made by a reconcile before
            await self.api.create(PORT_FORWARDS, body, namespace=meta["namespace"])

    def _connection_to(
        self, key: PodKey, port: int
    ) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        return lambda reader, writer: self._connect(key, port, reader, writer)

    async def _connect(
        self, key: PodKey, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """One forwarded connection: the pod's app on `port`, as it is now."""
        try:
            pod = self.api.cache.try_get(PODS, *key)
            if pod is None:
                return
            try:
                conn = connect_pod(pod, port)
            except PortRefused as refused:
                log.info("port-forward to %s/%s:%d: %s", *key, port, refused)
                return
            await splice(reader, writer, conn)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def _port_of(server: asyncio.Server) -> int:
    return int(server.sockets[0].getsockname()[1])


def _close(forwarded: _Forwarded) -> None:
    for server in forwarded.servers.values():
        server.close()
    forwarded.servers.clear()
