"""What a GPU release costs the cluster's ledger as the line grows: 10 to 10,000 waiting.

`python -m bench.ledger_depth [--depths 10,100,1000,10000] [--releases 20] [--label after]`
starts a Temporal dev server (the venv's `temporal` binary) and, in this process, a worker with
`CapacityLedgerWorkflow` and stand-ins for the workspaces (`BenchWaiter`: records what the ledger
tells it) and the cluster's workflow. Per depth D, one cluster with one 80-GPU H100 node: ten
workspaces hold 8 GPUs each and D wait for 8 each. The ledger starts with that line as its
carried state (built with the ledger's own model, as a continue-as-new would carry it). Then
`--releases` single releases (each waits for the next workspace's admission and for the ledger to
be idle, then puts one more workspace at the back, so the line stays D deep), and a burst of ten
releases sent within one second.

Columns (from the workflows' histories, server timestamps):
- ledger events per release: the ledger's history growth from a release to idle (a burst: its
  growth over ten);
- messages per release: signals the ledger sends per release (`signal_workflow` activities or
  external signals);
- events added to each waiter per release: the growth of the last waiter's history;
- ledger busy after a release: from the release's arrival to the end of the ledger's last task;
- release -> admitted: from the release's arrival at the ledger to the admitted workspace's
  receipt of its answer, p50 and p99 over the single releases and the burst;
- longest ledger task: the longest workflow task (started to completed) of the ledger, the figure
  the SDK's 2 s deadlock detector (TMPRL1101) watches, and the first task of the run, which loads
  the carried line; deadlock warnings are counted from the logs;
- carried state: the continue-as-new input the line needs;
- model CPU per release: the ledger's model alone (`release` + a new `request`), no Temporal;
- worker RSS: this process (worker, client and the model copies the bench builds).

Every waiter the ledger would tell is a real workflow in the "before" code (it tells every waiter
every release). In the code that computes positions, only the heads that get admitted and a few at
the back are; the others' reply addresses lead nowhere, so a message sent to one would fail and
show (the ledger would release that request).

It runs against whatever ledger code is checked out, so the same file measures before and after:
`--label before` on a checkout of the previous ledger (copy this file there). Results go to
`bench/results/ledger_depth-<label>.json`; every run merges every label found into
`bench/results/ledger_depth.md` and `ledger_depth.png`, and writes `ledger_depth.json` with the
headline figures of the run (`bench.record`; `BENCH_QUICK=1`: one depth of 10, 2 releases).
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import statistics
import sys
import time
import uuid
from collections import deque
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from bench.command import Command, Option
from bench.record import Headline, progress, publish, pyplot, quick, results_dir
from infra.ports import free_port
from models.capacity import (
    CapacityAnswer,
    CapacityLedger,
    CapacityLedgerState,
    CapacityRequest,
    Decision,
    GpuNode,
    GpuSelector,
)
from models.workspace import capacity_request_id
from models.workspace_api import (
    CapacityLedgerInput,
    CapacityMessage,
    CapacityMessageKind,
    GpuHoldersMessage,
    ReadGpuInventoryRequest,
    ReadGpuInventoryResult,
    WorkspaceActivity,
)
from models.workspace_class import GPU_MODEL_LABEL, GpuVendor
from workflows.capacity import CAPACITY
from workflows.capacity.workflow import CapacityLedgerWorkflow
from workflows.cluster import CLUSTER
from workflows.workspace import WORKSPACE

HOLDERS = 10
NODE = GpuNode(name="gpu-1", model="H100", vendor=GpuVendor.NVIDIA, allocatable=8 * HOLDERS)
SELECTOR = GpuSelector(labels={GPU_MODEL_LABEL: "H100"})
TAIL = 2
"""Waiters at the back of the line whose histories are watched."""
COMPUTED = hasattr(CapacityLedger, "snapshot")
"""True for the ledger that computes positions (this branch); False for the one that pushes them."""
TASK_QUEUE = "bench-ledger-depth"
DEADLOCKS: list[str] = []

COMMAND = Command(
    "ledger_depth",
    __doc__,
    Option("--depths", default="10" if quick() else "10,100,1000,10000"),
    Option("--releases", type=int, default=2 if quick() else 20),
    Option("--label", default="after" if COMPUTED else "before"),
)


class DeadlockLog(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "TMPRL1101" in text or "deadlock" in text.lower():
            DEADLOCKS.append(text[:200])


@workflow.defn(sandboxed=False)
class BenchWaiter:
    """Stands in for a workspace (answers) or a cluster (holders)."""

    def __init__(self) -> None:
        self._answers: list[CapacityAnswer] = []

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal(name=WORKSPACE.capacity_answer.name)
    def capacity_answer(self, answer: CapacityAnswer) -> None:
        self._answers.append(answer)

    @workflow.signal(name=CLUSTER.gpu_holders.name)
    def gpu_holders(self, message: GpuHoldersMessage) -> None:
        pass

    @workflow.query
    def admitted(self) -> bool:
        return any(a.decision is Decision.ADMITTED for a in self._answers)


@activity.defn(name=WorkspaceActivity.READ_GPU_INVENTORY)
async def read_gpu_inventory(request: ReadGpuInventoryRequest) -> ReadGpuInventoryResult:
    return ReadGpuInventoryResult(nodes=[NODE])


def rid(index: int) -> str:
    """A request id of the shape workspaces use (workspace, its first run id, attempt)."""
    workspace = f"ws-{index:05d}"
    return capacity_request_id(workspace, str(uuid.uuid5(uuid.NAMESPACE_DNS, workspace)), 1)


def request(index: int) -> CapacityRequest:
    return CapacityRequest(
        request_id=rid(index),
        workspace=f"ws-{index:05d}",
        replicas=1,
        gpus_per_replica=8,
        selector=SELECTOR,
    )


def waiter_id(cluster: str, index: int) -> str:
    return f"workspace/{cluster}-{index:05d}"


def carried_line(cluster: str, depth: int, real: set[int]) -> CapacityLedgerInput:
    """The ledger's input with HOLDERS holding and `depth` waiting, as its model builds it."""
    ledger = CapacityLedger(CapacityLedgerState(cluster=cluster))
    ledger.refresh_inventory([NODE])
    replies: dict[str, str] = {}
    for index in range(HOLDERS + depth):
        reply = waiter_id(cluster, index) if index in real else f"nobody/{cluster}/{index}"
        if COMPUTED:
            ledger.request(request(index), reply_to=reply)  # type: ignore[call-arg,unused-ignore]
        else:
            ledger.request(request(index))
            replies[rid(index)] = reply
    state = ledger.snapshot() if COMPUTED else ledger.state  # type: ignore[attr-defined,unused-ignore]
    if COMPUTED:  # the ledger's state inside the workflow's carried state (the entity kit's)
        return CapacityLedgerInput.model_validate(
            {
                "cluster": cluster,
                "clusterWorkflowId": f"cluster/{cluster}",
                "state": {"ledger": state.model_dump(mode="json"), "inventoryLoaded": True},
            }
        )
    return CapacityLedgerInput.model_validate(
        {
            "cluster": cluster,
            "clusterWorkflowId": f"cluster/{cluster}",
            "inventoryLoaded": True,
            "state": state.model_dump(mode="json"),
            "replies": replies,
        }
    )


def model_cpu_per_release(depth: int) -> float:
    """CPU seconds of one release (which admits the head) and one new request at the back, on
    the model alone, at `depth` waiting (median of 5)."""
    ledger = CapacityLedger(CapacityLedgerState(cluster="model"))
    ledger.refresh_inventory([NODE])
    for index in range(HOLDERS + depth):
        ledger.request(request(index))
    samples = []
    for step in range(5):
        started = time.process_time()
        ledger.release(rid(step))
        ledger.request(request(HOLDERS + depth + step))
        samples.append(time.process_time() - started)
    return statistics.median(samples)


async def quiet(handle: WorkflowHandle[Any, Any]) -> tuple[str, int]:
    """(run id, history length) once the workflow has nothing in flight and stopped growing."""
    last: tuple[str, int] | None = None
    while True:
        described = await handle.describe()
        raw = described.raw_description
        seen = (described.run_id or "", described.history_length)
        idle = not raw.pending_workflow_task.ByteSize() and not raw.pending_activities
        if idle and seen == last:
            return seen
        last = seen if idle else None
        await asyncio.sleep(0.15)


async def history(client: Client, workflow_id: str, run_id: str) -> WorkflowHistory:
    return await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()


def signal_time(events: Sequence[Any], signal: str, contains: str = "") -> datetime | None:
    """The time of the first WorkflowExecutionSignaled `signal` whose payload holds `contains`."""
    for event in events:
        if event.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            continue
        attributes = event.workflow_execution_signaled_event_attributes
        if attributes.signal_name != signal:
            continue
        data = b"".join(p.data for p in attributes.input.payloads)
        if contains.encode() in data:
            return event.event_time.ToDatetime()  # type: ignore[no-any-return]
    return None


SENT = {
    EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
    EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
}


class Line:
    """One depth's line: the ledger, its real waiters, the releases and their measurements."""

    def __init__(self, client: Client, depth: int, releases: int) -> None:
        self.client = client
        self.depth = depth
        self.cluster = f"depth-{depth}-{int(time.time())}"
        self.ledger = client.get_workflow_handle(f"capacity/{self.cluster}")
        self.holders: deque[int] = deque(range(HOLDERS))
        self.next_waiting = HOLDERS
        self.next_new = HOLDERS + depth
        # Refills (from HOLDERS + depth on) are started when they join the line.
        admitted_soon = set(range(HOLDERS, HOLDERS + min(depth, releases + HOLDERS + 1)))
        tail = set(range(HOLDERS + depth - TAIL, HOLDERS + depth))
        self.real = (
            admitted_soon | tail if COMPUTED else set(range(HOLDERS, HOLDERS + depth))
        ) - set(range(HOLDERS))
        self.tail = max(tail)
        self.samples: list[dict[str, Any]] = []
        self.latencies: list[float] = []
        self.task_seconds: list[float] = []
        self._quiet: tuple[str, int] = ("", 0)
        self._tail_before = 0

    async def start(self) -> None:
        await asyncio.gather(
            *(self._start_waiter(waiter_id(self.cluster, i)) for i in sorted(self.real)),
            self._start_waiter(f"cluster/{self.cluster}"),
        )
        carried = carried_line(self.cluster, self.depth, self.real)
        self.carried_bytes = len(carried.model_dump_json(by_alias=True))
        await self.client.start_workflow(
            CapacityLedgerWorkflow.run, carried, id=self.ledger.id, task_queue=TASK_QUEUE
        )
        self.first_run = (await self.ledger.describe()).run_id or ""
        await quiet(self.ledger)
        # Its first task builds the ledger from the carried line: the heaviest task of a run.
        events = (await history(self.client, self.ledger.id, self.first_run)).events
        self._record_tasks(events)
        self.first_task_seconds = self.task_seconds[0]

    async def _start_waiter(self, workflow_id: str) -> None:
        await self.client.start_workflow(BenchWaiter.run, id=workflow_id, task_queue=TASK_QUEUE)

    async def _refill(self) -> None:
        index = self.next_new
        self.next_new += 1
        await self._start_waiter(waiter_id(self.cluster, index))
        self.real.add(index)
        await self.ledger.signal(
            CAPACITY.capacity.name,
            CapacityMessage(
                request_id=f"{rid(index)}/request",
                kind=CapacityMessageKind.REQUEST,
                request=request(index),
                reply_to=waiter_id(self.cluster, index),
            ),
        )

    async def _release(self) -> int:
        """Release the oldest holder; the index of the workspace it lets in."""
        holder = self.holders.popleft()
        await self.ledger.signal(
            CAPACITY.capacity.name,
            CapacityMessage(
                request_id=f"{rid(holder)}/release",
                kind=CapacityMessageKind.RELEASE,
                target=rid(holder),
                reason="deleted",
            ),
        )
        admitted = self.next_waiting
        self.next_waiting += 1
        self.holders.append(admitted)
        return holder

    async def _admitted(self, index: int) -> datetime:
        handle = self.client.get_workflow_handle(waiter_id(self.cluster, index))
        deadline = time.monotonic() + 300
        while True:
            if await handle.query(BenchWaiter.admitted):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{handle.id} not admitted within 300 s")
            await asyncio.sleep(0.05)
        events = (await handle.fetch_history()).events
        told = signal_time(events, WORKSPACE.capacity_answer.name, '"admitted"')
        assert told is not None
        return told

    async def _ledger_events(self, start: tuple[str, int], end: tuple[str, int]) -> list[Any]:
        """The ledger's events between two quiet points (across a continue-as-new too)."""
        events: list[Any] = []
        run_id, offset = start
        while True:
            found = (await history(self.client, self.ledger.id, run_id)).events
            events += found[offset:]
            if run_id == end[0]:
                return events
            next_run = ""
            for event in found:
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                    attributes = event.workflow_execution_continued_as_new_event_attributes
                    next_run = attributes.new_execution_run_id
            run_id, offset = next_run, 0

    def _record_tasks(self, events: Sequence[Any]) -> None:
        started: datetime | None = None
        for event in events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                started = event.event_time.ToDatetime()
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and started:
                completed = event.event_time.ToDatetime()
                self.task_seconds.append((completed - started).total_seconds())

    async def _tail_length(self) -> int:
        handle = self.client.get_workflow_handle(waiter_id(self.cluster, self.tail))
        return (await quiet(handle))[1]

    async def measure(self, releases: int) -> None:
        for _ in range(releases):
            await self._round([await self._release()])
        # A burst: ten releases within one second.
        sent = time.monotonic()
        holders = [await self._release() for _ in range(HOLDERS)]
        self.burst_sent_seconds = time.monotonic() - sent
        await self._round(holders)

    async def _round(self, holders: list[int]) -> None:
        start = self._quiet
        tail_before = self._tail_before
        admitted = [self.next_waiting - len(holders) + i for i in range(len(holders))]
        told = [await self._admitted(i) for i in admitted]
        end = await quiet(self.ledger)
        events = await self._ledger_events(start, end)
        self._record_tasks(events)
        arrivals = [
            signal_time(events, CAPACITY.capacity.name, f"{rid(holder)}/release")
            for holder in holders
        ]
        latency = [
            (admit - arrived).total_seconds()
            for admit, arrived in zip(told, arrivals, strict=True)
            if arrived is not None
        ]
        self.latencies += latency
        completed = [
            e.event_time.ToDatetime()
            for e in events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        ]
        first_arrival = min(a for a in arrivals if a is not None)
        tail_after = await self._tail_length()
        self.samples.append(
            {
                "releases": len(holders),
                "ledger_events": len(events) / len(holders),
                "messages": sum(1 for e in events if e.event_type in SENT) / len(holders),
                "waiter_events": (tail_after - tail_before) / len(holders),
                "busy_seconds": (max(completed) - first_arrival).total_seconds(),
                "latencies": latency,
            }
        )
        # Keep the line D deep: one more at the back per admission (not counted above).
        for _ in holders:
            await self._refill()
        self._quiet = await quiet(self.ledger)
        self._tail_before = await self._tail_length()

    async def prepare(self) -> None:
        self._quiet = await quiet(self.ledger)
        self._tail_before = await self._tail_length()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def measure_depth(client: Client, depth: int, releases: int) -> dict[str, Any]:
    line = Line(client, depth, releases)
    started = time.monotonic()
    await line.start()
    await line.prepare()
    await line.measure(releases)
    singles = [s for s in line.samples if s["releases"] == 1]
    burst = [s for s in line.samples if s["releases"] > 1]
    result = {
        "depth": depth,
        "releases": releases,
        "ledger_events_per_release": statistics.median(s["ledger_events"] for s in singles),
        "ledger_events_per_release_max": max(s["ledger_events"] for s in singles),
        "ledger_events_per_release_in_burst": burst[0]["ledger_events"],
        "messages_per_release": statistics.median(s["messages"] for s in singles),
        "waiter_events_per_release": statistics.median(s["waiter_events"] for s in singles),
        "busy_seconds_median": statistics.median(s["busy_seconds"] for s in singles),
        "busy_seconds_burst": burst[0]["busy_seconds"],
        "release_to_admitted_p50": percentile(line.latencies, 0.5),
        "release_to_admitted_p99": percentile(line.latencies, 0.99),
        "release_to_admitted_single_p50": percentile(
            [x for s in singles for x in s["latencies"]], 0.5
        ),
        "release_to_admitted_burst_max": max(burst[0]["latencies"]),
        "burst_sent_within_seconds": line.burst_sent_seconds,
        "longest_ledger_task_seconds": max(line.task_seconds),
        "first_ledger_task_seconds": line.first_task_seconds,
        "carried_state_bytes": line.carried_bytes,
        # The pushing ledger's model alone takes seconds per release from 1,000 waiting on.
        "model_cpu_per_release_seconds": (
            model_cpu_per_release(depth) if COMPUTED or depth <= 300 else None
        ),
        "worker_rss_mb": rss_mb(),
        "deadlock_warnings": len(DEADLOCKS),
        "wall_seconds": time.monotonic() - started,
    }
    await end_line(client, line)
    return result


async def end_line(client: Client, line: Line) -> None:
    ids = [line.ledger.id, f"cluster/{line.cluster}"] + [
        waiter_id(line.cluster, i) for i in line.real
    ]
    for workflow_id in ids:
        try:
            await client.get_workflow_handle(workflow_id).terminate(reason="bench done")
        except Exception:  # ended already
            continue


def load_average() -> list[str]:
    return Path("/proc/loadavg").read_text().split()[:3]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def main_async(depths: list[int], releases: int, label: str) -> dict[str, Any]:
    logging.getLogger("temporalio").addHandler(DeadlockLog())
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=str(Path(sys.executable).parent / "temporal"),
        dev_server_log_level="error",
        port=free_port(),
    )
    try:
        async with Worker(
            env.client,
            task_queue=TASK_QUEUE,
            workflows=[CapacityLedgerWorkflow, BenchWaiter],
            activities=[read_gpu_inventory],
            max_concurrent_workflow_tasks=50,
        ):
            rows = []
            for depth in depths:
                row = await measure_depth(env.client, depth, releases)
                progress(json.dumps(row))
                rows.append(row)
    finally:
        await env.shutdown()
    return {
        "label": label,
        "computed_positions": COMPUTED,
        "measured_at": datetime.now().isoformat(timespec="seconds"),
        "load_average": load_average(),
        "rows": rows,
    }


COLUMNS = [
    ("depth", "waiting", "{:,}"),
    ("ledger_events_per_release", "ledger events per release", "{:.0f}"),
    ("messages_per_release", "messages per release", "{:.0f}"),
    ("waiter_events_per_release", "events added to each waiter per release", "{:.0f}"),
    ("busy_seconds_median", "ledger busy after a release", "{:.2f} s"),
    ("release_to_admitted_p50", "release -> admitted p50", "{:.3f} s"),
    ("release_to_admitted_p99", "release -> admitted p99 (with a burst of 10)", "{:.3f} s"),
    ("longest_ledger_task_seconds", "longest ledger task", "{:.3f} s"),
    ("first_ledger_task_seconds", "first task of a run (loads the line)", "{:.3f} s"),
    ("carried_state_bytes", "carried state", "{:,} B"),
    ("model_cpu_per_release_seconds", "model CPU per release", "{:.5f} s"),
    ("worker_rss_mb", "worker RSS", "{:.0f} MB"),
    ("deadlock_warnings", "deadlock warnings", "{}"),
]


NOTES = """## Conditions

Dev server (in-memory) and the worker in the benchmark's process, on the 2-core machine shared with
other sessions running tests (the load average is in each heading). One cluster, one 80-GPU node,
ten holders of 8 GPUs, the line of workspaces asking for 8; per depth 20 single releases (each
followed by one new request at the back, not counted) and a burst of ten releases sent within
0.3 s. Stand-in workflows answer for the workspaces and the cluster (`BenchWaiter`).
`release -> admitted p99` is over the 30 admissions of a depth, so it is their maximum.
The "before" rows ran an earlier version of this file with request ids `r<n>`, so its carried
state is not comparable; "after" uses ids of the workspaces' shape (name, UUID, attempt).
The real stack (dev server, sim, `worker.py`, real workspaces) at 1,000 waiting:
`python -m bench.workspace_admission --releases 10 --depth 1000`, in
`workspace_admission-1000.json`.
"""


def summary(label: str) -> tuple[str, Any]:
    """The markdown of every label found (`ledger_depth-<label>.json`) and the plot, the run of
    `label` first."""
    plt = pyplot()
    folder = results_dir()
    runs = [json.loads(p.read_text()) for p in sorted(folder.glob("ledger_depth-*.json"))]
    runs.sort(key=lambda run: run["label"] != label)
    lines: list[str] = []
    for run in runs:
        lines += [
            f"## {run['label']} (measured {run['measured_at']}, load average "
            f"{' '.join(str(x) for x in run['load_average'])})",
            "",
            "| " + " | ".join(title for _, title, _ in COLUMNS) + " |",
            "|" + "---|" * len(COLUMNS),
        ]
        for row in run["rows"]:
            cells = [
                fmt.format(row[key]) if row.get(key) is not None else "-" for key, _, fmt in COLUMNS
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    panels = [
        ("ledger_events_per_release", "ledger events per release"),
        ("release_to_admitted_p99", "release -> admitted p99 (s)"),
        ("busy_seconds_median", "ledger busy after a release (s)"),
    ]
    for axis, (key, title) in zip(axes, panels, strict=True):
        for run in runs:
            depths = [row["depth"] for row in run["rows"]]
            axis.plot(depths, [row[key] for row in run["rows"]], marker="o", label=run["label"])
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("waiting")
        axis.set_title(title)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend()
    figure.tight_layout()
    return "\n".join([*lines, NOTES]), figure


def main(argv: list[str] | None = None) -> int:
    args = COMMAND.parse(argv)
    record = COMMAND.report("GPU ledger: cost of a release by depth of the line", args)
    measured = asyncio.run(
        main_async([int(d) for d in args.depths.split(",")], args.releases, args.label)
    )
    folder = results_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"ledger_depth-{args.label}.json").write_text(json.dumps(measured, indent=2))
    deepest = measured["rows"][-1]
    depth = f"{deepest['depth']:,} waiting"
    record.add(
        Headline("events_per_release", f"ledger events per release, {depth}",
                 deepest["ledger_events_per_release"]),
        Headline("release_to_admitted_p99_ms", f"release -> admitted p99 (with a burst), {depth}",
                 round(deepest["release_to_admitted_p99"] * 1000), "ms"),
        Headline("longest_task_ms", f"longest ledger task, {depth}",
                 round(deepest["longest_ledger_task_seconds"] * 1000), "ms", "< 2000 ms",
                 deepest["longest_ledger_task_seconds"] < 2.0),
        Headline("deadlock_warnings", "deadlock warnings (TMPRL1101)",
                 deepest["deadlock_warnings"], "", "0", deepest["deadlock_warnings"] == 0),
    )  # fmt: skip
    record.figures = measured
    record.body, figure = summary(args.label)
    publish(record, figure)
    return 0


if __name__ == "__main__":
    sys.exit(main())
