"""Benchmark: does `colonyctl` always exit with its documented code, never by a signal?

Short-lived processes that used the Temporal client could die in interpreter shutdown (SIGABRT,
"PyGILState_Release ... Python runtime state: finalizing", or SIGSEGV: temporalio/sdk-python
issue 300). This runs N consecutive `colonyctl` processes of a mix of commands against a stack
(its own, started by `bench/stack.py`, unless --existing) and reports the exit codes counted, the
deaths by signal and, per command, whether the code was the one expected.

Run: `python -m bench.cli_exit` (1,000 calls), `--calls 200` for a quicker look (`make bench`
runs 300). Results in `bench/results/cli_exit.{json,md}` (`bench.record`).
"""

from __future__ import annotations

import collections
import itertools
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from bench.command import Command, Option
from bench.record import Headline, progress, publish, scale
from bench.stack import EXISTING, Stack, stack

CLUSTER = "exitbench"

COMMAND = Command(
    "cli_exit", __doc__, Option("--calls", type=int, default=scale(1000, 16)), EXISTING
)


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
            progress(f"  call {index}: {call.name} died by {name}: {done.stderr[-300:]!r}")
        elif code != call.expected:
            tally.unexpected[f"{call.name} -> {code}"] += 1
            if tally.unexpected[f"{call.name} -> {code}"] == 1:
                progress(f"  call {index}: {call.name} exited {code}: {done.stderr.strip()[:300]}")
        if (index + 1) % 100 == 0:
            progress(f"  {index + 1} calls, {sum(tally.signals.values())} deaths by signal")
    tally.seconds = time.monotonic() - started
    return tally


def main(argv: Sequence[str] | None = None) -> int:
    args = COMMAND.parse(argv)
    record = COMMAND.report("colonyctl exits with its documented code, never by a signal", args)
    with stack(args.existing, CLUSTER) as target:
        tally = run(target, args.calls, mix(CLUSTER))
    deaths = sum(tally.signals.values())
    unexpected = sum(tally.unexpected.values())
    record.add(
        Headline("calls", "consecutive colonyctl processes", tally.calls),
        Headline("deaths_by_signal", "deaths by signal", deaths, "", "0", deaths == 0),
        Headline("unexpected_codes", "exit codes other than documented", unexpected, "", "0",
                 unexpected == 0),
        Headline("ms_per_call", "time per call", round(tally.seconds / max(tally.calls, 1) * 1000),
                 "ms"),
    )  # fmt: skip
    record.figures = {
        "exit_codes": dict(sorted(tally.codes.items())),
        "signals": dict(tally.signals),
        "unexpected": dict(tally.unexpected),
        "seconds": round(tally.seconds, 1),
    }
    record.body = (
        f"{tally.calls} consecutive `colonyctl` processes cycling through "
        + ", ".join(f"`{c.name}`" for c in mix(CLUSTER))
        + f" against a private stack. Exit codes counted: {dict(sorted(tally.codes.items()))}."
    )
    publish(record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
