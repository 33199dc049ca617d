"""A stand-in world for the workspace side on the time-skipping server.

`FakeWorkspaceWorld` plays the management cluster's classes and ServiceSets and the child clusters'
namespaces, GPUs, gateway and routes, under the real activity names. The workflows between them
are real: `CapacityLedgerWorkflow` and `PrerequisiteWorkflow` run in the same worker, and messages
travel through Temporal (the real `TemporalActivities.signal_with_start`,
given the test server's client), so admission order, shared prerequisites and answers by signal are
the production code paths.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.temporal import TemporalActivities
from models.activity_api import (
    ActivityName,
    AwaitClusterDeploymentRequest,
    AwaitClusterDeploymentResult,
    Condition,
    DeploymentOutcome,
    GetClusterDeploymentStatusResult,
)
from models.capacity import GpuNode, gpu_node
from models.ownership import Owner
from models.sealed import SealedValue
from models.workspace import GatewayInfo, ServiceSetStatusSummary, ServiceStateSummary
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
    CapacityMessage,
    CapacityMessageKind,
    CheckServiceTemplateRequest,
    CheckServiceTemplateResult,
    ClusterCreatedOutcome,
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
    FoundServiceSet,
    GetWorkspaceClassRequest,
    GetWorkspaceClassResult,
    ListWorkflowsRequest,
    ListWorkflowsResult,
    ListWorkspaceClassesRequest,
    ListWorkspaceClassesResult,
    PublishWorkspaceClassRequest,
    PublishWorkspaceClassResult,
    ReadGpuInventoryRequest,
    ReadGpuInventoryResult,
    RecentEventsRequest,
    RecentEventsResult,
    RouteSpec,
    RouteState,
    ServiceSetOutcome,
    WorkspaceActivity,
    WriteValuesSecretRequest,
    WriteValuesSecretResult,
)
from models.workspace_class import WorkspaceClassSpec, class_conflict
from workflows.capacity import CAPACITY
from workflows.capacity.workflow import CapacityLedgerWorkflow
from workflows.catalog.workflow import CatalogWorkflow
from workflows.cluster.workflow import ClusterWorkflow
from workflows.prerequisite.workflow import PrerequisiteWorkflow
from workflows.workspace.workflow import WorkspaceWorkflow

WORKFLOWS = [WorkspaceWorkflow, CapacityLedgerWorkflow, PrerequisiteWorkflow, CatalogWorkflow]


def h100_node(name: str, gpus: int = 8, **extra: Any) -> GpuNode:
    return gpu_node(
        name,
        {"exalsius.ai/gpu-model": "h100", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        {"nvidia.com/gpu": gpus},
        **extra,
    )


@dataclass
class FakeServiceSet:
    cluster: str
    services: list[dict[str, Any]]
    labels: dict[str, str]
    values_from: str = ""


@dataclass
class FakeWorkspaceWorld:
    """Classes, ServiceSets, namespaces, GPUs, gateway and routes, in memory."""

    classes: dict[str, WorkspaceClassSpec] = field(default_factory=dict)
    ready_clusters: set[str] = field(default_factory=set)
    templates: set[str] = field(default_factory=set)
    """Valid ServiceTemplates (anything else is not found)."""
    failing_templates: dict[str, str] = field(default_factory=dict)
    """Template -> the failure message its installs end with."""
    stuck_templates: set[str] = field(default_factory=set)
    """Templates whose installs never finish (a deploy timeout)."""
    deployed_elsewhere: dict[tuple[str, str], str] = field(default_factory=dict)
    """(cluster, template) -> a ServiceSet not Colony's that already installs it."""
    nodes: dict[str, list[GpuNode]] = field(default_factory=dict)
    gateways: dict[str, GatewayInfo] = field(default_factory=dict)
    """ClusterDeployment -> the tenant Gateway in its child (none: no Gateway there)."""
    attached: dict[str, str] = field(default_factory=dict)
    """ClusterDeployment -> the domain its label `colony.dev/tenant-gateway-domain` names."""
    gateway_generations: dict[str, int] = field(default_factory=dict)
    """ClusterDeployment -> its Gateway's generation (a test bumps it to change the Gateway)."""
    missing_services: set[str] = field(default_factory=set)
    """Services the charts do not render: a route to one is refused (`BackendNotFound`)."""
    deployment_owners: dict[str, Owner] = field(default_factory=dict)
    """ClusterDeployment -> the owner its marks name (default: the default-mode cluster of its
    name, `cluster/<name>`); a wait given another owner finds none (as the real activity)."""

    namespace_deletes_held: asyncio.Event | None = None
    """When set, a namespace's deletion waits for it (a test looks at what happened before)."""

    service_sets: dict[str, FakeServiceSet] = field(default_factory=dict)
    applied: list[str] = field(default_factory=list)
    namespaces: dict[str, set[str]] = field(default_factory=dict)
    secrets: dict[str, dict[str, SealedValue]] = field(default_factory=dict)
    routes: dict[str, RouteSpec] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    # --- Management cluster ---------------------------------------------------------------------

    def owner_of(self, deployment: str) -> Owner:
        return self.deployment_owners.get(deployment, Owner(workflow_id=f"cluster/{deployment}"))

    @activity.defn(name=ActivityName.AWAIT_CLUSTER_DEPLOYMENT)
    async def await_cluster_deployment(
        self, request: AwaitClusterDeploymentRequest
    ) -> AwaitClusterDeploymentResult:
        marked = self.owner_of(request.name)
        if request.name not in self.ready_clusters or request.owner not in (None, marked):
            return AwaitClusterDeploymentResult(
                outcome=DeploymentOutcome.GONE,
                status=GetClusterDeploymentStatusResult(exists=False),
            )
        return AwaitClusterDeploymentResult(
            outcome=DeploymentOutcome.READY,
            status=GetClusterDeploymentStatusResult(
                exists=True,
                ready=True,
                generation=1,
                observed_generation=1,
                conditions=[Condition(type="Ready", status="True")],
            ),
        )

    @activity.defn(name=WorkspaceActivity.AWAIT_CLUSTER_CREATED)
    async def await_cluster_created(
        self, request: AwaitClusterCreatedRequest
    ) -> AwaitClusterCreatedResult:
        # No cluster workflow runs here: the real activity's answer for one it does not find.
        return AwaitClusterCreatedResult(outcome=ClusterCreatedOutcome.CREATED)

    @activity.defn(name=WorkspaceActivity.GET_WORKSPACE_CLASS)
    async def get_workspace_class(
        self, request: GetWorkspaceClassRequest
    ) -> GetWorkspaceClassResult:
        found = self.classes.get(request.name)
        return GetWorkspaceClassResult(found=found is not None, spec=found)

    @activity.defn(name=WorkspaceActivity.LIST_WORKSPACE_CLASSES)
    async def list_workspace_classes(
        self, request: ListWorkspaceClassesRequest
    ) -> ListWorkspaceClassesResult:
        return ListWorkspaceClassesResult(
            classes=sorted(self.classes.values(), key=lambda c: c.name)
        )

    @activity.defn(name=WorkspaceActivity.PUBLISH_WORKSPACE_CLASS)
    async def publish_workspace_class(
        self, request: PublishWorkspaceClassRequest
    ) -> PublishWorkspaceClassResult:
        from models.errors import ErrorType, permanent

        existing = self.classes.get(request.spec.name)
        if existing is not None:
            conflict = class_conflict(existing, request.spec)
            if conflict:
                raise permanent(ErrorType.CLASS_CONFLICT, conflict)
            return PublishWorkspaceClassResult(created=False)
        self.classes[request.spec.name] = request.spec
        return PublishWorkspaceClassResult(created=True)

    @activity.defn(name=WorkspaceActivity.CHECK_SERVICE_TEMPLATE)
    async def check_service_template(
        self, request: CheckServiceTemplateRequest
    ) -> CheckServiceTemplateResult:
        found = request.name in self.templates
        return CheckServiceTemplateResult(found=found, valid=found)

    @activity.defn(name=WorkspaceActivity.APPLY_SERVICE_SET)
    async def apply_service_set(self, request: ApplyServiceSetRequest) -> ApplyServiceSetResult:
        created = request.name not in self.service_sets
        self.applied.append(request.name)
        self.service_sets[request.name] = FakeServiceSet(
            cluster=request.cluster_deployment,
            services=[s.model_dump(mode="json") for s in request.services],
            labels=request.labels,
            values_from=request.services[0].values_from_secret if request.services else "",
        )
        return ApplyServiceSetResult(created=created)

    @activity.defn(name=WorkspaceActivity.AWAIT_SERVICE_SET)
    async def await_service_set(self, request: AwaitServiceSetRequest) -> AwaitServiceSetResult:
        found = self.service_sets.get(request.name)
        if found is None:
            return AwaitServiceSetResult(outcome=ServiceSetOutcome.GONE)
        template = found.services[0]["template"]
        if template in self.failing_templates:
            message = self.failing_templates[template]
            status = ServiceSetStatusSummary(
                name=request.name,
                services=[
                    ServiceStateSummary(
                        name=request.service, state="Failed", failure_message=message
                    )
                ],
            )
            return AwaitServiceSetResult(
                outcome=ServiceSetOutcome.FAILED, status=status, state="Failed", message=message
            )
        if template in self.stuck_templates:
            return AwaitServiceSetResult(outcome=ServiceSetOutcome.DEADLINE, state="Provisioning")
        return AwaitServiceSetResult(outcome=ServiceSetOutcome.DEPLOYED, state="Deployed")

    @activity.defn(name=WorkspaceActivity.DELETE_SERVICE_SET)
    async def delete_service_set(self, request: DeleteServiceSetRequest) -> DeleteServiceSetResult:
        existed = self.service_sets.pop(request.name, None) is not None
        return DeleteServiceSetResult(existed=existed, gone=True)

    @activity.defn(name=WorkspaceActivity.FIND_SERVICE_SETS)
    async def find_service_sets(self, request: FindServiceSetsRequest) -> FindServiceSetsResult:
        found = [
            FoundServiceSet(
                name=name,
                service=s.services[0]["name"],
                service_namespace=s.services[0]["namespace"],
                state="Deployed",
                colony_prerequisite="colony.dev/prerequisite" in s.labels,
            )
            for name, s in self.service_sets.items()
            if s.cluster == request.cluster_deployment
            and s.services[0]["template"] == request.template
        ]
        other = self.deployed_elsewhere.get((request.cluster_deployment, request.template))
        if other:
            found.append(
                FoundServiceSet(
                    name=other, service=request.template, service_namespace="x", state="Deployed"
                )
            )
        return FindServiceSetsResult(found=found)

    @activity.defn(name=WorkspaceActivity.WRITE_VALUES_SECRET)
    async def write_values_secret(
        self, request: WriteValuesSecretRequest
    ) -> WriteValuesSecretResult:
        self.secrets[request.name] = dict(request.secret_values)
        return WriteValuesSecretResult(keys=len(request.secret_values))

    @activity.defn(name=WorkspaceActivity.DELETE_VALUES_SECRET)
    async def delete_values_secret(
        self, request: DeleteValuesSecretRequest
    ) -> DeleteValuesSecretResult:
        return DeleteValuesSecretResult(existed=self.secrets.pop(request.name, None) is not None)

    # --- Child cluster ----------------------------------------------------------------------------

    @activity.defn(name=WorkspaceActivity.ENSURE_NAMESPACE)
    async def ensure_namespace(self, request: EnsureNamespaceRequest) -> EnsureNamespaceResult:
        names = self.namespaces.setdefault(request.kubeconfig.secret_name, set())
        created = request.name not in names
        names.add(request.name)
        return EnsureNamespaceResult(created=created)

    @activity.defn(name=WorkspaceActivity.DELETE_NAMESPACE)
    async def delete_namespace(self, request: DeleteNamespaceRequest) -> DeleteNamespaceResult:
        if self.namespace_deletes_held is not None:
            await self.namespace_deletes_held.wait()
        names = self.namespaces.setdefault(request.kubeconfig.secret_name, set())
        existed = request.name in names
        names.discard(request.name)
        return DeleteNamespaceResult(existed=existed, gone=True)

    @activity.defn(name=WorkspaceActivity.READ_GPU_INVENTORY)
    async def read_gpu_inventory(self, request: ReadGpuInventoryRequest) -> ReadGpuInventoryResult:
        cluster = request.kubeconfig.secret_name.removesuffix("-kubeconfig")
        self.calls.append(f"inventory {cluster}")
        owner = self.owner_of(cluster).workflow_id if request.cluster_deployment else ""
        return ReadGpuInventoryResult(
            nodes=list(self.nodes.get(cluster, [])), cluster_workflow_id=owner
        )

    @activity.defn(name=WorkspaceActivity.FIND_TENANT_GATEWAY)
    async def find_tenant_gateway(
        self, request: FindTenantGatewayRequest
    ) -> FindTenantGatewayResult:
        cluster = request.kubeconfig.secret_name.removesuffix("-kubeconfig")
        self.calls.append(f"find gateway {cluster}")
        expected = self.attached.get(cluster, "") if request.cluster_deployment else ""
        gateway = self.gateways.get(cluster)
        if gateway is None:
            return FindTenantGatewayResult(expected_domain=expected)
        taken = sorted(r.listener_port for r in self.routes.values() if r.kind == "TCPRoute")
        return FindTenantGatewayResult(
            gateway=gateway,
            gateway_namespace="colony-gateway",
            gateway_name="tenant",
            gateway_uid=f"uid-{cluster}",
            gateway_generation=self.gateway_generations.get(cluster, 1),
            taken_ports=taken,
            expected_domain=expected,
        )

    @activity.defn(name=WorkspaceActivity.APPLY_ROUTES)
    async def apply_routes(self, request: ApplyRoutesRequest) -> ApplyRoutesResult:
        for route in request.routes:
            self.routes[route.name] = route
        return ApplyRoutesResult(created=[r.name for r in request.routes])

    @activity.defn(name=WorkspaceActivity.AWAIT_ROUTES)
    async def await_routes(self, request: AwaitRoutesRequest) -> AwaitRoutesResult:
        states = [
            RouteState(
                name=r.name,
                settled=True,
                reason="BackendNotFound",
                message=f"ResolvedRefs: BackendNotFound: Service {request.namespace}/{r.service} "
                "not found",
            )
            if r.service in self.missing_services
            else RouteState(name=r.name, accepted=True, settled=True, reason="Accepted")
            for r in request.routes
        ]
        return AwaitRoutesResult(routes=states, all_accepted=all(s.accepted for s in states))

    @activity.defn(name=WorkspaceActivity.DELETE_ROUTES)
    async def delete_routes(self, request: DeleteRoutesRequest) -> DeleteRoutesResult:
        deleted = [r.name for r in request.routes if self.routes.pop(r.name, None) is not None]
        return DeleteRoutesResult(deleted=deleted)

    @activity.defn(name=WorkspaceActivity.RECENT_EVENTS)
    async def recent_events(self, request: RecentEventsRequest) -> RecentEventsResult:
        return RecentEventsResult()

    # --- Visibility (the time-skipping server has none) -------------------------------------------

    @activity.defn(name=WorkspaceActivity.LIST_WORKFLOWS)
    async def list_workflows(self, request: ListWorkflowsRequest) -> ListWorkflowsResult:
        return ListWorkflowsResult(workflow_ids=list(self.workspaces))

    @activity.defn(name=WorkspaceActivity.AWAIT_WORKFLOWS_CLOSED)
    async def await_workflows_closed(
        self, request: AwaitWorkflowsClosedRequest
    ) -> AwaitWorkflowsClosedResult:
        return AwaitWorkflowsClosedResult(open=[])

    workspaces: list[str] = field(default_factory=list)
    """Workflow ids `list_workflows` answers (what visibility would list)."""

    def activities(self) -> list[Callable[..., Any]]:
        return [
            self.await_cluster_deployment,
            self.await_cluster_created,
            self.get_workspace_class,
            self.list_workspace_classes,
            self.publish_workspace_class,
            self.check_service_template,
            self.apply_service_set,
            self.await_service_set,
            self.delete_service_set,
            self.find_service_sets,
            self.write_values_secret,
            self.delete_values_secret,
            self.ensure_namespace,
            self.delete_namespace,
            self.read_gpu_inventory,
            self.find_tenant_gateway,
            self.apply_routes,
            self.await_routes,
            self.delete_routes,
            self.recent_events,
            self.list_workflows,
            self.await_workflows_closed,
        ]


STARTED: list[str] = []
"""Workflow ids the tests started; terminated when their worker stops (a workflow left running on a
gone task queue, with an activity scheduled, would stop the time-skipping server's clock)."""


async def end_gracefully(env: WorkflowEnvironment, workflow_id: str) -> None:
    """End a workflow a test left running: a ledger by its `close` message, anything else by
    termination, but only once none of its activities is in flight (the time-skipping server
    keeps its clock stopped for an activity whose workflow was terminated under it)."""
    handle = env.client.get_workflow_handle(workflow_id)
    with contextlib.suppress(RPCError):
        for _ in range(100):
            described = await handle.describe()
            if described.status != WorkflowExecutionStatus.RUNNING:
                return
            if not described.raw_description.pending_activities:
                break
            await asyncio.sleep(0.05)
        if workflow_id.startswith("capacity/"):
            await handle.signal(
                CAPACITY.capacity.name,
                CapacityMessage(request_id="test-close", kind=CapacityMessageKind.CLOSE),
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(handle.result(), 5)
                return
        await handle.terminate(reason="test finished")


async def terminate_leftovers(env: WorkflowEnvironment, world: FakeWorkspaceWorld) -> None:
    ids = [*STARTED]
    for cluster in world.ready_clusters:
        ids += [f"prereq/{cluster}/{template}" for template in world.templates]
        ids.append(f"capacity/{cluster}")
    STARTED.clear()
    for workflow_id in ids:
        await end_gracefully(env, workflow_id)


@contextlib.asynccontextmanager
async def workspace_worker(
    env: WorkflowEnvironment,
    task_queue: str,
    world: FakeWorkspaceWorld,
    extra_activities: list[Callable[..., Any]] | None = None,
    cluster: bool = False,
    include_world: bool = True,
    client: Client | None = None,
    extra_workflows: list[type] | None = None,
) -> AsyncIterator[Worker]:
    """A worker with the workspace side's workflows, the fake world, and real Temporal messaging
    (polling through `client` when given: one with a runtime of its own, to read its metrics)."""
    temporal = TemporalActivities(env.client, task_queue)
    workflows: list[type] = [
        *WORKFLOWS,
        *([ClusterWorkflow] if cluster else []),
        *(extra_workflows or []),
    ]
    async with Worker(
        client or env.client,
        task_queue=task_queue,
        workflows=workflows,
        activities=[
            *(world.activities() if include_world else []),
            *(extra_activities or []),
            temporal.signal_with_start,
        ],
    ) as running:
        try:
            yield running
        finally:
            await terminate_leftovers(env, world)
