"""`colonyctl cluster create|get|list|delete`, and the cluster part of `colonyctl apply -f`.

Imports beyond Typer happen inside each command (see `starter/commands/__init__.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from starter.commands import Group
from starter.commands.purge import purge_command
from starter.options import (
    ClusterArgument,
    OrganizationFilterOption,
    OutputFormat,
    OutputOption,
    Submission,
    WaitForCapacityOption,
    submits,
)

if TYPE_CHECKING:
    from models.cluster import ClusterSpec

app = typer.Typer(help="Create, inspect and delete clusters.", no_args_is_help=True)
GROUP = Group("cluster", rank=10, operations=True)


def build_spec(
    *,
    file: Path | None,
    name: str | None,
    location_id: str | None,
    node_pools: list[str],
    template: str | None,
    credential: str | None,
    deadlines: dict[str, str | None],
    wait_for_capacity: bool,
    tenant_gateway_domain: str | None = None,
) -> ClusterSpec:
    """The create request from `-f` and the flags (flags win), validated strictly."""
    from clients.errors import InvalidRequestError
    from clients.parsing import duration, load_file, parse_pool, validated
    from models.cluster import ClusterSpec

    data: dict[str, Any] = load_file(file) if file else {}
    if name:
        data["name"] = name
    if location_id:
        data["locationId"] = location_id
    if node_pools:
        data["nodePools"] = [*data.get("nodePools", []), *map(parse_pool, node_pools)]
    for key, value in (("template", template), ("credential", credential)):
        if value:
            data[key] = value
    for key, text in deadlines.items():
        if text:
            data[key] = duration(text, key)
    if wait_for_capacity:
        data["waitForCapacity"] = True
    if tenant_gateway_domain:
        data["tenantGatewayDomain"] = tenant_gateway_domain
    for required, flag in (("name", "NAME or --name"), ("locationId", "--location-id")):
        if required not in data:
            raise InvalidRequestError(f"{required}: required ({flag})")
    return validated(ClusterSpec, data)


def create_cluster(spec: ClusterSpec, submission: Submission) -> None:
    """Start the cluster's workflow (once the catalog says it can be served) and report (or
    follow) its creation."""
    from clients.clusters import Started
    from models.operations import Operation
    from starter import output
    from starter.backend import clusters
    from starter.session import print_link, run
    from starter.submit import finish, follow

    colony = clusters()

    async def go() -> tuple[Started, Operation | None]:
        started = await colony.create(spec, request_id=submission.request_id)
        print_link(colony.workflow(spec.name))
        if not submission.wait:
            return started, None
        operation = await follow(colony, spec.name, started.operation_id, submission.timeout)
        return started, operation

    started, operation = run(go)
    if submission.wait:
        finish(operation, started.operation_id, fmt=submission.fmt)
        return
    data = {
        "cluster": spec.name,
        "workflowId": started.workflow_id,
        "operationId": started.operation_id,
        "webUi": colony.workflow(spec.name).link,
    }
    output.started(
        data,
        submission.fmt,
        f"cluster {spec.name} creating (operation {started.operation_id})",
        repeated=started.repeated,
    )


@app.command("create")
@submits
def create(
    name: Annotated[
        str | None, typer.Argument(help="Cluster name (or --name, or in -f).", show_default=False)
    ] = None,
    name_option: Annotated[str | None, typer.Option("--name", help="Cluster name.")] = None,
    location_id: Annotated[
        str | None, typer.Option("--location-id", help="From `colonyctl catalog location list`.")
    ] = None,
    node_pool: Annotated[
        list[str] | None,
        typer.Option(
            "--node-pool",
            help='Repeatable: name=gpu,count=2,gpuModelId=<id> (or cpuSku=<sku>; drainParallelism=<1-20>), or JSON {"name":..,"sku":{..},"count":..}.',
        ),
    ] = None,
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="A cluster spec in YAML or JSON.")
    ] = None,
    template: Annotated[
        str | None, typer.Option(help="k0rdent ClusterTemplate (default: remote-cluster).")
    ] = None,
    credential: Annotated[
        str | None, typer.Option(help="k0rdent Credential (default: remote-cluster's).")
    ] = None,
    ready_deadline: Annotated[
        str | None, typer.Option(help="How long the control plane may take, e.g. 30m.")
    ] = None,
    join_deadline: Annotated[
        str | None, typer.Option(help="How long a new node may take to join, e.g. 15m.")
    ] = None,
    drain_deadline: Annotated[
        str | None, typer.Option(help="How long a node's drain may take, e.g. 1h.")
    ] = None,
    tenant_gateway_domain: Annotated[
        str | None,
        typer.Option(
            "--tenant-gateway-domain",
            help="Attach the cluster to the tenant gateway of this domain: workspaces get "
            "https://<workspace>.<domain> and SSH ports on <domain>.",
        ),
    ] = None,
    wait_for_capacity: WaitForCapacityOption = False,
    *,
    submission: Submission,
) -> None:
    """Create a cluster (and its node pools once the control plane is ready)."""
    spec = build_spec(
        file=file,
        name=name_option or name,
        location_id=location_id,
        node_pools=node_pool or [],
        template=template,
        credential=credential,
        deadlines={
            "readyDeadline": ready_deadline,
            "joinDeadline": join_deadline,
            "drainDeadline": drain_deadline,
        },
        wait_for_capacity=wait_for_capacity,
        tenant_gateway_domain=tenant_gateway_domain,
    )
    create_cluster(spec, submission)


def apply_cluster(spec: ClusterSpec, submission: Submission) -> None:
    """Create the cluster, or bring an existing one's pools to the spec (add and scale)."""
    from clients.clusters import ClusterRequest
    from clients.errors import NotFoundError
    from models.cluster import ClusterStatus
    from models.operations import AddNodePoolRequest, ScaleNodePoolRequest
    from starter import output
    from starter.backend import clusters
    from starter.session import run
    from starter.submit import submit

    async def existing() -> ClusterStatus | None:
        try:
            return await clusters().get(spec.name)
        except NotFoundError:
            return None

    status = run(existing)
    if status is None:
        create_cluster(spec, submission)
        return
    changes: list[ClusterRequest] = []
    for pool in spec.node_pools:
        current = status.pool(pool.name)
        if current is None:
            changes.append(AddNodePoolRequest(pool=pool, wait_for_capacity=spec.wait_for_capacity))
        elif current.count != pool.count:
            changes.append(
                ScaleNodePoolRequest(
                    pool=pool.name, count=pool.count, wait_for_capacity=spec.wait_for_capacity
                )
            )
    if not changes:
        output.write(f"cluster {spec.name} unchanged")
        return
    for index, request in enumerate(changes):
        # One request id per change: a retried apply repeats each of its updates, not the first.
        submit(spec.name, request, submission.one_of(str(index)))


@app.command("get")
def get(
    name: ClusterArgument,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch", "-w", help="After showing it, follow the cluster: show it again on change."
        ),
    ] = False,
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """Show a cluster: phase, node pools, operations. Exit 3 when it does not exist."""
    from starter import output
    from starter.backend import clusters
    from starter.session import show

    colony = clusters()
    if watch:
        from starter.watch import watch_cluster

        watch_cluster(colony, name, fmt)
        return
    show(lambda: colony.get(name), fmt, output.print_cluster)


@app.command("list")
def list_(
    organization: OrganizationFilterOption = None, fmt: OutputOption = OutputFormat.TABLE
) -> None:
    """List clusters, with their organization (from Temporal visibility, or the API)."""
    from starter import output
    from starter.backend import clusters
    from starter.session import show_list

    colony = clusters()
    show_list(
        lambda: colony.list_all(organization=organization),
        fmt,
        output.print_clusters,
        ("name", "organization", "phase", "workflow_id", "started"),
    )


@app.command("delete")
@submits
def delete(name: ClusterArgument, *, submission: Submission) -> None:
    """Delete a cluster: final. Repeating it finishes a delete that could not remove everything."""
    from models.operations import DeleteClusterRequest
    from starter import output
    from starter.submit import submit

    submit(name, DeleteClusterRequest(), submission, gone_ok=True)
    if submission.wait and submission.fmt is OutputFormat.TABLE:
        output.write(f"cluster {name} deleted")


app.command("purge")(purge_command("cluster"))
