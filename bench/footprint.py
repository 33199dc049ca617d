"""Footprint: the worker's memory with 1,000 running workspaces on 20 clusters, and the Kubernetes
API requests a workspace deployment costs, counted at the emulator.

`python -m bench.footprint [--clusters 20] [--workspaces 1000]` starts a private stack
(`bench.stack`: dev server, the sim with instant timing and `bench/inventory.yaml`, `worker.py` as
its own process), creates `--clusters` clusters of two 128-core CPU nodes (through `colonyctl`,
four at a time), then deploys `--workspaces` SSH dev boxes spread evenly over them (CPU only,
through `clients.workspaces.TemporalWorkspaces.deploy`, 50 in flight) and waits until every one runs. Every
two seconds it samples the resident memory of the worker, the sim and the dev server against the
number of running workspaces (the PNG); the headline is the worker's RSS once all run and its
peak (aim: under 500 MB). The sim's request counter (`GET /sim/v1/requests`) gives the Kubernetes
API requests of the deploys, per workspace; per node drained is `bench.drain_scale`'s.

The worker keeps up to 1,000 workflows in its cache (the SDK's default `max_cached_workflows`),
so at 1,000 workspaces (and 20 clusters) it holds about as many as it ever will.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.command import Command, Option
from bench.record import Headline, Report, progress, publish, pyplot, scale
from bench.stack import INVENTORY, Stack, private_stack, requests_grown
from bench.throughput import ColonyDriver, connect, create_cpu_cluster, phase_ids
from bench.waves import requests_per, requests_sentence
from models.workspace import WorkspacePhase

TARGET_MB = 500.0
NODES_PER_CLUSTER = 2
"""64 dev boxes of 4 cores fit on two 128-core nodes: 50 per cluster leave room."""
SAMPLE_EVERY = 2.0
DEPLOYS_IN_FLIGHT = 50

COMMAND = Command(
    "footprint",
    __doc__,
    Option("--clusters", type=int, default=scale(20, 2)),
    Option("--workspaces", type=int, default=scale(1000, 10)),
)


async def measure(stack: Stack, clusters: int, count: int) -> dict[str, Any]:
    temporal, settings, devbox = await connect(stack)
    names = [f"fp-{i:02d}" for i in range(clusters)]
    progress(f"creating {clusters} clusters of {NODES_PER_CLUSTER} nodes")
    began = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        await asyncio.gather(
            *(
                asyncio.get_running_loop().run_in_executor(
                    pool, create_cpu_cluster, stack, name, NODES_PER_CLUSTER
                )
                for name in names
            )
        )
    progress(f"{clusters} clusters ready in {time.monotonic() - began:.0f} s")
    idle = stack.usage()
    samples: list[dict[str, float]] = []
    requests_before = stack.sim_requests()
    drivers = [
        ColonyDriver(temporal, settings, devbox, f"fp{i:02d}", name) for i, name in enumerate(names)
    ]
    slots = asyncio.Semaphore(DEPLOYS_IN_FLIGHT)
    began = time.monotonic()

    async def deploy(index: int) -> None:
        async with slots:
            await drivers[index % clusters].start(index // clusters)

    deploys = asyncio.gather(*(deploy(i) for i in range(count)))
    running = 0
    while True:
        running = len(await phase_ids(temporal, "workspace", WorkspacePhase.RUNNING.value))
        failed = await phase_ids(temporal, "workspace", WorkspacePhase.FAILED.value)
        if failed:
            raise RuntimeError(f"{len(failed)} workspaces failed, e.g. {sorted(failed)[0]}")
        used = stack.usage()
        samples.append(
            {
                "seconds": round(time.monotonic() - began, 1),
                "running": running,
                **{f"{name}_rss_mb": used[name].rss_mb for name in ("worker", "sim", "temporal")},
            }
        )
        if running >= count:
            break
        if len(samples) % 15 == 0:
            progress(f"{running}/{count} running, worker RSS {used['worker'].rss_mb:.0f} MB")
        if time.monotonic() - began > 1800:
            raise RuntimeError(f"only {running} of {count} running after 30 minutes")
        await asyncio.sleep(SAMPLE_EVERY)
    await deploys
    deployed_in = time.monotonic() - began
    requests = requests_grown(requests_before, stack.sim_requests())
    # Settled: ten more seconds of nothing to do, then the last reading.
    await asyncio.sleep(10)
    settled = stack.usage()
    worker_peak = max(s["worker_rss_mb"] for s in samples)
    return {
        "clusters": clusters,
        "workspaces": count,
        "deployed_in_seconds": round(deployed_in, 1),
        "worker_rss_mb": {
            "idle_with_clusters": round(idle["worker"].rss_mb, 1),
            "all_running": round(settled["worker"].rss_mb, 1),
            "peak": round(worker_peak, 1),
        },
        "rss_mb_all_running": {name: round(u.rss_mb, 1) for name, u in settled.items()},
        "worker_cpu_seconds_per_deploy": round(
            (settled["worker"].cpu_seconds - idle["worker"].cpu_seconds) / count, 3
        ),
        "requests_per_deployment": requests_per(requests, count),
        "samples": samples,
    }


def report(found: dict[str, Any], record: Report) -> Any:
    rss = found["worker_rss_mb"]
    requests = found["requests_per_deployment"]
    record.add(
        Headline("worker_rss_mb", f"worker RSS, {found['workspaces']:,} workspaces running on "
                 f"{found['clusters']} clusters", rss["all_running"], "MB", "< 500 MB",
                 rss["all_running"] < TARGET_MB),
        Headline("worker_peak_rss_mb", "worker RSS, peak while deploying", rss["peak"], "MB",
                 "< 500 MB", rss["peak"] < TARGET_MB),
        Headline("worker_idle_rss_mb", f"worker RSS with the {found['clusters']} clusters only",
                 rss["idle_with_clusters"], "MB"),
        Headline("requests_per_deployment", "Kubernetes API requests per workspace deployment",
                 requests["total"]),
    )  # fmt: skip
    record.figures = {k: v for k, v in found.items()}
    others = found["rss_mb_all_running"]
    record.body = "\n".join(
        [
            f"{found['workspaces']:,} SSH dev boxes (CPU only) deployed over {found['clusters']} "
            f"clusters of {NODES_PER_CLUSTER} nodes, {DEPLOYS_IN_FLIGHT} deploys in flight, all "
            f"running after {found['deployed_in_seconds']:.0f} s. Memory once all ran (and 10 s "
            "of rest): "
            + ", ".join(f"{name} {mb:.0f} MB" for name, mb in sorted(others.items()))
            + f". The worker used {found['worker_cpu_seconds_per_deploy'] * 1000:.0f} ms of CPU "
            "per deployment.",
            "",
            requests_sentence(requests, "deployment") + ". Per node drained: see `drain_scale.md`.",
        ]
    )
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(9, 4.5))
    running = [s["running"] for s in found["samples"]]
    for name in ("worker", "sim", "temporal"):
        axis.plot(running, [s[f"{name}_rss_mb"] for s in found["samples"]], label=name)
    axis.axhline(TARGET_MB, color="grey", linestyle="--", label="worker aim")
    axis.set_xlabel("workspaces running")
    axis.set_ylabel("RSS (MB)")
    axis.set_title(
        f"memory while {found['workspaces']:,} workspaces deploy on {found['clusters']} clusters"
    )
    axis.grid(alpha=0.3)
    axis.legend()
    return figure


def main(argv: Sequence[str] | None = None) -> int:
    args = COMMAND.parse(argv)
    record = COMMAND.report("Footprint: worker memory and Kubernetes API requests", args)
    with private_stack(inventory=INVENTORY) as stack:
        found = asyncio.run(measure(stack, args.clusters, args.workspaces))
    publish(record, report(found, record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
