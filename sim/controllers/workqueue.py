"""SIMULATOR. The reconcile loop shared by the sim's controllers (scheduler, daemonsets, k0rdent).

Like controller-runtime, but in one asyncio task: a cluster's events (its store's, or a real API
server's watches through `sim.clusterapi`) map to keys, keys are queued once however many events
name them, and a reconcile may ask to run again after a delay (the sim's timers: "this node
registers in 1.5 s"). Reconciles are level-triggered: they read the cluster, never the event.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Collection, Hashable, Iterable
from typing import Generic, TypeVar

from sim.apiserver.store import ClusterStore, WatchEvent
from sim.clusterapi import ClusterApi, Key, cluster_api

K = TypeVar("K", bound=Hashable)

log = logging.getLogger(__name__)

# Seconds before a reconcile that raised runs again; doubled per failure up to the cap, as
# controller-runtime's rate limiter does (5 ms .. 1000 s there; the sim's world is smaller).
ERROR_BACKOFF_START = 0.05
ERROR_BACKOFF_CAP = 5.0


class WorkQueue(Generic[K]):
    """Deduplicating queue of keys with delayed re-adds (asyncio only, no threads)."""

    def __init__(self) -> None:
        self._ready: dict[K, None] = {}
        self._timers: dict[K, tuple[float, asyncio.TimerHandle]] = {}
        self._wake = asyncio.Event()

    def add(self, key: K) -> None:
        """Queue `key` now (a no-op if it is already queued)."""
        self._ready[key] = None
        self._wake.set()

    def add_after(self, key: K, delay: float) -> None:
        """Queue `key` after `delay` seconds; an earlier pending timer for the key wins."""
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        pending = self._timers.get(key)
        if pending is not None:
            if pending[0] <= due:
                return
            pending[1].cancel()
        self._timers[key] = (due, loop.call_later(delay, self._fire, key))

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    async def get(self) -> K:
        """The next queued key, waiting for one."""
        while not self._ready:
            self._wake.clear()
            await self._wake.wait()
        key = next(iter(self._ready))
        del self._ready[key]
        return key

    def close(self) -> None:
        """Cancel pending timers."""
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()


class ReconcileLoop(Generic[K]):
    """Runs `reconcile(key)` for every key `keys_for(event)` yields, plus initial keys and timers.

    Args:
        cluster: the cluster whose events drive the loop (a store is its own API).
        name: for logs.
        keys_for: maps one event to the keys it concerns (often none); may be a coroutine.
        reconcile: does the work for one key; returns seconds until it wants to run again, or None.
        initial_keys: keys to reconcile once at start (objects that existed before the loop ran);
            may be a coroutine.
        watched: the (group, plural) of every type `keys_for` looks at: a real API server is
            watched for those (the store delivers every event anyway).
    """

    def __init__(
        self,
        cluster: ClusterStore | ClusterApi,
        name: str,
        keys_for: Callable[[WatchEvent], Iterable[K] | Awaitable[Iterable[K]]],
        reconcile: Callable[[K], Awaitable[float | None]],
        initial_keys: Callable[[], Iterable[K] | Awaitable[Iterable[K]]] = lambda: (),
        *,
        watched: Collection[Key] = (),
    ) -> None:
        self.api = cluster_api(cluster)
        self.name = name
        self.watched = watched
        self.queue: WorkQueue[K] = WorkQueue()
        self._keys_for = keys_for
        self._reconcile = reconcile
        self._initial_keys = initial_keys
        self._failures: dict[K, int] = {}

    async def run(self) -> None:
        """Consume events and reconcile until cancelled."""
        events = await self.api.subscribe(self.watched)
        feeder = asyncio.create_task(self._feed(events), name=f"{self.name}-events")
        try:
            initial = self._initial_keys()
            for key in await initial if inspect.isawaitable(initial) else initial:
                self.queue.add(key)
            while True:
                key = await self.queue.get()
                await self._run_one(key)
        finally:
            feeder.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feeder
            self.api.unsubscribe(events)
            self.queue.close()

    async def _feed(self, events: asyncio.Queue[WatchEvent]) -> None:
        while True:
            event = await events.get()
            try:
                keys = self._keys_for(event)
                for key in await keys if inspect.isawaitable(keys) else keys:
                    self.queue.add(key)
            except Exception:
                log.exception("%s: mapping event %s failed", self.name, event.type)

    async def _run_one(self, key: K) -> None:
        try:
            again = await self._reconcile(key)
        except asyncio.CancelledError:
            raise
        except Exception:
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
            backoff = min(ERROR_BACKOFF_START * 2 ** (failures - 1), ERROR_BACKOFF_CAP)
            log.exception("%s: reconcile of %r failed (retry in %.2fs)", self.name, key, backoff)
            self.queue.add_after(key, backoff)
            return
        self._failures.pop(key, None)
        if again is not None:
            self.queue.add_after(key, again)
