"""`/v1/workspace-classes` and `/v1/workspaces`: the class catalog, and workspaces on the caller's
clusters, through the functions of `starter.workspace_client` that `colonyctl class` and
`colonyctl workspace` call.

Classes: the catalog every organization shares, and each organization's own classes, which only it
sees (and which shadow nothing of anyone else's: a class name the shared catalog has is not free
for one). Any key with Read lists and gets what its organization sees; a key with Manage publishes
its organization's own class, one with Catalog Publish (`catalog:publish`, an operator's) publishes
to the shared catalog, ServiceTemplates included (an organization's class deploys the templates
the shared catalog published). Classes are immutable: a different definition under an existing
name is a 409, the identical one again a 200.

A workspace belongs to the caller's organization (its spec's `organization`, from the key, never
from the body): its name is unique within the organization and its workflow is
`workspace/<organization>/<name>` (`models.identity`), so another organization's workspace of any
name is simply not there (404, as for clusters), and a name another organization uses is free here.
A deploy names the cluster by its id in the API; the workspace's workflow derives the
ClusterDeployment from (organization, cluster) and admits the workspace only onto one marked as
that organization's cluster's, so no key can deploy onto another organization's cluster.

Secret prompt answers arrive in plaintext (`secretValues`, or in `values`/`answers`, over the API's
connection) and are sealed here with Colony's public key (`COLONY_SEALING_PUBLIC_KEY_FILE`) before
the workflow starts, exactly as `colonyctl` seals them in direct mode: no plaintext reaches a
workflow's history. A deploy goes through `starter.workspace_client.deploy`, the path
`colonyctl workspace deploy` takes: everything is checked before anything starts (the cluster
exists in the caller's organization and can take workspaces, the class, every prompt), with
`colonyctl`'s messages.

Mounted by `api.app.create_app`.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from temporalio.client import Client

from api.bodies import body_spec, read_body
from api.clusters import MANAGE, READ, READS, WRITES, IdempotencyKey
from api.context import ApiContext, Principal, context
from api.errors import ApiError, error_responses
from api.keys import Permission
from api.views import (
    WorkspaceAccepted,
    WorkspaceClassList,
    WorkspaceClassPublished,
    WorkspaceClassPublishRequest,
    WorkspaceDeployRequest,
    WorkspaceList,
    WorkspaceOperationView,
    WorkspaceView,
)
from models.names import name_problem
from models.workspace import WorkspaceSpec, workspace_name_problem, workspace_workflow_id
from models.workspace_api import PublishWorkspaceClassRequest
from models.workspace_class import WorkspaceClassSpec, dns_label_problem
from models.workspace_operations import (
    DeleteWorkspaceRequest,
    ResumeWorkspaceRequest,
    SuspendWorkspaceRequest,
    WorkspaceOperationKind,
)
from starter import workspace_client as spaces
from starter.client import WorkflowRef
from starter.errors import InvalidRequestError, NotFoundError
from starter.parsing import validated

classes = APIRouter(prefix="/v1/workspace-classes", tags=["workspace classes"])
router = APIRouter(prefix="/v1/workspaces", tags=["workspaces"])

LIST_CONCURRENCY = 8
"""Status queries in flight at once while listing (as for clusters)."""
_SHOWN = 80
API_HINT = "give it in secretValues, answers or values{others}"
"""How an API caller answers a missing required prompt (`colonyctl` asks on a terminal)."""
DELETE_REASON = "deleted through the HTTP API"
PUBLISHES = {**error_responses(400, 401, 403, 409, 415, 422, 429, 503)}


def _shown(text: str) -> str:
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def workspace_name(workspace_id: str) -> str:
    """The workspace named by a path id; an id no workspace can have is simply not found."""
    if workspace_name_problem(workspace_id):
        raise spaces.workspace_not_found(_shown(workspace_id))
    return workspace_id


def _workflow(ctx: ApiContext, name: str, organization: str) -> WorkflowRef:
    return ctx.workflow(workspace_workflow_id(name, organization))


# --- workspace classes -----------------------------------------------------------------------


@classes.get(
    "",
    response_model=WorkspaceClassList,
    response_model_exclude_none=True,
    responses=READS,
    summary="List workspace classes",
)
async def list_classes(request: Request, principal: Principal = READ) -> WorkspaceClassList:
    """The classes the organization sees: the shared catalog's and its own (resources, endpoints,
    prompts)."""
    catalog = await spaces.catalog(await context(request).temporal(), principal.organization)
    return WorkspaceClassList(items=catalog.classes)


@classes.get(
    "/{class_name}",
    response_model=WorkspaceClassSpec,
    response_model_exclude_none=True,
    responses=READS,
    summary="Get a workspace class",
)
async def get_class(
    request: Request, class_name: str, principal: Principal = READ
) -> WorkspaceClassSpec:
    """One class the organization sees, by its exact, versioned name (another organization's own
    class is not found)."""
    client = await context(request).temporal()
    if dns_label_problem("workspace class", class_name):
        published = (c.name for c in (await spaces.catalog(client, principal.organization)).classes)
        raise spaces.class_not_found(_shown(class_name), published)
    return await spaces.get_class(client, class_name, principal.organization)


@classes.post(
    "",
    status_code=201,
    response_model=WorkspaceClassPublished,
    response_model_exclude_none=True,
    responses={
        200: {"model": WorkspaceClassPublished, "description": "The identical class was there."},
        **PUBLISHES,
    },
    openapi_extra=body_spec(WorkspaceClassPublishRequest),
    summary="Publish a workspace class",
)
async def publish_class(
    request: Request,
    response: Response,
    idempotency_key: IdempotencyKey = None,
    principal: Principal = MANAGE,
) -> WorkspaceClassPublished:
    """Publish a class: the organization's own (seen by it alone), or, with Catalog Publish, to
    the catalog every organization shares, with the ServiceTemplates it deploys. 201 when
    published, 200 when the identical class was there already; a different class under an
    existing name is a 409 (classes are immutable: a new version is a new name), and so is an
    organization's class under a name the shared catalog has."""
    ctx = context(request)
    body = await read_body(request, WorkspaceClassPublishRequest)
    spec = body.class_spec
    needed = {spec.service_template.name, *(p.service_template.name for p in spec.prerequisites)}
    unused = [t.name for t in body.service_templates if t.name not in needed]
    if unused:
        raise InvalidRequestError(
            f"serviceTemplates: ServiceTemplate {unused[0]} is not used by class '{spec.name}' "
            "(neither its serviceTemplate nor a prerequisite's)"
        )
    shared = Permission.CATALOG_PUBLISH in principal.key.effective
    if body.service_templates and not shared:
        raise ApiError(
            403,
            "forbidden",
            "serviceTemplates: publishing ServiceTemplates needs the permission Catalog: Publish "
            f"({Permission.CATALOG_PUBLISH.value}); an organization's own class deploys the "
            "ServiceTemplates the shared catalog has",
            field="serviceTemplates",
        )
    organization = "" if shared else principal.organization
    publish = PublishWorkspaceClassRequest(
        spec=spec,
        objects=[t.manifest().to_object() for t in body.service_templates],
        organization=organization,
    )
    client = await ctx.temporal()
    spaces.check_class_conflicts([publish], await spaces.catalog(client, organization))
    # The catalog is everyone's: another organization's key must not find this one's update.
    request_id = f"{principal.organization}/{idempotency_key}" if idempotency_key else None
    result = await spaces.publish_class(client, publish, request_id=request_id)
    response.status_code = 201 if result.created else 200
    return WorkspaceClassPublished(
        name=spec.name,
        created=result.created,
        objects_created=result.objects_created,
        objects_skipped=result.objects_skipped,
    )


# --- workspaces ------------------------------------------------------------------------------


def _spec_of(body: WorkspaceDeployRequest, organization: str) -> WorkspaceSpec:
    """The deploy request as the workflow takes it (the caller's organization's), checked before
    anything is asked of anyone."""
    shortcuts = (body.gpus, body.gpu_model, body.replicas)
    if body.resources is not None and any(value is not None for value in shortcuts):
        raise InvalidRequestError(
            "resources: give either resources or the shortcuts gpus, gpuModel and replicas"
        )
    resources = (
        body.resources.model_dump(mode="json", exclude_none=True)
        if body.resources is not None
        else spaces.resources_from_flags(body.gpus, body.gpu_model, body.replicas)
    )
    data = {
        "name": body.name,
        "class": body.class_name,
        "cluster": body.cluster,
        "organization": organization,
        "values": body.values,
        "answers": body.answers,
        "suspend": body.suspend,
    }
    if resources is not None:
        data["resources"] = resources
    return validated(WorkspaceSpec, data)


@router.post(
    "",
    status_code=202,
    response_model=WorkspaceAccepted,
    response_model_exclude_none=True,
    responses=WRITES,
    openapi_extra=body_spec(WorkspaceDeployRequest),
    summary="Deploy a workspace",
)
async def deploy_workspace(
    request: Request,
    response: Response,
    idempotency_key: IdempotencyKey = None,
    principal: Principal = MANAGE,
) -> WorkspaceAccepted:
    """Deploy a workspace of a class on one of the organization's clusters: 202 with its first
    operation; poll `GET /v1/workspaces/{name}` until it is `Running` (it waits in line while
    the cluster's GPUs are taken). Every required prompt must be answered (422 naming it);
    secret answers are sealed here before anything starts."""
    ctx = context(request)
    organization = principal.organization
    body = await read_body(request, WorkspaceDeployRequest)
    spec = _spec_of(body, organization)
    client = await ctx.temporal()
    started = await spaces.deploy(
        client,
        ctx.settings,
        spec,
        sealer=ctx.sealer,
        hint=API_HINT,
        secret_values=body.secret_values,
        request_id=idempotency_key,
    )
    phase, operation_id = "Pending", ""
    try:
        status = await spaces.workspace_status(client, spec.name, organization=organization)
    except NotFoundError:
        pass  # deleted at once by someone else: the deploy was accepted all the same
    else:
        phase = status.phase.value
        deploy = next(
            (
                op
                for op in [
                    *status.completed_operations,
                    status.current_operation,
                    *status.queued_operations,
                ]
                if op is not None and op.kind is WorkspaceOperationKind.DEPLOY
            ),
            None,
        )
        operation_id = deploy.id if deploy else ""
    response.headers["Location"] = f"{router.prefix}/{spec.name}"
    return WorkspaceAccepted.model_validate(
        {
            "id": spec.name,
            "name": spec.name,
            "class": spec.class_name,
            "cluster": body.cluster,
            "phase": phase,
            "operation_id": operation_id,
            "workflow_id": started.workflow_id,
            "web_ui": ctx.workflow(started.workflow_id).link,
            "repeated": started.repeated,
        }
    )


ClusterFilter = Annotated[
    str | None, Query(description="Only the workspaces of this cluster (its id).")
]


@router.get(
    "",
    response_model=WorkspaceList,
    response_model_exclude_none=True,
    responses=READS,
    summary="List workspaces",
)
async def list_workspaces(
    request: Request, cluster: ClusterFilter = None, principal: Principal = READ
) -> WorkspaceList:
    """The organization's workspaces (those whose deletion has not completed), optionally of one
    cluster."""
    ctx = context(request)
    organization = principal.organization
    if cluster is not None and name_problem("cluster", cluster):
        raise InvalidRequestError(f"cluster: {name_problem('cluster', cluster)}")
    client: Client = await ctx.temporal()
    found = await spaces.list_workspaces(client, cluster=cluster, organization=organization)
    limit = asyncio.Semaphore(LIST_CONCURRENCY)

    async def view(name: str) -> WorkspaceView | None:
        async with limit:
            try:
                status = await spaces.workspace_status(client, name, organization=organization)
            except NotFoundError:
                return None  # deleted between the list and the query
        workflow = _workflow(ctx, name, organization)
        return WorkspaceView.of(status, workflow.workflow_id, workflow.link)

    views = await asyncio.gather(*(view(summary.name) for summary in found))
    return WorkspaceList(items=[v for v in views if v is not None])


@router.get(
    "/{workspace_id}",
    response_model=WorkspaceView,
    response_model_exclude_none=True,
    responses=READS,
    summary="Get a workspace",
)
async def get_workspace(
    request: Request, workspace_id: str, principal: Principal = READ
) -> WorkspaceView:
    """The workspace: phase, access (URLs or port-forward commands), GPU admission, conditions,
    the failure context of a failed one, and its operations."""
    ctx = context(request)
    name = workspace_name(workspace_id)
    status = await spaces.workspace_status(
        await ctx.temporal(), name, organization=principal.organization
    )
    workflow = _workflow(ctx, name, principal.organization)
    return WorkspaceView.of(status, workflow.workflow_id, workflow.link)


async def _operate(
    request: Request,
    workspace_id: str,
    update: WorkspaceOperationKind,
    payload: DeleteWorkspaceRequest | SuspendWorkspaceRequest | ResumeWorkspaceRequest,
    idempotency_key: str | None,
    principal: Principal,
) -> WorkspaceOperationView:
    ctx = context(request)
    name = workspace_name(workspace_id)
    accepted = await spaces.send(
        await ctx.temporal(),
        name,
        update.value,
        payload,
        request_id=idempotency_key,
        organization=principal.organization,
    )
    workflow = _workflow(ctx, name, principal.organization)
    return WorkspaceOperationView(
        workspace_id=name,
        operation_id=accepted.operation_id,
        kind=accepted.kind,
        position=accepted.position,
        workflow_id=workflow.workflow_id,
        web_ui=workflow.link,
    )


@router.delete(
    "/{workspace_id}",
    status_code=202,
    response_model=WorkspaceOperationView,
    response_model_exclude_none=True,
    responses=WRITES,
    summary="Delete a workspace",
)
async def delete_workspace(
    request: Request,
    workspace_id: str,
    idempotency_key: IdempotencyKey = None,
    principal: Principal = MANAGE,
) -> WorkspaceOperationView:
    """Delete the workspace: routes, release, values Secret, namespace, then its GPUs go to the
    next in line. Final; repeating it while it runs returns the same delete, and once it
    completed the workspace is not found (404)."""
    return await _operate(
        request,
        workspace_id,
        WorkspaceOperationKind.DELETE,
        DeleteWorkspaceRequest(reason=DELETE_REASON),
        idempotency_key,
        principal,
    )


@router.post(
    "/{workspace_id}/suspend",
    status_code=202,
    response_model=WorkspaceOperationView,
    response_model_exclude_none=True,
    responses=WRITES,
    summary="Suspend a workspace",
)
async def suspend_workspace(
    request: Request,
    workspace_id: str,
    idempotency_key: IdempotencyKey = None,
    principal: Principal = MANAGE,
) -> WorkspaceOperationView:
    """Uninstall the release and free the GPUs; the namespace, its volumes and the definition
    stay. A suspended workspace is a 409."""
    return await _operate(
        request,
        workspace_id,
        WorkspaceOperationKind.SUSPEND,
        SuspendWorkspaceRequest(),
        idempotency_key,
        principal,
    )


@router.post(
    "/{workspace_id}/resume",
    status_code=202,
    response_model=WorkspaceOperationView,
    response_model_exclude_none=True,
    responses=WRITES,
    summary="Resume a workspace",
)
async def resume_workspace(
    request: Request,
    workspace_id: str,
    idempotency_key: IdempotencyKey = None,
    principal: Principal = MANAGE,
) -> WorkspaceOperationView:
    """Deploy a suspended (or failed) workspace again, through GPU admission again; any other
    is a 409."""
    return await _operate(
        request,
        workspace_id,
        WorkspaceOperationKind.RESUME,
        ResumeWorkspaceRequest(),
        idempotency_key,
        principal,
    )
