"""How soon a cluster's workflow goes on once its ClusterDeployment turns Ready, and once its node
joins: with the watcher, and with the workflow's own waiting alone.

`python -m bench.ready_reaction [--trials N]` starts a private stack twice (dev server, the sim
with its default timing, so a control plane takes a few seconds to come up, and `worker.py`; the
first time with `watcher.py` too, the second without), and creates N clusters of one GPU node
through `colonyctl`. For each it polls, every 10 ms, the management cluster for the
ClusterDeployment's Ready condition and the child cluster for the node's Ready condition, and
takes from the workflow's history the time it went on: the first activity it scheduled after its
last wait on that thing (`await_cluster_deployment`, `await_nodes`). Reaction = that event's
server time minus when the bench saw the object turn Ready (one clock: everything is on this
machine). A node that was Ready before the workflow began waiting for it is not counted (nothing
to react to).

While an operation runs, waits are heartbeating activities that look again every second
(`activities/management.py` POLL_CAP): that bounds the reaction; the watcher's signals matter
between operations (`bench.watcher_reaction`). Results in `bench/results/ready_reaction.{json,md}`
(`bench.record`).
"""

from __future__ import annotations

import asyncio
import base64
import subprocess
import time
from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes import client
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from bench.command import Command, Option
from bench.polling import first_time
from bench.record import Headline, distribution, publish, scale
from bench.stack import Stack, colonyctl, private_stack
from infra.kube import api_client_from_dict, api_client_from_file, close_client
from models.activity_api import ActivityName

NAMESPACE = "kcm-system"

COMMAND = Command(
    "ready_reaction",
    __doc__,
    Option("--trials", type=int, default=scale(10, 1)),
    Option("--time-scale", default="1", help="the sim's --time-scale"),
)


def _ready(conditions: list[dict[str, Any]] | None) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions or [])


async def _first_ready(read: Any, timeout: float) -> float | None:
    """Wall-clock time `read()` (conditions, or None while absent) first shows Ready=True."""

    async def ready() -> bool:
        try:
            return _ready(await asyncio.to_thread(read))
        except client.ApiException:
            return False

    return await first_time(ready, timeout, clock=time.time)


def _went_on_after(events: list[Any], waited: str) -> tuple[float, float] | None:
    """(when the first wait on `waited` was scheduled, when the workflow scheduled its next other
    activity after the last one), as epoch seconds from the history."""
    scheduled = [
        (e.event_time.ToDatetime().timestamp(), e.activity_task_scheduled_event_attributes)
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    waits = [i for i, (_, a) in enumerate(scheduled) if a.activity_type.name == waited]
    if not waits:
        return None
    after = [t for t, a in scheduled[waits[-1] + 1 :] if a.activity_type.name != waited]
    return (scheduled[waits[0]][0], after[0]) if after else None


async def one_cluster(stack: Stack, temporal: Client, name: str) -> dict[str, float | None]:
    management = api_client_from_file(Path(stack.env["COLONY_MANAGEMENT_KUBECONFIG"]))
    custom = client.CustomObjectsApi(management)
    core = client.CoreV1Api(management)
    child: client.ApiClient | None = None

    def deployment_conditions() -> list[dict[str, Any]] | None:
        obj = cast(
            dict[str, Any],
            custom.get_namespaced_custom_object(
                "k0rdent.mirantis.com", "v1beta1", NAMESPACE, "clusterdeployments", name
            ),
        )
        conditions: list[dict[str, Any]] | None = (obj.get("status") or {}).get("conditions")
        return conditions

    def node_conditions() -> list[dict[str, Any]] | None:
        nonlocal child
        if child is None:
            secret = core.read_namespaced_secret(f"{name}-kubeconfig", NAMESPACE)
            data = secret.data or {}
            child = api_client_from_dict(yaml.safe_load(base64.b64decode(data["value"])))
        nodes = client.CoreV1Api(child).list_node().items
        if not nodes or nodes[0].status is None:
            return None
        return [c.to_dict() for c in nodes[0].status.conditions or []]

    create = subprocess.Popen(  # noqa: ASYNC220 (runs beside the polls; waited for in a thread)
        [colonyctl(), "cluster", "create", name, "--location-id", "fra1",
         "--node-pool", "name=gpu,count=1,gpuModelId=h100-80gb", "--wait", "--timeout", "180"],
        env=stack.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deployment_ready, node_ready = await asyncio.gather(
            _first_ready(deployment_conditions, 180), _first_ready(node_conditions, 180)
        )
        _, err = await asyncio.to_thread(create.communicate, timeout=240)
        if create.returncode != 0:
            raise RuntimeError(f"create {name} exited {create.returncode}: {err.decode()}")
    finally:
        if child is not None:
            close_client(child)
        close_client(management)
    events = [
        e async for e in temporal.get_workflow_handle(f"cluster/{name}").fetch_history_events()
    ]
    result: dict[str, float | None] = {"deployment": None, "node": None}
    went_on = _went_on_after(events, ActivityName.AWAIT_CLUSTER_DEPLOYMENT.value)
    if went_on and deployment_ready is not None and deployment_ready >= went_on[0]:
        result["deployment"] = went_on[1] - deployment_ready
    went_on = _went_on_after(events, ActivityName.AWAIT_NODES.value)
    if went_on and node_ready is not None and node_ready >= went_on[0]:
        result["node"] = went_on[1] - node_ready
    done = stack.ctl("cluster", "delete", name, "--wait", "--timeout", "120")
    if done.returncode != 0:
        raise RuntimeError(f"delete {name} exited {done.returncode}: {done.stderr}")
    return result


async def measure(stack: Stack, trials: int, label: str) -> dict[str, dict[str, float | int]]:
    temporal = await Client.connect(
        stack.env["TEMPORAL_ADDRESS"], data_converter=pydantic_data_converter
    )
    deployments: list[float] = []
    nodes: list[float] = []
    for trial in range(trials):
        seen = await one_cluster(stack, temporal, f"ready-{label}-{trial}")
        if seen["deployment"] is not None:
            deployments.append(seen["deployment"])
        if seen["node"] is not None:
            nodes.append(seen["node"])
    return {"deployment": distribution(deployments), "node": distribution(nodes)}


def main(argv: list[str] | None = None) -> int:
    args = COMMAND.parse(argv)
    record = COMMAND.report(
        "ClusterDeployment and node Ready, to the workflow going on: watcher and fallback", args
    )
    results: dict[str, dict[str, dict[str, float | int]]] = {}
    for watcher in (True, False):
        label = "watcher" if watcher else "fallback"
        with private_stack(watcher=watcher, sim_timing=["--time-scale", args.time_scale]) as stack:
            results[label] = asyncio.run(measure(stack, args.trials, label))
    for label, found in results.items():
        for what, title in (("deployment", "ClusterDeployment Ready"), ("node", "node Ready")):
            seen = found[what]
            record.add(
                Headline(f"{what}_{label}_p50_ms", f"{title} -> goes on, {label}: median",
                         seen.get("p50_ms"), "ms"),
                Headline(f"{what}_{label}_max_ms", f"{title} -> goes on, {label}: max",
                         seen.get("max_ms"), "ms"),
            )  # fmt: skip
    record.figures = results
    record.body = (
        f"{args.trials} clusters of one GPU node created through `colonyctl` on each of two "
        f"private stacks (the sim at `--time-scale {args.time_scale}`), one with `watcher.py` "
        "and one without. From the bench seeing the object Ready (polled every 10 ms) to the "
        "workflow scheduling its next activity (server time in the history). During an "
        "operation waits are heartbeating activities that look again every second, so the "
        "watcher changes little here; it matters between operations (`watcher_reaction`)."
    )
    publish(record)
    return 0


if __name__ == "__main__":
    main()
