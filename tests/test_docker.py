"""Opt-in (marker `docker`): Colony against real servers in containers, where a Docker engine runs.

- The child-cluster activities (node labels and taints, cordon, a drain held by a
  PodDisruptionBudget then released, TokenRequest) against a real Kubernetes API server (K3s),
  which plays both the management cluster (it holds the `k3s-kubeconfig` Secret) and the child.
- The cluster scenario (create, scale up, scale down with a drain, delete) through `colonyctl`
  against a real Temporal server image (`temporal server start-dev` in a container) with the real
  worker, on the simulated infrastructure.

Run: `.venv/bin/pytest -m docker tests/test_docker.py` (pulls rancher/k3s and temporalio/temporal
on first use). Without a Docker engine every test here is skipped with the reason
(tests/conftest.py), as on this project's CI machines.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import ActivityEnvironment
from typer.testing import CliRunner

from activities.child_cluster.nodes import NodeActivities
from clients.credentials import issue_token
from infra.kube import api_client_from_dict, close_client
from models.activity_api import (
    AwaitNodesRequest,
    CordonNodeRequest,
    DrainNodeRequest,
    ExpectedNode,
    KubeconfigRef,
    NodeTaint,
    UncordonNodeRequest,
)
from starter.cli import app, normalize_argv
from tests.helpers import eventually_sync, unique
from tests.simenv import colony_env, host_provider, management_api, started_world
from worker import build_worker, ensure_search_attributes

pytestmark = [pytest.mark.docker, pytest.mark.slow]

K3S_IMAGE = "rancher/k3s:v1.31.4-k3s1"
TEMPORAL_IMAGE = "temporalio/temporal:1.5.0"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
NAMESPACE = "kcm-system"
CLUSTER = "k3s"


@pytest.fixture(scope="module")
def k3s() -> Iterator[dict[str, Any]]:
    from testcontainers.community.k3s import K3SContainer

    with K3SContainer(K3S_IMAGE) as container:
        yield yaml.safe_load(container.config_yaml())


@pytest.fixture(scope="module")
def k3s_api(
    k3s: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[client.ApiClient]:
    """An admin client of K3s, with the kubeconfig Secret Colony reads a child's from."""
    api = api_client_from_dict(k3s)
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    core.create_namespaced_secret(
        NAMESPACE,
        {
            "metadata": {"name": f"{CLUSTER}-kubeconfig"},
            "data": {"value": base64.b64encode(yaml.safe_dump(k3s).encode()).decode()},
        },
    )
    eventually_sync(
        lambda: core.list_namespaced_service_account("default").items,
        timeout=60,
        what="the default ServiceAccount",
    )
    try:
        yield api
    finally:
        close_client(api)


def ref() -> KubeconfigRef:
    return KubeconfigRef(namespace=NAMESPACE, secret_name=f"{CLUSTER}-kubeconfig")


def the_node(api: client.ApiClient) -> str:
    return str(client.CoreV1Api(api).list_node().items[0].metadata.name)


async def test_child_cluster_activities_on_k3s(
    k3s_api: client.ApiClient, k3s: dict[str, Any], tmp_path: Path
) -> None:
    activities = NodeActivities(k3s_api)
    env = ActivityEnvironment()
    node = the_node(k3s_api)
    core = client.CoreV1Api(k3s_api)
    try:
        # A node registered under its host's id is labelled and tainted as the pool wants it.
        joined = await env.run(
            activities.await_nodes,
            AwaitNodesRequest(
                kubeconfig=ref(),
                expected=[
                    ExpectedNode(
                        host_id=node,
                        address="",
                        labels={"colony.dev/node-pool": "gpu"},
                        taints=[NodeTaint(key="colony.dev/test", value="x", effect="NoSchedule")],
                    )
                ],
                deadline=datetime.now(UTC) + timedelta(seconds=60),
            ),
        )
        assert joined.observed[0].labelled, joined
        read = core.read_node(node)
        assert read.metadata.labels["colony.dev/node-pool"] == "gpu"
        assert any(t.key == "colony.dev/test" for t in read.spec.taints or [])
        # The taint would keep the test pod off the node: tolerate it.
        pod = {
            "metadata": {"name": "train", "labels": {"app": "train"}},
            "spec": {
                "containers": [{"name": "c", "image": PAUSE_IMAGE}],
                "tolerations": [{"key": "colony.dev/test", "operator": "Exists"}],
            },
        }
        core.create_namespaced_pod("default", pod)
        eventually_sync(
            lambda: core.read_namespaced_pod("train", "default").status.phase,
            until=lambda phase: phase == "Running",
            timeout=120,
            what="the pod running",
        )
        client.PolicyV1Api(k3s_api).create_namespaced_pod_disruption_budget(
            "default",
            {"metadata": {"name": "train"}, "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "train"}}}},
        )  # fmt: skip
        cordoned = await env.run(
            activities.cordon_node, CordonNodeRequest(kubeconfig=ref(), node_name=node)
        )
        assert cordoned.found
        assert core.read_node(node).spec.unschedulable
        held = await env.run(
            activities.drain_node,
            DrainNodeRequest(
                kubeconfig=ref(),
                node_name=node,
                deadline=datetime.now(UTC) + timedelta(seconds=4),
            ),
        )
        assert not held.drained
        assert any("train" in blocker for blocker in held.progress.blocking_pods)
        client.PolicyV1Api(k3s_api).delete_namespaced_pod_disruption_budget("train", "default")
        drained = await env.run(
            activities.drain_node,
            DrainNodeRequest(
                kubeconfig=ref(), node_name=node, deadline=datetime.now(UTC) + timedelta(minutes=2)
            ),
        )
        assert drained.drained
        assert drained.progress.pods_evicted >= 1
        await env.run(
            activities.uncordon_node, UncordonNodeRequest(kubeconfig=ref(), node_name=node)
        )
        assert not core.read_node(node).spec.unschedulable
    finally:
        activities.close()

    # TokenRequest, as `colonyctl token` asks it, through the management kubeconfig.
    management = tmp_path / "management.kubeconfig"
    management.write_text(yaml.safe_dump(k3s))
    token, expires = issue_token(management, CLUSTER, NAMESPACE)
    assert token
    assert expires > datetime.now(UTC)


@pytest.fixture(scope="module")
def temporal_address() -> Iterator[str]:
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    container = (
        DockerContainer(TEMPORAL_IMAGE)
        .with_command("server start-dev --ip 0.0.0.0 --headless")
        .with_exposed_ports(7233)
    )
    with container:
        wait_for_logs(container, "Temporal Server", timeout=120)
        yield f"{container.get_container_host_ip()}:{container.get_exposed_port(7233)}"


@pytest.fixture
async def temporal(temporal_address: str) -> Client:
    deadline = time.monotonic() + 60
    while True:
        try:
            connected = await Client.connect(
                temporal_address, data_converter=pydantic_data_converter
            )
            break
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(1)
    await ensure_search_attributes(connected, "default")
    return connected


async def test_cluster_scenario_on_a_temporal_server_image(
    temporal: Client, temporal_address: str, tmp_path: Path
) -> None:
    task_queue = unique("docker")
    async with started_world(tmp_path / "sim") as world:
        management = management_api(world)
        async with (
            host_provider(world) as http,
            build_worker(temporal, task_queue, management, http) as worker,
            worker,
        ):
            env = colony_env(world, TEMPORAL_ADDRESS=temporal_address, COLONY_TASK_QUEUE=task_queue)

            async def ctl(*args: str) -> None:
                result = await asyncio.to_thread(
                    CliRunner().invoke, app, normalize_argv(args), env=env
                )
                assert result.exit_code == 0, f"{args}: {result.stderr}"

            name = unique("dock")
            await ctl("cluster", "create", name, "--location-id", "fra1", "--node-pool", "name=gpu,count=2,gpuModelId=h100-80gb", "--wait", "--timeout", "120")  # fmt: skip
            await ctl("node-pool", "scale", name, "gpu", "--count", "3", "--wait", "--timeout", "120")  # fmt: skip
            await ctl("node-pool", "scale", name, "gpu", "--count", "1", "--wait", "--timeout", "120")  # fmt: skip
            await ctl("cluster", "delete", name, "--wait", "--timeout", "120")
        close_client(management)
