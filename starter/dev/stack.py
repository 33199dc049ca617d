"""`make stack`: Colony's production shape on this machine, without Docker, from the configuration
docker compose reads (`starter.dev.compose` makes docker-compose.yml local).

Starts, as child processes each logging to `.colony/stack/logs/<name>.log`:
  1. PostgreSQL (Debian's packages, installed when missing; `starter.dev.postgresql`), then
     Temporal's schema in it (`deploy/temporal/schema.sh`: temporal-sql-tool, both databases);
  2. Temporal as four processes, `frontend`, `history`, `matching` and `worker`, of the pinned
     server binary (`components/go/temporal`, built once by `components.build`);
  3. `deploy/temporal/setup.sh`: the namespace and Colony's search attributes;
  4. the Temporal Web UI: the standalone UI server (`components/go/temporal-ui`, the version of
     docker-compose.yml's `temporalio/ui` image);
  5. the SIMULATED world (`python -m sim`);
  6. Colony: 2 workers, 2 watchers (one leads, on the Lease), 2 HTTP API replicas;
then makes a development API key, plays the demo `make run` plays (`starter.dev.scenario`)
against it, and keeps everything serving until Ctrl-C, which stops it all (the last started
first). Each `make stack` starts afresh: `.colony/stack/` is emptied first.

Published ports are docker-compose.yml's: Temporal's frontend on TEMPORAL_ADDRESS (7233), its Web
UI on COLONY_TEMPORAL_UI_PORT (8080), the API replicas on COLONY_API_PORT and the next (8000,
8001); every other port (PostgreSQL, the other Temporal services, membership) is any free one.

`LocalStack` is also what the reliability suite (`tests/reliability/cluster.py`) and the benchmarks
(`bench/stack.py`) start, on free ports in a directory of their own: each of its processes can be
killed, stopped and started again by name.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from components.build import BuildError
from components.build import ensure as ensure_component
from infra.ports import free_port, port_free, port_open
from infra.sealing import PRIVATE_KEY_ENV, PUBLIC_KEY_ENV, create_key_pair
from starter.dev.compose import (
    LOOPBACK,
    REPO,
    TEMPORAL_SERVICES,
    ComposeError,
    ComposeStack,
    LocalMachine,
    LocalPlan,
    LocalPorts,
    ProcessPlan,
    TemporalPorts,
    local_plan,
)
from starter.dev.postgresql import (
    LocalPostgres,
    PostgresError,
    ServerUser,
    data_directory_for,
    ensure_installed,
)

STATE_DIR = Path(".colony/stack")
VENV_BIN = Path(sys.executable).parent
START_DEADLINE = 120.0
"""How long one process of the stack may take to come up on a loaded 2-core machine (Temporal's
services join their ring within 30 s: `maxJoinDuration` of the embedded configuration)."""
SETUP_DEADLINE = 300.0
"""deploy/temporal/setup.sh: until the cluster answers healthy, the namespace and 6 attributes."""
STOP_DEADLINE = 20.0
"""How long a process has to stop after its signal: the worker waits up to 10 s for activities."""
ORGANIZATION = "dev"
POSTGRESQL = "postgresql"


class StackError(Exception):
    """The stack could not start; one line (with a log's last lines) saying why."""


@dataclass
class Child:
    """One process of the stack, started again and again under one name."""

    plan: ProcessPlan
    ready: Callable[[], bool]
    """True once the process serves (after `start`)."""
    identity: dict[str, object] = field(default_factory=dict)
    """`subprocess` arguments to run it as another user (PostgreSQL, when we are root)."""
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.running and self.process is not None else None

    def start(self) -> None:
        self.starts += 1
        self.plan.log.parent.mkdir(parents=True, exist_ok=True)
        with self.plan.log.open("ab") as sink:
            sink.write(f"\n=== start {self.starts} at {time.time():.3f}\n".encode())
            sink.flush()
            self.process = subprocess.Popen(
                self.plan.argv,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=self.plan.env,
                cwd=REPO,
                start_new_session=True,
                **self.identity,  # type: ignore[call-overload]
            )

    def signal(self, sig: signal.Signals, timeout: float = STOP_DEADLINE) -> None:
        """Send `sig` and wait for the exit (SIGKILL once `timeout` has passed)."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(sig)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def text(self) -> str:
        return self.plan.log.read_text(errors="replace") if self.plan.log.exists() else ""

    def since_start(self) -> str:
        """The log since the latest start."""
        text = self.text()
        at = text.rfind(f"=== start {self.starts} ")
        return text[at:] if at >= 0 else ""

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.text().splitlines()[-lines:])


@dataclass
class LocalStack:
    """The production shape's processes on this machine (see the module docstring)."""

    plan: LocalPlan
    postgres: LocalPostgres
    binaries: dict[str, Path]
    children: dict[str, Child] = field(default_factory=dict)
    overrides: dict[str, str] = field(default_factory=dict)
    """Settings given to every Colony process and client beyond the plan's (a test's own task
    queue, its API without a rate limit)."""
    temporary_data: bool = False
    """The PostgreSQL data directory is a temporary folder, removed with the stack."""
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds each phase of `up` took."""

    @classmethod
    def create(
        cls,
        state: Path,
        ports: LocalPorts,
        *,
        environ: Mapping[str, str] | None = None,
        sim_args: Sequence[str] = (),
        colony_env: Mapping[str, str] | None = None,
    ) -> LocalStack:
        """The stack's plan in `state` (its logs, the sim's world, the sealing keys, the data
        directory when PostgreSQL's user can reach it), its binaries built and PostgreSQL
        installed when missing. Nothing runs yet: `up()` starts it."""
        started = time.monotonic()
        binaries = {
            "temporal": ensure_component("temporal"),
            "temporal-ui": ensure_component("temporal-ui"),
        }
        built = time.monotonic() - started
        sealing = state / "sealing"
        given = dict(os.environ if environ is None else environ)
        given.setdefault("COLONY_SEALING_DIR", str(sealing))
        compose = ComposeStack.read(given)
        server_user = ServerUser.for_this_process()
        data, temporary = data_directory_for(state / POSTGRESQL, server_user)
        plan = local_plan(
            compose,
            LocalMachine(
                ports=ports,
                state=state,
                temporal_server=binaries["temporal"] / "temporal-server",
                ui_server=binaries["temporal-ui"] / "temporal-ui-server",
                volumes={"sim-state": state, "postgresql-data": data},
            ),
        )
        started = time.monotonic()
        bin_dir = ensure_installed(plan.postgres_major)
        installed = time.monotonic() - started
        postgres = LocalPostgres(
            bin=bin_dir,
            data=data,
            port=ports.postgresql,
            superuser=plan.postgres_user,
            password=plan.postgres_password,
            settings=compose.postgres_settings,
            user=server_user,
        )
        stack = cls(
            plan, postgres, binaries, overrides=dict(colony_env or {}), temporary_data=temporary
        )
        stack.timings.update(builds=built, postgresql_install=installed)
        stack._children(sim_args)
        return stack

    def _children(self, sim_args: Sequence[str]) -> None:
        plan, ports = self.plan, self.plan.ports
        postgres = ProcessPlan(
            POSTGRESQL, self.postgres.argv(), {}, plan.state / "logs" / f"{POSTGRESQL}.log"
        )
        self._add(postgres, self.postgres.ready, self.postgres.user.process_identity())
        for name, service in plan.temporal.items():
            port = ports.temporal[name].grpc
            self._add(service, lambda port=port: port_open(port))  # type: ignore[misc]
        self._add(plan.ui, lambda: port_open(ports.ui))
        sim = ProcessPlan(plan.sim.name, [*plan.sim.argv, *sim_args], plan.sim.env, plan.sim.log)
        self._add(sim, self._sim_ready)
        for kind, replicas in plan.colony.items():
            for replica in replicas:
                env = {**replica.env, **self.overrides}
                if kind == "api":
                    env["COLONY_API_PORT"] = replica.env["COLONY_API_PORT"]
                process = ProcessPlan(replica.name, replica.argv, env, replica.log, replica.replica)
                self._add(process, self._colony_ready(kind, process))

    def _add(
        self,
        plan: ProcessPlan,
        ready: Callable[[], bool],
        identity: dict[str, object] | None = None,
    ) -> None:
        self.children[plan.name] = Child(plan, ready, identity or {})

    def _sim_ready(self) -> bool:
        world = self.plan.sim_dir / "world.json"
        try:
            announced = json.loads(world.read_text())
        except (FileNotFoundError, ValueError):
            return False
        return bool(announced.get("pid") == self.children["sim"].pid)

    def _colony_ready(self, kind: str, process: ProcessPlan) -> Callable[[], bool]:
        if kind == "api":
            url = f"http://{LOOPBACK}:{process.env['COLONY_API_PORT']}/healthz"

            def answering() -> bool:
                try:
                    return httpx.get(url, timeout=2).status_code == 200
                except httpx.HTTPError:
                    return False

            return answering
        line = "worker on task queue" if kind == "worker" else "management cluster"
        return lambda: line in self.children[process.name].since_start()

    # --- names ----------------------------------------------------------------------------------

    @property
    def temporal_address(self) -> str:
        return self.plan.ports.temporal_address

    @property
    def api_urls(self) -> list[str]:
        return [f"http://{LOOPBACK}:{port}" for port in self.plan.ports.api]

    @property
    def ui_url(self) -> str:
        return f"http://{LOOPBACK}:{self.plan.ports.ui}"

    def names(self, kind: str) -> list[str]:
        """The children of one kind: `worker` -> [`worker-1`, `worker-2`]."""
        return [replica.name for replica in self.plan.colony[kind]]

    def env(self) -> dict[str, str]:
        """Colony's environment for a client of this stack (colonyctl, a test, a benchmark)."""
        return {**self.plan.colony_env, **self.overrides}

    # --- starting and stopping -------------------------------------------------------------------

    def up(self, *, report: Callable[[str], None] = lambda line: None) -> None:
        """Start everything in order, each part once the one before serves."""
        self.up_temporal(report=report)
        self.up_colony(report=report)

    def up_temporal(self, *, report: Callable[[str], None] = lambda line: None) -> None:
        """PostgreSQL with Temporal's schema, Temporal's four services, the namespace and search
        attributes: what a benchmark's own processes (`bench.stack`) need below them."""
        self.plan.state.mkdir(parents=True, exist_ok=True)
        with self._phase("postgresql", report):
            if not self.postgres.initialized:
                self.postgres.initdb()
            self.start(POSTGRESQL)
        with self._phase("schema", report):
            self.run_script("temporal-schema", self.plan.schema_script, self.plan.temporal_env)
        with self._phase("temporal", report):
            # The first service to start writes the cluster's metadata record; services started
            # together race to write it, and the losers exit ("failed to initialize current
            # cluster metadata"): the frontend first (compose orders them with depends_on).
            first, *others = TEMPORAL_SERVICES
            self.start(f"temporal-{first}")
            for name in others:
                self.children[f"temporal-{name}"].start()
            for name in others:
                self.wait_ready(f"temporal-{name}")
        with self._phase("setup", report):
            self.run_script("temporal-setup", self.plan.setup_script, self.plan.setup_env)

    def up_colony(self, *, report: Callable[[str], None] = lambda line: None) -> None:
        """The Web UI, the sim and Colony's processes, on a Temporal `up_temporal` started."""
        keys = Path(self.plan.colony_env[PUBLIC_KEY_ENV]).parent
        create_key_pair(keys / "private.pem", keys / "public.pem")
        with self._phase("ui+sim", report):
            self.children["temporal-ui"].start()
            self.children["sim"].start()
            self.wait_ready("temporal-ui")
            self.wait_ready("sim")
        with self._phase("colony", report):
            colony = [name for kind in self.plan.colony for name in self.names(kind)]
            for name in colony:
                self.children[name].start()
            for name in colony:
                self.wait_ready(name)

    @contextlib.contextmanager
    def _phase(self, name: str, report: Callable[[str], None]) -> Iterator[None]:
        """Time one phase of `up` into `timings`, and report it."""
        began = time.monotonic()
        yield
        self.timings[name] = time.monotonic() - began
        report(f"{name}: up in {self.timings[name]:.1f} s")

    def start(self, name: str, deadline: float = START_DEADLINE) -> None:
        """Start one process and wait until it serves."""
        self.children[name].start()
        self.wait_ready(name, deadline)

    def wait_ready(self, name: str, deadline: float = START_DEADLINE) -> None:
        child = self.children[name]
        until = time.monotonic() + deadline
        while not child.ready():
            if not child.running:
                raise StackError(f"{name} exited while starting:\n{child.tail()}")
            if time.monotonic() > until:
                raise StackError(f"{name} did not come up within {deadline:.0f} s:\n{child.tail()}")
            time.sleep(0.1)

    def stop_process(self, name: str, sig: signal.Signals = signal.SIGTERM) -> None:
        self.children[name].signal(sig)

    def restart(self, name: str, sig: signal.Signals, down_for: float = 0.0) -> float:
        """Stop one process with `sig`, leave it down `down_for` seconds, start it again on the
        same ports and state; the seconds until it served again."""
        began = time.monotonic()
        self.children[name].signal(sig)
        time.sleep(down_for)
        self.start(name)
        return time.monotonic() - began

    def run_script(self, name: str, script: Path, env: Mapping[str, str]) -> None:
        """One of deploy/temporal's scripts, with the stack's binaries and `temporal` on the PATH,
        its output in `logs/<name>.log`."""
        path = os.pathsep.join(
            [str(self.binaries["temporal"]), str(VENV_BIN), os.environ.get("PATH", "")]
        )
        log = self.plan.state / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as sink:
            done = subprocess.run(
                ["sh", str(script)],
                env={"PATH": path, "HOME": str(self.plan.state), **env},
                stdout=sink,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                timeout=SETUP_DEADLINE,
            )
        if done.returncode != 0:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
            raise StackError(f"{script.name} failed (exit {done.returncode}):\n{tail}")

    def check_alive(self) -> None:
        for child in self.children.values():
            if child.process is not None and not child.running:
                raise StackError(
                    f"{child.name} exited with code {child.process.returncode}; see {child.plan.log}"
                )

    def stop(self) -> None:
        """Stop every process, the last started first (Colony before Temporal before
        PostgreSQL), PostgreSQL with a fast shutdown (SIGINT: its smart one waits for clients)."""
        for child in reversed(list(self.children.values())):
            child.signal(signal.SIGINT if child.name == POSTGRESQL else signal.SIGTERM)
        if self.temporary_data:
            shutil.rmtree(self.postgres.data.parent, ignore_errors=True)

    def describe(self) -> str:
        """Every process's last lines, for a failure's message."""
        return "\n".join(
            f"--- {child.name} (last lines)\n{child.tail(15)}" for child in self.children.values()
        )


def free_ports(api_replicas: int = 2) -> LocalPorts:
    """Every port of a stack picked free (`infra.ports.free_port`): tests and benchmarks."""
    return LocalPorts(
        postgresql=free_port(),
        temporal={name: TemporalPorts(free_port(), free_port()) for name in TEMPORAL_SERVICES},
        frontend_http=free_port(),
        ui=free_port(),
        api=[free_port() for _ in range(api_replicas)],
    )


def published_ports(environ: Mapping[str, str], compose: ComposeStack) -> LocalPorts:
    """`make stack`'s ports: docker-compose.yml's published ones (each moved by its setting),
    any free one for the rest. A published port already taken stops `make stack` with one line
    naming its setting."""
    address = environ.get("TEMPORAL_ADDRESS") or f"{LOOPBACK}:7233"
    frontend = _port("TEMPORAL_ADDRESS", address.rpartition(":")[2])
    ui_default = compose.service("temporal-ui").published[0][0][0]
    ui = _port("COLONY_TEMPORAL_UI_PORT", environ.get("COLONY_TEMPORAL_UI_PORT") or str(ui_default))
    api_hosts = compose.service("api").published[0][0]
    first_api = _port("COLONY_API_PORT", environ.get("COLONY_API_PORT") or str(api_hosts[0]))
    api = [first_api + offset for offset in range(compose.service("api").replicas)]
    for port, setting in [
        (frontend, "TEMPORAL_ADDRESS"),
        (ui, "COLONY_TEMPORAL_UI_PORT"),
        *((port, "COLONY_API_PORT") for port in api),
    ]:
        if not port_free(port):
            raise SystemExit(
                f"colony: port {port} is in use (a `make run`, another `make stack`?): "
                f"set {setting} to move it"
            )
    temporal = {name: TemporalPorts(free_port(), free_port()) for name in TEMPORAL_SERVICES}
    temporal["frontend"] = TemporalPorts(frontend, free_port())
    return LocalPorts(
        postgresql=free_port(),
        temporal=temporal,
        frontend_http=free_port(),
        ui=ui,
        api=api,
    )


def _port(setting: str, text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise SystemExit(f"colony: {setting}: {text!r} has no port number (1-65535)")
    return int(text)


def still_running(data: Path) -> None:
    """Stop `make stack` when the last one's PostgreSQL still runs on the state it would empty
    (a `make stack` in another terminal, or one killed so hard it could not stop its children)."""
    try:
        pid = int((data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return
    except PermissionError:
        pass  # alive, another user's (the `postgres` system user's, when we are root)
    raise SystemExit(
        f"colony: a make stack still runs on {data.parent} (its PostgreSQL, pid {pid}): "
        "stop it first (Ctrl-C in its terminal, or kill that pid)"
    )


def create_key(stack: LocalStack, key_file: Path) -> str:
    """A development key of organization `dev` with every permission (`colonyctl apikey
    create`), written to `key_file` (0600)."""
    done = subprocess.run(
        [
            str(VENV_BIN / "colonyctl"), "apikey", "create", "--organization", ORGANIZATION,
            "--permission", "manage", "--permission", "connect", "--permission", "read",
            "--name", "make stack", "-o", "json",
        ],
        capture_output=True, text=True, check=False, env=stack.env(), cwd=REPO,
    )  # fmt: skip
    if done.returncode != 0:
        raise StackError(f"could not create the development API key: {done.stderr.strip()}")
    key = str(json.loads(done.stdout)["key"])
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(key + "\n")
    return key


def print_banner(stack: LocalStack, key_file: Path) -> None:
    plan = stack.plan
    ports = plan.ports
    print()
    print("Colony's production shape (docker-compose.yml, made local; state in .colony/stack/)")
    print(
        f"PostgreSQL {plan.postgres_major}       127.0.0.1:{ports.postgresql} "
        f"(databases temporal, temporal_visibility; data in {stack.postgres.data})"
    )
    for name in TEMPORAL_SERVICES:
        at = ports.temporal[name]
        print(f"Temporal {name:<9} 127.0.0.1:{at.grpc} (membership {at.membership})")
    print(f"Temporal Web UI     {stack.ui_url} (the standalone UI server)")
    print(f"SIMULATED world     {plan.sim_dir}/world.json")
    for kind in plan.colony:
        print(f"Colony {kind:<12} {', '.join(stack.names(kind))}")
    print(f"Colony HTTP API     {', '.join(stack.api_urls)} (docs at /docs)")
    print(f"Development API key in {key_file} (organization {ORGANIZATION})")
    print(f"Logs                {plan.state}/logs/")
    print("In another terminal:")
    print(f"  export TEMPORAL_ADDRESS={stack.temporal_address}")
    print(
        f"  export {PUBLIC_KEY_ENV}={plan.colony_env[PUBLIC_KEY_ENV]} "
        f"COLONY_MANAGEMENT_KUBECONFIG={plan.colony_env['COLONY_MANAGEMENT_KUBECONFIG']}"
    )
    print()


def run_scenario(stack: LocalStack) -> int:
    return subprocess.call(
        [sys.executable, "-m", "starter.dev.scenario", "--state-dir", str(stack.plan.state)],
        env={**stack.env(), PRIVATE_KEY_ENV: ""},
        cwd=REPO,
    )


def prepare() -> int:
    """Build the pinned binaries and install PostgreSQL when missing; say how long each took."""
    try:
        for name in ("temporal", "temporal-ui"):
            began = time.monotonic()
            folder = ensure_component(name)
            print(f"{name}: {folder} ({time.monotonic() - began:.0f} s)")
        major = ComposeStack.read().postgres_major
        began = time.monotonic()
        print(f"postgresql {major}: {ensure_installed(major)} ({time.monotonic() - began:.0f} s)")
    except (BuildError, ComposeError, PostgresError) as exc:
        print(f"colony: {exc}", file=sys.stderr)
        return 1
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make stack", description=__doc__)
    parser.add_argument("--no-scenario", action="store_true", help="start everything, run nothing")
    parser.add_argument("--exit", action="store_true", help="stop everything after the scenario")
    parser.add_argument(
        "--prepare",
        action="store_true",
        help="only build the pinned Temporal server and UI and install PostgreSQL when missing "
        "(what make test, make reliability and make bench need first), then exit",
    )
    args = parser.parse_args(argv)
    if args.prepare:
        return prepare()
    signal.signal(signal.SIGTERM, _interrupt)
    began = time.monotonic()
    state = (REPO / STATE_DIR).resolve()
    stack: LocalStack | None = None
    try:
        compose = ComposeStack.read()
        ports = published_ports(os.environ, compose)
        still_running(state / POSTGRESQL)
        shutil.rmtree(state, ignore_errors=True)
        print("building the pinned Temporal server and UI (once), PostgreSQL if missing ...")
        stack = LocalStack.create(state, ports)
        stack.up(report=lambda line: print(line, flush=True))
        key_file = state / "api-key"
        create_key(stack, key_file)
        print(
            f"stack up in {time.monotonic() - began:.0f} s "
            f"(builds {stack.timings['builds']:.0f} s, "
            f"PostgreSQL install {stack.timings['postgresql_install']:.0f} s)"
        )
        print_banner(stack, key_file)
        status = 0 if args.no_scenario else run_scenario(stack)
        if args.exit:
            return status
        print("Everything keeps running; press Ctrl-C to stop it all.")
        while True:
            stack.check_alive()
            time.sleep(1)
    except KeyboardInterrupt:
        return 0
    except (StackError, ComposeError, PostgresError, BuildError) as exc:
        print(f"colony: {exc}", file=sys.stderr)
        return 1
    finally:
        if stack is not None:
            stack.stop()


if __name__ == "__main__":
    sys.exit(main())
