"""A request already sent is never abandoned: `finish` awaits it to its end even when the caller is
cancelled meanwhile, then lets the cancellation go on.

Why: an activity cancelled by its workflow (a delete jumping the queue, an operation cancelled)
must not leave a request in flight whose effect lands after the workflow was told the activity
stopped, when its clean-up sweep has already looked. Used around every Kubernetes call
(`infra.kube.request`) and host-provider request (`activities.host_provider`); each request's own
timeout bounds how long a cancellation waits.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def finish(request: Awaitable[T]) -> T:
    """The result of `request`; when cancelled, the request is awaited to its end (its outcome
    dropped) before `asyncio.CancelledError` is raised."""
    running = asyncio.ensure_future(request)
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await running
        raise
