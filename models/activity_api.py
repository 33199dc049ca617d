"""The activity contract: every activity's name, and the one request and one result model of each.

Workflows call activities by name (`workflow.execute_activity(ActivityName.CLAIM_HOSTS, request,
result_type=ClaimHostsResult, ...)`), so the workflow sandbox never imports a client library. The
implementations live in `activities/` (one class per system, registered in `worker.py`); tests
register stand-ins under the same names.

Every activity is idempotent: repeating it after a timeout or a worker crash does the same thing once.
Waits that can last minutes or hours (`await_*`, `drain_node`, `delete_node` with a deadline) run
inside one heartbeating activity that polls the world and returns when what the workflow knows has
changed, when the wait is over, or at its deadline: a workflow's history then grows with what
happens, never with how long it waits. Their heartbeat details carry live progress (the Web UI
shows them under pending activities; `colonyctl` merges them into status). Permanent failures are raised as `ApplicationError(type=models.errors.ErrorType.X,
non_retryable=True)`; expected outcomes (a PodDisruptionBudget refusing an eviction, an object
already gone) are results, not errors.

Secrets never cross this boundary: child-cluster activities get a `KubeconfigRef` and read the
Secret themselves.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import Field

from models.base import ColonyModel
from models.node_pool import NodeSku
from models.ownership import Owner
from models.templates import TemplatePool


class ActivityName(StrEnum):
    """The registered name of every activity Colony's workflows call."""

    # Management cluster (k0rdent, through the Kubernetes API).
    CHECK_CLUSTER_PREREQUISITES = "check_cluster_prerequisites"
    CREATE_CLUSTER_DEPLOYMENT = "create_cluster_deployment"
    AWAIT_CLUSTER_DEPLOYMENT = "await_cluster_deployment"
    ADD_CLUSTER_MACHINES = "add_cluster_machines"
    REMOVE_CLUSTER_MACHINES = "remove_cluster_machines"
    DELETE_CLUSTER_DEPLOYMENT = "delete_cluster_deployment"
    WRITE_COLONY_KUBECONFIGS = "write_colony_kubeconfigs"
    SCALE_MACHINE_DEPLOYMENT = "scale_machine_deployment"
    MARK_MACHINES = "mark_machines"
    AWAIT_MACHINES = "await_machines"
    # Child cluster (through the `<name>-kubeconfig` Secret, read inside the activity).
    LIST_NODES = "list_nodes"
    CORDON_NODE = "cordon_node"
    UNCORDON_NODE = "uncordon_node"
    AWAIT_NODES = "await_nodes"
    DRAIN_NODE = "drain_node"
    DELETE_NODE = "delete_node"
    # Host provider (HTTP).
    CLAIM_HOSTS = "claim_hosts"
    RELEASE_HOSTS = "release_hosts"
    LIST_CLAIMED_HOSTS = "list_claimed_hosts"
    AWAIT_FREE_HOSTS = "await_free_hosts"
    # An organization's quota ledger (Temporal), counted by the host provider's catalog.
    ADMIT_QUOTA = "admit_quota"


# --- Shared shapes -------------------------------------------------------------------------------

CLUSTER_LABEL = "colony.dev/cluster"
"""Label on the ClusterDeployment: the cluster's name."""
WORKFLOW_ID_LABEL = "colony.dev/workflow-id"
"""Label on the ClusterDeployment: the id of the workflow that owns it (label-safe)."""
OWNER_ANNOTATION = "colony.dev/owner"
"""Annotation on everything a cluster owns on the management cluster: its owner key (the workflow id
and its first run id), the same key its host claims carry. Deletes and sweeps only ever touch
objects with this cluster's key, so a reused name never touches an earlier cluster's objects."""
NODE_POOL_LABEL = "colony.dev/node-pool"
"""Label on every node: the pool it belongs to."""
SKU_LABEL = "colony.dev/sku"
"""Label on every node: its SKU id (GPU model or CPU SKU)."""
HOST_ID_LABEL = "colony.dev/host-id"
"""Label on every node: the host provider's id of the host under it."""
GPU_MODEL_LABEL = "exalsius.ai/gpu-model"
"""Label on every GPU node: its GPU model id, the canonical label an exalsius `gpuType` matches."""
TENANT_GATEWAY_DOMAIN_LABEL = "colony.dev/tenant-gateway-domain"
"""Label on the ClusterDeployment: attach the cluster to the platform's tenant gateway for this
domain (workspaces get `https://<workspace>.<domain>` and SSH/TCP ports on `<domain>`)."""


class KubeconfigRef(ColonyModel):
    """Where a child cluster's kubeconfig lives on the management cluster; never the kubeconfig."""

    namespace: str
    secret_name: str
    key: str = "value"
    """The Secret's data key (k0rdent/CAPI write the kubeconfig under `value`)."""


class Machine(ColonyModel):
    """One host as a machine of a remote-cluster ClusterDeployment (`spec.config.machines[]`)."""

    address: str
    port: int = 22
    user: str = "root"


class Condition(ColonyModel):
    """A Kubernetes status condition, as much of it as the workflow reports."""

    type: str
    status: str
    reason: str = ""
    message: str = ""


class Host(ColonyModel):
    """A whole host claimed from the host provider."""

    id: str
    address: str
    ssh_port: int = 22
    ssh_user: str = "root"
    sku_id: str = ""
    location_id: str = ""

    @property
    def machine(self) -> Machine:
        """The host as a ClusterDeployment machine."""
        return Machine(address=self.address, port=self.ssh_port, user=self.ssh_user)


class NodeTaint(ColonyModel):
    """A taint as found on a Node (any key and effect, including Kubernetes' own)."""

    key: str
    value: str = ""
    effect: str


class NodeInfo(ColonyModel):
    """What the workflow needs to know about one Node of a child cluster."""

    name: str
    addresses: list[str] = Field(default_factory=list)
    """The Node's InternalIP/ExternalIP/Hostname addresses; matched against `Host.address`."""
    labels: dict[str, str] = Field(default_factory=dict)
    ready: bool = False
    ready_status: str = "Unknown"
    """The Ready condition's status: "True", "False" or "Unknown"."""
    unschedulable: bool = False
    taints: list[NodeTaint] = Field(default_factory=list)
    created_at: datetime | None = None
    pod_count: int = 0
    evictable_pod_count: int = 0
    """Pods a drain would evict (`models.drain.classify_pod(...) is PodDrainClass.EVICT`)."""


class Toleration(ColonyModel):
    """A pod's toleration, as the API returns it."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


class PodInfo(ColonyModel):
    """The facts about a pod a drain decides on (see `models.drain.classify_pod`)."""

    namespace: str
    name: str
    uid: str = ""
    controller_kind: str = ""
    """The kind of the pod's controller ownerReference ("DaemonSet", "ReplicaSet", ...), "" if none."""
    mirror: bool = False
    """True for a static pod's mirror (annotation `kubernetes.io/config.mirror`)."""
    tolerations: list[Toleration] = Field(default_factory=list)
    phase: str = "Running"
    terminating: bool = False
    """True once the pod has a deletionTimestamp."""

    @property
    def ref(self) -> str:
        """`namespace/name`, as a user reads it."""
        return f"{self.namespace}/{self.name}"


class EvictionOutcome(StrEnum):
    """What an eviction did."""

    EVICTED = "evicted"
    """Accepted: the pod is terminating."""
    BLOCKED_BY_BUDGET = "blocked_by_budget"
    """Refused with 429 by a PodDisruptionBudget; try again later, the budget may relax."""
    GONE = "gone"
    """The pod no longer exists (404), or it is a different pod now (uid mismatch)."""


# --- Management cluster --------------------------------------------------------------------------


class CheckClusterPrerequisitesRequest(ColonyModel):
    """Is the ClusterTemplate valid and the Credential ready, in the namespace? With `config`:
    does it satisfy the template's own values schema, and which pool is the template's
    MachineDeployment (`models.templates`)?"""

    namespace: str
    template: str
    credential: str
    config: dict[str, Any] | None = None


class CheckClusterPrerequisitesResult(ColonyModel):
    """Facts only; the workflow decides. Raises nothing for a missing object (Forbidden aside)."""

    template_found: bool
    template_valid: bool
    template_message: str = ""
    """The template's validation error when it is not valid."""
    credential_found: bool
    credential_ready: bool
    credential_message: str = ""
    config_problems: list[str] = Field(default_factory=list)
    """Why the config does not satisfy the template's values schema, a line per field."""
    template_pool: TemplatePool | None = None
    """The pool the template's MachineDeployment is, for this config (None: it has none)."""


class CreateClusterDeploymentRequest(ColonyModel):
    """Create the ClusterDeployment; idempotent (an existing one with our owner key is success).

    The activity sets the labels `colony.dev/cluster=<name>` and `colony.dev/workflow-id=<workflow_id>`,
    the ownership marks of `models.ownership` (the workflow and its organization), and builds
    `spec.config` from the fields below (remote-cluster template shape).
    """

    namespace: str
    name: str
    template: str
    credential: str
    workflow_id: str
    organization: str = ""
    """The cluster's organization (its ownership mark; "" in the default mode)."""
    owner: str = ""
    """The cluster's owner key (`OWNER_ANNOTATION`)."""
    kubernetes_version: str
    pod_cidr: str
    service_cidr: str
    machines: list[Machine] = Field(default_factory=list)
    deployment_spec: dict[str, Any] | None = None
    """A ClusterDeployment spec given as is (an exalsius Colony entry): used instead of the
    remote-cluster shape built from the fields above."""
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    tenant_gateway_domain: str = ""
    """When set, the label `colony.dev/tenant-gateway-domain` with this domain."""


class CreateClusterDeploymentResult(ColonyModel):
    created: bool
    """False when it existed already (a retried create)."""
    generation: int = 1


class GetClusterDeploymentStatusResult(ColonyModel):
    """A summary of the ClusterDeployment's status; `exists=False` once it is gone."""

    exists: bool
    ready: bool = False
    """The Ready condition is True (the workflow also compares the generations itself)."""
    generation: int = 0
    observed_generation: int = 0
    deleting: bool = False
    """True once it has a deletionTimestamp."""
    conditions: list[Condition] = Field(default_factory=list)
    machine_addresses: list[str] = Field(default_factory=list)
    """The addresses in `spec.config.machines`, as they are now."""


class AddClusterMachinesRequest(ColonyModel):
    """Add machines to `spec.config.machines`; idempotent by address (present ones are left alone)."""

    namespace: str
    name: str
    machines: list[Machine]


class RemoveClusterMachinesRequest(ColonyModel):
    """Remove machines from `spec.config.machines`; absent ones are fine.

    Each entry is `address:port` (one machine) or a bare `address` (every machine at it).
    """

    namespace: str
    name: str
    addresses: list[str]


class ClusterMachinesResult(ColonyModel):
    """The result of adding or removing machines: what `spec.config.machines` holds afterwards."""

    machine_addresses: list[str]
    generation: int = 0


class DeleteClusterDeploymentRequest(ColonyModel):
    """Delete the ClusterDeployment if it is this owner's; idempotent (already gone or deleting is
    success). One that belongs to someone else is left alone (`foreign=True`)."""

    namespace: str
    name: str
    owner: str = ""
    """Only an object annotated with this owner key is deleted (empty: any, for old histories)."""


class DeleteClusterDeploymentResult(ColonyModel):
    existed: bool
    foreign: bool = False
    """It exists but belongs to another owner; it was not touched."""


# --- Cluster API machines of a template pool (`workflows.cluster.supply`) ------------------------

PRE_DRAIN_HOOK = "pre-drain.delete.hook.machine.cluster.x-k8s.io/colony"
"""Colony's pre-drain hook on a Machine it drains itself: Cluster API waits for it to go before it
drains (and deletes) the Machine (cluster-api: `pre-drain.delete.hook.machine.cluster.x-k8s.io`)."""
DELETE_MACHINE_ANNOTATION = "cluster.x-k8s.io/delete-machine"
"""Cluster API deletes Machines carrying it first when their MachineSet scales down."""
MACHINE_CLUSTER_LABEL = "cluster.x-k8s.io/cluster-name"
"""Label on every Cluster API object of a cluster: the Cluster's (the ClusterDeployment's) name."""


class ScaleMachineDeploymentRequest(ColonyModel):
    """Set a template pool's size: the ClusterDeployment's `spec.config.workersNumber`.

    `expected` is what Colony last set: a value found that is neither it nor `count` was changed
    outside Colony, and is reported (WorkersChangedOutside), never written over. `only_lower`:
    a scale-down's write never raises the value (a later, larger one must not undo it).
    """

    namespace: str
    name: str
    owner: str
    count: int
    expected: int
    only_lower: bool = False


class ScaleMachineDeploymentResult(ColonyModel):
    found: int
    """`workersNumber` before the write."""
    written: bool


class MarkMachinesRequest(ColonyModel):
    """Put (or take off) Colony's marks on a cluster's Machines: its pre-drain hook and
    `cluster.x-k8s.io/delete-machine` (`hook_only`: only the hook is taken off, so the Machine
    stays first to go). Machines of another cluster are never touched; missing ones are skipped."""

    namespace: str
    cluster: str
    machines: list[str]
    mark: bool
    hook_only: bool = False


class MarkMachinesResult(ColonyModel):
    changed: list[str] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)


class MachineInfo(ColonyModel):
    """One Machine of a cluster as Colony reads it."""

    name: str
    node_name: str = ""
    phase: str = ""
    ready: bool = False
    deleting: bool = False
    marked: bool = False
    """Colony's pre-drain hook is on it."""
    problem: str = ""
    """What its conditions say holds it back (empty: nothing)."""


class AwaitMachinesRequest(ColonyModel):
    """Wait until the cluster has `count` Machines not being deleted, each with a Node, and none
    of `gone` exists any more; return early, with what was seen, when that changed from `known`
    (batched: no sooner than `min_interval_seconds`), or at `deadline`."""

    namespace: str
    cluster: str
    count: int
    gone: list[str] = Field(default_factory=list)
    known: list[MachineInfo] = Field(default_factory=list)
    deadline: datetime
    min_interval_seconds: float = 0.0


class AwaitMachinesResult(ColonyModel):
    machines: list[MachineInfo]
    settled: bool
    deadline_passed: bool = False


class DeploymentWait(StrEnum):
    """What `await_cluster_deployment` waits for."""

    READY = "ready"
    GONE = "gone"


class DeploymentOutcome(StrEnum):
    """Why `await_cluster_deployment` returned."""

    READY = "ready"
    """Ready=True for the latest generation."""
    FAILED = "failed"
    """A condition reports a terminal failure (Ready=False, reason Failed, for the latest spec)."""
    GONE = "gone"
    CHANGED = "changed"
    """The conditions differ from `known_conditions`: the workflow records them and calls again."""
    DEADLINE = "deadline"


class AwaitClusterDeploymentRequest(ColonyModel):
    """Poll the ClusterDeployment until it is `want`, fails, changes, or `deadline` passes.

    Heartbeats the last conditions seen. A ClusterDeployment that does not exist while waiting for
    READY is reported as GONE (someone deleted it).
    """

    namespace: str
    name: str
    want: DeploymentWait
    deadline: datetime
    owner: Owner | None = None
    """When set, a ClusterDeployment of that name without this owner's marks (another
    organization's, or not Colony's) is not the one waited for: it counts as GONE."""
    known_conditions: list[Condition] = Field(default_factory=list)
    """Return CHANGED as soon as the (type, status, reason) of the conditions differ from these."""


class AwaitClusterDeploymentResult(ColonyModel):
    outcome: DeploymentOutcome
    status: GetClusterDeploymentStatusResult


# --- Child cluster -------------------------------------------------------------------------------


class ListNodesRequest(ColonyModel):
    """Nodes matching the selector (one pool's: `colony.dev/node-pool=<pool>`), never the whole
    cluster's pods: pod counts are read per listed node, and only when asked for."""

    kubeconfig: KubeconfigRef
    label_selector: str = ""
    count_pods: bool = False


class ListNodesResult(ColonyModel):
    nodes: list[NodeInfo]


class CordonNodeRequest(ColonyModel):
    kubeconfig: KubeconfigRef
    node_name: str


class CordonNodeResult(ColonyModel):
    found: bool
    was_cordoned: bool = False


class UncordonNodeRequest(ColonyModel):
    """Make the node schedulable again (a drain that failed gives its nodes back); idempotent."""

    kubeconfig: KubeconfigRef
    node_name: str


class UncordonNodeResult(ColonyModel):
    found: bool


class ExpectedNode(ColonyModel):
    """A host the workflow waits to see as a Node, and what to put on that Node when it registers."""

    host_id: str
    address: str
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[NodeTaint] = Field(default_factory=list)


class ObservedNode(ColonyModel):
    """What `await_nodes` saw of one expected host."""

    host_id: str
    node_name: str = ""
    """Empty while no Node is registered for the host."""
    labelled: bool = False
    """The expected labels and taints are on the Node."""
    ready: bool = False


class AwaitNodesRequest(ColonyModel):
    """Watch for the expected hosts' Nodes: label each as it registers, and return as soon as what
    is seen differs from `known` (no sooner than `min_interval_seconds` after the call started, so
    changes are batched), when every one is Ready, or at `deadline`.

    A Node registers under its host's id (k0s names nodes after the host); when none has that name,
    an address only identifies a Node when no other Node has it (hosts behind one bastion share one).
    """

    kubeconfig: KubeconfigRef
    expected: list[ExpectedNode]
    known: list[ObservedNode] = Field(default_factory=list)
    deadline: datetime
    min_interval_seconds: float = 0.0


class AwaitNodesResult(ColonyModel):
    observed: list[ObservedNode]
    all_ready: bool
    deadline_passed: bool = False


class DrainProgress(ColonyModel):
    """A drain's live progress: the heartbeat details of `drain_node` and part of its result."""

    pods_evicted: int = 0
    pods_remaining: int = 0
    blocking_pods: list[str] = Field(default_factory=list)
    """`namespace/name: message` of pods a disruption budget keeps from being evicted."""
    pods_deleted: list[str] = Field(default_factory=list)
    """Pods a forced drain deleted at the deadline."""


class DrainLedger(ColonyModel):
    """Which pods a drain asked to evict and which evictions it saw accepted, by pod uid.

    An eviction is entered in `requested` (and that heartbeat given time to reach Temporal) before
    it is sent, so an attempt that follows a crash knows every eviction the crashed one may have
    made: those whose pod is now gone or terminating were accepted. Bounded by the pods of one node.
    """

    requested: list[str] = Field(default_factory=list)
    evicted: list[str] = Field(default_factory=list)


class DrainHeartbeat(DrainProgress):
    """`drain_node`'s heartbeat details: its progress (what `colonyctl` and the Web UI show, read
    as a `DrainProgress`) and the ledger a retried attempt resumes from."""

    ledger: DrainLedger = Field(default_factory=DrainLedger)


def drain_activity_id(operation_id: str, node: str) -> str:
    """The activity id of one node's drain, so a client finds its heartbeat among the pending
    activities (`colonyctl` merges it into the status it shows)."""
    return f"{operation_id}/drain/{node}"


def parse_drain_activity_id(activity_id: str) -> tuple[str, str] | None:
    """(operation id, node) of a drain's activity id, or None for any other activity."""
    operation_id, sep, node = activity_id.partition("/drain/")
    return (operation_id, node) if sep and operation_id and node else None


class DrainNodeRequest(ColonyModel):
    """Evict every pod of a (cordoned) node that a drain evicts (`models.drain.pods_to_evict`),
    retry what a budget refuses, and wait until they are gone, until `deadline`.

    With `force`, pods still there at the deadline are deleted without the Eviction API and the
    drain succeeds. Heartbeats `DrainHeartbeat`; a retry after a crash counts every eviction the
    crashed attempt made, including those after its last heartbeat (see `DrainLedger`).
    """

    kubeconfig: KubeconfigRef
    node_name: str
    deadline: datetime
    force: bool = False


class DrainNodeResult(ColonyModel):
    drained: bool
    """Every pod the drain evicts is gone (False: the deadline passed, see `progress`)."""
    node_found: bool = True
    progress: DrainProgress = Field(default_factory=DrainProgress)


class DeleteNodeRequest(ColonyModel):
    """Delete the Node object; already gone is success. With `wait_until`, also wait (heartbeating)
    until it is gone or that time passes."""

    kubeconfig: KubeconfigRef
    node_name: str
    wait_until: datetime | None = None


class DeleteResult(ColonyModel):
    """What a delete that may wait (`wait_until`) found: whether the object existed, and whether
    it is gone."""

    existed: bool
    gone: bool = True
    """False when it was still there at `wait_until`."""


class DeleteNodeResult(DeleteResult):
    """The Node's delete."""


# --- Host provider -------------------------------------------------------------------------------


class ClaimHostsRequest(ColonyModel):
    """Claim `count` whole hosts of a SKU in a location for `owner`.

    Idempotent by `idempotency_key`: repeating the call returns the same hosts, never new ones. Raises
    `HostsUnavailable` (non-retryable) when fewer are free, `UnknownSku` when the SKU or the
    location does not exist.
    """

    location_id: str
    sku: NodeSku
    count: int
    idempotency_key: str
    owner: str
    """Who holds the hosts (the cluster's owner key); `list_claimed_hosts` sweeps by it."""


class ClaimHostsResult(ColonyModel):
    hosts: list[Host]


class ReleaseHostsRequest(ColonyModel):
    """Give hosts back; idempotent (unknown or already released ids are fine)."""

    host_ids: list[str]
    owner: str


class ReleaseHostsResult(ColonyModel):
    released: list[str] = Field(default_factory=list)
    already_released: list[str] = Field(default_factory=list)


class ListClaimedHostsRequest(ColonyModel):
    owner: str


class ListClaimedHostsResult(ColonyModel):
    hosts: list[Host]


class AwaitFreeHostsRequest(ColonyModel):
    """Poll the provider until `count` hosts of the SKU are free in the location, or `deadline`."""

    location_id: str
    sku: NodeSku
    count: int
    deadline: datetime


class AwaitFreeHostsResult(ColonyModel):
    free: int
    enough: bool
