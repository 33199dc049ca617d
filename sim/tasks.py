"""Ending a simulator part's background tasks, written once for every part that keeps some."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable


async def cancel_and_wait(tasks: Iterable[asyncio.Task[object]]) -> None:
    """Cancel the tasks, then wait until each has ended (its cancellation is not an error)."""
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
