"""The Temporal ceiling's workflow: a trivial entity with a given number of no-op activity calls.

`CeilingWorkflow` stands beside a workspace in `bench.throughput`: it calls the no-op activity
`before` times one after the other (a workspace's deploy), shows the phase `Running` in the same
search attribute a workspace does, waits for a `delete` update (as a workspace's delete arrives),
then calls the activity `after` times (its delete) and ends. Same client, server and worker
process as Colony's workflows (`bench.ceiling`), nothing else: what is left of a workspace's time
is Colony's own work, the simulator's and the extra events Colony's histories hold.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel

    from workflows.kit.contract import Update, WorkflowContract
    from workflows.search_attributes import COLONY_KIND, COLONY_PHASE

KIND = "bench-ceiling"
"""Its `ColonyKind`, so the benchmark lists its phases as it lists workspaces'."""
NOOP = "bench_noop"


class CeilingInput(BaseModel):
    before: int
    """Activity calls before `Running` (a workspace's deploy)."""
    after: int
    """Activity calls after the `delete` update (a workspace's delete)."""


class CeilingResult(BaseModel):
    calls: int
    """Activity calls made, before and after the delete."""


class CeilingDeleteRequest(BaseModel):
    """The `delete` update's request (a workspace's carries its reason)."""

    reason: str = ""


class CeilingDeleteAccepted(BaseModel):
    accepted: bool = True


class CeilingContract(WorkflowContract[CeilingInput, CeilingResult, [str, int]]):
    """The ceiling workflow's one update, declared as an entity's are (`workflows.kit.contract`)."""

    delete = Update("delete", CeilingDeleteRequest, CeilingDeleteAccepted)


CEILING = CeilingContract(
    "BenchCeiling",
    CeilingInput,
    CeilingResult,
    workflow_id=lambda wave, index: f"ceiling/{wave}-{index:04d}",
)


class NoopRequest(BaseModel):
    step: int


@activity.defn(name=NOOP)
async def noop(request: NoopRequest) -> int:
    """Does nothing: the cost of an activity call is all that is left."""
    return request.step


@workflow.defn(name=CEILING.workflow_type)
class CeilingWorkflow:
    """See the module docstring."""

    def __init__(self) -> None:
        self._deleting = False

    @workflow.run
    async def run(self, input: CeilingInput) -> CeilingResult:
        await self._calls(0, input.before)
        workflow.upsert_search_attributes(
            [COLONY_KIND.value_set(KIND), COLONY_PHASE.value_set("Running")]
        )
        await workflow.wait_condition(lambda: self._deleting)
        await self._calls(input.before, input.after)
        return CeilingResult(calls=input.before + input.after)

    async def _calls(self, first: int, count: int) -> None:
        for step in range(first, first + count):
            await workflow.execute_activity(
                noop,
                NoopRequest(step=step),
                start_to_close_timeout=timedelta(seconds=60),
                retry_policy=RetryPolicy(maximum_attempts=3),
            )

    @workflow.update(name=CEILING.delete.name)
    def delete(self, request: CeilingDeleteRequest) -> CeilingDeleteAccepted:
        self._deleting = True
        return CeilingDeleteAccepted()
