"""Reliability on the production shape (`make stack`'s processes: `cluster.py`): faults in every
kind of process, each during the operations the dev-server scenarios use, checked with the same
invariants and reported with the same figures.

- **Temporal history killed** (SIGKILL, started again after up to 2 s) during a drain and during
  workspace installs that share a prerequisite: every pod evicted once, the prerequisite installed
  once, hosts claimed and released once, nothing created twice.
- **Temporal matching killed** (SIGKILL, started again) and **PostgreSQL restarted** (a fast
  shutdown, SIGINT, or an immediate one, SIGQUIT, as a crash: recovery on start; down up to 3 s)
  during the cluster path and the workspace path side by side: every operation finishes, nothing
  duplicated or left.
- **One of two workers killed mid-activity**: the worker that runs one of a drain's activities
  (the workflow's pending activity names it) is killed and stays down; its activity times out
  (10 s heartbeat) and is retried on the other worker; the drain finishes with every pod evicted
  once.
- **The leading watcher killed**: the other takes the Lease over (the time it took is reported),
  a node going NotReady reaches the cluster's status through it (without a watcher it never
  does), an operation in flight finishes.
- **An API replica killed in the middle of a request**: the request is held inside the replica
  once it reached Temporal (both workers stopped with SIGSTOP, so the answer the replica waits
  for cannot come: a create's quota admission, an update's outcome), the replica is killed, the
  caller sees its connection drop and sends the request again to the other replica with the same
  Idempotency-Key: the first request's workflow is answered (`repeated`), one workflow run,
  everything created once.
- **Last, the secrets scan** of every history and log of this stack, as `test_secrets.py` scans
  the dev server's.

Fast versions (one disruption each, small operations) run in `make test`; full ones in
`make reliability`.
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError

from models.quota import QuotaLedgerInput, quota_workflow_id
from tests.reliability.cluster import ClusterStack
from tests.reliability.disrupted import (
    disrupted_drain,
    disrupted_installs,
    disrupted_paths,
    owners,
)
from tests.reliability.invariants import check_creates, check_evictions, check_hosts
from tests.reliability.paths import CPU, place_pods
from tests.reliability.scenario import (
    Action,
    Planted,
    Scenario,
    Size,
    child_nodes,
    child_pods,
    cluster_gone,
    deployment,
    finished_operation,
    leftovers,
    pod_refs,
    ready_cluster,
    scan_for_secrets,
    workspace_gone,
    workspace_in,
)
from tests.reliability.stack import LOCATION, ORGANIZATION, TASK_QUEUE, poll
from workflows.quota import QUOTA

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SIZES = [
    pytest.param(Size.FAST, id="fast"),
    pytest.param(Size.FULL, id="full", marks=[pytest.mark.reliability, pytest.mark.timeout(1200)]),
]
WATCHER_REACTION_DEADLINE = 60.0
"""A node's NotReady reaches the cluster's status through the watcher in milliseconds (bench
`watcher_reaction`); without one, never (nothing else signals it between operations): a minute
tells the two apart on the most loaded machine."""


def cluster_of(scenario: Scenario) -> ClusterStack:
    stack = scenario.stack
    assert isinstance(stack, ClusterStack)
    return stack


def restart_process(
    name: str, signals: tuple[signal.Signals, ...] = (signal.SIGKILL,), down: float = 2.0
) -> Action:
    """A disruption: stop `name` with one of `signals` (seeded), leave it down up to `down` s
    (seeded), start it again on the same ports and state."""

    async def action(scenario: Scenario) -> str:
        sig = scenario.rng.choice(signals)
        down_for = round(scenario.rng.uniform(0.0, down), 1)
        back = await cluster_of(scenario).restart(name, sig, down_for)
        return f"{sig.name} {name}, down {down_for} s, serving again after {back:.1f} s"

    return action


# --- Temporal's history service -------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
async def test_a_drain_survives_history_kills(cluster_scenario: Scenario, size: Size) -> None:
    scenario = cluster_scenario
    drained_nodes, per_node, kills = (8, 3, 3) if scenario.full else (2, 2, 1)
    drained = await disrupted_drain(
        scenario,
        f"hdrain-{size.value}",
        drained_nodes=drained_nodes,
        per_node=per_node,
        times=kills,
        action=restart_process("temporal-history"),
    )
    scenario.report(**drained, failovers=cluster_of(scenario).api.failovers)


@pytest.mark.parametrize("size", SIZES)
async def test_installs_survive_history_kills(cluster_scenario: Scenario, size: Size) -> None:
    scenario = cluster_scenario
    servers, kills = (3, 3) if scenario.full else (1, 1)
    installed = await disrupted_installs(
        scenario,
        f"hinstall-{size.value}",
        servers=servers,
        times=kills,
        action=restart_process("temporal-history"),
    )
    scenario.report(**installed, sent_again=scenario.stack.api.sent_again)


# --- Temporal's matching service and PostgreSQL ---------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
async def test_operations_survive_matching_kills(cluster_scenario: Scenario, size: Size) -> None:
    scenario = cluster_scenario
    paths = await disrupted_paths(
        scenario,
        f"matching-{size.value}",
        times=3 if scenario.full else 1,
        units=400 if scenario.full else 120,
        action=restart_process("temporal-matching", down=3.0),
        figures="kills",
    )
    scenario.report(**paths)


@pytest.mark.parametrize("size", SIZES)
async def test_operations_survive_postgresql_restarts(
    cluster_scenario: Scenario, size: Size
) -> None:
    scenario = cluster_scenario
    paths = await disrupted_paths(
        scenario,
        f"postgres-{size.value}",
        times=3 if scenario.full else 1,
        units=400 if scenario.full else 120,
        action=restart_process("postgresql", (signal.SIGINT, signal.SIGQUIT), down=3.0),
        figures="restarts",
    )
    scenario.report(**paths)


# --- One of two workers ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Busy:
    """A worker process running one of a workflow's activities."""

    worker: str
    activity: str


FINISHED = "finished"
"""What `busy_worker` answers once the operation has finished (nothing more to kill)."""


async def busy_worker(
    stack: ClusterStack, cluster: str, operation_id: str, *, other_than: str = ""
) -> Busy | str | None:
    """The worker process (other than `other_than`) running one of the cluster workflow's
    activities now; `FINISHED` once the operation has finished; None meanwhile."""
    try:
        described = await stack.client.get_workflow_handle(
            f"cluster/{ORGANIZATION}/{cluster}"
        ).describe(rpc_timeout=timedelta(seconds=5))
    except RPCError:
        return None
    for pending in described.raw_description.pending_activities:
        if pending.state != PendingActivityState.PENDING_ACTIVITY_STATE_STARTED:
            continue
        name = stack.worker_named(pending.last_worker_identity)
        if name is not None and name != other_than and stack.running(name):
            return Busy(name, pending.activity_type.name)
    status = await stack.api.cluster(cluster)
    done = {op["id"] for op in (status or {}).get("completedOperations", [])}
    return FINISHED if operation_id in done else None


async def taken_over(stack: ClusterStack, cluster: str, operation_id: str, killed: str) -> None:
    """Until a worker other than `killed` runs the drain's activities (the survivor takes the
    killed one's over once its heartbeat timed out), or the drain is over."""
    await poll(
        lambda: busy_worker(stack, cluster, operation_id, other_than=killed),
        lambda busy: busy is not None,
        what=f"the other worker taking {cluster}'s drain over",
        timeout=180,
        interval=0.2,
    )


async def drain_with_worker_kills(
    scenario: Scenario, cluster: str, *, drained_nodes: int, kills: int
) -> list[dict[str, Any]]:
    """One round: a drain of `drained_nodes` nodes whose pods take their time to go (a 30 s
    grace period: 6 s at the suite's pace), during which whichever worker runs one of its
    activities is killed (SIGKILL); after each kill but the round's last, once the other worker
    runs the drain's activities, the killed one starts again. Checked as every drain is; the
    kills it made (fewer than `kills` when the drain finished first)."""
    stack = cluster_of(scenario)
    window = await scenario.records_mark()
    await ready_cluster(
        scenario, cluster, [{"name": "cpu", "sku": CPU, "count": drained_nodes + 1}]
    )
    await place_pods(scenario, cluster, 2, grace_seconds=(30,))
    before_pods = pod_refs(deployment(cluster), await child_pods(stack, cluster))
    before_nodes = {node.metadata.name for node in await child_nodes(stack, cluster)}
    drain_window = await scenario.records_mark()
    accepted = await stack.api.scale(cluster, "cpu", 1)
    operation_id = accepted["operationId"]
    killed: list[dict[str, Any]] = []
    began = time.monotonic()
    while len(killed) < kills:
        found = await poll(
            lambda: busy_worker(stack, cluster, operation_id),
            lambda busy: busy is not None,
            what=f"a worker running one of {cluster}'s drain activities",
            interval=0.1,
        )
        if not isinstance(found, Busy):
            break  # the drain is over
        await stack.kill(found.worker)
        killed.append(
            {
                "cluster": cluster,
                "worker": found.worker,
                "activity": found.activity,
                "at": round(time.monotonic() - began, 1),
            }
        )
        await taken_over(stack, cluster, operation_id, found.worker)
        await stack.start(found.worker)
    operation = await finished_operation(scenario, cluster, operation_id, timeout=600)
    assert operation["state"] == "succeeded", scenario.failure(repr(operation))
    drained = before_nodes - {node.metadata.name for node in await child_nodes(stack, cluster)}
    assert len(drained) == drained_nodes, scenario.failure(f"drained {sorted(drained)}")
    records = await scenario.records_since(drain_window)
    evictions = [e for e in records["evictions"] if e["cluster"] == deployment(cluster)]
    scenario.check(check_evictions(evictions, before_pods, drained))
    assert await leftovers(scenario, clusters_alive=[cluster]) == []
    await cluster_gone(scenario, cluster)
    records = await scenario.records_since(window)
    scenario.check(check_hosts(records["hosts"], owners=owners(cluster)))
    scenario.check(check_creates(records["objectsCreated"]))
    assert await leftovers(scenario) == []
    return killed


@pytest.mark.parametrize("size", SIZES)
async def test_one_of_two_workers_killed_mid_activity(
    cluster_scenario: Scenario, size: Size
) -> None:
    """Drains during which the worker running one of their activities is killed and its
    activity is retried on the other; rounds on fresh clusters until the kills are spent."""
    scenario = cluster_scenario
    drained_nodes, kills = (6, 3) if scenario.full else (2, 1)
    killed: list[dict[str, Any]] = []
    rounds = 0
    while len(killed) < kills:
        killed += await drain_with_worker_kills(
            scenario,
            f"wkill-{size.value}-{rounds}",
            drained_nodes=drained_nodes,
            kills=kills - len(killed),
        )
        rounds += 1
    scenario.report(kills=len(killed), killed=killed, rounds=rounds)


# --- The leading watcher --------------------------------------------------------------------------


async def node_status(stack: ClusterStack, cluster: str, node: str) -> str:
    """The node's Kubernetes status as the cluster's status (through the API) shows it."""
    status = await stack.api.cluster(cluster)
    for pool in (status or {}).get("nodePools", []):
        for entry in pool.get("nodes", []):
            if entry.get("name") == node:
                return str(entry.get("kubernetesStatus"))
    return "absent"


async def node_shown(
    stack: ClusterStack, cluster: str, node: str, ready: bool, *, timeout: float = 120
) -> float:
    """Until the cluster's status shows `node` Ready (or not); the seconds it took."""
    began = time.monotonic()
    await poll(
        lambda: node_status(stack, cluster, node),
        (lambda s: s == "Ready") if ready else (lambda s: s not in ("Ready", "absent")),
        what=f"{node} {'Ready' if ready else 'NotReady'} in {cluster}'s status",
        timeout=timeout,
        interval=0.1,
    )
    return time.monotonic() - began


async def lease_taken_by(stack: ClusterStack, watcher: str) -> float:
    """Until `watcher` holds the Lease; the seconds it took."""
    began = time.monotonic()
    await poll(
        stack.lease_holder,
        lambda holder: stack.watcher_named(holder) == watcher,
        what=f"{watcher} taking the Lease over",
        timeout=120,
        interval=0.2,
    )
    return time.monotonic() - began


async def stop_kubelets(stack: ClusterStack, nodes: list[str], cluster: str) -> None:
    config = await stack.faults()
    config["kubelets_stopped"] = [{"node": node, "cluster": deployment(cluster)} for node in nodes]
    config["seed"] = None
    await stack.set_faults(config)


@pytest.mark.parametrize("size", SIZES)
async def test_the_leading_watcher_killed(cluster_scenario: Scenario, size: Size) -> None:
    """Kill (SIGKILL) the watcher holding the Lease while a scale-up runs: the other takes over,
    the scale-up finishes, and a node going NotReady then reaches the cluster's status through
    the new leader. The killed one starts again as the standby; the full size does it 3 times,
    each time to whichever leads."""
    scenario = cluster_scenario
    stack = cluster_of(scenario)
    rounds = 3 if scenario.full else 1
    cluster = f"watch-{size.value}"
    window = await scenario.records_mark()
    await ready_cluster(scenario, cluster, [{"name": "cpu", "sku": CPU, "count": 1}])
    figures: list[dict[str, Any]] = []
    for index in range(rounds):
        holder = await poll(stack.lease_holder, lambda h: bool(h), what="a watcher leading")
        leader = stack.watcher_named(holder)
        assert leader is not None, scenario.failure(f"the Lease is held by {holder!r}")
        standby = next(name for name in stack.local.names("watcher") if name != leader)
        accepted = await stack.api.scale(cluster, "cpu", index + 2)
        await stack.kill(leader)
        takeover = await lease_taken_by(stack, standby)
        operation = await finished_operation(scenario, cluster, accepted["operationId"])
        assert operation["state"] == "succeeded", scenario.failure(repr(operation))
        node = sorted(n.metadata.name for n in await child_nodes(stack, cluster))[-1]
        await node_shown(stack, cluster, node, ready=True)
        await stop_kubelets(stack, [node], cluster)
        reaction = await node_shown(
            stack, cluster, node, ready=False, timeout=WATCHER_REACTION_DEADLINE
        )
        await stop_kubelets(stack, [], cluster)
        await node_shown(stack, cluster, node, ready=True)
        await stack.start(leader)
        figures.append(
            {
                "killed": leader,
                "took_over": standby,
                "takeover_seconds": round(takeover, 1),
                "not_ready_shown_seconds": round(reaction, 2),
            }
        )
    await cluster_gone(scenario, cluster)
    records = await scenario.records_since(window)
    scenario.check(check_hosts(records["hosts"], owners=owners(cluster)))
    scenario.check(check_creates(records["objectsCreated"]))
    assert await leftovers(scenario) == []
    scenario.report(rounds=figures, kills=len(figures))


# --- An API replica -------------------------------------------------------------------------------


async def workers_paused(stack: ClusterStack, paused: bool) -> None:
    for name in stack.local.names("worker"):
        process = stack.local.children[name].process
        assert process is not None, f"{name} never started"
        await asyncio.to_thread(process.send_signal, signal.SIGSTOP if paused else signal.SIGCONT)


async def task_waiting(stack: ClusterStack, workflow_id: str) -> bool:
    """True once the (idle) workflow has a workflow task waiting for a worker: an update that
    reached Temporal schedules one."""
    try:
        described = await stack.client.get_workflow_handle(workflow_id).describe(
            rpc_timeout=timedelta(seconds=5)
        )
    except RPCError:
        return False
    return described.raw_description.HasField("pending_workflow_task")


async def ledger_idle(stack: ClusterStack) -> None:
    """The organization's quota ledger running, with no workflow task waiting: from then on, a
    task waiting on it is a request that reached it (a create's admission)."""
    await stack.client.start_workflow(
        QUOTA.workflow_type,
        QuotaLedgerInput(organization=ORGANIZATION),
        id=quota_workflow_id(ORGANIZATION),
        task_queue=TASK_QUEUE,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    ledger = quota_workflow_id(ORGANIZATION)
    await poll(lambda: task_waiting(stack, ledger), lambda waiting: not waiting, what="ledger idle")


Reached = Callable[[ClusterStack, str], Awaitable[bool]]
Send = Callable[[httpx.AsyncClient], Awaitable[httpx.Response]]


def sending(method: str, path: str, key: str, body: dict[str, Any] | None = None) -> Send:
    """`method path` (with `body`) and the Idempotency-Key `key`, to the replica given."""

    async def send(http: httpx.AsyncClient) -> httpx.Response:
        return await http.request(method, path, json=body, headers={"Idempotency-Key": key})

    return send


async def killed_mid_request(
    scenario: Scenario, replica: int, send: Send, reached: Reached, workflow_id: str
) -> dict[str, Any]:
    """Send a request to API replica `replica` and kill that replica once the request reached
    Temporal (`reached`) and before the replica answers: both workers are paused meanwhile, so
    the answer the replica waits for (a create's quota admission, an update's outcome)
    cannot come. The caller's view of it."""
    stack = cluster_of(scenario)
    name = stack.local.names("api")[replica]
    await workers_paused(stack, True)
    try:
        request = asyncio.create_task(send(stack.api.replicas[replica]))
        await poll(
            lambda: reached(stack, workflow_id),
            lambda seen: seen or request.done(),
            what=f"{name}'s request reaching {workflow_id}",
            interval=0.02,
        )
        assert not request.done(), scenario.failure(
            f"{name} answered before it could be killed: {request.result()!r}"
        )
        await stack.kill(name)
        outcome = (await asyncio.gather(request, return_exceptions=True))[0]
    finally:
        await workers_paused(stack, False)
    assert isinstance(outcome, httpx.TransportError), scenario.failure(
        f"the caller got {outcome!r}, not a dropped connection"
    )
    back = await stack.start(name)
    return {"replica": name, "caller_saw": type(outcome).__name__, "back_seconds": round(back, 1)}


async def workspace_deleted(scenario: Scenario, name: str) -> None:
    api = scenario.stack.api
    await poll(lambda: api.workspace(name), lambda w: w is None, what=f"{name} deleted")


async def runs_of(stack: ClusterStack, workflow_id: str) -> int:
    return len([run async for run in stack.client.list_workflows(f"WorkflowId = '{workflow_id}'")])


def operations_of(status: dict[str, Any], kind: str) -> list[str]:
    everything = [
        *(status.get("completedOperations") or []),
        *(status.get("queuedOperations") or []),
        *([status["currentOperation"]] if status.get("currentOperation") else []),
    ]
    return [op["id"] for op in everything if (op.get("request") or {}).get("kind") == kind]


@pytest.mark.parametrize("size", SIZES)
async def test_an_api_replica_killed_mid_request(cluster_scenario: Scenario, size: Size) -> None:
    """A cluster's create (and in full, a workspace's suspend and delete: updates) whose replica
    is killed in the middle of the request; each sent again by the caller, to the other replica
    with its Idempotency-Key, is answered as the first: one workflow run, one operation, hosts
    and objects once."""
    scenario = cluster_scenario
    stack = cluster_of(scenario)
    cluster = f"apikill-{size.value}"
    workflow_id = f"cluster/{ORGANIZATION}/{cluster}"
    window = await scenario.records_mark()
    requests: list[dict[str, Any]] = []

    key = f"create-{cluster}-{uuid.uuid4().hex[:6]}"
    body = {
        "name": cluster,
        "locationId": LOCATION,
        "nodePools": [{"name": "cpu", "sku": CPU, "count": 1}],
    }
    # A create is admitted by the organization's quota ledger (an update) before its workflow
    # starts: killed while the admission waits on the paused workers, the replica has reached
    # Temporal and not answered; sent again, the admission and the start are the first's.
    await ledger_idle(stack)
    seen = await killed_mid_request(
        scenario,
        0,
        sending("POST", "/v1/kubernetes/clusters", key, body),
        task_waiting,
        quota_workflow_id(ORGANIZATION),
    )
    again = await stack.api.request(
        "POST", "/v1/kubernetes/clusters", json=body, idempotency_key=key
    )
    # The first request died before its start (`repeated` false): the admission it left on the
    # ledger is the second's, held once.
    quota = await stack.api.request("GET", "/v1/quota")
    held = [h for h in quota["holders"] if h["holder"] == workflow_id]
    assert len(held) == 1, scenario.failure(repr(quota))
    assert held[0]["holding"]["clusters"] == 1, scenario.failure(repr(quota))
    requests.append({"request": "create cluster", **seen, "repeated": again["repeated"]})
    status = await poll(
        lambda: stack.api.cluster(cluster),
        lambda c: c is not None and c["status"] in ("ready", "failed"),
        what=f"{cluster} ready",
    )
    assert status is not None
    assert status["status"] == "ready", scenario.failure(repr(status))
    assert operations_of(status, "create_cluster") == [again["operationId"]]
    await scenario.planted.add_cluster(stack, cluster)

    if scenario.full:
        # Updates of workspaces: a suspend (replica 1) and a delete (replica 0), each reaching
        # the workflow and killed there. (A cluster's updates read its status first, which the
        # paused workers could not answer: their request would not get as far as Temporal.)
        for replica, action in ((1, "suspend"), (0, "delete")):
            name = f"{cluster}-{action}"
            await stack.api.deploy(devbox(name, cluster))
            await workspace_in(scenario, name, {"Running"})
            key = f"{action}-{name}-{uuid.uuid4().hex[:6]}"
            method, path = (
                ("DELETE", f"/v1/workspaces/{name}")
                if action == "delete"
                else ("POST", f"/v1/workspaces/{name}/{action}")
            )
            seen = await killed_mid_request(
                scenario,
                replica,
                sending(method, path, key),
                task_waiting,
                f"workspace/{ORGANIZATION}/{name}",
            )
            # Documented: a delete is repeatable while it runs, 404 once it completed (the first
            # request's update, which reached the workflow, may have finished it already).
            answer = await stack.api.send(method, path, idempotency_key=key)
            allowed = (202, 404) if action == "delete" else (202,)
            assert answer.status_code in allowed, scenario.failure(
                f"{answer.status_code} {answer.text}"
            )
            requests.append(
                {"request": f"{action} {name}", **seen, "answered_again": answer.status_code}
            )
            if action == "suspend":
                await workspace_in(scenario, name, {"Suspended"})
                await workspace_gone(scenario, name)
            else:
                await workspace_deleted(scenario, name)
            assert await runs_of(stack, f"workspace/{ORGANIZATION}/{name}") == 1

    await cluster_gone(scenario, cluster)
    records = await scenario.records_since(window)
    scenario.check(check_hosts(records["hosts"], owners=owners(cluster)))
    scenario.check(check_creates(records["objectsCreated"]))
    assert await runs_of(stack, workflow_id) == 1
    assert await leftovers(scenario) == []
    scenario.report(requests=requests, failovers=stack.api.failovers)


DEMO_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl test@colony"
)


def devbox(name: str, cluster: str) -> dict[str, Any]:
    """A CPU dev box's deploy body."""
    return {
        "name": name,
        "class": "colony-devbox-1-0-0",
        "cluster": cluster,
        "values": {"ssh": {"authorizedKeys": DEMO_KEY}},
    }


# --- Last: the secrets scan -----------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
async def test_no_cluster_history_holds_a_secret(
    cluster_scenario: Scenario, planted: Planted, size: Size
) -> None:
    """After the scenarios above (a file's tests run in order): every history on the production
    shape and every log of its processes (PostgreSQL's and Temporal's too), as the dev server's
    are scanned (`test_secrets.py`)."""
    await scan_for_secrets(cluster_scenario, planted)
