"""Workspaces: the deploy request (`WorkspaceSpec`), the status users read, the workflow's state, names.

A workspace is one instance of a workspace class on one Colony cluster of its organization, owned
by one `WorkspaceWorkflow` (id `workspace/[<organization>/]<name>`). The request mirrors the
exalsius `WorkspaceDeployment` spec (class pinned by exact name, cluster, resource overrides with
`gpuType` or `gpuNodeSelector`, values) and adds prompt answers, secret ones sealed
(`models/sealed.py`). Phases, conditions,
reasons, the failure context and the access list follow the exalsius status shape, so a client of
either reads the other.

The CLI validates a request with `user_input(WorkspaceSpec, ...)` before starting anything;
`models/manifests.py` builds it from manifests; the workflow carries a `WorkspaceState` and answers
its `status` query with a `WorkspaceStatus`. The names a workspace's objects get are the spec's
(`service_set_name`, `release_name`, ...), from `models.identity`: injective over (organization,
cluster, workspace).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from functools import partial
from typing import Annotated, Any, ClassVar, Self

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from models import identity
from models.activity_api import KubeconfigRef
from models.base import ColonyModel, rule
from models.bounds import answers_bound_problem, bounded, user_bound
from models.capacity import CapacityAnswer, ReplicaPlacement
from models.identity import Entity
from models.names import ClusterName, OrganizationName
from models.operations import ContinueAsNewPolicy, OperationBook
from models.ownership import EntitySpec
from models.purge import Unresponsive
from models.sealed import SealedValue
from models.value_paths import value_path_problem
from models.workspace_class import (
    DNS_LABEL_MAX,
    AccessEndpoint,
    EndpointProtocol,
    WorkspaceClassName,
    WorkspaceClassSpec,
    WorkspaceResources,
    dns_label_problem,
    reserved_values_problem,
)
from models.workspace_operations import WorkspaceOperation

WORKSPACE_NAME_MAX = 60
"""60: the workspace namespace `ws-<name>` must fit a 63-character namespace name (the exalsius
WorkspaceDeployment CRD's own rule)."""
NAMESPACE_PREFIX = "ws-"
RECENT_EVENTS_KEPT = 10
"""Events kept in the state and the failure context (the newest)."""


def _fail(code: str, message: str) -> PydanticCustomError:
    return PydanticCustomError(code, message)


def workspace_name_problem(name: str) -> str | None:
    """Why `name` cannot name a workspace (it becomes a namespace and a hostname), or None."""
    return dns_label_problem("workspace", name, WORKSPACE_NAME_MAX)


def _answer_paths_problem(answers: Mapping[str, Any]) -> str | None:
    """Why prompt answers cannot be taken (a key that is not a value path), or None."""
    for path in answers:
        problem = value_path_problem(path)
        if problem:
            return f"answer '{path}': {problem}"
    return None


class WorkspaceSpec(EntitySpec):
    """A deploy request: `{"name": "nb", "class": "colony-jupyter-1-0-0", "cluster": "training"}`.

    Secret prompts are answered in `sealedAnswers` only: a plaintext answer to a secret prompt is
    refused when values are merged (`models/values.py`), and `colonyctl` seals them before sending.
    """

    entity: ClassVar[Entity] = Entity.WORKSPACE

    name: Annotated[str, rule(workspace_name_problem)]
    class_name: WorkspaceClassName = Field(alias="class")
    """The exact, versioned class name (`colony-jupyter-1-0-0`): a workspace pins its class."""
    cluster: ClusterName
    """The Colony cluster, by its name in the workspace's organization (never a ClusterDeployment:
    that is derived from both, so no workspace can name another organization's)."""
    organization: OrganizationName = ""
    """The organization the workspace belongs to (set by the HTTP API from the caller's key);
    empty for the workspaces an operator deploys through `colonyctl` and Temporal directly. Its
    name is unique within it, and it is admitted only onto a cluster of the same organization."""
    resources: WorkspaceResources | None = None
    """Overrides of the class's default resources, field by field; GPU model or node selector."""
    values: Annotated[
        dict[str, Any],
        rule(partial(reserved_values_problem, "values", advice="; set resources instead")),
        bounded(),
    ] = Field(default_factory=dict)
    """Helm values, deep-merged over the class's default values (bounded: `models.bounds`)."""
    answers: Annotated[
        dict[str, Any],
        rule(_answer_paths_problem),
        user_bound(answers_bound_problem),
        bounded(),
    ] = Field(default_factory=dict)
    """Answers to the class's prompts, by their Helm value path (plain ones)."""
    sealed_answers: Annotated[
        dict[str, SealedValue], rule(_answer_paths_problem), user_bound(answers_bound_problem)
    ] = Field(default_factory=dict)
    """Answers to secret prompts, sealed with Colony's public key, by Helm value path."""
    suspend: bool = False
    """Deploy suspended: keep the definition, hold no GPUs, install nothing (`spec.suspend`)."""

    @model_validator(mode="after")
    def _one_answer_each(self) -> Self:
        both = sorted(set(self.answers) & set(self.sealed_answers))
        if both:
            raise _fail(
                "answers",
                f"prompt '{both[0]}' is answered both in answers and in sealedAnswers; give one",
            )
        return self

    @property
    def cluster_deployment(self) -> str:
        """Its cluster's ClusterDeployment (`models.identity.cluster_deployment_name`)."""
        return identity.cluster_deployment_name(self.organization, self.cluster)

    @property
    def cluster_workflow_id(self) -> str:
        """Its cluster's workflow: the owner its ClusterDeployment must be marked with."""
        return identity.entity_workflow_id(Entity.CLUSTER, self.organization, self.cluster)

    @property
    def service_set_name(self) -> str:
        return identity.workspace_service_set_name(self.organization, self.cluster, self.name)

    @property
    def gpu_model(self) -> str:
        """The GPU model it asks for ("" for none): its `ColonyGpuModel` mark."""
        return (self.resources.per_replica.gpu_type or "") if self.resources else ""

    @property
    def values_secret_name(self) -> str:
        return identity.workspace_values_secret_name(self.organization, self.cluster, self.name)

    @property
    def release_name(self) -> str:
        """The Helm release (the ServiceSet's service); charts name Services after it."""
        return identity.workspace_release_name(self.organization, self.cluster, self.name)

    def route_name(self, endpoint: str) -> str:
        return identity.route_name(self.organization, self.cluster, self.name, endpoint)


# --- Status vocabulary (the exalsius WorkspaceDeployment's, plus Colony's) ------------------------


class WorkspacePhase(StrEnum):
    """Where a workspace is in its life."""

    PENDING = "Pending"
    """Resolving its class and waiting for its cluster to be ready."""
    INSTALLING_PREREQUISITES = "InstallingPrerequisites"
    WAITING = "Waiting"
    """Queued for GPUs (`WaitingForGpuCapacity`, with its position)."""
    DEPLOYING = "Deploying"
    RUNNING = "Running"
    SUSPENDED = "Suspended"
    """Release uninstalled, namespace and volumes kept, GPUs freed."""
    FAILED = "Failed"
    DELETING = "Deleting"
    DELETED = "Deleted"

    @property
    def finished(self) -> bool:
        return self is WorkspacePhase.DELETED


class ConditionType(StrEnum):
    """The workspace's conditions (exalsius WorkspaceDeployment condition types)."""

    READY = "Ready"
    CLASS_RESOLVED = "ClassResolved"
    CLUSTER_DEPLOYMENT_RESOLVED = "ClusterDeploymentResolved"
    PREREQUISITES_MET = "PrerequisitesMet"
    FEASIBLE = "Feasible"
    RESOURCES_INJECTED = "ResourcesInjected"
    HELM_RELEASE_READY = "HelmReleaseReady"
    ROUTES_READY = "RoutesReady"


class ConditionReason(StrEnum):
    """Machine-readable reasons on conditions and in the failure context.

    The exalsius operator's reasons, and Colony's for what it adds (GPU admission, timeouts,
    prompts, sealing, suspension).
    """

    CLASS_RESOLVED = "ClassResolved"
    CLASS_NOT_FOUND = "ClassNotFound"
    INVALID_WORKSPACE_CLASS = "InvalidWorkspaceClass"
    CLUSTER_DEPLOYMENT_RESOLVED = "ClusterDeploymentResolved"
    CLUSTER_DEPLOYMENT_NOT_FOUND = "ClusterDeploymentNotFound"
    CLUSTER_NOT_READY = "ClusterNotReady"
    INSTALLING_PREREQUISITES = "InstallingPrerequisites"
    PREREQUISITES_MET = "PrerequisitesMet"
    PREREQUISITES_NOT_READY = "PrerequisitesNotReady"
    PREREQUISITE_FAILED = "PrerequisiteFailed"
    PREREQUISITE_NAMESPACE_CONFLICT = "PrerequisiteNamespaceConflict"
    INVALID_PREREQUISITE = "InvalidPrerequisite"
    RESOURCES_AVAILABLE = "ResourcesAvailable"
    GPU_CAPACITY_RESERVED = "GpuCapacityReserved"
    WAITING_FOR_GPU_CAPACITY = "WaitingForGpuCapacity"
    GPU_OFFERING_UNAVAILABLE = "GpuOfferingUnavailable"
    GPU_CAPACITY_LOST = "GpuCapacityLost"
    """Its GPUs' node left the cluster (a forced scale-down): back to Waiting."""
    GPU_CAPACITY_RELEASED = "GpuCapacityReleased"
    """Its GPUs went back to the ledger (a deploy that did not finish, a delete)."""
    RESOURCES_INJECTED = "ResourcesInjected"
    USER_PATHS_OVERWRITTEN = "UserPathsOverwritten"
    INVALID_VALUES = "InvalidValues"
    """Prompts unanswered or mistyped, bad `--set`, a secret in plaintext."""
    HELM_RELEASE_NOT_READY = "HelmReleaseNotReady"
    HELM_RELEASE_DEPLOYED = "HelmReleaseDeployed"
    HELM_RELEASE_FAILED = "HelmReleaseFailed"
    DEPLOY_TIMEOUT = "DeployTimeout"
    DEPLOYMENT_READY = "DeploymentReady"
    ROUTES_READY = "RoutesReady"
    ROUTING_IN_PROGRESS = "RoutingInProgress"
    ROUTING_ERROR = "RoutingError"
    ROUTING_INFRA_NOT_READY = "RoutingInfraNotReady"
    NO_GATEWAY = "NoGateway"
    """No tenant gateway: endpoints are reached with `kubectl port-forward`."""
    PORT_POOL_EXHAUSTED = "PortPoolExhausted"
    SUSPENDED = "Suspended"
    DELETION_IN_PROGRESS = "DeletionInProgress"
    FOREIGN_OBJECT = "ForeignObject"
    """An object the workspace would create (its namespace, a route, its ServiceSet) exists and is
    not its own (a user's namespace of that name): refused, left untouched (`models.ownership`)."""
    INTERNAL_ERROR = "InternalError"


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class StatusCondition(ColonyModel):
    """The `metav1.Condition` shape, which workspaces and colonies report their conditions in."""

    type: str
    status: str
    reason: str
    message: str = ""
    last_transition_time: datetime | None = None


class WorkspaceCondition(StatusCondition):
    """A status condition (the `metav1.Condition` shape)."""

    status: ConditionStatus


def set_condition(
    conditions: list[WorkspaceCondition],
    condition_type: ConditionType,
    status: ConditionStatus,
    reason: ConditionReason,
    message: str,
    now: datetime,
) -> list[WorkspaceCondition]:
    """The conditions with one set; its transition time moves only when its status changes.

    Args:
        conditions: the current conditions (not modified).
        condition_type: which condition.
        status: True, False or Unknown.
        reason: why.
        message: for people.
        now: the workflow's time (`workflow.now()`), never the wall clock.
    """

    def replacing(previous: WorkspaceCondition | None) -> WorkspaceCondition:
        return WorkspaceCondition(
            type=condition_type,
            status=status,
            reason=reason,
            message=message,
            last_transition_time=(
                now
                if previous is None or previous.status != status
                else previous.last_transition_time
            ),
        )

    if all(condition.type != condition_type for condition in conditions):
        return [*conditions, replacing(None)]
    return [
        replacing(condition) if condition.type == condition_type else condition
        for condition in conditions
    ]


def condition(
    conditions: list[WorkspaceCondition], condition_type: ConditionType
) -> WorkspaceCondition | None:
    """The condition of a type, or None."""
    return next((c for c in conditions if c.type == condition_type), None)


class AccessEntry(ColonyModel):
    """One way to reach an endpoint (exalsius `status.access[]`, plus the port-forward command)."""

    name: str
    protocol: EndpointProtocol
    url: str = ""
    """`https://<workspace>.<domain>`, `ssh://<domain>:<port>`; empty while unresolved."""
    ready: bool = False
    """The platform side (route, port) is programmed; the app's health is its chart's business."""
    message: str = ""
    """Why it is not ready (e.g. the port pool is exhausted), or how to reach it."""
    reason: str = ""
    """This endpoint's own state, machine-readable (Colony's, beside the exalsius fields): `Accepted`
    (routed), `NoGateway` (port-forward), `RoutingInfraNotReady` (the cluster's Gateway is
    missing), `RoutingInProgress`, `PortPoolExhausted`, or the Gateway API's reason its route was
    refused for (`BackendNotFound`: the chart rendered no Service for it, `NoMatchingParent`, ...)."""
    command: str = ""
    """Without a gateway (or while the cluster's is missing): the `kubectl port-forward` command
    that reaches it locally, on a local port of its own."""


class ServiceStateSummary(ColonyModel):
    """One service of a ServiceSet, as k0rdent reports it."""

    name: str
    state: str = ""
    """Deployed, Provisioning, Failed, ..."""
    failure_message: str = ""


class ServiceSetStatusSummary(ColonyModel):
    """A snapshot of the workspace's ServiceSet status."""

    name: str
    deployed: bool = False
    services: list[ServiceStateSummary] = Field(default_factory=list)


class EventSummary(ColonyModel):
    """A compact Kubernetes event, or one of the workflow's own."""

    last_seen: datetime | None = None
    type: str = "Normal"
    """Normal or Warning."""
    reason: str
    message: str = ""


class FailureContext(ColonyModel):
    """What the workspace was doing when it failed, for people and agents to act on: the exalsius
    `status.failureContext`, field for field, plus the message (which exalsius keeps in
    `status.message` only; Colony's status has that too)."""

    phase_when_failed: WorkspacePhase
    reason: str
    """Machine-readable: the failing condition's reason (`HelmReleaseFailed`,
    `GpuOfferingUnavailable`, `DeployTimeout`, ...), never free text."""
    message: str = ""
    """For people: what failed and why."""
    service_set_status: ServiceSetStatusSummary | None = None
    recent_events: list[EventSummary] = Field(default_factory=list)
    """Newest first, the failure itself first of all (as the exalsius operator records it)."""


def failure_context(
    phase: WorkspacePhase,
    reason: ConditionReason,
    message: str,
    now: datetime,
    *,
    service_set_status: ServiceSetStatusSummary | None = None,
    events: list[EventSummary] | None = None,
) -> FailureContext:
    """The failure context of a failure in `phase`: the failure as a Warning event first, then the
    namespace's events newest first, `RECENT_EVENTS_KEPT` in all.

    Args:
        phase: the phase the workspace was in when it failed.
        reason: the failing condition's reason.
        message: what failed and why.
        now: the workflow's time (`workflow.now()`), when the failure was seen.
        service_set_status: the ServiceSet's service states at failure, when it was installed.
        events: the workspace namespace's recent events, in any order.
    """
    failure = EventSummary(last_seen=now, type="Warning", reason=reason.value, message=message)
    oldest = datetime.min.replace(tzinfo=now.tzinfo)
    newest_first = sorted(events or [], key=lambda e: e.last_seen or oldest, reverse=True)
    return FailureContext(
        phase_when_failed=phase,
        reason=reason.value,
        message=message,
        service_set_status=service_set_status,
        recent_events=[failure, *newest_first][:RECENT_EVENTS_KEPT],
    )


class PrerequisitePhase(StrEnum):
    PENDING = "Pending"
    INSTALLING = "Installing"
    SATISFIED = "Satisfied"
    FAILED = "Failed"


class PrerequisiteSource(StrEnum):
    """Who provides a prerequisite."""

    WORKSPACE = "workspace"
    """Installed by Colony for workspaces (workflow `prereq/<ClusterDeployment>/<template>`)."""
    COLONY = "colony"
    """Found already deployed on the cluster by other means."""


class PrerequisiteStatus(ColonyModel):
    """One prerequisite of the workspace's class on its cluster."""

    name: str
    """The ServiceTemplate."""
    phase: PrerequisitePhase = PrerequisitePhase.PENDING
    namespace: str = ""
    source: PrerequisiteSource | None = None
    message: str = ""


class AdmissionState(StrEnum):
    WAITING = "waiting"
    ADMITTED = "admitted"


class AdmissionStatus(ColonyModel):
    """The workspace's place in its cluster's GPU ledger (`capacity/<ClusterDeployment>`)."""

    request_id: str
    state: AdmissionState
    position: int = 0
    """1 = next in its GPU selector's queue; 0 once admitted. The workflow knows the one of the
    ledger's first answer only (waiters are not told as the line moves): `workspace get`, `list`
    and the API put in the ledger's current one (`clients.workspaces`)."""
    placements: list[ReplicaPlacement] = Field(default_factory=list)
    message: str = ""


class WorkspaceStatus(ColonyModel):
    """What `colonyctl workspace get` shows: the answer of the workflow's `status` query."""

    name: str
    class_name: str = Field(alias="class")
    cluster: str
    phase: WorkspacePhase
    organization: str = ""
    """The organization it belongs to (empty: the operator's, deployed through Temporal)."""
    message: str = ""
    conditions: list[WorkspaceCondition] = Field(default_factory=list)
    resolved_resources: WorkspaceResources | None = None
    prerequisites: list[PrerequisiteStatus] = Field(default_factory=list)
    admission: AdmissionStatus | None = None
    access: list[AccessEntry] = Field(default_factory=list)
    failure_context: FailureContext | None = None
    namespace: str = ""
    """`ws-<name>` in the child cluster."""
    service_set: str = ""
    """The ServiceSet's name on the management cluster."""
    suspended: bool = False
    created_at: datetime | None = None
    updated_at: datetime | None = None
    current_operation: WorkspaceOperation | None = None
    queued_operations: list[WorkspaceOperation] = Field(default_factory=list)
    completed_operations: list[WorkspaceOperation] = Field(default_factory=list)
    unresponsive: Unresponsive | None = None
    """Set when its workflow cannot answer (`models.purge`): the rest is what its marks say."""

    def operation(self, operation_id: str) -> WorkspaceOperation | None:
        """The operation with this id, wherever it is (running, queued or finished)."""
        candidates = [self.current_operation, *self.queued_operations, *self.completed_operations]
        return next((op for op in candidates if op is not None and op.id == operation_id), None)


class WorkspaceState(ColonyModel):
    """Everything `WorkspaceWorkflow` knows beyond its spec; carried across continue-as-new.

    Lenient like every persisted model (unknown fields are ignored), so a later release replays it.
    """

    phase: WorkspacePhase = WorkspacePhase.PENDING
    message: str = ""
    conditions: list[WorkspaceCondition] = Field(default_factory=list)
    resolved_resources: WorkspaceResources | None = None
    prerequisites: list[PrerequisiteStatus] = Field(default_factory=list)
    admission: AdmissionStatus | None = None
    capacity_answer: CapacityAnswer | None = None
    """The ledger's latest answer to the current GPU request (`admission.request_id`): carried,
    since it may come between operations (a displaced workspace's admission, before its redeploy
    runs)."""
    admissions_requested: int = 0
    """How many capacity requests this workspace made (`capacity_request_id`'s attempt): a resume
    is a new request, a retry of the same one keeps its id."""
    access: list[AccessEntry] = Field(default_factory=list)
    tcp_ports: dict[str, int] = Field(default_factory=dict)
    """Gateway pool ports held, by endpoint name (returned to the pool on delete)."""
    failure_context: FailureContext | None = None
    recent_events: list[EventSummary] = Field(default_factory=list)
    namespace_created: bool = False
    values_secret_written: bool = False
    service_set_created: bool = False
    suspended: bool = False
    created_at: datetime | None = None
    updated_at: datetime | None = None
    incarnation: str = ""
    """The workflow's first run id: part of every id this workspace sends (capacity requests),
    so a workspace created again under the same name never reuses an old one."""
    quota_held: bool = False
    """The organization's quota ledger counts this workspace (an organization's, made since
    quotas): it is told when the workspace is gone."""
    queue: list[WorkspaceOperation] = Field(default_factory=list)
    completed: list[WorkspaceOperation] = Field(default_factory=list)
    book: OperationBook = Field(default_factory=OperationBook)
    kubeconfig: KubeconfigRef | None = None
    routes: list[RouteRecord] = Field(default_factory=list)
    """The routes created in the workspace's namespace (deleted on suspend and delete)."""
    gateway_fingerprint: str = ""
    """What the last access step found of the cluster's tenant gateway
    (`FindTenantGatewayResult.fingerprint`): a look that finds the same needs no new routes."""
    routes_look_due: bool = False
    """A look at the gateway was asked for (`gateway_changed`, or the fallback): taken between
    operations."""
    backend_looks: int = 0
    """Routings in a row that found an endpoint's Service missing (`BackendNotFound`): the next
    look waits longer after each (`workflows.workspace.access.routes_look_interval`)."""
    ports_messages: int = 0
    """Messages about pool ports sent to the ledger (each needs an id of its own)."""
    class_spec: WorkspaceClassSpec | None = None
    """The pinned class as resolved (classes are immutable): a resume does not read it again."""


class RouteRecord(ColonyModel):
    """A route the workspace created (kind and name, to delete it)."""

    name: str
    kind: str


class WorkspaceWorkflowInput(ColonyModel):
    """The input of `WorkspaceWorkflow`: the request, and the state when continuing as new."""

    spec: WorkspaceSpec
    state: WorkspaceState | None = None
    continue_as_new: ContinueAsNewPolicy = Field(default_factory=ContinueAsNewPolicy)


def capacity_request_id(workspace: str, incarnation: str, attempt: int) -> str:
    """The id of a workspace's `attempt`-th GPU request (1-based): the same for every retry of one
    request, different for a resume (the next attempt) and for a workspace deleted and created
    again under the same name (another `incarnation`: the workflow's first execution run id, which
    continue-as-new keeps). The ledger never admits a released id again, so ids must not repeat."""
    return f"{workspace}/{incarnation}#{attempt}"


# --- Names ----------------------------------------------------------------------------------------


def workspace_workflow_id(name: str, organization: str = "") -> str:
    """The id of the one workflow that owns workspace `name` of `organization`:
    `workspace/<organization>/<name>`, `workspace/<name>` in the default mode."""
    return identity.entity_workflow_id(Entity.WORKSPACE, organization, name)


def workspace_namespace(name: str) -> str:
    """The workspace's namespace in its cluster (the exalsius name, kept: a child cluster is one
    organization's, where workspace names are unique)."""
    return f"{NAMESPACE_PREFIX}{name}"


def endpoint_service_name(release: str, endpoint: AccessEndpoint) -> str:
    """The child-cluster Service behind an endpoint: the class's `serviceName`, else
    `<release>-<endpoint>` (the exalsius chart convention)."""
    return endpoint.service_name or f"{release}-{endpoint.name}"


# --- Access ---------------------------------------------------------------------------------------


class GatewayInfo(ColonyModel):
    """The tenant gateway a cluster is attached to, as routing needs it."""

    domain: str
    """The wildcard listener's domain (`*.dos-lab.example` -> `dos-lab.example`)."""
    https: bool = True
    """True when the wildcard listener is HTTPS (production); HTTP in dev."""
    tcp_ports: list[int] = Field(default_factory=list)
    """The port pool: the gateway's TCP listeners, for SSH and TCP endpoints."""
    http_port: int | None = None
    """The port of the listener HTTP endpoints are routed through; URLs name it unless it is the
    scheme's own (443 for https, 80 for http). None: the scheme's own."""


def http_hostname(workspace: str, endpoint: str, domain: str, *, primary: bool) -> str:
    """`<workspace>.<domain>` for the first HTTP endpoint, `<workspace>-<endpoint>.<domain>` for others.

    One label deep, so every hostname is under the tenant's wildcard certificate (exalsius ADR-0001).
    """
    label = workspace if primary else f"{workspace}-{endpoint}"
    return f"{label}.{domain}"


def allocate_pool_port(pool: list[int], taken: set[int]) -> int | None:
    """The lowest free port of the gateway's pool, or None when it is exhausted (deterministic)."""
    return next((port for port in sorted(pool) if port not in taken), None)


PORT_MAX = 65535


def local_port(port: int) -> int:
    """The local port a port-forward uses: the same when unprivileged, else 8000 + port (80 -> 8080,
    22 -> 8022), so no root is needed on the user's machine."""
    return port if port >= 1024 else 8000 + port


def local_ports(endpoints: list[AccessEndpoint]) -> dict[str, int]:
    """A local port per endpoint, all different, so every endpoint of a workspace can be forwarded
    at once: each its `local_port`, or the next one up that no endpoint before it took (two HTTP
    endpoints on port 80 get 8080 and 8081). Deterministic: the class's order decides."""
    taken: set[int] = set()
    chosen: dict[str, int] = {}
    for endpoint in endpoints:
        port = local_port(endpoint.port)
        while port in taken:
            port = port + 1 if port < PORT_MAX else 1024
        taken.add(port)
        chosen[endpoint.name] = port
    return chosen


def port_forward_command(
    release: str,
    workspace: str,
    endpoint: AccessEndpoint,
    kubeconfig: str | None = None,
    local: int | None = None,
) -> str:
    """The `kubectl port-forward` command reaching an endpoint when the cluster has no gateway.

    Args:
        release: the workspace's Helm release (`WorkspaceSpec.release_name`).
        workspace: the workspace's name.
        endpoint: the class's endpoint.
        kubeconfig: the kubeconfig path to name (`colonyctl kubeconfig --cluster X --output ...`).
        local: the local port (`local_ports`); default `local_port(endpoint.port)`.
    """
    service = endpoint_service_name(release, endpoint)
    config = f" --kubeconfig {kubeconfig}" if kubeconfig else ""
    mine = local if local is not None else local_port(endpoint.port)
    return (
        f"kubectl{config} port-forward -n {workspace_namespace(workspace)} "
        f"svc/{service} {mine}:{endpoint.port}"
    )


_DEFAULT_PORTS = {"https": 443, "http": 80}


def _port_suffix(scheme: str, port: int | None) -> str:
    """`:<port>` when a URL must name its port (not the scheme's default), else nothing."""
    return "" if port is None or port == _DEFAULT_PORTS.get(scheme) else f":{port}"


def _scheme(protocol: EndpointProtocol, https: bool) -> str:
    if protocol is EndpointProtocol.HTTP:
        return "https" if https else "http"
    return protocol.value.lower()


def plan_access(
    workspace: str,
    release: str,
    workspace_class: WorkspaceClassSpec,
    gateway: GatewayInfo | None,
    tcp_ports: dict[str, int] | None = None,
    kubeconfig: str | None = None,
) -> list[AccessEntry]:
    """The access list of a workspace before its routes are confirmed.

    With a gateway: HTTP endpoints get their hostnames (not ready until the route is accepted),
    SSH/TCP endpoints the pool port in `tcp_ports` (`ssh://<domain>:<port>`), or a message when the
    pool had none left. Without one: every endpoint is ready through `kubectl port-forward`, the
    command in `command` and the local URL in `url`.

    Args:
        workspace: the workspace's name.
        release: its Helm release (the Services behind its endpoints are named after it).
        workspace_class: its class (the endpoints, in order: the first HTTP one is the primary).
        gateway: the cluster's tenant gateway, or None.
        tcp_ports: pool ports allocated so far, by endpoint name.
        kubeconfig: a kubeconfig path to put in port-forward commands.
    """
    entries: list[AccessEntry] = []
    ports = tcp_ports or {}
    locally = local_ports(workspace_class.access_endpoints)
    primary_taken = False
    for endpoint in workspace_class.access_endpoints:
        entry = AccessEntry(name=endpoint.name, protocol=endpoint.protocol)
        if gateway is None:
            local = locally[endpoint.name]
            command = port_forward_command(release, workspace, endpoint, kubeconfig, local)
            entry.url = f"{_scheme(endpoint.protocol, False)}://localhost:{local}"
            entry.ready = True
            entry.reason = ConditionReason.NO_GATEWAY.value
            entry.command = command
            entry.message = f"no gateway: reach it with `{command}`"
        elif endpoint.protocol is EndpointProtocol.HTTP:
            host = http_hostname(
                workspace, endpoint.name, gateway.domain, primary=not primary_taken
            )
            label = host.split(".", 1)[0]
            primary_taken = True
            if len(label) > DNS_LABEL_MAX:
                entry.message = (
                    f"hostname label '{label}' exceeds {DNS_LABEL_MAX} characters; "
                    "shorten the workspace or endpoint name"
                )
            else:
                scheme = _scheme(endpoint.protocol, gateway.https)
                entry.url = f"{scheme}://{host}{_port_suffix(scheme, gateway.http_port)}"
                entry.message = "waiting for the gateway to accept the route"
        elif endpoint.name in ports:
            entry.url = f"{_scheme(endpoint.protocol, gateway.https)}://{gateway.domain}:{ports[endpoint.name]}"
            entry.message = "waiting for the gateway to accept the route"
        elif not gateway.tcp_ports:
            entry.message = (
                "the tenant gateway has no TCP listeners (port pool); ask an administrator for one"
            )
        else:
            entry.message = (
                f"port pool exhausted: all {len(gateway.tcp_ports)} TCP listeners of the tenant "
                "gateway are in use; ask an administrator to widen the pool"
            )
        if not entry.reason:
            entry.reason = _planned_reason(entry)
        entries.append(entry)
    return entries


def _planned_reason(entry: AccessEntry) -> str:
    """An endpoint's state before its route is seen: routed when the gateway accepts it, or why it
    cannot be (a hostname too long, no pool port left)."""
    if entry.url:
        return ConditionReason.ROUTING_IN_PROGRESS.value
    if entry.protocol is EndpointProtocol.HTTP:
        return ConditionReason.ROUTING_ERROR.value
    return ConditionReason.PORT_POOL_EXHAUSTED.value
