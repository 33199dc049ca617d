"""SIMULATOR. A ClusterDeployment's child cluster in the real world: a real control plane.

`RealChildCluster.start` starts, on the world's etcd under a prefix of its own: kube-apiserver,
kube-controller-manager and kube-scheduler (`components.controlplane`), KWOK with its kubelet
server (`sim.real.kwok`); installs the Gateway API's CRDs and KWOK's PortForward CRD
(`components.manifests`) and k0s's system workloads (`sim.controllers.k0rdent.system_workloads`);
then runs what the simulator adds to any child cluster, acting on it through the official client
(`sim.real.kubeapi.KubeApi`): the Gateway API controller, the tenant gateway's data plane and the
port-forwards to the simulated workloads (`sim.real.podforward`).

What the emulator's own controllers do there is left to the real ones: kube-scheduler binds pods,
kube-controller-manager runs Deployments, DaemonSets, garbage collection, namespace finalization,
PodDisruptionBudget status, node lifecycle and the pod GC, and KWOK plays the kubelets (a Node is
Ready once KWOK takes it over: `ready_node` annotates it so). The k0rdent controllers register the
machines' Nodes through `register_node` (the Node names KWOK's server as its kubelet).

Its kubeconfig (the `<name>-kubeconfig` Secret's value) is the control plane's admin kubeconfig: a
client certificate of `system:masters`, as CAPI's admin kubeconfigs are.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import shutil
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import httpx
import yaml

from components import manifests
from components.controlplane import KWOK_NODE_ANNOTATION, ControlPlane, Etcd
from sim.apiserver.errors import ApiError
from sim.apiserver.registry import NODES
from sim.clusterapi import ClusterApi
from sim.controllers.gateway import GatewayController
from sim.controllers.gateway_dataplane import TenantGatewayDataPlane
from sim.controllers.k0rdent import system_workloads
from sim.controllers.tenant_gateway import GATEWAY as TENANT_GATEWAY
from sim.controllers.tenant_gateway import NAMESPACE as TENANT_GATEWAY_NAMESPACE
from sim.real.bootstrap import blocking, ensure_crds
from sim.real.kubeapi import KubeApi
from sim.real.kwok import JOINED_ANNOTATION, KUBELET_HOST, Kwok
from sim.real.podforward import PodPortForwards
from sim.tasks import cancel_and_wait

log = logging.getLogger(__name__)


class RealChildCluster:
    """A child cluster of the real world (see the module docstring)."""

    def __init__(
        self, name: str, plane: ControlPlane, kwok: Kwok, api: KubeApi, executor: Executor
    ) -> None:
        self.name = name
        self.plane = plane
        self.kwok = kwok
        self._api = api
        self._executor = executor
        self._data_plane = TenantGatewayDataPlane(api, TENANT_GATEWAY_NAMESPACE, TENANT_GATEWAY)
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    async def start(
        cls,
        name: str,
        prefix: str,
        etcd: Etcd,
        directory: Path,
        executor: Executor,
        rejected: deque[ApiError] | None = None,
    ) -> RealChildCluster:
        """Start the child cluster of ClusterDeployment `name` in `directory`, its objects under
        etcd prefix `/colony/<prefix>` (unique per start: a deleted cluster's name may return)."""
        plane = await blocking(
            executor,
            lambda: ControlPlane.start(directory, etcd=etcd, name=prefix, kwok=False),
            _discard(etcd, directory),
        )
        api: KubeApi | None = None
        kwok: Kwok | None = None
        try:
            api = await KubeApi(name, plane.admin_kubeconfig, rejected=rejected).start()
            await ensure_crds(
                api, manifests.crds("kwok-portforward") + manifests.crds("gateway-api")
            )
            kwok = await blocking(executor, lambda: Kwok.start(plane), Kwok.stop)
            child = cls(name, plane, kwok, api, executor)
            await child._run()
        except BaseException:
            await asyncio.get_running_loop().run_in_executor(
                executor, _stop_all, plane, kwok, etcd, directory
            )
            if api is not None:
                await api.close()
            raise
        return child

    async def _run(self) -> None:
        for rt, obj in system_workloads():
            with contextlib.suppress(ApiError):
                await self._api.create(rt, obj)
        controllers = (GatewayController(self._api), PodPortForwards(self._api))
        self._tasks = [
            asyncio.create_task(c.run(), name=f"{self.name}-{type(c).__name__}")
            for c in controllers
        ]

    @property
    def api(self) -> ClusterApi:
        return self._api

    @property
    def kubeconfig(self) -> str:
        return yaml.safe_dump(self.plane.admin_kubeconfig, sort_keys=False)

    @property
    def gateway_data_plane(self) -> TenantGatewayDataPlane:
        return self._data_plane

    async def register_node(self, node: dict[str, Any]) -> None:
        """The Node as the k0rdent controllers describe it, KWOK's from the start (it takes over
        no Node later), its kubelet KWOK's server: kube-apiserver dials a Node's Hostname address
        first (`sim.real.kwok`)."""
        node["metadata"].setdefault("annotations", {})[KWOK_NODE_ANNOTATION] = "fake"
        status = node.setdefault("status", {})
        status["addresses"] = [
            {**a, "address": KUBELET_HOST} if a.get("type") == "Hostname" else a
            for a in status.get("addresses") or []
        ]
        status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": self.kwok.port}}
        await self._api.create(NODES, node)

    async def ready_node(self, name: str) -> None:
        """The machine's kubelet joined: KWOK makes the Node Ready and keeps it so."""

        def joined(node: dict[str, Any]) -> None:
            node["metadata"].setdefault("annotations", {})[JOINED_ANNOTATION] = "true"

        with contextlib.suppress(ApiError):
            await self._api.mutate(NODES, None, name, joined)

    async def remove_node(self, name: str) -> None:
        """The Node goes; kube-controller-manager's pod GC removes its pods."""
        with contextlib.suppress(ApiError):
            await self._api.delete(NODES, None, name)

    async def stop(self) -> None:
        """Stop its controllers, listeners and processes, and drop its objects from etcd."""
        tasks, self._tasks = self._tasks, []
        await cancel_and_wait(tasks)
        await self._data_plane.stop()
        await self._api.close()
        await asyncio.get_running_loop().run_in_executor(
            self._executor, _stop_all, self.plane, self.kwok, self.plane.etcd, self.plane.directory
        )

    def rss(self) -> dict[str, int]:
        """Resident memory per process of this cluster, in bytes."""
        return {**self.plane.rss(), "kwok": self.kwok.rss()}


def _discard(etcd: Etcd, directory: Path) -> Callable[[ControlPlane], None]:
    """What undoes a control plane's start (see `blocking`)."""
    return lambda plane: _stop_all(plane, None, etcd, directory)


def _stop_all(plane: ControlPlane, kwok: Kwok | None, etcd: Etcd, directory: Path) -> None:
    """Stop the processes, delete the cluster's keys from the shared etcd and its files."""
    if kwok is not None:
        kwok.stop()
    plane.stop()
    forget_prefix(etcd, plane.name)
    shutil.rmtree(directory, ignore_errors=True)


def forget_prefix(etcd: Etcd, name: str) -> None:
    """Delete every key of control plane `name` from etcd (its v3 JSON gateway's deleterange)."""
    start, end = f"/colony/{name}/".encode(), f"/colony/{name}0".encode()
    with contextlib.suppress(httpx.HTTPError):
        httpx.post(
            f"{etcd.url}/v3/kv/deleterange",
            json={"key": _b64(start), "range_end": _b64(end)},
            timeout=10,
        )


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()
