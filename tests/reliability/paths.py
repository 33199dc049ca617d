"""The operations the scenarios put under stress, each checked as it goes: bare pods to drain,
and the two paths every disruption is tried on, the cluster's (create, scale up, scale down with
a drain, delete) and the workspaces' (deploy with a prerequisite, suspend, resume, delete)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes import client as kube

from infra.kube import close_client
from tests.reliability.invariants import check_evictions
from tests.reliability.scenario import (
    Scenario,
    child_nodes,
    child_pods,
    cluster_gone,
    deployment,
    finished_operation,
    leftovers,
    llm_server,
    notebook,
    pod_refs,
    ready_cluster,
    workspace_gone,
    workspace_in,
)
from tests.reliability.stack import ORGANIZATION, call, poll

CPU = {"cpuSku": "cpu-32c-256g"}


async def place_pods(
    scenario: Scenario, cluster: str, per_node: int, *, grace_seconds: Sequence[int] = (1, 10, 30)
) -> list[str]:
    """`per_node` bare pods on every node (some refused eviction a few times, as a budget would),
    each with a termination grace period drawn from `grace_seconds`; their names."""
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
                            "terminationGracePeriodSeconds": scenario.rng.choice(grace_seconds),
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
    await stack.add_eviction_faults(refused)
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
        bodies.append(llm_server(scenario, f"{cluster}-llm", cluster))
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
