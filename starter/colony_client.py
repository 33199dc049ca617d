"""The Temporal-facing functions for colonies, shared by `colonyctl colony` (and `apply -f`) in
direct mode and the HTTP API (`api/colonies.py`): start or re-apply a colony, read it, list them,
delete one. `starter.remote_colonies` mirrors them over HTTP for remote mode. No Typer or rich
here; failures are the typed errors of `starter.errors`.

A colony is `(organization, name)`, as a cluster is: every function takes `organization` (empty
for the colonies an operator applies through Temporal directly; the API passes its caller's, and
the spec carries it), the workflow id is `models.colony.colony_workflow_id(name, organization)`,
and the organization is recorded in the workflow's `ColonyOrganization` search attribute at start
for the lists. Another organization's colony is simply not found.
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.service import RPCError, RPCStatusCode

from infra.config import ColonySettings
from models.colony import (
    ApplyColonyRequest,
    ColonyOperationAccepted,
    ColonyPhase,
    ColonyStatus,
    ColonyWorkflowInput,
    DeleteColonyRequest,
    colony_workflow_id,
)
from models.manifests import ColonySpec
from models.names import name_problem
from starter import checks
from starter.client import WorkflowRef, new_request_id, update_error
from starter.client import connect as connect
from starter.errors import InvalidRequestError, NotFoundError, UnavailableError
from workflows.search_attributes import (
    COLONY_KIND,
    COLONY_NAME,
    COLONY_ORGANIZATION,
    COLONY_PHASE,
)

WORKFLOW = "ColonyWorkflow"
COLONY_KIND_VALUE = "colony"
"""`ColonyKind` of colony workflows (the workflow upserts the same value)."""


def colony_not_found(name: str) -> NotFoundError:
    return NotFoundError(f"colony: colony '{name}' not found")


@dataclass
class AppliedColony:
    """A colony applied: its workflow, and whether it was started now or given the manifest."""

    workflow_id: str
    created: bool
    operation_id: str = ""
    """The apply operation queued on a running colony (empty for a colony started now: its
    first apply is queued by the workflow itself)."""


@dataclass
class ColonySummary:
    """One line of `colonyctl colony list`."""

    name: str
    phase: str
    workflow_id: str
    organization: str = ""
    web_ui: str = ""
    """The colony's Web UI page when the backend knows it (the API's answer); else empty."""


async def apply_colony(
    client: Client, settings: ColonySettings, spec: ColonySpec, *, request_id: str | None = None
) -> AppliedColony:
    """Start the colony's workflow, or send the changed manifest to the one that runs (of
    `spec.organization`), once the catalog was found to serve its new clusters
    (`starter.checks.check_colony`: `InvalidRequestError` naming the entry otherwise)."""
    workflow_id = colony_workflow_id(spec.name, spec.organization)
    handle = client.get_workflow_handle(workflow_id)
    try:
        described = await handle.describe()
        running = described.status == WorkflowExecutionStatus.RUNNING
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise UnavailableError(f"cannot read colony '{spec.name}': {exc.message}") from exc
        running = False
    existing: frozenset[str] = frozenset()
    if running:
        status = await colony_status(client, spec.name, organization=spec.organization)
        existing = frozenset(cluster.entry for cluster in status.clusters)
    # Before anything starts, as for a cluster: the catalog serves every new cluster.
    await checks.check_colony(settings, spec, existing=existing)
    if running:
        try:
            accepted: ColonyOperationAccepted = await handle.execute_update(
                "apply",
                ApplyColonyRequest(spec=spec),
                id=request_id or new_request_id(),
                result_type=ColonyOperationAccepted,
            )
        except WorkflowUpdateFailedError as exc:
            raise update_error("apply", exc) from exc
        return AppliedColony(workflow_id, created=False, operation_id=accepted.operation_id)
    try:
        await client.start_workflow(
            WORKFLOW,
            ColonyWorkflowInput(spec=spec),
            id=workflow_id,
            task_queue=settings.task_queue,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(COLONY_KIND, COLONY_KIND_VALUE),
                    SearchAttributePair(COLONY_NAME, spec.name),
                    # At start, never from the workflow: whose it is, for the lists.
                    SearchAttributePair(COLONY_ORGANIZATION, spec.organization),
                    SearchAttributePair(COLONY_PHASE, ColonyPhase.PROVISIONING.value),
                ]
            ),
            static_summary=f"colony {spec.name}: {len(spec.colony_clusters)} cluster(s)",
        )
    except RPCError as exc:
        raise UnavailableError(f"cannot start colony '{spec.name}': {exc.message}") from exc
    return AppliedColony(workflow_id, created=True)


async def colony_status(client: Client, name: str, *, organization: str = "") -> ColonyStatus:
    """The colony's status from its workflow's `status` query (not found once it was deleted)."""
    handle = client.get_workflow_handle(colony_workflow_id(name, organization))
    try:
        described = await handle.describe()
        if described.status != WorkflowExecutionStatus.RUNNING:
            raise colony_not_found(name)
        status: ColonyStatus = await handle.query("status", result_type=ColonyStatus)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise colony_not_found(name) from exc
        raise UnavailableError(f"cannot read colony '{name}': {exc.message}") from exc
    if status.phase is ColonyPhase.DELETED:
        raise colony_not_found(name)
    return status


async def list_colonies(client: Client, *, organization: str | None = None) -> list[ColonySummary]:
    """Every running colony, from visibility.

    Args:
        organization: only this organization's (None: everyone's, the operator's view).
    """
    query = f"{COLONY_KIND.name} = '{COLONY_KIND_VALUE}' AND ExecutionStatus = 'Running'"
    if organization is not None:
        # Quoted into a visibility query: only a valid name (no quote can slip in) is accepted.
        if organization and name_problem("organization", organization):
            raise InvalidRequestError(f"organization: {name_problem('organization', organization)}")
        query += f" AND {COLONY_ORGANIZATION.name} = '{organization}'"
    found: list[ColonySummary] = []
    try:
        async for execution in client.list_workflows(query):
            attributes = execution.typed_search_attributes
            owner = attributes.get(COLONY_ORGANIZATION) or ""
            if organization is not None and owner != organization:
                continue  # an operator's colony ("" matches no visibility filter)
            found.append(
                ColonySummary(
                    name=attributes.get(COLONY_NAME) or execution.id.rpartition("/")[2],
                    phase=attributes.get(COLONY_PHASE) or "",
                    workflow_id=execution.id,
                    organization=owner,
                )
            )
    except RPCError as exc:
        raise UnavailableError(f"cannot list colonies: {exc.message}") from exc
    return sorted(found, key=lambda colony: (colony.organization, colony.name))


async def delete_colony(
    client: Client, name: str, *, request_id: str | None = None, organization: str = ""
) -> ColonyOperationAccepted:
    """Ask the colony to delete its clusters (and their workspaces), then itself."""
    await colony_status(client, name, organization=organization)  # not found -> NotFoundError
    handle = client.get_workflow_handle(colony_workflow_id(name, organization))
    try:
        accepted: ColonyOperationAccepted = await handle.execute_update(
            "delete",
            DeleteColonyRequest(),
            id=request_id or new_request_id(),
            result_type=ColonyOperationAccepted,
        )
    except WorkflowUpdateFailedError as exc:
        raise update_error("delete", exc) from exc
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise colony_not_found(name) from exc
        raise UnavailableError(f"cannot delete colony '{name}': {exc.message}") from exc
    return accepted


def colony_workflow(
    settings: ColonySettings, client: Client, name: str, organization: str = ""
) -> WorkflowRef:
    """The colony's workflow (the same function in `starter.remote_colonies` answers what the API
    said)."""
    workflow_id = colony_workflow_id(name, organization)
    return WorkflowRef(workflow_id, settings.workflow_link(workflow_id))
