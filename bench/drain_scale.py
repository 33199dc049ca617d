"""Drain at scale on the real stack: a pool of 100 nodes with 10 pods each scaled to 1, with the
pool's drain parallelism at 2, 10 and 20.

`python -m bench.drain_scale [--nodes 100] [--pods 9] [--parallelism 2,10,20] [--grace 30]` starts
a private stack (`bench.stack`: dev server, the sim at its real-time scale, `--time-scale 1`, so
pods take their grace period to go, and `worker.py` as its own process) with
`bench/inventory.yaml`'s hosts. Per parallelism P:

1. `colonyctl cluster create drain-pP --node-pool name=cpu,count=N,cpuSku=...,drainParallelism=P`
   (the pool setting; the scale-down below does not name one);
2. `--pods` pods on every node of the child cluster (bound to it, `terminationGracePeriodSeconds`
   `--grace`), beside the DaemonSet pod the sim's child clusters run on every node (cilium): 10
   pods a node, one of them a DaemonSet's, which the drain leaves;
3. `colonyctl node-pool scale drain-pP cpu --count 1 --wait`, measured from the operation's own
   start and finish times;
4. then the cluster is deleted (its hosts go back for the next P).

Reported per P: wall time against the ideal (the removed nodes in rounds of P, each round one
grace period as the sim runs it: `grace * time-scale / 30` seconds, so 1 s for 30 s), each node's
drain and removal (the activities' times from the cluster's history), evictions issued at the
emulator (`POST pods/eviction`, from the sim's request counter) against the pods that had to go,
Kubernetes API requests per node drained, and the history events the operation added to the
cluster's workflow. The PNG shows how many nodes drained at once over each operation.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import statistics
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from bench.command import Command, Option
from bench.history import event_counts, event_time
from bench.record import Headline, Report, progress, publish, pyplot, quick, scale
from bench.stack import INVENTORY, Stack, Usage, private_stack, requests_grown
from bench.waves import usage_over
from infra.kube import api_client_from_dict, api_client_from_file, close_client
from models.activity_api import ActivityName
from models.cluster import cluster_workflow_id

LOCATION = "bench1"
CPU_SKU = "cpu-128c-2t"
NAMESPACE = "bench"
TIME_SCALE = 1.0
TARGET_OVER_IDEAL = 1.5
"""Wall time over the ideal, at most, at every parallelism (issue 30)."""
SIM_GRACE_SCALE = TIME_SCALE / 30
"""The sim's kubelet waits grace * time_scale / 30 before a terminating pod is gone
(`sim/controllers/kubelet.py`)."""
NODE_STEPS = (
    ActivityName.DRAIN_NODE,
    ActivityName.REMOVE_CLUSTER_MACHINES,
    ActivityName.DELETE_NODE,
)

COMMAND = Command(
    "drain_scale",
    __doc__,
    Option("--nodes", type=int, default=scale(100, 6)),
    Option("--pods", type=int, default=9, help="pods per node besides the DaemonSet's"),
    Option("--parallelism", default="2,5" if quick() else "2,10,20"),
    Option("--grace", type=int, default=30, help="terminationGracePeriodSeconds"),
)


def child_api(stack: Stack, cluster: str) -> client.ApiClient:
    """An official-client ApiClient on the cluster's child, from its kubeconfig Secret."""
    management = api_client_from_file(Path(stack.env["COLONY_MANAGEMENT_KUBECONFIG"]))
    try:
        secret = client.CoreV1Api(management).read_namespaced_secret(
            f"{cluster}-kubeconfig", "kcm-system"
        )
    finally:
        close_client(management)
    data = secret.data or {}
    return api_client_from_dict(yaml.safe_load(base64.b64decode(data["value"])))


def pod(name: str, node: str, grace: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": "drain-bench"}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": grace,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ],
        },
    }


def load_pods(core: Any, nodes: list[str], per_node: int, grace: int) -> None:
    """`per_node` pods bound to each node, eight requests in flight."""
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    bodies = [pod(f"w-{n}-{k}", n, grace) for n in nodes for k in range(per_node)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda body: core.create_namespaced_pod(NAMESPACE, body), bodies))


def pods_by_node(core: Any) -> dict[str, dict[str, int]]:
    """Per node: its pods, and how many belong to a DaemonSet."""
    found: dict[str, dict[str, int]] = {}
    for item in core.list_pod_for_all_namespaces().items:
        node = item.spec.node_name if item.spec else None
        if not node:
            continue
        entry = found.setdefault(node, {"pods": 0, "daemonset": 0})
        entry["pods"] += 1
        owners = item.metadata.owner_references or [] if item.metadata else []
        if any(o.kind == "DaemonSet" for o in owners):
            entry["daemonset"] += 1
    return found


def activity_spans(events: Sequence[Any]) -> dict[str, list[tuple[datetime, datetime]]]:
    """Per activity type: (scheduled, closed) of each call among `events`."""
    scheduled: dict[int, tuple[str, datetime]] = {}
    spans: dict[str, list[tuple[datetime, datetime]]] = {}
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            scheduled[event.event_id] = (name, event_time(event))
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            begun = scheduled.get(event.activity_task_completed_event_attributes.scheduled_event_id)
            if begun is not None:
                spans.setdefault(begun[0], []).append((begun[1], event_time(event)))
    return spans


def most_at_once(spans: list[tuple[datetime, datetime]]) -> int:
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    now = most = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def concurrency_curve(
    spans: list[tuple[datetime, datetime]], origin: datetime
) -> tuple[list[float], list[int]]:
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    times, levels, now = [0.0], [0], 0
    for moment, step in edges:
        now += step
        times.append((moment - origin).total_seconds())
        levels.append(now)
    return times, levels


@dataclass(frozen=True)
class ScaleDown:
    """What one scale-down to one node did, as observed around it."""

    operation: dict[str, Any]
    """The finished operation, as `colonyctl node-pool scale -o json` shows it."""
    names: list[str]
    remaining: set[str]
    before_pods: dict[str, dict[str, int]]
    requests: dict[str, dict[str, int]]
    usage: tuple[dict[str, Usage], dict[str, Usage]]
    """Each process's CPU and memory before and after the scale-down."""
    events: list[Any]
    """The history events the operation added to the cluster's workflow."""
    run_changed: bool


async def ctl_or_fail(stack: Stack, what: str, *argv: str, timeout: float) -> str:
    """Run `colonyctl argv` (from a thread); its output, or an error naming `what`."""
    done = await asyncio.to_thread(stack.ctl, *argv, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{what} exited {done.returncode}: {done.stderr}")
    return done.stdout


async def scale_down(
    stack: Stack, temporal: Client, cluster: str, per_node: int, grace: int, parallelism: int
) -> ScaleDown:
    """Load every node of `cluster` with pods, scale its pool to one node, and observe it."""
    api = await asyncio.to_thread(child_api, stack, cluster)
    core: Any = client.CoreV1Api(api)  # its generated hints make every field optional
    try:
        names = sorted(n.metadata.name for n in (await asyncio.to_thread(core.list_node)).items)
        await asyncio.to_thread(load_pods, core, names, per_node, grace)
        before_pods = await asyncio.to_thread(pods_by_node, core)
        handle = temporal.get_workflow_handle(cluster_workflow_id(cluster))
        described = await handle.describe()
        run_id, history_before = described.run_id, described.history_length
        requests_before = await asyncio.to_thread(stack.sim_requests)
        usage_before = stack.usage()
        progress(
            f"P={parallelism}: {sum(e['pods'] for e in before_pods.values())} pods; scaling to 1"
        )
        scaled = await ctl_or_fail(
            stack, f"scale {cluster}", "node-pool", "scale", cluster, "cpu", "--count", "1",
            "--wait", "--timeout", "1800", "-o", "json", timeout=1900,
        )  # fmt: skip
        usage_after = stack.usage()
        requests = requests_grown(requests_before, await asyncio.to_thread(stack.sim_requests))
        remaining = {n.metadata.name for n in (await asyncio.to_thread(core.list_node)).items}
    finally:
        close_client(api)
    history = await temporal.get_workflow_handle(
        cluster_workflow_id(cluster), run_id=run_id
    ).fetch_history()
    return ScaleDown(
        operation=json.loads(scaled),
        names=names,
        remaining=remaining,
        before_pods=before_pods,
        requests=requests,
        usage=(usage_before, usage_after),
        events=list(history.events)[history_before:],
        run_changed=(await handle.describe()).run_id != run_id,
    )


def figures(seen: ScaleDown, parallelism: int, grace: int) -> dict[str, Any]:
    """One row of the report: a scale-down's times, evictions, requests, cores and events."""
    operation, before_pods, requests = seen.operation, seen.before_pods, seen.requests
    spans = activity_spans(seen.events)
    removed = [n for n in seen.names if n not in seen.remaining]
    per_removed = max(len(removed), 1)
    started = datetime.fromisoformat(operation["startedAt"])
    finished = datetime.fromisoformat(operation["finishedAt"])
    wall = (finished - started).total_seconds()
    grace_seconds = grace * SIM_GRACE_SCALE
    ideal = math.ceil(len(removed) / parallelism) * grace_seconds
    child = {
        k: v for name, counts in requests.items() if name != "management" for k, v in counts.items()
    }
    child_total = sum(sum(c.values()) for name, c in requests.items() if name != "management")
    management_total = sum(requests.get("management", {}).values())
    drains = spans.get(ActivityName.DRAIN_NODE.value, [])
    origin = min(s for s, _ in drains) if drains else started
    return {
        "parallelism": parallelism,
        "operation": str(operation["id"]),
        "state": operation.get("state"),
        "nodes_removed": len(removed),
        "pods_before": sum(e["pods"] for e in before_pods.values()),
        "daemonset_pods_on_removed_nodes": sum(before_pods[n]["daemonset"] for n in removed),
        "pods_to_evict": sum(before_pods[n]["pods"] - before_pods[n]["daemonset"] for n in removed),
        "evictions_issued": child.get("create pods/eviction", 0),
        "wall_seconds": round(wall, 1),
        "ideal_seconds": round(ideal, 1),
        "wall_over_ideal": round(wall / ideal, 2) if ideal else None,
        "grace_seconds_real": grace_seconds,
        "most_draining_at_once": most_at_once(drains),
        "per_node_seconds": {
            name.value: round(
                statistics.median((e - s).total_seconds() for s, e in spans[name.value]), 2
            )
            for name in NODE_STEPS
            if spans.get(name.value)
        },
        "requests_per_node": {
            "total": round((child_total + management_total) / per_removed, 1),
            "child": round(child_total / per_removed, 1),
            "management": round(management_total / per_removed, 1),
            "by_verb": {
                k: round(v / per_removed, 2)
                for k, v in sorted(child.items(), key=lambda i: -i[1])[:8]
            },
        },
        "cores": {
            name: used["cores"]
            for name, used in usage_over(*seen.usage, wall).items()
            if name in ("worker", "sim", "temporal")
        },
        "history_events": len(seen.events),
        "history_events_by_type": event_counts(seen.events),
        "history_run_changed": seen.run_changed,
        "draining_curve": concurrency_curve(drains, origin),
    }


async def drain_once(
    stack: Stack, temporal: Client, nodes: int, per_node: int, parallelism: int, grace: int
) -> dict[str, Any]:
    """Create a pool of `nodes` at `parallelism`, scale it to one node, delete the cluster."""
    cluster = f"drain-p{parallelism}"
    progress(f"P={parallelism}: creating {cluster} with {nodes} nodes")
    await ctl_or_fail(
        stack, f"cluster create {cluster}",
        "cluster", "create", cluster, "--location-id", LOCATION, "--node-pool",
        f"name=cpu,count={nodes},cpuSku={CPU_SKU},drainParallelism={parallelism}",
        "--wait", "--timeout", "900", timeout=960,
    )  # fmt: skip
    result = figures(
        await scale_down(stack, temporal, cluster, per_node, grace, parallelism), parallelism, grace
    )
    progress(
        f"P={parallelism}: {result['nodes_removed']} nodes in {result['wall_seconds']:.1f} s "
        f"(ideal {result['ideal_seconds']:.0f} s), {result['evictions_issued']} evictions for "
        f"{result['pods_to_evict']} pods, {result['history_events']} events"
    )
    await ctl_or_fail(
        stack, f"cluster delete {cluster}",
        "cluster", "delete", cluster, "--wait", "--timeout", "600", timeout=660,
    )  # fmt: skip
    return result


def report(
    rows: list[dict[str, Any]], record: Report, nodes: int, per_node: int, grace: int
) -> Any:
    for row in rows:
        p = row["parallelism"]
        record.add(
            Headline(f"wall_p{p}", f"P={p}: wall time (ideal {row['ideal_seconds']:.0f} s)",
                     row["wall_seconds"], "s"),
            Headline(f"over_ideal_p{p}", f"P={p}: wall / ideal", row["wall_over_ideal"], "",
                     f"<= {TARGET_OVER_IDEAL}", row["wall_over_ideal"] is not None
                     and row["wall_over_ideal"] <= TARGET_OVER_IDEAL),
        )  # fmt: skip
    evictions = sum(r["evictions_issued"] for r in rows)
    pods = sum(r["pods_to_evict"] for r in rows)
    record.add(
        Headline("evictions_per_pod", "evictions issued per pod that had to go",
                 round(evictions / pods, 3) if pods else None, "", "1.0", evictions == pods),
        Headline("requests_per_node", "Kubernetes API requests per node drained and removed",
                 statistics.median(r["requests_per_node"]["total"] for r in rows)),
        Headline("events_per_operation",
                 f"history events of one scale-down of {rows[0]['nodes_removed']} nodes (median)",
                 statistics.median(r["history_events"] for r in rows)),
    )  # fmt: skip
    record.figures = {"nodes": nodes, "pods_per_node": per_node + 1, "grace": grace, "runs": rows}
    table = [
        "| drainParallelism | nodes removed | wall | ideal | wall / ideal | most draining at once "
        "| drain / remove machine / delete node, per node (median) | evictions / pods to evict "
        "| API requests per node | history events | cores used: worker / sim / temporal |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        steps = r["per_node_seconds"]
        table.append(
            f"| {r['parallelism']} | {r['nodes_removed']} | {r['wall_seconds']:.1f} s | "
            f"{r['ideal_seconds']:.0f} s | {r['wall_over_ideal']} | {r['most_draining_at_once']} | "
            f"{steps.get('drain_node', 0):.1f} / {steps.get('remove_cluster_machines', 0):.1f} / "
            f"{steps.get('delete_node', 0):.1f} s | {r['evictions_issued']} / {r['pods_to_evict']} "
            f"| {r['requests_per_node']['total']} | {r['history_events']} | "
            + " / ".join(f"{r['cores'].get(n, 0):.2f}" for n in ("worker", "sim", "temporal"))
            + " |"
        )
    first = rows[0]
    record.body = "\n".join(
        [
            f"A pool of {nodes} nodes (128-core CPU hosts), {per_node} pods bound to each plus the "
            "DaemonSet pod (cilium) every node of a sim child cluster runs: "
            f"{first['pods_before']} pods before the scale-down (coredns adds 2). Each pod has "
            f"`terminationGracePeriodSeconds: {grace}`, which the sim at `--time-scale "
            f"{TIME_SCALE:g}` honours as {first['grace_seconds_real']:g} s; the ideal is the "
            "removed nodes in rounds of drainParallelism, one grace period each. The pool's "
            "`drainParallelism` is the only parallelism given (the scale-down names none).",
            "",
            *table,
            "",
            "Per node, the drain (one heartbeating `drain_node` activity: evict every pod at "
            "once, then wait on a watch of the node's pods until the evicted ones are deleted, "
            "looking again after 1 s, 2 s, 4 s, then every 5 s at the latest) holds one of the "
            "drainParallelism slots; the machine's removal from the ClusterDeployment, the "
            "Node's deletion (waited for) and the host's release follow once the slot is free "
            "for the next node, with a bound of their own of the same size.",
            "",
            "Kubernetes API requests per node, most frequent (child cluster): "
            + ", ".join(f"`{k}` {v}" for k, v in first["requests_per_node"]["by_verb"].items())
            + ".",
            "",
            "History events the operation added, by type (drainParallelism "
            f"{first['parallelism']}): "
            + ", ".join(f"{k} {v}" for k, v in first["history_events_by_type"].items())
            + ".",
        ]
    )
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(9, 4.5))
    for r in rows:
        times, levels = r["draining_curve"]
        axis.step(times, levels, where="post", label=f"drainParallelism {r['parallelism']}")
    axis.set_xlabel("seconds since the first drain started")
    axis.set_ylabel("nodes draining at once")
    axis.set_title(f"scaling a {nodes}-node pool to 1")
    axis.grid(alpha=0.3)
    axis.legend()
    return figure


async def measure(
    nodes: int, per_node: int, parallelisms: list[int], grace: int
) -> list[dict[str, Any]]:
    with private_stack(
        inventory=INVENTORY, sim_timing=["--time-scale", f"{TIME_SCALE:g}"]
    ) as stack:
        temporal = await Client.connect(
            stack.env["TEMPORAL_ADDRESS"], data_converter=pydantic_data_converter
        )
        return [await drain_once(stack, temporal, nodes, per_node, p, grace) for p in parallelisms]


def main(argv: Sequence[str] | None = None) -> int:
    args = COMMAND.parse(argv)
    parallelisms = [int(p) for p in args.parallelism.split(",")]
    record = COMMAND.report("Drain at scale on the real stack", args)
    rows = asyncio.run(measure(args.nodes, args.pods, parallelisms, args.grace))
    figure = report(rows, record, args.nodes, args.pods, args.grace)
    publish(record, figure)
    return 0


if __name__ == "__main__":
    sys.exit(main())
