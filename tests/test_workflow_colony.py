"""ColonyWorkflow on the time-skipping server: real child `ClusterWorkflow`s over the stand-in
world of `tests/cluster_world.py`, real signals between them (cluster reports, deletes).

A colony of three entries (Colony's form with a GPU pool, an exalsius entry given as a raw
ClusterDeployment spec, and one whose template is missing): the failing cluster does not hold back
the others and the colony is Degraded; the GPU inventory follows the clusters' reports; the
kubeconfigs Secret lists the ready clusters; re-applying a manifest without an entry deletes that
cluster; deleting the colony deletes every cluster and the Secret.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.temporal import TemporalActivities
from models.capacity import GpuNode, gpu_node
from models.cluster import cluster_deployment_name, cluster_workflow_id
from models.colony import (
    ApplyColonyRequest,
    ClusterReport,
    ColonyClusterStatus,
    ColonyPhase,
    ColonyState,
    ColonyStatus,
    ColonyWorkflowInput,
    DeleteColonyRequest,
    colony_kubeconfigs_secret,
    colony_workflow_id,
)
from models.identity import parse_entity_workflow_id
from models.manifests import ColonySpec
from models.workspace_api import (
    ListWorkflowsRequest,
    ListWorkflowsResult,
    ReadGpuInventoryRequest,
    ReadGpuInventoryResult,
    WorkspaceActivity,
)
from tests.cluster_world import FakeColony
from tests.helpers import eventually, unique
from workflows.cluster.workflow import ClusterWorkflow
from workflows.colony.workflow import ColonyWorkflow

pytestmark = pytest.mark.slow


@pytest.fixture
def env(time_env: WorkflowEnvironment) -> WorkflowEnvironment:
    return time_env


class ColonyWorld:
    """What a colony needs beyond the cluster fake: GPU inventories and its kubeconfigs Secret."""

    def __init__(self, colony: FakeColony) -> None:
        self.colony = colony
        self.secrets = colony.secrets
        self.template_nodes: dict[str, list[GpuNode]] = {}
        """ClusterDeployment -> the nodes its own template made (a raw spec's: no claimed hosts)."""

    @activity.defn(name=WorkspaceActivity.READ_GPU_INVENTORY)
    async def read_gpu_inventory(self, request: ReadGpuInventoryRequest) -> ReadGpuInventoryResult:
        deployment = request.kubeconfig.secret_name.removesuffix("-kubeconfig")
        nodes = [
            gpu_node(name, {"exalsius.ai/gpu-model": "h100"}, {"nvidia.com/gpu": 8})
            for name, node in self.colony.nodes.items()
            if name.startswith("h100")
            and _deployment_of(self.colony.owners.get(node.host_id, "")) == deployment
        ]
        return ReadGpuInventoryResult(nodes=nodes + self.template_nodes.get(deployment, []))

    @activity.defn(name=WorkspaceActivity.LIST_WORKFLOWS)
    async def list_workflows(self, request: ListWorkflowsRequest) -> ListWorkflowsResult:
        return ListWorkflowsResult(workflow_ids=[])  # no workspaces in these clusters

    def activities(self) -> list[Callable[..., Any]]:
        return [self.read_gpu_inventory, self.list_workflows]


def _deployment_of(owner: str) -> str:
    """The ClusterDeployment of the cluster whose owner key (`<workflow id>/<run>`) claimed a host."""
    found = parse_entity_workflow_id(owner.rpartition("/")[0])
    return cluster_deployment_name(found[2], found[1]) if found else ""


def manifest(name: str, *entries: dict[str, Any]) -> ColonySpec:
    return ColonySpec.model_validate({"name": name, "colonyClusters": list(entries)})


POOLS = {
    "clusterName": "west",
    "locationId": "fra",
    "nodePools": [{"name": "gpu", "sku": {"gpuModelId": "h100"}, "count": 1}],
    "clusterLabels": {"team": "ml"},
}
RAW = {
    "clusterName": "lab",
    "clusterDeploymentSpec": {
        "template": "docker-hosted-cp-1-0-0",
        "credential": "docker-stub-credential",
        "config": {"workersNumber": 2},
    },
}
BROKEN = {
    "clusterName": "broken",
    "clusterDeploymentSpec": {"template": "no-such-template-1-0-0", "credential": "c"},
}


async def colony_status(handle: WorkflowHandle[Any, Any]) -> ColonyStatus:
    status: ColonyStatus = await handle.query(ColonyWorkflow.status)
    return status


@pytest.mark.parametrize(
    "organization",
    [pytest.param("", id="an-operators"), pytest.param("acme", id="an-organizations")],
)
async def test_a_colony_runs_its_clusters_follows_them_and_deletes_them(
    env: WorkflowEnvironment, task_queue: str, organization: str
) -> None:
    """The colony's clusters are `<colony>--<entry>` of its organization: their workflows,
    ClusterDeployments and kubeconfigs Secret are the organization's (`models.identity`)."""
    fake = FakeColony(missing_templates={"no-such-template-1-0-0"})
    extra = ColonyWorld(fake)
    temporal = TemporalActivities(env.client, task_queue)
    stand_ins = [
        a
        for a in fake.activities()
        if a.__name__ not in ("list_workflows", "await_workflows_closed")
    ]
    name = unique("fleet")
    # The raw entry's template made two workers (one not Ready yet); Colony claimed no host.
    extra.template_nodes[cluster_deployment_name(f"{name}--lab", organization)] = [
        gpu_node("lab-0", {}, {}),
        gpu_node("lab-1", {}, {}, ready=False),
    ]
    async with Worker(
        env.client,
        task_queue=task_queue,
        workflows=[ColonyWorkflow, ClusterWorkflow],
        activities=[
            *stand_ins,
            *extra.activities(),
            temporal.await_workflows_closed,
        ],
    ):
        handle = await env.client.start_workflow(
            ColonyWorkflow.run,
            ColonyWorkflowInput(
                spec=manifest(name, POOLS, RAW, BROKEN).model_copy(
                    update={"organization": organization}
                )
            ),
            id=colony_workflow_id(name, organization),
            task_queue=task_queue,
        )

        def settled(status: ColonyStatus) -> bool:
            phases = {c.entry: c.phase for c in status.clusters}
            # The raw entry's nodes are read from its cluster once it has reported.
            lab_read = any(c.entry == "lab" and c.nodes for c in status.clusters)
            return (
                phases == {"west": "ready", "lab": "ready", "broken": "failed"}
                and any(c.gpus for c in status.clusters)
                and lab_read
            )

        status = await eventually(lambda: colony_status(handle), until=settled, what="settled")
        # One cluster's failure holds back no other; the colony says so.
        assert status.phase is ColonyPhase.DEGRADED
        assert (status.ready_clusters, status.total_clusters) == (2, 3)
        (condition,) = status.conditions
        assert (condition.type, condition.status, condition.reason) == (
            "ClustersReady",
            "False",
            "ClusterFailed",
        )
        assert "not found" in condition.message
        west = next(c for c in status.clusters if c.entry == "west")
        assert west.cluster == f"{name}--west"
        assert [(g.model, g.total, g.nodes) for g in west.gpus] == [("h100", 8, 1)]
        assert west.gpus[0].node_selector == {"exalsius.ai/gpu-model": "h100"}
        # Each shows its nodes: the Colony entry's pools', the raw entry's from its cluster.
        lab_status = next(c for c in status.clusters if c.entry == "lab")
        assert (west.nodes, west.ready_nodes) == (1, 1)
        assert (lab_status.nodes, lab_status.ready_nodes, lab_status.gpus) == (2, 1, [])
        # The raw entry was created as written; the Colony entry carries its labels.
        lab, west_deployment = (
            cluster_deployment_name(f"{name}--{e}", organization) for e in ("lab", "west")
        )
        assert "-lab--" in lab, "a member's ClusterDeployment is derived"
        assert fake.deployments[lab]["owner"]
        secret = colony_kubeconfigs_secret(name, organization)
        assert (secret == f"{name}-kubeconfigs") is (not organization)
        assert status.kubeconfigs_secret == secret
        assert status.organization == organization
        # Keyed by ClusterDeployment, as the exalsius operator keys it (its readers find each
        # cluster by the ClusterDeployment they know).
        assert extra.secrets[secret] == {
            lab: f"kcm-system/{lab}-kubeconfig",
            west_deployment: f"kcm-system/{west_deployment}-kubeconfig",
        }

        # Re-applied without the failed entry: that cluster is deleted, the others stay.
        await handle.execute_update(
            ColonyWorkflow.apply,
            ApplyColonyRequest(
                spec=manifest(name, POOLS, RAW).model_copy(update={"organization": organization})
            ),
        )
        trimmed = await eventually(
            lambda: colony_status(handle),
            until=lambda s: s.total_clusters == 2 and s.phase is ColonyPhase.READY,
            what="broken entry removed",
        )
        assert {c.entry for c in trimmed.clusters} == {"west", "lab"}

        # Deleting the colony deletes every cluster, then the Secret.
        await handle.execute_update(ColonyWorkflow.delete, DeleteColonyRequest())
        final: ColonyStatus = await handle.result()
        assert final.phase is ColonyPhase.DELETED
        assert secret not in extra.secrets
        for cluster in ("west", "lab", "broken"):
            workflow_id = cluster_workflow_id(f"{name}--{cluster}", organization)
            described = await env.client.get_workflow_handle(workflow_id).describe()
            assert described.status.name == "COMPLETED", cluster
        assert fake.held() == []


@activity.defn(name=WorkspaceActivity.READ_GPU_INVENTORY)
async def one_h100_node(request: ReadGpuInventoryRequest) -> ReadGpuInventoryResult:
    """Every cluster has one node with eight H100s."""
    name = request.kubeconfig.secret_name.removesuffix("-kubeconfig")
    return ReadGpuInventoryResult(
        nodes=[gpu_node(f"{name}-0", {"exalsius.ai/gpu-model": "h100"}, {"nvidia.com/gpu": 8})]
    )


async def test_a_deleted_clusters_report_hides_no_other_report(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    """Two clusters report in the same workflow task, the first deleted (it leaves the colony),
    the second ready (its GPUs are read): following the first never skips the second."""
    name = unique("fleet")
    gone, west = f"{name}--gone", f"{name}--west"
    spec = manifest(name, {**POOLS, "clusterName": "west"})
    state = ColonyState(
        spec=spec,
        clusters=[
            ColonyClusterStatus(entry="gone", cluster=gone, phase="deleting"),
            ColonyClusterStatus(entry="west", cluster=west),
        ],
    )
    handle = await env.client.start_workflow(
        ColonyWorkflow.run,
        ColonyWorkflowInput(spec=spec, state=state),
        id=colony_workflow_id(name),
        task_queue=task_queue,
    )
    # Sent before any worker polls: the colony's first workflow task holds both.
    for cluster, phase in ((gone, "deleted"), (west, "ready")):
        await handle.signal(
            ColonyWorkflow.cluster_report,
            ClusterReport(request_id=f"report/{cluster}", cluster=cluster, phase=phase, nodes=1),
        )
    fake = FakeColony()
    async with Worker(
        env.client,
        task_queue=task_queue,
        workflows=[ColonyWorkflow],
        activities=[one_h100_node, fake.write_colony_kubeconfigs],
    ):
        status = await eventually(
            lambda: colony_status(handle),
            until=lambda s: [(c.cluster, bool(c.gpus)) for c in s.clusters] == [(west, True)],
            timeout=15,
            what="the deleted cluster gone and the ready one's GPUs read",
        )
        assert status.phase is ColonyPhase.READY
        await handle.terminate(reason="test finished")
