"""The entity engine under `ClusterWorkflow`, on the time-skipping server with stand-in activities:
per-node drain deadlines, cancellation that never orphans (a workflow cancel during create, during a
drain and while idle; `cancel_operation`; deletes that race; a delete while a claim or a
ClusterDeployment create is in flight), compensations that always complete, failing fast on a
terminal condition, update ids, and the signals other services send.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from temporalio import workflow
from temporalio.client import WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from api.views import ClusterStatusName
from api.views import status_of as api_status_of
from models.activity_api import ActivityName
from models.cluster import NODE_POOLS_READY, ClusterPhase
from models.errors import ErrorType
from models.node_pool import NodeState
from models.operations import (
    AddNodePoolRequest,
    CancelOperationRequest,
    DeleteClusterRequest,
    Operation,
    OperationAccepted,
    OperationState,
    ScaleNodePoolRequest,
)
from models.signals import NodeEvent, NodeEventType, RefreshRequest
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
from tests.helpers import eventually
from workflows.cluster import CLUSTER
from workflows.cluster.workflow import ClusterWorkflow

pytestmark = pytest.mark.slow


@pytest.fixture
def env(time_env: WorkflowEnvironment) -> WorkflowEnvironment:
    return time_env


async def still_running(run: Run) -> bool:
    return (await run.handle.describe()).status == WorkflowExecutionStatus.RUNNING


async def refusal(run: Run, update: object, request: object) -> ApplicationError:
    with pytest.raises(WorkflowUpdateFailedError) as caught:
        await run.handle.execute_update(update, request)  # type: ignore[call-overload]
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError)
    return cause


# --- Per-node drain deadlines ----------------------------------------------------------------------


async def test_each_node_gets_its_own_drain_deadline_from_its_own_start(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(
            env, task_queue, fake, pool("gpu", 9), drain_deadline=timedelta(minutes=1)
        )
        status = await run.ready()
        for node in pool_of(status, "gpu").nodes:
            fake.add_pods(node.name, pod(f"db-{node.name}", budget_refusals=-1))
        accepted = await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool,
            ScaleNodePoolRequest(pool="gpu", count=1, drain_parallelism=1),
        )
        done = await run.finished(accepted)
        op = op_of(done, accepted.operation_id)
        assert op.state is OperationState.FAILED
        # Every leaving node had its own try, one after the other (parallelism 1) ...
        assert len(fake.drain_requests) == 8
        for node, deadline, scheduled in fake.drain_requests:
            # ... with a minute counted from when its own drain started, not the operation's.
            assert abs((deadline - scheduled) - timedelta(minutes=1)) < timedelta(seconds=5), node
        for entry in op.progress.nodes:
            assert entry.drain_deadline is not None
            assert entry.drain_started_at is not None
            assert entry.drain_deadline - entry.drain_started_at == timedelta(minutes=1)
            assert entry.step == "failed"
            assert entry.blocking_pods, entry
        assert op.reason.count("drain did not finish within 1m") == 8
        gpu = pool_of(done, "gpu")
        assert (gpu.count, len(gpu.nodes)) == (9, 9)
        assert fake.cordoned() == []


# --- Workflow cancel: the operation stops, the cluster stays ---------------------------------------


async def test_a_workflow_cancel_during_create_stops_it_and_releases_unjoined_hosts(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    gate = fake.gate(ActivityName.AWAIT_NODES)
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 2), pool("cpu", 1, CPU))
        await asyncio.wait_for(gate.entered.wait(), 10)
        assert len(fake.held()) == 3
        await run.handle.cancel()
        status = await run.until(
            lambda s: bool(s.completed_operations) and s.current_operation is None,
            what="create settled",
        )
        create = status.completed_operations[0]
        assert create.state is OperationState.CANCELLED
        assert create.reason.startswith("cancelled: the workflow was cancelled")
        assert gate.cancelled >= 1
        # Nothing that never joined is kept; the cluster is there and manageable.
        assert fake.held() == []
        assert status.node_pools == []
        assert status.phase is ClusterPhase.READY
        assert await still_running(run)
        gate.opened.set()
        added = await run.handle.execute_update(
            ClusterWorkflow.add_node_pool, AddNodePoolRequest(pool=pool("cpu", 1, CPU))
        )
        assert (
            op_of(await run.finished(added), added.operation_id).state is OperationState.SUCCEEDED
        )
        await run.handle.execute_update(ClusterWorkflow.delete_cluster, DeleteClusterRequest())
        assert (await run.handle.result()).phase is ClusterPhase.DELETED
        assert fake.held() == []


async def test_a_workflow_cancel_during_a_drain_uncordons_and_keeps_the_nodes(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 3))
        status = await run.ready()
        for node in pool_of(status, "gpu").nodes:
            fake.add_pods(node.name, pod(f"db-{node.name}", budget_refusals=3))
        gate = fake.gate(ActivityName.DRAIN_NODE)
        accepted = await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=1)
        )
        await asyncio.wait_for(gate.entered.wait(), 10)
        assert len(fake.cordoned()) == 2
        await run.handle.cancel()
        done = await run.finished(accepted)
        op = op_of(done, accepted.operation_id)
        assert op.state is OperationState.CANCELLED
        assert fake.cordoned() == []
        gpu = pool_of(done, "gpu")
        assert (gpu.count, len(gpu.nodes)) == (3, 3)
        assert {node.state for node in gpu.nodes} == {NodeState.JOINED}
        assert not any(node.removed_by for node in gpu.nodes)
        assert fake.released == []
        assert await still_running(run)


async def test_a_workflow_cancel_while_idle_changes_nothing(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1))
        before = await run.ready()
        await run.handle.cancel()
        # Still running, still holding what it holds, and it still takes operations.
        await eventually(lambda: still_running(run), what="running after the cancel")
        after = await run.status()
        assert after.node_pools == before.node_pools
        assert fake.held() == before.held_hosts
        scaled = await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=2)
        )
        assert op_of(await run.finished(scaled), scaled.operation_id).state is (
            OperationState.SUCCEEDED
        )
        await run.handle.execute_update(ClusterWorkflow.delete_cluster, DeleteClusterRequest())
        assert (await run.handle.result()).phase is ClusterPhase.DELETED
        assert fake.held() == []


# --- cancel_operation --------------------------------------------------------------------------------


async def test_cancel_operation_drops_a_queued_one_and_interrupts_the_running_one(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1))
        await run.ready()
        gate = fake.gate(ActivityName.AWAIT_NODES)
        running = await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=3)
        )
        queued = await run.handle.execute_update(
            ClusterWorkflow.add_node_pool, AddNodePoolRequest(pool=pool("cpu", 1, CPU))
        )
        await asyncio.wait_for(gate.entered.wait(), 10)

        dropped: Operation = await run.handle.execute_update(
            ClusterWorkflow.cancel_operation,
            CancelOperationRequest(operation_id=queued.operation_id, reason="not needed"),
        )
        assert (dropped.state, dropped.reason) == (
            OperationState.CANCELLED,
            "cancelled: not needed",
        )
        assert len(fake.held()) == 3

        interrupted: Operation = await run.handle.execute_update(
            ClusterWorkflow.cancel_operation,
            CancelOperationRequest(operation_id=running.operation_id),
        )
        # Answered once it settled: the two hosts that never joined are back.
        assert interrupted.state is OperationState.CANCELLED
        assert interrupted.reason == "cancelled on request"
        assert len(fake.held()) == 1
        status = await run.status()
        assert pool_of(status, "gpu").count == 1
        assert status.current_operation is None

        unknown = await refusal(
            run, ClusterWorkflow.cancel_operation, CancelOperationRequest(operation_id="op-9999")
        )
        assert unknown.type == ErrorType.OPERATION_REJECTED
        assert unknown.details == ({"reason": "NotFound", "field": "operation"},)


async def test_a_delete_cannot_be_cancelled_and_a_second_delete_joins_the_first(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1))
        await run.ready()
        gate = fake.gate(ActivityName.AWAIT_NODES)
        await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=2)
        )
        await asyncio.wait_for(gate.entered.wait(), 10)
        first: OperationAccepted = await run.handle.execute_update(
            ClusterWorkflow.delete_cluster, DeleteClusterRequest()
        )
        second: OperationAccepted = await run.handle.execute_update(
            ClusterWorkflow.delete_cluster, DeleteClusterRequest()
        )
        assert second.operation_id == first.operation_id
        refused = await refusal(
            run,
            ClusterWorkflow.cancel_operation,
            CancelOperationRequest(operation_id=first.operation_id),
        )
        assert "cannot be cancelled" in refused.message
        final = await run.handle.result()
        assert final.phase is ClusterPhase.DELETED
        # The first delete is the one that ran and succeeded: its `--wait` exits 0.
        assert op_of(final, first.operation_id).state is OperationState.SUCCEEDED
        assert fake.held() == []


# --- Deletes that jump the queue while something is in flight -------------------------------------


async def test_a_delete_while_a_claim_is_in_flight_releases_what_it_claimed(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1))
        await run.ready()
        # The claim is on the wire when the delete comes: it lands anyway, and is not recorded.
        gate = fake.gate(ActivityName.CLAIM_HOSTS, land_on_cancel=True)
        await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=3)
        )
        await asyncio.wait_for(gate.entered.wait(), 10)
        await run.handle.execute_update(ClusterWorkflow.delete_cluster, DeleteClusterRequest())
        final = await run.handle.result()
        assert final.phase is ClusterPhase.DELETED
        assert gate.cancelled == 1
        assert len(fake.claims) == 2  # the create's and the one that landed late
        assert fake.held() == []
        assert run.name not in fake.deployments


async def test_a_delete_while_the_cluster_deployment_is_created_removes_it(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    gate = fake.gate(ActivityName.CREATE_CLUSTER_DEPLOYMENT, land_on_cancel=True)
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1))
        await asyncio.wait_for(gate.entered.wait(), 10)
        await run.handle.execute_update(ClusterWorkflow.delete_cluster, DeleteClusterRequest())
        final = await run.handle.result()
        assert final.phase is ClusterPhase.DELETED
        assert gate.cancelled == 1
        assert final.completed_operations[0].state is OperationState.CANCELLED
        # It landed after the cancel, owned by this cluster: the delete found and removed it.
        assert run.name not in fake.deployments
        assert fake.held() == []


# --- Compensations --------------------------------------------------------------------------------


async def test_a_failing_compensation_is_reported_and_does_not_stop_the_others(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(
            env, task_queue, fake, pool("gpu", 3), drain_deadline=timedelta(minutes=1)
        )
        status = await run.ready()
        for node in pool_of(status, "gpu").nodes:
            fake.add_pods(node.name, pod(f"db-{node.name}", budget_refusals=-1))
        gate = fake.gate(ActivityName.DRAIN_NODE)
        accepted = await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=1)
        )
        await asyncio.wait_for(gate.entered.wait(), 10)
        assert len(fake.cordoned()) == 2
        stuck = fake.cordoned()[0]
        fake.fail_uncordon = {stuck}
        gate.opened.set()
        done = await run.finished(accepted)
        op = op_of(done, accepted.operation_id)
        assert op.state is OperationState.FAILED
        assert f"node '{stuck}' stays cordoned: uncordon node: nodes is forbidden" in op.reason
        # The other leaving node was given back all the same; the state says what is there.
        assert fake.cordoned() == [stuck]
        states = {node.name: node.state for node in pool_of(done, "gpu").nodes}
        assert states[stuck] is NodeState.CORDONED
        assert sorted(
            name for name, state in states.items() if state is NodeState.JOINED
        ) == sorted(set(states) - {stuck})
        assert pool_of(done, "gpu").count == 3


async def test_a_terminal_cluster_deployment_failure_fails_the_create_at_once(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony(control_plane_fails=True, control_plane_ready_after=100)
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1))
        status = await run.until(lambda s: s.phase is ClusterPhase.FAILED, what="failed")
        assert status.reason == (
            f"ClusterDeployment '{run.name}' failed: Ready=False (Failed: credential is not ready)"
        )
        assert fake.claims == {}
        assert fake.deployments[run.name]["polls"] <= 3


async def test_hosts_unavailable_at_create_keeps_its_type_and_leaves_no_empty_pool(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony(hosts_per_sku=1)
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 2), pool("cpu", 1, CPU))
        status = await run.until(
            lambda s: bool(s.completed_operations) and s.current_operation is None, what="create"
        )
        create = status.completed_operations[0]
        assert create.state is OperationState.FAILED
        assert create.reason == "node pool 'gpu': claim hosts: only 1 hosts of h100 are free in fra"
        # Never `ready` without what it was asked for: degraded, saying what is missing and why.
        assert status.phase is ClusterPhase.DEGRADED
        assert status.reason == (
            "created without node pool 'gpu' (0 of 2 nodes): claim hosts: only 1 hosts of h100 "
            "are free in fra; add or scale the pool again once hosts are free, or delete the "
            "cluster"
        )
        assert [(c.status, c.reason) for c in status.conditions if c.type == NODE_POOLS_READY] == [
            ("False", "HostsUnavailable")
        ]
        assert [p.name for p in status.node_pools] == ["cpu"]
        # The same pool can be asked for again, and a smaller one fits: the cluster is ready.
        again = await run.handle.execute_update(
            ClusterWorkflow.add_node_pool, AddNodePoolRequest(pool=pool("gpu", 1))
        )
        finished = await run.finished(again)
        assert op_of(finished, again.operation_id).state is OperationState.SUCCEEDED
        assert finished.phase is ClusterPhase.READY
        assert NODE_POOLS_READY not in [c.type for c in finished.conditions]


async def test_waiting_for_capacity_claims_once_hosts_are_freed(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony(hosts_per_sku=2)
    async with worker(env, task_queue, fake):
        holder = await start(env, task_queue, fake, pool("gpu", 2))
        await holder.ready()
        waiter = await start(env, task_queue, fake, pool("cpu", 1, CPU))
        await waiter.ready()
        gate = fake.gate(ActivityName.AWAIT_FREE_HOSTS)
        accepted = await waiter.handle.execute_update(
            ClusterWorkflow.add_node_pool,
            AddNodePoolRequest(pool=pool("gpu", 1), wait_for_capacity=True),
        )
        await asyncio.wait_for(gate.entered.wait(), 10)
        waiting = await waiter.status()
        assert waiting.current_operation is not None
        assert waiting.current_operation.reason == "waiting for 1 free host(s) of gpu:h100 in fra"
        # Never shown ready while a pool waits for hosts: the phase, the pool and why.
        assert waiting.phase is ClusterPhase.WAITING
        assert pool_of(waiting, "gpu").waiting_for_hosts == 1
        assert pool_of(waiting, "cpu").waiting_for_hosts == 0
        assert waiting.reason == "node pool 'gpu' waits for 1 free host(s) of gpu:h100"
        assert api_status_of(waiting) is ClusterStatusName.WAITING
        await holder.handle.execute_update(ClusterWorkflow.delete_cluster, DeleteClusterRequest())
        await holder.handle.result()
        gate.opened.set()
        done = await waiter.finished(accepted)
        assert op_of(done, accepted.operation_id).state is OperationState.SUCCEEDED
        assert pool_of(done, "gpu").ready_count == 1
        assert (done.phase, done.reason, pool_of(done, "gpu").waiting_for_hosts) == (
            ClusterPhase.READY,
            "",
            0,
        )


async def test_a_pool_interrupted_while_it_waits_for_hosts_waits_no_more(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony(hosts_per_sku=1)
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("cpu", 1, CPU))
        await run.ready()
        gate = fake.gate(ActivityName.AWAIT_FREE_HOSTS)
        accepted = await run.handle.execute_update(
            ClusterWorkflow.add_node_pool,
            AddNodePoolRequest(pool=pool("gpu", 2), wait_for_capacity=True),
        )
        await asyncio.wait_for(gate.entered.wait(), 10)
        assert (await run.status()).phase is ClusterPhase.WAITING
        await run.handle.execute_update(
            ClusterWorkflow.cancel_operation,
            CancelOperationRequest(operation_id=accepted.operation_id),
        )
        status = await run.status()
        assert status.phase is ClusterPhase.READY
        assert all(p.waiting_for_hosts == 0 for p in status.node_pools)


# --- Update ids -----------------------------------------------------------------------------------


async def test_a_retried_update_returns_its_operation_instead_of_queueing_another(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    # On the dev server: it crosses a continue-as-new with updates, which the time-skipping
    # server does not handle reliably (see test_continue_as_new_carries_state_and_queue).
    env = dev_env
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1), run_events=1)
        first_run = (await run.handle.describe()).run_id
        latest = env.client.get_workflow_handle_for(ClusterWorkflow.run, run.handle.id)
        run.handle = latest
        await run.ready()
        await eventually(
            lambda: latest.describe(), until=lambda d: d.run_id != first_run, what="next run"
        )
        request = ScaleNodePoolRequest(pool="gpu", count=2)
        one = await latest.execute_update(ClusterWorkflow.scale_node_pool, request, id="req-1")
        again = await latest.execute_update(ClusterWorkflow.scale_node_pool, request, id="req-1")
        assert again.operation_id == one.operation_id
        done = await run.finished(one)
        # Still the same after the operation finished and the workflow continued as new.
        await eventually(
            lambda: latest.describe(), until=lambda d: d.run_id != first_run, what="next run"
        )
        later = await latest.execute_update(ClusterWorkflow.scale_node_pool, request, id="req-1")
        assert later.operation_id == one.operation_id
        ops = [op.id for op in (await run.status()).completed_operations]
        assert ops.count(one.operation_id) == 1
        assert pool_of(done, "gpu").count == 2


# --- Signals ----------------------------------------------------------------------------------------


async def test_node_events_update_status_once_per_request_id_and_in_order(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 2))
        status = await run.ready()
        node = pool_of(status, "gpu").nodes[0].name

        def event(request_id: str, ready: str, version: str, kind: str = "MODIFIED") -> NodeEvent:
            return NodeEvent(
                request_id=request_id,
                node=node,
                type=NodeEventType(kind),
                ready_status=ready,
                resource_version=version,
            )

        await run.handle.signal(ClusterWorkflow.node_event, event("e1", "False", "10"))
        down = await run.until(lambda s: pool_of(s, "gpu").ready_count == 1, what="NotReady")
        assert pool_of(down, "gpu").nodes[0].kubernetes_status == "NotReady"
        # The same request id again is ignored; an older resourceVersion never wins.
        await run.handle.signal(ClusterWorkflow.node_event, event("e1", "True", "11"))
        await run.handle.signal(ClusterWorkflow.node_event, event("e2", "True", "9"))
        await run.handle.signal(ClusterWorkflow.node_event, event("e3", "Unknown", "12"))
        unknown = await run.until(
            lambda s: pool_of(s, "gpu").nodes[0].kubernetes_status == "Unknown", what="Unknown"
        )
        assert pool_of(unknown, "gpu").ready_count == 1
        await run.handle.signal(ClusterWorkflow.node_event, event("e4", "", "13", "DELETED"))
        await run.until(
            lambda s: pool_of(s, "gpu").nodes[0].kubernetes_status == "NotFound", what="gone"
        )


async def test_refresh_looks_at_the_nodes_once_per_request_id(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 2))
        status = await run.ready()
        node = pool_of(status, "gpu").nodes[1].name
        fake.nodes[node].polls_until_ready = 1_000  # the node went NotReady behind Colony's back
        # By name, as `temporal workflow signal --name refresh` sends it.
        await run.handle.signal(CLUSTER.refresh.name, RefreshRequest(request_id="r1"))
        seen = await run.until(lambda s: pool_of(s, "gpu").ready_count == 1, what="refreshed")
        assert pool_of(seen, "gpu").nodes[1].kubernetes_status == "NotReady"
        await run.handle.signal(CLUSTER.refresh.name, RefreshRequest(request_id="r1"))
        await run.handle.signal(CLUSTER.refresh.name, RefreshRequest(request_id="r2"))
        await eventually(
            lambda: asyncio.sleep(0, fake.calls.count("list_nodes colony.dev/node-pool")),
            until=lambda n: n == 2,
            what="two refreshes for three signals",
        )


@workflow.defn(sandboxed=False)
class NodeWatcherStandIn:
    """Another workflow reporting a node event to the cluster, twice (as a retrying sender would)."""

    @workflow.run
    async def run(self, cluster_workflow_id: str, node: str) -> None:
        cluster = workflow.get_external_workflow_handle(cluster_workflow_id)
        event = NodeEvent(request_id="watch-1", node=node, ready_status="False")
        await cluster.signal(CLUSTER.node_event.name, event)
        await cluster.signal(
            CLUSTER.node_event.name, event.model_copy(update={"ready_status": "True"})
        )


async def test_a_workflow_signals_another_with_a_request_id(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake, workflows=(NodeWatcherStandIn,)):
        run = await start(env, task_queue, fake, pool("gpu", 1))
        status = await run.ready()
        node = pool_of(status, "gpu").nodes[0].name
        await env.client.execute_workflow(
            NodeWatcherStandIn.run,
            args=[run.handle.id, node],
            id=f"watcher-{run.name}",
            task_queue=task_queue,
        )
        seen = await run.status()
        # The second delivery carried the same request id: only the first counted.
        assert pool_of(seen, "gpu").nodes[0].kubernetes_status == "NotReady"


async def test_an_idle_cluster_looks_at_its_nodes_now_and_then_without_a_watcher(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 2))
        status = await run.ready()
        node = pool_of(status, "gpu").nodes[0].name
        fake.nodes[node].polls_until_ready = 1_000  # NotReady, and nobody says so
        await env.sleep(timedelta(minutes=11))
        seen = await run.until(
            lambda s: pool_of(s, "gpu").ready_count == 1, what="the fallback look"
        )
        assert pool_of(seen, "gpu").nodes[0].kubernetes_status == "NotReady"
