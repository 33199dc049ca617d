"""`/v1/colonies`: groups of clusters (the exalsius Colony), run by `ColonyWorkflow`, through the
functions of `starter.colony_client` that `colonyctl colony` calls.

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

import asyncio

from fastapi import APIRouter, Request, Response

from api.bodies import body_spec, read_body
from api.clusters import MANAGE, READ, READS, WRITES, IdempotencyKey
from api.context import ApiContext, Principal, context
from api.views import (
    ColonyApplied,
    ColonyApplyRequest,
    ColonyList,
    ColonyOperationView,
    ColonyView,
)
from models.colony import ColonyStatus, colony_workflow_id
from models.manifests import ColonySpec
from models.workspace_class import dns_label_problem
from starter import colony_client as colonies
from starter.client import WorkflowRef
from starter.errors import NotFoundError
from starter.parsing import validated

router = APIRouter(prefix="/v1/colonies", tags=["colonies"])

LIST_CONCURRENCY = 8
"""Status queries in flight at once while listing (as for clusters)."""
_SHOWN = 80


def colony_name(colony_id: str) -> str:
    """The colony named by a path id; an id no colony can have is simply not found."""
    if dns_label_problem("colony", colony_id):
        shown = colony_id if len(colony_id) <= _SHOWN else colony_id[:_SHOWN] + "..."
        raise colonies.colony_not_found(shown)
    return colony_id


def _workflow(ctx: ApiContext, principal: Principal, name: str) -> WorkflowRef:
    return ctx.workflow(colony_workflow_id(name, principal.organization))


def _view(ctx: ApiContext, principal: Principal, status: ColonyStatus) -> ColonyView:
    workflow = _workflow(ctx, principal, status.name)
    return ColonyView.of(status, workflow.workflow_id, workflow.link)


@router.post(
    "",
    status_code=202,
    response_model=ColonyApplied,
    response_model_exclude_none=True,
    responses=WRITES,
    openapi_extra=body_spec(ColonyApplyRequest),
    summary="Apply a colony",
)
async def apply_colony(
    request: Request,
    response: Response,
    idempotency_key: IdempotencyKey = None,
    principal: Principal = MANAGE,
) -> ColonyApplied:
    """Create the colony (202, `created: true`), or bring the running one to this manifest
    (202, `created: false`, its apply queued): clusters are added for new entries and deleted,
    with their workspaces, for entries no longer given. Poll `GET /v1/colonies/{id}`."""
    ctx = context(request)
    body = await read_body(request, ColonyApplyRequest)
    spec = validated(
        ColonySpec,
        {
            **body.model_dump(mode="json", include={"name", "colony_clusters"}),
            "organization": principal.organization,
        },
    )
    applied = await colonies.apply_colony(
        await ctx.temporal(), ctx.settings, spec, request_id=idempotency_key
    )
    response.headers["Location"] = f"{router.prefix}/{spec.name}"
    return ColonyApplied(
        id=spec.name,
        name=spec.name,
        created=applied.created,
        operation_id=applied.operation_id,
        workflow_id=applied.workflow_id,
        web_ui=ctx.workflow(applied.workflow_id).link,
    )


@router.get(
    "",
    response_model=ColonyList,
    response_model_exclude_none=True,
    responses=READS,
    summary="List colonies",
)
async def list_colonies(request: Request, principal: Principal = READ) -> ColonyList:
    """The organization's colonies (those whose deletion has not completed)."""
    ctx = context(request)
    client = await ctx.temporal()
    found = await colonies.list_colonies(client, organization=principal.organization)
    limit = asyncio.Semaphore(LIST_CONCURRENCY)

    async def view(name: str) -> ColonyView | None:
        async with limit:
            try:
                status = await colonies.colony_status(
                    client, name, organization=principal.organization
                )
            except NotFoundError:
                return None  # deleted between the list and the query
        return _view(ctx, principal, status)

    views = await asyncio.gather(*(view(summary.name) for summary in found))
    return ColonyList(items=[v for v in views if v is not None])


@router.get(
    "/{colony_id}",
    response_model=ColonyView,
    response_model_exclude_none=True,
    responses=READS,
    summary="Get a colony",
)
async def get_colony(request: Request, colony_id: str, principal: Principal = READ) -> ColonyView:
    """The colony: phase (Provisioning, Ready, Degraded, Deleting), its clusters with their phase,
    nodes and GPUs, and its operations."""
    ctx = context(request)
    status = await colonies.colony_status(
        await ctx.temporal(), colony_name(colony_id), organization=principal.organization
    )
    return _view(ctx, principal, status)


@router.delete(
    "/{colony_id}",
    status_code=202,
    response_model=ColonyOperationView,
    response_model_exclude_none=True,
    responses=WRITES,
    summary="Delete a colony",
)
async def delete_colony(
    request: Request,
    colony_id: str,
    idempotency_key: IdempotencyKey = None,
    principal: Principal = MANAGE,
) -> ColonyOperationView:
    """Delete every cluster of the colony (their workspaces first), then the colony. Final;
    repeating it while it runs returns the same delete, and once it completed the colony is not
    found (404)."""
    ctx = context(request)
    name = colony_name(colony_id)
    accepted = await colonies.delete_colony(
        await ctx.temporal(),
        name,
        request_id=idempotency_key,
        organization=principal.organization,
    )
    workflow = _workflow(ctx, principal, name)
    return ColonyOperationView(
        colony_id=name,
        operation_id=accepted.operation_id,
        kind=accepted.kind,
        position=accepted.position,
        workflow_id=workflow.workflow_id,
        web_ui=workflow.link,
    )
