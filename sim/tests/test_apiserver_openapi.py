"""OpenAPI v3: kubectl apply validates (the default --validate=strict) and kubectl explain works."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sim.apiserver.registry import CRDS, DEPLOYMENTS, NAMESPACES
from sim.apiserver.server import ClusterServer
from sim.crds import load_colony_crds
from sim.crds.samples import cluster_deployment_remote
from sim.tests.test_apiserver_kubectl import KUBECTL, kubectl

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl is not installed in the venv")


def deployment(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "trainer", "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "trainer"}},
            "template": {
                "metadata": {"labels": {"app": "trainer"}},
                "spec": {"containers": [{"name": "cuda", "image": "nvcr.io/nvidia/cuda:12"}]},
            },
        },
    }


def install_crds(cluster: ClusterServer) -> None:
    cluster.store.create(NAMESPACES, {"metadata": {"name": "kcm-system"}})
    for crd in load_colony_crds():
        cluster.store.create(CRDS, crd)


async def apply(kubeconfig: Path, manifest: dict[str, Any]) -> str:
    path = kubeconfig.parent / f"{manifest['metadata']['name']}.json"
    path.write_text(json.dumps(manifest))
    return await kubectl(kubeconfig, "apply", "-f", str(path))


async def test_openapi_v3_discovery_lists_every_group_version(
    cluster: ClusterServer, kubeconfig_file: Path
) -> None:
    install_crds(cluster)
    root = json.loads(await kubectl(kubeconfig_file, "get", "--raw", "/openapi/v3"))
    for path in ("api/v1", "apis/apps/v1", "apis/k0rdent.mirantis.com/v1beta1"):
        assert root["paths"][path]["serverRelativeURL"].startswith(f"/openapi/v3/{path}?hash=")
    url = root["paths"]["apis/k0rdent.mirantis.com/v1beta1"]["serverRelativeURL"]
    doc = json.loads(await kubectl(kubeconfig_file, "get", "--raw", url))
    schema = doc["components"]["schemas"]["com.mirantis.k0rdent.v1beta1.ClusterDeployment"]
    assert schema["x-kubernetes-group-version-kind"] == [
        {"group": "k0rdent.mirantis.com", "version": "v1beta1", "kind": "ClusterDeployment"}
    ]
    assert "spec" in schema["properties"]


async def test_kubectl_apply_validates_without_flags_and_updates(
    cluster: ClusterServer, kubeconfig_file: Path
) -> None:
    install_crds(cluster)
    store = cluster.store
    assert "deployment.apps/trainer created" in await apply(kubeconfig_file, deployment(2))
    assert "deployment.apps/trainer configured" in await apply(kubeconfig_file, deployment(3))
    assert store.get(DEPLOYMENTS, "default", "trainer")["spec"]["replicas"] == 3
    assert "unchanged" in await apply(kubeconfig_file, deployment(3))

    rt = store.registry.get("k0rdent.mirantis.com", "clusterdeployments")
    cd = cluster_deployment_remote("gpu-a")
    assert "clusterdeployment.k0rdent.mirantis.com/gpu-a created" in await apply(kubeconfig_file, cd)  # fmt: skip
    cd["spec"]["config"]["machines"].pop()
    assert "configured" in await apply(kubeconfig_file, cd)
    stored = store.get(rt, "kcm-system", "gpu-a")
    assert len(stored["spec"]["config"]["machines"]) == 1


async def test_kubectl_explain(cluster: ClusterServer, kubeconfig_file: Path) -> None:
    install_crds(cluster)
    for resource, kind in (("pods", "Pod"), ("nodes", "Node"), ("deployments", "Deployment")):
        out = await kubectl(kubeconfig_file, "explain", resource)
        assert f"KIND:       {kind}" in out or f"KIND:     {kind}" in out, out
    out = await kubectl(kubeconfig_file, "explain", "clusterdeployments.spec")
    assert "template" in out
    assert "credential" in out
