"""`colonyctl`'s side of `ClusterWorkflow`: start it, send it updates, read its status, list clusters.

Everything the CLI does to a cluster goes through here, by the workflow's registered names (the
workflow module is not imported: the CLI needs its contract, not its code). Failures become a
`CliError` carrying the exit code the CLI documents.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from pydantic import BaseModel
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.client import (
    WorkflowExecutionStatus as ExecutionStatus,
)
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from activities.settings import ColonySettings
from models.activity_api import DrainProgress, parse_drain_activity_id
from models.cluster import ClusterPhase, ClusterSpec, ClusterStatus, ClusterWorkflowInput
from models.cluster import cluster_workflow_id as workflow_id_of
from models.errors import ErrorType
from models.operations import Operation, OperationAccepted, OperationKind
from workflows.search_attributes import COLONY_CLUSTER, COLONY_PHASE

WORKFLOW_TYPE = "ClusterWorkflow"
STATUS_QUERY = "status"
POLL_SECONDS = 0.5
"""How often `--wait` asks the workflow for its status: cheap (a query), and fast enough to see
readyCount rise node by node."""


class ExitCode(IntEnum):
    """What `colonyctl` exits with; scripts may rely on these."""

    OK = 0
    FAILED = 1
    """The operation failed (or could not be carried out: Temporal unreachable, ...)."""
    USAGE = 2
    """The request was invalid or refused before anything started."""
    NOT_FOUND = 3
    """The cluster, pool or node does not exist."""


class CliError(Exception):
    """An error `colonyctl` prints as one line (`error: <message>`) before exiting with `code`."""

    def __init__(self, message: str, code: ExitCode = ExitCode.FAILED) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def not_found(name: str) -> CliError:
    return CliError(f"cluster: cluster '{name}' not found", ExitCode.NOT_FOUND)


async def connect(settings: ColonySettings) -> Client:
    """A Temporal client with the pydantic data converter, or a `CliError` saying where it looked."""
    try:
        return await Client.connect(
            **settings.temporal_connect, data_converter=pydantic_data_converter
        )
    except RuntimeError as exc:
        raise CliError(
            f"cannot reach Temporal at {settings.temporal_address}: {exc} "
            "(set TEMPORAL_ADDRESS, or start it: make run)"
        ) from exc


@dataclass
class Started:
    """A cluster workflow just started."""

    workflow_id: str
    operation_id: str


async def start_cluster(client: Client, settings: ColonySettings, spec: ClusterSpec) -> Started:
    """Start the cluster's workflow; its creation is its first operation."""
    try:
        await client.start_workflow(
            WORKFLOW_TYPE,
            ClusterWorkflowInput(spec=spec),
            id=spec.workflow_id,
            task_queue=settings.task_queue,
            # A deleted cluster's workflow has completed: its name may be used again.
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(COLONY_CLUSTER, spec.name),
                    SearchAttributePair(COLONY_PHASE, ClusterPhase.CREATING.value),
                ]
            ),
            static_summary=f"cluster {spec.name} in {spec.location_id}",
        )
    except WorkflowAlreadyStartedError as exc:
        raise CliError(
            f"name: cluster '{spec.name}' already exists (names are unique until a deletion completes)",
            ExitCode.USAGE,
        ) from exc
    status = await query_status(client, spec.name)
    create = next(
        (
            op
            for op in [status.current_operation, *status.queued_operations]
            if op is not None and op.kind is OperationKind.CREATE_CLUSTER
        ),
        None,
    )
    return Started(spec.workflow_id, create.id if create else "")


async def _describe_running(
    client: Client, name: str
) -> tuple[WorkflowHandle[Any, Any], WorkflowExecutionDescription]:
    """The handle and description of the cluster's workflow when it runs; not found otherwise (a
    deleted cluster's workflow has completed)."""
    handle = client.get_workflow_handle(workflow_id_of(name))
    try:
        description = await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise not_found(name) from exc
        raise CliError(f"cannot read cluster '{name}': {exc.message}") from exc
    if description.status != ExecutionStatus.RUNNING:
        raise not_found(name)
    return handle, description


async def _running_handle(client: Client, name: str) -> WorkflowHandle[Any, Any]:
    return (await _describe_running(client, name))[0]


def live_drains(
    client: Client, description: WorkflowExecutionDescription
) -> dict[tuple[str, str], DrainProgress]:
    """The running drains' progress, from their heartbeat details among the pending activities."""
    converter = client.data_converter.payload_converter
    live: dict[tuple[str, str], DrainProgress] = {}
    for pending in description.raw_description.pending_activities:
        key = parse_drain_activity_id(pending.activity_id)
        payloads = pending.heartbeat_details.payloads
        if key is None or not payloads:
            continue
        try:
            details = converter.from_payload(payloads[0], DrainProgress)
        except Exception:  # a heartbeat of another shape (another release): show what we know
            continue
        if isinstance(details, DrainProgress):
            live[key] = details
    return live


async def query_status(client: Client, name: str) -> ClusterStatus:
    """The cluster's status, from its workflow's `status` query, with the running drains' live
    progress from their heartbeats."""
    handle, description = await _describe_running(client, name)
    try:
        status: ClusterStatus = await handle.query(STATUS_QUERY, result_type=ClusterStatus)
    except WorkflowQueryFailedError as exc:
        raise CliError(f"cannot read cluster '{name}': {exc}") from exc
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise not_found(name) from exc
        raise CliError(f"cannot read cluster '{name}': {exc.message}") from exc
    if status.phase is ClusterPhase.DELETED:
        raise not_found(name)
    return status.with_live_drains(live_drains(client, description))


def _rejection_code(message: str) -> ExitCode:
    return ExitCode.NOT_FOUND if "does not exist" in message else ExitCode.USAGE


async def send(client: Client, name: str, update: str, request: BaseModel) -> OperationAccepted:
    """Send an operation to the cluster; a validator's refusal is a `CliError` with its reason."""
    handle = await _running_handle(client, name)
    try:
        accepted: OperationAccepted = await handle.execute_update(
            update, request, result_type=OperationAccepted
        )
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        message = cause.message if isinstance(cause, ApplicationError) else str(cause or exc)
        if isinstance(cause, ApplicationError) and cause.type == ErrorType.OPERATION_REJECTED:
            raise CliError(f"{update}: {message}", _rejection_code(message)) from exc
        raise CliError(f"{update}: {message}") from exc
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise not_found(name) from exc
        raise CliError(f"{update}: {exc.message}") from exc
    return accepted


@dataclass
class ClusterSummary:
    """One line of `colonyctl cluster list`."""

    name: str
    phase: str
    workflow_id: str
    started: str


async def list_clusters(client: Client) -> list[ClusterSummary]:
    """Every cluster whose workflow runs, from Temporal visibility (the ColonyCluster attribute)."""
    query = (
        f"WorkflowType = '{WORKFLOW_TYPE}' AND ExecutionStatus = 'Running' "
        f"AND WorkflowId STARTS_WITH 'cluster/'"
    )
    clusters: list[ClusterSummary] = []
    try:
        async for execution in client.list_workflows(query):
            attributes = execution.typed_search_attributes
            name = attributes.get(COLONY_CLUSTER) or execution.id.removeprefix("cluster/")
            clusters.append(
                ClusterSummary(
                    name=name,
                    phase=attributes.get(COLONY_PHASE) or "",
                    workflow_id=execution.id,
                    started=execution.start_time.isoformat(timespec="seconds"),
                )
            )
    except RPCError as exc:
        raise CliError(f"cannot list clusters: {exc.message}") from exc
    return sorted(clusters, key=lambda c: c.name)


async def wait_for_operation(
    client: Client,
    name: str,
    operation_id: str,
    on_status: Callable[[ClusterStatus, Operation | None], None],
    *,
    give_up_after: float | None = None,
) -> Operation | None:
    """Poll the status until the operation has finished; None when the cluster's workflow ended
    (a completed delete). `on_status` sees every status read, for a live display."""
    handle = client.get_workflow_handle(workflow_id_of(name), result_type=ClusterStatus)
    deadline = None if give_up_after is None else time.monotonic() + give_up_after
    while True:
        description = await handle.describe()
        if description.status != ExecutionStatus.RUNNING:
            if description.status == ExecutionStatus.COMPLETED:
                final: ClusterStatus = await handle.result()
                operation = final.operation(operation_id)
                on_status(final, operation)
                return operation
            return None
        try:
            status: ClusterStatus = await handle.query(STATUS_QUERY, result_type=ClusterStatus)
        except RPCError as exc:
            raise CliError(f"cannot read cluster '{name}': {exc.message}") from exc
        operation = status.operation(operation_id)
        on_status(status, operation)
        if operation is not None and operation.state.finished:
            return operation
        if deadline is not None and time.monotonic() > deadline:
            raise CliError(f"{operation_id} did not finish within {give_up_after:.0f}s")
        await asyncio.sleep(POLL_SECONDS)
