"""The contracts of the workspace side: activity requests and results, and the messages the
workspace, capacity-ledger, prerequisite, catalog and cluster workflows send each other.

Workflows call activities through the declarations in `workflows/workspace_calls.py`; the
implementations are in `activities/management/` (classes, ServiceSets and their values Secrets),
`activities/child_cluster/` (namespaces, routes, the GPU inventory, events) and
`activities/temporal.py` (signal-with-start, waits on other workflows). As everywhere, secrets never cross this boundary in
plaintext: secret prompt answers travel sealed (`SealedValue`) and are unsealed only inside the
activity that writes them into a Secret on the management cluster.

Messaging between workflows follows the signal contract of `models/signals.py`: every message has a
`request_id`, the receiver acts on an id once, and answers (when one is expected) by a signal to
`reply_to` carrying the same id.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import Field

from models import identity
from models.activity_api import CLUSTER_LABEL, DeleteResult, KubeconfigRef
from models.base import ColonyModel
from models.capacity import (
    CapacityAnswer,
    CapacityLedgerState,
    CapacityRequest,
    GpuHolder,
    GpuNode,
)
from models.cluster import ClusterPhase, ClusterStatus
from models.names import shorten_name
from models.operations import ContinueAsNewPolicy, Inbox, OperationState
from models.ownership import Owner
from models.purge import Unresponsive
from models.sealed import SealedValue
from models.workspace import (
    AccessEntry,
    EventSummary,
    GatewayInfo,
    PrerequisitePhase,
    PrerequisiteSource,
    ServiceSetStatusSummary,
)
from models.workspace_class import WorkspaceClassSpec

WORKSPACE_LABEL = "colony.dev/workspace"
"""Label on a workspace's ServiceSet, values Secret, namespace and routes: the workspace's name."""
PREREQUISITE_LABEL = "colony.dev/prerequisite"
"""Label on a prerequisite's ServiceSet: the ServiceTemplate it installs."""
EXALSIUS_WORKSPACE_LABEL = "workspaces.exalsius.ai/workspace"
"""The exalsius operator's label on a workspace's namespace and routes: the workspace's name.
Colony puts it beside its own on every object of a workspace, so tools written for the operator
find them."""
EXALSIUS_ROLE_LABEL = "workspaces.exalsius.ai/role"
EXALSIUS_PREREQUISITE_ROLE = "prerequisite"
"""The exalsius operator marks its prerequisite ServiceSets `workspaces.exalsius.ai/role=prerequisite`."""
EXALSIUS_CLUSTER_DEPLOYMENT_LABEL = "workspaces.exalsius.ai/cluster-deployment"
EXALSIUS_TEMPLATE_LABEL = "workspaces.exalsius.ai/template"
"""... with the ClusterDeployment and the ServiceTemplate it installs."""


def workspace_labels(name: str) -> dict[str, str]:
    """The labels every object of workspace `name` carries: Colony's and the exalsius operator's
    (a workspace name is a DNS label: a valid label value as it is)."""
    return {WORKSPACE_LABEL: name, EXALSIUS_WORKSPACE_LABEL: name}


def prerequisite_labels(template: str, cluster_deployment: str) -> dict[str, str]:
    """The labels of a prerequisite's ServiceSet: Colony's (the template; the ClusterDeployment,
    `colony.dev/cluster`) and the exalsius operator's (role, ClusterDeployment and template, cut
    to a label value's 63 characters with a hash when longer, as the operator does)."""
    return {
        PREREQUISITE_LABEL: template,
        CLUSTER_LABEL: cluster_deployment,
        EXALSIUS_ROLE_LABEL: EXALSIUS_PREREQUISITE_ROLE,
        EXALSIUS_CLUSTER_DEPLOYMENT_LABEL: shorten_name(cluster_deployment),
        EXALSIUS_TEMPLATE_LABEL: shorten_name(template),
    }


CLASS_NAME_ANNOTATION = "colony.dev/class-name"
"""Annotation on an organization's own `WorkspaceClass` object: the class's name (the object's
is derived from the organization and it: `models.identity.workspace_class_object_name`)."""
COLONY_NAMESPACE = "colony-system"
"""Colony's own namespace on the management cluster (values Secrets, API keys, the watcher)."""


class WorkspaceActivity(StrEnum):
    """The registered names of the workspace side's activities."""

    GET_WORKSPACE_CLASS = "get_workspace_class"
    LIST_WORKSPACE_CLASSES = "list_workspace_classes"
    PUBLISH_WORKSPACE_CLASS = "publish_workspace_class"
    PUBLISH_OBJECTS = "publish_objects"
    CHECK_SERVICE_TEMPLATE = "check_service_template"
    APPLY_SERVICE_SET = "apply_service_set"
    AWAIT_SERVICE_SET = "await_service_set"
    DELETE_SERVICE_SET = "delete_service_set"
    FIND_SERVICE_SETS = "find_service_sets"
    WRITE_VALUES_SECRET = "write_values_secret"
    DELETE_VALUES_SECRET = "delete_values_secret"
    ENSURE_NAMESPACE = "ensure_namespace"
    DELETE_NAMESPACE = "delete_namespace"
    READ_GPU_INVENTORY = "read_gpu_inventory"
    FIND_TENANT_GATEWAY = "find_tenant_gateway"
    APPLY_ROUTES = "apply_routes"
    AWAIT_ROUTES = "await_routes"
    DELETE_ROUTES = "delete_routes"
    RECENT_EVENTS = "recent_events"
    SIGNAL_WITH_START = "signal_with_start"
    AWAIT_WORKFLOWS_CLOSED = "await_workflows_closed"
    LIST_WORKFLOWS = "list_workflows"
    AWAIT_CLUSTER_CREATED = "await_cluster_created"


# --- Classes -------------------------------------------------------------------------------------


class GetWorkspaceClassRequest(ColonyModel):
    """The class a workspace of `organization` pins by `name`: the organization's own, else the
    shared catalog's (never another organization's)."""

    name: str
    organization: str = ""


class GetWorkspaceClassResult(ColonyModel):
    found: bool
    spec: WorkspaceClassSpec | None = None
    problem: str = ""
    """The stored object does not validate as a class (edited by hand): why."""


class ListWorkspaceClassesRequest(ColonyModel):
    pass


class ListWorkspaceClassesResult(ColonyModel):
    classes: list[WorkspaceClassSpec] = Field(default_factory=list)
    """The shared catalog's."""
    private: dict[str, list[WorkspaceClassSpec]] = Field(default_factory=dict)
    """Each organization's own classes, by organization."""
    unreadable: list[str] = Field(default_factory=list)
    """`name: problem` of stored objects that are not valid classes."""


class PublishWorkspaceClassRequest(ColonyModel):
    """Store a class (and, when given, its ServiceTemplate and other objects it needs) on the
    management cluster. Idempotent; a class of the same name with another definition is refused
    (`ClassConflict`): classes are immutable, a new version is a new name."""

    spec: WorkspaceClassSpec
    objects: list[dict[str, Any]] = Field(default_factory=list)
    """ServiceTemplates (and their HelmRepository) to create when absent, as manifests (the
    shared catalog's only)."""
    organization: str = ""
    """Empty: the catalog every organization shares (an operator publishes it). Otherwise that
    organization's own class, which only it sees, and which may not take a shared class's name."""


class PublishWorkspaceClassResult(ColonyModel):
    created: bool
    """False when the identical class was already there."""
    objects_created: list[str] = Field(default_factory=list)
    objects_skipped: list[str] = Field(default_factory=list)
    """Objects of kinds the management cluster does not serve, with the reason."""


class PublishObjectsRequest(ColonyModel):
    """Store objects classes need (ServiceTemplates applied without a class, as
    `colonyctl apply -f` does with a k0rdent ServiceTemplate) when absent; existing objects of the
    same name are left as they are (k0rdent templates are immutable: a new version is a new
    name)."""

    objects: list[dict[str, Any]]


class PublishObjectsResult(ColonyModel):
    created: list[str] = Field(default_factory=list)
    """`Kind/name` of the objects created."""
    existing: list[str] = Field(default_factory=list)
    """`Kind/name` of the objects that were there already (left as they are)."""
    skipped: list[str] = Field(default_factory=list)
    """Objects of kinds the management cluster does not serve, with the reason."""


class CheckServiceTemplateRequest(ColonyModel):
    namespace: str
    name: str


class CheckServiceTemplateResult(ColonyModel):
    found: bool
    valid: bool = False
    message: str = ""


# --- ServiceSets -----------------------------------------------------------------------------------


class ServiceSetService(ColonyModel):
    """One service of a ServiceSet: a ServiceTemplate installed as a Helm release."""

    name: str
    """The Helm release name."""
    namespace: str
    template: str
    values: dict[str, Any] = Field(default_factory=dict)
    values_from_secret: str = ""
    """A Secret beside the ServiceSet whose `values` key holds more values (secrets)."""


class ApplyServiceSetRequest(ColonyModel):
    """Create (or bring up to date) a k0rdent ServiceSet targeting the cluster's ClusterDeployment."""

    namespace: str
    name: str
    cluster_deployment: str
    services: list[ServiceSetService]
    owner: Owner
    """One of that name that is not this owner's is refused (`ForeignObject`), never changed."""
    labels: dict[str, str] = Field(default_factory=dict)


class ApplyServiceSetResult(ColonyModel):
    created: bool
    generation: int = 0


class ServiceSetOutcome(StrEnum):
    DEPLOYED = "deployed"
    FAILED = "failed"
    GONE = "gone"
    CHANGED = "changed"
    DEADLINE = "deadline"


class AwaitServiceSetRequest(ColonyModel):
    """Wait until `service` of the ServiceSet is Deployed or Failed, its state changes from `known`,
    it is gone, or `deadline` (heartbeating the states)."""

    namespace: str
    name: str
    service: str
    owner: Owner
    """One of that name that is not this owner's is not ours: reported GONE."""
    deadline: datetime
    known_state: str = ""
    generation: int = 0
    """The generation the apply wrote: a status observed for an older one (the previous install's
    "Deployed" after an update) is not an answer. 0: any."""


class AwaitServiceSetResult(ColonyModel):
    outcome: ServiceSetOutcome
    status: ServiceSetStatusSummary | None = None
    state: str = ""
    message: str = ""


class DeleteServiceSetRequest(ColonyModel):
    namespace: str
    name: str
    owner: Owner
    """Only this owner's is deleted; another's is left alone."""
    wait_until: datetime | None = None
    """Wait (heartbeating) until it is gone: k0rdent uninstalls its releases first."""


class DeleteOwnedResult(DeleteResult):
    """What a delete of an owner's object found; one of that name that is not the owner's is
    never deleted."""

    foreign: bool = False
    """One of that name exists and is not this owner's: it was left alone."""


class DeleteServiceSetResult(DeleteOwnedResult):
    """The ServiceSet's delete."""


class FindServiceSetsRequest(ColonyModel):
    """ServiceSets targeting `cluster_deployment` that install `template` (any owner)."""

    namespace: str
    cluster_deployment: str
    template: str


class FoundServiceSet(ColonyModel):
    name: str
    service: str
    service_namespace: str
    state: str = ""
    colony_prerequisite: bool = False
    """Created by Colony's prerequisite workflow (label `colony.dev/prerequisite`)."""


class FindServiceSetsResult(ColonyModel):
    found: list[FoundServiceSet] = Field(default_factory=list)


class WriteValuesSecretRequest(ColonyModel):
    """Unseal the secret values and write them, as a values YAML, into a Secret on the management
    cluster (the ServiceSet's `valuesFrom`). Only sealed values cross this boundary."""

    namespace: str
    name: str
    workspace: str
    secret_values: dict[str, SealedValue]
    owner: Owner
    """The workspace's: its organization scopes the sealed values; another owner's Secret of that
    name is refused, never replaced."""
    labels: dict[str, str] = Field(default_factory=dict)


class WriteValuesSecretResult(ColonyModel):
    keys: int


class DeleteValuesSecretRequest(ColonyModel):
    namespace: str
    name: str
    owner: Owner
    """Only this owner's is deleted."""


class DeleteValuesSecretResult(ColonyModel):
    existed: bool
    foreign: bool = False


# --- Child cluster ---------------------------------------------------------------------------------


class EnsureNamespaceRequest(ColonyModel):
    """Create the namespace with the owner's marks; one that exists is taken only when it is this
    owner's (a user's own namespace of that name is refused, `ForeignObject`, and left as it is)."""

    kubeconfig: KubeconfigRef
    name: str
    owner: Owner
    labels: dict[str, str] = Field(default_factory=dict)


class EnsureNamespaceResult(ColonyModel):
    created: bool


class DeleteNamespaceRequest(ColonyModel):
    """Delete the namespace if it is this owner's; any other is left as it is."""

    kubeconfig: KubeconfigRef
    name: str
    owner: Owner
    wait_until: datetime | None = None


class DeleteNamespaceResult(DeleteOwnedResult):
    """The namespace's delete."""


class ReadGpuInventoryRequest(ColonyModel):
    """Every node with its GPUs, and the GPUs pods outside workspace namespaces request on it."""

    kubeconfig: KubeconfigRef
    workspace_namespace_prefix: str = "ws-"
    cluster_deployment: str = ""
    """When set, also the workflow that owns this ClusterDeployment (in the kubeconfig's
    namespace), from its `colony.dev/workflow-id` annotation."""


class ReadGpuInventoryResult(ColonyModel):
    nodes: list[GpuNode] = Field(default_factory=list)
    cluster_workflow_id: str = ""
    """The owning cluster workflow (`cluster/<org>/<name>`); empty when not asked or not found."""


class FindTenantGatewayRequest(ColonyModel):
    kubeconfig: KubeconfigRef
    cluster_deployment: str = ""
    """When set, also the domain this ClusterDeployment (in the kubeconfig's namespace) is
    attached to by its label `colony.dev/tenant-gateway-domain`."""


class FindTenantGatewayResult(ColonyModel):
    """The cluster's tenant gateway as it is now: the Gateway labelled
    `colony.dev/tenant-gateway=true` in the child (None: there is none), with the TCP listener
    ports other routes already hold, and the domain the ClusterDeployment's label says the cluster
    is attached to (a Gateway missing while the label is set: routing infrastructure not ready)."""

    gateway: GatewayInfo | None = None
    gateway_namespace: str = ""
    gateway_name: str = ""
    gateway_uid: str = ""
    gateway_generation: int = 0
    taken_ports: list[int] = Field(default_factory=list)
    expected_domain: str = ""
    """The ClusterDeployment's `colony.dev/tenant-gateway-domain` label; empty: not attached."""

    def fingerprint(self) -> str:
        """What routes depend on: which Gateway (its uid and generation), its domain, scheme and
        pool, and the domain expected; equal fingerprints need no new routes."""
        if self.gateway is None:
            return f"none/{self.expected_domain}"
        return "/".join(
            [
                self.gateway_namespace,
                self.gateway_name,
                self.gateway_uid,
                str(self.gateway_generation),
                self.gateway.model_dump_json(),
                self.expected_domain,
            ]
        )


class RouteSpec(ColonyModel):
    """An HTTPRoute (hostname) or a TCPRoute (listener port) to one endpoint's Service."""

    name: str
    kind: str
    """HTTPRoute or TCPRoute."""
    service: str
    port: int
    hostname: str = ""
    listener_port: int = 0
    """TCPRoute: the gateway listener (port) it attaches to (`sectionName` tcp-<port>)."""
    section_name: str = ""
    """HTTPRoute: the listener it attaches to (`https`, or `http` where the gateway has no TLS)."""


class ApplyRoutesRequest(ColonyModel):
    """Create the routes with the owner's marks; one of a route's name that is not this owner's
    is refused (`ForeignObject`), never taken over."""

    kubeconfig: KubeconfigRef
    namespace: str
    gateway_namespace: str
    gateway_name: str
    routes: list[RouteSpec]
    owner: Owner
    labels: dict[str, str] = Field(default_factory=dict)


class ApplyRoutesResult(ColonyModel):
    created: list[str] = Field(default_factory=list)
    updated: list[str] = Field(default_factory=list)
    """Routes of this owner that were there with another spec (the Gateway moved, a port
    changed), brought to the one asked for."""


class RouteState(ColonyModel):
    """One route as the gateway's controller answered for it."""

    name: str
    accepted: bool = False
    """Accepted by its Gateway and every backend resolved: traffic reaches the endpoint."""
    settled: bool = False
    """The controller has answered for the route's current spec (accepted or not): waiting longer
    changes nothing until the world does (a missing Service stays missing)."""
    reason: str = ""
    """`Accepted`, or the Gateway API reason of the first condition that is not True
    (`BackendNotFound`, `NoMatchingParent`, ...); `Pending` while no controller answered."""
    message: str = ""


class AwaitRoutesRequest(ColonyModel):
    """Wait until the controller answered for every route (or the deadline), then report each."""

    kubeconfig: KubeconfigRef
    namespace: str
    routes: list[RouteSpec]
    owner: Owner
    """A route of that name that is not this owner's counts as not found."""
    deadline: datetime


class AwaitRoutesResult(ColonyModel):
    routes: list[RouteState] = Field(default_factory=list)
    all_accepted: bool = False


class DeleteRoutesRequest(ColonyModel):
    """Delete the routes that are this owner's; any other of those names is left alone."""

    kubeconfig: KubeconfigRef
    namespace: str
    routes: list[RouteSpec]
    owner: Owner


class DeleteRoutesResult(ColonyModel):
    deleted: list[str] = Field(default_factory=list)


class RecentEventsRequest(ColonyModel):
    kubeconfig: KubeconfigRef
    namespace: str
    limit: int = 10


class RecentEventsResult(ColonyModel):
    events: list[EventSummary] = Field(default_factory=list)


# --- Temporal (workflow to workflow) ----------------------------------------------------------------


class SignalWithStartRequest(ColonyModel):
    """Signal a workflow, starting it first when it does not run (one per id, however many callers
    race): how a workspace reaches its cluster's ledger or a prerequisite's installer."""

    workflow: str
    """The workflow type's registered name."""
    workflow_id: str
    input: dict[str, Any]
    """The workflow's input model, as JSON."""
    signal: str
    payload: dict[str, Any]
    static_summary: str = ""


class SignalWithStartResult(ColonyModel):
    run_id: str


class ListWorkflowsRequest(ColonyModel):
    """Running workflows matching a visibility query (search attributes)."""

    query: str


class ListWorkflowsResult(ColonyModel):
    workflow_ids: list[str] = Field(default_factory=list)


class AwaitWorkflowsClosedRequest(ColonyModel):
    workflow_ids: list[str]
    deadline: datetime
    stop_when_unresponsive: bool = False
    """Return as soon as one of them cannot answer (`models.purge.task_trouble`: its workflow
    task keeps failing, or no worker has taken it for a minute): waiting on cannot help it."""


class AwaitWorkflowsClosedResult(ColonyModel):
    open: list[str] = Field(default_factory=list)
    unresponsive: list[Unresponsive] = Field(default_factory=list)
    """Those of `open` that cannot answer (with `stop_when_unresponsive`), and why."""


class AwaitWorkflowsClosedProgress(ColonyModel):
    """What a wait on workflows reports in its heartbeat (the Web UI's pending activity)."""

    open: list[str] = Field(default_factory=list)


class AwaitClusterCreatedRequest(ColonyModel):
    """Wait until the cluster's workflow has finished creating it (its control plane and the
    create's node pools), or `deadline`."""

    cluster: str
    """The cluster as its organization names it (for the messages)."""
    workflow_id: str
    status_query: str
    """The name of its query answering `ClusterStatus` (from the cluster's contract, which
    activities do not import)."""
    deadline: datetime


class ClusterCreatedOutcome(StrEnum):
    CREATED = "created"
    """Its creation has finished (or there is none to wait for: no such workflow)."""
    FAILED = "failed"
    """The cluster failed, or the create this wait saw running ended failed or cancelled."""
    GONE = "gone"
    """It is being deleted, or was."""
    DEADLINE = "deadline"


class AwaitClusterCreatedResult(ColonyModel):
    outcome: ClusterCreatedOutcome
    message: str = ""
    """Why it failed or went, as the cluster says it."""


class ClusterCreateWait(ColonyModel):
    """An `await_cluster_created`'s progress (its heartbeat details): whether it saw the
    cluster's creation under way, so that a retried attempt still reports how it ended."""

    saw_creating: bool = False


def cluster_created_outcome(
    cluster: str, status: ClusterStatus, *, saw_creating: bool
) -> AwaitClusterCreatedResult | None:
    """What a wait for the cluster's creation answers, given its workflow's status; None while
    the creation is under way.

    A create that ended failed (a pool's hosts unavailable) leaves a Ready cluster: it fails the
    wait only when the wait saw it running, for a workspace deployed onto that cluster later
    meets the cluster as it is, through admission as usual.
    """
    if status.phase in (ClusterPhase.DELETING, ClusterPhase.DELETED):
        return AwaitClusterCreatedResult(
            outcome=ClusterCreatedOutcome.GONE,
            message=f"cluster '{cluster}' was deleted"
            if status.phase is ClusterPhase.DELETED
            else f"cluster '{cluster}' is being deleted",
        )
    if status.phase is ClusterPhase.FAILED:
        return AwaitClusterCreatedResult(
            outcome=ClusterCreatedOutcome.FAILED,
            message=f"cluster '{cluster}' failed: {status.reason or 'no reason given'}",
        )
    if status.creating:
        return None
    create = status.create_operation()
    if saw_creating and create is not None and create.state is not OperationState.SUCCEEDED:
        return AwaitClusterCreatedResult(
            outcome=ClusterCreatedOutcome.FAILED,
            message=f"creating cluster '{cluster}' {create.state.value}: "
            f"{create.reason or 'no reason given'}",
        )
    return AwaitClusterCreatedResult(outcome=ClusterCreatedOutcome.CREATED)


# --- Messages between workflows -----------------------------------------------------------------


class CapacityMessageKind(StrEnum):
    REQUEST = "request"
    RELEASE = "release"
    CHANGED = "changed"
    """The cluster's GPUs changed (a pool grew or shrank, a node left, another service's use)."""
    CLOSE = "close"
    """The cluster is gone: the ledger ends."""
    PORTS = "ports"
    """A workspace needs ports of the tenant gateway's TCP pool (one per SSH/TCP endpoint)."""
    RELEASE_PORTS = "release_ports"
    """A workspace gives its pool ports back (suspend, delete)."""


class CapacityMessage(ColonyModel):
    """To a cluster's ledger (`capacity/<ClusterDeployment>`, signal `capacity`): a workspace asks for GPUs,
    gives them back, or a service says the cluster's GPUs changed (`capacity_changed`)."""

    request_id: str
    """This message's id (a repeat is ignored)."""
    kind: CapacityMessageKind
    request: CapacityRequest | None = None
    """`request`: what is asked for."""
    target: str = ""
    """`release`: the capacity request id to release."""
    holder: str = ""
    """`ports`, `release_ports`: the workspace holding the ports."""
    endpoints: list[str] = Field(default_factory=list)
    """`ports`: the endpoints that need one port each."""
    pool: list[int] = Field(default_factory=list)
    """`ports`: the gateway's TCP listener ports."""
    taken: list[int] = Field(default_factory=list)
    """`ports`: ports routes Colony did not make already use."""
    reply_to: str = ""
    """The workflow id to answer (signal `capacity_answer`)."""
    reason: str = ""


class CapacityWorkflowState(ColonyModel):
    """Everything `CapacityLedgerWorkflow` knows, carried whole across continue-as-new (which may
    happen between any two messages)."""

    ledger: CapacityLedgerState
    """The pure ledger's own state (`CapacityLedger.snapshot`; each request carries the workflow
    to answer)."""
    inventory_loaded: bool = False
    ports: dict[str, str] = Field(default_factory=dict)
    """Gateway pool port (as a string) -> `<workspace>/<endpoint>` holding it."""
    inbox: Inbox[CapacityMessage] = Field(default_factory=Inbox[CapacityMessage])
    """Messages received and not yet handled, and the request ids seen."""
    refresh_due: bool = False
    """A refresh of the inventory was asked for and not yet done."""


class CapacityLedgerInput(ColonyModel):
    cluster: str
    """The cluster's ClusterDeployment (`models.identity`: injective across organizations)."""
    cluster_workflow_id: str = ""
    """The cluster's workflow, told which workspaces hold GPUs (found with the inventory)."""
    kubeconfig: KubeconfigRef | None = None
    """The cluster's kubeconfig Secret (default `kcm-system/<cluster>-kubeconfig`)."""
    state: CapacityWorkflowState | None = None
    """The ledger's state when continuing as new (or given, to start with a known ledger)."""
    continue_as_new: ContinueAsNewPolicy = Field(default_factory=ContinueAsNewPolicy)


class CapacityLedgerStatus(ColonyModel):
    """The `status` query of a ledger: inventory, holders and queues."""

    cluster: str
    nodes: list[GpuNode] = Field(default_factory=list)
    holders: list[GpuHolder] = Field(default_factory=list)
    waiting: list[CapacityAnswer] = Field(default_factory=list)
    """The first `STATUS_WAITING_SHOWN` of each queue, in order (the whole line can be 10,000)."""
    queues: dict[str, int] = Field(default_factory=dict)
    """How many wait, per selector."""
    free: dict[str, int] = Field(default_factory=dict)


STATUS_WAITING_SHOWN = 100
"""Waiting requests per queue a ledger's `status` lists: enough for a person, small enough that
the answer stays far under the 4 MB gRPC message limit at any depth."""


class CapacityAnswersQuery(ColonyModel):
    """The `answers` query of a ledger: where these requests (or these workspaces' requests) stand,
    positions worked out now."""

    request_ids: list[str] = Field(default_factory=list)
    workspaces: list[str] = Field(default_factory=list)


class CapacityAnswers(ColonyModel):
    """Answers, in the order asked (request ids first); ids the ledger does not know are left out."""

    answers: list[CapacityAnswer] = Field(default_factory=list)


class HoldingsQuery(ColonyModel):
    """The `holdings` query of a ledger: what one workspace holds there, found by its marks in the
    ledger: the workflow its GPU request answers (`reply_to`), and the holder of its ports."""

    reply_to: str
    """The workspace's workflow id."""
    workspace: str
    """The workspace's name (its ports' holder in this cluster's ledger)."""


class LedgerHoldings(ColonyModel):
    """What a workspace holds in its cluster's ledger: its live GPU request (admitted or waiting)
    and its gateway pool ports."""

    requests: list[CapacityAnswer] = Field(default_factory=list)
    ports: dict[str, int] = Field(default_factory=dict)
    """Endpoint -> pool port."""


class ReadLedgerHoldingsRequest(ColonyModel):
    """Ask a ledger (`capacity/<ClusterDeployment>`) what a workspace holds (`holdings`); a ledger
    that does not run holds nothing."""

    ledger_workflow_id: str
    query_name: str
    """The ledger's `holdings` query (its contract's name)."""
    query: HoldingsQuery


class PortsAnswer(ColonyModel):
    """From a ledger to a workspace (signal `ports_answer`): its pool ports, by endpoint."""

    request_id: str
    ports: dict[str, int] = Field(default_factory=dict)
    exhausted: list[str] = Field(default_factory=list)
    """Endpoints left without a port: every listener of the pool is in use."""


class GpuHoldersMessage(ColonyModel):
    """From a ledger to its cluster's workflow (signal `gpu_holders`): which workspaces hold GPUs on
    which nodes, so the cluster's validator can refuse a scale-down that would take them."""

    request_id: str
    holders: list[GpuHolder] = Field(default_factory=list)


class PrerequisiteMessage(ColonyModel):
    """To `prereq/<ClusterDeployment>/<template>` (signal `prerequisite`): a workspace needs it
    installed."""

    request_id: str
    reply_to: str
    namespace: str
    values: dict[str, Any] = Field(default_factory=dict)


class PrerequisiteInput(ColonyModel):
    cluster: str
    """The cluster, by its name in its organization."""
    organization: str = ""
    template: str
    template_namespace: str
    namespace: str
    values: dict[str, Any] = Field(default_factory=dict)
    deploy_timeout_seconds: int = 900
    state: PrerequisiteState | None = None
    """The installer's state when continuing as new."""
    continue_as_new: ContinueAsNewPolicy = Field(default_factory=ContinueAsNewPolicy)

    @property
    def cluster_deployment(self) -> str:
        return identity.cluster_deployment_name(self.organization, self.cluster)


class PrerequisiteAnswer(ColonyModel):
    """From a prerequisite's workflow to a workspace (signal `prerequisite_answer`)."""

    request_id: str
    template: str
    phase: PrerequisitePhase
    source: PrerequisiteSource | None = None
    namespace: str = ""
    message: str = ""


class PrerequisiteState(ColonyModel):
    """Everything `PrerequisiteWorkflow` knows, carried across continue-as-new."""

    inbox: Inbox[PrerequisiteMessage] = Field(default_factory=Inbox[PrerequisiteMessage])
    result: PrerequisiteAnswer | None = None
    """The installation's outcome, once known (the first request installs; the others hear it)."""


class DeleteRequested(ColonyModel):
    """To a workspace (signal `delete_requested`): its cluster is being deleted (or a colony)."""

    request_id: str
    reason: str = ""


class CatalogStatus(ColonyModel):
    """The `classes` query of the catalog workflow."""

    classes: list[WorkspaceClassSpec] = Field(default_factory=list)
    """The shared catalog (with `for_organization`: and that organization's own classes)."""
    private: dict[str, list[WorkspaceClassSpec]] = Field(default_factory=dict)
    """Each organization's own classes, by organization (empty in `for_organization`'s view)."""
    unreadable: list[str] = Field(default_factory=list)
    """Stored objects that are not valid classes (edited by hand), with why."""
    seeded: list[str] = Field(default_factory=list)
    """Classes of Colony's shipped catalog this workflow published."""

    def for_organization(self, organization: str) -> CatalogStatus:
        """What `organization` sees: the shared classes and its own (no other organization's)."""
        own = self.private.get(organization, []) if organization else []
        return self.model_copy(
            update={"classes": sorted([*self.classes, *own], key=lambda c: c.name), "private": {}}
        )


CATALOG_WORKFLOW_ID = "catalog/workspace-classes"
"""The one catalog workflow: `colonyctl class publish|list|get` address it."""


CatalogMessage = PublishWorkspaceClassRequest | PublishObjectsRequest
"""What the catalog handles one at a time: the updates that write to the management cluster."""


class CatalogState(ColonyModel):
    """Everything `CatalogWorkflow` knows, carried across continue-as-new."""

    status: CatalogStatus = Field(default_factory=CatalogStatus)
    inbox: Inbox[CatalogMessage] = Field(default_factory=Inbox[CatalogMessage])
    refresh_due: bool = True
    """A read of the classes was asked for (at first, and on `refresh`) and not yet done."""


class CatalogInput(ColonyModel):
    """The catalog workflow's input: Colony's shipped classes to publish when absent (the worker
    builds it from `catalog/`), and the state when continuing as new."""

    seed: list[PublishWorkspaceClassRequest] = Field(default_factory=list)
    state: CatalogState | None = None
    continue_as_new: ContinueAsNewPolicy = Field(default_factory=ContinueAsNewPolicy)


class AccessReport(ColonyModel):
    """What the access step found, for status."""

    entries: list[AccessEntry] = Field(default_factory=list)
