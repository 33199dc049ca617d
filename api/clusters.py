"""`/v1/kubernetes/clusters`: clusters, their node pools, nodes, operations and credentials.

Every route is a thin shell over `clients.clusters.TemporalClusters`, the client
`colonyctl` uses in direct mode, acting for the caller's organization: another organization's
cluster is simply not found (404, never 403, so names do not leak). A cluster's id is its name,
unique within the organization until its deletion completes. Long operations answer 202 with what
was queued; the caller polls the cluster or the operation. Requests are checked as `colonyctl`
checks them (the same models; the client runs the same catalog checks before it sends), so a
refused request starts nothing.

Mounted by `api.app.create_app`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Annotated

from fastapi import Query, Response

from api.bodies import read_body
from api.context import shown
from api.routes import (
    CONNECT,
    MANAGE,
    READ,
    WRITES,
    Call,
    entity_router,
    entity_view,
    entity_views,
    reads,
    writes,
)
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
    accepted_view,
    nodes_of,
    status_after,
    status_of,
)
from clients import credentials
from clients.base import WorkflowRef, not_found
from clients.clusters import TemporalClusters, operation_not_found, operations
from clients.errors import ConflictError, NotFoundError, UnavailableError
from clients.parsing import validated
from models.cluster import ClusterSpec, ClusterStatus
from models.names import name_problem
from models.node_pool import NodePoolSpec, NodePoolStatus
from models.operations import (
    AddNodePoolRequest,
    DeleteNodePoolRequest,
    DeleteNodeRequest,
    Operation,
    OperationAccepted,
    ScaleNodePoolRequest,
)
from models.rules import unknown_pool

router, ROUTERS = entity_router("/v1/kubernetes/clusters", "clusters")
"""The routes this module adds to the API (`api.app.entity_routers`)."""

_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,252}$")
_OPERATION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")

Force = Annotated[
    bool, Query(description="Remove nodes even when their drain misses the deadline.")
]


def cluster_name(cluster_id: str) -> str:
    """The cluster named by a path id; an id no cluster can have is simply not found."""
    if name_problem("cluster", cluster_id):
        raise not_found("cluster", shown(cluster_id))
    return cluster_id


def pool_name(status: ClusterStatus, pool: str) -> str:
    """The pool named by a path id; one no pool can be called is not found, as the workflow
    refuses one the cluster does not have (naming the pools it has)."""
    if name_problem("node pool", pool):
        raise unknown_pool_error(status, shown(pool))
    return pool


def unknown_pool_error(status: ClusterStatus, pool: str) -> NotFoundError:
    return NotFoundError(
        f"pool: {unknown_pool(status.name, pool, (p.name for p in status.node_pools))}"
    )


def node_id(cluster: str, node: str) -> str:
    if not _NODE.fullmatch(node):
        raise NotFoundError(f"node: node '{shown(node)}' does not exist in cluster '{cluster}'")
    return node


def operation_id(cluster: str, operation: str) -> str:
    if not _OPERATION.fullmatch(operation):
        raise operation_not_found(cluster, shown(operation))
    return operation


def _accepted(
    clusters: TemporalClusters, name: str, accepted: OperationAccepted
) -> OperationAcceptedView:
    return accepted_view(
        OperationAcceptedView,
        accepted,
        clusters.workflow(name),
        cluster_id=name,
        status=status_after(accepted.kind),
    )


# --- clusters --------------------------------------------------------------------------------


@writes(router, "POST", "", ClusterAccepted, "Create a cluster", body=ClusterCreateRequest)
async def create_cluster(
    response: Response,
    call: Call = MANAGE,
) -> ClusterAccepted:
    """Create a cluster (and its node pools once the control plane is ready): 202 with its id and
    `status: creating`; poll `GET .../clusters/{id}` until it is `ready`."""
    clusters = call.clusters()
    body = await read_body(call.request, ClusterCreateRequest)
    spec = validated(
        ClusterSpec,
        {
            **body.model_dump(include={"name", "location_id", "node_pools", "wait_for_capacity"}),
            "organization": call.organization,
        },
    )
    started = await clusters.create(spec, request_id=call.idempotency_key)
    status = ClusterStatusName.CREATING
    if started.repeated:
        # The first request started it: its status now, when it can be read (the answer says
        # what was started either way, never a failure).
        with contextlib.suppress(UnavailableError):
            status = status_of(await clusters.get(spec.name))
    response.headers["Location"] = f"{router.prefix}/{spec.name}"
    return ClusterAccepted(
        id=spec.name,
        name=spec.name,
        status=status,
        operation_id=started.operation_id,
        workflow_id=started.workflow_id,
        web_ui=call.workflow(started.workflow_id).link,
        repeated=started.repeated,
    )


@reads(router, "", ClusterList, "List clusters")
async def list_clusters(call: Call = READ) -> ClusterList:
    """The organization's clusters (those whose deletion has not completed)."""
    clusters = call.clusters()
    found = await clusters.list_all(organization=call.organization)
    return ClusterList(items=await entity_views(clusters, found, ClusterView.of))


@reads(router, "/{cluster_id}", ClusterView, "Get a cluster")
async def get_cluster(cluster_id: str, call: Call = READ) -> ClusterView:
    """The cluster: `status` (creating, ready, updating, waiting, deleting, failed; `waiting`
    while a pool waits for hosts, its `waitingForHosts` above 0), its pools with
    `count`/`readyCount` and nodes, the running, queued and last finished operations."""
    return await entity_view(call.clusters(), cluster_name(cluster_id), ClusterView.of)


@writes(router, "DELETE", "/{cluster_id}", OperationAcceptedView, "Delete a cluster")
async def delete_cluster(
    cluster_id: str,
    call: Call = MANAGE,
) -> OperationAcceptedView:
    """Delete the cluster, its pools and every node: final. Repeating it while it runs returns the
    same delete; once it completed, the cluster is not found (404)."""
    name = cluster_name(cluster_id)
    clusters = call.clusters()
    return _accepted(clusters, name, await clusters.delete(name, request_id=call.idempotency_key))


# --- node pools ------------------------------------------------------------------------------


@reads(router, "/{cluster_id}/node-pools", NodePoolList, "List node pools")
async def list_node_pools(cluster_id: str, call: Call = READ) -> NodePoolList:
    status = await call.clusters().get(cluster_name(cluster_id))
    return NodePoolList(items=status.node_pools)


@reads(router, "/{cluster_id}/node-pools/{pool}", NodePoolStatus, "Get a node pool")
async def get_node_pool(cluster_id: str, pool: str, call: Call = READ) -> NodePoolStatus:
    status = await call.clusters().get(cluster_name(cluster_id))
    found = status.pool(pool_name(status, pool))
    if found is None:
        raise unknown_pool_error(status, pool)
    return found


@writes(
    router,
    "POST",
    "/{cluster_id}/node-pools",
    OperationAcceptedView,
    "Add a node pool",
    body=NodePoolCreateRequest,
)
async def create_node_pool(
    cluster_id: str,
    call: Call = MANAGE,
) -> OperationAcceptedView:
    """Add a pool to a ready cluster: `{"name": "gpu", "sku": {"gpuModelId": "..."}, "count": 2}`
    (or `{"cpuSku": "..."}`); its `readyCount` rises as hosts are claimed and their nodes join."""
    name = cluster_name(cluster_id)
    body = await read_body(call.request, NodePoolCreateRequest)
    add = AddNodePoolRequest(
        pool=NodePoolSpec.model_validate(body.model_dump(exclude={"wait_for_capacity"})),
        wait_for_capacity=body.wait_for_capacity,
    )
    clusters = call.clusters()
    return _accepted(
        clusters, name, await clusters.send(name, add, request_id=call.idempotency_key)
    )


@writes(
    router,
    "PATCH",
    "/{cluster_id}/node-pools/{pool}",
    OperationAcceptedView,
    "Scale a node pool",
    body=NodePoolScaleRequest,
)
async def scale_node_pool(
    cluster_id: str,
    pool: str,
    call: Call = MANAGE,
) -> OperationAcceptedView:
    """Set the pool's `count` (1 to 100); scaling down drains the nodes it removes first."""
    name = cluster_name(cluster_id)
    body = await read_body(call.request, NodePoolScaleRequest)
    clusters = call.clusters()
    status = await clusters.get(name)
    scale = validated(
        ScaleNodePoolRequest,
        {
            "pool": pool_name(status, pool),
            "count": body.count,
            "force": body.force,
            "waitForCapacity": body.wait_for_capacity,
        },
    )
    return _accepted(
        clusters, name, await clusters.send(name, scale, request_id=call.idempotency_key)
    )


writes(
    router,
    "POST",
    "/{cluster_id}/node-pools/{pool}",
    OperationAcceptedView,
    "Scale a node pool (POST)",
    body=NodePoolScaleRequest,
    name="scale_node_pool_post",
    description="The same as PATCH, for clients that only POST.",
)(scale_node_pool)


@writes(
    router, "DELETE", "/{cluster_id}/node-pools/{pool}", OperationAcceptedView, "Delete a node pool"
)
async def delete_node_pool(
    cluster_id: str,
    pool: str,
    force: Force = False,
    call: Call = MANAGE,
) -> OperationAcceptedView:
    """Drain and remove every node of the pool, then the pool."""
    name = cluster_name(cluster_id)
    clusters = call.clusters()
    status = await clusters.get(name)
    delete = DeleteNodePoolRequest(pool=pool_name(status, pool), force=force)
    return _accepted(
        clusters, name, await clusters.send(name, delete, request_id=call.idempotency_key)
    )


# --- nodes -----------------------------------------------------------------------------------


@reads(router, "/{cluster_id}/nodes", NodeList, "List nodes")
async def list_nodes(cluster_id: str, call: Call = READ) -> NodeList:
    """Every node: `registered` while its host boots, `joined` once in the cluster (then
    `kubernetesStatus` is its Ready condition), or being cordoned, drained, removed."""
    status = await call.clusters().get(cluster_name(cluster_id))
    return NodeList(items=nodes_of(status))


@reads(router, "/{cluster_id}/nodes/{node}", NodeView, "Get a node")
async def get_node(cluster_id: str, node: str, call: Call = READ) -> NodeView:
    name = cluster_name(cluster_id)
    node = node_id(name, node)
    status = await call.clusters().get(name)
    found = next((n for n in nodes_of(status) if node in (n.name, n.host_id)), None)
    if found is None:
        raise NotFoundError(f"node: node '{node}' does not exist in cluster '{name}'")
    return found


@writes(router, "DELETE", "/{cluster_id}/nodes/{node}", OperationAcceptedView, "Delete a node")
async def delete_node(
    cluster_id: str,
    node: str,
    drain: Annotated[bool, Query(description="Drain it first (the default).")] = True,
    force: Force = False,
    call: Call = MANAGE,
) -> OperationAcceptedView:
    """Delete one node (drained first unless `?drain=false`); its pool's count drops by one, so it
    is not replaced. A pool's last node cannot be deleted on its own: delete the pool."""
    name = cluster_name(cluster_id)
    delete = DeleteNodeRequest(node=node_id(name, node), drain=drain, force=force)
    clusters = call.clusters()
    return _accepted(
        clusters, name, await clusters.send(name, delete, request_id=call.idempotency_key)
    )


# --- operations ------------------------------------------------------------------------------


def _operation_view(operation: Operation, workflow: WorkflowRef) -> OperationView:
    return OperationView.model_validate(
        {**operation.model_dump(), "workflow_id": workflow.workflow_id, "web_ui": workflow.link}
    )


@reads(router, "/{cluster_id}/operations", OperationList, "List operations")
async def list_operations(cluster_id: str, call: Call = READ) -> OperationList:
    """The last finished (up to 20), the running and the queued operations, oldest first."""
    name = cluster_name(cluster_id)
    clusters = call.clusters()
    status = await clusters.get(name)
    workflow = clusters.workflow(name)
    return OperationList(items=[_operation_view(op, workflow) for op in operations(status)])


@reads(router, "/{cluster_id}/operations/{operation}", OperationView, "Get an operation")
async def get_operation(cluster_id: str, operation: str, call: Call = READ) -> OperationView:
    """One operation: its request, state, times, progress (per node while it drains) and reason."""
    name = cluster_name(cluster_id)
    clusters = call.clusters()
    found = await clusters.get_operation(name, operation_id(name, operation))
    return _operation_view(found, clusters.workflow(name))


@writes(
    router,
    "POST",
    "/{cluster_id}/operations/{operation}/cancel",
    OperationView,
    "Cancel an operation",
    body=OperationCancelRequest,
    body_required=False,
    status_code=200,
)
async def cancel_operation(
    cluster_id: str,
    operation: str,
    call: Call = MANAGE,
) -> OperationView:
    """Drop a queued operation, or interrupt the running one (its compensation runs); answers
    once it has settled. A delete cannot be cancelled."""
    name = cluster_name(cluster_id)
    op = operation_id(name, operation)
    body = await read_body(call.request, OperationCancelRequest, optional=True)
    clusters = call.clusters()
    cancelled = await clusters.cancel_operation(
        name, op, reason=body.reason, request_id=call.idempotency_key
    )
    return _operation_view(cancelled, clusters.workflow(name))


# --- credentials -----------------------------------------------------------------------------

NO_STORE = {"Cache-Control": "no-store"}
"""A credential is not for caches on the way."""


async def _issue(call: Call, response: Response, cluster_id: str) -> tuple[str, credentials.Issued]:
    """A one-hour token of the cluster, issued by the cluster itself (TokenRequest) from this
    process: it never passes through a workflow. Not for caches on the way."""
    name = cluster_name(cluster_id)
    status = await call.clusters().get(name)
    ref = status.kubeconfig
    if ref is None:
        raise ConflictError(
            f"cluster: cluster '{name}' has no kubeconfig yet (it is {status_of(status).value})"
        )
    management = call.context.settings.require_management_kubeconfig()
    issued = await asyncio.to_thread(
        credentials.issue, management, name, ref.namespace, ref.secret_name
    )
    response.headers.update(NO_STORE)
    return name, issued


@reads(
    router,
    "/{cluster_id}/kubeconfig",
    Kubeconfig,
    "Get a kubeconfig (token embedded)",
    responses=WRITES,
)
async def get_kubeconfig(response: Response, cluster_id: str, call: Call = CONNECT) -> Kubeconfig:
    """A kubeconfig with a cluster token embedded (cluster-admin); it stops working when the
    token expires, after one hour."""
    name, issued = await _issue(call, response, cluster_id)
    return Kubeconfig.model_validate(
        credentials.kubeconfig_for(name, issued.server, {"token": issued.token})
    )


@writes(
    router,
    "POST",
    "/{cluster_id}/token",
    ExecCredential,
    "Get a cluster token (ExecCredential)",
    status_code=200,
)
async def create_token(response: Response, cluster_id: str, call: Call = CONNECT) -> ExecCredential:
    """A `client.authentication.k8s.io/v1` ExecCredential: a one-hour cluster-admin token only
    this cluster accepts, for your own credential plugin."""
    _, issued = await _issue(call, response, cluster_id)
    return ExecCredential.model_validate(credentials.exec_credential(issued.token, issued.expiry))
