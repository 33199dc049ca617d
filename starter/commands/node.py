"""`colonyctl node list|delete`: the nodes of a cluster.

Imports beyond Typer happen inside each command (see `starter/commands/__init__.py`).
"""

from __future__ import annotations

from typing import Annotated

import typer

from starter.commands import Group
from starter.options import ClusterArgument, OutputFormat, OutputOption, Submission, submits

app = typer.Typer(help="List and delete nodes.", no_args_is_help=True)
GROUP = Group("node", rank=30, operations=True)


@app.command("list")
def list_(cluster: ClusterArgument, fmt: OutputOption = OutputFormat.TABLE) -> None:
    """List a cluster's nodes: registered while the host boots, joined once in the cluster."""
    from starter import output
    from starter.backend import clusters
    from starter.session import run

    colony = clusters()
    rows = output.node_rows(run(lambda: colony.get(cluster)))
    keys = ("name", "pool", "hostId", "address", "state", "kubernetesStatus")
    if not output.emit([dict(zip(keys, row, strict=True)) for row in rows], fmt):
        output.print_table(output.NODE_COLUMNS, rows)


@app.command("delete")
@submits
def delete(
    cluster: ClusterArgument,
    node: Annotated[str, typer.Argument(help="Node name or host id.", show_default=False)],
    drain: Annotated[
        bool,
        typer.Option("--drain/--no-drain", help="Drain first (default); --drain=false also works."),
    ] = True,
    force: Annotated[
        bool, typer.Option(help="Remove it even when the drain misses the deadline.")
    ] = False,
    *,
    submission: Submission,
) -> None:
    """Delete one node (its pool's count drops by one, so it is not replaced)."""
    from clients.parsing import validated
    from models.operations import DeleteNodeRequest
    from starter.submit import submit

    request = validated(DeleteNodeRequest, {"node": node, "drain": drain, "force": force})
    submit(cluster, request, submission)
