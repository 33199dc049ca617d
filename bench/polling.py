"""Waiting for what a benchmark measures: the moment a probe first holds, polled every 10 ms (a
reaction measured this way is at most a poll late)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

POLL = 0.01
"""Seconds between two looks."""


async def first_time(
    probe: Callable[[], Awaitable[bool]],
    timeout: float,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> float | None:
    """The time on `clock` when `probe` first holds, or None after `timeout` seconds (a wall
    clock, `time.time`, where the moment is compared with a history's event times)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await probe():
            return clock()
        await asyncio.sleep(POLL)
    return None
