"""How Colony's long-running processes start and end: `worker.py` and `watcher.py` log the same way
and read the same settings, and an incomplete configuration ends them with one line saying what to
set and exit status 2.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from infra.config import ColonySettings, SettingsError

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
SETTINGS_EXIT_STATUS = 2
"""The exit status of a process whose settings are incomplete or unreadable."""


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
    return 0
