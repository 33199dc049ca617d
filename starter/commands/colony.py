"""`colonyctl colony apply|get|list|delete`: groups of clusters (exalsius Colony manifests or
Colony's own form), run by `ColonyWorkflow`.

Imports beyond Typer happen inside each command (see `starter/commands/__init__.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from starter.options import (
    OrganizationFilterOption,
    OutputFormat,
    OutputOption,
    RequestIdOption,
)

if TYPE_CHECKING:
    from models.colony import ColonyStatus
    from models.manifests import ColonySpec

app = typer.Typer(help="Groups of clusters (Colony manifests).", no_args_is_help=True)

ColonyArgument = Annotated[str, typer.Argument(help="Colony name.", show_default=False)]


@app.command("apply")
def apply(
    file: Annotated[
        Path, typer.Option("--filename", "-f", help="A Colony manifest (- for stdin).")
    ],
    request_id: RequestIdOption = None,
) -> None:
    """Create the colony, or bring it to a changed manifest (clusters added and removed)."""
    import sys

    from models.manifests import ColonySpec, ManifestError, parse_manifests
    from starter.errors import InvalidRequestError

    text = sys.stdin.read() if str(file) == "-" else file.read_text()
    try:
        manifests = parse_manifests(text, str(file))
    except ManifestError as exc:
        raise InvalidRequestError(str(exc)) from exc
    colonies = [m.request for m in manifests if isinstance(m.request, ColonySpec)]
    if not colonies:
        raise InvalidRequestError(f"{file}: no Colony in it")
    apply_colonies(colonies, request_id=request_id)


def apply_colonies(colonies: list[ColonySpec], *, request_id: str | None) -> None:
    """Start each colony's workflow or send it the changed manifest (also `colonyctl apply -f`)."""
    from starter import colony_client, output
    from starter.client import connect
    from starter.session import print_link, run, settings

    conf = settings()

    async def go() -> list[tuple[str, str, bool]]:
        temporal = await connect(conf)
        done = []
        for index, spec in enumerate(colonies):
            one_id = (
                f"{request_id}-colony-{index}" if request_id and len(colonies) > 1 else request_id
            )
            workflow_id, started = await colony_client.apply_colony(
                temporal, conf.task_queue, spec, request_id=one_id
            )
            done.append((spec.name, workflow_id, started))
        return done

    for name, workflow_id, started in run(go):
        output.write(f"colony/{name} {'created' if started else 'configured'}")
        print_link(conf.workflow_link(workflow_id))


@app.command("get")
def get(name: ColonyArgument, fmt: OutputOption = OutputFormat.TABLE) -> None:
    """A colony: phase, clusters and their GPUs."""
    from starter import colony_client, output
    from starter.client import connect
    from starter.session import run, settings

    conf = settings()

    async def go() -> ColonyStatus:
        return await colony_client.colony_status(await connect(conf), name)

    status = run(go)
    if output.emit(status, fmt):
        return
    output.write(
        f"colony {status.name}: {status.phase.value}, "
        f"{status.ready_clusters}/{status.total_clusters} clusters ready"
    )
    output.print_table(
        ("CLUSTER", "PHASE", "NODES", "READY", "GPUS", "REASON"),
        [
            (
                c.cluster,
                c.phase,
                c.nodes,
                c.ready_nodes,
                ", ".join(f"{g.total}x {g.model}" for g in c.gpus) or "-",
                c.reason or "-",
            )
            for c in status.clusters
        ],
    )


@app.command("list")
def list_(
    organization: OrganizationFilterOption = None, fmt: OutputOption = OutputFormat.TABLE
) -> None:
    """Every colony, with its organization."""
    from starter import colony_client, output
    from starter.client import connect
    from starter.session import run, settings

    conf = settings()

    async def go() -> list[dict[str, object]]:
        return await colony_client.list_colonies(await connect(conf), organization=organization)

    colonies = run(go)
    if not output.emit(colonies, fmt):
        output.print_table(
            ("ORGANIZATION", "NAME", "PHASE"),
            [(c["organization"] or "-", c["name"], c["phase"]) for c in colonies],
        )


@app.command("delete")
def delete(name: ColonyArgument, request_id: RequestIdOption = None) -> None:
    """Delete every cluster of the colony (and their workspaces), then the colony."""
    from starter import colony_client, output
    from starter.client import connect
    from starter.session import run, settings

    conf = settings()

    async def go() -> None:
        await colony_client.delete_colony(await connect(conf), name, request_id=request_id)

    run(go)
    output.write(f"colony/{name} deleting")
