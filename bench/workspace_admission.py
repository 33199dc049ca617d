"""Wake-up under a deep queue: how long a GPU release takes to reach the next waiting workspace,
with the watcher and with the workflows' own fallback alone, and what it costs the ledger.

`python -m bench.workspace_admission [--releases 100] [--depth 50] [--ledger-run-events 1000]`
starts a private stack twice (`bench.stack`: dev server, the sim with instant timing, `worker.py`
as its own process; the first time with `watcher.py` too, the second without), creates a cluster
with one H100 node (8 GPUs), and deploys SSH dev boxes that each ask for all 8 GPUs: one runs (the
cluster is full), the next K wait in line. Then N times: delete the running one (`delete`
update), wait until the first in line runs, deploy one more at the back, so the line stays K
deep. Workspaces are driven through `clients.workspaces`, the functions `colonyctl` calls.

The cluster's ledger (`capacity/<cluster>`) is started by the benchmark before the first
workspace, with its continue-as-new threshold at `--ledger-run-events` (default 1,000, where
Colony's is 4,000) so that the run crosses several continue-as-new boundaries and shows how they
bound the ledger's history: each run's length, the state carried across, and admissions across a
boundary.

Figures, from the workflows' histories (server timestamps, so the benchmark's own polling does not
count):

- release -> admitted: from the ledger's receipt of the deleted workspace's `release` signal to
  the next workspace's receipt of its `capacity_answer` admitted (p50, p99, max; aim: p99 under
  1 s; the exalsius operator requeues every 15 s);
- delete -> admitted: from the delete update being accepted by the running workspace's workflow
  to the same admission; includes the uninstall (routes, ServiceSet, namespace) that comes first;
- the ledger's events per release (its whole history over the run, divided by the releases: each
  release is also one new request at the back), its runs and the longest;
- history events of one workspace's whole life (deploy -> Running -> delete), for one admitted at
  once and for one that waited K releases in line.

Results in `bench/results/workspace_admission.{json,md,png}` (`bench.record`).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter

from bench.command import Command, Option
from bench.history import event_counts, event_time
from bench.record import Headline, Report, distribution, progress, publish, pyplot, scale
from bench.stack import TEMPORAL, Stack, describe, private_stack
from clients.classes import TemporalClasses
from clients.errors import NotFoundError, UnavailableError
from clients.temporal import TemporalSession
from clients.workspaces import TemporalWorkspaces, prepare_workspace
from infra.config import ColonySettings
from models.identity import capacity_workflow_id
from models.operations import ContinueAsNewPolicy
from models.workspace import WorkspacePhase, WorkspaceSpec
from models.workspace_api import CapacityLedgerInput
from models.workspace_class import WorkspaceClassSpec
from models.workspace_operations import DeleteWorkspaceRequest
from workflows.capacity import CAPACITY
from workflows.workspace import WORKSPACE

CLUSTER = "admission"
CLASS = "colony-devbox-1-0-0"
GPUS = 8
"""A whole H100 host: one workspace at a time, every other one waits."""
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl bench"
SIM_TIMINGS = {"instant": ["--instant"], "default": ["--time-scale", "1"]}
POLL = 0.02

COMMAND = Command(
    "workspace_admission",
    __doc__,
    Option("--releases", type=int, default=scale(100, 3)),
    Option("--depth", type=int, default=scale(50, 2), help="workspaces waiting in line"),
    Option(
        "--ledger-run-events", type=int, default=1000, help="the ledger's continue-as-new threshold"
    ),
    Option(
        "--sim-timing",
        choices=sorted(SIM_TIMINGS),
        default="instant",
        help="the simulator's delays: none (instant), or its defaults (an uninstall takes 0.3 s, "
        "a pod's termination 0.5 s: sim/timing.py)",
    ),
    Option(
        "--watcher",
        choices=("both", "with", "without"),
        default="both",
        help="the stacks to measure on: with the watcher, without (the fallback alone), or both",
    ),
    TEMPORAL,
)


def spec(index: int) -> WorkspaceSpec:
    return WorkspaceSpec.model_validate(
        {
            "name": f"adm-{index:04d}",
            "class": CLASS,
            "cluster": CLUSTER,
            "resources": {"perReplica": {"gpuCount": GPUS, "gpuType": "h100-80gb"}},
            "answers": {"ssh.authorizedKeys": SSH_KEY},
        }
    )


async def phase(spaces: TemporalWorkspaces, name: str) -> WorkspacePhase | None:
    status = await spaces.read(name)
    return status.phase if status else None


async def until_phase(
    spaces: TemporalWorkspaces, name: str, wanted: set[WorkspacePhase], timeout: float = 120
) -> None:
    deadline = time.monotonic() + timeout
    while (current := await phase(spaces, name)) not in wanted:
        if current is WorkspacePhase.FAILED or time.monotonic() > deadline:
            raise RuntimeError(f"{name} is {current}, not {sorted(wanted)}")
        await asyncio.sleep(POLL)


def _payload(event: Any) -> dict[str, Any]:
    payloads = event.workflow_execution_signaled_event_attributes.input.payloads
    return json.loads(payloads[0].data) if payloads else {}


async def histories(temporal: Client, workflow_id: str) -> list[WorkflowHistory]:
    """Every run of a workflow (the ledger continues as new), oldest first."""
    runs = [e async for e in temporal.list_workflows(f"WorkflowId = '{workflow_id}'")]
    runs.sort(key=lambda e: e.start_time)
    return [
        await temporal.get_workflow_handle(workflow_id, run_id=e.run_id).fetch_history()
        for e in runs
    ]


def releases_received(ledger: list[WorkflowHistory]) -> dict[str, datetime]:
    """Workspace name -> when the ledger received its release."""
    found: dict[str, datetime] = {}
    for history in ledger:
        for event in history.events:
            if event.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
                continue
            if (
                event.workflow_execution_signaled_event_attributes.signal_name
                != CAPACITY.capacity.name
            ):
                continue
            message = _payload(event)
            if message.get("kind") == "release":
                found.setdefault(str(message.get("target", "")).split("/")[0], event_time(event))
    return found


def admitted_at(history: WorkflowHistory) -> datetime | None:
    """When the workspace received its admission."""
    for event in history.events:
        if (
            event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
            and event.workflow_execution_signaled_event_attributes.signal_name
            == WORKSPACE.capacity_answer.name
            and _payload(event).get("decision") == "admitted"
        ):
            return event_time(event)
    return None


def delete_accepted_at(history: WorkflowHistory) -> datetime | None:
    for event in history.events:
        attributes = event.workflow_execution_update_accepted_event_attributes
        if (
            event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
            and attributes.accepted_request.input.name == WORKSPACE.delete.name
        ):
            return event_time(event)
    return None


async def published_class(classes: TemporalClasses) -> WorkspaceClassSpec:
    """The bench's class, once the worker's catalog has published it (within a minute)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return await classes.get(CLASS)
        except (UnavailableError, NotFoundError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def start_ledger(temporal: Client, settings: ColonySettings, ledger_run_events: int) -> None:
    """The ledger, before any workspace starts it, with the run length this benchmark shows."""
    await temporal.start_workflow(
        CAPACITY.workflow_type,
        CapacityLedgerInput(
            cluster=CLUSTER, continue_as_new=ContinueAsNewPolicy(events=ledger_run_events)
        ),
        id=capacity_workflow_id(CLUSTER),
        task_queue=settings.task_queue,
    )


async def keep_line(
    spaces: TemporalWorkspaces, devbox: WorkspaceClassSpec, releases: int, depth: int
) -> float:
    """One workspace running and `depth` waiting; then `releases` times: delete the running one,
    wait until the first in line runs, deploy one more at the back. The seconds it took."""
    deployed = 0

    async def deploy_next() -> None:
        nonlocal deployed
        prepared = prepare_workspace(spec(deployed), devbox)
        await spaces.start(prepared, workspace_class=devbox)
        deployed += 1

    started = time.monotonic()
    await deploy_next()
    await until_phase(spaces, spec(0).name, {WorkspacePhase.RUNNING})
    for _ in range(depth):
        await deploy_next()
        await until_phase(spaces, spec(deployed - 1).name, {WorkspacePhase.WAITING})
    for index in range(releases):
        running, first_in_line = spec(index).name, spec(index + 1).name
        await spaces.send(running, DeleteWorkspaceRequest(reason="bench"))
        await until_phase(spaces, first_in_line, {WorkspacePhase.RUNNING})
        await deploy_next()
        if (index + 1) % 10 == 0:
            progress(f"{index + 1}/{releases} releases")
    elapsed = time.monotonic() - started
    # Every deleted workspace's workflow has ended before its history is read whole.
    for index in range(releases):
        await until_phase(spaces, spec(index).name, {WorkspacePhase.DELETED})
    return elapsed


@dataclass(frozen=True)
class Admissions:
    """Per release, from the histories: release -> admitted and delete -> admitted (seconds), and
    the deleted workspace's whole life."""

    release_to_admitted: list[float]
    delete_to_admitted: list[float]
    lives: list[WorkflowHistory]


async def admissions(temporal: Client, ledger: list[WorkflowHistory], releases: int) -> Admissions:
    released = releases_received(ledger)
    found = Admissions([], [], [])
    for index in range(releases):
        name, following = spec(index).name, spec(index + 1).name
        (history,) = await histories(temporal, f"workspace/{name}")
        found.lives.append(history)
        (next_history,) = await histories(temporal, f"workspace/{following}")
        admitted = admitted_at(next_history)
        accepted = delete_accepted_at(history)
        if admitted is None or accepted is None or name not in released:
            raise RuntimeError(f"release {index}: missing events ({name} -> {following})")
        found.release_to_admitted.append((admitted - released[name]).total_seconds())
        found.delete_to_admitted.append((admitted - accepted).total_seconds())
    return found


async def measure(
    stack: Stack, releases: int, depth: int, ledger_run_events: int
) -> dict[str, Any]:
    settings = ColonySettings.from_env(stack.env)
    temporal = await Client.connect(
        **settings.temporal_connect, data_converter=pydantic_data_converter
    )
    session = TemporalSession.of_client(temporal, settings)
    spaces = TemporalWorkspaces(session)
    devbox = await published_class(TemporalClasses(session))
    stack.create_cluster(CLUSTER)
    await start_ledger(temporal, settings, ledger_run_events)
    elapsed = await keep_line(spaces, devbox, releases, depth)
    ledger = await histories(temporal, capacity_workflow_id(CLUSTER))
    seen = await admissions(temporal, ledger, releases)
    waited_releases = min(depth, releases - 1)
    waited = seen.lives[waited_releases]
    runs = [len(h.events) for h in ledger]
    return {
        "stack": json.loads(describe(stack)),
        "releases": releases,
        "queue_depth": depth,
        "wall_seconds": round(elapsed, 1),
        "release_to_admitted": distribution(seen.release_to_admitted),
        "delete_to_admitted": distribution(seen.delete_to_admitted),
        "release_to_admitted_samples": seen.release_to_admitted,
        "ledger_run_events": ledger_run_events,
        "ledger_runs": len(ledger),
        "ledger_events": sum(runs),
        "ledger_events_by_run": runs,
        "ledger_events_per_release": round(sum(runs) / releases, 1),
        "ledger_carried_bytes": carried_bytes(ledger),
        "life_admitted_at_once": {
            "workspace": spec(0).name,
            "events": len(seen.lives[0].events),
            "by_type": event_counts(seen.lives[0].events),
        },
        "life_after_waiting": {
            "workspace": spec(waited_releases).name,
            "waited_releases": waited_releases,
            "events": len(waited.events),
            "by_type": event_counts(waited.events),
        },
    }


def carried_bytes(ledger: list[WorkflowHistory]) -> list[int]:
    """The input each run after the first started with: the state continue-as-new carried."""
    sizes = []
    for history in ledger[1:]:
        started = history.events[0].workflow_execution_started_event_attributes
        sizes.append(sum(len(p.data) for p in started.input.payloads))
    return sizes


def report(found: dict[str, dict[str, Any]], record: Report) -> Any:
    for label, run in found.items():
        seen = run["release_to_admitted"]
        key = label.split()[-1] if label.startswith("with") else label.split()[0]
        record.add(
            Headline(f"{key}_p50_ms", f"{label}: release -> admitted, p50", seen["p50_ms"], "ms"),
            Headline(f"{key}_p99_ms", f"{label}: release -> admitted, p99", seen["p99_ms"], "ms",
                     "< 1000 ms", seen["p99_ms"] < 1000),
            Headline(f"{key}_max_ms", f"{label}: release -> admitted, max", seen["max_ms"], "ms"),
        )  # fmt: skip
    first = next(iter(found.values()))
    record.add(
        Headline("ledger_events_per_release", "ledger history events per release (and request)",
                 first["ledger_events_per_release"]),
        Headline("ledger_longest_run", "longest ledger run (events)",
                 max(first["ledger_events_by_run"]), "", f"<= {first['ledger_run_events']} + a few",
                 max(first["ledger_events_by_run"]) <= first["ledger_run_events"] + 50),
    )  # fmt: skip
    record.figures = found
    rows = [
        "| | release -> admitted p50 / p99 / max | delete -> admitted p50 / p99 / max | ledger "
        "runs (events each) | carried state | a life admitted at once / after waiting |",
        "|---|---|---|---|---|---|",
    ]
    for label, run in found.items():
        r, d = run["release_to_admitted"], run["delete_to_admitted"]
        rows.append(
            f"| {label} | {r['p50_ms']:.0f} / {r['p99_ms']:.0f} / {r['max_ms']:.0f} ms | "
            f"{d['p50_ms']:.0f} / {d['p99_ms']:.0f} / {d['max_ms']:.0f} ms | "
            f"{run['ledger_runs']} ({', '.join(str(n) for n in run['ledger_events_by_run'])}) | "
            f"{', '.join(f'{b:,} B' for b in run['ledger_carried_bytes']) or '-'} | "
            f"{run['life_admitted_at_once']['events']} / {run['life_after_waiting']['events']} "
            "events |"
        )
    per_release = first["ledger_events_per_release"]
    record.body = "\n".join(
        [
            f"One 8-GPU node, dev boxes asking for all 8: one runs, {first['queue_depth']} wait; "
            f"{first['releases']} releases by delete, each followed by one more deploy at the "
            "back. "
            + (
                "The same run twice: with `watcher.py`, and without (the workflows' own "
                "fallback alone)."
                if len(found) == 2
                else f"One run: {next(iter(found))}."
            ),
            "",
            *rows,
            "",
            "The watcher is not on this path: a release reaches the ledger as a signal from the "
            "deleted workspace's workflow, and the admission reaches the next one as a signal "
            "from the ledger; the uninstall before the release is waited on by an activity that "
            "reads the ServiceSet itself. So both columns measure the same path, and the watcher "
            "only adds `refresh` signals (ServiceSet changes) to the workspaces' histories.",
            "",
            f"**The ledger's history**: {per_release} events per release (each with a new request "
            "at the back and one admission). The ledger continues as new between two messages "
            f"once a run passes its threshold, here {first['ledger_run_events']:,} events "
            "(Colony's default: 4,000, so a run holds about "
            f"{4000 / per_release:,.0f} releases); the new run starts from the carried state: "
            "the line (each request with its reply address) and the request ids seen, kept to "
            "drop a repeated signal, at most the last 1,000 (`workflows.kit.engine.REQUEST_IDS_KEPT`). "
            "So the carried state grows over the first runs as ids accumulate and stops there: "
            "it is bounded by the line's depth plus 1,000 ids, not by the releases. Admissions "
            "that crossed a boundary are among the samples above.",
        ]
    )
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(8, 4.5))
    for label, run in found.items():
        ordered = sorted(x * 1000 for x in run["release_to_admitted_samples"])
        axis.plot(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], label=label)
    axis.axvline(1000, color="grey", linestyle="--", label="aim: p99 < 1 s")
    axis.set_xscale("log")
    axis.set_xlabel("release received by the ledger -> next workspace admitted (ms)")
    axis.set_ylabel("fraction of releases")
    axis.set_title(f"{first['releases']} releases, {first['queue_depth']} waiting")
    axis.grid(alpha=0.3, which="both")
    axis.legend()
    return figure


def main(argv: list[str] | None = None) -> int:
    parser = COMMAND.parser()
    args = parser.parse_args(argv)
    if args.releases < 2 or args.depth < 1:
        parser.error("--releases must be at least 2 and --depth at least 1")
    record = COMMAND.report("Wake-up under a deep queue: a GPU release to the next admission", args)
    found: dict[str, dict[str, Any]] = {}
    chosen = {"both": (True, False), "with": (True,), "without": (False,)}[args.watcher]
    for watcher in chosen:
        label = "with the watcher" if watcher else "fallback alone"
        progress(f"--- {label}")
        with private_stack(
            watcher=watcher, sim_timing=SIM_TIMINGS[args.sim_timing], temporal=args.temporal
        ) as stack:
            found[label] = asyncio.run(
                measure(stack, args.releases, args.depth, args.ledger_run_events)
            )
    publish(record, report(found, record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
