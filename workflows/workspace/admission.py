"""A workspace's way in, before anything is installed: its class, its cluster, its values, its
prerequisites and its GPUs (steps 1 to 4 of `workflows/workspace/workflow.py`'s plan).

- ClassResolved: the pinned class, read from the management cluster once (classes are immutable).
- ClusterDeploymentResolved: the cluster's workflow has finished creating it (its control plane and
  the create's node pools: a GPU ledger asked before the pools' nodes joined would find no GPUs),
  then its ClusterDeployment, marked as that cluster's workflow's of the workspace's organization,
  is Ready (both waited on within `PENDING_DEADLINE`).
- Values: merged and checked (`models.values`) before anything is installed.
- PrerequisitesMet: each through `prereq/<ClusterDeployment>/<template>` (signal-with-start),
  answered by signal.
- Feasible: GPUs from the cluster's ledger `capacity/<ClusterDeployment>` (signal-with-start),
  answered by signal (admitted, waiting in line, or infeasible), and given back by a signal from
  this workflow when the workspace stops holding them.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow

from workflows import metrics
from workflows.cluster_calls import await_cluster_deployment
from workflows.kit.service import tell
from workflows.kit.until import SHORTEST_WAIT
from workflows.workspace.context import WorkspaceContext, WorkspaceFailed
from workflows.workspace_calls import (
    AWAIT_CLUSTER_CREATED,
    GET_WORKSPACE_CLASS,
    SIGNAL_WITH_START,
)

with workflow.unsafe.imports_passed_through():
    from models.activity_api import (
        AwaitClusterDeploymentRequest,
        AwaitClusterDeploymentResult,
        DeploymentOutcome,
        DeploymentWait,
        KubeconfigRef,
    )
    from models.capacity import CapacityAnswer, Decision
    from models.cluster import DEFAULT_NAMESPACE, kubeconfig_secret_name
    from models.ownership import Owner
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
        ConditionType,
        PrerequisitePhase,
        PrerequisiteStatus,
        WorkspacePhase,
        capacity_request_id,
    )
    from models.workspace_api import (
        AwaitClusterCreatedRequest,
        CapacityLedgerInput,
        CapacityMessage,
        CapacityMessageKind,
        ClusterCreatedOutcome,
        GetWorkspaceClassRequest,
        PrerequisiteInput,
        PrerequisiteMessage,
        SignalWithStartRequest,
    )
    from models.workspace_class import PrerequisiteSpec, WorkspaceClassSpec
    from workflows.capacity import CAPACITY
    from workflows.cluster import CLUSTER
    from workflows.prerequisite import PREREQUISITE

PENDING_DEADLINE = timedelta(minutes=30)
"""How long a workspace waits for its cluster to be created and ready before it fails."""


async def resolve_class(ws: WorkspaceContext) -> WorkspaceClassSpec:
    """The pinned class: read once, then the state's (classes are immutable)."""
    spec, state = ws.spec, ws.state
    if state.class_spec is not None and state.class_spec.name == spec.class_name:
        return state.class_spec
    found = await GET_WORKSPACE_CLASS(
        GetWorkspaceClassRequest(name=spec.class_name, organization=spec.organization)
    )
    if not found.found:
        ws.condition(
            ConditionType.CLASS_RESOLVED,
            False,
            ConditionReason.CLASS_NOT_FOUND,
            f"WorkspaceClass '{spec.class_name}' not found",
        )
        raise WorkspaceFailed(
            ConditionReason.CLASS_NOT_FOUND,
            f"WorkspaceClass '{spec.class_name}' not found: publish it, or pin an existing class",
        )
    if found.spec is None:
        raise WorkspaceFailed(
            ConditionReason.INVALID_WORKSPACE_CLASS,
            f"WorkspaceClass '{spec.class_name}' is not valid: {found.problem}",
        )
    state.class_spec = found.spec
    ws.condition(
        ConditionType.CLASS_RESOLVED, True, ConditionReason.CLASS_RESOLVED, found.spec.name
    )
    return found.spec


async def resolve_cluster(ws: WorkspaceContext) -> None:
    """Wait until the workspace's cluster is created and Ready (Pending meanwhile); fail if it is
    not there, fails, goes, or is not ready within `PENDING_DEADLINE`."""
    spec = ws.spec
    cluster = spec.cluster
    deadline = workflow.now() + PENDING_DEADLINE
    # Once unconditional (the patch `await-cluster-created` cost every workspace a marker and a
    # search attribute upsert): histories recorded before it are in tests/histories/pre-perf/.
    await _await_cluster_created(ws, deadline)
    looks = 0

    def seen(found: AwaitClusterDeploymentResult) -> None:
        nonlocal looks
        looks += 1
        if found.outcome is DeploymentOutcome.CHANGED:
            ws.condition(
                ConditionType.CLUSTER_DEPLOYMENT_RESOLVED,
                False,
                ConditionReason.CLUSTER_NOT_READY,
                f"waiting for cluster '{cluster}' to be ready",
            )

    found = await await_cluster_deployment(
        AwaitClusterDeploymentRequest(
            namespace=DEFAULT_NAMESPACE,
            name=spec.cluster_deployment,
            want=DeploymentWait.READY,
            deadline=deadline,
            # Only the workspace's organization's cluster of that name: any other
            # ClusterDeployment (not Colony's, another owner's) is not there at all.
            owner=Owner(workflow_id=spec.cluster_workflow_id, organization=spec.organization),
        ),
        settled=lambda found: found.outcome is not DeploymentOutcome.CHANGED,
        seen=seen,
    )
    if found.outcome is DeploymentOutcome.GONE:
        reason = ConditionReason.CLUSTER_DEPLOYMENT_NOT_FOUND
        message = (
            f"cluster '{cluster}' does not exist"
            if looks == 1
            else f"cluster '{cluster}' was deleted"
        )
        ws.condition(ConditionType.CLUSTER_DEPLOYMENT_RESOLVED, False, reason, message)
        raise WorkspaceFailed(reason, message)
    if found.outcome is not DeploymentOutcome.READY:
        raise WorkspaceFailed(
            ConditionReason.CLUSTER_NOT_READY,
            f"cluster '{cluster}' was not ready within {int(PENDING_DEADLINE.total_seconds() // 60)}m",
        )
    ws.state.kubeconfig = KubeconfigRef(
        namespace=DEFAULT_NAMESPACE, secret_name=kubeconfig_secret_name(spec.cluster_deployment)
    )
    ws.condition(
        ConditionType.CLUSTER_DEPLOYMENT_RESOLVED,
        True,
        ConditionReason.CLUSTER_DEPLOYMENT_RESOLVED,
        f"cluster '{cluster}' is ready",
    )


async def _await_cluster_created(ws: WorkspaceContext, deadline: datetime) -> None:
    """Wait (one heartbeating activity) until the cluster's workflow has finished creating it.

    Before the ClusterDeployment check, not after: a cluster just asked for has no
    ClusterDeployment for a moment (its workflow checks its template first), which that check
    would take for a cluster that does not exist. The workflow's id is the organization's
    cluster's (`cluster_workflow_id` is injective across organizations), and the check that
    follows still verifies the ClusterDeployment's marks.
    """
    cluster = ws.spec.cluster
    ws.condition(
        ConditionType.CLUSTER_DEPLOYMENT_RESOLVED,
        False,
        ConditionReason.CLUSTER_NOT_READY,
        f"waiting for cluster '{cluster}' to finish creating",
    )
    found = await AWAIT_CLUSTER_CREATED(
        AwaitClusterCreatedRequest(
            cluster=cluster,
            workflow_id=ws.spec.cluster_workflow_id,
            status_query=CLUSTER.status.name,
            deadline=deadline,
        ),
        wait=max(deadline - workflow.now(), SHORTEST_WAIT),
    )
    match found.outcome:
        case ClusterCreatedOutcome.CREATED:
            return
        case ClusterCreatedOutcome.GONE:
            reason = ConditionReason.CLUSTER_DEPLOYMENT_NOT_FOUND
            message = found.message
        case ClusterCreatedOutcome.FAILED:
            reason, message = ConditionReason.CLUSTER_NOT_READY, found.message
        case _:
            reason = ConditionReason.CLUSTER_NOT_READY
            message = (
                f"cluster '{cluster}' was not created within "
                f"{int(PENDING_DEADLINE.total_seconds() // 60)}m"
            )
    ws.condition(ConditionType.CLUSTER_DEPLOYMENT_RESOLVED, False, reason, message)
    raise WorkspaceFailed(reason, message)


def merge(
    ws: WorkspaceContext,
    workspace_class: WorkspaceClassSpec,
    answer: CapacityAnswer | None = None,
) -> MergedWorkspace:
    """The class's defaults and the user's values, as Helm merges them, with the resources (and,
    once admitted, the GPUs' resource name and nodes); a problem fails with InvalidValues."""
    try:
        merged = merge_workspace(
            workspace_class,
            ws.spec,
            gpu_resource_name=answer.resource_name if answer and answer.resource_name else None,
            nodes=answer.nodes if answer else (),
        )
    except ValuesError as error:
        raise WorkspaceFailed(ConditionReason.INVALID_VALUES, "; ".join(error.problems)) from None
    ws.state.resolved_resources = merged.resources
    return merged


async def install_prerequisites(ws: WorkspaceContext, workspace_class: WorkspaceClassSpec) -> None:
    """Ask each prerequisite's workflow for it, and wait until every one has answered."""
    if not workspace_class.prerequisites:
        ws.condition(
            ConditionType.PREREQUISITES_MET, True, ConditionReason.PREREQUISITES_MET, "none"
        )
        return
    ws.set_phase(WorkspacePhase.INSTALLING_PREREQUISITES)
    ws.state.prerequisites = []
    ws.prerequisite_answers.clear()
    asked = {
        await _ask_prerequisite(
            ws, workspace_class, prerequisite
        ): prerequisite.service_template.name
        for prerequisite in workspace_class.prerequisites
    }
    names = ", ".join(sorted(set(asked.values())))
    ws.condition(
        ConditionType.PREREQUISITES_MET,
        False,
        ConditionReason.INSTALLING_PREREQUISITES,
        f"installing {names}",
    )
    answers = ws.prerequisite_answers
    await workflow.wait_condition(lambda: all(rid in answers for rid in asked))
    failed = [
        answers[rid] for rid in asked if answers[rid].phase is not PrerequisitePhase.SATISFIED
    ]
    if failed:
        message = "; ".join(f"{a.template}: {a.message}" for a in failed)
        ws.condition(
            ConditionType.PREREQUISITES_MET, False, ConditionReason.PREREQUISITE_FAILED, message
        )
        raise WorkspaceFailed(ConditionReason.PREREQUISITE_FAILED, message)
    ws.condition(
        ConditionType.PREREQUISITES_MET,
        True,
        ConditionReason.PREREQUISITES_MET,
        f"installed: {names}",
    )


async def _ask_prerequisite(
    ws: WorkspaceContext, workspace_class: WorkspaceClassSpec, prerequisite: PrerequisiteSpec
) -> str:
    """Signal-with-start the prerequisite's workflow; the request id its answer will carry."""
    spec, state = ws.spec, ws.state
    me = workflow.info().workflow_id
    template = prerequisite.service_template
    namespace = prerequisite.install_namespace
    request_id = f"{me}/{state.incarnation}/{template.name}#{state.book.operations_run}"
    state.prerequisites.append(PrerequisiteStatus(name=template.name, namespace=namespace))
    timeout = workspace_class.prerequisite_deploy_timeout or workspace_class.deploy_timeout
    await SIGNAL_WITH_START(
        SignalWithStartRequest(
            workflow=PREREQUISITE.workflow_type,
            workflow_id=PREREQUISITE.workflow_id(spec.cluster_deployment, template.name),
            input=PrerequisiteInput(
                cluster=spec.cluster,
                organization=spec.organization,
                template=template.name,
                template_namespace=template.namespace or DEFAULT_NAMESPACE,
                namespace=namespace,
                values=prerequisite.values or {},
                deploy_timeout_seconds=int(timeout.total_seconds()),
            ).model_dump(mode="json"),
            signal=PREREQUISITE.prerequisite.name,
            payload=PrerequisiteMessage(
                request_id=request_id,
                reply_to=me,
                namespace=namespace,
                values=prerequisite.values or {},
            ).model_dump(mode="json"),
            static_summary=f"prerequisite {template.name} on cluster {spec.cluster}",
        )
    )
    return request_id


async def admit(ws: WorkspaceContext, workspace_class: WorkspaceClassSpec) -> CapacityAnswer | None:
    """Ask the cluster's ledger for the workspace's GPUs (none asked: nothing to wait for), and
    wait until it is admitted."""
    spec, state = ws.spec, ws.state
    resources = resolve_resources(workspace_class.default_resources, spec.resources)
    state.admissions_requested += 1
    request_id = capacity_request_id(spec.name, state.incarnation, state.admissions_requested)
    request = capacity_request(request_id, spec.name, resources)
    if request is None:
        state.admission = None
        ws.condition(
            ConditionType.FEASIBLE, True, ConditionReason.RESOURCES_AVAILABLE, "no GPUs requested"
        )
        return None
    state.admission = AdmissionStatus(request_id=request_id, state=AdmissionState.WAITING)
    asked_at = workflow.now()
    await SIGNAL_WITH_START(
        SignalWithStartRequest(
            workflow=CAPACITY.workflow_type,
            workflow_id=CAPACITY.workflow_id(spec.cluster_deployment),
            input=CapacityLedgerInput(cluster=spec.cluster_deployment).model_dump(mode="json"),
            signal=CAPACITY.capacity.name,
            payload=CapacityMessage(
                request_id=f"{request_id}/request",
                kind=CapacityMessageKind.REQUEST,
                request=request,
                reply_to=workflow.info().workflow_id,
            ).model_dump(mode="json"),
            static_summary=f"GPU ledger of cluster {spec.cluster}",
        )
    )
    answer = await await_admission(ws, request_id)
    metrics.admission_waited(spec.cluster_deployment, asked_at)
    return answer


async def await_admission(ws: WorkspaceContext, request_id: str) -> CapacityAnswer:
    """Wait (without timers: the ledger answers by signal) until the request is decided."""
    state = ws.state

    def decided() -> CapacityAnswer | None:
        answer = state.capacity_answer
        if answer is None or answer.request_id != request_id:
            return None
        return answer if answer.decision is not Decision.WAITING else None

    await workflow.wait_condition(lambda: decided() is not None)
    answer = decided()
    assert answer is not None
    if answer.decision is Decision.ADMITTED:
        ws.condition(
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
    ws.condition(ConditionType.FEASIBLE, False, reason, answer.message)
    raise WorkspaceFailed(reason, answer.message or f"GPU request {answer.decision.value}")


async def release_capacity(ws: WorkspaceContext, reason: str) -> None:
    """Give the GPUs back (the next waiter is admitted)."""
    admission = ws.state.admission
    if admission is None:
        return
    await tell_ledger(
        ws,
        CapacityMessage(
            request_id=f"{admission.request_id}/release",
            kind=CapacityMessageKind.RELEASE,
            target=admission.request_id,
            reason=reason,
        ),
    )
    ws.state.admission = None
    ws.state.capacity_answer = None
    if admission.state is AdmissionState.ADMITTED:
        # Feasible said the GPUs were reserved: it must not say so once they are not.
        ws.condition(
            ConditionType.FEASIBLE,
            False,
            ConditionReason.GPU_CAPACITY_RELEASED,
            f"GPUs released: {reason}",
        )


async def tell_ledger(ws: WorkspaceContext, message: CapacityMessage) -> None:
    """A message to the cluster's running ledger, signalled from this workflow: two events and no
    activity's round trip, which the next waiter's admission would wait for. A ledger that has
    ended (its cluster was deleted) holds nothing to give back: not an error."""
    await tell(CAPACITY.capacity, CAPACITY.workflow_id(ws.spec.cluster_deployment), message)
