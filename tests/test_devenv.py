"""`make run` before it starts anything: its development state (`starter.dev.devstate`: Temporal's
database and the simulated world together, or both fresh; `make reset`), the ports it reuses or
refuses (a program that is not Colony's is never reused), and the metrics ports (one per process;
the processes serving them are scraped in `tests/test_observability.py`). `make run` played twice
is `tests/test_e2e_devenv.py`."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from infra.config import (
    METRICS_PORT_ENV,
    WATCHER_METRICS_PORT_ENV,
    ColonySettings,
    SettingsError,
)
from infra.ports import free_port
from starter.dev import devstate
from starter.dev.devenv import (
    API_PORT_ENV,
    SIM_HOSTPROVIDER_PORT_ENV,
    SIM_PORT_ENV,
    SIM_TIME_SCALE_ENV,
    TEMPORAL_ADDRESS_ENV,
    TEMPORAL_UI_PORT_ENV,
    DevPorts,
    MetricsPorts,
    dev_ports,
    metrics_ports,
    sim_time_scale,
)
from starter.dev.devstate import DevPaths, DevStateError, Holder
from tests.conftest import venv_binary
from tests.helpers import eventually_sync, unique

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def taken() -> Iterator[int]:
    """A port something listens on, for as long as the test runs."""
    with socket.socket() as listener:
        listener.bind(("0.0.0.0", 0))
        listener.listen()
        yield int(listener.getsockname()[1])


def test_without_a_port_nothing_is_served() -> None:
    environ: dict[str, str] = {}
    ports = metrics_ports(environ)
    assert ports == MetricsPorts(worker=None, watcher=None)
    assert environ == {}
    assert "off" in ports.banner()


def test_the_watcher_gets_the_first_free_port_after_the_workers() -> None:
    worker = free_port()
    environ = {METRICS_PORT_ENV: str(worker)}
    ports = metrics_ports(environ)
    assert ports.worker == worker
    assert ports.watcher is not None
    assert ports.watcher > worker
    # The watcher process reads it from the environment it inherits.
    assert environ[WATCHER_METRICS_PORT_ENV] == str(ports.watcher)
    assert str(ports.watcher) in ports.banner()


def test_a_taken_port_after_the_workers_is_skipped() -> None:
    # Find a free port whose successor can be held by a listener of the test's.
    for _ in range(50):
        worker = free_port()
        with socket.socket() as listener:
            try:
                listener.bind(("0.0.0.0", worker + 1))
            except OSError:
                continue
            listener.listen()
            ports = metrics_ports({METRICS_PORT_ENV: str(worker)})
            assert ports.watcher is not None
            assert ports.watcher > worker + 1
            return
    pytest.fail("no free pair of ports found")


def test_an_explicit_watcher_port_is_kept() -> None:
    worker, watcher = free_port(), free_port()
    environ = {METRICS_PORT_ENV: str(worker), WATCHER_METRICS_PORT_ENV: str(watcher)}
    assert metrics_ports(environ) == MetricsPorts(worker=worker, watcher=watcher)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        pytest.param(
            {METRICS_PORT_ENV: "19464", WATCHER_METRICS_PORT_ENV: "19464"},
            f"{WATCHER_METRICS_PORT_ENV} must differ from {METRICS_PORT_ENV} (19464)",
            id="same-port-twice",
        ),
        pytest.param(
            {METRICS_PORT_ENV: "nineteen"},
            f"{METRICS_PORT_ENV}: 'nineteen' is not a port number (0-65535)",
            id="not-a-number",
        ),
        pytest.param(
            {METRICS_PORT_ENV: "19464", WATCHER_METRICS_PORT_ENV: "70000"},
            f"{WATCHER_METRICS_PORT_ENV}: '70000' is not a port number (0-65535)",
            id="watcher-out-of-range",
        ),
    ],
)
def test_refused_before_anything_starts(environ: dict[str, str], message: str) -> None:
    with pytest.raises(SystemExit, match=re.escape(message)):
        metrics_ports(environ)


@pytest.mark.parametrize("variable", [METRICS_PORT_ENV, WATCHER_METRICS_PORT_ENV])
def test_a_port_in_use_is_named(taken: int, variable: str) -> None:
    environ = {METRICS_PORT_ENV: str(free_port()), variable: str(taken)}
    with pytest.raises(SystemExit, match=f"{variable}: port {taken} is already in use"):
        metrics_ports(environ)


def test_each_process_reads_its_own_setting() -> None:
    settings = ColonySettings.from_env({METRICS_PORT_ENV: "9464", WATCHER_METRICS_PORT_ENV: "9465"})
    assert (settings.metrics_port, settings.watcher_metrics_port) == (9464, 9465)
    assert ColonySettings.from_env({METRICS_PORT_ENV: "9464"}).watcher_metrics_port is None
    with pytest.raises(SettingsError, match=WATCHER_METRICS_PORT_ENV):
        ColonySettings.from_env({WATCHER_METRICS_PORT_ENV: "-1"})


# --------------------------------------------------------------------------- development state


def write_world(paths: DevPaths, state_id: str) -> None:
    """A saved simulated world, as `python -m sim --persist` leaves it (only its id matters)."""
    paths.sim_dir.mkdir(parents=True, exist_ok=True)
    paths.sim_state.write_text(json.dumps({"stateId": state_id, "format": 1}))


def write_database(paths: DevPaths, state_id: str | None) -> None:
    """A Temporal database, with its marker when `state_id` is given."""
    paths.root.mkdir(parents=True, exist_ok=True)
    paths.temporal_db.write_bytes(b"SQLite format 3\x00")
    if state_id is not None:
        paths.marker.write_text(json.dumps({"stateId": state_id}))


def test_a_first_run_creates_a_state_and_the_next_resumes_it(tmp_path: Path) -> None:
    paths = DevPaths.under(tmp_path / ".colony")
    first = devstate.check(paths)
    assert first.fresh
    assert json.loads(paths.marker.read_text()) == {"stateId": first.id}
    # What the first run leaves: Temporal's database and the world, both of that state.
    write_database(paths, first.id)
    write_world(paths, first.id)
    again = devstate.check(paths)
    assert (again.id, again.fresh) == (first.id, False)


@pytest.mark.parametrize(
    ("database", "world", "message"),
    [
        pytest.param(
            "s1", None, r"temporal.db has no simulated world beside it \(.*state.json is missing\)",
            id="temporal-db-without-the-world",
        ),
        pytest.param(
            None, "s1", r"state.json has no Temporal database beside it \(.*temporal.db is missing\)",
            id="the-world-without-temporal-db",
        ),
        pytest.param(
            "s1", "s2", "temporal.db belongs to development state s1, the simulated world to s2",
            id="two-different-states",
        ),
        pytest.param(
            "", "s1", r"temporal.db names no development state \(.*dev-state.json is missing",
            id="temporal-db-from-before-markers",
        ),
    ],
)  # fmt: skip
def test_one_part_without_the_other_is_refused_with_what_to_do(
    tmp_path: Path, database: str | None, world: str | None, message: str
) -> None:
    paths = DevPaths.under(tmp_path / ".colony")
    if database is not None:
        write_database(paths, database or None)
    if world is not None:
        write_world(paths, world)
    with pytest.raises(DevStateError, match=message) as refused:
        devstate.check(paths)
    assert str(refused.value).endswith(
        "run `make reset` (or `colonyctl dev reset`) to start both fresh"
    )
    assert "\n" not in str(refused.value)


def clean_environment(**settings: str) -> dict[str, str]:
    """The test's environment without Colony's or Temporal's settings, plus `settings`."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("COLONY_", "TEMPORAL_"))}
    return {**kept, **settings}


def make_run(cwd: Path, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    """`make run` (what it runs) in `cwd`, whose `.colony/` it uses."""
    return subprocess.run(
        [sys.executable, "-m", "starter.dev.devenv", *args],
        cwd=cwd,
        env=clean_environment(**settings),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("keep", "missing"),
    [
        pytest.param("temporal.db", "sim/state.json", id="temporal-db-only"),
        pytest.param("sim/state.json", "temporal.db", id="sim-state-only"),
    ],
)
def test_make_run_stops_on_a_mismatch_before_starting_anything(
    tmp_path: Path, keep: str, missing: str
) -> None:
    paths = DevPaths.under(tmp_path / ".colony")
    write_database(paths, "s1")
    write_world(paths, "s1")
    (paths.root / missing).unlink()
    ports = {name: str(free_port()) for name in (API_PORT_ENV, TEMPORAL_UI_PORT_ENV)}
    done = make_run(
        tmp_path, "--exit", **ports, **{TEMPORAL_ADDRESS_ENV: f"127.0.0.1:{free_port()}"}
    )
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"colony: .colony/{keep} has no ")
    assert line.endswith("run `make reset` (or `colonyctl dev reset`) to start both fresh")
    assert not (paths.root / "temporal.log").exists(), "nothing was started"


def ports_of_a_test() -> dict[str, str]:
    return {
        API_PORT_ENV: str(free_port()),
        TEMPORAL_UI_PORT_ENV: str(free_port()),
        TEMPORAL_ADDRESS_ENV: f"127.0.0.1:{free_port()}",
    }


def test_a_real_world_wants_a_fresh_state_and_says_how(tmp_path: Path) -> None:
    """A real world is not kept across runs: on the state of an earlier run, `make run` with
    COLONY_WORLD=real stops before starting (or building) anything, saying what to do."""
    paths = DevPaths.under(tmp_path / ".colony")
    write_database(paths, "s1")
    write_world(paths, "s1")
    done = make_run(tmp_path, "--exit", **ports_of_a_test(), COLONY_WORLD="real")
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line == (
        "colony: COLONY_WORLD=real starts a fresh real world, and .colony/ holds a development "
        "state: run `make reset` first"
    )
    assert not (paths.root / "temporal.log").exists(), "nothing was started"


def test_an_unknown_world_is_named_before_anything_starts(tmp_path: Path) -> None:
    done = make_run(tmp_path, "--exit", **ports_of_a_test(), COLONY_WORLD="virtual")
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line == "colony: COLONY_WORLD='virtual': it is emulated (the default) or real"
    assert not (tmp_path / ".colony" / "temporal.log").exists()


def test_reset_removes_the_state_and_keeps_the_venv(tmp_path: Path) -> None:
    venv = tmp_path / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\n")
    (venv / ".installed").touch()
    for reset in (
        [sys.executable, "-m", "starter.dev.devenv", "--reset"],  # what `make reset` runs
        [venv_binary("colonyctl"), "dev", "reset"],
    ):
        paths = DevPaths.under(tmp_path / ".colony")
        write_database(paths, "s1")
        write_world(paths, "s1")
        (paths.root / "api-key").write_text("colony_x_y\n")
        (paths.root / "sealing").mkdir()
        (paths.root / "worker.log").write_text("log\n")
        done = subprocess.run(
            reset, cwd=tmp_path, env=clean_environment(), capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "removed .colony/" in done.stdout
        assert ".venv is kept" in done.stdout
        assert not paths.root.exists()
        assert sorted(p.relative_to(venv).as_posix() for p in venv.rglob("*")) == [
            ".installed", "bin", "bin/python",
        ]  # fmt: skip
        # Nothing left to reset: said, not an error.
        again = subprocess.run(
            reset, cwd=tmp_path, env=clean_environment(), capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip
        assert again.returncode == 0
        assert "nothing to reset" in again.stdout


def test_reset_is_refused_while_a_make_run_of_the_state_runs(tmp_path: Path) -> None:
    paths = DevPaths.under(tmp_path / ".colony")
    write_database(paths, "s1")
    write_world(paths, "s1")
    argv = [sys.executable, "-c", "import time; time.sleep(120)"]
    simulator = subprocess.Popen(argv)
    try:
        paths.processes.mkdir()
        record = {"children": [{"name": "simulator", "pid": simulator.pid, "argv": argv}]}
        (paths.processes / "4242.json").write_text(json.dumps(record))
        # Once it runs its own program (right after the fork it is still this one).
        eventually_sync(lambda: devstate.running(paths), what="the simulator stand-in running")
        with pytest.raises(
            DevStateError,
            match=rf"make run still serves this development state \(simulator \(pid {simulator.pid}\)\)",
        ):
            devstate.reset(paths)
        assert paths.temporal_db.exists()
    finally:
        simulator.kill()
        simulator.wait()
    # Its pid, once gone, is no reason to refuse.
    assert devstate.reset(paths)
    assert not paths.root.exists()


# --------------------------------------------------------------------------- ports


def test_ports_default_and_come_from_the_settings() -> None:
    environ: dict[str, str] = {}
    assert dev_ports(environ) == DevPorts(
        temporal=7233, temporal_ui=8233, api=8080, sim=None, sim_hostprovider=None
    )
    assert environ[TEMPORAL_ADDRESS_ENV] == "127.0.0.1:7233"  # what the children read
    assert environ["COLONY_WEB_UI"] == "http://127.0.0.1:8233"
    environ = {
        TEMPORAL_ADDRESS_ENV: "localhost:17233", TEMPORAL_UI_PORT_ENV: "18233",
        API_PORT_ENV: "18080", SIM_PORT_ENV: "16443", SIM_HOSTPROVIDER_PORT_ENV: "18081",
    }  # fmt: skip
    assert dev_ports(environ) == DevPorts(17233, 18233, 18080, 16443, 18081)
    assert environ[TEMPORAL_ADDRESS_ENV] == "127.0.0.1:17233"


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        pytest.param(
            {TEMPORAL_ADDRESS_ENV: "temporal.example:7233"},
            "TEMPORAL_ADDRESS: make run serves Temporal itself on 127.0.0.1; give 127.0.0.1:<port>",
            id="remote-temporal",
        ),
        pytest.param(
            {API_PORT_ENV: "eighty"},
            f"{API_PORT_ENV}: 'eighty' is not a port number (0-65535)",
            id="not-a-number",
        ),
        pytest.param(
            {SIM_PORT_ENV: "70000"},
            f"{SIM_PORT_ENV}: '70000' is not a port number (0-65535)",
            id="out-of-range",
        ),
    ],
)
def test_a_bad_port_setting_is_named(environ: dict[str, str], message: str) -> None:
    with pytest.raises(SystemExit, match=re.escape(message)):
        dev_ports(environ)


@pytest.mark.parametrize("text", ["fast", "0", "-1", "1000"])
def test_a_bad_sim_time_scale_is_named(text: str) -> None:
    with pytest.raises(
        SystemExit, match=re.escape(f"{SIM_TIME_SCALE_ENV}: {text!r} is not a number")
    ):
        sim_time_scale(text)


def test_the_sim_time_scale_goes_to_the_simulator_as_a_number() -> None:
    assert sim_time_scale(None) is None
    assert sim_time_scale("") is None
    assert sim_time_scale("0.2") == "0.2"
    assert sim_time_scale("1") == "1.0"


class _NotColony(BaseHTTPRequestHandler):
    """Another program's web server: 404 for everything Colony would ask."""

    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"detail": "Not Found"}')

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def foreign() -> Iterator[int]:
    """The port of a web server that is not Colony's, for as long as the test runs."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotColony)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.parametrize(
    ("setting", "what"),
    [
        pytest.param(API_PORT_ENV, "API", id="api"),
        pytest.param(SIM_PORT_ENV, "simulator", id="sim"),
        pytest.param(SIM_HOSTPROVIDER_PORT_ENV, "simulator", id="sim-host-provider"),
        pytest.param(TEMPORAL_ADDRESS_ENV, "Temporal server", id="temporal"),
        pytest.param(TEMPORAL_UI_PORT_ENV, "Temporal Web UI", id="temporal-ui"),
    ],
)
def test_a_port_held_by_another_program_is_refused_naming_its_setting(
    tmp_path: Path, foreign: int, setting: str, what: str
) -> None:
    ports = {
        TEMPORAL_ADDRESS_ENV: f"127.0.0.1:{free_port()}",
        TEMPORAL_UI_PORT_ENV: str(free_port()),
        API_PORT_ENV: str(free_port()),
    }
    ports[setting] = f"127.0.0.1:{foreign}" if setting == TEMPORAL_ADDRESS_ENV else str(foreign)
    done = make_run(tmp_path, "--exit", **ports)
    assert done.returncode == 1, done.stdout
    assert done.stderr.strip() == (
        f"colony: port {foreign} is held by a program that is not Colony's {what}: "
        f"set {setting} to a free port"
    )
    assert not (tmp_path / ".colony" / "temporal.log").exists(), "nothing was started"


def test_who_holds_a_port_is_asked_not_assumed(foreign: int) -> None:
    url = f"http://127.0.0.1:{foreign}"
    assert devstate.api_holder(url, "s1") is Holder.FOREIGN
    assert devstate.sim_holder(url, "s1") is Holder.FOREIGN
    assert (
        devstate.temporal_holder(
            Path(venv_binary("temporal")), f"127.0.0.1:{foreign}", "default", "s1"
        )
        is Holder.FOREIGN
    )


async def test_a_temporal_server_is_told_by_the_state_marked_in_its_namespace(
    dev_env: WorkflowEnvironment,
) -> None:
    temporal = Path(venv_binary("temporal"))
    address = dev_env.client.service_client.config.target_host
    namespace = unique("devstate")
    created = await asyncio.to_thread(
        subprocess.run,
        [str(temporal), "operator", "namespace", "create", "--namespace", namespace,
         "--address", address],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr

    def holder(state_id: str) -> Holder:
        return devstate.temporal_holder(temporal, address, namespace, state_id)

    # A Temporal server `make run` did not mark is not Colony's to reuse.
    assert await asyncio.to_thread(holder, "s1") is Holder.FOREIGN
    await asyncio.to_thread(devstate.mark_temporal, temporal, address, namespace, "s1")
    assert await asyncio.to_thread(holder, "s1") is Holder.OURS
    assert await asyncio.to_thread(holder, "s2") is Holder.OTHER_STATE
    await asyncio.to_thread(devstate.mark_temporal, temporal, address, namespace, "s1")  # again
    with pytest.raises(DevStateError, match="belongs to development state s1, not s2"):
        await asyncio.to_thread(devstate.mark_temporal, temporal, address, namespace, "s2")
