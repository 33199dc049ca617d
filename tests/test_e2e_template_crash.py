"""End to end: the worker killed at seeded moments during a template pool's scale-down.

Temporal dev server + `SimWorld` (its Cluster API controller, k0rdent's `aws-standalone-cp`
schema) + the real worker, run in-process and cancelled (its activities' attempts then time out
on their heartbeats, 10 s, and are retried on the next worker), again and again while a scale
from 4 to 1 marks, drains (held by a PodDisruptionBudget until the first kill), lowers
`workersNumber` and lets CAPI delete the drained Machines. Afterwards: exactly the Machines of the
drained nodes were deleted, the kept node's Machine and Node are there, no Node is cordoned, no
Machine carries Colony's marks, and CAPI's own drain found none of the user's pods left.

The kill moments come from a seed (`COLONY_CRASH_SEED`, default 28): which step of the removal each
kill waits for, then a jitter of up to half a second.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from temporalio.testing import WorkflowEnvironment

from models.activity_api import DELETE_MACHINE_ANNOTATION, PRE_DRAIN_HOOK
from models.cluster import ClusterPhase, ClusterSpec, ClusterStatus, ClusterWorkflowInput
from models.operations import OperationAccepted, OperationState, ScaleNodePoolRequest
from sim.cloud import load_cloud_templates
from sim.world import SimWorld
from tests.helpers import eventually, unique
from tests.simenv import (
    NAMESPACE,
    call,
    child_api,
    close_client,
    management_api,
    started_world,
)
from tests.test_e2e_crash import Worker, start_worker
from workflows.cluster import CLUSTER
from workflows.cluster.workflow import ClusterWorkflow

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

AWS = "aws-standalone-cp-1-0-43"
SEED = int(os.environ.get("COLONY_CRASH_SEED", "28"))
KILLS = 3
STEPS = ("mark_machines", "drain_node", "scale_machine_deployment", "await_machines")
"""The activities a kill may wait to see in flight (or done) before it lands."""


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[SimWorld]:
    async with started_world(tmp_path / "sim") as world:
        assert isinstance(world, SimWorld)
        if not load_cloud_templates(world.config.k0rdent_templates):
            pytest.skip("k0rdent's template values not found (COLONY_K0RDENT_TEMPLATES)")
        yield world


def machines(world: SimWorld, deployment: str) -> dict[str, dict[str, Any]]:
    rt = world.store.registry.get("cluster.x-k8s.io", "machines")
    items, _ = world.store.list(
        rt, NAMESPACE, label_selector=f"cluster.x-k8s.io/cluster-name={deployment}"
    )
    return {m["metadata"]["name"]: m for m in items}


async def test_worker_kills_during_a_template_scale_down_delete_no_wrong_machine(
    dev_env: WorkflowEnvironment, world: SimWorld, task_queue: str
) -> None:
    rng = random.Random(SEED)
    name = unique("tcrash")
    spec = ClusterSpec(
        name=name,
        location_id="",
        deployment_spec={
            "template": AWS,
            "credential": "aws-credential",
            "config": {
                "controlPlaneNumber": 1,
                "workersNumber": 4,
                "region": "eu-central-1",
                "clusterIdentity": {"name": "aws-cluster-identity", "namespace": NAMESPACE},
                "worker": {"instanceType": "g6e.xlarge", "iamInstanceProfile": "nodes"},
            },
        },
    )
    workers: list[Worker] = [await start_worker(dev_env, world, task_queue)]
    handle = await dev_env.client.start_workflow(
        ClusterWorkflow.run, ClusterWorkflowInput(spec=spec), id=spec.workflow_id,
        task_queue=task_queue,
    )  # fmt: skip

    async def status() -> ClusterStatus:
        return await handle.query(CLUSTER.status.name, result_type=ClusterStatus)

    def ready_with(count: int) -> Any:
        def holds(s: ClusterStatus) -> bool:
            pool = s.pool("workers")
            return s.phase is ClusterPhase.READY and pool is not None and pool.ready_count == count

        return holds

    await eventually(status, until=ready_with(4), timeout=60, what="4 workers Ready")
    deployment = spec.deployment_name
    before = machines(world, deployment)
    node_of = {
        m: (obj.get("status") or {}).get("nodeRef", {}).get("name") for m, obj in before.items()
    }
    management = management_api(world)
    api = await child_api(management, deployment)
    core, policy = client.CoreV1Api(api), client.PolicyV1Api(api)
    nodes = sorted(node_of.values())
    kept = nodes[0]
    for index, node in enumerate(nodes):
        for n in range(3 if node == kept else 1):
            await call(
                core.create_namespaced_pod, "default",
                {
                    "metadata": {"name": f"p{index}-{n}", "labels": {"app": "job"}},
                    "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
                },
            )  # fmt: skip
    await call(
        policy.create_namespaced_pod_disruption_budget, "default",
        {"metadata": {"name": "job"},
         "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "job"}}}},
    )  # fmt: skip

    accepted = await handle.execute_update(
        CLUSTER.scale_node_pool.name,
        ScaleNodePoolRequest(pool="workers", count=1),
        result_type=OperationAccepted,
    )
    scheduled_before = len(
        [
            e
            for e in (await handle.fetch_history()).events
            if e.HasField("activity_task_scheduled_event_attributes")
        ]
    )
    try:
        for kill in range(KILLS):
            step = rng.choice(STEPS[: 2 if kill == 0 else len(STEPS)])

            async def reached(activity: str = step) -> bool:
                """The step is in flight, or was scheduled since the scale was accepted."""
                described = await handle.describe()
                pending = described.raw_description.pending_activities
                if any(a.activity_type.name == activity for a in pending):
                    return True
                history = await handle.fetch_history()
                scheduled = [
                    e.activity_task_scheduled_event_attributes.activity_type.name
                    for e in history.events
                    if e.HasField("activity_task_scheduled_event_attributes")
                ]
                return activity in scheduled[scheduled_before:]

            await eventually(reached, timeout=90, interval=0.1, what=f"kill {kill}: {step}")
            await asyncio.sleep(rng.uniform(0, 0.5))
            await workers[-1].crash()
            if kill == 0:
                await call(policy.delete_namespaced_pod_disruption_budget, "job", "default")
            workers.append(await start_worker(dev_env, world, task_queue))

        def finished(s: ClusterStatus) -> bool:
            op = s.operation(accepted.operation_id)
            return op is not None and op.state.finished

        done = await eventually(
            status, until=finished, timeout=120, interval=0.3, what="scale done"
        )
        op = done.operation(accepted.operation_id)
        assert op is not None
        assert op.state is OperationState.SUCCEEDED, op
        pool = done.pool("workers")
        assert pool is not None
        assert [n.name for n in pool.nodes] == [kept]

        after = await eventually(
            lambda: _now(machines(world, deployment)),
            until=lambda m: len(m) == 1,
            timeout=60,
            what="one Machine left",
        )
        (machine,) = after.values()
        assert machine["status"]["nodeRef"]["name"] == kept, "a wrong Machine was deleted"
        annotations = machine["metadata"].get("annotations") or {}
        assert PRE_DRAIN_HOOK not in annotations
        assert DELETE_MACHINE_ANNOTATION not in annotations
        listed = await call(core.list_node)
        assert [n.metadata.name for n in listed.items] == [kept]
        assert not any(n.spec.unschedulable for n in listed.items), "a node left cordoned"
        for gone in (m for m, node in node_of.items() if node != kept):
            drain = world.k0rdent.cluster_api.drain_of(gone)
            assert drain is not None
            assert [p for p in drain.evicted if p.startswith("default/")] == [], drain
        for n in range(3):
            pod = await call(core.read_namespaced_pod, f"p0-{n}", "default")
            assert pod.metadata.deletion_timestamp is None
    finally:
        close_client(api)
        close_client(management)
        for worker in workers:
            await worker.crash()


async def _now(value: Any) -> Any:
    return value
