"""`colonyctl cluster create|get|list|delete`, and the cluster part of `colonyctl apply -f`.

Imports beyond Typer happen inside each command (see `starter/commands/__init__.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from starter.options import (
    ClusterArgument,
    OrganizationFilterOption,
    OutputFormat,
    OutputOption,
    RequestIdOption,
    TimeoutOption,
    WaitForCapacityOption,
    WaitOption,
)

if TYPE_CHECKING:
    from models.cluster import ClusterSpec

app = typer.Typer(help="Create, inspect and delete clusters.", no_args_is_help=True)


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
    from models.cluster import ClusterSpec
    from starter.errors import InvalidRequestError
    from starter.parsing import duration, load_file, parse_pool, validated

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


def create_cluster(
    spec: ClusterSpec,
    *,
    wait: bool,
    timeout: float | None,
    fmt: OutputFormat,
    request_id: str | None,
) -> None:
    """Check the catalog, start the cluster's workflow and report (or follow) its creation."""
    from models.operations import Operation
    from starter import checks, output
    from starter.backend import clusters
    from starter.client import Started, WorkflowRef
    from starter.session import print_link, run, settings
    from starter.submit import finish, follow

    conf = settings()
    colony = clusters()
    workflow = WorkflowRef("")

    async def go() -> tuple[Started, Operation | None]:
        nonlocal workflow
        if colony.CHECKS_LOCALLY:
            await checks.check_cluster(conf, spec)
        client = await colony.connect(conf)
        started = await colony.start_cluster(client, conf, spec, request_id=request_id)
        workflow = colony.cluster_workflow(conf, client, spec.name)
        print_link(workflow)
        if not wait:
            return started, None
        return started, await follow(colony, client, spec.name, started.operation_id, timeout)

    started, operation = run(go)
    if wait:
        finish(operation, started.operation_id, fmt=fmt)
        return
    data = {
        "cluster": spec.name,
        "workflowId": started.workflow_id,
        "operationId": started.operation_id,
        "webUi": workflow.link,
    }
    if not output.emit(data, fmt):
        again = " (already started by this request id)" if started.repeated else ""
        output.write(f"cluster {spec.name} creating (operation {started.operation_id}){again}")


@app.command("create")
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
    wait: WaitOption = False,
    timeout: TimeoutOption = None,
    request_id: RequestIdOption = None,
    fmt: OutputOption = OutputFormat.TABLE,
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
    create_cluster(spec, wait=wait, timeout=timeout, fmt=fmt, request_id=request_id)


def apply_cluster(
    spec: ClusterSpec,
    *,
    wait: bool,
    timeout: float | None,
    fmt: OutputFormat,
    request_id: str | None,
) -> None:
    """Create the cluster, or bring an existing one's pools to the spec (add and scale)."""
    from pydantic import BaseModel

    from models.cluster import ClusterStatus
    from models.operations import AddNodePoolRequest, ScaleNodePoolRequest
    from starter import checks, output
    from starter.backend import clusters
    from starter.errors import NotFoundError
    from starter.session import run, settings
    from starter.submit import submit

    conf = settings()
    colony = clusters()

    async def existing() -> ClusterStatus | None:
        client = await colony.connect(conf)
        try:
            return await colony.query_status(client, spec.name)
        except NotFoundError:
            return None

    status = run(existing)
    if status is None:
        create_cluster(spec, wait=wait, timeout=timeout, fmt=fmt, request_id=request_id)
        return
    changes: list[tuple[str, BaseModel, checks.Check | None]] = []
    for pool in spec.node_pools:
        current = status.pool(pool.name)
        if current is None:
            add = AddNodePoolRequest(pool=pool, wait_for_capacity=spec.wait_for_capacity)
            changes.append(("add_node_pool", add, checks.new_pool_check(add)))
        elif current.count != pool.count:
            scale = ScaleNodePoolRequest(
                pool=pool.name, count=pool.count, wait_for_capacity=spec.wait_for_capacity
            )
            changes.append(("scale_node_pool", scale, checks.scale_check(scale)))
    if not changes:
        output.write(f"cluster {spec.name} unchanged")
        return
    for index, (update, request, check) in enumerate(changes):
        # One request id per change: a retried apply repeats each of its updates, not the first.
        change_id = f"{request_id}-{index}" if request_id else None
        submit(
            spec.name, update, request, wait=wait, timeout=timeout, fmt=fmt,
            request_id=change_id, check=check,
        )  # fmt: skip


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
    from starter.session import run, settings

    conf = settings()
    colony = clusters()
    if watch:
        from starter.watch import watch_cluster

        watch_cluster(conf, name, fmt)
        return

    async def go() -> Any:
        return await colony.query_status(await colony.connect(conf), name)

    status = run(go)
    if not output.emit(status, fmt):
        output.print_cluster(status)


@app.command("list")
def list_(
    organization: OrganizationFilterOption = None, fmt: OutputOption = OutputFormat.TABLE
) -> None:
    """List clusters, with their organization (from Temporal visibility, or the API)."""
    from starter import output
    from starter.backend import clusters
    from starter.client import ClusterSummary
    from starter.session import run, settings

    conf = settings()
    colony = clusters()

    async def go() -> list[ClusterSummary]:
        return await colony.list_clusters(await colony.connect(conf), organization=organization)

    found = run(go)
    rows = [
        {
            "name": c.name,
            "organization": c.organization,
            "phase": c.phase,
            "workflowId": c.workflow_id,
            "started": c.started,
        }
        for c in found
    ]
    if not output.emit(rows, fmt):
        output.print_table(
            ["ORGANIZATION", "NAME", "PHASE", "STARTED", "WORKFLOW"],
            [
                (
                    c.organization or "-",
                    c.name,
                    c.phase,
                    c.started,
                    c.web_ui or conf.workflow_link(c.workflow_id),
                )
                for c in found
            ],
        )


@app.command("delete")
def delete(
    name: ClusterArgument,
    wait: WaitOption = False,
    timeout: TimeoutOption = None,
    request_id: RequestIdOption = None,
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """Delete a cluster: final. Repeating it finishes a delete that could not remove everything."""
    from models.operations import DeleteClusterRequest
    from starter import output
    from starter.submit import submit

    submit(
        name, "delete_cluster", DeleteClusterRequest(), wait=wait, timeout=timeout, fmt=fmt,
        request_id=request_id, gone_ok=True,
    )  # fmt: skip
    if wait and fmt is OutputFormat.TABLE:
        output.write(f"cluster {name} deleted")
