"""Which world the simulator starts: `--world`, else `COLONY_WORLD`, else the emulated one; a
world that does not exist is refused before anything starts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sim.__main__ import config_from_args, parse_args
from sim.real.world import RealWorld
from sim.world import EMULATED, REAL, SimWorld, WorldConfig, make_world, world_kind


@pytest.mark.parametrize(
    ("argv", "environ", "world"),
    [
        pytest.param([], {}, EMULATED, id="default"),
        pytest.param([], {"COLONY_WORLD": "real"}, REAL, id="env"),
        pytest.param([], {"COLONY_WORLD": " Real "}, REAL, id="env-spelled-loosely"),
        pytest.param(["--world", "emulated"], {"COLONY_WORLD": "real"}, EMULATED, id="flag-wins"),
    ],
)
def test_the_world_comes_from_the_flag_then_the_environment(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], environ: dict[str, str], world: str
) -> None:
    monkeypatch.delenv("COLONY_WORLD", raising=False)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    assert config_from_args(parse_args(argv)).world == world


def test_make_world_builds_the_one_named() -> None:
    assert isinstance(make_world(WorldConfig(world=EMULATED)), SimWorld)
    assert isinstance(make_world(WorldConfig(world=REAL)), RealWorld)
    with pytest.raises(ValueError, match="the real world is not kept across starts"):
        make_world(WorldConfig(world=REAL, persist=True))


def test_an_unknown_world_is_refused_with_exit_2() -> None:
    with pytest.raises(ValueError, match="COLONY_WORLD: 'virtual' is not one of emulated, real"):
        world_kind("virtual")
    done = subprocess.run(
        [sys.executable, "-m", "sim"],
        env={"COLONY_WORLD": "virtual", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "sim: COLONY_WORLD: 'virtual' is not one of emulated, real"
