"""`colonyctl colony apply|get|list|delete`: groups of clusters (exalsius Colony manifests or
Colony's own form), run by `ColonyWorkflow`, through `starter.backend.colonies()`: Temporal
directly, or the HTTP API in remote mode.

Imports beyond Typer happen inside each command (see `starter/commands/__init__.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from starter.commands import Group
from starter.options import OrganizationFilterOption, OutputFormat, OutputOption, RequestIdOption

if TYPE_CHECKING:
    from models.manifests import ColonySpec

app = typer.Typer(help="Groups of clusters (Colony manifests).", no_args_is_help=True)
GROUP = Group("colony", rank=50, operations=True)

ColonyArgument = Annotated[str, typer.Argument(help="Colony name.", show_default=False)]


@app.command("apply")
def apply(
    file: Annotated[
        Path, typer.Option("--filename", "-f", help="A Colony manifest (- for stdin).")
    ],
    request_id: RequestIdOption = None,
) -> None:
    """Create the colony, or bring it to a changed manifest (clusters added and removed)."""
    from clients.errors import InvalidRequestError
    from clients.parsing import read_text
    from models.manifests import ColonySpec, ManifestError, parse_manifests

    _, text = read_text(file)
    try:
        manifests = parse_manifests(text, str(file))
    except ManifestError as exc:
        raise InvalidRequestError(str(exc)) from exc
    colonies = [m.request for m in manifests if isinstance(m.request, ColonySpec)]
    if not colonies:
        raise InvalidRequestError(f"file: {file} holds no Colony")
    apply_colonies(colonies, request_id=request_id)


def apply_colonies(colonies: list[ColonySpec], *, request_id: str | None) -> None:
    """Start each colony's workflow or send it the changed manifest (also `colonyctl apply -f`)."""
    from clients.colonies import AppliedColony
    from starter import output
    from starter.backend import colonies as backend
    from starter.session import print_link, run

    through = backend()

    async def go() -> list[AppliedColony]:
        done = []
        for index, spec in enumerate(colonies):
            one_id = (
                f"{request_id}-colony-{index}" if request_id and len(colonies) > 1 else request_id
            )
            done.append(await through.apply(spec, request_id=one_id))
        return done

    for spec, applied in zip(colonies, run(go), strict=True):
        output.write(f"colony/{spec.name} {'created' if applied.created else 'configured'}")
        print_link(through.workflow(spec.name))


@app.command("get")
def get(name: ColonyArgument, fmt: OutputOption = OutputFormat.TABLE) -> None:
    """A colony: phase, clusters and their GPUs. Exit 3 when it does not exist."""
    from starter import output
    from starter.backend import colonies
    from starter.session import show

    through = colonies()
    show(lambda: through.get(name), fmt, output.print_colony)


@app.command("list")
def list_(
    organization: OrganizationFilterOption = None, fmt: OutputOption = OutputFormat.TABLE
) -> None:
    """Every colony, with its organization (in remote mode, the key's organization's)."""
    from starter import output
    from starter.backend import colonies
    from starter.session import show_list

    through = colonies()
    show_list(
        lambda: through.list_all(organization=organization),
        fmt,
        output.print_colonies,
        ("name", "organization", "phase", "workflow_id"),
    )


@app.command("delete")
def delete(name: ColonyArgument, request_id: RequestIdOption = None) -> None:
    """Delete every cluster of the colony (and their workspaces), then the colony."""
    from starter import output
    from starter.backend import colonies
    from starter.session import print_link, run

    through = colonies()
    run(lambda: through.delete(name, request_id=request_id))
    print_link(through.workflow(name))
    output.write(f"colony/{name} deleting")
