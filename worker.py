"""Colony's worker: the one place that wires clients, workflows and activities together.

`python worker.py` (started by `make run`, or in a container) connects to Temporal with Temporal's
environment configuration (default 127.0.0.1:7233), builds the management cluster's `ApiClient`
from `COLONY_MANAGEMENT_KUBECONFIG` and the host provider's `httpx.AsyncClient` from
`COLONY_HOST_PROVIDER_URL`/`_API_KEY` (see `activities.settings`), and runs every workflow and
activity on `COLONY_TASK_QUEUE` until SIGINT or SIGTERM, when it drains gracefully.

Tracing: every workflow, update and activity becomes an OpenTelemetry span (Temporal's
`TracingInterceptor`); `COLONY_TRACE_EXPORT=console` prints them, the default keeps them in-process.

Tests build the same worker in-process with `build_worker(...)`, passing their own clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import timedelta
from typing import Any

import httpx
from kubernetes import client as kube_client
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError
from temporalio.worker import Worker

from activities.child_cluster import ChildClients, ChildClusterActivities
from activities.crds import ensure_crds
from activities.host_provider import HostProviderActivities
from activities.kube import api_client_from_file, close_client
from activities.management import ManagementClusterActivities
from activities.sealing import SealingSettings, Unsealer, load_private_key
from activities.settings import ColonySettings, SettingsError
from activities.temporal import TemporalActivities
from activities.workspaces import WorkspaceActivities
from catalog.workspaces import load_workspace_catalog
from models.workspace_api import CATALOG_WORKFLOW_ID, CatalogInput, PublishWorkspaceClassRequest
from workflows.capacity import CapacityLedgerWorkflow
from workflows.catalog import CatalogWorkflow
from workflows.cluster import ClusterWorkflow
from workflows.prerequisite import PrerequisiteWorkflow
from workflows.search_attributes import ALL as SEARCH_ATTRIBUTES
from workflows.workspace import WorkspaceWorkflow

log = logging.getLogger("colony.worker")

WORKFLOWS: Sequence[type] = (
    ClusterWorkflow,
    WorkspaceWorkflow,
    CapacityLedgerWorkflow,
    PrerequisiteWorkflow,
    CatalogWorkflow,
)

HEARTBEAT_THROTTLE = timedelta(seconds=2)
GRACEFUL_SHUTDOWN = timedelta(seconds=10)
"""Running activities get this long to finish on SIGTERM; then they are cancelled, and the waits
among them (which heartbeat) are retried on another worker from where they were."""


def tracing_interceptor(
    export: str = "", provider: TracerProvider | None = None
) -> TracingInterceptor:
    """Spans for every workflow, update and activity, exported as `export` says ("console" or
    nothing). Span attributes carry ids only, never payloads, so no secret can reach an exporter."""
    if provider is None:
        provider = TracerProvider(resource=Resource.create({"service.name": "colony-worker"}))
        if export == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        elif export:
            raise SettingsError(f"COLONY_TRACE_EXPORT: unknown exporter {export!r} (use 'console')")
    return TracingInterceptor(provider.get_tracer("colony"))


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
    """Start the catalog workflow (publishing the shipped classes that are absent) unless it runs."""
    await temporal.start_workflow(
        CatalogWorkflow.run,
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
) -> tuple[list[Callable[..., Any]], ChildClients]:
    """Every activity, bound to its clients (and the child-cluster client cache, to close on exit)."""
    clients = ChildClients()
    management = ManagementClusterActivities(management_api)
    child = ChildClusterActivities(management_api, clients)
    hosts = HostProviderActivities(host_provider)
    spaces = WorkspaceActivities(management_api, clients, unsealer)
    activities: list[Callable[..., Any]] = [
        management.check_cluster_prerequisites,
        management.create_cluster_deployment,
        management.get_cluster_deployment_status,
        management.await_cluster_deployment,
        management.add_cluster_machines,
        management.remove_cluster_machines,
        management.delete_cluster_deployment,
        child.list_nodes,
        child.await_nodes,
        child.label_node,
        child.cordon_node,
        child.uncordon_node,
        child.drain_node,
        child.delete_node,
        hosts.claim_hosts,
        hosts.release_hosts,
        hosts.list_claimed_hosts,
        hosts.await_free_hosts,
        spaces.get_workspace_class,
        spaces.list_workspace_classes,
        spaces.publish_workspace_class,
        spaces.check_service_template,
        spaces.apply_service_set,
        spaces.await_service_set,
        spaces.delete_service_set,
        spaces.find_service_sets,
        spaces.write_values_secret,
        spaces.delete_values_secret,
        spaces.ensure_namespace,
        spaces.delete_namespace,
        spaces.read_gpu_inventory,
        spaces.find_tenant_gateway,
        spaces.apply_routes,
        spaces.await_routes,
        spaces.delete_routes,
        spaces.recent_events,
    ]
    if temporal is not None:
        workflows_client = TemporalActivities(temporal, task_queue)
        activities += [
            workflows_client.signal_with_start,
            workflows_client.signal_workflow,
            workflows_client.list_workflows,
            workflows_client.await_workflows_closed,
        ]
    return activities, clients


@contextlib.asynccontextmanager
async def build_worker(
    temporal: Client,
    task_queue: str,
    management_api: kube_client.ApiClient,
    host_provider: httpx.AsyncClient,
    unsealer: Unsealer | None = None,
) -> AsyncIterator[Worker]:
    """A `Worker` with every workflow and activity; closes the child clients it created on exit."""
    activities, child = activity_callables(
        management_api, host_provider, temporal, task_queue, unsealer
    )
    worker = Worker(
        temporal,
        task_queue=task_queue,
        workflows=list(WORKFLOWS),
        activities=activities,
        graceful_shutdown_timeout=GRACEFUL_SHUTDOWN,
        # Heartbeats reach the server at least every 2 s (not batched for 80% of the heartbeat
        # timeout), so a workflow's cancel reaches a running wait within seconds.
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        default_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
    )
    try:
        yield worker
    finally:
        child.close()


async def ensure_search_attributes(temporal: Client, namespace: str) -> None:
    """Register Colony's search attributes when the server lets us (a dev server does); a server
    that has them, or refuses an operator call, is left as it is."""
    try:
        await temporal.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=namespace,
                search_attributes={
                    key.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
                    for key in SEARCH_ATTRIBUTES
                },
            )
        )
    except RPCError as exc:
        log.debug("search attributes not added (%s): %s", exc.status.name, exc.message)


async def run(settings: ColonySettings, trace_export: str = "") -> None:
    """Run the worker until SIGINT/SIGTERM."""
    kubeconfig = settings.require_management_kubeconfig()
    url, api_key = settings.require_host_provider()
    temporal = await Client.connect(
        **settings.temporal_connect,
        data_converter=pydantic_data_converter,
        interceptors=[tracing_interceptor(trace_export)],
    )
    await ensure_search_attributes(temporal, settings.namespace)
    management_api = api_client_from_file(kubeconfig)
    created = await ensure_crds(management_api)
    if created:
        log.info("created CRDs: %s", ", ".join(created))
    unsealer = load_unsealer(SealingSettings.from_env())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with host_provider_client(url, api_key) as host_provider:
        try:
            async with (
                build_worker(
                    temporal, settings.task_queue, management_api, host_provider, unsealer
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
        finally:
            close_client(management_api)
    log.info("worker stopped")


def main() -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # One line per host-provider request is noise at INFO (and URLs are all it would show).
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        settings = ColonySettings.from_env()
        asyncio.run(run(settings, trace_export=os.environ.get("COLONY_TRACE_EXPORT", "")))
    except SettingsError as exc:
        log.error("%s", exc)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
