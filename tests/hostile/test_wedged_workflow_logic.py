"""The decisions around workflows that cannot make progress, on the time-skipping server with
stand-in activities registered under the real names:

- `PurgeWorkflow`: a stuck workspace's run is terminated (that run only), then what its marks
  find is removed in a delete's order (routes, ServiceSet, its ledger holdings, values Secret,
  namespace), after the activities it was running have had time to stop; a workflow whose task
  failed once is looked at again before anything is ended; one that answers is told to delete
  itself; a cluster that still has workspaces is refused before anything ends; a stuck cluster
  loses its ClusterDeployment (its own incarnation's only), its hosts and its ledger.
- `ClusterWorkflow`'s delete stops at once when a workspace cannot answer, failing with a reason
  that names it and the commands that clear it, and finishes when repeated once it is gone.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from temporalio import activity, workflow
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from models.activity_api import (
    ActivityName,
    AwaitClusterDeploymentRequest,
    AwaitClusterDeploymentResult,
    DeleteClusterDeploymentRequest,
    DeleteClusterDeploymentResult,
    DeploymentOutcome,
    GetClusterDeploymentStatusResult,
    Host,
    ListClaimedHostsRequest,
    ListClaimedHostsResult,
    ReleaseHostsRequest,
    ReleaseHostsResult,
)
from models.capacity import CapacityAnswer, Decision
from models.cluster import ClusterPhase, cluster_deployment_name
from models.errors import ErrorType
from models.identity import Entity, owner_key
from models.operations import DeleteClusterRequest
from models.purge import (
    FindMarkedChildObjectsRequest,
    FindMarkedChildObjectsResult,
    FindMarkedObjectsRequest,
    FindMarkedObjectsResult,
    InspectWorkflowRequest,
    InspectWorkflowResult,
    MarkedObject,
    PurgeActivity,
    PurgeOutcome,
    PurgeReport,
    PurgeRequest,
    PurgeTarget,
    TerminateWorkflowRequest,
    TerminateWorkflowResult,
    Unresponsive,
)
from models.workspace_api import (
    AwaitWorkflowsClosedRequest,
    AwaitWorkflowsClosedResult,
    CapacityMessage,
    CapacityMessageKind,
    DeleteNamespaceRequest,
    DeleteNamespaceResult,
    DeleteRequested,
    DeleteRoutesRequest,
    DeleteRoutesResult,
    DeleteServiceSetRequest,
    DeleteServiceSetResult,
    DeleteValuesSecretRequest,
    DeleteValuesSecretResult,
    LedgerHoldings,
    ListWorkflowsRequest,
    ListWorkflowsResult,
    ReadLedgerHoldingsRequest,
    WorkspaceActivity,
)
from tests.cluster_world import FakeColony, pool, start
from tests.cluster_world import worker as cluster_worker
from tests.helpers import eventually, unique
from workflows.capacity import CAPACITY
from workflows.cluster.workflow import ClusterWorkflow
from workflows.purge import PURGE
from workflows.purge.workflow import RECHECK, SETTLE, PurgeWorkflow
from workflows.workspace import WORKSPACE

pytestmark = pytest.mark.slow

ORGANIZATION = "evil"


@pytest.fixture
def env(time_env: WorkflowEnvironment) -> WorkflowEnvironment:
    return time_env


# --- stand-ins -----------------------------------------------------------------------------------


@workflow.defn(name=CAPACITY.workflow_type)
class RecordingLedger:
    """Stands in for a cluster's GPU ledger: keeps the messages it is sent."""

    def __init__(self) -> None:
        self.messages: list[CapacityMessage] = []

    @workflow.run
    async def run(self, cluster: str) -> None:
        await workflow.wait_condition(
            lambda: any(m.kind is CapacityMessageKind.CLOSE for m in self.messages)
        )

    @workflow.signal(name=CAPACITY.capacity.name)
    def capacity(self, message: CapacityMessage) -> None:
        self.messages.append(message)

    @workflow.query(name="messages")
    def received(self) -> list[CapacityMessage]:
        return self.messages


@workflow.defn(name=WORKSPACE.workflow_type)
class AnsweringWorkspace:
    """Stands in for a workspace whose workflow answers: ends once told to delete itself."""

    def __init__(self) -> None:
        self.told: list[DeleteRequested] = []

    @workflow.run
    async def run(self, name: str) -> None:
        await workflow.wait_condition(lambda: bool(self.told))

    @workflow.signal(name=WORKSPACE.delete_requested.name)
    def delete_requested(self, request: DeleteRequested) -> None:
        self.told.append(request)


@dataclass
class MarkedWorld:
    """What a purge finds and does, in memory: the workflows it looks at, the objects marked
    as theirs, and every call it makes, in order."""

    looks: dict[str, list[InspectWorkflowResult]] = field(default_factory=dict)
    """Per workflow id, what each look finds (the last one repeats)."""
    management: list[MarkedObject] = field(default_factory=list)
    child: FindMarkedChildObjectsResult = field(default_factory=FindMarkedChildObjectsResult)
    holdings: LedgerHoldings = field(default_factory=LedgerHoldings)
    workspaces: list[str] = field(default_factory=list)
    hosts: dict[str, list[str]] = field(default_factory=dict)
    """Host ids claimed, by owner key."""
    calls: list[str] = field(default_factory=list)
    terminated: list[TerminateWorkflowRequest] = field(default_factory=list)
    unreachable: bool = False
    """The workspace's cluster and its ledger do not answer (their calls fail for good)."""

    @activity.defn(name=PurgeActivity.INSPECT_WORKFLOW)
    async def inspect_workflow(self, request: InspectWorkflowRequest) -> InspectWorkflowResult:
        self.calls.append("inspect")
        found = self.looks.get(request.workflow_id) or [InspectWorkflowResult(found=False)]
        return found.pop(0) if len(found) > 1 else found[0]

    @activity.defn(name=PurgeActivity.TERMINATE_WORKFLOW)
    async def terminate_workflow(
        self, request: TerminateWorkflowRequest
    ) -> TerminateWorkflowResult:
        self.calls.append("terminate")
        self.terminated.append(request)
        return TerminateWorkflowResult(terminated=True)

    @activity.defn(name=PurgeActivity.FIND_MARKED_OBJECTS)
    async def find_marked_objects(
        self, request: FindMarkedObjectsRequest
    ) -> FindMarkedObjectsResult:
        self.calls.append(f"find {request.owner.workflow_id}")
        return FindMarkedObjectsResult(objects=self.management)

    @activity.defn(name=PurgeActivity.FIND_MARKED_CHILD_OBJECTS)
    async def find_marked_child_objects(
        self, request: FindMarkedChildObjectsRequest
    ) -> FindMarkedChildObjectsResult:
        self.calls.append(f"find on {request.cluster_deployment}")
        if self.unreachable:
            raise ApplicationError("connection refused", type="Unreachable", non_retryable=True)
        return self.child

    @activity.defn(name=PurgeActivity.READ_LEDGER_HOLDINGS)
    async def read_ledger_holdings(self, request: ReadLedgerHoldingsRequest) -> LedgerHoldings:
        self.calls.append(f"holdings of {request.query.reply_to}")
        if self.unreachable:
            raise ApplicationError("no answer", type="Unavailable", non_retryable=True)
        return self.holdings

    @activity.defn(name=WorkspaceActivity.DELETE_ROUTES)
    async def delete_routes(self, request: DeleteRoutesRequest) -> DeleteRoutesResult:
        self.calls.append("delete " + ", ".join(r.name for r in request.routes))
        return DeleteRoutesResult(deleted=[r.name for r in request.routes])

    @activity.defn(name=WorkspaceActivity.DELETE_SERVICE_SET)
    async def delete_service_set(self, request: DeleteServiceSetRequest) -> DeleteServiceSetResult:
        assert request.wait_until is not None  # its release is waited for
        self.calls.append(f"delete ServiceSet {request.name}")
        return DeleteServiceSetResult(existed=True)

    @activity.defn(name=WorkspaceActivity.DELETE_VALUES_SECRET)
    async def delete_values_secret(
        self, request: DeleteValuesSecretRequest
    ) -> DeleteValuesSecretResult:
        self.calls.append(f"delete Secret {request.name}")
        return DeleteValuesSecretResult(existed=True)

    @activity.defn(name=WorkspaceActivity.DELETE_NAMESPACE)
    async def delete_namespace(self, request: DeleteNamespaceRequest) -> DeleteNamespaceResult:
        self.calls.append(f"delete namespace {request.name}")
        return DeleteNamespaceResult(existed=True)

    @activity.defn(name=WorkspaceActivity.LIST_WORKFLOWS)
    async def list_workflows(self, request: ListWorkflowsRequest) -> ListWorkflowsResult:
        self.calls.append("list workspaces")
        return ListWorkflowsResult(workflow_ids=self.workspaces)

    @activity.defn(name=ActivityName.DELETE_CLUSTER_DEPLOYMENT)
    async def delete_cluster_deployment(
        self, request: DeleteClusterDeploymentRequest
    ) -> DeleteClusterDeploymentResult:
        self.calls.append(f"delete ClusterDeployment {request.name} of {request.owner}")
        return DeleteClusterDeploymentResult(existed=True)

    @activity.defn(name=ActivityName.AWAIT_CLUSTER_DEPLOYMENT)
    async def await_cluster_deployment(
        self, request: AwaitClusterDeploymentRequest
    ) -> AwaitClusterDeploymentResult:
        self.calls.append(f"await {request.name} {request.want.value}")
        return AwaitClusterDeploymentResult(
            outcome=DeploymentOutcome.GONE, status=GetClusterDeploymentStatusResult(exists=False)
        )

    @activity.defn(name=ActivityName.LIST_CLAIMED_HOSTS)
    async def list_claimed_hosts(self, request: ListClaimedHostsRequest) -> ListClaimedHostsResult:
        held = self.hosts.get(request.owner, [])
        return ListClaimedHostsResult(hosts=[Host(id=h, address="10.0.0.1") for h in held])

    @activity.defn(name=ActivityName.RELEASE_HOSTS)
    async def release_hosts(self, request: ReleaseHostsRequest) -> ReleaseHostsResult:
        self.calls.append(f"release {', '.join(request.host_ids)} of {request.owner}")
        self.hosts[request.owner] = [
            h for h in self.hosts.get(request.owner, []) if h not in request.host_ids
        ]
        return ReleaseHostsResult(released=request.host_ids)

    def activities(self) -> list[Callable[..., Any]]:
        return [
            self.inspect_workflow,
            self.terminate_workflow,
            self.find_marked_objects,
            self.find_marked_child_objects,
            self.read_ledger_holdings,
            self.delete_routes,
            self.delete_service_set,
            self.delete_values_secret,
            self.delete_namespace,
            self.list_workflows,
            self.delete_cluster_deployment,
            self.await_cluster_deployment,
            self.list_claimed_hosts,
            self.release_hosts,
        ]


@asynccontextmanager
async def purge_worker(
    env: WorkflowEnvironment, task_queue: str, world: MarkedWorld
) -> AsyncIterator[Worker]:
    async with Worker(
        env.client,
        task_queue=task_queue,
        workflows=[PurgeWorkflow, RecordingLedger, AnsweringWorkspace],
        activities=world.activities(),
    ) as running:
        yield running


def stuck(workflow_id: str, failed: int = 3) -> Unresponsive:
    return Unresponsive(
        workflow_id=workflow_id,
        reason=f"its workflow task failed {failed} times in a row: Failed decoding arguments",
        stuck=failed >= 2,
        failed_tasks=failed,
    )


def running(workflow_id: str, trouble: Unresponsive | None, **extra: Any) -> InspectWorkflowResult:
    return InspectWorkflowResult(
        found=True,
        running=True,
        status="running",
        run_id="run-2",
        first_run_id="run-1",
        organization=ORGANIZATION,
        trouble=trouble,
        **extra,
    )


async def purge(
    env: WorkflowEnvironment, task_queue: str, target: PurgeTarget
) -> WorkflowHandle[Any, PurgeReport]:
    return await env.client.start_workflow(
        PurgeWorkflow.run,
        PurgeRequest(target=target, requested_by="a test"),
        id=PURGE.workflow_id(target.workflow_id),
        task_queue=task_queue,
    )


async def ledger_messages(env: WorkflowEnvironment, ledger_id: str) -> list[CapacityMessage]:
    handle = env.client.get_workflow_handle(ledger_id)
    found: list[CapacityMessage] = await handle.query("messages", result_type=list[CapacityMessage])
    return found


async def until_called(world: MarkedWorld, call: str) -> None:
    async def called() -> bool:
        return call in world.calls

    await eventually(called, what=f"{call} called")


# --- the purge ---------------------------------------------------------------------------------


async def test_a_stuck_workspace_is_terminated_and_what_its_marks_find_is_removed_in_order(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    name = unique("deep")
    target = PurgeTarget(entity=Entity.WORKSPACE, organization=ORGANIZATION, name=name)
    deployment = cluster_deployment_name("c1", ORGANIZATION)
    ledger_id = CAPACITY.workflow_id(deployment)
    world = MarkedWorld(
        looks={
            target.workflow_id: [
                running(
                    target.workflow_id,
                    stuck(target.workflow_id),
                    cluster_mark=deployment,
                    activities_running=1,
                )
            ]
        },
        management=[
            MarkedObject(kind="Secret", name="values-1", namespace="kcm-system"),
            MarkedObject(
                kind="ServiceSet",
                name="wsd-1",
                namespace="kcm-system",
                cluster_deployment=deployment,
            ),
        ],
        child=FindMarkedChildObjectsResult(
            namespaces=[f"ws-{name}"],
            routes=[MarkedObject(kind="HTTPRoute", name="route-1", namespace=f"ws-{name}")],
        ),
        holdings=LedgerHoldings(
            requests=[
                CapacityAnswer(
                    request_id=f"{name}/run-1#1", workspace=name, decision=Decision.ADMITTED
                )
            ],
            ports={"ssh": 30022},
        ),
    )
    async with purge_worker(env, task_queue, world):
        ledger = await env.client.start_workflow(
            RecordingLedger.run, deployment, id=ledger_id, task_queue=task_queue
        )
        handle = await purge(env, task_queue, target)
        # It ran activities when it was ended: the sweep waits for them to stop first.
        await until_called(world, "terminate")
        assert world.terminated[0].run_id == "run-2"
        assert "purged (a test)" in world.terminated[0].reason
        assert f"find {target.workflow_id}" not in world.calls
        await env.sleep(SETTLE + timedelta(seconds=1))
        report = await handle.result()
        messages = await ledger_messages(env, ledger_id)
        await ledger.terminate("test finished")

    assert world.calls == [
        "inspect",
        "terminate",
        f"find {target.workflow_id}",
        f"find on {deployment}",
        "delete route-1",
        "delete ServiceSet wsd-1",
        f"holdings of {target.workflow_id}",
        "delete Secret values-1",
        f"delete namespace ws-{name}",
    ]
    assert [(m.kind, m.target or m.holder) for m in messages] == [
        (CapacityMessageKind.RELEASE, f"{name}/run-1#1"),
        (CapacityMessageKind.RELEASE_PORTS, name),
    ]
    assert (report.outcome, report.terminated) == (PurgeOutcome.PURGED, True)
    assert report.reason.startswith("its workflow task failed 3 times in a row")
    assert [o.describe() for o in report.removed] == [
        f"HTTPRoute ws-{name}/route-1 on {deployment}",
        "ServiceSet kcm-system/wsd-1",
        "Secret kcm-system/values-1",
        f"Namespace ws-{name} on {deployment}",
    ]
    assert (report.gpu_requests_released, report.ports_released) == ([f"{name}/run-1#1"], [30022])
    assert report.describe().startswith(
        f"workspace '{name}' of organization '{ORGANIZATION}' purged: its workflow "
        f"{target.workflow_id} was terminated (its workflow task failed 3 times"
    )


async def test_a_cluster_and_ledger_that_do_not_answer_are_reported_and_the_rest_removed(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    target = PurgeTarget(entity=Entity.WORKSPACE, organization=ORGANIZATION, name=unique("nb"))
    deployment = cluster_deployment_name("gone", ORGANIZATION)
    world = MarkedWorld(
        looks={
            target.workflow_id: [
                running(target.workflow_id, stuck(target.workflow_id), cluster_mark=deployment)
            ]
        },
        management=[MarkedObject(kind="Secret", name="values-2", namespace="kcm-system")],
        unreachable=True,
    )
    async with purge_worker(env, task_queue, world):
        report = await (await purge(env, task_queue, target)).result()
    assert (report.outcome, [o.name for o in report.removed]) == (
        PurgeOutcome.PURGED,
        ["values-2"],
    )
    assert report.left == [
        f"cluster {deployment}: not reached (find marked child objects: connection refused)",
        f"GPU ledger {CAPACITY.workflow_id(deployment)}: did not answer (read ledger holdings: "
        "no answer); "
        "what it holds for the workspace was not given back",
    ]


async def test_a_workflow_whose_task_failed_once_is_looked_at_again_before_anything_ends(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    target = PurgeTarget(entity=Entity.WORKSPACE, organization=ORGANIZATION, name=unique("nb"))
    world = MarkedWorld(
        looks={
            target.workflow_id: [
                running(target.workflow_id, stuck(target.workflow_id, failed=1)),
                running(target.workflow_id, None),  # its retry succeeded: it answers
            ]
        }
    )
    async with purge_worker(env, task_queue, world):
        answering = await env.client.start_workflow(
            AnsweringWorkspace.run, target.name, id=target.workflow_id, task_queue=task_queue
        )
        handle = await purge(env, task_queue, target)
        await until_called(world, "inspect")
        await asyncio.sleep(0.2)
        assert world.calls == ["inspect"]  # waiting out RECHECK, nothing ended
        await env.sleep(RECHECK + timedelta(seconds=1))
        report = await handle.result()
        await answering.result()  # it was told to delete itself, and did
    assert world.calls == ["inspect", "inspect"]
    assert world.terminated == []
    assert (report.outcome, report.terminated) == (PurgeOutcome.DELETED, False)
    assert report.reason.startswith("its workflow answers")


async def test_a_cluster_that_still_has_workspaces_is_refused_before_anything_ends(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    target = PurgeTarget(entity=Entity.CLUSTER, organization=ORGANIZATION, name=unique("c"))
    world = MarkedWorld(
        looks={target.workflow_id: [running(target.workflow_id, stuck(target.workflow_id))]},
        workspaces=[f"workspace/{ORGANIZATION}/nb-1", "workspace/acme/nb-2"],
    )
    async with purge_worker(env, task_queue, world):
        handle = await purge(env, task_queue, target)
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == ErrorType.OPERATION_REJECTED
    # Only its own organization's workspaces are named (another's of the name is not its).
    assert cause.message.startswith(
        f"cluster '{target.name}' of organization '{ORGANIZATION}' still has workspaces: nb-1; "
        "nothing was ended"
    )
    assert "`colonyctl workspace purge nb-1 --organization evil`" in cause.message
    assert "nb-2" not in cause.message
    assert world.terminated == []


async def test_a_stuck_cluster_loses_its_own_deployment_its_hosts_and_its_ledger(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    target = PurgeTarget(entity=Entity.CLUSTER, organization=ORGANIZATION, name=unique("c"))
    deployment = cluster_deployment_name(target.name, ORGANIZATION)
    mine = owner_key(target.workflow_id, "run-1")
    earlier = owner_key(target.workflow_id, "run-0")
    world = MarkedWorld(
        looks={target.workflow_id: [running(target.workflow_id, stuck(target.workflow_id))]},
        management=[
            MarkedObject(
                kind="ClusterDeployment", name=deployment, namespace="kcm-system", owner_key=mine
            ),
            MarkedObject(
                kind="ClusterDeployment", name="older", namespace="kcm-system", owner_key=earlier
            ),
        ],
        hosts={mine: ["h100-001", "h100-002"], earlier: ["h100-009"]},
    )
    ledger_id = CAPACITY.workflow_id(deployment)
    async with purge_worker(env, task_queue, world):
        ledger = await env.client.start_workflow(
            RecordingLedger.run, deployment, id=ledger_id, task_queue=task_queue
        )
        report = await (await purge(env, task_queue, target)).result()
        messages = await ledger_messages(env, ledger_id)
        await ledger.result()  # closed
    assert world.calls == [
        "inspect",
        "list workspaces",
        "terminate",
        f"find {target.workflow_id}",
        f"delete ClusterDeployment {deployment} of {mine}",
        f"await {deployment} gone",
        f"release h100-001, h100-002 of {mine}",
    ]
    assert world.hosts[earlier] == ["h100-009"]
    assert [m.kind for m in messages] == [CapacityMessageKind.CLOSE]
    assert (report.outcome, report.hosts_released, report.ledger_closed) == (
        PurgeOutcome.PURGED,
        ["h100-001", "h100-002"],
        ledger_id,
    )
    assert [o.name for o in report.removed] == [deployment]


async def test_a_purge_of_an_ended_workflow_sweeps_what_it_left(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    target = PurgeTarget(entity=Entity.WORKSPACE, organization=ORGANIZATION, name=unique("nb"))
    world = MarkedWorld(
        looks={
            target.workflow_id: [
                InspectWorkflowResult(found=True, status="terminated", organization=ORGANIZATION)
            ]
        },
        management=[MarkedObject(kind="Secret", name="values-9", namespace="kcm-system")],
    )
    async with purge_worker(env, task_queue, world):
        report = await (await purge(env, task_queue, target)).result()
    assert world.terminated == []
    assert (report.outcome, [o.name for o in report.removed]) == (PurgeOutcome.SWEPT, ["values-9"])
    assert "had ended; what it left was removed" in report.describe()


# --- a cluster's delete -----------------------------------------------------------------------


@dataclass
class WedgedNeighbours(FakeColony):
    """A cluster whose one workspace cannot answer, until it is gone."""

    workspace_id: str = f"workspace/{ORGANIZATION}/deep200"
    gone: bool = False
    waits: list[AwaitWorkflowsClosedRequest] = field(default_factory=list)

    @activity.defn(name=WorkspaceActivity.LIST_WORKFLOWS)
    async def list_workflows(self, request: ListWorkflowsRequest) -> ListWorkflowsResult:
        return ListWorkflowsResult(workflow_ids=[] if self.gone else [self.workspace_id])

    @activity.defn(name=WorkspaceActivity.AWAIT_WORKFLOWS_CLOSED)
    async def await_workflows_closed(
        self, request: AwaitWorkflowsClosedRequest
    ) -> AwaitWorkflowsClosedResult:
        self.waits.append(request)
        trouble = stuck(self.workspace_id)
        return AwaitWorkflowsClosedResult(open=[self.workspace_id], unresponsive=[trouble])


async def test_a_cluster_delete_stops_at_a_workspace_that_cannot_answer_naming_what_clears_it(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake = WedgedNeighbours()
    async with cluster_worker(env, task_queue, fake):
        run = await start(env, task_queue, fake, pool("gpu", 1), organization=ORGANIZATION)
        await run.ready()
        await run.handle.execute_update(ClusterWorkflow.delete_cluster, DeleteClusterRequest())
        failed = await run.until(lambda s: s.phase is ClusterPhase.FAILED, what="delete failed")
        assert fake.waits[0].stop_when_unresponsive
        assert failed.reason == (
            "delete did not finish: workspaces of cluster "
            f"'{run.name}' cannot answer its delete: 'deep200' (workflow {fake.workspace_id}: its "
            "workflow task failed 3 times in a row: Failed decoding arguments; clear it with "
            "`colonyctl workspace delete deep200`, or an operator with `colonyctl workspace purge "
            f"deep200 --organization {ORGANIZATION}`); then repeat the cluster's delete; repeat "
            "the delete to finish it"
        )
        assert fake.held()  # nothing was torn down: its hosts are still its own
        fake.gone = True
        await run.handle.execute_update(ClusterWorkflow.delete_cluster, DeleteClusterRequest())
        assert (await run.handle.result()).phase is ClusterPhase.DELETED
        assert fake.held() == []
