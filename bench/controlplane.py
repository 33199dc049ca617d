"""Benchmark: what a real Kubernetes control plane costs here (`components.controlplane`): its
start-up time, step by step, and its resident memory, process by process; and what each further
control plane on the same etcd adds (the real world gives every ClusterDeployment one).

Start-up is measured from the call to the moment everything answers (kube-apiserver /readyz;
kube-controller-manager, kube-scheduler and KWOK healthy, and the `default` ServiceAccount made);
memory once all of them run, after a short settling pause (the API server's caches fill first).
The binaries are built before the clock starts (`components.build`: a look-up when built; that
look-up's own time is reported too).

Run: `python -m bench.controlplane` (`--planes 3`); results in `bench/results/controlplane.*`.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.command import Command, Option
from bench.record import Headline, progress, publish, scale
from components import build
from components.controlplane import ControlPlane, Etcd

COMMAND = Command(
    "controlplane",
    __doc__,
    Option("--planes", type=int, default=scale(3, 1), help="control planes on one etcd"),
    Option("--settle", type=float, default=float(scale(5, 1)), help="seconds before RSS is read"),
)
MIB = 2**20


def main(argv: Sequence[str] | None = None) -> int:
    args = COMMAND.parse(argv)
    record = COMMAND.report("A real control plane: start-up and memory", args)
    lookups = []
    for _ in range(3):
        started = time.perf_counter()
        for name in ("etcd", "kubernetes", "kwok"):
            build.ensure(name)
        lookups.append(time.perf_counter() - started)
    lookup = statistics.median(lookups)
    with tempfile.TemporaryDirectory(prefix="colony-bench-cp-") as scratch:
        root = Path(scratch)
        own = ControlPlane.start(root / "alone", name="alone")
        time.sleep(args.settle)
        alone = own.figures()
        own.stop()
        progress(f"alone: {alone.start_seconds} {alone.rss_bytes}")
        planes: list[ControlPlane] = []
        with Etcd.start(root / "etcd") as etcd:
            try:
                for index in range(args.planes):
                    planes.append(
                        ControlPlane.start(root / f"p{index}", name=f"p{index}", etcd=etcd)
                    )
                time.sleep(args.settle)
                shared = [plane.figures() for plane in planes]
                etcd_rss = etcd.rss()
            finally:
                for plane in planes:
                    plane.stop()
    starts = [f.start_seconds["total"] for f in shared]
    per_plane = [f.rss_total for f in shared]
    record.add(
        Headline(
            "start_s",
            "start-up of a control plane (its own etcd)",
            round(alone.start_seconds["total"], 1),
            "s",
        ),
        Headline("rss_mib", "its memory (RSS, every process)", round(alone.rss_total / MIB), "MiB"),
        Headline(
            "shared_start_s",
            f"start-up on a shared etcd (median of {len(starts)})",
            round(statistics.median(starts), 1),
            "s",
        ),
        Headline(
            "shared_rss_mib",
            "memory per further control plane (etcd shared)",
            round(statistics.median(per_plane) / MIB),
            "MiB",
        ),
        Headline("lookup_ms", "components.build look-up, all built", round(lookup * 1000), "ms"),
    )
    record.figures = {
        "alone": {"start_seconds": alone.start_seconds, "rss_bytes": alone.rss_bytes},
        "shared": [{"start_seconds": f.start_seconds, "rss_bytes": f.rss_bytes} for f in shared],
        "shared_etcd_rss_bytes": etcd_rss,
        "lookup_seconds": lookups,
    }
    steps = ", ".join(f"{k} {v:.1f} s" for k, v in alone.start_seconds.items())
    memory = ", ".join(f"{k} {v / MIB:.0f} MiB" for k, v in alone.rss_bytes.items())
    rows = ["| control plane | start-up | RSS (without etcd) |", "|---|---|---|"]
    rows += [
        f"| p{i} | {f.start_seconds['total']:.1f} s | {f.rss_total / MIB:.0f} MiB |"
        for i, f in enumerate(shared)
    ]
    record.body = "\n".join(
        [
            f"One control plane with its own etcd: {steps}; {memory}.",
            "",
            f"{args.planes} control planes on one etcd (etcd {etcd_rss / MIB:.0f} MiB with all "
            f"of them):",
            "",
            *rows,
            "",
            f"Memory read {args.settle:g} s after start-up; the build look-up is the median of "
            "3 (`components.build.ensure` of etcd, kubernetes and kwok).",
        ]
    )
    publish(record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
