"""Drain decisions, pure and deterministic: which pods a drain evicts and which nodes go first.

Called by `ClusterWorkflow` (inside the sandbox, so no IO here) and by the `list_nodes` activity to
count evictable pods. It follows `kubectl drain` as the product describes it: every pod is evicted
except a DaemonSet's, a static pod's mirror and any pod that tolerates the cordon.

`DrainTally` is the `drain_node` activity's bookkeeping of one node's evictions across attempts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from models.activity_api import (
    DrainHeartbeat,
    DrainLedger,
    DrainProgress,
    NodeInfo,
    PodInfo,
    Toleration,
)

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
"""The taint a cordon puts on a node (effect NoSchedule)."""


class PodDrainClass(StrEnum):
    """What a drain does with a pod."""

    EVICT = "evict"
    SKIP_DAEMONSET = "daemonset"
    """The DaemonSet controller would recreate it on the node; it stops when the node is removed."""
    SKIP_MIRROR = "mirror"
    """A static pod's mirror: the API cannot evict it; the kubelet owns it."""
    SKIP_TOLERATES_CORDON = "tolerates-cordon"
    """It tolerates `node.kubernetes.io/unschedulable`, so it would come straight back."""
    SKIP_FINISHED = "finished"
    """Succeeded or Failed: it holds nothing and blocks nothing."""


def _tolerates_cordon(toleration: Toleration) -> bool:
    if toleration.effect not in ("", "NoSchedule"):
        return False
    if toleration.key == "":
        # An empty key with Exists tolerates every taint.
        return toleration.operator == "Exists"
    return toleration.key == UNSCHEDULABLE_TAINT


def classify_pod(pod: PodInfo) -> PodDrainClass:
    """What a drain does with `pod`: evict it, or leave it (and not wait for it)."""
    if pod.mirror:
        return PodDrainClass.SKIP_MIRROR
    if pod.controller_kind == "DaemonSet":
        return PodDrainClass.SKIP_DAEMONSET
    if pod.phase in ("Succeeded", "Failed"):
        return PodDrainClass.SKIP_FINISHED
    if any(_tolerates_cordon(toleration) for toleration in pod.tolerations):
        return PodDrainClass.SKIP_TOLERATES_CORDON
    return PodDrainClass.EVICT


def pods_to_evict(pods: Sequence[PodInfo]) -> list[PodInfo]:
    """The pods a drain must see gone, in a stable order (namespace, name)."""
    chosen = [pod for pod in pods if classify_pod(pod) is PodDrainClass.EVICT]
    return sorted(chosen, key=lambda pod: (pod.namespace, pod.name))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def removal_order(nodes: Sequence[NodeInfo]) -> list[NodeInfo]:
    """Nodes in the order a scale-down removes them.

    Not-Ready nodes first (they serve nothing), then the fewest evictable pods (the least
    disruption), then the newest (the oldest have proven themselves), then by name so that
    the order is total and the same on every replay.
    """

    def key(node: NodeInfo) -> tuple[bool, int, float, str]:
        created = node.created_at or _EPOCH
        return (node.ready, node.evictable_pod_count, -created.timestamp(), node.name)

    return sorted(nodes, key=key)


def choose_nodes_to_remove(nodes: Sequence[NodeInfo], count: int) -> list[NodeInfo]:
    """The first `count` nodes of `removal_order(nodes)`."""
    return removal_order(nodes)[: max(count, 0)]


@dataclass
class DrainTally:
    """One node's drain as `drain_node` keeps it: the progress it shows, and the ledger (by pod
    uid) of the evictions it asked for and saw accepted, resumed from the last heartbeat.

    Each eviction is `request`ed, and the heartbeat written ahead, before it is sent. An attempt
    that follows a crash `settle`s the ledger it resumes against the node's pods: a pod asked for
    that is now gone or terminating was evicted, even if the crashed attempt never heartbeated
    the acceptance. So `pods_evicted` counts what happened, not what the last heartbeat said.
    (A pod asked for that went away by itself in the same window would be counted too.)
    """

    requested: dict[str, None] = field(default_factory=dict)
    accepted: dict[str, None] = field(default_factory=dict)
    uncounted: int = 0
    """Evictions counted by an attempt that kept no ledger (a worker of an earlier release)."""
    pods_remaining: int = 0
    blocking_pods: list[str] = field(default_factory=list)
    pods_deleted: list[str] = field(default_factory=list)

    @classmethod
    def resume(cls, before: DrainHeartbeat | None) -> DrainTally:
        """The tally a (re)tried attempt starts from: the last heartbeat's, or a fresh one."""
        if before is None:
            return cls()
        return cls(
            requested=dict.fromkeys(before.ledger.requested),
            accepted=dict.fromkeys(before.ledger.evicted),
            uncounted=max(0, before.pods_evicted - len(before.ledger.evicted)),
            pods_deleted=list(before.pods_deleted),
        )

    def settle(self, pods: Sequence[PodInfo]) -> None:
        """Count the requested evictions whose pod is no longer among `pods` (the node's now) or
        is terminating: accepted, whether or not a heartbeat said so."""
        present = {ledger_key(pod): pod for pod in pods}
        for key in self.requested:
            pod = present.get(key)
            if pod is None or pod.terminating:
                self.accepted[key] = None

    def request(self, pods: Sequence[PodInfo]) -> bool:
        """Enter the evictions about to be asked for; whether any is new (to be written ahead)."""
        new = [key for key in map(ledger_key, pods) if key not in self.requested]
        self.requested.update(dict.fromkeys(new))
        return bool(new)

    def evicted(self, pod: PodInfo) -> None:
        """The eviction of `pod` was accepted."""
        self.accepted[ledger_key(pod)] = None

    def progress(self) -> DrainProgress:
        """What the drain shows and returns."""
        return DrainProgress(
            pods_evicted=self.uncounted + len(self.accepted),
            pods_remaining=self.pods_remaining,
            blocking_pods=list(self.blocking_pods),
            pods_deleted=list(self.pods_deleted),
        )

    def heartbeat(self) -> DrainHeartbeat:
        """The progress with the ledger: the heartbeat details a retried attempt resumes from."""
        return DrainHeartbeat(
            **self.progress().model_dump(),
            ledger=DrainLedger(requested=list(self.requested), evicted=list(self.accepted)),
        )


def ledger_key(pod: PodInfo) -> str:
    """How the ledger names a pod: its uid (a recreated pod of the same name is another pod);
    the reference only for a pod read without one."""
    return pod.uid or pod.ref
