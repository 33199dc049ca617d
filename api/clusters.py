"""`/v1/kubernetes/clusters`: clusters, their node pools, nodes, operations and credentials.

Every route turns `(the caller's organization, the cluster id in the path)` into the cluster's
workflow through `starter.client`, the same functions `colonyctl` calls, with the caller's
organization: another organization's cluster is simply not found (404, never 403, so names do not
leak). A cluster's id is its name, unique within the organization until its deletion completes.
Long operations answer 202 with what was queued; the caller polls the cluster or the operation.
Requests are checked as `colonyctl` checks them (the same models, the same catalog checks in
`starter.checks`), so a refused request starts nothing.

Mounted by `api.app.create_app`.
"""

from __future__ import annotations

import asyncio
import re
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from temporalio.client import Client

from api.bodies import body_spec, read_body
from api.context import ApiContext, Principal, context, requires
from api.errors import error_responses
from api.keys import Permission
from api.views import (
    ClusterAccepted,
    ClusterCreateRequest,
    ClusterList,
    ClusterStatusName,
    ClusterView,
    ExecCredential,
    Kubeconfig,
    NodeList,
    NodePoolCreateRequest,
    NodePoolList,
    NodePoolScaleRequest,
    NodeView,
    OperationAcceptedView,
    OperationCancelRequest,
    OperationList,
    OperationView,
    nodes_of,
    status_after,
    status_of,
)
from models.cluster import ClusterSpec, ClusterStatus, cluster_workflow_id
from models.names import name_problem
from models.node_pool import NodePoolSpec, NodePoolStatus
from models.operations import (
    AddNodePoolRequest,
    DeleteClusterRequest,
    DeleteNodePoolRequest,
    DeleteNodeRequest,
    Operation,
    OperationAccepted,
    ScaleNodePoolRequest,
)
from models.rules import unknown_pool
from starter import checks, credentials
from starter import client as colony
from starter.client import WorkflowRef
from starter.errors import ConflictError, NotFoundError
from starter.parsing import validated

router = APIRouter(prefix="/v1/kubernetes/clusters", tags=["clusters"])

LIST_CONCURRENCY = 8
"""Status queries in flight at once while listing: each is one cheap query, but an organization
with hundreds of clusters must not open hundreds of calls at once."""
_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,252}$")
_OPERATION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_SHOWN = 80
"""Characters of an unknown id echoed in a message."""

READ = Depends(requires(Permission.READ))
CONNECT = Depends(requires(Permission.CONNECT))
MANAGE = Depends(requires(Permission.MANAGE))

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=200,
        pattern=r"^[\x21-\x7e]+$",
        description="Retries with the same key return the first request's operation instead of "
        "queueing another (a create: the same cluster).",
    ),
]
Force = Annotated[
    bool, Query(description="Remove nodes even when their drain misses the deadline.")
]

READS = error_responses(401, 403, 404, 422, 429, 503)
WRITES = error_responses(400, 401, 403, 404, 409, 415, 422, 429, 503)


def _shown(text: str) -> str:
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def cluster_name(cluster_id: str) -> str:
    """The cluster named by a path id; an id no cluster can have is simply not found."""
    if name_problem("cluster", cluster_id):
        raise colony.not_found(_shown(cluster_id))
    return cluster_id


def pool_name(status: ClusterStatus, pool: str) -> str:
    """The pool named by a path id; one no pool can be called is not found, as the workflow
    refuses one the cluster does not have (naming the pools it has)."""
    if name_problem("node pool", pool):
        raise unknown_pool_error(status, _shown(pool))
    return pool


def unknown_pool_error(status: ClusterStatus, pool: str) -> NotFoundError:
    return NotFoundError(
        f"pool: {unknown_pool(status.name, pool, (p.name for p in status.node_pools))}"
    )


def node_id(cluster: str, node: str) -> str:
    if not _NODE.fullmatch(node):
        raise NotFoundError(f"node: node '{_shown(node)}' does not exist in cluster '{cluster}'")
    return node


def operation_id(cluster: str, operation: str) -> str:
    if not _OPERATION.fullmatch(operation):
        raise NotFoundError(
            f"operation: operation '{_shown(operation)}' not found in cluster '{cluster}'"
        )
    return operation


def _workflow(ctx: ApiContext, principal: Principal, name: str) -> WorkflowRef:
    return ctx.workflow(cluster_workflow_id(name, principal.organization))


async def _status(ctx: ApiContext, principal: Principal, name: str) -> tuple[Client, ClusterStatus]:
    client = await ctx.temporal()
    status = await colony.query_status(client, name, organization=principal.organization)
    return client, status


async def _send(
    ctx: ApiContext,
    principal: Principal,
    name: str,
    update: str,
    request: AddNodePoolRequest
    | ScaleNodePoolRequest
    | DeleteNodePoolRequest
    | DeleteNodeRequest
    | DeleteClusterRequest,
    idempotency_key: str | None,
    client: Client | None = None,
) -> OperationAcceptedView:
    client = client or await ctx.temporal()
    accepted: OperationAccepted = await colony.send(
        client,
        name,
        update,
        request,
        request_id=idempotency_key,
        organization=principal.organization,
    )
    workflow = _workflow(ctx, principal, name)
    return OperationAcceptedView(
        cluster_id=name,
        status=status_after(accepted.kind),
        operation_id=accepted.operation_id,
        kind=accepted.kind,
        position=accepted.position,
        workflow_id=workflow.workflow_id,
        web_ui=workflow.link,
    )


# --- clusters --------------------------------------------------------------------------------


@router.post(
    "",
    status_code=202,
    response_model=ClusterAccepted,
    response_model_exclude_none=True,
    responses=WRITES,
    openapi_extra=body_spec(ClusterCreateRequest),
    summary="Create a cluster",
)
async def create_cluster(
    request: Request,
    response: Response,
    idempotency_key: IdempotencyKey = None,
    principal: Principal = MANAGE,
) -> ClusterAccepted:
    """Create a cluster (and its node pools once the control plane is ready): 202 with its id and
    `status: creating`; poll `GET .../clusters/{id}` until it is `ready`."""
    ctx = context(request)
    body = await read_body(request, ClusterCreateRequest)
    spec = validated(
        ClusterSpec,
        {
            **body.model_dump(include={"name", "location_id", "node_pools", "wait_for_capacity"}),
            "organization": principal.organization,
        },
    )
    await checks.check_cluster(ctx.settings, spec)
    client = await ctx.temporal()
    started = await colony.start_cluster(client, ctx.settings, spec, request_id=idempotency_key)
    status = ClusterStatusName.CREATING
    if started.repeated:
        status = status_of(
            await colony.query_status(client, spec.name, organization=principal.organization)
        )
    response.headers["Location"] = f"{router.prefix}/{spec.name}"
    return ClusterAccepted(
        id=spec.name,
        name=spec.name,
        status=status,
        operation_id=started.operation_id,
        workflow_id=started.workflow_id,
        web_ui=ctx.workflow(started.workflow_id).link,
        repeated=started.repeated,
    )


@router.get(
    "",
    response_model=ClusterList,
    response_model_exclude_none=True,
    responses=READS,
    summary="List clusters",
)
async def list_clusters(request: Request, principal: Principal = READ) -> ClusterList:
    """The organization's clusters (those whose deletion has not completed)."""
    ctx = context(request)
    client = await ctx.temporal()
    found = await colony.list_clusters(client, organization=principal.organization)
    limit = asyncio.Semaphore(LIST_CONCURRENCY)

    async def view(name: str) -> ClusterView | None:
        async with limit:
            try:
                status = await colony.query_status(
                    client, name, organization=principal.organization
                )
            except NotFoundError:
                return None  # deleted between the list and the query
        workflow = _workflow(ctx, principal, name)
        return ClusterView.of(status, workflow.workflow_id, workflow.link)

    views = await asyncio.gather(*(view(summary.name) for summary in found))
    return ClusterList(items=[v for v in views if v is not None])


@router.get(
    "/{cluster_id}",
    response_model=ClusterView,
    response_model_exclude_none=True,
    responses=READS,
    summary="Get a cluster",
)
async def get_cluster(
    request: Request, cluster_id: str, principal: Principal = READ
) -> ClusterView:
    """The cluster: `status` (creating, ready, updating, waiting, deleting, failed; `waiting`
    while a pool waits for hosts, its `waitingForHosts` above 0), its pools with
    `count`/`readyCount` and nodes, the running, queued and last finished operations."""
    ctx = context(request)
    name = cluster_name(cluster_id)
    _, status = await _status(ctx, principal, name)
    workflow = _workflow(ctx, principal, name)
    return ClusterView.of(status, workflow.workflow_id, workflow.link)


@router.delete(
    "/{cluster_id}",
    status_code=202,
    response_model=OperationAcceptedView,
    response_model_exclude_none=True,
    responses=WRITES,
    summary="Delete a cluster",
)
async def delete_cluster(
    request: Request,
    cluster_id: str,
    idempotency_key: IdempotencyKey = None,
    principal: Principal = MANAGE,
) -> OperationAcceptedView:
    """Delete the cluster, its pools and every node: final. Repeating it while it runs returns the
    same delete; once it completed, the cluster is not found (404)."""
    name = cluster_name(cluster_id)
    return await _send(
        context(request), principal, name, "delete_cluster", DeleteClusterRequest(), idempotency_key
    )


# --- node pools ------------------------------------------------------------------------------


@router.get(
    "/{cluster_id}/node-pools",
    response_model=NodePoolList,
    response_model_exclude_none=True,
    responses=READS,
    summary="List node pools",
)
async def list_node_pools(
    request: Request, cluster_id: str, principal: Principal = READ
) -> NodePoolList:
    _, status = await _status(context(request), principal, cluster_name(cluster_id))
    return NodePoolList(items=status.node_pools)


@router.get(
    "/{cluster_id}/node-pools/{pool}",
    response_model=NodePoolStatus,
    response_model_exclude_none=True,
    responses=READS,
    summary="Get a node pool",
)
async def get_node_pool(
    request: Request, cluster_id: str, pool: str, principal: Principal = READ
) -> NodePoolStatus:
    name = cluster_name(cluster_id)
    _, status = await _status(context(request), principal, name)
    found = status.pool(pool_name(status, pool))
    if found is None:
        raise unknown_pool_error(status, pool)
    return found


@router.post(
    "/{cluster_id}/node-pools",
    status_code=202,
    response_model=OperationAcceptedView,
    response_model_exclude_none=True,
    responses=WRITES,
    openapi_extra=body_spec(NodePoolCreateRequest),
    summary="Add a node pool",
)
async def create_node_pool(
    request: Request,
    cluster_id: str,
    idempotency_key: IdempotencyKey = None,
    principal: Principal = MANAGE,
) -> OperationAcceptedView:
    """Add a pool to a ready cluster: `{"name": "gpu", "sku": {"gpuModelId": "..."}, "count": 2}`
    (or `{"cpuSku": "..."}`); its `readyCount` rises as hosts are claimed and their nodes join."""
    ctx = context(request)
    name = cluster_name(cluster_id)
    body = await read_body(request, NodePoolCreateRequest)
    add = AddNodePoolRequest(
        pool=NodePoolSpec.model_validate(body.model_dump(exclude={"wait_for_capacity"})),
        wait_for_capacity=body.wait_for_capacity,
    )
    client, status = await _status(ctx, principal, name)
    await checks.check_new_pool(
        ctx.settings, status, add.pool, wait_for_capacity=add.wait_for_capacity
    )
    return await _send(ctx, principal, name, "add_node_pool", add, idempotency_key, client)


async def _scale(
    request: Request, cluster_id: str, pool: str, idempotency_key: str | None, principal: Principal
) -> OperationAcceptedView:
    ctx = context(request)
    name = cluster_name(cluster_id)
    body = await read_body(request, NodePoolScaleRequest)
    client, status = await _status(ctx, principal, name)
    pool = pool_name(status, pool)
    scale = validated(
        ScaleNodePoolRequest,
        {
            "pool": pool,
            "count": body.count,
            "force": body.force,
            "waitForCapacity": body.wait_for_capacity,
        },
    )
    await checks.check_scale(ctx.settings, status, scale)
    return await _send(ctx, principal, name, "scale_node_pool", scale, idempotency_key, client)


@router.patch(
    "/{cluster_id}/node-pools/{pool}",
    status_code=202,
    response_model=OperationAcceptedView,
    response_model_exclude_none=True,
    responses=WRITES,
    openapi_extra=body_spec(NodePoolScaleRequest),
    summary="Scale a node pool",
)
async def scale_node_pool(
    request: Request,
    cluster_id: str,
    pool: str,
    idempotency_key: IdempotencyKey = None,
    principal: Principal = MANAGE,
) -> OperationAcceptedView:
    """Set the pool's `count` (1 to 100); scaling down drains the nodes it removes first."""
    return await _scale(request, cluster_id, pool, idempotency_key, principal)


@router.post(
    "/{cluster_id}/node-pools/{pool}",
    status_code=202,
    response_model=OperationAcceptedView,
    response_model_exclude_none=True,
    responses=WRITES,
    openapi_extra=body_spec(NodePoolScaleRequest),
    summary="Scale a node pool (POST)",
)
async def scale_node_pool_post(
    request: Request,
    cluster_id: str,
    pool: str,
    idempotency_key: IdempotencyKey = None,
    principal: Principal = MANAGE,
) -> OperationAcceptedView:
    """The same as PATCH, for clients that only POST."""
    return await _scale(request, cluster_id, pool, idempotency_key, principal)


@router.delete(
    "/{cluster_id}/node-pools/{pool}",
    status_code=202,
    response_model=OperationAcceptedView,
    response_model_exclude_none=True,
    responses=WRITES,
    summary="Delete a node pool",
)
async def delete_node_pool(
    request: Request,
    cluster_id: str,
    pool: str,
    force: Force = False,
    idempotency_key: IdempotencyKey = None,
    principal: Principal = MANAGE,
) -> OperationAcceptedView:
    """Drain and remove every node of the pool, then the pool."""
    ctx = context(request)
    name = cluster_name(cluster_id)
    client, status = await _status(ctx, principal, name)
    request_model = DeleteNodePoolRequest(pool=pool_name(status, pool), force=force)
    return await _send(
        ctx, principal, name, "delete_node_pool", request_model, idempotency_key, client
    )


# --- nodes -----------------------------------------------------------------------------------


@router.get(
    "/{cluster_id}/nodes",
    response_model=NodeList,
    response_model_exclude_none=True,
    responses=READS,
    summary="List nodes",
)
async def list_nodes(request: Request, cluster_id: str, principal: Principal = READ) -> NodeList:
    """Every node: `registered` while its host boots, `joined` once in the cluster (then
    `kubernetesStatus` is its Ready condition), or being cordoned, drained, removed."""
    _, status = await _status(context(request), principal, cluster_name(cluster_id))
    return NodeList(items=nodes_of(status))


@router.get(
    "/{cluster_id}/nodes/{node}",
    response_model=NodeView,
    response_model_exclude_none=True,
    responses=READS,
    summary="Get a node",
)
async def get_node(
    request: Request, cluster_id: str, node: str, principal: Principal = READ
) -> NodeView:
    name = cluster_name(cluster_id)
    node = node_id(name, node)
    _, status = await _status(context(request), principal, name)
    found = next((n for n in nodes_of(status) if node in (n.name, n.host_id)), None)
    if found is None:
        raise NotFoundError(f"node: node '{node}' does not exist in cluster '{name}'")
    return found


@router.delete(
    "/{cluster_id}/nodes/{node}",
    status_code=202,
    response_model=OperationAcceptedView,
    response_model_exclude_none=True,
    responses=WRITES,
    summary="Delete a node",
)
async def delete_node(
    request: Request,
    cluster_id: str,
    node: str,
    drain: Annotated[bool, Query(description="Drain it first (the default).")] = True,
    force: Force = False,
    idempotency_key: IdempotencyKey = None,
    principal: Principal = MANAGE,
) -> OperationAcceptedView:
    """Delete one node (drained first unless `?drain=false`); its pool's count drops by one, so it
    is not replaced. A pool's last node cannot be deleted on its own: delete the pool."""
    name = cluster_name(cluster_id)
    request_model = DeleteNodeRequest(node=node_id(name, node), drain=drain, force=force)
    return await _send(
        context(request), principal, name, "delete_node", request_model, idempotency_key
    )


# --- operations ------------------------------------------------------------------------------


def _operation_view(operation: Operation, workflow: WorkflowRef) -> OperationView:
    return OperationView.model_validate(
        {**operation.model_dump(), "workflow_id": workflow.workflow_id, "web_ui": workflow.link}
    )


@router.get(
    "/{cluster_id}/operations",
    response_model=OperationList,
    response_model_exclude_none=True,
    responses=READS,
    summary="List operations",
)
async def list_operations(
    request: Request, cluster_id: str, principal: Principal = READ
) -> OperationList:
    """The last finished (up to 20), the running and the queued operations, oldest first."""
    ctx = context(request)
    name = cluster_name(cluster_id)
    _, status = await _status(ctx, principal, name)
    workflow = _workflow(ctx, principal, name)
    return OperationList(items=[_operation_view(op, workflow) for op in colony.operations(status)])


@router.get(
    "/{cluster_id}/operations/{operation}",
    response_model=OperationView,
    response_model_exclude_none=True,
    responses=READS,
    summary="Get an operation",
)
async def get_operation(
    request: Request, cluster_id: str, operation: str, principal: Principal = READ
) -> OperationView:
    """One operation: its request, state, times, progress (per node while it drains) and reason."""
    ctx = context(request)
    name = cluster_name(cluster_id)
    found = await colony.get_operation(
        await ctx.temporal(),
        name,
        operation_id(name, operation),
        organization=principal.organization,
    )
    return _operation_view(found, _workflow(ctx, principal, name))


@router.post(
    "/{cluster_id}/operations/{operation}/cancel",
    response_model=OperationView,
    response_model_exclude_none=True,
    responses=WRITES,
    openapi_extra=body_spec(OperationCancelRequest, required=False),
    summary="Cancel an operation",
)
async def cancel_operation(
    request: Request,
    cluster_id: str,
    operation: str,
    idempotency_key: IdempotencyKey = None,
    principal: Principal = MANAGE,
) -> OperationView:
    """Drop a queued operation, or interrupt the running one (its compensation runs); answers
    once it has settled. A delete cannot be cancelled."""
    ctx = context(request)
    name = cluster_name(cluster_id)
    op = operation_id(name, operation)
    body = await read_body(request, OperationCancelRequest, optional=True)
    cancelled = await colony.cancel_operation(
        await ctx.temporal(),
        name,
        op,
        reason=body.reason,
        request_id=idempotency_key,
        organization=principal.organization,
    )
    return _operation_view(cancelled, _workflow(ctx, principal, name))


# --- credentials -----------------------------------------------------------------------------


async def _issue(ctx: ApiContext, principal: Principal, name: str) -> credentials.Issued:
    """A one-hour token of the cluster, issued by the cluster itself (TokenRequest) from this
    process: it never passes through a workflow."""
    _, status = await _status(ctx, principal, name)
    ref = status.kubeconfig
    if ref is None:
        raise ConflictError(
            f"cluster: cluster '{name}' has no kubeconfig yet (it is {status_of(status).value})"
        )
    management = ctx.settings.require_management_kubeconfig()
    return await asyncio.to_thread(
        credentials.issue, management, name, ref.namespace, ref.secret_name
    )


NO_STORE = {"Cache-Control": "no-store"}
"""A credential is not for caches on the way."""


@router.get(
    "/{cluster_id}/kubeconfig",
    response_model=Kubeconfig,
    response_model_exclude_none=True,
    responses=WRITES,
    summary="Get a kubeconfig (token embedded)",
)
async def get_kubeconfig(
    request: Request, response: Response, cluster_id: str, principal: Principal = CONNECT
) -> Kubeconfig:
    """A kubeconfig with a cluster token embedded (cluster-admin); it stops working when the
    token expires, after one hour."""
    name = cluster_name(cluster_id)
    issued = await _issue(context(request), principal, name)
    response.headers.update(NO_STORE)
    return Kubeconfig.model_validate(
        credentials.kubeconfig_for(name, issued.server, {"token": issued.token})
    )


@router.post(
    "/{cluster_id}/token",
    response_model=ExecCredential,
    response_model_exclude_none=True,
    responses=WRITES,
    summary="Get a cluster token (ExecCredential)",
)
async def create_token(
    request: Request, response: Response, cluster_id: str, principal: Principal = CONNECT
) -> ExecCredential:
    """A `client.authentication.k8s.io/v1` ExecCredential: a one-hour cluster-admin token only
    this cluster accepts, for your own credential plugin."""
    name = cluster_name(cluster_id)
    issued = await _issue(context(request), principal, name)
    response.headers.update(NO_STORE)
    return ExecCredential.model_validate(credentials.exec_credential(issued.token, issued.expiry))
