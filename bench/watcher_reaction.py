"""How long a cluster's status takes to show a node going NotReady, with the watcher and without.

`python -m bench.watcher_reaction [--trials N]` starts a private stack (dev server, sim with
instant timing, worker and watcher as separate processes, `bench.stack`), creates a cluster of two
nodes, and for each trial stops one node's kubelet through the sim's fault endpoint
(`kubelets_stopped`, as `sim.faults.FaultInjector.stop_kubelet`) and starts it again. Times are
measured from when the child cluster's API shows the node's Ready condition change (polled every
10 ms) to when the workflow's `status` query shows it (polled every 10 ms): the sim's own delay
(the node lifecycle's grace period) is not counted, Colony's reaction is.

Then the watcher process is stopped, the same fault is made, and the status is watched for
`--fallback-wait` seconds (the workflow only looks at nodes during an operation or on a `refresh`);
finally a `refresh` signal is sent by hand, and the time from that signal to the status is measured.
Results in `bench/results/watcher_reaction.{json,md}` (`bench.record`).
"""

from __future__ import annotations

import asyncio
import base64
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import yaml
from kubernetes import client
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from bench.command import Command, Option
from bench.polling import first_time
from bench.record import Headline, distribution, progress, publish, scale
from bench.stack import Stack, describe, private_stack
from infra.kube import api_client_from_dict, api_client_from_file, close_client
from models.signals import RefreshRequest
from workflows.cluster import CLUSTER as CLUSTER_WORKFLOW

CLUSTER = "reaction"

COMMAND = Command(
    "watcher_reaction",
    __doc__,
    Option("--trials", type=int, default=scale(10, 2)),
    Option("--fallback-wait", type=float, default=scale(10, 3)),
)


class World:
    """The stack's sim and Temporal, as the benchmark pokes and reads them."""

    def __init__(self, stack: Stack, temporal: Client) -> None:
        self.stack = stack
        self.temporal = temporal
        kubeconfig = Path(stack.env["COLONY_MANAGEMENT_KUBECONFIG"])
        self.management = api_client_from_file(kubeconfig)
        loaded = yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))
        self.server = loaded["clusters"][0]["cluster"]["server"]
        self.token = loaded["users"][0]["user"]["token"]
        secret = client.CoreV1Api(self.management).read_namespaced_secret(
            f"{CLUSTER}-kubeconfig", "kcm-system"
        )
        data = secret.data or {}
        self.child = api_client_from_dict(yaml.safe_load(base64.b64decode(data["value"])))

    def close(self) -> None:
        close_client(self.child)
        close_client(self.management)

    async def kubelets_stopped(self, nodes: list[str]) -> None:
        async with httpx.AsyncClient(verify=False) as http:  # the sim's own CA; loopback only
            current = (
                await http.get(
                    f"{self.server}/sim/v1/faults",
                    headers={"Authorization": f"Bearer {self.token}"},
                )
            ).json()
            current["kubelets_stopped"] = [{"node": n, "cluster": CLUSTER} for n in nodes]
            answer = await http.put(
                f"{self.server}/sim/v1/faults",
                json=current,
                headers={"Authorization": f"Bearer {self.token}"},
            )
            answer.raise_for_status()

    async def api_ready(self, node: str) -> str:
        read = await asyncio.to_thread(client.CoreV1Api(self.child).read_node, node)
        conditions = (read.status.conditions if read.status else None) or []
        return str(next(c.status for c in conditions if c.type == "Ready"))

    async def status_of(self, node: str) -> str:
        status: dict[str, Any] = await self.temporal.get_workflow_handle(
            f"cluster/{CLUSTER}"
        ).query(CLUSTER_WORKFLOW.status.name, result_type=dict)
        for pool in status["nodePools"]:
            for entry in pool["nodes"]:
                if entry["name"] == node:
                    return str(entry.get("kubernetesStatus"))
        return "absent"

    async def nodes(self) -> list[str]:
        status: dict[str, Any] = await self.temporal.get_workflow_handle(
            f"cluster/{CLUSTER}"
        ).query(CLUSTER_WORKFLOW.status.name, result_type=dict)
        return sorted(n["name"] for n in status["nodePools"][0]["nodes"])

    async def reaction(self, node: str, *, stop: bool, timeout: float = 30.0) -> float | None:
        """Seconds from the API showing the change to the status showing it (None: never)."""
        want_api = (lambda s: s != "True") if stop else (lambda s: s == "True")
        want_status = (lambda s: s != "Ready") if stop else (lambda s: s == "Ready")
        await self.kubelets_stopped([node] if stop else [])
        seen_api = asyncio.create_task(
            first_time(lambda: _holds(self.api_ready(node), want_api), timeout)
        )
        seen_status = asyncio.create_task(
            first_time(lambda: _holds(self.status_of(node), want_status), timeout)
        )
        at_api, at_status = await seen_api, await seen_status
        if at_api is None:
            raise RuntimeError(f"the sim never showed {node} {'stopped' if stop else 'back'}")
        return None if at_status is None else max(0.0, at_status - at_api)


async def _holds(value: Awaitable[str], want: Callable[[str], bool]) -> bool:
    return want(await value)


async def measure(stack: Stack, trials: int, fallback_wait: float) -> dict[str, Any]:
    temporal = await Client.connect(
        stack.env["TEMPORAL_ADDRESS"], data_converter=pydantic_data_converter
    )
    await asyncio.to_thread(stack.create_cluster, CLUSTER, 2)
    world = World(stack, temporal)
    try:
        victim = (await world.nodes())[0]
        # The watcher has told the workflow about the nodes once (ADDED) before we start.
        await first_time(lambda: _holds(world.status_of(victim), lambda s: s == "Ready"), 30)
        down: list[float] = []
        up: list[float] = []
        for _ in range(trials):
            went = await world.reaction(victim, stop=True)
            came = await world.reaction(victim, stop=False)
            if went is None or came is None:
                raise RuntimeError("the watcher missed a change")
            down.append(went)
            up.append(came)
        # Fallback alone: no watcher.
        watcher = stack.processes["watcher"]
        watcher.send_signal(signal.SIGTERM)
        watcher.wait(timeout=30)
        unseen = await world.reaction(victim, stop=True, timeout=fallback_wait)
        sent = time.monotonic()
        await temporal.get_workflow_handle(f"cluster/{CLUSTER}").signal(
            CLUSTER_WORKFLOW.refresh.name,
            RefreshRequest(request_id=f"bench-{sent}", reason="bench"),
        )
        shown = await first_time(
            lambda: _holds(world.status_of(victim), lambda s: s != "Ready"), 30
        )
        return {
            "watcher_not_ready": distribution(down),
            "watcher_ready_again": distribution(up),
            "fallback_without_refresh_ms": None if unseen is None else round(unseen * 1000),
            "fallback_wait_seconds": fallback_wait,
            "fallback_after_manual_refresh_ms": (
                None if shown is None else round((shown - sent) * 1000)
            ),
        }
    finally:
        world.close()


def main(argv: list[str] | None = None) -> int:
    args = COMMAND.parse(argv)
    record = COMMAND.report(
        "A node going NotReady, to the cluster's status: watcher and fallback", args
    )
    with private_stack(watcher=True) as stack:
        progress(f"stack: {describe(stack)}")
        found = asyncio.run(measure(stack, args.trials, args.fallback_wait))
    down, up = found["watcher_not_ready"], found["watcher_ready_again"]
    unseen, refreshed = (
        found["fallback_without_refresh_ms"],
        found["fallback_after_manual_refresh_ms"],
    )
    record.add(
        Headline("not_ready_p50_ms", "watcher: NotReady shown, median", down["p50_ms"], "ms"),
        Headline("not_ready_max_ms", "watcher: NotReady shown, max", down["max_ms"], "ms"),
        Headline("ready_again_p50_ms", "watcher: Ready again shown, median", up["p50_ms"], "ms"),
        Headline("fallback_ms", f"no watcher: shown within {args.fallback_wait:g} s",
                 "not shown" if unseen is None else unseen, "" if unseen is None else "ms"),
        Headline("refresh_ms", "no watcher: after a refresh signal by hand", refreshed, "ms"),
    )  # fmt: skip
    record.figures = found
    record.body = (
        f"{args.trials} trials: a node's kubelet stopped and started through the sim's faults; "
        "from the child's API showing the change (polled every 10 ms) to the cluster workflow's "
        "`status` query showing it (polled every 10 ms). Without a watcher a cluster looks at "
        "its nodes during an operation or on `refresh`."
    )
    publish(record)
    return 0


if __name__ == "__main__":
    main()
