"""End to end: `colonyctl` -> Temporal dev server -> the real worker and activities -> the sim.

One simulated world (instant timing) and one in-process worker with the real activities serve the
module; each test drives its own uniquely named cluster through `colonyctl` as a user would
(Typer's runner in a thread, so the sim and the worker keep running on the test's loop), and checks
the effects on the simulated infrastructure directly.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner, Result

from models.cluster import cluster_deployment_name
from sim.faults import RequestFault
from sim.world import SimWorld
from starter.cli import app, normalize_argv
from tests.conftest import venv_binary
from tests.helpers import eventually, unique
from tests.simenv import (
    NAMESPACE,
    call,
    child_api,
    close_client,
    colony_env,
    host_provider,
    management_api,
    started_world,
)
from worker import build_worker

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

GPU_MODEL = "h100-80gb"
LOCATION = "fra1"


@dataclass
class Colony:
    """Everything a test needs: the world, the worker's task queue and `colonyctl`'s environment."""

    world: SimWorld
    env: dict[str, str]
    management: client.ApiClient

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

    async def status(self, cluster: str) -> dict[str, Any]:
        result = await self.ctl("cluster", "get", cluster, "-o", "json")
        data: dict[str, Any] = json.loads(result.stdout)
        return data

    def claimed_by(self, cluster: str) -> list[str]:
        """Hosts the provider lists as held by any run of the cluster's workflow."""
        return [
            host.id
            for host in self.world.inventory.hosts(state="claimed")
            if (host.owner or "").startswith(f"cluster/{cluster}/")
        ]


@pytest.fixture(scope="module")
async def colony(
    dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Colony]:
    task_queue = unique("e2e")
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
            yield Colony(world, env, management)
        close_client(management)
        # Every k0rdent object Colony wrote passed the schema (k0rdent's real one in CI).
        assert not world.store.rejected_writes, list(world.store.rejected_writes)


@pytest.fixture(autouse=True)
def _no_faults(colony: Colony) -> Iterator[None]:
    colony.world.faults.clear()
    yield
    colony.world.faults.clear()


def pool(status: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in status["nodePools"] if p["name"] == name)


async def node_labels(colony: Colony, cluster: str) -> dict[str, dict[str, str]]:
    api = await child_api(colony.management, cluster)
    try:
        nodes = await call(client.CoreV1Api(api).list_node)
        return {n.metadata.name: dict(n.metadata.labels or {}) for n in nodes.items}
    finally:
        close_client(api)


async def run_kubectl(kubeconfig: Path, *args: str) -> tuple[int, str, str]:
    """kubectl as a subprocess of the loop (so the in-process sim keeps answering it)."""
    process = await asyncio.create_subprocess_exec(
        venv_binary("kubectl"),
        "--kubeconfig",
        str(kubeconfig),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PATH": f"{Path(venv_binary('kubectl')).parent}:{os.environ['PATH']}"},
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    return process.returncode or 0, stdout.decode(), stderr.decode()


async def create_cluster(colony: Colony, name: str, count: int, *extra: str) -> None:
    result = await colony.ctl(
        "cluster", "create", name, "--location-id", LOCATION,
        "--node-pool", f"name=gpu,count={count},gpuModelId={GPU_MODEL}",
        "--wait", "--timeout", "90", *extra,
    )  # fmt: skip
    assert "http://127.0.0.1:8233/namespaces/default/workflows/cluster%2F" in result.stderr


async def delete_cluster(colony: Colony, name: str) -> None:
    await colony.ctl("cluster", "delete", name, "--wait", "--timeout", "90")


async def test_cluster_life_create_scale_drain_delete(colony: Colony, tmp_path: Path) -> None:
    name = unique("life")
    await create_cluster(colony, name, 2)

    status = await colony.status(name)
    assert status["phase"] == "ready"
    assert (pool(status, "gpu")["count"], pool(status, "gpu")["readyCount"]) == (2, 2)
    labels = await node_labels(colony, name)
    assert len(labels) == 2
    for node in labels.values():
        assert node["colony.dev/node-pool"] == "gpu"
        assert node["colony.dev/sku"] == GPU_MODEL
    listed = json.loads((await colony.ctl("cluster", "list", "-o", "json")).stdout)
    assert name in [c["name"] for c in listed]
    nodes = json.loads((await colony.ctl("node", "list", name, "-o", "json")).stdout)
    assert sorted(n["name"] for n in nodes) == sorted(labels)

    # kubectl through a kubeconfig without credentials: the exec plugin runs `colonyctl token`.
    kubeconfig = tmp_path / "kubeconfig"
    await colony.ctl("kubeconfig", "--cluster", name, "--output", str(kubeconfig))
    written = kubeconfig.read_text()
    assert "token:" not in written
    assert "client-key" not in written
    code, out, err = await run_kubectl(kubeconfig, "get", "nodes", "-o", "name")
    assert code == 0, err
    assert sorted(line.removeprefix("node/") for line in out.split()) == sorted(labels)
    token = json.loads((await colony.ctl("token", "--cluster", name)).stdout)
    assert token["kind"] == "ExecCredential"
    assert token["status"]["expirationTimestamp"]

    # The token belongs to a ServiceAccount bound to cluster-admin in that cluster only.
    bound = await call(
        client.RbacAuthorizationV1Api(
            await child_api(colony.management, name)
        ).read_cluster_role_binding,
        "colony-admin",
    )
    assert bound.role_ref.name == "cluster-admin"

    # Scale up: readyCount rises to the new count.
    accepted = json.loads(
        (await colony.ctl("node-pool", "scale", name, "gpu", "--count", "3", "-o", "json")).stdout
    )
    seen: list[int] = []

    async def ready_count() -> int:
        count = int(pool(await colony.status(name), "gpu")["readyCount"])
        seen.append(count)
        return count

    await eventually(ready_count, until=lambda c: c == 3, timeout=60, interval=0.3, what="3 ready")
    assert seen == sorted(seen), f"readyCount went down: {seen}"
    final = await colony.status(name)
    op = next(o for o in final["completedOperations"] if o["id"] == accepted["operationId"])
    assert op["state"] == "succeeded"

    # Workloads: a DaemonSet everywhere, and one pod per node that a budget protects.
    api = await child_api(colony.management, name)
    core, apps, policy = client.CoreV1Api(api), client.AppsV1Api(api), client.PolicyV1Api(api)
    await call(
        apps.create_namespaced_daemon_set,
        "default",
        {
            "metadata": {"name": "agent"},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {
                    "metadata": {"labels": {"app": "agent"}},
                    "spec": {"containers": [{"name": "a", "image": "busybox"}]},
                },
            },
        },
    )
    node_names = sorted((await node_labels(colony, name)).keys())
    for index, node in enumerate(node_names):
        await call(
            core.create_namespaced_pod,
            "default",
            {
                "metadata": {"name": f"train-{index}", "labels": {"app": "train"}},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
            },
        )
    await call(
        policy.create_namespaced_pod_disruption_budget,
        "default",
        {
            "metadata": {"name": "train"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "train"}}},
        },
    )

    async def daemon_pods() -> int:
        pods = await call(core.list_namespaced_pod, "default", label_selector="app=agent")
        return len([p for p in pods.items if p.spec.node_name])

    await eventually(daemon_pods, until=lambda n: n == 3, timeout=30, what="DaemonSet on 3 nodes")

    # Scale down with a drain: the budget holds it, relaxing the budget lets it finish.
    scale_down = json.loads(
        (await colony.ctl("node-pool", "scale", name, "gpu", "--count", "2", "-o", "json")).stdout
    )

    async def running_op() -> dict[str, Any] | None:
        current = (await colony.status(name)).get("currentOperation")
        return current if current and current["id"] == scale_down["operationId"] else None

    blocked = await eventually(
        running_op,
        until=lambda op: bool(op and any(n["blockingPods"] for n in op["progress"]["nodes"])),
        timeout=60,
        interval=0.3,
        what="drain blocked by the budget",
    )
    assert blocked is not None
    victim = blocked["progress"]["nodes"][0]["node"]
    assert "train" in blocked["progress"]["nodes"][0]["blockingPods"][0]
    on_victim = await call(
        core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={victim}"
    )
    agent = [p for p in on_victim.items if (p.metadata.labels or {}).get("app") == "agent"]
    assert agent, "a DaemonSet pod runs on the node being drained"
    assert agent[0].metadata.deletion_timestamp is None, "DaemonSet pod left in place"

    await call(policy.delete_namespaced_pod_disruption_budget, "train", "default")
    close_client(api)

    async def scale_down_op() -> dict[str, Any] | None:
        done = (await colony.status(name))["completedOperations"]
        return next((o for o in done if o["id"] == scale_down["operationId"]), None)

    finished = await eventually(scale_down_op, timeout=60, interval=0.3, what="scale-down done")
    assert finished is not None
    assert finished["state"] == "succeeded", finished
    drained = finished["progress"]["nodes"][0]
    assert drained["podsEvicted"] == 1, "only the budgeted pod is evicted, not the DaemonSet's"
    assert victim not in await node_labels(colony, name)

    # Delete a node without a drain: the pool shrinks by one, nothing is evicted.
    remaining = sorted((await node_labels(colony, name)).keys())
    result = await colony.ctl(
        "node", "delete", name, remaining[0], "--drain=false", "--wait", "-o", "json"
    )
    deleted = json.loads(result.stdout)
    assert deleted["request"]["drain"] is False
    assert all(n["podsEvicted"] == 0 for n in deleted["progress"]["nodes"])
    status = await colony.status(name)
    assert pool(status, "gpu")["count"] == 1
    assert len(await node_labels(colony, name)) == 1
    # The last node of a pool cannot be deleted on its own: refused before anything runs.
    refused = await colony.ctl("node", "delete", name, remaining[1], expect=2)
    assert "delete the pool" in refused.stderr
    assert len(refused.stderr.splitlines()) == 1

    # Delete: the ClusterDeployment goes, hosts are released, the name is free again.
    await delete_cluster(colony, name)
    custom = client.CustomObjectsApi(colony.management)
    with pytest.raises(client.exceptions.ApiException) as gone:
        await call(
            custom.get_namespaced_custom_object,
            "k0rdent.mirantis.com", "v1beta1", NAMESPACE, "clusterdeployments", name,
        )  # fmt: skip
    assert gone.value.status == 404
    assert colony.claimed_by(name) == []
    missing = await colony.ctl("cluster", "get", name, expect=3)
    assert "not found" in missing.stderr
    again = tmp_path / "again.yaml"
    again.write_text(
        f"kind: Cluster\nmetadata: {{name: {name}}}\nspec: {{locationId: {LOCATION}}}\n"
    )
    await colony.ctl("apply", "-f", str(again))
    await delete_cluster(colony, name)
    assert colony.claimed_by(name) == []


async def test_node_that_never_joins_releases_its_host(colony: Colony) -> None:
    name = unique("nojoin")
    await create_cluster(colony, name, 1, "--join-deadline", "12s")
    cpu_hosts = colony.world.inventory.hosts(
        location=LOCATION, cpu_sku="cpu-32c-256g", state="free"
    )
    for host in cpu_hosts:
        colony.world.faults.node_never_ready(host.address)
    result = await colony.ctl(
        "node-pool", "create", name, "--name", "cpu", "--count", "1",
        "--cpu-sku", "cpu-32c-256g", "--wait", "--timeout", "90",
        expect=1,
    )  # fmt: skip
    assert "not Ready within 12s" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()[-1:]) == 1
    status = await colony.status(name)
    # A pool whose add failed is not a pool: it is gone from status, its host released, and
    # the same request can be sent again.
    assert [p["name"] for p in status["nodePools"]] == ["gpu"]
    failed = status["completedOperations"][-1]
    assert failed["state"] == "failed"
    assert "released" in failed["reason"]
    assert all(h.state == "free" for h in colony.world.inventory.hosts(cpu_sku="cpu-32c-256g"))
    colony.world.faults.clear()
    await colony.ctl(
        "node-pool", "create", name, "--name", "cpu", "--count", "1",
        "--cpu-sku", "cpu-32c-256g", "--wait", "--timeout", "90",
    )  # fmt: skip
    assert pool(await colony.status(name), "cpu")["readyCount"] == 1
    await delete_cluster(colony, name)
    assert colony.claimed_by(name) == []


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        pytest.param(("cluster", "get", "absent-cluster"), 3, "not found", id="get-absent"),
        pytest.param(("cluster", "delete", "absent-cluster"), 3, "not found", id="delete-absent"),
        pytest.param(
            ("node-pool", "scale", "absent-cluster", "gpu", "--count", "2"),
            3,
            "not found",
            id="scale-absent-cluster",
        ),
        pytest.param(
            ("cluster", "create", "x-unknown-location", "--location-id", "mars1"),
            2,
            "locationId: unknown location 'mars1'",
            id="unknown-location",
        ),
        pytest.param(
            (
                "cluster",
                "create",
                "x-unknown-gpu",
                "--location-id",
                "fra1",
                "--node-pool",
                "name=gpu,count=1,gpuModelId=b300",
            ),
            2,
            "nodePools[0].sku.gpuModelId: unknown GPU model 'b300'",
            id="unknown-gpu-model",
        ),
    ],
)
async def test_refusals_need_no_workflow(
    colony: Colony, args: Sequence[str], code: int, message: str
) -> None:
    result = await colony.ctl(*args, expect=code)
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


async def test_update_validator_rejections_and_catalog(colony: Colony) -> None:
    locations = json.loads((await colony.ctl("catalog", "location", "list", "-o", "json")).stdout)
    assert LOCATION in [loc["id"] for loc in locations]
    models = json.loads((await colony.ctl("catalog", "gpu-model", "list", "-o", "json")).stdout)
    assert GPU_MODEL in [m["id"] for m in models]
    skus = json.loads((await colony.ctl("catalog", "cpu-sku", "list", "-o", "json")).stdout)
    assert "cpu-32c-256g" in [s["id"] for s in skus]

    name = unique("rej")
    # The management cluster answers reads of ClusterDeployments slowly, so the create is still
    # running when the scale arrives (with the sim's instant timing it could be done already).
    colony.world.faults.add_rule(
        RequestFault(
            target="management", path="/clusterdeployments", method="GET", latency_seconds=3
        )
    )
    await colony.ctl("cluster", "create", name, "--location-id", LOCATION)
    # While creating, only delete is accepted: the validator's reason, on one line.
    early = await colony.ctl("node-pool", "scale", name, "gpu", "--count", "2", expect=2)
    assert "still being created: only delete is accepted" in early.stderr
    colony.world.faults.clear()
    await colony.ctl("cluster", "delete", name, "--wait", "--timeout", "90")
    assert colony.claimed_by(name) == []


async def test_a_colony_of_two_clusters_through_colonyctl(colony: Colony, tmp_path: Path) -> None:
    name = unique("fleet")
    manifest = tmp_path / "colony.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "colony.dev/v1",
                "kind": "Colony",
                "metadata": {"name": name},
                "spec": {
                    "colonyClusters": [
                        {
                            "clusterName": "gpu",
                            "locationId": LOCATION,
                            "nodePools": [
                                {"name": "gpu", "sku": {"gpuModelId": GPU_MODEL}, "count": 1}
                            ],
                        },
                        {
                            # As an exalsius Colony gives it: a raw ClusterDeployment spec.
                            "clusterName": "lab",
                            "clusterDeploymentSpec": {
                                "template": "docker-hosted-cp-1-0-0",
                                "credential": "docker-stub-credential",
                                "config": {"workersNumber": 1},
                            },
                        },
                    ]
                },
            }
        )
    )
    # `apply -f` takes a Colony as `colony apply -f` does.
    applied = await colony.ctl("apply", "-f", str(manifest))
    assert f"colony/{name} created" in applied.stdout

    async def status() -> dict[str, Any]:
        result = await colony.ctl("colony", "get", name, "-o", "json")
        data: dict[str, Any] = json.loads(result.stdout)
        return data

    ready = await eventually(
        status,
        until=lambda s: s["phase"] == "Ready" and any(c["gpus"] for c in s["clusters"]),
        timeout=120,
        interval=0.5,
        what="colony ready with its GPU inventory",
    )
    assert (ready["readyClusters"], ready["totalClusters"]) == (2, 2)
    gpu = next(c for c in ready["clusters"] if c["entry"] == "gpu")
    assert gpu["cluster"] == f"{name}--gpu"
    (offering,) = gpu["gpus"]
    assert offering["model"] == GPU_MODEL
    assert offering["total"] > 0
    assert offering["nodeSelector"] == {"exalsius.ai/gpu-model": GPU_MODEL}
    secret = await call(
        client.CoreV1Api(colony.management).read_namespaced_secret,
        f"{name}-kubeconfigs",
        "kcm-system",
    )
    # The exalsius operator's shape: by ClusterDeployment, each a JSON ObjectReference.
    deployments = sorted(cluster_deployment_name(f"{name}--{entry}") for entry in ("gpu", "lab"))
    assert sorted(secret.data) == deployments
    assert [json.loads(base64.b64decode(secret.data[d])) for d in deployments] == [
        {"apiVersion": "v1", "kind": "Secret", "namespace": "kcm-system", "name": f"{d}-kubeconfig"}
        for d in deployments
    ]
    listed = await colony.ctl("colony", "list", "-o", "json")
    assert [c["organization"] for c in json.loads(listed.stdout) if c["name"] == name] == [""]
    table = (await colony.ctl("colony", "list")).stdout
    assert table.splitlines()[0].split() == ["ORGANIZATION", "NAME", "PHASE"]

    await colony.ctl("colony", "delete", name)
    await eventually(
        lambda: colony.ctl("colony", "get", name, expect=None),
        until=lambda r: r.exit_code == 3,
        timeout=120,
        interval=0.5,
        what="colony deleted",
    )
    assert colony.claimed_by(f"{name}--gpu") == []
    await colony.ctl("cluster", "get", f"{name}--gpu", expect=3)
