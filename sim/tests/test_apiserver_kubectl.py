"""The real kubectl against the emulator: get, describe, cordon, uncordon, drain, delete, CRs."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sim.apiserver.registry import CRDS, DAEMONSETS, DEPLOYMENTS, NODES, PODS
from sim.apiserver.server import ClusterServer
from sim.controllers.kubelet import Kubelet
from sim.tests.test_apiserver_crd import GROUP, PLURAL, VERSION, widget, widget_crd

KUBECTL = Path(sys.executable).parent / "kubectl"

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl is not installed in the venv")


async def kubectl(kubeconfig: Path, *args: str, check: bool = True) -> str:
    process = await asyncio.create_subprocess_exec(
        str(KUBECTL),
        "--kubeconfig",
        str(kubeconfig),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    if check and process.returncode != 0:
        raise AssertionError(
            f"kubectl {' '.join(args)} failed ({process.returncode}): {err.decode()}"
        )
    return out.decode() + err.decode()


@pytest.fixture
async def kubelet(cluster: ClusterServer) -> AsyncIterator[None]:
    task = asyncio.create_task(Kubelet(cluster.store, grace_scale=0.0).run())
    yield
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def _node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "node-role.kubernetes.io/worker": ""}},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.10"}],
            "nodeInfo": {"kubeletVersion": "v1.37.0"},
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
        },
    }  # fmt: skip


def _pod(name: str, node: str, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"app": name}}
    if owner is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner["kind"], "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
        ]  # fmt: skip
    return {
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "busybox"}],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
        },
    }


async def test_kubectl_node_workflow(
    cluster: ClusterServer, kubeconfig_file: Path, kubelet: None
) -> None:
    store = cluster.store
    store.create(NODES, _node("worker-1"))
    ds = store.create(
        DAEMONSETS,
        {
            "metadata": {"name": "agent", "namespace": "kube-system"},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
            },
        },
    )  # fmt: skip
    store.create(PODS, _pod("agent-x", "worker-1", ds), namespace="kube-system")
    deploy = store.create(
        DEPLOYMENTS,
        {
            "metadata": {"name": "app"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "app"}},
                "template": {"metadata": {"labels": {"app": "app"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
            },
        },
    )  # fmt: skip
    store.create(PODS, _pod("app", "worker-1", deploy), namespace="default")

    nodes = await kubectl(kubeconfig_file, "get", "nodes")
    assert "worker-1" in nodes
    assert "Ready" in nodes
    await kubectl(kubeconfig_file, "cordon", "worker-1")
    assert store.get(NODES, None, "worker-1")["spec"]["unschedulable"] is True
    assert "SchedulingDisabled" in await kubectl(kubeconfig_file, "get", "nodes")
    await kubectl(kubeconfig_file, "uncordon", "worker-1")
    assert not store.get(NODES, None, "worker-1")["spec"].get("unschedulable")

    described = await kubectl(kubeconfig_file, "describe", "node", "worker-1")
    assert "worker-1" in described
    assert "agent-x" in described

    drained = await kubectl(
        kubeconfig_file, "drain", "worker-1", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=30s"
    )  # fmt: skip
    assert "drained" in drained
    assert store.try_get(PODS, "default", "app") is None
    assert store.try_get(PODS, "kube-system", "agent-x") is not None
    assert store.get(NODES, None, "worker-1")["spec"]["unschedulable"] is True

    pods = json.loads(await kubectl(kubeconfig_file, "get", "pods", "-A", "-o", "json"))
    assert [p["metadata"]["name"] for p in pods["items"]] == ["agent-x"]


async def test_kubectl_delete_pod(
    cluster: ClusterServer, kubeconfig_file: Path, kubelet: None
) -> None:
    cluster.store.create(PODS, _pod("victim", "worker-1"))
    out = await kubectl(kubeconfig_file, "delete", "pod", "victim", "--timeout=30s")
    assert 'pod "victim" deleted' in out
    assert cluster.store.try_get(PODS, "default", "victim") is None


async def test_kubectl_get_custom_resource(cluster: ClusterServer, kubeconfig_file: Path) -> None:
    cluster.store.create(CRDS, widget_crd())
    rt = cluster.store.registry.get(GROUP, PLURAL)
    cluster.store.create(rt, widget("gizmo", size=2), namespace="default")
    out = await kubectl(kubeconfig_file, "get", "widgets")
    assert "gizmo" in out
    as_json = json.loads(
        await kubectl(kubeconfig_file, "get", f"{PLURAL}.{GROUP}", "gizmo", "-o", "json")
    )
    assert as_json["apiVersion"] == f"{GROUP}/{VERSION}"
    assert as_json["spec"] == {"size": 2, "color": "red"}
    assert "gizmo" in await kubectl(kubeconfig_file, "get", "wd")
