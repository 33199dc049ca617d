"""WorkspaceWorkflow, CapacityLedgerWorkflow and PrerequisiteWorkflow on the time-skipping server,
with the stand-in world of `tests/workspace_world.py` and real messaging between the workflows.

Each phase path of issue 7: a class that is missing, GPUs the cluster does not have, workspaces
waiting for GPUs and admitted in order, a prerequisite shared by two concurrent workspaces, a
prerequisite that fails, a deploy timeout, suspend and resume, a delete while waiting, a scale-down
refused while a workspace holds the GPUs, a day of waiting that stays small, secret values that
never reach a history in plaintext, and routes through a tenant gateway with a port pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from temporalio import workflow
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig
from temporalio.testing import WorkflowEnvironment

from catalog.workspaces import load_workspace_catalog
from clients.workspaces import WorkspaceSummary, fill_positions, with_current_position
from infra.sealing import Unsealer, workspace_scope
from models.capacity import GpuHolder
from models.cluster import cluster_deployment_name, cluster_workflow_id
from models.identity import prerequisite_service_set_name, workspace_release_name
from models.ownership import Owner
from models.signals import GatewayChanged, NodeEventType, RefreshRequest
from models.workspace import (
    ConditionReason,
    GatewayInfo,
    WorkspacePhase,
    WorkspaceSpec,
    WorkspaceStatus,
    WorkspaceWorkflowInput,
)
from models.workspace_api import GpuHoldersMessage
from models.workspace_class import WorkspaceClassSpec
from models.workspace_operations import (
    DeleteWorkspaceRequest,
    ResumeWorkspaceRequest,
    SuspendWorkspaceRequest,
)
from starter import workspace_output
from tests.helpers import eventually, history_text, unique
from tests.workspace_world import STARTED, FakeWorkspaceWorld, h100_node, workspace_worker
from workflows.capacity import CAPACITY
from workflows.capacity.workflow import CapacityLedgerWorkflow
from workflows.cluster import CLUSTER
from workflows.workspace.access import ROUTES_FALLBACK, ROUTES_RETRY
from workflows.workspace.workflow import WorkspaceWorkflow

pytestmark = pytest.mark.slow

CATALOG = load_workspace_catalog()
UNSEALER = Unsealer(X25519PrivateKey.generate())
SSH_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl dev@colony"
)


@pytest.fixture
def env(time_env: WorkflowEnvironment) -> WorkflowEnvironment:
    return time_env


def catalog_class(name: str) -> WorkspaceClassSpec:
    found = CATALOG.workspace_class(name)
    assert found is not None
    return found


def world(gpus: int = 2, organization: str = "", **extra: Any) -> tuple[FakeWorkspaceWorld, str]:
    """A world with one ready cluster of `organization`, of a unique name (ledgers and
    prerequisites are one per cluster: tests must not share them) with one node of `gpus` H100s.
    The world knows it by its ClusterDeployment, as the management cluster does."""
    cluster = unique("gpu")
    deployment = cluster_deployment_name(cluster, organization)
    fake = FakeWorkspaceWorld(
        classes={c.name: c for c in CATALOG.classes},
        templates={t.name for t in CATALOG.service_templates},
        **{key: _keyed(value, deployment) for key, value in extra.items()},
    )
    fake.ready_clusters.add(deployment)
    fake.deployment_owners[deployment] = Owner(
        workflow_id=cluster_workflow_id(cluster, organization), organization=organization
    )
    fake.nodes[deployment] = [h100_node(f"{deployment}-1", gpus)]
    return fake, cluster


def _keyed(value: Any, cluster: str) -> Any:
    """Per-cluster settings given for the placeholder cluster "gpu" get the test's cluster name."""
    if isinstance(value, dict):
        return {
            (cluster if key == "gpu" else (cluster, key[1]) if isinstance(key, tuple) else key): v
            for key, v in value.items()
        }
    return value


def notebook(
    name: str,
    cluster: str,
    gpus: int = 0,
    gpu_type: str = "h100",
    organization: str = "",
    **extra: Any,
) -> WorkspaceSpec:
    """A Jupyter workspace (its secret prompt answered sealed, as `colonyctl` sends it)."""
    resources = {"perReplica": {"gpuCount": gpus, "gpuType": gpu_type}} if gpus else None
    scope = workspace_scope(name, "notebookPassword", organization)
    return WorkspaceSpec.model_validate(
        {
            "name": name,
            "class": "colony-jupyter-1-0-0",
            "cluster": cluster,
            "organization": organization,
            "resources": resources,
            "sealedAnswers": {
                "notebookPassword": UNSEALER.sealer.seal("hunter2-notebook", scope).model_dump(
                    mode="json"
                )
            },
            **extra,
        }
    )


async def deploy(
    env: WorkflowEnvironment, task_queue: str, spec: WorkspaceSpec
) -> WorkflowHandle[Any, Any]:
    STARTED.append(spec.workflow_id)
    return await env.client.start_workflow(
        WorkspaceWorkflow.run,
        WorkspaceWorkflowInput(spec=spec),
        id=spec.workflow_id,
        task_queue=task_queue,
    )


async def status_of(handle: WorkflowHandle[Any, Any]) -> WorkspaceStatus:
    status: WorkspaceStatus = await handle.query(WorkspaceWorkflow.status)
    return status


async def line_position(env: WorkflowEnvironment, handle: WorkflowHandle[Any, Any]) -> int:
    """A waiting workspace's position as `workspace get` shows it (asked of the ledger)."""
    status = await with_current_position(env.client, await status_of(handle))
    assert status.admission is not None
    return status.admission.position


async def history_length(handle: WorkflowHandle[Any, Any]) -> int:
    return len((await handle.fetch_history()).events)


async def until(
    handle: WorkflowHandle[Any, Any], check: Callable[[WorkspaceStatus], bool], what: str
) -> WorkspaceStatus:
    return await eventually(
        lambda: status_of(handle), until=check, timeout=30, interval=0.05, what=what
    )


def phase_is(*phases: WorkspacePhase) -> Callable[[WorkspaceStatus], bool]:
    return lambda s: s.phase in phases


def routed(status: WorkspaceStatus) -> bool:
    """Running and its deploy finished: the access step (after Running) has reported."""
    return status.phase is WorkspacePhase.RUNNING and status.current_operation is None


def reason_of(status: WorkspaceStatus) -> str:
    ready = next(c for c in status.conditions if c.type == "Ready")
    return ready.reason


async def delete(handle: WorkflowHandle[Any, Any]) -> WorkspaceStatus:
    await handle.execute_update(WorkspaceWorkflow.delete, DeleteWorkspaceRequest())
    final: WorkspaceStatus = await handle.result()
    return final


# --- Phase paths -------------------------------------------------------------------------------------


async def test_a_cpu_notebook_runs_and_is_deleted_without_leftovers(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake, cluster = world()
    async with workspace_worker(env, task_queue, fake):
        name = unique("nb")
        handle = await deploy(env, task_queue, notebook(name, cluster))
        running = await until(handle, routed, "running")
        assert {c.type: c.status.value for c in running.conditions} == {
            "ClassResolved": "True",
            "ClusterDeploymentResolved": "True",
            "PrerequisitesMet": "True",
            "Feasible": "True",
            "HelmReleaseReady": "True",
            "RoutesReady": "True",
            "Ready": "True",
        }
        # No gateway: the endpoint is reached with kubectl port-forward.
        (http,) = running.access
        assert http.ready
        release = workspace_release_name("", cluster, name)
        assert http.command.startswith(f"kubectl port-forward -n ws-{name} svc/{release}-http")
        service_set = fake.service_sets[running.service_set]
        assert service_set.services[0]["namespace"] == f"ws-{name}"
        assert service_set.values_from  # the secret answer went to a Secret, referenced
        assert f"ws-{name}" in fake.namespaces[f"{cluster}-kubeconfig"]
        final = await delete(handle)
        assert final.phase is WorkspacePhase.DELETED
        assert fake.service_sets == {}
        assert f"ws-{name}" not in fake.namespaces[f"{cluster}-kubeconfig"]
        assert fake.secrets == {}


async def test_a_missing_class_fails_with_class_not_found(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake, cluster = world()
    async with workspace_worker(env, task_queue, fake):
        spec = notebook(unique("nb"), cluster).model_copy(update={"class_name": "jupyter-9-9-9"})
        handle = await deploy(env, task_queue, spec)
        failed = await until(handle, phase_is(WorkspacePhase.FAILED), "failed")
        assert reason_of(failed) == ConditionReason.CLASS_NOT_FOUND
        assert "WorkspaceClass 'jupyter-9-9-9' not found" in failed.message
        assert fake.applied == []
        await delete(handle)


@pytest.mark.parametrize(
    "marked_for",
    [
        pytest.param(Owner(workflow_id="cluster/acme/other", organization="acme"), id="other"),
        pytest.param(Owner(workflow_id="", organization=""), id="not-colony's"),
    ],
)
async def test_a_workspace_is_admitted_only_onto_its_organizations_cluster(
    env: WorkflowEnvironment, task_queue: str, marked_for: Owner
) -> None:
    """Whatever the client did: a ClusterDeployment of the name the workspace derives, but marked
    as another cluster's (another organization's, or none of Colony's), is not its cluster. The
    workspace fails as for a cluster that does not exist, naming nothing of the other, and
    installs nothing; and an organization's workspace never lands on a default-mode cluster of
    the name it gives."""
    fake, cluster = world(organization="acme")
    fake.deployment_owners[cluster_deployment_name(cluster, "acme")] = marked_for
    default_mode, _ = world()
    async with workspace_worker(env, task_queue, fake):
        handle = await deploy(env, task_queue, notebook(unique("nb"), cluster, organization="acme"))
        failed = await until(handle, phase_is(WorkspacePhase.FAILED), "failed")
        assert reason_of(failed) == ConditionReason.CLUSTER_DEPLOYMENT_NOT_FOUND
        assert failed.message == f"cluster '{cluster}' does not exist"
        assert (fake.applied, fake.namespaces) == ([], {})
        await delete(handle)
    fake.ready_clusters |= default_mode.ready_clusters
    (plain,) = default_mode.ready_clusters
    async with workspace_worker(env, task_queue, fake):
        onto_plain = notebook(unique("nb"), plain, organization="acme")
        handle = await deploy(env, task_queue, onto_plain)
        failed = await until(handle, phase_is(WorkspacePhase.FAILED), "failed")
        assert reason_of(failed) == ConditionReason.CLUSTER_DEPLOYMENT_NOT_FOUND
        assert fake.applied == []
        await delete(handle)


async def test_gpus_the_cluster_does_not_have_fail_at_once(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake, cluster = world()
    async with workspace_worker(env, task_queue, fake):
        handle = await deploy(
            env, task_queue, notebook(unique("nb"), cluster, gpus=1, gpu_type="b300")
        )
        failed = await until(handle, phase_is(WorkspacePhase.FAILED), "failed")
        assert reason_of(failed) == ConditionReason.GPU_OFFERING_UNAVAILABLE
        assert fake.applied == []
        await delete(handle)


async def test_workspaces_wait_for_gpus_in_order_and_proceed_when_one_is_deleted(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake, cluster = world(gpus=2)
    async with workspace_worker(env, task_queue, fake):
        first = await deploy(env, task_queue, notebook(unique("a"), cluster, gpus=2))
        await until(first, phase_is(WorkspacePhase.RUNNING), "first running")
        second = await deploy(env, task_queue, notebook(unique("b"), cluster, gpus=1))
        waiting = await until(second, phase_is(WorkspacePhase.WAITING), "second waiting")
        assert waiting.admission is not None
        assert waiting.admission.position == 1
        third = await deploy(env, task_queue, notebook(unique("c"), cluster, gpus=1))
        behind = await until(third, phase_is(WorkspacePhase.WAITING), "third waiting")
        assert behind.admission is not None
        assert behind.admission.position == 2
        feasible = next(c for c in behind.conditions if c.type == "Feasible")
        assert feasible.reason == ConditionReason.WAITING_FOR_GPU_CAPACITY

        await delete(first)
        # Both fit now, and they were admitted in the order they asked.
        b = await until(second, phase_is(WorkspacePhase.RUNNING), "second running")
        c = await until(third, phase_is(WorkspacePhase.RUNNING), "third running")
        assert b.admission is not None
        assert c.admission is not None
        gpus = [*b.admission.placements, *c.admission.placements]
        assert sum(p.gpus for p in gpus) == 2  # never the same GPUs twice
        ledger = env.client.get_workflow_handle(f"capacity/{cluster}")
        held = (await ledger.query(CapacityLedgerWorkflow.status)).holders
        assert sorted(h.workspace for h in held) == sorted([b.name, c.name])
        await delete(second)
        await delete(third)


async def test_the_next_in_line_is_admitted_once_the_release_is_gone_not_the_namespace(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    """A delete gives the GPUs back as soon as its ServiceSet is gone: the next waiter runs while
    the deleted workspace's namespace is still being deleted."""
    fake, cluster = world(gpus=1)
    fake.namespace_deletes_held = asyncio.Event()
    async with workspace_worker(env, task_queue, fake):
        holder = await deploy(env, task_queue, notebook(unique("a"), cluster, gpus=1))
        await until(holder, phase_is(WorkspacePhase.RUNNING), "running")
        waiter = await deploy(env, task_queue, notebook(unique("b"), cluster, gpus=1))
        await until(waiter, phase_is(WorkspacePhase.WAITING), "waiting")
        await holder.execute_update(WorkspaceWorkflow.delete, DeleteWorkspaceRequest())
        await until(waiter, phase_is(WorkspacePhase.RUNNING), "admitted")
        assert (await status_of(holder)).phase is WorkspacePhase.DELETING
        assert fake.service_sets.keys() == {(await status_of(waiter)).service_set}
        fake.namespace_deletes_held.set()
        assert (await holder.result()).phase is WorkspacePhase.DELETED
        await delete(waiter)


async def test_the_ledger_and_admissions_are_measured(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    """`colony_workspaces_waiting{cluster}` follows the line; `colony_admission_wait_seconds`
    records how long each workspace waited (workflow metrics: recorded once, never on replay)."""
    buffer = MetricBuffer(10_000)
    runtime = Runtime(telemetry=TelemetryConfig(metrics=buffer))
    metered = await Client.connect(
        env.client.service_client.config.target_host,
        namespace=env.client.namespace,
        data_converter=env.client.data_converter,
        runtime=runtime,
    )
    fake, cluster = world(gpus=2)
    async with workspace_worker(env, task_queue, fake, client=metered):
        first = await deploy(env, task_queue, notebook(unique("a"), cluster, gpus=2))
        await until(first, phase_is(WorkspacePhase.RUNNING), "first running")
        second = await deploy(env, task_queue, notebook(unique("b"), cluster, gpus=1))
        await until(second, phase_is(WorkspacePhase.WAITING), "second waiting")
        await env.sleep(timedelta(minutes=30))
        await delete(first)
        await until(second, phase_is(WorkspacePhase.RUNNING), "second running")
        await delete(second)

    updates = [u for u in buffer.retrieve_updates() if u.metric.name.startswith("colony_")]
    waiting = [
        u.value
        for u in updates
        if u.metric.name == "colony_workspaces_waiting" and u.attributes["cluster"] == cluster
    ]
    assert 1 in waiting
    assert waiting[-1] == 0
    waits = sorted(
        float(u.value)
        for u in updates
        if u.metric.name == "colony_admission_wait_seconds" and u.attributes["cluster"] == cluster
    )
    assert len(waits) == 2  # one admission each, not one per replay
    assert waits[0] < 60
    assert waits[1] >= 30 * 60


async def test_a_waiting_workspace_proceeds_when_a_service_says_the_gpus_changed(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake, cluster = world(gpus=2)
    async with workspace_worker(env, task_queue, fake):
        first = await deploy(env, task_queue, notebook(unique("a"), cluster, gpus=2))
        await until(first, phase_is(WorkspacePhase.RUNNING), "first running")
        second = await deploy(env, task_queue, notebook(unique("b"), cluster, gpus=2))
        await until(second, phase_is(WorkspacePhase.WAITING), "second waiting")

        # A node appears without any pool change Colony made; a service tells the ledger.
        fake.nodes[cluster].append(h100_node(f"{cluster}-2", 2))
        ledger = env.client.get_workflow_handle(f"capacity/{cluster}")
        changed = RefreshRequest(request_id="device-plugin-1", reason="GPUs added")
        await ledger.signal(CAPACITY.capacity_changed.name, changed)
        await ledger.signal(CAPACITY.capacity_changed.name, changed)  # a repeat changes nothing

        running = await until(second, phase_is(WorkspacePhase.RUNNING), "second running")
        assert running.admission is not None
        assert [p.node for p in running.admission.placements] == [f"{cluster}-2"]
        await delete(first)
        await delete(second)


@workflow.defn(name="OrganizationClusterStandIn", sandboxed=False)
class OrganizationClusterStandIn:
    """Stands in for an organization's cluster workflow: keeps the GPU holders it is told."""

    def __init__(self) -> None:
        self.holders: list[GpuHolder] = []

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal(name=CLUSTER.gpu_holders.name)
    def gpu_holders(self, message: GpuHoldersMessage) -> None:
        self.holders = message.holders

    @workflow.query
    def told(self) -> list[GpuHolder]:
        return self.holders


async def test_the_ledger_tells_an_organizations_cluster_who_holds_its_gpus(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    """The ledger finds the cluster's workflow from its ClusterDeployment's marks
    (`cluster/<org>/<name>` is not derivable from a derived name), so the scale-down guard works
    for organizations too."""
    fake, cluster = world(gpus=2, organization="acme")
    owner = cluster_workflow_id(cluster, "acme")
    async with workspace_worker(
        env, task_queue, fake, extra_workflows=[OrganizationClusterStandIn]
    ):
        listener = await env.client.start_workflow(
            OrganizationClusterStandIn.run, id=owner, task_queue=task_queue
        )
        STARTED.append(owner)
        name = unique("a")
        first = await deploy(env, task_queue, notebook(name, cluster, gpus=1, organization="acme"))
        await until(first, phase_is(WorkspacePhase.RUNNING), "running")
        told = await eventually(
            lambda: listener.query(OrganizationClusterStandIn.told),
            until=bool,
            timeout=30,
            interval=0.05,
            what="the holders told to the organization's cluster",
        )
        assert [h.workspace for h in told] == [name]
        await delete(first)


async def test_delete_while_waiting_releases_the_place_in_line(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake, cluster = world(gpus=1)
    async with workspace_worker(env, task_queue, fake):
        holder = await deploy(env, task_queue, notebook(unique("a"), cluster, gpus=1))
        await until(holder, phase_is(WorkspacePhase.RUNNING), "running")
        waiter = await deploy(env, task_queue, notebook(unique("b"), cluster, gpus=1))
        await until(waiter, phase_is(WorkspacePhase.WAITING), "waiting")
        last = await deploy(env, task_queue, notebook(unique("c"), cluster, gpus=1))
        await until(last, lambda s: s.admission is not None and s.admission.position == 2, "2nd")
        assert await line_position(env, last) == 2
        events = await history_length(last)
        await delete(waiter)
        await eventually(lambda: line_position(env, last), until=lambda p: p == 1, what="moved up")
        assert (await status_of(last)).phase is WorkspacePhase.WAITING
        assert await history_length(last) == events, "the line moved without telling it"
        listed = [
            WorkspaceSummary(
                name=last.id.removeprefix("workspace/"),
                cluster=cluster,
                class_name="",
                phase=WorkspacePhase.WAITING.value,
                workflow_id=last.id,
                started="",
                deployment=cluster,
            )
        ]
        await fill_positions(env.client, listed)
        assert listed[0].position == 1, "workspace list asks the ledger too"
        await delete(holder)
        await until(last, phase_is(WorkspacePhase.RUNNING), "admitted")
        await delete(last)


async def test_suspend_frees_the_gpus_and_resume_waits_for_them_again(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake, cluster = world(gpus=1)
    async with workspace_worker(env, task_queue, fake):
        a = await deploy(env, task_queue, notebook(unique("a"), cluster, gpus=1))
        await until(a, phase_is(WorkspacePhase.RUNNING), "running")
        b = await deploy(env, task_queue, notebook(unique("b"), cluster, gpus=1))
        await until(b, phase_is(WorkspacePhase.WAITING), "waiting")

        await a.execute_update(WorkspaceWorkflow.suspend, SuspendWorkspaceRequest())
        suspended = await until(a, phase_is(WorkspacePhase.SUSPENDED), "suspended")
        assert suspended.suspended
        assert suspended.service_set not in fake.service_sets  # the release is uninstalled ...
        assert (
            f"ws-{suspended.name}" in fake.namespaces[f"{cluster}-kubeconfig"]
        )  # ... the namespace kept
        # What it says agrees with itself: nothing reserved, installed or routed any more.
        assert suspended.admission is None
        shown = {c.type: (c.status.value, c.reason) for c in suspended.conditions}
        for kind in ("Ready", "Feasible", "HelmReleaseReady", "RoutesReady"):
            assert shown[kind] == ("False", "Suspended"), shown
        assert workspace_output.admission_text(suspended) == "GPUs released (suspended)"
        await until(b, phase_is(WorkspacePhase.RUNNING), "the next one got the GPU")

        with pytest.raises(WorkflowUpdateFailedError) as again:
            await a.execute_update(WorkspaceWorkflow.suspend, SuspendWorkspaceRequest())
        assert isinstance(again.value.cause, ApplicationError)
        assert "already suspended" in again.value.cause.message

        await a.execute_update(WorkspaceWorkflow.resume, ResumeWorkspaceRequest())
        await until(a, phase_is(WorkspacePhase.WAITING), "resumed, waiting for its GPU")
        await delete(b)
        running = await until(a, routed, "running again")
        shown = {c.type: (c.status.value, c.reason) for c in running.conditions}
        for kind in ("Ready", "Feasible", "HelmReleaseReady", "RoutesReady"):
            assert shown[kind][0] == "True", shown
        assert workspace_output.admission_text(running).startswith("admitted: GPUs reserved on ")
        await delete(a)


async def test_a_prerequisite_is_installed_once_for_two_concurrent_workspaces(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake, cluster = world(gpus=4)
    async with workspace_worker(env, task_queue, fake):
        handles = [await deploy(env, task_queue, llm(unique("llm"), cluster)) for _ in range(2)]
        for handle in handles:
            running = await until(handle, phase_is(WorkspacePhase.RUNNING), "running")
            (prerequisite,) = running.prerequisites
            assert prerequisite.name == "colony-inference-stack-1-0-0"
            assert prerequisite.phase.value == "Satisfied"
        installs = [name for name in fake.applied if name.startswith("wsprereq-")]
        installed = prerequisite_service_set_name("", cluster, "colony-inference-stack-1-0-0")
        assert installs == [installed]
        # It outlives the workspaces that needed it.
        for handle in handles:
            await delete(handle)
        assert installed in fake.service_sets
        labels = fake.service_sets[installed].labels
        assert labels["workspaces.exalsius.ai/role"] == "prerequisite"
        assert labels["colony.dev/prerequisite"] == "colony-inference-stack-1-0-0"


async def test_a_prerequisite_without_a_namespace_gets_one_of_its_own(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    vllm = catalog_class("colony-vllm-1-0-0")
    (stack,) = vllm.prerequisites
    own = vllm.model_copy(
        update={
            "name": "vllm-own-1-0-0",
            "prerequisites": [stack.model_copy(update={"namespace": None})],
        }
    )
    fake, cluster = world(gpus=4)
    fake.classes[own.name] = own
    async with workspace_worker(env, task_queue, fake):
        spec = llm(unique("llm"), cluster).model_copy(update={"class_name": own.name})
        handle = await deploy(env, task_queue, spec)
        running = await until(handle, phase_is(WorkspacePhase.RUNNING), "running")
        (prerequisite,) = running.prerequisites
        namespace = "colony-inference-stack-1-0-0-system"
        assert prerequisite.namespace == namespace
        installed = prerequisite_service_set_name("", cluster, stack.service_template.name)
        assert fake.service_sets[installed].services[0]["namespace"] == namespace
        await delete(handle)


def llm(name: str, cluster: str) -> WorkspaceSpec:
    return WorkspaceSpec.model_validate(
        {
            "name": name,
            "class": "colony-vllm-1-0-0",
            "cluster": cluster,
            "answers": {"vllm.model": "Qwen/Qwen3-1.7B"},
        }
    )


async def test_a_failed_prerequisite_fails_the_workspace_with_its_message(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake, cluster = world(failing_templates={"colony-inference-stack-1-0-0": "image pull backoff"})
    async with workspace_worker(env, task_queue, fake):
        handle = await deploy(env, task_queue, llm(unique("llm"), cluster))
        failed = await until(handle, phase_is(WorkspacePhase.FAILED), "failed")
        assert reason_of(failed) == ConditionReason.PREREQUISITE_FAILED
        assert "image pull backoff" in failed.message
        assert not any(name.startswith("wsd-") for name in fake.applied)
        await delete(handle)


async def test_a_prerequisite_deployed_by_other_means_is_recognised(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake, cluster = world(
        deployed_elsewhere={("gpu", "colony-inference-stack-1-0-0"): "platform-stack"}
    )
    async with workspace_worker(env, task_queue, fake):
        handle = await deploy(env, task_queue, llm(unique("llm"), cluster))
        running = await until(handle, phase_is(WorkspacePhase.RUNNING), "running")
        assert running.prerequisites[0].source is not None
        assert running.prerequisites[0].source.value == "colony"
        assert not any(name.startswith("wsprereq-") for name in fake.applied)
        await delete(handle)


async def test_a_deploy_timeout_fails_with_its_context_and_frees_the_gpus(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake, cluster = world(stuck_templates={"colony-jupyter-1-0-0"})
    async with workspace_worker(env, task_queue, fake):
        handle = await deploy(env, task_queue, notebook(unique("nb"), cluster, gpus=1))
        failed = await until(handle, phase_is(WorkspacePhase.FAILED), "failed")
        assert reason_of(failed) == ConditionReason.DEPLOY_TIMEOUT
        assert failed.failure_context is not None
        assert failed.failure_context.phase_when_failed is WorkspacePhase.DEPLOYING
        assert failed.failure_context.reason == "DeployTimeout"
        assert "was not deployed within 15m" in failed.failure_context.message
        assert failed.failure_context.recent_events[0].reason == "DeployTimeout"
        ledger = env.client.get_workflow_handle(f"capacity/{cluster}")
        await eventually(
            lambda: ledger.query(CapacityLedgerWorkflow.status),
            until=lambda s: not s.holders,
            what="GPUs freed",
        )
        await delete(handle)


async def test_a_day_of_waiting_stays_small(env: WorkflowEnvironment, task_queue: str) -> None:
    fake, cluster = world(gpus=1)
    async with workspace_worker(env, task_queue, fake):
        holder = await deploy(env, task_queue, notebook(unique("a"), cluster, gpus=1))
        await until(holder, phase_is(WorkspacePhase.RUNNING), "running")
        waiter = await deploy(env, task_queue, notebook(unique("b"), cluster, gpus=1))
        await until(waiter, phase_is(WorkspacePhase.WAITING), "waiting")

        async def settled() -> bool:
            # The time-skipping server stops its clock while any activity is in flight.
            for handle in (holder, waiter, env.client.get_workflow_handle(f"capacity/{cluster}")):
                if (await handle.describe()).raw_description.pending_activities:
                    return False
            return True

        await eventually(settled, what="no activity in flight")
        before = len((await waiter.fetch_history()).events)
        await env.sleep(timedelta(days=1))
        after = len((await waiter.fetch_history()).events)
        print(f"\nwaiting workspace: {before} events, {after} after a day of waiting")
        assert after == before  # no timers, no polls: waiting costs nothing
        await delete(holder)
        running = await until(waiter, phase_is(WorkspacePhase.RUNNING), "admitted")
        await delete(waiter)
        whole = await waiter.fetch_history()
        print(f"whole life of a workspace that waited a day: {len(whole.events)} events")
        assert len(whole.events) < 400
        assert running.admission is not None


async def test_secret_values_never_reach_a_history_in_plaintext(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake, cluster = world()
    async with workspace_worker(env, task_queue, fake):
        name = unique("nb")
        handle = await deploy(env, task_queue, notebook(name, cluster, gpus=1))
        await until(handle, phase_is(WorkspacePhase.RUNNING), "running")
        sealed = next(iter(fake.secrets.values()))["notebookPassword"]
        assert (
            UNSEALER.unseal(sealed, workspace_scope(name, "notebookPassword")) == "hunter2-notebook"
        )
        await delete(handle)
        for workflow_id in (handle.id, f"capacity/{cluster}"):
            history = await env.client.get_workflow_handle(workflow_id).fetch_history()
            assert "hunter2-notebook" not in history_text(history)


async def test_routes_through_a_tenant_gateway_and_an_exhausted_port_pool(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake, cluster = world(
        gateways={"gpu": GatewayInfo(domain="acme.colony.example", https=True, tcp_ports=[30000])}
    )
    async with workspace_worker(env, task_queue, fake):
        nb_name = unique("nb")
        nb = await deploy(env, task_queue, notebook(nb_name, cluster))
        running = await until(nb, routed, "running")
        assert [(a.url, a.ready) for a in running.access] == [
            (f"https://{nb_name}.acme.colony.example", True)
        ]

        def devbox(name: str) -> WorkspaceSpec:
            return WorkspaceSpec.model_validate(
                {
                    "name": name,
                    "class": "colony-devbox-1-0-0",
                    "cluster": cluster,
                    "answers": {"ssh.authorizedKeys": SSH_KEY},
                }
            )

        # Two at once, one port in the pool: exactly one gets it (the ledger allocates ports, one
        # writer per cluster), the other reports the pool exhausted.
        boxes = [await deploy(env, task_queue, devbox(unique("box"))) for _ in range(2)]
        statuses = [await until(b, routed, "box running") for b in boxes]
        ready = [s for s in statuses if s.access[0].ready]
        short = [s for s in statuses if not s.access[0].ready]
        assert len(ready) == 1
        assert len(short) == 1
        assert ready[0].access[0].url == "ssh://acme.colony.example:30000"
        assert "port pool exhausted" in short[0].access[0].message
        # Deleting the holder returns its port: the next devbox gets it.
        holder = boxes[statuses.index(ready[0])]
        await delete(holder)
        assert not any(r.kind == "TCPRoute" for r in fake.routes.values())
        third = await deploy(env, task_queue, devbox(unique("box")))
        again = await until(third, routed, "third box")
        assert again.access[0].url == "ssh://acme.colony.example:30000"
        for handle in (third, boxes[statuses.index(short[0])]):
            await delete(handle)
        await delete(nb)


async def test_suspend_and_resume_go_through_validators(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    fake, cluster = world()
    async with workspace_worker(env, task_queue, fake):
        handle = await deploy(env, task_queue, notebook(unique("nb"), cluster))
        await until(handle, phase_is(WorkspacePhase.RUNNING), "running")
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(WorkspaceWorkflow.resume, ResumeWorkspaceRequest())
        assert isinstance(refused.value.cause, ApplicationError)
        assert "only a suspended or failed workspace can be resumed" in refused.value.cause.message
        await delete(handle)


# --- Failure context in the exalsius shape -------------------------------------------------------


async def test_a_failed_install_and_absent_gpus_have_the_exalsius_failure_context(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    """The context's reason is the failing condition's (never free text), its message says what
    failed, and its recent events start with the failure itself."""
    fake, cluster = world(failing_templates={"colony-jupyter-1-0-0": "image pull back-off"})
    async with workspace_worker(env, task_queue, fake):
        install = await deploy(env, task_queue, notebook(unique("nb"), cluster))
        failed = await until(install, phase_is(WorkspacePhase.FAILED), "install failed")
        context = failed.failure_context
        assert context is not None
        assert (context.phase_when_failed, context.reason) == (
            WorkspacePhase.DEPLOYING,
            "HelmReleaseFailed",
        )
        assert context.message.endswith("failed: image pull back-off")
        assert context.message == failed.message
        first = context.recent_events[0]
        assert (first.type, first.reason, first.message) == (
            "Warning",
            "HelmReleaseFailed",
            context.message,
        )
        assert context.service_set_status is not None
        assert context.service_set_status.services[0].state == "Failed"

        absent = await deploy(
            env, task_queue, notebook(unique("nb"), cluster, gpus=1, gpu_type="b300")
        )
        failed = await until(absent, phase_is(WorkspacePhase.FAILED), "no such GPUs")
        context = failed.failure_context
        assert context is not None
        assert (context.phase_when_failed, context.reason) == (
            WorkspacePhase.PENDING,
            "GpuOfferingUnavailable",
        )
        assert [e.reason for e in context.recent_events] == ["GpuOfferingUnavailable"]
        assert context.recent_events[0].message == context.message == failed.message
        for handle in (install, absent):
            await delete(handle)


# --- Routes follow the gateway ----------------------------------------------------------------------

DOMAIN = "acme.colony.example"


def routes_ready(status: WorkspaceStatus) -> tuple[str, str]:
    found = next(c for c in status.conditions if c.type == "RoutesReady")
    return found.status.value, found.reason


def two_endpoints(name: str) -> WorkspaceClassSpec:
    """The notebook with a second HTTP endpoint on the same port, whose Service its chart does
    not render."""
    jupyter = catalog_class("colony-jupyter-1-0-0")
    (http,) = jupyter.access_endpoints
    endpoints = [
        http.model_copy(update={"port": 80}),
        http.model_copy(update={"name": "admin", "port": 80}),
    ]
    return jupyter.model_copy(update={"name": name, "access_endpoints": endpoints})


async def test_routes_follow_the_gateway_as_it_goes_and_comes_back(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    """A running workspace, its cluster attached to a tenant gateway: the Gateway goes
    (`gateway_changed`, as the watcher sends it), RoutesReady turns False RoutingInfraNotReady and
    the endpoint shows its port-forward meanwhile; it comes back, and the workspace is routed
    again, all without an operation (no suspend, no resume): its phase stays Running."""
    gateway = GatewayInfo(domain=DOMAIN, https=True)
    fake, cluster = world(gateways={"gpu": gateway}, attached={"gpu": DOMAIN})
    deployment = cluster_deployment_name(cluster, "")
    async with workspace_worker(env, task_queue, fake):
        name = unique("nb")
        handle = await deploy(env, task_queue, notebook(name, cluster))
        running = await until(handle, routed, "running")
        assert routes_ready(running) == ("True", "RoutesReady")
        assert [(a.url, a.ready, a.reason) for a in running.access] == [
            (f"https://{name}.{DOMAIN}", True, "Accepted")
        ]

        del fake.gateways[deployment]
        await handle.signal(
            WorkspaceWorkflow.gateway_changed,
            GatewayChanged(request_id="g-1", cluster=deployment, type=NodeEventType.DELETED),
        )
        waiting = await until(
            handle, lambda s: routes_ready(s)[0] == "False", "routes waiting for the gateway"
        )
        assert routes_ready(waiting) == ("False", "RoutingInfraNotReady")
        assert waiting.phase is WorkspacePhase.RUNNING
        (entry,) = waiting.access
        assert (entry.url, entry.ready, entry.reason) == (
            f"https://{name}.{DOMAIN}",
            False,
            "RoutingInfraNotReady",
        )
        assert entry.command.startswith(f"kubectl port-forward -n ws-{name} ")
        assert fake.routes  # kept: they attach again when the Gateway is back

        fake.gateways[deployment] = gateway
        fake.gateway_generations[deployment] = 2
        await handle.signal(
            WorkspaceWorkflow.gateway_changed,
            GatewayChanged(request_id="g-2", cluster=deployment, type=NodeEventType.ADDED),
        )
        back = await until(handle, lambda s: routes_ready(s)[0] == "True", "routed again")
        assert [(a.url, a.ready, a.command) for a in back.access] == [
            (f"https://{name}.{DOMAIN}", True, "")
        ]
        assert [op.kind.value for op in back.completed_operations] == ["deploy"]
        await delete(handle)


async def test_without_the_watcher_a_running_workspace_looks_at_its_gateway_by_itself(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    """No `gateway_changed` at all: the fallback finds the Gateway gone within `ROUTES_FALLBACK`
    and back within `ROUTES_RETRY` (the time-skipping server's clock), and a look that finds
    nothing new asks for nothing but the gateway."""
    gateway = GatewayInfo(domain=DOMAIN, https=True)
    fake, cluster = world(gateways={"gpu": gateway}, attached={"gpu": DOMAIN})
    deployment = cluster_deployment_name(cluster, "")
    async with workspace_worker(env, task_queue, fake):
        handle = await deploy(env, task_queue, notebook(unique("nb"), cluster))
        await until(handle, routed, "running")
        applied = len(fake.routes)
        await env.sleep(ROUTES_FALLBACK + timedelta(minutes=1))
        assert fake.calls.count(f"find gateway {deployment}") >= 2  # deploy, and one look
        assert len(fake.routes) == applied
        assert routes_ready(await status_of(handle)) == ("True", "RoutesReady")

        del fake.gateways[deployment]
        await env.sleep(ROUTES_FALLBACK + timedelta(minutes=1))
        gone = await status_of(handle)
        assert routes_ready(gone) == ("False", "RoutingInfraNotReady")
        fake.gateways[deployment] = gateway
        await env.sleep(ROUTES_RETRY + timedelta(seconds=30))
        assert routes_ready(await status_of(handle)) == ("True", "RoutesReady")
        await delete(handle)


async def test_an_endpoint_without_its_service_holds_neither_the_others_nor_the_phase(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    """A chart that renders one of two endpoints' Services: Running as soon as the release is, the
    other endpoint routed, the one without a Service reported failed with its reason; without a
    gateway, both endpoints on port 80 are forwarded on local ports of their own."""
    workspace_class = two_endpoints("two-web-1-0-0")
    fake, cluster = world(gateways={"gpu": GatewayInfo(domain=DOMAIN, https=True)})
    fake.classes[workspace_class.name] = workspace_class
    name = unique("nb")
    release = workspace_release_name("", cluster, name)
    fake.missing_services.add(f"{release}-admin")
    async with workspace_worker(env, task_queue, fake):
        spec = notebook(name, cluster).model_copy(update={"class_name": workspace_class.name})
        handle = await deploy(env, task_queue, spec)
        running = await until(handle, routed, "running")
        web, admin = running.access
        assert (web.url, web.ready, web.reason) == (f"https://{name}.{DOMAIN}", True, "Accepted")
        assert (admin.url, admin.ready, admin.reason) == (
            f"https://{name}-admin.{DOMAIN}",
            False,
            "BackendNotFound",
        )
        assert f"Service ws-{name}/{release}-admin not found" in admin.message
        assert routes_ready(running) == ("False", "RoutingError")
        ready = next(c for c in running.conditions if c.type == "RoutesReady")
        assert ready.message.startswith("admin: BackendNotFound: ")
        assert next(c for c in running.conditions if c.type == "Ready").status.value == "True"
        await delete(handle)

    plain, plain_cluster = world()
    plain.classes[workspace_class.name] = workspace_class
    async with workspace_worker(env, task_queue, plain):
        spec = notebook(unique("nb"), plain_cluster).model_copy(
            update={"class_name": workspace_class.name}
        )
        handle = await deploy(env, task_queue, spec)
        running = await until(handle, routed, "running")
        assert [(a.url, a.command.split()[-1]) for a in running.access] == [
            ("http://localhost:8080", "8080:80"),
            ("http://localhost:8081", "8081:80"),
        ]
        await delete(handle)


async def gateway_looks(handle: WorkflowHandle[Any, Any]) -> int:
    """How many times the workspace looked at its cluster's gateway (`find_tenant_gateway`)."""
    history = await handle.fetch_history()
    return sum(
        1
        for event in history.events
        if event.HasField("activity_task_scheduled_event_attributes")
        and event.activity_task_scheduled_event_attributes.activity_type.name
        == "find_tenant_gateway"
    )


async def test_a_service_that_appears_late_is_routed_promptly_and_the_looks_back_off(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    """An endpoint refused for its missing Service (`BackendNotFound`) is looked at again soon,
    then less and less often (as the exalsius operator requeues while routes are not ready):
    a Service its chart renders seconds late is routed within seconds, not after
    `ROUTES_FALLBACK`; one that never comes costs a bounded number of looks."""
    workspace_class = two_endpoints("late-web-1-0-0")
    fake, cluster = world(gateways={"gpu": GatewayInfo(domain=DOMAIN, https=True)})
    fake.classes[workspace_class.name] = workspace_class
    async with workspace_worker(env, task_queue, fake):
        late, never = unique("nb"), unique("nb")
        handles = {}
        for name in (late, never):
            fake.missing_services.add(f"{workspace_release_name('', cluster, name)}-admin")
            spec = notebook(name, cluster).model_copy(update={"class_name": workspace_class.name})
            handles[name] = await deploy(env, task_queue, spec)
            refused = await until(handles[name], routed, "running")
            assert refused.access[1].reason == "BackendNotFound"

        # The late one's chart renders the Service now: routed at the next look, seconds away.
        fake.missing_services.discard(f"{workspace_release_name('', cluster, late)}-admin")
        await env.sleep(timedelta(seconds=30))
        routed_late = await status_of(handles[late])
        assert [(a.ready, a.reason) for a in routed_late.access] == [
            (True, "Accepted"),
            (True, "Accepted"),
        ]
        assert routes_ready(routed_late) == ("True", "RoutesReady")

        # The other's never comes: its looks back off to the fallback, so two hours cost about
        # as many looks as the first ten minutes' backoff and the fallback's one per ten minutes.
        looks_before = await gateway_looks(handles[never])
        events_before = await history_length(handles[never])
        await env.sleep(timedelta(hours=2))
        looks = await gateway_looks(handles[never]) - looks_before
        assert looks <= 7 + 2 * 6, looks
        assert await history_length(handles[never]) - events_before <= 25 * looks
        assert (await status_of(handles[never])).access[1].reason == "BackendNotFound"
        for handle in handles.values():
            await delete(handle)
