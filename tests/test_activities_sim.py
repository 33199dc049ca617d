"""Colony's activities against the simulated world: results, idempotency and error classification.

The sim runs in the test's event loop with instant timing; activities run inside
`ActivityEnvironment` (a real activity context, so heartbeats work) with the clients `worker.py`
would build from the sim's files.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.child_cluster import ChildClusterActivities
from activities.host_provider import HostProviderActivities
from activities.management import ManagementClusterActivities
from models.activity_api import (
    AddClusterMachinesRequest,
    CheckClusterPrerequisitesRequest,
    ClaimHostsRequest,
    CordonNodeRequest,
    CreateClusterDeploymentRequest,
    DeleteClusterDeploymentRequest,
    DeleteNodeRequest,
    DeletePodRequest,
    EvictionOutcome,
    EvictPodRequest,
    GetClusterDeploymentStatusRequest,
    Host,
    KubeconfigRef,
    LabelNodeRequest,
    ListClaimedHostsRequest,
    ListNodesRequest,
    ListPodsOnNodeRequest,
    NodeTaint,
    ReleaseHostsRequest,
    RemoveClusterMachinesRequest,
    UncordonNodeRequest,
)
from models.cluster import DEFAULT_CREDENTIAL, DEFAULT_TEMPLATE, POD_CIDR, SERVICE_CIDR
from models.errors import ErrorType
from models.node_pool import NodeSku
from sim.world import SimWorld
from tests.helpers import eventually, unique
from tests.simenv import (
    NAMESPACE,
    call,
    child_api,
    close_client,
    host_provider,
    management_api,
    started_world,
)

pytestmark = pytest.mark.slow

GPU = NodeSku(gpu_model_id="l40s-48gb")


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SimWorld]:
    async with started_world(tmp_path_factory.mktemp("sim")) as world:
        yield world


@pytest.fixture(autouse=True)
def _no_faults(world: SimWorld) -> Iterator[None]:
    world.faults.clear()
    yield
    world.faults.clear()


@pytest.fixture(scope="module")
def mgmt(world: SimWorld) -> Iterator[client.ApiClient]:
    api = management_api(world)
    yield api
    close_client(api)


@pytest.fixture
async def http(world: SimWorld) -> AsyncIterator[httpx.AsyncClient]:
    async with host_provider(world) as http:
        yield http


@pytest.fixture
def management(mgmt: client.ApiClient) -> ManagementClusterActivities:
    return ManagementClusterActivities(mgmt)


@pytest.fixture
def child(mgmt: client.ApiClient) -> Iterator[ChildClusterActivities]:
    activities = ChildClusterActivities(mgmt)
    yield activities
    activities.close()


@pytest.fixture
def hosts(http: httpx.AsyncClient) -> HostProviderActivities:
    return HostProviderActivities(http)


async def run(fn: Any, request: Any) -> Any:
    """Run an activity in a real activity context (heartbeats, info)."""
    return await ActivityEnvironment().run(fn, request)


def create_request(name: str, hosts: list[Host] | None = None) -> CreateClusterDeploymentRequest:
    return CreateClusterDeploymentRequest(
        namespace=NAMESPACE,
        name=name,
        template=DEFAULT_TEMPLATE,
        credential=DEFAULT_CREDENTIAL,
        workflow_id=f"cluster/{name}",
        kubernetes_version="v1.37.1",
        pod_cidr=POD_CIDR,
        service_cidr=SERVICE_CIDR,
        machines=[h.machine for h in hosts or []],
    )


async def expect_error(
    call_: Any, error_type: str, *, retryable: bool, chained: bool = True
) -> ApplicationError:
    with pytest.raises(ApplicationError) as caught:
        await call_
    assert caught.value.type == error_type, caught.value
    assert caught.value.non_retryable is (not retryable)
    if chained:
        assert caught.value.__cause__ is not None, "the library error is chained"
    return caught.value


# --- management cluster ------------------------------------------------------------------------


async def test_prerequisites_report_facts(management: ManagementClusterActivities) -> None:
    found = await run(
        management.check_cluster_prerequisites,
        CheckClusterPrerequisitesRequest(
            namespace=NAMESPACE, template=DEFAULT_TEMPLATE, credential=DEFAULT_CREDENTIAL
        ),
    )
    assert (found.template_found, found.template_valid) == (True, True)
    assert (found.credential_found, found.credential_ready) == (True, True)
    missing = await run(
        management.check_cluster_prerequisites,
        CheckClusterPrerequisitesRequest(namespace=NAMESPACE, template="nope", credential="nope"),
    )
    assert not missing.template_found
    assert not missing.credential_found


async def test_create_is_idempotent_and_refuses_a_foreign_deployment(
    management: ManagementClusterActivities,
) -> None:
    name = unique("idem")
    request = create_request(name)
    first = await run(management.create_cluster_deployment, request)
    again = await run(management.create_cluster_deployment, request)
    assert (first.created, again.created) == (True, False)
    foreign = request.model_copy(update={"workflow_id": "cluster/someone-else"})
    await expect_error(
        run(management.create_cluster_deployment, foreign), ErrorType.INVALID_SPEC, retryable=False
    )
    deleted = await run(
        management.delete_cluster_deployment,
        DeleteClusterDeploymentRequest(namespace=NAMESPACE, name=name),
    )
    assert deleted.existed


@pytest.mark.parametrize(
    ("code", "error_type", "retryable"),
    [
        pytest.param(403, ErrorType.FORBIDDEN, False, id="403-forbidden"),
        pytest.param(422, ErrorType.INVALID_SPEC, False, id="422-invalid"),
        pytest.param(409, "Conflict", True, id="409-conflict"),
        pytest.param(429, "Throttled", True, id="429-throttled"),
        pytest.param(500, "ServerError", True, id="500"),
        pytest.param(503, "ServerError", True, id="503"),
    ],
)
async def test_management_errors_are_classified(
    world: SimWorld,
    management: ManagementClusterActivities,
    code: int,
    error_type: str,
    retryable: bool,
) -> None:
    world.faults.fail_next(code, target="management", path="clusterdeployments", method="POST")
    error = await expect_error(
        run(management.create_cluster_deployment, create_request(unique("fault"))),
        error_type,
        retryable=retryable,
    )
    if code == 429:
        assert error.next_retry_delay is not None, "Retry-After is honoured"


async def test_cluster_lifecycle_through_management_and_child_activities(
    world: SimWorld,
    mgmt: client.ApiClient,
    management: ManagementClusterActivities,
    child: ChildClusterActivities,
    hosts: HostProviderActivities,
) -> None:
    name = unique("life")
    owner = f"cluster/{name}/run"
    claimed = await run(
        hosts.claim_hosts,
        ClaimHostsRequest(
            location_id="fra1", sku=GPU, count=2, idempotency_key=f"{owner}/k", owner=owner
        ),
    )
    await run(management.create_cluster_deployment, create_request(name, claimed.hosts[:1]))
    status_request = GetClusterDeploymentStatusRequest(namespace=NAMESPACE, name=name)

    async def status() -> Any:
        return await run(management.get_cluster_deployment_status, status_request)

    ready = await eventually(status, until=lambda s: s.ready, what="control plane ready")
    assert ready.machine_addresses == [claimed.hosts[0].address]

    # Machines: adding is idempotent by address, removing tolerates absent ones.
    add = AddClusterMachinesRequest(
        namespace=NAMESPACE, name=name, machines=[h.machine for h in claimed.hosts]
    )
    added = await run(management.add_cluster_machines, add)
    assert added.machine_addresses == [h.address for h in claimed.hosts]
    assert (await run(management.add_cluster_machines, add)).generation == added.generation

    ref = KubeconfigRef(namespace=NAMESPACE, secret_name=f"{name}-kubeconfig")

    async def nodes() -> Any:
        return (await run(child.list_nodes, ListNodesRequest(kubeconfig=ref))).nodes

    listed = await eventually(
        nodes, until=lambda ns: len(ns) == 2 and all(n.ready for n in ns), what="2 nodes ready"
    )
    node = listed[0].name
    assert claimed.hosts[0].address in listed[0].addresses

    label = LabelNodeRequest(
        kubeconfig=ref,
        node_name=node,
        labels={"colony.dev/node-pool": "gpu"},
        taints=[NodeTaint(key="dedicated", value="x", effect="NoSchedule")],
    )
    assert (await run(child.label_node, label)).found
    assert (await run(child.label_node, label)).found
    labelled = next(n for n in await nodes() if n.name == node)
    assert labelled.labels["colony.dev/node-pool"] == "gpu"
    assert [t.key for t in labelled.taints].count("dedicated") == 1

    cordon = CordonNodeRequest(kubeconfig=ref, node_name=node)
    first, second = await run(child.cordon_node, cordon), await run(child.cordon_node, cordon)
    assert (first.was_cordoned, second.was_cordoned) == (False, True)
    assert (
        await run(child.uncordon_node, UncordonNodeRequest(kubeconfig=ref, node_name=node))
    ).found

    # Pods: an eviction empties the node once; a second is GONE; a budget blocks.
    admin = await child_api(mgmt, name)
    core = client.CoreV1Api(admin)
    for pod_name in ("free", "guarded"):
        await call(
            core.create_namespaced_pod,
            "default",
            {
                "metadata": {"name": pod_name, "labels": {"app": pod_name}},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
            },
        )
    await call(
        client.PolicyV1Api(admin).create_namespaced_pod_disruption_budget,
        "default",
        {
            "metadata": {"name": "guard"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )
    pods = await run(child.list_pods_on_node, ListPodsOnNodeRequest(kubeconfig=ref, node_name=node))
    by_name = {p.name: p for p in pods.pods}
    assert {"free", "guarded"} <= set(by_name)

    evict = EvictPodRequest(
        kubeconfig=ref, namespace="default", name="free", uid=by_name["free"].uid
    )
    assert (await run(child.evict_pod, evict)).outcome is EvictionOutcome.EVICTED

    async def free_gone() -> bool:
        listed = await run(
            child.list_pods_on_node, ListPodsOnNodeRequest(kubeconfig=ref, node_name=node)
        )
        return all(p.name != "free" for p in listed.pods)

    await eventually(free_gone, what="evicted pod gone")
    assert (await run(child.evict_pod, evict)).outcome is EvictionOutcome.GONE
    blocked = await run(
        child.evict_pod, EvictPodRequest(kubeconfig=ref, namespace="default", name="guarded")
    )
    assert blocked.outcome is EvictionOutcome.BLOCKED_BY_BUDGET
    assert "disruption budget" in blocked.message

    delete_pod = DeletePodRequest(kubeconfig=ref, namespace="default", name="guarded")
    assert (await run(child.delete_pod, delete_pod)).existed
    await eventually(
        lambda: run(child.delete_pod, delete_pod), until=lambda r: not r.existed, what="pod gone"
    )

    # Node removal: machine removed by address (absent ones fine), Node deleted twice.
    remove = RemoveClusterMachinesRequest(
        namespace=NAMESPACE, name=name, addresses=[claimed.hosts[1].address, "198.51.100.250"]
    )
    removed = await run(management.remove_cluster_machines, remove)
    assert removed.machine_addresses == [claimed.hosts[0].address]
    delete_node = DeleteNodeRequest(kubeconfig=ref, node_name=listed[1].name)
    await run(child.delete_node, delete_node)
    assert not (await run(child.delete_node, delete_node)).existed
    close_client(admin)

    # Delete: idempotent; the kubeconfig Secret goes with the cluster.
    delete = DeleteClusterDeploymentRequest(namespace=NAMESPACE, name=name)
    assert (await run(management.delete_cluster_deployment, delete)).existed
    await eventually(status, until=lambda s: not s.exists, what="ClusterDeployment gone")
    assert not (await run(management.delete_cluster_deployment, delete)).existed
    await expect_error(
        run(child.list_nodes, ListNodesRequest(kubeconfig=ref)),
        ErrorType.NOT_FOUND,
        retryable=False,
        chained=False,
    )
    released = await run(
        hosts.release_hosts,
        ReleaseHostsRequest(host_ids=[h.id for h in claimed.hosts], owner=owner),
    )
    assert sorted(released.released) == sorted(h.id for h in claimed.hosts)


async def test_child_errors_are_classified(
    world: SimWorld, management: ManagementClusterActivities, child: ChildClusterActivities
) -> None:
    name = unique("cherr")
    await run(management.create_cluster_deployment, create_request(name))
    await eventually(
        lambda: run(
            management.get_cluster_deployment_status,
            GetClusterDeploymentStatusRequest(namespace=NAMESPACE, name=name),
        ),
        until=lambda s: s.ready,
        what="ready",
    )
    ref = KubeconfigRef(namespace=NAMESPACE, secret_name=f"{name}-kubeconfig")
    world.faults.fail_next(429, target=name, path="/eviction")
    await expect_error(
        run(child.evict_pod, EvictPodRequest(kubeconfig=ref, namespace="default", name="x")),
        "Throttled",
        retryable=True,
    )
    world.faults.fail_next(503, target=name, path="/api/v1/nodes")
    await expect_error(
        run(child.list_nodes, ListNodesRequest(kubeconfig=ref)), "ServerError", retryable=True
    )
    world.faults.fail_next(403, target=name, path="/api/v1/nodes")
    await expect_error(
        run(child.list_nodes, ListNodesRequest(kubeconfig=ref)),
        ErrorType.FORBIDDEN,
        retryable=False,
    )
    await run(
        management.delete_cluster_deployment,
        DeleteClusterDeploymentRequest(namespace=NAMESPACE, name=name),
    )


# --- host provider -----------------------------------------------------------------------------


async def test_claims_are_idempotent_and_releases_respect_the_owner(
    hosts: HostProviderActivities,
) -> None:
    owner = unique("owner")
    request = ClaimHostsRequest(
        location_id="hel1", sku=GPU, count=2, idempotency_key=unique("key"), owner=owner
    )
    first = await run(hosts.claim_hosts, request)
    again = await run(hosts.claim_hosts, request)
    assert [h.id for h in first.hosts] == [h.id for h in again.hosts]
    assert all(h.sku_id == "l40s-48gb" and h.location_id == "hel1" for h in first.hosts)
    assert first.hosts[0].ssh_user == "ubuntu"
    listed = await run(hosts.list_claimed_hosts, ListClaimedHostsRequest(owner=owner))
    assert sorted(h.id for h in listed.hosts) == sorted(h.id for h in first.hosts)

    ids = [h.id for h in first.hosts]
    foreign = await run(hosts.release_hosts, ReleaseHostsRequest(host_ids=ids, owner="other"))
    assert foreign.released == []
    released = await run(hosts.release_hosts, ReleaseHostsRequest(host_ids=ids, owner=owner))
    assert released.released == ids
    repeated = await run(
        hosts.release_hosts, ReleaseHostsRequest(host_ids=[*ids, "no-such-host"], owner=owner)
    )
    assert repeated.released == []
    assert repeated.already_released == [*ids, "no-such-host"]


@pytest.mark.parametrize(
    ("location", "sku", "count", "error_type"),
    [
        pytest.param("fra1", GPU, 99, ErrorType.HOSTS_UNAVAILABLE, id="too-few-free"),
        pytest.param("fra1", NodeSku(gpu_model_id="b200"), 1, ErrorType.UNKNOWN_SKU, id="sku"),
        pytest.param("mars1", GPU, 1, ErrorType.UNKNOWN_SKU, id="location"),
    ],
)
async def test_claim_refusals_are_permanent(
    hosts: HostProviderActivities, location: str, sku: NodeSku, count: int, error_type: str
) -> None:
    request = ClaimHostsRequest(
        location_id=location, sku=sku, count=count, idempotency_key=unique("k"), owner="o"
    )
    await expect_error(run(hosts.claim_hosts, request), error_type, retryable=False)


@pytest.mark.parametrize(
    ("code", "error_type", "retryable"),
    [
        pytest.param(429, "Throttled", True, id="429"),
        pytest.param(500, "ServerError", True, id="500"),
        pytest.param(503, "ServerError", True, id="503"),
        pytest.param(403, ErrorType.FORBIDDEN, False, id="403"),
    ],
)
async def test_host_provider_errors_are_classified(
    world: SimWorld, hosts: HostProviderActivities, code: int, error_type: str, retryable: bool
) -> None:
    world.faults.fail_next(code, target="hostprovider", path="/v1/hosts")
    await expect_error(
        run(hosts.list_claimed_hosts, ListClaimedHostsRequest(owner="o")),
        error_type,
        retryable=retryable,
    )


async def test_wrong_api_key_is_forbidden(world: SimWorld, tmp_path: Path) -> None:
    async with httpx.AsyncClient(
        base_url=world.hostprovider.url, headers={"Authorization": "Bearer wrong"}
    ) as http:
        error = await expect_error(
            run(
                HostProviderActivities(http).list_claimed_hosts, ListClaimedHostsRequest(owner="o")
            ),
            ErrorType.FORBIDDEN,
            retryable=False,
        )
    assert "wrong" not in str(error)


async def test_unreachable_host_provider_is_temporary() -> None:
    async with httpx.AsyncClient(base_url="http://127.0.0.1:9") as http:
        await expect_error(
            run(
                HostProviderActivities(http).list_claimed_hosts, ListClaimedHostsRequest(owner="o")
            ),
            "Unavailable",
            retryable=True,
        )
