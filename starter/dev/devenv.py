"""`make run`: the embedded default environment, started and explained in one command.

Starts, as child processes with their logs under `.colony/`:
  1. the Temporal dev server (Web UI, SQLite persistence in `.colony/temporal.db`),
  2. the simulated infrastructure (`python -m sim`, clearly a SIMULATOR),
  3. Colony's worker (`worker.py`), once it exists,
  4. Colony's HTTP API (`python -m api`, port COLONY_API_PORT, default 8080, docs at /docs), with
     one development key (organization `dev`, Manage + Connect + Read) created through
     `colonyctl apikey create` and written to `.colony/api-key` (mode 0600), which every later
     `make run` of the state reuses (a key the API no longer takes is replaced, and revoked),
  5. Colony's watcher (`watcher.py`: Kubernetes watch events become signals to the workflows),
then runs the demo scenario through `colonyctl` and keeps everything serving until Ctrl-C, so the
workflows stay browsable in the Web UI.

State (`starter.dev.devstate`): Temporal's database and the simulator's world are kept in `.colony/`
and belong together; a rerun resumes both where the last run stopped (the simulator reloads its
world), a first run starts both fresh, and one without the other (or the two of different states)
stops `make run` with one line saying to `make reset`. `make reset` (`python -m starter.dev.devenv
--reset`, `colonyctl dev reset`) removes `.colony/` and keeps `.venv`.

Ports: Temporal on TEMPORAL_ADDRESS (127.0.0.1:7233) with its Web UI on COLONY_TEMPORAL_UI_PORT
(8233), the API on COLONY_API_PORT (8080), the simulator's management cluster and host provider on
COLONY_SIM_PORT and COLONY_SIM_HOSTPROVIDER_PORT (default: the last run's ports when free, else any).
A server of this development state already listening (a `make run` still serving) is reused; a
port held by anything else (another program, or another state's server) stops `make run` with one
line naming the port and the setting that moves ours.

Metrics: with COLONY_METRICS_PORT set, the worker serves `/metrics` there and the watcher on
COLONY_WATCHER_METRICS_PORT, by default the first free port after the worker's (two processes on
one host cannot share a port); the banner prints both.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from infra.config import (
    METRICS_PORT_ENV,
    WATCHER_METRICS_PORT_ENV,
    SettingsError,
    parse_port,
)
from infra.ports import port_free, port_open
from starter.dev import devstate
from starter.dev.devstate import DevPaths, DevState, DevStateError, Holder
from workflows.search_attributes import ALL as SEARCH_ATTRIBUTES

STATE_DIR = Path(".colony")
REPO = Path(__file__).resolve().parents[2]
"""Where worker.py and watcher.py are: `make run` may be started from another directory (the
tests start it in a temporary one, its `.colony/` there)."""
LOCAL_HOST = "127.0.0.1"
TEMPORAL_ADDRESS_ENV = "TEMPORAL_ADDRESS"
TEMPORAL_UI_PORT_ENV = "COLONY_TEMPORAL_UI_PORT"
API_PORT_ENV = "COLONY_API_PORT"
SIM_PORT_ENV = "COLONY_SIM_PORT"
SIM_HOSTPROVIDER_PORT_ENV = "COLONY_SIM_HOSTPROVIDER_PORT"
DEV_STATE_ENV = "COLONY_DEV_STATE_ID"
SIM_TIME_SCALE_ENV = "COLONY_SIM_TIME_SCALE"
"""Multiplies the simulator's delays (boots, joins, installs): `0.2` plays the demo about five
times faster; unset, the simulator's realistic default (1.0)."""
DEFAULT_TEMPORAL_PORT = 7233
DEFAULT_UI_PORT = 8233
DEFAULT_API_PORT = 8080
TEMPORAL_NAMESPACE = "default"
DEV_ORGANIZATION = "dev"
STARTUP_DEADLINE_SECONDS = 60.0
STOP_DEADLINE_SECONDS = 15.0
"""How long a child has to stop after SIGTERM: the worker waits up to 10 s for its activities."""
METRICS_PORT_SEARCH = 100
"""Ports after COLONY_METRICS_PORT tried for the watcher's endpoint before giving up."""

VENV_BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class DevPorts:
    """Where `make run`'s servers listen, from the environment (see the module docstring)."""

    temporal: int
    temporal_ui: int
    api: int
    sim: int | None
    """None: the last run's port when free, else any free one (likewise `sim_hostprovider`)."""
    sim_hostprovider: int | None

    @property
    def temporal_address(self) -> str:
        return f"{LOCAL_HOST}:{self.temporal}"


def dev_ports(environ: MutableMapping[str, str]) -> DevPorts:
    """The ports of the environment, checked before anything starts (a bad one stops `make run`
    with a line naming its setting)."""
    address = environ.get(TEMPORAL_ADDRESS_ENV) or f"{LOCAL_HOST}:{DEFAULT_TEMPORAL_PORT}"
    host, _, port_text = address.rpartition(":")
    if host not in (LOCAL_HOST, "localhost"):
        raise SystemExit(
            f"colony: {TEMPORAL_ADDRESS_ENV}: make run serves Temporal itself on {LOCAL_HOST}; "
            f"give {LOCAL_HOST}:<port> (got {address!r})"
        )

    ports = DevPorts(
        temporal=_required_port(TEMPORAL_ADDRESS_ENV, port_text),
        temporal_ui=_required_port(
            TEMPORAL_UI_PORT_ENV, environ.get(TEMPORAL_UI_PORT_ENV), DEFAULT_UI_PORT
        ),
        api=_required_port(API_PORT_ENV, environ.get(API_PORT_ENV), DEFAULT_API_PORT),
        sim=_optional_port(SIM_PORT_ENV, environ.get(SIM_PORT_ENV)),
        sim_hostprovider=_optional_port(
            SIM_HOSTPROVIDER_PORT_ENV, environ.get(SIM_HOSTPROVIDER_PORT_ENV)
        ),
    )
    # The children (worker, API, colonyctl) read where Temporal and the API are from here.
    environ[TEMPORAL_ADDRESS_ENV] = ports.temporal_address
    environ[API_PORT_ENV] = str(ports.api)
    environ.setdefault("COLONY_API_HOST", LOCAL_HOST)
    environ.setdefault("COLONY_WEB_UI", f"http://{LOCAL_HOST}:{ports.temporal_ui}")
    return ports


def _optional_port(variable: str, text: str | None) -> int | None:
    try:
        return parse_port(variable, text or "") or None
    except SettingsError as exc:
        raise SystemExit(f"colony: {exc}") from exc


def sim_time_scale(text: str | None) -> str | None:
    """`COLONY_SIM_TIME_SCALE` as the simulator's `--time-scale`, or None when unset; anything but
    a positive number stops `make run` with one line."""
    if not text:
        return None
    try:
        scale = float(text)
    except ValueError:
        scale = 0.0
    if not 0 < scale <= 100:
        raise SystemExit(
            f"colony: {SIM_TIME_SCALE_ENV}: {text!r} is not a number above 0 and at most 100"
        )
    return repr(scale)


def _required_port(variable: str, text: str | None, default: int | None = None) -> int:
    port = _optional_port(variable, text) or default
    if port is None:
        raise SystemExit(f"colony: {variable}: {text!r} has no port number (1-65535)")
    return port


def refusal(port: int, setting: str, holder: Holder, what: str) -> SystemExit:
    """The one line that stops `make run` when `port` is held by something it must not reuse."""
    if holder is Holder.OTHER_STATE:
        who = f"the {what} of another development state (another checkout's make run?)"
    elif holder is Holder.OURS:
        who = f"this development state's {what}, started apart from make run"
    else:
        who = f"a program that is not Colony's {what}"
    return SystemExit(f"colony: port {port} is held by {who}: set {setting} to a free port")


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
        if port and not port_free(port):
            raise SystemExit(
                f"colony: {variable}: port {port} is already in use (an earlier `make run`?); "
                "choose another"
            )
    return MetricsPorts(worker=worker, watcher=watcher)


def _first_free_port_after(port: int) -> int:
    for candidate in range(port + 1, min(port + 1 + METRICS_PORT_SEARCH, 65536)):
        if port_free(candidate):
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
    """The children `make run` started; all of them are stopped together on exit.

    With `record`, they are listed there while they run (pid and argv), so a reset can refuse
    while they hold the state (`devstate.running`).
    """

    def __init__(self, record: Path | None = None) -> None:
        self.children: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.record = record
        self._started: list[dict[str, object]] = []

    def start(self, name: str, argv: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as sink:
            child = subprocess.Popen(
                list(argv), stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.children.append((name, child))
        self._started.append({"name": name, "pid": child.pid, "argv": [str(a) for a in argv]})
        if self.record is not None:
            self.record.parent.mkdir(parents=True, exist_ok=True)
            self.record.write_text(json.dumps({"children": self._started}, indent=2) + "\n")
        return child

    def check_alive(self) -> None:
        for name, child in self.children:
            if child.poll() is not None:
                raise SystemExit(
                    f"colony: {name} exited with code {child.returncode}; see its log in {STATE_DIR}/"
                )

    def stop_all(self) -> None:
        """Stop the children one at a time, the last started first, so each stops before what
        it talks to: the watcher releases its Lease and the worker ends its activities while the
        simulator still serves, and the simulator saves its world after their last writes."""
        for _, child in reversed(self.children):
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
            try:
                child.wait(timeout=STOP_DEADLINE_SECONDS)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()  # reaped: no zombie, and its return code is known
        if self.record is not None and self.children:
            self.record.unlink(missing_ok=True)


@dataclass(frozen=True)
class Plan:
    """What `make run` reuses (a `make run` of this state still serving) and what it starts,
    decided before anything starts."""

    temporal_serving: bool
    world: dict[str, object] | None
    """The serving simulator's world.json; None: start one."""
    api_serving: bool


def preflight(ports: DevPorts, state: DevState, paths: DevPaths) -> Plan:
    """Who holds each port: this state's servers are reused, anything else stops `make run` here
    (`refusal`), before it starts anything."""
    temporal_serving = False
    if port_open(ports.temporal, LOCAL_HOST):
        temporal = devstate.temporal_holder(
            VENV_BIN / "temporal", ports.temporal_address, TEMPORAL_NAMESPACE, state.id
        )
        if temporal is not Holder.OURS:
            raise refusal(ports.temporal, TEMPORAL_ADDRESS_ENV, temporal, "Temporal server")
        temporal_serving = True
    elif port_open(ports.temporal_ui, LOCAL_HOST):
        raise refusal(ports.temporal_ui, TEMPORAL_UI_PORT_ENV, Holder.FOREIGN, "Temporal Web UI")
    world = _serving_world(ports, state, paths)
    if world is None:
        for port, setting, scheme in (
            (ports.sim, SIM_PORT_ENV, "https"),
            (ports.sim_hostprovider, SIM_HOSTPROVIDER_PORT_ENV, "http"),
        ):
            if port and port_open(port, LOCAL_HOST):
                # Even this state's simulator is not reused unless world.json names it (one
                # started by hand writes its files elsewhere).
                holder = devstate.sim_holder(f"{scheme}://{LOCAL_HOST}:{port}", state.id)
                raise refusal(port, setting, holder, "simulator")
    api_serving = False
    if port_open(ports.api, LOCAL_HOST):
        api = devstate.api_holder(_api_url(ports), state.id)
        if api is not Holder.OURS:
            raise refusal(ports.api, API_PORT_ENV, api, "API")
        api_serving = True
    return Plan(temporal_serving=temporal_serving, world=world, api_serving=api_serving)


def _serving_world(ports: DevPorts, state: DevState, paths: DevPaths) -> dict[str, object] | None:
    """world.json of this state's simulator, when it serves where that file says (and where
    COLONY_SIM_PORT asks, when set)."""
    world = _read_world(paths)
    management = _url(world, "management")
    if world is None or management is None:
        return None
    if ports.sim is not None and not management.endswith(f":{ports.sim}"):
        return None
    return world if devstate.sim_holder(management, state.id) is Holder.OURS else None


def start_temporal(processes: Processes, ports: DevPorts, state: DevState) -> None:
    """The Temporal dev server on `ports.temporal`, its database `.colony/temporal.db` marked
    with the state's id."""
    temporal = VENV_BIN / "temporal"
    argv = [
        str(temporal),
        "server",
        "start-dev",
        "--ip",
        LOCAL_HOST,
        "--port",
        str(ports.temporal),
        "--ui-port",
        str(ports.temporal_ui),
        "--db-filename",
        str(STATE_DIR / "temporal.db"),
        "--ui-disable-news-fetch",
        "--log-level",
        "warn",
    ]
    for key in SEARCH_ATTRIBUTES:
        argv += ["--search-attribute", f"{key.name}=Keyword"]
    processes.start("temporal dev server", argv, STATE_DIR / "temporal.log")

    def listening() -> bool:
        processes.check_alive()
        return port_open(ports.temporal, LOCAL_HOST) and port_open(ports.temporal_ui, LOCAL_HOST)

    _wait_until("the Temporal dev server", listening)
    devstate.mark_temporal(temporal, ports.temporal_address, TEMPORAL_NAMESPACE, state.id)


def _read_world(paths: DevPaths) -> dict[str, object] | None:
    try:
        world = json.loads(paths.world.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return world if isinstance(world, dict) else None


def _url(world: dict[str, object] | None, server: str) -> str | None:
    part = (world or {}).get(server)
    url = part.get("url") if isinstance(part, dict) else None
    return url if isinstance(url, str) else None


def start_sim(processes: Processes, ports: DevPorts, state: DevState) -> dict[str, object]:
    """The simulator, keeping its world in `.colony/sim` (`--persist`, under this state's id):
    the saved world when there is one, a fresh one otherwise."""
    paths = DevPaths.under(STATE_DIR)
    paths.world.unlink(missing_ok=True)
    argv = [
        sys.executable, "-m", "sim", "--state-dir", str(paths.sim_dir),
        "--persist", "--state-id", state.id,
    ]  # fmt: skip
    if ports.sim:
        argv += ["--management-port", str(ports.sim)]
    if ports.sim_hostprovider:
        argv += ["--hostprovider-port", str(ports.sim_hostprovider)]
    scale = sim_time_scale(os.environ.get(SIM_TIME_SCALE_ENV))
    if scale:
        argv += ["--time-scale", scale]
    child = processes.start("simulator", argv, STATE_DIR / "sim.log")

    def announced() -> bool:
        processes.check_alive()
        started = _read_world(paths)
        return started is not None and started.get("pid") == child.pid

    _wait_until("the simulator", announced)
    return _read_world(paths) or {}


def ensure_sealing_keys() -> Path:
    """Colony's sealing key pair for this environment (created once, private key 0600): the worker
    unseals with the private key, colonyctl seals secret answers with the public one."""
    from infra.sealing import SealingSettings, create_key_pair

    settings = SealingSettings.from_env()
    create_key_pair(settings.private_key_file, settings.public_key_file)
    return settings.public_key_file


def start_worker(processes: Processes) -> bool:
    worker = REPO / "worker.py"
    if not worker.exists():
        return False
    ensure_sealing_keys()
    processes.start("worker", [sys.executable, str(worker)], STATE_DIR / "worker.log")
    return True


def _api_url(ports: DevPorts) -> str:
    return f"http://{LOCAL_HOST}:{ports.api}"


def start_api(processes: Processes, ports: DevPorts, state: DevState) -> None:
    """`python -m api` on COLONY_API_PORT, until it answers as this state's API."""
    processes.start("api", [sys.executable, "-m", "api"], STATE_DIR / "api.log")

    def answering() -> bool:
        processes.check_alive()
        return devstate.api_holder(_api_url(ports), state.id) is Holder.OURS

    _wait_until("the Colony API", answering)


def api_key_file() -> Path:
    return STATE_DIR / "api-key"


DEV_PERMISSIONS = ("manage", "connect", "read")
"""What the development key may do (`colonyctl apikey create --permission ...`)."""
DEV_KEY_EFFECTIVE = {"kubernetes:manage", "kubernetes:connect", "kubernetes:read"}
"""`DEV_PERMISSIONS` as the API names them (`GET /v1/api-key`'s `effectivePermissions`)."""


@dataclass(frozen=True)
class DevKey:
    """The development key `make run` serves with."""

    key: str
    reused: bool
    """True: the key of `.colony/api-key`, which the API still takes; False: made now."""


def dev_key(api_url: str) -> DevKey:
    """The development key: the one in `.colony/api-key` when the API (`api_url`) still takes it
    as organization `dev`'s with every permission, so every `make run` of a state serves with one
    key; else a new one (`create_dev_key`), and the one it replaces is revoked, so keys never
    pile up, each still working."""
    stored = _stored_dev_key()
    if stored and _serves_as_dev_key(api_url, stored):
        return DevKey(stored, reused=True)
    key = create_dev_key()
    if stored:
        _revoke(stored)
    return DevKey(key, reused=False)


def _stored_dev_key() -> str:
    try:
        return api_key_file().read_text(encoding="utf-8").strip()
    except (FileNotFoundError, UnicodeDecodeError):
        return ""


def _serves_as_dev_key(api_url: str, key: str) -> bool:
    """Whether the API takes `key` as organization `dev`'s with every permission of a new one
    (an answer other than 200, or none, says no: the key is then replaced and revoked)."""
    try:
        answer = httpx.get(
            f"{api_url}/v1/api-key",
            headers={"Authorization": f"Bearer {key}"},
            timeout=devstate.PROBE_SECONDS,
        )
        body = answer.json() if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return False
    if not isinstance(body, dict) or body.get("organization") != DEV_ORGANIZATION:
        return False
    return set(body.get("effectivePermissions") or []) >= DEV_KEY_EFFECTIVE


def _revoke(key: str) -> None:
    """Revoke the key `make run` no longer uses (`colonyctl apikey revoke`); one already gone
    (revoked, or of a store that was reset) is nothing to revoke."""
    from infra.keys import key_id_of

    key_id = key_id_of(key)
    if key_id is None:
        return  # not a key at all: nothing of it is stored
    done = subprocess.run(
        [str(VENV_BIN / "colonyctl"), "apikey", "revoke", key_id],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode not in (0, 3):  # 3: no such key
        print(f"colony: could not revoke the replaced API key {key_id}: {done.stderr.strip()}")


def create_dev_key() -> str:
    """A development key of organization `dev` with every permission, from `colonyctl apikey
    create` (stored on the management cluster as a hash), written to `.colony/api-key` (0600)."""
    permissions = [arg for name in DEV_PERMISSIONS for arg in ("--permission", name)]
    done = subprocess.run(
        [
            str(VENV_BIN / "colonyctl"), "apikey", "create", "--organization", DEV_ORGANIZATION,
            *permissions, "--name", "make run", "-o", "json",
        ],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"colony: could not create the development API key: {done.stderr}")
    key = str(json.loads(done.stdout)["key"])
    fd = os.open(api_key_file(), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an older file keeps its mode through O_TRUNC
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(key + "\n")
    return key


def start_watcher(processes: Processes) -> bool:
    watcher = REPO / "watcher.py"
    if not watcher.exists():
        return False
    processes.start("watcher", [sys.executable, str(watcher)], STATE_DIR / "watcher.log")
    return True


def run_scenario() -> int:
    scenario = Path(__file__).with_name("scenario.py")
    if not scenario.exists():
        return 0
    return subprocess.call([sys.executable, "-m", "starter.dev.scenario"])


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def reset() -> int:
    """`make reset`: remove the development state in `.colony/` (never `.venv`)."""
    try:
        removed = devstate.reset(DevPaths.under(STATE_DIR))
    except DevStateError as exc:
        print(f"colony: {exc}", file=sys.stderr)
        return 2
    if removed:
        print(
            f"removed {STATE_DIR}/ (Temporal's database, the simulated world, the development API "
            "key, the sealing keys, the logs); .venv is kept. The next make run starts fresh."
        )
    else:
        print(f"nothing to reset: {STATE_DIR}/ holds no development state")
    return 0


@dataclass(frozen=True)
class Serving:
    """What `make run` has serving: this development state's servers, started now or found."""

    state: DevState
    ports: DevPorts
    metrics: MetricsPorts
    world: dict[str, object] | None
    worker: bool
    watcher: bool


def start_everything(processes: Processes, paths: DevPaths) -> Serving:
    """Temporal, the simulator, the worker, the watcher and the API: each reused when this
    development state's serves already (`preflight`), else started; a mismatch stops here."""
    ports = dev_ports(os.environ)
    metrics = metrics_ports(os.environ)
    sim_time_scale(os.environ.get(SIM_TIME_SCALE_ENV))  # refused here, before anything starts
    try:
        state = devstate.check(paths)
    except DevStateError as exc:
        raise SystemExit(f"colony: {exc}") from exc
    plan = preflight(ports, state, paths)
    # The API says it in /healthz: a second make run tells it from another program.
    os.environ[DEV_STATE_ENV] = state.id
    if plan.temporal_serving:
        print(f"temporal: reusing this development state's server on {ports.temporal_address}")
    else:
        try:
            start_temporal(processes, ports, state)
        except DevStateError as exc:
            raise SystemExit(f"colony: {exc}") from exc
    world = plan.world
    if world is not None:
        print(f"simulator: reusing this development state's simulator ({paths.world})")
    else:
        world = start_sim(processes, ports, state)
    worker = start_worker(processes)
    watcher = start_watcher(processes)
    if plan.api_serving:
        print(f"api: reusing this development state's API on {_api_url(ports)}")
    else:
        start_api(processes, ports, state)
    return Serving(state, ports, metrics, world, worker, watcher)


def print_banner(serving: Serving, paths: DevPaths, dev_key: DevKey) -> None:
    """Where everything is, and how to reach it."""
    state, ports, api_url = serving.state, serving.ports, _api_url(serving.ports)
    print()
    print(
        f"Development state    {state.id} "
        f"({'new' if state.fresh else 'resumed'}; {STATE_DIR}/, `make reset` starts afresh)"
    )
    print(f"Temporal Web UI      http://{LOCAL_HOST}:{ports.temporal_ui}")
    print(f"Temporal frontend    {ports.temporal_address} (namespace {TEMPORAL_NAMESPACE})")
    print(f"SIMULATED management cluster kubeconfig  {paths.sim_dir / 'management.kubeconfig'}")
    print(f"SIMULATED host provider                  {_url(serving.world, 'hostProvider') or '?'}")
    print(f"Colony HTTP API      {api_url} (OpenAPI docs: {api_url}/docs)")
    print(
        f"Development API key  {dev_key.key}  (organization {DEV_ORGANIZATION}, "
        f"Manage + Connect + Read; {'reused from' if dev_key.reused else 'new, kept in'} "
        f"{api_key_file()}: the next make run reuses it)"
    )
    print(
        f"  remote colonyctl:  colonyctl auth login --url {api_url} --api-key - < {api_key_file()}"
    )
    print(f"Logs                 {STATE_DIR}/*.log")
    if serving.worker:
        print(f"Colony worker        task queue {os.environ.get('COLONY_TASK_QUEUE', 'colony')}")
        print("Sealing key pair     .colony/sealing/ (colonyctl seals secrets with public.pem)")
    if serving.watcher:
        print("Colony watcher       Lease colony-system/colony-watcher (events -> signals)")
    print(f"Metrics              {serving.metrics.banner()}")
    print()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make run", description=__doc__)
    parser.add_argument("--no-scenario", action="store_true", help="start everything, run nothing")
    parser.add_argument(
        "--exit", action="store_true", help="stop everything once the scenario has run"
    )
    parser.add_argument(
        "--reset", action="store_true", help="remove the development state (.colony/), then exit"
    )
    args = parser.parse_args(argv)
    if args.reset:
        return reset()

    # SIGTERM (a closed terminal, `timeout`, CI) must stop the children too, as Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)
    paths = DevPaths.under(STATE_DIR)
    processes = Processes(record=paths.processes / f"{os.getpid()}.json")
    try:
        serving = start_everything(processes, paths)
        print_banner(serving, paths, dev_key(_api_url(serving.ports)))
        status = 0 if args.no_scenario else run_scenario()
        if status != 0 and not serving.state.fresh:
            # The demo met what earlier runs left (an interrupted demo's clusters hold hosts).
            print(
                "This development state keeps what earlier runs made (colonyctl cluster list, "
                "colonyctl colony list): delete what is in the way, or `make reset` to start afresh."
            )
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
