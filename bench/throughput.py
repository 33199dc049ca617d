"""Throughput against the ceiling: workspaces deployed and deleted per second, beside trivial
workflows with the same number of activity calls on the same server and worker.

`python -m bench.throughput [--workspaces 200] [--nodes 10] [--profile]` starts a private stack
(`bench.stack`: dev server, the sim with instant timing and `bench/inventory.yaml`, and as its
worker `python -m bench.ceiling`: `worker.py` unchanged plus the ceiling's worker in the same
process), creates one cluster `tput` with a pool of `--nodes` CPU hosts (128 cores each), and then:

1. a warm-up wave of 10 workspaces (not counted: caches, child clients, the first tasks);
2. Colony: `--workspaces` SSH dev boxes (CPU only, 4 cores each: no GPU ledger) deployed at once
   through the Temporal client with the models (`starter.clients.workspaces.TemporalWorkspaces.deploy`, the front
   door `colonyctl` uses), each deleted (`delete` update) as soon as it runs (`bench.waves`);
3. the activity calls of a workspace's deploy and of its delete, counted from the histories
   (median);
4. the ceiling: as many `bench.ceiling_workflow.CeilingWorkflow`s with that many no-op activity
   calls, before and after a `delete` update, in the same way.

Throughput is entities per second over the server timestamps of each wave (first start to last
close); the ratio Colony / ceiling is the figure (aim: at least 0.5). Beside it: each process's
CPU over each wave (what was busy), events per history, and the Kubernetes API requests per
workspace the sim answered. With `--profile`, or when the ratio misses 0.5, one more Colony wave
runs with py-spy attached to the worker (`bench.profile`) to show where its time goes.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
from collections.abc import Sequence
from typing import Any

from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.contrib.pydantic import pydantic_data_converter

from bench.ceiling import ceiling_task_queue
from bench.ceiling_workflow import (
    CEILING,
    KIND,
    CeilingDeleteRequest,
    CeilingInput,
    CeilingWorkflow,
)
from bench.command import Command, Option
from bench.profile import hot_spots, profiled
from bench.record import Headline, Report, progress, publish, pyplot, quick, scale
from bench.stack import INVENTORY, TEMPORAL, Stack, private_stack, wait_until
from bench.waves import (
    calls_of,
    histories,
    plot_lives,
    requests_per,
    requests_sentence,
    run_wave,
)
from infra.config import ColonySettings
from models.workspace import WorkspacePhase, WorkspaceSpec
from models.workspace_class import WorkspaceClassSpec
from models.workspace_operations import DeleteWorkspaceRequest
from starter.clients.classes import TemporalClasses
from starter.clients.temporal import TemporalSession
from starter.clients.workspaces import Deployment, TemporalWorkspaces
from starter.errors import NotFoundError, UnavailableError
from workflows.search_attributes import COLONY_KIND, COLONY_PHASE

CLUSTER = "tput"
LOCATION = "bench1"
CPU_SKU = "cpu-128c-2t"
CLASS = "colony-devbox-1-0-0"
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl bench"
WORKSPACE_KIND = "workspace"
TARGET_RATIO = 0.5
WARM_UP = scale(10, 2)

COMMAND = Command(
    "throughput",
    __doc__,
    Option("--workspaces", type=int, default=scale(200, 6)),
    Option("--nodes", type=int, default=scale(10, 1), help="128-core CPU nodes"),
    Option("--profile", action="store_true", help="profile one more Colony wave", recorded=False),
    TEMPORAL,
)


async def phase_ids(temporal: Client, kind: str, phase: str) -> set[str]:
    query = f"ColonyKind = '{kind}' AND ColonyPhase = '{phase}' AND ExecutionStatus = 'Running'"
    return {execution.id async for execution in temporal.list_workflows(query)}


class ColonyDriver:
    """Dev boxes through `starter.clients.workspaces`, as `colonyctl workspace deploy` sends them."""

    kind = WORKSPACE_KIND

    def __init__(
        self,
        temporal: Client,
        settings: ColonySettings,
        devbox: WorkspaceClassSpec,
        prefix: str,
        cluster: str = CLUSTER,
    ) -> None:
        self.temporal, self.settings, self.devbox = temporal, settings, devbox
        self.prefix, self.cluster = prefix, cluster
        self.spaces = TemporalWorkspaces(TemporalSession.of_client(temporal, settings))

    def spec(self, index: int) -> WorkspaceSpec:
        return WorkspaceSpec.model_validate(
            {
                "name": f"{self.prefix}-{index:04d}",
                "class": CLASS,
                "cluster": self.cluster,
                "answers": {"ssh.authorizedKeys": SSH_KEY},
            }
        )

    async def start(self, index: int) -> str:
        started = await self.spaces.deploy(
            Deployment(self.spec(index), workspace_class=self.devbox)
        )
        return started.workflow_id

    async def running(self) -> set[str]:
        return await phase_ids(self.temporal, self.kind, WorkspacePhase.RUNNING.value)

    async def failed(self) -> set[str]:
        return await phase_ids(self.temporal, self.kind, WorkspacePhase.FAILED.value)

    async def delete(self, workflow_id: str) -> None:
        name = workflow_id.rsplit("/", 1)[-1]
        await self.spaces.send(name, DeleteWorkspaceRequest(reason="bench"))


class CeilingDriver:
    """The ceiling's trivial workflows, started and deleted straight through the client."""

    kind = KIND

    def __init__(self, temporal: Client, task_queue: str, calls: CeilingInput, prefix: str) -> None:
        self.temporal, self.task_queue, self.calls, self.prefix = (
            temporal,
            task_queue,
            calls,
            prefix,
        )

    async def start(self, index: int) -> str:
        handle = await self.temporal.start_workflow(
            CeilingWorkflow.run,
            self.calls,
            id=CEILING.workflow_id(self.prefix, index),
            task_queue=self.task_queue,
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(COLONY_KIND, KIND),
                    SearchAttributePair(COLONY_PHASE, "Pending"),
                ]
            ),
        )
        return handle.id

    async def running(self) -> set[str]:
        return await phase_ids(self.temporal, self.kind, "Running")

    async def failed(self) -> set[str]:
        return set()

    async def delete(self, workflow_id: str) -> None:
        await self.temporal.get_workflow_handle(workflow_id).execute_update(
            CEILING.delete.name, CeilingDeleteRequest(reason="bench")
        )


async def connect(stack: Stack) -> tuple[Client, ColonySettings, WorkspaceClassSpec]:
    """The Temporal client, the settings, and the dev box class once the worker published it."""
    settings = ColonySettings.from_env(stack.env)
    temporal = await Client.connect(
        **settings.temporal_connect, data_converter=pydantic_data_converter
    )
    for _ in range(600):
        try:
            classes = TemporalClasses(TemporalSession.of_client(temporal, settings))
            return temporal, settings, await classes.get(CLASS)
        except (UnavailableError, NotFoundError):
            await asyncio.sleep(0.1)
    raise RuntimeError(f"the worker did not publish {CLASS} within a minute")


def create_cpu_cluster(stack: Stack, name: str, nodes: int) -> None:
    """A ready cluster with one pool of `nodes` 128-core hosts, through `colonyctl`."""
    done = stack.ctl(
        "cluster", "create", name, "--location-id", LOCATION,
        "--node-pool", f"name=cpu,count={nodes},cpuSku={CPU_SKU}",
        "--wait", "--timeout", "600", timeout=660,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"cluster create {name} exited {done.returncode}: {done.stderr}")


def median_calls(found: Sequence[Any]) -> CeilingInput:
    return CeilingInput(
        before=round(statistics.median(c.before_delete for c in found)),
        after=round(statistics.median(c.after_delete for c in found)),
    )


async def measure(stack: Stack, count: int, nodes: int, profile: bool) -> dict[str, Any]:
    temporal, settings, devbox = await connect(stack)
    progress(f"creating cluster {CLUSTER} with {nodes} CPU nodes")
    await asyncio.to_thread(create_cpu_cluster, stack, CLUSTER, nodes)
    await run_wave(
        "warm-up", stack, temporal, ColonyDriver(temporal, settings, devbox, "warm"), WARM_UP
    )
    colony = await run_wave(
        "colony", stack, temporal, ColonyDriver(temporal, settings, devbox, "ws"), count
    )
    lives = [calls_of(h) for h in await histories(temporal, colony.workflow_ids)]
    calls = median_calls(lives)
    progress(f"a workspace's deploy makes {calls.before} activity calls, its delete {calls.after}")
    queue = ceiling_task_queue(settings.task_queue)
    await run_wave(
        "ceiling warm-up", stack, temporal, CeilingDriver(temporal, queue, calls, "warm"), WARM_UP
    )
    ceiling = await run_wave(
        "ceiling", stack, temporal, CeilingDriver(temporal, queue, calls, "c"), count
    )
    trivial = [
        calls_of(h, CEILING.delete.name)
        for h in await histories(temporal, ceiling.workflow_ids[:20])
    ]
    ratio = colony.rate / ceiling.rate
    profiled_wave: dict[str, Any] | None = None
    if profile or (ratio < TARGET_RATIO and not quick()):
        profiled_wave = await profile_wave(stack, temporal, settings, devbox, count)
    return {
        "workspaces": count,
        "nodes": nodes,
        "colony": colony.summary(),
        "ceiling": ceiling.summary(),
        "ratio": round(ratio, 3),
        "activity_calls": {"deploy": calls.before, "delete": calls.after},
        "activity_calls_range": [
            min(c.activities for c in lives),
            max(c.activities for c in lives),
        ],
        "events_per_workspace": statistics.median(c.events for c in lives),
        "events_per_ceiling_workflow": statistics.median(c.events for c in trivial),
        "requests_per_workspace": requests_per(colony.requests, count),
        "lives": {"colony": colony.lives, "ceiling": ceiling.lives},
        "profile": profiled_wave,
    }


async def profile_wave(
    stack: Stack,
    temporal: Client,
    settings: ColonySettings,
    devbox: WorkspaceClassSpec,
    count: int,
) -> dict[str, Any]:
    """One more Colony wave with py-spy on the worker: where its Python time goes."""
    path = stack.workdir / "worker.pyspy"
    worker = stack.processes["worker"]
    async with profiled(worker.pid, path) as sampling:
        wave = await run_wave(
            "colony (profiled)",
            stack,
            temporal,
            ColonyDriver(temporal, settings, devbox, "pr"),
            count,
        )
    if not sampling:
        return {"skipped": "py-spy is not installed (it comes with the dev extras)"}
    return {"wave": wave.summary(), "worker": hot_spots(path, wave.wall_seconds)}


def cpu_table(waves: dict[str, dict[str, Any]]) -> str:
    names = sorted({n for wave in waves.values() for n in wave["usage"]})
    rows = [
        "| process | " + " | ".join(f"{label}: cores (CPU s)" for label in waves) + " |",
        "|---|" + "---|" * len(waves),
    ]
    for name in names:
        cells = []
        for wave in waves.values():
            used = wave["usage"].get(name)
            cells.append(f"{used['cores']:.2f} ({used['cpu_seconds']:.0f})" if used else "-")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    totals = [sum(used["cores"] for used in wave["usage"].values()) for wave in waves.values()]
    rows.append("| the whole stack | " + " | ".join(f"{t:.2f}" for t in totals) + " |")
    return "\n".join(rows)


def profile_text(profile: dict[str, Any] | None) -> str:
    if not profile:
        return ""
    if "skipped" in profile:
        return f"Profile: {profile['skipped']}."
    worker = profile["worker"]
    lines = [
        "## Where the worker's Python time goes (py-spy, a third Colony wave)",
        "",
        f"{worker['samples']} samples of busy Python threads over "
        f"{profile['wave']['wall_seconds']:.0f} s ({worker['busy_share']} busy samples per tick "
        "of 1/50 s: 1.0 is one thread busy all the time).",
        "",
        "| function, with what it calls | share of busy samples |",
        "|---|---|",
        *(f"| `{name}` | {share:.0%} |" for name, share in worker["inclusive"].items()),
        "",
        "| function, by itself | share |",
        "|---|---|",
        *(f"| `{name}` | {share:.0%} |" for name, share in worker["self"].items()),
        "",
        "The heaviest whole stacks (event loop and thread pool frames left out), in "
        "`throughput.json` under `profile.worker.stacks`.",
    ]
    return "\n".join(lines)


def temporal_of(report_: Report) -> str:
    """What ran Temporal in this run, in words."""
    if report_.name.endswith("-cluster"):
        return "Temporal cluster (PostgreSQL, frontend, history, matching and worker processes)"
    return "dev server"


def report(found: dict[str, Any], report_: Report) -> Any:
    colony, ceiling = found["colony"], found["ceiling"]
    ratio = found["ratio"]
    calls = found["activity_calls"]
    requests = found["requests_per_workspace"]
    report_.add(
        Headline("workspaces_per_second", "workspaces deployed and deleted per second",
                 colony["per_second"], "/s"),
        Headline("ceiling_per_second", "trivial workflows with as many activity calls, per second",
                 ceiling["per_second"], "/s"),
        Headline("ratio", "ratio Colony / ceiling", ratio, "", ">= 0.5", ratio >= TARGET_RATIO),
        Headline("activity_calls", "activity calls per workspace (deploy + delete)",
                 calls["deploy"] + calls["delete"]),
        Headline("events_per_workspace", "history events per workspace",
                 found["events_per_workspace"]),
        Headline("requests_per_workspace", "Kubernetes API requests per workspace (deploy + delete)",
                 requests["total"]),
    )  # fmt: skip
    report_.figures = {k: v for k, v in found.items() if k != "lives"}
    report_.figures["lives"] = found["lives"]
    waves = {"Colony": colony, "ceiling": ceiling}
    report_.body = "\n".join(
        [
            f"{found['workspaces']} dev boxes (CPU only) on one cluster of {found['nodes']} "
            f"128-core nodes, deployed at once and each deleted as soon as it ran, then as many "
            f"trivial workflows with the same activity calls ({calls['deploy']} before the delete, "
            f"{calls['delete']} after; a workspace's history made "
            f"{found['activity_calls_range'][0]} to {found['activity_calls_range'][1]}), on the "
            f"same {temporal_of(report_)} and the same worker process.",
            "",
            "| | Colony | ceiling |",
            "|---|---|---|",
            f"| per second (first start to last close) | {colony['per_second']:.2f} | "
            f"{ceiling['per_second']:.2f} |",
            f"| span | {colony['seconds']:.1f} s | {ceiling['seconds']:.1f} s |",
            f"| one life, p50 / max | {colony['life_p50_seconds']:.1f} / "
            f"{colony['life_max_seconds']:.1f} s | {ceiling['life_p50_seconds']:.1f} / "
            f"{ceiling['life_max_seconds']:.1f} s |",
            f"| history events each | {found['events_per_workspace']:.0f} | "
            f"{found['events_per_ceiling_workflow']:.0f} |",
            "",
            "CPU of each process over each wave (cores = CPU seconds / span; the machine has "
            f"{os.cpu_count()} cores, shared with other work):",
            "",
            cpu_table(waves),
            "",
            requests_sentence(requests, "workspace, deploy and delete") + ".",
            "",
            profile_text(found.get("profile")),
        ]
    )
    plt = pyplot()
    figure, (lives, cores) = plt.subplots(1, 2, figsize=(13, 4.5))
    plot_lives(lives, found["lives"], "entity", "deploy + delete, all started at once")
    names = sorted({n for wave in waves.values() for n in wave["usage"]})
    width = 0.38
    for offset, (label, wave) in enumerate(waves.items()):
        cores.bar(
            [i + offset * width for i in range(len(names))],
            [wave["usage"].get(n, {}).get("cores", 0) for n in names],
            width,
            label=label,
        )
    cores.set_xticks([i + width / 2 for i in range(len(names))], names)
    cores.set_ylabel("cores used over the wave")
    cores.set_title("who was busy")
    cores.legend()
    figure.tight_layout()
    return figure


def main(argv: Sequence[str] | None = None) -> int:
    args = COMMAND.parse(argv)
    record = COMMAND.report("Throughput against the Temporal ceiling", args)
    with private_stack(
        inventory=INVENTORY, worker_argv=["-m", "bench.ceiling"], temporal=args.temporal
    ) as stack:
        wait_until("the worker", lambda: "worker" in stack.usage())
        found = asyncio.run(measure(stack, args.workspaces, args.nodes, args.profile))
    figure = report(found, record)
    publish(record, figure)
    return 0


if __name__ == "__main__":
    sys.exit(main())
