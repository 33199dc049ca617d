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
- Every request and release carries an id and is idempotent: a repeated request returns the
  request's current answer and changes nothing; a repeated release is a no-op; a release that
  arrives before its request makes the request answer RELEASED, never admitted. Finished ids are
  remembered (the last `FINISHED_KEPT`) for duplicates that arrive late.
- A workspace holds at most one request: a new request id from a workspace supersedes (releases)
  its older one, and goes to the back of the line.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from pydantic import Field

from models.base import ColonyModel
from models.workspace_class import GPU_MODEL_LABEL, GpuVendor

FINISHED_KEPT = 1000
"""Finished request ids remembered for late duplicates. Duplicates come from retried signals and
restarted workflows, seconds to minutes after the original; 1,000 ids is hours of churn on a busy
cluster and about 230 kB of state (measured), well inside Temporal's 2 MB payload limit for the
continue-as-new input."""

DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"


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
    vendor_label = labels.get(GPU_VENDOR_LABEL, "")
    vendor = GpuVendor(vendor_label) if vendor_label in {v.value for v in GpuVendor} else None
    return GpuNode(
        name=name,
        model=labels.get(GPU_MODEL_LABEL, ""),
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
    """Its place in line when it arrived (kept if it is displaced and waits again)."""
    placements: list[ReplicaPlacement]


class WaitingRequest(ColonyModel):
    """A request waiting for GPUs."""

    request: CapacityRequest
    seq: int
    displaced: bool = False
    """True when it held GPUs and lost them (its node left the cluster)."""


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
    """Waiting: 1 = next in its selector's queue."""
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


class LedgerChanges(ColonyModel):
    """What an operation did to other requests: the ledger workflow tells their workspaces."""

    admitted: list[CapacityAnswer] = Field(default_factory=list)
    """Newly admitted, in admission order."""
    displaced: list[CapacityAnswer] = Field(default_factory=list)
    """Lost their GPUs (a node left); their answer after the operation (waiting, or re-admitted)."""
    moved: list[CapacityAnswer] = Field(default_factory=list)
    """Still waiting, at a new position."""

    @property
    def empty(self) -> bool:
        return not (self.admitted or self.displaced or self.moved)


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
    """Everything the ledger knows; carried whole across continue-as-new (JSON round-trips exactly)."""

    cluster: str = ""
    nodes: list[GpuNode] = Field(default_factory=list)
    """The inventory, by name."""
    reservations: list[Reservation] = Field(default_factory=list)
    """Admitted requests, in arrival order."""
    waiting: list[WaitingRequest] = Field(default_factory=list)
    """Waiting requests, in arrival order (all selectors)."""
    finished: list[CapacityAnswer] = Field(default_factory=list)
    """Released and infeasible requests, oldest first, at most `FINISHED_KEPT`."""
    next_seq: int = 1


class CapacityLedger:
    """The operations on a `CapacityLedgerState` (which it modifies in place; see the module doc)."""

    def __init__(self, state: CapacityLedgerState) -> None:
        self.state = state

    # --- queries ----------------------------------------------------------------------------------

    def answer(self, request_id: str) -> CapacityAnswer | None:
        """Where the request stands now, or None for an id the ledger never saw (or forgot)."""
        for reservation in self.state.reservations:
            if reservation.request.request_id == request_id:
                return self._admitted_answer(reservation)
        for waiting in self.state.waiting:
            if waiting.request.request_id == request_id:
                return self._waiting_answer(waiting)
        return next((a for a in self.state.finished if a.request_id == request_id), None)

    def reserved(self) -> dict[str, int]:
        """GPUs held by admitted workspaces, per node."""
        held: dict[str, int] = {}
        for reservation in self.state.reservations:
            for placement in reservation.placements:
                held[placement.node] = held.get(placement.node, 0) + placement.gpus
        return held

    def free(self) -> dict[str, int]:
        """GPUs free for new admissions per usable node (allocatable, minus foreign and reserved)."""
        held = self.reserved()
        return {
            node.name: max(0, node.allocatable - node.foreign_used - held.get(node.name, 0))
            for node in self.state.nodes
            if node.usable
        }

    def holders_on_nodes(self, nodes: Iterable[str]) -> list[GpuHolder]:
        """The workspaces holding GPUs on any of `nodes`, in arrival order."""
        wanted = set(nodes)
        holders: list[GpuHolder] = []
        for reservation in self.state.reservations:
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

    def queue(self, selector_key: str) -> list[CapacityAnswer]:
        """The waiting requests of one selector, in order."""
        return [
            self._waiting_answer(w)
            for w in self.state.waiting
            if w.request.selector.key == selector_key
        ]

    # --- operations -------------------------------------------------------------------------------

    def request(self, request: CapacityRequest) -> RequestResult:
        """Admit, queue or refuse a request; idempotent by `request_id` (see the module doc)."""
        known = self.answer(request.request_id)
        if known is not None:
            return RequestResult(answer=known)
        before = self._positions()
        superseded = self._supersede(request)
        problem = self._infeasible(request)
        if problem:
            answer = CapacityAnswer(
                request_id=request.request_id,
                workspace=request.workspace,
                decision=Decision.INFEASIBLE,
                selector=request.selector.key,
                message=problem,
            )
            self._finish(answer)
            changes = self._admit_waiting(before) if superseded else LedgerChanges()
            return RequestResult(answer=answer, changes=changes)
        seq = self.state.next_seq
        self.state.next_seq += 1
        queued_ahead = any(
            w.request.selector.key == request.selector.key for w in self.state.waiting
        )
        placements = None if queued_ahead else self._place(request)
        if placements is not None:
            self.state.reservations.append(
                Reservation(request=request, seq=seq, placements=placements)
            )
        else:
            self._enqueue(WaitingRequest(request=request, seq=seq))
        changes = self._admit_waiting(before)
        current = self.answer(request.request_id)
        assert current is not None
        changes.admitted = [a for a in changes.admitted if a.request_id != request.request_id]
        changes.moved = [a for a in changes.moved if a.request_id != request.request_id]
        return RequestResult(answer=current, changes=changes)

    def release(self, request_id: str, reason: str = "released") -> ReleaseResult:
        """Free what a request holds or drop it from its queue; idempotent.

        Args:
            request_id: the request to release.
            reason: recorded on its answer ("deleted", "suspended").
        """
        before = self._positions()
        for index, reservation in enumerate(self.state.reservations):
            if reservation.request.request_id == request_id:
                del self.state.reservations[index]
                answer = self._released(reservation.request, reason)
                return ReleaseResult(answer=answer, held=True, changes=self._admit_waiting(before))
        for index, waiting in enumerate(self.state.waiting):
            if waiting.request.request_id == request_id:
                del self.state.waiting[index]
                answer = self._released(waiting.request, reason)
                return ReleaseResult(answer=answer, held=True, changes=self._admit_waiting(before))
        known = self.answer(request_id)
        if known is not None:
            return ReleaseResult(answer=known, held=False)
        # A release that overtook its request: remember it, so the request is never admitted.
        answer = CapacityAnswer(
            request_id=request_id,
            workspace="",
            decision=Decision.RELEASED,
            message=f"{reason} before it was requested",
        )
        self._finish(answer)
        return ReleaseResult(answer=answer, held=False)

    def refresh_inventory(self, nodes: Iterable[GpuNode]) -> LedgerChanges:
        """Replace the inventory; displace reservations that lost their node; admit what now fits."""
        before = self._positions()
        self.state.nodes = sorted(nodes, key=lambda node: node.name)
        by_name = {node.name: node for node in self.state.nodes}
        displaced: list[Reservation] = []
        # A node that left takes every reservation on it.
        for reservation in list(self.state.reservations):
            if any(p.node not in by_name for p in reservation.placements):
                displaced.append(reservation)
                self.state.reservations.remove(reservation)
        # A node shrunk below what is held on it: the youngest reservations there give way.
        for node in self.state.nodes:
            while self.reserved().get(node.name, 0) > node.allocatable:
                youngest = max(
                    (
                        r
                        for r in self.state.reservations
                        if any(p.node == node.name for p in r.placements)
                    ),
                    key=lambda r: r.seq,
                )
                displaced.append(youngest)
                self.state.reservations.remove(youngest)
        for reservation in displaced:
            self._enqueue(
                WaitingRequest(request=reservation.request, seq=reservation.seq, displaced=True)
            )
        changes = self._admit_waiting(before)
        ids = [r.request.request_id for r in sorted(displaced, key=lambda r: r.seq)]
        changes.displaced = [a for i in ids if (a := self.answer(i)) is not None]
        changes.moved = [a for a in changes.moved if a.request_id not in ids]
        return changes

    def capacity_changed(self, nodes: Iterable[GpuNode] | None = None) -> LedgerChanges:
        """Something freed GPUs outside the ledger (another service's signal): look again.

        Args:
            nodes: a fresh inventory, when the caller has one.
        """
        if nodes is not None:
            return self.refresh_inventory(nodes)
        return self._admit_waiting(self._positions())

    # --- internals --------------------------------------------------------------------------------

    def _admitted_answer(self, reservation: Reservation) -> CapacityAnswer:
        request = reservation.request
        nodes = ", ".join(dict.fromkeys(p.node for p in reservation.placements))
        first = next(
            (n for n in self.state.nodes if n.name == reservation.placements[0].node), None
        )
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
        request = waiting.request
        position = 1 + sum(
            1
            for other in self.state.waiting
            if other.request.selector.key == request.selector.key and other.seq < waiting.seq
        )
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

    def _released(self, request: CapacityRequest, reason: str) -> CapacityAnswer:
        answer = CapacityAnswer(
            request_id=request.request_id,
            workspace=request.workspace,
            decision=Decision.RELEASED,
            selector=request.selector.key,
            message=reason,
        )
        self._finish(answer)
        return answer

    def _finish(self, answer: CapacityAnswer) -> None:
        self.state.finished.append(answer)
        del self.state.finished[:-FINISHED_KEPT]

    def _enqueue(self, waiting: WaitingRequest) -> None:
        self.state.waiting.append(waiting)
        self.state.waiting.sort(key=lambda w: w.seq)

    def _supersede(self, request: CapacityRequest) -> bool:
        """Release the workspace's older request, if any; True when one was released."""
        for reservation in self.state.reservations:
            if reservation.request.workspace == request.workspace:
                self.state.reservations.remove(reservation)
                self._released(reservation.request, f"superseded by request {request.request_id}")
                return True
        for waiting in self.state.waiting:
            if waiting.request.workspace == request.workspace:
                self.state.waiting.remove(waiting)
                self._released(waiting.request, f"superseded by request {request.request_id}")
                return True
        return False

    def _infeasible(self, request: CapacityRequest) -> str | None:
        """Why the cluster can never satisfy the request, or None (every matching node counts)."""
        matching = [
            node
            for node in self.state.nodes
            if node.allocatable > 0 and request.selector.matches(node)
        ]
        cluster = f"cluster '{self.state.cluster}'" if self.state.cluster else "the cluster"
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
        matching = {n.name for n in self.state.nodes if n.usable and request.selector.matches(n)}
        free = {name: count for name, count in self.free().items() if name in matching}
        placements: list[ReplicaPlacement] = []
        for _ in range(request.replicas):
            fitting = [name for name, count in free.items() if count >= request.gpus_per_replica]
            if not fitting:
                return None
            chosen = min(fitting, key=lambda name: (free[name], name))
            free[chosen] -= request.gpus_per_replica
            placements.append(ReplicaPlacement(node=chosen, gpus=request.gpus_per_replica))
        return placements

    def _positions(self) -> dict[str, int]:
        return {w.request.request_id: self._waiting_answer(w).position for w in self.state.waiting}

    def _admit_waiting(self, before: dict[str, int]) -> LedgerChanges:
        """Admit queue heads that fit, oldest first, until none does; report what moved."""
        admitted: list[CapacityAnswer] = []
        progress = True
        while progress:
            progress = False
            heads: dict[str, WaitingRequest] = {}
            for waiting in self.state.waiting:
                heads.setdefault(waiting.request.selector.key, waiting)
            for head in sorted(heads.values(), key=lambda w: w.seq):
                placements = self._place(head.request)
                if placements is None:
                    continue
                self.state.waiting.remove(head)
                reservation = Reservation(request=head.request, seq=head.seq, placements=placements)
                self.state.reservations.append(reservation)
                self.state.reservations.sort(key=lambda r: r.seq)
                admitted.append(self._admitted_answer(reservation))
                progress = True
                break
        moved = [
            self._waiting_answer(w)
            for w in self.state.waiting
            if w.request.request_id in before
            and before[w.request.request_id] != self._waiting_answer(w).position
        ]
        return LedgerChanges(admitted=admitted, moved=moved)


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
