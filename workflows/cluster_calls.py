"""Every activity of the management cluster, the child clusters and the host provider that a
workflow calls, declared once (`workflows.kit.activity`: a call or a wait, its name, request and
result types, the summary the Web UI shows). The workspace side's are in
`workflows/workspace_calls.py`.
"""

from __future__ import annotations

from collections.abc import Callable

from temporalio import workflow

from workflows.kit.activity import HOST_CALL, ActivityCall, WaitCall
from workflows.kit.until import until

with workflow.unsafe.imports_passed_through():
    from models.activity_api import (
        ActivityName,
        AddClusterMachinesRequest,
        AwaitClusterDeploymentRequest,
        AwaitClusterDeploymentResult,
        AwaitFreeHostsRequest,
        AwaitFreeHostsResult,
        AwaitMachinesRequest,
        AwaitMachinesResult,
        AwaitNodesRequest,
        AwaitNodesResult,
        CheckClusterPrerequisitesRequest,
        CheckClusterPrerequisitesResult,
        ClaimHostsRequest,
        ClaimHostsResult,
        ClusterMachinesResult,
        CordonNodeRequest,
        CordonNodeResult,
        CreateClusterDeploymentRequest,
        CreateClusterDeploymentResult,
        DeleteClusterDeploymentRequest,
        DeleteClusterDeploymentResult,
        DeleteNodeRequest,
        DeleteNodeResult,
        DrainNodeRequest,
        DrainNodeResult,
        ListClaimedHostsRequest,
        ListClaimedHostsResult,
        ListNodesRequest,
        ListNodesResult,
        MarkMachinesRequest,
        MarkMachinesResult,
        ReleaseHostsRequest,
        ReleaseHostsResult,
        RemoveClusterMachinesRequest,
        ScaleMachineDeploymentRequest,
        ScaleMachineDeploymentResult,
        UncordonNodeRequest,
        UncordonNodeResult,
    )
    from models.colony import WriteColonyKubeconfigsRequest, WriteColonyKubeconfigsResult
    from models.quota import QuotaAdmission, QuotaClaim


# --- Management cluster (k0rdent) ---------------------------------------------------------------

CHECK_CLUSTER_PREREQUISITES = ActivityCall(
    ActivityName.CHECK_CLUSTER_PREREQUISITES,
    CheckClusterPrerequisitesRequest,
    CheckClusterPrerequisitesResult,
    lambda r: f"check ClusterTemplate {r.template} and Credential {r.credential}",
)
CREATE_CLUSTER_DEPLOYMENT = ActivityCall(
    ActivityName.CREATE_CLUSTER_DEPLOYMENT,
    CreateClusterDeploymentRequest,
    CreateClusterDeploymentResult,
    lambda r: f"create ClusterDeployment {r.namespace}/{r.name} from {r.template}",
)
AWAIT_CLUSTER_DEPLOYMENT = WaitCall(
    ActivityName.AWAIT_CLUSTER_DEPLOYMENT,
    AwaitClusterDeploymentRequest,
    AwaitClusterDeploymentResult,
    lambda r: f"wait until ClusterDeployment {r.namespace}/{r.name} is {r.want.value}",
)
ADD_CLUSTER_MACHINES = ActivityCall(
    ActivityName.ADD_CLUSTER_MACHINES,
    AddClusterMachinesRequest,
    ClusterMachinesResult,
    lambda r: (
        f"add {len(r.machines)} machine(s) to ClusterDeployment {r.name}: "
        + ", ".join(m.address for m in r.machines)
    ),
)
REMOVE_CLUSTER_MACHINES = ActivityCall(
    ActivityName.REMOVE_CLUSTER_MACHINES,
    RemoveClusterMachinesRequest,
    ClusterMachinesResult,
    lambda r: f"remove machine(s) {', '.join(r.addresses)} from ClusterDeployment {r.name}",
)
SCALE_MACHINE_DEPLOYMENT = ActivityCall(
    ActivityName.SCALE_MACHINE_DEPLOYMENT,
    ScaleMachineDeploymentRequest,
    ScaleMachineDeploymentResult,
    lambda r: f"set workersNumber of ClusterDeployment {r.name} to {r.count} (was {r.expected})",
)
MARK_MACHINES = ActivityCall(
    ActivityName.MARK_MACHINES,
    MarkMachinesRequest,
    MarkMachinesResult,
    lambda r: (
        f"{'mark' if r.mark else 'unmark'} Machine(s) {', '.join(r.machines)} of {r.cluster}"
        + (" (pre-drain hook)" if r.hook_only else "")
    ),
)
AWAIT_MACHINES = WaitCall(
    ActivityName.AWAIT_MACHINES,
    AwaitMachinesRequest,
    AwaitMachinesResult,
    lambda r: (
        f"wait for {r.count} Machine(s) of {r.cluster} with a Node"
        + (f", {len(r.gone)} gone" if r.gone else "")
    ),
)
DELETE_CLUSTER_DEPLOYMENT = ActivityCall(
    ActivityName.DELETE_CLUSTER_DEPLOYMENT,
    DeleteClusterDeploymentRequest,
    DeleteClusterDeploymentResult,
    lambda r: f"delete ClusterDeployment {r.namespace}/{r.name}",
)

WRITE_COLONY_KUBECONFIGS = ActivityCall(
    ActivityName.WRITE_COLONY_KUBECONFIGS,
    WriteColonyKubeconfigsRequest,
    WriteColonyKubeconfigsResult,
    lambda r: f"write Secret {r.namespace}/{r.name}: {len(r.clusters)} cluster(s)",
)

# --- Child clusters ------------------------------------------------------------------------------

LIST_NODES = ActivityCall(
    ActivityName.LIST_NODES,
    ListNodesRequest,
    ListNodesResult,
    lambda r: f"list nodes {r.label_selector}".strip(),
)
AWAIT_NODES = WaitCall(
    ActivityName.AWAIT_NODES,
    AwaitNodesRequest,
    AwaitNodesResult,
    lambda r: (
        f"wait for {len(r.expected)} node(s) to join and be Ready: "
        + ", ".join(e.host_id for e in r.expected)
    ),
)
CORDON_NODE = ActivityCall(
    ActivityName.CORDON_NODE,
    CordonNodeRequest,
    CordonNodeResult,
    lambda r: f"cordon node {r.node_name}",
)
UNCORDON_NODE = ActivityCall(
    ActivityName.UNCORDON_NODE,
    UncordonNodeRequest,
    UncordonNodeResult,
    lambda r: f"uncordon node {r.node_name}",
)
DRAIN_NODE = WaitCall(
    ActivityName.DRAIN_NODE,
    DrainNodeRequest,
    DrainNodeResult,
    lambda r: f"drain node {r.node_name}" + (" (forced at the deadline)" if r.force else ""),
)
DELETE_NODE = WaitCall(
    ActivityName.DELETE_NODE,
    DeleteNodeRequest,
    DeleteNodeResult,
    lambda r: f"delete node {r.node_name}" + (" and wait until it is gone" if r.wait_until else ""),
)

# --- Host provider -------------------------------------------------------------------------------

CLAIM_HOSTS = ActivityCall(
    ActivityName.CLAIM_HOSTS,
    ClaimHostsRequest,
    ClaimHostsResult,
    lambda r: f"claim {r.count} host(s) of {r.sku} in {r.location_id}",
    start_to_close=HOST_CALL,
)
RELEASE_HOSTS = ActivityCall(
    ActivityName.RELEASE_HOSTS,
    ReleaseHostsRequest,
    ReleaseHostsResult,
    lambda r: f"release {len(r.host_ids)} host(s): {', '.join(r.host_ids)}",
    start_to_close=HOST_CALL,
)
LIST_CLAIMED_HOSTS = ActivityCall(
    ActivityName.LIST_CLAIMED_HOSTS,
    ListClaimedHostsRequest,
    ListClaimedHostsResult,
    lambda r: "list the hosts this cluster holds",
    start_to_close=HOST_CALL,
)
AWAIT_FREE_HOSTS = WaitCall(
    ActivityName.AWAIT_FREE_HOSTS,
    AwaitFreeHostsRequest,
    AwaitFreeHostsResult,
    lambda r: f"wait for {r.count} free host(s) of {r.sku} in {r.location_id}",
)


# --- The organization's quota ledger ------------------------------------------------------------

ADMIT_QUOTA = ActivityCall(
    ActivityName.ADMIT_QUOTA,
    QuotaClaim,
    QuotaAdmission,
    lambda r: f"admit {r.holder}'s growth with organization {r.organization}'s quotas",
)
"""Refused (not retried) with `QuotaExceeded`, the ledger's words."""


async def await_cluster_deployment(
    request: AwaitClusterDeploymentRequest,
    *,
    settled: Callable[[AwaitClusterDeploymentResult], bool],
    seen: Callable[[AwaitClusterDeploymentResult], None] = lambda _: None,
) -> AwaitClusterDeploymentResult:
    """Wait, one `await_cluster_deployment` per change of the ClusterDeployment's conditions,
    until its outcome is `settled` (`workflows.kit.until`); `seen` records each look."""
    return await until(
        lambda known, left: AWAIT_CLUSTER_DEPLOYMENT(
            request.model_copy(update={"known_conditions": known}), wait=left
        ),
        known=request.known_conditions,
        learn=lambda found, _: found.status.conditions,
        settled=settled,
        deadline=request.deadline,
        seen=seen,
    )
