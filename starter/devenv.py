"""`make run`: the embedded default environment, started and explained in one command.

Starts, as child processes with their logs under `.colony/`:
  1. the Temporal dev server (Web UI, SQLite persistence in `.colony/temporal.db`),
  2. the simulated infrastructure (`python -m sim`, clearly a SIMULATOR),
  3. Colony's worker (`worker.py`), once it exists,
  4. Colony's HTTP API (`python -m api`, port COLONY_API_PORT, default 8080, docs at /docs), with
     one development key (organization `dev`, Manage + Connect + Read) created through
     `colonyctl apikey create`, printed once and written to `.colony/api-key` (mode 0600),
  5. Colony's watcher (`watcher.py`: Kubernetes watch events become signals to the workflows),
then runs the demo scenario through `colonyctl` and keeps everything serving until Ctrl-C, so the
workflows stay browsable in the Web UI. Anything already listening (a dev server from an earlier
`make run`) is reused rather than started twice.

Metrics: with COLONY_METRICS_PORT set, the worker serves `/metrics` there and the watcher on
COLONY_WATCHER_METRICS_PORT, by default the first free port after the worker's (two processes on
one host cannot share a port); the banner prints both.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from activities.settings import (
    METRICS_PORT_ENV,
    WATCHER_METRICS_PORT_ENV,
    SettingsError,
    parse_port,
)
from workflows.search_attributes import ALL as SEARCH_ATTRIBUTES

STATE_DIR = Path(".colony")
SIM_DIR = STATE_DIR / "sim"
TEMPORAL_HOST = "127.0.0.1"
TEMPORAL_PORT = 7233
UI_PORT = 8233
API_HOST = "127.0.0.1"
DEFAULT_API_PORT = 8080
API_KEY_FILE = STATE_DIR / "api-key"
DEV_ORGANIZATION = "dev"
STARTUP_DEADLINE_SECONDS = 60.0
METRICS_PORT_SEARCH = 100
"""Ports after COLONY_METRICS_PORT tried for the watcher's endpoint before giving up."""

VENV_BIN = Path(sys.executable).parent


def _port_open(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


def _port_free(port: int) -> bool:
    """Whether `port` can be bound on every address, as `activities.metrics.serve` binds it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # The endpoint's HTTP server reuses addresses too: a port in TIME_WAIT is free for it.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


@dataclass(frozen=True)
class MetricsPorts:
    """Where the worker and the watcher serve `/metrics` (None: not served; 0: any free port)."""

    worker: int | None
    watcher: int | None

    def banner(self) -> str:
        """The banner's line about them."""
        if self.worker is None and self.watcher is None:
            return f"off (set {METRICS_PORT_ENV} to serve the worker's and the watcher's /metrics)"
        return ", ".join(
            f"{who} {_endpoint(port)}"
            for who, port in (("worker", self.worker), ("watcher", self.watcher))
            if port is not None
        )


def _endpoint(port: int) -> str:
    return "on a free port (see its log)" if port == 0 else f"http://127.0.0.1:{port}/metrics"


def metrics_ports(environ: MutableMapping[str, str]) -> MetricsPorts:
    """The `/metrics` ports of the worker and the watcher, checked before anything starts.

    The worker serves on COLONY_METRICS_PORT and the watcher on COLONY_WATCHER_METRICS_PORT. When
    only the first is set, the watcher gets the first free port after it, written into `environ`
    (which the children inherit). A port already taken, or the same port twice, stops `make run`
    with a message naming the setting, before a child dies of "Address already in use".
    """
    try:
        worker = parse_port(METRICS_PORT_ENV, environ.get(METRICS_PORT_ENV, ""))
        watcher = parse_port(WATCHER_METRICS_PORT_ENV, environ.get(WATCHER_METRICS_PORT_ENV, ""))
    except SettingsError as exc:
        raise SystemExit(f"colony: {exc}") from exc
    if worker is not None and watcher is None:
        watcher = 0 if worker == 0 else _first_free_port_after(worker)
        environ[WATCHER_METRICS_PORT_ENV] = str(watcher)
    if worker and worker == watcher:
        raise SystemExit(
            f"colony: {WATCHER_METRICS_PORT_ENV} must differ from {METRICS_PORT_ENV} ({worker}): "
            "the worker and the watcher both serve /metrics on this host"
        )
    for variable, port in ((METRICS_PORT_ENV, worker), (WATCHER_METRICS_PORT_ENV, watcher)):
        if port and not _port_free(port):
            raise SystemExit(
                f"colony: {variable}: port {port} is already in use (an earlier `make run`?); "
                "choose another"
            )
    return MetricsPorts(worker=worker, watcher=watcher)


def _first_free_port_after(port: int) -> int:
    for candidate in range(port + 1, min(port + 1 + METRICS_PORT_SEARCH, 65536)):
        if _port_free(candidate):
            return candidate
    raise SystemExit(
        f"colony: no free port for the watcher's /metrics after {METRICS_PORT_ENV}={port}: "
        f"set {WATCHER_METRICS_PORT_ENV}"
    )


def _wait_until(
    what: str, ready: Callable[[], bool], deadline_seconds: float = STARTUP_DEADLINE_SECONDS
) -> None:
    deadline = time.monotonic() + deadline_seconds
    while not ready():
        if time.monotonic() > deadline:
            raise SystemExit(f"colony: {what} did not come up within {deadline_seconds:.0f}s")
        time.sleep(0.1)


class Processes:
    """The children `make run` started; all of them are stopped together on exit."""

    def __init__(self) -> None:
        self.children: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, argv: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as sink:
            child = subprocess.Popen(
                list(argv), stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.children.append((name, child))
        return child

    def check_alive(self) -> None:
        for name, child in self.children:
            if child.poll() is not None:
                raise SystemExit(
                    f"colony: {name} exited with code {child.returncode}; see its log in {STATE_DIR}/"
                )

    def stop_all(self) -> None:
        for _, child in reversed(self.children):
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for _, child in reversed(self.children):
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()  # reaped: no zombie, and its return code is known


def start_temporal(processes: Processes) -> None:
    if _port_open(TEMPORAL_HOST, TEMPORAL_PORT):
        print(f"temporal: reusing the server already on {TEMPORAL_HOST}:{TEMPORAL_PORT}")
        return
    argv = [
        str(VENV_BIN / "temporal"),
        "server",
        "start-dev",
        "--ip",
        TEMPORAL_HOST,
        "--port",
        str(TEMPORAL_PORT),
        "--ui-port",
        str(UI_PORT),
        "--db-filename",
        str(STATE_DIR / "temporal.db"),
        "--ui-disable-news-fetch",
        "--log-level",
        "warn",
    ]
    for key in SEARCH_ATTRIBUTES:
        argv += ["--search-attribute", f"{key.name}=Keyword"]
    processes.start("temporal dev server", argv, STATE_DIR / "temporal.log")
    _wait_until(
        "the Temporal dev server",
        lambda: _port_open(TEMPORAL_HOST, TEMPORAL_PORT) and _port_open(TEMPORAL_HOST, UI_PORT),
    )


def _answers(url: str) -> bool:
    """Whether anything answers HTTP at `url` (any status: it is up)."""
    import httpx

    try:
        httpx.get(url, timeout=1.0, verify=False)  # the sim's own CA, on loopback
    except httpx.HTTPError:
        return False
    return True


def start_sim(processes: Processes) -> dict[str, object]:
    world_file = SIM_DIR / "world.json"
    if world_file.exists():
        world: dict[str, object] = json.loads(world_file.read_text())
        provider = world.get("hostProvider")
        url = provider.get("url") if isinstance(provider, dict) else None
        if isinstance(url, str) and _answers(url):
            # An earlier `make run` still serves: its worker talks to this sim, so reuse it.
            print(f"simulator: reusing the one already serving ({world_file})")
            return world
    world_file.unlink(missing_ok=True)
    processes.start(
        "simulator",
        [sys.executable, "-m", "sim", "--state-dir", str(SIM_DIR)],
        STATE_DIR / "sim.log",
    )

    def world_written() -> bool:
        processes.check_alive()
        return world_file.exists()

    _wait_until("the simulator", world_written)
    started: dict[str, object] = json.loads(world_file.read_text())
    return started


def ensure_sealing_keys() -> Path:
    """Colony's sealing key pair for this environment (created once, private key 0600): the worker
    unseals with the private key, colonyctl seals secret answers with the public one."""
    from activities.sealing import SealingSettings, create_key_pair

    settings = SealingSettings.from_env()
    create_key_pair(settings.private_key_file, settings.public_key_file)
    return settings.public_key_file


def start_worker(processes: Processes) -> bool:
    if not Path("worker.py").exists():
        return False
    ensure_sealing_keys()
    processes.start("worker", [sys.executable, "worker.py"], STATE_DIR / "worker.log")
    return True


def start_api(processes: Processes) -> str:
    """`python -m api` on COLONY_API_PORT; its URL once it listens."""
    port = int(os.environ.setdefault("COLONY_API_PORT", str(DEFAULT_API_PORT)))
    os.environ.setdefault("COLONY_API_HOST", API_HOST)
    if _port_open(API_HOST, port):
        # An earlier `make run`'s API (or something else: set COLONY_API_PORT to move ours).
        print(f"api: reusing what listens on {API_HOST}:{port}")
        return f"http://{API_HOST}:{port}"
    processes.start("api", [sys.executable, "-m", "api"], STATE_DIR / "api.log")

    def listening() -> bool:
        processes.check_alive()
        return _port_open(API_HOST, port)

    _wait_until("the Colony API", listening)
    return f"http://{API_HOST}:{port}"


def create_dev_key() -> str:
    """A development key of organization `dev` with every permission, from `colonyctl apikey
    create` (stored on the management cluster as a hash), written to `.colony/api-key` (0600)."""
    done = subprocess.run(
        [
            str(VENV_BIN / "colonyctl"), "apikey", "create", "--organization", DEV_ORGANIZATION,
            "--permission", "manage", "--permission", "connect", "--permission", "read",
            "--name", "make run", "-o", "json",
        ],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"colony: could not create the development API key: {done.stderr}")
    key = str(json.loads(done.stdout)["key"])
    fd = os.open(API_KEY_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an older file keeps its mode through O_TRUNC
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(key + "\n")
    return key


def start_watcher(processes: Processes) -> bool:
    if not Path("watcher.py").exists():
        return False
    processes.start("watcher", [sys.executable, "watcher.py"], STATE_DIR / "watcher.log")
    return True


def run_scenario() -> int:
    scenario = Path(__file__).with_name("scenario.py")
    if not scenario.exists():
        return 0
    return subprocess.call([sys.executable, "-m", "starter.scenario"])


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make run", description=__doc__)
    parser.add_argument("--no-scenario", action="store_true", help="start everything, run nothing")
    parser.add_argument(
        "--exit", action="store_true", help="stop everything once the scenario has run"
    )
    args = parser.parse_args(argv)

    STATE_DIR.mkdir(exist_ok=True)
    # SIGTERM (a closed terminal, `timeout`, CI) must stop the children too, as Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)
    os.environ.setdefault("TEMPORAL_ADDRESS", f"{TEMPORAL_HOST}:{TEMPORAL_PORT}")
    processes = Processes()
    try:
        metrics = metrics_ports(os.environ)
        start_temporal(processes)
        world = start_sim(processes)
        worker_started = start_worker(processes)
        watcher_started = start_watcher(processes)
        api_url = start_api(processes)
        dev_key = create_dev_key()
        print()
        print(f"Temporal Web UI      http://{TEMPORAL_HOST}:{UI_PORT}")
        print(f"Temporal frontend    {TEMPORAL_HOST}:{TEMPORAL_PORT} (namespace default)")
        print(f"SIMULATED management cluster kubeconfig  {SIM_DIR / 'management.kubeconfig'}")
        host_provider = world.get("hostProvider")
        host_provider_url = (
            host_provider.get("url", "?") if isinstance(host_provider, dict) else "?"
        )
        print(f"SIMULATED host provider                  {host_provider_url}")
        print(f"Colony HTTP API      {api_url} (OpenAPI docs: {api_url}/docs)")
        print(
            f"Development API key  {dev_key}  (organization {DEV_ORGANIZATION}, "
            f"Manage + Connect + Read; shown once, kept in {API_KEY_FILE})"
        )
        print(
            f"  remote colonyctl:  colonyctl auth login --url {api_url} --api-key - < {API_KEY_FILE}"
        )
        print(f"Logs                 {STATE_DIR}/*.log")
        if worker_started:
            print(
                f"Colony worker        task queue {os.environ.get('COLONY_TASK_QUEUE', 'colony')}"
            )
            print("Sealing key pair     .colony/sealing/ (colonyctl seals secrets with public.pem)")
        if watcher_started:
            print("Colony watcher       Lease colony-system/colony-watcher (events -> signals)")
        print(f"Metrics              {metrics.banner()}")
        print()
        status = 0
        if not args.no_scenario:
            status = run_scenario()
        if args.exit:
            return status
        print("Everything keeps running for the Web UI; press Ctrl-C to stop.")
        while True:
            processes.check_alive()
            time.sleep(1)
    except KeyboardInterrupt:
        return 0
    finally:
        processes.stop_all()


if __name__ == "__main__":
    sys.exit(main())
