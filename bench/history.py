"""Reading workflow histories for the benchmarks' figures: an event's server time, and a history's
events counted by type.

Used by `bench.drain_scale` and `bench.workspace_admission`, whose figures come from the histories'
server timestamps, so the benchmark's own polling never counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from temporalio.api.enums.v1 import EventType


def event_time(event: Any) -> datetime:
    """When the server recorded `event` (a `temporalio.api.history.v1.HistoryEvent`)."""
    moment: datetime = event.event_time.ToDatetime()
    return moment


def event_counts(events: Iterable[Any]) -> dict[str, int]:
    """How many of `events` there are of each type (`activity_task_scheduled`, ...), most first."""
    counts: dict[str, int] = {}
    for event in events:
        name = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_").lower()
        counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: -item[1]))
