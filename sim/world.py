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
    world.json              ports, URLs and pid

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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from sim.apiserver.auth import CertificateAuthority
from sim.apiserver.errors import ApiError
from sim.apiserver.registry import CRDS, NAMESPACES
from sim.apiserver.server import ClusterServer
from sim.apiserver.store import ClusterStore
from sim.charts import HUB_REPOSITORY, default_catalog
from sim.controllers.k0rdent import K0rdentControllers
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


def preload_objects() -> list[tuple[str, dict[str, Any]]]:
    """(plural, object) of everything a fresh k0rdent management cluster has, in creation order."""
    objects: list[tuple[str, dict[str, Any]]] = []
    for name, chart_name, description in (
        (REMOTE_TEMPLATE, "remote-cluster", "SSH-reachable machines (k0smotron RemoteMachine)"),
        (HOSTED_TEMPLATE, "docker-hosted-cp", "hosted control plane, workersNumber workers"),
    ):
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
                                "version": "1.0.0",
                                "interval": "10m",
                                "sourceRef": {"kind": "HelmRepository", "name": "kcm-templates"},
                            }
                        }
                    },
                },
            )
        )
        log.debug("preloading %s: %s", name, description)
    for name, kind in ((REMOTE_CREDENTIAL, "Secret"), (DOCKER_CREDENTIAL, "Secret")):
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
                            "apiVersion": "v1",
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


class SimWorld:
    """The simulated world (see the module docstring). Use `async with` or start()/stop()."""

    def __init__(self, config: WorldConfig | None = None) -> None:
        self.config = config or WorldConfig()
        faults = self.config.faults
        self.faults = (
            faults if isinstance(faults, FaultInjector) else FaultInjector.from_config(faults)
        )
        self.records = WorldRecords()
        self.ca = CertificateAuthority()
        self.store = ClusterStore(MANAGEMENT_NAME)
        self.management = ClusterServer(
            MANAGEMENT_NAME,
            self.store,
            self.ca,
            faults=self.faults,
            records=self.records,
            host=self.config.host,
            port=self.config.management_port,
        )
        self.inventory: Inventory = load_inventory(self.config.inventory_path, self.records)
        self.hostprovider_api_key = self.config.hostprovider_api_key or secrets.token_urlsafe(24)
        self.hostprovider = HostProviderServer(
            self.inventory, self.hostprovider_api_key, self.faults
        )
        self.k0rdent = K0rdentControllers(
            self.store,
            self.ca,
            self.config.timing,
            self.faults,
            self.inventory,
            records=self.records,
        )
        self._task: asyncio.Task[None] | None = None
        self.started_at: float | None = None

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

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> SimWorld:
        """Preload, start the servers and controllers, write the state files."""
        began = time.monotonic()
        self._preload_crds()
        await self.management.start()
        try:
            await self.hostprovider.start(self.config.hostprovider_port, self.config.host)
            self._task = asyncio.create_task(self.k0rdent.run(), name="sim-k0rdent")
            self._preload_objects()
            await self._wait_templates_valid()
            self.started_at = time.time()
            self._write_state_files()
        except BaseException:
            await self.stop()
            raise
        log.info("simulated world started in %.2fs", time.monotonic() - began)
        return self

    async def stop(self) -> None:
        """Stop controllers (and with them every child cluster), then the servers."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.hostprovider.stop()
        await self.management.stop()

    async def __aenter__(self) -> SimWorld:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # ------------------------------------------------------------------ helpers

    def child(self, namespace: str, name: str) -> ChildCluster | None:
        """The child cluster of ClusterDeployment namespace/name once its control plane is up."""
        return self.k0rdent.child(namespace, name)

    def describe(self) -> dict[str, Any]:
        """What world.json holds."""
        return {
            "simulator": True,
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
            "faultsPath": "/sim/v1/faults",
            "recordsPath": "/sim/v1/records",
            "timeScale": self.config.timing.time_scale,
            "startedAt": self.started_at,
        }

    def _preload_crds(self) -> None:
        if self.store.try_get(NAMESPACES, None, KCM_NAMESPACE) is None:
            self.store.create(NAMESPACES, {"metadata": {"name": KCM_NAMESPACE}})
        for crd in world_crds(self.config.crd_paths):
            # A CRD the store refuses is a broken world: fail the start rather than serve without it.
            if self.store.try_get(CRDS, None, crd["metadata"]["name"]) is None:
                self.store.create(CRDS, crd)

    def _preload_objects(self) -> None:
        for plural, obj in preload_objects():
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
        self.world_json_path.write_text(json.dumps(self.describe(), indent=2) + "\n")


def _write_private(path: Path, text: str) -> None:
    """Credentials are written owner-readable only, as kubectl does for kubeconfigs."""
    path.write_text(text)
    path.chmod(0o600)
