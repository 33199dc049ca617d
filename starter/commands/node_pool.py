"""`colonyctl node-pool create|scale|delete`: operations on one pool of a ready cluster.

Imports beyond Typer happen inside each command (see `starter/commands/__init__.py`).
"""

from __future__ import annotations

from typing import Annotated

import typer

from starter.commands import Group
from starter.options import ClusterArgument, Submission, WaitForCapacityOption, submits

app = typer.Typer(help="Add, scale and delete node pools.", no_args_is_help=True)
GROUP = Group("node-pool", rank=20, operations=True)

PoolArgument = Annotated[str, typer.Argument(help="Pool name.", show_default=False)]


@app.command("create")
@submits
def create(
    cluster: ClusterArgument,
    name: Annotated[str, typer.Option("--name", help="Pool name.", show_default=False)],
    count: Annotated[int, typer.Option("--count", help="Nodes, 1 to 100.", show_default=False)],
    sku: Annotated[
        str | None,
        typer.Option("--sku", help='JSON: {"gpuModelId": "<id>"} or {"cpuSku": "<sku>"}.'),
    ] = None,
    gpu_model_id: Annotated[str | None, typer.Option("--gpu-model-id")] = None,
    cpu_sku: Annotated[str | None, typer.Option("--cpu-sku")] = None,
    label: Annotated[
        list[str] | None, typer.Option("--label", help="key=value, repeatable.")
    ] = None,
    taint: Annotated[
        list[str] | None, typer.Option("--taint", help="key[=value]:Effect, repeatable.")
    ] = None,
    drain_parallelism: Annotated[
        int | None,
        typer.Option(
            "--drain-parallelism",
            help="Nodes a scale-down drains at once, 1 to 20 (default: the cluster's, 2).",
            show_default=False,
        ),
    ] = None,
    wait_for_capacity: WaitForCapacityOption = False,
    *,
    submission: Submission,
) -> None:
    """Add a node pool to a ready cluster."""
    from clients.parsing import parse_labels, parse_sku, parse_taints, validated
    from models.node_pool import NodePoolSpec
    from models.operations import AddNodePoolRequest
    from starter.submit import submit

    pool = {
        "name": name,
        "count": count,
        "sku": parse_sku(sku, gpu_model_id, cpu_sku),
        "labels": parse_labels(label or []),
        "taints": parse_taints(taint or []),
    }
    if drain_parallelism is not None:
        pool["drainParallelism"] = drain_parallelism
    # The pool is validated on its own so that fields are named as the flags are (`sku`, not
    # `pool.sku`); the request around it holds nothing else from the user but a flag.
    request = AddNodePoolRequest(
        pool=validated(NodePoolSpec, pool), wait_for_capacity=wait_for_capacity
    )
    submit(cluster, request, submission)


@app.command("scale")
@submits
def scale(
    cluster: ClusterArgument,
    pool: PoolArgument,
    count: Annotated[int, typer.Option("--count", help="Nodes, 1 to 100.", show_default=False)],
    force: Annotated[
        bool, typer.Option(help="Remove nodes even when their drain misses the deadline.")
    ] = False,
    wait_for_capacity: WaitForCapacityOption = False,
    *,
    submission: Submission,
) -> None:
    """Set a pool's count; scaling down drains the nodes it removes."""
    from clients.parsing import validated
    from models.operations import ScaleNodePoolRequest
    from starter.submit import submit

    request = validated(
        ScaleNodePoolRequest,
        {"pool": pool, "count": count, "force": force, "waitForCapacity": wait_for_capacity},
    )
    submit(cluster, request, submission)


@app.command("delete")
@submits
def delete(
    cluster: ClusterArgument,
    pool: PoolArgument,
    force: Annotated[
        bool, typer.Option(help="Remove nodes even when a drain misses the deadline.")
    ] = False,
    *,
    submission: Submission,
) -> None:
    """Drain and remove every node of a pool, then the pool."""
    from clients.parsing import validated
    from models.operations import DeleteNodePoolRequest
    from starter.submit import submit

    request = validated(DeleteNodePoolRequest, {"pool": pool, "force": force})
    submit(cluster, request, submission)
