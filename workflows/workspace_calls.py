"""The workspace side's activities (management cluster objects of workspaces, child cluster
namespaces and routes, Temporal itself), declared once (see `workflows/kit/activity.py` for the
rules: heartbeats, `WAIT_CANCELLATION_COMPLETED`, retries, summaries shown in the Web UI)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from temporalio import workflow

from workflows.kit.activity import ActivityCall
from workflows.kit.until import until

with workflow.unsafe.imports_passed_through():
    from models.workspace_api import (
        ApplyRoutesRequest,
        ApplyRoutesResult,
        ApplyServiceSetRequest,
        ApplyServiceSetResult,
        AwaitClusterCreatedRequest,
        AwaitClusterCreatedResult,
        AwaitRoutesRequest,
        AwaitRoutesResult,
        AwaitServiceSetRequest,
        AwaitServiceSetResult,
        AwaitWorkflowsClosedRequest,
        AwaitWorkflowsClosedResult,
        CheckServiceTemplateRequest,
        CheckServiceTemplateResult,
        DeleteNamespaceRequest,
        DeleteNamespaceResult,
        DeleteRoutesRequest,
        DeleteRoutesResult,
        DeleteServiceSetRequest,
        DeleteServiceSetResult,
        DeleteValuesSecretRequest,
        DeleteValuesSecretResult,
        EnsureNamespaceRequest,
        EnsureNamespaceResult,
        FindServiceSetsRequest,
        FindServiceSetsResult,
        FindTenantGatewayRequest,
        FindTenantGatewayResult,
        GetWorkspaceClassRequest,
        GetWorkspaceClassResult,
        ListWorkflowsRequest,
        ListWorkflowsResult,
        ListWorkspaceClassesRequest,
        ListWorkspaceClassesResult,
        PublishObjectsRequest,
        PublishObjectsResult,
        PublishWorkspaceClassRequest,
        PublishWorkspaceClassResult,
        ReadGpuInventoryRequest,
        ReadGpuInventoryResult,
        RecentEventsRequest,
        RecentEventsResult,
        ServiceSetOutcome,
        SignalWithStartRequest,
        SignalWithStartResult,
        WorkspaceActivity,
        WriteValuesSecretRequest,
        WriteValuesSecretResult,
    )

A = WorkspaceActivity

GET_WORKSPACE_CLASS = ActivityCall[GetWorkspaceClassRequest, GetWorkspaceClassResult](
    A.GET_WORKSPACE_CLASS, GetWorkspaceClassResult, lambda r: f"read WorkspaceClass {r.name}"
)
LIST_WORKSPACE_CLASSES = ActivityCall[ListWorkspaceClassesRequest, ListWorkspaceClassesResult](
    A.LIST_WORKSPACE_CLASSES, ListWorkspaceClassesResult, lambda r: "list WorkspaceClasses"
)
PUBLISH_WORKSPACE_CLASS = ActivityCall[PublishWorkspaceClassRequest, PublishWorkspaceClassResult](
    A.PUBLISH_WORKSPACE_CLASS,
    PublishWorkspaceClassResult,
    lambda r: f"publish WorkspaceClass {r.spec.name}",
)
PUBLISH_OBJECTS = ActivityCall[PublishObjectsRequest, PublishObjectsResult](
    A.PUBLISH_OBJECTS,
    PublishObjectsResult,
    lambda r: "publish " + ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in r.objects),
)
CHECK_SERVICE_TEMPLATE = ActivityCall[CheckServiceTemplateRequest, CheckServiceTemplateResult](
    A.CHECK_SERVICE_TEMPLATE,
    CheckServiceTemplateResult,
    lambda r: f"check ServiceTemplate {r.namespace}/{r.name}",
)
APPLY_SERVICE_SET = ActivityCall[ApplyServiceSetRequest, ApplyServiceSetResult](
    A.APPLY_SERVICE_SET,
    ApplyServiceSetResult,
    lambda r: (
        f"apply ServiceSet {r.namespace}/{r.name} on {r.cluster_deployment}: "
        + ", ".join(f"{s.name} ({s.template})" for s in r.services)
    ),
)
AWAIT_SERVICE_SET = ActivityCall[AwaitServiceSetRequest, AwaitServiceSetResult](
    A.AWAIT_SERVICE_SET,
    AwaitServiceSetResult,
    lambda r: f"wait until {r.service} of ServiceSet {r.name} is Deployed",
    schedule_to_close=None,
)
DELETE_SERVICE_SET = ActivityCall[DeleteServiceSetRequest, DeleteServiceSetResult](
    A.DELETE_SERVICE_SET,
    DeleteServiceSetResult,
    lambda r: (
        f"delete ServiceSet {r.namespace}/{r.name}"
        + (" and wait until its releases are uninstalled" if r.wait_until else "")
    ),
    schedule_to_close=None,
)
FIND_SERVICE_SETS = ActivityCall[FindServiceSetsRequest, FindServiceSetsResult](
    A.FIND_SERVICE_SETS,
    FindServiceSetsResult,
    lambda r: f"find ServiceSets installing {r.template} on {r.cluster_deployment}",
)
WRITE_VALUES_SECRET = ActivityCall[WriteValuesSecretRequest, WriteValuesSecretResult](
    A.WRITE_VALUES_SECRET,
    WriteValuesSecretResult,
    lambda r: f"write the secret values of workspace {r.workspace} to Secret {r.name}",
)
DELETE_VALUES_SECRET = ActivityCall[DeleteValuesSecretRequest, DeleteValuesSecretResult](
    A.DELETE_VALUES_SECRET,
    DeleteValuesSecretResult,
    lambda r: f"delete Secret {r.namespace}/{r.name}",
)
ENSURE_NAMESPACE = ActivityCall[EnsureNamespaceRequest, EnsureNamespaceResult](
    A.ENSURE_NAMESPACE, EnsureNamespaceResult, lambda r: f"create namespace {r.name}"
)
DELETE_NAMESPACE = ActivityCall[DeleteNamespaceRequest, DeleteNamespaceResult](
    A.DELETE_NAMESPACE,
    DeleteNamespaceResult,
    lambda r: f"delete namespace {r.name}",
    schedule_to_close=None,
)
READ_GPU_INVENTORY = ActivityCall[ReadGpuInventoryRequest, ReadGpuInventoryResult](
    A.READ_GPU_INVENTORY, ReadGpuInventoryResult, lambda r: "read the cluster's GPU inventory"
)
FIND_TENANT_GATEWAY = ActivityCall[FindTenantGatewayRequest, FindTenantGatewayResult](
    A.FIND_TENANT_GATEWAY, FindTenantGatewayResult, lambda r: "find the tenant gateway"
)
APPLY_ROUTES = ActivityCall[ApplyRoutesRequest, ApplyRoutesResult](
    A.APPLY_ROUTES,
    ApplyRoutesResult,
    lambda r: "create routes " + ", ".join(f"{x.kind}/{x.name}" for x in r.routes),
)
AWAIT_ROUTES = ActivityCall[AwaitRoutesRequest, AwaitRoutesResult](
    A.AWAIT_ROUTES,
    AwaitRoutesResult,
    lambda r: "wait until the gateway accepts " + ", ".join(x.name for x in r.routes),
    schedule_to_close=None,
)
DELETE_ROUTES = ActivityCall[DeleteRoutesRequest, DeleteRoutesResult](
    A.DELETE_ROUTES,
    DeleteRoutesResult,
    lambda r: "delete routes " + ", ".join(x.name for x in r.routes),
)
RECENT_EVENTS = ActivityCall[RecentEventsRequest, RecentEventsResult](
    A.RECENT_EVENTS, RecentEventsResult, lambda r: f"read recent events in {r.namespace}"
)
SIGNAL_WITH_START = ActivityCall[SignalWithStartRequest, SignalWithStartResult](
    A.SIGNAL_WITH_START,
    SignalWithStartResult,
    lambda r: f"signal {r.signal} to {r.workflow_id} (starting it if needed)",
)
LIST_WORKFLOWS = ActivityCall[ListWorkflowsRequest, ListWorkflowsResult](
    A.LIST_WORKFLOWS, ListWorkflowsResult, lambda r: f"list workflows where {r.query}"
)
AWAIT_WORKFLOWS_CLOSED = ActivityCall[AwaitWorkflowsClosedRequest, AwaitWorkflowsClosedResult](
    A.AWAIT_WORKFLOWS_CLOSED,
    AwaitWorkflowsClosedResult,
    lambda r: f"wait until {len(r.workflow_ids)} workflow(s) finished",
    schedule_to_close=None,
)
AWAIT_CLUSTER_CREATED = ActivityCall[AwaitClusterCreatedRequest, AwaitClusterCreatedResult](
    A.AWAIT_CLUSTER_CREATED,
    AwaitClusterCreatedResult,
    lambda r: f"wait until cluster {r.cluster} has finished creating",
    schedule_to_close=None,
)


async def deploy_service_set(
    request: ApplyServiceSetRequest,
    *,
    deadline: datetime,
    applied: Callable[[], None] = lambda: None,
    seen: Callable[[AwaitServiceSetResult], None] = lambda _: None,
) -> AwaitServiceSetResult:
    """Apply a ServiceSet of one service (`applied()` once it is there) and wait until that
    service is deployed, failed or gone, or `deadline` (`await_service_set`)."""
    applied_set = await APPLY_SERVICE_SET(request)
    applied()
    return await await_service_set(
        AwaitServiceSetRequest(
            namespace=request.namespace,
            name=request.name,
            service=request.services[0].name,
            owner=request.owner,
            deadline=deadline,
            generation=applied_set.generation,
        ),
        seen=seen,
    )


async def await_service_set(
    request: AwaitServiceSetRequest,
    *,
    seen: Callable[[AwaitServiceSetResult], None] = lambda _: None,
) -> AwaitServiceSetResult:
    """Wait, one `await_service_set` per change of the service's state, until it is deployed,
    failed or gone, or the deadline passed (`workflows.kit.until`); `seen` records each look."""
    return await until(
        lambda known, left: AWAIT_SERVICE_SET(
            request.model_copy(update={"known_state": known}), wait=left
        ),
        known=request.known_state,
        learn=lambda found, _: found.state,
        settled=lambda found: found.outcome is not ServiceSetOutcome.CHANGED,
        deadline=request.deadline,
        seen=seen,
    )
