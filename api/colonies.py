"""`/v1/colonies`: groups of clusters (the exalsius Colony), run by `ColonyWorkflow`: thin shells
over `clients.colonies.TemporalColonies`, the client `colonyctl colony` uses in direct
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

from dataclasses import asdict

from fastapi import Response

from api.bodies import read_body
from api.context import shown
from api.routes import MANAGE, READ, Call, entity_router, entity_view, entity_views, reads, writes
from api.views import (
    ColonyApplied,
    ColonyApplyRequest,
    ColonyList,
    ColonyOperationView,
    ColonyView,
    accepted_view,
)
from clients.base import not_found
from clients.parsing import validated
from models.manifests import ColonySpec
from models.workspace_class import dns_label_problem

router, ROUTERS = entity_router("/v1/colonies", "colonies")
"""The routes this module adds to the API (`api.app.entity_routers`)."""


def colony_name(colony_id: str) -> str:
    """The colony named by a path id; an id no colony can have is simply not found."""
    if dns_label_problem("colony", colony_id):
        raise not_found("colony", shown(colony_id))
    return colony_id


@writes(router, "POST", "", ColonyApplied, "Apply a colony", body=ColonyApplyRequest)
async def apply_colony(
    response: Response,
    call: Call = MANAGE,
) -> ColonyApplied:
    """Create the colony (202, `created: true`), or bring the running one to this manifest
    (202, `created: false`, its apply queued): clusters are added for new entries and deleted,
    with their workspaces, for entries no longer given. Poll `GET /v1/colonies/{id}`."""
    body = await read_body(call.request, ColonyApplyRequest)
    spec = validated(
        ColonySpec,
        {
            **body.model_dump(mode="json", include={"name", "colony_clusters"}),
            "organization": call.organization,
        },
    )
    applied = await call.colonies().apply(spec, request_id=call.idempotency_key)
    response.headers["Location"] = f"{router.prefix}/{spec.name}"
    return ColonyApplied(
        id=spec.name,
        name=spec.name,
        web_ui=call.workflow(applied.workflow_id).link,
        **asdict(applied),
    )


@reads(router, "", ColonyList, "List colonies")
async def list_colonies(call: Call = READ) -> ColonyList:
    """The organization's colonies (those whose deletion has not completed)."""
    colonies = call.colonies()
    found = await colonies.list_all(organization=call.organization)
    return ColonyList(items=await entity_views(colonies, found, ColonyView.of))


@reads(router, "/{colony_id}", ColonyView, "Get a colony")
async def get_colony(colony_id: str, call: Call = READ) -> ColonyView:
    """The colony: phase (Provisioning, Ready, Degraded, Deleting), its clusters with their phase,
    nodes and GPUs, and its operations."""
    return await entity_view(call.colonies(), colony_name(colony_id), ColonyView.of)


@writes(router, "DELETE", "/{colony_id}", ColonyOperationView, "Delete a colony")
async def delete_colony(
    colony_id: str,
    call: Call = MANAGE,
) -> ColonyOperationView:
    """Delete every cluster of the colony (their workspaces first), then the colony. Final;
    repeating it while it runs returns the same delete, and once it completed the colony is not
    found (404)."""
    name = colony_name(colony_id)
    colonies = call.colonies()
    accepted = await colonies.delete(name, request_id=call.idempotency_key)
    return accepted_view(ColonyOperationView, accepted, colonies.workflow(name), colony_id=name)
