"""SIMULATOR. The whole simulated world in one process: `SimWorld`.

Starts, in the current event loop: the management cluster (a `ClusterStore` served over HTTPS by a
`ClusterServer`), the host provider (`HostProviderServer` over an `Inventory`), the k0rdent
controllers (which start a child cluster per ready ClusterDeployment), one `FaultInjector` shared
by all of them (settable at run time with GET/PUT /sim/v1/faults on every server) and one
`WorldRecords` (`world.records`: clients' creates, evictions, hosts changing hands; GET
/sim/v1/records on every server). The management
cluster is preloaded as a fresh k0rdent install would be: namespace `kcm-system`, the k0rdent CRDs
(the sim's own, `sim/crds`, or k0rdent's real ones given as `WorldConfig.crd_paths`, the sim's kept
for kinds those lack, such as StateManagementProvider), ClusterTemplates `remote-cluster-1-0-0` (SSH machines) and `docker-hosted-cp-1-0-0` (hosted control
plane, `workersNumber`), Credentials `remote-cluster-credential` and `docker-stub-credential`, the
StateManagementProvider `ksm-projectsveltos`, and the workspace hub's ServiceTemplates.

It writes what a client needs into `state_dir` (default `.colony/sim`):
    management.kubeconfig   admin kubeconfig of the management cluster
    hostprovider.json       {"url": ..., "apiKey": ...}
    ca.crt                  the sim's CA: it signs every server certificate, the tenant gateways'
                            `*.<domain>` ones included (`curl --cacert`)
    world.json              ports, URLs, pid and state id

With `WorldConfig.persist` (`python -m sim --persist`, as `make run` starts it) the world itself is
kept there too (`sim.persistence`): loaded at start when saved before, saved while it runs and on
stop. Every cluster keeps its objects (uids, resourceVersions, which only ever grow), its port if
still free, its tokens and the CA; the host provider its claims; the k0rdent controllers their
progress (a Ready cluster stays Ready, a joining machine goes on joining, an installed service stays
installed). Kubelets adopt the pods running before (a finite program in one never ends after the
restart). A watch from before the restart gets 410 Gone and lists again. Faults are not kept.

Every server answers `GET /sim/v1/identity` (no credentials): `{"kind": "ColonySimulator",
"stateId", "pid", "server"}`, so a program can tell this world from anything else on its port.
The management cluster's server also answers `GET /sim/v1/requests` (no credentials): the
Kubernetes API requests every cluster has answered so far, by verb and resource
(`sim.apiserver.requests`), for benchmarks that count what an operation costs the API servers.

Tenant gateways listen on 127.0.0.1, on the ports their Gateway's listeners name (see
`sim/controllers/tenant_gateway.py`).

Tests and Colony's dev tooling start it like this:

    async with SimWorld(WorldConfig(state_dir=tmp_path, timing=SimTiming.instant())) as world:
        kubeconfig = world.management_kubeconfig_path   # or world.management.kubeconfig()
        ...

`python -m sim` runs one until Ctrl-C (see `sim/__main__.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml
from aiohttp import web

from sim import persistence
from sim.apiserver.auth import CertificateAuthority
from sim.apiserver.errors import ApiError
from sim.apiserver.registry import CRDS, NAMESPACES
from sim.apiserver.server import ClusterServer
from sim.apiserver.store import ClusterStore
from sim.charts import HUB_REPOSITORY, default_catalog
from sim.cloud import (
    CLOUD_IDENTITY_KINDS,
    IDENTITY_API_VERSIONS,
    CloudTemplate,
    credential_name,
    default_values_dir,
    load_cloud_templates,
)
from sim.clusterapi import ClusterApi, StoreApi
from sim.controllers.gateway_dataplane import LISTEN_ADDRESS
from sim.controllers.k0rdent import K0rdentControllers, SimChildCluster
from sim.controllers.k0rdent_cluster import ChildCluster
from sim.crds import load_colony_crds
from sim.crds.samples import state_management_provider
from sim.faults import FaultInjector
from sim.hostprovider.app import HostProviderServer
from sim.hostprovider.inventory import Inventory, load_inventory
from sim.records import WorldRecords
from sim.timing import SimTiming

log = logging.getLogger(__name__)

KCM_NAMESPACE = "kcm-system"
GROUP_VERSION = "k0rdent.mirantis.com/v1beta1"
DEFAULT_STATE_DIR = Path(".colony/sim")
MANAGEMENT_NAME = "management"

REMOTE_TEMPLATE = "remote-cluster-1-0-0"
HOSTED_TEMPLATE = "docker-hosted-cp-1-0-0"
REMOTE_CREDENTIAL = "remote-cluster-credential"
DOCKER_CREDENTIAL = "docker-stub-credential"

# Upper bound of the wait for the preloaded templates' status (the whole start must stay < 2 s).
PRELOAD_SETTLE_SECONDS = 1.0

IDENTITY_PATH = "/sim/v1/identity"
IDENTITY_KIND = "ColonySimulator"
REQUESTS_PATH = "/sim/v1/requests"
"""Kubernetes API requests answered so far, per cluster (`sim.apiserver.requests`)."""


WORLD_ENV = "COLONY_WORLD"
"""Which world `python -m sim`, `make run` and the end-to-end tests start when not told."""
EMULATED, REAL = "emulated", "real"
WORLDS = (EMULATED, REAL)


@dataclass
class WorldConfig:
    """How to start the world.

    Attributes:
        state_dir: where the kubeconfig and JSON files are written.
        timing: delays of every simulated step (`SimTiming.instant()` in tests).
        inventory_path: host inventory YAML (default: the host provider's bundled one).
        faults: the shared injector, or a fault config dict (YAML-shaped) to build one from.
        host: listen address of every server (loopback).
        management_port: fixed port of the management cluster (0: any free port).
        hostprovider_port: fixed port of the host provider (0: any free port).
        hostprovider_api_key: the host provider's API key (default: random).
        crd_paths: CRD YAML files, or folders of them (every `*.yaml`, sorted), installed instead
            of the sim's own CRD of the same name (e.g. k0rdent's real CRDs); kinds they lack keep
            the sim's CRD. None: the sim's CRDs only.
        persist: keep the world in `state_dir` and resume it at the next start (`sim.persistence`);
            the ports default to the saved world's, when still free.
        state_id: the development state this world belongs to: a saved world of another is
            refused (`persistence.StateMismatch`). None: the saved world's, or a new one.
        world: "emulated" (`SimWorld`, the default) or "real" (`sim.real.world.RealWorld`:
            real control planes); `make_world` starts the one named.
        k0rdent_templates: k0rdent's cluster template charts' values (`sim.cloud`): the cloud
            templates (`aws-standalone-cp-1-0-43`, ...) are preloaded with their values schemas.
            None: no cloud templates. Default: the folder `sim.cloud.default_values_dir` finds.
    """

    state_dir: Path = DEFAULT_STATE_DIR
    timing: SimTiming = field(default_factory=SimTiming)
    inventory_path: Path | None = None
    faults: FaultInjector | dict[str, Any] | None = None
    host: str = "127.0.0.1"
    management_port: int = 0
    hostprovider_port: int = 0
    hostprovider_api_key: str | None = None
    crd_paths: Sequence[Path] | None = None
    persist: bool = False
    state_id: str | None = None
    world: str = EMULATED
    k0rdent_templates: Path | None = field(default_factory=default_values_dir)


def world_kind(text: str | None) -> str:
    """A world's kind from a setting (`COLONY_WORLD`; unset or empty: the emulated world).

    Raises:
        ValueError: neither "emulated" nor "real".
    """
    kind = (text or EMULATED).strip().lower()
    if kind not in WORLDS:
        raise ValueError(f"{WORLD_ENV}: {text!r} is not one of {', '.join(WORLDS)}")
    return kind


def make_world(config: WorldConfig) -> World:
    """The world `config.world` names: the emulated one (`SimWorld`), or real control planes
    (`sim.real.world.RealWorld`, imported only then: the emulated world starts instantly)."""
    if world_kind(config.world) == REAL:
        from sim.real.world import RealWorld

        return RealWorld(config)
    return SimWorld(config)


def load_crd_files(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition in `paths` (YAML files or folders of `*.yaml`), in order."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the real CRDs are large: ~10x faster
    crds: list[dict[str, Any]] = []
    for path in paths:
        files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
        for file in files:
            for doc in yaml.load_all(file.read_text(encoding="utf-8"), Loader=loader):
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    crds.append(doc)
    return crds


def world_crds(crd_paths: Sequence[Path] | None = None) -> list[dict[str, Any]]:
    """The CRDs a world installs: the sim's, each replaced by the one of the same name in
    `crd_paths`, in the sim's order (templates and credentials first), then any others given."""
    given = {crd["metadata"]["name"]: crd for crd in load_crd_files(crd_paths or ())}
    crds = [given.pop(crd["metadata"]["name"], crd) for crd in load_colony_crds()]
    return crds + list(given.values())


def _meta(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": KCM_NAMESPACE}
    if labels:
        meta["labels"] = labels
    return meta


def preload_objects(
    cloud_templates: Sequence[CloudTemplate] = (),
) -> list[tuple[str, dict[str, Any]]]:
    """(plural, object) of everything a fresh k0rdent management cluster has, in creation order;
    with `cloud_templates` (`sim.cloud`), their ClusterTemplates and a Credential per cloud."""
    objects: list[tuple[str, dict[str, Any]]] = []
    charts = [
        (REMOTE_TEMPLATE, "remote-cluster", "1.0.0", "SSH-reachable machines (k0smotron RemoteMachine)"),
        (HOSTED_TEMPLATE, "docker-hosted-cp", "1.0.0", "hosted control plane, workersNumber workers"),
    ] + [
        (t.name, t.chart, t.version, "Cluster API MachineDeployment of workersNumber workers")
        for t in cloud_templates
    ]  # fmt: skip
    for name, chart_name, version, description in charts:
        objects.append(
            (
                "clustertemplates",
                {
                    "apiVersion": GROUP_VERSION,
                    "kind": "ClusterTemplate",
                    "metadata": _meta(name, {"k0rdent.mirantis.com/component": "kcm"}),
                    "spec": {
                        "helm": {
                            "chartSpec": {
                                "chart": chart_name,
                                "version": version,
                                "interval": "10m",
                                "sourceRef": {"kind": "HelmRepository", "name": "kcm-templates"},
                            }
                        }
                    },
                },
            )
        )
        log.debug("preloading %s: %s", name, description)
    credentials = [(REMOTE_CREDENTIAL, "Secret"), (DOCKER_CREDENTIAL, "Secret")]
    credentials += [
        (credential_name(t.chart), CLOUD_IDENTITY_KINDS[t.chart]) for t in cloud_templates
    ]
    for name, kind in credentials:
        objects.append(
            (
                "credentials",
                {
                    "apiVersion": GROUP_VERSION,
                    "kind": "Credential",
                    "metadata": _meta(name),
                    "spec": {
                        "description": "SIMULATOR credential",
                        "identityRef": {
                            "apiVersion": "v1" if kind == "Secret" else IDENTITY_API_VERSIONS[kind],
                            "kind": kind,
                            "name": f"{name}-identity",
                            "namespace": KCM_NAMESPACE,
                        },
                    },
                },
            )
        )
    for chart in default_catalog().all():
        if chart.repository != HUB_REPOSITORY:
            continue
        name = f"{chart.name}-{chart.version.replace('.', '-')}"
        objects.append(
            (
                "servicetemplates",
                {
                    "apiVersion": GROUP_VERSION,
                    "kind": "ServiceTemplate",
                    "metadata": _meta(
                        name,
                        {
                            "app": chart.name,
                            "template": "workspace",
                            "workspaces.exalsius.ai/template": chart.name,
                            "workspaces.exalsius.ai/version": chart.version,
                        },
                    ),
                    "spec": {
                        "helm": {
                            "chartSpec": {
                                "chart": chart.name,
                                "version": chart.version,
                                "interval": "10m",
                                "sourceRef": {"kind": "HelmRepository", "name": chart.repository},
                            }
                        }
                    },
                },
            )
        )
    return objects


class World:
    """A simulated world, emulated (`SimWorld`) or real (`sim.real.world.RealWorld`): what both
    offer their users (the faults, the records, the host inventory, the client files, `describe()`)
    and the code they share (the files they write, their identity on every server). A world sets
    `config`, `faults`, `records`, `inventory`, `state_id`, `ca`, `management` (url, port,
    kubeconfig()), `hostprovider`, `hostprovider_api_key`, `started_at`, and answers
    `request_counts()` and `rejected_writes()`."""

    kind = "emulated"
    """What answers for the clusters: "emulated" (`sim.apiserver`) or "real"."""
    config: WorldConfig
    faults: FaultInjector
    records: WorldRecords
    inventory: Inventory
    state_id: str | None
    ca: CertificateAuthority
    hostprovider: HostProviderServer
    hostprovider_api_key: str
    started_at: float | None
    management: Any
    """The management cluster's server: `url`, `port` and `kubeconfig(namespace=...)`."""

    def request_counts(self) -> dict[str, dict[str, int]]:
        raise NotImplementedError

    def rejected_writes(self) -> list[Any]:
        """Writes the clusters refused as invalid (the emulator: its management cluster's, a
        client's or a controller's; a real world: its controllers')."""
        raise NotImplementedError

    @property
    def management_api(self) -> ClusterApi:
        """The management cluster's API as the simulator's controllers use it."""
        raise NotImplementedError

    def child_cluster(self, namespace: str, name: str) -> ChildCluster | None:
        """The child cluster of ClusterDeployment namespace/name once its control plane serves."""
        raise NotImplementedError

    async def start(self) -> Self:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    def _identity_routes(self, server: str) -> list[web.RouteDef]:
        async def identity(request: web.Request) -> web.Response:
            return web.json_response(
                {
                    "kind": IDENTITY_KIND,
                    "stateId": self.state_id,
                    "pid": os.getpid(),
                    "server": server,
                }
            )

        return [web.get(IDENTITY_PATH, identity)]

    async def _requests(self, request: web.Request) -> web.Response:
        return web.json_response(self.request_counts())

    # ------------------------------------------------------------------ paths

    @property
    def state_dir(self) -> Path:
        return self.config.state_dir

    @property
    def management_kubeconfig_path(self) -> Path:
        return self.state_dir / "management.kubeconfig"

    @property
    def hostprovider_json_path(self) -> Path:
        return self.state_dir / "hostprovider.json"

    @property
    def world_json_path(self) -> Path:
        return self.state_dir / "world.json"

    @property
    def state_path(self) -> Path:
        """Where a persisted world is kept (`sim.persistence`)."""
        return self.state_dir / persistence.STATE_FILE

    @property
    def ca_path(self) -> Path:
        return self.state_dir / "ca.crt"

    def describe(self) -> dict[str, Any]:
        """What world.json holds."""
        return {
            "simulator": True,
            "world": self.kind,
            "stateId": self.state_id,
            "persisted": self.config.persist,
            "pid": os.getpid(),
            "stateDir": str(self.state_dir),
            "management": {
                "url": self.management.url,
                "port": self.management.port,
                "kubeconfig": str(self.management_kubeconfig_path),
            },
            "hostProvider": {
                "url": self.hostprovider.url,
                "port": int(self.hostprovider.url.rsplit(":", 1)[1]),
                "credentials": str(self.hostprovider_json_path),
            },
            "ca": str(self.ca_path),
            "tenantGateways": {
                "address": LISTEN_ADDRESS,
                "ports": "the listeners of Gateway colony-gateway/tenant in each child cluster",
            },
            "faultsPath": "/sim/v1/faults",
            "recordsPath": "/sim/v1/records",
            "requestsPath": REQUESTS_PATH,
            "timeScale": self.config.timing.time_scale,
            "startedAt": self.started_at,
        }

    def _write_state_files(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        kubeconfig = self.management.kubeconfig(namespace=KCM_NAMESPACE)
        _write_private(self.management_kubeconfig_path, yaml.safe_dump(kubeconfig, sort_keys=False))
        _write_private(
            self.hostprovider_json_path,
            json.dumps(
                {"url": self.hostprovider.url, "apiKey": self.hostprovider_api_key}, indent=2
            )
            + "\n",
        )
        self.ca_path.write_bytes(self.ca.cert_pem)
        self.world_json_path.write_text(json.dumps(self.describe(), indent=2) + "\n")

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


class SimWorld(World):
    """The simulated world (see the module docstring). Use `async with` or start()/stop()."""

    def __init__(self, config: WorldConfig | None = None) -> None:
        self.config = config or WorldConfig()
        faults = self.config.faults
        self.faults = (
            faults if isinstance(faults, FaultInjector) else FaultInjector.from_config(faults)
        )
        self.records = WorldRecords()
        self._saved: dict[str, Any] | None = None
        self._reservations: persistence.Reservations | None = None
        if self.config.persist:
            self._saved = persistence.read_state(self.config.state_dir)
            self._reservations = persistence.Reservations(self.config.state_dir)
        saved = self._saved or {}
        if saved and self.config.state_id and saved.get("stateId") != self.config.state_id:
            raise persistence.StateMismatch(
                f"{self.config.state_dir / persistence.STATE_FILE} belongs to development state "
                f"{saved.get('stateId')}, not {self.config.state_id}"
            )
        self.state_id = self.config.state_id
        if self.config.persist:
            self.state_id = saved.get("stateId") or self.state_id or uuid.uuid4().hex
        self.ca = CertificateAuthority(pem=persistence.ca_pem(saved) if saved else None)
        self.store = ClusterStore(MANAGEMENT_NAME)
        management = saved.get("management") or {}
        if management:
            self.store.restore(
                management["store"],
                resource_version_floor=self._floor(MANAGEMENT_NAME),
            )
        if self._reservations is not None:
            self._reservations.attach(MANAGEMENT_NAME, self.store)
        self.management = ClusterServer(
            MANAGEMENT_NAME,
            self.store,
            self.ca,
            faults=self.faults,
            records=self.records,
            host=self.config.host,
            port=self.config.management_port or int(management.get("port") or 0),
            admin_token=management.get("adminToken"),
            routes=[*self._identity_routes("management"), web.get(REQUESTS_PATH, self._requests)],
        )
        provider = saved.get("hostProvider") or {}
        self.inventory: Inventory = load_inventory(self.config.inventory_path, self.records)
        if provider:
            self.inventory.restore(provider["inventory"])
        self.hostprovider_api_key = (
            self.config.hostprovider_api_key or provider.get("apiKey") or secrets.token_urlsafe(24)
        )
        self._hostprovider_port = self.config.hostprovider_port or int(provider.get("port") or 0)
        self.hostprovider = HostProviderServer(
            self.inventory,
            self.hostprovider_api_key,
            self.faults,
            routes=self._identity_routes("hostProvider"),
        )
        self.cloud_templates = load_cloud_templates(self.config.k0rdent_templates)
        self.k0rdent = K0rdentControllers(
            self.store,
            self.ca,
            self.config.timing,
            self.faults,
            self.inventory,
            records=self.records,
            cloud_templates=self.cloud_templates,
            on_child_store=self._reservations.attach if self._reservations else None,
        )
        self._task: asyncio.Task[None] | None = None
        self.saver: persistence.WorldSaver | None = None
        self._saver_task: asyncio.Task[None] | None = None
        self.started_at: float | None = None

    def _floor(self, cluster: str) -> int:
        return self._reservations.floor(cluster) if self._reservations else 0

    def request_counts(self) -> dict[str, dict[str, int]]:
        """Every cluster's Kubernetes API requests so far, `{"management": {"<verb> <resource>":
        n}, "<namespace>/<child>": {...}}`; a deleted child's counts go with it."""
        return {
            MANAGEMENT_NAME: self.management.requests.snapshot(),
            **self.k0rdent.request_counts(),
        }

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> Self:
        """Preload (or restore), start the servers and controllers, write the state files."""
        began = time.monotonic()
        self._preload_crds()

        async def listen_management(port: int) -> None:
            self.management.port = port
            await self.management.start()

        async def listen_hostprovider(port: int) -> None:
            await self.hostprovider.start(port, self.config.host)

        await _listen(
            MANAGEMENT_NAME, listen_management, self.management.port,
            fixed=bool(self.config.management_port),
        )  # fmt: skip
        try:
            await _listen(
                "host provider", listen_hostprovider, self._hostprovider_port,
                fixed=bool(self.config.hostprovider_port),
            )  # fmt: skip
            if self._saved is not None:
                await self.k0rdent.restore(self._saved.get("k0rdent") or {}, self._floor)
            self._task = asyncio.create_task(self.k0rdent.run(), name="sim-k0rdent")
            self._preload_objects()
            await self._wait_templates_valid()
            self.started_at = time.time()
            if self.config.persist:
                self.saver = persistence.WorldSaver(self.state_dir, self.snapshot, self._version)
                await self.saver.save()  # state.json names this world's state at once
                self._saver_task = asyncio.create_task(self.saver.run(), name="sim-saver")
            self._write_state_files()
        except BaseException:
            await self.stop()
            raise
        log.info(
            "simulated world %s in %.2fs",
            "restored" if self._saved else "started",
            time.monotonic() - began,
        )
        return self

    async def stop(self) -> None:
        """Save a persisted world, stop controllers (and with them every child cluster), then the
        servers."""
        saver, self.saver = self.saver, None
        try:
            if saver is not None:
                saver_task, self._saver_task = self._saver_task, None
                await saver.stop(saver_task)
        finally:  # a failed last save (a full disk) still stops the world
            task, self._task = self._task, None
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self.hostprovider.stop()
            await self.management.stop()

    # ------------------------------------------------------------------ helpers

    def rejected_writes(self) -> list[Any]:
        return list(self.store.rejected_writes)

    @property
    def management_api(self) -> ClusterApi:
        return StoreApi(self.store)

    def child_cluster(self, namespace: str, name: str) -> ChildCluster | None:
        return self.k0rdent.child(namespace, name)

    def child(self, namespace: str, name: str) -> SimChildCluster | None:
        """The child cluster of ClusterDeployment namespace/name once its control plane is up."""
        child = self.k0rdent.child(namespace, name)
        assert child is None or isinstance(child, SimChildCluster)  # this world's own kind
        return child

    def snapshot(self) -> dict[str, Any]:
        """The whole world as state.json holds it (`sim.persistence`), taken at one instant."""
        cert, key = self.ca.pem()
        return {
            "stateId": self.state_id,
            "format": persistence.FORMAT,
            "ca": {"cert": cert.decode(), "key": key.decode()},
            "management": {
                "port": self.management.port,
                "adminToken": self.management.admin_token,
                "store": self.store.snapshot(),
            },
            "hostProvider": {
                "port": int(self.hostprovider.url.rsplit(":", 1)[1]),
                "apiKey": self.hostprovider_api_key,
                "inventory": self.inventory.snapshot(),
            },
            "k0rdent": self.k0rdent.snapshot(),
        }

    def _version(self) -> tuple[Any, ...]:
        """Differs once anything a snapshot holds changed (see `persistence.WorldSaver`)."""
        stores = sorted((key, s.resource_version) for key, s in self.k0rdent.stores().items())
        return (self.store.resource_version, self.inventory.changes, tuple(stores))

    def _preload_crds(self) -> None:
        if self.store.try_get(NAMESPACES, None, KCM_NAMESPACE) is None:
            self.store.create(NAMESPACES, {"metadata": {"name": KCM_NAMESPACE}})
        for crd in world_crds(self.config.crd_paths):
            # A CRD the store refuses is a broken world: fail the start rather than serve without it.
            if self.store.try_get(CRDS, None, crd["metadata"]["name"]) is None:
                self.store.create(CRDS, crd)

    def _preload_objects(self) -> None:
        for plural, obj in preload_objects(self.cloud_templates):
            rt = self.store.registry.get("k0rdent.mirantis.com", plural)
            with contextlib.suppress(ApiError):
                self.store.create(rt, obj)
        smp = state_management_provider()
        smp.pop("status", None)
        rt = self.store.registry.get("k0rdent.mirantis.com", "statemanagementproviders")
        with contextlib.suppress(ApiError):
            created = self.store.create(rt, smp)
            self.store.update_status(
                rt,
                None,
                created["metadata"]["name"],
                {**(created.get("status") or {}), "ready": True},
            )

    async def _wait_templates_valid(self) -> None:
        """Return once the preloaded templates carry status.valid (a client sees a settled world)."""
        deadline = time.monotonic() + PRELOAD_SETTLE_SECONDS
        plurals = ("clustertemplates", "servicetemplates")
        while time.monotonic() < deadline:
            pending = 0
            for plural in plurals:
                rt = self.store.registry.get("k0rdent.mirantis.com", plural)
                items, _ = self.store.list(rt, KCM_NAMESPACE)
                pending += sum(1 for o in items if "valid" not in (o.get("status") or {}))
            if not pending:
                return
            await asyncio.sleep(0.01)
        log.warning("preloaded templates not validated within %.1fs", PRELOAD_SETTLE_SECONDS)


async def _listen(
    name: str, listen: Callable[[int], Awaitable[None]], port: int, *, fixed: bool
) -> None:
    """`listen(port)`; a saved port (not `fixed` by the configuration) that another program took
    meanwhile gives way to any free one (the state files tell clients the new one)."""
    try:
        await listen(port)
    except OSError:
        if fixed or not port:
            raise
        log.info("%s: port %d is taken now, serving on another", name, port)
        await listen(0)


def _write_private(path: Path, text: str) -> None:
    """Credentials are written owner-readable only, as kubectl does for kubeconfigs."""
    path.write_text(text)
    path.chmod(0o600)
