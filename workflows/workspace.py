"""`WorkspaceWorkflow`: one durable workflow per workspace, id `workspace/[<organization>/]<name>`,
from deploy to delete (the exalsius WorkspaceDeployment, as a workflow).

Built on the entity engine (`workflows/engine.py`): deploy (queued at start), `suspend`, `resume`
and `delete` (updates; delete also as the `delete_requested` signal a cluster sends before it
goes) run one at a time; delete jumps the queue and interrupts what runs.

The plan of a deploy, each step with its condition:
1. ClassResolved: the pinned class, read from the management cluster (missing: Failed,
   ClassNotFound). ClusterDeploymentResolved: the cluster's ClusterDeployment (its name derived
   from the workspace's organization and cluster, `models.identity`) carries the marks of that
   cluster's workflow and organization and is Ready (not yet: Pending until it is, up to
   `PENDING_DEADLINE`; unknown, or not the organization's: Failed, "does not exist").
2. Values: class defaults and the user's values merged as Helm merges values files, prompts
   checked, resources injected (`models/values.py`); a problem fails with InvalidValues before
   anything is installed.
3. PrerequisitesMet: each prerequisite through `prereq/<ClusterDeployment>/<template>` (signal-with-start;
   one installation shared by every workspace), answered by signal.
4. Feasible: GPUs through the cluster's ledger `capacity/<ClusterDeployment>` (signal-with-start; answered by
   the signal `capacity_answer`): admitted, or Waiting with its position (strict first-come order)
   until capacity frees, or Failed (GpuOfferingUnavailable) when the cluster has no such GPUs.
5. HelmReleaseReady: namespace `ws-<name>` in the child (refused, untouched, when one of that name
   exists without this workspace's ownership marks: a user's own is never adopted), the unsealed
   secret values in a Secret on
   the management cluster (only sealed values ever reach this workflow), a k0rdent ServiceSet
   targeting the cluster's ClusterDeployment, waited on until Deployed or Failed within the class's
   deploy timeout (Colony enforces it). Deployed: Running.
6. RoutesReady (the access step, `models.workspace_access`): through the cluster's tenant Gateway,
   an HTTPRoute per HTTP endpoint and a TCPRoute on a pool port for TCP/SSH ones, each endpoint
   reporting how the Gateway's controller answered for its route (one refused, its Service
   missing, holds neither the others nor the phase); the ClusterDeployment attached to a tenant
   gateway whose Gateway is missing: RoutingInfraNotReady, until it is there; no tenant gateway:
   each endpoint's `kubectl port-forward`, on a local port of its own.

A failure's context is the exalsius operator's: the failing condition's reason (HelmReleaseFailed,
GpuOfferingUnavailable, ...), its message, the ServiceSet's service states, and recent events
with the failure first.

Routes follow the gateway: between operations, a running workspace routes again when its
cluster's Gateway appears, changes or goes, told by the watcher (`gateway_changed`), or by itself
(`ROUTES_RETRY` while its routes are in progress or its Gateway is missing, `ROUTES_FALLBACK`
otherwise), without a suspend and resume.

Waiting costs nothing: admission and prerequisites are answered by signals, installs and routes are
waited on inside heartbeating activities; a workspace that waits a day for GPUs adds nothing to its
history while it waits, however many are admitted before it: the ledger answers once when asked
and once when it is admitted, and positions in between are the ledger's to work out when someone
asks (`workspace get`, the API). A running one's looks at its gateway cost a few events each.

Suspend removes routes and the release (namespace and volumes stay), then frees the GPUs; resume
goes through admission again; delete removes routes and the ServiceSet (waited for: its removal is
seen as a watch event), frees the GPUs, which admits the next waiting workspace, then removes the
values Secret and the namespace (each only if it carries this workspace's marks). A failed deploy
frees its GPUs too and keeps what it installed for inspection until it is deleted or resumed.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError, FailureError

from workflows import metrics
from workflows.activity_calls import AWAIT_CLUSTER_DEPLOYMENT
from workflows.engine import (
    EntityEngine,
    Interrupted,
    Interruption,
    error_type_of,
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
    from models.identity import capacity_workflow_id, prerequisite_workflow_id
    from models.ownership import Owner
    from models.signals import GatewayChanged, RefreshRequest, SignalName
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
        GatewayInfo,
        PrerequisitePhase,
        PrerequisiteStatus,
        RouteRecord,
        WorkspacePhase,
        WorkspaceState,
        WorkspaceStatus,
        WorkspaceWorkflowInput,
        capacity_request_id,
        condition,
        failure_context,
        plan_access,
        set_condition,
        workspace_namespace,
    )
    from models.workspace_access import (
        awaiting_gateway,
        gateway_missing_message,
        routes_condition,
        routes_for,
        with_route_states,
    )
    from models.workspace_api import (
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
        FindTenantGatewayResult,
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
        WorkspaceSignal,
        WriteValuesSecretRequest,
        workspace_labels,
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
ROUTES_SETTLE = timedelta(minutes=1)
"""How long the access step waits for the gateway's controller to answer for new routes; past
it, the endpoints not answered for are `RoutingInProgress` and the next look sees the answer."""
ROUTES_RETRY = timedelta(minutes=1)
"""A running workspace whose routes are in progress, or whose Gateway is missing, looks at its
gateway this often by itself."""
ROUTES_FALLBACK = timedelta(minutes=10)
"""... and any other running one this often: the watcher's `gateway_changed` tells it within a
second; this only bounds how stale routes get without one (a look that finds nothing new is one
activity). An endpoint refused for good (its chart renders no Service) waits for a change, not for
time, so it is looked at no more often."""
ROUTES_PENDING = {ConditionReason.ROUTING_IN_PROGRESS, ConditionReason.ROUTING_INFRA_NOT_READY}
"""RoutesReady's reasons that time may change: looked at again after `ROUTES_RETRY`."""
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
        # Whose the workspace's objects are: this workflow's, of the workspace's organization.
        self._owner = Owner(workflow_id=info.workflow_id, organization=input.spec.organization)
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
        """Run the workspace's operations until it is deleted; between them, look at the routes
        whenever the gateway may have changed (a `gateway_changed` signal, or the fallback)."""
        self._set_phase(self._state.phase)
        while True:
            await self._engine.run_until(
                lambda: self._state.phase is WorkspacePhase.DELETED or self._state.routes_look_due,
                self._execute,
                continue_as_new=lambda: workflow.continue_as_new(
                    WorkspaceWorkflowInput(spec=self._spec, state=self._state)
                ),
                on_workflow_cancel=self._on_workflow_cancel,
                idle=(self._routes_look_interval, self._routes_look_wanted),
            )
            if self._state.phase is WorkspacePhase.DELETED:
                break
            await self._look_at_routes()
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
        # Running as soon as the release is: routes are the access step's own business, and an
        # endpoint that cannot be routed never holds the workspace (nor the other endpoints).
        self._condition(ConditionType.READY, True, ConditionReason.DEPLOYMENT_READY, "running")
        self._set_phase(WorkspacePhase.RUNNING)
        await self._route(workspace_class)

    async def _resolve_class(self) -> WorkspaceClassSpec:
        state = self._state
        if state.class_spec is not None and state.class_spec.name == self._spec.class_name:
            return state.class_spec
        found = await GET_WORKSPACE_CLASS(
            GetWorkspaceClassRequest(
                name=self._spec.class_name, organization=self._spec.organization
            )
        )
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
        spec = self._spec
        cluster = spec.cluster
        deadline = workflow.now() + PENDING_DEADLINE
        known: list[Condition] = []
        first = True
        while True:
            seen = await AWAIT_CLUSTER_DEPLOYMENT(
                AwaitClusterDeploymentRequest(
                    namespace=DEFAULT_NAMESPACE,
                    name=spec.cluster_deployment,
                    want=DeploymentWait.READY,
                    deadline=deadline,
                    # Only the workspace's organization's cluster of that name: any other
                    # ClusterDeployment (not Colony's, another owner's) is not there at all.
                    owner=Owner(
                        workflow_id=spec.cluster_workflow_id, organization=spec.organization
                    ),
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
            namespace=DEFAULT_NAMESPACE, secret_name=kubeconfig_secret_name(spec.cluster_deployment)
        )
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
            namespace = prerequisite.install_namespace
            request_id = f"{info.workflow_id}/{self._state.incarnation}/{template.name}#{self._state.book.operations_run}"
            asked[request_id] = template.name
            self._state.prerequisites.append(
                PrerequisiteStatus(name=template.name, namespace=namespace)
            )
            await SIGNAL_WITH_START(
                SignalWithStartRequest(
                    workflow=PREREQUISITE_WORKFLOW,
                    workflow_id=prerequisite_workflow_id(
                        self._spec.cluster_deployment, template.name
                    ),
                    input=PrerequisiteInput(
                        cluster=self._spec.cluster,
                        organization=self._spec.organization,
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
                workflow_id=capacity_workflow_id(spec.cluster_deployment),
                input=CapacityLedgerInput(cluster=spec.cluster_deployment).model_dump(mode="json"),
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
        metrics.admission_waited(spec.cluster_deployment, asked_at)
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
        labels = workspace_labels(spec.name)
        await ENSURE_NAMESPACE(
            EnsureNamespaceRequest(
                kubeconfig=kubeconfig, name=namespace, owner=self._owner, labels=labels
            )
        )
        state.namespace_created = True
        values_from = ""
        if merged.secret_values:
            values_from = spec.values_secret_name
            await WRITE_VALUES_SECRET(
                WriteValuesSecretRequest(
                    namespace=DEFAULT_NAMESPACE,
                    name=values_from,
                    workspace=spec.name,
                    secret_values=merged.secret_values,
                    owner=self._owner,
                    labels=labels,
                )
            )
            state.values_secret_written = True
        name = spec.service_set_name
        release = spec.release_name
        applied = await APPLY_SERVICE_SET(
            ApplyServiceSetRequest(
                namespace=DEFAULT_NAMESPACE,
                name=name,
                cluster_deployment=spec.cluster_deployment,
                services=[
                    ServiceSetService(
                        name=release,
                        namespace=namespace,
                        template=workspace_class.service_template.name,
                        values=merged.values,
                        values_from_secret=values_from,
                    )
                ],
                owner=self._owner,
                labels=labels,
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
                    owner=self._owner,
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
            state.failure_context = failure_context(
                WorkspacePhase.DEPLOYING,
                reason,
                message,
                workflow.now(),
                service_set_status=seen.status,
                events=events.events,
            )
            raise WorkspaceFailed(reason, message)

    # --- Access: routes follow the cluster's tenant gateway ----------------------------------------

    async def _route(
        self, workspace_class: WorkspaceClassSpec, found: FindTenantGatewayResult | None = None
    ) -> None:
        """Make the endpoints reachable as the cluster's gateway is now (`found`, or looked at
        now). Routing never fails the workspace: what goes wrong is the endpoints' state and
        RoutesReady's (`RoutingError`), and the next look tries again."""
        try:
            found = found or await self._find_gateway()
            self._state.gateway_fingerprint = found.fingerprint()
            if found.gateway is not None:
                await self._route_through_gateway(workspace_class, found, found.gateway)
            elif found.expected_domain:
                self._await_gateway(workspace_class, found.expected_domain)
            else:
                await self._route_by_port_forward(workspace_class)
        except Exception as error:
            if not is_failure(error):
                raise  # an interruption (a delete) or a bug
            message = f"routes could not be made: {reason_of(error)}"
            self._state.access = [
                entry.model_copy(
                    update={
                        "ready": False,
                        "reason": ConditionReason.ROUTING_ERROR.value,
                        "message": message,
                    }
                )
                for entry in self._state.access
                or plan_access(self._spec.name, self._spec.release_name, workspace_class, None)
            ]
            self._condition(
                ConditionType.ROUTES_READY, False, ConditionReason.ROUTING_ERROR, message
            )

    async def _find_gateway(self) -> FindTenantGatewayResult:
        return await FIND_TENANT_GATEWAY(
            FindTenantGatewayRequest(
                kubeconfig=self._kubeconfig(), cluster_deployment=self._spec.cluster_deployment
            )
        )

    async def _route_through_gateway(
        self,
        workspace_class: WorkspaceClassSpec,
        found: FindTenantGatewayResult,
        gateway: GatewayInfo,
    ) -> None:
        """An HTTPRoute per HTTP endpoint and a TCPRoute per SSH/TCP one on its pool port, each
        endpoint reported as the Gateway's controller (of `gateway`, as `found`) answered for its
        route."""
        spec, state = self._spec, self._state
        await self._allocate_ports(workspace_class, gateway, found.taken_ports)
        routes = routes_for(spec, workspace_class, gateway, state.tcp_ports)
        await self._remove_routes(keep={route.name for route in routes})
        entries = plan_access(
            spec.name, spec.release_name, workspace_class, gateway, state.tcp_ports
        )
        if routes:
            namespace = workspace_namespace(spec.name)
            await APPLY_ROUTES(
                ApplyRoutesRequest(
                    kubeconfig=self._kubeconfig(),
                    namespace=namespace,
                    gateway_namespace=found.gateway_namespace,
                    gateway_name=found.gateway_name,
                    routes=routes,
                    owner=self._owner,
                    labels=workspace_labels(spec.name),
                )
            )
            state.routes = [RouteRecord(name=r.name, kind=r.kind) for r in routes]
            seen = await AWAIT_ROUTES(
                AwaitRoutesRequest(
                    kubeconfig=self._kubeconfig(),
                    namespace=namespace,
                    routes=routes,
                    owner=self._owner,
                    deadline=workflow.now() + ROUTES_SETTLE,
                ),
                wait=ROUTES_SETTLE,
            )
            entries = with_route_states(spec, entries, seen.routes)
        state.access = entries
        ok, reason, message = routes_condition(
            entries, expected_domain=found.expected_domain, gateway_domain=gateway.domain
        )
        self._condition(ConditionType.ROUTES_READY, ok, reason, message)

    def _await_gateway(self, workspace_class: WorkspaceClassSpec, domain: str) -> None:
        """The cluster is attached to a tenant gateway whose Gateway is missing: the routes made
        stay (they attach again when it is back), the endpoints wait for it."""
        self._state.access = awaiting_gateway(
            self._spec, workspace_class, domain, self._state.tcp_ports
        )
        self._condition(
            ConditionType.ROUTES_READY,
            False,
            ConditionReason.ROUTING_INFRA_NOT_READY,
            gateway_missing_message(self._spec.cluster, domain),
        )

    async def _route_by_port_forward(self, workspace_class: WorkspaceClassSpec) -> None:
        """No tenant gateway: no routes (those of a gateway that went are removed, its pool
        ports given back), every endpoint through `kubectl port-forward`."""
        await self._remove_routes()
        await self._release_ports()
        self._state.access = plan_access(
            self._spec.name, self._spec.release_name, workspace_class, None
        )
        self._condition(
            ConditionType.ROUTES_READY,
            True,
            ConditionReason.NO_GATEWAY,
            "no tenant gateway: reach the endpoints with kubectl port-forward",
        )

    async def _look_at_routes(self) -> None:
        """Between operations, when the gateway may have changed: route again if it did (or if
        some endpoint is not reachable yet); a look that finds nothing new costs one activity."""
        state = self._state
        state.routes_look_due = False
        if state.phase is not WorkspacePhase.RUNNING or state.class_spec is None:
            return
        try:
            found = await self._find_gateway()
        except Exception as error:
            if not is_failure(error):
                raise
            workflow.logger.warning("looking at the tenant gateway failed: %s", reason_of(error))
            return
        routes_ready = condition(state.conditions, ConditionType.ROUTES_READY)
        if (
            found.fingerprint() == state.gateway_fingerprint
            and routes_ready is not None
            and routes_ready.status is ConditionStatus.TRUE
        ):
            return
        await self._route(state.class_spec, found)

    def _routes_look_wanted(self) -> None:
        """The fallback: a running workspace looks at its gateway by itself now and then."""
        if self._state.phase is WorkspacePhase.RUNNING:
            self._state.routes_look_due = True

    def _routes_look_interval(self) -> timedelta | None:
        """How long a running workspace waits for a `gateway_changed` before it looks anyway:
        `ROUTES_RETRY` while routes are in progress or the Gateway is missing, `ROUTES_FALLBACK`
        otherwise."""
        if self._state.phase is not WorkspacePhase.RUNNING:
            return None
        routes_ready = condition(self._state.conditions, ConditionType.ROUTES_READY)
        if routes_ready is not None and routes_ready.reason in ROUTES_PENDING:
            return ROUTES_RETRY
        return ROUTES_FALLBACK

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
        state = self._state
        if not endpoints or not gateway.tcp_ports:
            return
        if set(endpoints) <= set(state.tcp_ports) and set(state.tcp_ports.values()) <= set(
            gateway.tcp_ports
        ):
            return  # held already, and still in the pool: a look again asks the ledger nothing
        request_id = self._ports_message_id("ports")
        ours = set(state.tcp_ports.values())
        await SIGNAL_WITH_START(
            SignalWithStartRequest(
                workflow=LEDGER_WORKFLOW,
                workflow_id=capacity_workflow_id(self._spec.cluster_deployment),
                input=CapacityLedgerInput(cluster=self._spec.cluster_deployment).model_dump(
                    mode="json"
                ),
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
        await self._tell_ledger(
            CapacityMessage(
                request_id=self._ports_message_id("release-ports"),
                kind=CapacityMessageKind.RELEASE_PORTS,
                holder=self._spec.name,
            )
        )
        self._state.tcp_ports = {}

    def _ports_message_id(self, kind: str) -> str:
        """A new id for each message about pool ports (a look at the routes may send several in
        one operation; the ledger acts on an id once)."""
        state = self._state
        state.ports_messages += 1
        return f"{self._spec.name}/{state.incarnation}/{kind}#{state.ports_messages}"

    async def _remove_routes(self, keep: set[str] | None = None) -> None:
        """Delete the routes this workspace made (but those named in `keep`)."""
        spec, state = self._spec, self._state
        gone = [r for r in state.routes if r.name not in (keep or set())]
        if gone and state.kubeconfig is not None:
            await DELETE_ROUTES(
                DeleteRoutesRequest(
                    kubeconfig=state.kubeconfig,
                    namespace=workspace_namespace(spec.name),
                    routes=[RouteSpec(name=r.name, kind=r.kind, service="", port=1) for r in gone],
                    owner=self._owner,
                )
            )
        state.routes = [r for r in state.routes if r not in gone]

    # --- Suspend, delete -------------------------------------------------------------------------

    async def _uninstall(self) -> None:
        """Remove routes, the release (waited for) and the values Secret; keep the namespace."""
        await self._unroute()
        await self._remove_release()
        await self._remove_values_secret()

    async def _unroute(self) -> None:
        """The front door goes first: routes and pool ports, before the release behind them."""
        await self._remove_routes()
        await self._release_ports()
        self._state.access = []
        self._state.gateway_fingerprint = ""

    async def _remove_release(self) -> None:
        """Delete the ServiceSet and wait until k0rdent has uninstalled its release (seen at once,
        through a watch): from then on the release's GPUs are free."""
        spec, state = self._spec, self._state
        gone = await DELETE_SERVICE_SET(
            DeleteServiceSetRequest(
                namespace=DEFAULT_NAMESPACE,
                name=spec.service_set_name,
                owner=self._owner,
                wait_until=workflow.now() + UNINSTALL_DEADLINE,
            ),
            wait=UNINSTALL_DEADLINE,
        )
        if not gone.gone:
            raise WorkspaceFailed(
                ConditionReason.INTERNAL_ERROR,
                f"ServiceSet {spec.service_set_name} was not uninstalled within "
                f"{int(UNINSTALL_DEADLINE.total_seconds() // 60)}m",
            )
        state.service_set_created = False

    async def _remove_values_secret(self) -> None:
        spec = self._spec
        await DELETE_VALUES_SECRET(
            DeleteValuesSecretRequest(
                namespace=DEFAULT_NAMESPACE, name=spec.values_secret_name, owner=self._owner
            )
        )
        self._state.values_secret_written = False

    async def _release_capacity(self, reason: str) -> None:
        admission = self._state.admission
        if admission is None:
            return
        await self._tell_ledger(
            CapacityMessage(
                request_id=f"{admission.request_id}/release",
                kind=CapacityMessageKind.RELEASE,
                target=admission.request_id,
                reason=reason,
            )
        )
        self._state.admission = None

    async def _tell_ledger(self, message: CapacityMessage) -> None:
        """A message to the cluster's running ledger, signalled from this workflow: two events and
        no activity's round trip, which the next waiter's admission would wait for. A ledger that
        has ended (its cluster was deleted) holds nothing to give back: not an error."""
        ledger = capacity_workflow_id(self._spec.cluster_deployment)
        try:
            await workflow.get_external_workflow_handle(ledger).signal(CAPACITY_SIGNAL, message)
        except FailureError as error:
            workflow.logger.info("%s not told (%s): %s", ledger, message.kind.value, error)

    async def _suspend(self) -> None:
        await self._unroute()
        await self._remove_release()
        # The GPUs go to the next in line as soon as the release is gone; the values Secret
        # holds none.
        await self._release_capacity("suspended")
        await self._remove_values_secret()
        self._state.suspended = True
        self._condition(ConditionType.READY, False, ConditionReason.SUSPENDED, "suspended")
        self._set_phase(WorkspacePhase.SUSPENDED)

    async def _delete(self) -> None:
        spec, state = self._spec, self._state
        self._set_phase(WorkspacePhase.DELETING)
        try:
            await self._unroute()
            await self._remove_release()
            # The next waiter is admitted once the release is uninstalled, not after the Secret
            # and the namespace: its pods are then terminating (the scheduler counts their GPUs
            # until they are gone, so the next workspace's pods wait out that grace period at
            # most), and nothing else of this workspace holds a GPU.
            await self._release_capacity("deleted")
            await self._remove_values_secret()
            if state.kubeconfig is not None:
                await DELETE_NAMESPACE(
                    DeleteNamespaceRequest(
                        kubeconfig=state.kubeconfig,
                        name=workspace_namespace(spec.name),
                        owner=self._owner,
                        wait_until=workflow.now() + UNINSTALL_DEADLINE,
                    ),
                    wait=UNINSTALL_DEADLINE,
                )
            state.namespace_created = False
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

    @workflow.signal(name=WorkspaceSignal.GATEWAY_CHANGED)
    def gateway_changed(self, change: GatewayChanged) -> None:
        """Its cluster's tenant Gateway appeared, changed or went (the watcher): a running
        workspace routes again now, between operations (one deploying routes at its end)."""
        if self._engine.request_ids.first_time(change.request_id):
            self._state.routes_look_due = True

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
                "service_set": spec.service_set_name,
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
        kind = error_type_of(error)
        reason = (
            ConditionReason(kind)
            if kind in {r.value for r in ConditionReason}
            else ConditionReason.INTERNAL_ERROR
        )
        if self._state.failure_context is None:
            # A step that knew more (the install: its ServiceSet's states and the namespace's
            # events) wrote it already; every other failure is its own first event.
            self._state.failure_context = failure_context(
                self._state.phase, reason, message, workflow.now()
            )
        self._condition(ConditionType.READY, False, reason, message)
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
            # The ClusterDeployment, injective across organizations: its cluster's delete finds
            # the workspaces it must delete first by it, and no other organization's.
            (COLONY_CLUSTER, self._spec.cluster_deployment),
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
