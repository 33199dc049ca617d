"""SIMULATOR. kube-controller-manager's node lifecycle controller (with its taint manager) for one
cluster, and the node-status side of the kubelet it watches.

Started per child cluster. The sim's kubelet posts no heartbeats (they would fill the watch
history with writes nobody reads); instead the fault injector says when a node's kubelet stopped
posting (`FaultInjector.stop_kubelet`), and this controller does what the real one does once
`node-monitor-grace-period` (50 s since v1.32; a timeout, scaled by `SimTiming.timeout` like
Helm's, so 0.25 s in instant mode and 5 s at time_scale 1) passed without a post:

- every node condition becomes `Unknown`, reason `NodeStatusUnknown`, message "Kubelet stopped
  posting node status." (lastHeartbeatTime stays the last post's);
- taints `node.kubernetes.io/unreachable:NoSchedule` and `...:NoExecute` (with timeAdded) are added;
- the node's pods get `Ready=False` (MarkPodsNotReady);
- the taint manager evicts pods that do not tolerate the NoExecute taint at once, and the others
  once their `tolerationSeconds` passed (300 s by default, from the DefaultTolerationSeconds
  admission; scaled the same way: 1.5 s in instant mode), with a `DisruptionTarget` condition,
  reason `DeletionByTaintManager`. The deleted pods stay Terminating: their kubelet is not there
  to confirm (the sim's kubelet finalizes nothing on a stopped node). DaemonSet pods tolerate
  unreachable nodes for good and stay.

When the kubelet comes back (`start_kubelet`) it posts Ready=True again (reason KubeletReady) and
the unreachable taints go. Nodes that were never Ready (still joining) are left to the k0rdent
controller, which owns their NotReady -> Ready transition.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from sim.apiserver.errors import ApiError
from sim.apiserver.registry import NODES, PODS
from sim.apiserver.store import ClusterStore, WatchEvent, format_time
from sim.controllers.scheduler import toleration_matches
from sim.controllers.workqueue import ReconcileLoop
from sim.faults import FaultInjector
from sim.timing import SimTiming

log = logging.getLogger(__name__)

# kube-controller-manager --node-monitor-grace-period (default 50 s since Kubernetes 1.32).
NODE_MONITOR_GRACE_SECONDS = 50.0
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNKNOWN_REASON = "NodeStatusUnknown"
UNKNOWN_MESSAGE = "Kubelet stopped posting node status."


def _condition(node: Mapping[str, Any], type_: str) -> dict[str, Any]:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == type_:
            return dict(condition)
    return {}


class NodeLifecycleController:
    """Marks nodes whose kubelet stopped Unknown, taints them and evicts their pods (see above)."""

    def __init__(
        self, store: ClusterStore, timing: SimTiming, faults: FaultInjector | None = None
    ) -> None:
        self.store = store
        self.timing = timing
        self.faults = faults
        self._stopped_since: dict[str, float] = {}
        self._tainted_since: dict[tuple[str, str, str], float] = {}
        self._loop: ReconcileLoop[str] = ReconcileLoop(
            store, f"node-lifecycle[{store.name}]", self._keys_for, self._reconcile, self._nodes
        )

    async def run(self) -> None:
        """Reconcile on node changes and on fault changes until cancelled."""
        unsubscribe = self.faults.on_change(self._requeue_all) if self.faults else None
        try:
            await self._loop.run()
        finally:
            if unsubscribe is not None:
                unsubscribe()

    def _requeue_all(self) -> None:
        for name in self._nodes():
            self._loop.queue.add(name)

    def _nodes(self) -> list[str]:
        items, _ = self.store.list(NODES, copy_objects=False)
        return [n["metadata"]["name"] for n in items]

    @staticmethod
    def _keys_for(event: WatchEvent) -> Iterable[str]:
        if event.rt.key == NODES.key:
            return [event.object["metadata"]["name"]]
        if event.rt.key == PODS.key and event.type != "DELETED":
            node = (event.object.get("spec") or {}).get("nodeName")
            return [node] if node else []
        return []

    def _stopped(self, name: str) -> bool:
        return self.faults is not None and self.faults.kubelet_stopped(self.store.name, name)

    async def _reconcile(self, name: str) -> float | None:
        node = self.store.try_get(NODES, None, name)
        if node is None:
            self._stopped_since.pop(name, None)
            for key in [k for k in self._tainted_since if k[0] == name]:
                self._tainted_since.pop(key)
            return None
        now = asyncio.get_running_loop().time()
        ready = _condition(node, "Ready")
        waits: list[float] = []
        if self._stopped(name):
            since = self._stopped_since.setdefault(name, now)
            due = since + self.timing.timeout(NODE_MONITOR_GRACE_SECONDS)
            if now < due:
                waits.append(due - now)
            elif ready.get("reason") != UNKNOWN_REASON:
                self._mark_unknown(name)
        else:
            self._stopped_since.pop(name, None)
            if ready.get("reason") == UNKNOWN_REASON:
                self._post_ready(name)
        wait = self._taint_manager(name, now)
        if wait is not None:
            waits.append(wait)
        return min(waits) if waits else None

    # ------------------------------------------------------------------ node status

    def _mark_unknown(self, name: str) -> None:
        stamp = format_time(self.store.clock())

        def unknown(node: dict[str, Any]) -> None:
            for condition in (node.get("status") or {}).get("conditions") or []:
                if condition.get("status") != "Unknown":
                    condition["lastTransitionTime"] = stamp
                condition.update(status="Unknown", reason=UNKNOWN_REASON, message=UNKNOWN_MESSAGE)
            spec = node.setdefault("spec", {})
            taints = [t for t in spec.get("taints") or [] if t.get("key") not in (NOT_READY_TAINT,)]
            present = {(t.get("key"), t.get("effect")) for t in taints}
            if (UNREACHABLE_TAINT, "NoSchedule") not in present:
                taints.append(
                    {"key": UNREACHABLE_TAINT, "effect": "NoSchedule", "timeAdded": stamp}
                )
            if (UNREACHABLE_TAINT, "NoExecute") not in present:
                taints.append({"key": UNREACHABLE_TAINT, "effect": "NoExecute", "timeAdded": stamp})
            spec["taints"] = taints

        with contextlib.suppress(ApiError):
            self.store.mutate(NODES, None, name, unknown)
        log.info("%s: node %s: %s", self.store.name, name, UNKNOWN_MESSAGE)
        self._mark_pods_not_ready(name, stamp)

    def _mark_pods_not_ready(self, name: str, stamp: str) -> None:
        pods, _ = self.store.list(PODS, field_selector=f"spec.nodeName={name}")

        def not_ready(pod: dict[str, Any]) -> None:
            for condition in (pod.get("status") or {}).get("conditions") or []:
                if condition.get("type") == "Ready" and condition.get("status") != "False":
                    condition.update(status="False", lastTransitionTime=stamp)

        for pod in pods:
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            meta = pod["metadata"]
            with contextlib.suppress(ApiError):
                self.store.mutate(PODS, meta["namespace"], meta["name"], not_ready)

    def _post_ready(self, name: str) -> None:
        """The kubelet is back and posts its status: Ready, heartbeat now; no unreachable taints."""
        stamp = format_time(self.store.clock())

        def ready(node: dict[str, Any]) -> None:
            for condition in (node.get("status") or {}).get("conditions") or []:
                condition["lastHeartbeatTime"] = stamp
                if condition.get("type") == "Ready":
                    if condition.get("status") != "True":
                        condition["lastTransitionTime"] = stamp
                    condition.update(
                        status="True",
                        reason="KubeletReady",
                        message="kubelet is posting ready status",
                    )
            spec = node.setdefault("spec", {})
            taints = [t for t in spec.get("taints") or [] if t.get("key") != UNREACHABLE_TAINT]
            if taints:
                spec["taints"] = taints
            else:
                spec.pop("taints", None)

        with contextlib.suppress(ApiError):
            self.store.mutate(NODES, None, name, ready)
        for key in [k for k in self._tainted_since if k[0] == name]:
            self._tainted_since.pop(key)

    # ------------------------------------------------------------------ taint manager

    def _taint_manager(self, name: str, now: float) -> float | None:
        """Evict the node's pods that stopped tolerating its NoExecute taints; seconds until the
        next eviction is due, or None."""
        node = self.store.try_get(NODES, None, name)
        taints = [
            t for t in ((node or {}).get("spec") or {}).get("taints") or []
            if t.get("effect") == "NoExecute"
        ]  # fmt: skip
        if not taints:
            return None
        pods, _ = self.store.list(PODS, field_selector=f"spec.nodeName={name}")
        waits: list[float] = []
        for pod in pods:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            tolerations = (pod.get("spec") or {}).get("tolerations") or []
            # The pod goes at the earliest time one of the taints stops being tolerated
            # (getMinTolerationTime); a toleration without seconds tolerates its taint for good.
            deadline: float | None = None
            for taint in taints:
                matching = [t for t in tolerations if toleration_matches(t, taint)]
                if not matching:
                    deadline = now
                    break
                seconds = [t["tolerationSeconds"] for t in matching if t.get("tolerationSeconds") is not None]  # fmt: skip
                if len(seconds) < len(matching):
                    continue
                key = (name, str(taint.get("key")), meta["uid"])
                since = self._tainted_since.setdefault(key, now)
                at = since + self.timing.timeout(float(max(min(seconds), 0)))
                deadline = at if deadline is None else min(deadline, at)
            if deadline is None:
                continue
            if deadline > now:
                waits.append(deadline - now)
                continue
            self._evict(meta["namespace"], meta["name"])
        return min(waits) if waits else None

    def _evict(self, namespace: str, name: str) -> None:
        stamp = format_time(self.store.clock())

        def disruption(pod: dict[str, Any]) -> None:
            conditions = (pod.setdefault("status", {})).setdefault("conditions", [])
            conditions[:] = [c for c in conditions if c.get("type") != "DisruptionTarget"]
            conditions.append(
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "DeletionByTaintManager",
                    "message": "Taint manager: deleting due to NoExecute taint",
                    "lastTransitionTime": stamp,
                }
            )

        with contextlib.suppress(ApiError):
            self.store.mutate(PODS, namespace, name, disruption)
            self.store.delete(PODS, namespace, name)
            log.info("%s: taint manager evicted %s/%s", self.store.name, namespace, name)
