"""Benchmark: what the HTTP API sustains, beside the same work done straight through Temporal.

In one run, on a private stack (dev server, sim with instant timing, worker: `bench.stack`) and
the API as its own process (`python -m api`, one uvicorn worker, rate limit off):

- reads: `GET /v1/kubernetes/clusters/{id}` of a ready cluster, with `--concurrency` requests in
  flight from one httpx client (keep-alive), for `--seconds`; then the same reads straight through
  the Temporal client (`clients.clusters.TemporalClusters.get`, a describe and a query each), from this
  process, with the same concurrency;
- create+delete pairs: `POST /v1/kubernetes/clusters` (no pools) then `DELETE` of the same
  cluster, answered 202 each; then the same pair straight through `TemporalClusters`
  (`create`, with its catalog check, and `delete`). A pair counts once both were accepted; the
  deletes finish in the background (the run waits for them before it stops).

Prints requests (or pairs) per second and median/p95 latency of each. Run:
`python -m bench.api_load` (`--seconds 10 --concurrency 8`). On this project's 2-core machines
the numbers are noisy (other work shares the cores): compare the two columns of one run.
Results in `bench/results/api_load.{json,md}` (`bench.record`).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import httpx

from bench.command import Command, Option
from bench.record import Headline, progress, publish, scale
from bench.stack import TEMPORAL, Stack, create_key, private_stack
from clients.clusters import TemporalClusters
from clients.temporal import TemporalSession, connect
from infra.config import ColonySettings
from models.cluster import ClusterSpec

ORGANIZATION = "bench"
CLUSTERS = "/v1/kubernetes/clusters"

COMMAND = Command(
    "api_load",
    __doc__,
    Option("--seconds", type=float, default=scale(10, 1), help="per measurement"),
    Option("--concurrency", type=int, default=8, help="requests in flight"),
    TEMPORAL,
)


@dataclass
class Result:
    what: str
    count: int
    seconds: float
    latencies: list[float]

    @property
    def rate(self) -> float:
        return self.count / self.seconds

    def line(self) -> str:
        ms = sorted(x * 1000 for x in self.latencies) or [0.0]
        p95 = ms[min(len(ms) - 1, int(len(ms) * 0.95))]
        return (
            f"{self.what:<44} {self.rate:8.1f}/s   median {statistics.median(ms):6.1f} ms   "
            f"p95 {p95:6.1f} ms   ({self.count} in {self.seconds:.1f}s)"
        )


async def sustained(
    what: str, step: Callable[[int], Awaitable[None]], seconds: float, concurrency: int
) -> Result:
    """Run `step` from `concurrency` loops until `seconds` pass; how many finished, how fast."""
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    counter = 0

    async def loop() -> None:
        nonlocal counter
        while time.perf_counter() < deadline:
            counter += 1
            started = time.perf_counter()
            await step(counter)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(concurrency)))
    return Result(what, len(latencies), time.perf_counter() - started, latencies)


async def measure(
    stack: Stack, url: str, key: str, seconds: float, concurrency: int
) -> list[Result]:
    settings = ColonySettings.from_env(stack.env)
    temporal = await connect(settings)
    clusters = TemporalClusters(TemporalSession.of_client(temporal, settings, ORGANIZATION))
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=60) as http:
        name = "readme"
        created = await http.post(CLUSTERS, json={"name": name, "locationId": "fra1"})
        created.raise_for_status()
        deadline = time.monotonic() + 60
        while (await http.get(f"{CLUSTERS}/{name}")).json()["status"] != "ready":
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster {name} not ready within 60 s")
            await asyncio.sleep(0.2)

        async def api_read(_: int) -> None:
            (await http.get(f"{CLUSTERS}/{name}")).raise_for_status()

        async def direct_read(_: int) -> None:
            await clusters.get(name)

        async def api_pair(index: int) -> None:
            cluster = f"api-pair-{index}"
            body = {"name": cluster, "locationId": "fra1"}
            (await http.post(CLUSTERS, json=body)).raise_for_status()
            (await http.delete(f"{CLUSTERS}/{cluster}")).raise_for_status()

        async def direct_pair(index: int) -> None:
            cluster = f"direct-pair-{index}"
            spec = ClusterSpec(name=cluster, location_id="fra1", organization=ORGANIZATION)
            # What colonyctl and the API both do: the catalog check, then the start.
            await clusters.create(spec)
            await clusters.delete(cluster)

        await sustained("warm-up", api_read, 1.0, concurrency)
        results = [
            await sustained(f"GET {CLUSTERS}/{{id}} (API)", api_read, seconds, concurrency),
            await sustained(
                "TemporalClusters.get (Temporal client)", direct_read, seconds, concurrency
            ),
            await sustained("create+delete pairs (API)", api_pair, seconds, concurrency),
            await sustained(
                "create+delete pairs (Temporal client)", direct_pair, seconds, concurrency
            ),
        ]
        await http.delete(f"{CLUSTERS}/{name}")
        # Let the deletes finish: nothing of the run is left behind in the stack being stopped.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if not await clusters.list_all(organization=ORGANIZATION):
                break
            await asyncio.sleep(1)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args = COMMAND.parse(argv)
    record = COMMAND.report("The HTTP API beside the same work straight through Temporal", args)
    with private_stack(api=1, temporal=args.temporal) as stack:
        key = create_key(stack, ORGANIZATION)
        results = asyncio.run(
            measure(stack, stack.api_urls[0], key, args.seconds, args.concurrency)
        )
    lines = [result.line() for result in results]
    progress("\n".join(lines))
    api_read, direct_read, api_pair, direct_pair = results
    record.add(
        Headline("api_reads_per_second", "GET /v1/kubernetes/clusters/{id} through the API",
                 round(api_read.rate, 1), "/s"),
        Headline("direct_reads_per_second", "query_status through the Temporal client",
                 round(direct_read.rate, 1), "/s"),
        Headline("read_ratio", "reads: API / Temporal client", round(api_read.rate / direct_read.rate, 2)),
        Headline("api_pairs_per_second", "create+delete pairs through the API",
                 round(api_pair.rate, 2), "/s"),
        Headline("direct_pairs_per_second", "create+delete pairs through the Temporal client",
                 round(direct_pair.rate, 2), "/s"),
    )  # fmt: skip
    record.figures = {
        r.what: {"count": r.count, "seconds": round(r.seconds, 2), "per_second": round(r.rate, 2)}
        for r in results
    }
    record.body = "\n".join(
        [
            f"{args.concurrency} in flight, {args.seconds:g} s each; the API is one uvicorn "
            "process (rate limit off).",
            "",
            "```",
            *lines,
            "```",
        ]
    )
    publish(record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
