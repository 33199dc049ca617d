"""How Colony's long-running processes start and end: `worker.py` and `watcher.py` log the same way
and read the same settings; an incomplete configuration ends them with one line saying what to
set and exit status 2, a Temporal out of reach at start with one line saying where and why
(`temporal: cannot reach <address>: connection refused`) and exit status 1.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from infra.config import ColonySettings, SettingsError
from infra.unreachable import temporal_unreachable

T = TypeVar("T")

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
SETTINGS_EXIT_STATUS = 2
"""The exit status of a process whose settings are incomplete or unreadable."""
UNREACHABLE_EXIT_STATUS = 1
"""The exit status of a process that could not reach Temporal at start (a supervisor restarts it)."""


class TemporalUnreachable(Exception):
    """Temporal could not be reached at start; the message is one line
    (`infra.unreachable.temporal_unreachable`)."""


def configure_logging() -> None:
    """INFO to stderr, with time, level and logger name."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    # One line per host-provider or API-server request is noise at INFO (URLs are all it shows).
    logging.getLogger("httpx").setLevel(logging.WARNING)


def run_service(
    run: Callable[[ColonySettings], Coroutine[Any, Any, None]], log: logging.Logger
) -> int:
    """Run `run` with the settings read from the environment until it returns; the exit status."""
    try:
        asyncio.run(run(ColonySettings.from_env()))
    except SettingsError as exc:
        log.error("%s", exc)
        return SETTINGS_EXIT_STATUS
    except TemporalUnreachable as exc:
        log.error("%s", exc)
        # Ended here, without the interpreter's teardown: the SDK's core threads, left by the
        # failed connect, may take the GIL while it finalizes, and the process then aborts with
        # "Fatal Python error: PyGILState_Release" (temporalio/sdk-python#300) after our line.
        logging.shutdown()
        os._exit(UNREACHABLE_EXIT_STATUS)
    return 0


async def reach_temporal(address: str, connect: Callable[[], Awaitable[T]]) -> T:
    """What `connect()` (the process's `Client.connect`) returns.

    Raises:
        TemporalUnreachable: Temporal at `address` could not be reached (one line; the SDK's
            error, a `RuntimeError`, is its cause).
    """
    try:
        return await connect()
    except RuntimeError as exc:
        raise TemporalUnreachable(temporal_unreachable(address, exc)) from exc
