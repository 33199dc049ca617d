"""A private Colony stack for the benchmarks: Temporal dev server, the sim, the worker(s), and on
request the watcher and the HTTP API.

Each benchmark run starts its own stack as child processes on free loopback ports, with its state
in a temporary directory, so a run never disturbs (or is disturbed by) a `make run` on this
machine, and `colonyctl` is measured exactly as a user runs it: a separate process, through its
console script. `existing_stack()` uses the environment as it is instead (a stack `make run`
started), for a run against something already up.

Besides starting and stopping, the stack answers what the benchmarks measure about it: each
process's CPU seconds and resident memory (`Stack.usage`, from /proc), and the Kubernetes API
requests every simulated cluster answered (`Stack.sim_requests`, the sim's `/sim/v1/requests`).
The benchmarks that need more hosts than the sim's default inventory give `bench/inventory.yaml`.

Used by every benchmark that runs Colony (`bench/*.py` but `sim_apiserver`, `cli_startup` and
`ledger_depth`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.command import Option
from bench.record import progress
from infra.ports import free_port, port_open
from starter.dev.stack import LocalStack, free_ports
from workflows.search_attributes import ALL as COLONY_SEARCH_ATTRIBUTES

VENV_BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]
INVENTORY = Path(__file__).parent / "inventory.yaml"
"""200 CPU hosts of 128 cores in location `bench1` (and 8 H100 hosts in `fra1`)."""
STARTUP_DEADLINE_SECONDS = 60.0
DEV = "dev"
CLUSTER = "cluster"
"""The two Temporals a private stack runs on (`--temporal`)."""
SEARCH_ATTRIBUTES = tuple(key.name for key in COLONY_SEARCH_ATTRIBUTES)
"""Registered on the dev server as Keyword, as `make run` does (workflows/search_attributes.py)."""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
BENCH_QUOTAS = {
    "COLONY_QUOTA_HOSTS": "100000",
    "COLONY_QUOTA_GPUS": "1000000",
    "COLONY_QUOTA_CLUSTERS": "100000",
    "COLONY_QUOTA_WORKSPACES": "100000",
    "COLONY_QUOTA_LOCATION_SHARE": "1",
}
"""Quotas no benchmark reaches (a create+delete pair's cluster holds its place until the delete
has finished, in the background)."""


def colonyctl() -> str:
    """The `colonyctl` console script of this venv."""
    return str(VENV_BIN / "colonyctl")


def wait_until(what: str, ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + STARTUP_DEADLINE_SECONDS
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not come up within {STARTUP_DEADLINE_SECONDS:.0f}s")
        time.sleep(0.1)


@dataclass(frozen=True)
class Usage:
    """What a process has used so far."""

    cpu_seconds: float
    rss_mb: float


def usage_of(pid: int) -> Usage:
    """CPU seconds (user + system) and resident memory of a running process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    rss_kb = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss_kb = int(line.split()[1])
    return Usage(cpu_seconds=ticks / CLOCK_TICKS, rss_mb=rss_kb / 1024)


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of a Python process by kind of thread, from /proc: `main` (the event loop),
    `python threads` (the other Python threads: a worker's thread pools, where workflow
    activations and the Kubernetes client's blocking calls run) and `core` (the threads of the
    Temporal SDK's Rust core, which Python does not name)."""
    found: dict[str, float] = {"main": 0.0, "python threads": 0.0, "core": 0.0}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue  # ended meanwhile
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        seconds = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        kind = "main" if task.name == str(pid) else "python threads" if name == "python" else "core"
        found[kind] += seconds
    return found


@dataclass
class Stack:
    """What a benchmark needs: `colonyctl`'s environment and a scratch directory."""

    env: dict[str, str]
    workdir: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    """The private stack's children by name (`temporal`, `sim`, `worker`, `worker-2`,
    `watcher`, `api`, `api-2`), to measure or stop one on purpose."""
    api_urls: list[str] = field(default_factory=list)
    """The HTTP API replicas' base URLs (`private_stack(api=N)`, `start_api`)."""
    children: _Children | None = None
    """Who stops the private stack's processes (None for `existing_stack`)."""

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        """Start one more process of the stack, logging to `<workdir>/<name>.log`, stopped with
        the stack."""
        if self.children is None:
            raise RuntimeError("only a private stack starts processes")
        self.processes[name] = self.children.start(name, argv, env)
        return self.processes[name]

    def usage(self) -> dict[str, Usage]:
        """Each running process's CPU seconds and memory so far, by name (and this process's,
        the benchmark's own client, as `bench`)."""
        found = {"bench": usage_of(os.getpid())}
        for name, process in self.processes.items():
            if process.poll() is None:
                with contextlib.suppress(OSError):
                    found[name] = usage_of(process.pid)
        return found

    def sim_requests(self) -> dict[str, dict[str, int]]:
        """Every simulated cluster's Kubernetes API requests so far (`GET /sim/v1/requests`)."""
        world = json.loads((self.workdir / "sim" / "world.json").read_text())
        url = world["management"]["url"] + world["requestsPath"]
        answer = httpx.get(url, verify=str(self.workdir / "sim" / "ca.crt"), timeout=30)
        answer.raise_for_status()
        counts: dict[str, dict[str, int]] = answer.json()
        return counts

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


def requests_grown(
    before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]
) -> dict[str, dict[str, int]]:
    """Requests per cluster and `<verb> <resource>` made between two `Stack.sim_requests()`."""
    grown: dict[str, dict[str, int]] = {}
    for cluster, counts in after.items():
        earlier = before.get(cluster, {})
        changed = {k: n - earlier.get(k, 0) for k, n in counts.items() if n > earlier.get(k, 0)}
        if changed:
            grown[cluster] = changed
    return grown


def api_env(stack: Stack, port: int) -> dict[str, str]:
    """An API replica's environment: its port, no rate limit and no bound on requests in flight
    (the benchmark is the only caller, and sends hundreds at once)."""
    return {
        **stack.env,
        "COLONY_API_PORT": str(port),
        "COLONY_API_RATE": "0",
        "COLONY_API_IN_FLIGHT": "0",
    }


def start_api(stack: Stack, name: str = "api") -> str:
    """Start one HTTP API replica (`python -m api`) of the stack; its base URL."""
    port = free_port()
    stack.spawn(name, [sys.executable, "-m", "api"], api_env(stack, port))
    wait_until(f"the API ({name})", lambda: port_open(port))
    url = f"http://127.0.0.1:{port}"
    stack.api_urls.append(url)
    return url


def create_key(stack: Stack, organization: str) -> str:
    """A new API key of `organization` that may manage and read (`colonyctl apikey create`)."""
    done = stack.ctl(
        "apikey", "create", "--organization", organization, "--permission", "manage",
        "--permission", "read", "--name", "bench", "-o", "json",
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"apikey create failed: {done.stderr}")
    return str(json.loads(done.stdout)["key"])


@contextlib.contextmanager
def private_stack(
    *,
    watcher: bool = False,
    sim_timing: list[str] | None = None,
    inventory: Path | None = None,
    workers: int = 1,
    worker_argv: Sequence[str] = ("worker.py",),
    api: int = 0,
    temporal: str = DEV,
    server: str = "memory",
) -> Iterator[Stack]:
    """Start Temporal (the dev server, in memory or with `server="file"` on a SQLite file in the
    stack's directory as `make run` keeps it; or with `temporal=CLUSTER` the production shape: `make
    stack`'s PostgreSQL and four Temporal services), the sim (instant timing, unless
    `sim_timing` gives its flags, e.g. `["--time-scale", "1"]`; its default inventory unless
    `inventory` names one), `workers` worker processes (`python worker.py`, or `python
    <worker_argv>`), the watcher on request and `api` HTTP API replicas; stop them all on exit."""
    with tempfile.TemporaryDirectory(prefix="colony-bench-") as scratch:
        workdir = Path(scratch)
        children = _Children(workdir)
        cluster: LocalStack | None = None
        try:
            base_env = {k: v for k, v in os.environ.items() if not k.startswith("COLONY_")}
            ui = free_port()
            dev_port: int | None = None
            if temporal == CLUSTER:
                cluster = LocalStack.create(workdir / "cluster", free_ports())
                cluster.up_temporal(report=progress)
                address = cluster.temporal_address
                processes = {
                    name: child.process
                    for name, child in cluster.children.items()
                    if child.process is not None
                }
            else:
                grpc = free_port()
                argv = [
                    str(VENV_BIN / "temporal"), "server", "start-dev",
                    "--ip", "127.0.0.1", "--port", str(grpc), "--ui-port", str(ui), "--headless",
                    "--log-level", "error",
                ]  # fmt: skip
                if server == "file":
                    argv += ["--db-filename", str(workdir / "temporal.db")]
                elif server != "memory":
                    raise ValueError(f"server: 'memory' or 'file', not {server!r}")
                for key in SEARCH_ATTRIBUTES:
                    argv += ["--search-attribute", f"{key}=Keyword"]
                processes = {"temporal": children.start("temporal", argv, base_env)}
                address, dev_port = f"127.0.0.1:{grpc}", grpc
            sim_dir = workdir / "sim"
            processes["sim"] = children.start(
                "sim",
                [sys.executable, "-m", "sim", "--state-dir", str(sim_dir),
                 *(sim_timing if sim_timing is not None else ["--instant"]),
                 *(["--inventory", str(inventory)] if inventory is not None else []),
                 "--log-level", "WARNING", "--world", "emulated"],
                base_env,
            )  # fmt: skip
            if dev_port is not None:
                wait_until("the Temporal dev server", lambda: port_open(dev_port))
            wait_until("the simulator", (sim_dir / "world.json").exists)
            env = {
                **base_env,
                "TEMPORAL_ADDRESS": address,
                "TEMPORAL_NAMESPACE": "default",
                "COLONY_TASK_QUEUE": "bench",
                "COLONY_MANAGEMENT_KUBECONFIG": str(sim_dir / "management.kubeconfig"),
                "COLONY_HOST_PROVIDER_CONFIG": str(sim_dir / "hostprovider.json"),
                "COLONY_WEB_UI": f"http://127.0.0.1:{ui}",
                "COLONY_CACHE_DIR": str(workdir / "cache"),
                "HOME": str(workdir),
                # The benchmarks measure throughput, one organization at a time: its quotas are
                # out of the way (every request is still admitted by its ledger).
                **BENCH_QUOTAS,
            }
            for number in range(1, workers + 1):
                name = "worker" if number == 1 else f"worker-{number}"
                processes[name] = children.start(name, [sys.executable, *worker_argv], env)
            if watcher:
                processes["watcher"] = children.start(
                    "watcher", [sys.executable, "watcher.py"], env
                )
            stack = Stack(env=env, workdir=workdir, processes=processes, children=children)
            for number in range(1, api + 1):
                start_api(stack, "api" if number == 1 else f"api-{number}")
            yield stack
        finally:
            children.stop()
            if cluster is not None:
                cluster.stop()


@contextlib.contextmanager
def existing_stack() -> Iterator[Stack]:
    """The stack the environment points at (e.g. `make run`'s), with a scratch directory."""
    with tempfile.TemporaryDirectory(prefix="colony-bench-") as scratch:
        yield Stack(env=dict(os.environ), workdir=Path(scratch))


@contextlib.contextmanager
def stack(existing: bool, cluster: str) -> Iterator[Stack]:
    """The stack the environment points at (which must hold `cluster`), or a private one on which
    `cluster` is created first."""
    if existing:
        with existing_stack() as found:
            yield found
        return
    with private_stack() as started:
        started.create_cluster(cluster)
        yield started


TEMPORAL = Option(
    "--temporal",
    choices=(DEV, CLUSTER),
    default=DEV,
    help="the Temporal under the stack: the dev server (one process on SQLite) or the production "
    "shape (`make stack`'s: PostgreSQL and frontend, history, matching and worker as four "
    "processes); the latter's results are written as <name>-cluster",
)
"""`--temporal`: which Temporal `private_stack` starts (`Command.report` names the results)."""

EXISTING = Option(
    "--existing",
    action="store_true",
    help="use the stack the environment points at",
    recorded=False,
)
"""`--existing`: run against the stack the environment points at (see `stack`)."""


def wait_for_catalog(stack: Stack) -> None:
    """Until the worker has published the shipped workspace classes (`colonyctl class list`)."""
    wait_until("the workspace class catalog", lambda: stack.ctl("class", "list").returncode == 0)


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
