"""ClusterWorkflow's template pool (`workflows/cluster/supply.py`) on the time-skipping server, with
stand-in activities (`tests/cluster_world.py`: a Cluster API MachineDeployment in memory that
deletes Machines by CAPI's priority and holds those with Colony's pre-drain hook).

The order is what makes a scale-down safe, so the tests read it from the calls: the Machines are
marked before anything else, drained by Colony, and only then is `workersNumber` lowered and the
hook taken off; a drain that fails unmarks and uncordons, and nothing is lowered.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from temporalio.testing import WorkflowEnvironment

from models.activity_api import ActivityName
from models.node_pool import PoolSupply
from models.operations import OperationState, ScaleNodePoolRequest
from models.templates import TemplatePool
from tests.cluster_world import FakeColony, pod, pool_of, start, worker
from workflows.cluster.workflow import ClusterWorkflow

pytestmark = pytest.mark.slow

SPEC = {
    "template": "aws-standalone-cp-1-0-43",
    "credential": "aws-credential",
    "config": {"workersNumber": 2, "worker": {"instanceType": "g6e.xlarge"}},
}
SCALE, MARK = ActivityName.SCALE_MACHINE_DEPLOYMENT, ActivityName.MARK_MACHINES


@pytest.fixture
def env(time_env: WorkflowEnvironment) -> WorkflowEnvironment:
    return time_env


def machine_calls(fake: FakeColony) -> list[str]:
    return [c for c in fake.calls if c.startswith((SCALE, MARK))]


async def test_a_template_pool_grows_and_shrinks_through_its_machines(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony(template_pool=TemplatePool(instance_type="g6e.xlarge", count=2))
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, deployment_spec=SPEC)
        status = await run.ready()
        workers = pool_of(status, "workers")
        assert (workers.supply, workers.sku.instance_type) == (
            PoolSupply.MACHINE_DEPLOYMENT, "g6e.xlarge"
        )  # fmt: skip
        assert (workers.count, workers.ready_count, workers.workers_number) == (2, 2, 2)

        grown = await run.finished(
            await run.handle.execute_update(
                ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="workers", count=3)
            )
        )
        assert pool_of(grown, "workers").ready_count == 3
        assert fake.labels["md-002"]["colony.dev/node-pool"] == "workers"
        assert fake.labels["md-002"]["colony.dev/sku"] == "g6e.xlarge"

        # The most loaded node stays; the other two are drained by Colony.
        fake.add_pods("md-000", pod("a"), pod("b"), pod("c"))
        fake.add_pods("md-001", pod("d"))
        fake.add_pods("md-002", pod("e"))
        fake.calls.clear()
        shrunk = await run.finished(
            await run.handle.execute_update(
                ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="workers", count=1)
            )
        )
        op = shrunk.completed_operations[-1]
        assert op.state is OperationState.SUCCEEDED, op
        assert [n.name for n in pool_of(shrunk, "workers").nodes] == ["md-000"]
        assert machine_calls(fake) == [
            f"{MARK}:mark:md-001,md-002",
            f"{SCALE}:1",
            f"{MARK}:hook-off:md-001,md-002",
            f"{MARK}:hook-off:md-001,md-002",
        ]
        assert sorted(fake.gone_machines) == ["md-001", "md-002"]
        assert sorted(fake.evicted) == ["default/d", "default/e"]
        assert fake.capi_drained == [], "Cluster API's drain found what Colony left"
        assert fake.cordoned() == []


async def test_a_failed_drain_unmarks_and_lowers_nothing(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony(template_pool=TemplatePool(instance_type="g6e.xlarge", count=2))
    async with worker(env, task_queue, fake):
        run = await start(
            env, task_queue, fake, deployment_spec=SPEC, drain_deadline=timedelta(minutes=5)
        )
        await run.ready()
        fake.add_pods("md-000", pod("a"), pod("b"))
        fake.add_pods("md-001", pod("db", budget_refusals=-1))
        fake.calls.clear()
        failed = await run.finished(
            await run.handle.execute_update(
                ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="workers", count=1)
            )
        )
        op = failed.completed_operations[-1]
        assert op.state is OperationState.FAILED
        assert "drain did not finish within 5m" in op.reason
        assert machine_calls(fake) == [f"{MARK}:mark:md-001", f"{MARK}:unmark:md-001"]
        assert fake.workers == 2
        assert fake.gone_machines == []
        assert fake.cordoned() == []
        workers = pool_of(failed, "workers")
        assert (workers.count, len(workers.nodes), workers.workers_number) == (2, 2, 2)
