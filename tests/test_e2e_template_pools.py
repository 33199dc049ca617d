"""End to end: a cluster from k0rdent's `aws-standalone-cp` template, its workers pool scaled up
and down through Cluster API's MachineDeployment (`workflows/cluster/supply.py`).

`colonyctl apply -f` an exalsius Colony whose entry is the cloud template -> Temporal dev server ->
the real worker and activities -> the sim, whose Cluster API controller
(`sim.controllers.capi`) makes the MachineDeployment's Machines and Nodes and counts its own drain.
The template's values schema is k0rdent's (`../shared/k0rdent-templates/`; skipped when absent).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from temporalio.testing import WorkflowEnvironment

from models.activity_api import DELETE_MACHINE_ANNOTATION, PRE_DRAIN_HOOK
from models.cluster import cluster_deployment_name
from sim.cloud import load_cloud_templates
from sim.controllers.capi import ClusterApiControllers
from sim.records import EvictionRecord
from sim.world import EMULATED, SimWorld
from tests.helpers import eventually, unique
from tests.simenv import NAMESPACE, call, child_api, close_client, worker_world
from tests.test_e2e_clusters import Colony, pool

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

AWS = "aws-standalone-cp-1-0-43"


@asynccontextmanager
async def template_colony(
    dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory, world: str
) -> AsyncIterator[Colony]:
    """A world of the kind named, a worker (sealing keys, the class catalog) and `colonyctl`'s
    environment."""
    async with worker_world(
        dev_env.client,
        tmp_path_factory.mktemp("sim"),
        tmp_path_factory.mktemp("keys"),
        unique("e2e-template"),
        world=world,
    ) as running:
        started = running.world
        if not load_cloud_templates(started.config.k0rdent_templates):
            pytest.skip("k0rdent's template values not found (COLONY_K0RDENT_TEMPLATES)")
        yield Colony(started, running.env, running.management)
        assert not started.rejected_writes(), started.rejected_writes()


@pytest.fixture(scope="module")
async def colony(
    dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Colony]:
    async with template_colony(dev_env, tmp_path_factory, EMULATED) as running:
        yield running


def aws_entry(entry: str, workers: int, **config: Any) -> dict[str, Any]:
    return {
        "clusterName": entry,
        "clusterDeploymentSpec": {
            "template": AWS,
            "credential": "aws-credential",
            "config": {
                "controlPlaneNumber": 1,
                "workersNumber": workers,
                "region": "eu-central-1",
                "clusterIdentity": {"name": "aws-cluster-identity", "namespace": NAMESPACE},
                "worker": {"instanceType": "g6e.xlarge", "iamInstanceProfile": "nodes"},
                **config,
            },
        },
    }


def manifest(path: Path, name: str, *entries: dict[str, Any]) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "infra.exalsius.ai/v1",
                "kind": "Colony",
                "metadata": {"name": name},
                "spec": {"colonyClusters": list(entries)},
            }
        )
    )
    return path


async def machines_of(colony: Colony, cluster: str) -> dict[str, str]:
    """Machine -> Node of a cluster's Machines (not being deleted), read from the management
    cluster's API (the emulator's or a real one)."""
    listed = await call(
        client.CustomObjectsApi(colony.management).list_namespaced_custom_object,
        "cluster.x-k8s.io", "v1beta2", NAMESPACE, "machines",
        label_selector=f"cluster.x-k8s.io/cluster-name={cluster}",
    )  # fmt: skip
    return {
        m["metadata"]["name"]: ((m.get("status") or {}).get("nodeRef") or {}).get("name", "")
        for m in listed["items"]
        if not m["metadata"].get("deletionTimestamp")
    }


def capi(colony: Colony) -> ClusterApiControllers:
    """The sim's Cluster API controller (both worlds run it), which counts its own drains."""
    controllers = colony.world.k0rdent.cluster_api  # type: ignore[attr-defined]
    assert isinstance(controllers, ClusterApiControllers)
    return controllers


async def test_a_cloud_template_pool_scales_and_drains_through_its_machine_deployment(
    colony: Colony, tmp_path: Path
) -> None:
    world = colony.world
    name = unique("cloud")
    cluster = f"{name}--aws"
    deployment = cluster_deployment_name(cluster)
    await colony.ctl("apply", "-f", str(manifest(tmp_path / "c.yaml", name, aws_entry("aws", 2))))

    async def status() -> dict[str, Any]:
        result = await colony.ctl("cluster", "get", cluster, "-o", "json", expect=None)
        return json.loads(result.stdout) if result.exit_code == 0 else {}

    ready = await eventually(
        status,
        until=lambda s: bool(s.get("nodePools")) and pool(s, "workers")["readyCount"] == 2,
        timeout=120,
        interval=0.5,
        what="the workers pool Ready with 2 nodes",
    )
    workers = pool(ready, "workers")
    assert workers["supply"] == "machine-deployment"
    assert workers["sku"]["instanceType"] == "g6e.xlarge"
    assert workers["count"] == 2

    # Scale up: workersNumber 4, each new Machine's Node labelled and Ready.
    await colony.ctl(
        "node-pool", "scale", cluster, "workers", "--count", "4", "--wait", "--timeout", "90"
    )
    grown = await status()
    assert pool(grown, "workers")["readyCount"] == 4
    by_machine = await machines_of(colony, deployment)
    assert len(by_machine) == 4
    api = await child_api(colony.management, deployment)
    core = client.CoreV1Api(api)
    nodes = await call(core.list_node)
    for node in nodes.items:
        labels = node.metadata.labels
        assert labels["colony.dev/node-pool"] == "workers"
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-L40S"
        assert node.status.allocatable["nvidia.com/gpu"] == "1"

    # A GPU notebook through the cluster's GPU ledger (the nodes' GPUs as GFD labels them), and a
    # job on each other node.
    notebook = unique("nb")
    await colony.ctl(
        "workspace", "deploy", notebook, "--class", "colony-jupyter-1-0-0", "--cluster", cluster,
        "--gpus", "1", "--set", "notebookPassword=pw", "--wait", "--timeout", "90",
    )  # fmt: skip
    notebook_pods = await call(core.list_namespaced_pod, f"ws-{notebook}")
    kept = {p.spec.node_name for p in notebook_pods.items if p.spec.node_name}.pop()
    node_names = sorted(by_machine.values())
    for i, node in enumerate(n for n in node_names if n != kept):
        await call(
            core.create_namespaced_pod,
            "default",
            {
                "metadata": {"name": f"job-{i}"},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
            },
        )
    since = world.records.last_seq

    # Scale down to 1: Colony picks the three least loaded, marks their Machines, drains them.
    await colony.ctl(
        "node-pool", "scale", cluster, "workers", "--count", "1", "--wait", "--timeout", "90"
    )
    shrunk = await status()
    assert pool(shrunk, "workers")["count"] == 1
    assert [n["name"] for n in pool(shrunk, "workers")["nodes"]] == [kept]
    left = await eventually(
        lambda: machines_of(colony, deployment),
        until=lambda m: len(m) == 1,
        timeout=60,
        what="one Machine left",
    )
    assert list(left.values()) == [kept], "exactly the drained nodes' Machines were deleted"
    # Colony's drain evicted the jobs: its own counts, per node, and (the emulator's API server
    # records every eviction it accepted) exactly those pods of the user's.
    scale_down = next(
        o
        for o in reversed(shrunk["completedOperations"])
        if o["request"]["kind"] == "scale_node_pool"
    )
    drained = {n["node"]: n for n in scale_down["progress"]["nodes"]}
    assert sorted(drained) == sorted(n for n in node_names if n != kept)
    assert all(n["podsEvicted"] >= 1 and n["step"] == "removed" for n in drained.values())
    if isinstance(world, SimWorld):
        evicted = {
            r.name
            for r in world.records.since(since)
            if isinstance(r, EvictionRecord) and r.namespace == "default"
        }
        assert evicted == {"job-0", "job-1", "job-2"}, "Colony drained the three leaving nodes"
    removed = [m for m, node in by_machine.items() if node != kept]
    for machine in removed:
        drain = capi(colony).drain_of(machine)
        assert drain is not None, f"CAPI deleted {machine}"
        assert drain.evicted == [], f"CAPI's own drain found {drain.evicted} left on {machine}"
    assert capi(colony).drain_of(next(m for m, n in by_machine.items() if n == kept)) is None
    still = await call(core.list_namespaced_pod, f"ws-{notebook}")
    assert still.items
    assert all(p.metadata.deletion_timestamp is None for p in still.items)
    close_client(api)
    await colony.ctl("workspace", "delete", notebook, "--wait", "--timeout", "60")

    await colony.ctl("colony", "delete", name)
    await eventually(
        lambda: colony.ctl("cluster", "get", cluster, expect=None),
        until=lambda r: r.exit_code == 3,
        timeout=120,
        interval=0.5,
        what="the cluster deleted",
    )
    assert await machines_of(colony, deployment) == {}


async def test_a_config_the_templates_schema_refuses_fails_before_anything_is_made(
    colony: Colony, tmp_path: Path
) -> None:
    name = unique("bad")
    cluster = f"{name}--aws"
    entry = aws_entry("aws", 2, workersNumber=-1)
    await colony.ctl("apply", "-f", str(manifest(tmp_path / "c.yaml", name, entry)))

    async def status() -> dict[str, Any]:
        result = await colony.ctl("cluster", "get", cluster, "-o", "json", expect=None)
        return json.loads(result.stdout) if result.exit_code == 0 else {}

    failed = await eventually(
        status, until=lambda s: s.get("phase") == "failed", timeout=60, what="refused"
    )
    assert "config.workersNumber: -1 is less than the minimum of 0" in failed["reason"]
    listed = await call(
        client.CustomObjectsApi(colony.management).list_namespaced_custom_object,
        "k0rdent.mirantis.com", "v1beta1", NAMESPACE, "clusterdeployments",
    )  # fmt: skip
    names = [d["metadata"]["name"] for d in listed["items"]]
    assert cluster_deployment_name(cluster) not in names, "nothing was made"
    await colony.ctl("colony", "delete", name)


async def test_a_colony_reapplied_with_another_workers_number_scales_its_cluster(
    colony: Colony, tmp_path: Path
) -> None:
    name = unique("grow")
    cluster = f"{name}--aws"
    deployment = cluster_deployment_name(cluster)
    path = tmp_path / "c.yaml"

    async def workers() -> dict[str, Any]:
        result = await colony.ctl("cluster", "get", cluster, "-o", "json", expect=None)
        status = json.loads(result.stdout) if result.exit_code == 0 else {}
        found = [p for p in status.get("nodePools") or [] if p["name"] == "workers"]
        return found[0] if found else {}

    def settled(count: int) -> Any:
        return lambda p: p.get("count") == count and p.get("readyCount") == count

    await colony.ctl("apply", "-f", str(manifest(path, name, aws_entry("aws", 1))))
    await eventually(workers, until=settled(1), timeout=120, interval=0.5, what="1 worker")
    # `colony apply` with workersNumber 3: the cluster's workers pool scales up ...
    await colony.ctl("colony", "apply", "-f", str(manifest(path, name, aws_entry("aws", 3))))
    await eventually(workers, until=settled(3), timeout=120, interval=0.5, what="3 workers")
    assert len(await machines_of(colony, deployment)) == 3
    # ... and down again, through Colony's drain: CAPI's own drain finds nothing to evict.
    before = await machines_of(colony, deployment)
    await colony.ctl("colony", "apply", "-f", str(manifest(path, name, aws_entry("aws", 2))))
    await eventually(workers, until=settled(2), timeout=120, interval=0.5, what="2 workers")
    left = await eventually(
        lambda: machines_of(colony, deployment),
        until=lambda m: len(m) == 2,
        timeout=60,
        what="two Machines left",
    )
    (gone,) = set(before) - set(left)
    drain = capi(colony).drain_of(gone)
    assert drain is not None
    assert drain.evicted == [], drain
    await colony.ctl("colony", "delete", name)
    await eventually(
        lambda: colony.ctl("cluster", "get", cluster, expect=None),
        until=lambda r: r.exit_code == 3,
        timeout=120,
        interval=0.5,
        what="the cluster deleted",
    )


async def test_colonyctl_creates_a_cluster_from_a_cloud_template_spec_file(
    colony: Colony, tmp_path: Path
) -> None:
    name = unique("file")
    spec = tmp_path / "cluster.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "locationId": "",
                "deploymentSpec": aws_entry("x", 1)["clusterDeploymentSpec"],
            }
        )
    )
    await colony.ctl("cluster", "create", "-f", str(spec), "--wait", "--timeout", "90")
    status = json.loads((await colony.ctl("cluster", "get", name, "-o", "json")).stdout)
    workers = pool(status, "workers")
    assert (workers["count"], workers["readyCount"], workers["supply"]) == (
        1, 1, "machine-deployment"
    )  # fmt: skip
    await colony.ctl("cluster", "delete", name, "--wait", "--timeout", "90")


async def create_from_file(colony: Colony, tmp_path: Path, workers: int, **spec: Any) -> str:
    """A cluster of `aws-standalone-cp` through `colonyctl cluster create -f` (operator settings
    such as `drainDeadline` included), once Ready."""
    name = unique("edge")
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "locationId": "",
                "deploymentSpec": aws_entry("x", workers)["clusterDeploymentSpec"],
                **spec,
            }
        )
    )
    await colony.ctl("cluster", "create", "-f", str(path), "--wait", "--timeout", "90")
    return name


async def marks_and_cordons(colony: Colony, cluster: str) -> tuple[list[str], list[str]]:
    """(Machines carrying any of Colony's marks, Nodes cordoned) of a cluster."""
    listed = await call(
        client.CustomObjectsApi(colony.management).list_namespaced_custom_object,
        "cluster.x-k8s.io", "v1beta2", NAMESPACE, "machines",
        label_selector=f"cluster.x-k8s.io/cluster-name={cluster}",
    )  # fmt: skip
    marked = [
        m["metadata"]["name"]
        for m in listed["items"]
        if {PRE_DRAIN_HOOK, DELETE_MACHINE_ANNOTATION} & set(m["metadata"].get("annotations") or {})
    ]
    api = await child_api(colony.management, cluster)
    try:
        nodes = await call(client.CoreV1Api(api).list_node)
    finally:
        close_client(api)
    return marked, [n.metadata.name for n in nodes.items if n.spec.unschedulable]


async def test_a_drain_past_its_deadline_leaves_every_machine_and_nothing_cordoned(
    colony: Colony, tmp_path: Path
) -> None:
    name = await create_from_file(colony, tmp_path, 2, drainDeadline="PT3S")
    before = await machines_of(colony, name)
    api = await child_api(colony.management, name)
    core, policy = client.CoreV1Api(api), client.PolicyV1Api(api)
    for i, node in enumerate(sorted(before.values())):
        await call(
            core.create_namespaced_pod, "default",
            {"metadata": {"name": f"db-{i}", "labels": {"app": "db"}},
             "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}},
        )  # fmt: skip
    await call(
        policy.create_namespaced_pod_disruption_budget, "default",
        {"metadata": {"name": "db"},
         "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "db"}}}},
    )  # fmt: skip
    close_client(api)
    failed = await colony.ctl(
        "node-pool", "scale", name, "workers", "--count", "1", "--wait", "--timeout", "60",
        expect=None,
    )  # fmt: skip
    assert failed.exit_code != 0
    status = json.loads((await colony.ctl("cluster", "get", name, "-o", "json")).stdout)
    op = status["completedOperations"][-1]
    assert op["state"] == "failed"
    assert "drain did not finish within 3s" in op["reason"], op
    assert pool(status, "workers")["count"] == 2
    assert await machines_of(colony, name) == before, "no Machine deleted"
    assert await marks_and_cordons(colony, name) == ([], [])
    await colony.ctl("cluster", "delete", name, "--wait", "--timeout", "90")


async def test_workers_changed_outside_colony_are_reported_and_left_alone(
    colony: Colony, tmp_path: Path
) -> None:
    name = await create_from_file(colony, tmp_path, 2)
    before = await machines_of(colony, name)
    custom = client.CustomObjectsApi(colony.management)
    await call(
        custom.patch_namespaced_custom_object,
        "k0rdent.mirantis.com", "v1beta1", NAMESPACE, "clusterdeployments", name,
        {"spec": {"config": {"workersNumber": 3}}},
    )  # fmt: skip
    failed = await colony.ctl(
        "node-pool", "scale", name, "workers", "--count", "1", "--wait", "--timeout", "60",
        expect=None,
    )  # fmt: skip
    assert failed.exit_code != 0
    status = json.loads((await colony.ctl("cluster", "get", name, "-o", "json")).stdout)
    op = status["completedOperations"][-1]
    assert op["state"] == "failed"
    assert "is 3, not the 2 Colony set: it was changed outside Colony" in op["reason"], op
    deployment = await call(
        custom.get_namespaced_custom_object,
        "k0rdent.mirantis.com", "v1beta1", NAMESPACE, "clusterdeployments", name,
    )  # fmt: skip
    assert deployment["spec"]["config"]["workersNumber"] == 3, "never fought"
    now = await eventually(
        lambda: machines_of(colony, name), until=lambda m: len(m) == 3, what="CAPI's 3rd Machine"
    )
    assert set(before) <= set(now), "none of the Machines there before was deleted"
    assert await marks_and_cordons(colony, name) == ([], [])
    await colony.ctl("cluster", "delete", name, "--wait", "--timeout", "90")


async def test_a_cancelled_scale_down_keeps_its_machines_and_a_named_node_goes_alone(
    colony: Colony, tmp_path: Path
) -> None:
    name = await create_from_file(colony, tmp_path, 3)
    before = await machines_of(colony, name)
    api = await child_api(colony.management, name)
    core, policy = client.CoreV1Api(api), client.PolicyV1Api(api)
    for i, node in enumerate(sorted(before.values())):
        await call(
            core.create_namespaced_pod, "default",
            {"metadata": {"name": f"db-{i}", "labels": {"app": "db"}},
             "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}},
        )  # fmt: skip
    await call(
        policy.create_namespaced_pod_disruption_budget, "default",
        {"metadata": {"name": "db"},
         "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "db"}}}},
    )  # fmt: skip
    accepted = json.loads(
        (
            await colony.ctl("node-pool", "scale", name, "workers", "--count", "1", "-o", "json")
        ).stdout
    )

    async def blocked() -> bool:
        current = json.loads((await colony.ctl("cluster", "get", name, "-o", "json")).stdout).get(
            "currentOperation"
        )
        return bool(current and any(n["blockingPods"] for n in current["progress"]["nodes"]))

    await eventually(blocked, timeout=60, interval=0.3, what="the drain held by the budget")
    marked, cordoned = await marks_and_cordons(colony, name)
    assert len(marked) == 2
    assert len(cordoned) == 2
    await colony.ctl("operation", "cancel", name, accepted["operationId"], "--reason", "e2e")
    assert await marks_and_cordons(colony, name) == ([], [])
    assert await machines_of(colony, name) == before, "a cancelled scale-down deletes nothing"

    # `node delete` names the node: its Machine, and only it, goes.
    await call(policy.delete_namespaced_pod_disruption_budget, "db", "default")
    close_client(api)
    victim_machine, victim = sorted(before.items())[1]
    await colony.ctl("node", "delete", name, victim, "--wait", "--timeout", "60")
    left = await eventually(
        lambda: machines_of(colony, name), until=lambda m: len(m) == 2, what="2 Machines"
    )
    assert victim_machine not in left
    assert set(left) == set(before) - {victim_machine}
    assert await marks_and_cordons(colony, name) == ([], [])
    await colony.ctl("cluster", "delete", name, "--wait", "--timeout", "90")
