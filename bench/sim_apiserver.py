"""Benchmark of the sim's Kubernetes API emulator: requests/s over real HTTPS, watch fan-out, memory.

Run: `python -m bench.sim_apiserver` (`make bench` runs it). Everything is on loopback and every loop is
bounded (by count and by time). One emulated cluster serves the request benchmarks; the client is
one keep-alive aiohttp session in a separate process (as Colony would be), so client and
server do not share the GIL.
Watch fan-out opens N watch streams (aiohttp, in the loop) and counts events delivered per second
while the store emits changes. Memory is the RSS growth (from /proc/self/status) of 10 child
clusters (store + HTTPS server) with 100 nodes and 1,000 pods each, populated through the store.

Targets (from the sim's brief): well over 1,000 simple requests/s; under 300 MB for the 10 clusters.
Writes `bench/results/sim_apiserver.{json,md}` (`bench.record`); `BENCH_QUICK=1` runs it small.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import json
import os
import ssl
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from bench.command import Command, Option
from bench.record import Headline, Report, progress, publish, quick, scale
from sim.apiserver.auth import CertificateAuthority
from sim.apiserver.registry import CONFIGMAPS, NODES, PODS
from sim.apiserver.server import ClusterServer
from sim.apiserver.store import ClusterStore

CLIENT_TOKEN_ENV = "BENCH_SIM_CLIENT_TOKEN"
"""The client process's bearer token: in its environment, not its arguments, where one starting
with "-" (one in 64 of `secrets.token_urlsafe`) read as an option, and `ps` would show it."""
TARGET_RPS = 1000.0
TARGET_MEMORY_MB = 300.0

COMMAND = Command(
    "sim_apiserver",
    __doc__,
    Option(
        "--client",
        nargs=2,
        metavar=("URL", "CA_FILE"),
        help=argparse.SUPPRESS,
        recorded=False,
    ),
    Option("--requests", type=int, default=scale(3000, 200), help="max requests per operation"),
    Option(
        "--seconds", type=float, default=0.5 if quick() else 3.0, help="max seconds per operation"
    ),
    Option("--in-flight", type=int, default=8, help="requests outstanding in the concurrent pass"),
    Option("--watchers", type=int, default=scale(50, 5)),
    Option("--events", type=int, default=scale(200, 20)),
    Option("--clusters", type=int, default=scale(10, 2)),
    Option("--nodes", type=int, default=scale(100, 10)),
    Option("--pods", type=int, default=scale(1000, 100)),
)


@dataclass
class Row:
    name: str
    count: int
    seconds: float
    unit: str = "req/s"

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0


def rss_mb() -> float:
    """Resident set size of this process in MB (Linux /proc; 0 elsewhere)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def node(name: str) -> dict[str, Any]:
    capacity = {"cpu": "112", "memory": "2Ti", "pods": "110", "nvidia.com/gpu": "8"}
    return {
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.count": "8",
            },
        },
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def pod(name: str, node_name: str, app: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app, "tier": "bench"}},
        "spec": {
            "nodeName": node_name,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "1", "memory": "4Gi"}},
                }
            ],
        },
        "status": {"phase": "Running"},
    }


def populate(store: ClusterStore, nodes: int, pods: int) -> None:
    for i in range(nodes):
        store.create(NODES, node(f"node-{i:03d}"))
    for i in range(pods):
        store.create(PODS, pod(f"pod-{i:04d}", f"node-{i % nodes:03d}", f"app-{i % 10}"))


async def timed_loop(
    call: Callable[[int], Awaitable[None]], max_count: int, max_seconds: float, in_flight: int = 1
) -> Row:
    """Await `call(i)` until `max_count` calls or `max_seconds` passed, with up to `in_flight`
    calls outstanding at once; count and time the finished ones."""
    start = time.perf_counter()
    numbers = itertools.count()
    done = 0

    async def lane() -> None:
        nonlocal done
        while time.perf_counter() - start < max_seconds:
            i = next(numbers)
            if i >= max_count:
                return
            await call(i)
            done += 1

    await asyncio.gather(*(lane() for _ in range(in_flight)))
    return Row("", done, time.perf_counter() - start)


async def request_rows(
    url: str, token: str, ca_file: str, max_count: int, seconds: float, in_flight: int = 1
) -> list[Row]:
    """The request benchmarks with one keep-alive aiohttp client (run in its own process), with
    `in_flight` requests outstanding on as many connections."""
    ssl_context = ssl.create_default_context(cafile=ca_file)
    connector = aiohttp.TCPConnector(ssl=ssl_context, limit=in_flight)
    headers = {"Authorization": f"Bearer {token}"}
    rows: list[Row] = []
    async with aiohttp.ClientSession(url, connector=connector, headers=headers) as http:

        async def check(response: aiohttp.ClientResponse) -> None:
            async with response:
                await response.read()
                if response.status >= 400:
                    raise RuntimeError(f"{response.url}: {response.status}")

        async def get(i: int) -> None:
            await check(await http.get(f"/api/v1/namespaces/default/pods/pod-{i % 1000:04d}"))

        async def get_node(i: int) -> None:
            await check(await http.get(f"/api/v1/nodes/node-{i % 100:03d}"))

        async def list_selected(i: int) -> None:
            await check(
                await http.get(
                    "/api/v1/namespaces/default/pods",
                    params={"labelSelector": f"app=app-{i % 10},tier=bench"},
                )
            )

        async def patch(i: int) -> None:
            await check(
                await http.patch(
                    f"/api/v1/namespaces/default/pods/pod-{i % 1000:04d}",
                    data=json.dumps({"metadata": {"annotations": {"bench/iteration": str(i)}}}),
                    headers={"Content-Type": "application/merge-patch+json"},
                )
            )

        await get(0)  # connection and TLS handshake outside the measurement
        operations: tuple[tuple[str, Callable[[int], Awaitable[None]], int], ...] = (
            ("GET pod", get, max_count),
            ("GET node", get_node, max_count),
            ("LIST pods labelSelector (100 of 1000)", list_selected, max_count // 5),
            ("PATCH pod (merge)", patch, max_count),
        )
        for name, call, count in operations:
            row = await timed_loop(call, count, seconds, in_flight)
            row.name = name if in_flight == 1 else f"{name} ({in_flight} in flight)"
            rows.append(row)
    return rows


async def client_process(
    url: str, token: str, ca_file: str, max_count: int, seconds: float, in_flight: int = 1
) -> list[Row]:
    """Run `request_rows` in a child process, as Colony would be: the client never shares the GIL."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.sim_apiserver", "--client", url, ca_file,
        "--requests", str(max_count), "--seconds", str(seconds), "--in-flight", str(in_flight),
        stdout=asyncio.subprocess.PIPE, env={**os.environ, CLIENT_TOKEN_ENV: token},
    )  # fmt: skip
    out, _ = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"benchmark client failed with exit code {process.returncode}")
    return [Row(**row) for row in json.loads(out)]


async def watch_fanout(server: ClusterServer, ca_file: str, watchers: int, events: int) -> Row:
    """N watchers on configmaps; `events` store changes; events delivered per second in total."""
    store = server.store
    store.create(CONFIGMAPS, {"metadata": {"name": "bench-watch"}, "data": {"i": "0"}})
    _, rv = store.list(CONFIGMAPS)
    ssl_context = ssl.create_default_context(cafile=ca_file)
    headers = {"Authorization": f"Bearer {server.admin_token}"}
    url = (
        f"{server.url}/api/v1/namespaces/default/configmaps"
        f"?watch=true&resourceVersion={rv}&timeoutSeconds=60"
    )
    expected = watchers * events
    received = 0
    all_done = asyncio.Event()
    connector = aiohttp.TCPConnector(ssl=ssl_context, limit=watchers + 10)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        responses = [await session.get(url) for _ in range(watchers)]

        async def consume(response: aiohttp.ClientResponse) -> None:
            nonlocal received
            seen = 0
            async for _line in response.content:
                seen += 1
                received += 1
                if received >= expected:
                    all_done.set()
                if seen >= events:
                    return

        tasks = [asyncio.create_task(consume(r)) for r in responses]
        await asyncio.sleep(0.05)
        start = time.perf_counter()
        for i in range(events):
            store.mutate(CONFIGMAPS, "default", "bench-watch", _set_counter(i + 1))
            if i % 20 == 0:
                await asyncio.sleep(0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_done.wait(), timeout=60)
        seconds = time.perf_counter() - start
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for response in responses:
            response.close()
    return Row(
        f"WATCH fan-out ({watchers} watchers x {events} events)", received, seconds, "events/s"
    )


async def memory_of_children(
    ca: CertificateAuthority, clusters: int, nodes: int, pods: int
) -> tuple[float, float]:
    """(RSS growth in MB, seconds) for `clusters` started child clusters populated via the store."""
    gc.collect()
    before = rss_mb()
    start = time.perf_counter()
    servers: list[ClusterServer] = []
    for i in range(clusters):
        store = ClusterStore(f"child-{i}")
        populate(store, nodes, pods)
        server = ClusterServer(store.name, store, ca)
        await server.start()
        servers.append(server)
    seconds = time.perf_counter() - start
    gc.collect()
    grown = rss_mb() - before
    for server in servers:
        await server.stop()
    return grown, seconds


async def server_rows(ca: CertificateAuthority, args: argparse.Namespace) -> list[Row]:
    """The request benchmarks (one at a time, then `--in-flight`) and the watch fan-out against
    one emulated cluster of 100 nodes and 1,000 pods."""
    store = ClusterStore("bench")
    populate(store, 100, 1000)
    server = ClusterServer("bench", store, ca)
    await server.start()
    with tempfile.NamedTemporaryFile("w", suffix=".crt", delete=False) as handle:
        handle.write(_ca_pem(server))
        ca_file = handle.name
    try:
        # Sequential requests measure latency (one Python client is half of every round trip);
        # several in flight measure what the server itself sustains.
        rows = await client_process(
            server.url, server.admin_token, ca_file, args.requests, args.seconds
        )
        rows += await client_process(
            server.url, server.admin_token, ca_file, args.requests, args.seconds, args.in_flight
        )
        rows.append(await watch_fanout(server, ca_file, args.watchers, args.events))
    finally:
        await server.stop()
        os.unlink(ca_file)
    return rows


def report(
    record: Report, args: argparse.Namespace, rows: list[Row], grown: float, seconds: float
) -> None:
    """Headlines, figures and body of the request and watch `rows` and the memory growth."""
    table = [
        "| operation | count | seconds | rate |",
        "|---|---|---|---|",
        *(
            f"| {row.name} | {row.count} | {row.seconds:.2f} | {row.rate:,.0f} {row.unit} |"
            for row in rows
        ),
    ]
    progress("\n".join(table))
    for label, in_flight in (("one at a time", False), (f"{args.in_flight} in flight", True)):
        simple = [
            r
            for r in rows
            if r.unit == "req/s"
            and not r.name.startswith("LIST")
            and ("in flight" in r.name) == in_flight
        ]
        slowest = min(r.rate for r in simple)
        record.add(
            Headline(
                "slowest_simple_rps" + ("_in_flight" if in_flight else ""),
                f"slowest simple request (GET, PATCH), {label}",
                round(slowest),
                "req/s",
                f"> {TARGET_RPS:.0f} req/s",
                slowest > TARGET_RPS,
            )
        )
    watch = next(r for r in rows if r.unit == "events/s")
    record.add(
        Headline("watch_events_per_second", watch.name, round(watch.rate), "events/s"),
        Headline(
            "memory_mb",
            f"RSS growth of {args.clusters} child clusters x ({args.nodes} nodes + {args.pods} pods)",
            round(grown, 1),
            "MB",
            f"< {TARGET_MEMORY_MB:.0f} MB",
            grown < TARGET_MEMORY_MB,
        ),
    )
    record.figures = {
        "rows": [{**vars(row), "rate": round(row.rate, 1)} for row in rows],
        "memory_mb": round(grown, 1),
        "populate_seconds": round(seconds, 2),
    }
    record.body = "\n".join(
        [
            "One emulated cluster (100 nodes, 1,000 pods) over HTTPS on loopback; the client is "
            "one keep-alive aiohttp session in another process. One at a time measures latency "
            "(the Python client is half of every round trip); several in flight measure what the "
            "server sustains.",
            "",
            *table,
            "",
            f"Memory: {args.clusters} child clusters (store and HTTPS server) populated in "
            f"{seconds:.1f} s grew the RSS by {grown:.0f} MB.",
        ]
    )


async def main_async(args: argparse.Namespace, record: Report) -> int:
    ca = CertificateAuthority()
    rows = await server_rows(ca, args)
    grown, seconds = await memory_of_children(ca, args.clusters, args.nodes, args.pods)
    report(record, args, rows, grown, seconds)
    publish(record)
    return 0


def _set_counter(value: int) -> Callable[[dict[str, Any]], None]:
    def update(obj: dict[str, Any]) -> None:
        obj["data"]["i"] = str(value)

    return update


def _ca_pem(server: ClusterServer) -> str:
    import base64

    return base64.b64decode(server.ca.cert_b64).decode()


def main(argv: list[str] | None = None) -> int:
    args = COMMAND.parse(argv)
    if args.client:
        url, ca_file = args.client
        token = os.environ[CLIENT_TOKEN_ENV]
        rows = asyncio.run(
            request_rows(url, token, ca_file, args.requests, args.seconds, args.in_flight)
        )
        print(json.dumps([vars(row) for row in rows]))
        return 0
    record = COMMAND.report(
        "The sim's Kubernetes API emulator: requests per second, watch fan-out, memory", args
    )
    return asyncio.run(main_async(args, record))


if __name__ == "__main__":
    raise SystemExit(main())
