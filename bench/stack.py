"""A private Colony stack for the CLI benchmarks: Temporal dev server, the sim and the worker.

Each benchmark run starts its own stack as child processes on free loopback ports, with its state
in a temporary directory, so a run never disturbs (or is disturbed by) a `make run` on this
machine, and `colonyctl` is measured exactly as a user runs it: a separate process, through its
console script. `existing_stack()` uses the environment as it is instead (a stack `make run`
started), for a run against something already up.

Used by `bench/cli_exit.py`, `bench/kubectl_token.py` and `bench/cli_startup.py`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

VENV_BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]
STARTUP_DEADLINE_SECONDS = 60.0
SEARCH_ATTRIBUTES = ("ColonyKind", "ColonyCluster", "ColonyOrganization", "ColonyPhase")
"""Registered on the dev server as Keyword, as `make run` does (workflows/search_attributes.py)."""


def colonyctl() -> str:
    """The `colonyctl` console script of this venv."""
    return str(VENV_BIN / "colonyctl")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_until(what: str, ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + STARTUP_DEADLINE_SECONDS
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not come up within {STARTUP_DEADLINE_SECONDS:.0f}s")
        time.sleep(0.1)


@dataclass
class Stack:
    """What a benchmark needs: `colonyctl`'s environment and a scratch directory."""

    env: dict[str, str]
    workdir: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    """The private stack's children by name (`worker`, `watcher`), to stop one on purpose."""

    def ctl(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run `colonyctl ARGS` as a user would; the completed process, whatever its exit."""
        return subprocess.run(
            [colonyctl(), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def create_cluster(self, name: str, count: int = 1) -> None:
        """A ready cluster with one GPU pool, through `colonyctl cluster create --wait`."""
        done = self.ctl(
            "cluster", "create", name, "--location-id", "fra1",
            "--node-pool", f"name=gpu,count={count},gpuModelId=h100-80gb",
            "--wait", "--timeout", "120",
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"cluster create {name} exited {done.returncode}: {done.stderr}")


class _Children:
    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        with (self.logs / f"{name}.log").open("ab") as sink:
            child = subprocess.Popen(
                argv,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=ROOT,
                start_new_session=True,
            )
        self.started.append(child)
        return child

    def stop(self) -> None:
        for child in reversed(self.started):
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in reversed(self.started):
            try:
                child.wait(timeout=15)
            except subprocess.TimeoutExpired:
                child.kill()


@contextlib.contextmanager
def private_stack(*, watcher: bool = False, sim_timing: list[str] | None = None) -> Iterator[Stack]:
    """Start a dev server, the sim (instant timing, unless `sim_timing` gives its flags, e.g.
    `["--time-scale", "1"]`), the worker (and the watcher); stop them all on exit."""
    with tempfile.TemporaryDirectory(prefix="colony-bench-") as scratch:
        workdir = Path(scratch)
        children = _Children(workdir)
        try:
            grpc, ui = free_port(), free_port()
            temporal = [
                str(VENV_BIN / "temporal"), "server", "start-dev",
                "--ip", "127.0.0.1", "--port", str(grpc), "--ui-port", str(ui), "--headless",
                "--log-level", "error",
            ]  # fmt: skip
            for key in SEARCH_ATTRIBUTES:
                temporal += ["--search-attribute", f"{key}=Keyword"]
            base_env = {k: v for k, v in os.environ.items() if not k.startswith("COLONY_")}
            children.start("temporal", temporal, base_env)
            sim_dir = workdir / "sim"
            children.start(
                "sim",
                [sys.executable, "-m", "sim", "--state-dir", str(sim_dir),
                 *(sim_timing if sim_timing is not None else ["--instant"]),
                 "--log-level", "WARNING"],
                base_env,
            )  # fmt: skip
            wait_until("the Temporal dev server", lambda: port_open(grpc))
            wait_until("the simulator", (sim_dir / "world.json").exists)
            env = {
                **base_env,
                "TEMPORAL_ADDRESS": f"127.0.0.1:{grpc}",
                "TEMPORAL_NAMESPACE": "default",
                "COLONY_TASK_QUEUE": "bench",
                "COLONY_MANAGEMENT_KUBECONFIG": str(sim_dir / "management.kubeconfig"),
                "COLONY_HOST_PROVIDER_CONFIG": str(sim_dir / "hostprovider.json"),
                "COLONY_WEB_UI": f"http://127.0.0.1:{ui}",
                "COLONY_CACHE_DIR": str(workdir / "cache"),
                "HOME": str(workdir),
            }
            processes = {"worker": children.start("worker", [sys.executable, "worker.py"], env)}
            if watcher:
                processes["watcher"] = children.start(
                    "watcher", [sys.executable, "watcher.py"], env
                )
            yield Stack(env=env, workdir=workdir, processes=processes)
        finally:
            children.stop()


@contextlib.contextmanager
def existing_stack() -> Iterator[Stack]:
    """The stack the environment points at (e.g. `make run`'s), with a scratch directory."""
    with tempfile.TemporaryDirectory(prefix="colony-bench-") as scratch:
        yield Stack(env=dict(os.environ), workdir=Path(scratch))


def stack(existing: bool) -> contextlib.AbstractContextManager[Stack]:
    return existing_stack() if existing else private_stack()


def describe(stack: Stack) -> str:
    return json.dumps(
        {k: v for k, v in stack.env.items() if k.startswith(("TEMPORAL_", "COLONY_"))}
    )


def summary(samples: list[float]) -> str:
    """Seconds as a one-line distribution in milliseconds (median, p90, min, max)."""
    if not samples:
        return "no samples"
    ms = sorted(s * 1000 for s in samples)
    p90 = ms[min(len(ms) - 1, round(0.9 * (len(ms) - 1)))]
    return (
        f"n={len(ms)} median {statistics.median(ms):.0f} ms, p90 {p90:.0f} ms, "
        f"min {ms[0]:.0f} ms, max {ms[-1]:.0f} ms"
    )
