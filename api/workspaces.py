"""`/v1/workspace-classes` and `/v1/workspaces`: the class catalog, and workspaces on the caller's
clusters: thin shells over the clients `colonyctl class` and `colonyctl workspace` use in direct
mode (`clients.classes.TemporalClasses`, `clients.workspaces.TemporalWorkspaces`).

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
workflow's history. A deploy goes through `TemporalWorkspaces.deploy`, the path
`colonyctl workspace deploy` takes: everything is checked before anything starts (the cluster
exists in the caller's organization and can take workspaces, the class, every prompt), with
`colonyctl`'s messages.

Mounted by `api.app.create_app`.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from api.bodies import read_body
from api.context import Principal, shown
from api.errors import ApiError, error_responses
from api.routes import MANAGE, READ, Call, entity_view, entity_views, reads, writes
from api.views import (
    WorkspaceAccepted,
    WorkspaceClassList,
    WorkspaceClassPublished,
    WorkspaceClassPublishRequest,
    WorkspaceDeployRequest,
    WorkspaceList,
    WorkspaceOperationView,
    WorkspaceView,
    accepted_view,
)
from clients.base import not_found
from clients.classes import check_class_conflicts, class_not_found
from clients.errors import InvalidRequestError, NotFoundError, UnavailableError
from clients.parsing import validated
from clients.workspaces import Deployment, TemporalWorkspaces, WorkspaceRequest
from infra.keys import Permission
from models.deploy import resources_from_flags
from models.names import name_problem
from models.operations import FIRST_OPERATION_ID
from models.workspace import WorkspacePhase, WorkspaceSpec, workspace_name_problem
from models.workspace_api import PublishWorkspaceClassRequest
from models.workspace_class import WorkspaceClassSpec, dns_label_problem
from models.workspace_operations import (
    DeleteWorkspaceRequest,
    ResumeWorkspaceRequest,
    SuspendWorkspaceRequest,
)

classes = APIRouter(prefix="/v1/workspace-classes", tags=["workspace classes"])
router = APIRouter(prefix="/v1/workspaces", tags=["workspaces"])
ROUTERS = (
    classes,
    router,
)
"""The routes this module adds to the API (`api.app.entity_routers`)."""

DELETE_REASON = "deleted through the HTTP API"
PUBLISHES = {**error_responses(400, 401, 403, 409, 415, 422, 429, 503)}


def workspace_name(workspace_id: str) -> str:
    """The workspace named by a path id; an id no workspace can have is simply not found."""
    if workspace_name_problem(workspace_id):
        raise not_found("workspace", shown(workspace_id))
    return workspace_id


# --- workspace classes -----------------------------------------------------------------------


@reads(classes, "", WorkspaceClassList, "List workspace classes")
async def list_classes(call: Call = READ) -> WorkspaceClassList:
    """The classes the organization sees: the shared catalog's and its own (resources, endpoints,
    prompts)."""
    catalog = await call.classes().catalog()
    return WorkspaceClassList(items=catalog.classes)


@reads(classes, "/{class_name}", WorkspaceClassSpec, "Get a workspace class")
async def get_class(class_name: str, call: Call = READ) -> WorkspaceClassSpec:
    """One class the organization sees, by its exact, versioned name (another organization's own
    class is not found)."""
    catalog = call.classes()
    if dns_label_problem("workspace class", class_name):
        published = (c.name for c in (await catalog.catalog()).classes)
        raise class_not_found(shown(class_name), published)
    return await catalog.get(class_name)


def _publish_request(
    body: WorkspaceClassPublishRequest, principal: Principal
) -> PublishWorkspaceClassRequest:
    """The publish as the catalog takes it: the organization's own class, or (with Catalog
    Publish) the shared catalog's, with the ServiceTemplates it deploys."""
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
    return PublishWorkspaceClassRequest(
        spec=spec,
        objects=[t.manifest().to_object() for t in body.service_templates],
        organization="" if shared else principal.organization,
    )


@writes(
    classes,
    "POST",
    "",
    WorkspaceClassPublished,
    "Publish a workspace class",
    body=WorkspaceClassPublishRequest,
    status_code=201,
    responses={
        200: {"model": WorkspaceClassPublished, "description": "The identical class was there."},
        **PUBLISHES,
    },
)
async def publish_class(
    response: Response,
    call: Call = MANAGE,
) -> WorkspaceClassPublished:
    """Publish a class: the organization's own (seen by it alone), or, with Catalog Publish, to
    the catalog every organization shares, with the ServiceTemplates it deploys. 201 when
    published, 200 when the identical class was there already; a different class under an
    existing name is a 409 (classes are immutable: a new version is a new name), and so is an
    organization's class under a name the shared catalog has."""
    body = await read_body(call.request, WorkspaceClassPublishRequest)
    publish = _publish_request(body, call.principal)
    catalog = call.classes(publish.organization)
    check_class_conflicts([publish], await catalog.catalog())
    # The catalog is everyone's: another organization's key must not find this one's update.
    key = call.idempotency_key
    request_id = f"{call.organization}/{key}" if key else None
    result = await catalog.publish(publish, request_id=request_id)
    response.status_code = 201 if result.created else 200
    return WorkspaceClassPublished(
        name=publish.spec.name,
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
        else resources_from_flags(body.gpus, body.gpu_model, body.replicas)
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


async def _phase_now(spaces: TemporalWorkspaces, name: str) -> str:
    """The phase of a workspace whose deploy was started: `Pending` as it starts; for a repeated
    request (the first one started it), its phase now when it can be read. Never a failure: the
    answer reports the deploy that was started whatever the workflow answers meanwhile."""
    try:
        return (await spaces.get(name)).phase.value
    except (NotFoundError, UnavailableError):
        return WorkspacePhase.PENDING.value


@writes(router, "POST", "", WorkspaceAccepted, "Deploy a workspace", body=WorkspaceDeployRequest)
async def deploy_workspace(
    response: Response,
    call: Call = MANAGE,
) -> WorkspaceAccepted:
    """Deploy a workspace of a class on one of the organization's clusters: 202 with its first
    operation; poll `GET /v1/workspaces/{name}` until it is `Running` (it waits in line while
    the cluster's GPUs are taken). Every required prompt must be answered (422 naming it);
    secret answers are sealed here before anything starts."""
    body = await read_body(call.request, WorkspaceDeployRequest)
    spec = _spec_of(body, call.organization)
    spaces = call.workspaces()
    started = await spaces.deploy(
        Deployment(spec, secret_values=body.secret_values, request_id=call.idempotency_key)
    )
    # The deploy is the workflow's first operation: its id is known without asking the workflow.
    phase = (
        await _phase_now(spaces, spec.name) if started.repeated else WorkspacePhase.PENDING.value
    )
    response.headers["Location"] = f"{router.prefix}/{spec.name}"
    return WorkspaceAccepted.model_validate(
        {
            "id": spec.name,
            "name": spec.name,
            "class": spec.class_name,
            "cluster": body.cluster,
            "phase": phase,
            "operation_id": FIRST_OPERATION_ID,
            "workflow_id": started.workflow_id,
            "web_ui": call.workflow(started.workflow_id).link,
            "repeated": started.repeated,
        }
    )


ClusterFilter = Annotated[
    str | None, Query(description="Only the workspaces of this cluster (its id).")
]


@reads(router, "", WorkspaceList, "List workspaces")
async def list_workspaces(cluster: ClusterFilter = None, call: Call = READ) -> WorkspaceList:
    """The organization's workspaces (those whose deletion has not completed), optionally of one
    cluster."""
    if cluster is not None and name_problem("cluster", cluster):
        raise InvalidRequestError(f"cluster: {name_problem('cluster', cluster)}")
    spaces = call.workspaces()
    found = await spaces.list_all(cluster=cluster, organization=call.organization)
    return WorkspaceList(items=await entity_views(spaces, found, WorkspaceView.of))


@reads(router, "/{workspace_id}", WorkspaceView, "Get a workspace")
async def get_workspace(workspace_id: str, call: Call = READ) -> WorkspaceView:
    """The workspace: phase, access (URLs or port-forward commands), GPU admission, conditions,
    the failure context of a failed one, and its operations."""
    return await entity_view(call.workspaces(), workspace_name(workspace_id), WorkspaceView.of)


OPERATIONS: list[tuple[str, str, WorkspaceRequest, str, str]] = [
    (
        "DELETE",
        "/{workspace_id}",
        DeleteWorkspaceRequest(reason=DELETE_REASON),
        "Delete a workspace",
        "Delete the workspace: routes, release, values Secret, namespace, then its GPUs go to the\n"
        "next in line. Final; repeating it while it runs returns the same delete, and once it\n"
        "completed the workspace is not found (404).",
    ),
    (
        "POST",
        "/{workspace_id}/suspend",
        SuspendWorkspaceRequest(),
        "Suspend a workspace",
        "Uninstall the release and free the GPUs; the namespace, its volumes and the definition\n"
        "stay. A suspended workspace is a 409.",
    ),
    (
        "POST",
        "/{workspace_id}/resume",
        ResumeWorkspaceRequest(),
        "Resume a workspace",
        "Deploy a suspended (or failed) workspace again, through GPU admission again; any other\n"
        "is a 409.",
    ),
]
"""The operations a caller sends a workspace, one route each: (method, path, what is sent,
summary, the route's documentation)."""


def _operation_route(
    method: str, path: str, operation: WorkspaceRequest, summary: str, doc: str
) -> None:
    """The route that sends a workspace `operation` (its update is the request's `kind`)."""

    async def operate(workspace_id: str, call: Call = MANAGE) -> WorkspaceOperationView:
        name = workspace_name(workspace_id)
        spaces = call.workspaces()
        accepted = await spaces.send(name, operation, request_id=call.idempotency_key)
        return accepted_view(
            WorkspaceOperationView, accepted, spaces.workflow(name), workspace_id=name
        )

    operate.__name__ = f"{operation.kind.value}_workspace"
    operate.__doc__ = doc
    writes(router, method, path, WorkspaceOperationView, summary)(operate)


for _operation in OPERATIONS:
    _operation_route(*_operation)
