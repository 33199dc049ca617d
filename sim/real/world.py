"""SIMULATOR. The real world: the simulated world of `sim.world`, its clusters real.

`RealWorld` starts, in the current event loop and on this machine:

- one etcd (`components.controlplane.Etcd`, in `<state_dir>/real/`), shared by every control plane
  of the world under a prefix of its own;
- the management cluster: a real control plane (kube-apiserver with RBAC,
  kube-controller-manager, kube-scheduler; no KWOK, it runs no workloads) with the CRDs the
  emulated world installs (the sim's k0rdent CRDs, or k0rdent's real ones from
  `WorldConfig.crd_paths`, with their CEL rules evaluated for real) and the objects of a fresh
  k0rdent install (`sim.world.preload_objects`), reached by clients through its front
  (`sim.real.front`: faults, records, request counts; every answer the real server's);
- the host provider, exactly as the emulated world's (`sim.hostprovider`);
- the simulator's k0rdent (`sim.controllers.k0rdent.K0rdentControllers`) acting on the management
  cluster through the official client (`sim.real.kubeapi.KubeApi`), whose child clusters are
  real control planes with KWOK (`sim.real.child.RealChildCluster`).

It writes the same client files as the emulated world (`management.kubeconfig`,
`hostprovider.json`, `ca.crt`, `world.json`, which says `"world": "real"`). It is not kept across
starts (`WorldConfig.persist` is refused): each start is a fresh world.

    async with RealWorld(WorldConfig(state_dir=tmp, timing=SimTiming.instant())) as world:
        ...   # as with SimWorld

`python -m sim --world real` (or `COLONY_WORLD=real`) runs one; the components are built first
where they are not yet (`components.build`, minutes once, a lookup after).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
import shutil
import time
import uuid
from collections import deque
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from typing import Self

from aiohttp import web

from components.controlplane import ControlPlane, Etcd
from sim.apiserver.auth import CertificateAuthority
from sim.apiserver.errors import ApiError
from sim.apiserver.registry import NAMESPACES
from sim.cloud import load_cloud_templates
from sim.clusterapi import ClusterApi
from sim.controllers.k0rdent import K0rdentControllers
from sim.crds.samples import state_management_provider
from sim.faults import FaultInjector
from sim.hostprovider.app import HostProviderServer
from sim.hostprovider.inventory import Inventory, load_inventory
from sim.real.bootstrap import blocking, ensure_crds
from sim.real.child import RealChildCluster
from sim.real.front import ManagementFront
from sim.real.kubeapi import KubeApi
from sim.records import WorldRecords
from sim.world import (
    KCM_NAMESPACE,
    MANAGEMENT_NAME,
    PRELOAD_SETTLE_SECONDS,
    REQUESTS_PATH,
    World,
    WorldConfig,
    preload_objects,
    world_crds,
)

log = logging.getLogger(__name__)

K0RDENT = "k0rdent.mirantis.com"
TEMPLATES_VALID_TIMEOUT = 60.0
"""Seconds for the preloaded templates to be validated (the emulated world allows
`PRELOAD_SETTLE_SECONDS`; a real server's round trips take longer)."""


class RealWorld(World):
    """The simulated world on real control planes (see the module docstring)."""

    kind = "real"

    def __init__(self, config: WorldConfig | None = None) -> None:
        self.config = config or WorldConfig()
        if self.config.persist:
            raise ValueError("the real world is not kept across starts: start it without persist")
        faults = self.config.faults
        self.faults = (
            faults if isinstance(faults, FaultInjector) else FaultInjector.from_config(faults)
        )
        self.records = WorldRecords()
        self.state_id = self.config.state_id or uuid.uuid4().hex
        self.ca = CertificateAuthority()
        self.inventory: Inventory = load_inventory(self.config.inventory_path, self.records)
        self.cloud_templates = load_cloud_templates(self.config.k0rdent_templates)
        self.hostprovider_api_key = self.config.hostprovider_api_key or secrets.token_urlsafe(24)
        self.hostprovider = HostProviderServer(
            self.inventory,
            self.hostprovider_api_key,
            self.faults,
            routes=self._identity_routes("hostProvider"),
        )
        self.started_at: float | None = None
        self.start_seconds: dict[str, float] = {}
        """How long each step of the last start took ("etcd", "management", "crds", ...)."""
        self._executor = ThreadPoolExecutor(4, thread_name_prefix="real-world")
        """Control planes' starts and stops (blocking: seconds each), off the event loop."""
        self._directory = self.state_dir / "real"
        self._children = itertools.count(1)
        self.etcd: Etcd | None = None
        self.plane: ControlPlane | None = None
        self.api: KubeApi | None = None
        self.management: ManagementFront | None = None
        self.k0rdent: K0rdentControllers | None = None
        self._task: asyncio.Task[None] | None = None
        self._rejected: deque[ApiError] = deque(maxlen=1000)

    def request_counts(self) -> dict[str, dict[str, int]]:
        """The management cluster's Kubernetes API requests through its front (the child
        clusters' real servers count their own: `apiserver_request_total`)."""
        return {MANAGEMENT_NAME: self.management.requests.snapshot() if self.management else {}}

    @property
    def management_api(self) -> ClusterApi:
        if self.api is None:
            raise RuntimeError("the real world is not started")
        return self.api

    def child_cluster(self, namespace: str, name: str) -> RealChildCluster | None:
        child = None if self.k0rdent is None else self.k0rdent.child(namespace, name)
        assert child is None or isinstance(child, RealChildCluster)  # this world's own kind
        return child

    def rejected_writes(self) -> list[ApiError]:
        """Writes of the simulator's controllers the real servers refused (400, 403, 422), the
        management cluster's and every child's."""
        return list(self._rejected)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> Self:
        """Start etcd, the management cluster (CRDs, a fresh k0rdent's objects), its front, the
        host provider and k0rdent; write the client files."""
        began = time.monotonic()
        try:
            await self._step("etcd", self._start_etcd())
            await self._step("management", self._start_management())
            await self._step("crds", self._install_crds())
            await self._step("servers", self._serve())
            await self._step("k0rdent", self._start_k0rdent())
            self.started_at = time.time()
            self._write_state_files()
        except BaseException:
            await self.stop()
            raise
        self.start_seconds["total"] = time.monotonic() - began
        log.info("real world started in %.1fs: %s", time.monotonic() - began, self.start_seconds)
        return self

    async def _step(self, name: str, step: Awaitable[None]) -> None:
        mark = time.monotonic()
        await step
        self.start_seconds[name] = time.monotonic() - mark

    async def _start_etcd(self) -> None:
        shutil.rmtree(self._directory, ignore_errors=True)
        self.etcd = await blocking(
            self._executor, lambda: Etcd.start(self._directory / "etcd"), Etcd.stop
        )

    async def _start_management(self) -> None:
        etcd = self.etcd
        self.plane = await blocking(
            self._executor,
            lambda: ControlPlane.start(
                self._directory / MANAGEMENT_NAME, etcd=etcd, name=MANAGEMENT_NAME, kwok=False
            ),
            ControlPlane.stop,
        )
        self.api = await KubeApi(
            MANAGEMENT_NAME, self.plane.admin_kubeconfig, rejected=self._rejected
        ).start()

    async def _install_crds(self) -> None:
        assert self.api is not None
        await ensure_crds(self.api, world_crds(self.config.crd_paths))
        with contextlib.suppress(ApiError):
            await self.api.create(NAMESPACES, {"metadata": {"name": KCM_NAMESPACE}})

    async def _serve(self) -> None:
        assert self.plane is not None
        self.management = ManagementFront(
            self.plane.admin_kubeconfig,
            self.ca,
            self.faults,
            self.records,
            host=self.config.host,
            port=self.config.management_port,
            routes=[*self._identity_routes("management"), web.get(REQUESTS_PATH, self._requests)],
        )
        await self.management.start()
        await self.hostprovider.start(self.config.hostprovider_port, self.config.host)

    async def _start_k0rdent(self) -> None:
        assert self.api is not None
        self.k0rdent = K0rdentControllers(
            self.api,
            self.ca,
            self.config.timing,
            self.faults,
            self.inventory,
            records=self.records,
            child_factory=self._start_child,
            cloud_templates=self.cloud_templates,
        )
        self._task = asyncio.create_task(self.k0rdent.run(), name="sim-real-k0rdent")
        await self._preload()

    async def _start_child(self, namespace: str, name: str) -> RealChildCluster:
        """A real control plane for ClusterDeployment namespace/name."""
        assert self.etcd is not None
        prefix = f"child-{next(self._children)}-{name}"
        began = time.monotonic()
        child = await RealChildCluster.start(
            name, prefix, self.etcd, self._directory / prefix, self._executor, self._rejected
        )
        log.info(
            "child cluster %s/%s: a real control plane at %s in %.1fs",
            namespace, name, child.plane.server, time.monotonic() - began,
        )  # fmt: skip
        return child

    async def _preload(self) -> None:
        """What a fresh k0rdent install has (templates, credentials, the StateManagementProvider),
        once its templates are validated."""
        api = self.api
        assert api is not None
        for plural, obj in preload_objects(self.cloud_templates):
            with contextlib.suppress(ApiError):
                await api.create(api.registry.get(K0RDENT, plural), obj)
        provider = state_management_provider()
        provider.pop("status", None)
        rt = api.registry.get(K0RDENT, "statemanagementproviders")
        with contextlib.suppress(ApiError):
            created = await api.create(rt, provider)
            status = {**(created.get("status") or {}), "ready": True}
            await api.update_status(rt, None, created["metadata"]["name"], status)
        deadline = time.monotonic() + max(TEMPLATES_VALID_TIMEOUT, PRELOAD_SETTLE_SECONDS)
        for plural in ("clustertemplates", "servicetemplates"):
            rt = api.registry.get(K0RDENT, plural)
            while any(
                "valid" not in (o.get("status") or {}) for o in await api.list(rt, KCM_NAMESPACE)
            ):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"preloaded {plural} not validated in time")
                await asyncio.sleep(0.05)

    async def stop(self) -> None:
        """Stop k0rdent (and with it every child cluster), the servers, the management cluster
        and etcd, and remove their files (idempotent)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.hostprovider.stop()
        if self.management is not None:
            await self.management.stop()
        if self.api is not None:
            await self.api.close()
        loop = asyncio.get_running_loop()
        plane, self.plane = self.plane, None
        if plane is not None:
            await loop.run_in_executor(self._executor, plane.stop)
        etcd, self.etcd = self.etcd, None
        if etcd is not None:
            await loop.run_in_executor(self._executor, etcd.stop)
        shutil.rmtree(self._directory, ignore_errors=True)
        self._executor.shutdown(wait=False)
