"""What the HTTP API reads and answers: request bodies, response bodies and the cluster status the
product documents (`creating|ready|updating|deleting|failed`, and `waiting` while a node pool
waits for hosts), in the document's field names.

Responses are Colony's own models with a few fields added (the cluster's `id` and `status`; a
workspace's or colony's `id`; and for each, the `workflowId` of the workflow that owns it and its
Web UI link), so `colonyctl` in remote mode (the `Http*` clients of `clients`) reads
them back into the same `ClusterStatus`, `Operation`,
`WorkspaceStatus`, `ColonyStatus` and `WorkspaceClassSpec` it gets from Temporal, prints the same
thing, and takes workflow ids from the answers, never from a link.
Request bodies are validated strictly (`models.base.user_input`: unknown fields are refused).
Pure: no IO, no FastAPI.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Self, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from clients.base import WorkflowRef
from models.activity_api import KubeconfigRef
from models.base import ColonyModel, refusal_at
from models.bounds import answers_bound_problem, bounded, labels_bound_problem, user_bound
from models.catalog import LocationStock
from models.cluster import (
    KUBERNETES_VERSION,
    OPERATOR_SETTINGS,
    POD_CIDR,
    SERVICE_CIDR,
    ClusterPhase,
    ClusterStatus,
)
from models.colony import ColonyOperationAccepted, ColonyStatus
from models.manifests import (
    ColonyClusterSpec,
    ServiceTemplateManifest,
    service_template_spec_problem,
)
from models.names import label_key_problem, label_value_problem, name_problem
from models.node_pool import NodePoolSpec, NodePoolStatus, NodeStatus
from models.operations import Operation, OperationKind
from models.purge import PurgeReport
from models.quota import QuotaLimits
from models.workspace import WorkspaceStatus, workspace_name_problem
from models.workspace_class import (
    WorkspaceClassSpec,
    WorkspaceResources,
    dns_label_problem,
    object_name_problem,
)
from models.workspace_operations import WorkspaceOperationKind

ViewT = TypeVar("ViewT", bound=BaseModel)


class ClusterStatusName(StrEnum):
    """A cluster's status as the product documents it."""

    CREATING = "creating"
    READY = "ready"
    UPDATING = "updating"
    WAITING = "waiting"
    """A node pool waits for hosts (the request set `waitForCapacity`); see its pools'
    `waitingForHosts` and the cluster's `reason`."""
    DEGRADED = "degraded"
    """Ready, but created without node pools it was asked for: see its `reason` and its
    `NodePoolsReady` condition (the create operation's error type and reason)."""
    DELETING = "deleting"
    FAILED = "failed"


def status_of(status: ClusterStatus) -> ClusterStatusName:
    """The documented status of a cluster: its phase, with `updating` for a ready cluster that
    runs or queues an operation (a pool added, scaled or deleted, a node deleted), `waiting`
    while one of its pools waits for hosts, and `degraded` while pools its create asked for are
    missing (never `ready` then).

    A deleted cluster is not found (404) before anyone asks its status; its last status, read
    from a finished workflow, is `deleting` until then.
    """
    match status.phase:
        case ClusterPhase.CREATING:
            return ClusterStatusName.CREATING
        case ClusterPhase.FAILED:
            return ClusterStatusName.FAILED
        case ClusterPhase.DELETING | ClusterPhase.DELETED:
            return ClusterStatusName.DELETING
        case ClusterPhase.WAITING:
            return ClusterStatusName.WAITING
        case ClusterPhase.DEGRADED:
            return ClusterStatusName.DEGRADED
    busy = status.current_operation is not None or bool(status.queued_operations)
    return ClusterStatusName.UPDATING if busy else ClusterStatusName.READY


def status_after(kind: OperationKind) -> ClusterStatusName:
    """The cluster's status once an operation of `kind` is accepted (it is queued or runs)."""
    if kind is OperationKind.DELETE_CLUSTER:
        return ClusterStatusName.DELETING
    if kind is OperationKind.CREATE_CLUSTER:
        return ClusterStatusName.CREATING
    return ClusterStatusName.UPDATING


# --- requests --------------------------------------------------------------------------------


class ClusterCreateRequest(ColonyModel):
    """`POST /v1/kubernetes/clusters`: `{"name": "training", "locationId": "fra1", "nodePools": [...]}`."""

    name: str
    """Lowercase letters, digits and hyphens, starting with a letter, at most 63 characters;
    unique within the organization until the cluster's deletion completes."""
    location_id: str
    node_pools: list[NodePoolSpec] = Field(default_factory=list)
    """Up to 10, added once the control plane is ready."""
    wait_for_capacity: bool = False
    """When the location has too few free hosts now, queue and wait for them instead of refusing."""

    @model_validator(mode="before")
    @classmethod
    def _refuse_operator_settings(cls, data: Any) -> Any:
        # Before the unknown-field check: a setting `colonyctl` takes from an operator is refused
        # saying whose it is, not as a field this API has never heard of.
        if isinstance(data, dict):
            for field in OPERATOR_SETTINGS:
                if field in data:
                    raise refusal_at(
                        cls,
                        (field,),
                        "operator_setting",
                        OPERATOR_SETTINGS[field],
                        data[field],
                    )
        return data


class NodePoolCreateRequest(NodePoolSpec):
    """`POST .../node-pools`: `{"name": "gpu", "sku": {"gpuModelId": "h100-80gb"}, "count": 2}`."""

    wait_for_capacity: bool = False


class NodePoolScaleRequest(ColonyModel):
    """`PATCH .../node-pools/{pool}`: `{"count": 4}`; scaling down drains the nodes it removes."""

    count: int
    force: bool = False
    """Remove the nodes even when their drain misses the deadline."""
    wait_for_capacity: bool = False


class OperationCancelRequest(ColonyModel):
    """`POST .../operations/{op}/cancel`: `{"reason": "not needed"}` (optional)."""

    reason: str = Field(default="", max_length=500)


def _checked(problem: str | None, field: str) -> None:
    if problem:
        raise PydanticCustomError(field, problem)


DEPLOY_NAMES: dict[str, tuple[str, Callable[[str], str | None]]] = {
    "name": ("name", workspace_name_problem),
    "class_name": ("class", lambda name: dns_label_problem("workspace class", name)),
    "cluster": ("cluster", lambda name: name_problem("cluster", name)),
}
"""The names a deploy gives, each with its field and its rule."""


class WorkspaceDeployRequest(ColonyModel):
    """`POST /v1/workspaces`: `{"name": "nb", "class": "colony-jupyter-1-0-0", "cluster":
    "training", "gpus": 1, "secretValues": {"notebookPassword": "..."}}`; what `colonyctl
    workspace deploy` takes."""

    name: str
    """A DNS label of at most 60 characters (the namespace is `ws-<name>`); unique across Colony
    until the workspace's deletion completes."""
    class_name: str = Field(alias="class")
    """The exact, versioned class (`GET /v1/workspace-classes`)."""
    cluster: str
    """One of the organization's clusters (its id)."""
    resources: WorkspaceResources | None = None
    """Overrides of the class's default resources, field by field (`perReplica.gpuCount`,
    `gpuType`, `gpuNodeSelector`, `replicas`, ...); or give the shortcuts below instead."""
    gpus: int | None = None
    """GPUs per replica (`resources.perReplica.gpuCount`)."""
    gpu_model: str | None = None
    """GPU model, matched against the node label `exalsius.ai/gpu-model` (`h100-80gb`)."""
    replicas: int | None = None
    values: Annotated[dict[str, Any], bounded()] = Field(default_factory=dict)
    """Helm values, deep-merged over the class's default values (prompt answers may be here).
    At most 32 levels deep, 10,000 keys and items, 64 KiB a string, 128 KiB in all."""
    answers: Annotated[dict[str, Any], user_bound(answers_bound_problem), bounded()] = Field(
        default_factory=dict
    )
    """Answers to the class's prompts, by their Helm value path (at most 100)."""
    secret_values: Annotated[dict[str, str], user_bound(answers_bound_problem), bounded()] = Field(
        default_factory=dict
    )
    """Answers to the class's secret prompts, by Helm value path: sealed by the API with Colony's
    public key before anything starts, so no plaintext reaches a workflow (secrets given in
    `values` or `answers` are sealed the same way)."""
    suspend: bool = False
    """Keep the definition, install nothing and hold no GPUs until resumed."""

    @field_validator("name", "class_name", "cluster")
    @classmethod
    def _named(cls, name: str, info: ValidationInfo) -> str:
        field, problem = DEPLOY_NAMES[info.field_name or ""]
        _checked(problem(name), field)
        return name


class ServiceTemplateInput(ColonyModel):
    """A k0rdent ServiceTemplate a class deploys, created in `kcm-system` when absent:
    `{"name": "jupyter-0-3-0", "spec": {"helm": {"chartSpec": {...}}}}`."""

    name: str
    labels: Annotated[dict[str, str], user_bound(labels_bound_problem)] = Field(
        default_factory=dict
    )
    spec: Annotated[dict[str, Any], bounded()]
    """As k0rdent takes it: exactly one of `helm`, `kustomize` or `resources`."""

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        _checked(object_name_problem("ServiceTemplate", name), "name")
        return name

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        for key, value in labels.items():
            _checked(label_key_problem(key) or label_value_problem(key, value), "labels")
        return labels

    @field_validator("spec")
    @classmethod
    def _spec(cls, spec: dict[str, Any]) -> dict[str, Any]:
        problem = service_template_spec_problem(spec)
        if problem:
            field, message = problem
            where = field.removeprefix("spec").removeprefix(".")
            _checked(f"{where}: {message}" if where else message, "spec")
        return spec

    def manifest(self) -> ServiceTemplateManifest:
        return ServiceTemplateManifest(name=self.name, labels=self.labels, spec=self.spec)


RESERVED_LABEL_DOMAINS = ("colony.dev/", "k0rdent.mirantis.com/")
"""Label and annotation domains whose keys mark Colony's and k0rdent's own objects: a caller's
cluster may not carry them (they would pass it for someone else's)."""


class ColonyApplyRequest(ColonyModel):
    """`POST /v1/colonies`: a colony in Colony's form, `{"name": "lab", "colonyClusters":
    [{"clusterName": "a", "locationId": "fra1", "nodePools": [...]}]}`; what `colonyctl colony
    apply -f` reads from a Colony manifest (exalsius's or Colony's)."""

    name: str
    """A DNS label; each cluster is named `<name>-<clusterName>` (at most 63 characters)."""
    colony_clusters: list[ColonyClusterSpec] = Field(default_factory=list)
    """Its clusters, each claimed from a location (`locationId`, `nodePools`). A raw k0rdent
    `clusterDeploymentSpec` (any template, credential or config) is the operator's to choose:
    refused through the API."""

    @field_validator("colony_clusters")
    @classmethod
    def _clusters(cls, clusters: list[ColonyClusterSpec]) -> list[ColonyClusterSpec]:
        for index, cluster in enumerate(clusters):
            if cluster.cluster_deployment_spec:
                raise refusal_at(
                    "ColonyApplyRequest",
                    (index, "clusterDeploymentSpec"),
                    "value_error",
                    "cannot be chosen through the API: give locationId and nodePools (an "
                    "operator applies raw ClusterDeployment specs through Temporal directly)",
                    cluster.cluster_deployment_spec,
                )
            for field, marks in (
                ("clusterLabels", cluster.cluster_labels),
                ("clusterAnnotations", cluster.cluster_annotations),
            ):
                reserved = sorted(k for k in marks if k.startswith(RESERVED_LABEL_DOMAINS))
                if reserved:
                    raise refusal_at(
                        "ColonyApplyRequest",
                        (index, field),
                        "value_error",
                        f"'{reserved[0]}' is in a domain Colony reserves for its own marks "
                        f"({', '.join(RESERVED_LABEL_DOMAINS)})",
                        marks,
                    )
        return clusters


class WorkspaceClassPublishRequest(ColonyModel):
    """`POST /v1/workspace-classes`: a class in Colony's form (what `GET` answers) and the
    ServiceTemplates it (or a prerequisite) deploys, as `colonyctl class publish -f` takes them
    from a WorkspaceClass file."""

    class_spec: WorkspaceClassSpec = Field(alias="class")
    service_templates: list[ServiceTemplateInput] = Field(default_factory=list)


REQUEST_MODELS: tuple[type[BaseModel], ...] = (
    ClusterCreateRequest,
    NodePoolCreateRequest,
    NodePoolScaleRequest,
    OperationCancelRequest,
    WorkspaceDeployRequest,
    WorkspaceClassPublishRequest,
    ColonyApplyRequest,
    QuotaLimits,
)
"""Bodies the API reads itself (strictly), documented in its OpenAPI schema by `api.app`."""


# --- responses -------------------------------------------------------------------------------


class ClusterView(ClusterStatus):
    """A cluster: `GET /v1/kubernetes/clusters/{id}` and each item of the list."""

    id: str
    """The cluster's id in the API: its name (unique within the organization)."""
    status: ClusterStatusName
    kubernetes_version: str = KUBERNETES_VERSION
    pod_cidr: str = POD_CIDR
    service_cidr: str = SERVICE_CIDR
    workflow_id: str = ""
    """The id of the cluster's workflow in Temporal."""
    web_ui: str = ""
    """The cluster's workflow in the Temporal Web UI."""
    # Internal references, not for API users (the kubeconfig endpoints serve what they point at).
    kubeconfig: KubeconfigRef | None = Field(default=None, exclude=True)
    held_hosts: list[str] = Field(default_factory=list, exclude=True)

    @classmethod
    def of(cls, status: ClusterStatus, workflow: WorkflowRef) -> ClusterView:
        """As `EntityView.of` shapes a workspace or a colony, with the cluster's `status` name,
        without its internal references."""
        data = status.model_dump(exclude={"kubeconfig", "held_hosts"})
        return cls.model_validate(
            {
                **data,
                "id": status.name,
                "status": status_of(status),
                "workflow_id": workflow.workflow_id,
                "web_ui": workflow.link,
            }
        )


class ClusterList(ColonyModel):
    items: list[ClusterView]


class ClusterAccepted(ColonyModel):
    """202 to a create: the cluster's id and status (poll `GET .../clusters/{id}` until ready)."""

    id: str
    name: str
    status: ClusterStatusName
    operation_id: str
    workflow_id: str
    web_ui: str
    repeated: bool = False
    """True when this `Idempotency-Key` had created it already: nothing new was started."""


class OperationAcceptedView(ColonyModel):
    """202 to an operation on a cluster: what was queued, and where."""

    cluster_id: str
    status: ClusterStatusName
    """The cluster's status with the operation accepted."""
    operation_id: str
    kind: OperationKind
    position: int
    """Place in the cluster's queue: 1 runs next (or now)."""
    workflow_id: str
    web_ui: str
    purge_workflow_id: str | None = None
    """A delete of a cluster whose workflow cannot make progress: the purge that ends it and
    removes what it made (`operationId` is then `purge`)."""


class OperationView(Operation):
    """An operation: queued, running or finished, its request, progress and reason."""

    workflow_id: str = ""
    """The cluster's workflow, which runs it."""
    web_ui: str = ""


class OperationList(ColonyModel):
    items: list[OperationView]


class NodePoolList(ColonyModel):
    items: list[NodePoolStatus]


class NodeView(NodeStatus):
    """A node: `registered` while its host boots, `joined` once in the cluster, where
    `kubernetesStatus` is its Ready condition."""

    pool: str


class NodeList(ColonyModel):
    items: list[NodeView]


def nodes_of(status: ClusterStatus) -> list[NodeView]:
    return [
        NodeView.model_validate({**node.model_dump(), "pool": pool.name})
        for pool in status.node_pools
        for node in pool.nodes
    ]


class WorkspaceClassList(ColonyModel):
    items: list[WorkspaceClassSpec]


class WorkspaceClassPublished(ColonyModel):
    """201 (published) or 200 (the identical class was there) to a publish."""

    name: str
    created: bool
    objects_created: list[str] = Field(default_factory=list)
    """`Kind/name` of the ServiceTemplates created."""
    objects_skipped: list[str] = Field(default_factory=list)


class EntityView(ColonyModel):
    """A workspace's or colony's status as the API answers it (`WorkspaceView`, `ColonyView`):
    with its `id` (its name) and the workflow that owns it."""

    @classmethod
    def of(cls, status: WorkspaceStatus | ColonyStatus, workflow: WorkflowRef) -> Self:
        return cls.model_validate(
            {
                **status.model_dump(),
                "id": status.name,
                "workflow_id": workflow.workflow_id,
                "web_ui": workflow.link,
            }
        )


class WorkspaceView(WorkspaceStatus, EntityView):
    """A workspace: `GET /v1/workspaces/{name}` and each item of the list. Its `cluster` is the
    cluster's id in the API; `phase` is Pending, InstallingPrerequisites, Waiting (for GPUs, with
    `admission.position`), Deploying, Running, Suspended, Failed (with `failureContext`) or
    Deleting."""

    id: str
    """The workspace's id in the API: its name."""
    workflow_id: str = ""
    """The id of the workspace's workflow in Temporal."""
    web_ui: str = ""
    """The workspace's workflow in the Temporal Web UI."""


class WorkspaceList(ColonyModel):
    items: list[WorkspaceView]


class WorkspaceAccepted(ColonyModel):
    """202 to a deploy: the workspace and its first operation (poll `GET /v1/workspaces/{name}`
    until it is Running)."""

    id: str
    name: str
    class_name: str = Field(alias="class")
    cluster: str
    phase: str
    operation_id: str
    workflow_id: str
    web_ui: str
    repeated: bool = False
    """True when this `Idempotency-Key` had deployed it already: nothing new was started."""


class WorkspaceOperationView(ColonyModel):
    """202 to a suspend, resume or delete: what was queued, and where."""

    workspace_id: str
    operation_id: str
    kind: WorkspaceOperationKind
    position: int
    """Place in the workspace's queue: 1 runs next (or now)."""
    workflow_id: str
    web_ui: str
    purge_workflow_id: str | None = None
    """A delete of a workspace whose workflow cannot make progress: the purge that ends it and
    removes what it made (`operationId` is then `purge`)."""


class ColonyView(ColonyStatus, EntityView):
    """A colony: `GET /v1/colonies/{id}` and each item of the list: its phase, its clusters (ids
    of the organization's clusters, `<colony>--<clusterName>`) and their GPUs."""

    id: str
    """The colony's id in the API: its name (unique within the organization)."""
    workflow_id: str = ""
    """The id of the colony's workflow in Temporal."""
    web_ui: str = ""


def accepted_view(
    view: type[ViewT], accepted: BaseModel, workflow: WorkflowRef, **about: Any
) -> ViewT:
    """An operation accepted (`operationId`, `kind`, `position`) as the API answers it: with
    what it is about (`clusterId`, ...) and the workflow that runs it."""
    return view.model_validate(
        {
            **accepted.model_dump(),
            **about,
            "workflow_id": workflow.workflow_id,
            "web_ui": workflow.link,
        }
    )


class ColonyList(ColonyModel):
    items: list[ColonyView]


class ColonyApplied(ColonyModel):
    """202 to an apply: the colony was created (`created`), or its running workflow was given the
    manifest (its apply queued as `operationId`); poll `GET /v1/colonies/{id}`."""

    id: str
    name: str
    created: bool
    operation_id: str = ""
    workflow_id: str
    web_ui: str


class ColonyOperationView(ColonyOperationAccepted):
    """202 to a delete: what was queued, and where."""

    colony_id: str
    workflow_id: str
    web_ui: str


class LocationList(ColonyModel):
    items: list[LocationStock]


class SkuLocationStock(ColonyModel):
    """Hosts of one SKU in one location: how many, and how many are free now."""

    location_id: str
    total: int
    free: int


class GpuModelView(ColonyModel):
    """A GPU model of the catalog (a GPU node is a whole host of one model), with its stock."""

    id: str
    name: str = ""
    product: str = ""
    memory_gib: int | None = None
    gpus_per_host: int | None = None
    stock: list[SkuLocationStock] = Field(default_factory=list)


class CpuSkuView(ColonyModel):
    """A whole-host CPU SKU of the catalog, with its stock."""

    id: str
    name: str = ""
    cpu_cores: int | None = None
    memory: str = ""
    stock: list[SkuLocationStock] = Field(default_factory=list)


class GpuModelList(ColonyModel):
    items: list[GpuModelView]


class CpuSkuList(ColonyModel):
    items: list[CpuSkuView]


class KeyView(ColonyModel):
    """`GET /v1/api-key`: the calling key (never its secret)."""

    id: str
    organization: str
    permissions: list[str]
    """As granted (legacy `clusters:read`/`clusters:write` included)."""
    effective_permissions: list[str]
    name: str = ""
    created_at: datetime
    expires_at: datetime | None = None
    last_used_at: datetime | None = None


class ExecCredentialStatus(BaseModel):
    token: str
    expirationTimestamp: str


class ExecCredential(BaseModel):
    """A `client.authentication.k8s.io/v1` ExecCredential: a one-hour cluster token."""

    apiVersion: str
    kind: str
    status: ExecCredentialStatus


class Kubeconfig(BaseModel):
    """A kubeconfig (`apiVersion: v1`, `kind: Config`) with a cluster token embedded."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    apiVersion: str
    kind: str
    clusters: list[dict[str, Any]]
    users: list[dict[str, Any]]
    contexts: list[dict[str, Any]]
    current_context: str = Field(alias="current-context")
    preferences: dict[str, Any] = Field(default_factory=dict)


class ErrorDetail(BaseModel):
    code: str
    """Stable: bad_request, invalid, unauthenticated, forbidden, not_found, conflict,
    operation_failed, method_not_allowed, unsupported_media_type, rate_limited, unavailable,
    internal."""
    field: str | None = None
    """The request field (or path parameter) the refusal is about, when it is about one."""
    message: str
    """The same one line `colonyctl` prints after `error: `."""


class ErrorBody(BaseModel):
    """Every refusal: `{"error": {"code": ..., "field": ..., "message": ...}}`."""

    error: ErrorDetail


class PurgeView(PurgeReport):
    """200 (or 202 while it still runs) to an operator's purge, and its `GET`: what the purge did
    (`outcome`: purged, swept, deleted or running), what it removed, and the same in one sentence
    (`summary`, what `colonyctl ... purge` prints)."""

    summary: str = ""

    @classmethod
    def of(cls, report: PurgeReport) -> PurgeView:
        return cls.model_validate({**report.model_dump(), "summary": report.describe()})
