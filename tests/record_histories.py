"""Record the ClusterWorkflow histories that `tests/test_replay.py` replays: `python -m tests.record_histories`.

Each scenario runs on a fresh time-skipping server against the `FakeColony` stand-in activities
(tests/cluster_world.py) and writes every run's history to `tests/histories/<name>.json`.
Regenerate them only on purpose: a change to the workflow that makes a committed history fail to
replay would break every workflow already running in production, so the old files are the test.
When a change is deliberately incompatible (guarded by `workflow.patched` or a new workflow
name), keep the old files and add new ones next to them.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from temporalio.api.enums.v1 import EventType, IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from models.cluster import ClusterPhase, ClusterSpec, ClusterStatus, ClusterWorkflowInput
from models.node_pool import NodePoolSpec, NodeSku
from models.operations import (
    ContinueAsNewPolicy,
    DeleteClusterRequest,
    OperationAccepted,
    OperationState,
    ScaleNodePoolRequest,
)
from tests.cluster_world import FakeColony, pod
from tests.conftest import venv_binary
from workflows.cluster.workflow import ClusterWorkflow
from workflows.search_attributes import ALL as SEARCH_ATTRIBUTES

HISTORIES = Path(__file__).parent / "histories"
GPU = NodeSku(gpu_model_id="h100")
STEP_SECONDS = 0.05
"""Real seconds between two looks at the status (the workflow has no timers to skip)."""
MAX_STEPS = 600


@dataclass
class Scenario:
    """One recorded workflow: its cluster, its world and the handle to drive it."""

    env: WorkflowEnvironment
    fake: FakeColony
    handle: WorkflowHandle[ClusterWorkflow, ClusterStatus]

    async def until(self, check: Callable[[ClusterStatus], bool], what: str) -> ClusterStatus:
        """Poll until `check(status)` holds (the status query follows continue-as-new)."""
        latest = self.env.client.get_workflow_handle_for(ClusterWorkflow.run, self.handle.id)
        for _ in range(MAX_STEPS):
            status = await latest.query(ClusterWorkflow.status)
            if check(status):
                return status
            await asyncio.sleep(STEP_SECONDS)
        raise RuntimeError(f"{self.handle.id}: {what} not reached")

    async def finished(self, accepted: OperationAccepted) -> ClusterStatus:
        def done(status: ClusterStatus) -> bool:
            op = status.operation(accepted.operation_id)
            return op is not None and op.state.finished

        return await self.until(done, f"operation {accepted.operation_id} finished")

    async def update(self, update: object, request: object) -> OperationAccepted:
        latest = self.env.client.get_workflow_handle_for(ClusterWorkflow.run, self.handle.id)
        accepted: OperationAccepted = await latest.execute_update(update, request)  # type: ignore[call-overload]
        return accepted

    async def delete(self) -> ClusterStatus:
        await self.update(ClusterWorkflow.delete_cluster, DeleteClusterRequest())
        latest = self.env.client.get_workflow_handle_for(ClusterWorkflow.run, self.handle.id)
        final = await latest.result()
        assert final.phase is ClusterPhase.DELETED, final
        return final


async def scale_and_drain(scenario: Scenario) -> None:
    """Create with a GPU pool of 2, scale to 3, scale to 2 through a drain a budget refuses
    once, delete."""
    await scenario.until(
        lambda s: s.phase is ClusterPhase.READY and not s.current_operation, "ready"
    )
    up = await scenario.update(
        ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=3)
    )
    status = await scenario.finished(up)
    gpu = status.pool("gpu")
    assert gpu is not None
    assert gpu.ready_count == 3, status
    # One budgeted pod on every node, so the newest is the one removed and its eviction is
    # refused once (429) before the budget relaxes.
    for index, node in enumerate(gpu.nodes):
        scenario.fake.add_pods(node.name, pod(f"train-{index}", budget_refusals=1))
    down = await scenario.update(
        ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=2)
    )
    status = await scenario.finished(down)
    op = status.operation(down.operation_id)
    assert op is not None
    assert op.state is OperationState.SUCCEEDED, op
    assert len(scenario.fake.evicted) == 1, scenario.fake.evicted
    await scenario.delete()


async def missing_template(scenario: Scenario) -> None:
    """A create whose ClusterTemplate does not exist fails at once; delete finishes it."""
    await scenario.until(lambda s: s.phase is ClusterPhase.FAILED, "failed")
    await scenario.delete()


async def continue_as_new(scenario: Scenario) -> None:
    """Continue-as-new after every operation: create (run 1), scale to 2 (run 2), delete (run 3)."""
    await scenario.until(
        lambda s: s.phase is ClusterPhase.READY and not s.current_operation, "ready"
    )
    up = await scenario.update(
        ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=2)
    )
    await scenario.finished(up)
    await scenario.delete()


@dataclass(frozen=True)
class Recording:
    name: str
    fake: Callable[[], FakeColony]
    drive: Callable[[Scenario], Awaitable[None]]
    count: int
    run_events: int | None = None


RECORDINGS = [
    Recording("scale_and_drain", FakeColony, scale_and_drain, count=2),
    Recording(
        "missing_template", lambda: FakeColony(template_found=False), missing_template, count=1
    ),
    Recording("continue_as_new", FakeColony, continue_as_new, count=1, run_events=1),
]


async def register_search_attributes(client: Client) -> None:
    await client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=client.namespace,
            search_attributes={
                key.name: IndexedValueType.ValueType(key.indexed_value_type.value)
                for key in SEARCH_ATTRIBUTES
            },
        )
    )


async def run_histories(client: Client, workflow_id: str, first_run_id: str) -> list[str]:
    """The JSON history of every run of the chain that starts at `first_run_id`, in order."""
    histories: list[str] = []
    run_id: str | None = first_run_id
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        histories.append(history.to_json())
        last = history.events[-1]
        run_id = None
        if last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return histories


async def record(recording: Recording) -> list[Path]:
    """Run one scenario on its own time-skipping server; write the history of each run."""
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter,
        test_server_existing_path=venv_binary("temporal-test-server"),
    )
    try:
        await register_search_attributes(env.client)
        fake = recording.fake()
        task_queue = f"record-{recording.name}"
        name = f"replay-{recording.name.replace('_', '-')}"
        async with Worker(
            env.client,
            task_queue=task_queue,
            workflows=[ClusterWorkflow],
            activities=fake.activities(),
        ):
            spec = ClusterSpec(
                name=name,
                location_id="fra",
                node_pools=[NodePoolSpec(name="gpu", sku=GPU, count=recording.count)],
            )
            handle = await env.client.start_workflow(
                ClusterWorkflow.run,
                ClusterWorkflowInput(
                    spec=spec,
                    continue_as_new=ContinueAsNewPolicy(
                        events=recording.run_events or ContinueAsNewPolicy().events
                    ),
                ),
                id=spec.workflow_id,
                task_queue=task_queue,
            )
            await recording.drive(Scenario(env=env, fake=fake, handle=handle))
            assert fake.held() == [], f"{recording.name}: hosts still held: {fake.held()}"
            assert handle.first_execution_run_id is not None
            histories = await run_histories(env.client, handle.id, handle.first_execution_run_id)
    finally:
        await env.shutdown()
    written: list[Path] = []
    for index, text in enumerate(histories, start=1):
        suffix = f"-run{index}" if len(histories) > 1 else ""
        path = HISTORIES / f"{recording.name}{suffix}.json"
        path.write_text(text + "\n")
        written.append(path)
    return written


async def main() -> int:
    HISTORIES.mkdir(exist_ok=True)
    for recording in RECORDINGS:
        for path in await record(recording):
            print(f"{path.relative_to(Path.cwd())}: {path.stat().st_size // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
