"""Manifests users already have, as Colony requests: `colonyctl apply -f` and the HTTP API call this.

One YAML file may hold several documents (and `kind: List`). Each becomes one validated request:

| apiVersion | kind | becomes |
| --- | --- | --- |
| `workspaces.exalsius.ai/v1` | WorkspaceClass | `WorkspaceClassSpec` |
| `workspaces.exalsius.ai/v1` | WorkspaceDeployment | `WorkspaceSpec` (cluster = the ClusterDeployment's name; its namespaces: below) |
| `k0rdent.mirantis.com/v1beta1` | ServiceTemplate | `ServiceTemplateManifest` (shape-checked, passed through) |
| `infra.exalsius.ai/v1` | Colony | `ColonySpec` (`spec.colonyClusters[]`) |
| `colony.dev/v1` | Cluster | `models.cluster.ClusterSpec` |
| `colony.dev/v1` | WorkspaceClass | `WorkspaceClassSpec` (the exalsius spec, same fields) |
| `colony.dev/v1` | Workspace | `WorkspaceSpec` (`class`, `cluster`, `resources`, `values`, `answers`, ...) |
| `colony.dev/v1` | Colony | `ColonySpec`, whose clusters may give `locationId` and `nodePools` |

Namespaces of workspaces: a workspace's k0rdent objects (its ServiceSet, its values Secret) go
where Colony's ClusterDeployments are, `kcm-system` (`models.cluster.DEFAULT_NAMESPACE`), as the
exalsius operator puts a WorkspaceDeployment's ServiceSet in its `clusterDeploymentRef.namespace`.
So a WorkspaceDeployment's `spec.clusterDeploymentRef.namespace` and `metadata.namespace` (and a
Colony Workspace's `metadata.namespace`) are honoured when they name that namespace (or, for
`metadata.namespace`, when left out), and refused with the field named otherwise: no Colony
cluster has its ClusterDeployment anywhere else.

Validation is strict, as `kubectl apply` (strict field validation) and the CRDs would be: unknown
fields are refused, and every refusal names the document and the field, e.g.
`document 2 (WorkspaceClass jupyter): spec.accessEndpoints[0].port: port must be from 1 to 65535`.
Pure: parsing YAML text is the only thing done here; nothing is applied.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field, ValidationError, ValidationInfo, model_validator

from models.base import USER_INPUT, ColonyModel, refusal_at, rule, user_input, user_rule
from models.bounds import (
    InputError,
    annotations_bound_problem,
    bounded,
    field_of,
    labels_bound_problem,
    load_yaml_documents,
    user_bound,
    value_problem,
)
from models.cluster import DEFAULT_NAMESPACE, ClusterSpec
from models.identity import colony_member_name
from models.names import OrganizationName, derived_mark_problem, labels_problem, name_problem
from models.node_pool import NodePoolSpec
from models.quantity import parse_go_duration
from models.workspace import WorkspaceSpec
from models.workspace_class import WorkspaceClassSpec, dns_label_problem, object_name_problem

EXALSIUS_WORKSPACES = "workspaces.exalsius.ai/v1"
EXALSIUS_INFRA = "infra.exalsius.ai/v1"
K0RDENT = "k0rdent.mirantis.com/v1beta1"
COLONY = "colony.dev/v1"

TOP_LEVEL_FIELDS = {"apiVersion", "kind", "metadata", "spec", "status"}
"""`status` is accepted and ignored, as an API server ignores it on the main resource."""


class ManifestKind(StrEnum):
    """What a document asks for, whichever API spelled it."""

    WORKSPACE_CLASS = "WorkspaceClass"
    WORKSPACE = "Workspace"
    SERVICE_TEMPLATE = "ServiceTemplate"
    COLONY = "Colony"
    CLUSTER = "Cluster"


SUPPORTED: dict[tuple[str, str], ManifestKind] = {
    (EXALSIUS_WORKSPACES, "WorkspaceClass"): ManifestKind.WORKSPACE_CLASS,
    (EXALSIUS_WORKSPACES, "WorkspaceDeployment"): ManifestKind.WORKSPACE,
    (K0RDENT, "ServiceTemplate"): ManifestKind.SERVICE_TEMPLATE,
    (EXALSIUS_INFRA, "Colony"): ManifestKind.COLONY,
    (COLONY, "Cluster"): ManifestKind.CLUSTER,
    (COLONY, "WorkspaceClass"): ManifestKind.WORKSPACE_CLASS,
    (COLONY, "Workspace"): ManifestKind.WORKSPACE,
    (COLONY, "Colony"): ManifestKind.COLONY,
}


def _cluster_entry_problem(name: str) -> str | None:
    return name_problem("cluster", name) or derived_mark_problem("cluster", name)


def _colony_name_problem(name: str) -> str | None:
    return dns_label_problem("colony", name) or derived_mark_problem("colony", name)


def _cluster_labels_problem(labels: Mapping[str, str]) -> str | None:
    problem = labels_problem(labels)
    return f"clusterLabels: {problem}" if problem else None


# --- Pass-through and Colony shapes -------------------------------------------------------------


class ServiceTemplateManifest(ColonyModel):
    """A k0rdent ServiceTemplate, shape-checked and kept as written (Colony applies it unchanged)."""

    name: str
    namespace: str = DEFAULT_NAMESPACE
    labels: dict[str, str] = Field(default_factory=dict)
    spec: dict[str, Any]

    @property
    def chart(self) -> tuple[str, str, str] | None:
        """(HelmRepository, chart, version) of a `helm.chartSpec` template, else None."""
        chart_spec = (self.spec.get("helm") or {}).get("chartSpec")
        if not isinstance(chart_spec, Mapping):
            return None
        source = chart_spec.get("sourceRef") or {}
        return (
            str(source.get("name", "")),
            str(chart_spec["chart"]),
            str(chart_spec.get("version", "")),
        )

    def to_object(self) -> dict[str, Any]:
        """The ServiceTemplate object to create on the management cluster."""
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if self.labels:
            metadata["labels"] = dict(self.labels)
        return {
            "apiVersion": K0RDENT,
            "kind": "ServiceTemplate",
            "metadata": metadata,
            "spec": self.spec,
        }


_SOURCE_KINDS = ("HelmRepository", "GitRepository", "Bucket")
_CHART_REF_KINDS = ("OCIRepository", "HelmChart", "ExternalArtifact")


def _exactly_one_problem(
    field: str, value: Any, keys: tuple[str, str, str]
) -> tuple[str, str] | None:
    """(field, message) when `value` is not a map holding exactly one of the `keys`, or None."""
    if not isinstance(value, Mapping):
        return field, f"{field} must be a map"
    given = [key for key in keys if value.get(key) is not None]
    if not given:
        return field, f"one of {keys[0]}, {keys[1]} or {keys[2]} must be set"
    if len(given) > 1:
        return field, (
            f"{keys[0]}, {keys[1]} and {keys[2]} are mutually exclusive; got {', '.join(given)}"
        )
    return None


def service_template_spec_problem(spec: Any) -> tuple[str, str] | None:
    """(field, message) of the first thing k0rdent's ServiceTemplate schema refuses, or None.

    The structural rules of k0rdent's CRD that decide whether a template can deploy anything:
    exactly one of helm, kustomize or resources; exactly one chart source; a chart and a source.
    """
    problem = _exactly_one_problem("spec", spec, ("helm", "kustomize", "resources"))
    if problem:
        return problem
    helm = spec.get("helm")
    if helm is None:
        return None
    problem = _exactly_one_problem("spec.helm", helm, ("chartSpec", "chartRef", "chartSource"))
    if problem:
        return problem
    if helm.get("chartSpec") is not None:
        chart_spec = helm["chartSpec"]
        if (
            not isinstance(chart_spec, Mapping)
            or not isinstance(chart_spec.get("chart"), str)
            or not chart_spec["chart"]
        ):
            return "spec.helm.chartSpec.chart", "the chart's name is required"
        if "version" in chart_spec and not isinstance(chart_spec["version"], str):
            return "spec.helm.chartSpec.version", 'version must be a string (quote it: "1.0.0")'
        # Required by k0rdent's CRD (Flux's HelmChartSpec): the management cluster answers 422
        # without it, after the request has left; refuse it here, naming the field.
        interval = chart_spec.get("interval")
        if not isinstance(interval, str) or not interval:
            return (
                "spec.helm.chartSpec.interval",
                "required: how often the chart source is checked, a duration such as 10m",
            )
        try:
            parse_go_duration(interval)
        except ValueError as exc:
            return "spec.helm.chartSpec.interval", str(exc)
        source = chart_spec.get("sourceRef")
        if not isinstance(source, Mapping) or not source.get("name"):
            return "spec.helm.chartSpec.sourceRef", "sourceRef with kind and name is required"
        if source.get("kind") not in _SOURCE_KINDS:
            return (
                "spec.helm.chartSpec.sourceRef.kind",
                f"kind must be one of {', '.join(_SOURCE_KINDS)}",
            )
    if helm.get("chartRef") is not None:
        chart_ref = helm["chartRef"]
        if not isinstance(chart_ref, Mapping) or not chart_ref.get("name"):
            return "spec.helm.chartRef.name", "the referenced object's name is required"
        if chart_ref.get("kind") not in _CHART_REF_KINDS:
            return "spec.helm.chartRef.kind", f"kind must be one of {', '.join(_CHART_REF_KINDS)}"
    return None


CLAIMED_CLUSTER_DEPLOYMENT_KEYS = ("template", "credential")
"""What a colony's cluster claimed from a location takes of its `clusterDeploymentSpec`."""


class ColonyClusterSpec(ColonyModel):
    """One cluster of a Colony (an exalsius `spec.colonyClusters[]` entry, plus Colony's pools)."""

    cluster_name: Annotated[str, rule(_cluster_entry_problem)]
    cluster_deployment_spec: Annotated[dict[str, Any], bounded()] = Field(default_factory=dict)
    """A k0rdent ClusterDeployment spec (template, credential, config), as exalsius stores it."""
    cluster_labels: Annotated[
        dict[str, str], rule(_cluster_labels_problem), user_bound(labels_bound_problem)
    ] = Field(default_factory=dict)
    cluster_annotations: Annotated[dict[str, str], user_bound(annotations_bound_problem)] = Field(
        default_factory=dict
    )
    location_id: str | None = None
    """Colony: where its hosts are claimed (with `nodePools`)."""
    node_pools: list[NodePoolSpec] = Field(default_factory=list)
    """Colony: whole hosts per pool, claimed from the host provider."""

    @model_validator(mode="after")
    def _nothing_ignored(self, info: ValidationInfo) -> ColonyClusterSpec:
        # A cluster claimed from a location takes only the template and credential of its
        # clusterDeploymentSpec (`to_cluster_spec`): anything else there would be ignored, so a
        # user is told (persisted colonies are read as they are).
        if not (self.location_id and info.context and info.context.get(USER_INPUT)):
            return self
        ignored = sorted(set(self.cluster_deployment_spec) - set(CLAIMED_CLUSTER_DEPLOYMENT_KEYS))
        if ignored:
            raise refusal_at(
                type(self),
                ("clusterDeploymentSpec", ignored[0]),
                "cluster_deployment_spec",
                f"a cluster claimed from locationId '{self.location_id}' takes only "
                f"{' and '.join(CLAIMED_CLUSTER_DEPLOYMENT_KEYS)} from clusterDeploymentSpec; "
                f"'{ignored[0]}' would be ignored: leave it out, or leave locationId and "
                "nodePools out to apply the spec as written",
                self.cluster_deployment_spec[ignored[0]],
            )
        return self

    @model_validator(mode="after")
    def _something_to_build(self) -> ColonyClusterSpec:
        if self.node_pools and not self.location_id:
            raise refusal_at(
                type(self),
                ("locationId",),
                "location_id",
                "locationId is required with nodePools: it says where hosts are claimed",
                self.location_id,
            )
        if not self.cluster_deployment_spec and not self.location_id:
            raise refusal_at(
                type(self),
                ("clusterDeploymentSpec",),
                "cluster_deployment_spec",
                f"cluster '{self.cluster_name}' gives neither clusterDeploymentSpec nor "
                "locationId and nodePools: there is nothing to build it from",
                self.cluster_deployment_spec,
            )
        return self

    def to_cluster_spec(self, colony: str = "", organization: str = "") -> ClusterSpec:
        """The Colony cluster request this entry describes: claimed hosts when it gives a location
        (and node pools), else its raw ClusterDeployment spec, applied as written.

        Args:
            colony: the colony it belongs to; the cluster is then named `<colony>--<clusterName>`
                (`colony_cluster_name`: two colonies' entries never share a cluster).
            organization: the colony's, which its clusters belong to.
        """
        name = colony_cluster_name(colony, self.cluster_name)
        data: dict[str, Any] = {
            "name": name,
            "organization": organization,
            "colony": colony,
            "clusterLabels": self.cluster_labels,
            "clusterAnnotations": self.cluster_annotations,
        }
        if self.location_id:
            data["locationId"] = self.location_id
            data["nodePools"] = [pool.model_dump(mode="json") for pool in self.node_pools]
            for key in CLAIMED_CLUSTER_DEPLOYMENT_KEYS:
                value = self.cluster_deployment_spec.get(key)
                if isinstance(value, str):
                    data[key] = value
        else:
            data["locationId"] = ""
            data["deploymentSpec"] = self.cluster_deployment_spec
        return ClusterSpec.model_validate(data)


def colony_cluster_name(colony: str, entry: str) -> str:
    """The cluster a colony's entry becomes: `<colony>--<clusterName>`
    (`models.identity.colony_member_name`: injective, "--" being in neither name), the entry's
    name alone outside a colony."""
    return colony_member_name(colony, entry) if colony else entry


class ColonySpec(ColonyModel):
    """A group of clusters (the exalsius `Colony`): each entry becomes one cluster."""

    name: Annotated[str, rule(_colony_name_problem)]
    namespace: str = "default"
    colony_clusters: list[ColonyClusterSpec] = Field(default_factory=list)
    organization: OrganizationName = ""
    """The organization that owns the colony and its clusters (set by the HTTP API from the
    caller's key); empty for colonies an operator applies through Temporal directly."""

    @model_validator(mode="after")
    def _clusters(self) -> ColonySpec:
        seen: set[str] = set()
        for index, cluster in enumerate(self.colony_clusters):
            problem = self._entry_problem(cluster.cluster_name, seen)
            if problem:
                code, message = problem
                location = ("colonyClusters", index, "clusterName")
                raise refusal_at(type(self), location, code, message, cluster.cluster_name)
            seen.add(cluster.cluster_name)
        return self

    def _entry_problem(self, entry: str, seen: set[str]) -> tuple[str, str] | None:
        """(error type, message) when an entry's clusterName cannot be taken, or None."""
        if entry in seen:
            return "colony_clusters", f"cluster '{entry}' is given twice"
        # Checked here, not where the workflow makes it: a name too long must be refused
        # before anything starts.
        problem = name_problem("cluster", colony_cluster_name(self.name, entry))
        if problem:
            return "cluster_name", f"{problem} (the colony's name, '--' and this one)"
        return None


# --- The exalsius CRD shapes (strict: their fields only) ----------------------------------------


class _ExalsiusColonyCluster(ColonyModel):
    cluster_name: str
    cluster_deployment_spec: dict[str, Any] | None = None
    cluster_labels: dict[str, str] = Field(default_factory=dict)
    cluster_annotations: dict[str, str] = Field(default_factory=dict)


class _ExalsiusColonySpec(ColonyModel):
    colony_clusters: list[_ExalsiusColonyCluster] = Field(default_factory=list)


class _ClusterDeploymentRef(ColonyModel):
    name: str
    namespace: str


class _ExalsiusWorkspaceDeploymentSpec(ColonyModel):
    workspace_class_ref: str
    cluster_deployment_ref: _ClusterDeploymentRef
    resources: dict[str, Any] | None = None
    values: dict[str, Any] | None = None
    suspend: bool = False


# --- Parsing ------------------------------------------------------------------------------------

ManifestRequest = (
    WorkspaceClassSpec | WorkspaceSpec | ServiceTemplateManifest | ColonySpec | ClusterSpec
)


@dataclass(frozen=True)
class Manifest:
    """One accepted document: what it was and the request it became."""

    index: int
    """Its position in the file, from 1."""
    api_version: str
    kind: ManifestKind
    name: str
    request: ManifestRequest


@dataclass(frozen=True)
class ManifestProblem:
    """Why one document is refused."""

    index: int
    kind: str
    name: str
    field: str
    message: str

    def __str__(self) -> str:
        what = " ".join(part for part in (self.kind, self.name) if part)
        return f"document {self.index}{f' ({what})' if what else ''}: {self.field}: {self.message}"


class ManifestError(ValueError):
    """At least one document is refused; `problems` names each, with its field."""

    def __init__(self, problems: list[ManifestProblem], source: str = "") -> None:
        prefix = f"{source}: " if source else ""
        super().__init__("\n".join(f"{prefix}{problem}" for problem in problems))
        self.problems = problems


def _path(loc: tuple[int | str, ...], prefix: str, renames: Mapping[str, str]) -> str:
    if not loc:
        return prefix
    head = renames.get(str(loc[0]))
    parts = [head] if head else [prefix, str(loc[0])]
    text = ".".join(p for p in parts if p)
    for item in loc[1:]:
        text += f"[{item}]" if isinstance(item, int) else f".{item}"
    return text


@dataclass(frozen=True)
class _Document:
    """One document whose envelope is read (apiVersion, kind, metadata, spec), being converted."""

    index: int
    api_version: str
    kind: str
    target: ManifestKind
    name: str
    metadata: Mapping[str, Any]
    spec: Mapping[str, Any]

    @property
    def namespace(self) -> Any:
        return self.metadata.get("namespace")

    def refused(self, field: str, message: str) -> list[ManifestProblem]:
        return [ManifestProblem(self.index, self.kind, self.name, field, message)]

    def problems(
        self, error: ValidationError, renames: Mapping[str, str] | None = None
    ) -> list[ManifestProblem]:
        """The refusals of a validation of the spec, each at its field (`spec.<field>`, or as
        `renames` says for the fields the document gives elsewhere)."""
        found: list[ManifestProblem] = []
        for item in error.errors():
            loc = tuple(part for part in item["loc"] if not str(part).startswith("function-"))
            field = _path(loc, "spec", renames or {})
            found.append(ManifestProblem(self.index, self.kind, self.name, field, user_rule(item)))
        return found

    def made(self, request: ManifestRequest) -> Manifest:
        return Manifest(self.index, self.api_version, self.target, self.name, request)


def _read(index: int, document: Any) -> _Document | list[ManifestProblem]:
    """The document's envelope, or why it is refused: a supported apiVersion and kind, no other
    top-level field than Kubernetes objects have, a name, and a spec that is a map."""
    if not isinstance(document, Mapping):
        return [
            ManifestProblem(index, "", "", "document", "must be a map with apiVersion and kind")
        ]
    api_version = str(document.get("apiVersion") or "")
    kind = str(document.get("kind") or "")
    metadata = document.get("metadata") or {}
    name = str(metadata.get("name") or "") if isinstance(metadata, Mapping) else ""

    def problem(field: str, message: str) -> list[ManifestProblem]:
        return [ManifestProblem(index, kind, name, field, message)]

    if not api_version:
        return problem("apiVersion", "required")
    if not kind:
        return problem("kind", "required")
    target = SUPPORTED.get((api_version, kind))
    if target is None:
        known = ", ".join(f"{a} {k}" for a, k in SUPPORTED)
        return problem("kind", f"Colony does not take {api_version} {kind}; it takes {known}")
    unknown = sorted(str(key) for key in document if key not in TOP_LEVEL_FIELDS)
    if unknown:
        return problem(
            unknown[0], "unknown field (a document has apiVersion, kind, metadata and spec)"
        )
    if not isinstance(metadata, Mapping):
        return problem("metadata", "must be a map")
    if not name:
        return problem("metadata.name", "required")
    spec = document.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        return problem("spec", "must be a map")
    return _Document(index, api_version, kind, target, name, metadata, spec)


def _convert(index: int, document: Any) -> Manifest | list[ManifestProblem]:
    read = _read(index, document)
    if isinstance(read, list):
        return read
    try:
        return _CONVERTERS[read.target](read)
    except ValidationError as exc:
        return read.problems(exc, renames={"name": "metadata.name"})


def _named_spec(
    document: _Document,
    model: type[WorkspaceClassSpec | ClusterSpec | WorkspaceSpec],
    what: str,
    namespace_problem: str | None = None,
) -> Manifest | list[ManifestProblem]:
    """A Colony-shaped request: the spec as it is, named by `metadata.name` (never by the spec).

    Raises:
        ValidationError: the spec breaks a rule of `model`.
    """
    if "name" in document.spec:
        return document.refused("spec.name", f"unknown field (the {what}'s name is metadata.name)")
    if namespace_problem:
        return document.refused("metadata.namespace", namespace_problem)
    return document.made(user_input(model, {**document.spec, "name": document.name}))


def _workspace_class(document: _Document) -> Manifest | list[ManifestProblem]:
    return _named_spec(document, WorkspaceClassSpec, "class")


def _cluster(document: _Document) -> Manifest | list[ManifestProblem]:
    return _named_spec(document, ClusterSpec, "cluster")


def _service_template(document: _Document) -> Manifest | list[ManifestProblem]:
    naming = object_name_problem("ServiceTemplate", document.name)
    if naming:
        return document.refused("metadata.name", naming)
    bounds = value_problem(document.spec)
    if bounds:
        return document.refused("spec", bounds)
    shape = service_template_spec_problem(document.spec)
    if shape:
        return document.refused(*shape)
    labels = document.metadata.get("labels") or {}
    if not isinstance(labels, Mapping):
        return document.refused("metadata.labels", "must be a map")
    labels = {str(k): str(v) for k, v in labels.items()}
    problem = labels_problem(labels) or labels_bound_problem(labels)
    if problem:
        return document.refused("metadata.labels", problem)
    return document.made(
        ServiceTemplateManifest(
            name=document.name,
            namespace=str(document.namespace or DEFAULT_NAMESPACE),
            labels=labels,
            spec=dict(document.spec),
        )
    )


def _workspace(document: _Document) -> Manifest | list[ManifestProblem]:
    where = workspace_namespace_problem(document.namespace)
    if document.api_version == COLONY:
        return _named_spec(document, WorkspaceSpec, "workspace", where)
    if where:
        return document.refused("metadata.namespace", where)
    return _workspace_deployment(document)


def _workspace_deployment(document: _Document) -> Manifest | list[ManifestProblem]:
    """A `WorkspaceDeployment`: its CRD's fields, as Colony's workspace request."""
    try:
        crd = user_input(_ExalsiusWorkspaceDeploymentSpec, document.spec)
    except ValidationError as exc:
        return document.problems(exc)
    if crd.cluster_deployment_ref.namespace != DEFAULT_NAMESPACE:
        return document.refused(
            "spec.clusterDeploymentRef.namespace",
            f"Colony's clusters have their ClusterDeployments in namespace "
            f"'{DEFAULT_NAMESPACE}'; '{crd.cluster_deployment_ref.namespace}' holds none of "
            f"them: set it to {DEFAULT_NAMESPACE}",
        )
    data: dict[str, Any] = {
        "name": document.name,
        "class": crd.workspace_class_ref,
        "cluster": crd.cluster_deployment_ref.name,
        "values": crd.values or {},
        "suspend": crd.suspend,
    }
    if crd.resources is not None:
        data["resources"] = crd.resources
    try:
        return document.made(user_input(WorkspaceSpec, data))
    except ValidationError as exc:
        renames = {
            "name": "metadata.name",
            "class": "spec.workspaceClassRef",
            "cluster": "spec.clusterDeploymentRef.name",
        }
        return document.problems(exc, renames)


def workspace_namespace_problem(namespace: Any) -> str | None:
    """Why a workspace manifest's `metadata.namespace` cannot be honoured, or None (left out, or
    the namespace its objects go to, beside the ClusterDeployments)."""
    if namespace is None or namespace == DEFAULT_NAMESPACE:
        return None
    return (
        f"a workspace's ServiceSet and values Secret go beside its cluster's ClusterDeployment, "
        f"in namespace '{DEFAULT_NAMESPACE}'; '{namespace}' is not it: leave metadata.namespace "
        f"out or set it to {DEFAULT_NAMESPACE}"
    )


COLONY_NAMESPACES = (None, "default", DEFAULT_NAMESPACE)
"""The `metadata.namespace` a Colony document may give: none (`default`, as kubectl reads it), or
where its clusters' ClusterDeployments go; any other would be ignored."""


def _colony(document: _Document) -> Manifest | list[ManifestProblem]:
    if document.api_version == EXALSIUS_INFRA:
        # The CRD's own fields first, so an exalsius manifest cannot use Colony's extensions.
        try:
            user_input(_ExalsiusColonySpec, document.spec)
        except ValidationError as exc:
            return document.problems(exc)
    naming = dns_label_problem("colony", document.name)
    if naming:
        return document.refused("metadata.name", naming)
    if document.namespace not in COLONY_NAMESPACES:
        return document.refused(
            "metadata.namespace",
            f"a colony's clusters have their ClusterDeployments in namespace "
            f"'{DEFAULT_NAMESPACE}', whatever the colony's namespace; '{document.namespace}' "
            f"would be ignored: leave metadata.namespace out (or give "
            f"{' or '.join(n for n in COLONY_NAMESPACES if n)})",
        )
    namespace = str(document.namespace or "default")
    try:
        return document.made(
            user_input(ColonySpec, {**document.spec, "name": document.name, "namespace": namespace})
        )
    except ValidationError as exc:
        return document.problems(exc)


_CONVERTERS: dict[ManifestKind, Callable[[_Document], Manifest | list[ManifestProblem]]] = {
    ManifestKind.WORKSPACE_CLASS: _workspace_class,
    ManifestKind.WORKSPACE: _workspace,
    ManifestKind.SERVICE_TEMPLATE: _service_template,
    ManifestKind.COLONY: _colony,
    ManifestKind.CLUSTER: _cluster,
}
"""How each kind of document becomes its request (a `ValidationError` is the spec's refusal)."""


def _documents(loaded: list[Any]) -> list[Any]:
    # `kind: List` (what `kubectl get -o yaml` writes) holds its documents in `items`.
    flat: list[Any] = []
    for document in loaded:
        if isinstance(document, Mapping) and document.get("kind") == "List" and "items" in document:
            flat.extend(document.get("items") or [])
        elif document is not None:
            flat.append(document)
    return flat


_SPEC_MODELS: dict[tuple[str, str], type[ColonyModel]] = {
    (EXALSIUS_WORKSPACES, "WorkspaceClass"): WorkspaceClassSpec,
    (EXALSIUS_WORKSPACES, "WorkspaceDeployment"): _ExalsiusWorkspaceDeploymentSpec,
    (EXALSIUS_INFRA, "Colony"): ColonySpec,
    (COLONY, "Cluster"): ClusterSpec,
    (COLONY, "WorkspaceClass"): WorkspaceClassSpec,
    (COLONY, "Workspace"): WorkspaceSpec,
    (COLONY, "Colony"): ColonySpec,
}
"""The model each kind's `spec` is read into (a ServiceTemplate's is free-form)."""


def _field_in_document(error: InputError) -> str:
    """The field of a document a refusal made before parsing is about: the path followed through
    the kind's spec model to the free-form field it is in (`spec.values`); its first two steps
    when the kind is not known."""
    path = error.path
    if not path:
        return ""
    model = _SPEC_MODELS.get((error.heads.get("apiVersion", ""), error.heads.get("kind", "")))
    if path[0] == "spec" and model is not None:
        return f"spec.{field_of(model, path[1:])}".rstrip(".")
    return error.where() if len(path) <= 2 else f"{error.where_first(2)}"


def unreadable(error: InputError, source: str = "") -> ManifestError:
    """A text refused while it was read (`models.bounds.load_yaml_documents`), as manifests'
    refusals read: a syntax error is the file's (document 0); a bound passed or a key given
    twice, its document's, naming the field."""
    index = 0 if error.syntax else error.document or 0
    message = error.detail.removeprefix("not valid YAML: ")
    field = _field_in_document(error) or ("file" if error.kind in ("size", "tokens") else "yaml")
    problem = ManifestProblem(index, "", "", field, message)
    return ManifestError([problem], source)


def parse_manifests(text: str, source: str = "") -> list[Manifest]:
    """Every document of a YAML text as a validated Colony request, in order.

    Args:
        text: one or more YAML documents (`---` separated); empty documents are skipped.
        source: the file's name, for messages.

    Raises:
        ManifestError: any document refused (all refusals are listed, none is returned).
    """
    try:
        loaded = load_yaml_documents(text, what=source or "file")
    except InputError as exc:
        raise unreadable(exc, source) from exc
    manifests: list[Manifest] = []
    problems: list[ManifestProblem] = []
    for index, document in enumerate(_documents(loaded), start=1):
        result = _convert(index, document)
        if isinstance(result, Manifest):
            manifests.append(result)
        else:
            problems.extend(result)
    if problems:
        raise ManifestError(problems, source)
    return manifests


# --- Objects Colony writes ----------------------------------------------------------------------


def workspace_class_object(
    spec: WorkspaceClassSpec,
    labels: Mapping[str, str] | None = None,
    *,
    name: str | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The exalsius `WorkspaceClass` object that stores a class on the management cluster.

    Classes are kept as the exalsius CRD has them, so `kubectl get wsc` shows Colony's catalog and
    the exalsius tooling reads it.

    Args:
        name: the object's name when it is not the class's (an organization's own class:
            `models.identity.workspace_class_object_name`).
    """
    body = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    body.pop("name")
    metadata: dict[str, Any] = {"name": name or spec.name}
    if labels:
        metadata["labels"] = dict(labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {
        "apiVersion": EXALSIUS_WORKSPACES,
        "kind": "WorkspaceClass",
        "metadata": metadata,
        "spec": body,
    }
