"""A stand-in world for `ClusterWorkflow` on the time-skipping server: `FakeColony` plays the
management cluster, the child cluster and the host provider in memory, registered under the real
activity names, plus the harness the workflow tests share (`worker`, `start`, `Run`).

How the fake's waits behave (the real ones poll inside heartbeating activities):
- A wait returns as soon as what it watches differs from what the workflow knows, or its goal is
  reached, advancing the fake world one "poll" at a time; when nothing could change any more
  before the deadline, it returns the deadline's outcome at once: the fake fast-forwards instead
  of sleeping (the time-skipping server does not skip time while an activity runs).
- `gate(name)` holds every call of an activity in flight (heartbeating, so a cancel reaches it)
  until the test opens it: that is how tests interrupt a claim, a ClusterDeployment create, a
  drain or a join while it runs. `land_on_cancel` makes a gated call do its effect anyway and
  then report cancellation, as a request already on the wire would.
- `latency` adds real seconds to each wait's return, so a test polling `status` sees every step.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio import activity
from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from models.activity_api import (
    DELETE_MACHINE_ANNOTATION,
    PRE_DRAIN_HOOK,
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
    Condition,
    CordonNodeRequest,
    CordonNodeResult,
    CreateClusterDeploymentRequest,
    CreateClusterDeploymentResult,
    DeleteClusterDeploymentRequest,
    DeleteClusterDeploymentResult,
    DeleteNodeRequest,
    DeleteNodeResult,
    DeploymentOutcome,
    DeploymentWait,
    DrainNodeRequest,
    DrainNodeResult,
    DrainProgress,
    GetClusterDeploymentStatusResult,
    Host,
    ListClaimedHostsRequest,
    ListClaimedHostsResult,
    ListNodesRequest,
    ListNodesResult,
    MachineInfo,
    MarkMachinesRequest,
    MarkMachinesResult,
    NodeInfo,
    ObservedNode,
    PodInfo,
    ReleaseHostsRequest,
    ReleaseHostsResult,
    RemoveClusterMachinesRequest,
    ScaleMachineDeploymentRequest,
    ScaleMachineDeploymentResult,
    UncordonNodeRequest,
    UncordonNodeResult,
)
from models.cluster import (
    ClusterPhase,
    ClusterSpec,
    ClusterStatus,
    ClusterWorkflowInput,
    cluster_workflow_id,
)
from models.colony import WriteColonyKubeconfigsRequest, WriteColonyKubeconfigsResult
from models.drain import PodDrainClass, classify_pod, pods_to_evict
from models.errors import ErrorType, permanent
from models.node_pool import NodePoolSpec, NodePoolStatus, NodeSku
from models.operations import (
    ContinueAsNewPolicy,
    DeleteClusterRequest,
    Operation,
    OperationAccepted,
)
from models.quota import QuotaAdmission, QuotaClaim
from models.templates import TemplatePool
from models.workspace_api import (
    AwaitWorkflowsClosedRequest,
    AwaitWorkflowsClosedResult,
    ListWorkflowsRequest,
    ListWorkflowsResult,
    WorkspaceActivity,
)
from tests.helpers import eventually, unique
from workflows.cluster.workflow import ClusterWorkflow

GPU = NodeSku(gpu_model_id="h100")
CPU = NodeSku(cpu_sku="cpu-32")
BUDGET_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."
MAX_POLLS = 10_000
"""A fake wait gives up fast-forwarding after this many polls (a bug in the fake, not a hang)."""


@dataclass
class FakeNode:
    info: NodeInfo
    polls_until_visible: int
    polls_until_ready: int
    host_id: str = ""


@dataclass
class FakeMachine:
    """A Cluster API Machine of a template pool (its Node has its name)."""

    name: str
    annotations: set[str] = field(default_factory=set)
    deleting: bool = False


@dataclass
class FakePod:
    pod: PodInfo
    budget_refusals: int = 0
    """How many evictions a PodDisruptionBudget refuses before it relaxes (-1: forever)."""


@dataclass
class Gate:
    """Holds calls of one activity in flight until opened."""

    opened: asyncio.Event = field(default_factory=asyncio.Event)
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    land_on_cancel: bool = False
    cancelled: int = 0


@dataclass
class FakeColony:
    """Management cluster, child cluster and host provider, in memory."""

    template_found: bool = True
    missing_templates: set[str] = field(default_factory=set)
    """ClusterTemplates that do not exist (a cluster built from one fails at once)."""
    credential_ready: bool = True
    control_plane_ready_after: int = 1
    """Status polls before the control plane is Ready (a large number: never)."""
    control_plane_fails: bool = False
    """The ClusterDeployment reports Ready=False, reason Failed (a terminal failure)."""
    join_delay: int = 1
    """Polls before a new machine's node shows up (and is Ready); each next machine one later."""
    never_join: set[str] = field(default_factory=set)
    """Addresses whose node never appears."""
    fail_delete_times: int = 0
    """delete_cluster_deployment raises Forbidden this many times."""
    fail_uncordon: set[str] = field(default_factory=set)
    """Nodes whose uncordon raises Forbidden (a compensation that cannot succeed)."""
    hosts_per_sku: int = 20
    latency: float = 0.0
    """Real seconds each wait takes to return, so that status polls see each step."""

    deployments: dict[str, dict[str, Any]] = field(default_factory=dict)
    free: dict[str, list[Host]] = field(default_factory=dict)
    claims: dict[str, list[Host]] = field(default_factory=dict)
    owners: dict[str, str] = field(default_factory=dict)
    released: list[str] = field(default_factory=list)
    nodes: dict[str, FakeNode] = field(default_factory=dict)
    pods: dict[str, list[FakePod]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    deleted_pods: list[str] = field(default_factory=list)
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    gates: dict[str, Gate] = field(default_factory=dict)
    drain_requests: list[tuple[str, datetime, datetime]] = field(default_factory=list)
    """(node, deadline, scheduled time of the attempt) of every drain."""
    draining_now: set[str] = field(default_factory=set)
    most_draining: int = 0
    summaries: list[str] = field(default_factory=list)
    signals: list[tuple[str, str]] = field(default_factory=list)
    secrets: dict[str, dict[str, str]] = field(default_factory=dict)
    """Colony kubeconfigs Secrets written, by name."""
    """(workflow id, signal) of every signal the cluster sent through an activity."""
    quota: Callable[[QuotaClaim], Any] | None = None
    """What `admit_quota` does (the real activity, in the quota tests); None: admits all."""
    template_pool: TemplatePool | None = None
    """The pool a cluster given a config gets from its template (None: the template has none)."""
    workers: int = 0
    """The template pool's `workersNumber` (one template cluster per fake)."""
    machines: dict[str, FakeMachine] = field(default_factory=dict)
    gone_machines: list[str] = field(default_factory=list)
    """Machines Cluster API deleted, in order."""
    capi_drained: list[str] = field(default_factory=list)
    """Pods Cluster API's own drain found on a Machine's node (Colony drained none of them)."""

    def __post_init__(self) -> None:
        for index, sku in enumerate(("h100", "cpu-32")):
            self.free[sku] = [
                Host(
                    id=f"{sku}-{n:03d}", address=f"10.{index}.0.{n}", sku_id=sku, location_id="fra"
                )
                for n in range(1, self.hosts_per_sku + 1)
            ]

    # --- Test controls -------------------------------------------------------------------------

    def held(self) -> list[str]:
        """Hosts claimed and not released."""
        return sorted(self.owners)

    def add_pods(self, node: str, *pods: FakePod) -> None:
        self.pods.setdefault(node, []).extend(pods)

    def gate(self, name: ActivityName, *, land_on_cancel: bool = False) -> Gate:
        self.gates[name] = Gate(land_on_cancel=land_on_cancel)
        return self.gates[name]

    def cordoned(self) -> list[str]:
        return sorted(name for name, node in self.nodes.items() if node.info.unschedulable)

    async def _pass(
        self, name: ActivityName, land: Callable[[], None] | None = None, details: Any = None
    ) -> None:
        """Wait at the gate of `name`, if one is closed; heartbeat (with `details`, when given) so
        cancellation arrives."""
        gate = self.gates.get(name)
        if gate is None or gate.opened.is_set():
            return
        gate.entered.set()
        try:
            while not gate.opened.is_set():
                activity.heartbeat(*([details] if details is not None else []))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(gate.opened.wait(), 0.2)
        except asyncio.CancelledError:
            gate.cancelled += 1
            if gate.land_on_cancel and land is not None:
                land()
            raise

    async def _slow(self) -> None:
        if self.latency:
            activity.heartbeat()
            await asyncio.sleep(self.latency)

    # --- Management cluster ------------------------------------------------------------------

    @activity.defn(name=ActivityName.CHECK_CLUSTER_PREREQUISITES)
    async def check_cluster_prerequisites(
        self, request: CheckClusterPrerequisitesRequest
    ) -> CheckClusterPrerequisitesResult:
        found = self.template_found and request.template not in self.missing_templates
        if request.config is not None and self.template_pool is not None:
            self.workers = self.template_pool.count
            self._reconcile_machines()
            return CheckClusterPrerequisitesResult(
                template_found=True, template_valid=True, credential_found=True,
                credential_ready=True, template_pool=self.template_pool,
            )  # fmt: skip
        return CheckClusterPrerequisitesResult(
            template_found=found,
            template_valid=found,
            credential_found=True,
            credential_ready=self.credential_ready,
            credential_message="" if self.credential_ready else "secret missing",
        )

    @activity.defn(name=ActivityName.CREATE_CLUSTER_DEPLOYMENT)
    async def create_cluster_deployment(
        self, request: CreateClusterDeploymentRequest
    ) -> CreateClusterDeploymentResult:
        def land() -> None:
            self.deployments.setdefault(
                request.name,
                {"machines": [], "polls": 0, "deleting": False, "owner": request.owner},
            )

        await self._pass(ActivityName.CREATE_CLUSTER_DEPLOYMENT, land)
        created = request.name not in self.deployments
        land()
        return CreateClusterDeploymentResult(created=created)

    def _status(self, name: str, *, poll: bool) -> GetClusterDeploymentStatusResult:
        deployment = self.deployments.get(name)
        if deployment is None or deployment["deleting"]:
            if deployment is not None and poll:
                del self.deployments[name]
            return GetClusterDeploymentStatusResult(exists=False)
        if poll:
            deployment["polls"] += 1
        if self.control_plane_fails and deployment["polls"] >= 2:
            condition = Condition(
                type="Ready", status="False", reason="Failed", message="credential is not ready"
            )
            return GetClusterDeploymentStatusResult(
                exists=True, generation=1, observed_generation=1, conditions=[condition]
            )
        ready = deployment["polls"] >= self.control_plane_ready_after
        condition = Condition(
            type="Ready",
            status="True" if ready else "False",
            reason="" if ready else "Provisioning",
            message="" if ready else "waiting for control plane",
        )
        return GetClusterDeploymentStatusResult(
            exists=True, ready=ready, generation=1, observed_generation=1, conditions=[condition]
        )

    @activity.defn(name=ActivityName.AWAIT_CLUSTER_DEPLOYMENT)
    async def await_cluster_deployment(
        self, request: AwaitClusterDeploymentRequest
    ) -> AwaitClusterDeploymentResult:
        await self._pass(ActivityName.AWAIT_CLUSTER_DEPLOYMENT)
        await self._slow()
        known = sorted((c.type, c.status, c.reason) for c in request.known_conditions)
        for _ in range(MAX_POLLS):
            status = self._status(request.name, poll=True)
            if not status.exists:
                return AwaitClusterDeploymentResult(outcome=DeploymentOutcome.GONE, status=status)
            if request.want is DeploymentWait.READY:
                if status.ready:
                    return AwaitClusterDeploymentResult(
                        outcome=DeploymentOutcome.READY, status=status
                    )
                if status.conditions and status.conditions[0].reason == "Failed":
                    return AwaitClusterDeploymentResult(
                        outcome=DeploymentOutcome.FAILED, status=status
                    )
            if sorted((c.type, c.status, c.reason) for c in status.conditions) != known:
                return AwaitClusterDeploymentResult(
                    outcome=DeploymentOutcome.CHANGED, status=status
                )
        return AwaitClusterDeploymentResult(outcome=DeploymentOutcome.DEADLINE, status=status)

    @activity.defn(name=ActivityName.ADD_CLUSTER_MACHINES)
    async def add_cluster_machines(
        self, request: AddClusterMachinesRequest
    ) -> ClusterMachinesResult:
        machines: list[str] = self.deployments[request.name]["machines"]
        for offset, machine in enumerate(request.machines):
            if machine.address in machines:
                continue
            machines.append(machine.address)
            if machine.address in self.never_join:
                continue
            host_id = next(
                (
                    h.id
                    for hosts in self.claims.values()
                    for h in hosts
                    if h.address == machine.address
                ),
                "",
            )
            name = host_id or "node-" + machine.address.replace(".", "-")
            self.nodes[name] = FakeNode(
                info=NodeInfo(
                    name=name,
                    addresses=[machine.address],
                    created_at=datetime(2025, 1, 1, tzinfo=UTC)
                    + timedelta(minutes=len(self.nodes)),
                ),
                polls_until_visible=self.join_delay + offset,
                polls_until_ready=self.join_delay + offset,
                host_id=host_id,
            )
        return ClusterMachinesResult(machine_addresses=list(machines))

    @activity.defn(name=ActivityName.REMOVE_CLUSTER_MACHINES)
    async def remove_cluster_machines(
        self, request: RemoveClusterMachinesRequest
    ) -> ClusterMachinesResult:
        await self._pass(ActivityName.REMOVE_CLUSTER_MACHINES)
        machines: list[str] = self.deployments[request.name]["machines"]
        # Entries are `address:port` or a bare `address`; the fake's hosts all have their own address.
        removed = {entry.split(":")[0] for entry in request.addresses}
        machines[:] = [address for address in machines if address not in removed]
        return ClusterMachinesResult(machine_addresses=list(machines))

    @activity.defn(name=ActivityName.DELETE_CLUSTER_DEPLOYMENT)
    async def delete_cluster_deployment(
        self, request: DeleteClusterDeploymentRequest
    ) -> DeleteClusterDeploymentResult:
        if self.fail_delete_times > 0:
            self.fail_delete_times -= 1
            raise ApplicationError(
                "clusterdeployments is forbidden", type=ErrorType.FORBIDDEN, non_retryable=True
            )
        deployment = self.deployments.get(request.name)
        if deployment is not None and deployment["owner"] != request.owner:
            return DeleteClusterDeploymentResult(existed=True, foreign=True)
        if deployment is not None:
            deployment["deleting"] = True
        self.nodes.clear()
        return DeleteClusterDeploymentResult(existed=deployment is not None)

    @activity.defn(name=ActivityName.WRITE_COLONY_KUBECONFIGS)
    async def write_colony_kubeconfigs(
        self, request: WriteColonyKubeconfigsRequest
    ) -> WriteColonyKubeconfigsResult:
        if request.clusters:
            self.secrets[request.name] = dict(request.clusters)
        else:
            self.secrets.pop(request.name, None)
        return WriteColonyKubeconfigsResult(written=bool(request.clusters))

    # --- Child cluster -----------------------------------------------------------------------

    def _poll_nodes(self) -> None:
        for fake in self.nodes.values():
            fake.polls_until_visible -= 1
            fake.polls_until_ready -= 1

    def _visible(self, fake: FakeNode) -> bool:
        return fake.polls_until_visible < 0

    @activity.defn(name=ActivityName.LIST_NODES)
    async def list_nodes(self, request: ListNodesRequest) -> ListNodesResult:
        self.calls.append(f"list_nodes {request.label_selector}".strip())
        visible = []
        for fake in self.nodes.values():
            if not self._visible(fake):
                continue
            labels = self.labels.get(fake.info.name, {})
            key, _, value = request.label_selector.partition("=")
            if key and (key not in labels or (value and labels[key] != value)):
                continue
            pods = self.pods.get(fake.info.name, []) if request.count_pods else []
            evictable = sum(1 for p in pods if classify_pod(p.pod) is PodDrainClass.EVICT)
            visible.append(
                fake.info.model_copy(
                    update={
                        "ready": fake.polls_until_ready < 0,
                        "ready_status": "True" if fake.polls_until_ready < 0 else "False",
                        "labels": labels,
                        "evictable_pod_count": evictable,
                    }
                )
            )
        return ListNodesResult(nodes=visible)

    def _observe(self, request: AwaitNodesRequest) -> list[ObservedNode]:
        observed = []
        for want in request.expected:
            fake = next(
                (
                    f
                    for f in self.nodes.values()
                    if f.host_id == want.host_id or want.address in f.info.addresses
                ),
                None,
            )
            if fake is None or not self._visible(fake):
                observed.append(ObservedNode(host_id=want.host_id))
                continue
            self.labels[fake.info.name] = {**self.labels.get(fake.info.name, {}), **want.labels}
            observed.append(
                ObservedNode(
                    host_id=want.host_id,
                    node_name=fake.info.name,
                    labelled=True,
                    ready=fake.polls_until_ready < 0,
                )
            )
        return observed

    @activity.defn(name=ActivityName.AWAIT_NODES)
    async def await_nodes(self, request: AwaitNodesRequest) -> AwaitNodesResult:
        self.calls.append("await_nodes")
        await self._pass(ActivityName.AWAIT_NODES)
        await self._slow()
        known = {o.host_id: o for o in request.known}
        observed = self._observe(request)
        # One poll is one virtual second: like the real activity, changes are batched until
        # `min_interval_seconds` have passed.
        for elapsed in range(MAX_POLLS):
            all_ready = all(o.ready for o in observed)
            changed = any(known.get(o.host_id) != o for o in observed)
            if all_ready or (changed and elapsed >= request.min_interval_seconds):
                return AwaitNodesResult(observed=observed, all_ready=all_ready)
            self._poll_nodes()
            observed = self._observe(request)
        # Nothing changes any more before the deadline (nodes that never join): fast-forward.
        return AwaitNodesResult(observed=observed, all_ready=False, deadline_passed=True)

    @activity.defn(name=ActivityName.CORDON_NODE)
    async def cordon_node(self, request: CordonNodeRequest) -> CordonNodeResult:
        self.calls.append(f"cordon {request.node_name}")
        node = self.nodes.get(request.node_name)
        if node is not None:
            node.info.unschedulable = True
        return CordonNodeResult(found=node is not None)

    @activity.defn(name=ActivityName.UNCORDON_NODE)
    async def uncordon_node(self, request: UncordonNodeRequest) -> UncordonNodeResult:
        self.calls.append(f"uncordon {request.node_name}")
        if request.node_name in self.fail_uncordon:
            raise ApplicationError(
                "nodes is forbidden: uncordon", type=ErrorType.FORBIDDEN, non_retryable=True
            )
        node = self.nodes.get(request.node_name)
        if node is not None:
            node.info.unschedulable = False
        return UncordonNodeResult(found=node is not None)

    @activity.defn(name=ActivityName.DRAIN_NODE)
    async def drain_node(self, request: DrainNodeRequest) -> DrainNodeResult:
        self.drain_requests.append(
            (request.node_name, request.deadline, activity.info().current_attempt_scheduled_time)
        )
        self.draining_now.add(request.node_name)
        self.most_draining = max(self.most_draining, len(self.draining_now))
        try:
            return await self._drain(request)
        finally:
            # The parallelism bounds drains; a drained node's removal runs beside the next.
            self.draining_now.discard(request.node_name)

    async def _drain(self, request: DrainNodeRequest) -> DrainNodeResult:
        await self._slow()
        if self.gates.get(ActivityName.DRAIN_NODE) and all(
            p.budget_refusals < 0 for p in self.pods.get(request.node_name, []) if p.budget_refusals
        ):
            await self._pass(ActivityName.DRAIN_NODE)
        progress = DrainProgress()
        pods = self.pods.setdefault(request.node_name, [])
        for _ in range(MAX_POLLS):
            pods[:] = [p for p in pods if not p.pod.terminating]
            remaining = pods_to_evict([p.pod for p in pods])
            progress.pods_remaining = len(remaining)
            if not remaining:
                progress.blocking_pods = []
                return DrainNodeResult(drained=True, progress=progress)
            blocked: list[str] = []
            forever = True
            for fake in pods:
                if classify_pod(fake.pod) is not PodDrainClass.EVICT:
                    continue
                self.calls.append(f"evict {request.node_name}")
                if fake.budget_refusals != 0:
                    if fake.budget_refusals > 0:
                        fake.budget_refusals -= 1
                        forever = False
                    blocked.append(f"{fake.pod.ref}: {BUDGET_MESSAGE}")
                    continue
                forever = False
                fake.pod.terminating = True
                self.evicted.append(fake.pod.ref)
                progress.pods_evicted += 1
            progress.blocking_pods = blocked
            activity.heartbeat(progress)
            if blocked and forever:
                break  # only budgets that never relax are left: fast-forward to the deadline
            await self._pass(ActivityName.DRAIN_NODE, details=progress)
        if request.force:
            for fake in pods:
                if classify_pod(fake.pod) is PodDrainClass.EVICT:
                    fake.pod.terminating = True
                    self.deleted_pods.append(fake.pod.ref)
                    progress.pods_deleted.append(fake.pod.ref)
            progress.blocking_pods = []
            return DrainNodeResult(drained=True, progress=progress)
        return DrainNodeResult(drained=False, progress=progress)

    @activity.defn(name=ActivityName.DELETE_NODE)
    async def delete_node(self, request: DeleteNodeRequest) -> DeleteNodeResult:
        self.calls.append(f"delete {request.node_name}")
        existed = self.nodes.pop(request.node_name, None) is not None
        self.pods.pop(request.node_name, None)
        return DeleteNodeResult(existed=existed, gone=True)

    # --- Host provider -----------------------------------------------------------------------

    @activity.defn(name=ActivityName.CLAIM_HOSTS)
    async def claim_hosts(self, request: ClaimHostsRequest) -> ClaimHostsResult:
        def land() -> list[Host]:
            if request.idempotency_key in self.claims:
                return self.claims[request.idempotency_key]
            free = self.free[request.sku.id]
            if len(free) < request.count:
                raise ApplicationError(
                    f"only {len(free)} hosts of {request.sku.id} are free in {request.location_id}",
                    type=ErrorType.HOSTS_UNAVAILABLE,
                    non_retryable=True,
                )
            hosts, self.free[request.sku.id] = free[: request.count], free[request.count :]
            self.claims[request.idempotency_key] = hosts
            for host in hosts:
                self.owners[host.id] = request.owner
            return hosts

        await self._pass(ActivityName.CLAIM_HOSTS, lambda: (land(), None)[1])
        return ClaimHostsResult(hosts=land())

    @activity.defn(name=ActivityName.RELEASE_HOSTS)
    async def release_hosts(self, request: ReleaseHostsRequest) -> ReleaseHostsResult:
        released = []
        for host_id in request.host_ids:
            if self.owners.get(host_id) != request.owner:
                continue
            del self.owners[host_id]
            released.append(host_id)
            host = next(h for hosts in self.claims.values() for h in hosts if h.id == host_id)
            self.free[host.sku_id].append(host)
        self.released.extend(released)
        return ReleaseHostsResult(released=released)

    @activity.defn(name=ActivityName.LIST_CLAIMED_HOSTS)
    async def list_claimed_hosts(self, request: ListClaimedHostsRequest) -> ListClaimedHostsResult:
        hosts = {
            host.id: host
            for claimed in self.claims.values()
            for host in claimed
            if self.owners.get(host.id) == request.owner
        }
        return ListClaimedHostsResult(hosts=list(hosts.values()))

    @activity.defn(name=ActivityName.AWAIT_FREE_HOSTS)
    async def await_free_hosts(self, request: AwaitFreeHostsRequest) -> AwaitFreeHostsResult:
        await self._pass(ActivityName.AWAIT_FREE_HOSTS)
        free = len(self.free[request.sku.id])
        return AwaitFreeHostsResult(free=free, enough=free >= request.count)

    # --- Temporal (what the cluster tells its workspaces and GPU ledger) -----------------------

    @activity.defn(name=ActivityName.ADMIT_QUOTA)
    async def admit_quota(self, claim: QuotaClaim) -> QuotaAdmission:
        self.calls.append(f"{ActivityName.ADMIT_QUOTA}:{claim.holder}")
        if self.quota is None:
            return QuotaAdmission()
        admitted: QuotaAdmission = await self.quota(claim)
        return admitted

    # --- A template pool: Cluster API's MachineDeployment, in memory ------------------------

    def _reconcile_machines(self) -> None:
        """What Cluster API does with `workers`: Machines (each with a Node) up to it; over it,
        the surplus deleted by priority (delete-machine first), each held while Colony's
        pre-drain hook is on it; a deleted Machine's pods are what Cluster API's drain finds."""
        alive = [m for m in self.machines.values() if not m.deleting]
        for _ in range(self.workers - len(alive)):
            name = f"md-{len(self.machines) + len(self.gone_machines):03d}"
            self.machines[name] = FakeMachine(name=name)
            self.nodes[name] = FakeNode(
                info=NodeInfo(
                    name=name,
                    created_at=datetime(2025, 1, 1, tzinfo=UTC)
                    + timedelta(minutes=len(self.nodes)),
                ),
                polls_until_visible=0,
                polls_until_ready=0,
                host_id=name,
            )
        surplus = len(alive) - self.workers
        if surplus > 0:
            ordered = sorted(
                alive, key=lambda m: (DELETE_MACHINE_ANNOTATION not in m.annotations, m.name)
            )
            for machine in ordered[:surplus]:
                machine.deleting = True
        for machine in [m for m in self.machines.values() if m.deleting]:
            if PRE_DRAIN_HOOK in machine.annotations:
                continue
            self.capi_drained.extend(p.pod.name for p in self.pods.pop(machine.name, []))
            del self.machines[machine.name]
            self.nodes.pop(machine.name, None)
            self.gone_machines.append(machine.name)

    @activity.defn(name=ActivityName.SCALE_MACHINE_DEPLOYMENT)
    async def scale_machine_deployment(
        self, request: ScaleMachineDeploymentRequest
    ) -> ScaleMachineDeploymentResult:
        self.calls.append(f"{ActivityName.SCALE_MACHINE_DEPLOYMENT}:{request.count}")
        found = self.workers
        if found == request.count or (request.only_lower and found < request.count):
            return ScaleMachineDeploymentResult(found=found, written=False)
        if found != request.expected:
            raise permanent(ErrorType.WORKERS_CHANGED_OUTSIDE, f"workersNumber is {found}")
        self.workers = request.count
        self._reconcile_machines()
        return ScaleMachineDeploymentResult(found=found, written=True)

    @activity.defn(name=ActivityName.MARK_MACHINES)
    async def mark_machines(self, request: MarkMachinesRequest) -> MarkMachinesResult:
        what = "hook-off" if request.hook_only else ("mark" if request.mark else "unmark")
        names = ",".join(sorted(request.machines))
        self.calls.append(f"{ActivityName.MARK_MACHINES}:{what}:{names}")
        keys = (
            [PRE_DRAIN_HOOK] if request.hook_only else [PRE_DRAIN_HOOK, DELETE_MACHINE_ANNOTATION]
        )
        for name in request.machines:
            machine = self.machines.get(name)
            if machine is None:
                continue
            for key in keys:
                if request.mark:
                    machine.annotations.add(key)
                else:
                    machine.annotations.discard(key)
        self._reconcile_machines()
        return MarkMachinesResult(changed=list(request.machines))

    @activity.defn(name=ActivityName.AWAIT_MACHINES)
    async def await_machines(self, request: AwaitMachinesRequest) -> AwaitMachinesResult:
        self._reconcile_machines()
        infos = [
            MachineInfo(
                name=m.name,
                node_name=m.name,
                ready=True,
                deleting=m.deleting,
                marked=PRE_DRAIN_HOOK in m.annotations,
            )
            for m in sorted(self.machines.values(), key=lambda m: m.name)
        ]
        alive = [m for m in infos if not m.deleting]
        settled = len(alive) == request.count and not set(request.gone) & set(self.machines)
        return AwaitMachinesResult(machines=infos, settled=settled, deadline_passed=not settled)

    @activity.defn(name=WorkspaceActivity.LIST_WORKFLOWS)
    async def list_workflows(self, request: ListWorkflowsRequest) -> ListWorkflowsResult:
        return ListWorkflowsResult(workflow_ids=[])

    @activity.defn(name=WorkspaceActivity.AWAIT_WORKFLOWS_CLOSED)
    async def await_workflows_closed(
        self, request: AwaitWorkflowsClosedRequest
    ) -> AwaitWorkflowsClosedResult:
        return AwaitWorkflowsClosedResult(open=[])

    def activities(self) -> list[Callable[..., Any]]:
        temporal = [self.list_workflows, self.await_workflows_closed]
        return [getattr(self, name.value) for name in ActivityName] + temporal


# --- Harness -------------------------------------------------------------------------------------


_started: list[WorkflowHandle[Any, Any]] = []


@contextlib.asynccontextmanager
async def worker(
    env: WorkflowEnvironment,
    task_queue: str,
    fake: FakeColony,
    workflows: tuple[type, ...] = (),
) -> AsyncIterator[Worker]:
    """A worker for the test's task queue. On the way out, every cluster the test started is
    deleted (or terminated, when that fails) while the worker still runs."""
    async with Worker(
        env.client,
        task_queue=task_queue,
        workflows=[ClusterWorkflow, *workflows],
        activities=fake.activities(),
        max_heartbeat_throttle_interval=timedelta(seconds=1),
        default_heartbeat_throttle_interval=timedelta(seconds=1),
    ) as running:
        try:
            yield running
        finally:
            for gate in fake.gates.values():
                gate.opened.set()
            while _started:
                handle = _started.pop()
                try:
                    if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                        await handle.execute_update(
                            ClusterWorkflow.delete_cluster, DeleteClusterRequest()
                        )
                        await asyncio.wait_for(handle.result(), timeout=20)
                except (RPCError, WorkflowUpdateFailedError, WorkflowFailureError, TimeoutError):
                    with contextlib.suppress(RPCError):
                        await handle.terminate(reason="test finished")


@dataclass
class Run:
    """One workflow under test, with its world and a way to wait on its status."""

    env: WorkflowEnvironment
    handle: WorkflowHandle[ClusterWorkflow, ClusterStatus]
    fake: FakeColony
    name: str

    async def status(self) -> ClusterStatus:
        return await self.handle.query(ClusterWorkflow.status)

    async def until(
        self,
        check: Callable[[ClusterStatus], bool],
        *,
        what: str,
        timeout: float = 30.0,
    ) -> ClusterStatus:
        """Poll the status until `check(status)` holds (the workflow has no timers: no time
        needs skipping, and activities in flight would stop it anyway)."""
        return await eventually(self.status, until=check, timeout=timeout, interval=0.02, what=what)

    async def ready(self) -> ClusterStatus:
        return await self.until(
            lambda s: (
                s.phase is ClusterPhase.READY
                and s.current_operation is None
                and not s.queued_operations
            ),
            what="cluster ready and idle",
        )

    async def finished(self, accepted: OperationAccepted) -> ClusterStatus:
        def done(status: ClusterStatus) -> bool:
            op = status.operation(accepted.operation_id)
            return op is not None and op.state.finished

        return await self.until(done, what=f"operation {accepted.operation_id} finished")

    async def history_size(self) -> tuple[int, int]:
        """(events, bytes) of the current run's history."""
        history = await self.handle.fetch_history()
        return len(history.events), sum(event.ByteSize() for event in history.events)


def pool_of(status: ClusterStatus, name: str) -> NodePoolStatus:
    found = status.pool(name)
    assert found is not None, f"no pool {name!r} in {status.node_pools}"
    return found


def op_of(status: ClusterStatus, operation_id: str) -> Operation:
    found = status.operation(operation_id)
    assert found is not None, f"no operation {operation_id!r}"
    return found


def pool(name: str, count: int, sku: NodeSku = GPU, **extra: Any) -> NodePoolSpec:
    return NodePoolSpec(name=name, sku=sku, count=count, **extra)


async def start(
    env: WorkflowEnvironment,
    task_queue: str,
    fake: FakeColony,
    *pools: NodePoolSpec,
    run_events: int | None = None,
    **spec: Any,
) -> Run:
    name = unique("c")
    handle = await env.client.start_workflow(
        ClusterWorkflow.run,
        ClusterWorkflowInput(
            spec=ClusterSpec(name=name, location_id="fra", node_pools=list(pools), **spec),
            continue_as_new=ContinueAsNewPolicy(events=run_events or ContinueAsNewPolicy().events),
        ),
        id=cluster_workflow_id(name),
        task_queue=task_queue,
    )
    _started.append(handle)
    return Run(env=env, handle=handle, fake=fake, name=name)


def pod(name: str, **extra: Any) -> FakePod:
    budget = extra.pop("budget_refusals", 0)
    return FakePod(
        pod=PodInfo(namespace="default", name=name, uid=uuid.uuid4().hex, **extra),
        budget_refusals=budget,
    )
