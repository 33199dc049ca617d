"""`colonyctl sim up`: run the SIMULATED infrastructure (`python -m sim`) as a separate process.

The CLI never imports the simulator: it starts it like any other program.
"""

from __future__ import annotations

import enum
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from starter.commands import Group

app = typer.Typer(help="The SIMULATED infrastructure (a separate process).", no_args_is_help=True)
GROUP = Group("sim", rank=110)


class World(enum.StrEnum):
    """The simulator's worlds (`python -m sim --world`)."""

    emulated = "emulated"
    real = "real"


StateDirOption = Annotated[Path, typer.Option(help="Where the sim writes its kubeconfig and JSON.")]


@app.command("up")
def up(
    state_dir: StateDirOption = Path(".colony/sim"),
    instant: Annotated[bool, typer.Option(help="Every simulated step happens at once.")] = False,
    time_scale: Annotated[float, typer.Option(help="Multiplies every simulated delay.")] = 1.0,
    world: Annotated[
        World | None,
        typer.Option(help="Emulated clusters, or real control planes (default: $COLONY_WORLD)."),
    ] = None,
) -> None:
    """Run the SIMULATED infrastructure in the foreground (`python -m sim`) until Ctrl-C."""
    argv = [
        sys.executable, "-m", "sim", "--state-dir", str(state_dir), "--time-scale", str(time_scale),
    ]  # fmt: skip
    if instant:
        argv.append("--instant")
    if world is not None:
        argv += ["--world", world.value]
    try:
        code = subprocess.call(argv)
    except KeyboardInterrupt:
        code = 0
    raise typer.Exit(code)
