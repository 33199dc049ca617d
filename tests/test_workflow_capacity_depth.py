"""`CapacityLedgerWorkflow` with thousands waiting, on the time-skipping server (and the dev server
where noted): a release costs
the ledger the same few events at any depth, waiters hear nothing until they are admitted, runs
stay far under 10,000 events and continue as new between any two messages without losing one.

The waiting workspaces are stand-ins (`LineWaiter`: it only records what the ledger tells it) for
the ones the test watches; the rest of the line has reply addresses no workflow answers to, so a
message the ledger should not send would show (it would fail, and release that request)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from models.capacity import (
    CapacityAnswer,
    CapacityLedger,
    CapacityLedgerState,
    CapacityRequest,
    Decision,
    GpuNode,
    GpuSelector,
)
from models.operations import ContinueAsNewPolicy
from models.workspace_api import (
    CapacityAnswers,
    CapacityAnswersQuery,
    CapacityLedgerInput,
    CapacityMessage,
    CapacityMessageKind,
    CapacityWorkflowState,
    GpuHoldersMessage,
)
from models.workspace_class import GPU_MODEL_LABEL, GpuVendor
from tests.helpers import eventually, unique
from workflows.capacity import CAPACITY
from workflows.capacity.workflow import CapacityLedgerWorkflow
from workflows.cluster import CLUSTER
from workflows.workspace import WORKSPACE

DEPTH = 3_000
HOLDERS = 10
"""Ten 8-GPU holders on one 80-GPU node: ten releases in a burst admit ten waiters."""
WATCHED_HEADS = 25
"""Waiters at the front that the test releases its way through (stand-in workflows)."""
WATCHED_TAIL = 2
"""Waiters at the back whose histories must not grow while the line moves."""
EVENTS_PER_RELEASE_AT_MOST = 15


@workflow.defn(sandboxed=False)
class LineWaiter:
    """Stands in for a workspace (answers) or a cluster (holders): records what it is told."""

    def __init__(self) -> None:
        self._answers: list[CapacityAnswer] = []
        self._holders = 0

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal(name=WORKSPACE.capacity_answer.name)
    def capacity_answer(self, answer: CapacityAnswer) -> None:
        self._answers.append(answer)

    @workflow.signal(name=CLUSTER.gpu_holders.name)
    def gpu_holders(self, message: GpuHoldersMessage) -> None:
        self._holders += 1

    @workflow.query
    def answers(self) -> list[CapacityAnswer]:
        return self._answers


@pytest.fixture
async def env(time_env: WorkflowEnvironment) -> WorkflowEnvironment:
    return time_env


def request(rid: str, workspace: str) -> CapacityRequest:
    return CapacityRequest(
        request_id=rid,
        workspace=workspace,
        replicas=1,
        gpus_per_replica=8,
        selector=GpuSelector(labels={GPU_MODEL_LABEL: "H100"}),
    )


def deep_line(cluster: str, reply: dict[int, str]) -> CapacityLedgerState:
    """HOLDERS holders and DEPTH waiting, each answered at `reply[i]` (else nobody)."""
    ledger = CapacityLedger(CapacityLedgerState(cluster=cluster))
    ledger.refresh_inventory(
        [GpuNode(name="gpu-1", model="H100", vendor=GpuVendor.NVIDIA, allocatable=8 * HOLDERS)]
    )
    for index in range(HOLDERS + DEPTH):
        ledger.request(
            request(f"r{index}", f"ws-{index}"), reply_to=reply.get(index, f"nobody/{index}")
        )
    return ledger.snapshot()


async def quiet_length(handle: WorkflowHandle[Any, Any]) -> int:
    """A workflow's history length once it has nothing in flight (no task pending, no change
    within 0.3 s)."""

    async def settled() -> tuple[int, bool]:
        first = (await handle.describe()).history_length
        await asyncio.sleep(0.3)
        described = await handle.describe()
        info = described.raw_description
        idle = not info.pending_workflow_task.ByteSize() and not info.pending_activities
        return described.history_length, idle and described.history_length == first

    length, _ = await eventually(settled, until=lambda seen: seen[1], what="ledger quiet")
    return length


@contextlib.asynccontextmanager
async def line(
    env: WorkflowEnvironment, task_queue: str, run_events: int = 4_000
) -> AsyncIterator[tuple[WorkflowHandle[Any, Any], dict[int, WorkflowHandle[Any, Any]]]]:
    cluster = unique("deep")
    watched = [*range(WATCHED_HEADS), *range(HOLDERS + DEPTH - WATCHED_TAIL, HOLDERS + DEPTH)]
    async with Worker(
        env.client,
        task_queue=task_queue,
        workflows=[CapacityLedgerWorkflow, LineWaiter],
    ):
        waiters = {
            index: await env.client.start_workflow(
                LineWaiter.run, id=f"waiter/{cluster}/{index}", task_queue=task_queue
            )
            for index in watched
        }
        listener = await env.client.start_workflow(
            LineWaiter.run, id=f"cluster/{cluster}", task_queue=task_queue
        )
        state = deep_line(cluster, {index: handle.id for index, handle in waiters.items()})
        ledger = await env.client.start_workflow(
            CapacityLedgerWorkflow.run,
            CapacityLedgerInput(
                cluster=cluster,
                cluster_workflow_id=listener.id,
                state=CapacityWorkflowState(ledger=state, inventory_loaded=True),
                continue_as_new=ContinueAsNewPolicy(events=run_events),
            ),
            id=f"capacity/{cluster}",
            task_queue=task_queue,
        )
        try:
            # Not bound to the first run: messages and queries go to whichever run is current.
            yield env.client.get_workflow_handle(ledger.id), waiters
        finally:
            for handle in [ledger, listener, *waiters.values()]:
                with contextlib.suppress(Exception):
                    await handle.terminate(reason="test finished")


async def release(ledger: WorkflowHandle[Any, Any], index: int) -> None:
    await ledger.signal(
        CAPACITY.capacity.name,
        CapacityMessage(
            request_id=f"r{index}/release",
            kind=CapacityMessageKind.RELEASE,
            target=f"r{index}",
            reason="deleted",
        ),
    )


async def admitted(waiter: WorkflowHandle[Any, Any]) -> CapacityAnswer:
    async def last() -> list[CapacityAnswer]:
        answers: list[CapacityAnswer] = await waiter.query(LineWaiter.answers)
        return answers

    told = await eventually(last, until=bool, timeout=30, what=f"{waiter.id} admitted")
    assert [a.decision for a in told] == [Decision.ADMITTED], "told once, when admitted"
    return told[0]


async def position(ledger: WorkflowHandle[Any, Any], index: int) -> int:
    found: CapacityAnswers = await ledger.query(
        CAPACITY.answers.name,
        CapacityAnswersQuery(request_ids=[f"r{index}"]),
        result_type=CapacityAnswers,
    )
    return found.answers[0].position


async def test_a_release_costs_the_same_few_events_with_thousands_waiting(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    async with line(env, task_queue) as (ledger, waiters):
        tail = [waiters[i] for i in range(HOLDERS + DEPTH - WATCHED_TAIL, HOLDERS + DEPTH)]
        tail_events = [await quiet_length(w) for w in tail]
        assert await position(ledger, HOLDERS + DEPTH - 1) == DEPTH
        costs = []
        before = await quiet_length(ledger)
        for step in range(WATCHED_HEADS - HOLDERS):
            await release(ledger, step)
            await admitted(waiters[HOLDERS + step])
            after = await quiet_length(ledger)
            costs.append(after - before)
            before = after
        print(f"\nledger events per release with {DEPTH} waiting: {costs}")
        # 11 or 14: the two signals' results come back in one workflow task or in two.
        assert max(costs) <= EVENTS_PER_RELEASE_AT_MOST
        moved = WATCHED_HEADS - HOLDERS
        assert await position(ledger, HOLDERS + DEPTH - 1) == DEPTH - moved, "exact when asked"
        assert [await quiet_length(w) for w in tail] == tail_events, (
            "waiters hear nothing while the line moves"
        )


def carried_inboxes(history: Any) -> list[int]:
    """The number of unhandled messages each continue-as-new of a history carried."""
    carried = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            payload = event.workflow_execution_continued_as_new_event_attributes.input.payloads[0]
            carried.append(len(json.loads(payload.data)["state"]["inbox"]["pending"]))
    return carried


async def test_runs_continue_as_new_between_messages_and_stay_small(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """A burst of releases and new requests into a run that must continue as new in the middle
    of it: every message is handled once, in order, in whichever run, and runs stay small.

    On the dev server: the time-skipping server sometimes answers the continue-as-new of a task
    that new signals raced with "workflow execution already completed" without recording it,
    which leaves the run stuck; a real server rejects such a completion and schedules a new
    task, which is what the ledger relies on."""
    env = dev_env
    run_events = 150
    async with line(env, task_queue, run_events=run_events) as (ledger, waiters):
        burst = 150
        for index in range(HOLDERS):
            await release(ledger, index)  # ten releases at once: ten admitted
        for extra in range(burst):
            await ledger.signal(
                CAPACITY.capacity.name,
                CapacityMessage(
                    request_id=f"late-{extra}",
                    kind=CapacityMessageKind.REQUEST,
                    request=request(f"late-{extra}", f"late-{extra}"),
                ),
            )
        for index in range(HOLDERS, 2 * HOLDERS):
            await admitted(waiters[index])
        await eventually(
            lambda: position(ledger, HOLDERS + DEPTH - 1),
            until=lambda p: p == DEPTH - HOLDERS,
            what="the line moved up by ten",
        )
        found: CapacityAnswers = await ledger.query(
            CAPACITY.answers.name,
            CapacityAnswersQuery(request_ids=[f"late-{burst - 1}"]),
            result_type=CapacityAnswers,
        )
        assert found.answers[0].position == DEPTH - HOLDERS + burst, "the late ones at the back"
        runs = []
        async for run in ledger_runs(env, ledger.id):
            runs.append(len(run.events))
        print(f"\nrun lengths: {runs}")
        assert len(runs) > 1
        # A run ends at its first message past the limit, once its signals are settled; messages
        # arriving meanwhile still land in it (one event each), and no more.
        assert max(runs) < run_events + HOLDERS + burst + 100
        history = [h async for h in ledger_runs(env, ledger.id)]
        carried = [n for h in history for n in carried_inboxes(h)]
        print(f"messages carried across continue-as-new: {carried}")
        assert any(carried), "some run ended with messages still to handle, which went along"


async def ledger_runs(env: WorkflowEnvironment, workflow_id: str) -> AsyncIterator[Any]:
    """Every run's history of a workflow, first run first."""
    first = await env.client.get_workflow_handle(workflow_id).describe()
    run_id: str | None = first.raw_description.workflow_execution_info.first_run_id or None
    while run_id:
        history = await env.client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        yield history
        run_id = None
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                run_id = (
                    event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
                )
