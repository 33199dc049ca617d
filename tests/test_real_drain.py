"""Colony's drain and teardown activities on a real child cluster (marker `real`): a control plane
of the module's own with KWOK nodes, where kube-controller-manager runs the disruption,
Deployment, DaemonSet, garbage-collection and namespace controllers, kube-scheduler places pods,
and KWOK plays the kubelets.

What `drain_node` must do there (docs: the drain follows `kubectl drain`):
- cordon, then evict through the Eviction API: a PodDisruptionBudget with no disruption allowed
  answers 429, the drain retries, and goes on once a replica elsewhere makes room;
- leave DaemonSet pods and pods tolerating the cordon where they are;
- stop at its deadline, or with `force` delete what the budgets still protect;
- then the Node is deleted, and a workspace namespace's delete waits for the namespace
  controller to finalize it.

The child's kubeconfig reaches the activities as it does in production: from a
`<cluster>-kubeconfig` Secret on the management cluster (here the process's shared control
plane).
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from kubernetes import client
from temporalio.testing import ActivityEnvironment

from activities.child_cluster.clients import ChildClients
from activities.child_cluster.namespaces import NamespaceActivities
from activities.child_cluster.nodes import NodeActivities
from components.controlplane import ControlPlane
from infra.kube import api_client_from_dict, close_client
from models.activity_api import (
    CordonNodeRequest,
    DeleteNodeRequest,
    DrainNodeRequest,
    DrainNodeResult,
    KubeconfigRef,
)
from models.drain import UNSCHEDULABLE_TAINT
from models.ownership import Owner
from models.workspace_api import DeleteNamespaceRequest, EnsureNamespaceRequest
from tests import realcluster
from tests.helpers import eventually, unique

pytestmark = pytest.mark.real

MANAGEMENT_NAMESPACE = "kcm-system"
BUDGET_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."
call = asyncio.to_thread


@dataclass
class Child:
    plane: ControlPlane
    admin: client.ApiClient
    ref: KubeconfigRef
    nodes: NodeActivities
    namespaces: NamespaceActivities

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.admin)

    @property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.admin)

    @property
    def policy(self) -> client.PolicyV1Api:
        return client.PolicyV1Api(self.admin)


@pytest.fixture(scope="module")
def child(real_control_plane: ControlPlane) -> Iterator[Child]:
    plane = realcluster.start_control_plane("child")
    admin = api_client_from_dict(plane.admin_kubeconfig)
    name = plane.name
    # What k0rdent writes on the management cluster for a ready child cluster.
    real_control_plane.ensure("/api/v1/namespaces", {"metadata": {"name": MANAGEMENT_NAMESPACE}})
    real_control_plane.ensure(
        f"/api/v1/namespaces/{MANAGEMENT_NAMESPACE}/secrets",
        {
            "metadata": {"name": f"{name}-kubeconfig"},
            "data": {
                "value": base64.b64encode(yaml.safe_dump(plane.admin_kubeconfig).encode()).decode()
            },
        },
    )
    management = api_client_from_dict(real_control_plane.admin_kubeconfig)
    clients = ChildClients()
    try:
        yield Child(
            plane,
            admin,
            KubeconfigRef(namespace=MANAGEMENT_NAMESPACE, secret_name=f"{name}-kubeconfig"),
            NodeActivities(management, clients),
            NamespaceActivities(management, clients),
        )
    finally:
        clients.close()
        close_client(management)
        close_client(admin)
        plane.stop()


@pytest.fixture
async def namespace(child: Child) -> AsyncIterator[str]:
    name = await call(realcluster.fresh_namespace, child.plane, "drain")
    yield name
    await call(realcluster.delete_namespace, child.plane, name)


async def run(fn: Any, request: Any) -> Any:
    return await ActivityEnvironment().run(fn, request)


def soon(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def add_nodes(child: Child, pool: str, count: int) -> list[str]:
    names = [unique(pool) for _ in range(count)]
    for name in names:
        child.plane.add_node(name, labels={"pool": pool})
    return names


def deployment(name: str, replicas: int, pool: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    # Any node of the pool: the one being drained, or another once it is cordoned.
                    "nodeSelector": {"pool": pool},
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                },
            },
        },
    }


def budget(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {**spec, "selector": {"matchLabels": {"app": name}}},
    }


async def pods_of(child: Child, namespace: str, app: str) -> list[Any]:
    listed = await call(child.core.list_namespaced_pod, namespace, label_selector=f"app={app}")
    return [p for p in listed.items if p.metadata.deletion_timestamp is None]


async def running_on(child: Child, namespace: str, app: str, count: int) -> list[str]:
    """Wait until `count` pods of `app` run; their nodes."""
    pods = await eventually(
        lambda: pods_of(child, namespace, app),
        until=lambda pods: len(pods) == count and all(p.status.phase == "Running" for p in pods),
        timeout=60,
        what=f"{count} pods of {app} running",
    )
    return sorted(p.spec.node_name for p in pods)


async def budget_settled(child: Child, namespace: str, name: str, allowed: int) -> None:
    """The disruption controller has observed the budget and allows `allowed` disruptions."""

    async def read() -> Any:
        return await call(child.policy.read_namespaced_pod_disruption_budget, name, namespace)

    await eventually(
        read,
        until=lambda pdb: (
            pdb.status is not None
            and pdb.status.observed_generation == pdb.metadata.generation
            and pdb.status.disruptions_allowed == allowed
        ),
        timeout=60,
        what=f"budget {name} allowing {allowed}",
    )


async def test_a_drain_waits_for_a_budget_and_goes_on_once_a_replica_elsewhere_makes_room(
    child: Child, namespace: str
) -> None:
    pool = unique("pool")
    [draining] = add_nodes(child, pool, 1)
    await call(child.apps.create_namespaced_deployment, namespace, deployment("web", 2, pool))
    assert await running_on(child, namespace, "web", 2) == [draining, draining]
    await call(
        child.policy.create_namespaced_pod_disruption_budget,
        namespace,
        budget("web", minAvailable=2),
    )
    await budget_settled(child, namespace, "web", 0)
    [elsewhere] = add_nodes(child, pool, 1)

    cordoned = await run(
        child.nodes.cordon_node, CordonNodeRequest(kubeconfig=child.ref, node_name=draining)
    )
    assert cordoned.found
    node = await call(child.core.read_node, draining)
    assert node.spec.unschedulable

    held: DrainNodeResult = await run(
        child.nodes.drain_node,
        DrainNodeRequest(kubeconfig=child.ref, node_name=draining, deadline=soon(3)),
    )
    assert not held.drained
    assert held.progress.pods_evicted == 0
    assert held.progress.pods_remaining == 2
    assert all(BUDGET_MESSAGE in blocker for blocker in held.progress.blocking_pods)
    assert len(held.progress.blocking_pods) == 2

    # A third replica, placed on the other node (the first is cordoned), makes room for one
    # disruption at a time: the drain evicts, the Deployment replaces elsewhere, and so on.
    await call(
        child.apps.patch_namespaced_deployment_scale, "web", namespace, {"spec": {"replicas": 3}}
    )
    drained: DrainNodeResult = await run(
        child.nodes.drain_node,
        DrainNodeRequest(kubeconfig=child.ref, node_name=draining, deadline=soon(90)),
    )
    assert drained.drained
    assert drained.progress.pods_evicted == 2
    assert drained.progress.pods_deleted == []
    assert await running_on(child, namespace, "web", 3) == [elsewhere] * 3


async def test_a_drain_leaves_daemon_set_pods_and_pods_that_tolerate_the_cordon(
    child: Child, namespace: str
) -> None:
    pool = unique("pool")
    [draining] = add_nodes(child, pool, 1)
    daemon = {
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {
                    "nodeSelector": {"pool": pool},
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                },
            },
        },
    }
    await call(child.apps.create_namespaced_daemon_set, namespace, daemon)
    tolerant = {
        "metadata": {"name": "tolerant", "labels": {"app": "tolerant"}},
        "spec": {
            "nodeName": draining,
            "tolerations": [
                {"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"}
            ],
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    await call(child.core.create_namespaced_pod, namespace, tolerant)
    plain = {
        "metadata": {"name": "plain", "labels": {"app": "plain"}},
        "spec": {
            "nodeName": draining,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    await call(child.core.create_namespaced_pod, namespace, plain)
    assert await running_on(child, namespace, "agent", 1) == [draining]
    assert await running_on(child, namespace, "tolerant", 1) == [draining]
    assert await running_on(child, namespace, "plain", 1) == [draining]

    await run(child.nodes.cordon_node, CordonNodeRequest(kubeconfig=child.ref, node_name=draining))
    drained = await run(
        child.nodes.drain_node,
        DrainNodeRequest(kubeconfig=child.ref, node_name=draining, deadline=soon(60)),
    )
    assert drained.drained
    assert drained.progress.pods_evicted == 1  # the plain pod
    assert await pods_of(child, namespace, "plain") == []
    assert await running_on(child, namespace, "agent", 1) == [draining]
    assert await running_on(child, namespace, "tolerant", 1) == [draining]

    # The node goes; what ran on it goes with it (the pod garbage collector).
    deleted = await run(
        child.nodes.delete_node,
        DeleteNodeRequest(kubeconfig=child.ref, node_name=draining, wait_until=soon(30)),
    )
    assert (deleted.existed, deleted.gone) == (True, True)
    await eventually(
        lambda: pods_of(child, namespace, "tolerant"),
        until=lambda pods: pods == [],
        timeout=90,
        what="the deleted node's pods collected",
    )


async def test_a_drain_stops_at_its_deadline_and_force_deletes_what_budgets_protect(
    child: Child, namespace: str
) -> None:
    pool = unique("pool")
    [draining] = add_nodes(child, pool, 1)
    await call(child.apps.create_namespaced_deployment, namespace, deployment("db", 1, pool))
    assert await running_on(child, namespace, "db", 1) == [draining]
    await call(
        child.policy.create_namespaced_pod_disruption_budget,
        namespace,
        budget("db", maxUnavailable=0),
    )
    await budget_settled(child, namespace, "db", 0)
    await run(child.nodes.cordon_node, CordonNodeRequest(kubeconfig=child.ref, node_name=draining))

    started = asyncio.get_running_loop().time()
    held = await run(
        child.nodes.drain_node,
        DrainNodeRequest(kubeconfig=child.ref, node_name=draining, deadline=soon(2)),
    )
    assert not held.drained
    assert asyncio.get_running_loop().time() - started < 20  # the deadline, not a hang
    [victim] = await pods_of(child, namespace, "db")
    forced = await run(
        child.nodes.drain_node,
        DrainNodeRequest(kubeconfig=child.ref, node_name=draining, deadline=soon(2), force=True),
    )
    assert forced.drained
    assert forced.progress.pods_deleted == [f"{namespace}/{victim.metadata.name}"]
    await eventually(
        lambda: call(child.core.list_namespaced_pod, namespace, field_selector=f"spec.nodeName={draining}"),
        until=lambda listed: listed.items == [],
        what="the forced pod gone from the node",
    )  # fmt: skip


async def test_a_workspace_namespace_teardown_waits_for_real_finalization(
    child: Child,
) -> None:
    pool = unique("pool")
    add_nodes(child, pool, 1)
    name = f"ws-{unique('teardown')}"
    owner = Owner(workflow_id=f"workspace/{name}")
    ensure = EnsureNamespaceRequest(kubeconfig=child.ref, name=name, owner=owner)
    assert (await run(child.namespaces.ensure_namespace, ensure)).created
    await eventually(
        lambda: call(child.core.list_namespaced_service_account, name),
        until=lambda listed: any(sa.metadata.name == "default" for sa in listed.items),
        what="the namespace's default ServiceAccount",
    )
    await call(child.apps.create_namespaced_deployment, name, deployment("nb", 1, pool))
    await running_on(child, name, "nb", 1)
    held = {"metadata": {"name": "held", "finalizers": ["colony.dev/test-hold"]}}
    await call(child.core.create_namespaced_config_map, name, held)

    delete = DeleteNamespaceRequest(kubeconfig=child.ref, name=name, owner=owner)
    waiting = await run(
        child.namespaces.delete_namespace, delete.model_copy(update={"wait_until": soon(5)})
    )
    assert (waiting.existed, waiting.gone) == (True, False)
    terminating = await call(child.core.read_namespace, name)
    assert terminating.status.phase == "Terminating"
    # The namespace controller removes what it can (the workload: KWOK finishes its pods); the
    # held ConfigMap keeps the namespace Terminating.
    await eventually(
        lambda: call(child.core.list_namespaced_pod, name),
        until=lambda listed: listed.items == [],
        timeout=60,
        what="the namespace's pods removed by the namespace controller",
    )
    again = await run(
        child.namespaces.delete_namespace, delete.model_copy(update={"wait_until": soon(1)})
    )
    assert (again.existed, again.gone) == (True, False)
    await call(
        child.core.patch_namespaced_config_map,
        "held",
        name,
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["colony.dev/test-hold"]}},
    )
    gone = await run(
        child.namespaces.delete_namespace, delete.model_copy(update={"wait_until": soon(90)})
    )
    assert gone.gone
