"""What the parts of `ClusterWorkflow` share: the cluster's spec and state, how it shows its
phase, and the small steps every plan uses (its kubeconfig reference, a pool by name, releasing
hosts, the owner sweep).

`workflows/cluster/workflow.py` (the entity: the queue, updates, signals), `create.py` and
`delete.py` (the cluster's own life), `scale_up.py` (claim, join, give back) and `drain.py`
(cordon, drain, remove) each receive one `ClusterContext`; deterministic code only, like every
module of `workflows/`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from temporalio import workflow

from workflows.cluster_calls import LIST_CLAIMED_HOSTS, RELEASE_HOSTS

with workflow.unsafe.imports_passed_through():
    from models.activity_api import (
        GPU_MODEL_LABEL,
        HOST_ID_LABEL,
        NODE_POOL_LABEL,
        SKU_LABEL,
        KubeconfigRef,
        ListClaimedHostsRequest,
        ReleaseHostsRequest,
    )
    from models.cluster import ClusterPhase, ClusterSpec, ClusterState
    from models.errors import ErrorType, permanent
    from models.node_pool import NodePoolStatus, NodeState, NodeStatus
    from models.ownership import Owner
    from models.rules import unknown_pool


def human(seconds: float) -> str:
    """A duration as "1h30m", "5m" or "45s", for messages."""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    return text + (f"{secs}s" if secs or not text else "")


@dataclass
class ClusterContext:
    """The cluster a plan works on."""

    spec: ClusterSpec
    state: ClusterState
    shown_changed: Callable[[], None] = field(default=lambda: None)
    """Called when what users see of the cluster changed (its phase, its reason, a pool waiting
    for hosts): the workflow shows it again (search attributes on change, the Web UI)."""

    def set_phase(self, phase: ClusterPhase, reason: str = "") -> None:
        self.state.phase = phase
        self.state.reason = reason
        self.shown_changed()

    def owner(self) -> Owner:
        """The marks the cluster's ClusterDeployment carries: its workflow, its organization."""
        return Owner(workflow_id=workflow.info().workflow_id, organization=self.spec.organization)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def deployment(self) -> str:
        """The ClusterDeployment's name (the cluster's name, qualified by its organization)."""
        return self.spec.deployment_name

    def kubeconfig(self) -> KubeconfigRef:
        if self.state.kubeconfig is None:
            raise permanent(ErrorType.NOT_FOUND, f"cluster '{self.name}' has no kubeconfig yet")
        return self.state.kubeconfig

    def pool(self, name: str) -> NodePoolStatus:
        pool = self.state.pool(name)
        if pool is None:
            # Validators refuse unknown pools; reaching this means the pool went away meanwhile.
            raise permanent(
                ErrorType.NOT_FOUND,
                unknown_pool(self.name, name, (p.name for p in self.state.node_pools)),
            )
        return pool

    def find_node(self, node: str) -> tuple[NodePoolStatus, NodeStatus]:
        for pool in self.state.node_pools:
            for status in pool.nodes:
                if node in (status.name, status.host_id):
                    return pool, status
        raise permanent(
            ErrorType.NOT_FOUND, f"node '{node}' does not exist in cluster '{self.name}'"
        )

    def node_labels(self, pool: NodePoolStatus, host_id: str) -> dict[str, str]:
        """What Colony puts on every node of `pool`: the user's labels, then its own."""
        labels = {
            **pool.labels,
            NODE_POOL_LABEL: pool.name,
            SKU_LABEL: pool.sku.id,
            HOST_ID_LABEL: host_id,
        }
        if pool.sku.gpu_model_id:
            # The canonical label an exalsius `gpuType` matches (the GPU admission reads it too).
            labels[GPU_MODEL_LABEL] = pool.sku.gpu_model_id
        return labels

    def machine_ref(self, node: NodeStatus) -> str:
        """The node's machine entry as `address:port` (hosts behind one bastion share an address)."""
        claimed = self.state.hosts.get(node.host_id)
        return f"{claimed.host.address}:{claimed.host.ssh_port}" if claimed else node.address

    @staticmethod
    def count_ready(pool: NodePoolStatus) -> None:
        pool.ready_count = sum(
            1
            for node in pool.nodes
            if node.state is not NodeState.REGISTERED and node.kubernetes_status == "Ready"
        )

    def drop_if_empty(self, pool_name: str) -> None:
        """A pool whose nodes are all gone (its add failed, or it was deleted) is not a pool: it is
        removed, so the same request can be sent again and status says what exists."""
        pool = self.state.pool(pool_name)
        if pool is not None and not pool.nodes:
            self.state.node_pools.remove(pool)

    async def release(self, host_ids: Iterable[str]) -> None:
        """Give hosts back and forget them (a compensation-grade call: retried, then reported)."""
        ids = sorted(set(host_ids))
        if not ids:
            return
        await RELEASE_HOSTS(ReleaseHostsRequest(host_ids=ids, owner=self.state.owner))
        for host_id in ids:
            self.state.hosts.pop(host_id, None)

    async def sweep_unrecorded_hosts(self) -> list[str]:
        """Release hosts the provider says this cluster holds but the state does not know: a claim
        that landed after its operation was interrupted. Called once every branch of the operation
        has settled, so no claim of it is still on its way."""
        held = await LIST_CLAIMED_HOSTS(ListClaimedHostsRequest(owner=self.state.owner))
        strays = [host.id for host in held.hosts if host.id not in self.state.hosts]
        if strays:
            await RELEASE_HOSTS(ReleaseHostsRequest(host_ids=strays, owner=self.state.owner))
        return strays
