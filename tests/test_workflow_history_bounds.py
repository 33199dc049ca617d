"""Histories are bounded by design: measured on the time-skipping server with stand-in activities.

- A pool of 100 nodes with 10 pods each is drained and removed while a PodDisruptionBudget blocks
  10 of the nodes until their deadline (1 h): every run of the workflow stays under 10,000 events
  and 4 MB, nothing is left cordoned or claimed that should not be, and the operation names the
  blockers.
- A create with 10 pools of 10 nodes.
- The events of a drain do not depend on how long it waits (1 h and 24 h deadlines give the same
  count): waits happen inside heartbeating activities, never as workflow-timer polls.

Each test prints its figures (`pytest -s`), which the closing notes quote.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from models.cluster import ClusterPhase
from models.node_pool import NodeState
from models.operations import DeleteClusterRequest, DeleteNodePoolRequest, OperationState
from tests.cluster_world import (
    CPU,
    FakeColony,
    Run,
    op_of,
    pod,
    pool,
    pool_of,
    start,
    worker,
)
from workflows.cluster.workflow import ClusterWorkflow

pytestmark = pytest.mark.slow

MAX_EVENTS = 10_000
MAX_BYTES = 4 * 1024 * 1024


@pytest.fixture
def env(time_env: WorkflowEnvironment) -> WorkflowEnvironment:
    return time_env


async def runs_of(
    env: WorkflowEnvironment, handle: WorkflowHandle[object, object]
) -> list[tuple[int, int]]:
    """(events, bytes) of every run of the workflow, first to last."""
    sizes: list[tuple[int, int]] = []
    current: str | None = handle.first_execution_run_id or handle.run_id
    while current:
        history = await env.client.get_workflow_handle(handle.id, run_id=current).fetch_history()
        sizes.append((len(history.events), sum(event.ByteSize() for event in history.events)))
        last = history.events[-1]
        current = None
        if last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            current = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return sizes


async def drained_pool(
    env: WorkflowEnvironment, task_queue: str, drain_deadline: timedelta
) -> tuple[Run, FakeColony, list[tuple[int, int]], int]:
    """Create 100 + 1 nodes, put 10 pods on each, block 10 nodes with a budget, delete the pool."""
    fake = FakeColony(hosts_per_sku=120)
    async with worker(env, task_queue, fake):
        run = await start(
            env,
            task_queue,
            fake,
            pool("gpu", 100),
            pool("sys", 1, CPU),
            drain_deadline=drain_deadline,
        )
        status = await run.until(
            lambda s: s.phase is ClusterPhase.READY and s.current_operation is None,
            what="100 nodes ready",
            timeout=120,
        )
        nodes = sorted(node.name for node in pool_of(status, "gpu").nodes)
        assert len(nodes) == 100
        blocked = set(nodes[::10])
        for name in nodes:
            fake.add_pods(
                name,
                *(
                    pod(
                        f"w-{name}-{index}",
                        budget_refusals=-1 if name in blocked and index == 0 else 0,
                    )
                    for index in range(10)
                ),
            )
        accepted = await run.handle.execute_update(
            ClusterWorkflow.delete_node_pool,
            DeleteNodePoolRequest(pool="gpu", drain_parallelism=10),
        )
        done = await run.until(
            lambda s: (op := s.operation(accepted.operation_id)) is not None and op.state.finished,
            what="pool drained",
            timeout=300,
        )
        op = op_of(done, accepted.operation_id)
        assert op.state is OperationState.FAILED
        # The operation names every blocker; the 10 blocked nodes stay, schedulable again.
        for name in blocked:
            assert f"node '{name}': drain did not finish" in op.reason
            assert f"default/w-{name}-0" in op.reason
        gpu = pool_of(done, "gpu")
        assert sorted(node.name for node in gpu.nodes) == sorted(blocked)
        assert {node.state for node in gpu.nodes} == {NodeState.JOINED}
        assert gpu.count == 10
        assert fake.cordoned() == []
        # Held: exactly the kept nodes' hosts and the sys node's.
        assert len(fake.held()) == 11
        assert len(fake.released) == 90
        sizes = await runs_of(env, run.handle)
        drain_events = await events_of_operation(run)
        await run.handle.execute_update(ClusterWorkflow.delete_cluster, DeleteClusterRequest())
        await run.handle.result()
        assert fake.held() == []
        return run, fake, sizes, drain_events


async def events_of_operation(run: Run) -> int:
    """Events since the pool delete started in the current run (approximately: the last run's
    events after its last update-accepted event)."""
    history = await run.handle.fetch_history()
    accepted = [
        index
        for index, event in enumerate(history.events)
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    ]
    return len(history.events) - (accepted[-1] if accepted else 0)


async def test_draining_100_nodes_with_10_blocked_until_the_deadline_stays_bounded(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    _, _, sizes, drain_events = await drained_pool(env, task_queue, timedelta(hours=1))
    print(
        f"\n100-node drain, 10 blocked 1h: runs (events, bytes) = {sizes}; drain op ~{drain_events} events"
    )
    for events, size in sizes:
        assert events < MAX_EVENTS
        assert size < MAX_BYTES


async def test_the_events_of_a_drain_do_not_grow_with_its_deadline(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    _, _, _, one_hour = await drained_pool(env, task_queue, timedelta(hours=1))
    _, _, _, one_day = await drained_pool(env, task_queue, timedelta(hours=24))
    print(f"\ndrain op events: 1h deadline {one_hour}, 24h deadline {one_day}")
    # Equal but for how activity completions happen to batch into workflow tasks; a workflow
    # that polled with timers would have 24 times the events with the longer deadline.
    assert abs(one_day - one_hour) <= one_hour // 10


async def test_a_create_of_10_pools_of_10_nodes_stays_bounded(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony(hosts_per_sku=120)
    async with worker(env, task_queue, fake):
        pools = [pool(f"p{index}", 10) for index in range(9)] + [pool("p9", 10, CPU)]
        run = await start(env, task_queue, fake, *pools)
        status = await run.until(
            lambda s: s.phase is ClusterPhase.READY and s.current_operation is None,
            what="10 pools ready",
            timeout=120,
        )
        assert sum(p.ready_count for p in status.node_pools) == 100
        sizes = await runs_of(env, run.handle)
        print(f"\n10-pool, 100-node create: runs (events, bytes) = {sizes}")
        for events, size in sizes:
            assert events < MAX_EVENTS
            assert size < MAX_BYTES
