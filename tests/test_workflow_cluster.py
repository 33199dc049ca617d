"""ClusterWorkflow on the time-skipping server, with stand-in activities registered under the real
names (`tests/cluster_world.py`): create, validators, the queue, scale up, drain, delete and
continue-as-new. Cancellation, interruption, signals and history bounds have their own modules.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from models.activity_api import ActivityName, DrainProgress, Toleration
from models.capacity import GpuHolder
from models.cluster import (
    ClusterPhase,
    ClusterSpec,
    ClusterStatus,
    ClusterWorkflowInput,
    cluster_workflow_id,
)
from models.errors import ErrorType
from models.node_pool import NodeState, Taint, TaintEffect
from models.operations import (
    AddNodePoolRequest,
    DeleteClusterRequest,
    DeleteNodePoolRequest,
    OperationState,
    ScaleNodePoolRequest,
)
from models.operations import DeleteNodeRequest as DeleteNodeOperation
from models.workspace_api import GpuHoldersMessage
from tests.cluster_world import (
    BUDGET_MESSAGE,
    CPU,
    FakeColony,
    Run,
    _started,
    op_of,
    pod,
    pool,
    pool_of,
    start,
    worker,
)
from tests.helpers import eventually
from workflows.cluster.workflow import ClusterWorkflow

pytestmark = pytest.mark.slow


@pytest.fixture
def env(time_env: WorkflowEnvironment) -> WorkflowEnvironment:
    return time_env


async def rejected(run: Run, update: Any, request: Any) -> str:
    """Send an update that must be refused; return the message the user sees."""
    with pytest.raises(WorkflowUpdateFailedError) as caught:
        await run.handle.execute_update(update, request)
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == ErrorType.OPERATION_REJECTED
    return cause.message


# --- Create --------------------------------------------------------------------------------------


async def test_create_adds_pools_in_parallel_and_reports_ready(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(
            env, task_queue, fake, pool("gpu", 2), pool("cpu", 1, CPU, labels={"team": "ml"})
        )
        status = await run.ready()

        assert status.kubeconfig is not None
        assert status.kubeconfig.secret_name == f"{run.name}-kubeconfig"
        gpu, cpu = pool_of(status, "gpu"), pool_of(status, "cpu")
        assert gpu is not None
        assert cpu is not None
        assert (gpu.count, gpu.ready_count, cpu.count, cpu.ready_count) == (2, 2, 1, 1)
        assert all(node.state is NodeState.JOINED for node in gpu.nodes + cpu.nodes)
        assert {node.kubernetes_status for node in gpu.nodes} == {"Ready"}
        create = status.completed_operations[-1]
        assert create.state is OperationState.SUCCEEDED
        assert create.progress.nodes_joined == 3
        # Both pools were claimed by the same create operation, before any node joined: in parallel.
        assert len(fake.claims) == 2
        assert fake.labels[gpu.nodes[0].name]["exalsius.ai/gpu-model"] == "h100"
        labelled = fake.labels[cpu.nodes[0].name]
        assert labelled["colony.dev/node-pool"] == "cpu"
        assert labelled["colony.dev/sku"] == "cpu-32"
        assert labelled["team"] == "ml"


async def test_control_plane_never_ready_fails_at_the_deadline(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony(control_plane_ready_after=100_000, latency=0.5)
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, ready_deadline=timedelta(minutes=2))
        creating = await run.until(
            lambda s: "waiting for the control plane" in s.reason, what="waiting"
        )
        assert creating.phase is ClusterPhase.CREATING
        assert "Ready=False (Provisioning: waiting for control plane)" in creating.reason

        status = await run.until(
            lambda s: s.phase is ClusterPhase.FAILED,
            what="failed",
        )
        assert status.reason == (
            "the control plane was not ready within 2m: "
            "Ready=False (Provisioning: waiting for control plane)"
        )


async def test_missing_template_fails_without_retrying(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony(template_found=False)
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1))
        status = await run.until(lambda s: s.phase is ClusterPhase.FAILED, what="failed")
        assert (
            status.reason
            == "ClusterTemplate 'remote-cluster-1-0-0' not found in namespace 'kcm-system'"
        )
        assert fake.deployments == {}
        assert fake.claims == {}
        # Only delete is accepted now, and it finishes the workflow.
        message = await rejected(
            run, ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=2)
        )
        assert message.startswith(f"cluster '{run.name}' failed (ClusterTemplate")
        await run.handle.execute_update(ClusterWorkflow.delete_cluster, DeleteClusterRequest())
        final = await run.handle.result()
        assert final.phase is ClusterPhase.DELETED


# --- Validators ----------------------------------------------------------------------------------


async def test_validators_refuse_with_a_message_and_write_nothing(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(
            env,
            task_queue,
            fake,
            pool("gpu", 1),
            pool(
                "tainted",
                1,
                CPU,
                taints=[Taint(key="dedicated", value="x", effect=TaintEffect.NO_SCHEDULE)],
            ),
        )
        # While creating, only delete is accepted.
        creating = await rejected(
            run, ClusterWorkflow.add_node_pool, AddNodePoolRequest(pool=pool("more", 1))
        )
        assert (
            creating
            == f"cluster '{run.name}' is still being created: only delete is accepted until it is ready"
        )

        before = await run.ready()
        node = pool_of(before, "gpu").nodes[0].name
        cases = [
            (
                ClusterWorkflow.scale_node_pool,
                ScaleNodePoolRequest(pool="nope", count=2),
                f"node pool 'nope' does not exist in cluster '{run.name}' (its node pools: gpu, tainted)",
            ),
            (
                ClusterWorkflow.delete_node_pool,
                DeleteNodePoolRequest(pool="nope"),
                f"node pool 'nope' does not exist in cluster '{run.name}' (its node pools: gpu, tainted)",
            ),
            (
                ClusterWorkflow.delete_node,
                DeleteNodeOperation(node="node-9"),
                f"node 'node-9' does not exist in cluster '{run.name}'",
            ),
            (
                ClusterWorkflow.delete_node,
                DeleteNodeOperation(node=node),
                f"node '{node}' is the last node of node pool 'gpu' and cannot be deleted on its own: delete the pool",
            ),
            (
                ClusterWorkflow.add_node_pool,
                AddNodePoolRequest(pool=pool("gpu", 1)),
                f"node pool 'gpu' already exists in cluster '{run.name}'",
            ),
            (
                ClusterWorkflow.delete_node_pool,
                DeleteNodePoolRequest(pool="gpu"),
                f"cluster '{run.name}' would have no node free of NoSchedule and NoExecute taints; "
                "the GPU operator, MPI operator and cluster DNS need one: keep at least one pool without such taints",
            ),
        ]
        for update, request, message in cases:
            assert await rejected(run, update, request) == message
        # A count out of range never gets past decoding the request (the model holds the rule);
        # the update is refused all the same, before anything is written.
        with pytest.raises(WorkflowUpdateFailedError):
            await run.handle.execute_update(
                ClusterWorkflow.scale_node_pool,
                ScaleNodePoolRequest.model_construct(pool="gpu", count=101),
            )

        after = await run.status()
        assert after.queued_operations == []
        assert after.current_operation is None
        assert after.completed_operations == before.completed_operations
        assert after.node_pools == before.node_pools


async def test_validation_counts_queued_operations(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1))
        await run.ready()
        # Queued behind a slow add: the second add of the same name is refused, as is scaling a
        # pool that a queued delete will remove.
        first = await run.handle.execute_update(
            ClusterWorkflow.add_node_pool, AddNodePoolRequest(pool=pool("cpu", 1, CPU))
        )
        assert first.position == 1
        duplicate = await rejected(
            run, ClusterWorkflow.add_node_pool, AddNodePoolRequest(pool=pool("cpu", 2, CPU))
        )
        assert duplicate == f"node pool 'cpu' already exists in cluster '{run.name}'"
        await run.handle.execute_update(
            ClusterWorkflow.delete_node_pool, DeleteNodePoolRequest(pool="cpu")
        )
        gone = await rejected(
            run, ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="cpu", count=3)
        )
        assert (
            gone == f"node pool 'cpu' does not exist in cluster '{run.name}' (its node pools: gpu)"
        )


# --- Queue ---------------------------------------------------------------------------------------


async def test_operations_run_in_arrival_order_and_status_shows_queue(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony(join_delay=3)
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1))
        await run.ready()
        fake.latency = 0.5  # each join step takes half a second: the queue builds up behind it
        a = await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=3)
        )
        b = await run.handle.execute_update(
            ClusterWorkflow.add_node_pool, AddNodePoolRequest(pool=pool("cpu", 1, CPU))
        )
        c = await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=2)
        )

        status = await run.status()
        assert status.current_operation is not None
        assert status.current_operation.id == a.operation_id
        assert status.current_operation.state is OperationState.RUNNING
        assert [op.id for op in status.queued_operations] == [b.operation_id, c.operation_id]
        assert (b.position, c.position) == (1, 2)
        # The Web UI's "current details" say the same.
        metadata = await run.handle.query(
            "__temporal_workflow_metadata", result_type=WorkflowMetadata
        )
        assert f"running: {a.operation_id} scale_node_pool" in metadata.current_details
        assert (
            f"queued: {b.operation_id} add_node_pool, {c.operation_id} scale_node_pool"
            in metadata.current_details
        )

        done = await run.finished(c)
        finished = [op.id for op in done.completed_operations]
        assert finished[-3:] == [a.operation_id, b.operation_id, c.operation_id]
        assert all(op.state is OperationState.SUCCEEDED for op in done.completed_operations)
        assert pool_of(done, "gpu").count == 2


# --- Scale up ------------------------------------------------------------------------------------


async def test_scale_up_reports_ready_count_rising(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony(join_delay=1)
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1))
        await run.ready()
        fake.latency = 0.3
        accepted = await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=4)
        )
        seen: list[int] = []

        def record(status: ClusterStatus) -> bool:
            gpu = pool_of(status, "gpu")
            assert gpu is not None
            if not seen or seen[-1] != gpu.ready_count:
                seen.append(gpu.ready_count)
            return gpu.ready_count == 4

        status = await run.until(
            record,
            what="4 ready",
        )
        assert seen == sorted(seen)
        assert len(seen) >= 3, seen  # it rose in steps, not at once
        assert pool_of(status, "gpu").count == 4
        done = await run.finished(accepted)
        assert op_of(done, accepted.operation_id).state is OperationState.SUCCEEDED
        assert len(fake.held()) == 4


async def test_nodes_that_never_join_are_released_and_the_operation_fails(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony(never_join={"10.0.0.3"})
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1), join_deadline=timedelta(minutes=2))
        await run.ready()
        accepted = await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=3)
        )
        status = await run.finished(accepted)
        op = status.operation(accepted.operation_id)
        assert op is not None
        assert op.state is OperationState.FAILED
        assert op.reason == (
            "1 of 2 new nodes of node pool 'gpu' were not Ready within 2m: "
            "h100-003 (10.0.0.3); their hosts were released"
        )
        gpu = pool_of(status, "gpu")
        assert gpu is not None
        assert (gpu.count, gpu.ready_count, len(gpu.nodes)) == (2, 2, 2)
        assert fake.released == ["h100-003"]
        assert "10.0.0.3" not in fake.deployments[run.name]["machines"]
        assert fake.held() == ["h100-001", "h100-002"]


async def test_hosts_unavailable_fails_the_operation_and_keeps_the_pool(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony(hosts_per_sku=2)
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1))
        await run.ready()
        accepted = await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=5)
        )
        status = await run.finished(accepted)
        op = status.operation(accepted.operation_id)
        assert op is not None
        assert op.state is OperationState.FAILED
        assert op.reason == "claim hosts: only 1 hosts of h100 are free in fra"
        assert pool_of(status, "gpu").count == 1


# --- Drain ---------------------------------------------------------------------------------------


async def test_scale_down_drains_in_order_and_skips_daemonset_pods(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 3))
        status = await run.ready()
        names = sorted(node.name for node in pool_of(status, "gpu").nodes)
        busy, quiet, newest = names[0], names[1], names[2]
        fake.add_pods(busy, pod("web-1"), pod("web-2"))
        fake.add_pods(quiet, pod("web-3"), pod("agent-q", controller_kind="DaemonSet"))
        fake.add_pods(newest, pod("web-4"), pod("mirror", mirror=True))
        fake.add_pods(
            newest,
            pod(
                "tolerant",
                tolerations=[Toleration(key="node.kubernetes.io/unschedulable", operator="Exists")],
            ),
        )

        accepted = await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=1)
        )
        done = await run.finished(accepted)
        op = op_of(done, accepted.operation_id)
        assert op.state is OperationState.SUCCEEDED, op
        # One evictable pod each on `quiet` and `newest`: the newer goes first, then `quiet`.
        assert [entry.node for entry in op.progress.nodes] == [newest, quiet]
        assert all(entry.cordoned and entry.step == "removed" for entry in op.progress.nodes)
        assert sorted(fake.evicted) == ["default/web-3", "default/web-4"]
        remaining = pool_of(done, "gpu")
        assert remaining is not None
        assert [node.name for node in remaining.nodes] == [busy]
        assert (remaining.count, remaining.ready_count) == (1, 1)
        assert len(fake.released) == 2


async def test_leaving_nodes_are_cordoned_first_and_drained_up_to_the_limit(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 4))
        status = await run.ready()
        for node in pool_of(status, "gpu").nodes:
            fake.add_pods(node.name, pod(f"web-{node.name}", budget_refusals=2))
        fake.latency = 0.3  # each drain lasts long enough for them to overlap

        accepted = await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool,
            ScaleNodePoolRequest(pool="gpu", count=1, drain_parallelism=2),
        )
        done = await run.finished(accepted)
        assert op_of(done, accepted.operation_id).state is OperationState.SUCCEEDED

        drain_calls = [c for c in fake.calls if c.split()[0] in ("cordon", "evict", "delete")]
        first_eviction = next(i for i, c in enumerate(drain_calls) if c.startswith("evict"))
        cordoned = {c.split()[1] for c in drain_calls[:first_eviction] if c.startswith("cordon")}
        assert len(cordoned) == 3, drain_calls  # like `kubectl drain`: all of them, first
        # A node drains from its drain's start until its Node is deleted: never more than 2.
        assert fake.most_draining == 2, drain_calls


async def test_a_drained_node_gives_its_slot_to_the_next_before_its_removal(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    """The parallelism bounds drains, not removals: with one slot, the second node's drain
    starts while the first node's machine removal is still held (it waited for it before)."""
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 3))
        status = await run.ready()
        for node in pool_of(status, "gpu").nodes:
            fake.add_pods(node.name, pod(f"web-{node.name}"))
        gate = fake.gate(ActivityName.REMOVE_CLUSTER_MACHINES)
        accepted = await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool,
            ScaleNodePoolRequest(pool="gpu", count=1, drain_parallelism=1),
        )
        await asyncio.wait_for(gate.entered.wait(), 30)
        await eventually(
            lambda: _drains_started(fake, 2), what="the second drain while a removal is held"
        )
        assert fake.most_draining == 1
        gate.opened.set()
        done = await run.finished(accepted)
        assert op_of(done, accepted.operation_id).state is OperationState.SUCCEEDED
        assert len(pool_of(done, "gpu").nodes) == 1


async def _drains_started(fake: FakeColony, count: int) -> bool:
    return len(fake.drain_requests) >= count


@pytest.mark.parametrize(
    ("pool_setting", "operation_setting", "most"),
    [
        pytest.param(3, None, 3, id="the-pool-setting"),
        pytest.param(3, 1, 1, id="the-operation-wins"),
        pytest.param(None, None, 2, id="the-cluster-default"),
    ],
)
async def test_a_pools_drain_parallelism_applies_when_the_operation_does_not_say(
    env: WorkflowEnvironment,
    task_queue: str,
    pool_setting: int | None,
    operation_setting: int | None,
    most: int,
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 4, drain_parallelism=pool_setting))
        status = await run.ready()
        assert pool_of(status, "gpu").drain_parallelism == pool_setting
        for node in pool_of(status, "gpu").nodes:
            fake.add_pods(node.name, pod(f"web-{node.name}"))
        fake.latency = 0.3  # each drain lasts long enough for them to overlap

        accepted = await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool,
            ScaleNodePoolRequest(pool="gpu", count=1, drain_parallelism=operation_setting),
        )
        done = await run.finished(accepted)
        assert op_of(done, accepted.operation_id).state is OperationState.SUCCEEDED
        assert fake.most_draining == most


async def test_budget_refusals_are_retried_and_blockers_show_live(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 2))
        status = await run.ready()
        target = pool_of(status, "gpu").nodes[1].name
        fake.add_pods(target, pod("db-0", budget_refusals=3))
        gate = fake.gate(ActivityName.DRAIN_NODE)  # hold the drain after its first round

        accepted = await run.handle.execute_update(
            ClusterWorkflow.delete_node, DeleteNodeOperation(node=target)
        )
        await asyncio.wait_for(gate.entered.wait(), 10)
        blocked = await run.status()
        entry = op_of(blocked, accepted.operation_id).progress.nodes[0]
        assert entry.step == "draining"
        assert entry.drain_deadline is not None
        assert entry.drain_started_at is not None
        assert entry.drain_deadline - entry.drain_started_at == timedelta(hours=1)
        assert pool_of(blocked, "gpu").nodes[1].state is NodeState.DRAINING

        # The live blockers are the drain's heartbeat details, among the pending activities
        # (where the Web UI shows them, and where `colonyctl` reads them).
        async def heartbeat() -> DrainProgress | None:
            pending = (await run.handle.describe()).raw_description.pending_activities
            for activity in pending:
                if activity.activity_id == f"{accepted.operation_id}/drain/{target}" and (
                    activity.heartbeat_details.payloads
                ):
                    details = run.env.client.data_converter.payload_converter.from_payload(
                        activity.heartbeat_details.payloads[0], DrainProgress
                    )
                    assert isinstance(details, DrainProgress)
                    return details
            return None

        live = await eventually(heartbeat, what="drain heartbeat with blockers")
        assert live is not None
        assert live.blocking_pods == [f"default/db-0: {BUDGET_MESSAGE}"]
        assert live.pods_remaining == 1

        gate.opened.set()
        done = await run.finished(accepted)
        assert op_of(done, accepted.operation_id).state is OperationState.SUCCEEDED
        assert fake.evicted == ["default/db-0"]
        assert pool_of(done, "gpu").count == 1


async def test_drain_deadline_fails_with_the_blocking_pods(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(
            env, task_queue, fake, pool("gpu", 2), drain_deadline=timedelta(minutes=1)
        )
        status = await run.ready()
        target = pool_of(status, "gpu").nodes[1].name
        fake.add_pods(target, pod("db-0", budget_refusals=-1), pod("web-0"))

        accepted = await run.handle.execute_update(
            ClusterWorkflow.delete_node, DeleteNodeOperation(node=target)
        )
        done = await run.until(
            lambda s: (op := s.operation(accepted.operation_id)) is not None and op.state.finished,
            what="drain failed",
        )
        op = done.operation(accepted.operation_id)
        assert op is not None
        assert op.state is OperationState.FAILED
        assert op.reason == (
            f"node '{target}': drain did not finish within 1m; blocked by: "
            "default/db-0: Cannot evict pod as it would violate the pod's disruption budget."
        )
        entry = op.progress.nodes[0]
        assert entry.step == "failed"
        assert entry.blocking_pods == [f"default/db-0: {BUDGET_MESSAGE}"]
        gpu = pool_of(done, "gpu")
        assert gpu is not None
        # The node is given back: schedulable again, counted again.
        assert (gpu.count, len(gpu.nodes)) == (2, 2)
        assert gpu.nodes[1].state is NodeState.JOINED
        assert f"uncordon {target}" in fake.calls
        assert fake.released == []


async def test_forced_drain_deletes_what_budgets_protect(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(
            env, task_queue, fake, pool("gpu", 2), drain_deadline=timedelta(minutes=1)
        )
        status = await run.ready()
        target = pool_of(status, "gpu").nodes[1].name
        fake.add_pods(target, pod("db-0", budget_refusals=-1))

        accepted = await run.handle.execute_update(
            ClusterWorkflow.delete_node, DeleteNodeOperation(node=target, force=True)
        )
        done = await run.until(
            lambda s: (op := s.operation(accepted.operation_id)) is not None and op.state.finished,
            what="forced drain done",
        )
        assert op_of(done, accepted.operation_id).state is OperationState.SUCCEEDED
        assert fake.deleted_pods == ["default/db-0"]
        assert pool_of(done, "gpu").count == 1


async def test_delete_node_without_drain_removes_it_at_once(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 2))
        status = await run.ready()
        target = pool_of(status, "gpu").nodes[0]
        fake.add_pods(target.name, pod("web-0", budget_refusals=-1))

        accepted = await run.handle.execute_update(
            ClusterWorkflow.delete_node, DeleteNodeOperation(node=target.host_id, drain=False)
        )
        done = await run.finished(accepted)
        assert op_of(done, accepted.operation_id).state is OperationState.SUCCEEDED
        assert f"cordon {target.name}" not in fake.calls
        assert fake.evicted == []
        assert fake.released == [target.host_id]
        assert pool_of(done, "gpu").count == 1


async def test_delete_node_pool_removes_every_node(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1), pool("cpu", 2, CPU))
        await run.ready()
        accepted = await run.handle.execute_update(
            ClusterWorkflow.delete_node_pool, DeleteNodePoolRequest(pool="cpu")
        )
        done = await run.finished(accepted)
        assert op_of(done, accepted.operation_id).state is OperationState.SUCCEEDED
        assert [p.name for p in done.node_pools] == ["gpu"]
        assert sorted(fake.released) == ["cpu-32-001", "cpu-32-002"]


# --- Delete --------------------------------------------------------------------------------------


async def test_delete_while_creating_interrupts_and_releases_everything(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    gate = fake.gate(ActivityName.AWAIT_NODES)
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 2))
        await asyncio.wait_for(gate.entered.wait(), 10)
        accepted = await run.handle.execute_update(
            ClusterWorkflow.delete_cluster, DeleteClusterRequest()
        )
        final = await run.handle.result()

        assert final.phase is ClusterPhase.DELETED
        create = final.completed_operations[0]
        assert create.state is OperationState.CANCELLED
        assert create.reason == f"interrupted: cluster '{run.name}' is being deleted"
        assert op_of(final, accepted.operation_id).state is OperationState.SUCCEEDED
        assert fake.held() == []
        assert sorted(fake.released) == ["h100-001", "h100-002"]
        assert run.name not in fake.deployments


async def test_delete_when_ready_cancels_the_queue_and_the_name_is_reusable(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    gate = fake.gate(ActivityName.AWAIT_NODES)
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1), join_deadline=timedelta(hours=1))
        await run.until(lambda s: s.phase is ClusterPhase.READY, what="ready")
        await asyncio.wait_for(gate.entered.wait(), 10)
        # The create still waits for its node; two more operations queue behind it.
        queued = await run.handle.execute_update(
            ClusterWorkflow.add_node_pool, AddNodePoolRequest(pool=pool("cpu", 1, CPU))
        )
        await run.handle.execute_update(ClusterWorkflow.delete_cluster, DeleteClusterRequest())
        again = await run.handle.execute_update(
            ClusterWorkflow.delete_cluster, DeleteClusterRequest()
        )
        final = await run.handle.result()

        assert final.phase is ClusterPhase.DELETED
        cancelled = final.operation(queued.operation_id)
        assert cancelled is not None
        assert cancelled.state is OperationState.CANCELLED
        assert cancelled.reason == f"cancelled: cluster '{run.name}' is being deleted"
        assert op_of(final, again.operation_id).state is OperationState.SUCCEEDED
        assert fake.held() == []

        # Name reuse: a new workflow with the same id starts once the old one completed.
        second = await env.client.start_workflow(
            ClusterWorkflow.run,
            ClusterWorkflowInput(spec=ClusterSpec(name=run.name, location_id="fra")),
            id=cluster_workflow_id(run.name),
            task_queue=task_queue,
        )
        _started.append(second)
        gate.opened.set()
        reused = Run(env=env, handle=second, fake=fake, name=run.name)
        assert (await reused.ready()).phase is ClusterPhase.READY
        await second.execute_update(ClusterWorkflow.delete_cluster, DeleteClusterRequest())
        assert (await second.result()).phase is ClusterPhase.DELETED


async def test_a_failed_delete_is_finished_by_repeating_it(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony(fail_delete_times=1)
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1))
        await run.ready()
        first = await run.handle.execute_update(
            ClusterWorkflow.delete_cluster, DeleteClusterRequest()
        )
        failed = await run.until(lambda s: s.phase is ClusterPhase.FAILED, what="delete failed")
        assert failed.reason == (
            "delete did not finish: delete cluster deployment: clusterdeployments is forbidden; "
            "repeat the delete to finish it"
        )
        assert op_of(failed, first.operation_id).state is OperationState.FAILED
        message = await rejected(
            run, ClusterWorkflow.add_node_pool, AddNodePoolRequest(pool=pool("cpu", 1, CPU))
        )
        assert message.startswith(f"cluster '{run.name}' failed (delete did not finish")

        await run.handle.execute_update(ClusterWorkflow.delete_cluster, DeleteClusterRequest())
        final = await run.handle.result()
        assert final.phase is ClusterPhase.DELETED
        assert fake.held() == []


# --- Continue-as-new -----------------------------------------------------------------------------


async def test_continue_as_new_carries_state_and_queue(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    # On the real (dev) server: the time-skipping test server now and then stops delivering work
    # to the new run when updates were accepted just before a continue-as-new (seen here: the new
    # run's first task completes, then even queries time out), which Temporal's server does not.
    env = dev_env
    fake = FakeColony(join_delay=2)
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1), run_events=1)
        first_run = (await run.handle.describe()).run_id
        latest = env.client.get_workflow_handle_for(ClusterWorkflow.run, run.handle.id)
        run.handle = latest
        await run.ready()

        async def run_id() -> str | None:
            return (await latest.describe()).run_id

        second_run = await eventually(
            run_id, until=lambda r: r != first_run, what="continued as new after the create"
        )
        # A holds at the join; B queues behind it, and is carried into the next run.
        gate = fake.gate(ActivityName.AWAIT_NODES)
        a = await latest.execute_update(
            ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=2)
        )
        await asyncio.wait_for(gate.entered.wait(), 10)
        b = await latest.execute_update(
            ClusterWorkflow.add_node_pool, AddNodePoolRequest(pool=pool("cpu", 1, CPU))
        )
        assert b.position == 1
        gate.opened.set()
        done = await run.finished(b)
        assert await run_id() not in (first_run, second_run)
        assert [op.id for op in done.completed_operations][-3:] == [
            "op-0001",
            a.operation_id,
            b.operation_id,
        ]
        assert pool_of(done, "gpu").count == 2
        assert pool_of(done, "cpu").ready_count == 1
        # Next operation ids continue where the last run stopped.
        c = await latest.execute_update(
            ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="cpu", count=2)
        )
        assert c.operation_id == "op-0004"
        await run.finished(c)
        await latest.execute_update(ClusterWorkflow.delete_cluster, DeleteClusterRequest())
        assert (await latest.result()).phase is ClusterPhase.DELETED
        assert fake.held() == []


async def test_gpu_holders_are_carried_across_continue_as_new(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """The ledger tells its cluster who holds GPUs once, when that changes: a continue-as-new of
    the cluster must not forget it, or a scale-down would take GPUs running workspaces hold."""
    env = dev_env
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1), run_events=1)
        first_run = (await run.handle.describe()).run_id
        run.handle = env.client.get_workflow_handle_for(ClusterWorkflow.run, run.handle.id)
        status = await run.ready()
        node = pool_of(status, "gpu").nodes[0].name
        await run.handle.signal(
            ClusterWorkflow.gpu_holders,
            GpuHoldersMessage(
                request_id="holders-1",
                holders=[GpuHolder(workspace="nb", request_id="nb/1#1", gpus=1, nodes=[node])],
            ),
        )
        refusal = await rejected(
            run, ClusterWorkflow.delete_node_pool, DeleteNodePoolRequest(pool="gpu")
        )
        assert "would take GPUs from running workspaces: nb" in refusal
        # Another operation, and the run continues as new after it.
        before = (await run.handle.describe()).run_id
        added = await run.handle.execute_update(
            ClusterWorkflow.add_node_pool, AddNodePoolRequest(pool=pool("cpu", 1, CPU))
        )
        await run.finished(added)

        async def run_id() -> str | None:
            return (await run.handle.describe()).run_id

        await eventually(
            run_id, until=lambda r: r not in (first_run, before), what="continued as new"
        )
        assert (
            await rejected(run, ClusterWorkflow.delete_node_pool, DeleteNodePoolRequest(pool="gpu"))
            == refusal
        )
