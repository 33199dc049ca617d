"""Colony's side of `ClusterWorkflow`, for every client: connect, start a cluster, read its status,
send it operations (updates) and cancel them, list clusters, follow an operation or a cluster.

`colonyctl` and the HTTP API (`api/`) both call these functions, so the two cannot drift apart;
`starter.remote` mirrors their signatures over HTTP for `colonyctl`'s remote mode. The workflow is
addressed by its registered names (its module is not imported: a client needs the contract, not
the code). A cluster is `(organization, name)`: every function takes `organization` (empty for
the clusters an operator manages through Temporal directly; the API passes its caller's), and the
workflow id is `models.cluster.cluster_workflow_id(name, organization)`. No Typer, no rich, no printing: failures are the typed errors of
`starter.errors`, decided by what Temporal reports, never by matching message text:

- a workflow that does not exist (RPC status NOT_FOUND) or no longer runs -> `NotFoundError`;
- an update refused by its validator: `ApplicationError` of type `NotFound` (or of type
  `OperationRejected` whose first detail is `{"reason": "NotFound"}`) -> `NotFoundError`, of type
  `OperationRejected` -> `ConflictError` (the cluster's state refuses it), of type `InvalidSpec` ->
  `InvalidRequestError`, anything else -> `OperationFailedError`; the message starts with the
  request field the refusal names in its details (`{"field": "pool"}`), as every refusal does,
  else with the update's name;
- a cluster name taken -> `ConflictError`;
- Temporal unreachable or failing -> `UnavailableError`.

Updates are idempotent by update id: each call sends the caller's request id, or a fresh uuid, as
the Temporal update id; the workflow records it on the `Operation` it queues and answers the same
id again with that operation (across continue-as-new too), so a retried command never queues twice.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.client import WorkflowExecutionStatus as ExecutionStatus
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from activities import tracing
from activities.settings import ColonySettings
from models.activity_api import DrainProgress, parse_drain_activity_id
from models.cluster import ClusterPhase, ClusterSpec, ClusterStatus, ClusterWorkflowInput
from models.cluster import cluster_workflow_id as workflow_id_of
from models.errors import REJECTED_FIELD, ErrorType
from models.identity import parse_entity_workflow_id
from models.names import name_problem
from models.operations import (
    CancelOperationRequest,
    Operation,
    OperationAccepted,
    OperationKind,
)
from starter.errors import (
    TEMPORAL_HINT,
    ColonyError,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    OperationFailedError,
    UnavailableError,
    temporal_unreachable,
)
from workflows.search_attributes import (
    COLONY_CLUSTER,
    COLONY_KIND,
    COLONY_ORGANIZATION,
    COLONY_PHASE,
)

WORKFLOW_TYPE = "ClusterWorkflow"
STATUS_QUERY = "status"
CANCEL_OPERATION_UPDATE = "cancel_operation"
REQUEST_ID_MEMO = "requestId"
"""Memo key of the request id a cluster was created with: a create repeated with the same id is
the same create, not a name conflict."""
POLL_SECONDS = 0.5
"""How often `--wait` asks the workflow for its status: cheap (a query), and fast enough to see
readyCount rise node by node."""
WATCH_SECONDS = 1.0
"""How often `cluster get -w` asks; a query costs the workflow's history nothing."""
NOT_FOUND_REASON = "NotFound"
CLUSTER_KIND = "cluster"
"""`ColonyKind` of cluster workflows (the workflow upserts the same value)."""


def new_request_id() -> str:
    """A fresh idempotency key (the update id of one command)."""
    return str(uuid.uuid4())


def not_found(name: str) -> NotFoundError:
    return NotFoundError(f"cluster: cluster '{name}' not found")


def _rpc_error(exc: RPCError, what: str, name: str) -> ColonyError:
    # NOT_FOUND is the only status that says something about the cluster; any other (the server
    # unreachable, overloaded, a deadline) says Temporal could not answer.
    if exc.status == RPCStatusCode.NOT_FOUND:
        return not_found(name)
    return UnavailableError(f"{what}: {exc.message}")


async def connect(settings: ColonySettings, *, hint: str = TEMPORAL_HINT) -> Client:
    """A Temporal client with the pydantic data converter, or an `UnavailableError` saying where
    it looked.

    Args:
        hint: what the reader of the refusal can do (`colonyctl`'s user can set TEMPORAL_ADDRESS;
            the HTTP API's caller cannot, and gets none).
    """
    interceptor = tracing.interceptor()
    try:
        return await Client.connect(
            **settings.temporal_connect,
            data_converter=pydantic_data_converter,
            # With tracing, the command's span continues into the workflows it starts or updates.
            interceptors=[interceptor] if interceptor is not None else [],
        )
    except RuntimeError as exc:
        raise temporal_unreachable(settings.temporal_address, exc, hint=hint) from exc


def cluster_details(spec: ClusterSpec) -> str:
    """The Web UI's static details of a cluster's workflow: what was asked for, in markdown (the
    workflow's current details say where it stands)."""
    lines = [
        f"**Cluster** `{spec.name}` in location `{spec.location_id}`"
        + (f", organization `{spec.organization}`" if spec.organization else ""),
        "",
        f"ClusterDeployment `{spec.deployment_name}` (k0rdent); owns hosts claimed from the host "
        "provider.",
    ]
    if spec.tenant_gateway_domain:
        lines += [
            "",
            f"Tenant gateway `{spec.tenant_gateway_domain}`: workspaces get HTTPS hostnames there.",
        ]
    if spec.node_pools:
        lines += ["", "| pool | SKU | count |", "| --- | --- | --- |"]
        lines += [f"| {pool.name} | {pool.sku} | {pool.count} |" for pool in spec.node_pools]
    return "\n".join(lines)


@dataclass
class Started:
    """A cluster workflow just started (or found started by the same request id)."""

    workflow_id: str
    operation_id: str
    repeated: bool = False
    """True when this request id had started it already: nothing new was started."""


async def start_cluster(
    client: Client, settings: ColonySettings, spec: ClusterSpec, *, request_id: str | None = None
) -> Started:
    """Start the cluster's workflow; its creation is its first operation.

    Raises:
        ConflictError: a cluster of that name exists in the organization (and was not created by
            `request_id`).
    """
    try:
        await client.start_workflow(
            WORKFLOW_TYPE,
            ClusterWorkflowInput(spec=spec),
            id=spec.workflow_id,
            task_queue=settings.task_queue,
            # A deleted cluster's workflow has completed: its name may be used again.
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            memo={REQUEST_ID_MEMO: request_id} if request_id else None,
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(COLONY_KIND, CLUSTER_KIND),
                    SearchAttributePair(COLONY_CLUSTER, spec.name),
                    # At start, not only from the workflow's first task: an organization's list
                    # must see its cluster as soon as the create was answered.
                    SearchAttributePair(COLONY_ORGANIZATION, spec.organization),
                    SearchAttributePair(COLONY_PHASE, ClusterPhase.CREATING.value),
                ]
            ),
            static_summary=f"cluster {spec.name} in {spec.location_id}",
            static_details=cluster_details(spec),
        )
        repeated = False
    except WorkflowAlreadyStartedError as exc:
        if not (request_id and await _started_by(client, spec.workflow_id, request_id)):
            raise ConflictError(
                f"name: cluster '{spec.name}' already exists (names are unique until a deletion completes)"
            ) from exc
        repeated = True
    except RPCError as exc:
        raise _rpc_error(exc, f"cannot start cluster '{spec.name}'", spec.name) from exc
    status = await query_status(client, spec.name, organization=spec.organization)
    create = next(
        (op for op in operations(status) if op.kind is OperationKind.CREATE_CLUSTER), None
    )
    return Started(spec.workflow_id, create.id if create else "", repeated)


async def _started_by(client: Client, workflow_id: str, request_id: str) -> bool:
    """True when the running workflow `workflow_id` was started with `request_id`."""
    try:
        description = await client.get_workflow_handle(workflow_id).describe()
        memo = await description.memo_value(REQUEST_ID_MEMO, None)
    except RPCError:
        return False
    return description.status == ExecutionStatus.RUNNING and memo == request_id


async def _describe_running(
    client: Client, name: str, organization: str
) -> tuple[WorkflowHandle[Any, Any], WorkflowExecutionDescription]:
    """The handle and description of the cluster's workflow when it runs; `NotFoundError`
    otherwise (a deleted cluster's workflow has completed)."""
    handle = client.get_workflow_handle(workflow_id_of(name, organization))
    try:
        description = await handle.describe()
    except RPCError as exc:
        raise _rpc_error(exc, f"cannot read cluster '{name}'", name) from exc
    if description.status != ExecutionStatus.RUNNING:
        raise not_found(name)
    return handle, description


async def _running_handle(client: Client, name: str, organization: str) -> WorkflowHandle[Any, Any]:
    return (await _describe_running(client, name, organization))[0]


def live_drains(
    client: Client, description: WorkflowExecutionDescription
) -> dict[tuple[str, str], DrainProgress]:
    """The running drains' progress, from their heartbeat details among the pending activities
    (the workflow records a drain's counts when it ends, so an hour-long drain costs its history
    nothing; meanwhile they live here, where the Web UI shows them too)."""
    converter = client.data_converter.payload_converter
    live: dict[tuple[str, str], DrainProgress] = {}
    for pending in description.raw_description.pending_activities:
        key = parse_drain_activity_id(pending.activity_id)
        payloads = pending.heartbeat_details.payloads
        if key is None or not payloads:
            continue
        try:
            details = converter.from_payload(payloads[0], DrainProgress)
        except Exception:  # details of another shape (another release): show what we know
            continue
        if isinstance(details, DrainProgress):
            live[key] = details
    return live


async def query_status(client: Client, name: str, *, organization: str = "") -> ClusterStatus:
    """The cluster's status, from its workflow's `status` query, with the running drains' live
    progress merged in from their heartbeats."""
    handle, description = await _describe_running(client, name, organization)
    try:
        status: ClusterStatus = await handle.query(STATUS_QUERY, result_type=ClusterStatus)
    except WorkflowQueryFailedError as exc:
        raise UnavailableError(f"cannot read cluster '{name}': {exc}") from exc
    except RPCError as exc:
        raise _rpc_error(exc, f"cannot read cluster '{name}'", name) from exc
    if status.phase is ClusterPhase.DELETED:
        raise not_found(name)
    return status.with_live_drains(live_drains(client, description))


def rejection_is_not_found(error: ApplicationError) -> bool:
    """True when an update's refusal says that what it names does not exist (by type or details)."""
    if error.type == ErrorType.NOT_FOUND:
        return True
    first = error.details[0] if error.details else None
    return isinstance(first, dict) and first.get("reason") == NOT_FOUND_REASON


def rejected_field(error: ApplicationError) -> str:
    """The request field a refusal names in its details (`models.errors.rejected`); empty when
    none."""
    first = error.details[0] if error.details else None
    field = first.get(REJECTED_FIELD) if isinstance(first, dict) else None
    return field if isinstance(field, str) else ""


def update_error(update: str, exc: WorkflowUpdateFailedError) -> ColonyError:
    """The typed error for an update the workflow refused or failed; its message starts with the
    field the refusal is about when the workflow named one, else with the update's name."""
    cause = exc.cause
    if not isinstance(cause, ApplicationError):
        return OperationFailedError(f"{update}: {cause or exc}")
    message = f"{rejected_field(cause) or update}: {cause.message}"
    if rejection_is_not_found(cause):
        return NotFoundError(message)
    if cause.type == ErrorType.OPERATION_REJECTED:
        return ConflictError(message)
    if cause.type == ErrorType.INVALID_SPEC:
        return InvalidRequestError(message)
    return OperationFailedError(message)


async def _execute_update(
    client: Client,
    name: str,
    update: str,
    request: BaseModel,
    result_type: type[Any],
    request_id: str | None,
    organization: str,
) -> Any:
    handle = await _running_handle(client, name, organization)
    try:
        return await handle.execute_update(
            update, request, id=request_id or new_request_id(), result_type=result_type
        )
    except WorkflowUpdateFailedError as exc:
        raise update_error(update, exc) from exc
    except RPCError as exc:
        raise _rpc_error(exc, update, name) from exc


async def send(
    client: Client,
    name: str,
    update: str,
    request: BaseModel,
    *,
    request_id: str | None = None,
    organization: str = "",
) -> OperationAccepted:
    """Send an operation (an update) to the cluster; the validator's refusal is a typed error.

    Args:
        update: the update's name (`add_node_pool`, `scale_node_pool`, ...).
        request_id: the update id; the same id again returns the first call's operation.
    """
    accepted: OperationAccepted = await _execute_update(
        client, name, update, request, OperationAccepted, request_id, organization
    )
    return accepted


async def cancel_operation(
    client: Client,
    name: str,
    operation_id: str,
    *,
    reason: str = "",
    request_id: str | None = None,
    organization: str = "",
) -> Operation:
    """Cancel one queued or running operation; the cancelled operation once it has settled
    (its compensation done)."""
    operation: Operation = await _execute_update(
        client,
        name,
        CANCEL_OPERATION_UPDATE,
        CancelOperationRequest(operation_id=operation_id, reason=reason),
        Operation,
        request_id,
        organization,
    )
    return operation


def operations(status: ClusterStatus) -> list[Operation]:
    """Every operation the status knows, oldest first: finished, running, then queued."""
    running = [status.current_operation] if status.current_operation else []
    return [*status.completed_operations, *running, *status.queued_operations]


async def get_operation(
    client: Client, name: str, operation_id: str, *, organization: str = ""
) -> Operation:
    """One operation of the cluster, wherever it is; `NotFoundError` when the status does not
    hold it (never submitted, or older than the finished operations it keeps)."""
    status = await query_status(client, name, organization=organization)
    operation = status.operation(operation_id)
    if operation is None:
        raise NotFoundError(f"operation: operation '{operation_id}' not found in cluster '{name}'")
    return operation


@dataclass
class ClusterSummary:
    """One line of `colonyctl cluster list`."""

    name: str
    phase: str
    workflow_id: str
    started: str
    organization: str = ""
    web_ui: str = ""
    """The cluster's Web UI page when the backend knows it (the API's answer); else empty."""


async def list_clusters(client: Client, *, organization: str | None = None) -> list[ClusterSummary]:
    """Every cluster whose workflow runs, from Temporal visibility (the ColonyCluster attribute).

    Args:
        organization: only this organization's clusters (the ColonyOrganization attribute; the
            dev server has visibility, the time-skipping server does not; "" the default mode's);
            None: everyone's.
    """
    query = (
        f"WorkflowType = '{WORKFLOW_TYPE}' AND ExecutionStatus = 'Running' "
        f"AND WorkflowId STARTS_WITH 'cluster/'"
    )
    if organization:
        # Quoted into a visibility query: only a valid name (no quote can slip in) is accepted.
        if name_problem("organization", organization):
            raise InvalidRequestError(f"organization: {name_problem('organization', organization)}")
        query += f" AND {COLONY_ORGANIZATION.name} = '{organization}'"
    clusters: list[ClusterSummary] = []
    try:
        async for execution in client.list_workflows(query):
            attributes = execution.typed_search_attributes
            owner = attributes.get(COLONY_ORGANIZATION) or ""
            entity = parse_entity_workflow_id(execution.id)
            if entity is None or entity[1] != owner:
                continue  # not a cluster's id, or marks that contradict it
            if organization is not None and owner != organization:
                continue  # another organization's ("" matches no visibility filter)
            clusters.append(
                ClusterSummary(
                    name=entity[2],
                    phase=attributes.get(COLONY_PHASE) or "",
                    workflow_id=execution.id,
                    started=execution.start_time.isoformat(timespec="seconds"),
                    organization=owner,
                )
            )
    except RPCError as exc:
        raise UnavailableError(f"cannot list clusters: {exc.message}") from exc
    return sorted(clusters, key=lambda c: (c.organization, c.name))


async def _final_status(handle: WorkflowHandle[Any, Any]) -> ClusterStatus | None:
    """The status a completed cluster workflow returned (a delete's last word); None when it ended
    any other way."""
    description = await handle.describe()
    if description.status != ExecutionStatus.COMPLETED:
        return None
    final = await handle.result()
    return final if isinstance(final, ClusterStatus) else None


async def wait_for_operation(
    client: Client,
    name: str,
    operation_id: str,
    on_status: Callable[[ClusterStatus, Operation | None], None],
    *,
    give_up_after: float | None = None,
    organization: str = "",
) -> Operation | None:
    """Poll the status until the operation has finished; None when the cluster's workflow ended
    without reporting it. `on_status` sees every status read, for a live display."""
    handle = client.get_workflow_handle(
        workflow_id_of(name, organization), result_type=ClusterStatus
    )
    deadline = None if give_up_after is None else time.monotonic() + give_up_after
    while True:
        try:
            description = await handle.describe()
            if description.status != ExecutionStatus.RUNNING:
                final = await _final_status(handle)
                operation = final.operation(operation_id) if final else None
                if final is not None:
                    on_status(final, operation)
                return operation
            status: ClusterStatus = await handle.query(STATUS_QUERY, result_type=ClusterStatus)
            status = status.with_live_drains(live_drains(client, description))
        except RPCError as exc:
            raise _rpc_error(exc, f"cannot read cluster '{name}'", name) from exc
        operation = status.operation(operation_id)
        on_status(status, operation)
        if operation is not None and operation.state.finished:
            return operation
        if deadline is not None and time.monotonic() > deadline:
            raise OperationFailedError(f"{operation_id} did not finish within {give_up_after:.0f}s")
        await asyncio.sleep(POLL_SECONDS)


async def _read_status(
    client: Client, handle: WorkflowHandle[Any, Any], name: str
) -> ClusterStatus | None:
    """The status of a running cluster workflow, or its final one once it ended (None when it
    ended without one)."""
    try:
        description = await handle.describe()
        if description.status != ExecutionStatus.RUNNING:
            return await _final_status(handle)
        status: ClusterStatus = await handle.query(STATUS_QUERY, result_type=ClusterStatus)
        status = status.with_live_drains(live_drains(client, description))
    except RPCError as exc:
        raise _rpc_error(exc, f"cannot read cluster '{name}'", name) from exc
    except WorkflowQueryFailedError as exc:
        raise UnavailableError(f"cannot read cluster '{name}': {exc}") from exc
    return status


async def watch_status(
    client: Client, name: str, *, interval: float = WATCH_SECONDS, organization: str = ""
) -> AsyncIterator[ClusterStatus]:
    """The cluster's status now, then each time it changes, until its workflow ends (the last one
    yielded is then the final status, phase deleted, when the workflow returned one).

    Raises:
        NotFoundError: the cluster does not exist when the watch starts.
    """
    handle = client.get_workflow_handle(
        workflow_id_of(name, organization), result_type=ClusterStatus
    )
    status: ClusterStatus | None = await query_status(client, name, organization=organization)
    last = ""
    while status is not None:
        # updatedAt is the workflow's clock at the query: it changes on every read.
        key = status.model_dump_json(exclude={"updated_at"})
        if key != last:
            last = key
            yield status
        if status.phase is ClusterPhase.DELETED:
            return
        await asyncio.sleep(interval)
        status = await _read_status(client, handle, name)


@dataclass(frozen=True)
class WorkflowRef:
    """A workflow as a command shows it: its id, and its Web UI page (empty when unknown)."""

    workflow_id: str
    link: str = ""


def cluster_workflow(
    settings: ColonySettings, client: Client, name: str, organization: str = ""
) -> WorkflowRef:
    """The cluster's workflow (the same function in `starter.remote` answers what the API said)."""
    workflow_id = workflow_id_of(name, organization)
    return WorkflowRef(workflow_id, settings.workflow_link(workflow_id))


CHECKS_LOCALLY = True
"""The caller runs the catalog checks (`starter.checks`) before sending: nothing else will. Through
the API (`starter.remote`), the server runs them."""
