"""`colonyctl workspace purge` and `colonyctl cluster purge`: the operator's way to end an entity
whose workflow cannot make progress and remove what it made (`clients.purges`), for any
organization (`--organization`). In local mode through Temporal; in remote mode through the
operator API, with a key that has Operator Purge.

Not a noun of its own (no `GROUP`): `starter.commands.workspace` and `starter.commands.cluster`
add the command under theirs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer

from starter.options import OutputFormat, OutputOption

NameArgument = Annotated[str, typer.Argument(help="Its name.", show_default=False)]
OrganizationOption = Annotated[
    str,
    typer.Option(
        "--organization",
        help="The organization it belongs to (an operator acts for any; left out: the default "
        "mode's, without one).",
        show_default=False,
    ),
]
PurgeTimeoutOption = Annotated[
    float | None,
    typer.Option("--timeout", help="Give up waiting after this many seconds (it goes on)."),
]


def purge_command(entity: str) -> Callable[..., None]:
    """The `purge` command of `entity` (`workspace`, `cluster`)."""

    def purge(
        name: NameArgument,
        organization: OrganizationOption = "",
        timeout: PurgeTimeoutOption = None,
        fmt: OutputOption = OutputFormat.TABLE,
    ) -> None:
        from clients.purges import checked_target
        from models.identity import Entity
        from starter import output
        from starter.backend import purges
        from starter.session import run

        target = checked_target(Entity(entity), organization, name)
        through = purges()
        report = run(lambda: through.purge_and_follow(target, give_up_after=timeout))
        if not output.emit(report, fmt):
            output.write(report.describe())

    purge.__doc__ = (
        f"End a {entity} whose workflow cannot make progress (its workflow task fails on every "
        "attempt: an undecodable input, a worker bug) and remove what it made, found by its "
        f"ownership marks; print what was removed. A {entity} whose workflow answers is deleted "
        "the normal way. Safe to repeat."
    )
    return purge
