"""Benchmark: how long `colonyctl` takes to answer what needs no server, beside `kubectl version
--client` (issue 10: every call took 1.2-1.4 s; target under 0.3 s for help and refusals).

Each command runs as a user runs it (the console script, a fresh process), in rounds that
alternate the commands so machine noise hits them alike; medians and the 90th percentile are
reported. No server is started: TEMPORAL_ADDRESS points nowhere, and the token is a cached one.

Run: `python -m bench.cli_startup` (`--runs 30`); results in `bench/results/cli_startup.{json,md}`
(`bench.record`).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

from bench.command import Command, Option
from bench.record import Headline, progress, publish, scale
from bench.stack import VENV_BIN, colonyctl
from clients.credentials import token_plugin
from starter import token_cache

TARGET_SECONDS = 0.3

COMMAND = Command("cli_startup", __doc__, Option("--runs", type=int, default=scale(30, 2)))


def commands(env: dict[str, str]) -> dict[str, tuple[list[str], dict[str, str], int]]:
    """name -> (argv, environment, expected exit code)."""
    command, args, plugin_env = token_plugin("bench", "kcm-system")
    return {
        "kubectl version --client": ([str(VENV_BIN / "kubectl"), "version", "--client"], env, 0),
        "colonyctl --help": ([colonyctl(), "--help"], env, 0),
        "colonyctl cluster create --help": ([colonyctl(), "cluster", "create", "--help"], env, 0),
        "refused by the parser (--count two)": (
            [colonyctl(), "node-pool", "scale", "c", "gpu", "--count", "two"], env, 2,
        ),
        "refused by the model (bad name)": (
            [colonyctl(), "cluster", "create", "Training", "--location-id", "fra1"], env, 2,
        ),
        "colonyctl token (cached)": ([colonyctl(), "token", "--cluster", "bench"], env, 0),
        "token as kubectl runs it (cached)": (
            [command, *args], {**env, **plugin_env, "KUBERNETES_EXEC_INFO": "{}"}, 0,
        ),
    }  # fmt: skip


def seed_token(env: dict[str, str]) -> None:
    """A cached token for the cluster `bench`, valid for a day."""
    expires = int(time.time()) + 86400
    token_cache.write(
        token_cache.cache_path(env, "bench", "kcm-system"),
        {
            "cluster": "bench",
            "namespace": "kcm-system",
            "management": token_cache.management_kubeconfig(env),
            "token": "bench-token",
            "expirationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires)),
            "expires": str(expires),
            "handedTo": "",
        },
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = COMMAND.parse(argv)
    record = COMMAND.report(
        "colonyctl start-up: help, refusals and a cached token beside kubectl", args
    )
    with tempfile.TemporaryDirectory(prefix="colony-startup-") as scratch:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("COLONY_")},
            "TEMPORAL_ADDRESS": "127.0.0.1:1",
            "COLONY_CACHE_DIR": scratch,
            "COLONY_MANAGEMENT_KUBECONFIG": os.path.join(scratch, "management.kubeconfig"),
            "COLONY_HOST_PROVIDER_CONFIG": os.path.join(scratch, "none.json"),
        }
        seed_token(env)
        table = commands(env)
        times: dict[str, list[float]] = {name: [] for name in table}
        for _ in range(args.runs + 1):  # the first round warms the caches and is dropped
            for name, (command, command_env, expected) in table.items():
                started = time.perf_counter()
                done = subprocess.run(command, env=command_env, capture_output=True, check=False)
                times[name].append(time.perf_counter() - started)
                if done.returncode != expected:
                    raise RuntimeError(f"{name} exited {done.returncode}: {done.stderr!r}")
    rows = ["| command | median | p90 |", "|---|---|---|"]
    for name, samples in times.items():
        samples = samples[1:]
        median = statistics.median(samples)
        p90 = statistics.quantiles(samples, n=10)[-1] if len(samples) > 1 else samples[0]
        rows.append(f"| {name} | {median * 1000:.0f} ms | {p90 * 1000:.0f} ms |")
        held = name.startswith(("colonyctl --help", "refused"))
        record.add(
            Headline(
                _key(name),
                name,
                round(median * 1000),
                "ms",
                f"< {TARGET_SECONDS * 1000:.0f} ms" if held else "",
                median <= TARGET_SECONDS if held else None,
            )
        )
        record.figures[name] = [round(x, 4) for x in samples]
    progress("\n".join(rows))
    record.body = "\n".join(
        [
            f"Median and 90th percentile of {args.runs} runs each, in rounds that alternate the "
            "commands (the first round, warming the caches, dropped); no server runs (the "
            "token is a cached one). Target for help and refusals: under "
            f"{TARGET_SECONDS * 1000:.0f} ms (issue 10: every call took 1.2 to 1.4 s).",
            "",
            *rows,
        ]
    )
    publish(record)
    return 0


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")[:40]


if __name__ == "__main__":
    sys.exit(main())
