"""SIMULATOR. KCM/Sveltos' service side: ServiceTemplate validation and ServiceSet installs.

Started by `sim.controllers.k0rdent.K0rdentControllers` on the management cluster's API
(`sim.clusterapi`); installs go to each child cluster's API.

ServiceTemplate: `status.valid` from a check of its chart source against the sim's chart catalog
(`sim/charts.yaml`); invalid ones get `valid: false` and a `validationError`.

ServiceSet (`spec.cluster` names a ClusterDeployment in the same namespace), as KCM and Sveltos
run it: the finalizer `k0rdent.mirantis.com/service-set` is added first; each `spec.services[]`
entry is "helm installed" into that cluster's child as release `name` in namespace `namespace`:

- values: `values` (a YAML string), then every `valuesFrom` ConfigMap/Secret of the ServiceSet's
  namespace on the management cluster, read at install time, each data key a YAML map merged over
  what came before (deep, later wins: Sveltos' mergo.Merge WithOverride). A missing one fails the
  service with Sveltos' "Referenced resource: ConfigMap ns/name does not exist"; creating or
  changing it re-evaluates the ServiceSet (changed values upgrade the release);
- the namespace is created unless `helmOptions.installOptions.createNamespace` is false, the
  chart's Deployments and Services are rendered from the values (see `sim.charts`), and the
  child's Deployment controller, scheduler and kubelet turn them into pods;
- a chart that `requires` another on the cluster (colony-vllm needs colony-inference-stack) fails
  with the error its template's `fail` gives until that chart is installed, and is retried (as
  Sveltos retries failed installs) every `service.retry` delay;
- `status.services[].state`: Pending (no child yet) -> Provisioning (install delay) -> Deployed as
  soon as the objects exist, as `helm install` without `--wait` reports it: pods that cannot be
  scheduled (not enough GPUs) stay Pending and the release is still Deployed. With
  `helmOptions.wait: true` (or `atomic: true`, which implies it) the install waits for every pod to
  be ready and fails after `helmOptions.timeout` (default 5m, scaled by `SimTiming.timeout`) with
  Helm's "context deadline exceeded" and the scheduler's reason; `atomic` then uninstalls it.
  A release's outcome sticks until its values or template change, as a Helm revision does;
- removing a service from the spec (or `helmAction: Uninstall`) shows it `Deleting` for the
  `service.uninstall` delay, then uninstalls it (Deployments, their pods, Services, and the
  namespace if the install created it) and drops its entry; deleting the ServiceSet does the same
  for every service and removes the finalizer last, so the ServiceSet disappears only after the
  uninstall. A ServiceSet whose child cluster is gone has nothing left to uninstall.

ServiceTemplates are looked up in the ServiceSet's namespace, then in `kcm-system` (the sim does not
model template distribution between namespaces).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from sim.apiserver.errors import ApiError
from sim.apiserver.registry import (
    CONFIGMAPS,
    CRDS,
    DEPLOYMENTS,
    NAMESPACES,
    PODS,
    SECRETS,
    SERVICES,
    ResourceType,
)
from sim.apiserver.store import ClusterStore, WatchEvent
from sim.charts import (
    INSTANCE_LABEL,
    ChartCatalog,
    ChartError,
    Requirement,
    default_catalog,
    missing_requirement,
    render,
)
from sim.clusterapi import ClusterApi, cluster_api
from sim.controllers.daemonset import pod_is_ready
from sim.controllers.k0rdent_cluster import (
    CLUSTER_DEPLOYMENTS,
    FAILED,
    PROGRESSING,
    SERVICE_SETS,
    SERVICE_TEMPLATES,
    SUCCEEDED,
    ChildCluster,
    ChildClusters,
    now_iso,
    rt_for,
    set_condition,
    write_status_if_changed,
)
from sim.controllers.workqueue import ReconcileLoop
from sim.faults import FaultInjector
from sim.timing import SimTiming

log = logging.getLogger(__name__)

Key = tuple[str, str]

# Helm's default --timeout.
DEFAULT_HELM_TIMEOUT_SECONDS = 300.0
# How often a ServiceSet with an install in progress looks at the child's pods.
PROVISIONING_POLL_SECONDS = 0.1
TEMPLATE_FALLBACK_NAMESPACE = "kcm-system"
# k0rdent's ServiceSet finalizer (k0rdent/kcm api/v1beta1 serviceset_types.go).
SERVICE_SET_FINALIZER = "k0rdent.mirantis.com/service-set"
# The shortest retry of an install waiting for a prerequisite chart, even in instant mode.
PREREQUISITE_RETRY_FLOOR_SECONDS = 0.2
MANAGED_NAMESPACE_LABEL = "sim.colony.dev/created-by-release"

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(text: str) -> float:
    """A Go duration ("5m", "1h30m", "90s") in seconds.

    Raises:
        ValueError: not a Go duration.
    """
    text = text.strip()
    parts = _DURATION.findall(text)
    if not text or "".join(f"{n}{u}" for n, u in parts) != text:
        raise ValueError(f'time: invalid duration "{text}"')
    return sum(float(number) * _UNITS[unit] for number, unit in parts)


class ServiceTemplateController:
    """`status.valid` of ServiceTemplates, checked against the chart catalog."""

    def __init__(
        self, management: ClusterStore | ClusterApi, catalog: ChartCatalog | None = None
    ) -> None:
        self.api = cluster_api(management)
        self.catalog = catalog or default_catalog()
        self._loop: ReconcileLoop[Key] = ReconcileLoop(
            self.api, "k0rdent-servicetemplates", self._keys_for, self._reconcile, self._all_keys,
            watched=(SERVICE_TEMPLATES, CRDS.key),
        )  # fmt: skip

    async def run(self) -> None:
        await self._loop.run()

    async def _all_keys(self) -> list[Key]:
        rt = rt_for(self.api, SERVICE_TEMPLATES)
        if rt is None:
            return []
        items = await self.api.list(rt)
        return [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in items]

    async def _keys_for(self, event: WatchEvent) -> list[Key]:
        if event.rt.key == SERVICE_TEMPLATES:
            meta = event.object["metadata"]
            return [(meta["namespace"], meta["name"])]
        if event.rt.key == CRDS.key:
            return await self._all_keys()
        return []

    async def _reconcile(self, key: Key) -> float | None:
        rt = rt_for(self.api, SERVICE_TEMPLATES)
        if rt is None:
            return None
        obj = await self.api.try_get(rt, *key)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return None
        status = dict(obj.get("status") or {})
        spec = obj.get("spec") or {}
        try:
            chart = self.catalog.resolve(spec)
        except ChartError as exc:
            status.update(valid=False, validationError=str(exc))
            status.pop("chartVersion", None)
        else:
            status.update(valid=True, chartVersion=chart.version)
            status.pop("validationError", None)
        status["observedGeneration"] = obj["metadata"].get("generation", 1)
        await write_status_if_changed(self.api, rt, obj, status)
        return None


@dataclass
class _Release:
    """One installed (or installing) service of a ServiceSet in a child cluster."""

    name: str
    namespace: str
    template: str
    fingerprint: str
    started: float
    child: ChildCluster
    state: str = "Provisioning"
    failure: str | None = None
    created_namespace: bool = False
    applied: bool = False
    objects: list[tuple[str, str]] = field(default_factory=list)  # (kind, name)
    transition: str = field(default_factory=now_iso)
    version: str = ""
    # When the service left the spec (or the ServiceSet is being deleted): Helm uninstalls it.
    uninstall_at: float | None = None


class _Retry(Exception):
    """A failure Sveltos retries (or re-evaluates when what it waits for appears)."""


class ServiceSetController:
    """Installs ServiceSet services into child clusters (see the module docstring)."""

    def __init__(
        self,
        management: ClusterStore | ClusterApi,
        timing: SimTiming,
        faults: FaultInjector,
        children: ChildClusters,
        catalog: ChartCatalog | None = None,
    ) -> None:
        self.api = cluster_api(management)
        self.timing = timing
        self.faults = faults
        self.children = children
        self.catalog = catalog or default_catalog()
        self._releases: dict[Key, dict[tuple[str, str], _Release]] = {}
        self._loop: ReconcileLoop[Key] = ReconcileLoop(
            self.api, "k0rdent-servicesets", self._keys_for, self._reconcile, self._all_keys,
            watched=(SERVICE_SETS, SERVICE_TEMPLATES, CLUSTER_DEPLOYMENTS, CONFIGMAPS.key, SECRETS.key),
        )  # fmt: skip

    async def run(self) -> None:
        await self._loop.run()

    async def _all_keys(self) -> list[Key]:
        rt = rt_for(self.api, SERVICE_SETS)
        if rt is None:
            return []
        items = await self.api.list(rt)
        return [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in items]

    async def _keys_for(self, event: WatchEvent) -> Iterable[Key]:
        key = event.rt.key
        meta = event.object.get("metadata") or {}
        if key == SERVICE_SETS:
            return [(meta["namespace"], meta["name"])]
        if key == SERVICE_TEMPLATES:
            return await self._all_keys()
        if key in (CLUSTER_DEPLOYMENTS, CONFIGMAPS.key, SECRETS.key):
            # A ClusterDeployment, or a ConfigMap/Secret a service's valuesFrom may name: Sveltos
            # tracks referenced objects and re-evaluates on their changes.
            rt = rt_for(self.api, SERVICE_SETS)
            if rt is None:
                return []
            items = await self.api.list(rt, meta.get("namespace"))
            if key == CLUSTER_DEPLOYMENTS:
                return [
                    (o["metadata"]["namespace"], o["metadata"]["name"])
                    for o in items
                    if (o.get("spec") or {}).get("cluster") == meta.get("name")
                ]
            kind = "ConfigMap" if key == CONFIGMAPS.key else "Secret"
            return [
                (o["metadata"]["namespace"], o["metadata"]["name"])
                for o in items
                if any(
                    ref.get("kind") == kind and ref.get("name") == meta.get("name")
                    for svc in (o.get("spec") or {}).get("services") or []
                    for ref in svc.get("valuesFrom") or []
                )
            ]
        return []

    # ------------------------------------------------------------------ reconcile

    async def _reconcile(self, key: Key) -> float | None:
        now = asyncio.get_running_loop().time()
        rt = rt_for(self.api, SERVICE_SETS)
        obj = None if rt is None else await self.api.try_get(rt, *key)
        releases = self._releases.setdefault(key, {})
        if rt is None or obj is None:
            # Gone without our finalizer's say (finalizer removed by hand): uninstall now.
            for release in list(releases.values()):
                await self._uninstall(release)
            self._releases.pop(key, None)
            return None
        meta = obj["metadata"]
        namespace = key[0]
        spec = obj.get("spec") or {}
        cluster = str(spec.get("cluster") or "")
        child = self.children.get(namespace, cluster)
        for release_key, release in list(releases.items()):
            if child is None or release.child is not child:
                # The child cluster went away (or was replaced): nothing of the release is left.
                releases.pop(release_key)
        deleting = bool(meta.get("deletionTimestamp"))
        if not deleting and SERVICE_SET_FINALIZER not in (meta.get("finalizers") or []):
            obj = await self.api.mutate(
                rt, namespace, key[1],
                lambda o: o["metadata"].setdefault("finalizers", []).append(SERVICE_SET_FINALIZER),
            )  # fmt: skip
        wanted = {} if deleting else {
            (str(s.get("name")), str(s.get("namespace") or "default")): s
            for s in spec.get("services") or []
            if s.get("helmAction", "Install") != "Uninstall"
        }  # fmt: skip
        waits: list[float] = []
        for release_key, release in list(releases.items()):
            if release_key in wanted:
                release.uninstall_at = None
                continue
            if release.uninstall_at is None:
                release.uninstall_at = now + self.timing.delay("service.uninstall")
            if now >= release.uninstall_at:
                await self._uninstall(releases.pop(release_key))
            else:
                waits.append(release.uninstall_at - now)

        injected = self.faults.service_set_failure(namespace, key[1])
        previous_entries = (obj.get("status") or {}).get("services") or []
        entries: list[dict[str, Any]] = []
        for (svc_name, svc_ns), service in wanted.items():
            template_name = str(service.get("template") or "")
            entry: dict[str, Any] = {
                "name": svc_name,
                "namespace": svc_ns,
                "template": template_name,
                "type": "Helm",
            }
            previous = _previous_entry(previous_entries, svc_name, svc_ns)
            if injected is not None:
                self._set_state(entry, previous, "Failed", injected)
            elif child is None:
                self._set_state(
                    entry, previous, "Pending",
                    f"waiting for ClusterDeployment {namespace}/{cluster} to be ready",
                )  # fmt: skip
                waits.append(0.5)
            else:
                state, message, version, wait = await self._reconcile_service(
                    releases, (svc_name, svc_ns), service, child, namespace, now
                )
                if version:
                    entry["version"] = version
                self._set_state(entry, previous, state, message)
                if wait is not None:
                    waits.append(wait)
            entries.append(entry)
        for (svc_name, svc_ns), release in releases.items():
            if release.uninstall_at is None:
                continue
            entry = {"name": svc_name, "namespace": svc_ns, "template": release.template, "type": "Helm"}  # fmt: skip
            if release.version:
                entry["version"] = release.version
            self._set_state(entry, _previous_entry(previous_entries, svc_name, svc_ns), "Deleting", None)  # fmt: skip
            entries.append(entry)

        await self._write_status(rt, obj, entries, cluster)
        if deleting and not releases:
            # Everything is uninstalled: let the ServiceSet go.
            await self.api.mutate(
                rt, namespace, key[1],
                lambda o: o["metadata"].__setitem__(
                    "finalizers",
                    [f for f in o["metadata"].get("finalizers") or [] if f != SERVICE_SET_FINALIZER],
                ),
            )  # fmt: skip
            self._releases.pop(key, None)
            return None
        return min(waits) if waits else None

    # ------------------------------------------------------------------ persistence

    def export_state(self) -> list[dict[str, Any]]:
        """Every release (installed or installing), JSON-shaped, for a persisted world: what Sveltos
        keeps in its ClusterSummaries, so a restart neither reinstalls nor forgets to uninstall.
        Times are offsets from now (`import_state`)."""
        now = asyncio.get_running_loop().time()
        clusters = {id(child): key for key, child in self.children.items()}
        exported: list[dict[str, Any]] = []
        for (namespace, name), releases in self._releases.items():
            for release in releases.values():
                cluster = clusters.get(id(release.child))
                if cluster is None:
                    continue  # its child cluster is gone: the next reconcile drops it anyway
                exported.append(
                    {
                        "serviceSet": [namespace, name],
                        "cluster": list(cluster),
                        "name": release.name,
                        "namespace": release.namespace,
                        "template": release.template,
                        "fingerprint": release.fingerprint,
                        "started": release.started - now,
                        "state": release.state,
                        "failure": release.failure,
                        "createdNamespace": release.created_namespace,
                        "applied": release.applied,
                        "objects": [list(o) for o in release.objects],
                        "transition": release.transition,
                        "version": release.version,
                        "uninstallAt": (
                            None if release.uninstall_at is None else release.uninstall_at - now
                        ),
                    }
                )
        return exported

    def import_state(self, releases: Iterable[Mapping[str, Any]]) -> None:
        """The releases `export_state` wrote, in the child clusters already restored (before
        `run`); a release whose child cluster did not come back is dropped."""
        now = asyncio.get_running_loop().time()
        for entry in releases:
            child = self.children.get(*entry["cluster"])
            if child is None:
                continue
            uninstall_at = entry.get("uninstallAt")
            release = _Release(
                name=str(entry["name"]),
                namespace=str(entry["namespace"]),
                template=str(entry["template"]),
                fingerprint=str(entry["fingerprint"]),
                started=now + float(entry["started"]),
                child=child,
                state=str(entry["state"]),
                failure=entry.get("failure"),
                created_namespace=bool(entry.get("createdNamespace")),
                applied=bool(entry.get("applied")),
                objects=[(str(kind), str(name)) for kind, name in entry.get("objects") or ()],
                transition=str(entry.get("transition") or now_iso()),
                version=str(entry.get("version") or ""),
                uninstall_at=None if uninstall_at is None else now + float(uninstall_at),
            )
            key = (str(entry["serviceSet"][0]), str(entry["serviceSet"][1]))
            self._releases.setdefault(key, {})[(release.name, release.namespace)] = release

    def _set_state(
        self, entry: dict[str, Any], previous: Mapping[str, Any], state: str, message: str | None
    ) -> None:
        entry["state"] = state
        if state == "Failed" and message:
            entry["failureMessage"] = message
        elif message and state == "Pending":
            entry["conditions"] = [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "Pending",
                    "message": message,
                    "lastTransitionTime": previous.get("lastStateTransitionTime") or now_iso(),
                }
            ]
        entry["lastStateTransitionTime"] = (
            previous.get("lastStateTransitionTime")
            if previous.get("state") == state and previous.get("lastStateTransitionTime")
            else now_iso()
        )

    async def _template(self, namespace: str, name: str) -> dict[str, Any] | None:
        rt = rt_for(self.api, SERVICE_TEMPLATES)
        if rt is None:
            return None
        for ns in (namespace, TEMPLATE_FALLBACK_NAMESPACE):
            template = await self.api.try_get(rt, ns, name)
            if template is not None:
                return template
        return None

    async def _values(self, namespace: str, service: Mapping[str, Any]) -> dict[str, Any]:
        """`values`, then every `valuesFrom` object merged over it, as Sveltos merges them.

        Raises:
            ChartError: values that are not a YAML map.
            _Retry: a referenced ConfigMap or Secret is missing (Sveltos' message).
        """
        try:
            values = yaml.safe_load(service.get("values") or "") or {}
        except yaml.YAMLError as exc:
            raise ChartError(f"values are not valid YAML: {exc}") from exc
        if not isinstance(values, dict):
            raise ChartError("values must be a YAML map")
        for ref in service.get("valuesFrom") or []:
            kind, name = str(ref.get("kind") or ""), str(ref.get("name") or "")
            rt = CONFIGMAPS if kind == "ConfigMap" else SECRETS
            source = await self.api.try_get(rt, namespace, name)
            if source is None:
                raise _Retry(f"Referenced resource: {kind} {namespace}/{name} does not exist")
            data = dict(source.get("data") or {})
            for data_key in sorted(data):
                text = data[data_key]
                if rt is SECRETS:
                    text = base64.b64decode(text).decode()
                try:
                    more = yaml.safe_load(text) or {}
                except yaml.YAMLError as exc:
                    raise ChartError(f"{kind} {namespace}/{name} key {data_key}: {exc}") from exc
                if not isinstance(more, dict):
                    raise ChartError(f"{kind} {namespace}/{name} key {data_key} is not a YAML map")
                values = _merge(values, more)
        return values

    async def _reconcile_service(
        self,
        releases: dict[tuple[str, str], _Release],
        release_key: tuple[str, str],
        service: Mapping[str, Any],
        child: ChildCluster,
        namespace: str,
        now: float,
    ) -> tuple[str, str | None, str, float | None]:
        """(state, message, chart version, seconds until the next look or None)."""
        name, target_ns = release_key
        template_name = str(service.get("template") or "")
        template = await self._template(namespace, template_name)
        if template is None:
            return "Failed", f"ServiceTemplate {namespace}/{template_name} not found", "", None
        template_status = template.get("status") or {}
        if not template_status.get("valid"):
            if "valid" not in template_status:
                return "Provisioning", None, "", PROVISIONING_POLL_SECONDS
            error = template_status.get("validationError") or "not valid"
            return "Failed", f"ServiceTemplate {template_name} is not valid: {error}", "", None
        helm_options = service.get("helmOptions") or {}
        try:
            chart = self.catalog.resolve(template.get("spec") or {})
            values = await self._values(namespace, service)
            manifests = render(chart, name, target_ns, values)
            timeout = parse_duration(str(helm_options.get("timeout") or "5m"))
        except _Retry as exc:
            # Sveltos: a non-retriable error, re-evaluated when the referenced object appears.
            return "Failed", str(exc), "", None
        except (ChartError, ValueError) as exc:
            return "Failed", f"Helm install failed: {exc}", "", None
        # --atomic implies --wait (Helm); Sveltos passes both through.
        wait = bool(helm_options.get("wait") or helm_options.get("atomic"))
        fingerprint = hashlib.sha256(
            json.dumps(
                [template_name, values, target_ns, wait], sort_keys=True, default=str
            ).encode()
        ).hexdigest()
        release = releases.get(release_key)
        if release is None or release.fingerprint != fingerprint:
            release = _Release(
                name, target_ns, template_name, fingerprint, now, child,
                version=chart.version,
                created_namespace=release.created_namespace if release else False,
                objects=release.objects if release else [],
            )  # fmt: skip
            releases[release_key] = release
        if release.state in ("Deployed", "Failed"):
            return release.state, release.failure, release.version, None

        install_at = release.started + self.timing.delay("service.install")
        if now < install_at:
            return "Provisioning", None, release.version, install_at - now
        if not release.applied:
            installed = {r for r in chart.requires if await _installed(child.api, r)}
            missing = missing_requirement(chart, installed.__contains__)
            if missing is not None:
                # Sveltos retries a failed install: it goes through once the prerequisite is there.
                release.started = now
                return (
                    "Failed",
                    f"Helm install failed for release {target_ns}/{name} with chart "
                    f"{chart.name}@{chart.version}: {missing}",
                    release.version,
                    max(self.timing.delay("service.retry"), PREREQUISITE_RETRY_FLOOR_SECONDS),
                )
            problem = await self._apply(release, child, manifests, service)
            if problem is not None:
                release.state, release.failure = "Failed", problem
                return "Failed", problem, release.version, None
            release.applied = True
        if not wait:
            # Helm without --wait: the release is deployed once its objects are created, whether
            # or not their pods can be scheduled (a Pending pod is the Deployment's business).
            release.state = "Deployed"
            return "Deployed", None, release.version, None

        waiting = await self._not_ready(child.api, release)
        if not waiting:
            release.state = "Deployed"
            return "Deployed", None, release.version, None
        deadline = release.started + self.timing.timeout(timeout)
        if now >= deadline:
            release.state = "Failed"
            release.failure = (
                f"Helm install failed for release {target_ns}/{name} with chart "
                f"{chart.name}@{chart.version}: context deadline exceeded: {waiting}"
            )
            if helm_options.get("atomic"):
                await self._uninstall(release)
                release.objects, release.created_namespace = [], False
                release.failure = (
                    f"Helm install failed for release {target_ns}/{name} with chart "
                    f"{chart.name}@{chart.version}: release {name} failed, and has been "
                    f"uninstalled due to atomic being set: context deadline exceeded: {waiting}"
                )
            return "Failed", release.failure, release.version, None
        return "Provisioning", None, release.version, min(PROVISIONING_POLL_SECONDS, deadline - now)

    async def _apply(
        self,
        release: _Release,
        child: ChildCluster,
        manifests: list[dict[str, Any]],
        service: Mapping[str, Any],
    ) -> str | None:
        """Create or update the release's objects in the child; a failure message or None."""
        api = child.api
        helm_options = service.get("helmOptions") or {}
        install_options = helm_options.get("installOptions") or {}
        create_namespace = install_options.get(
            "createNamespace", helm_options.get("createNamespace", True)
        )
        if await api.try_get(NAMESPACES, None, release.namespace) is None:
            if not create_namespace:
                return (
                    f"Helm install failed: create: failed to create: namespaces "
                    f'"{release.namespace}" not found'
                )
            await api.create(
                NAMESPACES,
                {
                    "metadata": {
                        "name": release.namespace,
                        "labels": {MANAGED_NAMESPACE_LABEL: release.name},
                    }
                },
            )
            release.created_namespace = True
        kinds: dict[str, ResourceType] = {"Deployment": DEPLOYMENTS, "Service": SERVICES}
        rendered = {(m["kind"], m["metadata"]["name"]) for m in manifests}
        for kind, obj_name in release.objects:
            if (kind, obj_name) not in rendered:
                with contextlib.suppress(ApiError):
                    await api.delete(kinds[kind], release.namespace, obj_name)
        for manifest in manifests:
            rt = kinds[manifest["kind"]]
            obj_name = manifest["metadata"]["name"]
            existing = await api.try_get(rt, release.namespace, obj_name)
            if existing is None:
                await api.create(rt, manifest, namespace=release.namespace)
            else:

                def update(obj: dict[str, Any], manifest: dict[str, Any] = manifest) -> None:
                    obj["metadata"]["labels"] = manifest["metadata"]["labels"]
                    spec = dict(manifest["spec"])
                    for kept in ("clusterIP", "clusterIPs"):
                        if kept in (obj.get("spec") or {}):
                            spec[kept] = obj["spec"][kept]
                    obj["spec"] = spec

                await api.mutate(rt, release.namespace, obj_name, update)
        release.objects = sorted(rendered)
        return None

    @staticmethod
    async def _not_ready(api: ClusterApi, release: _Release) -> str:
        """Why the release's pods are not all running yet ("" when they are)."""
        for kind, obj_name in release.objects:
            if kind != "Deployment":
                continue
            deployment = await api.try_get(DEPLOYMENTS, release.namespace, obj_name)
            if deployment is None:
                return f"Deployment {release.namespace}/{obj_name} not found"
            replicas = int((deployment.get("spec") or {}).get("replicas", 1))
            pods = await api.list(
                PODS, release.namespace, label_selector=f"{INSTANCE_LABEL}={release.name}"
            )
            uid = deployment["metadata"].get("uid")
            owned = [
                p
                for p in pods
                if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])
                and not p["metadata"].get("deletionTimestamp")
            ]
            for pod in owned:
                if pod_is_ready(pod):
                    continue
                for condition in (pod.get("status") or {}).get("conditions") or []:
                    if (
                        condition.get("type") == "PodScheduled"
                        and condition.get("status") == "False"
                    ):
                        return (
                            f"pod {pod['metadata']['name']} is {condition.get('reason')}: "
                            f"{condition.get('message')}"
                        )
                return f"pod {pod['metadata']['name']} is not running yet"
            ready = sum(1 for p in owned if pod_is_ready(p))
            if ready < replicas:
                return (
                    f"Deployment {release.namespace}/{obj_name}: {ready}/{replicas} replicas ready"
                )
        return ""

    async def _uninstall(self, release: _Release) -> None:
        api = release.child.api
        kinds: dict[str, ResourceType] = {"Deployment": DEPLOYMENTS, "Service": SERVICES}
        for kind, obj_name in release.objects:
            with contextlib.suppress(ApiError):
                await api.delete(kinds[kind], release.namespace, obj_name)
        if release.created_namespace:
            with contextlib.suppress(ApiError):
                await api.delete(NAMESPACES, None, release.namespace)

    async def _write_status(
        self,
        rt: ResourceType | None,
        obj: dict[str, Any],
        entries: list[dict[str, Any]],
        cluster: str,
    ) -> None:
        if rt is None:
            return
        meta = obj["metadata"]
        status = dict(obj.get("status") or {})
        deployed = sum(1 for e in entries if e["state"] == "Deployed")
        failed = [e for e in entries if e["state"] == "Failed"]
        status["services"] = entries
        status["deployed"] = bool(entries) and deployed == len(entries)
        status["provider"] = {"ready": True, "suspended": False}
        cd_rt = rt_for(self.api, CLUSTER_DEPLOYMENTS)
        cd = None if cd_rt is None else await self.api.try_get(cd_rt, meta["namespace"], cluster)
        if cd is not None:
            status["cluster"] = {
                "apiVersion": cd["apiVersion"],
                "kind": cd["kind"],
                "name": cluster,
                "namespace": meta["namespace"],
                "uid": cd["metadata"].get("uid"),
            }
        conditions = [dict(c) for c in status.get("conditions") or []]
        if failed:
            reason, state = FAILED, "False"
        elif deployed == len(entries):
            reason, state = SUCCEEDED, "True"
        else:
            reason, state = PROGRESSING, "False"
        set_condition(
            conditions, "ServicesInReadyState", state, reason, f"{deployed}/{len(entries)}",
            meta.get("generation"),
        )  # fmt: skip
        # k0rdent's ServiceSet status has no observedGeneration of its own: the generation a
        # status speaks of is its conditions' (set just above), as KCM's updateCondition sets it.
        status["conditions"] = conditions
        await write_status_if_changed(self.api, rt, obj, status)


def _previous_entry(entries: Iterable[Mapping[str, Any]], name: str, namespace: str) -> Mapping[str, Any]:  # fmt: skip
    return next((e for e in entries if e.get("name") == name and e.get("namespace") == namespace), {})  # fmt: skip


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Deep merge, `override` winning (mergo.Merge with WithOverride, as Sveltos merges)."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


async def _installed(api: ClusterApi, requirement: Requirement) -> bool:
    """Whether a chart is installed on the cluster: an object of it, labelled by Helm, exists."""
    if requirement.kind != "Deployment":
        return False
    chart_label = f"helm.sh/chart={requirement.chart}-{requirement.version}"
    items = await api.list(DEPLOYMENTS, label_selector=chart_label)
    return any(o["metadata"]["name"] == requirement.name for o in items)
