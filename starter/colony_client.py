"""The Temporal-facing functions for colonies, shared by `colonyctl colony` (and the HTTP API):
start or re-apply a colony, read it, list them, delete one. No Typer or rich here; failures are
the typed errors of `starter.errors`.

A colony belongs to an organization (the HTTP API passes its caller's; `colonyctl` in direct mode
the default mode's ""): its workflow is `colony/[<organization>/]<name>` (`models.identity`), so
another organization's colony of any name is simply not found, and its name is free here.
"""

from __future__ import annotations

from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.service import RPCError, RPCStatusCode

from models.colony import (
    ApplyColonyRequest,
    ColonyOperationAccepted,
    ColonyStatus,
    ColonyWorkflowInput,
    DeleteColonyRequest,
    colony_workflow_id,
)
from models.identity import parse_entity_workflow_id
from models.manifests import ColonySpec
from models.names import name_problem
from starter.client import new_request_id, update_error
from starter.errors import InvalidRequestError, NotFoundError, UnavailableError
from workflows.search_attributes import (
    COLONY_KIND,
    COLONY_NAME,
    COLONY_ORGANIZATION,
    COLONY_PHASE,
)

WORKFLOW = "ColonyWorkflow"


def colony_not_found(name: str) -> NotFoundError:
    return NotFoundError(f"colony '{name}' not found")


async def apply_colony(
    client: Client,
    task_queue: str,
    spec: ColonySpec,
    *,
    request_id: str | None = None,
    organization: str = "",
) -> tuple[str, bool]:
    """Start the organization's colony's workflow, or send the changed manifest to the one that
    runs.

    Returns:
        (workflow id, True when it was started now).
    """
    workflow_id = colony_workflow_id(spec.name, organization)
    handle = client.get_workflow_handle(workflow_id)
    try:
        described = await handle.describe()
        running = described.status == WorkflowExecutionStatus.RUNNING
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise UnavailableError(f"cannot read colony '{spec.name}': {exc.message}") from exc
        running = False
    if running:
        try:
            await handle.execute_update(
                "apply",
                ApplyColonyRequest(spec=spec),
                id=request_id or new_request_id(),
                result_type=ColonyOperationAccepted,
            )
        except WorkflowUpdateFailedError as exc:
            raise update_error("apply", exc) from exc
        return workflow_id, False
    await client.start_workflow(
        WORKFLOW,
        ColonyWorkflowInput(spec=spec, organization=organization),
        id=workflow_id,
        task_queue=task_queue,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        search_attributes=TypedSearchAttributes(
            [
                SearchAttributePair(COLONY_KIND, "colony"),
                SearchAttributePair(COLONY_NAME, spec.name),
                # At start, never from a request: it marks whose the colony is.
                SearchAttributePair(COLONY_ORGANIZATION, organization),
                SearchAttributePair(COLONY_PHASE, "Provisioning"),
            ]
        ),
        static_summary=f"colony {spec.name}: {len(spec.colony_clusters)} cluster(s)",
    )
    return workflow_id, True


async def colony_status(client: Client, name: str, *, organization: str = "") -> ColonyStatus:
    """The organization's colony's status from its workflow's `status` query (not found once it
    was deleted)."""
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
    return status


async def list_colonies(client: Client, *, organization: str | None = None) -> list[dict[str, Any]]:
    """Every running colony, from visibility: the organization's ("" the default mode's), or
    everyone's (None)."""
    query = "ColonyKind = 'colony' AND ExecutionStatus = 'Running'"
    if organization:
        # Quoted into a visibility query: only a valid name (no quote can slip in) is accepted.
        if name_problem("organization", organization):
            raise InvalidRequestError(f"organization: {name_problem('organization', organization)}")
        query += f" AND {COLONY_ORGANIZATION.name} = '{organization}'"
    found: list[dict[str, Any]] = []
    try:
        async for execution in client.list_workflows(query):
            entity = parse_entity_workflow_id(execution.id)
            owner = execution.typed_search_attributes.get(COLONY_ORGANIZATION) or ""
            if entity is None or entity[1] != owner:
                continue  # not a colony's id, or marks that contradict it
            if organization is not None and owner != organization:
                continue
            found.append(
                {
                    "name": entity[2],
                    "organization": owner,
                    "phase": execution.typed_search_attributes.get(COLONY_PHASE) or "",
                    "workflowId": execution.id,
                }
            )
    except RPCError as exc:
        raise UnavailableError(f"cannot list colonies: {exc.message}") from exc
    return sorted(found, key=lambda colony: (str(colony["organization"]), str(colony["name"])))


async def delete_colony(
    client: Client, name: str, *, request_id: str | None = None, organization: str = ""
) -> ColonyOperationAccepted:
    """Ask the organization's colony to delete its clusters (and their workspaces), then itself."""
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
    return accepted
