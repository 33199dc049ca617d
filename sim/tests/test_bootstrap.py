"""A blocking start (a control plane's, seconds long) whose caller is cancelled meanwhile is
undone once it is done: nothing it started is left running (`sim.real.bootstrap.blocking`)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from sim.real.bootstrap import blocking
from tests.helpers import eventually


async def test_a_start_whose_caller_is_cancelled_is_undone_once_done() -> None:
    release = threading.Event()
    undone: list[str] = []

    def start() -> str:
        release.wait(10)
        return "control plane"

    with ThreadPoolExecutor(1) as executor:
        task = asyncio.create_task(blocking(executor, start, undone.append))
        await asyncio.sleep(0.05)  # the start is under way in its thread
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert undone == [], "nothing to undo before the start is done"
        release.set()
        await eventually(lambda: asyncio.sleep(0, undone), until=bool, what="the start undone")
    assert undone == ["control plane"]


async def test_a_start_that_completes_is_the_callers() -> None:
    undone: list[str] = []
    with ThreadPoolExecutor(1) as executor:
        assert await blocking(executor, lambda: "control plane", undone.append) == "control plane"
    assert undone == []
