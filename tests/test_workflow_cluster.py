"""ClusterWorkflow on the time-skipping server, with stand-in activities registered under the real names.

`FakeColony` is an in-memory management cluster, child cluster and host provider in one: enough
behaviour to drive every branch of the workflow (nodes joining one poll apart, budgets refusing
evictions, hosts that never join, deletes that fail), and a record of what was claimed and released.
Timers are moved forward with `env.sleep` while polling the `status` query.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from models.activity_api import (
    ActivityName,
    AddClusterMachinesRequest,
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
    DeletePodRequest,
    DeletePodResult,
    EvictionOutcome,
    EvictPodRequest,
    EvictPodResult,
    GetClusterDeploymentStatusRequest,
    GetClusterDeploymentStatusResult,
    Host,
    LabelNodeRequest,
    LabelNodeResult,
    ListClaimedHostsRequest,
    ListClaimedHostsResult,
    ListNodesRequest,
    ListNodesResult,
    ListPodsOnNodeRequest,
    ListPodsOnNodeResult,
    NodeInfo,
    PodInfo,
    ReleaseHostsRequest,
    ReleaseHostsResult,
    RemoveClusterMachinesRequest,
    Toleration,
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
from models.drain import PodDrainClass, classify_pod
from models.errors import ErrorType
from models.node_pool import NodePoolSpec, NodePoolStatus, NodeSku, NodeState, Taint, TaintEffect
from models.operations import (
    AddNodePoolRequest,
    DeleteClusterRequest,
    DeleteNodePoolRequest,
    Operation,
    OperationAccepted,
    OperationState,
    ScaleNodePoolRequest,
)
from models.operations import (
    DeleteNodeRequest as DeleteNodeOperation,
)
from tests.helpers import eventually, unique
from workflows.cluster import ClusterWorkflow
from workflows.search_attributes import ALL as SEARCH_ATTRIBUTES

pytestmark = pytest.mark.slow

GPU = NodeSku(gpu_model_id="h100")
CPU = NodeSku(cpu_sku="cpu-32")


# --- The stand-in world -------------------------------------------------------------------------


@dataclass
class FakeNode:
    info: NodeInfo
    polls_until_visible: int
    polls_until_ready: int


@dataclass
class FakePod:
    pod: PodInfo
    budget_refusals: int = 0
    """How many evictions a PodDisruptionBudget refuses before it relaxes (-1: forever)."""


@dataclass
class FakeColony:
    """Management cluster, child cluster and host provider, in memory."""

    template_found: bool = True
    credential_ready: bool = True
    control_plane_ready_after: int = 1
    """Status polls before the control plane is Ready (a large number: never)."""
    join_delay: int = 1
    """list_nodes calls before a new machine's node shows up; each next machine one call later."""
    never_join: set[str] = field(default_factory=set)
    """Addresses whose node never appears."""
    fail_delete_times: int = 0
    """delete_cluster_deployment raises Forbidden this many times."""
    hosts_per_sku: int = 20

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

    def __post_init__(self) -> None:
        for index, sku in enumerate(("h100", "cpu-32")):
            self.free[sku] = [
                Host(
                    id=f"{sku}-{n:03d}", address=f"10.{index}.0.{n}", sku_id=sku, location_id="fra"
                )
                for n in range(1, self.hosts_per_sku + 1)
            ]

    def held(self) -> list[str]:
        """Hosts claimed and not released."""
        return sorted(self.owners)

    def add_pods(self, node: str, *pods: FakePod) -> None:
        self.pods.setdefault(node, []).extend(pods)

    # Management cluster

    @activity.defn(name=ActivityName.CHECK_CLUSTER_PREREQUISITES)
    async def check_cluster_prerequisites(
        self, request: CheckClusterPrerequisitesRequest
    ) -> CheckClusterPrerequisitesResult:
        return CheckClusterPrerequisitesResult(
            template_found=self.template_found,
            template_valid=self.template_found,
            credential_found=True,
            credential_ready=self.credential_ready,
            credential_message="" if self.credential_ready else "secret missing",
        )

    @activity.defn(name=ActivityName.CREATE_CLUSTER_DEPLOYMENT)
    async def create_cluster_deployment(
        self, request: CreateClusterDeploymentRequest
    ) -> CreateClusterDeploymentResult:
        created = request.name not in self.deployments
        self.deployments.setdefault(
            request.name, {"machines": [], "polls": 0, "deleting": False, "gone": False}
        )
        return CreateClusterDeploymentResult(created=created)

    @activity.defn(name=ActivityName.GET_CLUSTER_DEPLOYMENT_STATUS)
    async def get_cluster_deployment_status(
        self, request: GetClusterDeploymentStatusRequest
    ) -> GetClusterDeploymentStatusResult:
        deployment = self.deployments.get(request.name)
        if deployment is None or deployment["deleting"]:
            if deployment is not None:
                del self.deployments[request.name]
            return GetClusterDeploymentStatusResult(exists=False)
        deployment["polls"] += 1
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
            name = "node-" + machine.address.replace(".", "-")
            self.nodes[name] = FakeNode(
                info=NodeInfo(
                    name=name,
                    addresses=[machine.address],
                    created_at=datetime(2025, 1, 1, tzinfo=UTC)
                    + timedelta(minutes=len(self.nodes)),
                ),
                polls_until_visible=self.join_delay + offset,
                polls_until_ready=self.join_delay + offset,
            )
        return ClusterMachinesResult(machine_addresses=list(machines))

    @activity.defn(name=ActivityName.REMOVE_CLUSTER_MACHINES)
    async def remove_cluster_machines(
        self, request: RemoveClusterMachinesRequest
    ) -> ClusterMachinesResult:
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
        if deployment is not None:
            deployment["deleting"] = True
        self.nodes.clear()
        return DeleteClusterDeploymentResult(existed=deployment is not None)

    # Child cluster

    @activity.defn(name=ActivityName.LIST_NODES)
    async def list_nodes(self, request: ListNodesRequest) -> ListNodesResult:
        self.calls.append("list_nodes")
        visible = []
        for fake in self.nodes.values():
            fake.polls_until_visible -= 1
            fake.polls_until_ready -= 1
            if fake.polls_until_visible < 0:
                pods = self.pods.get(fake.info.name, [])
                evictable = sum(1 for p in pods if classify_pod(p.pod) is PodDrainClass.EVICT)
                visible.append(
                    fake.info.model_copy(
                        update={
                            "ready": fake.polls_until_ready < 0,
                            "labels": self.labels.get(fake.info.name, {}),
                            "evictable_pod_count": evictable,
                        }
                    )
                )
        return ListNodesResult(nodes=visible)

    @activity.defn(name=ActivityName.LABEL_NODE)
    async def label_node(self, request: LabelNodeRequest) -> LabelNodeResult:
        self.labels[request.node_name] = request.labels
        return LabelNodeResult(found=request.node_name in self.nodes)

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
        node = self.nodes.get(request.node_name)
        if node is not None:
            node.info.unschedulable = False
        return UncordonNodeResult(found=node is not None)

    @activity.defn(name=ActivityName.LIST_PODS_ON_NODE)
    async def list_pods_on_node(self, request: ListPodsOnNodeRequest) -> ListPodsOnNodeResult:
        pods = self.pods.get(request.node_name, [])
        # Evicted pods terminate between two looks.
        pods[:] = [p for p in pods if not p.pod.terminating]
        return ListPodsOnNodeResult(pods=[p.pod for p in pods])

    @activity.defn(name=ActivityName.EVICT_POD)
    async def evict_pod(self, request: EvictPodRequest) -> EvictPodResult:
        for node, pods in self.pods.items():
            for fake in pods:
                if (fake.pod.namespace, fake.pod.name) != (request.namespace, request.name):
                    continue
                self.calls.append(f"evict {node}")
                if fake.budget_refusals != 0:
                    fake.budget_refusals -= 1
                    return EvictPodResult(
                        outcome=EvictionOutcome.BLOCKED_BY_BUDGET,
                        message="Cannot evict pod as it would violate the pod's disruption budget.",
                    )
                fake.pod.terminating = True
                self.evicted.append(fake.pod.ref)
                return EvictPodResult(outcome=EvictionOutcome.EVICTED)
        return EvictPodResult(outcome=EvictionOutcome.GONE)

    @activity.defn(name=ActivityName.DELETE_POD)
    async def delete_pod(self, request: DeletePodRequest) -> DeletePodResult:
        for pods in self.pods.values():
            for fake in pods:
                if (fake.pod.namespace, fake.pod.name) == (request.namespace, request.name):
                    fake.pod.terminating = True
                    self.deleted_pods.append(fake.pod.ref)
                    return DeletePodResult(existed=True)
        return DeletePodResult(existed=False)

    @activity.defn(name=ActivityName.DELETE_NODE)
    async def delete_node(self, request: DeleteNodeRequest) -> DeleteNodeResult:
        self.calls.append(f"delete {request.node_name}")
        existed = self.nodes.pop(request.node_name, None) is not None
        self.pods.pop(request.node_name, None)
        return DeleteNodeResult(existed=existed)

    # Host provider

    @activity.defn(name=ActivityName.CLAIM_HOSTS)
    async def claim_hosts(self, request: ClaimHostsRequest) -> ClaimHostsResult:
        if request.idempotency_key in self.claims:
            return ClaimHostsResult(hosts=self.claims[request.idempotency_key])
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
        return ClaimHostsResult(hosts=hosts)

    @activity.defn(name=ActivityName.RELEASE_HOSTS)
    async def release_hosts(self, request: ReleaseHostsRequest) -> ReleaseHostsResult:
        released = [host_id for host_id in request.host_ids if self.owners.pop(host_id, None)]
        self.released.extend(released)
        return ReleaseHostsResult(released=released)

    @activity.defn(name=ActivityName.LIST_CLAIMED_HOSTS)
    async def list_claimed_hosts(self, request: ListClaimedHostsRequest) -> ListClaimedHostsResult:
        hosts = [
            host
            for claimed in self.claims.values()
            for host in claimed
            if self.owners.get(host.id) == request.owner
        ]
        return ListClaimedHostsResult(hosts=hosts)

    def activities(self) -> list[Callable[..., Any]]:
        return [getattr(self, name.value) for name in ActivityName]


# --- Harness -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def env(time_env: WorkflowEnvironment) -> WorkflowEnvironment:
    """The time-skipping server with Colony's search attributes registered (it has no visibility)."""
    try:
        await time_env.client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=time_env.client.namespace,
                search_attributes={
                    key.name: IndexedValueType.ValueType(key.indexed_value_type.value)
                    for key in SEARCH_ATTRIBUTES
                },
            )
        )
    except RPCError as error:
        if error.status is not RPCStatusCode.ALREADY_EXISTS:
            raise
    return time_env


_started: list[WorkflowHandle[Any, Any]] = []


@contextlib.asynccontextmanager
async def worker(
    env: WorkflowEnvironment, task_queue: str, fake: FakeColony
) -> AsyncIterator[Worker]:
    """A worker for the test's task queue. On the way out, every cluster the test started is
    deleted (or terminated, when that fails) while the worker still runs: on the time-skipping
    server a workflow left with pending tasks and no worker holds time still for later tests."""
    async with Worker(
        env.client, task_queue=task_queue, workflows=[ClusterWorkflow], activities=fake.activities()
    ) as running:
        try:
            yield running
        finally:
            while _started:
                handle = _started.pop()
                try:
                    if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                        await handle.execute_update(
                            ClusterWorkflow.delete_cluster, DeleteClusterRequest()
                        )
                        await asyncio.wait_for(handle.result(), timeout=10)
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
        step: float = 5.0,
        timeout: float = 30.0,
    ) -> ClusterStatus:
        """Move time forward `step` seconds at a time until `check(status)` holds."""

        async def probe() -> ClusterStatus:
            await self.env.sleep(step)
            return await self.status()

        return await eventually(probe, until=check, timeout=timeout, interval=0.01, what=what)

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
    continue_as_new_after: int | None = None,
    **spec: Any,
) -> Run:
    name = unique("c")
    handle = await env.client.start_workflow(
        ClusterWorkflow.run,
        ClusterWorkflowInput(
            spec=ClusterSpec(name=name, location_id="fra", node_pools=list(pools), **spec),
            continue_as_new_after_operations=continue_as_new_after,
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


async def rejected(run: Run, update: Any, request: Any) -> str:
    """Send an update that must be refused; return the message the user sees."""
    with pytest.raises(WorkflowUpdateFailedError) as caught:
        await run.handle.execute_update(update, request)
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == ErrorType.OPERATION_REJECTED
    return cause.message


# --- Create --------------------------------------------------------------------------------------


async def test_create_adds_pools_in_parallel_and_reports_ready(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(
            env, task_queue, fake, pool("gpu", 2), pool("cpu", 1, CPU, labels={"team": "ml"})
        )
        status = await run.ready()

        assert status.kubeconfig is not None
        assert status.kubeconfig.secret_name == f"{run.name}-kubeconfig"
        gpu, cpu = pool_of(status, "gpu"), pool_of(status, "cpu")
        assert gpu is not None
        assert cpu is not None
        assert (gpu.count, gpu.ready_count, cpu.count, cpu.ready_count) == (2, 2, 1, 1)
        assert all(node.state is NodeState.JOINED for node in gpu.nodes + cpu.nodes)
        assert {node.kubernetes_status for node in gpu.nodes} == {"Ready"}
        create = status.completed_operations[-1]
        assert create.state is OperationState.SUCCEEDED
        assert create.progress.nodes_joined == 3
        # Both pools were claimed by the same create operation, before any node joined: in parallel.
        assert len(fake.claims) == 2
        labelled = fake.labels[cpu.nodes[0].name]
        assert labelled["colony.dev/node-pool"] == "cpu"
        assert labelled["colony.dev/sku"] == "cpu-32"
        assert labelled["team"] == "ml"


async def test_control_plane_never_ready_fails_at_the_deadline(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony(control_plane_ready_after=10_000)
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, ready_deadline=timedelta(minutes=2))
        creating = await run.until(
            lambda s: "waiting for the control plane" in s.reason, what="waiting"
        )
        assert creating.phase is ClusterPhase.CREATING
        assert "Ready=False (Provisioning: waiting for control plane)" in creating.reason

        status = await run.until(lambda s: s.phase is ClusterPhase.FAILED, what="failed", step=20)
        assert status.reason == (
            "the control plane was not ready within 2m: "
            "Ready=False (Provisioning: waiting for control plane)"
        )


async def test_missing_template_fails_without_retrying(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony(template_found=False)
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1))
        status = await run.until(lambda s: s.phase is ClusterPhase.FAILED, what="failed")
        assert (
            status.reason
            == "ClusterTemplate 'remote-cluster-1-0-0' not found in namespace 'kcm-system'"
        )
        assert fake.deployments == {}
        assert fake.claims == {}
        # Only delete is accepted now, and it finishes the workflow.
        message = await rejected(
            run, ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=2)
        )
        assert message.startswith(f"cluster '{run.name}' failed (ClusterTemplate")
        await run.handle.execute_update(ClusterWorkflow.delete_cluster, DeleteClusterRequest())
        final = await run.handle.result()
        assert final.phase is ClusterPhase.DELETED


# --- Validators ----------------------------------------------------------------------------------


async def test_validators_refuse_with_a_message_and_write_nothing(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(
            env,
            task_queue,
            fake,
            pool("gpu", 1),
            pool(
                "tainted",
                1,
                CPU,
                taints=[Taint(key="dedicated", value="x", effect=TaintEffect.NO_SCHEDULE)],
            ),
        )
        # While creating, only delete is accepted.
        creating = await rejected(
            run, ClusterWorkflow.add_node_pool, AddNodePoolRequest(pool=pool("more", 1))
        )
        assert (
            creating
            == f"cluster '{run.name}' is still being created: only delete is accepted until it is ready"
        )

        before = await run.ready()
        node = pool_of(before, "gpu").nodes[0].name
        cases = [
            (
                ClusterWorkflow.scale_node_pool,
                ScaleNodePoolRequest(pool="nope", count=2),
                f"node pool 'nope' does not exist in cluster '{run.name}'",
            ),
            (
                ClusterWorkflow.delete_node_pool,
                DeleteNodePoolRequest(pool="nope"),
                f"node pool 'nope' does not exist in cluster '{run.name}'",
            ),
            (
                ClusterWorkflow.delete_node,
                DeleteNodeOperation(node="node-9"),
                f"node 'node-9' does not exist in cluster '{run.name}'",
            ),
            (
                ClusterWorkflow.delete_node,
                DeleteNodeOperation(node=node),
                f"node '{node}' is the last node of node pool 'gpu' and cannot be deleted on its own: delete the pool",
            ),
            (
                ClusterWorkflow.add_node_pool,
                AddNodePoolRequest(pool=pool("gpu", 1)),
                f"node pool 'gpu' already exists in cluster '{run.name}'",
            ),
            (
                ClusterWorkflow.delete_node_pool,
                DeleteNodePoolRequest(pool="gpu"),
                f"cluster '{run.name}' would have no node free of NoSchedule and NoExecute taints; "
                "the GPU operator, MPI operator and cluster DNS need one: keep at least one pool without such taints",
            ),
        ]
        for update, request, message in cases:
            assert await rejected(run, update, request) == message
        # A count out of range never gets past decoding the request (the model holds the rule);
        # the update is refused all the same, before anything is written.
        with pytest.raises(WorkflowUpdateFailedError):
            await run.handle.execute_update(
                ClusterWorkflow.scale_node_pool,
                ScaleNodePoolRequest.model_construct(pool="gpu", count=101),
            )

        after = await run.status()
        assert after.queued_operations == []
        assert after.current_operation is None
        assert after.completed_operations == before.completed_operations
        assert after.node_pools == before.node_pools


async def test_validation_counts_queued_operations(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1))
        await run.ready()
        # Queued behind a slow add: the second add of the same name is refused, as is scaling a
        # pool that a queued delete will remove.
        first = await run.handle.execute_update(
            ClusterWorkflow.add_node_pool, AddNodePoolRequest(pool=pool("cpu", 1, CPU))
        )
        assert first.position == 1
        duplicate = await rejected(
            run, ClusterWorkflow.add_node_pool, AddNodePoolRequest(pool=pool("cpu", 2, CPU))
        )
        assert duplicate == f"node pool 'cpu' already exists in cluster '{run.name}'"
        await run.handle.execute_update(
            ClusterWorkflow.delete_node_pool, DeleteNodePoolRequest(pool="cpu")
        )
        gone = await rejected(
            run, ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="cpu", count=3)
        )
        assert gone == f"node pool 'cpu' does not exist in cluster '{run.name}'"


# --- Queue ---------------------------------------------------------------------------------------


async def test_operations_run_in_arrival_order_and_status_shows_queue(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony(join_delay=3)
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1))
        await run.ready()
        a = await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=3)
        )
        b = await run.handle.execute_update(
            ClusterWorkflow.add_node_pool, AddNodePoolRequest(pool=pool("cpu", 1, CPU))
        )
        c = await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=2)
        )

        status = await run.status()
        assert status.current_operation is not None
        assert status.current_operation.id == a.operation_id
        assert status.current_operation.state is OperationState.RUNNING
        assert [op.id for op in status.queued_operations] == [b.operation_id, c.operation_id]
        assert (b.position, c.position) == (1, 2)
        # The Web UI's "current details" say the same.
        metadata = await run.handle.query(
            "__temporal_workflow_metadata", result_type=WorkflowMetadata
        )
        assert f"running: {a.operation_id} scale_node_pool" in metadata.current_details
        assert (
            f"queued: {b.operation_id} add_node_pool, {c.operation_id} scale_node_pool"
            in metadata.current_details
        )

        done = await run.finished(c)
        finished = [op.id for op in done.completed_operations]
        assert finished[-3:] == [a.operation_id, b.operation_id, c.operation_id]
        assert all(op.state is OperationState.SUCCEEDED for op in done.completed_operations)
        assert pool_of(done, "gpu").count == 2


# --- Scale up ------------------------------------------------------------------------------------


async def test_scale_up_reports_ready_count_rising(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony(join_delay=1)
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1))
        await run.ready()
        accepted = await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=4)
        )
        seen: list[int] = []

        def record(status: ClusterStatus) -> bool:
            gpu = pool_of(status, "gpu")
            assert gpu is not None
            if not seen or seen[-1] != gpu.ready_count:
                seen.append(gpu.ready_count)
            return gpu.ready_count == 4

        status = await run.until(record, what="4 ready", step=1)
        assert seen == sorted(seen)
        assert len(seen) >= 3, seen  # it rose in steps, not at once
        assert pool_of(status, "gpu").count == 4
        done = await run.finished(accepted)
        assert op_of(done, accepted.operation_id).state is OperationState.SUCCEEDED
        assert len(fake.held()) == 4


async def test_nodes_that_never_join_are_released_and_the_operation_fails(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony(never_join={"10.0.0.3"})
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1), join_deadline=timedelta(minutes=2))
        await run.ready()
        accepted = await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=3)
        )
        status = await run.finished(accepted)
        op = status.operation(accepted.operation_id)
        assert op is not None
        assert op.state is OperationState.FAILED
        assert op.reason == (
            "1 of 2 new nodes of node pool 'gpu' were not Ready within 2m: "
            "h100-003 (10.0.0.3); their hosts were released"
        )
        gpu = pool_of(status, "gpu")
        assert gpu is not None
        assert (gpu.count, gpu.ready_count, len(gpu.nodes)) == (2, 2, 2)
        assert fake.released == ["h100-003"]
        assert "10.0.0.3" not in fake.deployments[run.name]["machines"]
        assert fake.held() == ["h100-001", "h100-002"]


async def test_hosts_unavailable_fails_the_operation_and_keeps_the_pool(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony(hosts_per_sku=2)
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1))
        await run.ready()
        accepted = await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=5)
        )
        status = await run.finished(accepted)
        op = status.operation(accepted.operation_id)
        assert op is not None
        assert op.state is OperationState.FAILED
        assert op.reason == "claim_hosts: only 1 hosts of h100 are free in fra"
        assert pool_of(status, "gpu").count == 1


# --- Drain ---------------------------------------------------------------------------------------


async def test_scale_down_drains_in_order_and_skips_daemonset_pods(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 3))
        status = await run.ready()
        names = sorted(node.name for node in pool_of(status, "gpu").nodes)
        busy, quiet, newest = names[0], names[1], names[2]
        fake.add_pods(busy, pod("web-1"), pod("web-2"))
        fake.add_pods(quiet, pod("web-3"), pod("agent-q", controller_kind="DaemonSet"))
        fake.add_pods(newest, pod("web-4"), pod("mirror", mirror=True))
        fake.add_pods(
            newest,
            pod(
                "tolerant",
                tolerations=[Toleration(key="node.kubernetes.io/unschedulable", operator="Exists")],
            ),
        )

        accepted = await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=1)
        )
        done = await run.finished(accepted)
        op = op_of(done, accepted.operation_id)
        assert op.state is OperationState.SUCCEEDED, op
        # One evictable pod each on `quiet` and `newest`: the newer goes first, then `quiet`.
        assert [entry.node for entry in op.progress.nodes] == [newest, quiet]
        assert all(entry.cordoned and entry.step == "removed" for entry in op.progress.nodes)
        assert sorted(fake.evicted) == ["default/web-3", "default/web-4"]
        remaining = pool_of(done, "gpu")
        assert remaining is not None
        assert [node.name for node in remaining.nodes] == [busy]
        assert (remaining.count, remaining.ready_count) == (1, 1)
        assert len(fake.released) == 2


async def test_leaving_nodes_are_cordoned_first_and_drained_up_to_the_limit(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 4))
        status = await run.ready()
        for node in pool_of(status, "gpu").nodes:
            # A budget refuses each eviction twice, so the drains last long enough to overlap.
            fake.add_pods(node.name, pod(f"web-{node.name}", budget_refusals=2))

        accepted = await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool,
            ScaleNodePoolRequest(pool="gpu", count=1, drain_parallelism=2),
        )
        done = await run.finished(accepted)
        assert op_of(done, accepted.operation_id).state is OperationState.SUCCEEDED

        drain_calls = [c for c in fake.calls if c.split()[0] in ("cordon", "evict", "delete")]
        first_eviction = next(i for i, c in enumerate(drain_calls) if c.startswith("evict"))
        cordoned = {c.split()[1] for c in drain_calls[:first_eviction] if c.startswith("cordon")}
        assert len(cordoned) == 3, drain_calls  # like `kubectl drain`: all of them, first

        # A node drains from its first eviction until its Node is deleted.
        draining: set[str] = set()
        most = 0
        for call in drain_calls[first_eviction:]:
            verb, node = call.split()
            if verb == "evict":
                draining.add(node)
            elif verb == "delete":
                draining.discard(node)
            most = max(most, len(draining))
        assert most == 2, drain_calls


async def test_budget_refusals_are_retried_until_the_budget_relaxes(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 2))
        status = await run.ready()
        target = pool_of(status, "gpu").nodes[1].name
        fake.add_pods(target, pod("db-0", budget_refusals=3))

        accepted = await run.handle.execute_update(
            ClusterWorkflow.delete_node, DeleteNodeOperation(node=target)
        )
        blocked = await run.until(
            lambda s: (
                s.current_operation is not None
                and bool(s.current_operation.progress.nodes)
                and bool(s.current_operation.progress.nodes[0].blocking_pods)
            ),
            what="blocked by a budget",
            step=1,
        )
        entry = op_of(blocked, accepted.operation_id).progress.nodes[0]
        assert entry.blocking_pods == [
            "default/db-0: Cannot evict pod as it would violate the pod's disruption budget."
        ]
        assert entry.pods_remaining == 1
        node = pool_of(blocked, "gpu").nodes[1]
        assert node.state is NodeState.DRAINING

        done = await run.finished(accepted)
        assert op_of(done, accepted.operation_id).state is OperationState.SUCCEEDED
        assert fake.evicted == ["default/db-0"]
        assert pool_of(done, "gpu").count == 1


async def test_drain_deadline_fails_with_the_blocking_pods(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(
            env, task_queue, fake, pool("gpu", 2), drain_deadline=timedelta(minutes=1)
        )
        status = await run.ready()
        target = pool_of(status, "gpu").nodes[1].name
        fake.add_pods(target, pod("db-0", budget_refusals=-1), pod("web-0"))

        accepted = await run.handle.execute_update(
            ClusterWorkflow.delete_node, DeleteNodeOperation(node=target)
        )
        done = await run.until(
            lambda s: (op := s.operation(accepted.operation_id)) is not None and op.state.finished,
            what="drain failed",
            step=10,
        )
        op = done.operation(accepted.operation_id)
        assert op is not None
        assert op.state is OperationState.FAILED
        assert op.reason == (
            f"node '{target}': drain did not finish within 1m; blocked by: "
            "default/db-0: Cannot evict pod as it would violate the pod's disruption budget."
        )
        gpu = pool_of(done, "gpu")
        assert gpu is not None
        # The node is given back: schedulable again, counted again.
        assert (gpu.count, len(gpu.nodes)) == (2, 2)
        assert gpu.nodes[1].state is NodeState.JOINED
        assert f"uncordon {target}" in fake.calls
        assert fake.released == []


async def test_forced_drain_deletes_what_budgets_protect(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(
            env, task_queue, fake, pool("gpu", 2), drain_deadline=timedelta(minutes=1)
        )
        status = await run.ready()
        target = pool_of(status, "gpu").nodes[1].name
        fake.add_pods(target, pod("db-0", budget_refusals=-1))

        accepted = await run.handle.execute_update(
            ClusterWorkflow.delete_node, DeleteNodeOperation(node=target, force=True)
        )
        done = await run.until(
            lambda s: (op := s.operation(accepted.operation_id)) is not None and op.state.finished,
            what="forced drain done",
            step=10,
        )
        assert op_of(done, accepted.operation_id).state is OperationState.SUCCEEDED
        assert fake.deleted_pods == ["default/db-0"]
        assert pool_of(done, "gpu").count == 1


async def test_delete_node_without_drain_removes_it_at_once(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 2))
        status = await run.ready()
        target = pool_of(status, "gpu").nodes[0]
        fake.add_pods(target.name, pod("web-0", budget_refusals=-1))

        accepted = await run.handle.execute_update(
            ClusterWorkflow.delete_node, DeleteNodeOperation(node=target.host_id, drain=False)
        )
        done = await run.finished(accepted)
        assert op_of(done, accepted.operation_id).state is OperationState.SUCCEEDED
        assert f"cordon {target.name}" not in fake.calls
        assert fake.evicted == []
        assert fake.released == [target.host_id]
        assert pool_of(done, "gpu").count == 1


async def test_delete_node_pool_removes_every_node(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony()
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1), pool("cpu", 2, CPU))
        await run.ready()
        accepted = await run.handle.execute_update(
            ClusterWorkflow.delete_node_pool, DeleteNodePoolRequest(pool="cpu")
        )
        done = await run.finished(accepted)
        assert op_of(done, accepted.operation_id).state is OperationState.SUCCEEDED
        assert [p.name for p in done.node_pools] == ["gpu"]
        assert sorted(fake.released) == ["cpu-32-001", "cpu-32-002"]


# --- Delete --------------------------------------------------------------------------------------


async def test_delete_while_creating_interrupts_and_releases_everything(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony(join_delay=1000)
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 2))
        await run.until(lambda s: len(pool_of(s, "gpu").nodes) == 2, what="hosts claimed")
        accepted = await run.handle.execute_update(
            ClusterWorkflow.delete_cluster, DeleteClusterRequest()
        )
        final = await run.handle.result()

        assert final.phase is ClusterPhase.DELETED
        create = final.completed_operations[0]
        assert create.state is OperationState.CANCELLED
        assert create.reason == f"interrupted: cluster '{run.name}' is being deleted"
        assert op_of(final, accepted.operation_id).state is OperationState.SUCCEEDED
        assert fake.held() == []
        assert sorted(fake.released) == ["h100-001", "h100-002"]
        assert run.name not in fake.deployments


async def test_delete_when_ready_cancels_the_queue_and_the_name_is_reusable(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony(join_delay=1000)
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1), join_deadline=timedelta(hours=1))
        await run.until(lambda s: s.phase is ClusterPhase.READY, what="ready")
        fake.join_delay = 1
        # The create still waits for its node; two more operations queue behind it.
        queued = await run.handle.execute_update(
            ClusterWorkflow.add_node_pool, AddNodePoolRequest(pool=pool("cpu", 1, CPU))
        )
        await run.handle.execute_update(ClusterWorkflow.delete_cluster, DeleteClusterRequest())
        again = await run.handle.execute_update(
            ClusterWorkflow.delete_cluster, DeleteClusterRequest()
        )
        final = await run.handle.result()

        assert final.phase is ClusterPhase.DELETED
        cancelled = final.operation(queued.operation_id)
        assert cancelled is not None
        assert cancelled.state is OperationState.CANCELLED
        assert cancelled.reason == f"cancelled: cluster '{run.name}' is being deleted"
        assert op_of(final, again.operation_id).state is OperationState.SUCCEEDED
        assert fake.held() == []

        # Name reuse: a new workflow with the same id starts once the old one completed.
        second = await env.client.start_workflow(
            ClusterWorkflow.run,
            ClusterWorkflowInput(spec=ClusterSpec(name=run.name, location_id="fra")),
            id=cluster_workflow_id(run.name),
            task_queue=task_queue,
        )
        _started.append(second)
        reused = Run(env=env, handle=second, fake=fake, name=run.name)
        assert (await reused.ready()).phase is ClusterPhase.READY
        await second.execute_update(ClusterWorkflow.delete_cluster, DeleteClusterRequest())
        assert (await second.result()).phase is ClusterPhase.DELETED


async def test_a_failed_delete_is_finished_by_repeating_it(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony(fail_delete_times=1)
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1))
        await run.ready()
        first = await run.handle.execute_update(
            ClusterWorkflow.delete_cluster, DeleteClusterRequest()
        )
        failed = await run.until(lambda s: s.phase is ClusterPhase.FAILED, what="delete failed")
        assert failed.reason == (
            "delete did not finish: delete_cluster_deployment: clusterdeployments is forbidden; "
            "repeat the delete to finish it"
        )
        assert op_of(failed, first.operation_id).state is OperationState.FAILED
        message = await rejected(
            run, ClusterWorkflow.add_node_pool, AddNodePoolRequest(pool=pool("cpu", 1, CPU))
        )
        assert message.startswith(f"cluster '{run.name}' failed (delete did not finish")

        await run.handle.execute_update(ClusterWorkflow.delete_cluster, DeleteClusterRequest())
        final = await run.handle.result()
        assert final.phase is ClusterPhase.DELETED
        assert fake.held() == []


# --- Continue-as-new -----------------------------------------------------------------------------


async def test_continue_as_new_carries_state_and_queue(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = FakeColony(join_delay=2)
    async with worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1), continue_as_new_after=1)
        first_run = (await run.handle.describe()).run_id
        await run.until(lambda s: s.phase is ClusterPhase.READY, what="ready")
        a = await run.handle.execute_update(
            ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="gpu", count=2)
        )
        b = await run.handle.execute_update(
            ClusterWorkflow.add_node_pool, AddNodePoolRequest(pool=pool("cpu", 1, CPU))
        )

        latest = env.client.get_workflow_handle_for(ClusterWorkflow.run, run.handle.id)
        run.handle = latest
        done = await run.finished(b)
        assert (await latest.describe()).run_id != first_run
        assert [op.id for op in done.completed_operations][-3:] == [
            "op-0001",
            a.operation_id,
            b.operation_id,
        ]
        assert pool_of(done, "gpu").count == 2
        assert pool_of(done, "cpu").ready_count == 1
        # Next operation ids continue where the last run stopped.
        c = await latest.execute_update(
            ClusterWorkflow.scale_node_pool, ScaleNodePoolRequest(pool="cpu", count=2)
        )
        assert c.operation_id == "op-0004"
        await run.finished(c)
        await latest.execute_update(ClusterWorkflow.delete_cluster, DeleteClusterRequest())
        assert (await latest.result()).phase is ClusterPhase.DELETED
        assert fake.held() == []
