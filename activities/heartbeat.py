"""Heartbeats for every activity, and the progress long waits report through them.

`@heartbeating` (under `@activity.defn`) runs a beat every `BEAT_EVERY` seconds for as long as the
activity runs, so that:
- a worker killed mid-activity is noticed within the heartbeat timeout the workflows set
  (`workflows.kit.activity.HEARTBEAT`, 10 s) and the attempt is retried elsewhere at once,
  instead of after its whole start-to-close;
- a cancel requested by the workflow reaches the activity (Temporal delivers cancellation with
  the answer to a heartbeat), so an interrupted operation's waits stop within seconds.

A wait reports its progress with `report(details)`: the model becomes the heartbeat's details,
which the Web UI shows under the workflow's pending activities and `colonyctl` merges into status,
and which the next attempt reads back with `previous_details(...)` after a crash. Details the next
attempt must find whatever happens (a record of what the activity is about to do) go through
`write_ahead(details)`, which returns once Temporal has them.

This is the pattern of samples-python's `custom_decorator` (auto-heartbeater), with progress.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import activity

BEAT_EVERY = 2.0
"""Seconds between heartbeats: well inside the workflows' 10 s heartbeat timeout."""
HEARTBEAT_THROTTLE = timedelta(seconds=2)
"""The longest the SDK holds back a heartbeat: `worker.py` makes it the worker's
`max_heartbeat_throttle_interval` (and its default one); with the workflows' 10 s heartbeat
timeout the throttle in use is the smaller of it and 0.8 x the timeout, so this one."""
DELIVERY_MARGIN = 0.3
"""Seconds allowed for the heartbeat's RPC once the SDK sends it (loopback or one region away)."""

P = ParamSpec("P")
R = TypeVar("R")
ModelT = TypeVar("ModelT", bound=BaseModel)


@dataclass
class _Progress:
    details: BaseModel | None = None
    beats: int = 0
    """Heartbeats this attempt has sent so far."""


_PROGRESS: contextvars.ContextVar[_Progress | None] = contextvars.ContextVar(
    "colony_activity_progress", default=None
)


def heartbeating(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Beat for as long as `fn` runs, with the last `report`ed details."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        progress = _Progress()
        token = _PROGRESS.set(progress)
        beats = asyncio.create_task(_beat(progress))
        try:
            return await fn(*args, **kwargs)
        finally:
            beats.cancel()
            _PROGRESS.reset(token)

    return wrapper


async def _beat(progress: _Progress) -> None:
    # The first beat waits a beat: an attempt's first heartbeat leaves the worker at once (later
    # ones wait out the SDK's throttle), so it is kept for what the activity reports first, which
    # is often what `write_ahead` must have delivered before the activity acts.
    while True:
        await asyncio.sleep(BEAT_EVERY)
        _send(progress, progress.details)


def _send(progress: _Progress | None, details: BaseModel | None) -> None:
    if progress is not None:
        progress.beats += 1
    if details is None:
        activity.heartbeat()
    else:
        activity.heartbeat(details)


def report(details: BaseModel) -> None:
    """Make `details` the activity's progress, and send it now."""
    progress = _PROGRESS.get()
    if progress is not None:
        progress.details = details
    _send(progress, details)


async def write_ahead(details: BaseModel) -> None:
    """`report` details the next attempt must find even if this worker dies right after, and
    return once Temporal has them: call it before doing what they record.

    The SDK sends a heartbeat at once when none went out within its throttle interval, and
    otherwise the latest details at the end of that interval (sdk-core's heartbeat manager), so
    they have left the worker `HEARTBEAT_THROTTLE` (plus the RPC) after the call, or at once when
    they are the attempt's first heartbeat (`@heartbeating` keeps that one free). A worker killed
    during the wait has done nothing they promise; one killed after it leaves them to the next
    attempt. It costs that wait, so it is for records, not for progress.
    """
    progress = _PROGRESS.get()
    first = progress is not None and progress.beats == 0
    report(details)
    # The attempt's first heartbeat goes out at once; any later one at the throttle's end.
    await asyncio.sleep(
        DELIVERY_MARGIN if first else HEARTBEAT_THROTTLE.total_seconds() + DELIVERY_MARGIN
    )


def previous_details(model: type[ModelT]) -> ModelT | None:
    """The progress the previous attempt of this activity reported last, if any (after a crash)."""
    details = activity.info().heartbeat_details
    if not details:
        return None
    first: Any = details[0]
    if isinstance(first, model):
        return first
    try:
        return model.model_validate(first)
    except ValidationError:
        return None
