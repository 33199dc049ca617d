"""`colonyctl`: create, size and delete GPU Kubernetes clusters run by Colony's workflows.

Every command parses and validates its input through `models/` first, so a bad request is refused
on one line (`error: <field>: <rule>`) before anything starts. Cluster commands then start, update
or query the cluster's `ClusterWorkflow` (starter/clusters.py); `catalog` reads the host provider's
catalog over HTTP; `kubeconfig` and `token` are the documented exception that reads the cluster's
kubeconfig Secret on the management cluster (starter/credentials.py); `sim up` runs the simulator
as a separate process (the CLI never imports it).

Configuration comes from the environment (see `activities.settings`): TEMPORAL_ADDRESS (default
127.0.0.1:7233), COLONY_TASK_QUEUE, COLONY_MANAGEMENT_KUBECONFIG, COLONY_HOST_PROVIDER_CONFIG or
COLONY_HOST_PROVIDER_URL/_API_KEY, COLONY_WEB_UI.
"""

import asyncio
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
import yaml
from pydantic import BaseModel, ValidationError
from rich.live import Live

from activities.settings import ColonySettings, SettingsError
from models.base import user_input
from models.cluster import DEFAULT_CREDENTIAL, DEFAULT_NAMESPACE, DEFAULT_TEMPLATE, ClusterSpec
from models.node_pool import NodePoolSpec
from models.operations import (
    AddNodePoolRequest,
    DeleteClusterRequest,
    DeleteNodePoolRequest,
    DeleteNodeRequest,
    Operation,
    OperationAccepted,
    OperationState,
    ScaleNodePoolRequest,
)
from starter import catalog as catalog_api
from starter import clusters, credentials, output
from starter.clusters import CliError, ExitCode
from starter.output import OutputFormat

T = TypeVar("T")

EXIT_CODES_HELP = (
    "Exit codes: 0 success; 1 the operation failed (or Temporal/the API could not be reached); "
    "2 invalid or refused request (nothing was started); 3 cluster, node pool or node not found."
)

app = typer.Typer(
    name="colonyctl",
    help=f"Colony: GPU Kubernetes clusters on k0rdent, orchestrated by Temporal.\n\n{EXIT_CODES_HELP}",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
cluster_app = typer.Typer(
    help="Create, inspect and delete clusters.", epilog=EXIT_CODES_HELP, no_args_is_help=True
)
pool_app = typer.Typer(
    help="Add, scale and delete node pools.", epilog=EXIT_CODES_HELP, no_args_is_help=True
)
node_app = typer.Typer(help="List and delete nodes.", epilog=EXIT_CODES_HELP, no_args_is_help=True)
catalog_app = typer.Typer(help="The host provider's catalog (read-only).", no_args_is_help=True)
sim_app = typer.Typer(
    help="The SIMULATED infrastructure (a separate process).", no_args_is_help=True
)
app.add_typer(cluster_app, name="cluster")
app.add_typer(pool_app, name="node-pool")
app.add_typer(node_app, name="node")
app.add_typer(catalog_app, name="catalog")
app.add_typer(sim_app, name="sim")

OutputOption = Annotated[
    OutputFormat, typer.Option("--output", "-o", help="table, json or yaml", case_sensitive=False)
]
WaitOption = Annotated[
    bool, typer.Option("--wait", "-w", help="Follow the operation live until it finishes.")
]
TimeoutOption = Annotated[
    float | None,
    typer.Option("--timeout", help="With --wait: give up waiting after this many seconds."),
]


# --- plumbing ----------------------------------------------------------------------------------


def fail(message: str, code: ExitCode) -> NoReturn:
    output.error_line(message)
    raise typer.Exit(int(code))


def settings() -> ColonySettings:
    try:
        return ColonySettings.from_env()
    except SettingsError as exc:
        fail(str(exc), ExitCode.USAGE)


def run(coro: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run one async step of a command; a `CliError` becomes its line and exit code."""
    try:
        return asyncio.run(coro())
    except CliError as exc:
        fail(exc.message, exc.code)
    except SettingsError as exc:
        fail(str(exc), ExitCode.USAGE)


def validated(model: type[BaseModel], data: dict[str, Any]) -> Any:
    """`model` validated from `data`; a problem exits 2 with `error: <field>: <rule>`."""
    try:
        return user_input(model, data)
    except ValidationError as exc:
        fail(output.validation_message(exc), ExitCode.USAGE)


_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def duration(text: str, field: str) -> timedelta:
    """ "90s", "5m", "1h30m" or plain seconds."""
    if text.isdigit():
        return timedelta(seconds=int(text))
    match = _DURATION.match(text)
    if not text or match is None:
        fail(f"{field}: '{text}' is not a duration (like 90s, 5m or 1h)", ExitCode.USAGE)
    hours, minutes, seconds = (int(group or 0) for group in match.groups())
    return timedelta(hours=hours, minutes=minutes, seconds=seconds)


def parse_pool(text: str) -> dict[str, Any]:
    """A `--node-pool`: JSON (`{"name": ..., "sku": {...}, "count": 2}`) or
    `name=gpu,count=2,gpuModelId=h100-80gb` (or `cpuSku=...`)."""
    text = text.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as exc:
            fail(f"nodePools: not valid JSON: {exc}", ExitCode.USAGE)
        if not isinstance(data, dict):
            fail("nodePools: a node pool must be a JSON object", ExitCode.USAGE)
        return data
    pool: dict[str, Any] = {}
    sku: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            fail(f"nodePools: '{part}' is not key=value", ExitCode.USAGE)
        key = key.strip()
        if key in ("gpuModelId", "gpu-model-id", "gpu"):
            sku["gpuModelId"] = value
        elif key in ("cpuSku", "cpu-sku", "cpu"):
            sku["cpuSku"] = value
        elif key == "count":
            pool["count"] = value
        elif key == "name":
            pool["name"] = value
        else:
            fail(
                f"nodePools: unknown key '{key}' (name, count, gpuModelId, cpuSku)", ExitCode.USAGE
            )
    if sku:
        pool["sku"] = sku
    return pool


def parse_labels(items: Sequence[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            fail(f"labels: '{item}' is not key=value", ExitCode.USAGE)
        labels[key] = value
    return labels


def parse_taints(items: Sequence[str]) -> list[dict[str, str]]:
    """`key=value:Effect` or `key:Effect`, as kubectl taint writes them."""
    taints: list[dict[str, str]] = []
    for item in items:
        head, sep, effect = item.rpartition(":")
        if not sep:
            fail(f"taints: '{item}' is not key[=value]:Effect", ExitCode.USAGE)
        key, _, value = head.partition("=")
        taints.append({"key": key, "value": value, "effect": effect})
    return taints


def load_file(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        fail(f"file: cannot read {path}: {exc.strerror}", ExitCode.USAGE)
    except yaml.YAMLError as exc:
        fail(f"file: {path} is not valid YAML: {' '.join(str(exc).split())}", ExitCode.USAGE)
    if not isinstance(data, dict):
        fail(f"file: {path} must hold a mapping (a cluster spec)", ExitCode.USAGE)
    # Accept a bare spec or a manifest-like {kind, metadata, spec}.
    if isinstance(data.get("spec"), dict):
        spec = dict(data["spec"])
        name = (data.get("metadata") or {}).get("name")
        if name and "name" not in spec:
            spec["name"] = name
        return spec
    return data


async def check_catalog(conf: ColonySettings, spec: ClusterSpec) -> None:
    """Refuse a location or SKU the host provider does not offer (skipped when it is not configured)."""
    if not conf.host_provider_url:
        return
    try:
        ids = await catalog_api.catalog_ids(conf)
    except CliError as exc:
        output.err.print(f"warning: catalog not checked: {exc.message}", style="yellow")
        return
    if spec.location_id not in ids["location"]:
        raise CliError(
            f"locationId: unknown location '{spec.location_id}' (catalog: {', '.join(sorted(ids['location']))})",
            ExitCode.USAGE,
        )
    for index, pool in enumerate(spec.node_pools):
        check_sku(ids, pool, f"nodePools[{index}].sku")


def check_sku(ids: dict[str, set[str]], pool: NodePoolSpec, field: str) -> None:
    if pool.sku.gpu_model_id and pool.sku.gpu_model_id not in ids["gpu-model"]:
        raise CliError(
            f"{field}.gpuModelId: unknown GPU model '{pool.sku.gpu_model_id}' (catalog: {', '.join(sorted(ids['gpu-model']))})",
            ExitCode.USAGE,
        )
    if pool.sku.cpu_sku and pool.sku.cpu_sku not in ids["cpu-sku"]:
        raise CliError(
            f"{field}.cpuSku: unknown CPU SKU '{pool.sku.cpu_sku}' (catalog: {', '.join(sorted(ids['cpu-sku']))})",
            ExitCode.USAGE,
        )


def print_link(conf: ColonySettings, workflow_id: str) -> None:
    output.err.print(f"workflow {workflow_id}: {conf.workflow_link(workflow_id)}", markup=False)


async def follow(
    conf: ColonySettings,
    client: Any,
    cluster: str,
    operation_id: str,
    give_up_after: float | None,
) -> Operation | None:
    """Show the operation live (on stderr) until it finishes; its final state."""
    started = time.monotonic()
    with Live(console=output.err, refresh_per_second=4, transient=False) as live:

        def show(status: Any, operation: Operation | None) -> None:
            live.update(output.live_view(status, operation, time.monotonic() - started))

        try:
            return await clusters.wait_for_operation(
                client, cluster, operation_id, show, give_up_after=give_up_after
            )
        finally:
            live.stop()
            if not output.err.is_terminal:
                # Off a terminal the final view is printed once, at stop, without its line end.
                output.err.line()


def finish(
    operation: Operation | None, operation_id: str, *, gone_ok: bool = False, fmt: OutputFormat
) -> None:
    """Report the outcome of a waited-for operation and exit 1 if it did not succeed."""
    if operation is None:
        if gone_ok:
            return
        fail(
            f"{operation_id}: the cluster's workflow ended before the operation finished",
            ExitCode.FAILED,
        )
    if output.emit(operation, fmt):
        pass
    if operation.state is OperationState.SUCCEEDED:
        if fmt is OutputFormat.TABLE:
            output.out.print(
                f"{operation.id} {operation.kind.value} succeeded ({output.describe(operation) or 'done'})"
            )
        return
    fail(
        f"{operation.id} {operation.kind.value} {operation.state.value}: {operation.reason}",
        ExitCode.FAILED,
    )


def accepted_output(
    conf: ColonySettings, cluster: str, accepted: OperationAccepted, fmt: OutputFormat
) -> None:
    data = {
        "cluster": cluster,
        "workflowId": f"cluster/{cluster}",
        "operationId": accepted.operation_id,
        "kind": accepted.kind.value,
        "position": accepted.position,
        "webUi": conf.workflow_link(f"cluster/{cluster}"),
    }
    if not output.emit(data, fmt):
        output.out.print(
            f"{accepted.kind.value} accepted as {accepted.operation_id} (queue position {accepted.position})"
        )


def submit(
    cluster: str,
    update: str,
    request: BaseModel,
    *,
    wait: bool,
    timeout: float | None,
    fmt: OutputFormat,
    gone_ok: bool = False,
) -> None:
    """Send an operation; with --wait, follow it to the end."""
    conf = settings()

    async def go() -> tuple[OperationAccepted, Operation | None]:
        client = await clusters.connect(conf)
        accepted = await clusters.send(client, cluster, update, request)
        print_link(conf, f"cluster/{cluster}")
        if not wait:
            return accepted, None
        return accepted, await follow(conf, client, cluster, accepted.operation_id, timeout)

    accepted, operation = run(go)
    if not wait:
        accepted_output(conf, cluster, accepted, fmt)
        return
    finish(operation, accepted.operation_id, gone_ok=gone_ok, fmt=fmt)


# --- cluster -----------------------------------------------------------------------------------


@cluster_app.command("create")
def cluster_create(
    name: Annotated[str | None, typer.Argument(help="Cluster name (or --name, or in -f).")] = None,
    name_option: Annotated[str | None, typer.Option("--name", help="Cluster name.")] = None,
    location_id: Annotated[
        str | None, typer.Option("--location-id", help="From `colonyctl catalog location list`.")
    ] = None,
    node_pool: Annotated[
        list[str] | None,
        typer.Option(
            "--node-pool",
            help='Repeatable: name=gpu,count=2,gpuModelId=<id> (or cpuSku=<sku>), or JSON {"name":..,"sku":{..},"count":..}.',
        ),
    ] = None,
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="A cluster spec in YAML or JSON.")
    ] = None,
    template: Annotated[
        str | None, typer.Option(help=f"ClusterTemplate (default {DEFAULT_TEMPLATE}).")
    ] = None,
    credential: Annotated[
        str | None, typer.Option(help=f"Credential (default {DEFAULT_CREDENTIAL}).")
    ] = None,
    ready_deadline: Annotated[
        str | None, typer.Option(help="How long the control plane may take, e.g. 30m.")
    ] = None,
    join_deadline: Annotated[
        str | None, typer.Option(help="How long a new node may take to join, e.g. 15m.")
    ] = None,
    drain_deadline: Annotated[
        str | None, typer.Option(help="How long a drain may take before it fails, e.g. 1h.")
    ] = None,
    wait: WaitOption = False,
    timeout: TimeoutOption = None,
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """Create a cluster (and its node pools once the control plane is ready)."""
    data: dict[str, Any] = load_file(file) if file else {}
    chosen = name_option or name
    if chosen:
        data["name"] = chosen
    if location_id:
        data["locationId"] = location_id
    if node_pool:
        data["nodePools"] = [*data.get("nodePools", []), *(parse_pool(p) for p in node_pool)]
    for key, value in (("template", template), ("credential", credential)):
        if value:
            data[key] = value
    for key, text in (
        ("readyDeadline", ready_deadline),
        ("joinDeadline", join_deadline),
        ("drainDeadline", drain_deadline),
    ):
        if text:
            data[key] = duration(text, key)
    for required in ("name", "locationId"):
        if required not in data:
            fail(
                f"{required}: required (--{'name' if required == 'name' else 'location-id'})",
                ExitCode.USAGE,
            )
    spec: ClusterSpec = validated(ClusterSpec, data)
    conf = settings()

    async def go() -> tuple[clusters.Started, Operation | None]:
        await check_catalog(conf, spec)
        client = await clusters.connect(conf)
        started = await clusters.start_cluster(client, conf, spec)
        print_link(conf, started.workflow_id)
        if not wait:
            return started, None
        return started, await follow(conf, client, spec.name, started.operation_id, timeout)

    started, operation = run(go)
    if wait:
        finish(operation, started.operation_id, fmt=fmt)
        return
    data_out = {
        "cluster": spec.name,
        "workflowId": started.workflow_id,
        "operationId": started.operation_id,
        "webUi": conf.workflow_link(started.workflow_id),
    }
    if not output.emit(data_out, fmt):
        output.out.print(f"cluster {spec.name} creating (operation {started.operation_id})")


@app.command("apply")
def apply(
    file: Annotated[Path, typer.Option("--file", "-f", help="A cluster spec in YAML or JSON.")],
    wait: WaitOption = False,
    timeout: TimeoutOption = None,
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """Create the cluster in FILE, or bring an existing one's pools to it (add and scale)."""
    spec: ClusterSpec = validated(ClusterSpec, load_file(file))
    conf = settings()

    async def existing() -> Any:
        client = await clusters.connect(conf)
        try:
            return await clusters.query_status(client, spec.name)
        except CliError as exc:
            if exc.code is ExitCode.NOT_FOUND:
                return None
            raise

    status = run(existing)
    if status is None:
        cluster_create(
            name=spec.name, name_option=None, location_id=None, node_pool=None, file=file,
            template=None, credential=None, ready_deadline=None, join_deadline=None,
            drain_deadline=None, wait=wait, timeout=timeout, fmt=fmt,
        )  # fmt: skip
        return
    changes: list[tuple[str, BaseModel]] = []
    for pool in spec.node_pools:
        current = status.pool(pool.name)
        if current is None:
            changes.append(("add_node_pool", AddNodePoolRequest(pool=pool)))
        elif current.count != pool.count:
            changes.append(
                ("scale_node_pool", ScaleNodePoolRequest(pool=pool.name, count=pool.count))
            )
    if not changes:
        output.out.print(f"cluster {spec.name} unchanged")
        return
    for update, request in changes:
        submit(spec.name, update, request, wait=wait, timeout=timeout, fmt=fmt)


@cluster_app.command("get")
def cluster_get(
    name: Annotated[str, typer.Argument(help="Cluster name.")],
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """Show a cluster: phase, node pools, operations. Exit 3 when it does not exist."""
    conf = settings()

    async def go() -> Any:
        return await clusters.query_status(await clusters.connect(conf), name)

    status = run(go)
    if not output.emit(status, fmt):
        output.out.print(output.cluster_table(status))


@cluster_app.command("list")
def cluster_list(fmt: OutputOption = OutputFormat.TABLE) -> None:
    """List clusters (from Temporal visibility)."""
    conf = settings()

    async def go() -> list[clusters.ClusterSummary]:
        return await clusters.list_clusters(await clusters.connect(conf))

    found = run(go)
    rows = [
        {"name": c.name, "phase": c.phase, "workflowId": c.workflow_id, "started": c.started}
        for c in found
    ]
    if not output.emit(rows, fmt):
        output.out.print(
            output.table(
                None,
                ["NAME", "PHASE", "STARTED", "WORKFLOW"],
                [(c.name, c.phase, c.started, conf.workflow_link(c.workflow_id)) for c in found],
            )
        )


@cluster_app.command("delete")
def cluster_delete(
    name: Annotated[str, typer.Argument(help="Cluster name.")],
    wait: WaitOption = False,
    timeout: TimeoutOption = None,
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """Delete a cluster: final. Repeating it finishes a delete that could not remove everything."""
    submit(
        name,
        "delete_cluster",
        DeleteClusterRequest(),
        wait=wait,
        timeout=timeout,
        fmt=fmt,
        gone_ok=True,
    )
    if wait and fmt is OutputFormat.TABLE:
        output.out.print(f"cluster {name} deleted")


# --- node pools --------------------------------------------------------------------------------


@pool_app.command("create")
def pool_create(
    cluster: Annotated[str, typer.Argument(help="Cluster name.")],
    name: Annotated[str, typer.Option("--name", help="Pool name.")],
    count: Annotated[int, typer.Option("--count", help="Nodes, 1 to 100.")],
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
    wait: WaitOption = False,
    timeout: TimeoutOption = None,
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """Add a node pool to a ready cluster."""
    sku_data: dict[str, Any] = {}
    if sku:
        try:
            sku_data = json.loads(sku)
        except ValueError as exc:
            fail(f"sku: not valid JSON: {exc}", ExitCode.USAGE)
    if gpu_model_id is not None:
        sku_data["gpuModelId"] = gpu_model_id
    if cpu_sku is not None:
        sku_data["cpuSku"] = cpu_sku
    pool: NodePoolSpec = validated(
        NodePoolSpec,
        {
            "name": name,
            "count": count,
            "sku": sku_data,
            "labels": parse_labels(label or []),
            "taints": parse_taints(taint or []),
        },
    )
    conf = settings()

    async def check() -> None:
        if conf.host_provider_url:
            try:
                ids = await catalog_api.catalog_ids(conf)
            except CliError:
                return
            check_sku(ids, pool, "sku")

    run(check)
    submit(
        cluster, "add_node_pool", AddNodePoolRequest(pool=pool), wait=wait, timeout=timeout, fmt=fmt
    )


@pool_app.command("scale")
def pool_scale(
    cluster: Annotated[str, typer.Argument(help="Cluster name.")],
    pool: Annotated[str, typer.Argument(help="Pool name.")],
    count: Annotated[int, typer.Option("--count", help="Nodes, 1 to 100.")],
    force: Annotated[
        bool, typer.Option(help="Remove nodes even when their drain misses the deadline.")
    ] = False,
    wait: WaitOption = False,
    timeout: TimeoutOption = None,
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """Set a pool's count; scaling down drains the nodes it removes."""
    request = validated(ScaleNodePoolRequest, {"pool": pool, "count": count, "force": force})
    submit(cluster, "scale_node_pool", request, wait=wait, timeout=timeout, fmt=fmt)


@pool_app.command("delete")
def pool_delete(
    cluster: Annotated[str, typer.Argument(help="Cluster name.")],
    pool: Annotated[str, typer.Argument(help="Pool name.")],
    force: Annotated[
        bool, typer.Option(help="Remove nodes even when a drain misses the deadline.")
    ] = False,
    wait: WaitOption = False,
    timeout: TimeoutOption = None,
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """Drain and remove every node of a pool, then the pool."""
    request = validated(DeleteNodePoolRequest, {"pool": pool, "force": force})
    submit(cluster, "delete_node_pool", request, wait=wait, timeout=timeout, fmt=fmt)


# --- nodes -------------------------------------------------------------------------------------


@node_app.command("list")
def node_list(
    cluster: Annotated[str, typer.Argument(help="Cluster name.")],
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """List a cluster's nodes: registered while the host boots, joined once in the cluster."""
    conf = settings()

    async def go() -> Any:
        return await clusters.query_status(await clusters.connect(conf), cluster)

    status = run(go)
    rows = output.node_rows(status)
    data = [
        dict(
            zip(
                ("name", "pool", "hostId", "address", "state", "kubernetesStatus"), row, strict=True
            )
        )
        for row in rows
    ]
    if not output.emit(data, fmt):
        output.out.print(output.table(None, output.NODE_COLUMNS, rows))


@node_app.command("delete")
def node_delete(
    cluster: Annotated[str, typer.Argument(help="Cluster name.")],
    node: Annotated[str, typer.Argument(help="Node name or host id.")],
    drain: Annotated[
        bool,
        typer.Option("--drain/--no-drain", help="Drain first (default); --drain=false also works."),
    ] = True,
    force: Annotated[
        bool, typer.Option(help="Remove it even when the drain misses the deadline.")
    ] = False,
    wait: WaitOption = False,
    timeout: TimeoutOption = None,
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """Delete one node (its pool's count drops by one, so it is not replaced)."""
    request = validated(DeleteNodeRequest, {"node": node, "drain": drain, "force": force})
    submit(cluster, "delete_node", request, wait=wait, timeout=timeout, fmt=fmt)


# --- catalog -----------------------------------------------------------------------------------


def _catalog(kind: str, columns: Sequence[str], fmt: OutputFormat) -> None:
    conf = settings()

    async def go() -> list[dict[str, Any]]:
        return await catalog_api.fetch(conf, kind)

    items = run(go)
    if not output.emit(items, fmt):
        output.out.print(
            output.table(
                None,
                [c.upper() for c in columns],
                [[item.get(c, "") for c in columns] for item in items],
            )
        )


@catalog_app.command("location")
def catalog_location(
    action: Annotated[str, typer.Argument(help="list")] = "list",
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """List locations (data centers)."""
    _catalog("location", ["id", "name", "country"], fmt)


@catalog_app.command("gpu-model")
def catalog_gpu_model(
    action: Annotated[str, typer.Argument(help="list")] = "list",
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """List GPU models (a GPU node is a whole host of one model)."""
    _catalog("gpu-model", ["id", "name", "product", "memoryGib", "gpusPerHost"], fmt)


@catalog_app.command("cpu-sku")
def catalog_cpu_sku(
    action: Annotated[str, typer.Argument(help="list")] = "list",
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """List whole-host CPU SKUs."""
    _catalog("cpu-sku", ["id", "name", "cpuCores", "memory"], fmt)


# --- credentials -------------------------------------------------------------------------------


@app.command("kubeconfig")
def kubeconfig(
    cluster: Annotated[str, typer.Option("--cluster", help="Cluster name.")],
    path: Annotated[Path, typer.Option("--output", help="Where to write the kubeconfig.")],
    namespace: Annotated[str, typer.Option(hidden=True)] = DEFAULT_NAMESPACE,
) -> None:
    """Write a kubeconfig without credentials: kubectl runs `colonyctl token` for a token."""
    conf = settings()

    async def go() -> dict[str, Any]:
        return await asyncio.to_thread(credentials.build_kubeconfig, conf, cluster, namespace)

    credentials.write_kubeconfig(path, run(go))
    output.out.print(
        f"wrote {path} (kubectl runs `colonyctl token --cluster {cluster}` for credentials)"
    )


@app.command("token")
def token(
    cluster: Annotated[str, typer.Option("--cluster", help="Cluster name.")],
    namespace: Annotated[str, typer.Option(hidden=True)] = DEFAULT_NAMESPACE,
) -> None:
    """Print a client.authentication.k8s.io/v1 ExecCredential: a one-hour cluster-admin token."""
    conf = settings()

    async def go() -> dict[str, Any]:
        return await asyncio.to_thread(credentials.exec_credential, conf, cluster, namespace)

    sys.stdout.write(json.dumps(run(go)) + "\n")


# --- simulator ---------------------------------------------------------------------------------


@sim_app.command("up")
def sim_up(
    state_dir: Annotated[
        Path, typer.Option(help="Where the sim writes its kubeconfig and JSON.")
    ] = Path(".colony/sim"),
    instant: Annotated[bool, typer.Option(help="Every simulated step happens at once.")] = False,
    time_scale: Annotated[float, typer.Option(help="Multiplies every simulated delay.")] = 1.0,
) -> None:
    """Run the SIMULATED infrastructure in the foreground (`python -m sim`) until Ctrl-C."""
    argv = [
        sys.executable,
        "-m",
        "sim",
        "--state-dir",
        str(state_dir),
        "--time-scale",
        str(time_scale),
    ]
    if instant:
        argv.append("--instant")
    try:
        code = subprocess.call(argv)
    except KeyboardInterrupt:
        code = 0
    raise typer.Exit(code)


# --- entry point -------------------------------------------------------------------------------

_BOOL_FLAG = re.compile(r"^--(drain|force)=(.*)$")
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """Accept `--drain=false` (the product's spelling) as `--no-drain`, and alike."""
    result: list[str] = []
    for arg in argv:
        match = _BOOL_FLAG.match(arg)
        if match and match.group(2).lower() in _TRUE:
            result.append(f"--{match.group(1)}")
        elif match and match.group(2).lower() in _FALSE:
            result.append(f"--no-{match.group(1)}")
        else:
            result.append(arg)
    return result


def main() -> None:
    """The `colonyctl` entry point."""
    app(args=normalize_argv(sys.argv[1:]), prog_name="colonyctl")


if __name__ == "__main__":
    main()
