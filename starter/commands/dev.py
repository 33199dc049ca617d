"""`colonyctl dev reset`: remove `make run`'s development state, as `make reset` does.

The state is Temporal's database and the simulated world, kept together in `.colony/`
(`starter.dev.devstate`); `.venv` is never touched. Refused (exit 2) while a `make run` of that state
still runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from starter.commands import Group

app = typer.Typer(help="make run's development state (.colony/).", no_args_is_help=True)
GROUP = Group("dev", rank=120)


@app.command("reset")
def reset(
    state_dir: Annotated[
        Path, typer.Option(help="The development state's directory (make run's).")
    ] = Path(".colony"),
) -> None:
    """Remove the development state (Temporal's database, the simulated world, keys, logs); the
    next `make run` starts fresh. Keeps .venv."""
    from clients.errors import InvalidRequestError
    from starter.dev.devstate import DevPaths, DevStateError
    from starter.dev.devstate import reset as reset_state

    try:
        removed = reset_state(DevPaths.under(state_dir))
    except DevStateError as exc:
        raise InvalidRequestError(str(exc)) from exc
    if removed:
        typer.echo(f"removed {state_dir}/ (.venv is kept); the next make run starts fresh")
    else:
        typer.echo(f"nothing to reset: {state_dir}/ holds no development state")
