"""What every reliability scenario is made of: its seed and report, the worker killer, the GPU
sampler, the ledger's order, the secrets planted, and the leftovers a teardown must not leave.

Everything here asks the stack's surfaces (the API, the sim's records and Kubernetes APIs, the
Temporal client with Colony's models), never a process's memory.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import enum
import json
import random
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import urllib3
import yaml
from kubernetes import client as kube
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from infra.kube import close_client
from models.capacity import CapacityAnswer, Decision
from models.cluster import cluster_deployment_name
from models.workspace_api import CapacityLedgerStatus, CapacityMessage, CapacityMessageKind
from tests.helpers import history_text
from tests.reliability.invariants import Check, GpuSample, PodGpus, PodRef
from tests.reliability.stack import KCM_NAMESPACE, ORGANIZATION, Stack, call, poll
from workflows.capacity import CAPACITY
from workflows.capacity.workflow import CapacityLedgerWorkflow

FIGURES: list[dict[str, Any]] = []
"""Every scenario's report, in the order they ran (printed at the end of the session)."""

CAPACITY_ANSWER_SIGNAL = "capacity_answer"
GPU_RESOURCE = "nvidia.com/gpu"


class Size(enum.Enum):
    FAST = "fast"
    FULL = "full"


def deployment(cluster: str) -> str:
    """The ClusterDeployment (and child cluster) name of one of the suite's clusters."""
    return cluster_deployment_name(cluster, ORGANIZATION)


# --- Secrets -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Secret:
    kind: str
    """What it is: `notebook password`, `admin token`..."""
    of: str = ""
    """Whose: the workspace, the cluster ("" for the stack's own)."""


@dataclass
class Planted:
    """Secret values no workflow history may hold: what the suite planted and what it came across
    (credentials of the host provider, the API, the management and every child cluster)."""

    values: dict[str, Secret] = field(default_factory=dict)
    controls: set[str] = field(default_factory=set)
    """Values that are no secret and that the histories do hold, inside payloads only (an LLM
    server's model): the scan must find them, or it is not reading what it should."""

    def add(self, kind: str, value: str, of: str = "") -> None:
        if value and len(value) >= 8:
            self.values[value] = Secret(kind, of)

    def add_kubeconfig(self, kind: str, kubeconfig: dict[str, Any], of: str = "") -> None:
        for user in kubeconfig.get("users") or []:
            credentials = user.get("user") or {}
            self.add(f"{kind} token", str(credentials.get("token") or ""), of)
            self.add(f"{kind} client key", str(credentials.get("client-key-data") or ""), of)

    def add_stack(self, stack: Stack) -> None:
        self.add("host provider API key", stack.hostprovider_key)
        self.add("Colony API key", stack.api_key)
        self.add("Colony API key's secret part", stack.api_key.rsplit("_", 1)[-1])
        kubeconfig = yaml.safe_load((stack.workdir / "sim" / "management.kubeconfig").read_text())
        self.add_kubeconfig("management cluster", kubeconfig)

    async def add_catalog_control(self, stack: Stack) -> None:
        """A shipped class's description: the catalog's workflow carries it in its input, a
        payload, from the worker's start on."""
        classes = await stack.api.request("GET", "/v1/workspace-classes")
        self.controls.add(str(classes["items"][0]["description"]))

    async def add_cluster(self, stack: Stack, cluster: str, deployment_name: str = "") -> None:
        """The cluster's credentials: its admin kubeconfig Secret and a user's kubeconfig (the
        API's, for the suite's clusters)."""
        secret = await call(
            kube.CoreV1Api(stack.management).read_namespaced_secret,
            f"{deployment_name or deployment(cluster)}-kubeconfig",
            KCM_NAMESPACE,
        )
        raw = str(secret.data["value"])
        self.add("kubeconfig Secret (base64)", raw, cluster)
        self.add_kubeconfig("child admin", yaml.safe_load(base64.b64decode(raw)), cluster)
        if not deployment_name:
            self.add_kubeconfig("child user", await stack.api.kubeconfig(cluster), cluster)

    def kinds(self) -> dict[str, int]:
        return dict(Counter(secret.kind for secret in self.values.values()))


# --- The scenario --------------------------------------------------------------------------------


@dataclass
class Scenario:
    """One scenario of the suite: its seed and generator, its stack, its report."""

    name: str
    nodeid: str
    seed: int
    size: Size
    stack: Stack
    planted: Planted
    rng: random.Random = field(init=False)
    figures: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.rng = random.Random(f"{self.seed}/{self.name}")

    @property
    def full(self) -> bool:
        return self.size is Size.FULL

    def repeat_command(self) -> str:
        """The command that runs this scenario again with the same seed (the same kill moments,
        fault draws and choices; the processes' timing is the machine's)."""
        flags = "--reliability " if self.full else ""
        return f".venv/bin/pytest {flags}'{self.nodeid}' --seed {self.seed}"

    def check(self, check: Check) -> None:
        """Record a check's figures; fail the scenario with its violations."""
        self.figures[check.name] = check.figures
        assert check.holds, self.failure(check.explain())

    def failure(self, message: str) -> str:
        return (
            f"{message}\nseed {self.seed}; repeat with: {self.repeat_command()}\n"
            f"{self.stack.describe_failure()}"
        )

    def report(self, **figures: Any) -> None:
        self.figures.update(figures)

    def summary(self, outcome: str) -> dict[str, Any]:
        return {
            "scenario": self.name,
            "seed": self.seed,
            "outcome": outcome,
            "seconds": round(time.monotonic() - self.started, 1),
            **self.figures,
        }

    async def records_since(self, seq: int) -> dict[str, Any]:
        return await self.stack.records(seq)

    async def records_mark(self) -> int:
        """The newest record's seq: where this scenario's window begins."""
        body = await self.stack.records(10**12)
        return int(body["next"])


# --- Killing the worker, restarting the server -------------------------------------------------


@dataclass
class Disruption:
    what: str
    at_progress: int
    gap: int
    jitter_ms: int
    seconds: float
    """Since the disruptor started."""
    back_in: float
    """Seconds until the stack served again (the next worker polled, the server answered)."""


Action = Callable[[Scenario], Awaitable[str]]


async def kill_worker(scenario: Scenario) -> str:
    """SIGKILL the worker; a new one starts at once."""
    await scenario.stack.kill_worker()
    return "kill -9 worker"


async def restart_temporal(scenario: Scenario) -> str:
    """Stop the dev server (SIGTERM or SIGKILL), leave it down a while (up to 5 s), start it
    again on the same port and SQLite database; both choices seeded."""
    sig = scenario.rng.choice([signal.SIGTERM, signal.SIGKILL])
    down_for = round(scenario.rng.uniform(0.0, 5.0), 1)
    await scenario.stack.restart_temporal(sig, down_for)
    return f"restart Temporal ({sig.name}, down {down_for} s)"


class Disruptor:
    """Disrupts the stack (`action`) at seeded moments of an operation's progress.

    After each disruption it draws a gap of progress units and a jitter; once `progress()` has
    grown by the gap (the stack did something: a record in the sim, an event in a history), it
    waits the jitter and acts. Gaps are drawn so that `times` of them fit in the `units` the
    operation is expected to make, so the disruptions spread over all of it, and each one comes
    after progress since the one before, so the stack always gets to take over.
    """

    def __init__(
        self,
        scenario: Scenario,
        progress: Callable[[], Awaitable[int]],
        *,
        times: int,
        units: int,
        action: Action = kill_worker,
        jitter: float = 0.5,
    ) -> None:
        self.scenario = scenario
        self.progress = progress
        self.times = times
        self.units = units
        self.action = action
        self.jitter = jitter
        self.done: list[Disruption] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Disruptor:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            task, self._task = self._task, None
            await task

    async def _pause(self, seconds: float) -> bool:
        """Wait `seconds`; False when stopped meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)
        return not self._stop.is_set()

    async def _run(self) -> None:
        rng = self.scenario.rng
        began = time.monotonic()
        start = await self.progress()
        while len(self.done) < self.times and not self._stop.is_set():
            armed = await self.progress()
            left = self.times - len(self.done)
            room = max(1, (self.units - (armed - start)) // (left + 1))
            gap = rng.randint(1, room)
            jitter = rng.uniform(0, self.jitter)
            while await self.progress() < armed + gap:
                if not await self._pause(0.05):
                    return
            if not await self._pause(jitter):
                return
            reached = await self.progress()
            acted_at = time.monotonic()
            what = await self.action(self.scenario)
            self.done.append(
                Disruption(
                    what=what,
                    at_progress=reached - start,
                    gap=gap,
                    jitter_ms=round(jitter * 1000),
                    seconds=round(acted_at - began, 1),
                    back_in=round(time.monotonic() - acted_at, 1),
                )
            )

    def figures(self, name: str = "kills") -> dict[str, Any]:
        return {
            name: len(self.done),
            f"{name}_at": [(d.at_progress, d.jitter_ms) for d in self.done],
            f"{name}_back_seconds_max": max((d.back_in for d in self.done), default=0),
        }


def records_progress(stack: Stack) -> Callable[[], Awaitable[int]]:
    """Progress as the sim's records count it: every create, eviction, host change."""

    async def progress() -> int:
        return int((await stack.records(10**12))["next"])

    return progress


def history_progress(
    temporal: Client, ids: Callable[[], Iterable[str]]
) -> Callable[[], Awaitable[int]]:
    """Progress as the histories of some workflows count it (runs that continued as new count
    with the length they reached)."""
    runs: dict[str, tuple[str, int]] = {}
    ended: dict[str, int] = {}

    async def progress() -> int:
        for workflow_id in list(ids):
            try:
                described = await temporal.get_workflow_handle(workflow_id).describe(
                    rpc_timeout=timedelta(seconds=5)
                )
            except RPCError:
                continue
            info = described.raw_description.workflow_execution_info
            run, length = info.execution.run_id, int(info.history_length)
            previous = runs.get(workflow_id)
            if previous is not None and previous[0] != run:
                ended[workflow_id] = ended.get(workflow_id, 0) + previous[1]
            runs[workflow_id] = (run, length)
        return sum(length for _, length in runs.values()) + sum(ended.values())

    return progress


def combined(*sources: Callable[[], Awaitable[int]]) -> Callable[[], Awaitable[int]]:
    async def progress() -> int:
        return sum([await source() for source in sources])

    return progress


# --- Clusters and workspaces through the API ------------------------------------------------------


async def ready_cluster(
    scenario: Scenario, name: str, pools: list[dict[str, Any]], *, timeout: float = 180
) -> dict[str, Any]:
    """Create a cluster through the API and wait until it is ready (failing if it fails)."""
    api = scenario.stack.api
    await api.create_cluster(name, pools)
    status = await poll(
        lambda: api.cluster(name),
        lambda c: c is not None and c["status"] in ("ready", "failed"),
        what=f"cluster {name} ready",
        timeout=timeout,
    )
    assert status is not None
    assert status["status"] == "ready", scenario.failure(repr(status))
    await scenario.planted.add_cluster(scenario.stack, name)
    return status


async def finished_operation(
    scenario: Scenario, cluster: str, operation_id: str, *, timeout: float = 300
) -> dict[str, Any]:
    """The cluster's operation once it finished (whatever its state)."""
    api = scenario.stack.api

    def finished(status: dict[str, Any] | None) -> bool:
        return any(op["id"] == operation_id for op in (status or {}).get("completedOperations", []))

    status = await poll(
        lambda: api.cluster(cluster), finished, what=f"{cluster} {operation_id}", timeout=timeout
    )
    assert status is not None
    return next(op for op in status["completedOperations"] if op["id"] == operation_id)


async def cluster_gone(scenario: Scenario, name: str, *, timeout: float = 180) -> None:
    api = scenario.stack.api
    await api.delete_cluster(name)
    await poll(
        lambda: api.cluster(name), lambda c: c is None, what=f"{name} deleted", timeout=timeout
    )


async def workspace_in(
    scenario: Scenario, name: str, phases: set[str], *, timeout: float = 180
) -> dict[str, Any]:
    api = scenario.stack.api
    status = await poll(
        lambda: api.workspace(name),
        lambda w: w is not None and w["phase"] in phases,
        what=f"workspace {name} in {sorted(phases)}",
        timeout=timeout,
    )
    assert status is not None
    return status


async def workspace_gone(scenario: Scenario, name: str, *, timeout: float = 180) -> None:
    api = scenario.stack.api
    await api.delete_workspace(name)
    await poll(
        lambda: api.workspace(name), lambda w: w is None, what=f"{name} deleted", timeout=timeout
    )


# --- Child clusters -------------------------------------------------------------------------------


async def child_pods(stack: Stack, cluster: str) -> list[Any]:
    admin = await stack.child_admin(deployment(cluster))
    try:
        listed = await call(kube.CoreV1Api(admin).list_pod_for_all_namespaces)
        return list(listed.items)
    finally:
        close_client(admin)


async def child_nodes(stack: Stack, cluster: str) -> list[Any]:
    admin = await stack.child_admin(deployment(cluster))
    try:
        return list((await call(kube.CoreV1Api(admin).list_node)).items)
    finally:
        close_client(admin)


def pod_refs(cluster: str, pods: Iterable[Any]) -> list[PodRef]:
    return [
        PodRef(
            cluster=cluster,
            namespace=pod.metadata.namespace,
            name=pod.metadata.name,
            uid=pod.metadata.uid,
            node=pod.spec.node_name or "",
            daemon_set=any(o.kind == "DaemonSet" for o in pod.metadata.owner_references or []),
        )
        for pod in pods
    ]


def gpus_requested(pod: Any) -> int:
    total = 0
    for container in pod.spec.containers or []:
        resources = container.resources
        wanted = (resources.limits or {}) if resources else {}
        total += int(wanted.get(GPU_RESOURCE, 0) or 0)
    return total


# --- The GPU ledger ------------------------------------------------------------------------------


async def the_ledger(scenario: Scenario, cluster: str) -> str:
    """The id of the cluster's running GPU ledger, once it answers."""
    found = await poll(
        lambda: find_ledger(scenario.stack.client, cluster),
        lambda ledger: ledger is not None,
        what=f"the GPU ledger of {cluster}",
    )
    assert found is not None
    return found


async def find_ledger(temporal: Client, cluster: str) -> str | None:
    """The id of the running GPU ledger of one of the suite's clusters, if it started."""
    async for execution in temporal.list_workflows(
        "WorkflowType = 'CapacityLedgerWorkflow' AND ExecutionStatus = 'Running'"
    ):
        try:
            status = await temporal.get_workflow_handle(execution.id).query(
                CapacityLedgerWorkflow.status, rpc_timeout=timedelta(seconds=5)
            )
        except RPCError:
            continue
        if status.cluster == deployment(cluster):
            return execution.id
    return None


async def ledger_order(temporal: Client, ledger_id: str) -> tuple[list[str], list[str]]:
    """From the ledger's histories (every run): the workspaces in the order their GPU requests
    arrived, and in the order it admitted them."""
    runs = [execution async for execution in temporal.list_workflows(f"WorkflowId = '{ledger_id}'")]
    runs.sort(key=lambda execution: execution.start_time)
    converter = temporal.data_converter
    arrivals: list[str] = []
    admissions: list[str] = []
    seen_requests: set[str] = set()
    seen_admissions: set[str] = set()
    for run in runs:
        handle = temporal.get_workflow_handle(ledger_id, run_id=run.run_id)
        async for event in handle.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
                attributes = event.workflow_execution_signaled_event_attributes
                if attributes.signal_name != CAPACITY.capacity.name:
                    continue
                [message] = await converter.decode(attributes.input.payloads, [CapacityMessage])
                request = message.request
                if (
                    message.kind is CapacityMessageKind.REQUEST
                    and request is not None
                    and request.request_id not in seen_requests
                ):
                    seen_requests.add(request.request_id)
                    arrivals.append(request.workspace)
            elif (
                event.event_type
                == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED
            ):
                attributes = event.signal_external_workflow_execution_initiated_event_attributes
                if attributes.signal_name != CAPACITY_ANSWER_SIGNAL:
                    continue
                [answer] = await converter.decode(attributes.input.payloads, [CapacityAnswer])
                if (
                    answer.decision is Decision.ADMITTED
                    and answer.request_id not in seen_admissions
                ):
                    seen_admissions.add(answer.request_id)
                    admissions.append(answer.workspace)
    return arrivals, admissions


class GpuSampler:
    """Samples a cluster's GPUs every `interval`: its ledger's holders and its child's pods."""

    def __init__(self, scenario: Scenario, cluster: str, *, interval: float = 0.5) -> None:
        self.scenario = scenario
        self.cluster = cluster
        self.interval = interval
        self.samples: list[GpuSample] = []
        self.ledger_unanswered = 0
        """Samples whose ledger query went unanswered (no worker just then, a server restarting):
        their pods are checked, their holders are not."""
        self.ledger_id: str | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> GpuSampler:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    async def _holders(self) -> list[tuple[str, int, tuple[str, ...]]] | None:
        temporal = self.scenario.stack.client
        if self.ledger_id is None:
            self.ledger_id = await find_ledger(temporal, self.cluster)
            if self.ledger_id is None:
                return []
        try:
            status: CapacityLedgerStatus = await temporal.get_workflow_handle(self.ledger_id).query(
                CapacityLedgerWorkflow.status, rpc_timeout=timedelta(seconds=3)
            )
        except RPCError:
            return None  # no worker to answer (one was just killed), or the server restarting
        return [(h.workspace, h.gpus, tuple(h.nodes)) for h in status.holders]

    async def sample(self) -> None:
        stack = self.scenario.stack
        holders, pods, nodes = await asyncio.gather(
            self._holders(), child_pods(stack, self.cluster), child_nodes(stack, self.cluster)
        )
        if holders is None:
            self.ledger_unanswered += 1
            holders = []
        self.samples.append(
            GpuSample(
                at=time.monotonic() - self.scenario.started,
                node_gpus={
                    node.metadata.name: int((node.status.allocatable or {}).get(GPU_RESOURCE, 0))
                    for node in nodes
                },
                holders=holders,
                pods=[
                    PodGpus(
                        namespace=pod.metadata.namespace,
                        name=pod.metadata.name,
                        node=pod.spec.node_name or "",
                        gpus=gpus_requested(pod),
                        phase=pod.status.phase or "",
                        terminating=pod.metadata.deletion_timestamp is not None,
                        reason=pod.status.reason or "",
                    )
                    for pod in pods
                ],
            )
        )

    async def _run(self) -> None:
        while not self._stop.is_set():
            await self.sample()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval)


# --- What a teardown must not leave ---------------------------------------------------------------

OWNER_ANNOTATION = "colony.dev/workflow-id"


def colony_marked(meta: Any) -> bool:
    labels = dict(meta.get("labels") or {})
    annotations = dict(meta.get("annotations") or {})
    return labels.get("app.kubernetes.io/managed-by") == "colony" or any(
        key.startswith("colony.dev/") for key in [*labels, *annotations]
    )


async def workflow_running(temporal: Client, workflow_id: str) -> bool:
    try:
        described = await temporal.get_workflow_handle(workflow_id).describe()
    except RPCError:
        return False
    return described.status is WorkflowExecutionStatus.RUNNING


async def leftovers(scenario: Scenario, clusters_alive: Iterable[str] = ()) -> list[str]:
    """What no live entity tracks: Colony's objects on the management cluster (ServiceSets,
    Secrets, ClusterDeployments) whose owner is gone (a prerequisite's ServiceSet: whose cluster
    is gone), hosts still claimed by the organization's
    clusters that are gone, and in the child clusters still alive, cordoned nodes, and namespaces
    and routes of workspaces that are gone."""
    stack = scenario.stack
    temporal = stack.client
    alive = set(clusters_alive)
    found: list[str] = []
    objects: list[tuple[str, dict[str, Any]]] = []
    for plural in ("servicesets", "clusterdeployments"):
        objects += [(plural, obj) for obj in await stack.k0rdent_objects(plural)]
    for secret in await stack.management_secrets():
        objects.append(("secrets", stack.management.sanitize_for_serialization(secret)))
    deployments = {
        obj["metadata"]["name"]
        for kind, obj in objects
        if kind == "clusterdeployments" and not obj["metadata"].get("deletionTimestamp")
    }
    for kind, obj in objects:
        meta = obj.get("metadata") or {}
        if not colony_marked(meta):
            continue
        owner = (meta.get("annotations") or {}).get(OWNER_ANNOTATION)
        workspace = (meta.get("labels") or {}).get("colony.dev/workspace")
        if "colony.dev/prerequisite" in (meta.get("labels") or {}):
            # Installed once per cluster, it outlives the workspaces (and the run) that asked for
            # it: its cluster tracks it, and k0rdent deletes it with the ClusterDeployment.
            cluster = (obj.get("spec") or {}).get("cluster")
            if cluster not in deployments:
                found.append(f"{kind} {meta['name']}: its cluster {cluster} is gone")
        elif owner:
            if not await workflow_running(temporal, owner):
                found.append(f"{kind} {meta['name']}: its owner {owner} is gone")
        elif workspace and await stack.api.workspace(workspace) is None:
            found.append(f"{kind} {meta['name']}: its workspace {workspace} is gone")
    for host in await stack.claimed_hosts():
        owner = str(host.get("owner") or "")
        cluster = owner.split("/")[2] if owner.startswith(f"cluster/{ORGANIZATION}/") else ""
        if cluster and cluster not in alive:
            found.append(f"host {host['id']}: still claimed by {owner}")
    for cluster in alive:
        if deployment(cluster) not in deployments:
            continue  # deleted before we looked (by a path running beside the one asking)
        try:
            found += await child_leftovers(stack, cluster)
        except (kube.ApiException, urllib3.exceptions.HTTPError):
            # Deleted while we looked (its kubeconfig Secret, then its API server, go with its
            # ClusterDeployment: a 404, or a refused connection): what it held went with it.
            # Alive, the error is real.
            if not await deployment_exists(stack, cluster):
                continue
            raise
    return found


async def deployment_exists(stack: Stack, cluster: str) -> bool:
    """True while the cluster's ClusterDeployment exists and is not being deleted."""
    return any(
        obj["metadata"]["name"] == deployment(cluster)
        and not obj["metadata"].get("deletionTimestamp")
        for obj in await stack.k0rdent_objects("clusterdeployments")
    )


async def child_leftovers(stack: Stack, cluster: str) -> list[str]:
    """In a live child cluster: cordoned nodes, and namespaces and routes of workspaces that are
    gone."""
    found: list[str] = []
    for node in await child_nodes(stack, cluster):
        if node.spec.unschedulable:
            found.append(f"{cluster} node {node.metadata.name}: cordoned")
    workspaces = {w["name"] for w in await stack.api.workspaces(cluster)}
    for name, workspace in await child_namespaces(stack, cluster):
        if workspace and workspace not in workspaces:
            found.append(f"{cluster} namespace {name}: its workspace {workspace} is gone")
    for kind, name, workspace in await child_routes(stack, cluster):
        if workspace and workspace not in workspaces:
            found.append(f"{cluster} {kind} {name}: its workspace {workspace} is gone")
    return found


ROUTES = (
    ("gateway.networking.k8s.io", "v1", "httproutes"),
    ("gateway.networking.k8s.io", "v1alpha2", "tcproutes"),
)


async def child_routes(stack: Stack, cluster: str) -> list[tuple[str, str, str]]:
    """(kind, namespace/name, the workspace it is labelled for) of the child's Gateway API routes."""
    admin = await stack.child_admin(deployment(cluster))
    found: list[tuple[str, str, str]] = []
    try:
        custom = kube.CustomObjectsApi(admin)
        for group, version, plural in ROUTES:
            listed: Any = await call(custom.list_cluster_custom_object, group, version, plural)
            for route in listed["items"]:
                meta = route["metadata"]
                workspace = (meta.get("labels") or {}).get("colony.dev/workspace", "")
                found.append((plural, f"{meta['namespace']}/{meta['name']}", workspace))
    finally:
        close_client(admin)
    return found


async def child_namespaces(stack: Stack, cluster: str) -> list[tuple[str, str]]:
    """(name, the workspace it is labelled for) of the child's namespaces."""
    admin = await stack.child_admin(deployment(cluster))
    try:
        listed = await call(kube.CoreV1Api(admin).list_namespace)
    finally:
        close_client(admin)
    return [
        (ns.metadata.name, (ns.metadata.labels or {}).get("colony.dev/workspace", ""))
        for ns in listed.items
    ]


# --- A burst of one-GPU workspaces ----------------------------------------------------------------

JUPYTER = "colony-jupyter-1-0-0"
VLLM = "colony-vllm-1-0-0"
LLM_MODEL = "Qwen/Qwen3-0.6B"


def llm_server(scenario: Scenario, name: str, cluster: str) -> dict[str, Any]:
    """An LLM server's deploy body (its class needs a prerequisite); its model a control value of
    the secrets scan."""
    scenario.planted.controls.add(LLM_MODEL)
    return {
        "name": name,
        "class": VLLM,
        "cluster": cluster,
        "values": {"vllm": {"model": LLM_MODEL}},
    }


def notebook(scenario: Scenario, name: str, cluster: str, gpu_model: str) -> dict[str, Any]:
    """A one-GPU notebook's deploy body, its password (a secret prompt's answer) planted."""
    password = f"pw-{scenario.rng.getrandbits(96):024x}"
    scenario.planted.add("notebook password", password, name)
    return {
        "name": name,
        "class": JUPYTER,
        "cluster": cluster,
        "gpus": 1,
        "gpuModel": gpu_model,
        "secretValues": {"notebookPassword": password},
    }


@dataclass
class Burst:
    """3 x G one-GPU notebooks sent at once to a cluster of G GPUs, then deleted one at a time
    (a seeded choice among the running ones) until all have run."""

    scenario: Scenario
    cluster: str
    gpu_model: str
    gpus: int
    names: list[str] = field(default_factory=list)
    accepted_order: list[str] = field(default_factory=list)
    """In the order the API answered 202."""
    first_positions: dict[str, int] = field(default_factory=dict)
    """The waiting ones' positions once the burst settled."""
    running_at_settle: list[str] = field(default_factory=list)

    async def send(self) -> None:
        api = self.scenario.stack.api
        self.names = [f"{self.cluster}-nb{index:02d}" for index in range(3 * self.gpus)]
        bodies = [notebook(self.scenario, n, self.cluster, self.gpu_model) for n in self.names]

        async def deploy(body: dict[str, Any]) -> None:
            await api.deploy(body)
            self.accepted_order.append(body["name"])

        await asyncio.gather(*(deploy(body) for body in bodies))

    async def phases(self) -> list[dict[str, Any]]:
        return await self.scenario.stack.api.workspaces(self.cluster)

    async def settle(self, timeout: float) -> None:
        """Until G run and 2G wait; record the waiting ones' positions."""

        def settled(items: list[dict[str, Any]]) -> bool:
            phases = [w["phase"] for w in items]
            return (
                len(items) == len(self.names)
                and phases.count("Running") == self.gpus
                and phases.count("Waiting") == 2 * self.gpus
            )

        items = await poll(
            self.phases, settled, what=f"{self.gpus} running, the rest waiting", timeout=timeout
        )
        self.running_at_settle = sorted(w["name"] for w in items if w["phase"] == "Running")
        self.first_positions = {
            w["name"]: int(w["admission"]["position"]) for w in items if w["phase"] == "Waiting"
        }

    async def release_all(self, timeout: float) -> None:
        """Delete a running one (seeded), wait for the next in line to run; until none is left."""
        left = list(self.names)
        while left:
            items = await self.phases()
            running = sorted(w["name"] for w in items if w["phase"] == "Running")
            assert running, self.scenario.failure(f"nothing runs among {left}: {items}")
            victim = self.scenario.rng.choice(running)
            await workspace_gone(self.scenario, victim, timeout=timeout)
            left.remove(victim)
            await poll(
                self.phases,
                running_count(min(self.gpus, len(left))),
                what=f"{min(self.gpus, len(left))} running after {victim} left",
                timeout=timeout,
            )


def running_count(expected: int) -> Callable[[list[dict[str, Any]]], bool]:
    def check(items: list[dict[str, Any]]) -> bool:
        return sum(1 for w in items if w["phase"] == "Running") == expected

    return check


# --- The secrets scan -----------------------------------------------------------------------------


async def scan_for_secrets(scenario: Scenario, planted: Planted) -> None:
    """Every history of every run on the scenario's stack exported (`histories/` in its
    directory, payloads decoded) and searched, with the logs of its processes, for every secret
    planted or come across; the figures reported; zero hits, and every control value found."""
    temporal = scenario.stack.client
    exported = scenario.stack.workdir / "histories"
    exported.mkdir(exist_ok=True)
    hits: list[str] = []
    controls_found: Counter[str] = Counter()
    histories = events = size_bytes = 0
    kinds: Counter[str] = Counter()
    async for execution in temporal.list_workflows():
        handle = temporal.get_workflow_handle(execution.id, run_id=execution.run_id)
        history = await handle.fetch_history()
        text = history_text(history)
        histories += 1
        events += len(history.events)
        size_bytes += len(text)
        kinds[execution.workflow_type] += 1
        name = f"{histories:05d}-{execution.id.replace('/', '_')}-{execution.run_id}.json"
        raw = history.to_json()  # payloads base64-encoded: the control is not readable there
        (exported / name).write_text(raw)
        controls_found.update(v for v in planted.controls if v in text and v not in raw)
        hits += [
            f"{secret.kind} of {secret.of or 'the stack'} in {execution.id} ({execution.run_id})"
            for value, secret in planted.values.items()
            if value in text
        ]
    logs = sorted((scenario.stack.workdir / "logs").glob("*.log"))
    for log in logs:
        text = log.read_text(errors="replace")
        hits += [
            f"{secret.kind} of {secret.of or 'the stack'} in {log.name}"
            for value, secret in planted.values.items()
            if value in text
        ]
    scenario.report(
        logs_scanned=[log.name for log in logs],
        histories=histories,
        events=events,
        decoded_megabytes=round(size_bytes / 1e6, 1),
        workflows_by_type=dict(kinds),
        secrets_planted=len(planted.values),
        secrets_by_kind=planted.kinds(),
        controls_found=dict(controls_found),
        hits=len(hits),
        exported_to=str(exported),
    )
    assert histories > 0
    # The scan reads payloads: what a history holds only there, it finds.
    assert set(controls_found) == planted.controls, (controls_found, planted.controls)
    assert hits == [], scenario.failure("secrets in histories:\n" + json.dumps(hits, indent=1))
