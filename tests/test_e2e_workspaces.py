"""End to end, workspaces: `colonyctl` -> Temporal dev server -> the real worker, workflows and
activities -> the sim (management cluster, child clusters, ServiceSets, the tenant gateway).

One simulated world (instant timing) and one in-process worker serve the module, with the CRDs and
the class catalog the worker sets up at start and a sealing key pair of the test's own. Each test
drives uniquely named clusters and workspaces (ledgers are one per cluster) through `colonyctl`, as
a user would, and checks the effects on the simulated infrastructure directly:

- a CPU notebook reaches Running, its pod runs in `ws-<name>` on the child and its access is the
  `kubectl port-forward` command whose Service exists, and that real kubectl reaches the
  notebook's (simulated) Jupyter server; delete removes it all;
- GPU workspaces fill a cluster, a third one waits (position 1) and runs once one is deleted;
- a GPU workspace deployed at once after its cluster's create (without --wait) waits, Pending,
  until the cluster's pools have joined, then runs on them;
- two LLM servers share one installation of their prerequisite (`wsprereq-...`), which outlives
  them, and each answers `/v1/models` with its model at the URL Colony prints;
- a namespace the user made under the workspace's name (`ws-<name>`, holding their data) is never
  adopted and never deleted: the deploy fails naming it, the delete leaves it and its contents;
- a cluster attached to a tenant gateway gives `https://<ws>.<domain>:<port>` and
  `ssh://<domain>:<port>` (the simulated gateway listens on local ports, named in the URLs), which
  open the notebook's page and the dev box's SSH server, as does a kubectl port-forward; suspend
  frees the port and keeps the namespace, resume brings it back;
- deleting a cluster deletes its workspaces first;
- exalsius manifests through `colonyctl apply -f` (class with its template, a deployment, a
  standalone template, a conflicting class);
- a notebook password planted at deploy is in no workflow history, only in its values Secret.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner, Result

from infra.kubeapi import KubeApi
from models.identity import (
    prerequisite_service_set_name,
    route_name,
    workspace_release_name,
    workspace_service_set_name,
    workspace_values_secret_name,
)
from models.signals import GatewayChanged
from sim.faults import RequestFault
from sim.podnet.apps import JUPYTER_SERVER_VERSION, SSH_IDENTIFICATION
from sim.world import SimWorld
from starter.cli import app, normalize_argv
from tests.access import gateway_get, kubectl_port_forward, local_get, ssh_disconnect_message
from tests.conftest import venv_binary
from tests.exalsius_status import exalsius_problems
from tests.helpers import eventually, history_text, shipped_classes_listed, unique
from tests.simenv import NAMESPACE, call, child_api, close_client, worker_world
from watching.leader import LeaseTiming
from watching.mapping import Signal
from watching.service import Watcher, WatcherConfig
from watching.signals import TemporalSignals
from workflows.search_attributes import COLONY_CLUSTER, COLONY_KIND, COLONY_PHASE
from workflows.workspace import WORKSPACE

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LOCATION = "fra1"
GPU_MODEL = "h100-80gb"
CPU_SKU = "cpu-32c-256g"
DOMAIN = "dos-lab.example"
SSH_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl dev@colony"
)
K0RDENT = ("k0rdent.mirantis.com", "v1beta1")
EXALSIUS_HUB = Path(__file__).resolve().parents[1].parent / "shared" / "exalsius" / "workspace-hub"
"""The exalsius workspace hub's manifests, beside the checkout where present (skipped otherwise)."""


@dataclass
class Colony:
    world: SimWorld
    env: dict[str, str]
    management: client.ApiClient
    temporal: Client

    async def ctl(self, *args: str, expect: int | None = 0) -> Result:
        """Run `colonyctl ARGS` (in a thread: the sim and the worker share this loop)."""
        result = await asyncio.to_thread(
            CliRunner().invoke, app, normalize_argv(args), env=self.env
        )
        if expect is not None:
            assert result.exit_code == expect, (
                f"colonyctl {' '.join(args)} exited {result.exit_code}, not {expect}\n"
                f"stdout: {result.stdout}\nstderr: {result.stderr}\n{result.exception!r}"
            )
        return result

    async def json(self, *args: str) -> Any:
        return json.loads((await self.ctl(*args, "-o", "json")).stdout)

    async def workspace(self, name: str) -> dict[str, Any]:
        data: dict[str, Any] = await self.json("workspace", "get", name)
        return data

    async def phase_of(self, name: str, phases: set[str], timeout: float = 60) -> dict[str, Any]:
        return await eventually(
            lambda: self.workspace(name),
            until=lambda w: w["phase"] in phases,
            timeout=timeout,
            interval=0.2,
            what=f"workspace {name} in {phases}",
        )

    async def deployed(self, name: str, timeout: float = 60) -> dict[str, Any]:
        """The workspace once Running with its deploy finished: its access step (which follows
        Running) has reported every endpoint."""
        return await eventually(
            lambda: self.workspace(name),
            until=lambda w: w["phase"] == "Running" and "currentOperation" not in w,
            timeout=timeout,
            interval=0.2,
            what=f"workspace {name} deployed",
        )

    async def child(self, cluster: str) -> client.ApiClient:
        return await child_api(self.management, cluster)

    async def service_sets(self) -> list[dict[str, Any]]:
        listed = await call(
            client.CustomObjectsApi(self.management).list_namespaced_custom_object,
            *K0RDENT,
            NAMESPACE,
            "servicesets",
        )
        items: list[dict[str, Any]] = listed["items"]
        return items


@pytest.fixture(scope="module")
async def colony(
    dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Colony]:
    async with worker_world(
        dev_env.client,
        tmp_path_factory.mktemp("sim"),
        tmp_path_factory.mktemp("sealing"),
        unique("e2e-ws"),
    ) as running:
        colony = Colony(running.world, running.env, running.management, dev_env.client)
        await shipped_classes_listed(lambda: colony.json("class", "list"))
        yield colony
    assert not running.world.store.rejected_writes, list(running.world.store.rejected_writes)


@pytest.fixture(autouse=True)
def _no_faults(colony: Colony) -> Iterator[None]:
    colony.world.faults.clear()
    yield
    colony.world.faults.clear()


async def create_cluster(colony: Colony, name: str, pool: str, *extra: str) -> None:
    await colony.ctl(
        "cluster", "create", name, "--location-id", LOCATION, "--node-pool", pool,
        "--wait", "--timeout", "90", *extra,
    )  # fmt: skip


def gpu_pool(count: int = 1) -> str:
    return f"name=gpu,count={count},gpuModelId={GPU_MODEL}"


def cpu_pool() -> str:
    return f"name=cpu,count=1,cpuSku={CPU_SKU}"


async def pods(colony: Colony, cluster: str, namespace: str) -> list[Any]:
    api = await colony.child(cluster)
    try:
        listed = await call(client.CoreV1Api(api).list_namespaced_pod, namespace)
        return list(listed.items)
    finally:
        close_client(api)


async def namespace_exists(colony: Colony, cluster: str, namespace: str) -> bool:
    api = await colony.child(cluster)
    try:
        found = await call(client.CoreV1Api(api).list_namespace)
        return namespace in {n.metadata.name for n in found.items}
    finally:
        close_client(api)


def kube_env(colony: Colony, home: Path) -> dict[str, str]:
    """What kubectl needs to use `colonyctl kubeconfig`'s file (its exec plugin is colonyctl)."""
    return {**colony.env, "PATH": str(Path(venv_binary("colonyctl")).parent), "HOME": str(home)}


async def tenant_gateway(colony: Colony, cluster: str) -> tuple[str, dict[str, int]]:
    """The tenant gateway's address and its listeners' ports, as the cluster's admin reads them."""
    api = await colony.child(cluster)
    try:
        gateway = await call(
            client.CustomObjectsApi(api).get_namespaced_custom_object,
            "gateway.networking.k8s.io", "v1", "colony-gateway", "gateways", "tenant",
        )  # fmt: skip
    finally:
        close_client(api)
    address = gateway["status"]["addresses"][0]["value"]
    return address, {x["name"]: int(x["port"]) for x in gateway["spec"]["listeners"]}


async def ssh_banner(address: str, port: int) -> str:
    """The SSH server's identification line at address:port."""
    reader, writer = await asyncio.open_connection(address, port)
    try:
        line = await asyncio.wait_for(reader.readline(), 30)
    finally:
        writer.close()
    return line.decode().rstrip("\r\n")


def running(items: list[Any]) -> list[Any]:
    return [p for p in items if p.status.phase == "Running" and not p.metadata.deletion_timestamp]


# --- A CPU notebook ---------------------------------------------------------------------------


async def test_cpu_notebook_runs_and_is_reached_by_port_forward(
    colony: Colony, tmp_path: Path
) -> None:
    cluster, name = unique("cpu"), unique("nb")
    await create_cluster(colony, cluster, cpu_pool())
    deployed = await colony.ctl(
        "workspace", "deploy", name, "--class", "colony-jupyter-1-0-0", "--cluster", cluster,
        "--set", "notebookPassword=correct-horse", "--set", "jupyter.interface=notebook",
        "--wait", "--timeout", "60",
    )  # fmt: skip
    release = workspace_release_name("", cluster, name)
    command = f"kubectl port-forward -n ws-{name} svc/{release}-http 8888:8888"
    assert f"workspace {name} running" in deployed.stdout
    assert command in deployed.stdout
    assert f"workspace%2F{name}" in deployed.stderr, "the Web UI link"

    status = await colony.workspace(name)
    assert status["phase"] == "Running"
    assert [(a["name"], a["url"], a["ready"], a["command"]) for a in status["access"]] == [
        ("http", "http://localhost:8888", True, command)
    ]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "DeploymentReady")
    table = (await colony.ctl("workspace", "get", name)).stdout
    assert "PHASE:" in table
    assert "Running" in table
    assert command in table

    # Its pod runs in ws-<name> on the child, and the command's Service exists and selects it.
    (pod,) = running(await pods(colony, cluster, f"ws-{name}"))
    kubeconfig = tmp_path / "kubeconfig"
    await colony.ctl("kubeconfig", cluster, "--output", str(kubeconfig))
    kubectl = await asyncio.create_subprocess_exec(
        venv_binary("kubectl"), "--kubeconfig", str(kubeconfig), "get", "-n", f"ws-{name}",
        f"svc/{release}-http", "-o", "json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=kube_env(colony, tmp_path),
    )  # fmt: skip
    out, err = await kubectl.communicate()
    assert kubectl.returncode == 0, err.decode()
    service = json.loads(out)
    assert service["spec"]["ports"][0]["port"] == 8888
    assert all(pod.metadata.labels.get(k) == v for k, v in service["spec"]["selector"].items())
    # The printed command opens the notebook (on a free local port: tests run side by side).
    async with kubectl_port_forward(
        kubeconfig, f"svc/{release}-http", 8888, namespace=f"ws-{name}", env=kube_env(colony, tmp_path)
    ) as forward:  # fmt: skip
        api, lab = await local_get(forward.port, "/api"), await local_get(forward.port, "/lab")
    assert api.json() == {"version": JUPYTER_SERVER_VERSION}
    assert lab.status_code == 200
    assert "SIMULATED JupyterLab" in lab.text
    assert f"<td>{pod.metadata.name}</td>" in lab.text
    # The prompt's answer and the resources reached the release's values.
    service_set_name = workspace_service_set_name("", cluster, name)
    (service_set,) = [
        s for s in await colony.service_sets() if s["metadata"]["name"] == service_set_name
    ]
    # The exalsius operator's label beside Colony's, on the workspace's objects.
    assert service_set["metadata"]["labels"]["workspaces.exalsius.ai/workspace"] == name
    assert service_set["metadata"]["labels"]["colony.dev/workspace"] == name
    values = yaml.safe_load(service_set["spec"]["services"][0]["values"])
    assert values["jupyter"]["interface"] == "notebook"
    assert values["_exalsius"]["resources"]["perReplica"]["cpu"] == "2"
    assert "notebookPassword" not in values, "secrets go through valuesFrom, never values"

    # Listed by visibility, with the search attributes and the Web UI's summary.
    listed = await colony.json("workspace", "list", "--cluster", cluster)
    assert [(w["name"], w["class"], w["phase"]) for w in listed] == [
        (name, "colony-jupyter-1-0-0", "Running")
    ]
    description = await colony.temporal.get_workflow_handle(f"workspace/{name}").describe()
    assert await description.static_summary() == (
        f"workspace {name} (colony-jupyter-1-0-0) on cluster {cluster}"
    )
    attributes = description.typed_search_attributes
    assert attributes.get(COLONY_KIND) == "workspace"
    assert attributes.get(COLONY_CLUSTER) == cluster
    assert attributes.get(COLONY_PHASE) == "Running"

    await colony.ctl("workspace", "delete", name, "--wait", "--timeout", "60")
    assert not await namespace_exists(colony, cluster, f"ws-{name}")
    assert service_set_name not in [s["metadata"]["name"] for s in await colony.service_sets()]
    gone = await colony.ctl("workspace", "get", name, expect=3)
    assert gone.stderr == f"error: workspace: workspace '{name}' not found\n"
    await colony.ctl("cluster", "delete", cluster, "--wait", "--timeout", "90")


async def test_refusals_start_nothing(colony: Colony) -> None:
    name = unique("nb")
    # The cluster first (issue 13: a workspace on an unknown cluster used to start, then fail).
    unknown = await colony.ctl(
        "workspace", "deploy", name, "--cluster", "no-such-cluster",
        "--class", "colony-jupyter-1-0-0", "--set", "notebookPassword=x", expect=3,
    )  # fmt: skip
    assert unknown.stderr == "error: cluster: cluster 'no-such-cluster' not found\n"
    cluster = unique("refusals")
    await colony.ctl(
        "cluster", "create", cluster, "--location-id", LOCATION, "--wait", "--timeout", "90"
    )
    cases = [
        (
            ("--class", "colony-jupyter-1-0-0"),
            2,
            "error: notebookPassword: required by class 'colony-jupyter-1-0-0' (prompt "
            "'Notebook password'): give --set notebookPassword=..., or run on a terminal to be "
            "asked\n",
        ),
        (
            ("--class", "colony-jupyter-1-0-0", "--set", "notebookPassword=x",
             "--set", "jupyter.interface=vim"),
            2,
            "error: values: prompt 'Interface' (jupyter.interface) must be one of lab, notebook, "
            "got 'vim'\n",
        ),
        (
            ("--class", "colony-nothing-1-0-0"),
            3,
            # Then the classes published by name (the shipped ones among them).
            "error: class: workspace class 'colony-nothing-1-0-0' not found (published: ",
        ),
        (
            ("--class", "colony-jupyter-1-0-0", "--set", "a[x]=1"),
            2,
            None,
        ),
    ]  # fmt: skip
    for flags, code, line in cases:
        refused = await colony.ctl(
            "workspace", "deploy", name, "--cluster", cluster, *flags, expect=code
        )
        if line is not None:
            assert refused.stderr.startswith(line), refused.stderr
        assert len(refused.stderr.splitlines()) == 1
    await colony.ctl("workspace", "get", name, expect=3)
    await colony.ctl("workspace", "suspend", name, expect=3)
    await colony.ctl("class", "get", "colony-nothing-1-0-0", expect=3)
    await colony.ctl("cluster", "delete", cluster, "--wait", "--timeout", "90")


# --- A user's own namespace: never adopted, never deleted ------------------------------------


async def test_a_users_own_namespace_is_never_adopted_nor_deleted(colony: Colony) -> None:
    """`ws-<name>` already in the child cluster, made by the user and holding their ConfigMap:
    `workspace deploy` fails naming it, installing nothing, and `workspace delete` leaves the
    namespace and what it holds as they were."""
    cluster, name = unique("adopt"), unique("adopt")
    namespace = f"ws-{name}"
    await create_cluster(colony, cluster, cpu_pool())
    api = await colony.child(cluster)
    core = client.CoreV1Api(api)
    try:
        await call(core.create_namespace, {"metadata": {"name": namespace}})
        await call(
            core.create_namespaced_config_map,
            namespace,
            {"metadata": {"name": "notes"}, "data": {"keep": "me"}},
        )
        refused = await colony.ctl(
            "workspace", "deploy", name, "--class", "colony-jupyter-1-0-0", "--cluster", cluster,
            "--set", "notebookPassword=pw", "--wait", "--timeout", "60", expect=1,
        )  # fmt: skip
        assert refused.stderr.splitlines()[-1] == (
            f"error: workspace '{name}' is Failed: namespace {namespace} already exists and is "
            "not Colony's (it has no Colony ownership marks): Colony neither adopts nor deletes "
            "it; remove or rename it, or use another name"
        )
        failed = await colony.workspace(name)
        ready = next(c for c in failed["conditions"] if c["type"] == "Ready")
        assert ready["reason"] == "ForeignObject"
        assert workspace_service_set_name("", cluster, name) not in [
            s["metadata"]["name"] for s in await colony.service_sets()
        ], "nothing was installed"

        await colony.ctl("workspace", "delete", name, "--wait", "--timeout", "60")
        await colony.ctl("workspace", "get", name, expect=3)
        kept = await call(core.read_namespace, namespace)
        assert kept.metadata.deletion_timestamp is None
        notes = await call(core.read_namespaced_config_map, "notes", namespace)
        assert notes.data == {"keep": "me"}
    finally:
        close_client(api)
    await colony.ctl("cluster", "delete", cluster, "--wait", "--timeout", "90")


# --- GPUs: filling a cluster, a third waits -------------------------------------------------


async def test_gpu_workspaces_fill_a_cluster_and_the_third_waits_its_turn(colony: Colony) -> None:
    cluster = unique("gpus")
    await create_cluster(colony, cluster, gpu_pool(), "--node-pool", cpu_pool())
    # Numbered so that their natural order (9, 10, 11, 12) is not their order as strings.
    burst = unique("burst")
    first, second, third, fourth = (f"{burst}-{i}" for i in (9, 10, 11, 12))

    async def deploy(name: str, *extra: str) -> Result:
        return await colony.ctl(
            "workspace", "deploy", name, "--class", "colony-jupyter-1-0-0", "--cluster", cluster,
            "--gpus", "4", "--gpu-model", GPU_MODEL, "--set", "notebookPassword=pw", *extra,
        )  # fmt: skip

    await deploy(first, "--wait", "--timeout", "60")
    await deploy(second, "--wait", "--timeout", "60")
    await deploy(third)
    waiting = await colony.phase_of(third, {"Waiting"})
    assert waiting["admission"]["state"] == "waiting"
    assert waiting["admission"]["position"] == 1
    feasible = next(c for c in waiting["conditions"] if c["type"] == "Feasible")
    assert feasible["reason"] == "WaitingForGpuCapacity"
    shown = (await colony.ctl("workspace", "get", third)).stdout
    # Said once: where it waits, and for what.
    assert (
        f"ADMISSION:  waiting for GPUs: position 1 in the queue for 1 x 4 GPUs {GPU_MODEL}\n"
        in shown
    )
    listed = await colony.json("workspace", "list", "--cluster", cluster)
    assert [w["name"] for w in listed] == [first, second, third]  # burst-9 before burst-10
    assert [w["position"] for w in listed if w["name"] == third] == [1]
    assert [w["gpus"] for w in listed] == [4, 4, 4]
    wide = (await colony.ctl("workspace", "list", "--cluster", cluster, "-o", "wide")).stdout
    header, *lines = [re.split(r"\s{2,}", line) for line in wide.splitlines()]
    assert header == [
        "ORGANIZATION", "NAME", "CLUSTER", "CLASS", "PHASE", "GPUS", "POSITION", "AGE", "STARTED",
    ]  # fmt: skip
    rows = {line[1]: dict(zip(header, line, strict=True)) for line in lines}
    assert list(rows) == [first, second, third]
    assert (rows[third]["PHASE"], rows[third]["GPUS"], rows[third]["POSITION"]) == (
        "Waiting",
        "4",
        "1",
    )
    assert (rows[first]["CLUSTER"], rows[first]["POSITION"]) == (cluster, "-")
    assert re.fullmatch(r"\d+[smhd]", rows[first]["AGE"])
    for name in (first, second):
        (pod,) = running(await pods(colony, cluster, f"ws-{name}"))
        limits = pod.spec.containers[0].resources.limits
        assert limits["nvidia.com/gpu"] == "4"

    # The cluster refuses to take the GPUs they hold, naming them.
    refused = await colony.ctl("node-pool", "delete", cluster, "gpu", expect=2)
    assert refused.stderr.startswith(
        f"error: pool: deleting node pool 'gpu' of cluster '{cluster}'"
    )
    assert "would take GPUs from running workspaces: " in refused.stderr
    assert refused.stderr.endswith(
        "delete or suspend them first, or add --force (they go back to waiting for GPUs)\n"
    )
    assert all(name in refused.stderr for name in (first, second))

    # A fourth waits behind the third; deleted while waiting, it leaves the queue.
    await deploy(fourth)
    assert (await colony.phase_of(fourth, {"Waiting"}))["admission"]["position"] == 2
    await colony.ctl("workspace", "delete", fourth, "--wait", "--timeout", "60")
    await colony.ctl("workspace", "get", fourth, expect=3)
    # The line moved, and the third was not told: `workspace get` asks the ledger.
    assert (await colony.workspace(third))["admission"]["position"] == 1

    # A release: the waiting one is admitted and runs, on the GPUs freed.
    await colony.ctl("workspace", "delete", first, "--wait", "--timeout", "60")
    admitted = await colony.phase_of(third, {"Running"})
    assert admitted["admission"]["state"] == "admitted"
    (pod,) = running(await pods(colony, cluster, f"ws-{third}"))
    assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "4"

    # A model the cluster does not have is refused before anything starts, naming its models.
    absent = unique("nb")
    refused = await colony.ctl(
        "workspace", "deploy", absent, "--class", "colony-jupyter-1-0-0", "--cluster", cluster,
        "--gpus", "1", "--gpu-model", "l40s-48gb", "--set", "notebookPassword=pw", expect=2,
    )  # fmt: skip
    assert refused.stderr == (
        f"error: resources.perReplica.gpuType: cluster '{cluster}' has no GPU model 'l40s-48gb' "
        f"(its GPU models: {GPU_MODEL})\n"
    )
    await colony.ctl("workspace", "get", absent, expect=3)
    # More GPUs per replica than any of its nodes has fails at once.
    await colony.ctl(
        "workspace", "deploy", absent, "--class", "colony-jupyter-1-0-0", "--cluster", cluster,
        "--gpus", "64", "--gpu-model", GPU_MODEL, "--set", "notebookPassword=pw",
    )  # fmt: skip
    failed = await colony.phase_of(absent, {"Failed"})
    feasible = next(c for c in failed["conditions"] if c["type"] == "Feasible")
    assert feasible["reason"] == "GpuOfferingUnavailable"
    context = failed["failureContext"]
    assert (context["reason"], context["recentEvents"][0]["reason"]) == (
        "GpuOfferingUnavailable",
        "GpuOfferingUnavailable",
    )
    assert exalsius_problems(failed) == []
    await colony.ctl("cluster", "delete", cluster, "--wait", "--timeout", "120")


CLAIM_LATENCY = 10.0
"""Seconds the host provider takes to answer a claim in the test below: the window in which the
cluster is Ready but its pool's nodes have not joined (real hosts take minutes)."""


async def test_a_gpu_workspace_deployed_while_its_cluster_is_created_waits_for_it(
    colony: Colony,
) -> None:
    cluster, name = unique("fresh"), unique("nb")
    colony.world.faults.add_rule(
        RequestFault(
            target="hostprovider", path="/v1/claims", method="POST", latency_seconds=CLAIM_LATENCY
        )
    )
    await colony.ctl(
        "cluster", "create", cluster, "--location-id", LOCATION, "--node-pool", gpu_pool(),
    )  # fmt: skip
    await colony.ctl(
        "workspace", "deploy", name, "--class", "colony-jupyter-1-0-0", "--cluster", cluster,
        "--gpus", "4", "--gpu-model", GPU_MODEL, "--set", "notebookPassword=pw",
    )  # fmt: skip

    waiting_message = f"waiting for cluster '{cluster}' to finish creating"

    def cluster_condition(workspace: dict[str, Any]) -> dict[str, Any]:
        found = (c for c in workspace["conditions"] if c["type"] == "ClusterDeploymentResolved")
        return next(found, {})

    # The cluster is Ready within a second, its pool's hosts only after CLAIM_LATENCY.
    waiting = await eventually(
        lambda: colony.workspace(name),
        until=lambda w: (
            w["phase"] != "Pending" or cluster_condition(w).get("message") == waiting_message
        ),
        timeout=CLAIM_LATENCY,
        interval=0.2,
        what=f"workspace {name} waiting for its cluster",
    )
    assert waiting["phase"] == "Pending", waiting
    assert cluster_condition(waiting)["reason"] == "ClusterNotReady"

    deployed = await colony.deployed(name, timeout=90)
    assert deployed["admission"]["state"] == "admitted"
    assert cluster_condition(deployed)["reason"] == "ClusterDeploymentResolved"
    (pod,) = running(await pods(colony, cluster, f"ws-{name}"))
    assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "4"
    await colony.ctl("cluster", "delete", cluster, "--wait", "--timeout", "120")


# --- A failed install: its context, then a resume ----------------------------------------------


async def test_a_failed_install_shows_its_context_and_a_resume_tries_again(
    colony: Colony,
) -> None:
    cluster, name = unique("fail"), unique("nb")
    await create_cluster(colony, cluster, cpu_pool())
    colony.world.faults.fail_service_set(
        NAMESPACE,
        workspace_service_set_name("", cluster, name),
        "Helm install failed: image pull back-off",
    )
    failed = await colony.ctl(
        "workspace", "deploy", name, "--class", "colony-jupyter-1-0-0", "--cluster", cluster,
        "--set", "notebookPassword=pw", "--wait", "--timeout", "60", expect=1,
    )  # fmt: skip
    assert failed.stderr.splitlines()[-1] == (
        f"error: workspace '{name}' is Failed: {workspace_release_name('', cluster, name)} "
        "failed: Helm install failed: "
        "image pull back-off"
    )
    status = await colony.workspace(name)
    context = status["failureContext"]
    # The exalsius shape: the failing condition's reason, the failure first among the events.
    assert (context["phaseWhenFailed"], context["reason"]) == ("Deploying", "HelmReleaseFailed")
    assert context["message"] == status["message"]
    assert context["message"].endswith("failed: Helm install failed: image pull back-off")
    assert [(s["state"], s["failureMessage"]) for s in context["serviceSetStatus"]["services"]] == [
        ("Failed", "Helm install failed: image pull back-off")
    ]
    first = context["recentEvents"][0]
    assert (first["type"], first["reason"], first["message"]) == (
        "Warning",
        "HelmReleaseFailed",
        context["message"],
    )
    helm = next(c for c in status["conditions"] if c["type"] == "HelmReleaseReady")
    assert helm["reason"] == "HelmReleaseFailed"
    # A client of the exalsius operator reads it as a WorkspaceDeployment's status.
    assert exalsius_problems(status) == []
    shown = (await colony.ctl("workspace", "get", name)).stdout
    assert "phase when failed: Deploying" in shown
    assert "reason: HelmReleaseFailed" in shown
    assert "image pull back-off" in shown

    colony.world.faults.clear()
    await colony.ctl("workspace", "resume", name, "--wait", "--timeout", "60")
    resumed = await colony.workspace(name)
    assert resumed["phase"] == "Running"
    assert "failureContext" not in resumed
    assert exalsius_problems(resumed) == []
    await colony.ctl("cluster", "delete", cluster, "--wait", "--timeout", "120")


# --- An LLM server and its prerequisite -------------------------------------------------------


async def test_llm_servers_share_one_prerequisite_installation(colony: Colony) -> None:
    cluster = unique("llm")
    await create_cluster(colony, cluster, gpu_pool(), "--tenant-gateway-domain", DOMAIN)
    address, listeners = await tenant_gateway(colony, cluster)
    names = [unique("llm"), unique("llm")]
    for name in names:  # at once: they meet in one prerequisite workflow
        await colony.ctl(
            "workspace", "deploy", name, "--class", "colony-vllm-1-0-0", "--cluster", cluster,
            "--set", "vllm.model=Qwen/Qwen3-0.6B",
        )  # fmt: skip
    for name in names:
        status = await colony.deployed(name)
        (prerequisite,) = status["prerequisites"]
        assert (prerequisite["name"], prerequisite["phase"], prerequisite["namespace"]) == (
            "colony-inference-stack-1-0-0",
            "Satisfied",
            "colony-inference",
        )
        url = f"https://{name}.{DOMAIN}:{listeners['https']}"
        assert [(a["name"], a["url"], a["ready"]) for a in status["access"]] == [
            ("http", url, True)
        ]
        # Its OpenAI-compatible API, through its route, serves the model it was deployed with.
        models = await gateway_get(f"{url}/v1/models", address, colony.world.ca_path)
        assert [m["id"] for m in models.json()["data"]] == ["Qwen/Qwen3-0.6B"]
    prerequisite_sets = [
        s
        for s in await colony.service_sets()
        if s["metadata"]["name"].startswith(f"wsprereq-{cluster}-")
    ]
    assert [s["metadata"]["name"] for s in prerequisite_sets] == [
        prerequisite_service_set_name("", cluster, "colony-inference-stack-1-0-0")
    ]
    labels = prerequisite_sets[0]["metadata"]["labels"]
    assert (labels["workspaces.exalsius.ai/role"], labels["colony.dev/prerequisite"]) == (
        "prerequisite",
        "colony-inference-stack-1-0-0",
    )
    assert labels["workspaces.exalsius.ai/cluster-deployment"] == cluster
    assert running(await pods(colony, cluster, "colony-inference"))
    for name in names:
        await colony.ctl("workspace", "delete", name, "--wait", "--timeout", "60")
    # Prerequisites outlive the workspaces that needed them.
    assert running(await pods(colony, cluster, "colony-inference"))
    await colony.ctl("cluster", "delete", cluster, "--wait", "--timeout", "120")


# --- A tenant gateway: hostnames and an SSH port; suspend and resume --------------------------


async def test_tenant_gateway_urls_ssh_port_suspend_and_resume(
    colony: Colony, tmp_path: Path
) -> None:
    cluster = unique("gw")
    await create_cluster(colony, cluster, cpu_pool(), "--tenant-gateway-domain", DOMAIN)
    deployment = await call(
        client.CustomObjectsApi(colony.management).get_namespaced_custom_object,
        *K0RDENT, NAMESPACE, "clusterdeployments", cluster,
    )  # fmt: skip
    assert deployment["metadata"]["labels"]["colony.dev/tenant-gateway-domain"] == DOMAIN
    notebook, devbox = unique("nb"), unique("dev")
    await colony.ctl(
        "workspace", "deploy", notebook, "--class", "colony-jupyter-1-0-0", "--cluster", cluster,
        "--set", "notebookPassword=pw", "--wait", "--timeout", "60",
    )  # fmt: skip
    await colony.ctl(
        "workspace", "deploy", devbox, "--class", "colony-devbox-1-0-0", "--cluster", cluster,
        "--set", f"ssh.authorizedKeys={SSH_KEY}", "--wait", "--timeout", "60",
    )  # fmt: skip
    address, listeners = await tenant_gateway(colony, cluster)
    pool = sorted(port for name, port in listeners.items() if name.startswith("tcp-"))
    web = await colony.workspace(notebook)
    url = f"https://{notebook}.{DOMAIN}:{listeners['https']}"
    assert [(a["name"], a["url"], a["ready"]) for a in web["access"]] == [("http", url, True)]
    ssh = await colony.workspace(devbox)
    assert [(a["name"], a["url"], a["ready"]) for a in ssh["access"]] == [
        ("ssh", f"ssh://{DOMAIN}:{pool[0]}", True)
    ]
    # The printed URL opens the notebook: by name (SNI, Host, the sim CA's certificate) at the
    # gateway's address, as `curl --cacert ... --resolve <name>:<port>:<address>` does.
    (nb_pod,) = running(await pods(colony, cluster, f"ws-{notebook}"))
    lab = await gateway_get(f"{url}/", address, colony.world.ca_path)
    assert lab.status_code == 200
    assert "SIMULATED JupyterLab" in lab.text
    assert f"<td>{nb_pod.metadata.name}</td>" in lab.text
    # And so does a port-forward to its Service, gateway or not.
    kubeconfig = tmp_path / "kubeconfig"
    await colony.ctl("kubeconfig", "--cluster", cluster, "--output", str(kubeconfig))
    async with kubectl_port_forward(
        kubeconfig, f"svc/{workspace_release_name('', cluster, notebook)}-http", 8888,
        namespace=f"ws-{notebook}",
        env=kube_env(colony, tmp_path),
    ) as forward:  # fmt: skip
        api = await local_get(forward.port, "/api")
    assert api.json() == {"version": JUPYTER_SERVER_VERSION}
    # The SSH URL reaches the dev box's (simulated) sshd through its TCPRoute.
    (dev_pod,) = running(await pods(colony, cluster, f"ws-{devbox}"))
    assert await ssh_banner(address, pool[0]) == (
        f"{SSH_IDENTIFICATION} SIMULATED colony-sim ws-{devbox}/{dev_pod.metadata.name}"
    )
    said = await ssh_disconnect_message(address, pool[0])
    assert said is None or f"SIMULATED: ws-{devbox}/{dev_pod.metadata.name} runs no sshd" in said, (
        said
    )
    api = await colony.child(cluster)
    try:
        custom = client.CustomObjectsApi(api)
        route = await call(
            custom.get_namespaced_custom_object, "gateway.networking.k8s.io", "v1",
            f"ws-{notebook}", "httproutes", route_name("", cluster, notebook, "http"),
        )  # fmt: skip
        assert route["spec"]["hostnames"] == [f"{notebook}.{DOMAIN}"]
        tcp = await call(
            custom.get_namespaced_custom_object, "gateway.networking.k8s.io", "v1alpha2",
            f"ws-{devbox}", "tcproutes", route_name("", cluster, devbox, "ssh"),
        )  # fmt: skip
        assert tcp["spec"]["parentRefs"][0]["sectionName"] == f"tcp-{pool[0]}"
    finally:
        close_client(api)

    # Suspend: the release goes, the namespace and the definition stay, the port returns.
    suspended = await colony.ctl("workspace", "suspend", devbox, "--wait", "--timeout", "60")
    assert f"workspace {devbox} suspended" in suspended.stdout
    assert await namespace_exists(colony, cluster, f"ws-{devbox}")
    assert not running(await pods(colony, cluster, f"ws-{devbox}"))
    again = await colony.ctl("workspace", "suspend", devbox, expect=2)
    assert "already suspended" in again.stderr
    other = unique("dev")
    await colony.ctl(
        "workspace", "deploy", other, "--class", "colony-devbox-1-0-0", "--cluster", cluster,
        "--set", f"ssh.authorizedKeys={SSH_KEY}", "--wait", "--timeout", "60",
    )  # fmt: skip
    assert (await colony.workspace(other))["access"][0]["url"] == f"ssh://{DOMAIN}:{pool[0]}"
    # Resume: admitted again, routed again on the next free port.
    await colony.ctl("workspace", "resume", devbox, "--wait", "--timeout", "60")
    resumed = await colony.workspace(devbox)
    assert resumed["phase"] == "Running"
    assert resumed["access"][0]["url"] == f"ssh://{DOMAIN}:{pool[1]}"
    assert running(await pods(colony, cluster, f"ws-{devbox}"))
    await colony.ctl("cluster", "delete", cluster, "--wait", "--timeout", "120")


# --- Routes follow the gateway, one endpoint at a time (with the watcher) ----------------------

GATEWAY_API = ("gateway.networking.k8s.io", "v1")
WATCH_LEASE = LeaseTiming(lease_duration=2.0, renew_deadline=1.5, retry_period=0.25)
"""Seconds, so the test's watcher leads at once (client-go's are 15/10/2)."""


class SentSignals:
    """Temporal signals, recorded: which ones the watcher sent."""

    def __init__(self, temporal: Client) -> None:
        self._temporal = TemporalSignals(temporal)
        self.sent: list[Signal] = []

    async def send(self, signal: Signal) -> bool:
        delivered = await self._temporal.send(signal)
        self.sent.append(signal)
        return delivered

    def gateway_changes(self, workflow_id: str) -> list[Signal]:
        return [
            s
            for s in self.sent
            if s.workflow_id == workflow_id and s.name == WORKSPACE.gateway_changed.name
        ]


@dataclass
class RunningWatcher:
    watcher: Watcher
    signals: SentSignals

    async def following_gateways_of(self, cluster: str) -> None:
        """Until the watcher has listed the cluster's Gateways (later changes are its events)."""
        await eventually(
            lambda: _now(self.watcher.streams.get(f"gateways.{NAMESPACE}.{cluster}")),
            until=lambda stream: stream is not None and bool(stream.version),
            timeout=30,
            what=f"the watcher following the Gateways of {cluster}",
        )


async def _now(value: Any) -> Any:
    return value


@pytest.fixture
async def watcher(colony: Colony) -> AsyncIterator[RunningWatcher]:
    """A watcher of the test's own (its own Lease and state namespace), as `watcher.py` runs."""
    api = KubeApi.from_kubeconfig(colony.world.management_kubeconfig_path)
    signals = SentSignals(colony.temporal)
    running = Watcher(
        api,
        signals,
        WatcherConfig(
            identity=unique("watcher"), system_namespace=unique("colony-system"), lease=WATCH_LEASE
        ),
    )
    task = asyncio.create_task(running.run())
    try:
        yield RunningWatcher(running, signals)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await api.aclose()


async def tenant_gateway_object(colony: Colony, cluster: str) -> dict[str, Any]:
    api = await colony.child(cluster)
    try:
        gateway: dict[str, Any] = await call(
            client.CustomObjectsApi(api).get_namespaced_custom_object,
            *GATEWAY_API, "colony-gateway", "gateways", "tenant",
        )  # fmt: skip
        return gateway
    finally:
        close_client(api)


async def remove_gateway(colony: Colony, cluster: str) -> dict[str, Any]:
    """Delete the cluster's tenant Gateway (as the platform losing it would); what it was."""
    gateway = await tenant_gateway_object(colony, cluster)
    api = await colony.child(cluster)
    try:
        await call(
            client.CustomObjectsApi(api).delete_namespaced_custom_object,
            *GATEWAY_API, "colony-gateway", "gateways", "tenant",
        )  # fmt: skip
    finally:
        close_client(api)
    return gateway


async def restore_gateway(colony: Colony, cluster: str, gateway: dict[str, Any]) -> None:
    """Create the Gateway again as it was (a new object: a new uid)."""
    meta = gateway["metadata"]
    body = {
        "apiVersion": gateway["apiVersion"],
        "kind": "Gateway",
        "metadata": {
            k: meta[k] for k in ("name", "namespace", "labels", "annotations") if k in meta
        },
        "spec": gateway["spec"],
    }
    api = await colony.child(cluster)
    try:
        await call(
            client.CustomObjectsApi(api).create_namespaced_custom_object,
            *GATEWAY_API, "colony-gateway", "gateways", body,
        )  # fmt: skip
    finally:
        close_client(api)


def routes_ready(status: dict[str, Any]) -> tuple[str, str]:
    found = next(c for c in status["conditions"] if c["type"] == "RoutesReady")
    return found["status"], found["reason"]


async def test_a_gateway_removed_and_restored_under_a_running_workspace(
    colony: Colony, watcher: RunningWatcher
) -> None:
    """The watcher sees the tenant Gateway go: the running workspace reports RoutesReady False
    RoutingInfraNotReady (its endpoint reachable by port-forward meanwhile); it comes back: routed
    again at `https://<ws>.<domain>`, with no suspend, no resume, never out of Running."""
    cluster, name = unique("flap"), unique("nb")
    await create_cluster(colony, cluster, cpu_pool(), "--tenant-gateway-domain", DOMAIN)
    await colony.ctl(
        "workspace", "deploy", name, "--class", "colony-jupyter-1-0-0", "--cluster", cluster,
        "--set", "notebookPassword=pw", "--wait", "--timeout", "60",
    )  # fmt: skip
    routed = await colony.workspace(name)
    assert routes_ready(routed) == ("True", "RoutesReady")
    (entry,) = routed["access"]
    assert entry["url"].startswith(f"https://{name}.{DOMAIN}")
    assert (entry["ready"], entry["reason"]) == (True, "Accepted")
    await watcher.following_gateways_of(cluster)

    gateway = await remove_gateway(colony, cluster)
    # Far sooner than the workspace's own look (ROUTES_FALLBACK, ten minutes): the watcher's.
    waiting = await eventually(
        lambda: colony.workspace(name),
        until=lambda w: routes_ready(w)[0] == "False",
        timeout=30,
        interval=0.2,
        what="RoutesReady False once the Gateway is gone",
    )
    assert routes_ready(waiting) == ("False", "RoutingInfraNotReady")
    assert waiting["phase"] == "Running"
    (entry,) = waiting["access"]
    assert (entry["ready"], entry["reason"]) == (False, "RoutingInfraNotReady")
    assert entry["url"] == f"https://{name}.{DOMAIN}"
    assert entry["command"].startswith(f"kubectl port-forward -n ws-{name} ")
    told = watcher.signals.gateway_changes(f"workspace/{name}")
    assert "DELETED" in [
        s.payload.type.value for s in told if isinstance(s.payload, GatewayChanged)
    ]
    shown = (await colony.ctl("workspace", "get", name)).stdout
    assert "RoutingInfraNotReady" in shown

    await restore_gateway(colony, cluster, gateway)
    back = await eventually(
        lambda: colony.workspace(name),
        until=lambda w: routes_ready(w)[0] == "True",
        timeout=30,
        interval=0.2,
        what="routed again once the Gateway is back",
    )
    (entry,) = back["access"]
    assert entry["url"].startswith(f"https://{name}.{DOMAIN}")
    assert (entry["ready"], entry["reason"], entry["command"]) == (True, "Accepted", "")
    assert back["phase"] == "Running"
    told = watcher.signals.gateway_changes(f"workspace/{name}")
    assert "ADDED" in [s.payload.type.value for s in told if isinstance(s.payload, GatewayChanged)]
    assert [op["request"]["kind"] for op in back["completedOperations"]] == ["deploy"]
    api = await colony.child(cluster)
    try:
        route = await call(
            client.CustomObjectsApi(api).get_namespaced_custom_object,
            *GATEWAY_API, f"ws-{name}", "httproutes", route_name("", cluster, name, "http"),
        )  # fmt: skip
    finally:
        close_client(api)
    (parent,) = route["status"]["parents"]
    assert {c["type"]: c["status"] for c in parent["conditions"]} == {
        "Accepted": "True",
        "ResolvedRefs": "True",
    }
    await colony.ctl("cluster", "delete", cluster, "--wait", "--timeout", "120")


def two_endpoint_class(name: str) -> str:
    """The notebook's chart behind a class with a second HTTP endpoint on the same port, whose
    Service the chart does not render (it renders `<release>-http` only)."""
    return exalsius_class(name, "two endpoints").replace(
        "accessEndpoints: [{name: http, protocol: HTTP, port: 8888}]",
        "accessEndpoints: [{name: http, protocol: HTTP, port: 8888}, "
        "{name: admin, protocol: HTTP, port: 8888}]",
    )


async def test_a_chart_that_renders_one_of_two_endpoints_services(
    colony: Colony, watcher: RunningWatcher, tmp_path: Path
) -> None:
    """Running as soon as the release is (not after a routes deadline): the endpoint with a Service
    is routed, the other reports BackendNotFound; while the Gateway is missing, both are
    forwarded on local ports of their own."""
    cluster, name = unique("two"), unique("nb")
    workspace_class = unique("two-web") + "-1-0-0"
    await create_cluster(colony, cluster, cpu_pool(), "--tenant-gateway-domain", DOMAIN)
    manifest = tmp_path / "class.yaml"
    manifest.write_text(two_endpoint_class(workspace_class))
    await colony.ctl("class", "publish", "-f", str(manifest))
    deployed = await colony.ctl(
        "workspace", "deploy", name, "--class", workspace_class, "--cluster", cluster,
        "--set", "notebookPassword=pw", "--wait", "--timeout", "60",
    )  # fmt: skip
    assert f"workspace {name} running" in deployed.stdout
    status = await colony.workspace(name)
    release = workspace_release_name("", cluster, name)
    http, admin = status["access"]
    assert http["url"].startswith(f"https://{name}.{DOMAIN}")
    assert (http["ready"], http["reason"]) == (True, "Accepted")
    assert admin["url"].startswith(f"https://{name}-admin.{DOMAIN}")
    assert (admin["ready"], admin["reason"]) == (False, "BackendNotFound")
    assert f"Service ws-{name}/{release}-admin not found" in admin["message"]
    assert routes_ready(status) == ("False", "RoutingError")
    assert status["phase"] == "Running"
    deploy = status["completedOperations"][0]
    assert (deploy["request"]["kind"], deploy["state"]) == ("deploy", "succeeded")
    assert exalsius_problems(status) == []

    await watcher.following_gateways_of(cluster)
    await remove_gateway(colony, cluster)
    waiting = await eventually(
        lambda: colony.workspace(name),
        until=lambda w: routes_ready(w)[1] == "RoutingInfraNotReady",
        timeout=30,
        interval=0.2,
        what="RoutingInfraNotReady once the Gateway is gone",
    )
    assert [a["command"].split()[-1] for a in waiting["access"]] == ["8888:8888", "8889:8888"]
    await colony.ctl("cluster", "delete", cluster, "--wait", "--timeout", "120")


# --- Deleting a cluster deletes its workspaces first ------------------------------------------


async def test_deleting_a_cluster_deletes_its_workspaces_first(colony: Colony) -> None:
    cluster, name = unique("gone"), unique("nb")
    await create_cluster(colony, cluster, cpu_pool())
    await colony.ctl(
        "workspace", "deploy", name, "--class", "colony-jupyter-1-0-0", "--cluster", cluster,
        "--set", "notebookPassword=pw", "--wait", "--timeout", "60",
    )  # fmt: skip
    await colony.ctl("cluster", "delete", cluster, "--wait", "--timeout", "120")
    handle = colony.temporal.get_workflow_handle(f"workspace/{name}")
    assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED
    final = await handle.result()
    assert final["phase"] == "Deleted"
    assert workspace_service_set_name("", cluster, name) not in [
        s["metadata"]["name"] for s in await colony.service_sets()
    ]
    await colony.ctl("workspace", "get", name, expect=3)
    assert name not in [w["name"] for w in await colony.json("workspace", "list")]


# --- exalsius manifests through apply -----------------------------------------------------------


def exalsius_class(name: str, description: str) -> str:
    return f"""
apiVersion: k0rdent.mirantis.com/v1beta1
kind: ServiceTemplate
metadata: {{name: {name}, namespace: kcm-system}}
spec:
  helm:
    chartSpec:
      chart: colony-jupyter
      version: "1.0.0"
      interval: 10m
      sourceRef: {{kind: HelmRepository, name: colony-catalog}}
---
apiVersion: workspaces.exalsius.ai/v1
kind: WorkspaceClass
metadata: {{name: {name}}}
spec:
  displayName: Team notebook
  description: {description}
  serviceTemplate: {{name: {name}, namespace: kcm-system}}
  defaultResources: {{replicas: 1, perReplica: {{cpu: "1", memory: 2Gi}}}}
  accessEndpoints: [{{name: http, protocol: HTTP, port: 8888}}]
  userFacingConfig:
    - {{helmValuePath: notebookPassword, displayName: Password, type: secret, required: true}}
"""


def exalsius_deployment(name: str, workspace_class: str, cluster: str) -> str:
    return f"""
apiVersion: workspaces.exalsius.ai/v1
kind: WorkspaceDeployment
metadata: {{name: {name}}}
spec:
  workspaceClassRef: {workspace_class}
  clusterDeploymentRef: {{name: {cluster}, namespace: kcm-system}}
  values: {{notebookPassword: from-a-manifest}}
"""


async def test_apply_takes_exalsius_manifests(colony: Colony, tmp_path: Path) -> None:
    cluster, name = unique("apply"), unique("nb")
    workspace_class = unique("team-nb") + "-1-0-0"
    await create_cluster(colony, cluster, cpu_pool())
    manifests = tmp_path / "all.yaml"
    manifests.write_text(
        exalsius_class(workspace_class, "first")
        + "---"
        + exalsius_deployment(name, workspace_class, cluster)
    )
    applied = await colony.ctl("apply", "-f", str(manifests), "--wait", "--timeout", "60")
    assert f"workspaceclass/{workspace_class} published" in applied.stdout
    assert f"servicetemplate/{workspace_class} created" in applied.stdout
    assert f"workspace {name} running" in applied.stdout
    assert (await colony.json("class", "get", workspace_class))["description"] == "first"

    # Again: nothing changes, and the workspace is reported as left alone.
    again = await colony.ctl("apply", "-f", str(manifests))
    assert f"workspaceclass/{workspace_class} unchanged" in again.stdout
    assert f"workspace/{name} unchanged" in again.stdout

    # A different definition under the same name is refused before anything starts.
    changed = tmp_path / "changed.yaml"
    changed.write_text(exalsius_class(workspace_class, "second"))
    refused = await colony.ctl("apply", "-f", str(changed), expect=2)
    assert refused.stderr.startswith(
        f"error: name: workspace class '{workspace_class}' already exists with a different "
        "definition (it differs at spec.description)"
    )
    assert "a new version is a new name" in refused.stderr
    refused = await colony.ctl("class", "publish", "-f", str(changed), expect=2)
    assert "already exists with a different definition" in refused.stderr
    # The new version is a new name: published, in Colony's own form this time.
    newer = workspace_class.replace("-1-0-0", "-1-0-1")
    colony_form = tmp_path / "newer.yaml"
    colony_form.write_text(
        exalsius_class(newer, "second").replace("workspaces.exalsius.ai/v1", "colony.dev/v1")
    )
    published = await colony.ctl("class", "publish", "-f", str(colony_form))
    assert published.stdout == (
        f"workspaceclass/{newer} published; created ServiceTemplate/{newer}\n"
    )
    again = await colony.ctl("class", "publish", "-f", str(colony_form))
    assert again.stdout == f"workspaceclass/{newer} unchanged (already published)\n"
    assert [c["name"] for c in await colony.json("class", "list")].count(newer) == 1

    # A ServiceTemplate on its own, from stdin.
    template = unique("tpl")
    alone = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["apply", "-f", "-"],
        input=exalsius_class(template, "x").split("---")[0],
        env=colony.env,
    )
    assert alone.exit_code == 0, alone.stderr
    assert f"servicetemplate/{template} created" in alone.stdout
    stored = await call(
        client.CustomObjectsApi(colony.management).get_namespaced_custom_object,
        *K0RDENT, NAMESPACE, "servicetemplates", template,
    )  # fmt: skip
    assert stored["spec"]["helm"]["chartSpec"]["chart"] == "colony-jupyter"
    await colony.ctl("cluster", "delete", cluster, "--wait", "--timeout", "120")


async def test_apply_an_exalsius_hub_class_and_its_example_deployment(
    colony: Colony, tmp_path: Path
) -> None:
    """The workspace hub's own class and template, and its example deployment as a user adapts it
    (their cluster, a GPU product this cluster has), through apply: a raw gpuNodeSelector is
    matched exactly on the nodes' labels."""
    hub = Path(EXALSIUS_HUB)
    files = [
        hub / "manifests_jupyter-notebook_0.3.0_servicetemplate.yaml",
        hub / "manifests_jupyter-notebook_0.3.0_workspaceclass.yaml",
        hub / "examples_jupyter-notebook_0.3.0_example-workspacedeployment.yaml",
    ]
    if not all(path.exists() for path in files):
        pytest.skip(f"the exalsius workspace hub's manifests are not at {hub}")
    cluster, name = unique("hub"), unique("my-notebook")
    await create_cluster(colony, cluster, gpu_pool())
    example = yaml.safe_load(files[2].read_text())
    example["metadata"]["name"] = name
    example["spec"]["clusterDeploymentRef"]["name"] = cluster
    selector = example["spec"]["resources"]["perReplica"]["gpuNodeSelector"]
    selector["nvidia.com/gpu.product"] = "NVIDIA-H100-80GB-HBM3"
    adapted = tmp_path / "deployment.yaml"
    adapted.write_text(yaml.safe_dump(example))
    applied = await colony.ctl(
        "apply", "-f", str(files[0]), "-f", str(files[1]), "-f", str(adapted),
        "--wait", "--timeout", "60",
    )  # fmt: skip
    assert "workspaceclass/jupyter-notebook-0-3-0 " in applied.stdout
    assert f"workspace {name} running" in applied.stdout
    status = await colony.workspace(name)
    assert status["resolvedResources"]["perReplica"]["gpuNodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"
    }
    (pod,) = running(await pods(colony, cluster, f"ws-{name}"))
    assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "1"
    assert pod.spec.node_selector["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    await colony.ctl("cluster", "delete", cluster, "--wait", "--timeout", "120")


# --- Secrets never reach a history ---------------------------------------------------------------


async def test_a_notebook_password_is_in_no_workflow_history(colony: Colony) -> None:
    cluster, name = unique("secret"), unique("nb")
    planted = "planted-" + unique("pw")
    await create_cluster(colony, cluster, cpu_pool())
    await colony.ctl(
        "workspace", "deploy", name, "--class", "colony-jupyter-1-0-0", "--cluster", cluster,
        "--set", f"notebookPassword={planted}", "--wait", "--timeout", "60",
    )  # fmt: skip
    await colony.ctl("workspace", "suspend", name, "--wait", "--timeout", "60")
    await colony.ctl("workspace", "resume", name, "--wait", "--timeout", "60")
    # It reached the chart, through the values Secret beside the ServiceSet.
    secret = await call(
        client.CoreV1Api(colony.management).read_namespaced_secret,
        workspace_values_secret_name("", cluster, name),
        NAMESPACE,
    )
    assert yaml.safe_load(base64.b64decode(secret.data["values"])) == {"notebookPassword": planted}
    status = (await colony.ctl("workspace", "get", name, "-o", "json")).stdout
    assert planted not in status
    await colony.ctl("workspace", "delete", name, "--wait", "--timeout", "60")
    await colony.ctl("cluster", "delete", cluster, "--wait", "--timeout", "120")

    scanned = []
    async for execution in colony.temporal.list_workflows():
        history = await colony.temporal.get_workflow_handle(
            execution.id, run_id=execution.run_id
        ).fetch_history()
        text = history_text(history)
        assert planted not in text, f"{execution.id} holds the password"
        if execution.id == f"workspace/{name}":
            # The scan reads payloads: the sealed answer's scope is there, in the clear.
            assert f"workspace/{name}/notebookPassword" in text
        scanned.append(execution.id)
    assert f"workspace/{name}" in scanned
    assert f"cluster/{cluster}" in scanned
