"""`/v1/colonies`: groups of clusters (the exalsius Colony), run by `ColonyWorkflow`: thin shells
over `starter.clients.colonies.TemporalColonies`, the client `colonyctl colony` uses in direct
mode.

A colony belongs to the caller's organization, and so do its clusters (`<colony>--<clusterName>`,
listed among the organization's clusters once created): another organization's colony is simply
not found (404), as a cluster is, and its name may be used again elsewhere. Permissions are the
clusters': Read to list and get, Manage to apply and delete. An apply creates the colony or gives
its running workflow the changed manifest (clusters added for new entries, deleted for removed
ones); the body is Colony's form (`api.views.ColonyApplyRequest`), which `colonyctl colony apply
-f` reads from an exalsius or Colony manifest. Everything is checked before anything starts.

Mounted by `api.app.create_app`.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from api.bodies import read_body
from api.context import Principal, context, each_found, shown
from api.routes import MANAGE, READ, IdempotencyKey, reads, writes
from api.views import (
    ColonyApplied,
    ColonyApplyRequest,
    ColonyList,
    ColonyOperationView,
    ColonyView,
)
from models.colony import ColonyStatus
from models.manifests import ColonySpec
from models.workspace_class import dns_label_problem
from starter.clients.base import not_found
from starter.clients.colonies import TemporalColonies
from starter.parsing import validated

router = APIRouter(prefix="/v1/colonies", tags=["colonies"])


def colony_name(colony_id: str) -> str:
    """The colony named by a path id; an id no colony can have is simply not found."""
    if dns_label_problem("colony", colony_id):
        raise not_found("colony", shown(colony_id))
    return colony_id


def _view(colonies: TemporalColonies, status: ColonyStatus) -> ColonyView:
    workflow = colonies.workflow(status.name)
    return ColonyView.of(status, workflow.workflow_id, workflow.link)


@writes(router, "POST", "", ColonyApplied, "Apply a colony", body=ColonyApplyRequest)
async def apply_colony(
    request: Request,
    response: Response,
    idempotency_key: IdempotencyKey = None,
    principal: Principal = MANAGE,
) -> ColonyApplied:
    """Create the colony (202, `created: true`), or bring the running one to this manifest
    (202, `created: false`, its apply queued): clusters are added for new entries and deleted,
    with their workspaces, for entries no longer given. Poll `GET /v1/colonies/{id}`."""
    body = await read_body(request, ColonyApplyRequest)
    spec = validated(
        ColonySpec,
        {
            **body.model_dump(mode="json", include={"name", "colony_clusters"}),
            "organization": principal.organization,
        },
    )
    applied = await context(request).colonies(principal).apply(spec, request_id=idempotency_key)
    response.headers["Location"] = f"{router.prefix}/{spec.name}"
    return ColonyApplied(
        id=spec.name,
        name=spec.name,
        created=applied.created,
        operation_id=applied.operation_id,
        workflow_id=applied.workflow_id,
        web_ui=context(request).workflow(applied.workflow_id).link,
    )


@reads(router, "", ColonyList, "List colonies")
async def list_colonies(request: Request, principal: Principal = READ) -> ColonyList:
    """The organization's colonies (those whose deletion has not completed)."""
    colonies = context(request).colonies(principal)
    found = await colonies.list_all(organization=principal.organization)

    async def view(name: str) -> ColonyView:
        return _view(colonies, await colonies.get(name))

    return ColonyList(items=await each_found((c.name for c in found), view))


@reads(router, "/{colony_id}", ColonyView, "Get a colony")
async def get_colony(request: Request, colony_id: str, principal: Principal = READ) -> ColonyView:
    """The colony: phase (Provisioning, Ready, Degraded, Deleting), its clusters with their phase,
    nodes and GPUs, and its operations."""
    colonies = context(request).colonies(principal)
    return _view(colonies, await colonies.get(colony_name(colony_id)))


@writes(router, "DELETE", "/{colony_id}", ColonyOperationView, "Delete a colony")
async def delete_colony(
    request: Request,
    colony_id: str,
    idempotency_key: IdempotencyKey = None,
    principal: Principal = MANAGE,
) -> ColonyOperationView:
    """Delete every cluster of the colony (their workspaces first), then the colony. Final;
    repeating it while it runs returns the same delete, and once it completed the colony is not
    found (404)."""
    name = colony_name(colony_id)
    colonies = context(request).colonies(principal)
    accepted = await colonies.delete(name, request_id=idempotency_key)
    workflow = colonies.workflow(name)
    return ColonyOperationView(
        colony_id=name,
        operation_id=accepted.operation_id,
        kind=accepted.kind,
        position=accepted.position,
        workflow_id=workflow.workflow_id,
        web_ui=workflow.link,
    )
