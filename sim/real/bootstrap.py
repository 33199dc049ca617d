"""SIMULATOR. Bringing a real cluster of the real world into shape: its CRDs installed and served,
blocking starts and stops (the control planes') run off the event loop.

Used by `sim.real.world` (the management cluster) and `sim.real.child` (the child clusters).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from typing import Any, TypeVar

from sim.apiserver.errors import ApiError
from sim.apiserver.registry import CRDS
from sim.clusterapi import ClusterApi

log = logging.getLogger(__name__)

T = TypeVar("T")

CRDS_SERVED_TIMEOUT = 120.0
"""Seconds for new CRDs to be established (seconds alone; more on two loaded cores)."""


async def blocking(executor: Executor, start: Callable[[], T], undo: Callable[[T], None]) -> T:
    """`start()` in `executor`; if the caller is cancelled meanwhile, what it started is undone
    (`undo(result)`, in a thread of its own) once it is done: a control plane started for a
    ClusterDeployment deleted during its start is stopped, not left running."""
    future = asyncio.get_running_loop().run_in_executor(executor, start)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:

        def settle(done: asyncio.Future[T]) -> None:
            if not done.cancelled() and done.exception() is None:
                log.info("a start cancelled meanwhile is done: undoing what it started")
                threading.Thread(target=undo, args=(done.result(),), daemon=True).start()

        future.add_done_callback(settle)
        raise


async def ensure_crds(
    api: ClusterApi, crds: Iterable[dict[str, Any]], *, timeout: float = CRDS_SERVED_TIMEOUT
) -> None:
    """Create the CRDs the cluster lacks (one it has is left as it is) and return once every one
    is Established and known to `api.registry`."""
    names: list[str] = []
    for crd in crds:
        names.append(crd["metadata"]["name"])
        with contextlib.suppress(_AlreadyExists):
            await _create(api, crd)
    deadline = time.monotonic() + timeout
    pending = list(names)
    while pending:
        found = [await api.get(CRDS, None, name) for name in pending]
        pending = [c["metadata"]["name"] for c in found if not _served(api, c)]
        if pending and time.monotonic() > deadline:
            raise TimeoutError(f"CRDs not established within {timeout}s: {', '.join(pending)}")
        if pending:
            await asyncio.sleep(0.1)


class _AlreadyExists(Exception):
    pass


async def _create(api: ClusterApi, crd: dict[str, Any]) -> None:
    try:
        await api.create(CRDS, crd)
    except ApiError as error:
        if error.code == 409:
            raise _AlreadyExists from error
        raise


def _served(api: ClusterApi, crd: dict[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    established = any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)  # fmt: skip
    spec = crd.get("spec") or {}
    known = api.registry.try_get(spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
    return established and known is not None
