"""`WorkspaceWorkflow`: one durable workflow per workspace, id `workspace/<name>`, from deploy to
delete (the exalsius WorkspaceDeployment, as a workflow).

Built on the entity engine (`workflows/engine.py`): deploy (queued at start), `suspend`, `resume`
and `delete` (updates; delete also as the `delete_requested` signal a cluster sends before it
goes) run one at a time; delete jumps the queue and interrupts what runs.

The plan of a deploy, each step with its condition:
1. ClassResolved: the pinned class, read from the management cluster (missing: Failed,
   ClassNotFound). ClusterDeploymentResolved: the cluster's ClusterDeployment is Ready (not yet:
   Pending until it is, up to `PENDING_DEADLINE`; unknown: Failed).
2. Values: class defaults and the user's values merged as Helm merges values files, prompts
   checked, resources injected (`models/values.py`); a problem fails with InvalidValues before
   anything is installed.
3. PrerequisitesMet: each prerequisite through `prereq/<cluster>/<template>` (signal-with-start;
   one installation shared by every workspace), answered by signal.
4. Feasible: GPUs through the cluster's ledger `capacity/<cluster>` (signal-with-start; answered by
   the signal `capacity_answer`): admitted, or Waiting with its position (strict first-come order)
   until capacity frees, or Failed (GpuOfferingUnavailable) when the cluster has no such GPUs.
5. HelmReleaseReady: namespace `ws-<name>` in the child, the unsealed secret values in a Secret on
   the management cluster (only sealed values ever reach this workflow), a k0rdent ServiceSet
   targeting the cluster's ClusterDeployment, waited on until Deployed or Failed within the class's
   deploy timeout (Colony enforces it).
6. RoutesReady: with a tenant gateway, an HTTPRoute per HTTP endpoint and a TCPRoute on a pool port
   for TCP/SSH ones, reported once accepted; without one, each endpoint's `kubectl port-forward`.

Waiting costs nothing: admission and prerequisites are answered by signals, installs and routes are
waited on inside heartbeating activities; a workspace that waits a day for GPUs adds nothing to its
history while it waits, however many are admitted before it: the ledger answers once when asked
and once when it is admitted, and positions in between are the ledger's to work out when someone
asks (`workspace get`, the API).

Suspend uninstalls the release (namespace and volumes stay) and frees the GPUs; resume goes through
admission again; delete removes routes, the ServiceSet (waited for), the values Secret and the
namespace, then frees the GPUs, which wakes the next waiting workspace. A failed deploy frees its
GPUs too and keeps what it installed for inspection until it is deleted or resumed.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from workflows import metrics
from workflows.activity_calls import AWAIT_CLUSTER_DEPLOYMENT
from workflows.engine import (
    EntityEngine,
    Interrupted,
    Interruption,
    is_failure,
    reason_of,
    settle,
    upsert_search_attributes,
)
from workflows.search_attributes import (
    COLONY_CLUSTER,
    COLONY_GPU_MODEL,
    COLONY_KIND,
    COLONY_PHASE,
)
from workflows.workspace_calls import (
    APPLY_ROUTES,
    APPLY_SERVICE_SET,
    AWAIT_ROUTES,
    AWAIT_SERVICE_SET,
    DELETE_NAMESPACE,
    DELETE_ROUTES,
    DELETE_SERVICE_SET,
    DELETE_VALUES_SECRET,
    ENSURE_NAMESPACE,
    FIND_TENANT_GATEWAY,
    GET_WORKSPACE_CLASS,
    RECENT_EVENTS,
    SIGNAL_WITH_START,
    SIGNAL_WORKFLOW,
    WRITE_VALUES_SECRET,
)

with workflow.unsafe.imports_passed_through():
    from models.activity_api import (
        AwaitClusterDeploymentRequest,
        Condition,
        DeploymentOutcome,
        DeploymentWait,
        KubeconfigRef,
    )
    from models.capacity import CapacityAnswer, Decision
    from models.cluster import DEFAULT_NAMESPACE, kubeconfig_secret_name
    from models.errors import rejected
    from models.signals import RefreshRequest, SignalName
    from models.values import (
        MergedWorkspace,
        ValuesError,
        capacity_request,
        merge_workspace,
        resolve_resources,
    )
    from models.workspace import (
        AdmissionState,
        AdmissionStatus,
        ConditionReason,
        ConditionStatus,
        ConditionType,
        FailureContext,
        GatewayInfo,
        PrerequisitePhase,
        PrerequisiteStatus,
        RouteRecord,
        WorkspacePhase,
        WorkspaceState,
        WorkspaceStatus,
        WorkspaceWorkflowInput,
        capacity_request_id,
        capacity_workflow_id,
        endpoint_service_name,
        helm_release_name,
        http_hostname,
        plan_access,
        prerequisite_workflow_id,
        service_set_name,
        set_condition,
        values_secret_name,
        workspace_namespace,
    )
    from models.workspace_api import (
        WORKSPACE_LABEL,
        ApplyRoutesRequest,
        ApplyServiceSetRequest,
        AwaitRoutesRequest,
        AwaitServiceSetRequest,
        CapacityLedgerInput,
        CapacityMessage,
        CapacityMessageKind,
        DeleteNamespaceRequest,
        DeleteRequested,
        DeleteRoutesRequest,
        DeleteServiceSetRequest,
        DeleteValuesSecretRequest,
        EnsureNamespaceRequest,
        FindTenantGatewayRequest,
        GetWorkspaceClassRequest,
        PortsAnswer,
        PrerequisiteAnswer,
        PrerequisiteInput,
        PrerequisiteMessage,
        RecentEventsRequest,
        RouteSpec,
        ServiceSetOutcome,
        ServiceSetService,
        SignalWithStartRequest,
        SignalWorkflowRequest,
        WorkspaceSignal,
        WriteValuesSecretRequest,
    )
    from models.workspace_class import EndpointProtocol, WorkspaceClassSpec
    from models.workspace_operations import (
        DeleteWorkspaceRequest,
        DeployWorkspaceRequest,
        RedeployWorkspaceRequest,
        ResumeWorkspaceRequest,
        SuspendWorkspaceRequest,
        WorkspaceOperation,
        WorkspaceOperationAccepted,
        WorkspaceOperationRequest,
    )

KIND = "workspace"
PENDING_DEADLINE = timedelta(minutes=30)
"""How long a workspace waits for its cluster to become ready before it fails."""
ROUTES_DEADLINE = timedelta(minutes=5)
"""How long routes may take to be accepted before they are reported not ready (not a failure)."""
UNINSTALL_DEADLINE = timedelta(minutes=15)
"""How long an uninstall or a namespace deletion may take before the delete reports it."""
LEDGER_WORKFLOW = "CapacityLedgerWorkflow"
PREREQUISITE_WORKFLOW = "PrerequisiteWorkflow"
CAPACITY_SIGNAL = "capacity"
PREREQUISITE_SIGNAL = "prerequisite"


class WorkspaceFailed(ApplicationError):
    """A deploy step failed for a reason the status names (its `type` is the condition reason)."""

    def __init__(self, reason: ConditionReason, message: str) -> None:
        super().__init__(message, type=reason.value, non_retryable=True)


@workflow.defn
class WorkspaceWorkflow:
    """The life of one workspace (see the module docstring)."""

    @workflow.init
    def __init__(self, input: WorkspaceWorkflowInput) -> None:
        self._spec = input.spec
        info = workflow.info()
        self._state = input.state or WorkspaceState(
            created_at=workflow.now(), incarnation=info.run_id
        )
        self._answers: dict[str, CapacityAnswer] = {}
        self._prerequisites: dict[str, PrerequisiteAnswer] = {}
        self._ports: dict[str, PortsAnswer] = {}
        self._refresh = False
        self._engine: EntityEngine[WorkspaceOperation] = EntityEngine(
            self._state.book, self._state.queue, self._state.completed, headline=self._headline
        )
        if input.state is None:
            self._engine.enqueue(
                lambda op_id: WorkspaceOperation(id=op_id, request=DeployWorkspaceRequest())
            )

    @workflow.run
    async def run(self, input: WorkspaceWorkflowInput) -> WorkspaceStatus:
        """Run the workspace's operations until it is deleted."""
        self._set_phase(self._state.phase)
        await self._engine.run_until(
            lambda: self._state.phase is WorkspacePhase.DELETED,
            self._execute,
            continue_as_new=lambda: workflow.continue_as_new(
                WorkspaceWorkflowInput(spec=self._spec, state=self._state)
            ),
            on_workflow_cancel=self._on_workflow_cancel,
        )
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self.status()

    def _on_workflow_cancel(self, running: WorkspaceOperation | None) -> bool:
        self._engine.cancel_queue(
            "cancelled: the workflow was cancelled",
            keep=lambda op: isinstance(op.request, DeleteWorkspaceRequest),
        )
        return running is not None and not isinstance(running.request, DeleteWorkspaceRequest)

    async def _execute(self, operation: WorkspaceOperation) -> None:
        request = operation.request
        if isinstance(request, DeleteWorkspaceRequest):
            await self._delete()
            return
        if isinstance(request, SuspendWorkspaceRequest):
            await self._suspend()
            return
        try:
            if isinstance(request, ResumeWorkspaceRequest) and self._state.service_set_created:
                # A failed deploy left its release for inspection. k0rdent keeps reporting it
                # Failed until Sveltos retries on its own schedule (the sim: never, for the same
                # spec), so applying the same ServiceSet again would fail again at once: remove
                # it (routes, release, values Secret; the namespace and its volumes stay) and
                # install afresh.
                await self._uninstall()
            await self._deploy(redeploy=isinstance(request, RedeployWorkspaceRequest))
        except Interrupted as error:
            # A deploy that does not finish holds no GPUs: the next waiter gets them. What it
            # installed stays for inspection until a delete or a resume.
            await settle(self._release_capacity("the deploy did not finish"))
            if is_failure(error):
                self._fail_state(error)
            elif self._state.phase is not WorkspacePhase.DELETING:
                self._set_phase(WorkspacePhase.FAILED, "the deploy was cancelled")
            raise

    # --- Deploy --------------------------------------------------------------------------------

    async def _deploy(self, *, redeploy: bool = False) -> None:
        spec, state = self._spec, self._state
        state.suspended = False
        state.failure_context = None
        if not redeploy:
            self._set_phase(WorkspacePhase.PENDING)
        workspace_class = await self._resolve_class()
        await self._resolve_cluster()
        self._merge(workspace_class)  # refuse bad values before anything is installed
        if spec.suspend and not state.book.operations_run:
            self._set_phase(WorkspacePhase.SUSPENDED, "deployed suspended: nothing installed")
            state.suspended = True
            return
        if redeploy and state.admission is not None:
            # Displaced (its GPUs' node left): the ledger put its request back in line at its
            # original place; wait for it there, then install on the new placement.
            answer: CapacityAnswer | None = await self._await_admission(state.admission.request_id)
        else:
            await self._install_prerequisites(workspace_class)
            answer = await self._admit(workspace_class)
        merged = self._merge(workspace_class, answer)
        await self._install(workspace_class, merged)
        await self._route(workspace_class)
        self._condition(ConditionType.READY, True, ConditionReason.DEPLOYMENT_READY, "running")
        self._set_phase(WorkspacePhase.RUNNING)

    async def _resolve_class(self) -> WorkspaceClassSpec:
        state = self._state
        if state.class_spec is not None and state.class_spec.name == self._spec.class_name:
            return state.class_spec
        found = await GET_WORKSPACE_CLASS(GetWorkspaceClassRequest(name=self._spec.class_name))
        if not found.found:
            self._condition(
                ConditionType.CLASS_RESOLVED,
                False,
                ConditionReason.CLASS_NOT_FOUND,
                f"WorkspaceClass '{self._spec.class_name}' not found",
            )
            raise WorkspaceFailed(
                ConditionReason.CLASS_NOT_FOUND,
                f"WorkspaceClass '{self._spec.class_name}' not found: publish it, or pin an existing class",
            )
        if found.spec is None:
            raise WorkspaceFailed(
                ConditionReason.INVALID_WORKSPACE_CLASS,
                f"WorkspaceClass '{self._spec.class_name}' is not valid: {found.problem}",
            )
        state.class_spec = found.spec
        self._condition(
            ConditionType.CLASS_RESOLVED, True, ConditionReason.CLASS_RESOLVED, found.spec.name
        )
        return found.spec

    async def _resolve_cluster(self) -> None:
        cluster = self._spec.cluster
        deadline = workflow.now() + PENDING_DEADLINE
        known: list[Condition] = []
        first = True
        while True:
            seen = await AWAIT_CLUSTER_DEPLOYMENT(
                AwaitClusterDeploymentRequest(
                    namespace=DEFAULT_NAMESPACE,
                    name=cluster,
                    want=DeploymentWait.READY,
                    deadline=deadline,
                    known_conditions=known,
                ),
                wait=max(deadline - workflow.now(), timedelta(seconds=1)),
            )
            known = seen.status.conditions
            if seen.outcome is DeploymentOutcome.READY:
                break
            if seen.outcome is DeploymentOutcome.GONE:
                reason = ConditionReason.CLUSTER_DEPLOYMENT_NOT_FOUND
                message = (
                    f"cluster '{cluster}' does not exist"
                    if first
                    else f"cluster '{cluster}' was deleted"
                )
                self._condition(ConditionType.CLUSTER_DEPLOYMENT_RESOLVED, False, reason, message)
                raise WorkspaceFailed(reason, message)
            if seen.outcome in (DeploymentOutcome.DEADLINE, DeploymentOutcome.FAILED):
                raise WorkspaceFailed(
                    ConditionReason.CLUSTER_NOT_READY,
                    f"cluster '{cluster}' was not ready within {int(PENDING_DEADLINE.total_seconds() // 60)}m",
                )
            first = False
            self._condition(
                ConditionType.CLUSTER_DEPLOYMENT_RESOLVED,
                False,
                ConditionReason.CLUSTER_NOT_READY,
                f"waiting for cluster '{cluster}' to be ready",
            )
        self._state.kubeconfig = KubeconfigRef(
            namespace=DEFAULT_NAMESPACE, secret_name=kubeconfig_secret_name(cluster)
        )
        self._state.tenant_gateway_domain = seen.status.tenant_gateway_domain
        self._condition(
            ConditionType.CLUSTER_DEPLOYMENT_RESOLVED,
            True,
            ConditionReason.CLUSTER_DEPLOYMENT_RESOLVED,
            f"cluster '{cluster}' is ready",
        )

    def _merge(
        self, workspace_class: WorkspaceClassSpec, answer: CapacityAnswer | None = None
    ) -> MergedWorkspace:
        try:
            merged = merge_workspace(
                workspace_class,
                self._spec,
                gpu_resource_name=answer.resource_name if answer and answer.resource_name else None,
                nodes=answer.nodes if answer else (),
            )
        except ValuesError as error:
            message = "; ".join(error.problems)
            raise WorkspaceFailed(ConditionReason.INVALID_VALUES, message) from None
        self._state.resolved_resources = merged.resources
        return merged

    async def _install_prerequisites(self, workspace_class: WorkspaceClassSpec) -> None:
        if not workspace_class.prerequisites:
            self._condition(
                ConditionType.PREREQUISITES_MET, True, ConditionReason.PREREQUISITES_MET, "none"
            )
            return
        self._set_phase(WorkspacePhase.INSTALLING_PREREQUISITES)
        info = workflow.info()
        asked: dict[str, str] = {}
        self._state.prerequisites = []
        for prerequisite in workspace_class.prerequisites:
            template = prerequisite.service_template
            namespace = prerequisite.namespace or "default"
            request_id = f"{info.workflow_id}/{self._state.incarnation}/{template.name}#{self._state.book.operations_run}"
            asked[request_id] = template.name
            self._state.prerequisites.append(
                PrerequisiteStatus(name=template.name, namespace=namespace)
            )
            await SIGNAL_WITH_START(
                SignalWithStartRequest(
                    workflow=PREREQUISITE_WORKFLOW,
                    workflow_id=prerequisite_workflow_id(self._spec.cluster, template.name),
                    input=PrerequisiteInput(
                        cluster=self._spec.cluster,
                        template=template.name,
                        template_namespace=template.namespace or DEFAULT_NAMESPACE,
                        namespace=namespace,
                        values=prerequisite.values or {},
                        deploy_timeout_seconds=int(
                            (
                                workspace_class.prerequisite_deploy_timeout
                                or workspace_class.deploy_timeout
                            ).total_seconds()
                        ),
                    ).model_dump(mode="json"),
                    signal=PREREQUISITE_SIGNAL,
                    payload=PrerequisiteMessage(
                        request_id=request_id,
                        reply_to=info.workflow_id,
                        namespace=namespace,
                        values=prerequisite.values or {},
                    ).model_dump(mode="json"),
                    static_summary=f"prerequisite {template.name} on cluster {self._spec.cluster}",
                )
            )
        self._condition(
            ConditionType.PREREQUISITES_MET,
            False,
            ConditionReason.INSTALLING_PREREQUISITES,
            "installing " + ", ".join(sorted(set(asked.values()))),
        )
        await workflow.wait_condition(lambda: all(rid in self._prerequisites for rid in asked))
        failed = [
            self._prerequisites[rid]
            for rid in asked
            if self._prerequisites[rid].phase is not PrerequisitePhase.SATISFIED
        ]
        if failed:
            message = "; ".join(f"{a.template}: {a.message}" for a in failed)
            self._condition(
                ConditionType.PREREQUISITES_MET, False, ConditionReason.PREREQUISITE_FAILED, message
            )
            raise WorkspaceFailed(ConditionReason.PREREQUISITE_FAILED, message)
        self._condition(
            ConditionType.PREREQUISITES_MET,
            True,
            ConditionReason.PREREQUISITES_MET,
            "installed: " + ", ".join(sorted(set(asked.values()))),
        )

    async def _admit(self, workspace_class: WorkspaceClassSpec) -> CapacityAnswer | None:
        spec, state = self._spec, self._state
        resources = resolve_resources(workspace_class.default_resources, spec.resources)
        state.admissions_requested += 1
        request_id = capacity_request_id(spec.name, state.incarnation, state.admissions_requested)
        request = capacity_request(request_id, spec.name, resources)
        if request is None:
            state.admission = None
            self._condition(
                ConditionType.FEASIBLE,
                True,
                ConditionReason.RESOURCES_AVAILABLE,
                "no GPUs requested",
            )
            return None
        state.admission = AdmissionStatus(request_id=request_id, state=AdmissionState.WAITING)
        asked_at = workflow.now()
        await SIGNAL_WITH_START(
            SignalWithStartRequest(
                workflow=LEDGER_WORKFLOW,
                workflow_id=capacity_workflow_id(spec.cluster),
                input=CapacityLedgerInput(cluster=spec.cluster).model_dump(mode="json"),
                signal=CAPACITY_SIGNAL,
                payload=CapacityMessage(
                    request_id=f"{request_id}/request",
                    kind=CapacityMessageKind.REQUEST,
                    request=request,
                    reply_to=workflow.info().workflow_id,
                ).model_dump(mode="json"),
                static_summary=f"GPU ledger of cluster {spec.cluster}",
            )
        )
        answer = await self._await_admission(request_id)
        metrics.admission_waited(spec.cluster, asked_at)
        return answer

    async def _await_admission(self, request_id: str) -> CapacityAnswer:
        """Wait (without timers: the ledger answers by signal) until the request is decided."""
        await workflow.wait_condition(
            lambda: (
                (answer := self._answers.get(request_id)) is not None
                and answer.decision is not Decision.WAITING
            )
        )
        answer = self._answers[request_id]
        if answer.decision is Decision.ADMITTED:
            self._condition(
                ConditionType.FEASIBLE,
                True,
                ConditionReason.GPU_CAPACITY_RESERVED,
                # The ledger's message names the nodes already ("... reserved on n1").
                answer.message or f"GPUs reserved on {', '.join(answer.nodes)}",
            )
            return answer
        reason = (
            ConditionReason.GPU_OFFERING_UNAVAILABLE
            if answer.decision is Decision.INFEASIBLE
            else ConditionReason.INTERNAL_ERROR
        )
        self._condition(ConditionType.FEASIBLE, False, reason, answer.message)
        raise WorkspaceFailed(reason, answer.message or f"GPU request {answer.decision.value}")

    async def _install(self, workspace_class: WorkspaceClassSpec, merged: MergedWorkspace) -> None:
        spec, state = self._spec, self._state
        self._set_phase(WorkspacePhase.DEPLOYING)
        kubeconfig = self._kubeconfig()
        namespace = workspace_namespace(spec.name)
        labels = {WORKSPACE_LABEL: spec.name}
        await ENSURE_NAMESPACE(
            EnsureNamespaceRequest(kubeconfig=kubeconfig, name=namespace, labels=labels)
        )
        state.namespace_created = True
        values_from = ""
        if merged.secret_values:
            values_from = values_secret_name(spec.cluster, spec.name)
            await WRITE_VALUES_SECRET(
                WriteValuesSecretRequest(
                    namespace=DEFAULT_NAMESPACE,
                    name=values_from,
                    workspace=spec.name,
                    secret_values=merged.secret_values,
                    labels=labels,
                )
            )
            state.values_secret_written = True
        name = service_set_name(spec.cluster, spec.name)
        release = helm_release_name(spec.cluster, spec.name)
        applied = await APPLY_SERVICE_SET(
            ApplyServiceSetRequest(
                namespace=DEFAULT_NAMESPACE,
                name=name,
                cluster_deployment=spec.cluster,
                services=[
                    ServiceSetService(
                        name=release,
                        namespace=namespace,
                        template=workspace_class.service_template.name,
                        values=merged.values,
                        values_from_secret=values_from,
                    )
                ],
                labels=labels,
                owner_workflow_id=workflow.info().workflow_id,
            )
        )
        state.service_set_created = True
        deadline = workflow.now() + workspace_class.deploy_timeout
        known = ""
        while True:
            seen = await AWAIT_SERVICE_SET(
                AwaitServiceSetRequest(
                    namespace=DEFAULT_NAMESPACE,
                    name=name,
                    service=release,
                    deadline=deadline,
                    known_state=known,
                    generation=applied.generation,
                ),
                wait=max(deadline - workflow.now(), timedelta(seconds=1)),
            )
            if seen.outcome is ServiceSetOutcome.DEPLOYED:
                self._condition(
                    ConditionType.HELM_RELEASE_READY,
                    True,
                    ConditionReason.HELM_RELEASE_DEPLOYED,
                    f"{release} deployed",
                )
                return
            if seen.outcome is ServiceSetOutcome.CHANGED:
                known = seen.state
                self._condition(
                    ConditionType.HELM_RELEASE_READY,
                    False,
                    ConditionReason.HELM_RELEASE_NOT_READY,
                    f"{release}: {seen.state or 'pending'}",
                )
                continue
            reason, message = {
                ServiceSetOutcome.FAILED: (
                    ConditionReason.HELM_RELEASE_FAILED,
                    f"{release} failed: {seen.message}",
                ),
                ServiceSetOutcome.GONE: (
                    ConditionReason.HELM_RELEASE_FAILED,
                    f"ServiceSet {name} was deleted",
                ),
            }.get(
                seen.outcome,
                (
                    ConditionReason.DEPLOY_TIMEOUT,
                    f"{release} was not deployed within "
                    f"{int(workspace_class.deploy_timeout.total_seconds() // 60)}m "
                    f"(state: {seen.state or 'none'})",
                ),
            )
            self._condition(ConditionType.HELM_RELEASE_READY, False, reason, message)
            events = await RECENT_EVENTS(
                RecentEventsRequest(kubeconfig=kubeconfig, namespace=namespace)
            )
            state.failure_context = FailureContext(
                phase_when_failed=WorkspacePhase.DEPLOYING,
                reason=message,
                service_set_status=seen.status,
                recent_events=list(reversed(events.events)),
            )
            raise WorkspaceFailed(reason, message)

    async def _route(self, workspace_class: WorkspaceClassSpec) -> None:
        spec, state = self._spec, self._state
        kubeconfig = self._kubeconfig()
        found = await FIND_TENANT_GATEWAY(FindTenantGatewayRequest(kubeconfig=kubeconfig))
        gateway = found.gateway
        if gateway is None:
            state.access = plan_access(spec.name, spec.cluster, workspace_class, None)
            domain = state.tenant_gateway_domain
            if domain:
                # Attached to a gateway that is not there: saying "no gateway" would hide it.
                missing = f"the cluster's tenant gateway ({domain}) is missing"
                for entry in state.access:
                    entry.message = f"{missing}: reach it with `{entry.command}`"
                self._condition(
                    ConditionType.ROUTES_READY,
                    False,
                    ConditionReason.GATEWAY_MISSING,
                    f"{missing}: no route was made; reach the endpoints with kubectl port-forward",
                )
                return
            self._condition(
                ConditionType.ROUTES_READY,
                True,
                ConditionReason.NO_GATEWAY,
                "no tenant gateway: reach the endpoints with kubectl port-forward",
            )
            return
        await self._allocate_ports(workspace_class, gateway, found.taken_ports)
        entries = plan_access(spec.name, spec.cluster, workspace_class, gateway, state.tcp_ports)
        routes: list[RouteSpec] = []
        primary = True
        for endpoint in workspace_class.access_endpoints:
            service = endpoint_service_name(spec.cluster, spec.name, endpoint)
            if endpoint.protocol is EndpointProtocol.HTTP:
                routes.append(
                    RouteSpec(
                        name=f"{spec.name}-{endpoint.name}",
                        kind="HTTPRoute",
                        service=service,
                        port=endpoint.port,
                        hostname=http_hostname(
                            spec.name, endpoint.name, gateway.domain, primary=primary
                        ),
                        section_name="https" if gateway.https else "http",
                    )
                )
                primary = False
            elif endpoint.name in state.tcp_ports:
                routes.append(
                    RouteSpec(
                        name=f"{spec.name}-{endpoint.name}",
                        kind="TCPRoute",
                        service=service,
                        port=endpoint.port,
                        listener_port=state.tcp_ports[endpoint.name],
                    )
                )
        if routes:
            await APPLY_ROUTES(
                ApplyRoutesRequest(
                    kubeconfig=kubeconfig,
                    namespace=workspace_namespace(spec.name),
                    gateway_namespace=found.gateway_namespace,
                    gateway_name=found.gateway_name,
                    routes=routes,
                    labels={WORKSPACE_LABEL: spec.name},
                )
            )
            state.routes = [RouteRecord(name=r.name, kind=r.kind) for r in routes]
            accepted = await AWAIT_ROUTES(
                AwaitRoutesRequest(
                    kubeconfig=kubeconfig,
                    namespace=workspace_namespace(spec.name),
                    routes=routes,
                    deadline=workflow.now() + ROUTES_DEADLINE,
                ),
                wait=ROUTES_DEADLINE,
            )
            by_route = {route.name: route for route in accepted.routes}
            for entry in entries:
                route = by_route.get(f"{spec.name}-{entry.name}")
                if route is not None:
                    entry.ready = route.accepted
                    entry.message = "" if route.accepted else route.message
        state.access = entries
        not_ready = [entry for entry in entries if not entry.ready]
        self._condition(
            ConditionType.ROUTES_READY,
            not not_ready,
            ConditionReason.ROUTES_READY if not not_ready else ConditionReason.ROUTING_IN_PROGRESS,
            "; ".join(f"{e.name}: {e.message}" for e in not_ready) or "every endpoint is reachable",
        )

    async def _allocate_ports(
        self, workspace_class: WorkspaceClassSpec, gateway: GatewayInfo, taken: list[int]
    ) -> None:
        """Pool ports for the TCP/SSH endpoints, from the cluster's ledger: one writer per cluster,
        so two workspaces deployed at once never get the same listener."""
        endpoints = [
            e.name
            for e in workspace_class.access_endpoints
            if e.protocol is not EndpointProtocol.HTTP
        ]
        if not endpoints or not gateway.tcp_ports:
            return
        state = self._state
        request_id = f"{self._spec.name}/{state.incarnation}/ports#{state.book.operations_run}"
        ours = set(state.tcp_ports.values())
        await SIGNAL_WITH_START(
            SignalWithStartRequest(
                workflow=LEDGER_WORKFLOW,
                workflow_id=capacity_workflow_id(self._spec.cluster),
                input=CapacityLedgerInput(cluster=self._spec.cluster).model_dump(mode="json"),
                signal=CAPACITY_SIGNAL,
                payload=CapacityMessage(
                    request_id=request_id,
                    kind=CapacityMessageKind.PORTS,
                    holder=self._spec.name,
                    endpoints=endpoints,
                    pool=gateway.tcp_ports,
                    taken=[port for port in taken if port not in ours],
                    reply_to=workflow.info().workflow_id,
                ).model_dump(mode="json"),
                static_summary=f"GPU ledger of cluster {self._spec.cluster}",
            )
        )
        await workflow.wait_condition(lambda: request_id in self._ports)
        state.tcp_ports = dict(self._ports[request_id].ports)

    async def _release_ports(self) -> None:
        if not self._state.tcp_ports:
            return
        await SIGNAL_WORKFLOW(
            SignalWorkflowRequest(
                workflow_id=capacity_workflow_id(self._spec.cluster),
                signal=CAPACITY_SIGNAL,
                payload=CapacityMessage(
                    request_id=f"{self._spec.name}/{self._state.incarnation}/release-ports#"
                    f"{self._state.book.operations_run}",
                    kind=CapacityMessageKind.RELEASE_PORTS,
                    holder=self._spec.name,
                ).model_dump(mode="json"),
            )
        )
        self._state.tcp_ports = {}

    # --- Suspend, delete -------------------------------------------------------------------------

    async def _uninstall(self) -> None:
        """Remove routes, the release (waited for) and the values Secret; keep the namespace."""
        spec, state = self._spec, self._state
        if state.routes and state.kubeconfig is not None:
            await DELETE_ROUTES(
                DeleteRoutesRequest(
                    kubeconfig=state.kubeconfig,
                    namespace=workspace_namespace(spec.name),
                    routes=[
                        RouteSpec(name=r.name, kind=r.kind, service="", port=1)
                        for r in state.routes
                    ],
                )
            )
        state.routes = []
        await self._release_ports()
        state.access = []
        gone = await DELETE_SERVICE_SET(
            DeleteServiceSetRequest(
                namespace=DEFAULT_NAMESPACE,
                name=service_set_name(spec.cluster, spec.name),
                wait_until=workflow.now() + UNINSTALL_DEADLINE,
            ),
            wait=UNINSTALL_DEADLINE,
        )
        if not gone.gone:
            raise WorkspaceFailed(
                ConditionReason.INTERNAL_ERROR,
                f"ServiceSet {service_set_name(spec.cluster, spec.name)} was not uninstalled within "
                f"{int(UNINSTALL_DEADLINE.total_seconds() // 60)}m",
            )
        state.service_set_created = False
        await DELETE_VALUES_SECRET(
            DeleteValuesSecretRequest(
                namespace=DEFAULT_NAMESPACE, name=values_secret_name(spec.cluster, spec.name)
            )
        )
        state.values_secret_written = False

    async def _release_capacity(self, reason: str) -> None:
        admission = self._state.admission
        if admission is None:
            return
        await SIGNAL_WORKFLOW(
            SignalWorkflowRequest(
                workflow_id=capacity_workflow_id(self._spec.cluster),
                signal=CAPACITY_SIGNAL,
                payload=CapacityMessage(
                    request_id=f"{admission.request_id}/release",
                    kind=CapacityMessageKind.RELEASE,
                    target=admission.request_id,
                    reason=reason,
                ).model_dump(mode="json"),
            )
        )
        self._state.admission = None

    async def _suspend(self) -> None:
        await self._uninstall()
        await self._release_capacity("suspended")
        self._state.suspended = True
        self._condition(ConditionType.READY, False, ConditionReason.SUSPENDED, "suspended")
        self._set_phase(WorkspacePhase.SUSPENDED)

    async def _delete(self) -> None:
        spec, state = self._spec, self._state
        self._set_phase(WorkspacePhase.DELETING)
        try:
            await self._uninstall()
            if state.kubeconfig is not None:
                await DELETE_NAMESPACE(
                    DeleteNamespaceRequest(
                        kubeconfig=state.kubeconfig,
                        name=workspace_namespace(spec.name),
                        wait_until=workflow.now() + UNINSTALL_DEADLINE,
                    ),
                    wait=UNINSTALL_DEADLINE,
                )
            state.namespace_created = False
            await self._release_capacity("deleted")
        except Exception as error:
            if not is_failure(error):
                raise
            self._set_phase(
                WorkspacePhase.FAILED,
                f"delete did not finish: {reason_of(error)}; repeat the delete to finish it",
            )
            raise
        self._set_phase(WorkspacePhase.DELETED)

    # --- Signals -----------------------------------------------------------------------------------

    @workflow.signal(name=WorkspaceSignal.CAPACITY_ANSWER)
    def capacity_answer(self, answer: CapacityAnswer) -> None:
        """The ledger's answer to this workspace's GPU request (and every later change of it)."""
        admission = self._state.admission
        if admission is None or answer.request_id != admission.request_id:
            return  # an answer to an earlier request (before a suspend, a redeploy)
        self._answers[answer.request_id] = answer
        admission.position = answer.position
        admission.placements = answer.placements
        admission.message = answer.message
        if answer.decision is Decision.WAITING:
            was_admitted = admission.state is AdmissionState.ADMITTED
            admission.state = AdmissionState.WAITING
            if was_admitted and self._state.phase is WorkspacePhase.RUNNING:
                # Its GPUs' node left (a forced scale-down): wait and install again.
                self._condition(
                    ConditionType.FEASIBLE,
                    False,
                    ConditionReason.GPU_CAPACITY_LOST,
                    "its GPUs were taken by a scale-down; waiting for new ones",
                )
                self._engine.enqueue(
                    lambda op_id: WorkspaceOperation(
                        id=op_id, request=RedeployWorkspaceRequest(reason="GPUs taken")
                    )
                )
            # The position moves without this workspace hearing of it: the clients ask the
            # ledger for the current one, so none is written where it would go stale.
            queue = answer.selector if answer.selector != "*" else "any GPU"
            self._condition(
                ConditionType.FEASIBLE,
                False,
                ConditionReason.WAITING_FOR_GPU_CAPACITY,
                f"waiting for GPUs in the queue for {queue}",
            )
            self._set_phase(WorkspacePhase.WAITING, f"waiting for GPUs in the queue for {queue}")
        elif answer.decision is Decision.ADMITTED:
            admission.state = AdmissionState.ADMITTED
            admission.position = 0

    @workflow.signal(name=WorkspaceSignal.PORTS_ANSWER)
    def ports_answer(self, answer: PortsAnswer) -> None:
        """The ledger's answer: this workspace's gateway pool ports."""
        self._ports[answer.request_id] = answer

    @workflow.signal(name=WorkspaceSignal.PREREQUISITE_ANSWER)
    def prerequisite_answer(self, answer: PrerequisiteAnswer) -> None:
        """A prerequisite's workflow reports its outcome."""
        self._prerequisites[answer.request_id] = answer
        for status in self._state.prerequisites:
            if status.name == answer.template:
                status.phase = answer.phase
                status.source = answer.source
                status.message = answer.message

    @workflow.signal(name=WorkspaceSignal.DELETE_REQUESTED)
    def delete_requested(self, request: DeleteRequested) -> None:
        """Its cluster (or colony) is being deleted: delete the workspace now."""
        if self._engine.request_ids.first_time(request.request_id):
            self._start_delete(DeleteWorkspaceRequest(reason=request.reason))

    @workflow.signal(name=SignalName.REFRESH)
    def refresh(self, request: RefreshRequest) -> None:
        """A watcher saw its ServiceSet change (the running waits read it within seconds anyway)."""
        self._engine.request_ids.first_time(request.request_id)

    # --- Updates -----------------------------------------------------------------------------------

    def _accepted(self, operation: WorkspaceOperation) -> WorkspaceOperationAccepted:
        return WorkspaceOperationAccepted(
            operation_id=operation.id,
            kind=operation.kind,
            position=self._engine.position(operation),
        )

    def _pending(self, kind: type[Any]) -> WorkspaceOperation | None:
        engine = self._engine
        return next(
            (
                op
                for op in [engine.running, *engine.queue]
                if op is not None and isinstance(op.request, kind)
            ),
            None,
        )

    def _start_delete(self, request: DeleteWorkspaceRequest) -> WorkspaceOperation:
        pending = self._pending(DeleteWorkspaceRequest)
        if pending is not None:
            return pending
        engine = self._engine
        engine.cancel_queue(f"cancelled: workspace '{self._spec.name}' is being deleted")
        engine.interrupt(
            Interruption(f"interrupted: workspace '{self._spec.name}' is being deleted")
        )
        return engine.enqueue(
            lambda op_id: WorkspaceOperation(id=op_id, request=request), front=True
        )

    def _submit(self, request: WorkspaceOperationRequest) -> WorkspaceOperationAccepted:
        known = self._engine.known_update()
        if known is not None:
            return self._accepted(known)
        return self._accepted(
            self._engine.enqueue(lambda op_id: WorkspaceOperation(id=op_id, request=request))
        )

    def _refuse_when_gone(self) -> None:
        if self._state.phase in (WorkspacePhase.DELETING, WorkspacePhase.DELETED):
            raise rejected(
                f"workspace '{self._spec.name}' is being deleted",
                not_found=self._state.phase is WorkspacePhase.DELETED,
            )

    @workflow.update
    async def suspend(self, request: SuspendWorkspaceRequest) -> WorkspaceOperationAccepted:
        """Uninstall the release, keep the namespace and definition, free the GPUs."""
        return self._submit(request)

    @suspend.validator
    def _validate_suspend(self, request: SuspendWorkspaceRequest) -> None:
        if self._engine.known_update() is not None:
            return
        self._refuse_when_gone()
        if self._state.phase is WorkspacePhase.SUSPENDED or self._pending(SuspendWorkspaceRequest):
            raise rejected(f"workspace '{self._spec.name}' is already suspended")

    @workflow.update
    async def resume(self, request: ResumeWorkspaceRequest) -> WorkspaceOperationAccepted:
        """Deploy a suspended (or failed) workspace again, through admission again."""
        return self._submit(request)

    @resume.validator
    def _validate_resume(self, request: ResumeWorkspaceRequest) -> None:
        if self._engine.known_update() is not None:
            return
        self._refuse_when_gone()
        suspended = self._state.phase is WorkspacePhase.SUSPENDED or self._pending(
            SuspendWorkspaceRequest
        )
        if not suspended and self._state.phase is not WorkspacePhase.FAILED:
            raise rejected(
                f"workspace '{self._spec.name}' is {self._state.phase.value}: only a suspended or "
                "failed workspace can be resumed"
            )

    @workflow.update
    async def delete(self, request: DeleteWorkspaceRequest) -> WorkspaceOperationAccepted:
        """Delete the workspace now (a delete while one runs returns that delete)."""
        known = self._engine.known_update()
        if known is not None:
            return self._accepted(known)
        return self._accepted(self._start_delete(request))

    @delete.validator
    def _validate_delete(self, request: DeleteWorkspaceRequest) -> None:
        if self._state.phase is WorkspacePhase.DELETED:
            raise rejected(f"workspace '{self._spec.name}' is deleted", not_found=True)

    # --- Query -------------------------------------------------------------------------------------

    @workflow.query
    def status(self) -> WorkspaceStatus:
        """The workspace as it is: phase, conditions, admission, access, operations."""
        spec, state = self._spec, self._state
        return WorkspaceStatus.model_validate(
            {
                "name": spec.name,
                "class": spec.class_name,
                "cluster": spec.cluster,
                "phase": state.phase,
                "message": state.message,
                "conditions": state.conditions,
                "resolved_resources": state.resolved_resources,
                "prerequisites": state.prerequisites,
                "admission": state.admission,
                "access": state.access,
                "failure_context": state.failure_context,
                "namespace": workspace_namespace(spec.name),
                "service_set": service_set_name(spec.cluster, spec.name),
                "suspended": state.suspended,
                "created_at": state.created_at,
                "updated_at": workflow.now(),
                "current_operation": self._engine.running,
                "queued_operations": state.queue,
                "completed_operations": state.completed,
            }
        )

    # --- Helpers -------------------------------------------------------------------------------------

    def _kubeconfig(self) -> KubeconfigRef:
        if self._state.kubeconfig is None:
            raise WorkspaceFailed(ConditionReason.INTERNAL_ERROR, "the cluster was not resolved")
        return self._state.kubeconfig

    def _condition(
        self, condition: ConditionType, ok: bool, reason: ConditionReason, message: str
    ) -> None:
        status = ConditionStatus.TRUE if ok else ConditionStatus.FALSE
        self._state.conditions = set_condition(
            self._state.conditions, condition, status, reason, message, workflow.now()
        )

    def _fail_state(self, error: BaseException) -> None:
        message = (
            reason_of(error).split(": ", 1)[-1]
            if not isinstance(error, WorkspaceFailed)
            else error.message
        )
        if self._state.failure_context is None:
            self._state.failure_context = FailureContext(
                phase_when_failed=self._state.phase, reason=message
            )
        self._condition(
            ConditionType.READY,
            False,
            ConditionReason(error.type)
            if isinstance(error, WorkspaceFailed)
            and error.type in {r.value for r in ConditionReason}
            else ConditionReason.INTERNAL_ERROR,
            message,
        )
        self._set_phase(WorkspacePhase.FAILED, message)

    def _set_phase(self, phase: WorkspacePhase, message: str = "") -> None:
        self._state.phase = phase
        self._state.message = message
        self._state.updated_at = workflow.now()
        resources = self._spec.resources
        gpu_model = (resources.per_replica.gpu_type or "") if resources else ""
        current = workflow.info().typed_search_attributes
        wanted = [
            (COLONY_KIND, KIND),
            (COLONY_CLUSTER, self._spec.cluster),
            (COLONY_GPU_MODEL, gpu_model),
            (COLONY_PHASE, phase.value),
        ]
        # Only what changed: a waiting workspace's position moves often, its phase does not, and
        # each upsert is an event of its history.
        if any(current.get(key) != value for key, value in wanted):
            upsert_search_attributes(*(key.value_set(value) for key, value in wanted))
        self._engine.show_details()

    def _headline(self) -> list[str]:
        state = self._state
        lines = [
            f"**{self._spec.name}** ({self._spec.class_name}) on `{self._spec.cluster}`: "
            f"{state.phase.value}"
        ]
        if state.message:
            lines.append(state.message)
        if state.admission is not None and state.admission.state is AdmissionState.WAITING:
            lines.append("waiting for GPUs (`colonyctl workspace get` tells the position)")
        ready = [entry for entry in state.access if entry.ready and entry.url]
        if ready:
            lines.append("access: " + ", ".join(f"{e.name} {e.url}" for e in ready))
        return lines
