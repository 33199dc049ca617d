"""SIMULATOR. The sim's Helm chart catalog: which charts exist and how values become workload.

Used by the k0rdent services controller: a ServiceTemplate is valid when its chart source names a
chart of `sim/charts.yaml`, and installing a ServiceSet service renders that chart's Deployments and
Services into the child cluster. No Helm and no templates are involved; each chart is described by
the workload the real chart produces (see the header of `charts.yaml`).

Value keys the sim understands (later ones override earlier ones):

1. Chart defaults from `charts.yaml` (replicas, cpu, memory, gpu, ports).
2. The workspace operator's injected contract, as the hub's 0.3.0 charts read it:
   - `_exalsius.resources.replicas` (ignored by charts with `pinnedReplicas`, as the real ones do)
   - `_exalsius.resources.perReplica.cpu` / `.memory` (requests = limits)
   - `_exalsius.resources.perReplica.gpuCount` with `.gpuResourceName` (default `nvidia.com/gpu`)
   - `_exalsius.scheduling.nodeSelector`, `_exalsius.scheduling.tolerations`
3. Chart-specific `valuePaths` for replicas, cpu, memory and gpuCount (llm-d-model:
   `ms.decode.replicas`, `ms.decode.parallelism.tensor` as GPUs per replica, the targets of its
   WorkspaceClass resourceInjection; Colony's charts: `replicas`, `resources.cpu`,
   `resources.memory`, `resources.gpu`).
4. Plain keys, honoured by every chart (sim conveniences, closest to a generic chart):
   - `replicas` (int, overrides pinning)
   - `resources` (`{requests: {...}, limits: {...}}` verbatim, any resource names)
   - `nodeSelector` (map), `tolerations` (list)

Only the chart's primary workload takes these values; the others keep their defaults.
Anything else in the values (passwords, model URIs) is accepted and ignored.

Charts may `require` another chart on the cluster (colony-vllm needs colony-inference-stack's
Deployment `inference-gateway`); `missing_requirement` says what an install would fail on.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from sim.podnet.apps import APP_KINDS
from sim.podnet.network import SERVES_ANNOTATION

CATALOG_PATH = Path(__file__).with_name("charts.yaml")
HUB_REPOSITORY = "exalsius-workspace-hub"
COLONY_REPOSITORY = "colony-catalog"
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"

# Label Helm and the hub charts put on everything of a release; uninstall selects by it.
INSTANCE_LABEL = "app.kubernetes.io/instance"


class ChartError(ValueError):
    """A chart source or values the sim cannot install; the message is what KCM/Sveltos would say."""


@dataclass(frozen=True)
class PortSpec:
    """One Service port of a workload, and the simulated app its container answers with there
    (`sim.podnet.apps`: http, jupyter, openai, ssh)."""

    name: str
    port: int
    target_port: int
    serves: str = "http"


@dataclass(frozen=True)
class WorkloadSpec:
    """One Deployment (and its Service) a chart renders."""

    name: str
    container: str
    image: str
    primary: bool = False
    replicas: int = 1
    pinned_replicas: bool = False
    cpu: str = "100m"
    memory: str = "128Mi"
    gpu: int = 0
    ports: tuple[PortSpec, ...] = ()
    service_type: str = "ClusterIP"
    services_per_port: bool = False
    """Name every Service `<workload>-<port name>` (the exalsius/Colony chart convention Colony
    routes to); otherwise the first port's Service keeps the workload's own name."""
    model_value_paths: tuple[str, ...] = ()
    """Where the chart's values name the model an `openai` port serves (first one set wins)."""
    default_model: str = ""


@dataclass(frozen=True)
class Requirement:
    """A chart that must already be installed on the cluster, known by an object it creates."""

    chart: str
    version: str
    kind: str
    name: str


@dataclass(frozen=True)
class ChartSpec:
    """One chart version of one repository."""

    repository: str
    name: str
    version: str
    workloads: tuple[WorkloadSpec, ...]
    value_paths: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    requires: tuple[Requirement, ...] = ()

    @property
    def ref(self) -> str:
        """`repository/name:version`, for messages."""
        return f"{self.repository}/{self.name}:{self.version}"


def _workload(raw: Mapping[str, Any]) -> WorkloadSpec:
    for port in raw.get("ports") or []:
        if str(port.get("serves", "http")) not in APP_KINDS:
            raise ChartError(
                f"workload {raw.get('name')}: port {port.get('name')} serves "
                f"{port.get('serves')!r}, not one of {', '.join(APP_KINDS)}"
            )
    return WorkloadSpec(
        name=str(raw["name"]),
        container=str(raw.get("container", "main")),
        image=str(raw.get("image", "registry.k8s.io/pause:3.10")),
        primary=bool(raw.get("primary", False)),
        replicas=int(raw.get("replicas", 1)),
        pinned_replicas=bool(raw.get("pinnedReplicas", False)),
        cpu=str(raw.get("cpu", "100m")),
        memory=str(raw.get("memory", "128Mi")),
        gpu=int(raw.get("gpu", 0)),
        ports=tuple(
            PortSpec(
                str(p["name"]),
                int(p["port"]),
                int(p.get("targetPort", p["port"])),
                str(p.get("serves", "http")),
            )
            for p in raw.get("ports") or []
        ),
        service_type=str(raw.get("serviceType", "ClusterIP")),
        services_per_port=bool(raw.get("servicesPerPort", False)),
        model_value_paths=tuple(str(v) for v in raw.get("modelValuePaths") or ()),
        default_model=str(raw.get("defaultModel", "")),
    )


class ChartCatalog:
    """The charts the sim can install, keyed by (repository, chart, version)."""

    def __init__(self, charts: list[ChartSpec]) -> None:
        self._charts = {(c.repository, c.name, c.version): c for c in charts}

    @classmethod
    def from_yaml(cls, text: str) -> ChartCatalog:
        """Parse a catalog in the `charts.yaml` format."""
        data = yaml.safe_load(text) or {}
        charts: list[ChartSpec] = []
        for repo in data.get("repositories") or []:
            for chart in repo.get("charts") or []:
                charts.append(
                    ChartSpec(
                        repository=str(repo["name"]),
                        name=str(chart["name"]),
                        version=str(chart["version"]),
                        workloads=tuple(_workload(w) for w in chart.get("workloads") or []),
                        value_paths={
                            k: tuple(v) for k, v in (chart.get("valuePaths") or {}).items()
                        },
                        requires=tuple(
                            Requirement(
                                str(r["chart"]), str(r["version"]), str(r["kind"]), str(r["name"])
                            )
                            for r in chart.get("requires") or []
                        ),
                    )
                )
        return cls(charts)

    @classmethod
    def load(cls, path: Path | None = None) -> ChartCatalog:
        """The catalog at `path` (default: the bundled `sim/charts.yaml`)."""
        if path is None:
            return default_catalog()
        return cls.from_yaml(path.read_text())

    def all(self) -> list[ChartSpec]:
        """Every chart, sorted by name and version."""
        return sorted(self._charts.values(), key=lambda c: (c.repository, c.name, c.version))

    def get(self, repository: str, name: str, version: str) -> ChartSpec | None:
        """One chart version, or None."""
        return self._charts.get((repository, name, version))

    def resolve(self, template_spec: Mapping[str, Any]) -> ChartSpec:
        """The chart a ServiceTemplate's `spec` points at.

        Accepts `helm.chartSpec` (chart, version, sourceRef.name naming the HelmRepository) and
        `helm.chartRef` (a HelmChart/OCIRepository named `<chart>-<version with dashes>`, the
        convention of k0rdent's own templates).

        Raises:
            ChartError: no helm source, or a chart, version or repository the catalog lacks.
        """
        helm = template_spec.get("helm") or {}
        chart_spec = helm.get("chartSpec")
        if chart_spec:
            name = str(chart_spec.get("chart") or "")
            version = str(chart_spec.get("version") or "")
            source = chart_spec.get("sourceRef") or {}
            repository = str(source.get("name") or "")
            if not name:
                raise ChartError("spec.helm.chartSpec.chart must be set")
            if not repository:
                raise ChartError("spec.helm.chartSpec.sourceRef.name must be set")
            chart = self.get(repository, name, version)
            if chart is not None:
                return chart
            known = sorted(c.version for c in self._charts.values() if c.name == name)
            repos = sorted({c.repository for c in self._charts.values()})
            if repository not in repos:
                raise ChartError(
                    f"failed to get HelmRepository {repository}: helmrepositories.source.toolkit.fluxcd.io "
                    f'"{repository}" not found'
                )
            if not known:
                raise ChartError(f"chart {name} not found in repository {repository}")
            raise ChartError(
                f"no chart version found for {name}-{version or '*'} in repository {repository} "
                f"(available: {', '.join(known)})"
            )
        chart_ref = helm.get("chartRef")
        if chart_ref:
            ref_name = str(chart_ref.get("name") or "")
            for chart in self._charts.values():
                if ref_name == f"{chart.name}-{chart.version.replace('.', '-')}":
                    return chart
            kind = chart_ref.get("kind") or "HelmChart"
            raise ChartError(f'{kind} "{ref_name}" not found')
        if helm.get("chartSource"):
            raise ChartError("spec.helm.chartSource is not supported by the simulator")
        raise ChartError("spec.helm must set chartSpec or chartRef")

    def check(self, template_spec: Mapping[str, Any]) -> str | None:
        """The validation error of a ServiceTemplate `spec`, or None when it is valid."""
        try:
            self.resolve(template_spec)
        except ChartError as exc:
            return str(exc)
        return None


@lru_cache(maxsize=1)
def default_catalog() -> ChartCatalog:
    """The bundled catalog (parsed once)."""
    return ChartCatalog.from_yaml(CATALOG_PATH.read_text())


def _lookup(values: Mapping[str, Any], dotted: str) -> Any:
    node: Any = values
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


@dataclass
class _Resolved:
    replicas: int
    requests: dict[str, Any]
    limits: dict[str, Any]
    node_selector: dict[str, str]
    tolerations: list[dict[str, Any]]


def _resolve_primary(
    chart: ChartSpec, workload: WorkloadSpec, values: Mapping[str, Any]
) -> _Resolved:
    replicas = workload.replicas
    cpu: Any = workload.cpu
    memory: Any = workload.memory
    gpu_count: Any = workload.gpu
    gpu_resource = DEFAULT_GPU_RESOURCE
    node_selector: dict[str, str] = {}
    tolerations: list[dict[str, Any]] = []

    injected = values.get("_exalsius") or {}
    if not isinstance(injected, Mapping):
        raise ChartError("values._exalsius must be a map")
    resources = injected.get("resources") or {}
    per_replica = resources.get("perReplica") or {}
    if resources.get("replicas") is not None and not workload.pinned_replicas:
        replicas = resources["replicas"]
    cpu = per_replica.get("cpu", cpu)
    memory = per_replica.get("memory", memory)
    gpu_count = per_replica.get("gpuCount", gpu_count)
    gpu_resource = str(per_replica.get("gpuResourceName") or gpu_resource)
    scheduling = injected.get("scheduling") or {}
    node_selector.update(scheduling.get("nodeSelector") or {})
    tolerations.extend(scheduling.get("tolerations") or [])

    for path in chart.value_paths.get("replicas", ()):
        found = _lookup(values, path)
        if found is not None:
            replicas = found
            break
    for path in chart.value_paths.get("gpuCount", ()):
        found = _lookup(values, path)
        if found is not None:
            gpu_count = found
            break
    for path in chart.value_paths.get("cpu", ()):
        found = _lookup(values, path)
        if found is not None:
            cpu = found
            break
    for path in chart.value_paths.get("memory", ()):
        found = _lookup(values, path)
        if found is not None:
            memory = found
            break

    if values.get("replicas") is not None:
        replicas = values["replicas"]
    if values.get("nodeSelector") is not None:
        if not isinstance(values["nodeSelector"], Mapping):
            raise ChartError("values.nodeSelector must be a map of label to value")
        node_selector = {str(k): str(v) for k, v in values["nodeSelector"].items()}
    if values.get("tolerations") is not None:
        if not isinstance(values["tolerations"], list):
            raise ChartError("values.tolerations must be a list")
        tolerations = list(values["tolerations"])

    try:
        replicas = int(replicas)
        gpu = int(gpu_count or 0)
    except (TypeError, ValueError) as exc:
        raise ChartError(f"replicas and GPU counts must be integers: {exc}") from exc
    if replicas < 0 or gpu < 0:
        raise ChartError("replicas and GPU counts must not be negative")
    requests: dict[str, Any] = {"cpu": str(cpu), "memory": str(memory)}
    if gpu > 0:
        requests[gpu_resource] = str(gpu)
    limits = dict(requests)

    explicit = values.get("resources")
    if explicit is not None:
        if not isinstance(explicit, Mapping):
            raise ChartError("values.resources must be a map with requests and/or limits")
        if "requests" in explicit or "limits" in explicit:
            requests = {str(k): str(v) for k, v in (explicit.get("requests") or {}).items()}
            limits = {str(k): str(v) for k, v in (explicit.get("limits") or {}).items()}
    return _Resolved(replicas, requests, limits, node_selector, tolerations)


def missing_requirement(chart: ChartSpec, find: Callable[[Requirement], bool]) -> str | None:
    """Helm's error for the first requirement `find` says is not on the cluster, or None.

    Worded as a template's `fail` after a `lookup`: what the user sees of such charts.
    """
    for requirement in chart.requires:
        if not find(requirement):
            return (
                f"execution error at ({chart.name}/templates/prerequisites.yaml:4:6): "
                f"{chart.name} {chart.version} needs {requirement.chart} {requirement.version} "
                f"installed on the cluster first: no {requirement.kind} {requirement.name} "
                f"labelled helm.sh/chart={requirement.chart}-{requirement.version} found"
            )
    return None


def served_annotation(workload: WorkloadSpec, values: Mapping[str, Any]) -> str:
    """The pod annotation saying what the workload's container ports answer with (JSON, see
    `sim.podnet.network`); an `openai` port names the model from the values."""
    model = next(
        (str(found) for path in workload.model_value_paths if (found := _lookup(values, path))),
        workload.default_model,
    )
    served: dict[str, Any] = {}
    for port in workload.ports:
        if port.serves == "openai":
            served[str(port.target_port)] = {"app": "openai", "model": model}
        else:
            served[str(port.target_port)] = port.serves
    return json.dumps(served, sort_keys=True)


def render(
    chart: ChartSpec, release: str, namespace: str, values: Mapping[str, Any] | None
) -> list[dict[str, Any]]:
    """The Deployments and Services a Helm install of `chart` with `values` creates.

    Raises:
        ChartError: values the chart cannot render (wrong types), as `helm install` would fail.
    """
    values = values or {}
    chart_label = f"{chart.name}-{chart.version}"
    common_labels = {
        "app.kubernetes.io/managed-by": "Helm",
        INSTANCE_LABEL: release,
        "app.kubernetes.io/name": chart.name,
        "helm.sh/chart": chart_label,
    }
    annotations = {
        "meta.helm.sh/release-name": release,
        "meta.helm.sh/release-namespace": namespace,
    }
    manifests: list[dict[str, Any]] = []
    for workload in chart.workloads:
        name = workload.name.replace("{release}", release)
        if workload.primary:
            resolved = _resolve_primary(chart, workload, values)
        else:
            defaults = {"cpu": workload.cpu, "memory": workload.memory}
            if workload.gpu:
                defaults[DEFAULT_GPU_RESOURCE] = str(workload.gpu)
            resolved = _Resolved(workload.replicas, defaults, dict(defaults), {}, [])
        selector = {INSTANCE_LABEL: release, "app.kubernetes.io/component": name}
        pod_spec: dict[str, Any] = {
            "containers": [
                {
                    "name": workload.container,
                    "image": workload.image,
                    "ports": [
                        {"name": p.name, "containerPort": p.target_port, "protocol": "TCP"}
                        for p in workload.ports
                    ],
                    "resources": {"requests": resolved.requests, "limits": resolved.limits},
                }
            ],
        }
        if resolved.node_selector:
            pod_spec["nodeSelector"] = resolved.node_selector
        if resolved.tolerations:
            pod_spec["tolerations"] = copy.deepcopy(resolved.tolerations)
        labels = {**common_labels, "app.kubernetes.io/component": name}
        manifests.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": labels,
                    "annotations": dict(annotations),
                },
                "spec": {
                    "replicas": resolved.replicas,
                    "selector": {"matchLabels": selector},
                    "template": {
                        "metadata": {
                            "labels": dict(labels),
                            "annotations": {SERVES_ANNOTATION: served_annotation(workload, values)},
                        },
                        "spec": pod_spec,
                    },
                },
            }
        )
        for index, port in enumerate(workload.ports):
            # One Service per declared port: the first keeps the workload's name, unless the chart
            # names them all by port.
            first = index == 0 and not workload.services_per_port
            service_name = name if first else f"{name}-{port.name}"
            manifests.append(
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {
                        "name": service_name,
                        "namespace": namespace,
                        "labels": labels,
                        "annotations": dict(annotations),
                    },
                    "spec": {
                        "type": workload.service_type,
                        "selector": selector,
                        "ports": [
                            {
                                "name": port.name,
                                "port": port.port,
                                "targetPort": port.target_port,
                                "protocol": "TCP",
                            }
                        ],
                    },
                }
            )
    return manifests
