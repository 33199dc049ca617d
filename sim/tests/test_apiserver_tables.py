"""Server-side tables: the columns kube-apiserver prints for built-in types, wide ones included.

Checked two ways: the raw `as=Table` answer through the official client (column definitions and
priorities, as kube's printers declare them), and `kubectl get -o wide`, which shows the priority-1
columns only when asked.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from sim.apiserver.registry import DEPLOYMENTS, NODES, PODS, SERVICES
from sim.apiserver.server import ClusterServer
from sim.apiserver.store import ClusterStore
from sim.tests.conftest import Kube, call

KUBECTL = Path(sys.executable).parent / "kubectl"
TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io"


async def kubectl(kubeconfig: Path, *args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        str(KUBECTL), "--kubeconfig", str(kubeconfig), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    return out.decode()


def _node(store: ClusterStore, name: str) -> None:
    store.create(
        NODES,
        {
            "metadata": {"name": name, "labels": {"node-role.kubernetes.io/worker": ""}},
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                "addresses": [
                    {"type": "InternalIP", "address": "192.0.2.10"},
                    {"type": "Hostname", "address": name},
                ],
                "nodeInfo": {
                    "kubeletVersion": "v1.37.1+k0s",
                    "osImage": "Ubuntu 24.04.2 LTS",
                    "kernelVersion": "6.8.0-60-generic",
                    "containerRuntimeVersion": "containerd://1.7.27",
                },
            },
        },
    )


def _running_pod(store: ClusterStore, name: str, node: str, *, gates: int = 0) -> None:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}], "nodeName": node}
    if gates:
        spec["readinessGates"] = [{"conditionType": f"example.com/gate-{i}"} for i in range(gates)]
    store.create(PODS, {"metadata": {"name": name}, "spec": spec})

    def run(pod: dict[str, Any]) -> None:
        pod["status"].update(
            phase="Running",
            podIP="10.244.0.7",
            podIPs=[{"ip": "10.244.0.7"}],
            conditions=[
                {"type": "Ready", "status": "True"},
                {"type": "example.com/gate-0", "status": "True"},
            ],
            containerStatuses=[
                {
                    "name": "c",
                    "ready": True,
                    "restartCount": 0,
                    "image": "busybox",
                    "imageID": "",
                    "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                }
            ],
        )

    store.mutate(PODS, "default", name, run)


def _table(api: client.ApiClient, path: str) -> dict[str, Any]:
    """GET `path` as a Table (what kubectl get asks for), with the client's own credentials."""
    configuration = api.configuration
    headers = {"Accept": TABLE_ACCEPT}
    token = configuration.api_key.get("BearerToken")
    if token:  # (else a client certificate, which the connection itself presents)
        headers["Authorization"] = token
    response = api.call_api("GET", configuration.host + path, header_params=headers)
    return dict(json.loads(response.read()))  # type: ignore[no-untyped-call]  # untyped client


@pytest.mark.parametrize(
    ("path", "columns"),
    [
        pytest.param(
            "/api/v1/namespaces/default/pods",
            [("Name", 0), ("Ready", 0), ("Status", 0), ("Restarts", 0), ("Age", 0), ("IP", 1),
             ("Node", 1), ("Nominated Node", 1), ("Readiness Gates", 1)],
            id="pods",
        ),
        pytest.param(
            "/api/v1/nodes",
            [("Name", 0), ("Status", 0), ("Roles", 0), ("Age", 0), ("Version", 0),
             ("Internal-IP", 1), ("External-IP", 1), ("OS-Image", 1), ("Kernel-Version", 1),
             ("Container-Runtime", 1)],
            id="nodes",
        ),
        pytest.param(
            "/apis/apps/v1/namespaces/default/deployments",
            [("Name", 0), ("Ready", 0), ("Up-to-date", 0), ("Available", 0), ("Age", 0),
             ("Containers", 1), ("Images", 1), ("Selector", 1)],
            id="deployments",
        ),
        pytest.param(
            "/api/v1/namespaces/default/services",
            [("Name", 0), ("Type", 0), ("Cluster-IP", 0), ("External-IP", 0), ("Port(s)", 0),
             ("Age", 0), ("Selector", 1)],
            id="services",
        ),
        pytest.param(
            "/apis/apps/v1/namespaces/default/daemonsets",
            [("Name", 0), ("Desired", 0), ("Current", 0), ("Ready", 0), ("Up-to-date", 0),
             ("Available", 0), ("Node Selector", 0), ("Age", 0), ("Containers", 1), ("Images", 1),
             ("Selector", 1)],
            id="daemonsets",
        ),
        pytest.param(
            "/api/v1/namespaces/default/events",
            [("Last Seen", 0), ("Type", 0), ("Reason", 0), ("Object", 0), ("Subobject", 1),
             ("Source", 1), ("Message", 0), ("First Seen", 1), ("Count", 1), ("Name", 1)],
            id="events",
        ),
        pytest.param(
            "/api/v1/namespaces", [("Name", 0), ("Status", 0), ("Age", 0)], id="namespaces"
        ),
        pytest.param(
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            [("Name", 0), ("Role", 0), ("Age", 0), ("Users", 1), ("Groups", 1),
             ("ServiceAccounts", 1)],
            id="clusterrolebindings",
        ),
    ],
)  # fmt: skip
async def test_column_definitions_match_kube(
    kube: Kube, path: str, columns: list[tuple[str, int]]
) -> None:
    table = await call(_table, kube.api, path)
    assert [(c["name"], c["priority"]) for c in table["columnDefinitions"]] == columns


async def test_pod_and_node_cells(cluster: ClusterServer, api_client: client.ApiClient) -> None:
    store = cluster.store
    _node(store, "gpu-1")
    _running_pod(store, "web", "gpu-1", gates=2)
    store.create(PODS, {"metadata": {"name": "pending"}, "spec": {"containers": [{"name": "c", "image": "x"}]}})  # fmt: skip

    pods = await call(_table, api_client, "/api/v1/namespaces/default/pods")
    rows = {row["cells"][0]: row["cells"] for row in pods["rows"]}
    _name, ready, status, restarts, _age, ip, node, nominated, gates = rows["web"]
    assert (ready, status, restarts, ip, node, nominated, gates) == (
        "1/1", "Running", "0", "10.244.0.7", "gpu-1", "<none>", "1/2",
    )  # fmt: skip
    assert rows["pending"][1:4] == ["0/1", "Pending", "0"]
    assert rows["pending"][5:] == ["<none>", "<none>", "<none>", "<none>"]

    nodes = await call(_table, api_client, "/api/v1/nodes")
    (cells,) = [row["cells"] for row in nodes["rows"]]
    assert cells[:3] == ["gpu-1", "Ready", "worker"]
    assert cells[4:] == [
        "v1.37.1+k0s", "192.0.2.10", "<none>", "Ubuntu 24.04.2 LTS", "6.8.0-60-generic",
        "containerd://1.7.27",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("container_status", "expected"),
    [
        pytest.param({"state": {"waiting": {"reason": "ContainerCreating"}}}, "ContainerCreating", id="creating"),
        pytest.param({"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}, "Completed", id="completed"),
        pytest.param({"state": {"terminated": {"exitCode": 3}}}, "ExitCode:3", id="exit-code"),
        pytest.param({"state": {"waiting": {"reason": "CrashLoopBackOff"}}, "restartCount": 2}, "CrashLoopBackOff", id="crashloop"),
        pytest.param({"state": {"terminated": {"exitCode": 128, "reason": "StartError"}}}, "StartError", id="start-error"),
    ],
)  # fmt: skip
async def test_pod_status_column_follows_container_states(
    cluster: ClusterServer,
    api_client: client.ApiClient,
    container_status: dict[str, Any],
    expected: str,
) -> None:
    store = cluster.store
    store.create(PODS, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}})  # fmt: skip

    def set_status(pod: dict[str, Any]) -> None:
        pod["status"]["containerStatuses"] = [
            {"name": "c", "ready": False, "restartCount": 0, "image": "x", "imageID": "", **container_status}
        ]  # fmt: skip

    store.mutate(PODS, "default", "p", set_status)
    pods = await call(_table, api_client, "/api/v1/namespaces/default/pods/p")
    assert pods["rows"][0]["cells"][2] == expected


@pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl is not installed in the venv")
async def test_kubectl_get_wide(cluster: ClusterServer, kubeconfig_file: Path) -> None:
    store = cluster.store
    _node(store, "gpu-1")
    _running_pod(store, "web", "gpu-1")
    store.create(
        DEPLOYMENTS,
        {
            "metadata": {"name": "api"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "api"}},
                "template": {
                    "metadata": {"labels": {"app": "api"}},
                    "spec": {"containers": [{"name": "server", "image": "nginx:1.27"}]},
                },
            },
        },
    )
    store.create(
        SERVICES,
        {
            "metadata": {"name": "api"},
            "spec": {"selector": {"app": "api"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    )

    narrow = (await kubectl(kubeconfig_file, "get", "pods")).splitlines()
    assert narrow[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    wide = (await kubectl(kubeconfig_file, "get", "pods", "-o", "wide")).splitlines()
    assert wide[0].split() == [
        "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED", "NODE",
        "READINESS", "GATES",
    ]  # fmt: skip
    row = wide[1].split()
    assert row[0] == "web"
    assert row[5:] == ["10.244.0.7", "gpu-1", "<none>", "<none>"]

    nodes = (await kubectl(kubeconfig_file, "get", "nodes", "-o", "wide")).splitlines()
    assert nodes[0].split() == [
        "NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE",
        "KERNEL-VERSION", "CONTAINER-RUNTIME",
    ]  # fmt: skip
    assert "192.0.2.10" in nodes[1]
    assert "Ubuntu 24.04.2 LTS" in nodes[1]

    deployments = (await kubectl(kubeconfig_file, "get", "deployments", "-o", "wide")).splitlines()
    assert deployments[0].split()[-3:] == ["CONTAINERS", "IMAGES", "SELECTOR"]
    assert deployments[1].split()[-3:] == ["server", "nginx:1.27", "app=api"]
    services = (await kubectl(kubeconfig_file, "get", "services", "-o", "wide")).splitlines()
    assert services[1].split()[-1] == "app=api"
    assert "80/TCP" in services[1]
