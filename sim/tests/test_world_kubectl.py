"""The real kubectl against a whole `SimWorld`: k0rdent objects on the management cluster, then the
child cluster of a Ready ClusterDeployment (its nodes, cordon, drain, uncordon).

What an operator would type, with the kubeconfigs the world writes (management) and publishes
(Secret `<name>-kubeconfig`, key `value`, for the child). kubectl runs as a subprocess while the
world serves on the test loop; waiting is polling with a deadline.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sim.timing import SimTiming
from sim.world import KCM_NAMESPACE, REMOTE_CREDENTIAL, REMOTE_TEMPLATE, SimWorld, WorldConfig
from tests.helpers import eventually, unique

KUBECTL = Path(sys.executable).parent / "kubectl"

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl is not installed in the venv")

GROUP = "k0rdent.mirantis.com"
# Two 8-GPU H100 hosts of the bundled inventory (fra1), as Colony would have claimed them.
MACHINES = [
    {"address": "192.0.2.10", "port": 22, "user": "root"},
    {"address": "192.0.2.11", "port": 22, "user": "root"},
]


async def kubectl(kubeconfig: Path, *args: str, check: bool = True) -> str:
    """stdout + stderr of `kubectl --kubeconfig <kubeconfig> <args>`; fails on a non-zero exit."""
    process = await asyncio.create_subprocess_exec(
        str(KUBECTL), "--kubeconfig", str(kubeconfig), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 90)
    if check and process.returncode != 0:
        raise AssertionError(
            f"kubectl {' '.join(args)} failed ({process.returncode}): {err.decode()}"
        )
    return out.decode() + err.decode()


async def kubectl_json(kubeconfig: Path, *args: str) -> Any:
    process = await asyncio.create_subprocess_exec(
        str(KUBECTL), "--kubeconfig", str(kubeconfig), *args, "-o", "json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 90)
    assert process.returncode == 0, err.decode()
    return json.loads(out)


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item.get("type") == type_:
            return dict(item)
    return {}


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[SimWorld]:
    async with SimWorld(WorldConfig(state_dir=tmp_path, timing=SimTiming.instant())) as started:
        yield started


async def ready_cluster(world: SimWorld, name: str) -> Path:
    """Create a two-machine ClusterDeployment, wait for Ready; the child kubeconfig file."""
    rt = world.store.registry.get(GROUP, "clusterdeployments")
    world.store.create(
        rt,
        {
            "apiVersion": f"{GROUP}/v1beta1",
            "kind": "ClusterDeployment",
            "metadata": {
                "name": name,
                "namespace": KCM_NAMESPACE,
                "labels": {"colony.dev/cluster": name},
            },
            "spec": {
                "template": REMOTE_TEMPLATE,
                "credential": REMOTE_CREDENTIAL,
                "config": {"clusterLabels": {"colony.dev/cluster": name}, "machines": MACHINES},
            },
        },
    )
    management = world.management_kubeconfig_path

    async def probe() -> dict[str, Any]:
        return dict(await kubectl_json(management, "get", "clusterdeployment", name))

    await eventually(
        probe, until=lambda cd: condition(cd, "Ready").get("status") == "True", what="Ready"
    )
    encoded = await kubectl(
        management, "get", "secret", f"{name}-kubeconfig", "-n", KCM_NAMESPACE,
        "-o", "jsonpath={.data.value}",
    )  # fmt: skip
    path = world.state_dir / f"{name}.kubeconfig"
    path.write_bytes(base64.b64decode(encoded))
    return path


async def test_kubectl_on_management_cluster(world: SimWorld) -> None:
    name = unique("gpu")
    await ready_cluster(world, name)
    management = world.management_kubeconfig_path

    listed = await kubectl(management, "get", "clusterdeployments", "-A")
    header, *rows = listed.splitlines()
    # The CRD's additionalPrinterColumns: Ready (from the Ready condition), Template, Age...
    assert header.split()[:3] == ["NAMESPACE", "NAME", "READY"], listed
    assert "TEMPLATE" in header.split(), listed
    row = next(r for r in rows if name in r).split()
    assert row[:3] == [KCM_NAMESPACE, name, "True"], listed
    assert REMOTE_TEMPLATE in row, listed

    preloaded = await kubectl(
        management, "get", "clustertemplates,credentials,servicetemplates", "-n", KCM_NAMESPACE
    )
    for expected in (
        f"clustertemplate.{GROUP}/{REMOTE_TEMPLATE}",
        f"credential.{GROUP}/{REMOTE_CREDENTIAL}",
        f"servicetemplate.{GROUP}/jupyter-notebook-0-3-0",
    ):
        assert expected in preloaded, preloaded

    described = await kubectl(management, "describe", "clusterdeployment", name)
    for expected in (f"Name:         {name}", "Kind:         ClusterDeployment", "Machines:"):
        assert expected in described, described
    assert "192.0.2.10" in described
    assert "Succeeded" in described

    # The short names k0rdent's CRD declares (clusterd, cld) resolve through discovery.
    for short in ("cld", "clusterd"):
        assert name in await kubectl(management, "get", short)
    assert REMOTE_TEMPLATE in await kubectl(management, "get", "clustertmpl")


async def test_kubectl_drains_a_child_node(world: SimWorld) -> None:
    child = await ready_cluster(world, unique("gpu"))

    async def ready_nodes() -> list[str]:
        nodes = (await kubectl_json(child, "get", "nodes"))["items"]
        return [
            n["metadata"]["name"] for n in nodes if condition(n, "Ready").get("status") == "True"
        ]

    nodes = await eventually(ready_nodes, until=lambda n: len(n) == 2, what="2 Ready nodes")
    table = await kubectl(child, "get", "nodes")
    for node in nodes:
        assert f"{node}   Ready" in table, table

    async def system_pods() -> list[dict[str, Any]]:
        return list((await kubectl_json(child, "get", "pods", "-n", "kube-system"))["items"])

    def settled(pods: list[dict[str, Any]]) -> bool:
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return len(running) == 4 and len(pods) == 4  # cilium on each node, two coredns

    pods = await eventually(system_pods, until=settled, what="cilium and coredns running")
    dns_nodes = [p["spec"]["nodeName"] for p in pods if p["metadata"]["name"].startswith("coredns")]
    target = dns_nodes[0]  # a node with a CoreDNS pod on it, so the drain has something to evict
    evicted = {
        p["metadata"]["uid"]
        for p in pods
        if p["spec"]["nodeName"] == target and p["metadata"]["name"].startswith("coredns")
    }
    (daemon_pod,) = [
        p["metadata"]["uid"]
        for p in pods
        if p["spec"]["nodeName"] == target and p["metadata"]["name"].startswith("cilium")
    ]

    cordoned = await kubectl(child, "cordon", target)
    assert f"node/{target} cordoned" in cordoned
    assert "SchedulingDisabled" in await kubectl(child, "get", "node", target)

    drained = await kubectl(
        child, "drain", target, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s"
    )
    assert "evicting pod kube-system/coredns-" in drained, drained
    assert f"node/{target} drained" in drained, drained

    def drained_state(pods: list[dict[str, Any]]) -> bool:
        on_target = {p["metadata"]["uid"] for p in pods if p["spec"].get("nodeName") == target}
        dns_running = [
            p
            for p in pods
            if p["metadata"]["name"].startswith("coredns")
            and (p.get("status") or {}).get("phase") == "Running"
        ]
        # Only the DaemonSet's pod stays (the same one); the Deployment replaced the evicted
        # CoreDNS pods on the other node.
        return (
            on_target == {daemon_pod}
            and not evicted & {p["metadata"]["uid"] for p in pods}
            and len(dns_running) == 2
        )

    await eventually(system_pods, until=drained_state, what="only cilium left on the node")

    uncordoned = await kubectl(child, "uncordon", target)
    assert f"node/{target} uncordoned" in uncordoned
    node = await kubectl_json(child, "get", "node", target)
    assert not node["spec"].get("unschedulable")


# The seed's walk-through ("Run on a GPU"), word for word: the manifest and the two commands.
GPU_CHECK_YAML = """\
apiVersion: v1
kind: Pod
metadata:
  name: gpu-check
spec:
  restartPolicy: Never
  containers:
    - name: cuda
      image: nvcr.io/nvidia/cuda:12.8.1-base-ubuntu24.04
      command: ["nvidia-smi", "-L"]
      resources:
        limits:
          nvidia.com/gpu: 1
"""


async def test_gpu_check_walkthrough(world: SimWorld) -> None:
    child = await ready_cluster(world, unique("gpu"))
    manifest = world.state_dir / "gpu-check.yaml"
    manifest.write_text(GPU_CHECK_YAML)

    applied = await kubectl(child, "apply", "-f", str(manifest))
    assert applied.strip() == "pod/gpu-check created"

    async def phase() -> str:
        return str((await kubectl_json(child, "get", "pod", "gpu-check"))["status"].get("phase"))

    # A user would wait for the pod to complete; `kubectl logs` before that can only say that the
    # container is waiting to start.
    await eventually(phase, until=lambda p: p == "Succeeded", what="gpu-check Succeeded")
    printed = await kubectl(child, "logs", "gpu-check")
    (line,) = printed.splitlines()
    assert line.startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-"), printed
    assert line.endswith(")")

    described = await kubectl(child, "describe", "pod", "gpu-check")
    fields = {
        key.strip(): value.strip()
        for key, _, value in (line.partition(":") for line in described.splitlines())
        if value.strip()
    }
    assert fields["State"] == "Terminated"
    assert fields["Reason"] == "Completed"
    assert fields["Exit Code"] == "0"
    assert fields["nvidia.com/gpu"] == "1"
    assert fields["QoS Class"] == "BestEffort"  # GPUs do not count for QoS, cpu/memory do

    table = await kubectl(child, "get", "pod", "gpu-check", "-o", "wide")
    header, row = table.splitlines()
    assert header.split()[:7] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    assert row.split()[:4] == ["gpu-check", "0/1", "Completed", "0"]
    assert row.split()[6].startswith("fra1-h100-80gb-")
