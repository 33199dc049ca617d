"""Drain decisions, pure and deterministic: which pods a drain evicts and which nodes go first.

Called by `ClusterWorkflow` (inside the sandbox, so no IO here) and by the `list_nodes` activity to
count evictable pods. It follows `kubectl drain` as the product describes it: every pod is evicted
except a DaemonSet's, a static pod's mirror and any pod that tolerates the cordon.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from enum import StrEnum

from models.activity_api import NodeInfo, PodInfo, Toleration

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
