"""`python -m bench` (`make bench`): run every benchmark, then gather their figures.

Each benchmark runs as its own process (`python -m bench.<name> ARGS`), one after the other, with
its progress on stderr and its one JSON line on stdout (kept in `bench/results/run.json`); a
benchmark that fails is reported and the others still run. Then `bench/results/README.md` is
written (`bench.summary`). `BENCH_QUICK=1` (`make bench-quick`) runs each at a small scale, into
`bench/results/quick/`. `--only a,b` runs some; `--summary` only rewrites the README.

Exit code: 0 when every benchmark ran (whatever its targets: the README says which were missed),
1 when one failed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from bench import summary
from bench.record import progress, quick, results_dir


@dataclass(frozen=True)
class Bench:
    name: str
    args: tuple[str, ...] = ()
    """Its arguments in a full run (quick mode: none; each picks its small scale itself)."""
    minutes: int = 30
    """Killed after this long (a hang must not stop the others)."""


BENCHMARKS = (
    # The emulator, the CLI and the HTTP API on their own; a real control plane's cost.
    Bench("sim_apiserver", minutes=10),
    Bench("controlplane", ("--planes", "3"), minutes=10),
    Bench("cli_startup", ("--runs", "20"), minutes=10),
    Bench("kubectl_token", ("--runs", "30"), minutes=10),
    Bench("cli_exit", ("--calls", "300"), minutes=20),
    Bench("api_load", ("--seconds", "8"), minutes=10),
    Bench("tenant_flood", minutes=10),
    # Reactions and the GPU ledger.
    Bench("watcher_reaction", minutes=10),
    Bench("ready_reaction", ("--trials", "5"), minutes=20),
    Bench("ledger_depth", ("--depths", "10,100,1000,10000", "--releases", "20"), minutes=30),
    Bench("workspace_admission", minutes=30),
    # Throughput, scale-out, drains and memory at scale.
    Bench("throughput", minutes=60),
    Bench("scale_out", minutes=30),
    Bench("drain_scale", minutes=40),
    Bench("footprint", minutes=40),
    # The simulator's real world (real control planes) beside the emulated one.
    Bench("real_world", ("--rounds", "3", "--clusters", "3"), minutes=30),
)
ORDER = [b.name for b in BENCHMARKS]


def run(bench: Bench) -> tuple[dict[str, object] | None, str]:
    """Run one benchmark; (its JSON line, "") or (None, why it failed)."""
    argv = [sys.executable, "-m", f"bench.{bench.name}", *(() if quick() else bench.args)]
    progress(f"=== {' '.join(argv[1:])}")
    try:
        done = subprocess.run(
            argv, stdout=subprocess.PIPE, text=True, timeout=bench.minutes * 60, check=False
        )
    except subprocess.TimeoutExpired:
        return None, f"did not finish within {bench.minutes} minutes"
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = done.stdout.strip().splitlines()[-1:] or ["no output"]
        return None, f"exit {done.returncode}: {tail[0][:200]}"
    line: dict[str, object] = json.loads(lines[-1])
    return line, ""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--only", default="", help="comma-separated benchmark names")
    parser.add_argument("--summary", action="store_true", help="only rewrite the README")
    args = parser.parse_args(argv)
    folder = results_dir()
    folder.mkdir(parents=True, exist_ok=True)
    if args.summary:
        print(summary.write(folder, ORDER))
        return 0
    chosen = [b for b in BENCHMARKS if not args.only or b.name in args.only.split(",")]
    unknown = set(filter(None, args.only.split(","))) - set(ORDER)
    if unknown:
        parser.error(
            f"unknown benchmark(s): {', '.join(sorted(unknown))} (known: {', '.join(ORDER)})"
        )
    lines: list[dict[str, object]] = []
    failures: dict[str, str] = {}
    began = time.monotonic()
    for bench in chosen:
        started = time.monotonic()
        line, error = run(bench)
        took = time.monotonic() - started
        if line is None:
            failures[bench.name] = error
            progress(f"=== {bench.name} FAILED after {took:.0f} s: {error}")
        else:
            lines.append(line)
            print(json.dumps(line), flush=True)
            progress(f"=== {bench.name} done in {took:.0f} s")
    (folder / "run.json").write_text(
        json.dumps(
            {"seconds": round(time.monotonic() - began), "results": lines, "failures": failures},
            indent=2,
        )
        + "\n"
    )
    written = summary.write(folder, ORDER, failures)
    progress(f"{len(lines)} benchmarks in {(time.monotonic() - began) / 60:.0f} min; {written}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
