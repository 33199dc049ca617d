"""What every entity client has, whichever transport it goes through: the workflow it names, the
idempotency key of one request, and following a status until it settles.

Imported by both transports (`clients.temporal`, `clients.http`) and the entity
modules; no Temporal, no httpx here.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from clients.errors import NotFoundError

POLL_SECONDS = 0.5
"""How often a follower (`--wait`) asks for a status: cheap (a query, or a GET), and fast enough
to see readyCount rise node by node."""
WATCH_SECONDS = 1.0
"""How often `cluster get -w` asks; a query costs the workflow's history nothing."""

StatusT = TypeVar("StatusT")


def not_found(noun: str, name: str) -> NotFoundError:
    """`cluster: cluster 'x' not found`: an entity that does not exist (or not for the caller)."""
    return NotFoundError(f"{noun}: {noun} '{name}' not found")


def new_request_id() -> str:
    """A fresh idempotency key (the update id of one command)."""
    return str(uuid.uuid4())


@dataclass(frozen=True)
class WorkflowRef:
    """A workflow as a command shows it: its id, and its Web UI page (empty when unknown)."""

    workflow_id: str
    link: str = ""


class Deadline:
    """When a follower gives up: `seconds` from now, or never (None)."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self._at = None if seconds is None else time.monotonic() + seconds

    def passed(self) -> bool:
        return self._at is not None and time.monotonic() > self._at


async def polled(
    read: Callable[[], Awaitable[StatusT | None]],
    *,
    first: StatusT | None = None,
    interval: float = POLL_SECONDS,
) -> AsyncIterator[StatusT]:
    """Each status `read` gives, `interval` seconds apart, until it gives None: the one loop
    behind `--wait` and `cluster get -w`, on either transport. The consumer decides when it has
    what it waits for (and checks its `Deadline` between statuses).

    Args:
        read: the status now, or the final one once the workflow has ended; None once it has
            ended without one (or, through the API, is gone).
        first: a status already read, yielded before the first wait.
    """
    status = first if first is not None else await read()
    while status is not None:
        yield status
        await asyncio.sleep(interval)
        status = await read()
