"""One answer shared by the activities that ask the same question at the same moment.

When many workspaces are deployed at once onto one cluster, each deploy's activities ask the same
things within the same second: has the cluster's workflow finished creating it (a query that runs
the cluster workflow's `status` handler and carries its whole status), what is in its kubeconfig
Secret (a read on the management cluster). `SharedAnswers` answers every caller of a key that
asks while a look is under way with that look's answer (one request in flight per key), and
callers within `fresh_for` after it with the same answer, as if they had asked a moment earlier.
A look that fails is shared with those waiting on it, never kept.

`fresh_for` is short (a second or two), or 0 to share only answers under way: an answer is only
ever as fresh as its request anyway, and each use says why that much older is the same answer
(`activities.temporal`, `activities.child_cluster.clients`). The cache holds at most `limit`
keys, the oldest dropped first.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class SharedAnswers(Generic[T]):
    """Answers by key, shared while in flight and for `fresh_for` seconds after (see the module).

    One instance belongs to one event loop (the worker's): its callers are coroutines, never
    threads."""

    def __init__(
        self, fresh_for: float, *, limit: int = 256, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._fresh_for = fresh_for
        self._limit = limit
        self._clock = clock
        self._answers: OrderedDict[str, tuple[float, T]] = OrderedDict()
        self._looking: dict[str, asyncio.Future[T]] = {}

    async def get(
        self, key: str, look: Callable[[], Awaitable[T]], *, keep: Callable[[T], bool] = bool
    ) -> T:
        """The answer for `key`: a fresh one kept, the one being looked for, or `look()`'s.

        Args:
            keep: whether an answer may be shared with later callers (others are only shared
                with those who asked while it was looked for).
        """
        kept = self._answers.get(key)
        if kept is not None and self._clock() - kept[0] <= self._fresh_for:
            return kept[1]
        pending = self._looking.get(key)
        if pending is not None:
            try:
                return await asyncio.shield(pending)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if pending.cancelled() and task is not None and not task.cancelling():
                    # The one looking was cancelled, not this caller: look again.
                    return await self.get(key, look, keep=keep)
                raise
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._looking[key] = future
        try:
            answer = await look()
        except BaseException as error:
            if isinstance(error, Exception):
                future.set_exception(error)
                future.exception()  # retrieved: those waiting raise it, nobody else need
            else:
                future.cancel()
            raise
        finally:
            del self._looking[key]
        future.set_result(answer)
        if self._fresh_for > 0 and keep(answer):
            self._answers[key] = (self._clock(), answer)
            self._answers.move_to_end(key)
            while len(self._answers) > self._limit:
                self._answers.popitem(last=False)
        return answer

    def forget(self, key: str) -> None:
        """Drop the answer kept for `key` (the next caller looks again)."""
        self._answers.pop(key, None)
