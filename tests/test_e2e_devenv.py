"""`make run` as a user runs it (`python -m starter.dev.devenv`, what the Makefile runs), each test in a
temporary directory of its own (its `.colony/` there) on free ports.

- The demo played twice with a stop between: both pass, the second on the development state the
  first left (Temporal's database and the simulated world, resumed together).
- A second `make run` while the first serves reuses the first's Temporal, simulator and API; a
  reset is refused until the first stops, and the first's stop leaves nothing running.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from infra.keys import key_id_of
from infra.ports import free_port
from starter.dev.devenv import (
    API_PORT_ENV,
    SIM_TIME_SCALE_ENV,
    TEMPORAL_ADDRESS_ENV,
    TEMPORAL_UI_PORT_ENV,
)
from starter.dev.devstate import DevPaths, running
from tests.helpers import eventually_sync
from tests.test_devenv import clean_environment

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DEMO_DEADLINE_SECONDS = 600
"""One demo takes about a minute on an idle machine; the shared test machine is often not idle."""


def environment(tmp_path: Path) -> dict[str, str]:
    return clean_environment(
        **{
            TEMPORAL_ADDRESS_ENV: f"127.0.0.1:{free_port()}",
            TEMPORAL_UI_PORT_ENV: str(free_port()),
            API_PORT_ENV: str(free_port()),
            # colonyctl's token cache (kubectl's credentials in the demo): the test's own.
            "COLONY_CACHE_DIR": str(tmp_path / "cache"),
            # The demo's story, not its pace, is what these tests are about.
            SIM_TIME_SCALE_ENV: "0.2",
        }
    )


def make_run(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "starter.dev.devenv", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEMO_DEADLINE_SECONDS,
        check=False,
    )


def dev_key_line(output: str) -> tuple[str, str]:
    """(key, what the line says of it) from the banner's "Development API key" line."""
    found = re.search(r"^Development API key\s+(\S+)\s+\((.*)\)$", output, re.MULTILINE)
    assert found is not None, output
    return found.group(1), found.group(2)


def colonyctl(cwd: Path, env: dict[str, str], *args: str) -> str:
    """`colonyctl ARGS` as the operator runs it beside `make run` (its management cluster)."""
    done = subprocess.run(
        [str(Path(sys.executable).parent / "colonyctl"), *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def key_id(key: str) -> str:
    found = key_id_of(key)
    assert found is not None, "not a key"
    return found


def dev_keys(cwd: Path, env: dict[str, str]) -> list[str]:
    """The ids of organization dev's keys, sorted."""
    listed = colonyctl(cwd, env, "apikey", "list", "--organization", "dev", "-o", "json")
    return sorted(key["id"] for key in json.loads(listed))


def state_line(output: str) -> tuple[str, str]:
    """(id, "new" or "resumed") from the banner's "Development state" line."""
    found = re.search(r"^Development state\s+(\w+) \((new|resumed);", output, re.MULTILINE)
    assert found is not None, output
    return found.group(1), found.group(2)


@pytest.mark.timeout(2 * DEMO_DEADLINE_SECONDS + 120)
def test_the_demo_plays_twice_with_a_stop_between(tmp_path: Path) -> None:
    env = environment(tmp_path)
    first = make_run(tmp_path, env, "--exit")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    state, how = state_line(first.stdout)
    assert how == "new"

    second = make_run(tmp_path, env, "--exit")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert state_line(second.stdout) == (state, "resumed")
    assert "scenario failed" not in second.stdout
    # The second demo's notebook came from the class catalog the first run published.
    assert "deploy notebook" in second.stdout
    assert not running(DevPaths.under(tmp_path / ".colony")), (
        "both runs stopped everything they started"
    )


@pytest.mark.timeout(300)
def test_a_second_make_run_reuses_the_first_while_it_serves(tmp_path: Path) -> None:
    env = environment(tmp_path)
    paths = DevPaths.under(tmp_path / ".colony")
    log = tmp_path / "first.log"
    with log.open("w") as out:
        first = subprocess.Popen(
            [sys.executable, "-m", "starter.dev.devenv", "--no-scenario"],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        eventually_sync(
            lambda: "press Ctrl-C to stop" in log.read_text() or first.poll() is not None,
            timeout=180,
            what="the first make run serving",
        )
        assert first.poll() is None, log.read_text()
        second = make_run(tmp_path, env, "--no-scenario", "--exit")
        assert second.returncode == 0, second.stdout + second.stderr
        for server in ("server", "simulator", "API"):
            assert f"reusing this development state's {server}" in second.stdout
        assert state_line(second.stdout)[0] == state_line(log.read_text())[0]

        # One development key per state: the second run serves with the first's, and a key it
        # cannot reuse (here: read only) is replaced and revoked, never left working beside it.
        key = (paths.root / "api-key").read_text().strip()
        first_key, first_says = dev_key_line(log.read_text())
        second_key, second_says = dev_key_line(second.stdout)
        assert (first_key, second_key) == (key, key)
        assert "new, kept in .colony/api-key" in first_says
        assert "reused from .colony/api-key" in second_says
        assert dev_keys(tmp_path, env) == [key_id(key)]
        narrow = colonyctl(
            tmp_path, env, "apikey", "create", "--organization", "dev", "--permission", "read",
            "-o", "json",
        )  # fmt: skip
        narrow_key = json.loads(narrow)["key"]
        (paths.root / "api-key").write_text(narrow_key + "\n")
        third = make_run(tmp_path, env, "--no-scenario", "--exit")
        assert third.returncode == 0, third.stdout + third.stderr
        replacement = (paths.root / "api-key").read_text().strip()
        assert dev_key_line(third.stdout)[0] == replacement != narrow_key
        assert key_id(narrow_key) not in dev_keys(tmp_path, env), "the replaced key is revoked"
        assert dev_keys(tmp_path, env) == sorted([key_id(key), key_id(replacement)])

        refused = make_run(tmp_path, env, "--reset")
        assert refused.returncode == 2
        assert "make run still serves this development state (temporal dev server" in (
            refused.stderr
        )
        assert paths.temporal_db.exists()
    finally:
        first.send_signal(signal.SIGTERM)  # what a closed terminal or Ctrl-C does
        first.wait(timeout=120)
    assert first.returncode == 0, log.read_text()
    assert not running(paths)
    reset = make_run(tmp_path, env, "--reset")
    assert reset.returncode == 0, reset.stderr
    assert not paths.root.exists()
