"""`colonyctl colony apply|get|list|delete`: groups of clusters (exalsius Colony manifests or
Colony's own form), run by `ColonyWorkflow`, through `starter.backend.colonies()`: Temporal
directly, or the HTTP API in remote mode.

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
    from models.manifests import ColonySpec, ManifestError, parse_manifests
    from starter.commands.apply import read_file
    from starter.errors import InvalidRequestError

    _, text = read_file(file)
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
    from starter import output
    from starter.backend import colonies as backend
    from starter.client import WorkflowRef
    from starter.colony_client import AppliedColony
    from starter.session import print_link, run, settings

    conf = settings()
    through = backend()

    async def go() -> list[tuple[str, AppliedColony, WorkflowRef]]:
        client = await through.connect(conf)
        done = []
        for index, spec in enumerate(colonies):
            one_id = (
                f"{request_id}-colony-{index}" if request_id and len(colonies) > 1 else request_id
            )
            applied = await through.apply_colony(client, conf, spec, request_id=one_id)
            done.append((spec.name, applied, through.colony_workflow(conf, client, spec.name)))
        return done

    for name, applied, workflow in run(go):
        output.write(f"colony/{name} {'created' if applied.created else 'configured'}")
        print_link(workflow)


@app.command("get")
def get(name: ColonyArgument, fmt: OutputOption = OutputFormat.TABLE) -> None:
    """A colony: phase, clusters and their GPUs. Exit 3 when it does not exist."""
    from starter import output
    from starter.backend import colonies
    from starter.session import run, settings

    conf = settings()
    through = colonies()

    async def go() -> ColonyStatus:
        return await through.colony_status(await through.connect(conf), name)

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
    """Every colony, with its organization (in remote mode, the key's organization's)."""
    from starter import output
    from starter.backend import colonies
    from starter.colony_client import ColonySummary
    from starter.session import run, settings

    conf = settings()
    through = colonies()

    async def go() -> list[ColonySummary]:
        return await through.list_colonies(await through.connect(conf), organization=organization)

    found = run(go)
    rows = [
        {
            "name": c.name,
            "organization": c.organization,
            "phase": c.phase,
            "workflowId": c.workflow_id,
        }
        for c in found
    ]
    if not output.emit(rows, fmt):
        output.print_table(
            ("ORGANIZATION", "NAME", "PHASE"),
            [(c.organization or "-", c.name, c.phase) for c in found],
        )


@app.command("delete")
def delete(name: ColonyArgument, request_id: RequestIdOption = None) -> None:
    """Delete every cluster of the colony (and their workspaces), then the colony."""
    from starter import output
    from starter.backend import colonies
    from starter.client import WorkflowRef
    from starter.session import print_link, run, settings

    conf = settings()
    through = colonies()

    async def go() -> WorkflowRef:
        client = await through.connect(conf)
        await through.delete_colony(client, name, request_id=request_id)
        return through.colony_workflow(conf, client, name)

    print_link(run(go))
    output.write(f"colony/{name} deleting")
