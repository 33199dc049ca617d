"""The GPU capacity ledger of one cluster: who holds which GPUs, who waits, and in what order.

Pure and deterministic: `CapacityLedgerWorkflow` (`capacity/<ClusterDeployment>`) owns one `CapacityLedger`
and feeds it the workspaces' requests and releases (signals or updates with request ids) and the
cluster's GPU inventory (from an activity that lists nodes and pods, when node pools change and on
request); it carries `CapacityLedgerState` across continue-as-new. The cluster's update validator
calls `scale_down_problem` before it accepts a scale-down. No clock, no IO, no randomness: the same
calls in the same order always give the same answers, so replays and restarts agree.

Semantics:

- Inventory: per node its GPU model (label `exalsius.ai/gpu-model`), vendor, extended resource,
  allocatable count, labels, readiness and schedulability, and the GPUs that pods Colony did not
  place use there (`foreign_used`: counted as used, never handed out).
- A request asks for `replicas x gpus_per_replica` GPUs matching a selector (the canonical model
  label for `gpuType`, or a raw `gpuNodeSelector`, matched exactly; optionally a vendor). Each
  replica's GPUs are on one node; replicas may share a node. Placement is best fit (the matching
  node with the fewest free GPUs that fits), which keeps whole nodes free for big requests.
- Admitted requests hold their GPUs per node, so two workspaces never get the same GPUs. Only ready,
  schedulable nodes receive new admissions.
- A request the cluster can never satisfy (no matching GPUs at all, or fewer than it needs in
  total, counting every matching node whether ready or not) is answered INFEASIBLE at once
  (`GpuOfferingUnavailable`). One that does not fit now WAITS.
- Waiting is strict first come, first served per selector: a waiting request blocks every later
  request with the same selector, even one that would fit (no overtaking, no starvation within a
  selector). Different selectors queue independently; among the heads of the queues, the oldest is
  admitted first whenever several could be.
- Release (delete, suspend) frees the GPUs and admits what now fits, in order. An inventory refresh
  that removes a node, or shrinks one below what is reserved on it (a forced scale-down), displaces
  the reservations that no longer fit (youngest first): they go back to waiting at their original
  place in line (ahead of everyone who came after them) and are reported as displaced.
- Positions are worked out, never pushed: each request gets a ticket (`seq`) when it arrives, and
  its position is the number of tickets of its queue that wait up to its own (a Fenwick tree per
  queue, `TicketTree`). A release looks only at the heads of the queues, so request, release and
  answer cost O(log n) in the number waiting (times the number of selectors with a queue).
- Every request and release carries an id and is idempotent: a repeated request returns the
  request's current answer and changes nothing; a repeated release is a no-op; a release that
  arrives before its request makes the request answer RELEASED, never admitted. Finished ids are
  remembered (the last `FINISHED_KEPT`) for duplicates that arrive late.
- A workspace holds at most one request: a new request id from a workspace supersedes (releases)
  its older one, and goes to the back of the line.
"""

from __future__ import annotations

import base64
import json
import zlib
from array import array
from collections import deque
from collections.abc import Iterable
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import Field, model_serializer, model_validator

from models.base import ColonyModel
from models.workspace_class import GPU_MODEL_LABEL, GpuVendor

FINISHED_KEPT = 1000
"""Finished request ids remembered for late duplicates. Duplicates come from retried signals and
restarted workflows, seconds to minutes after the original; 1,000 ids is hours of churn on a busy
cluster and about 70 kB of carried state as rows (measured with real ids), beside about 470 kB for
10,000 waiting: well inside Temporal's 2 MB payload limit for the continue-as-new input."""

DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
GFD_PRODUCT_LABEL = "nvidia.com/gpu.product"
GFD_COUNT_LABEL = "nvidia.com/gpu.count"
"""GPU Feature Discovery's labels of a GPU node: its GPUs' product name and their count."""


class GpuNode(ColonyModel):
    """One node of the cluster, as the ledger sees it (refreshed from the cluster by an activity)."""

    name: str
    model: str = ""
    """The value of the canonical label `exalsius.ai/gpu-model` (empty when the node lacks it)."""
    vendor: GpuVendor | None = None
    resource_name: str = DEFAULT_GPU_RESOURCE
    """The extended resource its GPUs are requested by (`nvidia.com/gpu`, `amd.com/gpu`)."""
    allocatable: int = 0
    """GPUs the kubelet reports allocatable."""
    labels: dict[str, str] = Field(default_factory=dict)
    ready: bool = True
    schedulable: bool = True
    """False when cordoned."""
    foreign_used: int = 0
    """GPUs requested by pods Colony did not place (not in workspace namespaces)."""

    @property
    def usable(self) -> bool:
        """True when new workspaces may be placed on it."""
        return self.ready and self.schedulable

    def label_view(self) -> dict[str, str]:
        """Its labels, with the canonical model label even when only `model` was given."""
        if self.model and GPU_MODEL_LABEL not in self.labels:
            return {**self.labels, GPU_MODEL_LABEL: self.model}
        return self.labels


GPU_VENDOR_LABEL = "exalsius.ai/gpu-vendor"
"""The node label that names a node's GPU vendor when set (exalsius-operator internal/gpu)."""
GPU_RESOURCES: dict[str, GpuVendor] = {
    "nvidia.com/gpu": GpuVendor.NVIDIA,
    "amd.com/gpu": GpuVendor.AMD,
}
"""The whole-GPU extended resources the ledger counts, and their vendors."""


def gpu_node(
    name: str,
    labels: dict[str, str],
    allocatable: dict[str, int],
    *,
    ready: bool = True,
    schedulable: bool = True,
    foreign_used: int = 0,
) -> GpuNode:
    """A node as the ledger sees it, from what the Kubernetes API says about it.

    For the inventory activity: the vendor comes from `exalsius.ai/gpu-vendor`, else from the GPU
    resource the node advertises; the model from `exalsius.ai/gpu-model` (Colony labels every GPU
    node with it). A node without GPUs is a `GpuNode` with `allocatable=0`.

    Args:
        name: the node's name.
        labels: its labels.
        allocatable: its allocatable extended resources, by name (`{"nvidia.com/gpu": 8}`).
        ready: its Ready condition is True.
        schedulable: it is not cordoned.
        foreign_used: GPUs requested by pods Colony did not place.
    """
    resource, count = next(
        ((r, allocatable[r]) for r in GPU_RESOURCES if allocatable.get(r, 0) > 0),
        (DEFAULT_GPU_RESOURCE, 0),
    )
    if not count and labels.get(GFD_COUNT_LABEL, "").isdigit():
        # A node whose device plugin has not advertised yet: GPU Feature Discovery's count.
        count = int(labels[GFD_COUNT_LABEL])
    vendor_label = labels.get(GPU_VENDOR_LABEL, "")
    vendor = GpuVendor(vendor_label) if vendor_label in {v.value for v in GpuVendor} else None
    return GpuNode(
        name=name,
        # Colony labels the nodes of host pools with the model; a template pool's nodes (cloud
        # instances) carry what GPU Feature Discovery read from the GPUs themselves.
        model=labels.get(GPU_MODEL_LABEL) or labels.get(GFD_PRODUCT_LABEL, ""),
        vendor=vendor or (GPU_RESOURCES[resource] if count else None),
        resource_name=resource,
        allocatable=count,
        labels=dict(labels),
        ready=ready,
        schedulable=schedulable,
        foreign_used=foreign_used,
    )


class GpuSelector(ColonyModel):
    """Which GPUs a request accepts: exact node labels, and optionally a vendor. Empty: any GPU."""

    labels: dict[str, str] = Field(default_factory=dict)
    vendor: GpuVendor | None = None

    @classmethod
    def for_request(
        cls,
        gpu_type: str | None = None,
        node_selector: dict[str, str] | None = None,
        vendor: GpuVendor | None = None,
    ) -> GpuSelector:
        """The selector of a workspace's `gpuType` (the canonical model label) or raw selector."""
        labels = dict(node_selector or {})
        if gpu_type:
            labels[GPU_MODEL_LABEL] = gpu_type
        return cls(labels=labels, vendor=vendor)

    def matches(self, node: GpuNode) -> bool:
        """True when the node's labels hold every label of the selector (and the vendor agrees)."""
        if self.vendor is not None:
            # Without a vendor label, the resource its GPUs are requested by tells the vendor.
            vendor_ok = (
                node.vendor == self.vendor
                if node.vendor is not None
                else node.resource_name == self.vendor.resource_name
            )
            if not vendor_ok:
                return False
        view = node.label_view()
        return all(view.get(key) == value for key, value in self.labels.items())

    @property
    def key(self) -> str:
        """The queue this selector waits in: requests with equal keys are served in order."""
        parts = [f"{key}={value}" for key, value in sorted(self.labels.items())]
        if self.vendor is not None:
            parts.append(f"vendor={self.vendor.value}")
        return ",".join(parts) or "*"

    def describe(self) -> str:
        """For messages: `exalsius.ai/gpu-model=H100` or `any GPU`."""
        return "any GPU" if self.key == "*" else self.key


class CapacityRequest(ColonyModel):
    """A workspace asks for GPUs: `replicas` groups of `gpus_per_replica`, each on one node."""

    request_id: str
    """Unique per admission attempt (`models.workspace.capacity_request_id`); retries reuse it."""
    workspace: str
    replicas: int = Field(ge=1)
    gpus_per_replica: int = Field(ge=1)
    selector: GpuSelector = Field(default_factory=GpuSelector)

    @property
    def total_gpus(self) -> int:
        return self.replicas * self.gpus_per_replica

    def describe(self) -> str:
        """For messages: `2 x 4 GPUs (exalsius.ai/gpu-model=H100)`."""
        unit = "GPU" if self.gpus_per_replica == 1 else "GPUs"
        return f"{self.replicas} x {self.gpus_per_replica} {unit} ({self.selector.describe()})"


class ReplicaPlacement(ColonyModel):
    """Where one replica's GPUs are held."""

    node: str
    gpus: int


class Reservation(ColonyModel):
    """An admitted request and the GPUs it holds."""

    request: CapacityRequest
    seq: int
    """Its ticket: its place in line when it arrived (kept if it is displaced and waits again)."""
    placements: list[ReplicaPlacement]
    reply_to: str = ""
    """The workflow that asked (answered when it is displaced, or admitted again)."""


class _Row(ColonyModel):
    """A model carried as an array of its fields' values in `ROW` order, not as an object: in the
    ledger's carried state there are thousands of them, and their field names alone would be
    most of it. New fields go at the end of `ROW`, so that the rows of old histories still read."""

    ROW: ClassVar[tuple[str, ...]]

    @model_validator(mode="before")
    @classmethod
    def _from_row(cls, data: Any) -> Any:
        if isinstance(data, list | tuple):
            return dict(zip(cls.ROW, data, strict=False))
        return data

    @model_serializer(mode="plain")
    def _as_row(self) -> list[Any]:
        return [getattr(self, name) for name in self.ROW]


class WaitingRequest(_Row):
    """A request waiting for GPUs, in the queue of its selector (`WaitingQueue`).

    Serialized as an array `[seq, request_id, workspace, replicas, gpus_per_replica, reply_to,
    displaced]`, not an object: at 10,000 waiting the field names alone would be 700 kB of the
    continue-as-new input, whose hard limit is 2 MB."""

    seq: int
    """Its ticket: its place in line (all selectors share one numbering)."""
    request_id: str
    workspace: str
    replicas: int = Field(ge=1)
    gpus_per_replica: int = Field(ge=1)
    reply_to: str = ""
    """The workflow that asked: told once, when it is admitted (its reply address goes with it)."""
    displaced: bool = False
    """True when it held GPUs and lost them (its node left the cluster)."""

    ROW: ClassVar[tuple[str, ...]] = (
        "seq",
        "request_id",
        "workspace",
        "replicas",
        "gpus_per_replica",
        "reply_to",
        "displaced",
    )

    @classmethod
    def of(
        cls, request: CapacityRequest, seq: int, reply_to: str, *, displaced: bool = False
    ) -> WaitingRequest:
        """`request` waiting with ticket `seq` (its selector is its queue's)."""
        return cls(
            seq=seq,
            request_id=request.request_id,
            workspace=request.workspace,
            replicas=request.replicas,
            gpus_per_replica=request.gpus_per_replica,
            reply_to=reply_to,
            displaced=displaced,
        )

    def request(self, selector: GpuSelector) -> CapacityRequest:
        return CapacityRequest(
            request_id=self.request_id,
            workspace=self.workspace,
            replicas=self.replicas,
            gpus_per_replica=self.gpus_per_replica,
            selector=selector,
        )


class WaitingQueue(ColonyModel):
    """The waiting requests of one selector, in ticket order (carried form).

    Serialized as `{"selector": ..., "packed": ...}`: its rows as compact JSON, zlib-compressed and
    base64-encoded. A row is about 117 bytes with real ids (each request id holds the workspace's
    run id, a UUID), so 10,000 waiting would be 1.2 MB of the continue-as-new input (2 MB hard
    limit); packed they are about 47 bytes. Compression is deterministic, and only ever read
    back by validation, so replays do not depend on it."""

    selector: GpuSelector
    waiting: list[WaitingRequest] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _unpack(cls, data: Any) -> Any:
        if isinstance(data, dict) and "packed" in data:
            rows = json.loads(zlib.decompress(base64.b64decode(data["packed"])))
            return {**{k: v for k, v in data.items() if k != "packed"}, "waiting": rows}
        return data

    @model_serializer(mode="plain")
    def _pack(self) -> dict[str, Any]:
        rows = json.dumps([w.model_dump() for w in self.waiting], separators=(",", ":"))
        return {
            "selector": self.selector.model_dump(mode="json"),
            "packed": base64.b64encode(zlib.compress(rows.encode(), 9)).decode(),
        }


class Decision(StrEnum):
    """The ledger's answer to a request."""

    ADMITTED = "admitted"
    WAITING = "waiting"
    INFEASIBLE = "infeasible"
    """The cluster can never satisfy it: GpuOfferingUnavailable."""
    RELEASED = "released"
    """Released (or superseded) before or after admission; never admitted again under this id."""


class CapacityAnswer(ColonyModel):
    """Where a request stands."""

    request_id: str
    workspace: str
    decision: Decision
    placements: list[ReplicaPlacement] = Field(default_factory=list)
    position: int = 0
    """Waiting: 1 = next in its selector's queue. Worked out when asked (never pushed)."""
    selector: str = "*"
    """The queue (`GpuSelector.key`)."""
    resource_name: str = ""
    """Admitted: the extended resource its GPUs are requested by (`nvidia.com/gpu`), for the
    chart's `_exalsius.resources.perReplica.gpuResourceName`."""
    message: str = ""

    @property
    def nodes(self) -> list[str]:
        """The nodes its GPUs are on, in order, without repeats."""
        return list(dict.fromkeys(p.node for p in self.placements))


class FinishedRequest(_Row):
    """A released or infeasible request, remembered for late duplicates (carried as an array
    `[request_id, workspace, decision, selector, message]`)."""

    request_id: str
    workspace: str
    decision: Decision
    selector: str = "*"
    message: str = ""

    ROW: ClassVar[tuple[str, ...]] = ("request_id", "workspace", "decision", "selector", "message")

    @classmethod
    def of(cls, request: CapacityRequest, decision: Decision, message: str) -> FinishedRequest:
        """`request`, finished with `decision`."""
        return cls(
            request_id=request.request_id,
            workspace=request.workspace,
            decision=decision,
            selector=request.selector.key,
            message=message,
        )

    def answer(self) -> CapacityAnswer:
        return CapacityAnswer(
            request_id=self.request_id,
            workspace=self.workspace,
            decision=self.decision,
            selector=self.selector,
            message=self.message,
        )


class LedgerChanges(ColonyModel):
    """What an operation did to other requests: the ledger workflow tells their workspaces. Those
    still waiting are never told: their position is worked out when someone asks."""

    admitted: list[CapacityAnswer] = Field(default_factory=list)
    """Newly admitted, in admission order."""
    displaced: list[CapacityAnswer] = Field(default_factory=list)
    """Lost their GPUs (a node left); their answer after the operation (waiting, or re-admitted)."""

    @property
    def empty(self) -> bool:
        return not (self.admitted or self.displaced)


class RequestResult(ColonyModel):
    """The answer to a request, and what it did to others (superseding frees GPUs)."""

    answer: CapacityAnswer
    changes: LedgerChanges = Field(default_factory=LedgerChanges)


class ReleaseResult(ColonyModel):
    """The answer to a release."""

    answer: CapacityAnswer
    held: bool
    """True when it held GPUs or waited (False for a repeated or unknown release)."""
    changes: LedgerChanges = Field(default_factory=LedgerChanges)


class GpuHolder(ColonyModel):
    """A workspace holding GPUs on some nodes."""

    workspace: str
    request_id: str
    gpus: int
    nodes: list[str]


class CapacityLedgerState(ColonyModel):
    """Everything the ledger knows, as carried across continue-as-new (`CapacityLedger.snapshot`;
    JSON round-trips exactly). Tickets are renumbered 1..n in it, in order, so the ledger's ticket
    trees start small again in every run."""

    cluster: str = ""
    nodes: list[GpuNode] = Field(default_factory=list)
    """The inventory, by name."""
    reservations: list[Reservation] = Field(default_factory=list)
    """Admitted requests, in ticket order."""
    queues: list[WaitingQueue] = Field(default_factory=list)
    """Waiting requests, one queue per selector (ordered by the ticket of its first request)."""
    finished: list[FinishedRequest] = Field(default_factory=list)
    """Released and infeasible requests, oldest first, at most `FINISHED_KEPT`."""
    next_seq: int = 1

    @property
    def waiting(self) -> list[WaitingRequest]:
        """Every waiting request, in ticket order (all selectors)."""
        return sorted((w for q in self.queues for w in q.waiting), key=lambda w: w.seq)


class TicketTree:
    """The tickets waiting in one queue: a Fenwick tree of counts over ticket numbers, so adding,
    removing (from anywhere in the line), counting those ahead and finding the first ticket are
    each O(log n). It grows by doubling; the new upper half of a Fenwick tree covers only empty
    tickets except its last cell (the total), so growing copies nothing."""

    def __init__(self) -> None:
        self._size = 1
        self._tree = array("q", [0, 0])
        """1-based: cell i counts the tickets in (i - lowbit(i), i]."""
        self.count = 0

    def add(self, ticket: int) -> None:
        while ticket > self._size:
            self._tree.extend(bytes(8 * self._size))
            self._size *= 2
            self._tree[self._size] = self.count
        self._change(ticket, 1)

    def remove(self, ticket: int) -> None:
        self._change(ticket, -1)

    def _change(self, ticket: int, delta: int) -> None:
        self.count += delta
        index = ticket
        while index <= self._size:
            self._tree[index] += delta
            index += index & -index

    def rank(self, ticket: int) -> int:
        """How many tickets up to and including `ticket` wait."""
        total = 0
        index = min(ticket, self._size)
        while index > 0:
            total += self._tree[index]
            index -= index & -index
        return total

    def nth(self, n: int) -> int:
        """The `n`-th waiting ticket (1 = the first); 0 when fewer wait."""
        if n < 1 or n > self.count:
            return 0
        position, step = 0, self._size
        while step:
            if position + step <= self._size and self._tree[position + step] < n:
                position += step
                n -= self._tree[position]
            step //= 2
        return position + 1


class _Queue:
    """One selector's line: its selector and its tickets."""

    def __init__(self, selector: GpuSelector) -> None:
        self.selector = selector
        self.tickets = TicketTree()


class CapacityLedger:
    """The operations of the ledger (see the module doc). Built from a `CapacityLedgerState` (O(n)
    once, when a run starts); `snapshot` gives the state to carry. Every operation and answer is
    O(log n) in the number waiting, times the number of selectors that have a queue."""

    def __init__(self, state: CapacityLedgerState) -> None:
        self.cluster = state.cluster
        self._nodes: list[GpuNode] = []
        self._node_by_name: dict[str, GpuNode] = {}
        self._set_nodes(state.nodes)
        self._reservations: dict[str, Reservation] = {}
        self._held: dict[str, int] = {}
        """GPUs reserved per node (kept with the reservations)."""
        self._waiting: dict[str, WaitingRequest] = {}
        self._selector_of: dict[str, str] = {}
        """Waiting request id -> its queue's key."""
        self._by_ticket: dict[int, str] = {}
        """Waiting ticket -> request id."""
        self._queues: dict[str, _Queue] = {}
        self._by_workspace: dict[str, str] = {}
        """Workspace -> its one live (held or waiting) request id."""
        self._finished: dict[str, FinishedRequest] = {}
        self._finished_order: deque[str] = deque()
        self._next_seq = state.next_seq
        for reservation in state.reservations:
            self._reserve(reservation)
        for queue in state.queues:
            for waiting in queue.waiting:
                self._enqueue(waiting, queue.selector)
        for finished in state.finished:
            self._finish(finished)

    # --- queries ----------------------------------------------------------------------------------

    @property
    def nodes(self) -> list[GpuNode]:
        """The inventory, by name."""
        return list(self._nodes)

    def answer(self, request_id: str) -> CapacityAnswer | None:
        """Where the request stands now (its position worked out from its ticket), or None for an
        id the ledger never saw (or forgot)."""
        reservation = self._reservations.get(request_id)
        if reservation is not None:
            return self._admitted_answer(reservation)
        waiting = self._waiting.get(request_id)
        if waiting is not None:
            return self._waiting_answer(waiting)
        finished = self._finished.get(request_id)
        return finished.answer() if finished is not None else None

    def workspace_request(self, workspace: str) -> str | None:
        """The request a workspace holds GPUs with or waits with, if any."""
        return self._by_workspace.get(workspace)

    def reply_to(self, request_id: str) -> str:
        """The workflow to tell about a held or waiting request ("" when unknown)."""
        live = self._reservations.get(request_id) or self._waiting.get(request_id)
        return live.reply_to if live is not None else ""

    def waiting_count(self) -> int:
        return len(self._waiting)

    def queue_lengths(self) -> dict[str, int]:
        """How many wait, per selector key."""
        return {key: queue.tickets.count for key, queue in self._queues.items()}

    def reserved(self) -> dict[str, int]:
        """GPUs held by admitted workspaces, per node."""
        return {node: count for node, count in self._held.items() if count}

    def free(self) -> dict[str, int]:
        """GPUs free for new admissions per usable node (allocatable, minus foreign and reserved)."""
        return {
            node.name: max(0, node.allocatable - node.foreign_used - self._held.get(node.name, 0))
            for node in self._nodes
            if node.usable
        }

    def holders_on_nodes(self, nodes: Iterable[str]) -> list[GpuHolder]:
        """The workspaces holding GPUs on any of `nodes`, in arrival order."""
        wanted = set(nodes)
        holders: list[GpuHolder] = []
        for reservation in sorted(self._reservations.values(), key=lambda r: r.seq):
            on = [p for p in reservation.placements if p.node in wanted]
            if on:
                holders.append(
                    GpuHolder(
                        workspace=reservation.request.workspace,
                        request_id=reservation.request.request_id,
                        gpus=sum(p.gpus for p in on),
                        nodes=list(dict.fromkeys(p.node for p in on)),
                    )
                )
        return holders

    def queue(self, selector_key: str, limit: int | None = None) -> list[CapacityAnswer]:
        """The waiting requests of one selector, in order (the first `limit` of them)."""
        queue = self._queues.get(selector_key)
        if queue is None:
            return []
        count = queue.tickets.count if limit is None else min(limit, queue.tickets.count)
        return [
            self._waiting_answer(self._waiting[self._by_ticket[queue.tickets.nth(n)]])
            for n in range(1, count + 1)
        ]

    def snapshot(self) -> CapacityLedgerState:
        """The state to carry across continue-as-new, tickets renumbered 1..n in order (O(n log n):
        once per run)."""
        live = sorted(
            [
                *((r.seq, r.request.request_id) for r in self._reservations.values()),
                *((w.seq, w.request_id) for w in self._waiting.values()),
            ]
        )
        renumbered = {request_id: index for index, (_, request_id) in enumerate(live, start=1)}
        reservations = [
            r.model_copy(update={"seq": renumbered[r.request.request_id]})
            for r in sorted(self._reservations.values(), key=lambda r: r.seq)
        ]
        queues = [
            WaitingQueue(
                selector=queue.selector,
                waiting=[
                    self._waiting[rid].model_copy(update={"seq": renumbered[rid]})
                    for rid in (
                        self._by_ticket[queue.tickets.nth(n)]
                        for n in range(1, queue.tickets.count + 1)
                    )
                ],
            )
            for queue in sorted(self._queues.values(), key=lambda q: q.tickets.nth(1))
        ]
        return CapacityLedgerState(
            cluster=self.cluster,
            nodes=list(self._nodes),
            reservations=reservations,
            queues=queues,
            finished=[self._finished[rid] for rid in self._finished_order],
            next_seq=len(live) + 1,
        )

    # --- operations -------------------------------------------------------------------------------

    def request(self, request: CapacityRequest, reply_to: str = "") -> RequestResult:
        """Admit, queue or refuse a request; idempotent by `request_id` (see the module doc).

        Args:
            request: what is asked for.
            reply_to: the workflow to tell when it is admitted later (carried with it).
        """
        known = self.answer(request.request_id)
        if known is not None:
            return RequestResult(answer=known)
        self._supersede(request)
        problem = self._infeasible(request)
        if problem:
            self._finish(FinishedRequest.of(request, Decision.INFEASIBLE, problem))
            answer = self.answer(request.request_id)
            assert answer is not None
            return RequestResult(answer=answer, changes=self._admit_waiting())
        seq = self._next_seq
        self._next_seq += 1
        queue = self._queues.get(request.selector.key)
        queued_ahead = queue is not None and queue.tickets.count > 0
        placements = None if queued_ahead else self._place(request)
        if placements is not None:
            self._reserve(
                Reservation(request=request, seq=seq, placements=placements, reply_to=reply_to)
            )
        else:
            self._enqueue(WaitingRequest.of(request, seq, reply_to), request.selector)
        changes = self._admit_waiting()
        current = self.answer(request.request_id)
        assert current is not None
        changes.admitted = [a for a in changes.admitted if a.request_id != request.request_id]
        return RequestResult(answer=current, changes=changes)

    def release(self, request_id: str, reason: str = "released") -> ReleaseResult:
        """Free what a request holds or drop it from its queue; idempotent.

        Args:
            request_id: the request to release.
            reason: recorded on its answer ("deleted", "suspended").
        """
        if request_id in self._reservations or request_id in self._waiting:
            released = self._released(request_id, reason)
            return ReleaseResult(answer=released, held=True, changes=self._admit_waiting())
        known = self.answer(request_id)
        if known is not None:
            return ReleaseResult(answer=known, held=False)
        # A release that overtook its request: remember it, so the request is never admitted.
        self._finish(
            FinishedRequest(
                request_id=request_id,
                workspace="",
                decision=Decision.RELEASED,
                message=f"{reason} before it was requested",
            )
        )
        answer = self.answer(request_id)
        assert answer is not None
        return ReleaseResult(answer=answer, held=False)

    def refresh_inventory(self, nodes: Iterable[GpuNode]) -> LedgerChanges:
        """Replace the inventory; displace reservations that lost their node; admit what now fits."""
        self._set_nodes(nodes)
        displaced: list[Reservation] = []
        # A node that left takes every reservation on it.
        for reservation in sorted(self._reservations.values(), key=lambda r: r.seq):
            if any(p.node not in self._node_by_name for p in reservation.placements):
                displaced.append(self._unreserve(reservation.request.request_id))
        # A node shrunk below what is held on it: the youngest reservations there give way.
        for node in self._nodes:
            while self._held.get(node.name, 0) > node.allocatable:
                youngest = max(
                    (
                        r
                        for r in self._reservations.values()
                        if any(p.node == node.name for p in r.placements)
                    ),
                    key=lambda r: r.seq,
                )
                displaced.append(self._unreserve(youngest.request.request_id))
        for reservation in displaced:
            request = reservation.request
            self._enqueue(
                WaitingRequest.of(request, reservation.seq, reservation.reply_to, displaced=True),
                request.selector,
            )
        changes = self._admit_waiting()
        ids = [r.request.request_id for r in sorted(displaced, key=lambda r: r.seq)]
        changes.displaced = [a for i in ids if (a := self.answer(i)) is not None]
        return changes

    def capacity_changed(self, nodes: Iterable[GpuNode] | None = None) -> LedgerChanges:
        """Something freed GPUs outside the ledger (another service's signal): look again.

        Args:
            nodes: a fresh inventory, when the caller has one.
        """
        if nodes is not None:
            return self.refresh_inventory(nodes)
        return self._admit_waiting()

    # --- internals --------------------------------------------------------------------------------

    def _set_nodes(self, nodes: Iterable[GpuNode]) -> None:
        self._nodes = sorted(nodes, key=lambda node: node.name)
        self._node_by_name = {node.name: node for node in self._nodes}

    def _admitted_answer(self, reservation: Reservation) -> CapacityAnswer:
        request = reservation.request
        nodes = ", ".join(dict.fromkeys(p.node for p in reservation.placements))
        first = self._node_by_name.get(reservation.placements[0].node)
        return CapacityAnswer(
            request_id=request.request_id,
            workspace=request.workspace,
            decision=Decision.ADMITTED,
            placements=list(reservation.placements),
            selector=request.selector.key,
            resource_name=first.resource_name if first else "",
            message=f"{request.describe()} reserved on {nodes}",
        )

    def _waiting_answer(self, waiting: WaitingRequest) -> CapacityAnswer:
        queue = self._queues[self._selector_of[waiting.request_id]]
        request = waiting.request(queue.selector)
        position = queue.tickets.rank(waiting.seq)
        lost = "its GPUs' node left the cluster; " if waiting.displaced else ""
        return CapacityAnswer(
            request_id=request.request_id,
            workspace=request.workspace,
            decision=Decision.WAITING,
            position=position,
            selector=request.selector.key,
            message=(
                f"{lost}waiting for GPU capacity: position {position} in the queue for "
                f"{request.selector.describe()} ({request.describe()})"
            ),
        )

    def _reserve(self, reservation: Reservation) -> None:
        request = reservation.request
        self._reservations[request.request_id] = reservation
        self._by_workspace[request.workspace] = request.request_id
        for placement in reservation.placements:
            self._held[placement.node] = self._held.get(placement.node, 0) + placement.gpus

    def _unreserve(self, request_id: str) -> Reservation:
        reservation = self._reservations.pop(request_id)
        del self._by_workspace[reservation.request.workspace]
        for placement in reservation.placements:
            self._held[placement.node] -= placement.gpus
        return reservation

    def _enqueue(self, waiting: WaitingRequest, selector: GpuSelector) -> None:
        key = selector.key
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = _Queue(selector)
        queue.tickets.add(waiting.seq)
        self._waiting[waiting.request_id] = waiting
        self._selector_of[waiting.request_id] = key
        self._by_ticket[waiting.seq] = waiting.request_id
        self._by_workspace[waiting.workspace] = waiting.request_id

    def _dequeue(self, request_id: str) -> tuple[WaitingRequest, GpuSelector]:
        waiting = self._waiting.pop(request_id)
        key = self._selector_of.pop(request_id)
        del self._by_ticket[waiting.seq]
        del self._by_workspace[waiting.workspace]
        queue = self._queues[key]
        queue.tickets.remove(waiting.seq)
        if not queue.tickets.count:
            del self._queues[key]  # its tree grew with the tickets of this run: let it go
        return waiting, queue.selector

    def _released(self, request_id: str, reason: str) -> CapacityAnswer:
        """Drop a held or waiting request, remembering it as released."""
        if request_id in self._reservations:
            request = self._unreserve(request_id).request
        else:
            waiting, selector = self._dequeue(request_id)
            request = waiting.request(selector)
        self._finish(FinishedRequest.of(request, Decision.RELEASED, reason))
        answer = self.answer(request_id)
        assert answer is not None
        return answer

    def _finish(self, finished: FinishedRequest) -> None:
        if finished.request_id in self._finished:
            self._finished_order.remove(finished.request_id)  # a forgotten id finished again
        self._finished[finished.request_id] = finished
        self._finished_order.append(finished.request_id)
        while len(self._finished_order) > FINISHED_KEPT:
            del self._finished[self._finished_order.popleft()]

    def _supersede(self, request: CapacityRequest) -> None:
        """Release the workspace's older request, if any."""
        older = self._by_workspace.get(request.workspace)
        if older is not None:
            self._released(older, f"superseded by request {request.request_id}")

    def _infeasible(self, request: CapacityRequest) -> str | None:
        """Why the cluster can never satisfy the request, or None (every matching node counts)."""
        matching = [
            node for node in self._nodes if node.allocatable > 0 and request.selector.matches(node)
        ]
        cluster = f"cluster '{self.cluster}'" if self.cluster else "the cluster"
        if not matching:
            return f"{cluster} has no GPUs matching {request.selector.describe()}"
        room = sum(node.allocatable // request.gpus_per_replica for node in matching)
        if room >= request.replicas:
            return None
        total = sum(node.allocatable for node in matching)
        return (
            f"{cluster} has {total} GPUs matching {request.selector.describe()} on "
            f"{len(matching)} node{'s' if len(matching) != 1 else ''}, room for at most {room} "
            f"replica{'s' if room != 1 else ''} of {request.gpus_per_replica}; the workspace "
            f"needs {request.replicas}"
        )

    def _place(self, request: CapacityRequest) -> list[ReplicaPlacement] | None:
        """A placement on usable matching nodes that fits now (best fit), or None."""
        free = {
            name: count
            for name, count in self.free().items()
            if request.selector.matches(self._node_by_name[name])
        }
        placements: list[ReplicaPlacement] = []
        for _ in range(request.replicas):
            fitting = [name for name, count in free.items() if count >= request.gpus_per_replica]
            if not fitting:
                return None
            chosen = min(fitting, key=lambda name: (free[name], name))
            free[chosen] -= request.gpus_per_replica
            placements.append(ReplicaPlacement(node=chosen, gpus=request.gpus_per_replica))
        return placements

    def _admit_waiting(self) -> LedgerChanges:
        """Admit queue heads that fit, oldest first, until none does. Only the heads are looked
        at (one per selector), so this costs the same at any depth."""
        admitted: list[CapacityAnswer] = []
        while True:
            heads = sorted(
                (queue.tickets.nth(1), queue.selector) for queue in self._queues.values()
            )
            for ticket, selector in heads:
                head = self._waiting[self._by_ticket[ticket]]
                placements = self._place(head.request(selector))
                if placements is None:
                    continue
                waiting, _ = self._dequeue(head.request_id)
                reservation = Reservation(
                    request=waiting.request(selector),
                    seq=waiting.seq,
                    placements=placements,
                    reply_to=waiting.reply_to,
                )
                self._reserve(reservation)
                admitted.append(self._admitted_answer(reservation))
                break
            else:
                return LedgerChanges(admitted=admitted)


def scale_down_problem(
    state: CapacityLedgerState, cluster: str, pool: str, removed_nodes: Iterable[str]
) -> str | None:
    """Why scaling `pool` down (removing `removed_nodes`) is refused, or None when no workspace holds
    GPUs there. For `ClusterWorkflow`'s update validator.

    Args:
        state: the cluster's ledger state.
        cluster: the cluster's name, for the message.
        pool: the node pool's name, for the message.
        removed_nodes: the nodes the scale-down would remove.
    """
    holders = CapacityLedger(state).holders_on_nodes(removed_nodes)
    if not holders:
        return None
    named = ", ".join(
        f"{h.workspace} ({h.gpus} GPU{'s' if h.gpus != 1 else ''} on {', '.join(h.nodes)})"
        for h in holders
    )
    return (
        f"scaling node pool '{pool}' of cluster '{cluster}' down would take GPUs from running "
        f"workspaces: {named}; delete or suspend them first, or force the scale-down (they go back "
        "to waiting for GPUs)"
    )
