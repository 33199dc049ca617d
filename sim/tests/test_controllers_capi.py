"""Cluster API's worker machinery in the sim (`sim.controllers.capi`) and the cloud template family
(`sim.cloud`), in a world on Cluster API's real CRDs.

The world installs the CRDs of `../shared/capi-crds/` (read at test time, never copied into the
project) in place of the sim's own, so every MachineDeployment, MachineSet and Machine the
controllers write is validated by the store against Cluster API's own v1beta2 schema: an empty
`rejected_writes` at the end proves they fit. The cloud templates' values are k0rdent's
(`../shared/k0rdent-templates/`). Skipped cleanly when either folder is absent.
"""

from __future__ import annotations

import functools
import json
import os
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.apiserver.registry import CONFIGMAPS, NODES, PDBS, PODS
from sim.apiserver.store import ClusterStore
from sim.cloud import (
    CLOUD_TEMPLATES,
    instance_type,
    schema_config_map_name,
    template_name,
)
from sim.controllers.capi import (
    DELETE_MACHINE_ANNOTATION,
    PRE_DRAIN_HOOK_PREFIX,
    deletion_priority,
)
from sim.controllers.k0rdent import SimChildCluster
from sim.timing import SimTiming
from sim.world import KCM_NAMESPACE, SimWorld, WorldConfig
from tests.helpers import eventually, unique

SHARED = Path(os.environ.get("COLONY_SHARED_DIR") or Path(__file__).resolve().parents[3] / "shared")
CAPI_CRDS = SHARED / "capi-crds"
TEMPLATES = SHARED / "k0rdent-templates"

pytestmark = pytest.mark.skipif(
    not (CAPI_CRDS.is_dir() and TEMPLATES.is_dir()),
    reason=f"Cluster API's CRDs or k0rdent's templates not found under {SHARED}",
)

AWS = template_name("aws-standalone-cp")
K0RDENT = "k0rdent.mirantis.com"
CAPI = "cluster.x-k8s.io"
HOOK = f"{PRE_DRAIN_HOOK_PREFIX}/colony"
Obj = dict[str, Any]


def aws_config(workers: int, instance: str = "g6e.xlarge") -> Obj:
    """Values `aws-standalone-cp` accepts: its schema's required fields and the workers'."""
    return {
        "controlPlaneNumber": 1,
        "workersNumber": workers,
        "region": "eu-central-1",
        "clusterIdentity": {"name": "aws-cluster-identity", "namespace": KCM_NAMESPACE},
        "controlPlane": {"instanceType": "t3.large", "iamInstanceProfile": "control-plane"},
        "worker": {"instanceType": instance, "iamInstanceProfile": "nodes"},
    }


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[SimWorld]:
    config = WorldConfig(
        state_dir=tmp_path,
        timing=SimTiming.instant(),
        crd_paths=[CAPI_CRDS],
        k0rdent_templates=TEMPLATES,
    )
    async with SimWorld(config) as started:
        yield started
    assert not started.store.rejected_writes, started.store.rejected_writes
    assert not started.store.pruned_writes, started.store.pruned_writes


class Cluster:
    """One ClusterDeployment of the world and its Cluster API objects."""

    def __init__(self, world: SimWorld, name: str) -> None:
        self.world, self.name = world, name
        self.store = world.store

    def rt(self, group: str, plural: str) -> Any:
        return self.store.registry.get(group, plural)

    def deployment(self) -> Obj:
        return self.store.get(self.rt(K0RDENT, "clusterdeployments"), KCM_NAMESPACE, self.name)

    def machines(self) -> list[Obj]:
        items, _ = self.store.list(
            self.rt(CAPI, "machines"),
            KCM_NAMESPACE,
            label_selector=f"cluster.x-k8s.io/cluster-name={self.name}",
        )
        return items

    def machine(self, name: str) -> Obj | None:
        return self.store.try_get(self.rt(CAPI, "machines"), KCM_NAMESPACE, name)

    def machine_deployment(self) -> Obj | None:
        return self.store.try_get(
            self.rt(CAPI, "machinedeployments"), KCM_NAMESPACE, f"{self.name}-md"
        )

    def child_store(self) -> ClusterStore:
        child = self.world.child_cluster(KCM_NAMESPACE, self.name)
        assert isinstance(child, SimChildCluster)
        return child.store

    def nodes(self) -> list[Obj]:
        return self.child_store().list(NODES)[0]

    def set_workers(self, workers: int) -> None:
        self.store.mutate(
            self.rt(K0RDENT, "clusterdeployments"),
            KCM_NAMESPACE,
            self.name,
            lambda cd: cd["spec"]["config"].update(workersNumber=workers),
        )

    def annotate(self, machine: str, annotations: dict[str, str | None]) -> None:
        def change(obj: Obj) -> None:
            current = obj["metadata"].setdefault("annotations", {})
            for key, value in annotations.items():
                if value is None:
                    current.pop(key, None)
                else:
                    current[key] = value

        self.store.mutate(self.rt(CAPI, "machines"), KCM_NAMESPACE, machine, change)

    async def ready(self, workers: int) -> None:
        def done(_: object) -> bool:
            conditions = (self.deployment().get("status") or {}).get("conditions") or []
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
            alive = [m for m in self.machines() if not m["metadata"].get("deletionTimestamp")]
            return ready and len(alive) == workers and len(self.machines()) == workers

        await eventually(_noop, until=done, what=f"{self.name} Ready with {workers} workers")


async def _noop() -> None:
    return None


async def create_cluster(world: SimWorld, workers: int, **config: Any) -> Cluster:
    name = unique("aws")
    cluster = Cluster(world, name)
    world.store.create(
        cluster.rt(K0RDENT, "clusterdeployments"),
        {
            "apiVersion": f"{K0RDENT}/v1beta1",
            "kind": "ClusterDeployment",
            "metadata": {"name": name, "namespace": KCM_NAMESPACE},
            "spec": {
                "template": AWS,
                "credential": "aws-credential",
                "config": {**aws_config(workers), **config},
            },
        },
    )
    await cluster.ready(workers)
    return cluster


def bound_pod(name: str, node: str, labels: dict[str, str] | None = None) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "default", "labels": labels or {"app": name}},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
    }


# ------------------------------------------------------------------------------ templates


async def test_cloud_templates_carry_their_values_schema_and_defaults(world: SimWorld) -> None:
    rt = world.store.registry.get(K0RDENT, "clustertemplates")
    for name, chart in CLOUD_TEMPLATES.items():
        template = await eventually(
            functools.partial(_get, world, rt, name),
            until=lambda t: "schemaConfigMapName" in (t.get("status") or {}),
            what=f"{name} status",
        )
        status = template["status"]
        assert status["valid"] is True
        assert status["schemaConfigMapName"] == schema_config_map_name(name)
        config_map = world.store.get(CONFIGMAPS, KCM_NAMESPACE, status["schemaConfigMapName"])
        on_disk = json.loads((TEMPLATES / chart / "values.schema.json").read_text())
        assert json.loads(config_map["data"]["schema"]) == on_disk
        defaults = yaml.safe_load((TEMPLATES / chart / "values.yaml").read_text())
        assert status["config"]["workersNumber"] == defaults["workersNumber"]


async def _get(world: SimWorld, rt: Any, name: str) -> Obj:
    return world.store.get(rt, KCM_NAMESPACE, name)


@pytest.mark.parametrize(
    ("chart", "config", "expected"),
    [
        pytest.param("aws-standalone-cp", {"worker": {"instanceType": "p5.48xlarge"}},
                     ("p5.48xlarge", "h100-80gb", 8), id="aws-h100"),
        pytest.param("azure-standalone-cp", {"worker": {"vmSize": "Standard_NC24ads_A100_v4"}},
                     ("Standard_NC24ads_A100_v4", "a100-80gb", 1), id="azure-a100"),
        pytest.param("gcp-standalone-cp", {"worker": {"instanceType": "n2-standard-4"}},
                     ("n2-standard-4", None, 0), id="gcp-cpu"),
        pytest.param("vsphere-standalone-cp",
                     {"worker": {"vmTemplate": "ubuntu-2204-l40s", "cpus": 16, "memory": 65536}},
                     ("ubuntu-2204-l40s", "l40s-48gb", 1), id="vsphere-passthrough"),
    ],
)  # fmt: skip
def test_instance_types_map_to_inventory_gpu_models(
    chart: str, config: Obj, expected: tuple[str, str | None, int]
) -> None:
    name, size = instance_type(chart, config)
    assert (name, size.gpu_model_id, size.gpu_count) == expected


# ------------------------------------------------------------------------------ deletion order


def _machine(name: str, created: str, *, annotated: bool = False, node: bool = True) -> Obj:
    annotations = {DELETE_MACHINE_ANNOTATION: "yes"} if annotated else {}
    return {
        "metadata": {"name": name, "creationTimestamp": created, "annotations": annotations},
        "status": {"nodeRef": {"name": name}} if node else {},
    }


@pytest.mark.parametrize(
    ("order", "expected"),
    [
        pytest.param("Oldest", ["marked", "no-node", "a", "b", "c"], id="oldest"),
        pytest.param("Newest", ["marked", "no-node", "c", "b", "a"], id="newest"),
    ],
)
def test_deletion_priority_puts_marked_machines_first(order: str, expected: list[str]) -> None:
    machines = [
        _machine("a", "2026-01-01T00:00:01Z"),
        _machine("marked", "2026-01-01T00:00:02Z", annotated=True),
        _machine("b", "2026-01-01T00:00:03Z"),
        _machine("no-node", "2026-01-01T00:00:04Z", node=False),
        _machine("c", "2026-01-01T00:00:05Z"),
    ]
    ordered = deletion_priority(machines, order, random.Random(1))
    assert [m["metadata"]["name"] for m in ordered] == expected


def test_random_order_still_takes_the_marked_machine_first() -> None:
    machines = [_machine(f"m{i}", f"2026-01-01T00:00:0{i}Z") for i in range(5)]
    machines.append(_machine("marked", "2026-01-01T00:00:09Z", annotated=True))
    for seed in range(20):
        ordered = deletion_priority(machines, "Random", random.Random(seed))
        assert ordered[0]["metadata"]["name"] == "marked"


# ------------------------------------------------------------------------------ lifecycle


async def test_workers_become_machines_and_gpu_nodes(world: SimWorld) -> None:
    cluster = await create_cluster(world, 2)
    deployment = cluster.machine_deployment()
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 2
    assert deployment["status"]["readyReplicas"] == 2
    machines = cluster.machines()
    nodes = {n["metadata"]["name"]: n for n in cluster.nodes()}
    assert sorted(m["status"]["nodeRef"]["name"] for m in machines) == sorted(nodes)
    for node in nodes.values():
        labels = node["metadata"]["labels"]
        assert labels["node.kubernetes.io/instance-type"] == "g6e.xlarge"
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-L40S"
        assert labels["nvidia.com/gpu.count"] == "1"
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "1"
        assert node["metadata"]["annotations"]["cluster.x-k8s.io/machine"] in {
            m["metadata"]["name"] for m in machines
        }
    for machine in machines:
        assert machine["status"]["phase"] == "Running"
        assert (
            machine["metadata"]["labels"]["cluster.x-k8s.io/deployment-name"]
            == f"{cluster.name}-md"
        )

    cluster.set_workers(4)
    await cluster.ready(4)
    assert len(cluster.nodes()) == 4


async def test_scale_down_deletes_the_marked_machine_after_its_pre_drain_hook(
    world: SimWorld,
) -> None:
    cluster = await create_cluster(world, 3)
    child = cluster.child_store()
    by_node = {m["status"]["nodeRef"]["name"]: m["metadata"]["name"] for m in cluster.machines()}
    for node in by_node:
        child.create(PODS, bound_pod(f"job-{node[-5:]}", node))
    victim_node = sorted(by_node)[1]
    victim = by_node[victim_node]
    cluster.annotate(victim, {HOOK: "", DELETE_MACHINE_ANNOTATION: "colony"})
    cluster.set_workers(2)

    held = await eventually(
        lambda: _async(cluster.machine(victim)),
        until=lambda m: m is not None and _reason(m, "Deleting") == "WaitingForPreDrainHook",
        what="the marked Machine held by its pre-drain hook",
    )
    assert held is not None
    assert held["metadata"].get("deletionTimestamp")
    # Held: no drain, no Node gone, and none of the others touched.
    assert world.k0rdent.cluster_api.drain_of(victim) is None
    assert child.try_get(NODES, None, victim_node) is not None
    others = [m for m in cluster.machines() if m["metadata"]["name"] != victim]
    assert all(not m["metadata"].get("deletionTimestamp") for m in others)

    cluster.annotate(victim, {HOOK: None})
    await cluster.ready(2)
    assert cluster.machine(victim) is None
    assert child.try_get(NODES, None, victim_node) is None
    drain = world.k0rdent.cluster_api.drain_of(victim)
    assert drain is not None
    assert _workloads(drain.evicted) == [f"default/job-{victim_node[-5:]}"]
    assert {m["metadata"]["name"] for m in cluster.machines()} == {
        m["metadata"]["name"] for m in others
    }


async def test_capi_drain_finds_nothing_when_the_node_was_drained_first(world: SimWorld) -> None:
    cluster = await create_cluster(world, 2)
    child = cluster.child_store()
    machine = cluster.machines()[0]
    name, node = machine["metadata"]["name"], machine["status"]["nodeRef"]["name"]
    child.create(PODS, bound_pod("notebook", node))
    cluster.annotate(name, {HOOK: "", DELETE_MACHINE_ANNOTATION: "colony"})
    cluster.set_workers(1)
    await eventually(
        lambda: _async(cluster.machine(name)),
        until=lambda m: m is not None and _reason(m, "Deleting") == "WaitingForPreDrainHook",
        what="held",
    )
    child.evict("default", "notebook")  # the drain of whoever holds the hook
    await eventually(
        lambda: _async(child.try_get(PODS, "default", "notebook")),
        until=lambda pod: pod is None,
        what="the notebook gone",
    )
    cluster.annotate(name, {HOOK: None})
    await cluster.ready(1)
    drain = world.k0rdent.cluster_api.drain_of(name)
    assert drain is not None
    assert _workloads(drain.evicted) == []


async def test_capi_drain_waits_while_a_budget_refuses(world: SimWorld) -> None:
    cluster = await create_cluster(world, 2)
    child = cluster.child_store()
    machine = cluster.machines()[0]
    name, node = machine["metadata"]["name"], machine["status"]["nodeRef"]["name"]
    child.create(PODS, bound_pod("db", node, {"app": "db"}))
    await eventually(
        lambda: _async(child.get(PODS, "default", "db")),
        until=lambda pod: _reason(pod, "Ready") is not None and _status(pod, "Ready") == "True",
        what="db running (a budget only counts healthy pods)",
    )
    child.create(
        PDBS,
        {
            "metadata": {"name": "db", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
        },
    )
    cluster.annotate(name, {DELETE_MACHINE_ANNOTATION: "yes"})
    cluster.set_workers(1)
    drained = await eventually(
        lambda: _async(cluster.machine(name)),
        until=lambda m: m is not None and _reason(m, "Deleting") == "DrainingNode",
        what="the drain refused by the budget",
    )
    assert drained is not None
    assert "default/db" in _message(drained, "Deleting")
    assert child.try_get(PODS, "default", "db") is not None
    child.delete(PDBS, "default", "db")
    await cluster.ready(1)
    drain = world.k0rdent.cluster_api.drain_of(name)
    assert drain is not None
    assert _workloads(drain.evicted) == ["default/db"]


async def test_cluster_deletion_removes_its_machines_without_draining(world: SimWorld) -> None:
    cluster = await create_cluster(world, 2)
    names = [m["metadata"]["name"] for m in cluster.machines()]
    world.store.delete(cluster.rt(K0RDENT, "clusterdeployments"), KCM_NAMESPACE, cluster.name)
    rt = cluster.rt(K0RDENT, "clusterdeployments")
    await eventually(
        lambda: _async(world.store.try_get(rt, KCM_NAMESPACE, cluster.name)),
        until=lambda cd: cd is None,
        what="the ClusterDeployment gone",
    )
    assert cluster.machines() == []
    assert cluster.machine_deployment() is None
    for name in names:
        drain = world.k0rdent.cluster_api.drain_of(name)
        assert drain is not None
        assert drain.skipped == "cluster deleting"


def _workloads(evicted: list[str]) -> list[str]:
    """The test's pods among those evicted (system pods such as CoreDNS may run there too)."""
    return [pod for pod in evicted if pod.startswith("default/")]


async def _async(value: Any) -> Any:
    return value


def _reason(obj: Obj, type_: str) -> str | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == type_:
            return str(condition.get("reason"))
    return None


def _status(obj: Obj, type_: str) -> str | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == type_:
            return str(condition.get("status"))
    return None


def _message(obj: Obj, type_: str) -> str:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == type_:
            return str(condition.get("message") or "")
    return ""
