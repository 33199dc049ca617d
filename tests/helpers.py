"""Test helpers: polling with a deadline (never bare sleeps) and unique names per test."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def unique(prefix: str) -> str:
    """A name no other test uses: task queues, workflow ids, cluster names."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def eventually(
    probe: Callable[[], Awaitable[T]],
    *,
    until: Callable[[T], bool] = bool,
    timeout: float = 30.0,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """Poll `probe` until `until(result)` holds; fail with the last result once `timeout` passes."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = await probe()
        if until(last):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s; last value: {last!r}")
        await asyncio.sleep(interval)


def eventually_sync(
    probe: Callable[[], T],
    *,
    until: Callable[[T], bool] = bool,
    timeout: float = 30.0,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """Blocking twin of `eventually` for tests that drive blocking clients."""
    deadline = time.monotonic() + timeout
    while True:
        last = probe()
        if until(last):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s; last value: {last!r}")
        time.sleep(interval)
