"""Benchmark: the simulator's real world beside the emulated one (issue 26): how long a world takes
to start, how long a ClusterDeployment takes to be Ready with its node (a child cluster: an
emulated store and server, or a real control plane with KWOK), and the memory a real child holds.

Each round starts both worlds in turn (instant timing) in this process and, in each, creates
`--clusters` ClusterDeployments of one GPU host one after the other, timing each from its create
to Ready (the node registered and Ready) and then to gone after its delete; rounds alternate
which world goes first, so machine noise hits both alike. Medians are reported side by side with
their ratio. The components are built first when they are not (`components.build`: that time is
not counted).

Run: `python -m bench.real_world` (`--rounds 3 --clusters 3`); results in
`bench/results/real_world.{json,md}` (`bench.record`).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from bench.command import Command, Option
from bench.record import Headline, progress, publish, scale
from components import build
from sim.apiserver.registry import NODES, ResourceType
from sim.clusterapi import ClusterApi
from sim.real.child import RealChildCluster
from sim.timing import SimTiming
from sim.world import EMULATED, KCM_NAMESPACE, REAL, World, WorldConfig, make_world

COMMAND = Command(
    "real_world",
    __doc__,
    Option("--rounds", type=int, default=scale(3, 1)),
    Option("--clusters", type=int, default=scale(3, 1)),
)
K0RDENT = "k0rdent.mirantis.com"
READY_TIMEOUT = 300.0


async def _cluster(world: World, name: str) -> dict[str, float]:
    """Create a one-GPU-host ClusterDeployment; seconds to Ready (and its node Ready), to gone."""
    management = world.management_api
    rt = management.registry.get(K0RDENT, "clusterdeployments")
    host = next(h for h in world.inventory.hosts(state="free") if h.gpu_count)
    body = {
        "apiVersion": f"{K0RDENT}/v1beta1",
        "kind": "ClusterDeployment",
        "metadata": {"name": name, "namespace": KCM_NAMESPACE},
        "spec": {
            "template": "remote-cluster-1-0-0",
            "credential": "remote-cluster-credential",
            "config": {"machines": [{"address": host.address, "port": host.ssh_port}]},
        },
    }
    began = time.monotonic()
    await management.create(rt, body)
    await _until(lambda: _ready(world, management, rt, name), "Ready")
    ready = time.monotonic() - began
    child = world.child_cluster(KCM_NAMESPACE, name)
    rss = sum(child.rss().values()) if isinstance(child, RealChildCluster) else 0
    began = time.monotonic()
    await management.delete(rt, KCM_NAMESPACE, name)
    await _until(lambda: _gone(management, rt, name), "gone")
    return {"ready": ready, "gone": time.monotonic() - began, "rss_mb": rss / 2**20}


async def _ready(world: World, api: ClusterApi, rt: ResourceType, name: str) -> bool:
    obj = await api.get(rt, KCM_NAMESPACE, name)
    conditions = (obj.get("status") or {}).get("conditions") or []
    child = world.child_cluster(KCM_NAMESPACE, name)
    if child is None or not any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
        return False
    nodes = await child.api.list(NODES)
    return bool(nodes) and all(
        any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])
        for n in nodes
    )


async def _gone(api: ClusterApi, rt: ResourceType, name: str) -> bool:
    return await api.try_get(rt, KCM_NAMESPACE, name) is None


async def _until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not {what} within {READY_TIMEOUT:.0f}s")
        await asyncio.sleep(0.05)


async def _round(kind: str, clusters: int, round_: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"bench-{kind}-") as scratch:
        config = WorldConfig(state_dir=Path(scratch), timing=SimTiming.instant(), world=kind)
        began = time.monotonic()
        world = await make_world(config).start()
        try:
            start = time.monotonic() - began
            rows = [await _cluster(world, f"b{round_}-{i}") for i in range(clusters)]
        finally:
            await world.stop()
    progress(f"{kind}: started in {start:.2f}s; clusters {[round(r['ready'], 2) for r in rows]}")
    return {"start": start, "clusters": rows}


async def measure(rounds: int, clusters: int) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {EMULATED: [], REAL: []}
    for round_ in range(rounds):
        order = (EMULATED, REAL) if round_ % 2 == 0 else (REAL, EMULATED)
        for kind in order:
            found[kind].append(await _round(kind, clusters, round_))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    args = COMMAND.parse(argv)
    record = COMMAND.report("The real world beside the emulated one: starts and clusters", args)
    for name in ("etcd", "kubernetes", "kwok"):
        build.ensure(name)
    found = asyncio.run(measure(args.rounds, args.clusters))

    def median(kind: str, key: str) -> float:
        if key == "start":
            return float(statistics.median(r["start"] for r in found[kind]))
        return float(statistics.median(c[key] for r in found[kind] for c in r["clusters"]))

    rows = []
    for key, label in (
        ("start", "world start"),
        ("ready", "cluster Ready"),
        ("gone", "cluster gone"),
    ):
        emulated, real = median(EMULATED, key), median(REAL, key)
        rows.append((key, label, emulated, real))
        record.add(
            Headline(f"{key}_emulated_s", f"{label}, emulated", round(emulated, 3), "s"),
            Headline(f"{key}_real_s", f"{label}, real", round(real, 2), "s"),
            Headline(
                f"{key}_ratio", f"{label}, real / emulated", round(real / max(emulated, 1e-3), 1)
            ),
        )
    record.add(
        Headline("child_rss_mb", "a real child's memory", round(median(REAL, "rss_mb")), "MB")
    )
    record.figures = found
    record.body = "\n".join(
        ["| step | emulated | real | ratio |", "|---|---|---|---|"]
        + [
            f"| {label} | {e:.3f} s | {r:.2f} s | {r / max(e, 1e-3):.0f}x |"
            for _, label, e, r in rows
        ]
    )
    publish(record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
