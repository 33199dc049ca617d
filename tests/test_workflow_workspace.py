"""WorkspaceWorkflow, CapacityLedgerWorkflow and PrerequisiteWorkflow on the time-skipping server,
with the stand-in world of `tests/workspace_world.py` and real messaging between the workflows.

Each phase path of issue 7: a class that is missing, GPUs the cluster does not have, workspaces
waiting for GPUs and admitted in order, a prerequisite shared by two concurrent workspaces, a
prerequisite that fails, a deploy timeout, suspend and resume, a delete while waiting, a scale-down
refused while a workspace holds the GPUs, a day of waiting that stays small, secret values that
never reach a history in plaintext, and routes through a tenant gateway with a port pool.
"""

from __future__ import annotations

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

from activities.sealing import Unsealer, workspace_scope
from catalog.workspaces import load_workspace_catalog
from models.capacity import GpuHolder
from models.signals import RefreshRequest, SignalName
from models.workspace import (
    ConditionReason,
    ConditionStatus,
    ConditionType,
    GatewayInfo,
    WorkspacePhase,
    WorkspaceSpec,
    WorkspaceStatus,
    WorkspaceWorkflowInput,
    workspace_workflow_id,
)
from models.workspace_api import GpuHoldersMessage
from models.workspace_class import WorkspaceClassSpec
from models.workspace_operations import (
    DeleteWorkspaceRequest,
    ResumeWorkspaceRequest,
    SuspendWorkspaceRequest,
)
from starter.workspace_client import WorkspaceSummary, fill_positions, with_current_position
from tests.helpers import eventually, history_text, unique
from tests.workspace_world import STARTED, FakeWorkspaceWorld, h100_node, workspace_worker
from workflows.capacity import GPU_HOLDERS_SIGNAL, CapacityLedgerWorkflow
from workflows.workspace import WorkspaceWorkflow

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


def world(gpus: int = 2, **extra: Any) -> tuple[FakeWorkspaceWorld, str]:
    """A world with one ready cluster of a unique name (ledgers and prerequisites are one per
    cluster: tests must not share them) with one node of `gpus` H100s."""
    cluster = unique("gpu")
    fake = FakeWorkspaceWorld(
        classes={c.name: c for c in CATALOG.classes},
        templates={t.name for t in CATALOG.service_templates},
        **{key: _keyed(value, cluster) for key, value in extra.items()},
    )
    fake.ready_clusters.add(cluster)
    fake.nodes[cluster] = [h100_node(f"{cluster}-1", gpus)]
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
    name: str, cluster: str, gpus: int = 0, gpu_type: str = "h100", **extra: Any
) -> WorkspaceSpec:
    """A Jupyter workspace (its secret prompt answered sealed, as `colonyctl` sends it)."""
    resources = {"perReplica": {"gpuCount": gpus, "gpuType": gpu_type}} if gpus else None
    return WorkspaceSpec.model_validate(
        {
            "name": name,
            "class": "colony-jupyter-1-0-0",
            "cluster": cluster,
            "resources": resources,
            "sealedAnswers": {
                "notebookPassword": UNSEALER.sealer.seal(
                    "hunter2-notebook", workspace_scope(name, "notebookPassword")
                ).model_dump(mode="json")
            },
            **extra,
        }
    )


async def deploy(
    env: WorkflowEnvironment, task_queue: str, spec: WorkspaceSpec
) -> WorkflowHandle[Any, Any]:
    STARTED.append(workspace_workflow_id(spec.name))
    return await env.client.start_workflow(
        WorkspaceWorkflow.run,
        WorkspaceWorkflowInput(spec=spec),
        id=workspace_workflow_id(spec.name),
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
        running = await until(handle, phase_is(WorkspacePhase.RUNNING), "running")
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
        assert http.command.startswith(
            f"kubectl port-forward -n ws-{name} svc/wsd-{cluster}-{name}-http"
        )
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
        await ledger.signal(SignalName.CAPACITY_CHANGED, changed)
        await ledger.signal(SignalName.CAPACITY_CHANGED, changed)  # a repeat changes nothing

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

    @workflow.signal(name=GPU_HOLDERS_SIGNAL)
    def gpu_holders(self, message: GpuHoldersMessage) -> None:
        self.holders = message.holders

    @workflow.query
    def told(self) -> list[GpuHolder]:
        return self.holders


async def test_the_ledger_tells_an_organizations_cluster_who_holds_its_gpus(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    """The ledger finds the cluster's workflow from its ClusterDeployment (`cluster/<org>/<name>`
    is not derivable from `<org>-<name>`), so the scale-down guard works for organizations too."""
    fake, cluster = world(gpus=2)
    owner = f"cluster/acme/{cluster}"
    fake.owners[cluster] = owner
    async with workspace_worker(
        env, task_queue, fake, extra_workflows=[OrganizationClusterStandIn]
    ):
        listener = await env.client.start_workflow(
            OrganizationClusterStandIn.run, id=owner, task_queue=task_queue
        )
        STARTED.append(owner)
        first = await deploy(env, task_queue, notebook(unique("a"), cluster, gpus=1))
        await until(first, phase_is(WorkspacePhase.RUNNING), "running")
        told = await eventually(
            lambda: listener.query(OrganizationClusterStandIn.told),
            until=bool,
            timeout=30,
            interval=0.05,
            what="the holders told to the organization's cluster",
        )
        assert [h.workspace for h in told] == [first.id.removeprefix("workspace/")]
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
        await until(b, phase_is(WorkspacePhase.RUNNING), "the next one got the GPU")

        with pytest.raises(WorkflowUpdateFailedError) as again:
            await a.execute_update(WorkspaceWorkflow.suspend, SuspendWorkspaceRequest())
        assert isinstance(again.value.cause, ApplicationError)
        assert "already suspended" in again.value.cause.message

        await a.execute_update(WorkspaceWorkflow.resume, ResumeWorkspaceRequest())
        await until(a, phase_is(WorkspacePhase.WAITING), "resumed, waiting for its GPU")
        await delete(b)
        await until(a, phase_is(WorkspacePhase.RUNNING), "running again")
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
        assert installs == [f"wsprereq-{cluster}-colony-inference-stack-1-0-0"]
        # It outlives the workspaces that needed it.
        for handle in handles:
            await delete(handle)
        assert f"wsprereq-{cluster}-colony-inference-stack-1-0-0" in fake.service_sets


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
        assert "was not deployed within 15m" in failed.failure_context.reason
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
        running = await until(nb, phase_is(WorkspacePhase.RUNNING), "running")
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
        statuses = [await until(b, phase_is(WorkspacePhase.RUNNING), "box running") for b in boxes]
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
        again = await until(third, phase_is(WorkspacePhase.RUNNING), "third box")
        assert again.access[0].url == "ssh://acme.colony.example:30000"
        for handle in (third, boxes[statuses.index(short[0])]):
            await delete(handle)
        await delete(nb)


async def test_a_missing_tenant_gateway_is_said_so_not_taken_for_none(
    env: WorkflowEnvironment, task_queue: str
) -> None:
    """A cluster attached to a tenant gateway (its ClusterDeployment's label) whose Gateway is not
    there: the workspace runs, reachable by port-forward, and RoutesReady says the gateway is
    missing, naming its domain, instead of "no tenant gateway" (found by the reliability suite's
    gateway-gone fault)."""
    fake, cluster = world(gateway_domains={"gpu": "acme.colony.example"})
    async with workspace_worker(env, task_queue, fake):
        handle = await deploy(env, task_queue, notebook(unique("nb"), cluster))
        running = await until(handle, phase_is(WorkspacePhase.RUNNING), "running")
        routes = next(c for c in running.conditions if c.type == ConditionType.ROUTES_READY)
        assert (routes.status, routes.reason) == (
            ConditionStatus.FALSE,
            ConditionReason.GATEWAY_MISSING,
        )
        assert "tenant gateway (acme.colony.example) is missing" in routes.message
        [entry] = running.access
        assert entry.command.startswith("kubectl port-forward")
        assert entry.message == (
            "the cluster's tenant gateway (acme.colony.example) is missing: "
            f"reach it with `{entry.command}`"
        )
        assert fake.routes == {}
        await delete(handle)


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
