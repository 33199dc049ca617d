"""A cluster and its workspaces together on the time-skipping server: the cluster's validators see
which workspaces hold GPUs (reported by the cluster's GPU ledger), a scale-down takes free nodes
first and is refused when it would take held GPUs, `force` lets it through and the workspace goes
back to waiting, and deleting the cluster deletes its workspaces first. A workspace deployed
while its cluster is still being created waits (Pending) until the creation has finished, through
the real `await_cluster_created` querying the real `ClusterWorkflow`, then runs, or fails naming
why the creation failed.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from activities.temporal import TemporalActivities
from models.activity_api import ActivityName
from models.cluster import ClusterPhase, cluster_deployment_name
from models.operations import (
    DeleteClusterRequest,
    DeleteNodePoolRequest,
    DeleteNodeRequest,
    OperationState,
    ScaleNodePoolRequest,
)
from models.workspace import WorkspacePhase, WorkspaceStatus
from models.workspace_api import (
    ListWorkflowsRequest,
    ListWorkflowsResult,
    ReadGpuInventoryRequest,
    ReadGpuInventoryResult,
    WorkspaceActivity,
)
from tests.cluster_world import CPU, FakeColony, op_of, pool, pool_of, start
from tests.helpers import eventually, unique
from tests.test_workflow_workspace import CATALOG, deploy, notebook, phase_is, status_of, until
from tests.workspace_world import STARTED, FakeWorkspaceWorld, h100_node, workspace_worker
from workflows.cluster.workflow import ClusterWorkflow

pytestmark = pytest.mark.slow


@pytest.fixture
def env(time_env: WorkflowEnvironment) -> WorkflowEnvironment:
    return time_env


class LinkedWorld(FakeWorkspaceWorld):
    """The workspace world over the cluster fake's nodes: GPUs come and go with the cluster."""

    colony: FakeColony | None = None

    @activity.defn(name=WorkspaceActivity.READ_GPU_INVENTORY)
    async def read_gpu_inventory(self, request: ReadGpuInventoryRequest) -> ReadGpuInventoryResult:
        assert self.colony is not None
        nodes = [
            h100_node(name) for name, node in self.colony.nodes.items() if name.startswith("h100")
        ]
        # The cluster's workflow, from its ClusterDeployment's marks (as the real activity reads).
        owner = self.owner_of(request.cluster_deployment) if request.cluster_deployment else None
        return ReadGpuInventoryResult(
            nodes=nodes, cluster_workflow_id=owner.workflow_id if owner else ""
        )

    @activity.defn(name=WorkspaceActivity.LIST_WORKFLOWS)
    async def list_workflows(self, request: ListWorkflowsRequest) -> ListWorkflowsResult:
        return ListWorkflowsResult(workflow_ids=[w for w in STARTED if w.startswith("workspace/")])


def without(activities: list[Callable[..., Any]], *names: str) -> list[Callable[..., Any]]:
    # The stand-ins' methods are named after their activities.
    return [a for a in activities if a.__name__ not in names]


async def refusal(handle: Any, update: Any, request: Any) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as caught:
        await handle.execute_update(update, request)
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError)
    return cause.message


@contextlib.asynccontextmanager
async def linked_worker(
    env: WorkflowEnvironment, task_queue: str, colony: FakeColony
) -> AsyncIterator[LinkedWorld]:
    """The real cluster and workspace workflows over the linked fakes (the ClusterDeployment and
    nodes are the cluster fake's), with the real `await_cluster_created` (it queries the real
    `ClusterWorkflow` through the test server). A test adds its cluster to `ready_clusters` so
    that its ledger and prerequisites are ended on the way out."""
    world = LinkedWorld(
        classes={c.name: c for c in CATALOG.classes},
        templates={t.name for t in CATALOG.service_templates},
    )
    world.colony = colony
    temporal = TemporalActivities(env.client, task_queue)
    async with workspace_worker(
        env,
        task_queue,
        FakeWorkspaceWorld(),
        extra_activities=[
            *without(colony.activities(), "list_workflows", "await_workflows_closed"),
            *without(
                world.activities(),
                "await_cluster_deployment",
                "await_cluster_created",
                "read_gpu_inventory",
                "list_workflows",
            ),
            world.read_gpu_inventory,
            world.list_workflows,
            temporal.await_cluster_created,
        ],
        cluster=True,
        include_world=False,
    ):
        yield world


def cluster_condition(status: WorkspaceStatus) -> tuple[str, str, str]:
    """(status, reason, message) of its ClusterDeploymentResolved condition (empty: none yet)."""
    found = next((c for c in status.conditions if c.type == "ClusterDeploymentResolved"), None)
    return (found.status, found.reason, found.message) if found else ("", "", "")


async def test_held_gpus_guard_scale_downs_and_a_cluster_delete_deletes_its_workspaces(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    colony = FakeColony()
    async with linked_worker(env, task_queue, colony) as world:
        run = await start(env, task_queue, colony, pool("gpu", 2), pool("sys", 1, CPU))
        ready = await run.ready()
        world.ready_clusters.add(run.name)
        gpu_nodes = sorted(node.name for node in pool_of(ready, "gpu").nodes)

        workspace = await deploy(env, task_queue, notebook(unique("nb"), run.name, gpus=8))
        running = await until(workspace, phase_is(WorkspacePhase.RUNNING), "running")
        assert running.admission is not None
        (held,) = {p.node for p in running.admission.placements}
        free = next(n for n in gpu_nodes if n != held)

        # The ledger reports its holders to the cluster: deleting the held node is refused.
        async def refused_delete() -> str | None:
            try:
                return await refusal(
                    run.handle, ClusterWorkflow.delete_node, DeleteNodeRequest(node=held)
                )
            except AssertionError:
                return None

        message = await eventually(refused_delete, what="the holders reached the cluster")
        assert message is not None
        assert running.name in message
        assert "would take GPUs from running workspaces" in message
        pool_message = await refusal(
            run.handle, ClusterWorkflow.delete_node_pool, DeleteNodePoolRequest(pool="gpu")
        )
        assert running.name in pool_message

        # A scale-down takes the free node, not the held one.
        down = await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=1)
        )
        done = await run.finished(down)
        assert op_of(done, down.operation_id).state is OperationState.SUCCEEDED
        assert [n.name for n in pool_of(done, "gpu").nodes] == [held]
        assert free not in colony.nodes

        # Forced: the pool goes, and the workspace goes back to waiting for GPUs.
        forced = await run.handle.execute_update(
            ClusterWorkflow.delete_node_pool, DeleteNodePoolRequest(pool="gpu", force=True)
        )
        await run.finished(forced)
        waiting = await until(workspace, phase_is(WorkspacePhase.WAITING), "back to waiting")
        feasible = next(c for c in waiting.conditions if c.type == "Feasible")
        assert feasible.reason in ("GpuCapacityLost", "WaitingForGpuCapacity")

        # Deleting the cluster deletes its workspaces first.
        await run.handle.execute_update(ClusterWorkflow.delete_cluster, DeleteClusterRequest())
        final = await run.handle.result()
        assert final.phase is ClusterPhase.DELETED
        gone = await workspace.result()
        assert gone.phase is WorkspacePhase.DELETED
        assert colony.held() == []


async def test_a_workspace_waits_until_its_cluster_has_finished_creating(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    colony = FakeColony()
    claims = colony.gate(ActivityName.CLAIM_HOSTS)
    async with linked_worker(env, task_queue, colony) as world:
        run = await start(env, task_queue, colony, pool("gpu", 1))
        # The control plane is Ready (so is its ClusterDeployment); the pool's hosts are not
        # claimed yet, so no node has joined: the GPU ledger would find none.
        await run.until(lambda s: s.phase is ClusterPhase.READY and s.creating, what="pools")
        await claims.entered.wait()
        world.ready_clusters.add(cluster_deployment_name(run.name))

        workspace = await deploy(env, task_queue, notebook(unique("nb"), run.name, gpus=8))
        waiting = await until(
            workspace,
            lambda s: cluster_condition(s)[1] == "ClusterNotReady",
            "waiting for the cluster",
        )
        assert waiting.phase is WorkspacePhase.PENDING
        assert cluster_condition(waiting) == (
            "False",
            "ClusterNotReady",
            f"waiting for cluster '{run.name}' to finish creating",
        )
        # Still waiting on a second look; the ledger was never asked.
        assert (await status_of(workspace)).phase is WorkspacePhase.PENDING
        with pytest.raises(RPCError):
            await env.client.get_workflow_handle(
                f"capacity/{cluster_deployment_name(run.name)}"
            ).describe()

        claims.opened.set()
        running = await until(workspace, phase_is(WorkspacePhase.RUNNING), "running")
        assert cluster_condition(running)[:2] == ("True", "ClusterDeploymentResolved")
        assert running.admission is not None
        assert {p.node for p in running.admission.placements} <= set(colony.nodes)

        await run.handle.execute_update(ClusterWorkflow.delete_cluster, DeleteClusterRequest())
        assert (await workspace.result()).phase is WorkspacePhase.DELETED


async def test_a_workspace_fails_naming_why_its_clusters_create_failed(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    colony = FakeColony()
    claims = colony.gate(ActivityName.CLAIM_HOSTS)
    async with linked_worker(env, task_queue, colony) as world:
        run = await start(env, task_queue, colony, pool("gpu", 1))
        await claims.entered.wait()
        world.ready_clusters.add(cluster_deployment_name(run.name))
        workspace = await deploy(env, task_queue, notebook(unique("nb"), run.name, gpus=8))
        await until(
            workspace,
            lambda s: cluster_condition(s)[1] == "ClusterNotReady",
            "waiting for the cluster",
        )

        colony.free["h100"] = []  # the pool's hosts are gone: its claim fails
        claims.opened.set()
        failed = await until(workspace, phase_is(WorkspacePhase.FAILED), "failed")
        status, reason, message = cluster_condition(failed)
        assert (status, reason) == ("False", "ClusterNotReady")
        assert message.startswith(f"creating cluster '{run.name}' failed: node pool 'gpu': ")
        assert failed.failure_context is not None
        assert failed.failure_context.reason == "ClusterNotReady"

        await run.handle.execute_update(ClusterWorkflow.delete_cluster, DeleteClusterRequest())
        assert (await run.handle.result()).phase is ClusterPhase.DELETED
        assert (await workspace.result()).phase is WorkspacePhase.DELETED
