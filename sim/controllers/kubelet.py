"""SIMULATOR. The kubelet of every node of one cluster: admits bound pods, gives containers their
GPUs, "runs" them and reports their states, writes their logs, finishes terminating pods.

Started per child cluster (and by tests on a bare store). For each pod bound to a node:

1. First sight: containers `waiting: ContainerCreating` (init containers `PodInitializing`),
   `startTime`, `hostIP`; then, after the `pod.start` delay, admission as the kubelet does it: the
   pod's requests must fit the node's allocatable next to the pods already admitted there, else
   the pod is `Failed` with reason `OutOf<resource>` and kube's "Pod was rejected: Node didn't
   have enough resource: ..." message. This is how GPUs of pods the scheduler never saw (created
   with `spec.nodeName`) are still accounted for.
2. The device plugin: each container's `nvidia.com/gpu` limit gets that many of the node's GPU
   indices, the lowest free ones, never shared between running pods; init containers reuse the
   pod's devices. A GPU's UUID is stable per node name and index (`sim.controllers.gpus`).
3. Init containers run one after the other, then every container at once. What a container does
   comes from `sim.controllers.containers.interpret` (its command, args, image and GPUs): output
   lines go to the container's log (`store.container_logs`, read through pods/log), a finite
   program ends `terminated` with its exit code (`Completed` / `Error`, or `StartError` 128 when
   the executable is missing), and `restartPolicy` decides: `Always` restarts any exit,
   `OnFailure` non-zero ones, `Never` none. The first restart is immediate, later ones wait in
   `CrashLoopBackOff` (10 s doubling to 5 min, times `time_scale / 100` like the other delays,
   never below a floor that starts at `MIN_BACKOFF_SECONDS` and doubles up to 5 s). When every
   container is done for good the pod is `Succeeded` (all exited 0) or `Failed`, and its GPUs are
   free again.
4. A pod deleted with a grace period is removed with `store.finalize_pod` once the grace period,
   multiplied by `grace_scale`, has passed.

Readiness probes are not run: a running container is ready. While the fault injector says a node's
kubelet is stopped, nothing of that node's pods is written or finalized (pods deleted meanwhile
stay Terminating, as they do on a real unreachable node), and the kubelet reposts every pod's
status when it comes back. Node readiness is the k0rdent controller's and the node lifecycle
controller's job, not this module's.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from sim.apiserver.registry import NODES, PODS
from sim.apiserver.store import ClusterStore, format_time
from sim.controllers.containers import (
    START_ERROR_EXIT_CODE,
    ContainerContext,
    Gpu,
    interpret,
)
from sim.controllers.gpus import GPU_RESOURCE, PRODUCTS, gpu_uuid, smi_name
from sim.controllers.scheduler import node_allocatable, parse_quantity, pod_requests
from sim.faults import FaultInjector
from sim.tasks import cancel_and_wait
from sim.timing import SimTiming

log = logging.getLogger(__name__)

# The kubelet's crash-loop back-off: 10 s, doubled per restart, capped at 5 minutes.
BACKOFF_INITIAL_SECONDS = 10
BACKOFF_CAP_SECONDS = 300
# Real delays are divided by a hundred at time_scale 1 (like DEFAULT_DELAYS); a crash loop never
# spins faster than this, even in instant mode, so it cannot flood the watch history.
BACKOFF_SCALE = 0.01
MIN_BACKOFF_SECONDS = 0.2
MAX_FLOOR_SECONDS = 5.0
# How often a worker of a node whose kubelet is stopped checks again (besides fault changes).
STOPPED_POLL_SECONDS = 0.5
_EPOCH = "1970-01-01T00:00:00Z"
_MANAGED_CONDITIONS = (
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
)


@dataclass
class _Run:
    """One container of a pod and the state of its current (and last) run."""

    spec: dict[str, Any]
    init: bool = False
    container_id: str = ""
    state: dict[str, Any] = field(default_factory=dict)
    last_state: dict[str, Any] = field(default_factory=dict)
    restart_count: int = 0
    ready: bool = False
    started: bool = False
    gpus: tuple[Gpu, ...] = ()

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))

    def status(self) -> dict[str, Any]:
        image = str(self.spec.get("image", ""))
        body: dict[str, Any] = {
            "name": self.name,
            "image": image,
            "imageID": f"sim://{image}",
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.container_id:
            body["containerID"] = self.container_id
        return body


class _DeviceManager:
    """Which GPU indices of each node are held by which pod (the device plugin's allocations)."""

    def __init__(self) -> None:
        self._held: dict[str, dict[str, set[int]]] = {}  # node -> pod uid -> indices

    def allocate(self, node: str, uid: str, count: int, capacity: int) -> list[int] | None:
        held = self._held.setdefault(node, {})
        busy = set().union(*held.values()) if held else set()
        free = [i for i in range(capacity) if i not in busy]
        if len(free) < count:
            return None
        chosen = free[:count]
        held.setdefault(uid, set()).update(chosen)
        return chosen

    def release(self, uid: str) -> None:
        for held in self._held.values():
            held.pop(uid, None)


class Kubelet:
    """Pod lifecycle on the nodes of one cluster store.

    Args:
        store: the cluster's store.
        timing: delays; `pod.start` is the time from binding to the containers starting.
        grace_scale: multiplies a terminating pod's grace period before it is removed
            (default: the timing's `time_scale` divided by 30, so the default 30 s grace takes as
            long as a scale-1 step of a second; 0 in instant mode).
        faults: consulted for stopped kubelets (`kubelet_stopped(cluster, node)`).
    """

    def __init__(
        self,
        store: ClusterStore,
        timing: SimTiming | None = None,
        *,
        grace_scale: float | None = None,
        faults: FaultInjector | None = None,
    ) -> None:
        self.store = store
        self.timing = timing or SimTiming.instant()
        self.grace_scale = self.timing.time_scale / 30 if grace_scale is None else grace_scale
        self.faults = faults
        self._workers: dict[str, _PodWorker] = {}
        self._terminations: dict[str, asyncio.Task[None]] = {}
        self.devices = _DeviceManager()
        self._ips = itertools.count(1)
        self._fault_change = asyncio.Event()

    # ------------------------------------------------------------------ loop

    async def run(self) -> None:
        """Act on existing pods, then on every pod event, until cancelled."""
        queue = self.store.subscribe()
        unsubscribe = self.faults.on_change(self._faults_changed) if self.faults else None
        try:
            pods, _ = self.store.list(PODS, copy_objects=False)
            # Pods of a restored cluster keep their IPs: new ones get the next free ones.
            self._ips = itertools.count(max(map(_pod_ip_index, pods), default=0) + 1)
            for pod in sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", "")):
                self._consider(pod)
            while True:
                event = await queue.get()
                if event.rt.key != PODS.key:
                    continue
                if event.type == "DELETED":
                    self._forget(event.object["metadata"]["uid"])
                else:
                    self._consider(event.object)
        finally:
            if unsubscribe is not None:
                unsubscribe()
            self.store.unsubscribe(queue)
            tasks = [w.task for w in self._workers.values() if w.task is not None]
            tasks += list(self._terminations.values())
            await cancel_and_wait(tasks)

    def _faults_changed(self) -> None:
        self._fault_change.set()
        self._fault_change = asyncio.Event()

    def kubelet_running(self, node: str) -> bool:
        return self.faults is None or not self.faults.kubelet_stopped(self.store.name, node)

    async def until_running(self, node: str) -> None:
        """Return once the kubelet of `node` runs (at once, unless a fault stopped it)."""
        while not self.kubelet_running(node):
            event = self._fault_change
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), STOPPED_POLL_SECONDS)

    def _consider(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            return
        uid = meta["uid"]
        if meta.get("deletionTimestamp"):
            worker = self._workers.get(uid)
            if worker is not None:
                worker.stop()
            grace = meta.get("deletionGracePeriodSeconds", 0)
            if grace > 0 and uid not in self._terminations:
                task = asyncio.create_task(
                    self._terminate(meta["namespace"], meta["name"], uid, node, grace)
                )
                self._terminations[uid] = task
                task.add_done_callback(lambda _: self._terminations.pop(uid, None))
            return
        if uid in self._workers:
            return
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if phase in ("Succeeded", "Failed"):
            return
        worker = _PodWorker(self, pod)
        self._workers[uid] = worker
        adopted = phase == "Running"
        worker.start(adopted=adopted)

    def _forget(self, uid: str) -> None:
        worker = self._workers.pop(uid, None)
        if worker is not None:
            worker.stop()
        self.devices.release(uid)

    async def _terminate(self, namespace: str, name: str, uid: str, node: str, grace: int) -> None:
        await asyncio.sleep(max(grace * self.grace_scale, 0.0))
        # A stopped kubelet confirms nothing: the pod stays Terminating until it is back.
        await self.until_running(node)
        pod = self.store._peek(PODS, namespace, name)
        if pod is not None and pod["metadata"]["uid"] == uid:
            self.store.finalize_pod(namespace, name)

    def next_pod_ip(self) -> str:
        index = next(self._ips)
        return f"10.244.{index // 250}.{index % 250 + 1}"

    def admitted_requests(self, node: str, except_uid: str) -> dict[str, Decimal]:
        """What the pods this kubelet admitted on `node` (and has not finished) request."""
        used: dict[str, Decimal] = {"pods": Decimal(0)}
        for uid, worker in self._workers.items():
            if uid == except_uid or worker.node != node or not worker.admitted or worker.done:
                continue
            used["pods"] += 1
            for resource, amount in worker.requests.items():
                used[resource] = used.get(resource, Decimal(0)) + amount
        return used


def _now(store: ClusterStore) -> str:
    return format_time(store.clock())


def _env(container: Mapping[str, Any]) -> dict[str, str]:
    return {
        str(e.get("name")): str(e.get("value", ""))
        for e in container.get("env") or []
        if isinstance(e, Mapping) and "value" in e
    }


def _gpu_count(container: Mapping[str, Any]) -> int:
    resources = container.get("resources") or {}
    raw = (resources.get("limits") or {}).get(GPU_RESOURCE) or (
        resources.get("requests") or {}
    ).get(GPU_RESOURCE)
    try:
        return int(parse_quantity(raw)) if raw is not None else 0
    except ValueError:
        return 0


def _shown(resource: str, amount: Decimal) -> int:
    """Quantities as the kubelet's admission message prints them (cpu in millicores)."""
    return int(amount * 1000) if resource == "cpu" else int(amount)


class _PodWorker:
    """Runs one pod on its node (see the module docstring)."""

    def __init__(self, kubelet: Kubelet, pod: Mapping[str, Any]) -> None:
        self.kubelet = kubelet
        self.store = kubelet.store
        meta = pod["metadata"]
        spec = pod.get("spec") or {}
        self.uid: str = meta["uid"]
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        self.node: str = spec["nodeName"]
        self.spec: dict[str, Any] = dict(spec)
        self.restart_policy = str(spec.get("restartPolicy") or "Always")
        self.inits = [_Run(dict(c), init=True) for c in spec.get("initContainers") or []]
        self.containers = [_Run(dict(c)) for c in spec.get("containers") or []]
        try:
            self.requests = pod_requests(pod)
        except ValueError:
            self.requests = {}
        self.phase = "Pending"
        self.reason = ""
        self.message = ""
        self.pod_ip = ""
        self.host_ip = ""
        self.start_time = ""
        self.sandbox = False
        self.initialized = not self.inits
        self.admitted = False
        self.done = False
        self.task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self, *, adopted: bool) -> None:
        work: Coroutine[Any, Any, None] = self._adopt() if adopted else self._run()
        self.task = asyncio.create_task(work, name=f"kubelet-{self.namespace}/{self.name}")

    def stop(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
        self.done = True
        self.kubelet.devices.release(self.uid)

    async def _adopt(self) -> None:
        """A pod already running when this kubelet started: keep its containers, hold its GPUs."""
        self.admitted = True
        node = self.store._peek(NODES, None, self.node)
        self._allocate(node)

    async def _run(self) -> None:
        try:
            await self.kubelet.until_running(self.node)
            node = self.store._peek(NODES, None, self.node)
            self.start_time = _now(self.store)
            self.host_ip = _internal_ip(node)
            for run in self.inits:
                run.state = {"waiting": {"reason": "PodInitializing"}}
            for run in self.containers:
                run.state = {
                    "waiting": {"reason": "PodInitializing" if self.inits else "ContainerCreating"}
                }
            await self._post()
            await self.kubelet.timing.sleep("pod.start")
            await self.kubelet.until_running(self.node)
            node = self.store._peek(NODES, None, self.node)
            # Without a Node object (bare-store tests bind pods to made-up names) there is no
            # capacity to admit against: the pod runs, without devices.
            rejection = None if node is None else self._admit(node)
            if rejection is not None:
                self.phase, (self.reason, self.message) = "Failed", rejection
                for run in [*self.inits, *self.containers]:
                    run.state = {}
                self.done = True
                await self._post()
                return
            self.admitted = True
            self._allocate(node)
            self.sandbox = True
            self.pod_ip = self.kubelet.next_pod_ip()
            for run in self.inits:
                if not await self._run_init(run):
                    return
            self.initialized = True
            self.phase = "Running"
            for run in self.containers:
                run.state = {"waiting": {"reason": "ContainerCreating"}}
            await self._post()
            codes = await asyncio.gather(*(self._loop(run) for run in self.containers))
            self.phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
            self.done = True
            self.kubelet.devices.release(self.uid)
            await self._post()
        except asyncio.CancelledError:
            raise
        except Exception:  # a sim bug must not kill the kubelet's other pods
            log.exception("kubelet: pod %s/%s failed", self.namespace, self.name)

    def _admit(self, node: Mapping[str, Any]) -> tuple[str, str] | None:
        """None when the pod fits next to the admitted ones, else (reason, message)."""
        allocatable = node_allocatable(node)
        allocatable.setdefault("pods", Decimal(110))
        used = self.kubelet.admitted_requests(self.node, self.uid)
        wanted = {**self.requests, "pods": Decimal(1)}
        for resource, amount in sorted(wanted.items()):
            if amount <= 0:
                continue
            capacity = allocatable.get(resource, Decimal(0))
            held = used.get(resource, Decimal(0))
            if held + amount > capacity:
                return (
                    f"OutOf{resource}",
                    f"Pod was rejected: Node didn't have enough resource: {resource}, "
                    f"requested: {_shown(resource, amount)}, used: {_shown(resource, held)}, "
                    f"capacity: {_shown(resource, capacity)}",
                )
        return None

    def _allocate(self, node: Mapping[str, Any] | None) -> None:
        """Give each container its GPUs (init containers reuse the pod's first ones)."""
        counts = [_gpu_count(run.spec) for run in self.containers]
        init_max = max((_gpu_count(run.spec) for run in self.inits), default=0)
        total = max(sum(counts), init_max)
        if node is None or total == 0:
            return
        capacity = int(node_allocatable(node).get(GPU_RESOURCE, Decimal(0)))
        indices = self.kubelet.devices.allocate(self.node, self.uid, total, capacity) or []
        labels = node["metadata"].get("labels") or {}
        product = str(labels.get("nvidia.com/gpu.product") or "NVIDIA-GPU")
        known = PRODUCTS.get(product)
        memory = known.memory_mib if known else int(labels.get("nvidia.com/gpu.memory") or 0)
        devices = [Gpu(i, gpu_uuid(self.node, i), smi_name(product), memory) for i in indices]
        offset = 0
        for run, count in zip(self.containers, counts, strict=True):
            run.gpus = tuple(devices[offset : offset + count])
            offset += count
        for run in self.inits:
            run.gpus = tuple(devices[: _gpu_count(run.spec)])

    # ------------------------------------------------------------------ containers

    async def _run_init(self, run: _Run) -> bool:
        """Run an init container until it succeeds; False when the pod failed instead."""
        failures = 0
        while True:
            code = await self._once(run)
            if code == 0:
                return True
            if self.restart_policy == "Never":
                self.phase = "Failed"
                self.done = True
                self.kubelet.devices.release(self.uid)
                await self._post()
                return False
            await self._back_off(run, failures)
            failures += 1

    async def _loop(self, run: _Run) -> int:
        """Run a container, restarting it as the restart policy says; its final exit code."""
        failures = 0
        while True:
            code = await self._once(run)
            restart = self.restart_policy == "Always" or (
                self.restart_policy == "OnFailure" and code != 0
            )
            if not restart:
                return code
            await self._back_off(run, failures)
            failures += 1

    async def _back_off(self, run: _Run, failures: int) -> None:
        run.last_state = {"terminated": run.state.get("terminated") or {}}
        if failures > 0:
            seconds = min(BACKOFF_INITIAL_SECONDS * 2 ** (failures - 1), BACKOFF_CAP_SECONDS)
            run.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {seconds}s restarting failed container={run.name} "
                    f"pod={self.name}_{self.namespace}({self.uid})",
                }
            }
            run.ready = run.started = False
            await self._post()
            delay = seconds * BACKOFF_SCALE * self.kubelet.timing.time_scale
            # The floor doubles too, so a long crash loop in instant mode slows down as kube's
            # does instead of writing a few statuses a second forever.
            floor = min(MIN_BACKOFF_SECONDS * 2 ** (failures - 1), MAX_FLOOR_SECONDS)
            await asyncio.sleep(max(delay, floor))
        run.restart_count += 1

    async def _once(self, run: _Run) -> int:
        """One run of a container: its output to the log, its states to the API; exit code."""
        store = self.store
        program = interpret(
            ContainerContext(
                pod_name=self.name,
                image=str(run.spec.get("image", "")),
                command=[str(a) for a in run.spec.get("command") or []],
                args=[str(a) for a in run.spec.get("args") or []],
                env=_env(run.spec),
                gpus=run.gpus,
                now=store.clock(),
            )
        )
        run.container_id = f"containerd://{secrets.token_hex(32)}"
        output = store.container_logs.open(self.uid, run.container_id)
        if program.start_error is not None:
            output.finish(store.clock())
            run.state = {
                "terminated": {
                    "exitCode": START_ERROR_EXIT_CODE,
                    "reason": "StartError",
                    "message": program.start_error,
                    "startedAt": _EPOCH,
                    "finishedAt": _now(store),
                    "containerID": run.container_id,
                }
            }
            run.ready = run.started = False
            await self._post()
            return START_ERROR_EXIT_CODE
        started_at = _now(store)
        run.state = {"running": {"startedAt": started_at}}
        run.ready = run.started = True
        await self._post()
        code = 0
        for step in program.steps:
            if step.kind == "out":
                output.write(step.text, store.clock())
            elif step.kind == "sleep":
                await asyncio.sleep(step.seconds)
            elif step.kind == "exit":
                code = step.code
                break
            else:  # serve: runs until the pod is deleted (this task is cancelled)
                await asyncio.Event().wait()
        output.finish(store.clock())
        run.state = {
            "terminated": {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": started_at,
                "finishedAt": _now(store),
                "containerID": run.container_id,
            }
        }
        run.ready = run.started = False
        await self._post()
        return code

    # ------------------------------------------------------------------ status

    async def _post(self) -> None:
        """Write the pod's status as this worker sees it (waits while the kubelet is stopped)."""
        await self.kubelet.until_running(self.node)
        pod = self.store._peek(PODS, self.namespace, self.name)
        if pod is None or pod["metadata"]["uid"] != self.uid:
            return
        self.store.mutate(PODS, self.namespace, self.name, self._apply)

    def _apply(self, pod: dict[str, Any]) -> None:
        status = pod.setdefault("status", {})
        now = _now(self.store)
        status["phase"] = self.phase
        if self.reason:
            status["reason"], status["message"] = self.reason, self.message
        if self.start_time:
            status["startTime"] = self.start_time
        if self.host_ip:
            status["hostIP"], status["hostIPs"] = self.host_ip, [{"ip": self.host_ip}]
        if self.pod_ip:
            status["podIP"], status["podIPs"] = self.pod_ip, [{"ip": self.pod_ip}]
        if not self.reason:
            status["containerStatuses"] = [run.status() for run in self.containers]
            if self.inits:
                status["initContainerStatuses"] = [run.status() for run in self.inits]
        status["conditions"] = self._conditions(status.get("conditions") or [], now)

    def _conditions(self, current: list[dict[str, Any]], now: str) -> list[dict[str, Any]]:
        by_type = {c.get("type"): c for c in current}
        terminal = self.phase in ("Succeeded", "Failed")
        unready = [run.name for run in self.containers if not run.ready]
        gates = [g.get("conditionType") for g in self.spec.get("readinessGates") or []]
        gates_ok = all((by_type.get(g) or {}).get("status") == "True" for g in gates)
        pending_inits = [run.name for run in self.inits if not self.initialized]
        wanted: dict[str, tuple[bool, str, str]] = {
            "PodReadyToStartContainers": (self.sandbox and not self.reason, "", ""),
            "Initialized": (
                self.initialized,
                "" if self.initialized else "ContainersNotInitialized",
                "" if self.initialized else f"containers with incomplete status: [{' '.join(pending_inits)}]",
            ),
            "ContainersReady": (
                not unready and not terminal,
                "PodCompleted" if terminal else ("" if not unready else "ContainersNotReady"),
                "" if terminal or not unready else f"containers with unready status: [{' '.join(unready)}]",
            ),
            "PodScheduled": (True, "", ""),
        }  # fmt: skip
        ready_ok = not unready and not terminal and gates_ok
        ready_reason = "PodCompleted" if terminal else ""
        ready_message = ""
        if not ready_ok and not terminal:
            ready_reason = "ContainersNotReady" if unready else "ReadinessGatesNotReady"
            ready_message = (
                f"containers with unready status: [{' '.join(unready)}]"
                if unready
                else "the status of pod readiness gate is not set to true"
            )
        wanted["Ready"] = (ready_ok, ready_reason, ready_message)
        if self.reason:  # rejected at admission: no sandbox, only the scheduling fact
            wanted = {"PodScheduled": (True, "", "")}
        out = [c for c in current if c.get("type") not in _MANAGED_CONDITIONS]
        for type_ in _MANAGED_CONDITIONS:
            if type_ not in wanted:
                continue
            ok, reason, message = wanted[type_]
            text = "True" if ok else "False"
            previous = by_type.get(type_) or {}
            condition: dict[str, Any] = {
                "type": type_,
                "status": text,
                "lastProbeTime": None,
                "lastTransitionTime": previous.get("lastTransitionTime", now)
                if previous.get("status") == text
                else now,
            }
            if reason:
                condition["reason"] = reason
            if message:
                condition["message"] = message
            out.append(condition)
        return out


def _pod_ip_index(pod: Mapping[str, Any]) -> int:
    """The `next_pod_ip` index of the IP `pod` holds (0: none, or not one of ours)."""
    ip = str((pod.get("status") or {}).get("podIP") or "")
    prefix, _, rest = ip.rpartition(".")
    third = prefix.removeprefix("10.244.")
    if not ip.startswith("10.244.") or not third.isdigit() or not rest.isdigit():
        return 0
    return int(third) * 250 + int(rest) - 1


def _internal_ip(node: Mapping[str, Any] | None) -> str:
    for address in ((node or {}).get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return str(address.get("address", ""))
    return ""
