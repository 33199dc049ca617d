"""Node pools: the request that creates or sizes one, and the status of a pool and its nodes.

Validation of a single pool lives here; rules that need the whole cluster (unique pool names, the
last schedulable node) live in `models/cluster.py` and `models/operations.py`.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from functools import partial
from typing import Annotated, Any, Self

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from models.base import ColonyModel, rule
from models.bounds import MAX_LABELS, labels_bound_problem, user_bound
from models.names import label_problem, labels_problem, name_problem

MIN_POOL_COUNT = 1
MAX_POOL_COUNT = 100
"""1 to 100 nodes per pool: the product's documented bounds (mix SKUs by adding pools)."""
MIN_DRAIN_PARALLELISM = 1
MAX_DRAIN_PARALLELISM = 20
"""Nodes one operation drains at once, as a pool's, a cluster's or an operation's setting: up to
20 nodes' evictions land on a cluster's API server at once."""
DRAIN_PARALLELISM_DESCRIPTION = (
    "How many of this pool's nodes a scale-down or pool delete drains at once, 1 to 20; "
    "unset: the cluster's setting (2). An operation that names its own parallelism wins."
)


def taints_bound_problem(taints: list[Any]) -> str | None:
    """Why a pool's taints are too many, or None (as many as labels an object may have)."""
    if len(taints) > MAX_LABELS:
        return f"gives {len(taints)} taints; at most {MAX_LABELS} are allowed"
    return None


def count_problem(count: int) -> str | None:
    """Why `count` is not a valid node pool size, or None."""
    if MIN_POOL_COUNT <= count <= MAX_POOL_COUNT:
        return None
    return f"a node pool's count must be from {MIN_POOL_COUNT} to {MAX_POOL_COUNT}, got {count}"


NodePoolCount = Annotated[int, rule(count_problem)]
"""A pool's size, in nodes."""


def _fail(code: str, message: str) -> PydanticCustomError:
    # PydanticCustomError keeps the message as is (a ValueError would gain a "Value error, " prefix).
    return PydanticCustomError(code, message)


class TaintEffect(StrEnum):
    """The effect of a Kubernetes taint."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Taint(ColonyModel):
    """A taint Colony puts on every node of a pool."""

    key: str
    value: str = ""
    effect: TaintEffect

    @model_validator(mode="after")
    def _check(self) -> Self:
        problem = label_problem(self.key, self.value)
        if problem:
            raise _fail("taint", problem.replace("label", "taint", 1))
        return self

    @property
    def keeps_system_pods_off(self) -> bool:
        """True for the taints that keep the managed GPU/MPI operators off a node (NoSchedule, NoExecute)."""
        return self.effect in (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)


class NodeSku(ColonyModel):
    """What every node of a pool is: one GPU model or one whole-host CPU SKU of the host provider,
    exactly one of them; or, for a cluster template's workers pool, the template's instance type
    (VM size, VM template), whose GPUs the nodes' labels say."""

    gpu_model_id: str | None = None
    cpu_sku: str | None = None
    # Left out when unset, so a host pool's SKU reads as it always has.
    instance_type: str | None = Field(default=None, exclude_if=lambda value: value is None)

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        given = [
            value
            for value in (self.gpu_model_id, self.cpu_sku, self.instance_type)
            if value is not None
        ]
        if len(given) != 1:
            raise _fail("sku", "a node pool's sku needs exactly one of gpuModelId or cpuSku")
        if not given[0].strip():
            raise _fail("sku", "a node pool's sku must not be empty")
        return self

    @property
    def id(self) -> str:
        """The SKU id as the host provider knows it."""
        return self.gpu_model_id or self.cpu_sku or self.instance_type or ""

    def __str__(self) -> str:
        if self.instance_type is not None:
            return f"instance:{self.instance_type}"
        return f"gpu:{self.gpu_model_id}" if self.gpu_model_id else f"cpu:{self.cpu_sku}"


class NodePoolSpec(ColonyModel):
    """A node pool request: `{"name": "gpu", "sku": {"gpuModelId": "h100"}, "count": 2}`."""

    name: Annotated[str, rule(partial(name_problem, "node pool"))]
    sku: NodeSku
    count: NodePoolCount
    labels: Annotated[dict[str, str], rule(labels_problem), user_bound(labels_bound_problem)] = (
        Field(default_factory=dict)
    )
    taints: Annotated[list[Taint], user_bound(taints_bound_problem)] = Field(default_factory=list)
    drain_parallelism: int | None = Field(
        default=None,
        ge=MIN_DRAIN_PARALLELISM,
        le=MAX_DRAIN_PARALLELISM,
        description=DRAIN_PARALLELISM_DESCRIPTION,
    )

    @model_validator(mode="before")
    @classmethod
    def _sku_is_its_rule(cls, data: Any) -> Any:
        # A pool without a sku is told the sku's rule (which of the two to give), not "Field
        # required": whether it came as a flag, a file or an HTTP body.
        if isinstance(data, dict) and "sku" not in data:
            return {**data, "sku": {}}
        return data

    @field_validator("sku")
    @classmethod
    def _hosts_sku(cls, sku: NodeSku) -> NodeSku:
        if sku.instance_type is not None:
            raise _fail(
                "sku",
                "sku.instanceType: only a cluster template's workers pool has an instance type "
                "(its template's config sizes it); a node pool of hosts needs gpuModelId or cpuSku",
            )
        return sku

    @field_validator("taints")
    @classmethod
    def _taints(cls, taints: list[Taint]) -> list[Taint]:
        seen: set[tuple[str, str]] = set()
        for taint in taints:
            if (taint.key, taint.effect) in seen:
                raise _fail("taints", f"taint '{taint.key}:{taint.effect}' is given twice")
            seen.add((taint.key, taint.effect))
        return taints

    @property
    def schedulable_for_system_pods(self) -> bool:
        """True when the pool's nodes carry none of the user's NoSchedule/NoExecute taints."""
        return not any(taint.keeps_system_pods_off for taint in self.taints)


class NodeState(StrEnum):
    """Where a node is in its life, as the product reports it."""

    REGISTERED = "registered"
    """The host is claimed and booting; it is not in the cluster yet."""
    JOINED = "joined"
    """The node is in the cluster (`kubernetesStatus` tells whether it is Ready)."""
    CORDONED = "cordoned"
    DRAINING = "draining"
    REMOVING = "removing"


class NodeStatus(ColonyModel):
    """One node of a pool."""

    name: str
    """The Kubernetes node name once it joined; the host id while it is registered."""
    host_id: str
    address: str
    state: NodeState = NodeState.REGISTERED
    kubernetes_status: str = "Unknown"
    """The node's Ready condition: "Ready", "NotReady" or "Unknown"."""
    registered_at: datetime | None = None
    removed_by: str = ""
    """The id of the operation draining or removing this node; empty otherwise."""


class PoolSupply(StrEnum):
    """Where a pool's nodes come from (`workflows.cluster.supply`)."""

    HOSTS = "hosts"
    """Whole hosts claimed from the host provider, added as the ClusterDeployment's machines
    (the remote-cluster template)."""
    MACHINE_DEPLOYMENT = "machine-deployment"
    """The Cluster API MachineDeployment the cluster's template renders, sized by the
    ClusterDeployment's `config.workersNumber` (the cloud templates)."""


class NodePoolStatus(ColonyModel):
    """A pool as it is: its asked-for count, how many nodes are ready, and its nodes."""

    name: str
    sku: NodeSku
    count: int
    supply: PoolSupply = PoolSupply.HOSTS
    workers_number: int | None = None
    """A machine-deployment pool's `workersNumber` as Colony last set it (or found it at create):
    a different value found later was changed outside Colony, and is reported, never fought."""
    ready_count: int = 0
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    drain_parallelism: int | None = Field(default=None, description=DRAIN_PARALLELISM_DESCRIPTION)
    nodes: list[NodeStatus] = Field(default_factory=list)
    waiting_for_hosts: int = 0
    """How many hosts the pool waits for: its claim found too few free and the request waits for
    capacity (0: it waits for none). While a pool waits, its cluster's phase is `waiting`."""

    @classmethod
    def of(cls, spec: NodePoolSpec) -> NodePoolStatus:
        """A pool asked for, before any of its nodes exists: every field it shares with its spec
        (copied, so changing one never changes the other)."""
        return cls.model_validate(spec, from_attributes=True)

    @property
    def schedulable_for_system_pods(self) -> bool:
        """True when the pool's nodes carry none of the user's NoSchedule/NoExecute taints."""
        return not any(taint.keeps_system_pods_off for taint in self.taints)
