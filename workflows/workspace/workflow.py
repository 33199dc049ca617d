"""`WorkspaceWorkflow`: one durable workflow per workspace, id `workspace/[<organization>/]<name>`,
from deploy to delete (the exalsius WorkspaceDeployment, as a workflow; its contract:
`workflows/workspace/__init__.py`).

Built on the entity kit (`workflows/kit/`): deploy (queued at start), `suspend`, `resume` and
`delete` (updates; delete also as the `delete_requested` signal a cluster sends before it goes) run
one at a time; delete jumps the queue and interrupts what runs.

The plan of a deploy, each step with its condition, by concern:
1. ClassResolved, ClusterDeploymentResolved (Pending until the cluster is Ready), 2. values,
   3. PrerequisitesMet, 4. Feasible (GPUs from the cluster's ledger: admitted, Waiting with its
   position in strict first-come order, or Failed when the cluster has no such GPUs):
   `admission.py`;
5. HelmReleaseReady: namespace, values Secret, ServiceSet, deployed (then Running): `install.py`;
6. RoutesReady: the endpoints through the cluster's tenant gateway, or port-forward: `access.py`.
Suspend and delete are `teardown.py`. A failed deploy frees its GPUs too and keeps what it
installed for inspection until it is deleted or resumed (a resume of a failed deploy uninstalls
it first, then installs afresh).

A failure's context is the exalsius operator's: the failing condition's reason
(HelmReleaseFailed, GpuOfferingUnavailable, ...), its message, the ServiceSet's service states, and
recent events with the failure first.

Routes follow the gateway: between operations (the workflow's chore), a running workspace routes
again when its cluster's Gateway appears, changes or goes, told by the watcher
(`gateway_changed`), or by itself after a while, without a suspend and resume.

Waiting costs nothing: admission and prerequisites are answered by signals, installs and routes are
waited on inside heartbeating activities; a workspace that waits a day for GPUs adds nothing to its
history while it waits, however many are admitted before it: the ledger answers once when asked
and once when it is admitted, and positions in between are the ledger's to work out when someone
asks (`workspace get`, the API). A running one's looks at its gateway cost a few events each.
"""

from __future__ import annotations

from temporalio import workflow

from workflows.kit.engine import Chore, Interrupted, error_type_of, is_failure, reason_of, settle
from workflows.kit.entity import EntityWorkflow, delete_update, final, queued_update
from workflows.kit.service import tell
from workflows.search_attributes import (
    COLONY_CLUSTER,
    COLONY_GPU_MODEL,
    COLONY_KIND,
    COLONY_PHASE,
)
from workflows.workspace import access, admission, teardown
from workflows.workspace.context import WorkspaceContext, WorkspaceFailed
from workflows.workspace.install import install

with workflow.unsafe.imports_passed_through():
    from models.capacity import CapacityAnswer, Decision
    from models.errors import rejected
    from models.ownership import Owner
    from models.quota import WORKSPACE_NEED, HoldingReport, QuotaHolding
    from models.signals import GatewayChanged
    from models.workspace import (
        AdmissionState,
        ConditionReason,
        ConditionType,
        WorkspacePhase,
        WorkspaceState,
        WorkspaceStatus,
        WorkspaceWorkflowInput,
        failure_context,
        workspace_namespace,
    )
    from models.workspace_api import DeleteRequested, PortsAnswer, PrerequisiteAnswer
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
    from workflows.quota import QUOTA
    from workflows.workspace import WORKSPACE

KIND = "workspace"
QUOTA_PATCH = "quota-ledger"
"""`workflow.patched` id of the quota reports: workspaces that ran before them replay without."""


@workflow.defn(name=WORKSPACE.workflow_type)
class WorkspaceWorkflow(
    EntityWorkflow[WorkspaceOperation, WorkspaceOperationRequest, WorkspaceOperationAccepted]
):
    """The life of one workspace (see the module docstring)."""

    @workflow.init
    def __init__(self, input: WorkspaceWorkflowInput) -> None:
        self._spec = input.spec
        info = workflow.info()
        self._state = input.state or WorkspaceState(
            created_at=workflow.now(),
            incarnation=info.run_id,
            quota_held=bool(self._spec.organization) and workflow.patched(QUOTA_PATCH),
        )
        self._ws = WorkspaceContext(
            self._spec,
            self._state,
            Owner(workflow_id=info.workflow_id, organization=self._spec.organization),
            shown_changed=self.show_phase,
        )
        super().__init__(
            input, self._state, WorkspaceOperation, WORKSPACE.delete, DeployWorkspaceRequest()
        )

    @workflow.run
    async def run(self, input: WorkspaceWorkflowInput) -> WorkspaceStatus:
        """Run the workspace's operations until it is deleted; between them, look at the routes
        whenever the gateway may have changed (a `gateway_changed` signal, or the fallback)."""
        if self._state.quota_held and input.state is None:
            # Its organization's ledger hears from the workspace itself that it runs.
            await self._report_quota(WORKSPACE_NEED)
        await self.live()
        return self.status()

    async def _report_quota(self, holding: QuotaHolding, *, closed: bool = False) -> None:
        """Tell the organization's quota ledger what the workspace holds, or that it is gone."""
        info = workflow.info()
        await tell(
            QUOTA.holding,
            QUOTA.workflow_id(self._spec.organization),
            HoldingReport(
                request_id=f"{info.workflow_id}/{self._state.incarnation}/quota/{int(closed)}",
                holder=info.workflow_id,
                holding=holding,
                closed=closed,
            ),
        )

    def chore(self) -> Chore:
        """A look at the routes, when the watcher says the gateway changed, or by itself."""
        return Chore(
            due=lambda: self._state.routes_look_due,
            run=lambda: access.look_at_routes(self._ws),
            every=lambda: access.routes_look_interval(self._ws),
        )

    async def execute(self, operation: WorkspaceOperation) -> None:
        ws, request = self._ws, operation.request
        if isinstance(request, DeleteWorkspaceRequest):
            await final(
                teardown.delete(ws),
                failed=lambda reason: ws.set_phase(WorkspacePhase.FAILED, reason),
            )
            if self._state.quota_held:
                await settle(self._report_quota(QuotaHolding(), closed=True))
            return
        if isinstance(request, SuspendWorkspaceRequest):
            await teardown.suspend(ws)
            return
        try:
            if isinstance(request, ResumeWorkspaceRequest) and self._state.service_set_created:
                # A failed deploy left its release for inspection. k0rdent keeps reporting it
                # Failed until Sveltos retries on its own schedule (the sim: never, for the same
                # spec), so applying the same ServiceSet again would fail again at once: remove
                # it (routes, release, values Secret; the namespace and its volumes stay) and
                # install afresh.
                await teardown.uninstall(ws)
            await self._deploy(redeploy=isinstance(request, RedeployWorkspaceRequest))
        except Interrupted as error:
            # A deploy that does not finish holds no GPUs: the next waiter gets them. What it
            # installed stays for inspection until a delete or a resume.
            await settle(admission.release_capacity(ws, "the deploy did not finish"))
            if is_failure(error):
                self._fail_state(error)
            elif self._state.phase is not WorkspacePhase.DELETING:
                ws.set_phase(WorkspacePhase.FAILED, "the deploy was cancelled")
            raise

    async def _deploy(self, *, redeploy: bool = False) -> None:
        """The plan of a deploy (see the module docstring)."""
        ws, state = self._ws, self._state
        state.suspended = False
        state.failure_context = None
        if not redeploy:
            ws.set_phase(WorkspacePhase.PENDING)
        workspace_class = await admission.resolve_class(ws)
        await admission.resolve_cluster(ws)
        admission.merge(ws, workspace_class)  # refuse bad values before anything is installed
        if self._spec.suspend and not state.book.operations_run:
            ws.set_phase(WorkspacePhase.SUSPENDED, "deployed suspended: nothing installed")
            state.suspended = True
            return
        if redeploy and state.admission is not None:
            # Displaced (its GPUs' node left): the ledger put its request back in line at its
            # original place; wait for it there, then install on the new placement.
            answer: CapacityAnswer | None = await admission.await_admission(
                ws, state.admission.request_id
            )
        else:
            await admission.install_prerequisites(ws, workspace_class)
            answer = await admission.admit(ws, workspace_class)
        await install(ws, workspace_class, admission.merge(ws, workspace_class, answer))
        # Running as soon as the release is: routes are the access step's own business, and an
        # endpoint that cannot be routed never holds the workspace (nor the other endpoints).
        ws.condition(ConditionType.READY, True, ConditionReason.DEPLOYMENT_READY, "running")
        ws.set_phase(WorkspacePhase.RUNNING)
        await access.route(ws, workspace_class)

    # --- Signals -----------------------------------------------------------------------------------

    @workflow.signal(name=WORKSPACE.capacity_answer.name)
    def capacity_answer(self, answer: CapacityAnswer) -> None:
        """The ledger's answer to this workspace's GPU request (and every later change of it)."""
        ws, state = self._ws, self._state
        admitted = state.admission
        if admitted is None or answer.request_id != admitted.request_id:
            return  # an answer to an earlier request (before a suspend, a redeploy)
        state.capacity_answer = answer
        admitted.position = answer.position
        admitted.placements = answer.placements
        admitted.message = answer.message
        if answer.decision is Decision.ADMITTED:
            admitted.state = AdmissionState.ADMITTED
            admitted.position = 0
        if answer.decision is not Decision.WAITING:
            return
        if admitted.state is AdmissionState.ADMITTED and state.phase is WorkspacePhase.RUNNING:
            # Its GPUs' node left (a forced scale-down): wait and install again.
            ws.condition(
                ConditionType.FEASIBLE,
                False,
                ConditionReason.GPU_CAPACITY_LOST,
                "its GPUs were taken by a scale-down; waiting for new ones",
            )
            self.engine.enqueue(
                lambda op_id: WorkspaceOperation(
                    id=op_id, request=RedeployWorkspaceRequest(reason="GPUs taken")
                )
            )
        admitted.state = AdmissionState.WAITING
        # The position moves without this workspace hearing of it: the clients ask the ledger
        # for the current one, so none is written where it would go stale.
        queue = answer.selector if answer.selector != "*" else "any GPU"
        waiting = f"waiting for GPUs in the queue for {queue}"
        ws.condition(
            ConditionType.FEASIBLE, False, ConditionReason.WAITING_FOR_GPU_CAPACITY, waiting
        )
        ws.set_phase(WorkspacePhase.WAITING, waiting)

    @workflow.signal(name=WORKSPACE.ports_answer.name)
    def ports_answer(self, answer: PortsAnswer) -> None:
        """The ledger's answer: this workspace's gateway pool ports."""
        self._ws.ports_answers[answer.request_id] = answer

    @workflow.signal(name=WORKSPACE.prerequisite_answer.name)
    def prerequisite_answer(self, answer: PrerequisiteAnswer) -> None:
        """A prerequisite's workflow reports its outcome."""
        self._ws.prerequisite_answers[answer.request_id] = answer
        for status in self._state.prerequisites:
            if status.name == answer.template:
                status.phase = answer.phase
                status.source = answer.source
                status.message = answer.message

    @workflow.signal(name=WORKSPACE.delete_requested.name)
    def delete_requested(self, request: DeleteRequested) -> None:
        """Its cluster (or colony) is being deleted: delete the workspace now."""
        if self.engine.request_ids.first_time(request.request_id):
            self.delete_first(DeleteWorkspaceRequest(reason=request.reason))

    @workflow.signal(name=WORKSPACE.gateway_changed.name)
    def gateway_changed(self, change: GatewayChanged) -> None:
        """Its cluster's tenant Gateway appeared, changed or went (the watcher): a running
        workspace routes again now, between operations (one deploying routes at its end)."""
        if self.engine.request_ids.first_time(change.request_id):
            self._state.routes_look_due = True

    # --- Updates -----------------------------------------------------------------------------------

    def _refuse_when_gone(self) -> None:
        if self._state.phase in (WorkspacePhase.DELETING, WorkspacePhase.DELETED):
            raise rejected(
                f"workspace '{self._spec.name}' is being deleted",
                not_found=self._state.phase is WorkspacePhase.DELETED,
            )

    def _suspending(self) -> bool:
        return self._state.phase is WorkspacePhase.SUSPENDED or bool(
            self.engine.pending(lambda op: isinstance(op.request, SuspendWorkspaceRequest))
        )

    def _check_suspend(self, request: SuspendWorkspaceRequest) -> None:
        self._refuse_when_gone()
        if self._suspending():
            raise rejected(f"workspace '{self._spec.name}' is already suspended")

    suspend = queued_update(WORKSPACE.suspend, _check_suspend)
    """Uninstall the release, keep the namespace and definition, free the GPUs."""

    def _check_resume(self, request: ResumeWorkspaceRequest) -> None:
        self._refuse_when_gone()
        if not self._suspending() and self._state.phase is not WorkspacePhase.FAILED:
            raise rejected(
                f"workspace '{self._spec.name}' is {self._state.phase.value}: only a suspended or "
                "failed workspace can be resumed"
            )

    resume = queued_update(WORKSPACE.resume, _check_resume)
    """Deploy a suspended (or failed) workspace again, through admission again."""

    delete = delete_update(WORKSPACE.delete)
    """Delete the workspace now (a delete while one runs returns that delete)."""

    # --- Query -------------------------------------------------------------------------------------

    @workflow.query(name=WORKSPACE.status.name)
    def status(self) -> WorkspaceStatus:
        """The workspace as it is: phase, conditions, admission, access, operations."""
        spec, state = self._spec, self._state
        return WorkspaceStatus.model_validate(
            {
                "name": spec.name,
                "class": spec.class_name,
                "cluster": spec.cluster,
                "phase": state.phase,
                "organization": spec.organization,
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
                "current_operation": self.engine.running,
                "queued_operations": state.queue,
                "completed_operations": state.completed,
            }
        )

    # --- Helpers -------------------------------------------------------------------------------------

    def _fail_state(self, error: BaseException) -> None:
        message = (
            error.message
            if isinstance(error, WorkspaceFailed)
            else reason_of(error).split(": ", 1)[-1]
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
        self._ws.condition(ConditionType.READY, False, reason, message)
        self._ws.set_phase(WorkspacePhase.FAILED, message)

    def subject(self) -> str:
        return f"workspace '{self._spec.name}'"

    def show_phase(self) -> None:
        self.show(
            [
                (COLONY_KIND, KIND),
                # The ClusterDeployment, injective across organizations: its cluster's delete
                # finds the workspaces it must delete first by it, and no other organization's.
                (COLONY_CLUSTER, self._spec.cluster_deployment),
                (COLONY_GPU_MODEL, self._spec.gpu_model),
                (COLONY_PHASE, self._state.phase.value),
            ]
        )

    def headline(self) -> list[str]:
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
