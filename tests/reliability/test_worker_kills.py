"""Reliability, part 1: the worker killed with SIGKILL at seeded moments, again and again, in the
middle of a drain, of workspace installs that share a prerequisite, and of a burst of GPU
admissions; afterwards every pod was evicted once, every host claimed once and released once, no
object created twice (nor two for one identity), and no two workspaces ever held the same GPU.

Each kill lands after the worker made progress since it started (a seeded number of sim records
and history events, then a seeded jitter of up to half a second), so kills spread over the whole
operation and the next worker always has something to take over. A new `python worker.py` starts
at once; the killed one's activities are retried once their heartbeats stop (10 s).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes import client as kube

from activities.kube import close_client
from tests.reliability.invariants import (
    check_creates,
    check_evictions,
    check_first_come,
    check_gpu_samples,
    check_hosts,
)
from tests.reliability.scenario import (
    GpuSampler,
    Killer,
    Scenario,
    Size,
    child_nodes,
    child_pods,
    cluster_gone,
    combined,
    deployment,
    finished_operation,
    history_progress,
    leftovers,
    ledger_order,
    pod_refs,
    ready_cluster,
    records_progress,
    workspace_gone,
    workspace_in,
)
from tests.reliability.stack import ORGANIZATION, call, poll

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SIZES = [
    pytest.param(Size.FAST, id="fast"),
    pytest.param(Size.FULL, id="full", marks=[pytest.mark.reliability, pytest.mark.timeout(1200)]),
]
CPU = {"cpuSku": "cpu-32c-256g"}


def owners(*clusters: str) -> list[str]:
    return [f"cluster/{ORGANIZATION}/{cluster}/" for cluster in clusters]


# --- A drain -------------------------------------------------------------------------------------


async def place_pods(scenario: Scenario, cluster: str, per_node: int) -> list[str]:
    """`per_node` bare pods on every node (some refused eviction a few times, as a budget would);
    their names."""
    stack = scenario.stack
    admin = await stack.child_admin(deployment(cluster))
    core = kube.CoreV1Api(admin)
    names: list[str] = []
    refused: list[dict[str, Any]] = []
    try:
        nodes = [node.metadata.name for node in await child_nodes(stack, cluster)]
        bodies = []
        for index, node in enumerate(sorted(nodes)):
            for slot in range(per_node):
                name = f"train-{index}-{slot}"
                names.append(name)
                bodies.append(
                    {
                        "metadata": {"name": name, "labels": {"app": "train"}},
                        "spec": {
                            "nodeName": node,
                            "terminationGracePeriodSeconds": scenario.rng.choice([1, 10, 30]),
                            "containers": [{"name": "c", "image": "busybox"}],
                        },
                    }
                )
                if scenario.rng.random() < 0.2:
                    refused.append(
                        {
                            "namespace": "default",
                            "pod": name,
                            "times": scenario.rng.randint(1, 2),
                            "cluster": deployment(cluster),
                        }
                    )
        await asyncio.gather(
            *(call(core.create_namespaced_pod, "default", body) for body in bodies)
        )
    finally:
        close_client(admin)
    await stack.set_faults({"seed": scenario.rng.randrange(2**31), "evictions": refused})
    scenario.report(pods_refused_eviction=len(refused))
    await poll(
        lambda: child_pods(stack, cluster),
        lambda pods: (
            sum(1 for p in pods if p.metadata.name in set(names) and p.status.phase == "Running")
            == len(names)
        ),
        what="the training pods running",
    )
    return names


@pytest.mark.parametrize("size", SIZES)
async def test_drain_survives_worker_kills(scenario: Scenario, size: Size) -> None:
    """A pool of N+1 nodes, each running bare pods (and the DaemonSet every child runs), scaled to
    1 while the worker is killed: every pod of the N drained nodes evicted once (the DaemonSet's
    left), none of the kept node's; the drain's own count of evictions is the sim's; every host
    claimed once and released once (by the drain or the delete); nothing created twice."""
    drained_nodes, per_node, kills = (20, 3, 10) if scenario.full else (4, 2, 1)
    stack = scenario.stack
    cluster = f"drain-{size.value}"
    window = await scenario.records_mark()
    await ready_cluster(
        scenario, cluster, [{"name": "cpu", "sku": CPU, "count": drained_nodes + 1}]
    )
    await place_pods(scenario, cluster, per_node)
    before_pods = pod_refs(deployment(cluster), await child_pods(stack, cluster))
    before_nodes = {node.metadata.name for node in await child_nodes(stack, cluster)}
    drain_window = await scenario.records_mark()
    accepted = await stack.api.scale(cluster, "cpu", 1)
    workflow_id = accepted.get("workflowId") or f"cluster/{ORGANIZATION}/{cluster}"
    progress = combined(
        records_progress(stack), history_progress(stack.client, lambda: [workflow_id])
    )
    async with Killer(
        scenario, progress, kills=kills, units=drained_nodes * (per_node + 4)
    ) as killer:
        operation = await finished_operation(
            scenario, cluster, accepted["operationId"], timeout=900 if scenario.full else 300
        )
    scenario.report(**killer.figures())
    assert operation["state"] == "succeeded", scenario.failure(repr(operation))
    assert len(killer.done) >= kills, scenario.failure(
        f"the drain finished after {len(killer.done)} of {kills} kills"
    )
    after_nodes = {node.metadata.name for node in await child_nodes(stack, cluster)}
    drained = before_nodes - after_nodes
    assert len(drained) == drained_nodes, scenario.failure(f"drained {sorted(drained)}")

    records = await scenario.records_since(drain_window)
    evictions = [e for e in records["evictions"] if e["cluster"] == deployment(cluster)]
    evicted_check = check_evictions(evictions, before_pods, drained)
    scenario.check(evicted_check)
    # The drain's own count, across every crash, is what the cluster saw.
    reported = {n["node"]: n["podsEvicted"] for n in operation["progress"]["nodes"]}
    seen = {
        node: sum(1 for e in evictions if e["node"] == node and not e["repeat"]) for node in drained
    }
    assert reported == seen, scenario.failure(f"the drain reports {reported}, the sim saw {seen}")
    assert await leftovers(scenario, clusters_alive=[cluster]) == []

    await cluster_gone(scenario, cluster)
    records = await scenario.records_since(window)
    scenario.check(check_hosts(records["hosts"], owners=owners(cluster)))
    scenario.check(check_creates(records["objectsCreated"]))
    assert await leftovers(scenario) == []
    scenario.report(nodes_drained=len(drained), sent_again=stack.api.sent_again)
