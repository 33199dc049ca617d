"""Colony's activities against the simulated world: results, idempotency and error classification.

The sim runs in the test's event loop with instant timing; activities run inside
`ActivityEnvironment` (a real activity context, so heartbeats work) with the clients `worker.py`
would build from the sim's files.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.child_cluster import nodes as nodes_module
from activities.child_cluster.nodes import NodeActivities
from activities.host_provider import HostProviderActivities
from activities.management.cluster_deployments import ClusterDeploymentActivities
from models.activity_api import (
    AddClusterMachinesRequest,
    AwaitClusterDeploymentRequest,
    AwaitFreeHostsRequest,
    AwaitNodesRequest,
    CheckClusterPrerequisitesRequest,
    ClaimHostsRequest,
    CordonNodeRequest,
    CreateClusterDeploymentRequest,
    DeleteClusterDeploymentRequest,
    DeleteNodeRequest,
    DeploymentOutcome,
    DeploymentWait,
    DrainHeartbeat,
    DrainLedger,
    DrainNodeRequest,
    ExpectedNode,
    Host,
    KubeconfigRef,
    ListClaimedHostsRequest,
    ListNodesRequest,
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
    deployment_status,
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


@pytest.fixture(autouse=True)
def _nothing_pruned(world: SimWorld) -> Iterator[None]:
    """Every field the activities (and the sim's controllers) write into a custom resource is one
    its CRD defines: a real API server would silently drop any other (structural pruning)."""
    world.store.pruned_writes.clear()
    yield
    assert list(world.store.pruned_writes) == []


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
def management(mgmt: client.ApiClient) -> ClusterDeploymentActivities:
    return ClusterDeploymentActivities(mgmt)


@pytest.fixture
def child(mgmt: client.ApiClient) -> Iterator[NodeActivities]:
    activities = NodeActivities(mgmt)
    yield activities
    activities.close()


@pytest.fixture
def hosts(http: httpx.AsyncClient) -> HostProviderActivities:
    return HostProviderActivities(http)


async def run(fn: Any, request: Any) -> Any:
    """Run an activity in a real activity context (heartbeats, info)."""
    return await ActivityEnvironment().run(fn, request)


def soon(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def create_request(name: str, hosts: list[Host] | None = None) -> CreateClusterDeploymentRequest:
    return CreateClusterDeploymentRequest(
        namespace=NAMESPACE,
        name=name,
        template=DEFAULT_TEMPLATE,
        credential=DEFAULT_CREDENTIAL,
        workflow_id=f"cluster/{name}",
        owner=f"cluster/{name}/run-1",
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


async def test_prerequisites_report_facts(management: ClusterDeploymentActivities) -> None:
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
    management: ClusterDeploymentActivities,
) -> None:
    name = unique("idem")
    request = create_request(name)
    first = await run(management.create_cluster_deployment, request)
    again = await run(management.create_cluster_deployment, request)
    assert (first.created, again.created) == (True, False)
    foreign = request.model_copy(
        update={"workflow_id": "cluster/someone-else", "owner": "cluster/someone-else/run"}
    )
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
    management: ClusterDeploymentActivities,
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
    management: ClusterDeploymentActivities,
    child: NodeActivities,
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

    async def status() -> Any:
        return await deployment_status(management, name)

    # The control-plane wait returns on each change of conditions, then once Ready.
    known: list[Any] = []
    outcomes = []
    for _ in range(20):
        waited = await run(
            management.await_cluster_deployment,
            AwaitClusterDeploymentRequest(
                namespace=NAMESPACE,
                name=name,
                want=DeploymentWait.READY,
                deadline=soon(30),
                known_conditions=known,
            ),
        )
        outcomes.append(waited.outcome)
        known = waited.status.conditions
        if waited.outcome is not DeploymentOutcome.CHANGED:
            break
    # (With the sim's instant timing it may be Ready at the first look.)
    assert outcomes[-1] is DeploymentOutcome.READY, outcomes
    assert waited.status.machine_addresses == [claimed.hosts[0].address]

    # Machines: adding is idempotent by address, removing tolerates absent ones.
    add = AddClusterMachinesRequest(
        namespace=NAMESPACE, name=name, machines=[h.machine for h in claimed.hosts]
    )
    added = await run(management.add_cluster_machines, add)
    assert added.machine_addresses == [h.address for h in claimed.hosts]
    assert (await run(management.add_cluster_machines, add)).generation == added.generation

    ref = KubeconfigRef(namespace=NAMESPACE, secret_name=f"{name}-kubeconfig")

    # The join wait labels each node as it registers and returns once all are Ready.
    expected = [
        ExpectedNode(
            host_id=h.id,
            address=h.address,
            labels={"colony.dev/node-pool": "gpu", "colony.dev/host-id": h.id},
            taints=[NodeTaint(key="dedicated", value="x", effect="NoSchedule")],
        )
        for h in claimed.hosts
    ]
    joined = None
    for _ in range(20):
        joined = await run(
            child.await_nodes,
            AwaitNodesRequest(
                kubeconfig=ref,
                expected=expected,
                known=joined.observed if joined else [],
                deadline=soon(30),
            ),
        )
        if joined.all_ready:
            break
    assert joined is not None
    assert joined.all_ready, joined
    assert all(o.labelled and o.node_name for o in joined.observed)

    async def nodes(selector: str = "", count_pods: bool = False) -> Any:
        listed = await run(
            child.list_nodes,
            ListNodesRequest(kubeconfig=ref, label_selector=selector, count_pods=count_pods),
        )
        return listed.nodes

    listed = await nodes("colony.dev/node-pool=gpu")
    assert len(listed) == 2
    node = listed[0].name
    assert [t.key for t in listed[0].taints].count("dedicated") == 1

    cordon = CordonNodeRequest(kubeconfig=ref, node_name=node)
    first, second = await run(child.cordon_node, cordon), await run(child.cordon_node, cordon)
    assert (first.was_cordoned, second.was_cordoned) == (False, True)

    # Pods: the drain evicts what it may, a budget blocks the rest until the deadline.
    admin = await child_api(mgmt, name)
    core = client.CoreV1Api(admin)
    for pod_name in ("free", "guarded"):
        await call(
            core.create_namespaced_pod,
            "default",
            {
                "metadata": {"name": pod_name, "labels": {"app": pod_name}},
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "c", "image": "busybox"}],
                    "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                },
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
    counted = {n.name: n for n in await nodes("colony.dev/node-pool=gpu", count_pods=True)}
    assert counted[node].evictable_pod_count >= 2

    beats: list[Any] = []
    environment = ActivityEnvironment()
    environment.on_heartbeat = lambda *details: beats.extend(details)
    drained = await environment.run(
        child.drain_node, DrainNodeRequest(kubeconfig=ref, node_name=node, deadline=soon(3))
    )
    assert not drained.drained
    assert drained.progress.pods_evicted >= 1
    assert [b.split(":")[0] for b in drained.progress.blocking_pods] == ["default/guarded"]
    assert "disruption budget" in drained.progress.blocking_pods[0]
    assert any(getattr(b, "blocking_pods", None) for b in beats), "progress was heartbeated"

    forced = await run(
        child.drain_node,
        DrainNodeRequest(kubeconfig=ref, node_name=node, deadline=soon(0), force=True),
    )
    assert forced.drained
    assert forced.progress.pods_deleted == ["default/guarded"]
    assert (
        await run(child.uncordon_node, UncordonNodeRequest(kubeconfig=ref, node_name=node))
    ).found

    # Node removal: machine removed by address (absent ones fine), Node deleted and waited for.
    remove = RemoveClusterMachinesRequest(
        namespace=NAMESPACE, name=name, addresses=[claimed.hosts[1].address, "198.51.100.250"]
    )
    removed = await run(management.remove_cluster_machines, remove)
    assert removed.machine_addresses == [claimed.hosts[0].address]
    delete_node = DeleteNodeRequest(kubeconfig=ref, node_name=listed[1].name, wait_until=soon(20))
    deleted = await run(child.delete_node, delete_node)
    assert deleted.gone
    assert not (await run(child.delete_node, delete_node)).existed
    close_client(admin)

    # Delete: only with the owner key; idempotent; the kubeconfig Secret goes with the cluster.
    foreign = DeleteClusterDeploymentRequest(namespace=NAMESPACE, name=name, owner="someone-else")
    assert (await run(management.delete_cluster_deployment, foreign)).foreign
    assert (await status()).exists
    delete = DeleteClusterDeploymentRequest(
        namespace=NAMESPACE, name=name, owner=f"cluster/{name}/run-1"
    )
    assert (await run(management.delete_cluster_deployment, delete)).existed
    gone = await run(
        management.await_cluster_deployment,
        AwaitClusterDeploymentRequest(
            namespace=NAMESPACE, name=name, want=DeploymentWait.GONE, deadline=soon(30)
        ),
    )
    while gone.outcome is DeploymentOutcome.CHANGED:
        gone = await run(
            management.await_cluster_deployment,
            AwaitClusterDeploymentRequest(
                namespace=NAMESPACE,
                name=name,
                want=DeploymentWait.GONE,
                deadline=soon(30),
                known_conditions=gone.status.conditions,
            ),
        )
    assert gone.outcome is DeploymentOutcome.GONE
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


async def test_a_resumed_drain_counts_the_evictions_made_after_the_last_heartbeat(
    world: SimWorld,
    mgmt: client.ApiClient,
    management: ClusterDeploymentActivities,
    child: NodeActivities,
    hosts: HostProviderActivities,
) -> None:
    """A drain retried after a crash: the heartbeat it resumes from says it asked to evict a, b
    and c and saw a's accepted, but b's was accepted too (after that heartbeat) and c's never
    sent. The new attempt counts b (gone or terminating), evicts c and d, and reports four: the
    evictions the cluster saw, not the three the lost heartbeat would make of it."""
    name = unique("resume")
    owner = f"cluster/{name}/run"
    claimed = await run(
        hosts.claim_hosts,
        ClaimHostsRequest(
            location_id="fra1", sku=GPU, count=1, idempotency_key=f"{owner}/k", owner=owner
        ),
    )
    await run(management.create_cluster_deployment, create_request(name, claimed.hosts))
    ref = KubeconfigRef(namespace=NAMESPACE, secret_name=f"{name}-kubeconfig")
    admin = await eventually(
        lambda: _child_with_a_ready_node(mgmt, name), what=f"{name}'s node Ready"
    )
    core = client.CoreV1Api(admin)
    try:
        node = (await call(core.list_node)).items[0].metadata.name
        uids = {}
        for pod_name in ("a", "b", "c", "d"):
            created = await call(
                core.create_namespaced_pod,
                "default",
                {
                    "metadata": {"name": pod_name},
                    "spec": {
                        "nodeName": node,
                        "containers": [{"name": "c", "image": "busybox"}],
                        "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                    },
                },
            )
            uids[pod_name] = created.metadata.uid
        await run(child.cordon_node, CordonNodeRequest(kubeconfig=ref, node_name=node))
        # What the crashed attempt did: a and b evicted, c about to be.
        for pod_name in ("a", "b"):
            await call(
                core.create_namespaced_pod_eviction,
                pod_name,
                "default",
                {"metadata": {"name": pod_name, "namespace": "default"}},
            )
        cluster_store = world.child(NAMESPACE, name)
        assert cluster_store is not None
        # (CoreDNS pods of the sim's child run on the node too: the drain evicts them as well.)
        last_heartbeat = DrainHeartbeat(
            pods_evicted=1,
            ledger=DrainLedger(requested=[uids["a"], uids["b"], uids["c"]], evicted=[uids["a"]]),
        )
        environment = ActivityEnvironment()
        environment.info = dataclasses.replace(
            environment.info, attempt=2, heartbeat_details=[last_heartbeat]
        )
        beats: list[Any] = []
        environment.on_heartbeat = lambda *details: beats.extend(details)
        drained = await environment.run(
            child.drain_node, DrainNodeRequest(kubeconfig=ref, node_name=node, deadline=soon(30))
        )
        assert drained.drained
        seen = [e for e in cluster_store.store.evictions if e.node == node]
        assert {"a", "b", "c", "d"} <= {e.name for e in seen}
        assert drained.progress.pods_evicted == len(seen), (drained.progress, seen)
        # The ledger went out before the evictions it records, and ends with every uid accepted.
        final = beats[-1]
        assert isinstance(final, DrainHeartbeat)
        assert set(final.ledger.evicted) == {e.uid for e in seen}
    finally:
        close_client(admin)
        await run(
            management.delete_cluster_deployment,
            DeleteClusterDeploymentRequest(namespace=NAMESPACE, name=name, owner=owner),
        )
        await run(
            hosts.release_hosts,
            ReleaseHostsRequest(host_ids=[h.id for h in claimed.hosts], owner=owner),
        )


async def test_a_drain_goes_on_when_its_pods_are_gone_not_at_its_next_look(
    world: SimWorld,
    mgmt: client.ApiClient,
    management: ClusterDeploymentActivities,
    child: NodeActivities,
    hosts: HostProviderActivities,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After its evictions, a drain waits for the evicted pods on a watch of the node's pods: it
    returns once they are deleted, however long its next look would have been (ten minutes here;
    a plain pause slept them)."""
    monkeypatch.setattr(nodes_module, "EVICTION_RETRY_FIRST", 600.0)
    name = unique("gone")
    owner = f"cluster/{name}/run"
    claimed = await run(
        hosts.claim_hosts,
        ClaimHostsRequest(
            location_id="fra1", sku=GPU, count=1, idempotency_key=f"{owner}/k", owner=owner
        ),
    )
    await run(management.create_cluster_deployment, create_request(name, claimed.hosts))
    ref = KubeconfigRef(namespace=NAMESPACE, secret_name=f"{name}-kubeconfig")
    admin = await eventually(
        lambda: _child_with_a_ready_node(mgmt, name), what=f"{name}'s node Ready"
    )
    core = client.CoreV1Api(admin)
    try:
        node = (await call(core.list_node)).items[0].metadata.name
        for pod_name in ("a", "b", "c"):
            await call(
                core.create_namespaced_pod,
                "default",
                {
                    "metadata": {"name": pod_name},
                    "spec": {
                        "nodeName": node,
                        "containers": [{"name": "c", "image": "busybox"}],
                        "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                    },
                },
            )
        await run(child.cordon_node, CordonNodeRequest(kubeconfig=ref, node_name=node))
        async with asyncio.timeout(120):
            drained = await run(
                child.drain_node,
                DrainNodeRequest(kubeconfig=ref, node_name=node, deadline=soon(1200)),
            )
        assert drained.drained
        assert drained.progress.pods_evicted >= 3
    finally:
        close_client(admin)
        await run(
            management.delete_cluster_deployment,
            DeleteClusterDeploymentRequest(namespace=NAMESPACE, name=name, owner=owner),
        )
        await run(
            hosts.release_hosts,
            ReleaseHostsRequest(host_ids=[h.id for h in claimed.hosts], owner=owner),
        )


async def _child_with_a_ready_node(mgmt: client.ApiClient, name: str) -> client.ApiClient | None:
    try:
        admin = await child_api(mgmt, name)
    except client.exceptions.ApiException:
        return None
    nodes = await call(client.CoreV1Api(admin).list_node)
    if any(
        c.type == "Ready" and c.status == "True"
        for n in nodes.items
        for c in n.status.conditions or []
    ):
        return admin
    close_client(admin)
    return None


async def test_a_failed_cluster_deployment_is_reported_at_once(
    world: SimWorld, management: ClusterDeploymentActivities
) -> None:
    name = unique("fails")
    world.faults.fail_cluster_deployment(NAMESPACE, name, "machine 10.0.0.9: ssh: handshake failed")
    await run(management.create_cluster_deployment, create_request(name))
    waited = await run(
        management.await_cluster_deployment,
        AwaitClusterDeploymentRequest(
            namespace=NAMESPACE, name=name, want=DeploymentWait.READY, deadline=soon(60)
        ),
    )
    while waited.outcome is DeploymentOutcome.CHANGED:
        waited = await run(
            management.await_cluster_deployment,
            AwaitClusterDeploymentRequest(
                namespace=NAMESPACE,
                name=name,
                want=DeploymentWait.READY,
                deadline=soon(60),
                known_conditions=waited.status.conditions,
            ),
        )
    assert waited.outcome is DeploymentOutcome.FAILED
    ready = next(c for c in waited.status.conditions if c.type == "Ready")
    assert (ready.reason, ready.message) == ("Failed", "machine 10.0.0.9: ssh: handshake failed")
    world.faults.clear()
    await run(
        management.delete_cluster_deployment,
        DeleteClusterDeploymentRequest(namespace=NAMESPACE, name=name),
    )


async def test_a_cancelled_wait_stops_within_a_heartbeat(
    world: SimWorld, management: ClusterDeploymentActivities
) -> None:
    environment = ActivityEnvironment()
    waiting = asyncio.ensure_future(
        environment.run(
            management.await_cluster_deployment,
            AwaitClusterDeploymentRequest(
                namespace=NAMESPACE,
                name=unique("never"),
                want=DeploymentWait.GONE,
                deadline=soon(600),
                known_conditions=[],
            ),
        )
    )
    # A ClusterDeployment that does not exist is GONE at once: wait for one that never readies.
    result = await waiting
    assert result.outcome is DeploymentOutcome.GONE

    name = unique("hang")
    await run(management.create_cluster_deployment, create_request(name))
    world.faults.fail_cluster_deployment(NAMESPACE, name, "stuck")
    known = (await deployment_status(management, name)).conditions
    environment = ActivityEnvironment()
    waiting = asyncio.ensure_future(
        environment.run(
            management.await_cluster_deployment,
            AwaitClusterDeploymentRequest(
                namespace=NAMESPACE,
                name=name,
                want=DeploymentWait.GONE,
                deadline=soon(600),
                known_conditions=known,
            ),
        )
    )
    await asyncio.sleep(1.5)
    started = asyncio.get_running_loop().time()
    environment.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert asyncio.get_running_loop().time() - started < 2
    world.faults.clear()
    await run(
        management.delete_cluster_deployment,
        DeleteClusterDeploymentRequest(namespace=NAMESPACE, name=name),
    )


async def test_free_hosts_wait_reports_the_count(hosts: HostProviderActivities) -> None:
    enough = await run(
        hosts.await_free_hosts,
        AwaitFreeHostsRequest(location_id="fra1", sku=GPU, count=1, deadline=soon(5)),
    )
    assert enough.enough
    assert enough.free >= 1
    short = await run(
        hosts.await_free_hosts,
        AwaitFreeHostsRequest(location_id="fra1", sku=GPU, count=10_000, deadline=soon(0)),
    )
    assert not short.enough
    assert short.free == enough.free


async def test_child_errors_are_classified(
    world: SimWorld, management: ClusterDeploymentActivities, child: NodeActivities
) -> None:
    name = unique("cherr")
    await run(management.create_cluster_deployment, create_request(name))
    await eventually(
        lambda: deployment_status(management, name),
        until=lambda s: s.ready,
        what="ready",
    )
    ref = KubeconfigRef(namespace=NAMESPACE, secret_name=f"{name}-kubeconfig")
    # (urllib3 itself retries a GET answered 429 with Retry-After; a PATCH reaches us.)
    world.faults.fail_next(429, target=name, path="/api/v1/nodes", method="PATCH")
    await expect_error(
        run(child.uncordon_node, UncordonNodeRequest(kubeconfig=ref, node_name="any")),
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
