"""Tests of the k0rdent controllers on a management store with instant timing.

Each test gets its own management store and namespace; child clusters are real `ClusterServer`s on
loopback ports, reached with the official client through the kubeconfig Secret where it matters.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from sim.apiserver.auth import CertificateAuthority
from sim.apiserver.registry import (
    CONFIGMAPS,
    CRDS,
    DEPLOYMENTS,
    EVENTS,
    NAMESPACES,
    NODES,
    PODS,
    SECRETS,
    SERVICES,
)
from sim.apiserver.store import ClusterStore
from sim.controllers.k0rdent import K0rdentControllers
from sim.controllers.k0rdent_cluster import CLUSTER_DEPLOYMENT_FINALIZER, GROUP
from sim.controllers.k0rdent_services import SERVICE_SET_FINALIZER
from sim.crds import load_colony_crds
from sim.crds.samples import cluster_template, credential, service_set, service_template
from sim.faults import FaultInjector
from sim.hostprovider.inventory import load_inventory
from sim.timing import SimTiming
from tests.helpers import eventually, unique

H100_A = {"address": "192.0.2.10", "port": 22, "user": "root"}
H100_B = {"address": "192.0.2.11", "port": 22, "user": "root"}
L40S = {"address": "192.0.2.50", "port": 22, "user": "root"}
NOWHERE = {"address": "192.0.2.250", "port": 22, "user": "root"}


@dataclass
class Env:
    store: ClusterStore
    k0rdent: K0rdentControllers
    faults: FaultInjector
    namespace: str

    def rt(self, plural: str) -> Any:
        return self.store.registry.get(GROUP, plural)

    def get(self, plural: str, name: str) -> dict[str, Any] | None:
        return self.store.try_get(self.rt(plural), self.namespace, name)

    def create(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        obj = {**obj, "metadata": {**obj["metadata"], "namespace": self.namespace}}
        return self.store.create(self.rt(plural), obj)


@pytest.fixture
async def env(sim_ca: CertificateAuthority) -> AsyncIterator[Env]:
    store = ClusterStore(unique("mgmt"))
    for crd in load_colony_crds():
        store.create(CRDS, crd)
    namespace = unique("team")
    store.create(NAMESPACES, {"metadata": {"name": namespace}})
    faults = FaultInjector()
    k0rdent = K0rdentControllers(store, sim_ca, SimTiming.instant(), faults, load_inventory())
    task = asyncio.create_task(k0rdent.run())
    environment = Env(store, k0rdent, faults, namespace)
    environment.create("credentials", credential("ssh-cred"))
    environment.create("clustertemplates", cluster_template("remote-cluster-1-0-0"))
    environment.create("clustertemplates", cluster_template("docker-hosted-cp-1-0-0"))
    environment.create("servicetemplates", service_template("jupyter-notebook-0-3-0"))
    try:
        yield environment
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def cluster_deployment(
    name: str,
    machines: list[dict[str, Any]] | None = None,
    *,
    template: str = "remote-cluster-1-0-0",
    credential_name: str = "ssh-cred",
    workers: int | None = None,
) -> dict[str, Any]:
    config_: dict[str, Any] = {}
    if machines is not None:
        config_["machines"] = machines
    if workers is not None:
        config_["workersNumber"] = workers
    return {
        "apiVersion": f"{GROUP}/v1beta1",
        "kind": "ClusterDeployment",
        "metadata": {"name": name},
        "spec": {"template": template, "credential": credential_name, "config": config_},
    }


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for item in ((obj or {}).get("status") or {}).get("conditions") or []:
        if item["type"] == type_:
            return dict(item)
    return {}


async def wait_ready(env: Env, name: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        return env.get("clusterdeployments", name)

    def ready(obj: dict[str, Any] | None) -> bool:
        return (
            obj is not None
            and condition(obj, "Ready").get("status") == "True"
            and obj["status"].get("observedGeneration") == obj["metadata"]["generation"]
        )

    result = await eventually(probe, until=ready, what=f"{name} Ready")
    assert result is not None
    return result


def child_store(env: Env, name: str) -> ClusterStore:
    child = env.k0rdent.child(env.namespace, name)
    assert child is not None
    return child.store


async def ready_nodes(store: ClusterStore, count: int) -> list[dict[str, Any]]:
    async def probe() -> list[dict[str, Any]]:
        nodes, _ = store.list(NODES)
        return [n for n in nodes if condition(n, "Ready").get("status") == "True"]

    return await eventually(probe, until=lambda n: len(n) == count, what=f"{count} Ready nodes")


# --------------------------------------------------------------------------- ClusterDeployment


async def test_happy_path_conditions_secret_and_gpu_nodes(env: Env) -> None:
    name = unique("gpu")
    env.create("clusterdeployments", cluster_deployment(name, [H100_A, L40S]))
    cd = await wait_ready(env, name)
    assert CLUSTER_DEPLOYMENT_FINALIZER in cd["metadata"]["finalizers"]
    for type_ in (
        "CredentialReady",
        "TemplateReady",
        "HelmChartReady",
        "HelmReleaseReady",
        "CAPIClusterSummary",
        "Ready",
    ):
        got = condition(cd, type_)
        assert got.get("status") == "True", (type_, got)
        assert got.get("observedGeneration") == cd["metadata"]["generation"]
    assert condition(cd, "Ready")["reason"] == "Succeeded"

    secret = env.store.get(SECRETS, env.namespace, f"{name}-kubeconfig")
    kubeconfig = yaml.safe_load(base64.b64decode(secret["data"]["value"]))
    configuration = client.Configuration()
    config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]
        kubeconfig, client_configuration=configuration, persist_config=False
    )

    def list_ready_nodes() -> list[Any]:
        with client.ApiClient(configuration) as api:
            items = client.CoreV1Api(api).list_node().items
        return [
            n
            for n in items
            if n.status is not None
            and any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
        ]

    async def probe() -> list[Any]:
        return await asyncio.to_thread(list_ready_nodes)

    nodes = await eventually(probe, until=lambda n: len(n) == 2, what="2 Ready nodes via client")
    by_name = {n.metadata.name: n for n in nodes}
    h100 = by_name["fra1-h100-80gb-01"]
    assert h100.status.capacity["nvidia.com/gpu"] == "8"
    assert h100.status.allocatable["cpu"] == "112"
    assert h100.status.capacity["memory"] == "2Ti"
    assert h100.status.capacity["pods"] == "110"
    assert h100.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert h100.metadata.labels["nvidia.com/gpu.count"] == "8"
    assert h100.metadata.labels["kubernetes.io/hostname"] == "fra1-h100-80gb-01"
    assert h100.metadata.labels["node.kubernetes.io/instance-type"] == "h100-80gb"
    assert by_name["fra1-l40s-48gb-01"].metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-L40S"
    # GPU Feature Discovery's inventory facts: framebuffer in MiB as NVML reports it, family.
    assert h100.metadata.labels["nvidia.com/gpu.memory"] == "81559"
    assert h100.metadata.labels["nvidia.com/gpu.family"] == "hopper"
    assert h100.metadata.labels["nvidia.com/gpu.present"] == "true"
    assert by_name["fra1-l40s-48gb-01"].metadata.labels["nvidia.com/gpu.memory"] == "46068"


async def test_removing_a_machine_removes_its_node_and_reconciles_generation(env: Env) -> None:
    name = unique("shrink")
    env.create("clusterdeployments", cluster_deployment(name, [H100_A, H100_B]))
    await wait_ready(env, name)
    store = child_store(env, name)
    await ready_nodes(store, 2)
    store.create(
        PODS,
        {
            "metadata": {"name": "on-b", "namespace": "default"},
            "spec": {"nodeName": "fra1-h100-80gb-02", "containers": [{"name": "c", "image": "x"}]},
        },
    )
    updated = env.store.patch(
        env.rt("clusterdeployments"),
        env.namespace,
        name,
        {"spec": {"config": {"machines": [H100_A]}}},
        "application/merge-patch+json",
    )
    assert updated["metadata"]["generation"] == 2
    cd = await wait_ready(env, name)
    assert cd["status"]["observedGeneration"] == 2
    nodes, _ = store.list(NODES)
    assert [n["metadata"]["name"] for n in nodes] == ["fra1-h100-80gb-01"]
    assert store.try_get(PODS, "default", "on-b") is None


@pytest.mark.parametrize(
    ("requested", "reported", "kubelet"),
    [
        pytest.param("v1.37.1", "v1.37.1", "v1.37.1+k0s", id="config-k0s-version"),
        pytest.param(None, "v1.32.5", "v1.32.5+k0s", id="template-default"),
    ],
)
async def test_nodes_run_the_requested_k0s_version(
    env: Env, requested: str | None, reported: str, kubelet: str
) -> None:
    name = unique("version")
    cd = cluster_deployment(name, [H100_A])
    if requested:
        cd["spec"]["config"]["k0s"] = {"version": requested}
    env.create("clusterdeployments", cd)
    ready = await wait_ready(env, name)
    assert ready["status"]["k8sVersion"] == reported
    (node,) = await ready_nodes(child_store(env, name), 1)
    assert node["status"]["nodeInfo"]["kubeletVersion"] == kubelet


async def test_unknown_machine_address_never_registers(env: Env) -> None:
    name = unique("lost")
    env.create("clusterdeployments", cluster_deployment(name, [H100_A, NOWHERE]))

    async def probe() -> dict[str, Any] | None:
        return env.get("clusterdeployments", name)

    cd = await eventually(
        probe,
        until=lambda o: "192.0.2.250" in condition(o, "CAPIClusterSummary").get("message", ""),
        what="machine problem reported",
    )
    assert condition(cd, "Ready")["status"] == "False"
    store = child_store(env, name)
    await ready_nodes(store, 1)
    events, _ = env.store.list(EVENTS, env.namespace)
    assert any(e["reason"] == "MachineUnreachable" for e in events)


@pytest.mark.parametrize(
    ("template", "credential_name", "expected"),
    [
        pytest.param("no-such-template", "ssh-cred", "no-such-template", id="missing-template"),
        pytest.param(
            "remote-cluster-1-0-0", "no-such-cred", "no-such-cred", id="missing-credential"
        ),
    ],
)
async def test_missing_template_or_credential_fails(
    env: Env, template: str, credential_name: str, expected: str
) -> None:
    name = unique("bad")
    env.create(
        "clusterdeployments",
        cluster_deployment(name, [H100_A], template=template, credential_name=credential_name),
    )

    async def probe() -> dict[str, Any]:
        return condition(env.get("clusterdeployments", name), "Ready")

    ready = await eventually(probe, until=lambda c: c.get("reason") == "Failed")
    assert ready["status"] == "False"
    assert expected in ready["message"]
    assert "not found" in ready["message"]


async def test_node_never_ready_fault(env: Env) -> None:
    name = unique("stuck")
    env.faults.node_never_ready("192.0.2.11")
    env.create("clusterdeployments", cluster_deployment(name, [H100_A, H100_B]))
    await wait_ready(env, name)
    store = child_store(env, name)
    await ready_nodes(store, 1)
    stuck = store.get(NODES, None, "fra1-h100-80gb-02")
    assert condition(stuck, "Ready")["status"] == "False"
    assert any(t["key"] == "node.kubernetes.io/not-ready" for t in stuck["spec"]["taints"])
    env.faults.clear()
    await ready_nodes(store, 2)


async def test_fail_cluster_deployment_fault(env: Env) -> None:
    name = unique("doomed")
    env.faults.fail_cluster_deployment(env.namespace, name, "injected: cloud quota exceeded")
    env.create("clusterdeployments", cluster_deployment(name, [H100_A]))

    async def probe() -> dict[str, Any]:
        return condition(env.get("clusterdeployments", name), "Ready")

    ready = await eventually(probe, until=lambda c: c.get("reason") == "Failed")
    assert ready["message"] == "injected: cloud quota exceeded"


async def test_hosted_control_plane_workers_number(env: Env) -> None:
    name = unique("hcp")
    env.create(
        "clusterdeployments",
        cluster_deployment(name, template="docker-hosted-cp-1-0-0", workers=3),
    )
    await wait_ready(env, name)
    nodes = await ready_nodes(child_store(env, name), 3)
    assert sorted(n["metadata"]["name"] for n in nodes) == [f"{name}-md-{i}" for i in range(3)]
    assert "nvidia.com/gpu" not in nodes[0]["status"]["capacity"]


async def test_deletion_sequence(env: Env) -> None:
    name = unique("bye")
    env.create("clusterdeployments", cluster_deployment(name, [H100_A]))
    await wait_ready(env, name)
    child = env.k0rdent.child(env.namespace, name)
    assert child is not None
    env.create("servicesets", service_set(unique("ss"), cluster=name, services=[]))
    env.store.delete(env.rt("clusterdeployments"), env.namespace, name)

    async def gone() -> bool:
        return env.get("clusterdeployments", name) is None

    await eventually(gone, what="ClusterDeployment removed")
    assert env.store.try_get(SECRETS, env.namespace, f"{name}-kubeconfig") is None
    assert env.k0rdent.child(env.namespace, name) is None
    items, _ = env.store.list(env.rt("servicesets"), env.namespace)
    assert items == []
    with pytest.raises(RuntimeError):
        _ = child.server.url  # type: ignore[attr-defined]


async def test_deleting_condition_while_finalizer_holds(env: Env) -> None:
    name = unique("held")
    env.create("clusterdeployments", cluster_deployment(name, [H100_A]))
    await wait_ready(env, name)
    # A second finalizer (someone else's) keeps the object so the Deleting condition is visible.
    env.store.mutate(
        env.rt("clusterdeployments"),
        env.namespace,
        name,
        lambda o: o["metadata"]["finalizers"].append("example.com/hold"),
    )
    env.store.delete(env.rt("clusterdeployments"), env.namespace, name)

    async def probe() -> dict[str, Any] | None:
        return env.get("clusterdeployments", name)

    cd = await eventually(
        probe, until=lambda o: o is not None and o["metadata"]["finalizers"] == ["example.com/hold"]
    )
    assert condition(cd, "Deleting")["status"] == "True"
    assert condition(cd, "Ready")["reason"] == "Deleting"
    env.store.mutate(
        env.rt("clusterdeployments"),
        env.namespace,
        name,
        lambda o: o["metadata"].update(finalizers=[]),
    )


# --------------------------------------------------------------------------- ServiceTemplate


@pytest.mark.parametrize(
    ("helm", "valid", "error"),
    [
        pytest.param(
            {
                "chartSpec": {
                    "chart": "marimo",
                    "version": "0.3.0",
                    "interval": "10m",
                    "sourceRef": {"kind": "HelmRepository", "name": "exalsius-workspace-hub"},
                }
            },
            True,
            None,
            id="hub-chart",
        ),
        pytest.param(
            {"chartRef": {"kind": "HelmChart", "name": "devpod-0-2-0"}}, True, None, id="chart-ref"
        ),
        pytest.param(
            {
                "chartSpec": {
                    "chart": "marimo",
                    "version": "9.9.9",
                    "interval": "10m",
                    "sourceRef": {"kind": "HelmRepository", "name": "exalsius-workspace-hub"},
                }
            },
            False,
            "no chart version found for marimo-9.9.9",
            id="unknown-version",
        ),
        pytest.param(
            {
                "chartSpec": {
                    "chart": "marimo",
                    "version": "0.3.0",
                    "interval": "10m",
                    "sourceRef": {"kind": "HelmRepository", "name": "elsewhere"},
                }
            },
            False,
            "elsewhere",
            id="unknown-repository",
        ),
        pytest.param(
            {
                "chartSpec": {
                    "chart": "nope",
                    "version": "0.3.0",
                    "interval": "10m",
                    "sourceRef": {"kind": "HelmRepository", "name": "exalsius-workspace-hub"},
                }
            },
            False,
            "chart nope not found",
            id="unknown-chart",
        ),
    ],
)
async def test_service_template_validity(
    env: Env, helm: dict[str, Any], valid: bool, error: str | None
) -> None:
    name = unique("st")
    env.create("servicetemplates", {"metadata": {"name": name}, "spec": {"helm": helm}})

    async def probe() -> dict[str, Any]:
        return dict((env.get("servicetemplates", name) or {}).get("status") or {})

    status = await eventually(probe, until=lambda s: "valid" in s)
    assert status["valid"] is valid
    if error is None:
        assert "validationError" not in status
    else:
        assert error in status["validationError"]


# --------------------------------------------------------------------------- ServiceSet


def jupyter(
    release: str, namespace: str, values: dict[str, Any], timeout: str = "5m"
) -> dict[str, Any]:
    return {
        "name": release,
        "namespace": namespace,
        "template": "jupyter-notebook-0-3-0",
        "values": yaml.safe_dump(values),
        "helmOptions": {"timeout": timeout},
    }


async def service_state(env: Env, name: str, release: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any]:
        status = (env.get("servicesets", name) or {}).get("status") or {}
        for entry in status.get("services") or []:
            if entry["name"] == release:
                return dict(entry)
        return {}

    return await eventually(
        probe, until=lambda e: e.get("state") in ("Deployed", "Failed"), what=f"{release} settled"
    )


GPU_VALUES = {
    "_exalsius": {
        "resources": {"perReplica": {"cpu": "2", "memory": "4Gi", "gpuCount": 2}},
        "scheduling": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
    },
    "notebookPassword": "secret",
}


async def test_service_set_deploys_then_uninstalls_on_removal(env: Env) -> None:
    cluster = unique("ws")
    env.create("clusterdeployments", cluster_deployment(cluster, [H100_A]))
    await wait_ready(env, cluster)
    store = child_store(env, cluster)
    name, release, target = unique("ss"), unique("nb"), unique("ws-ns")
    env.create(
        "servicesets",
        service_set(name, cluster=cluster, services=[jupyter(release, target, GPU_VALUES)]),
    )
    entry = await service_state(env, name, release)
    assert entry["state"] == "Deployed", entry
    assert entry["type"] == "Helm"
    assert entry["version"] == "0.3.0"
    status = (env.get("servicesets", name) or {})["status"]
    assert status["deployed"] is True
    assert condition({"status": status}, "ServicesInReadyState")["message"] == "1/1"

    pods, _ = store.list(PODS, target)
    assert len(pods) == 1
    container = pods[0]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert pods[0]["spec"]["nodeName"] == "fra1-h100-80gb-01"
    assert pods[0]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    service = store.get(SERVICES, target, release)
    assert service["spec"]["ports"][0]["port"] == 80

    env.store.patch(
        env.rt("servicesets"), env.namespace, name, {"spec": {"services": []}},
        "application/merge-patch+json",
    )  # fmt: skip

    async def uninstalled() -> bool:
        return (
            store.try_get(DEPLOYMENTS, target, release) is None
            and store.try_get(NAMESPACES, None, target) is None
            and not store.list(PODS, target)[0]
        )

    await eventually(uninstalled, what="release uninstalled")


@pytest.mark.parametrize(
    ("helm_options", "state", "message"),
    [
        # helm install without --wait: the release is deployed, its pod stays Pending.
        pytest.param({}, "Deployed", None, id="no-wait"),
        pytest.param({"wait": True}, "Failed", "context deadline exceeded", id="wait"),
        pytest.param({"atomic": True}, "Failed", "has been uninstalled due to atomic being set", id="atomic"),
    ],
)  # fmt: skip
async def test_service_set_when_gpus_cannot_be_scheduled(
    env: Env, helm_options: dict[str, Any], state: str, message: str | None
) -> None:
    cluster = unique("small")
    env.create("clusterdeployments", cluster_deployment(cluster, [L40S]))
    await wait_ready(env, cluster)
    store = child_store(env, cluster)
    name, release, target = unique("ss"), unique("big"), unique("ws-ns")
    values = {"_exalsius": {"resources": {"perReplica": {"gpuCount": 16}}}}
    service = jupyter(release, target, values, "30s")
    service["helmOptions"].update(helm_options)
    env.create("servicesets", service_set(name, cluster=cluster, services=[service]))
    entry = await service_state(env, name, release)
    assert entry["state"] == state, entry
    if message is None:
        # Deployed as soon as the objects exist (no --wait); the scheduler's verdict on the pod
        # comes an instant later (read at once, it was missing under load).
        async def judged() -> list[dict[str, Any]]:
            return store.list(PODS, target)[0]

        (pod,) = await eventually(
            judged,
            until=lambda pods: len(pods) == 1 and bool(condition(pods[0], "PodScheduled")),
            what="the pod judged by the scheduler",
        )
        scheduled = condition(pod, "PodScheduled")
        assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
        assert "Insufficient nvidia.com/gpu" in scheduled["message"]
        assert pod["status"]["phase"] == "Pending"
    else:
        assert message in entry["failureMessage"]
        assert "Insufficient nvidia.com/gpu" in entry["failureMessage"]
        if helm_options.get("atomic"):
            assert store.try_get(DEPLOYMENTS, target, release) is None


def colony_template(chart: str) -> dict[str, Any]:
    """A ServiceTemplate of Colony's catalog (HelmRepository colony-catalog)."""
    return {
        "apiVersion": f"{GROUP}/v1beta1",
        "kind": "ServiceTemplate",
        "metadata": {"name": f"{chart}-1-0-0"},
        "spec": {"helm": {"chartSpec": {
            "chart": chart, "version": "1.0.0", "interval": "10m",
            "sourceRef": {"kind": "HelmRepository", "name": "colony-catalog"},
        }}},
    }  # fmt: skip


def colony_service(release: str, namespace: str, chart: str, values: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    return {
        "name": release,
        "namespace": namespace,
        "template": f"{chart}-1-0-0",
        "values": yaml.safe_dump(values or {}),
    }


def primary_container(store: ClusterStore, namespace: str, name: str) -> dict[str, Any]:
    deployment = store.get(DEPLOYMENTS, namespace, name)
    return dict(deployment["spec"]["template"]["spec"]["containers"][0])


async def test_values_from_config_maps_and_secrets(env: Env) -> None:
    cluster = unique("vf")
    env.create("clusterdeployments", cluster_deployment(cluster, [H100_A]))
    await wait_ready(env, cluster)
    store = child_store(env, cluster)
    for chart in ("colony-jupyter",):
        env.create("servicetemplates", colony_template(chart))
    name, release, target = unique("ss"), unique("nb"), unique("ws")
    service = colony_service(release, target, "colony-jupyter", {"resources": {"cpu": "1", "memory": "2Gi"}, "replicas": 1})  # fmt: skip
    service["valuesFrom"] = [{"kind": "ConfigMap", "name": "sizes"}, {"kind": "Secret", "name": "gpus"}]  # fmt: skip
    env.create("servicesets", service_set(name, cluster=cluster, services=[service]))

    # Sveltos: a missing referenced object fails the service until it exists.
    entry = await service_state(env, name, release)
    assert entry["state"] == "Failed"
    assert entry["failureMessage"] == f"Referenced resource: ConfigMap {env.namespace}/sizes does not exist"  # fmt: skip

    env.store.create(CONFIGMAPS, {
        "metadata": {"name": "sizes", "namespace": env.namespace},
        "data": {"values.yaml": "resources:\n  memory: 6Gi\n"},
    })  # fmt: skip
    env.store.create(SECRETS, {
        "metadata": {"name": "gpus", "namespace": env.namespace},
        "stringData": {"gpu.yaml": "resources:\n  gpu: 2\n"},
    })  # fmt: skip

    async def deployed() -> dict[str, Any]:
        return await service_state(env, name, release)

    assert (await eventually(deployed, until=lambda e: e.get("state") == "Deployed"))["state"] == "Deployed"  # fmt: skip
    limits = primary_container(store, target, release)["resources"]["limits"]
    # values first, each valuesFrom merged over them: cpu from values, memory and gpu from the refs.
    assert limits == {"cpu": "1", "memory": "6Gi", "nvidia.com/gpu": "2"}

    # A changed referenced object upgrades the release.
    env.store.patch(CONFIGMAPS, env.namespace, "sizes", {"data": {"values.yaml": "resources:\n  memory: 12Gi\n"}}, "application/merge-patch+json")  # fmt: skip

    async def memory() -> str:
        return str(primary_container(store, target, release)["resources"]["limits"]["memory"])

    await eventually(memory, until=lambda m: m == "12Gi", what="upgraded release")


async def test_colony_charts(env: Env) -> None:
    cluster = unique("colony")
    env.create("clusterdeployments", cluster_deployment(cluster, [H100_A]))
    await wait_ready(env, cluster)
    store = child_store(env, cluster)
    for chart in ("colony-jupyter", "colony-vllm", "colony-inference-stack", "colony-devbox"):
        env.create("servicetemplates", colony_template(chart))
    name = unique("ss")
    services = [
        colony_service("nb", "ws-nb", "colony-jupyter", {"resources": {"gpu": 1}}),
        colony_service("dev", "ws-dev", "colony-devbox"),
        colony_service(
            "llm", "ws-llm", "colony-vllm", {"resources": {"gpu": 2}, "vllm": {"model": "m/x"}}
        ),
    ]
    env.create("servicesets", service_set(name, cluster=cluster, services=services))
    assert (await service_state(env, name, "nb"))["state"] == "Deployed"
    assert (await service_state(env, name, "dev"))["state"] == "Deployed"
    vllm = await service_state(env, name, "llm")
    assert vllm["state"] == "Failed"
    assert "colony-vllm 1.0.0 needs colony-inference-stack 1.0.0 installed on the cluster first" in vllm["failureMessage"]  # fmt: skip
    assert primary_container(store, "ws-nb", "nb")["resources"]["limits"]["nvidia.com/gpu"] == "1"
    # Colony's charts name every Service <release>-<port>, the convention Colony routes to.
    assert store.get(SERVICES, "ws-nb", "nb-http")["spec"]["ports"][0]["port"] == 8888
    assert store.get(SERVICES, "ws-dev", "dev-ssh")["spec"]["ports"][0]["port"] == 22
    # What their simulated containers answer with, per port (sim/podnet).
    serves = {
        release: json.loads(
            store.get(DEPLOYMENTS, namespace, release)["spec"]["template"]["metadata"][
                "annotations"
            ]["sim.colony.dev/serves"]
        )
        for release, namespace in (("nb", "ws-nb"), ("dev", "ws-dev"))
    }
    assert serves == {"nb": {"8888": "jupyter"}, "dev": {"22": "ssh"}}

    # Installing the stack lets the retried vllm install through.
    env.create("servicesets", service_set(unique("stack"), cluster=cluster, services=[colony_service("stack", "colony-inference", "colony-inference-stack")]))  # fmt: skip
    assert store.try_get(DEPLOYMENTS, "ws-llm", "llm") is None

    async def llm() -> dict[str, Any]:
        return await service_state(env, name, "llm")

    await eventually(llm, until=lambda e: e.get("state") == "Deployed", what="vllm installed")
    assert store.get(DEPLOYMENTS, "colony-inference", "inference-gateway")
    assert primary_container(store, "ws-llm", "llm")["resources"]["limits"]["nvidia.com/gpu"] == "2"
    template = store.get(DEPLOYMENTS, "ws-llm", "llm")["spec"]["template"]
    assert json.loads(template["metadata"]["annotations"]["sim.colony.dev/serves"]) == {
        "8000": {"app": "openai", "model": "m/x"}
    }


async def test_removed_service_is_deleting_then_gone(env: Env) -> None:
    cluster = unique("rm")
    env.create("clusterdeployments", cluster_deployment(cluster, [H100_A]))
    await wait_ready(env, cluster)
    name, keep, drop = unique("ss"), unique("keep"), unique("drop")
    env.create("servicesets", service_set(name, cluster=cluster, services=[jupyter(keep, keep, {}), jupyter(drop, drop, {})]))  # fmt: skip
    await service_state(env, name, drop)
    ss = env.get("servicesets", name) or {}
    assert SERVICE_SET_FINALIZER in ss["metadata"]["finalizers"]
    env.store.patch(env.rt("servicesets"), env.namespace, name, {"spec": {"services": [jupyter(keep, keep, {})]}}, "application/merge-patch+json")  # fmt: skip

    async def names() -> list[str]:
        status = (env.get("servicesets", name) or {}).get("status") or {}
        return [e["name"] for e in status.get("services") or []]

    await eventually(names, until=lambda n: n == [keep], what="dropped service gone from status")
    assert child_store(env, cluster).try_get(NAMESPACES, None, drop) is None


async def test_deleting_service_set_uninstalls(env: Env) -> None:
    cluster = unique("del")
    env.create("clusterdeployments", cluster_deployment(cluster, [H100_A]))
    await wait_ready(env, cluster)
    store = child_store(env, cluster)
    name, release, target = unique("ss"), unique("nb"), unique("ws-ns")
    env.create(
        "servicesets", service_set(name, cluster=cluster, services=[jupyter(release, target, {})])
    )
    assert (await service_state(env, name, release))["state"] == "Deployed"
    env.store.delete(env.rt("servicesets"), env.namespace, name)
    # The finalizer holds the ServiceSet until the release is uninstalled.
    held = env.get("servicesets", name)
    assert held is not None
    assert held["metadata"]["deletionTimestamp"]

    async def gone() -> bool:
        return env.get("servicesets", name) is None

    await eventually(gone, what="ServiceSet removed")
    assert store.try_get(NAMESPACES, None, target) is None, "uninstalled before the ServiceSet went"
    assert store.try_get(DEPLOYMENTS, target, release) is None


async def test_fail_service_set_fault(env: Env) -> None:
    cluster = unique("flt")
    env.create("clusterdeployments", cluster_deployment(cluster, [H100_A]))
    await wait_ready(env, cluster)
    name, release = unique("ss"), unique("nb")
    env.faults.fail_service_set(env.namespace, name, "injected: chart pull failed")
    env.create(
        "servicesets", service_set(name, cluster=cluster, services=[jupyter(release, "x", {})])
    )
    entry = await service_state(env, name, release)
    assert entry["state"] == "Failed"
    assert entry["failureMessage"] == "injected: chart pull failed"


async def test_service_set_pending_until_cluster_exists(env: Env) -> None:
    name, release = unique("ss"), unique("nb")
    env.create(
        "servicesets", service_set(name, cluster="not-yet", services=[jupyter(release, "x", {})])
    )

    async def probe() -> list[dict[str, Any]]:
        return list(
            ((env.get("servicesets", name) or {}).get("status") or {}).get("services") or []
        )

    entries = await eventually(probe, until=lambda e: bool(e))
    assert entries[0]["state"] == "Pending"
