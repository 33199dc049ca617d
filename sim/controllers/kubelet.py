"""SIMULATOR. The kubelet of every node of one cluster: starts bound pods, finishes terminating ones.

A pod bound to a node (spec.nodeName) goes Pending -> Running after the `pod.start` delay, with the
conditions, IPs and container statuses a real kubelet reports. A bound pod deleted with a grace
period (deletionTimestamp + deletionGracePeriodSeconds, set by the store) is removed with
`store.finalize_pod` once its grace period, multiplied by `grace_scale`, has passed. Node
readiness is not this module's job.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any

from sim.apiserver.registry import NODES, PODS
from sim.apiserver.store import ClusterStore, format_time
from sim.timing import SimTiming


class Kubelet:
    """Pod lifecycle on the nodes of one cluster store.

    Args:
        store: the cluster's store.
        timing: delays; `pod.start` is the time from binding to Running.
        grace_scale: multiplies a terminating pod's grace period before it is removed
            (default: the timing's `time_scale` divided by 30, so the default 30 s grace takes as
            long as a scale-1 step of a second; 0 in instant mode).
    """

    def __init__(
        self,
        store: ClusterStore,
        timing: SimTiming | None = None,
        *,
        grace_scale: float | None = None,
    ) -> None:
        self.store = store
        self.timing = timing or SimTiming.instant()
        self.grace_scale = self.timing.time_scale / 30 if grace_scale is None else grace_scale
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._ips = itertools.count(1)

    async def run(self) -> None:
        """Act on existing pods, then on every pod event, until cancelled."""
        queue = self.store.subscribe()
        try:
            pods, _ = self.store.list(PODS, copy_objects=False)
            for pod in pods:
                self._consider(pod)
            while True:
                event = await queue.get()
                if event.rt.key == PODS.key and event.type != "DELETED":
                    self._consider(event.object)
        finally:
            self.store.unsubscribe(queue)
            for task in self._tasks.values():
                task.cancel()
            for task in list(self._tasks.values()):
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def _consider(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        if not (pod.get("spec") or {}).get("nodeName"):
            return
        uid = meta["uid"]
        if meta.get("deletionTimestamp"):
            grace = meta.get("deletionGracePeriodSeconds", 0)
            if grace > 0:
                self._spawn(
                    ("terminate", uid), self._terminate(meta["namespace"], meta["name"], uid, grace)
                )
        elif (pod.get("status") or {}).get("phase", "Pending") == "Pending":
            self._spawn(("start", uid), self._start(meta["namespace"], meta["name"], uid))

    def _spawn(self, key: tuple[str, str], work: Any) -> None:
        if key in self._tasks:
            work.close()
            return
        task = asyncio.create_task(work)
        self._tasks[key] = task
        task.add_done_callback(lambda _: self._tasks.pop(key, None))

    async def _start(self, namespace: str, name: str, uid: str) -> None:
        await self.timing.sleep("pod.start")
        pod = self.store._peek(PODS, namespace, name)
        if pod is None or pod["metadata"]["uid"] != uid or pod["metadata"].get("deletionTimestamp"):
            return
        now = format_time(self.store.clock())
        node = self.store._peek(NODES, None, pod["spec"]["nodeName"])
        host_ip = ""
        for address in ((node or {}).get("status") or {}).get("addresses") or []:
            if address.get("type") == "InternalIP":
                host_ip = address.get("address", "")
        index = next(self._ips)
        pod_ip = f"10.244.{index // 250}.{index % 250 + 1}"

        def run(obj: dict[str, Any]) -> None:
            status = obj.setdefault("status", {})
            status["phase"] = "Running"
            status["startTime"] = now
            status["podIP"] = pod_ip
            status["podIPs"] = [{"ip": pod_ip}]
            if host_ip:
                status["hostIP"] = host_ip
                status["hostIPs"] = [{"ip": host_ip}]
            status["conditions"] = [
                {"type": kind, "status": "True", "lastTransitionTime": now, "lastProbeTime": None}
                for kind in (
                    "PodReadyToStartContainers",
                    "Initialized",
                    "Ready",
                    "ContainersReady",
                    "PodScheduled",
                )
            ]
            status["containerStatuses"] = [
                {
                    "name": c.get("name", ""),
                    "image": c.get("image", ""),
                    "imageID": f"sim://{c.get('image', '')}",
                    "containerID": f"containerd://{uid[:8]}{i}",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": now}},
                }
                for i, c in enumerate((obj.get("spec") or {}).get("containers") or [])
            ]

        self.store.mutate(PODS, namespace, name, run)

    async def _terminate(self, namespace: str, name: str, uid: str, grace: int) -> None:
        await asyncio.sleep(max(grace * self.grace_scale, 0.0))
        pod = self.store._peek(PODS, namespace, name)
        if pod is not None and pod["metadata"]["uid"] == uid:
            self.store.finalize_pod(namespace, name)
