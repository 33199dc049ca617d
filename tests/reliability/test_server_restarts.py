"""Reliability, part 2: the Temporal server restarted (SIGTERM or SIGKILL, a seeded choice; the
dev server started again on the same port and SQLite database) in the middle of cluster and
workspace operations, at seeded moments of their progress: every operation resumes and finishes
as it would have (create, scale up, scale down with a drain, delete; deploy with a prerequisite,
suspend, resume, delete), every host is claimed once and released once, nothing is created twice
and nothing is left behind.

The two paths run at the same time, so most restarts fall while both have work in flight; the
worker and the API stay up through each restart (the API answers 503 meanwhile, and the suite's
client sends the request again with the same Idempotency-Key).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from tests.reliability.invariants import check_creates, check_evictions, check_hosts
from tests.reliability.scenario import (
    VLLM,
    Disruptor,
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
    notebook,
    pod_refs,
    ready_cluster,
    records_progress,
    restart_temporal,
    workspace_gone,
    workspace_in,
)
from tests.reliability.stack import ORGANIZATION
from tests.reliability.test_worker_kills import CPU, place_pods

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SIZES = [
    pytest.param(Size.FAST, id="fast"),
    pytest.param(Size.FULL, id="full", marks=[pytest.mark.reliability, pytest.mark.timeout(900)]),
]


async def scaled(scenario: Scenario, cluster: str, count: int) -> dict[str, Any]:
    accepted = await scenario.stack.api.scale(cluster, "cpu", count)
    operation = await finished_operation(scenario, cluster, accepted["operationId"])
    assert operation["state"] == "succeeded", scenario.failure(repr(operation))
    return operation


async def cluster_path(
    scenario: Scenario, cluster: str, workflows: list[str], beside: str
) -> dict[str, Any]:
    """Create, scale up, scale down with a drain (its evictions checked), delete. `beside` is
    the other path's cluster, alive at the same time."""
    stack = scenario.stack
    workflows.append(f"cluster/{ORGANIZATION}/{cluster}")
    await ready_cluster(scenario, cluster, [{"name": "cpu", "sku": CPU, "count": 2}])
    if scenario.full:
        await scaled(scenario, cluster, 4)
    await place_pods(scenario, cluster, 2)
    pods = pod_refs(deployment(cluster), await child_pods(stack, cluster))
    before = {node.metadata.name for node in await child_nodes(stack, cluster)}
    window = await scenario.records_mark()
    await scaled(scenario, cluster, 1)
    drained = before - {node.metadata.name for node in await child_nodes(stack, cluster)}
    records = await scenario.records_since(window)
    evictions = [e for e in records["evictions"] if e["cluster"] == deployment(cluster)]
    scenario.check(check_evictions(evictions, pods, drained))
    assert await leftovers(scenario, clusters_alive=[cluster, beside]) == []
    await cluster_gone(scenario, cluster)
    return {"nodes_drained": len(drained)}


async def workspace_path(scenario: Scenario, cluster: str, workflows: list[str]) -> dict[str, Any]:
    """Deploy an LLM server (with its prerequisite) and a notebook, suspend and resume the
    notebook, delete both and the cluster."""
    api = scenario.stack.api
    workflows.append(f"cluster/{ORGANIZATION}/{cluster}")
    await ready_cluster(
        scenario, cluster, [{"name": "gpu", "sku": {"gpuModelId": "h100-80gb"}, "count": 1}]
    )
    bodies = [notebook(scenario, f"{cluster}-nb", cluster, "h100-80gb")]
    if scenario.full:
        bodies.append(
            {
                "name": f"{cluster}-llm",
                "class": VLLM,
                "cluster": cluster,
                "values": {"vllm": {"model": "Qwen/Qwen3-0.6B"}},
            }
        )
    for body in bodies:
        workflows.append((await api.deploy(body))["workflowId"])
    for body in bodies:
        status = await workspace_in(scenario, body["name"], {"Running", "Failed"})
        assert status["phase"] == "Running", scenario.failure(repr(status))
    name = bodies[0]["name"]
    if scenario.full:
        await api.workspace_action(name, "suspend")
        await workspace_in(scenario, name, {"Suspended"})
        await api.workspace_action(name, "resume")
        status = await workspace_in(scenario, name, {"Running", "Failed"})
        assert status["phase"] == "Running", scenario.failure(repr(status))
    for body in bodies:
        await workspace_gone(scenario, body["name"])
    await cluster_gone(scenario, cluster)
    return {"workspaces": len(bodies)}


def reinstalled(workspace: str) -> Callable[[Mapping[str, Any]], int]:
    """A suspended and resumed workspace's release is installed twice: its ServiceSet and values
    Secret are made twice (its namespace stays)."""

    def lifetimes(record: Mapping[str, Any]) -> int:
        owner = str((record.get("annotations") or {}).get("colony.dev/workflow-id", ""))
        label = (record.get("labels") or {}).get("colony.dev/workspace")
        mine = label == workspace or owner.endswith(f"/{workspace}")
        return 2 if workspace and mine and record["resource"] in ("servicesets", "secrets") else 1

    return lifetimes


@pytest.mark.parametrize("size", SIZES)
async def test_operations_finish_across_temporal_restarts(scenario: Scenario, size: Size) -> None:
    restarts = 6 if scenario.full else 2
    stack = scenario.stack
    window = await scenario.records_mark()
    workflows: list[str] = []
    progress = combined(records_progress(stack), history_progress(stack.client, workflows))
    clusters = (f"restart-{size.value}-c", f"restart-{size.value}-w")
    async with Disruptor(
        scenario,
        progress,
        times=restarts,
        units=400 if scenario.full else 120,
        action=restart_temporal,
        jitter=1.0,
    ) as restarter:
        paths = await asyncio.gather(
            cluster_path(scenario, clusters[0], workflows, beside=clusters[1]),
            workspace_path(scenario, clusters[1], workflows),
        )
    scenario.report(**restarter.figures("restarts"), sent_again=stack.api.sent_again)
    scenario.report(restarted_with=[d.what for d in restarter.done])
    assert len(restarter.done) >= restarts, scenario.failure(
        f"the operations finished after {len(restarter.done)} of {restarts} restarts"
    )
    records = await scenario.records_since(window)
    scenario.check(
        check_hosts(records["hosts"], owners=[f"cluster/{ORGANIZATION}/{c}/" for c in clusters])
    )
    resumed = f"{clusters[1]}-nb" if scenario.full else ""
    scenario.check(check_creates(records["objectsCreated"], reinstalled(resumed)))
    assert await leftovers(scenario) == []
    scenario.report(cluster_path=paths[0], workspace_path=paths[1])
