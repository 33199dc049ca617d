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

from tests.reliability.invariants import (
    check_creates,
    check_evictions,
    check_first_come,
    check_gpu_samples,
    check_hosts,
)
from tests.reliability.paths import CPU, place_pods
from tests.reliability.scenario import (
    Burst,
    Disruptor,
    GpuSampler,
    Scenario,
    Size,
    child_nodes,
    child_pods,
    cluster_gone,
    combined,
    deployment,
    finished_operation,
    history_progress,
    ledger_order,
    leftovers,
    llm_server,
    notebook,
    pod_refs,
    ready_cluster,
    records_progress,
    the_ledger,
    workspace_gone,
    workspace_in,
)
from tests.reliability.stack import ORGANIZATION

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FULL = pytest.param(
    Size.FULL, id="full", marks=[pytest.mark.reliability, pytest.mark.timeout(1200)]
)
SIZES = [pytest.param(Size.FAST, id="fast"), FULL]
FULL_ONLY = [FULL]
"""The drain and the burst of admissions run in `make reliability` only: `make test` keeps one
kill scenario (the installs), within its two minutes."""


def owners(*clusters: str) -> list[str]:
    return [f"cluster/{ORGANIZATION}/{cluster}/" for cluster in clusters]


# --- A drain -------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", FULL_ONLY)
async def test_drain_survives_worker_kills(scenario: Scenario, size: Size) -> None:
    """A pool of N+1 nodes, each running bare pods (and the DaemonSet every child runs), scaled to
    1 while the worker is killed: every pod of the N drained nodes evicted once (the DaemonSet's
    left), none of the kept node's; the drain's own count of evictions is the sim's; every host
    claimed once and released once (by the drain or the delete); nothing created twice."""
    drained_nodes, per_node, kills = 20, 3, 10
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
    progress = combined(records_progress(stack), history_progress(stack.client, [workflow_id]))
    async with Disruptor(
        scenario, progress, times=kills, units=drained_nodes * (per_node + 4)
    ) as killer:
        operation = await finished_operation(
            scenario, cluster, accepted["operationId"], timeout=900
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


# --- Workspace installs sharing a prerequisite ----------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
async def test_installs_with_a_prerequisite_survive_worker_kills(
    scenario: Scenario, size: Size
) -> None:
    """LLM servers (whose class needs the inference stack installed first, once per cluster) and a
    notebook deployed at once on a fresh GPU cluster while the worker is killed: all run, the
    prerequisite is installed once, nothing is created twice, no GPU is held twice; deleting them
    and the cluster leaves nothing. A round whose installs finish before the kills are spent is
    followed by another, on another fresh cluster."""
    servers, kills = (3, 10) if scenario.full else (1, 1)
    stack = scenario.stack
    rounds: list[dict[str, Any]] = []
    killed = 0
    while killed < kills:
        cluster = f"install-{size.value}-{len(rounds)}"
        window = await scenario.records_mark()
        await ready_cluster(
            scenario, cluster, [{"name": "gpu", "sku": {"gpuModelId": "h100-80gb"}, "count": 1}]
        )
        bodies = [
            llm_server(scenario, f"{cluster}-llm{index}", cluster) for index in range(servers)
        ]
        bodies.append(notebook(scenario, f"{cluster}-nb", cluster, "h100-80gb"))
        names = [body["name"] for body in bodies]
        workflows: list[str] = []
        progress = combined(records_progress(stack), history_progress(stack.client, workflows))
        async with (
            GpuSampler(scenario, cluster) as sampler,
            Disruptor(scenario, progress, times=kills - killed, units=40 * len(bodies)) as killer,
        ):
            accepted = await asyncio.gather(*(stack.api.deploy(body) for body in bodies))
            workflows.extend(answer["workflowId"] for answer in accepted)
            for name in names:
                status = await workspace_in(scenario, name, {"Running", "Failed"}, timeout=600)
                assert status["phase"] == "Running", scenario.failure(repr(status))
        killed += len(killer.done)
        for name in names[:-1]:
            status = await workspace_in(scenario, name, {"Running"})
            assert [(p["name"], p["phase"]) for p in status["prerequisites"]] == [
                ("colony-inference-stack-1-0-0", "Satisfied")
            ], scenario.failure(repr(status["prerequisites"]))
        records = await scenario.records_since(window)
        prerequisite_sets = [
            created
            for created in records["objectsCreated"]
            if created["resource"] == "servicesets"
            and "colony.dev/prerequisite" in created["labels"]
        ]
        assert len(prerequisite_sets) == 1, scenario.failure(repr(prerequisite_sets))
        scenario.check(check_creates(records["objectsCreated"]))
        scenario.check(check_gpu_samples(sampler.samples, capacity=8))
        for name in names:
            await workspace_gone(scenario, name)
        assert await leftovers(scenario, clusters_alive=[cluster]) == []
        await cluster_gone(scenario, cluster)
        records = await scenario.records_since(window)
        scenario.check(check_hosts(records["hosts"], owners=owners(cluster)))
        assert await leftovers(scenario) == []
        rounds.append({"cluster": cluster, "workspaces": len(names), **killer.figures()})
    scenario.report(rounds=rounds, kills=killed, sent_again=stack.api.sent_again)


# --- A burst of GPU admissions --------------------------------------------------------------------


@pytest.mark.parametrize("size", FULL_ONLY)
async def test_a_burst_of_admissions_survives_worker_kills(scenario: Scenario, size: Size) -> None:
    """3 x G one-GPU notebooks at once on G GPUs (L40S hosts of 2), then released one at a time
    until all have run, while the worker is killed: admitted in the order received, never more
    than G GPUs held (ledger and pods, sampled), nothing created twice, every host claimed once
    and released once."""
    hosts, kills = 2, 10
    gpus = 2 * hosts
    stack = scenario.stack
    cluster = f"admit-{size.value}"
    window = await scenario.records_mark()
    await ready_cluster(
        scenario, cluster, [{"name": "gpu", "sku": {"gpuModelId": "l40s-48gb"}, "count": hosts}]
    )
    burst = Burst(scenario, cluster, "l40s-48gb", gpus)
    ledgers: list[str] = []
    progress = combined(records_progress(stack), history_progress(stack.client, ledgers))

    async with (
        GpuSampler(scenario, cluster) as sampler,
        Disruptor(scenario, progress, times=kills, units=20 * 3 * gpus) as killer,
    ):
        await burst.send()
        ledgers.append(await the_ledger(scenario, cluster))
        await burst.settle(timeout=600)
        await burst.release_all(timeout=300)
    scenario.report(**killer.figures())
    assert len(killer.done) >= kills, scenario.failure(
        f"the burst was over after {len(killer.done)} of {kills} kills"
    )
    arrivals, admissions = await ledger_order(stack.client, ledgers[0])
    scenario.check(check_first_come(arrivals, admissions))
    scenario.check(check_gpu_samples(sampler.samples, capacity=gpus))
    assert len(sampler.samples) > sampler.ledger_unanswered, scenario.failure("no ledger sample")
    records = await scenario.records_since(window)
    scenario.check(check_creates(records["objectsCreated"]))
    await cluster_gone(scenario, cluster)
    records = await scenario.records_since(window)
    scenario.check(check_hosts(records["hosts"], owners=owners(cluster)))
    assert await leftovers(scenario) == []
    scenario.report(
        notebooks=len(burst.names),
        gpus=gpus,
        ledger_unanswered_samples=sampler.ledger_unanswered,
        sent_again=stack.api.sent_again,
    )
