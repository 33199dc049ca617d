"""Two workers and two API replicas against one Temporal server, beside one of each: the
throughput of `bench.throughput`'s workload, sent through the HTTP API.

`python -m bench.scale_out [--workspaces 200] [--nodes 10]` starts a private stack
(`bench.stack`: dev server, the sim with instant timing and `bench/inventory.yaml`, one
`worker.py` and one API replica, `python -m api`, each its own process), creates an API key and,
through the API, a cluster of `--nodes` 128-core CPU hosts. Then, in the same run:

1. one worker, one API: a warm-up wave, then `--workspaces` SSH dev boxes deployed at once
   (`POST /v1/workspaces`), each deleted (`DELETE /v1/workspaces/{name}`) as soon as the API's
   list (`GET /v1/workspaces?cluster=`) shows it running (`bench.waves`);
2. a second worker and a second API replica are started (the same task queue, the same server);
   requests alternate between the replicas; a warm-up wave, then the same wave again.

The figure is the ratio of the two throughputs (workspaces per second, server timestamps), with
each process's CPU over each wave: on a machine with as many cores as the stack has busy
processes a second worker would add throughput; on 2 shared cores it shows who was busy.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from collections.abc import Sequence
from typing import Any

import httpx
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from bench.command import Command, Option
from bench.record import Headline, Report, progress, publish, pyplot, scale
from bench.stack import INVENTORY, TEMPORAL, Stack, create_key, private_stack, start_api
from bench.throughput import CLASS, CPU_SKU, LOCATION, SSH_KEY, cpu_table
from bench.waves import Wave, plot_lives, run_wave

ORGANIZATION = "bench"
CLUSTER = "scale"
WARM_UP = scale(10, 2)

COMMAND = Command(
    "scale_out",
    __doc__,
    Option("--workspaces", type=int, default=scale(200, 6)),
    Option("--nodes", type=int, default=scale(10, 1)),
    TEMPORAL,
)


class ApiDriver:
    """Dev boxes through the HTTP API's replicas, one request after the other on each in turn."""

    kind = "workspace"

    def __init__(self, http: httpx.AsyncClient, urls: list[str], prefix: str) -> None:
        self.http, self.prefix = http, prefix
        self._next = itertools.cycle(urls)

    def _url(self, path: str) -> str:
        return f"{next(self._next)}{path}"

    async def start(self, index: int) -> str:
        body = {
            "name": f"{self.prefix}-{index:04d}",
            "class": CLASS,
            "cluster": CLUSTER,
            "answers": {"ssh.authorizedKeys": SSH_KEY},
        }
        answer = await self.http.post(self._url("/v1/workspaces"), json=body)
        answer.raise_for_status()
        return str(answer.json()["workflowId"])

    async def _in_phase(self, phase: str) -> set[str]:
        answer = await self.http.get(self._url("/v1/workspaces"), params={"cluster": CLUSTER})
        answer.raise_for_status()
        return {item["workflowId"] for item in answer.json()["items"] if item["phase"] == phase}

    async def running(self) -> set[str]:
        return await self._in_phase("Running")

    async def failed(self) -> set[str]:
        return await self._in_phase("Failed")

    async def delete(self, workflow_id: str) -> None:
        name = workflow_id.rsplit("/", 1)[-1]
        (await self.http.delete(self._url(f"/v1/workspaces/{name}"))).raise_for_status()


async def create_cluster(http: httpx.AsyncClient, url: str, nodes: int) -> None:
    pool = {"name": "cpu", "sku": {"cpuSku": CPU_SKU}, "count": nodes}
    body = {"name": CLUSTER, "locationId": LOCATION, "nodePools": [pool]}
    (await http.post(f"{url}/v1/kubernetes/clusters", json=body)).raise_for_status()
    deadline = time.monotonic() + 600
    while (await http.get(f"{url}/v1/kubernetes/clusters/{CLUSTER}")).json()["status"] != "ready":
        if time.monotonic() > deadline:
            raise RuntimeError(f"cluster {CLUSTER} not ready within 600 s")
        await asyncio.sleep(0.5)


async def measure(stack: Stack, count: int, nodes: int) -> dict[str, Any]:
    key = await asyncio.to_thread(create_key, stack, ORGANIZATION)
    temporal = await Client.connect(
        stack.env["TEMPORAL_ADDRESS"], data_converter=pydantic_data_converter
    )
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(headers=headers, timeout=120) as http:
        progress(f"creating cluster {CLUSTER} with {nodes} CPU nodes through the API")
        await create_cluster(http, stack.api_urls[0], nodes)
        waves: dict[str, Wave] = {}
        for setup in ("one worker, one API", "two workers, two APIs"):
            if setup.startswith("two"):
                stack.spawn("worker-2", [sys.executable, "worker.py"], stack.env)
                await asyncio.to_thread(start_api, stack, "api-2")
            tag = "a" if setup.startswith("one") else "b"
            await run_wave(
                f"{setup}: warm-up",
                stack,
                temporal,
                ApiDriver(http, stack.api_urls, f"warm{tag}"),
                WARM_UP,
            )
            waves[setup] = await run_wave(
                setup, stack, temporal, ApiDriver(http, stack.api_urls, f"ws{tag}"), count
            )
    one, two = waves.values()
    return {
        "workspaces": count,
        "nodes": nodes,
        "waves": {label: wave.summary() for label, wave in waves.items()},
        "ratio": round(two.rate / one.rate, 3),
        "lives": {label: wave.lives for label, wave in waves.items()},
    }


def report(found: dict[str, Any], record: Report) -> Any:
    one, two = found["waves"].values()
    record.add(
        Headline("one_by_one_per_second", "one worker, one API: workspaces per second",
                 one["per_second"], "/s"),
        Headline("two_by_two_per_second", "two workers, two APIs: workspaces per second",
                 two["per_second"], "/s"),
        Headline("ratio", "ratio two / one", found["ratio"]),
    )  # fmt: skip
    record.figures = found
    record.body = "\n".join(
        [
            f"{found['workspaces']} SSH dev boxes (CPU only) deployed at once and deleted as soon "
            f"as each ran, through the HTTP API, on one cluster of {found['nodes']} nodes; first "
            "with one worker and one API replica, then with a second of each added (requests "
            "alternate between the replicas), on the same dev server and sim.",
            "",
            "| | one of each | two of each |",
            "|---|---|---|",
            f"| per second | {one['per_second']:.2f} | {two['per_second']:.2f} |",
            f"| span | {one['seconds']:.1f} s | {two['seconds']:.1f} s |",
            f"| one life, p50 / max | {one['life_p50_seconds']:.1f} / {one['life_max_seconds']:.1f} s "
            f"| {two['life_p50_seconds']:.1f} / {two['life_max_seconds']:.1f} s |",
            "",
            "CPU of each process over each wave (cores = CPU seconds / span):",
            "",
            cpu_table(found["waves"]),
        ]
    )
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(8, 4.5))
    plot_lives(axis, found["lives"], "workspace", "deploy + delete through the API, all at once")
    return figure


def main(argv: Sequence[str] | None = None) -> int:
    args = COMMAND.parse(argv)
    record = COMMAND.report("Two workers and two API replicas against one of each", args)
    with private_stack(inventory=INVENTORY, api=1, temporal=args.temporal) as stack:
        found = asyncio.run(measure(stack, args.workspaces, args.nodes))
    publish(record, report(found, record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
