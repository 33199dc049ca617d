"""The watcher against the simulated world and a Temporal dev server running the real worker.

One world (instant timing) and one worker serve the module; each test creates its own cluster
through `colonyctl` and runs its own watchers in their own Colony namespace (so their Lease and
state ConfigMap are theirs). What the tests rely on in `ClusterWorkflow`: a `node_event` is recorded
on the status at once, and a `refresh` while idle makes it read its nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner, Result

from infra.kubeapi import KubeApi
from infra.ports import free_port
from models.signals import NodeEvent
from sim.world import SimWorld
from starter.cli import app, normalize_argv
from tests.helpers import eventually, unique
from tests.simenv import (
    call,
    child_api,
    close_client,
    colony_env,
    host_provider,
    management_api,
    started_world,
)
from watching.leader import LeaseTiming
from watching.mapping import Signal
from watching.service import Watcher, WatcherConfig
from watching.signals import TemporalSignals
from watching.state import STATE_CONFIGMAP
from worker import build_worker
from workflows.cluster import CLUSTER

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
FAST_LEASE = LeaseTiming(lease_duration=2.0, renew_deadline=1.5, retry_period=0.25)
"""Seconds, so that a takeover happens within a test's patience (client-go's are 15/10/2)."""


@dataclass
class Stack:
    world: SimWorld
    env: dict[str, str]
    management: client.ApiClient
    dev_env: WorkflowEnvironment

    async def ctl(self, *args: str) -> Result:
        result = await asyncio.to_thread(
            CliRunner().invoke, app, normalize_argv(args), env=self.env
        )
        assert result.exit_code == 0, f"colonyctl {args}: {result.stderr}{result.exception!r}"
        return result

    async def status(self, cluster: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(
            (await self.ctl("cluster", "get", cluster, "-o", "json")).stdout
        )
        return data

    async def create_cluster(self, name: str, count: int = 2) -> list[str]:
        await self.ctl(
            "cluster", "create", name, "--location-id", "fra1",
            "--node-pool", f"name=gpu,count={count},gpuModelId=h100-80gb",
            "--wait", "--timeout", "90",
        )  # fmt: skip
        return sorted(n["name"] for n in (await self.status(name))["nodePools"][0]["nodes"])


class RecordingSignals:
    """Temporal signals, recorded per watcher (which watcher sent what, and when)."""

    def __init__(self, stack: Stack, log: list[tuple[str, Signal]], who: str) -> None:
        self._temporal = TemporalSignals(stack.dev_env.client)
        self._log = log
        self._who = who

    async def send(self, signal: Signal) -> bool:
        delivered = await self._temporal.send(signal)
        self._log.append((self._who, signal))
        return delivered


@dataclass
class Watchers:
    """Watcher processes of one test, sharing one Colony namespace."""

    stack: Stack
    namespace: str = field(default_factory=lambda: unique("colony-system"))
    sent: list[tuple[str, Signal]] = field(default_factory=list)
    leading: dict[str, bool] = field(default_factory=dict)
    most_leading_at_once: int = 0
    running: dict[str, tuple[Watcher, asyncio.Task[None], KubeApi]] = field(default_factory=dict)

    def start(self, who: str, *, watch_timeout_seconds: int = 300) -> Watcher:
        api = KubeApi.from_kubeconfig(self.stack.world.management_kubeconfig_path)
        watcher = Watcher(
            api,
            RecordingSignals(self.stack, self.sent, who),
            WatcherConfig(
                identity=who,
                system_namespace=self.namespace,
                lease=FAST_LEASE,
                watch_timeout_seconds=watch_timeout_seconds,
            ),
        )

        def changed(leading: bool) -> None:
            self.leading[who] = leading
            self.most_leading_at_once = max(self.most_leading_at_once, sum(self.leading.values()))

        task = asyncio.create_task(watcher.run(on_leading=changed))
        self.running[who] = (watcher, task, api)
        return watcher

    async def stop(self, who: str, *, crash: bool = False) -> None:
        watcher, task, api = self.running.pop(who)
        if crash and watcher.elector is not None:
            # A killed process releases nothing: the standby must wait for the Lease to expire.
            async def no_release() -> None:
                return None

            watcher.elector.release = no_release  # type: ignore[method-assign]
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await api.aclose()

    async def stop_all(self) -> None:
        for who in list(self.running):
            await self.stop(who)

    def node_events(self, who: str | None = None) -> list[NodeEvent]:
        return [
            s.payload
            for sender, s in self.sent
            if (who is None or sender == who) and isinstance(s.payload, NodeEvent)
        ]


@pytest.fixture(scope="module")
async def stack(
    dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    task_queue = unique("watch")
    async with started_world(tmp_path_factory.mktemp("sim")) as world:
        management = management_api(world)
        async with (
            host_provider(world) as http,
            build_worker(dev_env.client, task_queue, management, http) as worker,
            worker,
        ):
            env = colony_env(
                world,
                TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
                TEMPORAL_NAMESPACE=dev_env.client.namespace,
                COLONY_TASK_QUEUE=task_queue,
            )
            yield Stack(world, env, management, dev_env)
        close_client(management)


@pytest.fixture
async def watchers(stack: Stack) -> AsyncIterator[Watchers]:
    group = Watchers(stack)
    try:
        yield group
    finally:
        await group.stop_all()
        stack.world.faults.clear()


@pytest.fixture(autouse=True)
def _no_faults(stack: Stack) -> Iterator[None]:
    stack.world.faults.clear()
    yield
    stack.world.faults.clear()


def node_status(status: dict[str, Any], node: str) -> str:
    return next(
        str(n.get("kubernetesStatus")) for n in status["nodePools"][0]["nodes"] if n["name"] == node
    )


async def child_ready(stack: Stack, cluster: str, node: str) -> str:
    api = await child_api(stack.management, cluster)
    try:
        read = await call(client.CoreV1Api(api).read_node, node)
        return next(c.status for c in read.status.conditions if c.type == "Ready")
    finally:
        close_client(api)


async def test_a_node_that_stops_shows_on_the_status_within_seconds(
    stack: Stack, watchers: Watchers
) -> None:
    name = unique("watched")
    nodes = await stack.create_cluster(name)
    watcher = watchers.start("watcher-a")
    # Once the stream is up, the watcher has told the workflow about every node (ADDED).
    await eventually(
        lambda: _async(len({e.node for e in watchers.node_events()} & set(nodes))),
        until=lambda n: n == 2,
        timeout=30,
        what="the nodes' ADDED events",
    )
    victim = nodes[0]
    started = time.monotonic()
    stack.world.faults.stop_kubelet(victim, cluster=name)

    async def victim_status() -> dict[str, Any]:
        return await stack.status(name)

    status = await eventually(
        victim_status,
        until=lambda s: node_status(s, victim) != "Ready" and s["nodePools"][0]["readyCount"] == 1,
        timeout=20,
        interval=0.1,
        what="the stopped node on the cluster's status",
    )
    elapsed = time.monotonic() - started
    # The sim marks the node after its (scaled) grace period; the watcher adds well under a second.
    assert elapsed < 10, elapsed
    # The Ready condition is Unknown ("Kubelet stopped posting node status."), as the signal says.
    assert node_status(status, victim) in ("NotReady", "Unknown")
    event = [e for e in watchers.node_events() if e.node == victim][-1]
    assert event.ready_status == "Unknown"
    assert event.request_id.startswith(f"node/{name}/")
    # Back: the kubelet posts Ready again, and so does the status.
    stack.world.faults.start_kubelet(victim, cluster=name)
    await eventually(
        victim_status,
        until=lambda s: s["nodePools"][0]["readyCount"] == 2,
        timeout=20,
        interval=0.1,
        what="the node Ready again",
    )
    assert watcher.relists == 0
    await stack.ctl("cluster", "delete", name, "--wait", "--timeout", "90")


async def test_a_restarted_watcher_resumes_without_missing_events(
    stack: Stack, watchers: Watchers
) -> None:
    name = unique("resume")
    nodes = await stack.create_cluster(name)
    watchers.start("first")
    await eventually(
        lambda: _async(len(watchers.node_events("first"))), until=lambda n: n >= 2, timeout=30
    )
    await watchers.stop("first")  # flushes the state and releases the Lease
    state = await call(
        client.CoreV1Api(stack.management).read_namespaced_config_map,
        STATE_CONFIGMAP,
        watchers.namespace,
    )
    assert any(key.startswith("nodes.") for key in state.data), state.data

    # While no watcher runs, a node stops.
    victim = nodes[1]
    stack.world.faults.stop_kubelet(victim, cluster=name)
    await eventually(
        lambda: child_ready(stack, name, victim), until=lambda s: s == "Unknown", timeout=20
    )
    assert node_status(await stack.status(name), victim) == "Ready"  # nobody told the workflow

    second = watchers.start("second")
    status = await eventually(
        lambda: stack.status(name),
        until=lambda s: node_status(s, victim) != "Ready",
        timeout=20,
        interval=0.1,
        what="the change made while no watcher ran",
    )
    assert status["nodePools"][0]["readyCount"] == 1
    # Resumed from the saved resourceVersion: no relist, and only what changed was sent (the
    # unchanged node's ADDED is not sent again).
    assert second.relists == 0
    resumed = watchers.node_events("second")
    assert {e.node for e in resumed} == {victim}, resumed
    await stack.ctl("cluster", "delete", name, "--wait", "--timeout", "90")


async def test_two_watchers_one_signals_and_the_other_takes_over(
    stack: Stack, watchers: Watchers
) -> None:
    name = unique("ha")
    nodes = await stack.create_cluster(name)
    watchers.start("alpha")
    await eventually(lambda: _async(watchers.leading.get("alpha", False)), timeout=10)
    watchers.start("beta")
    await eventually(
        lambda: _async(len(watchers.node_events("alpha"))), until=lambda n: n >= 2, timeout=30
    )
    stack.world.faults.stop_kubelet(nodes[0], cluster=name)
    await eventually(
        lambda: stack.status(name), until=lambda s: node_status(s, nodes[0]) != "Ready", timeout=20
    )
    assert watchers.node_events("beta") == [], "the standby signalled"
    assert not watchers.leading.get("beta", False)

    # The leader dies without releasing its Lease: the standby takes over once it expires.
    died = time.monotonic()
    await watchers.stop("alpha", crash=True)
    await eventually(lambda: _async(watchers.leading.get("beta", False)), timeout=15)
    takeover = time.monotonic() - died
    assert takeover >= FAST_LEASE.lease_duration * 0.9, takeover
    stack.world.faults.start_kubelet(nodes[0], cluster=name)
    await eventually(
        lambda: stack.status(name),
        until=lambda s: s["nodePools"][0]["readyCount"] == 2,
        timeout=20,
        what="the change seen by the new leader",
    )
    assert any(
        e.node == nodes[0] and e.ready_status == "True" for e in watchers.node_events("beta")
    )
    assert watchers.most_leading_at_once == 1
    lease = await call(
        client.CoordinationV1Api(stack.management).read_namespaced_lease,
        "colony-watcher",
        watchers.namespace,
    )
    assert lease.spec.holder_identity == "beta"
    assert lease.spec.lease_transitions == 1
    await stack.ctl("cluster", "delete", name, "--wait", "--timeout", "90")


async def test_410_gone_relists_and_asks_the_workflow_to_refresh(
    stack: Stack, watchers: Watchers
) -> None:
    name = unique("gone")
    await stack.create_cluster(name, count=1)
    # Short watches, so the stream asks again soon; the next ask is answered 410 Gone.
    watcher = watchers.start("relister", watch_timeout_seconds=1)
    await eventually(
        lambda: _async(len(watchers.node_events())), until=lambda n: n >= 1, timeout=30
    )
    # The watch's next ask, not the worker's own list of the nodes (which may come first).
    stack.world.faults.fail_next(410, target=name, path="/api/v1/nodes?watch=1", method="GET")
    await eventually(lambda: _async(watcher.relists), until=lambda n: n == 1, timeout=20)
    refreshes = await eventually(
        lambda: _async(
            [
                s
                for _, s in watchers.sent
                if s.name == CLUSTER.refresh.name and s.request_id.startswith("relist/nodes.")
            ]
        ),
        timeout=10,
        what="a refresh after the relist",
    )
    assert refreshes[0].workflow_id == f"cluster/{name}"
    await stack.ctl("cluster", "delete", name, "--wait", "--timeout", "90")


async def test_signalling_a_deleted_cluster_is_not_an_error(stack: Stack) -> None:
    signals = TemporalSignals(stack.dev_env.client)
    gone = Signal(
        "cluster/never-existed",
        CLUSTER.node_event.name,
        NodeEvent(request_id="node/x/u/1", node="n"),
    )
    assert await signals.send(gone) is False


async def _async(value: Any) -> Any:
    return value


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = sample.name + (
                "{" + ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items())) + "}"
                if sample.labels
                else ""
            )
            values[key] = sample.value
    return values


async def test_worker_process_with_the_watcher_inside(stack: Stack) -> None:
    """`python worker.py` with COLONY_WATCHER_IN_WORKER=1 and COLONY_METRICS_PORT: the process
    a small deployment runs, signals included, seen from its metrics endpoint."""
    task_queue = unique("inworker")
    namespace = unique("colony-system")
    port = free_port()
    env = {
        **os.environ,
        **stack.env,
        "COLONY_TASK_QUEUE": task_queue,
        "COLONY_WATCHER_IN_WORKER": "1",
        "COLONY_SYSTEM_NAMESPACE": namespace,
        "COLONY_WATCHER_ID": "worker-1",
        "COLONY_METRICS_PORT": str(port),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "worker.py", cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        metrics = await eventually(
            lambda: asyncio.to_thread(_scrape_or_empty, port),
            until=lambda m: m.get("colony_watcher_leader") == 1.0,
            timeout=30,
            what="the in-worker watcher leading",
        )
        assert any(name.startswith("temporal_") for name in metrics)
        ctl_stack = Stack(
            stack.world,
            {**stack.env, "COLONY_TASK_QUEUE": task_queue},
            stack.management,
            stack.dev_env,
        )
        name = unique("inworker")
        nodes = await ctl_stack.create_cluster(name, count=1)
        stack.world.faults.stop_kubelet(nodes[0], cluster=name)
        await eventually(
            lambda: ctl_stack.status(name),
            until=lambda s: s["nodePools"][0]["readyCount"] == 0,
            timeout=20,
            what="the stopped node, through the watcher in the worker",
        )
        metrics = await asyncio.to_thread(scrape, port)
        assert metrics["colony_watcher_signals_total{outcome=sent,signal=node_event}"] >= 2
        assert metrics["colony_host_claims_total{outcome=claimed}"] >= 1
        stack.world.faults.clear()
        await ctl_stack.ctl("cluster", "delete", name, "--wait", "--timeout", "90")
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode == 0, output.decode()[-3000:]
    lease = await call(
        client.CoordinationV1Api(stack.management).read_namespaced_lease,
        "colony-watcher",
        namespace,
    )
    assert lease.spec.holder_identity in ("", None), "released on a clean stop"


def _scrape_or_empty(port: int) -> dict[str, float]:
    try:
        return scrape(port)
    except OSError:
        return {}


async def test_a_lost_node_and_the_clusters_own_objects(stack: Stack, watchers: Watchers) -> None:
    name = unique("lost")
    nodes = await stack.create_cluster(name)
    watchers.start("watcher")
    await eventually(
        lambda: _async(len(watchers.node_events())), until=lambda n: n >= 2, timeout=30
    )
    # The machine vanishes: its Node is deleted, the status says so.
    stack.world.faults.lose_node(nodes[0], cluster=name)
    status = await eventually(
        lambda: stack.status(name),
        until=lambda s: node_status(s, nodes[0]) == "NotFound",
        timeout=20,
        what="the lost node on the status",
    )
    assert status["nodePools"][0]["readyCount"] == 1
    assert any(e.node == nodes[0] and e.type.value == "DELETED" for e in watchers.node_events())

    # What Colony owns is followed: the cluster's ClusterDeployment, seen when the watcher
    # started, became a refresh of its workflow (which acts on one: it looks at its nodes).
    refreshed = await eventually(
        lambda: _async(
            [
                s
                for _, s in watchers.sent
                if s.request_id.startswith("ClusterDeployment/")
                and s.workflow_id == f"cluster/{name}"
            ]
        ),
        timeout=20,
        what="a refresh for the ClusterDeployment",
    )
    assert refreshed[0].name == CLUSTER.refresh.name
    # No signal goes to a workflow that would do nothing with it (a workspace's ServiceSet is
    # not followed at all).
    assert {s.name for _, s in watchers.sent} <= {CLUSTER.refresh.name, CLUSTER.node_event.name}
    stack.world.faults.clear()
    await stack.ctl("cluster", "delete", name, "--wait", "--timeout", "90")
