"""The workspace side's activities (management cluster objects of workspaces, child cluster
namespaces and routes, Temporal itself), declared once (see `workflows/kit/activity.py` for the
rules: heartbeats, `WAIT_CANCELLATION_COMPLETED`, retries, summaries shown in the Web UI)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from temporalio import workflow

from workflows.kit.activity import ActivityCall, WaitCall
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

GET_WORKSPACE_CLASS = ActivityCall(
    A.GET_WORKSPACE_CLASS,
    GetWorkspaceClassRequest,
    GetWorkspaceClassResult,
    lambda r: f"read WorkspaceClass {r.name}",
)
LIST_WORKSPACE_CLASSES = ActivityCall(
    A.LIST_WORKSPACE_CLASSES,
    ListWorkspaceClassesRequest,
    ListWorkspaceClassesResult,
    lambda r: "list WorkspaceClasses",
)
PUBLISH_WORKSPACE_CLASS = ActivityCall(
    A.PUBLISH_WORKSPACE_CLASS,
    PublishWorkspaceClassRequest,
    PublishWorkspaceClassResult,
    lambda r: f"publish WorkspaceClass {r.spec.name}",
)
PUBLISH_OBJECTS = ActivityCall(
    A.PUBLISH_OBJECTS,
    PublishObjectsRequest,
    PublishObjectsResult,
    lambda r: "publish " + ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in r.objects),
)
CHECK_SERVICE_TEMPLATE = ActivityCall(
    A.CHECK_SERVICE_TEMPLATE,
    CheckServiceTemplateRequest,
    CheckServiceTemplateResult,
    lambda r: f"check ServiceTemplate {r.namespace}/{r.name}",
)
APPLY_SERVICE_SET = ActivityCall(
    A.APPLY_SERVICE_SET,
    ApplyServiceSetRequest,
    ApplyServiceSetResult,
    lambda r: (
        f"apply ServiceSet {r.namespace}/{r.name} on {r.cluster_deployment}: "
        + ", ".join(f"{s.name} ({s.template})" for s in r.services)
    ),
)
AWAIT_SERVICE_SET = WaitCall(
    A.AWAIT_SERVICE_SET,
    AwaitServiceSetRequest,
    AwaitServiceSetResult,
    lambda r: f"wait until {r.service} of ServiceSet {r.name} is Deployed",
)
DELETE_SERVICE_SET = WaitCall(
    A.DELETE_SERVICE_SET,
    DeleteServiceSetRequest,
    DeleteServiceSetResult,
    lambda r: (
        f"delete ServiceSet {r.namespace}/{r.name}"
        + (" and wait until its releases are uninstalled" if r.wait_until else "")
    ),
)
FIND_SERVICE_SETS = ActivityCall(
    A.FIND_SERVICE_SETS,
    FindServiceSetsRequest,
    FindServiceSetsResult,
    lambda r: f"find ServiceSets installing {r.template} on {r.cluster_deployment}",
)
WRITE_VALUES_SECRET = ActivityCall(
    A.WRITE_VALUES_SECRET,
    WriteValuesSecretRequest,
    WriteValuesSecretResult,
    lambda r: f"write the secret values of workspace {r.workspace} to Secret {r.name}",
)
DELETE_VALUES_SECRET = ActivityCall(
    A.DELETE_VALUES_SECRET,
    DeleteValuesSecretRequest,
    DeleteValuesSecretResult,
    lambda r: f"delete Secret {r.namespace}/{r.name}",
)
ENSURE_NAMESPACE = ActivityCall(
    A.ENSURE_NAMESPACE,
    EnsureNamespaceRequest,
    EnsureNamespaceResult,
    lambda r: f"create namespace {r.name}",
)
DELETE_NAMESPACE = WaitCall(
    A.DELETE_NAMESPACE,
    DeleteNamespaceRequest,
    DeleteNamespaceResult,
    lambda r: f"delete namespace {r.name}",
)
READ_GPU_INVENTORY = ActivityCall(
    A.READ_GPU_INVENTORY,
    ReadGpuInventoryRequest,
    ReadGpuInventoryResult,
    lambda r: "read the cluster's GPU inventory",
)
FIND_TENANT_GATEWAY = ActivityCall(
    A.FIND_TENANT_GATEWAY,
    FindTenantGatewayRequest,
    FindTenantGatewayResult,
    lambda r: "find the tenant gateway",
)
APPLY_ROUTES = ActivityCall(
    A.APPLY_ROUTES,
    ApplyRoutesRequest,
    ApplyRoutesResult,
    lambda r: "create routes " + ", ".join(f"{x.kind}/{x.name}" for x in r.routes),
)
AWAIT_ROUTES = WaitCall(
    A.AWAIT_ROUTES,
    AwaitRoutesRequest,
    AwaitRoutesResult,
    lambda r: "wait until the gateway accepts " + ", ".join(x.name for x in r.routes),
)
DELETE_ROUTES = ActivityCall(
    A.DELETE_ROUTES,
    DeleteRoutesRequest,
    DeleteRoutesResult,
    lambda r: "delete routes " + ", ".join(x.name for x in r.routes),
)
RECENT_EVENTS = ActivityCall(
    A.RECENT_EVENTS,
    RecentEventsRequest,
    RecentEventsResult,
    lambda r: f"read recent events in {r.namespace}",
)
SIGNAL_WITH_START = ActivityCall(
    A.SIGNAL_WITH_START,
    SignalWithStartRequest,
    SignalWithStartResult,
    lambda r: f"signal {r.signal} to {r.workflow_id} (starting it if needed)",
)
LIST_WORKFLOWS = ActivityCall(
    A.LIST_WORKFLOWS,
    ListWorkflowsRequest,
    ListWorkflowsResult,
    lambda r: f"list workflows where {r.query}",
)
AWAIT_WORKFLOWS_CLOSED = WaitCall(
    A.AWAIT_WORKFLOWS_CLOSED,
    AwaitWorkflowsClosedRequest,
    AwaitWorkflowsClosedResult,
    lambda r: f"wait until {len(r.workflow_ids)} workflow(s) finished",
)
AWAIT_CLUSTER_CREATED = WaitCall(
    A.AWAIT_CLUSTER_CREATED,
    AwaitClusterCreatedRequest,
    AwaitClusterCreatedResult,
    lambda r: f"wait until cluster {r.cluster} has finished creating",
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
