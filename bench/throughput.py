"""Throughput against the ceiling: workspaces deployed and deleted per second, beside trivial
workflows with the same number of activity calls on the same server and worker.

`python -m bench.throughput [--workspaces 40,200] [--servers memory,file] [--rounds 2]
[--nodes 10] [--profile]` runs, for each Temporal dev server (`memory`: in memory, as the tests
run it; `file`: on a SQLite file, as `make run` keeps it), a private stack (`bench.stack`: dev
server, the sim with instant timing and `bench/inventory.yaml`, and as its worker
`python -m bench.ceiling`: `worker.py` unchanged plus the ceiling's worker in the same process),
creates one cluster `tput` with a pool of `--nodes` CPU hosts (128 cores each), and then:

1. a warm-up wave of 10 workspaces (not counted: caches, child clients, the first tasks), whose
   histories give the activity calls of a workspace's deploy and of its delete (median), and a
   warm-up wave of the ceiling with as many;
2. per size N of `--workspaces`, `--rounds` times: a wave of N SSH dev boxes (CPU only, 4 cores
   each: no GPU ledger) deployed at once through the Temporal client with the models
   (`clients.workspaces.TemporalWorkspaces.deploy`, the front door `colonyctl` uses),
   each deleted (`delete` update) as soon as it runs (`bench.waves`), then a wave of N
   `bench.ceiling_workflow.CeilingWorkflow`s in the same way, one right after the other, so each
   ratio compares two waves run under the same load.

Throughput is entities per second over the server timestamps of each wave (first start to last
close); the ratio Colony / ceiling is the figure (aim: at least 0.8 on both servers, at each N).
Beside it, per life: the worker's CPU (aim: at most 1.3 times the ceiling's), split by thread
(the event loop, the other Python threads, the SDK's core), the dev server's and the sim's CPU,
history events and workflow tasks, and the Kubernetes API requests the sim answered. With
`--profile`, one more Colony wave on the first server runs with py-spy attached to the worker
(`bench.profile`) to show where its Python time goes.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from temporalio.api.enums.v1 import EventType
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
from bench.stack import CLUSTER as TEMPORAL_CLUSTER
from bench.stack import INVENTORY, TEMPORAL, Stack, private_stack, thread_cpu, wait_until
from bench.waves import (
    Wave,
    calls_of,
    histories,
    plot_lives,
    requests_per,
    requests_sentence,
    run_wave,
)
from clients.classes import TemporalClasses
from clients.errors import NotFoundError, UnavailableError
from clients.temporal import TemporalSession
from clients.workspaces import Deployment, TemporalWorkspaces
from infra.config import ColonySettings
from models.workspace import WorkspacePhase, WorkspaceSpec
from models.workspace_class import WorkspaceClassSpec
from models.workspace_operations import DeleteWorkspaceRequest
from workflows.search_attributes import COLONY_KIND, COLONY_PHASE

CLUSTER = "tput"
LOCATION = "bench1"
CPU_SKU = "cpu-128c-2t"
CLASS = "colony-devbox-1-0-0"
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl bench"
WORKSPACE_KIND = "workspace"
TARGET_RATIO = 0.8
"""Colony's lives per second over the ceiling's, at least (issue 30)."""
TARGET_WORKER_CPU = 1.3
"""The worker's CPU per life over the ceiling's, at most (issue 30)."""
WARM_UP = scale(10, 2)
SERVERS = ("memory", "file")

COMMAND = Command(
    "throughput",
    __doc__,
    Option("--workspaces", default="6" if quick() else "40,200", help="wave sizes, e.g. 40,200"),
    Option("--servers", default="memory" if quick() else "memory,file",
           help="Temporal dev servers: memory, file (SQLite, as make run)"),
    Option("--rounds", type=int, default=scale(2, 1), help="Colony and ceiling waves per size"),
    Option("--nodes", type=int, default=scale(10, 1), help="128-core CPU nodes"),
    Option("--profile", action="store_true", help="profile one more Colony wave", recorded=False),
    TEMPORAL,
)  # fmt: skip


async def phase_ids(temporal: Client, kind: str, phase: str) -> set[str]:
    query = f"ColonyKind = '{kind}' AND ColonyPhase = '{phase}' AND ExecutionStatus = 'Running'"
    return {execution.id async for execution in temporal.list_workflows(query)}


class ColonyDriver:
    """Dev boxes through `clients.workspaces`, as `colonyctl workspace deploy` sends them."""

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


def workflow_tasks(history: Any) -> int:
    return sum(
        1
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    )


@dataclass
class Pair:
    """One Colony wave and the ceiling's wave right after it, with the worker's thread CPU."""

    colony: Wave
    ceiling: Wave
    threads: dict[str, dict[str, float]]
    """Per wave label (`colony`, `ceiling`): CPU seconds per life by kind of worker thread."""

    @property
    def ratio(self) -> float:
        return self.colony.rate / self.ceiling.rate

    def per_life(self, wave: Wave, process: str) -> float:
        """CPU milliseconds of `process` per entity of `wave`."""
        used = wave.usage.get(process)
        return 1000 * used["cpu_seconds"] / wave.count if used else 0.0


async def threaded_wave(
    label: str, stack: Stack, temporal: Client, driver: Any, count: int
) -> tuple[Wave, dict[str, float]]:
    """A wave, and the worker's CPU milliseconds per life by kind of thread over it."""
    pid = stack.processes["worker"].pid
    before = thread_cpu(pid)
    wave = await run_wave(label, stack, temporal, driver, count)
    after = thread_cpu(pid)
    return wave, {k: round(1000 * (after[k] - before[k]) / count, 1) for k in after}


async def measure_server(
    stack: Stack, server: str, sizes: list[int], rounds: int, nodes: int, profile: bool
) -> dict[str, Any]:
    """Every size's rounds on one server's stack (see the module docstring)."""
    temporal, settings, devbox = await connect(stack)
    progress(f"[{server}] creating cluster {CLUSTER} with {nodes} CPU nodes")
    await asyncio.to_thread(create_cpu_cluster, stack, CLUSTER, nodes)
    warm = await run_wave(
        f"[{server}] warm-up", stack, temporal, ColonyDriver(temporal, settings, devbox, "warm"),
        WARM_UP,
    )  # fmt: skip
    warm_lives = [calls_of(h) for h in await histories(temporal, warm.workflow_ids)]
    calls = median_calls(warm_lives)
    progress(f"a workspace's deploy makes {calls.before} activity calls, its delete {calls.after}")
    queue = ceiling_task_queue(settings.task_queue)
    await run_wave(
        f"[{server}] ceiling warm-up", stack, temporal,
        CeilingDriver(temporal, queue, calls, "warm"), WARM_UP,
    )  # fmt: skip
    found: dict[str, Any] = {"server": server, "activity_calls": {"deploy": calls.before,
                             "delete": calls.after}, "sizes": {}}  # fmt: skip
    for size in sizes:
        pairs: list[Pair] = []
        for round_ in range(rounds):
            prefix = f"n{size}r{round_}"
            colony, colony_threads = await threaded_wave(
                f"[{server}] colony N={size} #{round_ + 1}", stack, temporal,
                ColonyDriver(temporal, settings, devbox, f"ws{prefix}"), size,
            )  # fmt: skip
            ceiling, ceiling_threads = await threaded_wave(
                f"[{server}] ceiling N={size} #{round_ + 1}", stack, temporal,
                CeilingDriver(temporal, queue, calls, f"c{prefix}"), size,
            )  # fmt: skip
            pairs.append(
                Pair(colony, ceiling, {"colony": colony_threads, "ceiling": ceiling_threads})
            )
        found["sizes"][str(size)] = await size_figures(temporal, pairs)
    if profile:
        found["profile"] = await profile_wave(stack, temporal, settings, devbox, max(sizes))
    return found


async def size_figures(temporal: Client, pairs: list[Pair]) -> dict[str, Any]:
    """One size's figures over its rounds: medians, with every round's value beside them."""
    last = pairs[-1]
    colony_histories = await histories(temporal, last.colony.workflow_ids[:40])
    ceiling_histories = await histories(temporal, last.ceiling.workflow_ids[:40])
    lives = [calls_of(h) for h in colony_histories]
    trivial = [calls_of(h, CEILING.delete.name) for h in ceiling_histories]

    def median_of(values: list[float]) -> float:
        return round(statistics.median(values), 3)

    ratios = [round(p.ratio, 3) for p in pairs]
    cpu = {
        kind: {
            process: median_of([p.per_life(getattr(p, kind), process) for p in pairs])
            for process in ("worker", "temporal", "sim")
        }
        for kind in ("colony", "ceiling")
    }
    worker_ratios = [
        round(p.per_life(p.colony, "worker") / p.per_life(p.ceiling, "worker"), 2)
        for p in pairs
        if p.per_life(p.ceiling, "worker")
    ]
    threads = {
        kind: {
            thread: median_of([p.threads[kind][thread] for p in pairs])
            for thread in pairs[0].threads[kind]
        }
        for kind in ("colony", "ceiling")
    }
    return {
        "ratio": median_of(ratios),
        "ratios": ratios,
        "colony_per_second": median_of([p.colony.rate for p in pairs]),
        "ceiling_per_second": median_of([p.ceiling.rate for p in pairs]),
        "worker_cpu_ratio": median_of(worker_ratios) if worker_ratios else None,
        "worker_cpu_ratios": worker_ratios,
        "cpu_ms_per_life": cpu,
        "worker_threads_ms_per_life": threads,
        "events_per_life": {
            "colony": statistics.median(c.events for c in lives),
            "ceiling": statistics.median(c.events for c in trivial),
        },
        "workflow_tasks_per_life": {
            "colony": statistics.median(workflow_tasks(h) for h in colony_histories),
            "ceiling": statistics.median(workflow_tasks(h) for h in ceiling_histories),
        },
        "activity_calls_range": [
            min(c.activities for c in lives),
            max(c.activities for c in lives),
        ],
        "requests_per_workspace": requests_per(last.colony.requests, last.colony.count),
        "waves": [{"colony": p.colony.summary(), "ceiling": p.ceiling.summary()} for p in pairs],
        "lives": {"colony": last.colony.lives, "ceiling": last.ceiling.lives},
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
    """Each process's cores (and CPU seconds) over each wave, as a markdown table (also
    `bench.scale_out`'s)."""
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


def _size_rows(server: str, size: str, row: dict[str, Any]) -> list[str]:
    cpu, threads = row["cpu_ms_per_life"], row["worker_threads_ms_per_life"]
    return [
        f"| {server} | {size} | {row['colony_per_second']:.2f} | {row['ceiling_per_second']:.2f} "
        f"| **{row['ratio']:.2f}** ({', '.join(f'{r:.2f}' for r in row['ratios'])}) "
        f"| {cpu['colony']['worker']:.0f} / {cpu['ceiling']['worker']:.0f} "
        f"| **{row['worker_cpu_ratio']}** ({', '.join(str(r) for r in row['worker_cpu_ratios'])}) "
        f"| {threads['colony']['main']:.0f} + {threads['colony']['python threads']:.0f} + "
        f"{threads['colony']['core']:.0f} / {threads['ceiling']['main']:.0f} + "
        f"{threads['ceiling']['python threads']:.0f} + {threads['ceiling']['core']:.0f} "
        f"| {cpu['colony']['temporal']:.0f} / {cpu['ceiling']['temporal']:.0f} "
        f"| {cpu['colony']['sim']:.0f} "
        f"| {row['events_per_life']['colony']:.0f} / {row['events_per_life']['ceiling']:.0f} "
        f"| {row['workflow_tasks_per_life']['colony']:.0f} / "
        f"{row['workflow_tasks_per_life']['ceiling']:.0f} |"
    ]


def temporal_of(report_: Report) -> str:
    """What ran Temporal in this run, in words."""
    if report_.name.endswith("-cluster"):
        return "Temporal cluster (PostgreSQL, frontend, history, matching and worker processes)"
    return "dev server"


def report(found: dict[str, Any], report_: Report) -> Any:
    servers = found["servers"]
    for server in servers:
        for size, row in server["sizes"].items():
            where = f"{server['server']}, N={size}"
            report_.add(
                Headline(f"ratio_{server['server']}_{size}", f"ratio Colony / ceiling ({where})",
                         row["ratio"], "", f">= {TARGET_RATIO}", row["ratio"] >= TARGET_RATIO),
                Headline(f"worker_cpu_{server['server']}_{size}",
                         f"worker CPU per life, Colony / ceiling ({where})",
                         row["worker_cpu_ratio"], "", f"<= {TARGET_WORKER_CPU}",
                         row["worker_cpu_ratio"] is not None
                         and row["worker_cpu_ratio"] <= TARGET_WORKER_CPU),
            )  # fmt: skip
    first = servers[0]
    largest = first["sizes"][max(first["sizes"], key=int)]
    calls = first["activity_calls"]
    report_.add(
        Headline("workspaces_per_second", f"workspaces deployed and deleted per second "
                 f"({first['server']}, N={max(first['sizes'], key=int)})",
                 largest["colony_per_second"], "/s"),
        Headline("ceiling_per_second", "trivial workflows with as many calls per second (same N)",
                 largest["ceiling_per_second"], "/s"),
        Headline("ratio", "ratio Colony / ceiling (same N)", largest["ratio"]),
        Headline("activity_calls", "activity calls per workspace (deploy + delete)",
                 calls["deploy"] + calls["delete"]),
        Headline("events_per_workspace", "history events per workspace",
                 largest["events_per_life"]["colony"]),
        Headline("requests_per_workspace", "Kubernetes API requests per workspace (deploy + delete)",
                 largest["requests_per_workspace"]["total"]),
    )  # fmt: skip
    report_.figures = found
    body = [
        f"Waves of N dev boxes (CPU only) on one cluster of {found['nodes']} 128-core nodes, "
        f"deployed at once and each deleted as soon as it ran, each followed by as many trivial "
        f"workflows with the same activity calls ({calls['deploy']} before the delete, "
        f"{calls['delete']} after), on the same {temporal_of(report_)} and the same worker "
        f"process; "
        f"{found['rounds']} such pairs per N and server. Medians, each pair's value in brackets.",
        "",
        "| server | N | Colony /s | ceiling /s | ratio | worker CPU ms per life, Colony / "
        "ceiling | ratio | worker threads ms: loop + Python threads + core | Temporal CPU ms "
        "per life | sim ms | events per life | workflow tasks per life |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for server in servers:
        for size, row in server["sizes"].items():
            body += _size_rows(server["server"], size, row)
    body += [
        "",
        "Worker threads: the event loop runs the SDK's activations bookkeeping and the "
        "activities' async code; the other Python threads run workflow activations (in the "
        "sandbox) and the Kubernetes client's blocking calls; the core is the SDK's Rust.",
        "",
        requests_sentence(largest["requests_per_workspace"], "workspace, deploy and delete") + ".",
        "",
        profile_text(first.get("profile")),
    ]
    report_.body = "\n".join(body)
    plt = pyplot()
    figure, lives = plt.subplots(1, 1, figsize=(7, 4.5))
    plot_lives(lives, largest["lives"], "entity", "deploy + delete, all started at once")
    figure.tight_layout()
    return figure


def main(argv: Sequence[str] | None = None) -> int:
    args = COMMAND.parse(argv)
    record = COMMAND.report("Throughput against the Temporal ceiling", args)
    sizes = [int(n) for n in args.workspaces.split(",")]
    servers = args.servers.split(",")
    unknown = set(servers) - set(SERVERS)
    if unknown:
        COMMAND.parser().error(f"--servers: {', '.join(sorted(unknown))} (known: memory, file)")
    if args.temporal == TEMPORAL_CLUSTER:
        # The production shape has one Temporal: its PostgreSQL (the dev server's kinds are moot).
        servers = [TEMPORAL_CLUSTER]
    measured = []
    for number, server in enumerate(servers):
        with private_stack(
            inventory=INVENTORY,
            worker_argv=["-m", "bench.ceiling"],
            temporal=args.temporal,
            server="memory" if server == TEMPORAL_CLUSTER else server,
        ) as stack:
            wait_until("the worker", lambda: "worker" in stack.usage())
            measured.append(
                asyncio.run(
                    measure_server(
                        stack, server, sizes, args.rounds, args.nodes, args.profile and number == 0
                    )
                )
            )
    found = {"nodes": args.nodes, "rounds": args.rounds, "servers": measured}
    figure = report(found, record)
    publish(record, figure)
    return 0


if __name__ == "__main__":
    sys.exit(main())
