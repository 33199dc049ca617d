"""End to end: the worker dies in the middle of an operation and a new one finishes it.

Temporal dev server + `SimWorld` + the real worker. The first worker is `python worker.py`, killed
with SIGKILL while the create's `await_nodes` activity runs (hosts claimed, nodes not joined yet);
the second runs in-process (`build_worker`) with fresh clients and is cancelled while a `drain_node`
activity runs; a third finishes it. Every activity heartbeats, so a killed worker's attempt is
retried on the next worker within the heartbeat timeout (10 s), not after its start-to-close. Each replacement replays the workflow from its history and must finish the operation
exactly once: the hosts claimed before the crash are the ones the cluster ends up with (no second
claim, no leak), the ClusterDeployment lists each machine once, and delete releases everything.

The sim runs with instant timing except node registration (a few seconds), so there is a window
between "hosts claimed" and "nodes joined" to crash in; the drain is held in place by a
PodDisruptionBudget that refuses every eviction until the test deletes it.

A second test kills `python worker.py` in the middle of a drain, right after the sim accepted one
of its evictions, and checks that the pods evicted the finished drain reports are the evictions
the sim saw on that node (`store.evictions`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest
from kubernetes import client
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from clients.clusters import live_drains
from models.cluster import ClusterPhase, ClusterSpec, ClusterStatus, ClusterWorkflowInput
from models.node_pool import NodePoolSpec, NodePoolStatus, NodeSku
from models.operations import (
    DeleteClusterRequest,
    OperationState,
    ScaleNodePoolRequest,
)
from sim.world import SimWorld
from tests.helpers import eventually, unique
from tests.simenv import (
    NAMESPACE,
    call,
    child_api,
    close_client,
    colony_env,
    host_provider,
    management_api,
    started_world,
)
from worker import build_worker
from workflows.cluster.workflow import ClusterWorkflow

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LOCATION = "fra1"
GPU = NodeSku(gpu_model_id="h100-80gb")
REPO = Path(__file__).resolve().parent.parent
NODE_REGISTER_SECONDS = 3.0
"""How long a claimed host takes to register its node: the window the first crash falls in."""


class Worker(Protocol):
    """A running worker the test can kill."""

    async def crash(self) -> None: ...


@dataclass
class InProcessWorker:
    """A worker run as a task of the test's loop, with its own clients."""

    task: asyncio.Task[None]

    async def crash(self) -> None:
        """Cancel the worker (the SDK still drains it) and drop its clients."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


@dataclass
class ProcessWorker:
    """`python worker.py`, as `make run` starts it, killed with SIGKILL: no graceful shutdown, no
    goodbye to the server, its sticky workflow cache and its connections simply gone."""

    process: asyncio.subprocess.Process

    async def crash(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
        await self.process.wait()


async def start_worker(
    dev_env: WorkflowEnvironment, world: SimWorld, task_queue: str
) -> InProcessWorker:
    """A worker with fresh activity clients on `task_queue`, polling once this returns."""
    polling = asyncio.Event()

    async def serve() -> None:
        management = management_api(world)
        try:
            async with (
                host_provider(world) as http,
                build_worker(dev_env.client, task_queue, management, http) as worker,
            ):
                run = asyncio.create_task(worker.run())
                polling.set()
                try:
                    await run
                finally:
                    if not run.done():
                        run.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await run
        finally:
            close_client(management)

    task = asyncio.create_task(serve())
    await asyncio.wait_for(polling.wait(), timeout=10)
    return InProcessWorker(task)


async def start_worker_process(
    dev_env: WorkflowEnvironment, world: SimWorld, task_queue: str, log: Path
) -> ProcessWorker:
    """`python worker.py` against the dev server and the in-process sim, once it polls."""
    env = {
        **os.environ,
        **colony_env(
            world,
            TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
            TEMPORAL_NAMESPACE=dev_env.client.namespace,
            COLONY_TASK_QUEUE=task_queue,
        ),
    }
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(REPO / "worker.py"), cwd=REPO, env=env, stdout=out, stderr=out
        )
    worker = ProcessWorker(process)

    async def started() -> bool:
        text = await asyncio.to_thread(log.read_text)
        if process.returncode is not None:
            raise AssertionError(f"worker.py exited {process.returncode}:\n{text}")
        return "worker on task queue" in text

    try:
        await eventually(started, timeout=30, interval=0.1, what="worker.py polling")
    except BaseException:
        await worker.crash()
        raise
    return worker


@dataclass
class Cluster:
    """The cluster under test: its workflow, and what the sim holds for it."""

    world: SimWorld
    management: client.ApiClient
    handle: WorkflowHandle[ClusterWorkflow, ClusterStatus]
    name: str

    async def status(self) -> ClusterStatus:
        return await self.handle.query(ClusterWorkflow.status)

    async def until(
        self, check: Callable[[ClusterStatus], bool], *, what: str, timeout: float = 60
    ) -> ClusterStatus:
        return await eventually(self.status, until=check, timeout=timeout, interval=0.1, what=what)

    def claimed(self) -> list[Any]:
        """Hosts the provider lists as held by any run of this cluster's workflow."""
        return [
            host
            for host in self.world.inventory.hosts(state="claimed")
            if (host.owner or "").startswith(f"cluster/{self.name}/")
        ]

    async def machines(self) -> list[dict[str, Any]]:
        """`spec.config.machines` of the ClusterDeployment."""
        deployment = await call(
            client.CustomObjectsApi(self.management).get_namespaced_custom_object,
            "k0rdent.mirantis.com", "v1beta1", NAMESPACE, "clusterdeployments", self.name,
        )  # fmt: skip
        machines: list[dict[str, Any]] = deployment["spec"]["config"]["machines"]
        return machines

    async def node_names(self) -> list[str]:
        api = await child_api(self.management, self.name)
        try:
            nodes = await call(client.CoreV1Api(api).list_node)
            return sorted(node.metadata.name for node in nodes.items)
        finally:
            close_client(api)

    async def train_pods(self) -> dict[str, str]:
        """The test's `app=train` pods still there, by node."""
        api = await child_api(self.management, self.name)
        try:
            pods = await call(
                client.CoreV1Api(api).list_namespaced_pod, "default", label_selector="app=train"
            )
            return {pod.spec.node_name: pod.metadata.name for pod in pods.items}
        finally:
            close_client(api)

    async def assert_holds(self, pool: NodePoolStatus, count: int) -> None:
        """The provider, the ClusterDeployment and the child cluster agree on the pool's hosts."""
        claimed = self.claimed()
        assert sorted(h.id for h in claimed) == sorted(n.host_id for n in pool.nodes)
        assert len(claimed) == count, [h.id for h in claimed]
        machines = await self.machines()
        assert sorted((m["address"], m.get("port", 22)) for m in machines) == sorted(
            (h.address, h.ssh_port) for h in claimed
        ), machines
        assert len(await self.node_names()) == count


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[SimWorld]:
    async with started_world(tmp_path / "sim", node_register=NODE_REGISTER_SECONDS) as world:
        yield world


def gpu_pool(status: ClusterStatus) -> NodePoolStatus:
    found = status.pool("gpu")
    assert found is not None, status.node_pools
    return found


async def test_worker_crashes_during_create_and_drain(
    dev_env: WorkflowEnvironment, world: SimWorld, task_queue: str, tmp_path: Path
) -> None:
    management = management_api(world)
    name = unique("crash")
    spec = ClusterSpec(
        name=name, location_id=LOCATION, node_pools=[NodePoolSpec(name="gpu", sku=GPU, count=2)]
    )
    first = await start_worker_process(dev_env, world, task_queue, tmp_path / "worker-1.log")
    handle = await dev_env.client.start_workflow(
        ClusterWorkflow.run,
        ClusterWorkflowInput(spec=spec),
        id=spec.workflow_id,
        task_queue=task_queue,
    )
    cluster = Cluster(world, management, handle, name)
    workers: list[Worker] = [first]
    try:
        # 1. Kill the worker process in the middle of the join wait (an activity in flight).
        async def waiting_for_nodes() -> ClusterStatus | None:
            status = await cluster.status()
            running = status.current_operation
            if running is None or running.progress.hosts_claimed != 2:
                return None
            pending = (await handle.describe()).raw_description.pending_activities
            joining = [a for a in pending if a.activity_type.name == "await_nodes"]
            return status if joining and joining[0].attempt == 1 else None

        claimed = await eventually(
            waiting_for_nodes, timeout=60, interval=0.05, what="join wait in flight"
        )
        assert claimed is not None
        assert claimed.current_operation is not None
        assert claimed.current_operation.progress.nodes_joined == 0, "crash came too late"
        await first.crash()
        killed_at = time.monotonic()
        workers.append(await start_worker(dev_env, world, task_queue))

        ready = await cluster.until(
            lambda s: s.phase is ClusterPhase.READY and s.current_operation is None,
            what="create finished by the second worker",
        )
        recovered = time.monotonic() - killed_at
        create = ready.completed_operations[-1]
        assert create.state is OperationState.SUCCEEDED, create
        # The killed attempt was noticed by its missing heartbeats (10 s), not by its
        # start-to-close (the join deadline, 15 minutes).
        assert recovered < 40, f"the create took {recovered:.1f}s to finish after the kill"
        pool = gpu_pool(ready)
        assert (pool.count, pool.ready_count) == (2, 2)
        await cluster.assert_holds(pool, 2)
        # One claim (one idempotency key) holds both hosts: the retry did not claim again.
        assert len({host.claimed_by for host in cluster.claimed()}) == 1

        # 2. Crash in the middle of a drain that a budget holds up.
        api = await child_api(management, name)
        core, policy = client.CoreV1Api(api), client.PolicyV1Api(api)
        try:
            trained: dict[str, str] = {}
            for index, node in enumerate(await cluster.node_names()):
                trained[node] = f"train-{index}"
                await call(
                    core.create_namespaced_pod,
                    "default",
                    {
                        "metadata": {"name": f"train-{index}", "labels": {"app": "train"}},
                        "spec": {
                            "nodeName": node,
                            "containers": [{"name": "c", "image": "busybox"}],
                        },
                    },
                )
            await call(
                policy.create_namespaced_pod_disruption_budget,
                "default",
                {
                    "metadata": {"name": "train"},
                    "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "train"}}},
                },
            )
            accepted = await handle.execute_update(
                ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=1)
            )

            async def blocked() -> ClusterStatus | None:
                description = await handle.describe()
                live = live_drains(dev_env.client, description)
                if not any(progress.blocking_pods for progress in live.values()):
                    return None
                return (await cluster.status()).with_live_drains(live)

            held = await eventually(blocked, timeout=60, what="drain blocked by the budget")
            assert held is not None
            assert held.current_operation is not None
            victim = held.current_operation.progress.nodes[0]
            assert victim.blocking_pods
            await workers[-1].crash()
            workers.append(await start_worker(dev_env, world, task_queue))
            await call(policy.delete_namespaced_pod_disruption_budget, "train", "default")
        finally:
            close_client(api)

        def scaled_down(status: ClusterStatus) -> bool:
            op = status.operation(accepted.operation_id)
            return op is not None and op.state.finished

        done = await cluster.until(scaled_down, what="scale-down finished by the third worker")
        op = done.operation(accepted.operation_id)
        assert op is not None
        assert op.state is OperationState.SUCCEEDED, op
        # The budgeted pod and whatever else the sim runs there (CoreDNS), DaemonSets excepted.
        assert [(n.node, n.step) for n in op.progress.nodes] == [(victim.node, "removed")]
        assert op.progress.nodes[0].pods_evicted >= 1
        assert await cluster.train_pods() == {
            node: pod for node, pod in trained.items() if node != victim.node
        }
        pool = gpu_pool(done)
        assert (pool.count, pool.ready_count) == (1, 1)
        assert victim.node not in await cluster.node_names()
        await cluster.assert_holds(pool, 1)
        assert victim.host_id not in {host.id for host in cluster.claimed()}

        # 3. Delete: every host is released, the ClusterDeployment is gone.
        await handle.execute_update(ClusterWorkflow.delete_cluster, DeleteClusterRequest())
        final = await asyncio.wait_for(handle.result(), timeout=60)
        assert final.phase is ClusterPhase.DELETED
        assert cluster.claimed() == []
        with pytest.raises(client.exceptions.ApiException) as gone:
            await cluster.machines()
        assert gone.value.status == 404
    finally:
        with contextlib.suppress(RPCError):
            if (await handle.describe()).status is WorkflowExecutionStatus.RUNNING:
                await handle.terminate(reason="test finished")
        for running in workers:
            await running.crash()
        close_client(management)


TRAIN_PODS = 5
"""Pods on each node; the i-th one's eviction is refused i times, so a drain evicts them one pass
after another (passes 1, 2, 4, 5 s apart) and a crash can fall between two of them."""


async def test_a_drain_killed_midway_reports_every_eviction(
    dev_env: WorkflowEnvironment, world: SimWorld, task_queue: str, tmp_path: Path
) -> None:
    """`python worker.py` is killed with SIGKILL right after the sim accepted an eviction of the
    drain (before any heartbeat could carry it); the next worker's attempt finishes the drain, and
    the pods evicted it reports are the evictions the cluster saw on that node, not fewer."""
    management = management_api(world)
    name = unique("evict")
    spec = ClusterSpec(
        name=name, location_id=LOCATION, node_pools=[NodePoolSpec(name="gpu", sku=GPU, count=2)]
    )
    first = await start_worker_process(dev_env, world, task_queue, tmp_path / "worker-1.log")
    workers: list[Worker] = [first]
    handle = await dev_env.client.start_workflow(
        ClusterWorkflow.run,
        ClusterWorkflowInput(spec=spec),
        id=spec.workflow_id,
        task_queue=task_queue,
    )
    cluster = Cluster(world, management, handle, name)
    try:
        await cluster.until(
            lambda s: s.phase is ClusterPhase.READY and s.current_operation is None,
            what="created by the worker process",
        )
        child = world.child(NAMESPACE, name)
        assert child is not None
        api = await child_api(management, name)
        try:
            core = client.CoreV1Api(api)
            for index, node in enumerate(await cluster.node_names()):
                for refusals in range(TRAIN_PODS):
                    pod = f"train-{index}-{refusals}"
                    await call(
                        core.create_namespaced_pod,
                        "default",
                        {
                            "metadata": {"name": pod, "labels": {"app": "train"}},
                            "spec": {
                                "nodeName": node,
                                "containers": [{"name": "c", "image": "busybox"}],
                            },
                        },
                    )
                    world.faults.evict_429("default", pod, refusals, cluster=name)
        finally:
            close_client(api)

        def train_evictions() -> list[Any]:
            return [e for e in child.store.evictions if e.name.startswith("train-")]

        accepted = await handle.execute_update(
            ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=1)
        )

        # Kill the moment the second train pod's eviction is accepted: the heartbeat that would
        # count it has not gone out (the SDK sends at most one every 2 s).
        async def seen() -> list[Any]:
            return train_evictions()

        await eventually(
            seen,
            until=lambda evictions: len(evictions) >= 2,
            timeout=60,
            interval=0.01,
            what="two evictions of the drain",
        )
        await first.crash()
        evicted_before_the_kill = len(train_evictions())
        assert evicted_before_the_kill < TRAIN_PODS, "the kill came after the drain"
        workers.append(await start_worker(dev_env, world, task_queue))

        def scaled_down(status: ClusterStatus) -> bool:
            op = status.operation(accepted.operation_id)
            return op is not None and op.state.finished

        done = await cluster.until(scaled_down, what="scale-down finished by the second worker")
        op = done.operation(accepted.operation_id)
        assert op is not None
        assert op.state is OperationState.SUCCEEDED, op
        [drained] = op.progress.nodes
        on_the_node = [e for e in child.store.evictions if e.node == drained.node]
        # Every train pod of the node and whatever else the sim runs there (CoreDNS).
        assert sum(e.name.startswith("train-") for e in on_the_node) == TRAIN_PODS
        assert drained.pods_evicted == len(on_the_node), (drained, on_the_node)
        # The drain ran in two attempts: the killed one and the one that finished.
        assert await drain_attempts(handle) >= 2
    finally:
        with contextlib.suppress(RPCError):
            if (await handle.describe()).status is WorkflowExecutionStatus.RUNNING:
                await handle.terminate(reason="test finished")
        for running in workers:
            await running.crash()
        world.faults.clear()
        close_client(management)


async def drain_attempts(handle: WorkflowHandle[Any, Any]) -> int:
    """The attempt that ended the workflow's `drain_node` activity (its started event's)."""
    drains: set[int] = set()
    attempt = 0
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            if event.activity_task_scheduled_event_attributes.activity_type.name == "drain_node":
                drains.add(event.event_id)
        elif event.HasField("activity_task_started_event_attributes"):
            started = event.activity_task_started_event_attributes
            if started.scheduled_event_id in drains:
                attempt = max(attempt, started.attempt)
    return attempt
