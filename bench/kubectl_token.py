"""Benchmark: `kubectl get nodes` through Colony's kubeconfig (exec plugin `colonyctl token`) with
a cached token, side by side with the same command with a static token in the kubeconfig.

Both kubeconfigs point at the same simulated child cluster (server, CA); the static one holds the
token `colonyctl token` issued, the exec one runs the plugin as `colonyctl kubeconfig` wrote it.
Runs alternate (exec, static, exec, ...) so machine noise hits both alike; medians are compared.
A few runs with the token cache emptied before each show what every kubectl call used to cost.

Run: `python -m bench.kubectl_token` (`--runs 40`); target: exec/static median ratio <= 1.5.
Results in `bench/results/kubectl_token.{json,md}` (`bench.record`).
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

from bench.command import Command, Option
from bench.record import Headline, progress, publish, scale
from bench.stack import EXISTING, VENV_BIN, Stack, stack

CLUSTER = "tokenbench"
TARGET_RATIO = 1.5

COMMAND = Command(
    "kubectl_token",
    __doc__,
    Option("--runs", type=int, default=scale(40, 3), help="runs of each (cached and static)"),
    Option("--uncached-runs", type=int, default=scale(5, 1)),
    EXISTING,
)


def kubectl(stack: Stack, kubeconfig: Path) -> float:
    """Seconds one `kubectl get nodes` took; fails loudly when kubectl does."""
    started = time.perf_counter()
    done = subprocess.run(
        [str(VENV_BIN / "kubectl"), "--kubeconfig", str(kubeconfig), "get", "nodes"],
        env=stack.env,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"kubectl failed ({kubeconfig.name}): {done.stderr.strip()}")
    return elapsed


def kubeconfigs(stack: Stack) -> tuple[Path, Path]:
    """The exec-plugin kubeconfig `colonyctl kubeconfig` writes, and a static-token twin."""
    exec_path = stack.workdir / "exec.kubeconfig"
    written = stack.ctl("kubeconfig", "--cluster", CLUSTER, "--output", str(exec_path))
    if written.returncode != 0:
        raise RuntimeError(f"colonyctl kubeconfig failed: {written.stderr}")
    issued = stack.ctl("token", "--cluster", CLUSTER)
    if issued.returncode != 0:
        raise RuntimeError(f"colonyctl token failed: {issued.stderr}")
    token = json.loads(issued.stdout)["status"]["token"]
    static = yaml.safe_load(exec_path.read_text())
    static["users"][0]["user"] = {"token": token}
    static_path = stack.workdir / "static.kubeconfig"
    static_path.write_text(yaml.safe_dump(static))
    static_path.chmod(0o600)
    return exec_path, static_path


def main(argv: Sequence[str] | None = None) -> int:
    args = COMMAND.parse(argv)
    record = COMMAND.report(
        "kubectl through Colony's exec plugin (cached token) beside a static token", args
    )
    with stack(args.existing, CLUSTER) as target:
        exec_path, static_path = kubeconfigs(target)
        for path in (exec_path, static_path):  # warm: discovery cache, token cache
            kubectl(target, path)
        cached: list[float] = []
        static: list[float] = []
        for _ in range(args.runs):
            cached.append(kubectl(target, exec_path))
            static.append(kubectl(target, static_path))
        cache_dir = Path(target.env["COLONY_CACHE_DIR"])
        uncached: list[float] = []
        for _ in range(args.uncached_runs):
            shutil.rmtree(cache_dir, ignore_errors=True)
            uncached.append(kubectl(target, exec_path))
    med_cached, med_static = statistics.median(cached), statistics.median(static)
    med_uncached = statistics.median(uncached)
    ratio = med_cached / med_static
    record.add(
        Headline("static_ms", "static token in the kubeconfig", round(med_static * 1000), "ms"),
        Headline("cached_ms", "exec plugin, cached token", round(med_cached * 1000), "ms"),
        Headline("uncached_ms", "exec plugin, no cache (a new token)", round(med_uncached * 1000), "ms"),
        Headline("ratio", "ratio cached / static", round(ratio, 2), "", f"<= {TARGET_RATIO}",
                 ratio <= TARGET_RATIO),
    )  # fmt: skip
    record.figures = {"cached": cached, "static": static, "uncached": uncached}
    record.body = (
        f"`kubectl get nodes` against a simulated child cluster, median of {args.runs} runs "
        f"each, alternating (exec, static, exec, ...); {args.uncached_runs} runs with the token "
        "cache emptied before each show what every call would cost without the cache."
    )
    progress(f"cached {med_cached * 1000:.0f} ms, static {med_static * 1000:.0f} ms: {ratio:.2f}")
    publish(record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
