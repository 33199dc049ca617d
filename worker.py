"""Colony's worker: the one place that wires clients, workflows and activities together.

`python worker.py` (started by `make run`, or in a container) connects to Temporal with Temporal's
environment configuration (default 127.0.0.1:7233), builds the management cluster's `ApiClient`
from `COLONY_MANAGEMENT_KUBECONFIG` and the host provider's `httpx.AsyncClient` from
`COLONY_HOST_PROVIDER_URL`/`_API_KEY` (see `infra.config`), and runs every workflow and
activity on `COLONY_TASK_QUEUE` until SIGINT or SIGTERM, when it drains gracefully.

Tracing (`COLONY_TRACE_EXPORT=otlp|console`, `infra.tracing`): every workflow, update and
activity becomes an OpenTelemetry span (Temporal's `TracingInterceptor`), continuing the trace of
the client that started it, and so does each Kubernetes and host-provider call of an activity.

Metrics (`COLONY_METRICS_PORT`, `infra.metrics`): Colony's own and the Temporal runtime's
worker metrics on one Prometheus endpoint (the in-process watcher's too; a separate `watcher.py`
serves its own on `COLONY_WATCHER_METRICS_PORT`).

Watcher (`COLONY_WATCHER_IN_WORKER=1`): the `watching` package runs in this process too, elected on
its Lease like a separate `watcher.py`, so a small deployment needs one process kind only.

Search attributes: `ensure_search_attributes` registers every key of `workflows.search_attributes`
where the server allows it (a dev server does). Elsewhere (a self-hosted or cloud namespace), once:
`temporal operator search-attribute create --namespace default --name ColonyKind --type Keyword`
and the same for each key (`python worker.py --print-search-attribute-commands` prints them all).

Tests build the same worker in-process with `build_worker(...)`, passing their own clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import pkgutil
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client as kube_client
from opentelemetry.sdk.trace import TracerProvider
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import SearchAttributeIndexedValueType, WorkflowIDConflictPolicy
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Interceptor, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

import workflows
from activities.child_cluster.clients import ChildClients
from activities.child_cluster.marked import MarkedChildObjectActivities
from activities.child_cluster.namespaces import NamespaceActivities
from activities.child_cluster.nodes import NodeActivities
from activities.child_cluster.routes import RouteActivities
from activities.declarations import implementations
from activities.errors import ActivityErrorCounter
from activities.heartbeat import HEARTBEAT_THROTTLE
from activities.host_provider import HostProviderActivities
from activities.management.classes import WorkspaceClassActivities
from activities.management.cluster_deployments import ClusterDeploymentActivities
from activities.management.machines import MachineActivities
from activities.management.marked import MarkedObjectActivities
from activities.management.service_sets import ServiceSetActivities
from activities.quotas import QuotaActivities
from activities.temporal import TemporalActivities
from catalog.workspaces import load_workspace_catalog
from infra import metrics, tracing
from infra.compiled import compile_once
from infra.config import ColonySettings, SettingsError
from infra.crds import ensure_crds
from infra.kube import api_client_from_file, close_client
from infra.kubeapi import KubeApi
from infra.process import configure_logging, reach_temporal, run_service
from infra.sealing import SealingSettings, Unsealer, load_private_key
from models.quota import DEFAULT_LIMITS, QuotaLimits
from models.workspace_api import CATALOG_WORKFLOW_ID, CatalogInput, PublishWorkspaceClassRequest
from watching.service import Watcher, WatcherConfig
from watching.signals import TemporalSignals
from workflows import metrics as workflow_metrics
from workflows.catalog import CATALOG
from workflows.search_attributes import ALL as SEARCH_ATTRIBUTES

log = logging.getLogger("colony.worker")

ENTITY_WORKFLOW_MODULE = "workflow"
"""Each entity package's workflow module (`workflows/<entity>/workflow.py`); the package itself is
the entity's contract."""


def entity_packages() -> list[str]:
    """The entity packages of `workflows/` (every package but the kit), by name."""
    return sorted(
        f"{workflows.__name__}.{found.name}"
        for found in pkgutil.iter_modules(workflows.__path__)
        if found.ispkg and found.name != "kit"
    )


def entity_workflows() -> tuple[type, ...]:
    """The workflow classes the worker runs: those of each entity's workflow module, found where
    they are, so an entity is added without a line here."""
    found: list[type] = []
    for package in entity_packages():
        module = importlib.import_module(f"{package}.{ENTITY_WORKFLOW_MODULE}")
        found += [
            value
            for value in vars(module).values()
            if isinstance(value, type)
            and value.__module__ == module.__name__
            and getattr(value, "__temporal_workflow_definition", None) is not None
        ]
    return tuple(found)


def workflow_helper_modules() -> tuple[str, ...]:
    """Every module of `workflows/` but the entities' workflow modules and the entity packages
    (a package passed through would take its workflow module with it)."""
    return tuple(
        sorted(
            found.name
            for found in pkgutil.walk_packages(workflows.__path__, f"{workflows.__name__}.")
            if not found.ispkg and not found.name.endswith(f".{ENTITY_WORKFLOW_MODULE}")
        )
    )


WORKFLOWS: Sequence[type] = entity_workflows()

WORKFLOW_HELPER_MODULES = workflow_helper_modules()
"""The workflows' own helper modules (deterministic, no state of their own at module level),
passed through the sandbox like the models: the sandbox imports again, for every workflow it
runs, each module that is not passed through, and each cached workflow keeps its copies. Only the
modules that define a workflow class (and the entity packages, their contracts) are imported per
workflow, so the sandbox still checks their code (`tests/test_worker_sandbox.py` checks that no
other module defines a workflow). Measured with 300 running workspaces (`python -m bench.footprint`, the same run): the worker grew 83 MB instead of 124 MB
and spent 56 ms of CPU per deployment instead of 68 ms."""

WORKFLOW_PACKAGE = workflows.__name__
"""Compiled once per process (`infra.compiled`): the sandbox imports each workflow module again
for every workflow run, and compiling it each time (where no bytecode is written) took a third of
creating a workspace's workflow instance."""

GRACEFUL_SHUTDOWN = timedelta(seconds=10)
"""Running activities get this long to finish on SIGTERM; then they are cancelled, and the waits
among them (which heartbeat) are retried on another worker from where they were."""


def tracing_interceptor(
    export: str = "", provider: TracerProvider | None = None
) -> TracingInterceptor | None:
    """Temporal's tracing interceptor for this process: on `provider` when given (tests), else as
    `export` configures it ("otlp", "console"); None without tracing."""
    if provider is not None:
        tracing.install(provider)
    elif export:
        try:
            tracing.configure("colony-worker", export)
        except ValueError as exc:
            raise SettingsError(str(exc)) from exc
    return tracing.interceptor()


def temporal_runtime(metrics_port: int | None) -> tuple[Runtime | None, str | None]:
    """A Temporal runtime whose worker metrics are served in Prometheus format on a free loopback
    port (folded into Colony's endpoint by `infra.metrics.serve`), and that endpoint's URL;
    (None, None) without metrics."""
    if metrics_port is None:
        return None, None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    runtime = Runtime(
        telemetry=TelemetryConfig(
            metrics=PrometheusConfig(
                bind_address=f"127.0.0.1:{port}",
                counters_total_suffix=True,
                durations_as_seconds=True,
                histogram_bucket_overrides=workflow_metrics.HISTOGRAM_BUCKETS,
            )
        )
    )
    return runtime, f"http://127.0.0.1:{port}/metrics"


def load_unsealer(settings: SealingSettings) -> Unsealer | None:
    """The worker's sealing key, when it has one: without it, workspaces with secret values fail
    with a clear message (`write_values_secret`)."""
    path = settings.private_key_file
    if not path.exists():
        log.warning("no sealing key at %s: workspaces with secret values cannot be installed", path)
        return None
    return Unsealer(load_private_key(path))


def catalog_seed() -> CatalogInput:
    """Colony's shipped workspace classes (`catalog/`), each with the objects it needs."""
    catalog = load_workspace_catalog()
    seed = []
    for workspace_class in catalog.classes:
        names = [workspace_class.service_template.name]
        names += [p.service_template.name for p in workspace_class.prerequisites]
        objects = [catalog.helm_repository]
        objects += [t.to_object() for n in names if (t := catalog.service_template(n)) is not None]
        seed.append(PublishWorkspaceClassRequest(spec=workspace_class, objects=objects))
    return CatalogInput(seed=seed)


async def ensure_catalog(temporal: Client, task_queue: str) -> None:
    """Start the catalog workflow (publishing the shipped classes that are absent) unless it runs.

    One that runs on another task queue (Colony redeployed with another `COLONY_TASK_QUEUE`) would
    wait forever for a worker: it is ended and started again on ours. Nothing is lost: the classes
    live on the management cluster, the workflow only writes and lists them.
    """
    handle = temporal.get_workflow_handle(CATALOG_WORKFLOW_ID)
    try:
        described = await handle.describe()
    except RPCError as error:
        if error.status != RPCStatusCode.NOT_FOUND:
            raise
    else:
        if (
            described.status == WorkflowExecutionStatus.RUNNING
            and described.task_queue != task_queue
        ):
            log.info("catalog workflow moves from task queue %s", described.task_queue)
            with contextlib.suppress(RPCError):  # it may have ended meanwhile
                await handle.terminate(reason=f"the catalog moves to task queue {task_queue}")
    await temporal.start_workflow(
        CATALOG.workflow_type,
        catalog_seed(),
        id=CATALOG_WORKFLOW_ID,
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        static_summary="Colony's workspace class catalog",
    )


def host_provider_client(url: str, api_key: str) -> httpx.AsyncClient:
    """The host provider's client; the key sits in its default headers and nowhere else."""
    return httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {api_key}"})


def activity_callables(
    management_api: kube_client.ApiClient,
    host_provider: httpx.AsyncClient,
    temporal: Client | None = None,
    task_queue: str = "",
    unsealer: Unsealer | None = None,
    quota_defaults: QuotaLimits = DEFAULT_LIMITS,
) -> tuple[list[Callable[..., Any]], ChildClients]:
    """Every activity, bound to its clients (and the child-cluster client cache, to close on exit).

    One implementation per declaration (`activities.declarations`; checked by
    `tests/test_activity_declarations.py`), grouped by the system it talks to."""
    clients = ChildClients()
    # Each provider's activities are its methods made with `implements`: found, not listed.
    activities = implementations(
        ClusterDeploymentActivities(management_api),
        MachineActivities(management_api),
        WorkspaceClassActivities(management_api),
        ServiceSetActivities(management_api, unsealer),
        MarkedObjectActivities(management_api),
        NodeActivities(management_api, clients),
        NamespaceActivities(management_api, clients),
        RouteActivities(management_api, clients),
        MarkedChildObjectActivities(management_api, clients),
        HostProviderActivities(host_provider),
    )
    if temporal is not None:
        activities += implementations(
            TemporalActivities(temporal, task_queue),
            QuotaActivities(temporal, task_queue, host_provider, quota_defaults),
        )
    return activities, clients


@contextlib.asynccontextmanager
async def build_worker(
    temporal: Client,
    task_queue: str,
    management_api: kube_client.ApiClient,
    host_provider: httpx.AsyncClient,
    unsealer: Unsealer | None = None,
    *,
    interceptors: Sequence[Interceptor] = (),
    quota_defaults: QuotaLimits = DEFAULT_LIMITS,
    workflows: Sequence[type] = WORKFLOWS,
) -> AsyncIterator[Worker]:
    """A `Worker` with every workflow and activity; closes the child clients it created on exit.

    Activity errors are always counted (`activities.errors.ActivityErrorCounter`); `interceptors` adds others (the
    tracing interceptor of a client comes along with the client by itself). `workflows` replaces
    the workflow classes (a test's worker with a deliberately broken one)."""
    activities, child = activity_callables(
        management_api, host_provider, temporal, task_queue, unsealer, quota_defaults
    )
    compile_once(WORKFLOW_PACKAGE)
    worker = Worker(
        temporal,
        task_queue=task_queue,
        workflows=list(workflows),
        activities=activities,
        graceful_shutdown_timeout=GRACEFUL_SHUTDOWN,
        # Heartbeats reach the server at least every 2 s (not batched for 80% of the heartbeat
        # timeout), so a workflow's cancel reaches a running wait within seconds.
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        default_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        interceptors=[ActivityErrorCounter(), *interceptors],
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules(
                *WORKFLOW_HELPER_MODULES
            )
        ),
    )
    try:
        yield worker
    finally:
        child.close()


SEARCH_ATTRIBUTE_ATTEMPTS = 6
"""Adding the search attributes is asked again after a transient answer, pausing 1, 2, 4, 8, 10 s:
a dev server busy starting (or a loaded machine) cancels slow calls, and a worker that went on
without them would fail every workflow that sets them."""
_TRANSIENT_STATUSES = {
    RPCStatusCode.CANCELLED,
    RPCStatusCode.DEADLINE_EXCEEDED,
    RPCStatusCode.UNAVAILABLE,
    RPCStatusCode.RESOURCE_EXHAUSTED,
}


async def ensure_search_attributes(
    temporal: Client, namespace: str, *, first_pause: float = 1.0
) -> None:
    """Register Colony's search attributes when the server lets us (a dev server does); a server
    that has them, or refuses an operator call, is left as it is; a transient answer is asked
    again (`SEARCH_ATTRIBUTE_ATTEMPTS`)."""
    request = AddSearchAttributesRequest(
        namespace=namespace,
        search_attributes={
            key.name: IndexedValueType.ValueType(int(key.indexed_value_type))
            for key in SEARCH_ATTRIBUTES
        },
    )
    pause = first_pause
    for attempt in range(1, SEARCH_ATTRIBUTE_ATTEMPTS + 1):
        try:
            await temporal.operator_service.add_search_attributes(
                request, timeout=timedelta(seconds=30)
            )
            return
        except RPCError as exc:
            if exc.status in _TRANSIENT_STATUSES and attempt < SEARCH_ATTRIBUTE_ATTEMPTS:
                log.info("adding search attributes: %s; asking again in %.0f s", exc.message, pause)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 10.0)
                continue
            log.debug("search attributes not added (%s): %s", exc.status.name, exc.message)
            return


def search_attribute_commands(namespace: str) -> list[str]:
    """The `temporal` commands that register Colony's search attributes on a server where the
    worker may not (a self-hosted cluster's operator, Temporal Cloud via tcld/the UI)."""
    return [
        f"temporal operator search-attribute create --namespace {namespace} "
        f"--name {key.name} --type {_TYPE_NAMES[SearchAttributeIndexedValueType(key.indexed_value_type)]}"
        for key in SEARCH_ATTRIBUTES
    ]


_TYPE_NAMES = {
    SearchAttributeIndexedValueType.KEYWORD: "Keyword",
    SearchAttributeIndexedValueType.TEXT: "Text",
    SearchAttributeIndexedValueType.INT: "Int",
    SearchAttributeIndexedValueType.DOUBLE: "Double",
    SearchAttributeIndexedValueType.BOOL: "Bool",
    SearchAttributeIndexedValueType.DATETIME: "Datetime",
    SearchAttributeIndexedValueType.KEYWORD_LIST: "KeywordList",
}
"""The `--type` names of `temporal operator search-attribute create`."""


async def run(settings: ColonySettings) -> None:
    """Run the worker (and the watcher, when asked) until SIGINT/SIGTERM."""
    kubeconfig = settings.require_management_kubeconfig()
    url, api_key = settings.require_host_provider()
    interceptor = tracing_interceptor(settings.trace_export)
    runtime, temporal_metrics = temporal_runtime(settings.metrics_port)
    temporal = await reach_temporal(
        settings.temporal_address,
        lambda: Client.connect(
            **settings.temporal_connect,
            data_converter=pydantic_data_converter,
            interceptors=[interceptor] if interceptor else [],
            runtime=runtime,
        ),
    )
    if settings.metrics_port is not None:
        port = metrics.serve(settings.metrics_port, temporal_metrics_url=temporal_metrics)
        log.info("metrics on :%d/metrics", port)
    await ensure_search_attributes(temporal, settings.namespace)
    management_api = api_client_from_file(kubeconfig)
    created = await ensure_crds(management_api)
    if created:
        log.info("created CRDs: %s", ", ".join(created))
    unsealer = load_unsealer(SealingSettings.from_env())
    watching: asyncio.Task[None] | None = None
    if settings.watcher_in_worker:
        watching = asyncio.create_task(_watch(settings, kubeconfig, temporal))
        watching.add_done_callback(_report_watcher_end)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with host_provider_client(url, api_key) as host_provider:
        try:
            async with (
                build_worker(
                    temporal,
                    settings.task_queue,
                    management_api,
                    host_provider,
                    unsealer,
                    quota_defaults=settings.quota_defaults,
                ) as worker,
                worker,
            ):
                await ensure_catalog(temporal, settings.task_queue)
                log.info(
                    "worker on task queue %r (Temporal %s, namespace %s); management cluster from %s; "
                    "host provider %s",
                    settings.task_queue,
                    settings.temporal_address,
                    settings.namespace,
                    kubeconfig,
                    url,
                )
                await stop.wait()
                log.info("stopping: waiting up to %s for running activities", GRACEFUL_SHUTDOWN)
                if watching is not None:
                    watching.cancel()
                    await asyncio.wait({watching})
        finally:
            close_client(management_api)
            tracing.shutdown()
    log.info("worker stopped")


def _report_watcher_end(task: asyncio.Task[None]) -> None:
    # The watcher only ends when cancelled; anything else is a bug to see in the log (the worker
    # goes on: the workflows' fallback keeps them correct without it).
    if not task.cancelled() and task.exception() is not None:
        log.error("the in-process watcher stopped", exc_info=task.exception())


async def _watch(settings: ColonySettings, kubeconfig: Path, temporal: Client) -> None:
    """The watcher, in this process (`COLONY_WATCHER_IN_WORKER=1`)."""
    management = KubeApi.from_kubeconfig(kubeconfig)
    try:
        await Watcher(
            management, TemporalSignals(temporal), WatcherConfig.from_settings(settings)
        ).run()
    finally:
        await management.aclose()


def main() -> int:
    configure_logging()
    if sys.argv[1:] == ["--print-search-attribute-commands"]:
        namespace = os.environ.get("TEMPORAL_NAMESPACE", "default")
        print("\n".join(search_attribute_commands(namespace)))
        return 0
    return run_service(run, log)


if __name__ == "__main__":
    sys.exit(main())
