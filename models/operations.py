"""Operations on a cluster: the update payloads users send, and how an operation is tracked.

`ClusterWorkflow` accepts each request through a Temporal update (validated first, then queued),
runs the queue one operation at a time, and reports every `Operation` in its `status` query.
The CLI builds these requests, so the rules a single request carries are checked here, before
anything is sent; the rules that need the cluster's state are in `models/rules.py`.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Generic, Literal, TypeVar

from pydantic import Field

from models.base import ColonyModel
from models.node_pool import (
    MAX_DRAIN_PARALLELISM,
    MIN_DRAIN_PARALLELISM,
    NodePoolCount,
    NodePoolSpec,
)


class OperationKind(StrEnum):
    """What an operation does; also the name of the update that submits it (create aside)."""

    CREATE_CLUSTER = "create_cluster"
    ADD_NODE_POOL = "add_node_pool"
    SCALE_NODE_POOL = "scale_node_pool"
    DELETE_NODE_POOL = "delete_node_pool"
    DELETE_NODE = "delete_node"
    DELETE_CLUSTER = "delete_cluster"


class CreateClusterRequest(ColonyModel):
    """The cluster's own creation, queued by the workflow itself (the spec is the workflow's input)."""

    kind: Literal[OperationKind.CREATE_CLUSTER] = OperationKind.CREATE_CLUSTER


class AddNodePoolRequest(ColonyModel):
    """Add a node pool to a ready cluster: `{"pool": {"name": "gpu", "sku": {...}, "count": 2}}`."""

    kind: Literal[OperationKind.ADD_NODE_POOL] = OperationKind.ADD_NODE_POOL
    pool: NodePoolSpec
    wait_for_capacity: bool = False
    """When the location has too few free hosts, wait for them (until the join deadline) instead of
    failing with HostsUnavailable."""


class ScaleNodePoolRequest(ColonyModel):
    """Set a pool's count (1 to 100); scaling down drains the nodes it removes."""

    kind: Literal[OperationKind.SCALE_NODE_POOL] = OperationKind.SCALE_NODE_POOL
    pool: str
    count: NodePoolCount
    """1 to 100: checked here (so `colonyctl` refuses it before sending) and again by
    `models.rules.operation_problem`, for a request built without validation."""
    force: bool = False
    """Remove the nodes even when their drain misses the deadline (remaining pods are deleted)."""
    drain_parallelism: int | None = Field(
        default=None, ge=MIN_DRAIN_PARALLELISM, le=MAX_DRAIN_PARALLELISM
    )
    """How many nodes drain at once; when None, the pool's setting, else the cluster's."""
    wait_for_capacity: bool = False
    """Scaling up: wait for free hosts instead of failing with HostsUnavailable."""


class DeleteNodePoolRequest(ColonyModel):
    """Drain and remove every node of a pool, then the pool."""

    kind: Literal[OperationKind.DELETE_NODE_POOL] = OperationKind.DELETE_NODE_POOL
    pool: str
    force: bool = False
    drain_parallelism: int | None = Field(
        default=None, ge=MIN_DRAIN_PARALLELISM, le=MAX_DRAIN_PARALLELISM
    )
    """How many nodes drain at once; when None, the pool's setting, else the cluster's."""


class DeleteNodeRequest(ColonyModel):
    """Drain (unless `drain=False`) and remove one node; its pool's count drops by one."""

    kind: Literal[OperationKind.DELETE_NODE] = OperationKind.DELETE_NODE
    node: str
    """The node's Kubernetes name, or its host id."""
    drain: bool = True
    force: bool = False


class DeleteClusterRequest(ColonyModel):
    """Delete the cluster: final. Repeating it finishes a delete that could not remove everything."""

    kind: Literal[OperationKind.DELETE_CLUSTER] = OperationKind.DELETE_CLUSTER


OperationRequest = Annotated[
    CreateClusterRequest
    | AddNodePoolRequest
    | ScaleNodePoolRequest
    | DeleteNodePoolRequest
    | DeleteNodeRequest
    | DeleteClusterRequest,
    Field(discriminator="kind"),
]


class CancelOperationRequest(ColonyModel):
    """Cancel one queued or running operation (the `cancel_operation` update).

    A queued one is dropped; a running one is interrupted and its compensation runs (what it cordoned
    is uncordoned, hosts that never joined are released). A delete cannot be cancelled.
    """

    operation_id: str
    reason: str = ""
    """Shown on the cancelled operation (who asked and why)."""


class OperationState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (self.SUCCEEDED, self.FAILED, self.CANCELLED)


class NodeProgress(ColonyModel):
    """How far an operation got with one node it drains or removes."""

    node: str
    host_id: str = ""
    step: str = "pending"
    """pending, cordoned, draining, drained, removing, removed, failed."""
    cordoned: bool = False
    pods_evicted: int = 0
    pods_remaining: int = 0
    blocking_pods: list[str] = Field(default_factory=list)
    """`namespace/name: message` of pods a disruption budget keeps from being evicted."""
    drain_started_at: datetime | None = None
    drain_deadline: datetime | None = None
    """This node's own deadline, counted from when its drain started (not from the operation's
    start: a node waiting for a parallelism slot has not spent any of it)."""


class OperationProgress(ColonyModel):
    """Progress of the running operation, for `colonyctl get` and `--wait`."""

    hosts_claimed: int = 0
    nodes_joined: int = 0
    nodes_expected: int = 0
    nodes: list[NodeProgress] = Field(default_factory=list)


RequestT = TypeVar("RequestT")


class OperationRecord(ColonyModel, Generic[RequestT]):
    """One accepted operation of any entity, as the entity engine (`workflows.kit.engine`) keeps it:
    queued, running or finished. Each entity's operation names its requests and its kind
    (`Operation` is a cluster's)."""

    id: str
    request: RequestT
    state: OperationState = OperationState.QUEUED
    reason: str = ""
    """Why it failed or was cancelled; empty on success."""
    submitted_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    update_id: str = ""
    """The Temporal update id it was submitted with: the same id again returns this operation
    instead of queueing another (across continue-as-new too)."""


class Operation(OperationRecord[OperationRequest]):
    """One accepted cluster operation."""

    progress: OperationProgress = Field(default_factory=OperationProgress)

    @property
    def kind(self) -> OperationKind:
        return self.request.kind


class OperationBook(ColonyModel):
    """The entity engine's persisted bookkeeping (`workflows.kit.engine`), part of every entity's state."""

    next_operation: int = 1
    operations_run: int = 0
    update_ids: dict[str, str] = Field(default_factory=dict)
    """Update id -> the id of the operation it queued (bounded, oldest dropped first), so a retried
    update returns its operation instead of queueing another, across continue-as-new too."""
    request_ids: list[str] = Field(default_factory=list)
    """Signal request ids already acted on (bounded, oldest dropped first)."""


class ContinueAsNewPolicy(ColonyModel):
    """When an entity's run continues as new (`workflows.kit.run_limit`), between two operations
    or two messages, once it has handled something: when Temporal suggests it, or past either
    bound. One policy for every workflow; a test lowers it to see runs change."""

    events: int = 4_000
    """Well below the 10,240 events at which Temporal suggests it, leaving room for the longest
    single operation (a 100-node pool drained and removed is about 3,000 events)."""
    bytes: int = 2 * 1024 * 1024
    """2 MB of history (Temporal's hard limit is 50 MB; Colony's bound is 4 MB per run)."""


MessageT = TypeVar("MessageT")


class Inbox(ColonyModel, Generic[MessageT]):
    """A single-writer service's messages not yet handled, and the request ids it has seen
    (`workflows.kit.service`): carried whole across continue-as-new, which may happen between any
    two messages."""

    pending: list[MessageT] = Field(default_factory=list)
    book: OperationBook = Field(default_factory=OperationBook)


KindT = TypeVar("KindT", bound=str)


class AcceptedOperation(ColonyModel, Generic[KindT]):
    """What an update of any entity returns: the operation's id and kind, and its place in the
    queue (1 = next)."""

    operation_id: str
    kind: KindT
    position: int
    purge_workflow_id: str | None = None
    """A delete of an entity whose workflow cannot make progress: the purge that ends it and
    removes what it made (`models.purge`; its operation id is then `purge`)."""


class OperationAccepted(AcceptedOperation[OperationKind]):
    """What a cluster update returns."""
