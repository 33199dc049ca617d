"""Taking a workspace down: suspend, delete, and the uninstall a resume of a failed deploy starts
with.

Suspend removes routes and the release (namespace and volumes stay), then frees the GPUs. Delete
removes routes and the ServiceSet (waited for: its removal is seen as a watch event), frees the
GPUs, which admits the next waiting workspace, then removes the values Secret and the namespace
(each only if it carries this workspace's marks).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from workflows.workspace.access import unroute
from workflows.workspace.admission import release_capacity
from workflows.workspace.context import WorkspaceContext, WorkspaceFailed
from workflows.workspace_calls import DELETE_NAMESPACE, DELETE_SERVICE_SET, DELETE_VALUES_SECRET

with workflow.unsafe.imports_passed_through():
    from models.cluster import DEFAULT_NAMESPACE
    from models.workspace import ConditionReason, ConditionType, WorkspacePhase, workspace_namespace
    from models.workspace_api import (
        DeleteNamespaceRequest,
        DeleteServiceSetRequest,
        DeleteValuesSecretRequest,
    )

UNINSTALL_DEADLINE = timedelta(minutes=15)
"""How long an uninstall or a namespace deletion may take before the delete reports it."""


async def uninstall(ws: WorkspaceContext) -> None:
    """Remove routes, the release (waited for) and the values Secret; keep the namespace."""
    await unroute(ws)
    await _remove_release(ws)
    await _remove_values_secret(ws)


SUSPENDED_CONDITIONS = {
    ConditionType.READY: "suspended",
    ConditionType.FEASIBLE: "suspended: its GPUs went back to the cluster (resume asks again)",
    ConditionType.HELM_RELEASE_READY: "suspended: the release is uninstalled (volumes are kept)",
    ConditionType.ROUTES_READY: "suspended: its routes are removed",
}
"""What a suspended workspace's conditions say (none may still say GPUs reserved, a release
deployed or routes ready), each until a resume sets it again."""


async def suspend(ws: WorkspaceContext) -> None:
    await unroute(ws)
    await _remove_release(ws)
    # The GPUs go to the next in line as soon as the release is gone; the values Secret holds
    # none.
    await release_capacity(ws, "suspended")
    await _remove_values_secret(ws)
    ws.state.suspended = True
    present = {c.type for c in ws.state.conditions}
    for kind, message in SUSPENDED_CONDITIONS.items():
        if kind is ConditionType.READY or kind in present:
            ws.condition(kind, False, ConditionReason.SUSPENDED, message)
    ws.set_phase(WorkspacePhase.SUSPENDED)


async def delete(ws: WorkspaceContext) -> None:
    state = ws.state
    ws.set_phase(WorkspacePhase.DELETING)
    await unroute(ws)
    await _remove_release(ws)
    # The next waiter is admitted once the release is uninstalled, not after the Secret and the
    # namespace: its pods are then terminating (the scheduler counts their GPUs until they are
    # gone, so the next workspace's pods wait out that grace period at most), and nothing else of
    # this workspace holds a GPU.
    await release_capacity(ws, "deleted")
    await _remove_values_secret(ws)
    if state.kubeconfig is not None:
        kubeconfig = state.kubeconfig
        await DELETE_NAMESPACE.within(
            UNINSTALL_DEADLINE,
            lambda until: DeleteNamespaceRequest(
                kubeconfig=kubeconfig,
                name=workspace_namespace(ws.name),
                owner=ws.owner,
                wait_until=until,
            ),
        )
    state.namespace_created = False
    ws.set_phase(WorkspacePhase.DELETED)


async def _remove_release(ws: WorkspaceContext) -> None:
    """Delete the ServiceSet and wait until k0rdent has uninstalled its release (seen at once,
    through a watch): from then on the release's GPUs are free."""
    name = ws.spec.service_set_name
    gone = await DELETE_SERVICE_SET.within(
        UNINSTALL_DEADLINE,
        lambda until: DeleteServiceSetRequest(
            namespace=DEFAULT_NAMESPACE, name=name, owner=ws.owner, wait_until=until
        ),
    )
    if not gone.gone:
        raise WorkspaceFailed(
            ConditionReason.INTERNAL_ERROR,
            f"ServiceSet {name} was not uninstalled within "
            f"{int(UNINSTALL_DEADLINE.total_seconds() // 60)}m",
        )
    ws.state.service_set_created = False


async def _remove_values_secret(ws: WorkspaceContext) -> None:
    await DELETE_VALUES_SECRET(
        DeleteValuesSecretRequest(
            namespace=DEFAULT_NAMESPACE, name=ws.spec.values_secret_name, owner=ws.owner
        )
    )
    ws.state.values_secret_written = False
