"""Installing a workspace's release (step 5 of `workflows/workspace/workflow.py`'s plan,
HelmReleaseReady): its namespace `ws-<name>` in the child cluster (refused, untouched, when one of
that name exists without this workspace's ownership marks: a user's own is never adopted), the
unsealed secret values in a Secret on the management cluster (only sealed values ever reach this
workflow), then a k0rdent ServiceSet targeting the cluster's ClusterDeployment, waited on until
Deployed or Failed within the class's deploy timeout (Colony enforces it).

A failure's context is the exalsius operator's: the failing condition's reason, its message, the
ServiceSet's service states, and the namespace's recent events.
"""

from __future__ import annotations

from temporalio import workflow

from workflows.workspace.context import WorkspaceContext, WorkspaceFailed
from workflows.workspace_calls import (
    ENSURE_NAMESPACE,
    RECENT_EVENTS,
    WRITE_VALUES_SECRET,
    deploy_service_set,
)

with workflow.unsafe.imports_passed_through():
    from models.cluster import DEFAULT_NAMESPACE
    from models.values import MergedWorkspace
    from models.workspace import (
        ConditionReason,
        ConditionType,
        WorkspacePhase,
        failure_context,
        workspace_namespace,
    )
    from models.workspace_api import (
        ApplyServiceSetRequest,
        AwaitServiceSetResult,
        EnsureNamespaceRequest,
        RecentEventsRequest,
        ServiceSetOutcome,
        ServiceSetService,
        WriteValuesSecretRequest,
        workspace_labels,
    )
    from models.workspace_class import WorkspaceClassSpec


async def install(
    ws: WorkspaceContext, workspace_class: WorkspaceClassSpec, merged: MergedWorkspace
) -> None:
    """Namespace, values Secret, ServiceSet, deployed (see the module docstring)."""
    ws.set_phase(WorkspacePhase.DEPLOYING)
    await ENSURE_NAMESPACE(
        EnsureNamespaceRequest(
            kubeconfig=ws.kubeconfig(),
            name=workspace_namespace(ws.name),
            owner=ws.owner,
            labels=workspace_labels(ws.name),
        )
    )
    ws.state.namespace_created = True
    values_from = await _write_values_secret(ws, merged)
    seen = await _deploy(ws, workspace_class, merged, values_from)
    if seen.outcome is ServiceSetOutcome.DEPLOYED:
        ws.condition(
            ConditionType.HELM_RELEASE_READY,
            True,
            ConditionReason.HELM_RELEASE_DEPLOYED,
            f"{ws.spec.release_name} deployed",
        )
        return
    await _fail(ws, workspace_class, seen)


async def _write_values_secret(ws: WorkspaceContext, merged: MergedWorkspace) -> str:
    """The secret values' Secret, when there are any: its name (the release reads them from it)."""
    if not merged.secret_values:
        return ""
    name = ws.spec.values_secret_name
    await WRITE_VALUES_SECRET(
        WriteValuesSecretRequest(
            namespace=DEFAULT_NAMESPACE,
            name=name,
            workspace=ws.name,
            secret_values=merged.secret_values,
            owner=ws.owner,
            labels=workspace_labels(ws.name),
        )
    )
    ws.state.values_secret_written = True
    return name


async def _deploy(
    ws: WorkspaceContext,
    workspace_class: WorkspaceClassSpec,
    merged: MergedWorkspace,
    values_from: str,
) -> AwaitServiceSetResult:
    """Apply the ServiceSet and wait until its release is deployed, failed or gone, or the deploy
    timeout; each state it passes through is HelmReleaseReady's message meanwhile."""
    spec = ws.spec
    release = spec.release_name

    def seen(found: AwaitServiceSetResult) -> None:
        if found.outcome is ServiceSetOutcome.CHANGED:
            ws.condition(
                ConditionType.HELM_RELEASE_READY,
                False,
                ConditionReason.HELM_RELEASE_NOT_READY,
                f"{release}: {found.state or 'pending'}",
            )

    def applied() -> None:
        ws.state.service_set_created = True

    return await deploy_service_set(
        ApplyServiceSetRequest(
            namespace=DEFAULT_NAMESPACE,
            name=spec.service_set_name,
            cluster_deployment=spec.cluster_deployment,
            services=[
                ServiceSetService(
                    name=release,
                    namespace=workspace_namespace(ws.name),
                    template=workspace_class.service_template.name,
                    values=merged.values,
                    values_from_secret=values_from,
                )
            ],
            owner=ws.owner,
            labels=workspace_labels(ws.name),
        ),
        deadline=workflow.now() + workspace_class.deploy_timeout,
        applied=applied,
        seen=seen,
    )


async def _fail(
    ws: WorkspaceContext, workspace_class: WorkspaceClassSpec, seen: AwaitServiceSetResult
) -> None:
    """The release failed, went, or missed its deadline: HelmReleaseReady and the failure's
    context (the ServiceSet's states, the namespace's recent events) say why."""
    release, name = ws.spec.release_name, ws.spec.service_set_name
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
    ws.condition(ConditionType.HELM_RELEASE_READY, False, reason, message)
    events = await RECENT_EVENTS(
        RecentEventsRequest(kubeconfig=ws.kubeconfig(), namespace=workspace_namespace(ws.name))
    )
    ws.state.failure_context = failure_context(
        WorkspacePhase.DEPLOYING,
        reason,
        message,
        workflow.now(),
        service_set_status=seen.status,
        events=events.events,
    )
    raise WorkspaceFailed(reason, message)
