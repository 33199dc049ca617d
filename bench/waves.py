"""A wave: N entities deployed at once, each deleted as soon as it runs, until all have ended.

`bench.throughput` (workspaces through the Temporal client, then the Temporal ceiling's trivial
workflows) and `bench.scale_out` (workspaces through the HTTP API, with one and with two workers
and API replicas) drive their waves with `run_wave` and a `Driver` that knows how to start,
find running and delete its kind. Whatever the driver, the wave:

- starts all N at once;
- every `TICK` seconds lists the running ones (a workspace's `ColonyPhase` search attribute, or
  the API's list) and sends each new one its delete, so an entity's life is deploy + delete with
  at most a tick of the benchmark's own between them;
- ends when Temporal's visibility counts all N closed; a failed one stops the run.

Its throughput is N over the span of the workflows' server timestamps (first start to last
close), so the benchmark's polling never counts; beside it, each process's CPU seconds over the
wave (from /proc: what was busy) and the Kubernetes API requests the sim answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory

from bench.record import progress
from bench.stack import Stack, Usage, requests_grown
from workflows.workspace import WORKSPACE

TICK = 0.5
"""Seconds between two looks for running entities (at most this much of each life is the
benchmark's; the throughput's span is long enough for it not to matter)."""
WAVE_DEADLINE = 1800.0
STARTS_IN_FLIGHT = 50
"""Starts sent at once: all N are started within a second or two without one RPC per entity
waiting behind hundreds of others."""


class Driver(Protocol):
    """How a wave starts, finds running and deletes one kind of entity."""

    kind: str
    """Its `ColonyKind` search attribute (visibility counts the closed ones by it)."""

    async def start(self, index: int) -> str:
        """Start entity `index`; its workflow id."""
        ...

    async def running(self) -> set[str]:
        """The workflow ids of this kind that run now (phase `Running`)."""
        ...

    async def failed(self) -> set[str]:
        """The workflow ids of this kind that failed."""
        ...

    async def delete(self, workflow_id: str) -> None: ...


@dataclass
class Wave:
    """What one wave measured."""

    label: str
    count: int
    seconds: float
    """First start to last close, server timestamps."""
    wall_seconds: float
    lives: list[float]
    """Each entity's start to close, seconds."""
    usage: dict[str, dict[str, float]]
    """Per process: CPU seconds over the wave, cores used on average, RSS at the end (MB)."""
    requests: dict[str, dict[str, int]]
    workflow_ids: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.count / self.seconds

    def summary(self) -> dict[str, Any]:
        ordered = sorted(self.lives)
        return {
            "label": self.label,
            "count": self.count,
            "seconds": round(self.seconds, 2),
            "wall_seconds": round(self.wall_seconds, 2),
            "per_second": round(self.rate, 3),
            "life_p50_seconds": round(statistics.median(ordered), 2),
            "life_max_seconds": round(ordered[-1], 2),
            "usage": self.usage,
            "requests": self.requests,
        }


async def _closed(temporal: Client, kind: str) -> int:
    counted = await temporal.count_workflows(
        f"ColonyKind = '{kind}' AND ExecutionStatus != 'Running'"
    )
    return counted.count


def usage_over(
    before: dict[str, Usage], after: dict[str, Usage], seconds: float
) -> dict[str, dict[str, float]]:
    used: dict[str, dict[str, float]] = {}
    for name, end in after.items():
        start = before.get(name)
        if start is None:
            continue
        cpu = end.cpu_seconds - start.cpu_seconds
        used[name] = {
            "cpu_seconds": round(cpu, 3),
            "cores": round(cpu / seconds, 2) if seconds else 0.0,
            "rss_mb": round(end.rss_mb, 1),
        }
    return used


async def run_wave(
    label: str,
    stack: Stack,
    temporal: Client,
    driver: Driver,
    count: int,
    *,
    around: contextlib.AbstractAsyncContextManager[Any] | None = None,
) -> Wave:
    """Run one wave of `count` (see the module docstring), inside `around` (a profiler) if given."""
    async with around or contextlib.nullcontext():
        return await _run_wave(label, stack, temporal, driver, count)


async def _run_wave(label: str, stack: Stack, temporal: Client, driver: Driver, count: int) -> Wave:
    closed_before = await _closed(temporal, driver.kind)
    usage_before = stack.usage()
    requests_before = stack.sim_requests()
    began = time.monotonic()
    slots = asyncio.Semaphore(STARTS_IN_FLIGHT)

    async def start(index: int) -> str:
        async with slots:
            return await driver.start(index)

    ids = await asyncio.gather(*(start(i) for i in range(count)))
    progress(f"{label}: {count} started in {time.monotonic() - began:.1f} s")
    deleting: set[str] = set()
    sends: set[asyncio.Task[None]] = set()
    last_shown = 0
    while True:
        failed = await driver.failed()
        if failed:
            raise RuntimeError(f"{label}: {len(failed)} failed, e.g. {sorted(failed)[0]}")
        for workflow_id in (await driver.running()) - deleting:
            deleting.add(workflow_id)
            task = asyncio.create_task(_delete(driver, workflow_id, deleting))
            sends.add(task)
            task.add_done_callback(sends.discard)
        closed = await _closed(temporal, driver.kind) - closed_before
        if closed >= count:
            break
        if closed // 50 > last_shown:
            last_shown = closed // 50
            progress(f"{label}: {closed}/{count} done, {len(deleting)} deleting or done")
        if time.monotonic() - began > WAVE_DEADLINE:
            raise RuntimeError(f"{label}: only {closed} of {count} ended in {WAVE_DEADLINE:.0f} s")
        await asyncio.sleep(TICK)
    wall = time.monotonic() - began
    usage_after = stack.usage()
    requests_after = stack.sim_requests()
    spans = await asyncio.gather(*(_span(temporal, workflow_id) for workflow_id in ids))
    first = min(start for start, _ in spans)
    last = max(end for _, end in spans)
    seconds = (last - first).total_seconds()
    wave = Wave(
        label=label,
        count=count,
        seconds=seconds,
        wall_seconds=wall,
        lives=[(end - start).total_seconds() for start, end in spans],
        usage=usage_over(usage_before, usage_after, seconds),
        requests=requests_grown(requests_before, requests_after),
        workflow_ids=list(ids),
    )
    progress(f"{label}: {count} in {seconds:.1f} s, {wave.rate:.2f}/s")
    return wave


async def _delete(driver: Driver, workflow_id: str, deleting: set[str]) -> None:
    """Send the delete; one whose call failed (a dev server too busy to answer an update within
    its RPC deadline, under load) is sent again at the next tick if the entity still runs."""
    try:
        await driver.delete(workflow_id)
    except Exception as error:  # any failure: the next tick decides again
        progress(f"delete of {workflow_id} failed ({type(error).__name__}); sent again if it runs")
        deleting.discard(workflow_id)


async def _span(temporal: Client, workflow_id: str) -> tuple[datetime, datetime]:
    described = await temporal.get_workflow_handle(workflow_id).describe()
    if described.close_time is None:
        raise RuntimeError(f"{workflow_id} has not closed")
    return described.start_time, described.close_time


@dataclass(frozen=True)
class Calls:
    """Activity calls and events of one entity's history, split at its delete."""

    before_delete: int
    after_delete: int
    events: int

    @property
    def activities(self) -> int:
        return self.before_delete + self.after_delete


def calls_of(history: WorkflowHistory, delete_update: str = WORKSPACE.delete.name) -> Calls:
    """Activities scheduled before and after the `delete` update was accepted, and all events."""
    before = after = 0
    deleting = False
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            attributes = event.workflow_execution_update_accepted_event_attributes
            if attributes.accepted_request.input.name == delete_update:
                deleting = True
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if deleting:
                after += 1
            else:
                before += 1
    return Calls(before_delete=before, after_delete=after, events=len(history.events))


async def histories(temporal: Client, workflow_ids: list[str]) -> list[WorkflowHistory]:
    return list(
        await asyncio.gather(
            *(temporal.get_workflow_handle(wid).fetch_history() for wid in workflow_ids)
        )
    )


def requests_per(requests: dict[str, dict[str, int]], count: int) -> dict[str, Any]:
    """Requests of a wave per entity: in all, on the management cluster, on child clusters, and
    the five most frequent `<verb> <resource>`."""
    management = sum(requests.get("management", {}).values())
    children = sum(sum(c.values()) for name, c in requests.items() if name != "management")
    merged: dict[str, int] = {}
    for counts in requests.values():
        for key, n in counts.items():
            merged[key] = merged.get(key, 0) + n
    top = sorted(merged.items(), key=lambda item: -item[1])[:8]
    return {
        "total": round((management + children) / count, 2),
        "management": round(management / count, 2),
        "child_clusters": round(children / count, 2),
        "top": {key: round(n / count, 2) for key, n in top},
    }


def requests_sentence(requests: dict[str, Any], per: str) -> str:
    """`requests_per`'s figures as the reports' sentence (without its full stop)."""
    return (
        f"Kubernetes API requests per {per}: {requests['total']} "
        f"({requests['management']} on the management cluster, "
        f"{requests['child_clusters']} on the child); most frequent: "
        + ", ".join(f"`{k}` {v}" for k, v in requests["top"].items())
    )


def plot_lives(axis: Any, lives: dict[str, list[float]], entity: str, title: str) -> None:
    """Each wave's lives (start to close, seconds) as a cumulative distribution on `axis`."""
    for label, samples in lives.items():
        ordered = sorted(samples)
        axis.plot(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], label=label)
    axis.set_xlabel(f"one {entity}'s life, start to close (s)")
    axis.set_ylabel("fraction of the wave")
    axis.set_title(title)
    axis.grid(alpha=0.3)
    axis.legend()
