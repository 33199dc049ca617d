"""`settle()` outside a workflow's normal run: the clean-up of a coroutine being closed.

A workflow left to the garbage collector (a worker stopped with workflows cached, sdk-python
#494) has its coroutines closed: `finally` blocks run on the way out of GeneratorExit, possibly
while another workflow's loop runs. A `settle()` there must run nothing and let the close finish,
or Python reports "coroutine ignored GeneratorExit" and the clean-up could act for the wrong run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

from workflows.engine import settle


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
