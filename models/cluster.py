"""Clusters: the create request (`ClusterSpec`), the status users read, and the workflow's state.

`ClusterWorkflow` (workflows/cluster/workflow.py) takes a `ClusterWorkflowInput`, carries a `ClusterState`
across continue-as-new, and answers its `status` query with a `ClusterStatus`. The CLI validates a
create request through `ClusterSpec` before starting the workflow.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Self

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from models import identity
from models.activity_api import Condition, DrainProgress, Host, KubeconfigRef
from models.base import ColonyModel, rule
from models.bounds import annotations_bound_problem, bounded, labels_bound_problem, user_bound
from models.capacity import GpuHolder
from models.identity import DERIVED_MARK, Entity, colony_member_entry
from models.names import (
    ClusterName,
    OrganizationName,
    derived_mark_problem,
    domain_problem,
    labels_problem,
)
from models.node_pool import (
    MAX_DRAIN_PARALLELISM,
    MIN_DRAIN_PARALLELISM,
    NodePoolSpec,
    NodePoolStatus,
)
from models.operations import ContinueAsNewPolicy, Operation, OperationBook, OperationKind
from models.ownership import EntitySpec
from models.purge import Unresponsive
from models.quota import QuotaHolding, cluster_need

MAX_CREATE_NODE_POOLS = 10
"""Up to 10 node pools in a create request, as the product documents."""

KUBERNETES_VERSION = "v1.37.1"
"""The only version offered; a cluster is not upgraded in place."""
POD_CIDR = "10.244.0.0/14"
SERVICE_CIDR = "10.96.0.0/16"
"""Fixed networks, the same in every cluster."""

DEFAULT_TEMPLATE = "remote-cluster-1-0-0"
DEFAULT_CREDENTIAL = "remote-cluster-credential"
DEFAULT_NAMESPACE = "kcm-system"
"""k0rdent's defaults: the remote-cluster template and credential in the KCM system namespace."""

DEFAULT_READY_DEADLINE = timedelta(minutes=30)
"""How long a control plane may take to become Ready before the create fails."""
DEFAULT_JOIN_DEADLINE = timedelta(minutes=15)
"""How long a claimed host may take to boot and join; a bare-metal boot takes 5 to 10 minutes."""
DEFAULT_DRAIN_DEADLINE = timedelta(hours=1)
"""1 hour: the cap GKE applies to node-pool drains before it gives up respecting budgets."""
DEFAULT_DRAIN_PARALLELISM = 2
"""Nodes drained at once by one operation: small, so budgets and capacity keep up."""


def cluster_workflow_id(name: str, organization: str = "") -> str:
    """The id of the one workflow that owns cluster `name` of `organization` (names are unique
    within an organization, not across them): `cluster/<organization>/<name>`, `cluster/<name>`
    in the default mode (`models.identity`)."""
    return identity.entity_workflow_id(Entity.CLUSTER, organization, name)


def cluster_deployment_name(name: str, organization: str = "") -> str:
    """The cluster's ClusterDeployment on the management cluster (one namespace for everyone):
    its name in the default mode, else a derived name (`models.identity.cluster_deployment_name`)."""
    return identity.cluster_deployment_name(organization, name)


def kubeconfig_secret_name(deployment: str) -> str:
    """The Secret k0rdent writes a cluster's kubeconfig to, on the management cluster, from the
    ClusterDeployment's name."""
    return f"{deployment}-kubeconfig"


def cluster_without_free_node(pools: Iterable[tuple[int, bool]]) -> bool:
    """True when the pools hold nodes but none free of the user's NoSchedule/NoExecute taints.

    Args:
        pools: (count, free of such taints) of every pool.

    The managed GPU and MPI operators, cluster DNS, the Cilium operator and the local-path
    provisioner need such a node; a cluster with no node at all has nothing to protect yet.
    """
    pools = list(pools)
    has_nodes = any(count > 0 for count, _ in pools)
    free = any(count > 0 and untainted for count, untainted in pools)
    return has_nodes and not free


FREE_NODE_MESSAGE = (
    "cluster '{cluster}' would have no node free of NoSchedule and NoExecute taints; "
    "the GPU operator, MPI operator and cluster DNS need one: keep at least one pool without such taints"
)

OPERATOR_ONLY = (
    "an operator's setting, not chosen through the API (an operator sets it through Temporal "
    "directly: colonyctl without a login)"
)
"""Why the HTTP API (and remote `colonyctl`) refuses a cluster setting that is the operator's."""
OPERATOR_SETTINGS: dict[str, str] = {
    "template": OPERATOR_ONLY,
    "credential": OPERATOR_ONLY,
    "namespace": OPERATOR_ONLY,
    "readyDeadline": OPERATOR_ONLY,
    "joinDeadline": OPERATOR_ONLY,
    "drainDeadline": OPERATOR_ONLY,
    "drainParallelism": OPERATOR_ONLY,
    "tenantGatewayDomain": (
        "an operator's setting, not chosen through the API: tenant gateways and their domains are "
        "the platform's, and a cluster attached to one gets that domain's names, so an "
        "organization cannot claim one (an operator creates such a cluster through Temporal "
        "directly: colonyctl cluster create --tenant-gateway-domain, without a login)"
    ),
}
"""The `ClusterSpec` fields (by their API names) that only an operator chooses, each with the
refusal the API and remote `colonyctl` give, word for word, when a request sets one."""


def operator_setting_problem(field: str) -> str:
    """The refusal of an operator's cluster setting sent through the API: `<field>: <why>`."""
    return f"{field}: {OPERATOR_SETTINGS[field]}"


def _gateway_domain_problem(domain: str) -> str | None:
    # Empty: no gateway.
    return domain_problem("tenantGatewayDomain", domain) if domain else None


class ClusterSpec(EntitySpec):
    """A create request: `{"name": "training", "locationId": "...", "nodePools": [...]}`."""

    entity: ClassVar[Entity] = Entity.CLUSTER

    name: ClusterName
    location_id: str
    node_pools: list[NodePoolSpec] = Field(default_factory=list)
    organization: OrganizationName = ""
    """The organization that owns the cluster (set by the HTTP API from the caller's key); empty
    for clusters an operator manages through `colonyctl` and Temporal directly."""
    template: str = DEFAULT_TEMPLATE
    credential: str = DEFAULT_CREDENTIAL
    namespace: str = DEFAULT_NAMESPACE
    ready_deadline: timedelta = DEFAULT_READY_DEADLINE
    join_deadline: timedelta = DEFAULT_JOIN_DEADLINE
    drain_deadline: timedelta = DEFAULT_DRAIN_DEADLINE
    drain_parallelism: int = Field(
        default=DEFAULT_DRAIN_PARALLELISM, ge=MIN_DRAIN_PARALLELISM, le=MAX_DRAIN_PARALLELISM
    )
    """Nodes drained at once by an operation whose pool and request do not say."""
    wait_for_capacity: bool = False
    """When the location has too few free hosts for a pool, wait for them (until the join
    deadline) instead of failing with HostsUnavailable."""
    colony: str = ""
    """The colony this cluster belongs to (`colony/<colony>` hears of its phase and GPUs)."""
    deployment_spec: Annotated[dict[str, Any] | None, bounded()] = None
    """A k0rdent ClusterDeployment spec given as is (an exalsius Colony entry's
    `clusterDeploymentSpec`: any template, credential and config). Such a cluster is built by its
    template (hosted control planes, cloud workers), not from claimed hosts: it has no node pools."""
    cluster_labels: Annotated[
        dict[str, str], user_bound(labels_problem), user_bound(labels_bound_problem)
    ] = Field(default_factory=dict)
    cluster_annotations: Annotated[dict[str, str], user_bound(annotations_bound_problem)] = Field(
        default_factory=dict
    )
    """Labels and annotations put on the ClusterDeployment (exalsius `clusterLabels`/`...Annotations`)."""
    tenant_gateway_domain: Annotated[str, rule(_gateway_domain_problem)] = ""
    """Attach the cluster to the tenant gateway of this domain (`dos-lab.example`): its
    ClusterDeployment gets the label `colony.dev/tenant-gateway-domain`, and its workspaces
    `https://<workspace>.<domain>` URLs and SSH/TCP ports on `<domain>`. Empty: no gateway, each
    endpoint is reached with `kubectl port-forward`."""

    def quota_need(self) -> QuotaHolding:
        """What the cluster holds against its organization's quotas once created: itself and its
        pools' hosts (`models.quota.cluster_need`, as its workflow counts them)."""
        return cluster_need(self.location_id, [NodePoolStatus.of(pool) for pool in self.node_pools])

    @model_validator(mode="after")
    def _derived_mark(self) -> Self:
        # "--" marks the names Colony derives (models.identity): a cluster a user names never
        # holds it, so a default-mode ClusterDeployment (the plain name) is never a derived one.
        if self.colony:
            entry = colony_member_entry(self.colony, self.name)
            if not entry or DERIVED_MARK in entry:
                raise PydanticCustomError(
                    "name",
                    f"cluster '{self.name}' of colony '{self.colony}' must be named "
                    f"'{self.colony}{DERIVED_MARK}<clusterName>'",
                )
        elif problem := derived_mark_problem("cluster", self.name):
            raise PydanticCustomError("name", problem)
        return self

    @model_validator(mode="after")
    def _deployment(self) -> Self:
        # Only presence of the location here: the host provider's catalog is checked by the CLI
        # and an activity. A cluster given as a raw ClusterDeployment spec claims no hosts.
        if self.deployment_spec is None:
            if not self.location_id.strip():
                raise PydanticCustomError("location", "locationId must not be empty")
            return self
        if self.node_pools:
            raise PydanticCustomError(
                "node_pools",
                "a cluster given as a clusterDeploymentSpec has no node pools: its template "
                "builds its workers",
            )
        for key in ("template", "credential"):
            if not str(self.deployment_spec.get(key) or "").strip():
                raise PydanticCustomError(
                    "deployment_spec", f"clusterDeploymentSpec.{key} must be set"
                )
        self.template = str(self.deployment_spec["template"])
        self.credential = str(self.deployment_spec["credential"])
        return self

    @model_validator(mode="after")
    def _pools(self) -> Self:
        if len(self.node_pools) > MAX_CREATE_NODE_POOLS:
            raise PydanticCustomError(
                "node_pools",
                f"a create request takes at most {MAX_CREATE_NODE_POOLS} node pools, got {len(self.node_pools)}",
            )
        seen: set[str] = set()
        for pool in self.node_pools:
            if pool.name in seen:
                raise PydanticCustomError(
                    "node_pools",
                    f"node pool '{pool.name}' is given twice; pool names are unique in a cluster",
                )
            seen.add(pool.name)
        if cluster_without_free_node(
            (pool.count, pool.schedulable_for_system_pods) for pool in self.node_pools
        ):
            raise PydanticCustomError("node_pools", FREE_NODE_MESSAGE.format(cluster=self.name))
        return self

    @property
    def deployment_name(self) -> str:
        """The ClusterDeployment's name (and, with `-kubeconfig`, its kubeconfig Secret's)."""
        return cluster_deployment_name(self.name, self.organization)


class ClusterPhase(StrEnum):
    CREATING = "creating"
    READY = "ready"
    WAITING = "waiting"
    """Ready, but a node pool waits for hosts (asked to wait for capacity): shown, never stored
    (`ClusterState.shown`), so every rule that holds for a ready cluster holds for it."""
    DEGRADED = "degraded"
    """Ready, but created without node pools it was asked for (their hosts could not be claimed,
    or their nodes did not join): shown, never stored, as `waiting`, so the pools can be added
    (or scaled) again; until then the status says what is missing and why."""
    DELETING = "deleting"
    DELETED = "deleted"
    FAILED = "failed"


NODE_POOLS_READY = "NodePoolsReady"
"""The condition Colony adds to a cluster's (the ClusterDeployment's) conditions: False, with the
create's error type as its reason, while node pools the create asked for are missing."""


class PoolShortfall(ColonyModel):
    """A node pool the cluster's create asked for and did not get (whole or in part)."""

    pool: str
    asked: int
    """The count the create asked for."""
    got: int = 0
    """The nodes the pool has after the create (0: the pool is not there)."""
    error_type: str = ""
    """Why, machine-readable: the create's error type for it (`HostsUnavailable`, ...)."""
    reason: str = ""
    """Why, for people: the create operation's reason for this pool."""


class ClaimedHost(ColonyModel):
    """A host the cluster holds, and the pool it serves; released when its node is removed."""

    host: Host
    pool: str


class ClusterStatus(ColonyModel):
    """What `colonyctl get cluster` shows: the answer of the workflow's `status` query."""

    name: str
    location_id: str
    phase: ClusterPhase
    organization: str = ""
    reason: str = ""
    """Why the cluster is failed, or what the control plane waits on while creating."""
    conditions: list[Condition] = Field(default_factory=list)
    """The ClusterDeployment's conditions, as last seen."""
    node_pools: list[NodePoolStatus] = Field(default_factory=list)
    current_operation: Operation | None = None
    queued_operations: list[Operation] = Field(default_factory=list)
    completed_operations: list[Operation] = Field(default_factory=list)
    """The last finished operations, newest last (bounded)."""
    kubeconfig: KubeconfigRef | None = None
    """Where the kubeconfig Secret is (a reference; the kubeconfig itself never leaves it)."""
    held_hosts: list[str] = Field(default_factory=list)
    """Ids of the hosts the cluster holds (claimed, not released), whatever state their nodes are in."""
    created_at: datetime | None = None
    updated_at: datetime | None = None
    unresponsive: Unresponsive | None = None
    """Set when its workflow cannot answer (`models.purge`): the rest is what its marks say."""

    def pool(self, name: str) -> NodePoolStatus | None:
        return next((pool for pool in self.node_pools if pool.name == name), None)

    def operation(self, operation_id: str) -> Operation | None:
        """The operation with this id, wherever it is (running, queued or finished)."""
        candidates = [self.current_operation, *self.queued_operations, *self.completed_operations]
        return next((op for op in candidates if op is not None and op.id == operation_id), None)

    def create_operation(self) -> Operation | None:
        """The cluster's own creation, while the status knows it (running, queued, or among the
        last finished)."""
        candidates = [self.current_operation, *self.queued_operations, *self.completed_operations]
        return next(
            (op for op in candidates if op is not None and op.kind is OperationKind.CREATE_CLUSTER),
            None,
        )

    @property
    def creating(self) -> bool:
        """Its creation has not finished: its control plane is not Ready yet, or the create's
        node pools are still being added (the phase is `ready` meanwhile: the cluster takes
        operations, but its pools' nodes have not all joined)."""
        if self.phase is ClusterPhase.CREATING:
            return True
        create = self.create_operation()
        return create is not None and not create.state.finished

    def with_live_drains(self, live: dict[tuple[str, str], DrainProgress]) -> ClusterStatus:
        """This status with the running drains' live progress (their heartbeat details, keyed by
        operation id and node) merged into the running operation's node progress.

        The workflow records a drain's counts and blockers when the drain ends; while it runs they
        live in the drain activity's heartbeat, so that an hour-long drain adds nothing to history.
        """
        running = self.current_operation
        if running is None or not live:
            return self
        nodes = []
        for entry in running.progress.nodes:
            found = live.get((running.id, entry.node))
            if found is not None and entry.step == "draining":
                entry = entry.model_copy(
                    update={
                        "pods_evicted": found.pods_evicted,
                        "pods_remaining": found.pods_remaining,
                        "blocking_pods": found.blocking_pods,
                    }
                )
            nodes.append(entry)
        progress = running.progress.model_copy(update={"nodes": nodes})
        return self.model_copy(
            update={"current_operation": running.model_copy(update={"progress": progress})}
        )


class ClusterState(ColonyModel):
    """Everything `ClusterWorkflow` knows; carried whole across continue-as-new."""

    phase: ClusterPhase = ClusterPhase.CREATING
    reason: str = ""
    conditions: list[Condition] = Field(default_factory=list)
    owner: str = ""
    """The key hosts are claimed under: the workflow id and its first run, so a reused name never
    sweeps an earlier cluster's hosts."""
    node_pools: list[NodePoolStatus] = Field(default_factory=list)
    hosts: dict[str, ClaimedHost] = Field(default_factory=dict)
    """Every host claimed and not yet released, by host id."""
    kubeconfig: KubeconfigRef | None = None
    deployment_created: bool = False
    queue: list[Operation] = Field(default_factory=list)
    completed: list[Operation] = Field(default_factory=list)
    book: OperationBook = Field(default_factory=OperationBook)
    node_versions: dict[str, str] = Field(default_factory=dict)
    """The last resourceVersion a `node_event` reported per node, so an older event is ignored."""
    refresh_due: bool = False
    """A look at the nodes was asked for (`refresh`, or the fallback): taken between operations."""
    gpu_holders: list[GpuHolder] = Field(default_factory=list)
    """Which workspaces hold GPUs on which nodes, as the cluster's GPU ledger last reported (it
    reports only changes, so this is carried): a scale-down chooses other nodes first, and one
    that would take them is refused unless forced."""
    created_at: datetime | None = None
    shortfall: list[PoolShortfall] = Field(default_factory=list)
    """The create's node pools it did not get, until a later operation on each pool (added again,
    scaled or deleted) settles it: the cluster is shown `degraded` meanwhile."""
    quota: QuotaHolding | None = None
    """What the organization's quota ledger holds for this cluster, as far as it knows: admitted
    at create (the client) or by its growth's admissions, lowered by its reports (None: no
    organization, or a cluster older than quotas)."""
    quota_reports: int = 0
    """Reports sent to the ledger so far (each one's request id counts them)."""

    def pool(self, name: str) -> NodePoolStatus | None:
        return next((pool for pool in self.node_pools if pool.name == name), None)

    def settle_shortfall(self, pool: str) -> None:
        """A pool the create missed was dealt with (added, scaled or deleted since)."""
        self.shortfall = [missing for missing in self.shortfall if missing.pool != pool]

    def shown(self) -> tuple[ClusterPhase, str]:
        """The phase and reason users see (status, list, the Web UI): `waiting`, and what for,
        while a ready cluster's pool waits for hosts; `degraded`, and what is missing, while node
        pools its create asked for are missing; never `ready` then. Else the stored ones."""
        if self.phase is not ClusterPhase.READY:
            return self.phase, self.reason
        waiting = [pool for pool in self.node_pools if pool.waiting_for_hosts]
        if waiting:
            return ClusterPhase.WAITING, "; ".join(
                f"node pool '{pool.name}' waits for {pool.waiting_for_hosts} free host(s) of "
                f"{pool.sku}"
                for pool in waiting
            )
        if self.shortfall:
            return ClusterPhase.DEGRADED, shortfall_reason(self.shortfall)
        return self.phase, self.reason

    def conditions_shown(self) -> list[Condition]:
        """The ClusterDeployment's conditions, and Colony's `NodePoolsReady` while the create's
        pools are missing."""
        if not self.shortfall or self.phase is not ClusterPhase.READY:
            return self.conditions
        types = sorted({missing.error_type for missing in self.shortfall if missing.error_type})
        return [
            *self.conditions,
            Condition(
                type=NODE_POOLS_READY,
                status="False",
                reason=types[0] if len(types) == 1 else "NodePoolsFailed",
                message=shortfall_reason(self.shortfall),
            ),
        ]


def shortfall_reason(shortfall: list[PoolShortfall]) -> str:
    """What a degraded cluster misses, and what to do: `created without node pool 'gpu' (0 of 2
    nodes): <why>; add it again (node-pool create) or delete the cluster`."""
    missing = "; ".join(
        f"node pool '{m.pool}' ({m.got} of {m.asked} node{'s' if m.asked != 1 else ''}): "
        f"{m.reason or m.error_type or 'failed'}"
        for m in shortfall
    )
    return (
        f"created without {missing}; add or scale the pool again once hosts are free, or delete "
        "the cluster"
    )


class ClusterWorkflowInput(ColonyModel):
    """The input of `ClusterWorkflow`: the spec, and the state when continuing as new."""

    spec: ClusterSpec
    state: ClusterState | None = None
    continue_as_new: ContinueAsNewPolicy = Field(default_factory=ContinueAsNewPolicy)
