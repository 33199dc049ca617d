"""Benchmark: does `colonyctl` always exit with its documented code, never by a signal?

Short-lived processes that used the Temporal client could die in interpreter shutdown (SIGABRT,
"PyGILState_Release ... Python runtime state: finalizing", or SIGSEGV: temporalio/sdk-python
issue 300). This runs N consecutive `colonyctl` processes of a mix of commands against a stack
(its own, started by `bench/stack.py`, unless --existing) and reports the exit codes counted, the
deaths by signal and, per command, whether the code was the one expected.

Run: `python -m bench.cli_exit` (1,000 calls), `--calls 200` for a quicker look.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from bench.stack import Stack, stack

CLUSTER = "exitbench"


@dataclass(frozen=True)
class Call:
    """One command of the mix and the exit code it must end with."""

    name: str
    args: tuple[str, ...]
    expected: int


def mix(cluster: str) -> list[Call]:
    """The commands cycled through: Temporal reads, the catalog, refusals, the token, help."""
    return [
        Call("cluster list -o json", ("cluster", "list", "-o", "json"), 0),
        Call("cluster get -o json", ("cluster", "get", cluster, "-o", "json"), 0),
        Call("catalog location list", ("catalog", "location", "list"), 0),
        Call("refused: --count two", ("node-pool", "scale", cluster, "gpu", "--count", "two"), 2),
        Call("token", ("token", "--cluster", cluster), 0),
        Call("--help", ("--help",), 0),
        Call("cluster get absent", ("cluster", "get", "absent-cluster"), 3),
        Call("operation list", ("operation", "list", cluster), 0),
    ]


@dataclass
class Tally:
    codes: collections.Counter[int]
    signals: collections.Counter[str]
    unexpected: collections.Counter[str]
    seconds: float

    @property
    def calls(self) -> int:
        return sum(self.codes.values())


def run(target: Stack, calls: int, commands: Sequence[Call]) -> Tally:
    tally = Tally(collections.Counter(), collections.Counter(), collections.Counter(), 0.0)
    started = time.monotonic()
    for index, call in zip(range(calls), itertools.cycle(commands), strict=False):
        done = target.ctl(*call.args)
        code = done.returncode
        tally.codes[code] += 1
        if code < 0:
            name = signal.Signals(-code).name
            tally.signals[name] += 1
            print(f"  call {index}: {call.name} died by {name}: {done.stderr[-300:]!r}")
        elif code != call.expected:
            tally.unexpected[f"{call.name} -> {code}"] += 1
            if tally.unexpected[f"{call.name} -> {code}"] == 1:
                print(f"  call {index}: {call.name} exited {code}: {done.stderr.strip()[:300]}")
        if (index + 1) % 100 == 0:
            print(f"  {index + 1} calls, {sum(tally.signals.values())} deaths by signal")
    tally.seconds = time.monotonic() - started
    return tally


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cli_exit", description=__doc__)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument(
        "--existing", action="store_true", help="use the stack the environment points at"
    )
    args = parser.parse_args(argv)
    with stack(args.existing) as target:
        if not args.existing:
            target.create_cluster(CLUSTER)
        tally = run(target, args.calls, mix(CLUSTER))
    deaths = sum(tally.signals.values())
    print(
        f"colonyctl exit benchmark: {tally.calls} calls in {tally.seconds:.0f}s "
        f"({tally.seconds / max(tally.calls, 1) * 1000:.0f} ms/call)"
    )
    print(f"  exit codes: {dict(sorted(tally.codes.items()))}")
    print(f"  deaths by signal: {deaths} {dict(tally.signals) if deaths else ''}")
    print(f"  unexpected codes: {dict(tally.unexpected) or 'none'}")
    return 1 if deaths or tally.unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
