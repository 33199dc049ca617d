"""SIMULATOR. KCM's cluster side: ClusterTemplate, Credential and ClusterDeployment controllers.

Started by `sim.controllers.k0rdent.K0rdentControllers` on the management cluster's API
(`sim.clusterapi`: the emulator's store, or a real API server).

A ClusterDeployment progresses through the conditions KCM reports (type and reason names are KCM's,
from k0rdent/kcm api/v1beta1): CredentialReady, TemplateReady, HelmChartReady, HelmReleaseReady,
CAPIClusterSummary, then Ready=True (reason Succeeded) with `status.observedGeneration` equal to
`metadata.generation`. A missing/unready template or credential gives Ready=False, reason Failed.
Each step takes a `SimTiming` delay; the controller keeps, per object, when it first saw each
generation and machine, and requeues itself for the next due step (level-triggered, so a restart of
the reconcile at any point converges).

When the control plane is "up", the child cluster exists: its own `ClusterStore` served by its own
`ClusterServer` on a free loopback port, with its own token, running the kubelet, scheduler,
DaemonSet and Deployment controllers; Secret `<name>-kubeconfig` (key `value`) holds its kubeconfig.
Worker machines come from `spec.config.machines[]` ({address, port, user}, the k0rdent
remote-cluster template's values): each becomes a Node labelled and sized from the inventory host
at that address (never registering if the inventory has no such host), NotReady first, then Ready
(unless the FaultInjector says `node_never_ready`). Templates sized by `config.workersNumber`
(hosted control plane) get that many generic nodes.

Tenant gateway: a ClusterDeployment labelled `colony.dev/tenant-gateway-domain: <domain>` gets, in
its child once the control plane is up, the Gateway `colony-gateway/tenant` standing in for the
platform's regional gateway (see `sim.controllers.tenant_gateway`).

Deletion: the finalizer `k0rdent.mirantis.com/cluster-deployment` holds the object while the
Deleting condition is set, its ServiceSets are deleted, the child cluster stops and its kubeconfig
Secret goes; then the finalizer is removed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from sim.apiserver.errors import ApiError
from sim.apiserver.registry import (
    CONFIGMAPS,
    CRDS,
    EVENTS,
    NODES,
    PODS,
    SECRETS,
    ResourceRegistry,
    ResourceType,
)
from sim.apiserver.store import ClusterStore, WatchEvent
from sim.cloud import (
    CLUSTER_NAME_LABEL,
    INFRASTRUCTURE_KINDS,
    MACHINE_DEPLOYMENTS,
    MACHINES,
    CloudTemplate,
    is_machine_deployment_chart,
    machine_deployment,
    schema_config_map_name,
)
from sim.clusterapi import ClusterApi, cluster_api
from sim.controllers.gateway_dataplane import TenantGatewayDataPlane
from sim.controllers.gpus import GPU_RESOURCE, gfd_labels
from sim.controllers.tenant_gateway import (
    CertIssuer,
    ensure_tenant_gateway,
    tenant_gateway_pending,
)
from sim.controllers.workqueue import ReconcileLoop
from sim.faults import FaultInjector
from sim.timing import SimTiming

log = logging.getLogger(__name__)

GROUP = "k0rdent.mirantis.com"
API_VERSION = f"{GROUP}/v1beta1"
CLUSTER_DEPLOYMENTS = (GROUP, "clusterdeployments")
CLUSTER_TEMPLATES = (GROUP, "clustertemplates")
CREDENTIALS = (GROUP, "credentials")
SERVICE_TEMPLATES = (GROUP, "servicetemplates")
SERVICE_SETS = (GROUP, "servicesets")

# KCM's finalizer and condition vocabulary (k0rdent/kcm api/v1beta1 clusterdeployment_types.go,
# credential_types.go, common.go).
CLUSTER_DEPLOYMENT_FINALIZER = "k0rdent.mirantis.com/cluster-deployment"
CREDENTIAL_READY = "CredentialReady"
TEMPLATE_READY = "TemplateReady"
HELM_CHART_READY = "HelmChartReady"
HELM_RELEASE_READY = "HelmReleaseReady"
CAPI_CLUSTER_SUMMARY = "CAPIClusterSummary"
READY = "Ready"
DELETING = "Deleting"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
PROGRESSING = "Progressing"
DELETING_REASON = "Deleting"

# What the sim reports as the child clusters' Kubernetes version (k0s naming, as KCM templates do).
K8S_VERSION = "v1.32.5"
"""The templates' default k0s version, used when a ClusterDeployment does not ask for one."""


def _requested_k8s_version(spec: Mapping[str, Any]) -> str | None:
    """The version `spec.config.k0s.version` asks for (the remote-cluster template's value)."""
    k0s = ((spec.get("config") or {}).get("k0s")) or {}
    version = k0s.get("version") if isinstance(k0s, Mapping) else None
    return str(version) if version else None


CHILD_START_POLL_SECONDS = 0.5
"""How often a ClusterDeployment whose control plane is starting looks again (its start's end
requeues it at once as well)."""
CHILD_START_RETRY_SECONDS = 5.0
"""A control plane that failed to start is started again after this long."""
"""A control plane that failed to start is started again after this long."""
GATEWAY_POLL_SECONDS = 0.1
"""How often a ClusterDeployment waiting for its tenant Gateway's status looks again (the
Gateway controller writes it, in the child cluster: no event of the management cluster says so)."""

# Generic workers of hosted-control-plane templates (`config.workersNumber`): a mid-size VM.
GENERIC_WORKER = {"cpu": "8", "memory": "32Gi", "instanceType": "sim-standard-8"}

Key = tuple[str, str]


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Served(Protocol):
    @property
    def registry(self) -> ResourceRegistry: ...


def rt_for(cluster: _Served, key: tuple[str, str]) -> ResourceType | None:
    """The resource type for (group, plural), or None while its CRD is not installed."""
    return cluster.registry.try_get(*key)


def set_condition(
    conditions: list[dict[str, Any]],
    type_: str,
    status: str,
    reason: str,
    message: str,
    generation: int | None = None,
) -> None:
    """metav1.Condition upsert: lastTransitionTime only moves when the status changes."""
    for condition in conditions:
        if condition.get("type") == type_:
            if condition.get("status") != status:
                condition["lastTransitionTime"] = now_iso()
            condition.update(status=status, reason=reason, message=message)
            if generation is not None:
                condition["observedGeneration"] = generation
            return
    new: dict[str, Any] = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now_iso(),
    }
    if generation is not None:
        new["observedGeneration"] = generation
    conditions.append(new)


def get_condition(obj: Mapping[str, Any], type_: str) -> dict[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == type_:
            return dict(condition)
    return None


def _comparable(status: Mapping[str, Any]) -> Any:
    """Status without timestamps, to skip writes that change nothing."""
    out = dict(status)
    out["conditions"] = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"}
        for c in status.get("conditions") or []
    ]
    return out


async def write_status_if_changed(
    api: ClusterApi, rt: ResourceType, obj: Mapping[str, Any], status: dict[str, Any]
) -> None:
    if _comparable(obj.get("status") or {}) != _comparable(status):
        meta = obj["metadata"]
        await api.update_status(rt, meta.get("namespace"), meta["name"], status)


async def record_event(
    api: ClusterApi,
    obj: Mapping[str, Any],
    reason: str,
    message: str,
    *,
    type_: str = "Normal",
    component: str = "kcm-controller-manager",
) -> None:
    """A core/v1 Event about `obj` (what `kubectl describe` shows)."""
    meta = obj["metadata"]
    now = now_iso()
    event = {
        "metadata": {
            "name": f"{meta['name']}.{uuid.uuid4().hex[:16]}",
            "namespace": meta.get("namespace") or "default",
        },
        "involvedObject": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta["name"],
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
        },
        "reason": reason,
        "message": message,
        "type": type_,
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        await api.create(EVENTS, event)
    except ApiError as exc:
        log.debug("event for %s not recorded: %s", meta["name"], exc)


# --------------------------------------------------------------------------- child clusters


class ChildCluster(Protocol):
    """A running child cluster: its API and how to reach it (the emulator's `SimChildCluster`, or
    a real control plane's `sim.real.child.RealChildCluster`)."""

    @property
    def api(self) -> ClusterApi: ...

    @property
    def kubeconfig(self) -> str:
        """Kubeconfig YAML with the server URL, CA and a bearer token of the child."""
        ...

    @property
    def gateway_data_plane(self) -> TenantGatewayDataPlane:
        """Listens for the child's tenant Gateway, if it gets one."""
        ...

    async def register_node(self, node: dict[str, Any]) -> None:
        """The machine's kubelet registers its Node (NotReady, tainted not-ready)."""
        ...

    async def ready_node(self, name: str) -> None:
        """The machine's kubelet has joined: the Node turns Ready and stays so (the emulator
        writes its status; on a real control plane KWOK takes the Node over)."""
        ...

    async def remove_node(self, name: str) -> None:
        """The machine is gone: its Node goes (and with it its pods, by the pod GC)."""
        ...

    async def stop(self) -> None: ...


ChildFactory = Callable[[str, str], Coroutine[Any, Any, ChildCluster]]
"""Starts the child cluster of ClusterDeployment (namespace, name)."""


class ChildClusters:
    """The child clusters of one management cluster, by ClusterDeployment (namespace, name)."""

    def __init__(self) -> None:
        self._children: dict[Key, ChildCluster] = {}

    def get(self, namespace: str, name: str) -> ChildCluster | None:
        return self._children.get((namespace, name))

    def add(self, namespace: str, name: str, child: ChildCluster) -> None:
        self._children[(namespace, name)] = child

    def pop(self, namespace: str, name: str) -> ChildCluster | None:
        return self._children.pop((namespace, name), None)

    def items(self) -> list[tuple[Key, ChildCluster]]:
        return list(self._children.items())


# --------------------------------------------------------------------------- inventory access


class HostLookup(Protocol):
    def host_by_address(self, address: str, port: int | None = None) -> Any: ...


def host_field(host: Any, *names: str) -> Any:
    """A field of an inventory host, whether it is a model, a dataclass or a dict."""
    for name in names:
        if isinstance(host, Mapping):
            if host.get(name) is not None:
                return host[name]
        else:
            value = getattr(host, name, None)
            if value is not None:
                return value
    return None


def _quantity(value: Any, unit: str) -> str:
    """Inventory numbers without a unit are in `unit` (memory in Gi); strings pass through."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{int(value)}{unit}"
    return str(value)


def _dns_name(text: str) -> str:
    cleaned = "".join(c if c.isalnum() or c == "-" else "-" for c in text.lower()).strip("-")
    return cleaned[:63] or "node"


# --------------------------------------------------------------------------- ClusterTemplate, Credential


class TemplateCredentialController:
    """ClusterTemplate `status.valid` (+ providers, k8sVersion; for a chart whose values schema
    the sim knows, `schemaConfigMapName` and `config`, its default values) and Credential
    `status.ready`.

    Args:
        management: the management cluster's store or API.
        charts: chart name -> its values schema and defaults (`sim.cloud`), what KCM reads from
            the chart itself.
    """

    def __init__(
        self,
        management: ClusterStore | ClusterApi,
        charts: Mapping[str, CloudTemplate] | None = None,
    ) -> None:
        self.api = cluster_api(management)
        self.charts = dict(charts or {})
        self._loop: ReconcileLoop[tuple[str, str, str]] = ReconcileLoop(
            self.api, "k0rdent-templates", self._keys_for, self._reconcile, self._all_keys,
            watched=(CLUSTER_TEMPLATES, CREDENTIALS, CRDS.key),
        )  # fmt: skip

    async def run(self) -> None:
        await self._loop.run()

    async def _all_keys(self) -> list[tuple[str, str, str]]:
        keys: list[tuple[str, str, str]] = []
        for plural_key in (CLUSTER_TEMPLATES, CREDENTIALS):
            rt = rt_for(self.api, plural_key)
            if rt is not None:
                items = await self.api.list(rt)
                keys += [
                    (rt.plural, o["metadata"]["namespace"], o["metadata"]["name"]) for o in items
                ]
        return keys

    async def _keys_for(self, event: WatchEvent) -> list[tuple[str, str, str]]:
        if event.rt.key in (CLUSTER_TEMPLATES, CREDENTIALS):
            meta = event.object["metadata"]
            return [(event.rt.plural, meta["namespace"], meta["name"])]
        if event.rt.key == CRDS.key:
            return await self._all_keys()
        return []

    async def _ensure_schema(self, template: Mapping[str, Any], values: CloudTemplate) -> str:
        return await _ensure_schema_config_map(self.api, template, values)

    async def _reconcile(self, key: tuple[str, str, str]) -> float | None:
        plural, namespace, name = key
        rt = rt_for(self.api, (GROUP, plural))
        if rt is None:
            return None
        obj = await self.api.try_get(rt, namespace, name)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return None
        status = dict(obj.get("status") or {})
        generation = obj["metadata"].get("generation", 1)
        if plural == "clustertemplates":
            helm = (obj.get("spec") or {}).get("helm") or {}
            chart = (helm.get("chartSpec") or {}).get("chart") or (helm.get("chartRef") or {}).get(
                "name"
            )
            if chart:
                status.update(valid=True, k8sVersion=K8S_VERSION, providers=_providers(str(chart)))
                status.pop("validationError", None)
                version = (helm.get("chartSpec") or {}).get("version")
                if version:
                    status["chartVersion"] = str(version)
                values = self.charts.get(str(chart))
                if values is not None:
                    status["schemaConfigMapName"] = await self._ensure_schema(obj, values)
                    status["config"] = dict(values.defaults)
            else:
                status.update(
                    valid=False, validationError="spec.helm: chartSpec or chartRef must be set"
                )
            status["observedGeneration"] = generation
        else:
            # A Credential's status has no observedGeneration (k0rdent's CRD: conditions and
            # ready only); its conditions carry the generation.
            conditions = list(status.get("conditions") or [])
            if (obj.get("spec") or {}).get("identityRef"):
                status["ready"] = True
                set_condition(
                    conditions,
                    CREDENTIAL_READY,
                    "True",
                    SUCCEEDED,
                    "Credential is ready",
                    generation,
                )
            else:
                status["ready"] = False
                set_condition(
                    conditions,
                    CREDENTIAL_READY,
                    "False",
                    FAILED,
                    "spec.identityRef is not set",
                    generation,
                )
            status["conditions"] = conditions
        await write_status_if_changed(self.api, rt, obj, status)
        return None


async def _ensure_schema_config_map(
    api: ClusterApi, template: Mapping[str, Any], values: CloudTemplate
) -> str:
    """The ConfigMap KCM keeps a template's values schema in (key `schema`), owned by it."""
    meta = template["metadata"]
    name = schema_config_map_name(meta["name"])
    data = {"schema": json.dumps(values.schema, indent=2, sort_keys=True)}
    existing = await api.try_get(CONFIGMAPS, meta["namespace"], name)
    if existing is None:
        await api.create(
            CONFIGMAPS,
            {
                "metadata": {
                    "name": name,
                    "namespace": meta["namespace"],
                    "labels": {"k0rdent.mirantis.com/component": "kcm"},
                    "ownerReferences": [
                        {
                            "apiVersion": template.get("apiVersion") or API_VERSION,
                            "kind": "ClusterTemplate",
                            "name": meta["name"],
                            "uid": meta["uid"],
                        }
                    ],
                },
                "data": data,
            },
        )
    elif existing.get("data") != data:
        await api.mutate(CONFIGMAPS, meta["namespace"], name, lambda cm: cm.update(data=data))
    return name


def _chart(template: Mapping[str, Any] | None) -> str:
    helm = ((template or {}).get("spec") or {}).get("helm") or {}
    return str(
        (helm.get("chartSpec") or {}).get("chart") or (helm.get("chartRef") or {}).get("name") or ""
    )


def _providers(chart: str) -> list[str]:
    """CAPI providers a cluster template chart needs (as KCM lists them in status.providers)."""
    if "remote" in chart or "hosted" in chart or "k0smotron" in chart:
        infra = "infrastructure-k0sproject-k0smotron"
        if chart.startswith("docker"):
            infra = "infrastructure-docker"
        return ["bootstrap-k0sproject-k0smotron", "control-plane-k0sproject-k0smotron", infra]
    provider = chart.split("-")[0]
    return [
        "bootstrap-k0sproject-k0smotron",
        "control-plane-k0sproject-k0smotron",
        f"infrastructure-{provider}",
    ]


# --------------------------------------------------------------------------- ClusterDeployment


@dataclass
class _Machine:
    """One worker: a `config.machines[]` entry or a generic worker of `workersNumber`."""

    key: str
    node_name: str | None
    first_seen: float
    address: str | None = None
    port: int | None = None
    host: Any = None
    registered: bool = False
    ready: bool = False
    reported_unknown: bool = False
    lost: bool = False


@dataclass
class _ClusterState:
    created: float
    generation: int
    generation_seen: float
    control_plane_at: float | None = None
    machines: dict[str, _Machine] = field(default_factory=dict)
    deleting_since: float | None = None
    gateway_problem: str | None = None
    chart: str = ""
    """The chart of the cluster's template, once its template was read."""


class ClusterDeploymentController:
    """KCM + CAPI for ClusterDeployments of the management cluster (see the module docstring)."""

    def __init__(
        self,
        management: ClusterStore | ClusterApi,
        timing: SimTiming,
        faults: FaultInjector,
        inventory: HostLookup | None,
        children: ChildClusters,
        child_factory: ChildFactory,
        issue_cert: CertIssuer | None = None,
    ) -> None:
        self.api = cluster_api(management)
        self.issue_cert = issue_cert
        self.timing = timing
        self.faults = faults
        self.inventory = inventory
        self.children = children
        self.child_factory = child_factory
        self._states: dict[Key, _ClusterState] = {}
        self._starting: dict[Key, asyncio.Task[ChildCluster]] = {}
        self._loop: ReconcileLoop[Key] = ReconcileLoop(
            self.api, "k0rdent-clusterdeployments", self._keys_for, self._reconcile,
            self._all_keys,
            watched=(CLUSTER_DEPLOYMENTS, CREDENTIALS, CLUSTER_TEMPLATES, SERVICE_SETS, MACHINE_DEPLOYMENTS, MACHINES),
        )  # fmt: skip

    async def run(self) -> None:
        # Faults change over HTTP without a cluster event: a lost or restored node must be seen.
        unsubscribe = self.faults.on_change(self._requeue_all)
        try:
            await self._loop.run()
        finally:
            unsubscribe()
            for key in {*self._starting, *(key for key, _ in self.children.items())}:
                with contextlib.suppress(Exception):
                    await self._stop_child(key)

    def _child_started(self, key: Key) -> ChildCluster | None:
        """The child cluster of `key` once its control plane serves, else None: its start is
        begun in the background (a real control plane takes seconds; the other clusters go on
        meanwhile) and the key is reconciled again when it is done."""
        child = self.children.get(*key)
        if child is None and key not in self._starting:
            task = asyncio.create_task(self.child_factory(*key), name=f"child-{key[0]}/{key[1]}")
            self._starting[key] = task
            task.add_done_callback(lambda done: self._child_done(key, done))
        return child

    def _child_done(self, key: Key, task: asyncio.Task[ChildCluster]) -> None:
        if self._starting.get(key) is not task:
            return  # stopped meanwhile: `_stop_child` owns what it started
        del self._starting[key]
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.error("child cluster %s/%s did not start (retried): %s", *key, error)
            self._loop.queue.add_after(key, CHILD_START_RETRY_SECONDS)
            return
        self.children.add(*key, task.result())
        self._loop.queue.add(key)

    async def _stop_child(self, key: Key) -> None:
        """Stop the child cluster of `key`, started or still starting."""
        task = self._starting.pop(key, None)
        if task is not None:
            task.cancel()
            try:
                started = await task
            except (asyncio.CancelledError, Exception):  # its factory cleaned up after itself
                started = None
            if started is not None:
                await started.stop()
        child = self.children.pop(*key)
        if child is not None:
            await child.stop()

    async def _all_keys(self) -> list[Key]:
        rt = rt_for(self.api, CLUSTER_DEPLOYMENTS)
        if rt is None:
            return []
        items = await self.api.list(rt)
        return [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in items]

    def _requeue_all(self) -> None:
        # Every ClusterDeployment seen so far: the others are reconciled on their own event.
        for key in list(self._states):
            self._loop.queue.add(key)

    async def _keys_for(self, event: WatchEvent) -> Iterable[Key]:
        key = event.rt.key
        meta = event.object.get("metadata") or {}
        if key == CLUSTER_DEPLOYMENTS:
            return [(meta["namespace"], meta["name"])]
        if key in (CREDENTIALS, CLUSTER_TEMPLATES):
            namespace = meta.get("namespace", "")
            return [k for k in await self._all_keys() if k[0] == namespace]
        if key in (MACHINE_DEPLOYMENTS, MACHINES):
            # The cluster's readiness and deletion wait for its workers (`_reconcile_machine_deployment`).
            cluster = (meta.get("labels") or {}).get(CLUSTER_NAME_LABEL)
            return [(meta["namespace"], cluster)] if cluster else []
        if key == SERVICE_SETS and event.type == "DELETED":
            cluster = (event.object.get("spec") or {}).get("cluster")
            return [(meta["namespace"], cluster)] if cluster else []
        return []

    # ------------------------------------------------------------------ reconcile

    async def _reconcile(self, key: Key) -> float | None:
        namespace, name = key
        rt = rt_for(self.api, CLUSTER_DEPLOYMENTS)
        if rt is None:
            return None
        obj = await self.api.try_get(rt, namespace, name)
        if obj is None:
            self._states.pop(key, None)
            await self._stop_child(key)
            return None
        now = asyncio.get_running_loop().time()
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            return await self._reconcile_delete(rt, obj, now)
        if CLUSTER_DEPLOYMENT_FINALIZER not in (meta.get("finalizers") or []):
            obj = await self.api.mutate(
                rt,
                namespace,
                name,
                lambda o: (
                    o["metadata"].setdefault("finalizers", []).append(CLUSTER_DEPLOYMENT_FINALIZER)
                ),
            )
            meta = obj["metadata"]
        generation = int(meta.get("generation", 1))
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = _ClusterState(now, generation, now)
        if state.generation != generation:
            state.generation, state.generation_seen = generation, now
        return await self._progress(rt, obj, state, now)

    async def _progress(
        self, rt: ResourceType, obj: dict[str, Any], state: _ClusterState, now: float
    ) -> float | None:
        meta = obj["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        spec = obj.get("spec") or {}
        generation = state.generation
        status = dict(obj.get("status") or {})
        conditions: list[dict[str, Any]] = [dict(c) for c in status.get("conditions") or []]
        waits: list[float] = []

        def due(at: float) -> bool:
            if at <= now:
                return True
            waits.append(at - now)
            return False

        async def finish(ready_reason: str, message: str, ready: bool = False) -> float | None:
            set_condition(
                conditions, READY, "True" if ready else "False", ready_reason, message, generation
            )
            status["conditions"] = conditions
            if ready:
                status["observedGeneration"] = generation
            await write_status_if_changed(self.api, rt, obj, status)
            return min(waits) if waits else None

        injected = self.faults.cluster_deployment_failure(namespace, name)
        if injected is not None:
            # Poll: faults change over HTTP without a cluster event.
            waits.append(0.5)
            return await finish(FAILED, injected)

        # CredentialReady
        step = state.created + self.timing.delay("cluster.credential")
        if not due(step):
            set_condition(
                conditions, READY, "False", PROGRESSING, "Checking credential", generation
            )
            return await finish(PROGRESSING, "Checking credential")
        credential_name = spec.get("credential") or ""
        credential_problem = await self._credential_problem(namespace, credential_name)
        if credential_problem is not None:
            set_condition(
                conditions, CREDENTIAL_READY, "False", FAILED, credential_problem, generation
            )
            return await finish(FAILED, credential_problem)
        set_condition(
            conditions,
            CREDENTIAL_READY,
            "True",
            SUCCEEDED,
            f"Credential {credential_name} is Ready",
            generation,
        )

        # TemplateReady
        step += self.timing.delay("cluster.template")
        if not due(step):
            return await finish(PROGRESSING, "Validating template")
        template_name = spec.get("template") or ""
        template, template_problem = await self._template(namespace, template_name)
        if template_problem is not None:
            set_condition(conditions, TEMPLATE_READY, "False", FAILED, template_problem, generation)
            return await finish(FAILED, template_problem)
        set_condition(
            conditions, TEMPLATE_READY, "True", SUCCEEDED, "Template is valid", generation
        )
        state.chart = _chart(template)
        k8s_version = _requested_k8s_version(spec) or ((template or {}).get("status") or {}).get(
            "k8sVersion"
        )
        if k8s_version:
            status["k8sVersion"] = k8s_version

        # HelmChartReady
        step += self.timing.delay("cluster.helm_chart")
        if not due(step):
            set_condition(
                conditions,
                HELM_CHART_READY,
                "False",
                PROGRESSING,
                "HelmChart is being fetched",
                generation,
            )
            return await finish(PROGRESSING, "Waiting for HelmChart")
        set_condition(
            conditions, HELM_CHART_READY, "True", SUCCEEDED, "Helm chart is valid", generation
        )

        # HelmReleaseReady (re-run for every new generation: KCM upgrades the release)
        step += self.timing.delay("cluster.helm_release")
        release_due = max(step, state.generation_seen + self.timing.delay("cluster.upgrade"))
        if state.generation_seen == state.created:
            release_due = step
        if not due(release_due):
            set_condition(
                conditions,
                HELM_RELEASE_READY,
                "False",
                PROGRESSING,
                "Helm install/upgrade in progress",
                generation,
            )
            return await finish(PROGRESSING, "Waiting for HelmRelease")
        set_condition(
            conditions, HELM_RELEASE_READY, "True", SUCCEEDED,
            f"Helm install succeeded for release {namespace}/{name}.v{generation}", generation,
        )  # fmt: skip

        # Control plane: the child cluster comes up, its kubeconfig Secret appears.
        step += self.timing.delay("cluster.control_plane")
        child = self._child_started((namespace, name)) if due(step) else None
        if child is None:
            if step <= now:  # due, its start under way: `_child_done` requeues it too
                waits.append(CHILD_START_POLL_SECONDS)
            set_condition(
                conditions, CAPI_CLUSTER_SUMMARY, "False", PROGRESSING,
                "* ControlPlane: Waiting for control plane to be initialized", generation,
            )  # fmt: skip
            return await finish(PROGRESSING, "Waiting for control plane")
        problems = await self._up(obj, state, child, now, waits)
        if problems:
            message = "\n".join(f"* {p}" for p in problems)
            set_condition(
                conditions, CAPI_CLUSTER_SUMMARY, "False", PROGRESSING, message, generation
            )
            return await finish(PROGRESSING, message)
        set_condition(conditions, CAPI_CLUSTER_SUMMARY, "True", "Available", "", generation)
        return await finish(SUCCEEDED, "Object is ready", ready=True)

    async def _up(
        self,
        obj: dict[str, Any],
        state: _ClusterState,
        child: ChildCluster,
        now: float,
        waits: list[float],
    ) -> list[str]:
        """The child cluster serves: its kubeconfig Secret, its tenant gateway, its machines'
        Nodes; what still holds the cluster back (empty: it is ready)."""
        if state.control_plane_at is None:
            state.control_plane_at = now
        await self._ensure_kubeconfig_secret(obj, child)
        gateway_problem = await ensure_tenant_gateway(
            child.api, obj, self.issue_cert, child.gateway_data_plane
        )
        if gateway_problem is not None and state.gateway_problem != gateway_problem:
            await record_event(self.api, obj, "InvalidTenantGateway", gateway_problem, type_="Warning")  # fmt: skip
        state.gateway_problem = gateway_problem
        problems = await self._reconcile_machines(obj, state, child, now, waits)
        if is_machine_deployment_chart(state.chart):
            problems += await self._reconcile_machine_deployment(obj, state.chart)
        gateway_pending = await tenant_gateway_pending(child.api, obj)
        if gateway_pending is not None:
            problems.append(gateway_pending)
            waits.append(GATEWAY_POLL_SECONDS)
        return problems

    async def _credential_problem(self, namespace: str, credential_name: str) -> str | None:
        if not credential_name:
            return "spec.credential is not set"
        rt = rt_for(self.api, CREDENTIALS)
        credential = None if rt is None else await self.api.try_get(rt, namespace, credential_name)
        if credential is None:
            return (
                f'failed to get Credential: credentials.k0rdent.mirantis.com "{credential_name}" '
                "not found"
            )
        if not (credential.get("status") or {}).get("ready"):
            return f"Credential {namespace}/{credential_name} is not in Ready state"
        return None

    async def _template(
        self, namespace: str, template_name: str
    ) -> tuple[dict[str, Any] | None, str | None]:
        rt = rt_for(self.api, CLUSTER_TEMPLATES)
        template = None if rt is None else await self.api.try_get(rt, namespace, template_name)
        if template is None:
            return None, (
                f'failed to get ClusterTemplate: clustertemplates.k0rdent.mirantis.com "{template_name}" '
                "not found"
            )
        template_status = template.get("status") or {}
        if not template_status.get("valid"):
            detail = template_status.get("validationError") or "not validated yet"
            return (
                template,
                f"ClusterTemplate {namespace}/{template_name} is not marked as valid: {detail}",
            )
        return template, None

    async def _ensure_kubeconfig_secret(self, obj: Mapping[str, Any], child: ChildCluster) -> None:
        meta = obj["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        secret_name = f"{name}-kubeconfig"
        value = base64.b64encode(child.kubeconfig.encode()).decode()
        existing = await self.api.try_get(SECRETS, namespace, secret_name)
        if existing is not None:
            if (existing.get("data") or {}).get("value") != value:
                await self.api.mutate(
                    SECRETS, namespace, secret_name, lambda s: s.update(data={"value": value})
                )
            return
        await self.api.create(
            SECRETS,
            {
                "metadata": {
                    "name": secret_name,
                    "namespace": namespace,
                    "labels": {"cluster.x-k8s.io/cluster-name": name},
                },
                "type": "cluster.x-k8s.io/secret",
                "data": {"value": value},
            },
        )

    # ------------------------------------------------------------------ machines -> nodes

    async def _reconcile_machine_deployment(self, obj: Mapping[str, Any], chart: str) -> list[str]:
        """What the cloud template's chart renders: the MachineDeployment `<cluster>-md` of
        `workersNumber` replicas (none for 0), set to the ClusterDeployment's value on every
        reconcile, as a Helm upgrade does; what holds the cluster back while it scales."""
        md_rt = rt_for(self.api, MACHINE_DEPLOYMENTS)
        if md_rt is None:
            return ["MachineDeployment: Cluster API's CRDs are not installed"]
        meta = obj["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        workers = ((obj.get("spec") or {}).get("config") or {}).get("workersNumber")
        replicas = int(workers) if isinstance(workers, int | float) else 0
        wanted = machine_deployment(
            namespace,
            name,
            replicas,
            INFRASTRUCTURE_KINDS.get(chart.split("-")[0], ""),
            _requested_k8s_version(obj.get("spec") or {}) or K8S_VERSION,
        )
        md_name = wanted["metadata"]["name"]
        existing = await self.api.try_get(md_rt, namespace, md_name)
        if replicas <= 0:
            if existing is not None and not existing["metadata"].get("deletionTimestamp"):
                with contextlib.suppress(ApiError):
                    await self.api.delete(md_rt, namespace, md_name)
            return []
        if existing is None:
            existing = await self.api.create(md_rt, wanted)
        elif (existing.get("spec") or {}).get("replicas") != replicas:
            existing = await self.api.mutate(
                md_rt, namespace, md_name, lambda md: md["spec"].update(replicas=replicas)
            )
        status = existing.get("status") or {}
        ready, current = int(status.get("readyReplicas") or 0), int(status.get("replicas") or 0)
        if ready < replicas or current != replicas:
            return [f"MachineDeployment {md_name}: {ready} of {replicas} replicas ready"]
        return []

    def _desired_machines(
        self, obj: Mapping[str, Any], chart: str = ""
    ) -> dict[str, dict[str, Any]]:
        name = obj["metadata"]["name"]
        config = (obj.get("spec") or {}).get("config") or {}
        desired: dict[str, dict[str, Any]] = {}
        for index, machine in enumerate(config.get("machines") or []):
            if not isinstance(machine, Mapping):
                continue
            address = str(machine.get("address") or "")
            port = int(machine.get("port") or 22)
            desired[f"{address}:{port}"] = {"address": address, "port": port, "index": index}
        workers = config.get("workersNumber")
        if is_machine_deployment_chart(chart):
            workers = None  # Cluster API's machines (`sim.controllers.capi`)
        if isinstance(workers, int) and not isinstance(workers, bool):
            for index in range(workers):
                desired[f"worker-{index}"] = {"node": f"{name}-md-{index}"}
        return desired

    async def _reconcile_machines(
        self,
        obj: Mapping[str, Any],
        state: _ClusterState,
        child: ChildCluster,
        now: float,
        waits: list[float],
    ) -> list[str]:
        """Create, ready and remove nodes; the problems holding the cluster back (empty: done)."""
        name = obj["metadata"]["name"]
        desired = self._desired_machines(obj, state.chart)
        for key in [k for k in state.machines if k not in desired]:
            removed = state.machines.pop(key)
            if removed.node_name:
                await child.remove_node(removed.node_name)
        problems: list[str] = []
        start = state.control_plane_at if state.control_plane_at is not None else now
        for key, want in desired.items():
            machine = state.machines.get(key)
            if machine is None:
                machine = self._new_machine(key, want, max(start, now))
                state.machines[key] = machine
            if machine.node_name is None:
                if not machine.reported_unknown:
                    machine.reported_unknown = True
                    await record_event(
                        self.api, obj, "MachineUnreachable",
                        f"Machine {name}-{key}: no host answers SSH at {machine.address}:{machine.port}",
                        type_="Warning",
                    )  # fmt: skip
                problems.append(
                    f"Machine {key}: waiting for SSH at {machine.address}:{machine.port}: "
                    "no host with that address"
                )
                continue
            if self.faults.node_lost(child.api.name, machine.node_name):
                await self._lose(obj, key, machine, child)
                problems.append(f"Machine {key}: node {machine.node_name} is unreachable")
                continue
            problem = await self._join(obj, machine, child, now, waits)
            if problem:
                problems.append(f"Machine {key}: {problem}")
        return problems

    async def _lose(
        self, obj: Mapping[str, Any], key: str, machine: _Machine, child: ChildCluster
    ) -> None:
        """The machine vanished: CAPI loses its node, the pod GC its pods."""
        if not machine.lost and machine.node_name:
            machine.lost = True
            await child.remove_node(machine.node_name)
            await record_event(
                self.api, obj, "MachineLost",
                f"Machine {obj['metadata']['name']}-{key}: node {machine.node_name} is gone",
                type_="Warning",
            )  # fmt: skip
        machine.registered = machine.ready = False

    async def _join(
        self,
        obj: Mapping[str, Any],
        machine: _Machine,
        child: ChildCluster,
        now: float,
        waits: list[float],
    ) -> str | None:
        """Register the machine's Node, then make it Ready, each after its delay; what holds the
        cluster back while it boots (None once registered)."""
        if machine.lost:
            # Back from the dead: it boots and registers again from scratch.
            machine.lost = False
            machine.first_seen = now
        register_at = machine.first_seen + self.timing.delay("node.register")
        if now < register_at:
            waits.append(register_at - now)
            return "bootstrapping"
        node_name = machine.node_name or ""
        if await child.api.try_get(NODES, None, node_name) is None:
            await child.register_node(self._node(obj, machine))
            machine.registered, machine.ready = True, False
        ready_at = register_at + self.timing.delay("node.ready")
        if not machine.ready:
            if self.faults.node_never_ready_matches(node_name, machine.address):
                waits.append(0.5)  # the fault may be lifted over HTTP
            elif now < ready_at:
                waits.append(ready_at - now)
            else:
                await child.ready_node(node_name)
                machine.ready = True
        return None

    # ------------------------------------------------------------------ persistence

    def export_state(self) -> list[dict[str, Any]]:
        """Each ClusterDeployment's progress, JSON-shaped, for a persisted world: its step times
        as offsets from now, so the time a world spends stopped does not count (`import_state`)."""
        now = asyncio.get_running_loop().time()

        def offset(at: float | None) -> float | None:
            return None if at is None else at - now

        return [
            {
                "namespace": namespace,
                "name": name,
                "created": state.created - now,
                "generation": state.generation,
                "generationSeen": state.generation_seen - now,
                "controlPlaneAt": offset(state.control_plane_at),
                "deletingSince": offset(state.deleting_since),
                "gatewayProblem": state.gateway_problem,
                "machines": [
                    {
                        "key": machine.key,
                        "node": machine.node_name if machine.address is None else None,
                        "address": machine.address,
                        "port": machine.port,
                        "firstSeen": machine.first_seen - now,
                        "registered": machine.registered,
                        "ready": machine.ready,
                        "reportedUnknown": machine.reported_unknown,
                        "lost": machine.lost,
                    }
                    for machine in state.machines.values()
                ],
            }
            for (namespace, name), state in self._states.items()
        ]

    def import_state(self, states: Iterable[Mapping[str, Any]]) -> None:
        """Resume the progress `export_state` wrote (before `run`): a Ready cluster stays Ready, a
        joining machine goes on joining; hosts are looked up in the inventory again."""
        now = asyncio.get_running_loop().time()

        def at(offset: Any) -> float | None:
            return None if offset is None else now + float(offset)

        for entry in states:
            state = _ClusterState(
                created=now + float(entry["created"]),
                generation=int(entry["generation"]),
                generation_seen=now + float(entry["generationSeen"]),
                control_plane_at=at(entry.get("controlPlaneAt")),
                deleting_since=at(entry.get("deletingSince")),
                gateway_problem=entry.get("gatewayProblem"),
            )
            for saved in entry.get("machines") or ():
                want: dict[str, Any] = (
                    {"node": saved["node"]}
                    if saved.get("node")
                    else {"address": saved["address"], "port": saved["port"]}
                )
                machine = self._new_machine(
                    str(saved["key"]), want, now + float(saved["firstSeen"])
                )
                machine.registered = bool(saved.get("registered"))
                machine.ready = bool(saved.get("ready"))
                machine.reported_unknown = bool(saved.get("reportedUnknown"))
                machine.lost = bool(saved.get("lost"))
                state.machines[machine.key] = machine
            self._states[(str(entry["namespace"]), str(entry["name"]))] = state

    def _new_machine(self, key: str, want: Mapping[str, Any], first_seen: float) -> _Machine:
        if "node" in want:
            return _Machine(key=key, node_name=str(want["node"]), first_seen=first_seen)
        address, port = str(want["address"]), int(want["port"])
        host = None
        if self.inventory is not None:
            try:
                host = self.inventory.host_by_address(address, port)
            except (KeyError, LookupError, ValueError):
                host = None
        node_name = None
        if host is not None:
            node_name = _dns_name(
                str(host_field(host, "hostname", "name", "id") or address.replace(".", "-"))
            )
        return _Machine(key, node_name, first_seen, address, port, host)

    def _node(self, obj: Mapping[str, Any], machine: _Machine) -> dict[str, Any]:
        cluster = obj["metadata"]["name"]
        # Nodes run the k0s version the ClusterDeployment asks for, else the template's default.
        version = _requested_k8s_version(obj.get("spec") or {}) or K8S_VERSION
        kubelet_version = f"{version.split('+')[0]}+k0s"
        node_name = machine.node_name or ""
        labels = {
            "kubernetes.io/hostname": node_name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": "amd64",
        }
        capacity: dict[str, str] = {"pods": "110", "ephemeral-storage": "1Ti"}
        annotations = {
            "cluster.x-k8s.io/cluster-name": cluster,
            "cluster.x-k8s.io/cluster-namespace": obj["metadata"]["namespace"],
            "cluster.x-k8s.io/machine": f"{cluster}-{machine.key.replace(':', '-').replace('.', '-')}",
        }
        host = machine.host
        if host is not None:
            capacity["cpu"] = _quantity(host_field(host, "cpu_cores", "cpu", "cpuCores") or 8, "")
            capacity["memory"] = _quantity(host_field(host, "memory", "memoryGi") or 32, "Gi")
            gpus = int(host_field(host, "gpu_count", "gpuCount") or 0)
            gpu_model = host_field(host, "gpu_model_id", "gpuModelId")
            instance = host_field(host, "gpu_model_id", "gpuModelId", "cpu_sku", "cpuSku")
            if instance:
                labels["node.kubernetes.io/instance-type"] = str(instance)
            if gpus > 0 and gpu_model is not None:
                # The GPU operator's device plugin advertises every GPU of the host; GPU Feature
                # Discovery labels the node with what NVML reports.
                capacity[GPU_RESOURCE] = str(gpus)
                product = host_field(host, "gpu_product", "gpuProduct")
                model = getattr(self.inventory, "gpu_models", {}).get(str(gpu_model))
                memory_gib = host_field(model, "memory_gib", "memoryGib") if model else None
                labels.update(
                    gfd_labels(str(product or gpu_model), gpus, int(memory_gib or 0) or None)
                )
            location = host_field(host, "location", "locationId")
            if location:
                labels["topology.kubernetes.io/region"] = str(location)
                labels["topology.kubernetes.io/zone"] = str(location)
            host_id = host_field(host, "id")
            if host_id:
                annotations["sim.colony.dev/host-id"] = str(host_id)
        else:
            capacity["cpu"] = GENERIC_WORKER["cpu"]
            capacity["memory"] = GENERIC_WORKER["memory"]
            labels["node.kubernetes.io/instance-type"] = GENERIC_WORKER["instanceType"]
        addresses = [{"type": "Hostname", "address": node_name}]
        if machine.address:
            addresses.insert(0, {"type": "InternalIP", "address": machine.address})
        now = now_iso()
        machine_id = uuid.uuid5(uuid.NAMESPACE_DNS, node_name).hex
        return {
            "metadata": {"name": node_name, "labels": labels, "annotations": annotations},
            "spec": {
                "providerID": f"k0smotron://{cluster}/{node_name}",
                "taints": [
                    {
                        "key": "node.kubernetes.io/not-ready",
                        "effect": "NoSchedule",
                        "timeAdded": now,
                    }
                ],
            },
            "status": {
                "capacity": capacity,
                "allocatable": dict(capacity),
                "addresses": addresses,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "False",
                        "reason": "KubeletNotReady",
                        "message": "container runtime network not ready: NetworkReady=false "
                        "reason:NetworkPluginNotReady message:Network plugin returns error: "
                        "cni plugin not initialized",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
                # Every field: the official client's models reject a partial NodeSystemInfo.
                "nodeInfo": {
                    "machineID": machine_id,
                    "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{cluster}.{node_name}")),
                    "bootID": str(uuid.uuid4()),
                    "kernelVersion": "6.8.0-60-generic",
                    "kubeProxyVersion": kubelet_version,
                    "kubeletVersion": kubelet_version,
                    "containerRuntimeVersion": "containerd://1.7.27",
                    "operatingSystem": "linux",
                    "architecture": "amd64",
                    "osImage": "Ubuntu 24.04.2 LTS",
                },
            },
        }

    # ------------------------------------------------------------------ deletion

    async def _reconcile_delete(
        self, rt: ResourceType, obj: dict[str, Any], now: float
    ) -> float | None:
        meta = obj["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        key = (namespace, name)
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = _ClusterState(now, int(meta.get("generation", 1)), now)
        if state.deleting_since is None:
            state.deleting_since = now
        status = dict(obj.get("status") or {})
        conditions = [dict(c) for c in status.get("conditions") or []]
        set_condition(
            conditions,
            DELETING,
            "True",
            DELETING_REASON,
            "Deleting the cluster",
            meta.get("generation"),
        )
        set_condition(
            conditions,
            READY,
            "False",
            DELETING_REASON,
            "ClusterDeployment is being deleted",
            meta.get("generation"),
        )
        status["conditions"] = conditions
        await write_status_if_changed(self.api, rt, obj, status)

        remaining = await self._delete_service_sets(namespace, name)
        remaining += await self._delete_machines(namespace, name)
        done_at = state.deleting_since + self.timing.delay("cluster.delete")
        if remaining or now < done_at:
            return max(done_at - now, 0.05) if not remaining else 0.1
        await self._stop_child(key)
        with contextlib.suppress(ApiError):
            await self.api.delete(SECRETS, namespace, f"{name}-kubeconfig")
        if CLUSTER_DEPLOYMENT_FINALIZER in (meta.get("finalizers") or []):
            await self.api.mutate(
                rt,
                namespace,
                name,
                lambda o: o["metadata"].update(
                    finalizers=[
                        f
                        for f in o["metadata"].get("finalizers") or []
                        if f != CLUSTER_DEPLOYMENT_FINALIZER
                    ]
                ),
            )
        self._states.pop(key, None)
        return None

    async def _delete_machines(self, namespace: str, cluster: str) -> int:
        """Delete the cluster's MachineDeployments and Machines (as CAPI's Cluster deletion does);
        how many Machines still exist."""
        remaining = 0
        for key in (MACHINE_DEPLOYMENTS, MACHINES):
            rt = rt_for(self.api, key)
            if rt is None:
                continue
            for item in await self.api.list(
                rt, namespace, label_selector=f"{CLUSTER_NAME_LABEL}={cluster}"
            ):
                if key == MACHINES:
                    remaining += 1
                if not item["metadata"].get("deletionTimestamp"):
                    with contextlib.suppress(ApiError):
                        await self.api.delete(rt, namespace, item["metadata"]["name"])
        return remaining

    async def _delete_service_sets(self, namespace: str, cluster: str) -> int:
        """Delete the cluster's ServiceSets; how many still exist."""
        rt = rt_for(self.api, SERVICE_SETS)
        if rt is None:
            return 0
        items = await self.api.list(rt, namespace)
        remaining = 0
        for service_set in items:
            if (service_set.get("spec") or {}).get("cluster") != cluster:
                continue
            remaining += 1
            if not service_set["metadata"].get("deletionTimestamp"):
                with contextlib.suppress(ApiError):
                    await self.api.delete(rt, namespace, service_set["metadata"]["name"])
            if await self.api.try_get(rt, namespace, service_set["metadata"]["name"]) is None:
                remaining -= 1
        return remaining


def remove_node_and_pods(store: ClusterStore, node_name: str) -> None:
    """Delete a node and, as the pod GC does for pods of a vanished node, its pods at once (the
    emulator's; a real control plane's pod GC does it there)."""
    pods, _ = store.list(PODS, field_selector=f"spec.nodeName={node_name}")
    for pod in pods:
        meta = pod["metadata"]
        with contextlib.suppress(ApiError):
            store.delete(PODS, meta["namespace"], meta["name"], grace_period_seconds=0)
    with contextlib.suppress(ApiError):
        store.delete(NODES, None, node_name)


def set_node_ready(store: ClusterStore, node_name: str) -> None:
    """What a kubelet's first Ready status does: the Node Ready, its not-ready taint gone."""
    now = now_iso()

    def ready(node: dict[str, Any]) -> None:
        spec = node.setdefault("spec", {})
        spec["taints"] = [
            t for t in spec.get("taints") or [] if t.get("key") != "node.kubernetes.io/not-ready"
        ]
        if not spec["taints"]:
            spec.pop("taints")
        for condition in node.setdefault("status", {}).setdefault("conditions", []):
            if condition.get("type") == "Ready":
                condition.update(
                    status="True",
                    reason="KubeletReady",
                    message="kubelet is posting ready status",
                    lastHeartbeatTime=now,
                    lastTransitionTime=now,
                )

    with contextlib.suppress(ApiError):
        store.mutate(NODES, None, node_name, ready)
