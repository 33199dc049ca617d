"""The operations the scenarios disrupt, each run under a `Disruptor` and checked with the suite's
invariants, whatever the disruption: a worker killed, a Temporal service killed, PostgreSQL or the
dev server restarted.

- `disrupted_drain`: a pool scaled down by `drained` nodes that each run bare pods;
- `disrupted_installs`: LLM servers (with their shared prerequisite) and a notebook deployed at
  once on a fresh GPU cluster, in rounds until the disruptions are spent;
- `disrupted_paths`: the cluster path and the workspace path (`paths.py`) side by side.

Each returns its figures and reports the checks' on the scenario (`Scenario.check`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.reliability.invariants import (
    check_creates,
    check_evictions,
    check_gpu_samples,
    check_hosts,
)
from tests.reliability.paths import CPU, cluster_path, place_pods, reinstalled, workspace_path
from tests.reliability.scenario import (
    Action,
    Disruptor,
    GpuSampler,
    Scenario,
    child_nodes,
    child_pods,
    cluster_gone,
    combined,
    deployment,
    finished_operation,
    history_progress,
    leftovers,
    llm_server,
    notebook,
    pod_refs,
    ready_cluster,
    records_progress,
    workspace_gone,
    workspace_in,
)
from tests.reliability.stack import ORGANIZATION


def owners(*clusters: str) -> list[str]:
    return [f"cluster/{ORGANIZATION}/{cluster}/" for cluster in clusters]


async def disrupted_drain(
    scenario: Scenario,
    cluster: str,
    *,
    drained_nodes: int,
    per_node: int,
    times: int,
    action: Action,
    figures: str = "kills",
) -> dict[str, Any]:
    """A pool of `drained_nodes` + 1 nodes, each running bare pods (and the DaemonSet every child
    runs), scaled to 1 under `times` disruptions: every pod of the drained nodes evicted once (the
    DaemonSet's left), none of the kept node's; the drain's own count of evictions is the sim's;
    every host claimed once and released once (by the drain or the delete); nothing created
    twice; nothing left behind."""
    stack = scenario.stack
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
        scenario, progress, times=times, units=drained_nodes * (per_node + 4), action=action
    ) as disruptor:
        operation = await finished_operation(
            scenario, cluster, accepted["operationId"], timeout=900
        )
    scenario.report(**disruptor.figures(figures))
    assert operation["state"] == "succeeded", scenario.failure(repr(operation))
    assert len(disruptor.done) >= times, scenario.failure(
        f"the drain finished after {len(disruptor.done)} of {times} {figures}"
    )
    after_nodes = {node.metadata.name for node in await child_nodes(stack, cluster)}
    drained = before_nodes - after_nodes
    assert len(drained) == drained_nodes, scenario.failure(f"drained {sorted(drained)}")

    records = await scenario.records_since(drain_window)
    evictions = [e for e in records["evictions"] if e["cluster"] == deployment(cluster)]
    scenario.check(check_evictions(evictions, before_pods, drained))
    # The drain's own count, across every disruption, is what the cluster saw.
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
    return {"nodes_drained": len(drained)}


async def disrupted_installs(
    scenario: Scenario,
    prefix: str,
    *,
    servers: int,
    times: int,
    action: Action,
    figures: str = "kills",
) -> dict[str, Any]:
    """`servers` LLM servers (whose class needs the inference stack installed first, once per
    cluster) and a notebook deployed at once on a fresh GPU cluster under disruptions: all run,
    the prerequisite is installed once, nothing is created twice, no GPU is held twice; deleting
    them and the cluster leaves nothing. A round whose installs finish before the disruptions are
    spent is followed by another, on another fresh cluster."""
    stack = scenario.stack
    rounds: list[dict[str, Any]] = []
    done = 0
    while done < times:
        cluster = f"{prefix}-{len(rounds)}"
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
            Disruptor(
                scenario, progress, times=times - done, units=40 * len(bodies), action=action
            ) as disruptor,
        ):
            accepted = await asyncio.gather(*(stack.api.deploy(body) for body in bodies))
            workflows.extend(answer["workflowId"] for answer in accepted)
            for name in names:
                status = await workspace_in(scenario, name, {"Running", "Failed"}, timeout=600)
                assert status["phase"] == "Running", scenario.failure(repr(status))
        done += len(disruptor.done)
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
        rounds.append({"cluster": cluster, "workspaces": len(names), **disruptor.figures(figures)})
    return {"rounds": rounds, figures: done}


async def disrupted_paths(
    scenario: Scenario,
    prefix: str,
    *,
    times: int,
    units: int,
    action: Action,
    figures: str,
    jitter: float = 1.0,
) -> dict[str, Any]:
    """The cluster path and the workspace path side by side under `times` disruptions: every
    operation finishes, evictions, hosts and creates once, nothing left."""
    stack = scenario.stack
    window = await scenario.records_mark()
    workflows: list[str] = []
    progress = combined(records_progress(stack), history_progress(stack.client, workflows))
    clusters = (f"{prefix}-c", f"{prefix}-w")
    async with Disruptor(
        scenario, progress, times=times, units=units, action=action, jitter=jitter
    ) as disruptor:
        paths = await asyncio.gather(
            cluster_path(scenario, clusters[0], workflows, beside=clusters[1]),
            workspace_path(scenario, clusters[1], workflows),
        )
    scenario.report(**disruptor.figures(figures), sent_again=stack.api.sent_again)
    scenario.report(disrupted_with=[d.what for d in disruptor.done])
    assert len(disruptor.done) >= times, scenario.failure(
        f"the operations finished after {len(disruptor.done)} of {times} {figures}"
    )
    records = await scenario.records_since(window)
    scenario.check(check_hosts(records["hosts"], owners=owners(*clusters)))
    resumed = f"{clusters[1]}-nb" if scenario.full else ""
    scenario.check(check_creates(records["objectsCreated"], reinstalled(resumed)))
    assert await leftovers(scenario) == []
    return {"cluster_path": paths[0], "workspace_path": paths[1]}
