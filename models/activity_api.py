"""The activity contract: every activity's name, and the one request and one result model of each.

Workflows call activities by name (`workflow.execute_activity(ActivityName.CLAIM_HOSTS, request,
result_type=ClaimHostsResult, ...)`), so the workflow sandbox never imports a client library. The
implementations live in `activities/` (one class per system, registered in `worker.py`); tests
register stand-ins under the same names.

Every activity is small and idempotent: repeating it after a timeout or a worker crash does the same
thing once. Permanent failures are raised as `ApplicationError(type=models.errors.ErrorType.X,
non_retryable=True)`; expected outcomes (a PodDisruptionBudget refusing an eviction, an object
already gone) are results, not errors.

Secrets never cross this boundary: child-cluster activities get a `KubeconfigRef` and read the
Secret themselves.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import Field

from models.base import ColonyModel
from models.node_pool import NodeSku


class ActivityName(StrEnum):
    """The registered name of every activity Colony's workflows call."""

    # Management cluster (k0rdent, through the Kubernetes API).
    CHECK_CLUSTER_PREREQUISITES = "check_cluster_prerequisites"
    CREATE_CLUSTER_DEPLOYMENT = "create_cluster_deployment"
    GET_CLUSTER_DEPLOYMENT_STATUS = "get_cluster_deployment_status"
    ADD_CLUSTER_MACHINES = "add_cluster_machines"
    REMOVE_CLUSTER_MACHINES = "remove_cluster_machines"
    DELETE_CLUSTER_DEPLOYMENT = "delete_cluster_deployment"
    # Child cluster (through the `<name>-kubeconfig` Secret, read inside the activity).
    LIST_NODES = "list_nodes"
    LABEL_NODE = "label_node"
    CORDON_NODE = "cordon_node"
    UNCORDON_NODE = "uncordon_node"
    LIST_PODS_ON_NODE = "list_pods_on_node"
    EVICT_POD = "evict_pod"
    DELETE_POD = "delete_pod"
    DELETE_NODE = "delete_node"
    # Host provider (HTTP).
    CLAIM_HOSTS = "claim_hosts"
    RELEASE_HOSTS = "release_hosts"
    LIST_CLAIMED_HOSTS = "list_claimed_hosts"


# --- Shared shapes -------------------------------------------------------------------------------

CLUSTER_LABEL = "colony.dev/cluster"
"""Label on the ClusterDeployment: the cluster's name."""
WORKFLOW_ID_LABEL = "colony.dev/workflow-id"
"""Label on the ClusterDeployment: the id of the workflow that owns it."""
NODE_POOL_LABEL = "colony.dev/node-pool"
"""Label on every node: the pool it belongs to."""
SKU_LABEL = "colony.dev/sku"
"""Label on every node: its SKU id (GPU model or CPU SKU)."""
HOST_ID_LABEL = "colony.dev/host-id"
"""Label on every node: the host provider's id of the host under it."""


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
    """Is the ClusterTemplate valid and the Credential ready, in the namespace?"""

    namespace: str
    template: str
    credential: str


class CheckClusterPrerequisitesResult(ColonyModel):
    """Facts only; the workflow decides. Raises nothing for a missing object (Forbidden aside)."""

    template_found: bool
    template_valid: bool
    template_message: str = ""
    """The template's validation error when it is not valid."""
    credential_found: bool
    credential_ready: bool
    credential_message: str = ""


class CreateClusterDeploymentRequest(ColonyModel):
    """Create the ClusterDeployment; idempotent (an existing one with our workflow-id label is success).

    The activity sets the labels `colony.dev/cluster=<name>` and `colony.dev/workflow-id=<workflow_id>`
    and builds `spec.config` from the fields below (remote-cluster template shape).
    """

    namespace: str
    name: str
    template: str
    credential: str
    workflow_id: str
    kubernetes_version: str
    pod_cidr: str
    service_cidr: str
    machines: list[Machine] = Field(default_factory=list)


class CreateClusterDeploymentResult(ColonyModel):
    created: bool
    """False when it existed already (a retried create)."""
    generation: int = 1


class GetClusterDeploymentStatusRequest(ColonyModel):
    namespace: str
    name: str


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
    """Delete the ClusterDeployment; idempotent (already gone or deleting is success)."""

    namespace: str
    name: str


class DeleteClusterDeploymentResult(ColonyModel):
    existed: bool


# --- Child cluster -------------------------------------------------------------------------------


class ListNodesRequest(ColonyModel):
    kubeconfig: KubeconfigRef
    label_selector: str = ""


class ListNodesResult(ColonyModel):
    nodes: list[NodeInfo]


class LabelNodeRequest(ColonyModel):
    """Set labels and taints on a node (merge: other labels and taints are kept); idempotent."""

    kubeconfig: KubeconfigRef
    node_name: str
    labels: dict[str, str]
    taints: list[NodeTaint] = Field(default_factory=list)


class LabelNodeResult(ColonyModel):
    found: bool
    """False when the node is gone."""


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


class ListPodsOnNodeRequest(ColonyModel):
    kubeconfig: KubeconfigRef
    node_name: str


class ListPodsOnNodeResult(ColonyModel):
    """Every pod bound to the node, terminating ones included (`PodInfo.terminating`)."""

    pods: list[PodInfo]


class EvictPodRequest(ColonyModel):
    """Create an Eviction for the pod; a 429 from a budget is a result, not an error."""

    kubeconfig: KubeconfigRef
    namespace: str
    name: str
    uid: str = ""
    """When set, evict only this incarnation (an Eviction precondition)."""


class EvictPodResult(ColonyModel):
    outcome: EvictionOutcome
    message: str = ""
    """The API's message, e.g. the budget that refused ("Cannot evict pod as it would violate ...")."""


class DeletePodRequest(ColonyModel):
    """Delete a pod without the Eviction API (a forced drain); already gone is success."""

    kubeconfig: KubeconfigRef
    namespace: str
    name: str
    grace_period_seconds: int | None = None


class DeletePodResult(ColonyModel):
    existed: bool


class DeleteNodeRequest(ColonyModel):
    """Delete the Node object; already gone is success."""

    kubeconfig: KubeconfigRef
    node_name: str


class DeleteNodeResult(ColonyModel):
    existed: bool


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
