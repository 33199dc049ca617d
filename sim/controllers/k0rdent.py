"""SIMULATOR. k0rdent (KCM + Cluster API + Sveltos) for one management cluster, in one object.

`K0rdentControllers.run()` runs every k0rdent controller of the sim on the management cluster's
API (`sim.clusterapi`: the emulator's store, or a real API server; see `k0rdent_cluster` and
`k0rdent_services` for what each does). Child clusters are what its child factory starts; by
default `SimChildCluster`s: a fresh `ClusterStore` served by its own `ClusterServer` (own port, own
admin token, shared CA) with the controllers a real cluster runs: kubelet, node lifecycle (with its
taint manager), scheduler, DaemonSets, Deployments and a Gateway API implementation
(`sim.colony.dev/gateway-controller`); k0s-like system workloads are preloaded in `kube-system`.
The real world's children are real control planes (`sim.real.child`).

Called by `sim.world.SimWorld`; tests may run it on a bare store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import yaml

from sim.apiserver.auth import CertificateAuthority
from sim.apiserver.errors import ApiError
from sim.apiserver.registry import CLUSTERROLES, DAEMONSETS, DEPLOYMENTS, NODES
from sim.apiserver.server import ClusterServer
from sim.apiserver.store import ClusterStore
from sim.charts import ChartCatalog
from sim.cloud import CloudTemplate
from sim.clusterapi import ClusterApi, StoreApi, cluster_api
from sim.controllers.capi import ClusterApiControllers
from sim.controllers.daemonset import DaemonSetController, DeploymentController
from sim.controllers.gateway import GatewayController
from sim.controllers.gateway_dataplane import TenantGatewayDataPlane
from sim.controllers.k0rdent_cluster import (
    ChildCluster,
    ChildClusters,
    ChildFactory,
    ClusterDeploymentController,
    HostLookup,
    TemplateCredentialController,
    remove_node_and_pods,
    set_node_ready,
)
from sim.controllers.k0rdent_services import ServiceSetController, ServiceTemplateController
from sim.controllers.kubelet import Kubelet
from sim.controllers.nodelifecycle import NodeLifecycleController
from sim.controllers.scheduler import Scheduler
from sim.controllers.tenant_gateway import GATEWAY as TENANT_GATEWAY
from sim.controllers.tenant_gateway import NAMESPACE as TENANT_GATEWAY_NAMESPACE
from sim.faults import FaultInjector
from sim.records import WorldRecords
from sim.tasks import cancel_and_wait
from sim.timing import SimTiming

log = logging.getLogger(__name__)

__all__ = ["ChildClusters", "K0rdentControllers", "SimChildCluster", "system_workloads"]


CLUSTER_ADMIN_ROLE: dict[str, Any] = {
    "metadata": {
        "name": "cluster-admin",
        "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
    },
    "rules": [
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
        {"nonResourceURLs": ["*"], "verbs": ["*"]},
    ],
}
"""The default role every Kubernetes cluster has; stored so bindings to it look as on a real one."""


def system_workloads() -> list[tuple[Any, dict[str, Any]]]:
    """What a fresh k0rdent child runs in kube-system: Cilium on every node and CoreDNS.

    Small requests, so they matter to drains (a DaemonSet pod on every node, CoreDNS pods to
    evict) but not to capacity.
    """
    cilium = {
        "metadata": {"name": "cilium", "namespace": "kube-system", "labels": {"k8s-app": "cilium"}},
        "spec": {
            "selector": {"matchLabels": {"k8s-app": "cilium"}},
            "template": {
                "metadata": {"labels": {"k8s-app": "cilium"}},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {
                            "name": "cilium-agent",
                            "image": "quay.io/cilium/cilium:v1.17.4",
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                        }
                    ],
                },
            },
        },
    }
    coredns = {
        "metadata": {
            "name": "coredns",
            "namespace": "kube-system",
            "labels": {"k8s-app": "kube-dns"},
        },
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"k8s-app": "kube-dns"}},
            "template": {
                "metadata": {"labels": {"k8s-app": "kube-dns"}},
                "spec": {
                    "priorityClassName": "system-cluster-critical",
                    # k0s's CoreDNS tolerations: not every NoSchedule taint, so an evicted
                    # replica never lands back on a cordoned node (unschedulable taint).
                    "tolerations": [
                        {"key": "CriticalAddonsOnly", "operator": "Exists"},
                        {
                            "key": "node-role.kubernetes.io/master",
                            "operator": "Exists",
                            "effect": "NoSchedule",
                        },
                        {
                            "key": "node-role.kubernetes.io/control-plane",
                            "operator": "Exists",
                            "effect": "NoSchedule",
                        },
                    ],
                    "containers": [
                        {
                            "name": "coredns",
                            "image": "registry.k8s.io/coredns/coredns:v1.12.1",
                            "resources": {
                                "requests": {"cpu": "100m", "memory": "70Mi"},
                                "limits": {"memory": "170Mi"},
                            },
                        }
                    ],
                },
            },
        },
    }
    return [(DAEMONSETS, cilium), (DEPLOYMENTS, coredns)]


class SimChildCluster:
    """A child cluster: store, HTTPS server and the per-cluster controllers.

    A restored child (a persisted world's) is given its `store` and the `port` and `admin_token`
    it had, so the kubeconfig handed out before the restart still reaches it (another free port
    when that one is taken meanwhile).
    """

    def __init__(
        self,
        name: str,
        ca: CertificateAuthority,
        timing: SimTiming,
        faults: FaultInjector | None = None,
        *,
        records: WorldRecords | None = None,
        with_system_workloads: bool = True,
        store: ClusterStore | None = None,
        port: int = 0,
        admin_token: str | None = None,
    ) -> None:
        self._store = store or ClusterStore(name)
        self._api = StoreApi(self._store)
        self.server = ClusterServer(
            name,
            self._store,
            ca,
            faults=faults,
            records=records,
            port=port,
            admin_token=admin_token,
        )
        self._data_plane = TenantGatewayDataPlane(
            self._api, TENANT_GATEWAY_NAMESPACE, TENANT_GATEWAY, self.server.host
        )
        self.timing = timing
        self.faults = faults
        self._tasks: list[asyncio.Task[None]] = []
        self._with_system_workloads = with_system_workloads

    @property
    def store(self) -> ClusterStore:
        return self._store

    @property
    def api(self) -> ClusterApi:
        return self._api

    async def register_node(self, node: dict[str, Any]) -> None:
        self._store.create(NODES, node)

    async def ready_node(self, name: str) -> None:
        set_node_ready(self._store, name)

    async def remove_node(self, name: str) -> None:
        remove_node_and_pods(self._store, name)

    @property
    def kubeconfig(self) -> str:
        return yaml.safe_dump(self.server.kubeconfig(), sort_keys=False)

    @property
    def gateway_data_plane(self) -> TenantGatewayDataPlane:
        return self._data_plane

    async def start(self) -> None:
        """Listen (on its former port if free, else on any free loopback port) and start the
        controllers."""
        try:
            await self.server.start()
        except OSError:
            if not self.server.port:
                raise
            log.info(
                "child cluster %s: port %d taken, serving elsewhere",
                self._store.name,
                self.server.port,
            )
            self.server.port = 0
            await self.server.start()
        with contextlib.suppress(ApiError):
            self._store.create(CLUSTERROLES, CLUSTER_ADMIN_ROLE)
        if self._with_system_workloads:
            for rt, obj in system_workloads():
                with contextlib.suppress(ApiError):
                    self._store.create(rt, obj)
        controllers = (
            Kubelet(self._store, self.timing, faults=self.faults),
            NodeLifecycleController(self._store, self.timing, self.faults),
            GatewayController(self._api),
            Scheduler(self._store),
            DaemonSetController(self._store),
            DeploymentController(self._store),
        )
        self._tasks = [
            asyncio.create_task(c.run(), name=f"{self._store.name}-{type(c).__name__}")
            for c in controllers
        ]

    async def stop(self) -> None:
        """Stop the controllers and the server (idempotent)."""
        tasks, self._tasks = self._tasks, []
        await cancel_and_wait(tasks)
        await self._data_plane.stop()
        await self.server.stop()


class K0rdentControllers:
    """Every k0rdent controller of the sim for one management cluster.

    Args:
        management: the management cluster's store or API (its k0rdent CRDs installed, or
            installed later).
        ca: signs the child clusters' serving certificates.
        timing: delays of every step.
        faults: consulted for injected ClusterDeployment/ServiceSet failures and never-ready nodes.
        inventory: resolves `config.machines[].address` to hosts (None: no machine resolves).
        records: the world's records, kept by every child cluster's API server too.
        catalog: the charts ServiceTemplates may name (default: `sim/charts.yaml`).
        child_factory: replaces `SimChildCluster` (tests of the controllers alone).
        on_child_store: called with "<namespace>/<name>" and the store of each `SimChildCluster`
            started (new or restored), before it serves (a persisted world's bookkeeping).
        cloud_templates: the cloud charts' values schemas and defaults (`sim.cloud`): their
            ClusterTemplates get `status.schemaConfigMapName` and `config`.
    """

    def __init__(
        self,
        management: ClusterStore | ClusterApi,
        ca: CertificateAuthority,
        timing: SimTiming,
        faults: FaultInjector | None = None,
        inventory: HostLookup | None = None,
        *,
        records: WorldRecords | None = None,
        catalog: ChartCatalog | None = None,
        child_factory: ChildFactory | None = None,
        on_child_store: Callable[[str, ClusterStore], None] | None = None,
        cloud_templates: Sequence[CloudTemplate] = (),
    ) -> None:
        self.api = cluster_api(management)
        self.ca = ca
        self.timing = timing
        self.faults = faults or FaultInjector()
        self.records = records
        self.children = ChildClusters()
        self._on_child_store = on_child_store
        factory = child_factory or self._start_child
        self._cluster_deployments = ClusterDeploymentController(
            self.api,
            timing,
            self.faults,
            inventory,
            self.children,
            factory,
            issue_cert=ca.issue_server_cert,
        )
        self._service_sets = ServiceSetController(
            self.api, timing, self.faults, self.children, catalog
        )
        self.cluster_api = ClusterApiControllers(
            self.api,
            timing,
            self.faults,
            self.children,
            getattr(inventory, "gpu_models", None),
        )
        self._controllers = (
            TemplateCredentialController(self.api, {t.chart: t for t in cloud_templates}),
            self.cluster_api,
            ServiceTemplateController(self.api, catalog),
            self._cluster_deployments,
            self._service_sets,
        )

    async def _start_child(
        self,
        namespace: str,
        name: str,
        saved: Mapping[str, Any] | None = None,
        resource_version_floor: int = 0,
    ) -> SimChildCluster:
        """A new child cluster, or (with `saved`, an entry of `snapshot()`) a restored one."""
        store = ClusterStore(name)
        if saved is not None:
            store.restore(saved["store"], resource_version_floor=resource_version_floor)
        if self._on_child_store is not None:
            self._on_child_store(f"{namespace}/{name}", store)
        child = SimChildCluster(
            name, self.ca, self.timing, self.faults, store=store, records=self.records,
            port=int(saved["port"]) if saved else 0,
            admin_token=str(saved["adminToken"]) if saved else None,
        )  # fmt: skip
        await child.start()
        log.info("child cluster %s/%s serving at %s", namespace, name, child.server.url)
        return child

    # ------------------------------------------------------------------ persistence

    def snapshot(self) -> dict[str, Any]:
        """The child clusters (stores, ports, admin tokens) and the controllers' progress,
        JSON-shaped, taken at one instant with the management store's (see `restore`)."""
        children = [
            {
                "namespace": namespace,
                "name": name,
                "port": child.server.port,
                "adminToken": child.server.admin_token,
                "store": child.store.snapshot(),
            }
            for (namespace, name), child in self.children.items()
            if isinstance(child, SimChildCluster)
        ]
        return {
            "children": children,
            "clusterDeployments": self._cluster_deployments.export_state(),
            "serviceSets": self._service_sets.export_state(),
        }

    async def restore(self, snapshot: Mapping[str, Any], floor: Callable[[str], int]) -> None:
        """Start the child clusters of a `snapshot()` and resume the controllers' progress; before
        `run`. `floor("<namespace>/<name>")`: the resourceVersion a child may have handed out after
        the snapshot, by a process killed later (see `ClusterStore.restore`)."""
        try:
            for saved in snapshot.get("children") or ():
                namespace, name = str(saved["namespace"]), str(saved["name"])
                floor_ = floor(f"{namespace}/{name}")
                child = await self._start_child(namespace, name, saved, floor_)
                self.children.add(namespace, name, child)
            self._cluster_deployments.import_state(snapshot.get("clusterDeployments") or ())
            self._service_sets.import_state(snapshot.get("serviceSets") or ())
        except BaseException:
            # `run` never ran to stop them: the children started so far stop here.
            for key, started in self.children.items():
                self.children.pop(*key)
                await started.stop()
            raise

    def request_counts(self) -> dict[str, dict[str, int]]:
        """Each running child's Kubernetes API requests so far, by "<namespace>/<name>"
        (`sim.apiserver.requests`); a deleted child's counts go with it."""
        return {
            f"{ns}/{name}": child.server.requests.snapshot()
            for (ns, name), child in self.children.items()
            if isinstance(child, SimChildCluster)
        }

    def stores(self) -> dict[str, ClusterStore]:
        """Every emulated child cluster's store, by "<namespace>/<name>"."""
        return {
            f"{ns}/{name}": child.store
            for (ns, name), child in self.children.items()
            if isinstance(child, SimChildCluster)
        }

    def child(self, namespace: str, name: str) -> ChildCluster | None:
        """The running child cluster of ClusterDeployment namespace/name, if any."""
        return self.children.get(namespace, name)

    async def run(self) -> None:
        """Run every controller until cancelled; child clusters are stopped on the way out."""
        tasks = [
            asyncio.create_task(c.run(), name=f"k0rdent-{type(c).__name__}")
            for c in self._controllers
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            await cancel_and_wait(tasks)
            for key, child in self.children.items():
                self.children.pop(*key)
                with contextlib.suppress(Exception):
                    await child.stop()
