"""How long a GPU release takes to reach the next waiting workspace, and what one workspace's whole
life costs its history.

`python -m bench.workspace_admission [--releases N] [--depth K] [--sim-timing default]` starts a
private stack (`bench.stack`: dev server, the sim with instant timing, or its default timing with
`--sim-timing default`, `worker.py` as its own process), creates
a cluster with one H100 node (8 GPUs), and deploys SSH dev boxes that each ask for all 8 GPUs: one
runs, the next K wait in line. Then N times: delete the running one (`delete` update), wait until
the first in line runs, deploy one more at the back of the line. Workspaces are driven through
`starter.workspace_client`, the functions `colonyctl` calls, from this process.

Figures, from the workflows' histories (server timestamps, so the benchmark's own polling does not
count):

- release -> admitted: from the ledger's (`capacity/<cluster>`) receipt of the deleted workspace's
  `release` signal to the next workspace's receipt of its `capacity_answer` admitted; what a
  release costs Colony, signal to signal through the ledger.
- delete -> admitted: from the delete update being accepted by the running workspace's workflow
  to the same admission; includes what comes first: routes, and the ServiceSet's removal (the
  release uninstalled, seen as a watch event); the values Secret and the namespace follow it.
- history events of one workspace's whole life (deploy -> Running -> delete), for the first one
  (admitted at once) and for one that waited K releases in line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from datetime import datetime
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter

from activities.settings import ColonySettings
from bench.stack import Stack, describe, private_stack
from models.identity import capacity_workflow_id
from models.workspace import WorkspacePhase, WorkspaceSpec
from models.workspace_operations import DeleteWorkspaceRequest
from starter import workspace_client as spaces
from starter.errors import NotFoundError, UnavailableError

CLUSTER = "admission"
CLASS = "colony-devbox-1-0-0"
GPUS = 8
"""A whole H100 host: one workspace at a time, every other one waits."""
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl bench"
POLL = 0.02
SIM_TIMINGS = {"instant": ["--instant"], "default": ["--time-scale", "1"]}
"""The sim's flags for each `--sim-timing`."""


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


async def phase(temporal: Client, name: str) -> WorkspacePhase | None:
    status = await spaces.read_workspace(temporal, name)
    return status.phase if status else None


async def until_phase(
    temporal: Client, name: str, wanted: set[WorkspacePhase], timeout: float = 120
) -> None:
    deadline = time.monotonic() + timeout
    while (current := await phase(temporal, name)) not in wanted:
        if current is WorkspacePhase.FAILED or time.monotonic() > deadline:
            raise RuntimeError(f"{name} is {current}, not {sorted(wanted)}")
        await asyncio.sleep(POLL)


def _payload(event: Any) -> dict[str, Any]:
    payloads = event.workflow_execution_signaled_event_attributes.input.payloads
    return json.loads(payloads[0].data) if payloads else {}


def _time(event: Any) -> datetime:
    moment: datetime = event.event_time.ToDatetime()
    return moment


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
            if event.workflow_execution_signaled_event_attributes.signal_name != "capacity":
                continue
            message = _payload(event)
            if message.get("kind") == "release":
                found.setdefault(str(message.get("target", "")).split("/")[0], _time(event))
    return found


def admitted_at(history: WorkflowHistory) -> datetime | None:
    """When the workspace received its admission."""
    for event in history.events:
        if (
            event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
            and event.workflow_execution_signaled_event_attributes.signal_name == "capacity_answer"
            and _payload(event).get("decision") == "admitted"
        ):
            return _time(event)
    return None


def delete_accepted_at(history: WorkflowHistory) -> datetime | None:
    for event in history.events:
        attributes = event.workflow_execution_update_accepted_event_attributes
        if (
            event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
            and attributes.accepted_request.input.name == "delete"
        ):
            return _time(event)
    return None


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    cuts = statistics.quantiles(ordered, n=100, method="inclusive")
    return {
        "n": len(ordered),
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p99_ms": round(cuts[98] * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
        "min_ms": round(ordered[0] * 1000, 1),
    }


def event_counts(history: WorkflowHistory) -> dict[str, int]:
    counts: dict[str, int] = {}
    for event in history.events:
        name = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_").lower()
        counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


async def measure(stack: Stack, releases: int, depth: int) -> dict[str, Any]:
    settings = ColonySettings.from_env(stack.env)
    temporal = await Client.connect(
        **settings.temporal_connect, data_converter=pydantic_data_converter
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            devbox = await spaces.get_class(temporal, CLASS)
            break
        except (UnavailableError, NotFoundError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
    stack.create_cluster(CLUSTER)

    deployed = 0

    async def deploy_next() -> None:
        nonlocal deployed
        prepared = spaces.prepare_workspace(spec(deployed), devbox)
        await spaces.start_workspace(temporal, settings, prepared, workspace_class=devbox)
        deployed += 1

    started = time.monotonic()
    await deploy_next()
    await until_phase(temporal, spec(0).name, {WorkspacePhase.RUNNING})
    for _ in range(depth):
        await deploy_next()
        await until_phase(temporal, spec(deployed - 1).name, {WorkspacePhase.WAITING})
    for index in range(releases):
        running, first_in_line = spec(index).name, spec(index + 1).name
        await spaces.send(temporal, running, "delete", DeleteWorkspaceRequest(reason="bench"))
        await until_phase(temporal, first_in_line, {WorkspacePhase.RUNNING})
        await deploy_next()
        if (index + 1) % 10 == 0:
            print(f"{index + 1}/{releases} releases", file=sys.stderr, flush=True)
    elapsed = time.monotonic() - started
    # Every deleted workspace's workflow has ended before its history is read whole.
    for index in range(releases):
        await until_phase(temporal, spec(index).name, {WorkspacePhase.DELETED})

    ledger = await histories(temporal, capacity_workflow_id(CLUSTER))
    released = releases_received(ledger)
    signal_to_signal: list[float] = []
    delete_to_admitted: list[float] = []
    lives: dict[int, WorkflowHistory] = {}
    for index in range(releases):
        name, following = spec(index).name, spec(index + 1).name
        (history,) = await histories(temporal, f"workspace/{name}")
        lives[index] = history
        (next_history,) = await histories(temporal, f"workspace/{following}")
        admitted = admitted_at(next_history)
        accepted = delete_accepted_at(history)
        if admitted is None or accepted is None or name not in released:
            raise RuntimeError(f"release {index}: missing events ({name} -> {following})")
        signal_to_signal.append((admitted - released[name]).total_seconds())
        delete_to_admitted.append((admitted - accepted).total_seconds())
    waited = lives[min(depth, releases - 1)]
    return {
        "stack": json.loads(describe(stack)),
        "releases": releases,
        "queue_depth": depth,
        "wall_seconds": round(elapsed, 1),
        "release_to_admitted": percentiles(signal_to_signal),
        "delete_to_admitted": percentiles(delete_to_admitted),
        "ledger_runs": len(ledger),
        "ledger_events": sum(len(h.events) for h in ledger),
        "life_admitted_at_once": {
            "workspace": spec(0).name,
            "events": len(lives[0].events),
            "by_type": event_counts(lives[0]),
        },
        "life_after_waiting": {
            "workspace": spec(min(depth, releases - 1)).name,
            "waited_releases": min(depth, releases - 1),
            "events": len(waited.events),
            "by_type": event_counts(waited),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.workspace_admission", description=__doc__
    )
    parser.add_argument("--releases", type=int, default=100)
    parser.add_argument("--depth", type=int, default=5, help="workspaces waiting in line")
    parser.add_argument(
        "--sim-timing",
        choices=sorted(SIM_TIMINGS),
        default="instant",
        help="the simulator's delays: none (instant), or its defaults (an uninstall takes 0.3 s, "
        "a pod's termination 0.5 s: sim/timing.py)",
    )
    args = parser.parse_args()
    if args.releases < 2 or args.depth < 1:
        parser.error("--releases must be at least 2 and --depth at least 1")
    with private_stack(sim_timing=SIM_TIMINGS[args.sim_timing]) as stack:
        result = asyncio.run(measure(stack, args.releases, args.depth))
    result["sim_timing"] = args.sim_timing
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
