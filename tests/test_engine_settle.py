"""`settle()` outside a workflow's normal run: the clean-up of a coroutine being closed.

A workflow left to the garbage collector (a worker stopped with workflows cached, sdk-python
#494) has its coroutines closed: `finally` blocks run on the way out of GeneratorExit, possibly
while another workflow's loop runs. A `settle()` there must run nothing and let the close finish,
or Python reports "coroutine ignored GeneratorExit" and the clean-up could act for the wrong run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from datetime import UTC, datetime
from typing import Any

import pytest

from models.operations import (
    ContinueAsNewPolicy,
    CreateClusterRequest,
    Operation,
    OperationBook,
)
from workflows.kit import engine
from workflows.kit.engine import EntityEngine, settle
from workflows.kit.run_limit import RunLimit


class Suspend:
    """An awaitable that suspends its coroutine once (as a workflow waiting on a timer)."""

    def __await__(self) -> Generator[Any, None, None]:
        yield self


async def test_a_coroutine_closed_while_another_loop_runs_runs_no_clean_up() -> None:
    ran: list[str] = []

    async def clean_up() -> None:
        ran.append("clean-up")

    async def operation() -> None:
        try:
            await Suspend()
        finally:
            await settle(clean_up())

    coroutine = operation()
    coroutine.send(None)
    coroutine.close()  # raises "coroutine ignored GeneratorExit" if the finally suspends

    assert ran == []


async def test_an_interrupted_operation_still_runs_its_clean_up() -> None:
    ran: list[str] = []

    async def clean_up() -> None:
        ran.append("clean-up")

    async def operation() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await settle(clean_up())

    task = asyncio.create_task(operation())
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

    assert ran == ["clean-up"]


async def test_a_run_closed_while_its_operation_is_in_flight_lets_the_close_finish(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An evicted workflow's coroutines are closed by the garbage collector: the engine's run of
    an operation, suspended on the operation's task, receives GeneratorExit while that task is not
    done, and must let it through (reading the task's outcome raised `InvalidStateError:
    Exception is not set`)."""
    monkeypatch.setattr(engine.workflow, "now", lambda: datetime.now(UTC))
    monkeypatch.setattr(engine.workflow, "set_current_details", lambda details: None)
    runner: EntityEngine[Operation] = EntityEngine(
        OperationBook(), [], [], limit=RunLimit(ContinueAsNewPolicy()), headline=lambda: ["probe"]
    )
    operation = Operation(id="op-0001", request=CreateClusterRequest())

    async def execute(_: Operation) -> None:
        await asyncio.sleep(3600)

    coroutine = runner._run(operation, execute, lambda running: False)
    coroutine.send(None)  # suspended on the operation's task, as a workflow waiting on it
    in_flight = runner._task
    assert in_flight is not None
    await asyncio.sleep(0)  # the operation starts
    assert not in_flight.done()
    coroutine.close()  # raised InvalidStateError instead of finishing the close
    in_flight.cancel()
    await asyncio.gather(in_flight, return_exceptions=True)
