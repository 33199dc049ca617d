"""Deleting a cluster: its workspaces first, then its ClusterDeployment (if it is this cluster's),
waited on until gone, then every host: those recorded and any the provider still lists for this
cluster's owner key. Final: a delete that could not finish says so, and repeating it finishes it.
It never waits silently on a workspace that cannot answer (its workflow cannot make progress):
it fails within a minute, naming the workspace and the commands that clear it
(`WORKSPACES_DELETE_DEADLINE`).

Called by `ClusterWorkflow` for a delete, which jumps the queue (`workflows.kit.entity`; a delete
that fails says how to finish it, `final`).
Workspaces and the GPU ledger name the cluster by its ClusterDeployment (`models.identity`:
injective across organizations), never by its name, which another organization's cluster may
share; and only workspaces of the cluster's own organization are ever told to go.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from workflows.cluster.context import ClusterContext, human
from workflows.cluster_calls import DELETE_CLUSTER_DEPLOYMENT, await_cluster_deployment
from workflows.kit.service import tell
from workflows.workspace_calls import AWAIT_WORKFLOWS_CLOSED, LIST_WORKFLOWS

with workflow.unsafe.imports_passed_through():
    from models.activity_api import (
        AwaitClusterDeploymentRequest,
        AwaitClusterDeploymentResult,
        DeleteClusterDeploymentRequest,
        DeploymentOutcome,
        DeploymentWait,
    )
    from models.cluster import ClusterPhase
    from models.errors import ErrorType, permanent
    from models.identity import Entity, parse_entity_workflow_id
    from models.purge import unanswered_workspaces
    from models.workspace_api import (
        AwaitWorkflowsClosedRequest,
        CapacityMessage,
        CapacityMessageKind,
        DeleteRequested,
        ListWorkflowsRequest,
    )
    from workflows.capacity import CAPACITY
    from workflows.workspace import WORKSPACE

WORKSPACES_DELETE_DEADLINE = timedelta(minutes=30)
"""How long a cluster's delete waits for its workspaces to be deleted first, while they answer. One
that cannot answer stops the wait at once: its workflow task failing twice in a row (about ten
seconds after it first fails), or no worker taking it for `models.purge.NOT_TAKEN_AFTER` (one
minute); the delete then fails naming it and the commands that clear it."""
DELETE_DEADLINE = timedelta(minutes=30)
"""Tearing down a ClusterDeployment (machines reset over SSH) takes minutes, rarely more."""


async def delete(cluster: ClusterContext) -> None:
    """Workspaces, ClusterDeployment, hosts (see the module docstring)."""
    spec, state = cluster.spec, cluster.state
    cluster.set_phase(ClusterPhase.DELETING)
    await _tear_down_workspaces(cluster)
    deleted = await DELETE_CLUSTER_DEPLOYMENT(
        DeleteClusterDeploymentRequest(
            namespace=spec.namespace, name=spec.deployment_name, owner=state.owner
        )
    )
    if deleted.existed and not deleted.foreign:
        await _wait_deployment_gone(cluster)
    # The ClusterDeployment is gone, and every node with it: status says so even if releasing
    # the hosts fails below.
    state.node_pools = []
    state.kubeconfig = None
    await cluster.release(state.hosts)
    await cluster.sweep_unrecorded_hosts()
    cluster.set_phase(ClusterPhase.DELETED)


async def _wait_deployment_gone(cluster: ClusterContext) -> None:
    spec = cluster.spec
    found = await await_cluster_deployment(
        AwaitClusterDeploymentRequest(
            namespace=spec.namespace,
            name=spec.deployment_name,
            want=DeploymentWait.GONE,
            deadline=workflow.now() + DELETE_DEADLINE,
            owner=cluster.owner(),
        ),
        settled=lambda found: found.outcome in (DeploymentOutcome.GONE, DeploymentOutcome.DEADLINE),
        seen=lambda found: _record_conditions(cluster, found),
    )
    if found.outcome is DeploymentOutcome.DEADLINE:
        raise permanent(
            ErrorType.CLUSTER_DEPLOYMENT_FAILED,
            f"ClusterDeployment '{spec.deployment_name}' still exists "
            f"{human(DELETE_DEADLINE.total_seconds())} after its deletion",
        )


async def _tear_down_workspaces(cluster: ClusterContext) -> None:
    """Delete the cluster's workspaces first (each uninstalls its release and frees its GPUs),
    wait until they are gone, then end the cluster's GPU ledger."""
    listed = await LIST_WORKFLOWS(
        ListWorkflowsRequest(
            query=f"ColonyKind = 'workspace' AND ColonyCluster = '{cluster.deployment}'"
        )
    )
    workspaces = [
        workflow_id
        for workflow_id in listed.workflow_ids
        if _workspace_of(workflow_id, cluster.spec.organization)
    ]
    me = workflow.info().workflow_id
    for workspace_id in workspaces:
        await tell(
            WORKSPACE.delete_requested,
            workspace_id,
            DeleteRequested(
                request_id=f"{me}/{cluster.state.owner}/delete",
                reason=f"cluster '{cluster.name}' is being deleted",
            ),
        )
    if workspaces:
        names = [found[2] for w in workspaces if (found := parse_entity_workflow_id(w))]
        cluster.set_phase(
            ClusterPhase.DELETING,
            f"deleting its workspaces first: {', '.join(names)}",
        )
        left = await AWAIT_WORKFLOWS_CLOSED(
            AwaitWorkflowsClosedRequest(
                workflow_ids=workspaces,
                deadline=workflow.now() + WORKSPACES_DELETE_DEADLINE,
                stop_when_unresponsive=True,
            ),
            wait=WORKSPACES_DELETE_DEADLINE,
        )
        if left.unresponsive:
            raise permanent(
                ErrorType.WORKSPACES_UNRESPONSIVE,
                unanswered_workspaces(cluster.name, left.unresponsive),
            )
        if left.open:
            raise permanent(
                ErrorType.CLUSTER_DEPLOYMENT_FAILED,
                f"workspaces of cluster '{cluster.name}' were not deleted within "
                f"{human(WORKSPACES_DELETE_DEADLINE.total_seconds())}: {', '.join(left.open)}",
            )
        cluster.set_phase(ClusterPhase.DELETING)
    await tell(
        CAPACITY.capacity,
        CAPACITY.workflow_id(cluster.deployment),
        CapacityMessage(
            request_id=f"{me}/{cluster.state.owner}/close", kind=CapacityMessageKind.CLOSE
        ),
    )


def _record_conditions(cluster: ClusterContext, found: AwaitClusterDeploymentResult) -> None:
    if found.outcome is not DeploymentOutcome.GONE:
        cluster.state.conditions = found.status.conditions


def _workspace_of(workflow_id: str, organization: str) -> bool:
    """True for the workflow id of a workspace of `organization`."""
    found = parse_entity_workflow_id(workflow_id)
    return found is not None and found[:2] == (Entity.WORKSPACE, organization)
