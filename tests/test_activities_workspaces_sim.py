"""The workspace side's activities against the simulated world: ServiceSets, values Secrets, the
tenant gateway's routes and the child-cluster reads, with idempotency and error classification.

One world (instant timing) serves the module, with what the worker sets up at start (Colony's CRDs
and its shipped catalog, published through `publish_workspace_class` from `worker.catalog_seed`),
a sealing key pair of the test's own, and one ready child cluster on a claimed GPU host whose
ClusterDeployment carries `colony.dev/tenant-gateway-domain` (so its child has the tenant gateway).
Activities run inside `ActivityEnvironment` (a real activity context: heartbeats are recorded)
with the clients `worker.py` would build from the sim's files; every test names its own objects.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from kubernetes import client
from pydantic import BaseModel
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

import activities.management.service_sets
from activities.child_cluster.clients import ChildClients
from activities.child_cluster.namespaces import NamespaceActivities
from activities.child_cluster.nodes import NodeActivities
from activities.child_cluster.routes import RouteActivities
from activities.host_provider import HostProviderActivities
from activities.management.classes import WorkspaceClassActivities
from activities.management.cluster_deployments import ClusterDeploymentActivities
from activities.management.service_sets import ServiceSetActivities
from activities.watch import ObjectWatch
from infra.crds import ensure_crds
from infra.kube import MERGE_PATCH
from infra.sealing import Unsealer, workspace_scope
from models.activity_api import (
    AwaitClusterDeploymentRequest,
    ClaimHostsRequest,
    CreateClusterDeploymentRequest,
    DeleteClusterDeploymentRequest,
    DeploymentOutcome,
    DeploymentWait,
    KubeconfigRef,
    ReleaseHostsRequest,
)
from models.cluster import DEFAULT_CREDENTIAL, DEFAULT_TEMPLATE, POD_CIDR, SERVICE_CIDR
from models.colony import WriteColonyKubeconfigsRequest
from models.errors import ErrorType
from models.node_pool import NodeSku
from models.ownership import OWNER_WORKFLOW_ANNOTATION, Owner
from models.workspace_api import (
    WORKSPACE_LABEL,
    ApplyRoutesRequest,
    ApplyServiceSetRequest,
    AwaitRoutesRequest,
    AwaitServiceSetRequest,
    AwaitServiceSetResult,
    CheckServiceTemplateRequest,
    DeleteNamespaceRequest,
    DeleteRoutesRequest,
    DeleteServiceSetRequest,
    DeleteValuesSecretRequest,
    EnsureNamespaceRequest,
    FindServiceSetsRequest,
    FindTenantGatewayRequest,
    GetWorkspaceClassRequest,
    ListWorkspaceClassesRequest,
    PublishWorkspaceClassResult,
    ReadGpuInventoryRequest,
    RouteSpec,
    ServiceSetOutcome,
    ServiceSetService,
    WriteValuesSecretRequest,
)
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
from worker import catalog_seed

pytestmark = pytest.mark.slow

GPU = NodeSku(gpu_model_id="l40s-48gb")
DOMAIN = "wsact.example"
JUPYTER = "colony-jupyter-1-0-0"
"""A catalog ServiceTemplate: chart colony-jupyter, one Deployment and a Service per port."""
PASSWORD = "correct horse battery staple"
K0RDENT = ("k0rdent.mirantis.com", "v1beta1")


@dataclass
class Cluster:
    """The module's ready child cluster."""

    name: str
    kubeconfig: KubeconfigRef
    admin: client.ApiClient
    """An admin client of the child (the test looks at what the activities made)."""


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


@pytest.fixture(scope="module")
def unsealer() -> Unsealer:
    return Unsealer(X25519PrivateKey.generate())


@dataclass(frozen=True)
class WorkspaceSide:
    """The activities of the workspace side, by the system and objects they talk to."""

    classes: WorkspaceClassActivities
    service_sets: ServiceSetActivities
    nodes: NodeActivities
    namespaces: NamespaceActivities
    routes: RouteActivities


@pytest.fixture(scope="module")
def workspaces(mgmt: client.ApiClient, unsealer: Unsealer) -> Iterator[WorkspaceSide]:
    clients = ChildClients()
    yield WorkspaceSide(
        WorkspaceClassActivities(mgmt),
        ServiceSetActivities(mgmt, unsealer),
        NodeActivities(mgmt, clients),
        NamespaceActivities(mgmt, clients),
        RouteActivities(mgmt, clients),
    )
    clients.close()


@pytest.fixture(scope="module")
async def catalog(
    mgmt: client.ApiClient, workspaces: WorkspaceSide
) -> list[PublishWorkspaceClassResult]:
    """The shipped catalog, published as the catalog workflow publishes it at the worker's start."""
    await ensure_crds(mgmt)
    return [await run(workspaces.classes.publish_workspace_class, r) for r in catalog_seed().seed]


@pytest.fixture(scope="module")
async def cluster(
    world: SimWorld, mgmt: client.ApiClient, catalog: list[PublishWorkspaceClassResult]
) -> AsyncIterator[Cluster]:
    name = unique("wsact")
    owner = f"cluster/{name}/run"
    management = ClusterDeploymentActivities(mgmt)
    async with host_provider(world) as http:
        hosts = HostProviderActivities(http)
        claimed = await run(
            hosts.claim_hosts,
            ClaimHostsRequest(
                location_id="fra1", sku=GPU, count=1, idempotency_key=f"{owner}/k", owner=owner
            ),
        )
        await run(
            management.create_cluster_deployment,
            CreateClusterDeploymentRequest(
                namespace=NAMESPACE,
                name=name,
                template=DEFAULT_TEMPLATE,
                credential=DEFAULT_CREDENTIAL,
                workflow_id=f"cluster/{name}",
                owner=owner,
                kubernetes_version="v1.37.1",
                pod_cidr=POD_CIDR,
                service_cidr=SERVICE_CIDR,
                machines=[h.machine for h in claimed.hosts],
                tenant_gateway_domain=DOMAIN,
            ),
        )
        await eventually(
            lambda: deployment_status(management, name),
            until=lambda s: s.ready,
            what=f"ClusterDeployment {name} ready",
        )
        admin = await child_api(mgmt, name)
        core = client.CoreV1Api(admin)
        await eventually(
            lambda: call(core.list_node),
            until=lambda nodes: any(
                c.type == "Ready" and c.status == "True"
                for n in nodes.items
                for c in n.status.conditions or []
            ),
            what="the claimed host's node Ready",
        )
        try:
            ref = KubeconfigRef(namespace=NAMESPACE, secret_name=f"{name}-kubeconfig")
            yield Cluster(name, ref, admin)
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


# --- helpers -------------------------------------------------------------------------------------


async def run(fn: Any, request: Any, beats: list[Any] | None = None) -> Any:
    """Run an activity in a real activity context; its heartbeats' details go to `beats`."""
    environment = ActivityEnvironment()
    if beats is not None:
        environment.on_heartbeat = lambda *details: beats.extend(details)
    return await environment.run(fn, request)


def soon(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


async def expect_error(call_: Any, error_type: str, *, retryable: bool) -> ApplicationError:
    with pytest.raises(ApplicationError) as caught:
        await call_
    assert caught.value.type == error_type, caught.value
    assert caught.value.non_retryable is (not retryable)
    return caught.value


def service_set(
    cluster: Cluster, template: str = JUPYTER, values_from_secret: str = "", **values: Any
) -> ApplyServiceSetRequest:
    """A workspace's ServiceSet as the workspace workflow writes it: one release in `ws-<name>`."""
    name = unique("ws")
    return ApplyServiceSetRequest(
        namespace=NAMESPACE,
        name=f"{cluster.name}-{name}",
        cluster_deployment=cluster.name,
        services=[
            ServiceSetService(
                name=name,
                namespace=f"ws-{name}",
                template=template,
                values=values,
                values_from_secret=values_from_secret,
            )
        ],
        owner=Owner(workflow_id=f"workspace/{name}"),
        labels={WORKSPACE_LABEL: name},
    )


def waiting(
    request: ApplyServiceSetRequest, generation: int, seconds: float = 30
) -> AwaitServiceSetRequest:
    return AwaitServiceSetRequest(
        namespace=request.namespace,
        name=request.name,
        service=request.services[0].name,
        owner=request.owner,
        deadline=soon(seconds),
        generation=generation,
    )


async def settle(
    workspaces: WorkspaceSide, request: AwaitServiceSetRequest, beats: list[Any] | None = None
) -> AwaitServiceSetResult:
    """Wait again after each change of state, as the workspace workflow does, until an answer."""
    seen: AwaitServiceSetResult = await run(
        workspaces.service_sets.await_service_set, request, beats
    )
    while seen.outcome is ServiceSetOutcome.CHANGED:
        request = request.model_copy(update={"known_state": seen.state})
        seen = await run(workspaces.service_sets.await_service_set, request, beats)
    return seen


async def delete(workspaces: WorkspaceSide, request: ApplyServiceSetRequest) -> None:
    gone = await run(
        workspaces.service_sets.delete_service_set,
        DeleteServiceSetRequest(
            namespace=request.namespace, name=request.name, owner=request.owner, wait_until=soon(30)
        ),
    )
    assert gone.gone


async def read_service_set(mgmt: client.ApiClient, name: str) -> dict[str, Any]:
    custom = client.CustomObjectsApi(mgmt)
    obj: dict[str, Any] = await call(
        custom.get_namespaced_custom_object, *K0RDENT, NAMESPACE, "servicesets", name
    )
    return obj


async def deployment(cluster: Cluster, namespace: str, name: str) -> Any:
    try:
        return await call(
            client.AppsV1Api(cluster.admin).read_namespaced_deployment, name, namespace
        )
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


async def namespaces(cluster: Cluster) -> set[str]:
    listed = await call(client.CoreV1Api(cluster.admin).list_namespace)
    return {n.metadata.name for n in listed.items}


def serialized(*models: Any) -> str:
    """Everything the models would put into workflow history or a heartbeat, as JSON."""
    return "\n".join(
        m.model_dump_json() if isinstance(m, BaseModel) else json.dumps(m, default=str)
        for m in models
    )


# --- catalog -------------------------------------------------------------------------------------


async def test_the_catalog_publishes_once_and_reads_back(
    workspaces: WorkspaceSide, catalog: list[PublishWorkspaceClassResult]
) -> None:
    seed = catalog_seed().seed
    assert [r.created for r in catalog] == [True] * len(seed)
    assert any(f"ServiceTemplate/{JUPYTER}" in r.objects_created for r in catalog)
    again = await run(workspaces.classes.publish_workspace_class, seed[0])
    assert (again.created, again.objects_created) == (False, [])
    listed = await run(workspaces.classes.list_workspace_classes, ListWorkspaceClassesRequest())
    assert {c.name for c in listed.classes} >= {r.spec.name for r in seed}
    assert listed.unreadable == []
    got = await run(workspaces.classes.get_workspace_class, GetWorkspaceClassRequest(name=JUPYTER))
    assert got.found
    assert got.spec is not None
    assert got.spec.service_template.name == JUPYTER
    template = await run(
        workspaces.classes.check_service_template,
        CheckServiceTemplateRequest(namespace=NAMESPACE, name=JUPYTER),
    )
    assert (template.found, template.valid) == (True, True)
    missing = await run(
        workspaces.classes.check_service_template,
        CheckServiceTemplateRequest(namespace=NAMESPACE, name="no-such-template"),
    )
    assert not missing.found


# --- ServiceSets ---------------------------------------------------------------------------------


async def test_apply_is_idempotent_and_a_change_bumps_the_generation(
    mgmt: client.ApiClient, workspaces: WorkspaceSide, cluster: Cluster
) -> None:
    request = service_set(cluster, replicas=1)
    release, target = request.services[0].name, request.services[0].namespace
    first = await run(workspaces.service_sets.apply_service_set, request)
    again = await run(workspaces.service_sets.apply_service_set, request)
    assert (first.created, again.created) == (True, False)
    assert again.generation == first.generation

    stored = await read_service_set(mgmt, request.name)
    assert stored["spec"]["cluster"] == cluster.name
    assert stored["metadata"]["labels"] == {**request.labels, **request.owner.labels()}
    assert stored["metadata"]["annotations"][OWNER_WORKFLOW_ANNOTATION] == request.owner.workflow_id

    deployed = await settle(workspaces, waiting(request, first.generation))
    assert deployed.outcome is ServiceSetOutcome.DEPLOYED, deployed
    assert deployed.state == "Deployed"
    assert deployed.status is not None
    assert deployed.status.deployed
    # The sim made the release in the child: its namespace, its Deployment, a running pod.
    assert target in await namespaces(cluster)
    made = await deployment(cluster, target, release)
    assert made is not None
    assert made.spec.replicas == 1
    core = client.CoreV1Api(cluster.admin)
    await eventually(
        lambda: call(core.list_namespaced_pod, target),
        until=lambda pods: [p.status.phase for p in pods.items] == ["Running"],
        what=f"the pod of release {release} running",
    )
    found = await run(
        workspaces.service_sets.find_service_sets,
        FindServiceSetsRequest(
            namespace=NAMESPACE, cluster_deployment=cluster.name, template=JUPYTER
        ),
    )
    assert [(f.name, f.service, f.state) for f in found.found if f.name == request.name] == [
        (request.name, release, "Deployed")
    ]

    changed = request.model_copy(
        update={"services": [request.services[0].model_copy(update={"values": {"replicas": 2}})]}
    )
    updated = await run(workspaces.service_sets.apply_service_set, changed)
    assert not updated.created
    assert updated.generation == first.generation + 1
    redeployed = await settle(workspaces, waiting(changed, updated.generation))
    assert redeployed.outcome is ServiceSetOutcome.DEPLOYED, redeployed
    # Deployed for the generation written: the upgrade is done by the time it is answered.
    assert (await deployment(cluster, target, release)).spec.replicas == 2
    await delete(workspaces, request)


async def test_a_status_of_an_earlier_generation_is_no_answer(
    workspaces: WorkspaceSide, cluster: Cluster, mgmt: client.ApiClient
) -> None:
    request = service_set(cluster)
    applied = await run(workspaces.service_sets.apply_service_set, request)
    assert (await settle(workspaces, waiting(request, applied.generation))).outcome is (
        ServiceSetOutcome.DEPLOYED
    )
    # The generation is known from what k0rdent's CRD defines only: the conditions carry it, the
    # status itself has no observedGeneration (a real API server would prune one).
    status = (await read_service_set(mgmt, request.name))["status"]
    assert "observedGeneration" not in status
    assert {c["observedGeneration"] for c in status["conditions"]} == {applied.generation}
    # Asked for a generation the status has not observed (an update the controller has not
    # reconciled yet), the Deployed it shows is the previous install's: the wait runs out. (The
    # sim reconciles a written generation at once, so the window is made deterministic by asking
    # for the next generation rather than by racing an update.)
    beats: list[Any] = []
    stale = await run(
        workspaces.service_sets.await_service_set,
        waiting(request, applied.generation + 1, seconds=1.5),
        beats,
    )
    assert stale.outcome is ServiceSetOutcome.DEADLINE, stale
    assert stale.state == ""
    assert stale.status is not None
    assert [s.state for s in stale.status.services] == ["Deployed"], "it saw the stale status"
    assert beats, "the wait heartbeated what it saw"
    await delete(workspaces, request)


@pytest.mark.parametrize(
    ("template", "values", "injected", "message"),
    [
        pytest.param(
            "no-such-template-1-0-0",
            {},
            None,
            f"ServiceTemplate {NAMESPACE}/no-such-template-1-0-0 not found",
            id="missing-template",
        ),
        pytest.param(
            JUPYTER,
            {"replicas": "many"},
            None,
            "Helm install failed: replicas and GPU counts must be integers",
            id="chart-fails",
        ),
        pytest.param(
            JUPYTER,
            {},
            "sveltos: agent unreachable",
            "sveltos: agent unreachable",
            id="injected",
        ),
    ],
)
async def test_a_failed_service_is_answered_with_its_message(
    world: SimWorld,
    workspaces: WorkspaceSide,
    cluster: Cluster,
    template: str,
    values: dict[str, Any],
    injected: str | None,
    message: str,
) -> None:
    request = service_set(cluster, template, **values)
    if injected is not None:
        world.faults.fail_service_set(NAMESPACE, request.name, injected)
    applied = await run(workspaces.service_sets.apply_service_set, request)
    failed = await settle(workspaces, waiting(request, applied.generation))
    assert failed.outcome is ServiceSetOutcome.FAILED, failed
    assert failed.state == "Failed"
    assert failed.message.startswith(message), failed.message
    await delete(workspaces, request)


async def test_delete_waits_until_gone_and_is_idempotent(
    mgmt: client.ApiClient, workspaces: WorkspaceSide, cluster: Cluster
) -> None:
    request = service_set(cluster)
    release, target = request.services[0].name, request.services[0].namespace
    applied = await run(workspaces.service_sets.apply_service_set, request)
    assert (await settle(workspaces, waiting(request, applied.generation))).outcome is (
        ServiceSetOutcome.DEPLOYED
    )
    delete_request = DeleteServiceSetRequest(
        namespace=NAMESPACE, name=request.name, owner=request.owner, wait_until=soon(30)
    )
    deleted = await run(workspaces.service_sets.delete_service_set, delete_request)
    assert (deleted.existed, deleted.gone) == (True, True)
    # Gone only after k0rdent uninstalled the release (its finalizer).
    assert await deployment(cluster, target, release) is None
    await eventually(
        lambda: namespaces(cluster),
        until=lambda names: target not in names,
        what=f"namespace {target} the release created removed",
    )
    again = await run(workspaces.service_sets.delete_service_set, delete_request)
    assert (again.existed, again.gone) == (False, True)
    unwaited = await run(
        workspaces.service_sets.delete_service_set,
        DeleteServiceSetRequest(namespace=NAMESPACE, name=request.name, owner=request.owner),
    )
    assert not unwaited.existed
    gone = await run(
        workspaces.service_sets.await_service_set, waiting(request, applied.generation)
    )
    assert gone.outcome is ServiceSetOutcome.GONE


async def test_a_deleted_service_set_is_seen_gone_at_its_event_not_at_the_next_poll(
    mgmt: client.ApiClient,
    workspaces: WorkspaceSide,
    cluster: Cluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The wait for a ServiceSet's removal is a watch: with the poll slowed to two minutes, a
    ServiceSet held by a finalizer is seen gone as soon as the finalizer goes."""
    monkeypatch.setattr(activities.management.service_sets, "POLL_FIRST", 120.0)
    request = service_set(cluster)
    applied = await run(workspaces.service_sets.apply_service_set, request)
    assert (await settle(workspaces, waiting(request, applied.generation))).outcome is (
        ServiceSetOutcome.DEPLOYED
    )
    custom = client.CustomObjectsApi(mgmt)
    hold = "test.colony.dev/hold"

    async def read() -> dict[str, Any]:
        found: dict[str, Any] = await call(
            custom.get_namespaced_custom_object, *K0RDENT, NAMESPACE, "servicesets", request.name
        )
        return found

    held = await read()
    await call(
        custom.patch_namespaced_custom_object,
        *K0RDENT, NAMESPACE, "servicesets", request.name,
        {"metadata": {"finalizers": [*held["metadata"]["finalizers"], hold]}},
        _content_type=MERGE_PATCH,
    )  # fmt: skip
    waiting_for = asyncio.create_task(
        run(
            workspaces.service_sets.delete_service_set,
            DeleteServiceSetRequest(
                namespace=NAMESPACE, name=request.name, owner=request.owner, wait_until=soon(300)
            ),
        )
    )
    # k0rdent uninstalls and lets go of it; only the test's finalizer holds it now.
    lingering = await eventually(
        read, until=lambda o: o["metadata"].get("finalizers") == [hold], what="uninstalled"
    )
    assert lingering["metadata"]["deletionTimestamp"]
    assert not waiting_for.done()
    await call(
        custom.patch_namespaced_custom_object,
        *K0RDENT, NAMESPACE, "servicesets", request.name,
        {"metadata": {"finalizers": []}},
        _content_type=MERGE_PATCH,
    )  # fmt: skip
    gone = await asyncio.wait_for(waiting_for, timeout=30)
    assert (gone.existed, gone.gone) == (True, True)


async def test_a_watch_that_cannot_be_made_leaves_the_pause_to_a_poll(
    mgmt: client.ApiClient,
) -> None:
    """The fallback: an API server that does not answer makes the pause a sleep (no error), so
    the next look reads the object again."""
    unreachable = client.ApiClient(client.Configuration(host="https://127.0.0.1:9"))
    try:
        async with ObjectWatch(unreachable, "/api/v1/namespaces", "nowhere") as watch:
            changed = await watch.changed({"metadata": {"resourceVersion": "7"}}, 0.2)
    finally:
        close_client(unreachable)
    assert changed is False


# --- values Secrets ------------------------------------------------------------------------------


async def test_values_secret_holds_unsealed_values_and_nothing_else_does(
    mgmt: client.ApiClient, workspaces: WorkspaceSide, unsealer: Unsealer, cluster: Cluster
) -> None:
    secret_name = unique("values")
    request = service_set(cluster, values_from_secret=secret_name)
    workspace = request.labels[WORKSPACE_LABEL]

    def sealed(values: dict[str, str]) -> WriteValuesSecretRequest:
        return WriteValuesSecretRequest(
            namespace=NAMESPACE,
            name=secret_name,
            workspace=workspace,
            secret_values={
                path: unsealer.sealer.seal(value, workspace_scope(workspace, path))
                for path, value in values.items()
            },
            owner=request.owner,
            labels={WORKSPACE_LABEL: workspace},
        )

    beats: list[Any] = []
    write = sealed({"notebookPassword": PASSWORD, "hub.token": "hf_" + PASSWORD})
    written = await run(workspaces.service_sets.write_values_secret, write, beats)
    assert written.keys == 2
    # A repeat (a retried attempt, new answers) replaces the Secret.
    rewritten = await run(
        workspaces.service_sets.write_values_secret, sealed({"notebookPassword": PASSWORD})
    )
    assert rewritten.keys == 1
    secret = await call(client.CoreV1Api(mgmt).read_namespaced_secret, secret_name, NAMESPACE)
    assert yaml.safe_load(base64.b64decode(secret.data["values"])) == {"notebookPassword": PASSWORD}
    assert secret.metadata.labels == {WORKSPACE_LABEL: workspace, **request.owner.labels()}

    # The ServiceSet names the Secret; k0rdent reads it at install time.
    applied = await run(workspaces.service_sets.apply_service_set, request, beats)
    deployed = await settle(workspaces, waiting(request, applied.generation), beats)
    assert deployed.outcome is ServiceSetOutcome.DEPLOYED, deployed
    stored = await read_service_set(mgmt, request.name)
    assert stored["spec"]["services"][0]["valuesFrom"] == [{"kind": "Secret", "name": secret_name}]

    everything = serialized(write, written, rewritten, applied, deployed, stored, *beats)
    assert PASSWORD not in everything
    assert beats, "heartbeats were recorded"

    await delete(workspaces, request)
    remove = DeleteValuesSecretRequest(namespace=NAMESPACE, name=secret_name, owner=request.owner)
    assert (await run(workspaces.service_sets.delete_values_secret, remove)).existed
    assert not (await run(workspaces.service_sets.delete_values_secret, remove)).existed


async def test_values_that_cannot_be_unsealed_are_refused_for_good(
    mgmt: client.ApiClient, workspaces: WorkspaceSide, unsealer: Unsealer
) -> None:
    name = unique("values")
    for_another_workspace = WriteValuesSecretRequest(
        namespace=NAMESPACE,
        name=name,
        workspace="mine",
        secret_values={
            "notebookPassword": unsealer.sealer.seal(
                PASSWORD, workspace_scope("someone-else", "notebookPassword")
            )
        },
        owner=Owner(workflow_id="workspace/mine"),
    )
    error = await expect_error(
        run(workspaces.service_sets.write_values_secret, for_another_workspace),
        ErrorType.INVALID_SPEC,
        retryable=False,
    )
    assert "cannot be used for workspace/mine/notebookPassword" in error.message
    other_key = Unsealer(X25519PrivateKey.generate()).sealer
    rotated = for_another_workspace.model_copy(
        update={
            "secret_values": {
                "notebookPassword": other_key.seal(
                    PASSWORD, workspace_scope("mine", "notebookPassword")
                )
            }
        }
    )
    error = await expect_error(
        run(workspaces.service_sets.write_values_secret, rotated),
        ErrorType.INVALID_SPEC,
        retryable=False,
    )
    assert "seal it again" in error.message
    assert PASSWORD not in error.message
    without_key = ServiceSetActivities(mgmt, None)
    await expect_error(
        run(without_key.write_values_secret, rotated), ErrorType.INVALID_SPEC, retryable=False
    )
    remove = DeleteValuesSecretRequest(
        namespace=NAMESPACE, name=name, owner=for_another_workspace.owner
    )
    assert not (await run(workspaces.service_sets.delete_values_secret, remove)).existed, (
        "nothing was written"
    )


# --- error classification ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "error_type", "retryable"),
    [
        pytest.param(403, ErrorType.FORBIDDEN, False, id="403-forbidden"),
        pytest.param(422, ErrorType.INVALID_SPEC, False, id="422-invalid"),
        pytest.param(429, "Throttled", True, id="429-throttled"),
        pytest.param(500, "ServerError", True, id="500"),
        pytest.param(503, "ServerError", True, id="503"),
    ],
)
async def test_service_set_create_errors_are_classified(
    world: SimWorld,
    workspaces: WorkspaceSide,
    cluster: Cluster,
    code: int,
    error_type: str,
    retryable: bool,
) -> None:
    request = service_set(cluster)
    world.faults.fail_next(code, target="management", path="/servicesets", method="POST")
    error = await expect_error(
        run(workspaces.service_sets.apply_service_set, request), error_type, retryable=retryable
    )
    assert error.message.startswith(f"create ServiceSet {NAMESPACE}/{request.name}: {code} ")
    assert error.__cause__ is not None, "the library error is chained"
    if code == 429:
        assert error.next_retry_delay is not None, "Retry-After is honoured"
    # Nothing was created: the next attempt creates it.
    assert (await run(workspaces.service_sets.apply_service_set, request)).created
    await delete(workspaces, request)


async def test_errors_of_every_verb_are_classified(
    world: SimWorld, workspaces: WorkspaceSide, unsealer: Unsealer, cluster: Cluster
) -> None:
    request = service_set(cluster)
    applied = await run(workspaces.service_sets.apply_service_set, request)
    faults = world.faults

    faults.fail_next(422, target="management", path=f"/servicesets/{request.name}", method="PATCH")
    changed = request.model_copy(
        update={"services": [request.services[0].model_copy(update={"values": {"replicas": 0}})]}
    )
    await expect_error(
        run(workspaces.service_sets.apply_service_set, changed),
        ErrorType.INVALID_SPEC,
        retryable=False,
    )
    faults.fail_next(500, target="management", path=f"/servicesets/{request.name}", method="GET")
    await expect_error(
        run(workspaces.service_sets.await_service_set, waiting(request, applied.generation)),
        "ServerError",
        retryable=True,
    )
    faults.fail_next(503, target="management", path=f"/servicesets/{request.name}", method="DELETE")
    await expect_error(
        run(
            workspaces.service_sets.delete_service_set,
            DeleteServiceSetRequest(namespace=NAMESPACE, name=request.name, owner=request.owner),
        ),
        "ServerError",
        retryable=True,
    )
    faults.fail_next(403, target="management", path="/secrets", method="POST")
    workspace = request.labels[WORKSPACE_LABEL]
    await expect_error(
        run(
            workspaces.service_sets.write_values_secret,
            WriteValuesSecretRequest(
                namespace=NAMESPACE,
                name=unique("values"),
                workspace=workspace,
                secret_values={
                    "p": unsealer.sealer.seal(PASSWORD, workspace_scope(workspace, "p"))
                },
                owner=request.owner,
            ),
        ),
        ErrorType.FORBIDDEN,
        retryable=False,
    )
    faults.fail_next(429, target=cluster.name, path="/namespaces", method="POST")
    await expect_error(
        run(
            workspaces.namespaces.ensure_namespace,
            EnsureNamespaceRequest(
                kubeconfig=cluster.kubeconfig, name=unique("ws"), owner=request.owner
            ),
        ),
        "Throttled",
        retryable=True,
    )
    faults.clear()
    await delete(workspaces, request)


# --- child cluster -------------------------------------------------------------------------------


async def test_routes_through_the_tenant_gateway(
    workspaces: WorkspaceSide, cluster: Cluster
) -> None:
    namespace = unique("ws")
    owner = Owner(workflow_id=f"workspace/{namespace}")
    ensure = EnsureNamespaceRequest(
        kubeconfig=cluster.kubeconfig,
        name=namespace,
        owner=owner,
        labels={WORKSPACE_LABEL: namespace},
    )
    assert (await run(workspaces.namespaces.ensure_namespace, ensure)).created
    assert not (await run(workspaces.namespaces.ensure_namespace, ensure)).created
    await call(
        client.CoreV1Api(cluster.admin).create_namespaced_service,
        namespace,
        {
            "metadata": {"name": "box"},
            "spec": {
                "selector": {"app": "box"},
                "ports": [{"name": "http", "port": 8888}, {"name": "ssh", "port": 22}],
            },
        },
    )
    find = FindTenantGatewayRequest(kubeconfig=cluster.kubeconfig, cluster_deployment=cluster.name)
    found = await eventually(
        lambda: run(workspaces.routes.find_tenant_gateway, find),
        until=lambda f: f.gateway is not None,
        what="the tenant gateway",
    )
    assert found.gateway is not None
    assert (found.gateway.domain, found.gateway.https) == (DOMAIN, True)
    # Attached by the ClusterDeployment's label, and which Gateway it is (its fingerprint).
    assert found.expected_domain == DOMAIN
    assert found.gateway_uid
    assert found.gateway_generation >= 1
    assert (
        found.fingerprint()
        == (await run(workspaces.routes.find_tenant_gateway, find)).fingerprint()
    )
    gateway = await call(
        client.CustomObjectsApi(cluster.admin).get_namespaced_custom_object,
        "gateway.networking.k8s.io", "v1", "colony-gateway", "gateways", "tenant",
    )  # fmt: skip
    listeners = {x["name"]: int(x["port"]) for x in gateway["spec"]["listeners"]}
    # The pool and the HTTPS port are the listeners' (the sim's are real local ports).
    assert found.gateway.tcp_ports == sorted(
        p for n, p in listeners.items() if n.startswith("tcp-")
    )
    assert len(found.gateway.tcp_ports) == 10
    assert found.gateway.http_port == listeners["https"]
    port = next(p for p in found.gateway.tcp_ports if p not in found.taken_ports)

    routes = [
        RouteSpec(
            name=f"{namespace}-http",
            kind="HTTPRoute",
            service="box",
            port=8888,
            hostname=f"{namespace}.{DOMAIN}",
            section_name="https",
        ),
        RouteSpec(
            name=f"{namespace}-ssh", kind="TCPRoute", service="box", port=22, listener_port=port
        ),
    ]
    apply = ApplyRoutesRequest(
        kubeconfig=cluster.kubeconfig,
        namespace=namespace,
        gateway_namespace=found.gateway_namespace,
        gateway_name=found.gateway_name,
        routes=routes,
        owner=owner,
        labels={WORKSPACE_LABEL: namespace},
    )
    assert (await run(workspaces.routes.apply_routes, apply)).created == [r.name for r in routes]
    again = await run(workspaces.routes.apply_routes, apply)
    assert (again.created, again.updated) == ([], [])
    # Ours, with another spec (the Gateway moved, the hostname changed): brought to the new one.
    moved = [routes[0].model_copy(update={"hostname": f"moved-{namespace}.{DOMAIN}"})]
    changed = await run(workspaces.routes.apply_routes, apply.model_copy(update={"routes": moved}))
    assert (changed.created, changed.updated) == ([], [routes[0].name])
    assert (await run(workspaces.routes.apply_routes, apply)).updated == [routes[0].name]
    accepted = await run(
        workspaces.routes.await_routes,
        AwaitRoutesRequest(
            kubeconfig=cluster.kubeconfig,
            namespace=namespace,
            routes=routes,
            owner=owner,
            deadline=soon(30),
        ),
    )
    assert accepted.all_accepted, accepted
    assert port in (await run(workspaces.routes.find_tenant_gateway, find)).taken_ports

    # A route to a Service that does not exist is not accepted, says why, and is not waited on:
    # the controller's answer for its spec is final until the Service appears.
    dangling = RouteSpec(
        name=f"{namespace}-nope",
        kind="HTTPRoute",
        service="nope",
        port=80,
        hostname=f"nope-{namespace}.{DOMAIN}",
        section_name="https",
    )
    await run(workspaces.routes.apply_routes, apply.model_copy(update={"routes": [dangling]}))
    refused = await run(
        workspaces.routes.await_routes,
        AwaitRoutesRequest(
            kubeconfig=cluster.kubeconfig,
            namespace=namespace,
            routes=[dangling],
            owner=owner,
            deadline=soon(300),
        ),
    )
    assert not refused.all_accepted
    (state,) = refused.routes
    assert (state.settled, state.reason) == (True, "BackendNotFound"), refused
    assert f"Service {namespace}/nope not found" in state.message

    remove = DeleteRoutesRequest(
        kubeconfig=cluster.kubeconfig, namespace=namespace, routes=[*routes, dangling], owner=owner
    )
    assert (await run(workspaces.routes.delete_routes, remove)).deleted == [
        *[r.name for r in routes],
        dangling.name,
    ]
    assert (await run(workspaces.routes.delete_routes, remove)).deleted == []
    assert port not in (await run(workspaces.routes.find_tenant_gateway, find)).taken_ports

    drop = DeleteNamespaceRequest(
        kubeconfig=cluster.kubeconfig, name=namespace, owner=owner, wait_until=soon(30)
    )
    dropped = await run(workspaces.namespaces.delete_namespace, drop)
    assert (dropped.existed, dropped.gone) == (True, True)
    assert not (await run(workspaces.namespaces.delete_namespace, drop)).existed


async def test_gpu_inventory_counts_foreign_pods(
    workspaces: WorkspaceSide, cluster: Cluster
) -> None:
    request = ReadGpuInventoryRequest(kubeconfig=cluster.kubeconfig)
    inventory = await run(workspaces.nodes.read_gpu_inventory, request)
    assert len(inventory.nodes) == 1
    node = inventory.nodes[0]
    assert node.allocatable > 0
    assert node.usable
    assert node.foreign_used == 0
    # A pod Colony did not place (outside `ws-` namespaces) holds GPUs the ledger cannot give.
    pod = unique("foreign")
    await call(
        client.CoreV1Api(cluster.admin).create_namespaced_pod,
        "default",
        {
            "metadata": {"name": pod},
            "spec": {
                "nodeName": node.name,
                "containers": [
                    {
                        "name": "c",
                        "image": "busybox",
                        "resources": {"limits": {node.resource_name: "1"}},
                    }
                ],
            },
        },
    )
    counted = await run(workspaces.nodes.read_gpu_inventory, request)
    assert counted.nodes[0].foreign_used == 1
    await call(client.CoreV1Api(cluster.admin).delete_namespaced_pod, pod, "default")


async def test_gpu_inventory_names_the_workflow_that_owns_the_cluster(
    workspaces: WorkspaceSide, cluster: Cluster
) -> None:
    # The ledger tells this workflow which workspaces hold GPUs; an organization's cluster is
    # `cluster/<org>/<name>`, so it is read from the ClusterDeployment, not derived from its name.
    asked = ReadGpuInventoryRequest(kubeconfig=cluster.kubeconfig, cluster_deployment=cluster.name)
    assert (await run(workspaces.nodes.read_gpu_inventory, asked)).cluster_workflow_id == (
        f"cluster/{cluster.name}"
    )
    plain = ReadGpuInventoryRequest(kubeconfig=cluster.kubeconfig)
    assert (await run(workspaces.nodes.read_gpu_inventory, plain)).cluster_workflow_id == ""
    absent = ReadGpuInventoryRequest(kubeconfig=cluster.kubeconfig, cluster_deployment="absent")
    assert (await run(workspaces.nodes.read_gpu_inventory, absent)).cluster_workflow_id == ""


# --- ownership: never adopt, never delete what is not the owner's ---------------------------------


async def test_a_users_own_namespace_is_neither_adopted_nor_deleted(
    workspaces: WorkspaceSide, cluster: Cluster
) -> None:
    """`ws-<name>` made by the user (holding their data) is refused by name, and a delete leaves
    it and its contents as they are; so is one another workspace of Colony's owns."""
    core = client.CoreV1Api(cluster.admin)
    theirs = unique("ws-adopt")
    await call(core.create_namespace, {"metadata": {"name": theirs}})
    await call(
        core.create_namespaced_config_map,
        theirs,
        {"metadata": {"name": "notes"}, "data": {"keep": "me"}},
    )
    owner = Owner(workflow_id=f"workspace/{theirs.removeprefix('ws-')}", organization="acme")
    ensure = EnsureNamespaceRequest(kubeconfig=cluster.kubeconfig, name=theirs, owner=owner)
    refused = await expect_error(
        run(workspaces.namespaces.ensure_namespace, ensure),
        ErrorType.FOREIGN_OBJECT,
        retryable=False,
    )
    assert refused.message.startswith(
        f"namespace {theirs} already exists and is not Colony's (it has no Colony ownership "
        "marks): Colony neither adopts nor deletes it"
    )
    drop = DeleteNamespaceRequest(
        kubeconfig=cluster.kubeconfig, name=theirs, owner=owner, wait_until=soon(5)
    )
    left = await run(workspaces.namespaces.delete_namespace, drop)
    assert (left.existed, left.foreign) == (True, True)
    kept = await call(core.read_namespace, theirs)
    assert kept.metadata.deletion_timestamp is None
    assert (await call(core.read_namespaced_config_map, "notes", theirs)).data == {"keep": "me"}
    assert kept.metadata.labels.get("app.kubernetes.io/managed-by") is None, "not marked either"

    # Colony's, but another workspace's (another organization's name for it): the same.
    mine = ensure.model_copy(update={"name": unique("ws")})
    assert (await run(workspaces.namespaces.ensure_namespace, mine)).created
    other = Owner(workflow_id=owner.workflow_id, organization="acme-labs")
    stolen = mine.model_copy(update={"owner": other})
    assert (
        "belongs to something else Colony runs"
        in (
            await expect_error(
                run(workspaces.namespaces.ensure_namespace, stolen),
                ErrorType.FOREIGN_OBJECT,
                retryable=False,
            )
        ).message
    )
    drop_mine = drop.model_copy(update={"name": mine.name})
    left = await run(
        workspaces.namespaces.delete_namespace, drop_mine.model_copy(update={"owner": other})
    )
    assert (left.existed, left.foreign) == (True, True)
    assert (await run(workspaces.namespaces.delete_namespace, drop_mine)).existed
    await call(core.delete_namespace, theirs)


async def test_another_owners_service_set_is_refused_gone_to_it_and_left_alone(
    mgmt: client.ApiClient, workspaces: WorkspaceSide, cluster: Cluster
) -> None:
    ours = service_set(cluster)
    applied = await run(workspaces.service_sets.apply_service_set, ours)
    intruder = ours.model_copy(
        update={"owner": Owner(workflow_id=ours.owner.workflow_id, organization="zz-intruder")}
    )
    error = await expect_error(
        run(workspaces.service_sets.apply_service_set, intruder),
        ErrorType.FOREIGN_OBJECT,
        retryable=False,
    )
    assert f"ServiceSet {NAMESPACE}/{ours.name} already exists" in error.message
    assert "zz-intruder" not in error.message, "the refusal names no owner"
    assert (await run(workspaces.service_sets.await_service_set, waiting(intruder, 0))).outcome is (
        ServiceSetOutcome.GONE
    )
    left = await run(
        workspaces.service_sets.delete_service_set,
        DeleteServiceSetRequest(namespace=NAMESPACE, name=ours.name, owner=intruder.owner),
    )
    assert (left.existed, left.foreign) == (True, True)
    stored = await read_service_set(mgmt, ours.name)
    assert not stored["metadata"].get("deletionTimestamp")
    assert stored["metadata"]["generation"] == applied.generation, "nor changed"
    await delete(workspaces, ours)


async def test_another_owners_values_secret_is_refused_and_left_alone(
    mgmt: client.ApiClient, workspaces: WorkspaceSide, unsealer: Unsealer
) -> None:
    name, workspace = unique("values"), unique("nb")
    owner = Owner(workflow_id=f"workspace/{workspace}")
    await call(
        client.CoreV1Api(mgmt).create_namespaced_secret,
        NAMESPACE,
        {"metadata": {"name": name}, "stringData": {"values": "someone: else"}},
    )
    write = WriteValuesSecretRequest(
        namespace=NAMESPACE,
        name=name,
        workspace=workspace,
        secret_values={"p": unsealer.sealer.seal(PASSWORD, workspace_scope(workspace, "p"))},
        owner=owner,
    )
    error = await expect_error(
        run(workspaces.service_sets.write_values_secret, write),
        ErrorType.FOREIGN_OBJECT,
        retryable=False,
    )
    assert PASSWORD not in error.message
    left = await run(
        workspaces.service_sets.delete_values_secret,
        DeleteValuesSecretRequest(namespace=NAMESPACE, name=name, owner=owner),
    )
    assert (left.existed, left.foreign) == (True, True)
    kept = await call(client.CoreV1Api(mgmt).read_namespaced_secret, name, NAMESPACE)
    assert base64.b64decode(kept.data["values"]) == b"someone: else"
    await call(client.CoreV1Api(mgmt).delete_namespaced_secret, name, NAMESPACE)


async def test_another_owners_route_is_refused_not_waited_on_and_left_alone(
    workspaces: WorkspaceSide, cluster: Cluster
) -> None:
    namespace = unique("ws")
    owner = Owner(workflow_id=f"workspace/{namespace}")
    await run(
        workspaces.namespaces.ensure_namespace,
        EnsureNamespaceRequest(kubeconfig=cluster.kubeconfig, name=namespace, owner=owner),
    )
    found = await eventually(
        lambda: run(
            workspaces.routes.find_tenant_gateway,
            FindTenantGatewayRequest(kubeconfig=cluster.kubeconfig),
        ),
        until=lambda f: f.gateway is not None,
        what="the tenant gateway",
    )
    route = RouteSpec(
        name=f"{namespace}-http",
        kind="HTTPRoute",
        service="box",
        port=80,
        hostname=f"{namespace}.{DOMAIN}",
        section_name="https",
    )
    apply = ApplyRoutesRequest(
        kubeconfig=cluster.kubeconfig,
        namespace=namespace,
        gateway_namespace=found.gateway_namespace,
        gateway_name=found.gateway_name,
        routes=[route],
        owner=owner,
    )
    assert (await run(workspaces.routes.apply_routes, apply)).created == [route.name]
    other = Owner(workflow_id=f"workspace/acme/{namespace}", organization="acme")
    error = await expect_error(
        run(workspaces.routes.apply_routes, apply.model_copy(update={"owner": other})),
        ErrorType.FOREIGN_OBJECT,
        retryable=False,
    )
    assert f"HTTPRoute {namespace}/{route.name} already exists" in error.message
    seen = await run(
        workspaces.routes.await_routes,
        AwaitRoutesRequest(
            kubeconfig=cluster.kubeconfig,
            namespace=namespace,
            routes=[route],
            owner=other,
            deadline=soon(0),
        ),
    )
    assert [(r.accepted, r.settled, r.reason) for r in seen.routes] == [
        (False, True, "RouteNotFound")
    ]
    remove = DeleteRoutesRequest(
        kubeconfig=cluster.kubeconfig, namespace=namespace, routes=[route], owner=other
    )
    assert (await run(workspaces.routes.delete_routes, remove)).deleted == []
    ours = remove.model_copy(update={"owner": owner})
    assert (await run(workspaces.routes.delete_routes, ours)).deleted == [route.name]
    await run(
        workspaces.namespaces.delete_namespace,
        DeleteNamespaceRequest(kubeconfig=cluster.kubeconfig, name=namespace, owner=owner),
    )


async def test_a_cluster_deployment_is_found_only_by_its_own_clusters_owner(
    mgmt: client.ApiClient, cluster: Cluster
) -> None:
    """What a workspace resolving its cluster sees: the ClusterDeployment of that name exists for
    the owner its marks name, and for no other (another organization's cluster, a hand-made one)."""
    management = ClusterDeploymentActivities(mgmt)

    def asked(owner: Owner | None) -> AwaitClusterDeploymentRequest:
        return AwaitClusterDeploymentRequest(
            namespace=NAMESPACE,
            name=cluster.name,
            want=DeploymentWait.READY,
            deadline=soon(5),
            owner=owner,
        )

    ready = await run(
        management.await_cluster_deployment, asked(Owner(workflow_id=f"cluster/{cluster.name}"))
    )
    assert ready.outcome is DeploymentOutcome.READY
    for foreign in (
        Owner(workflow_id=f"cluster/{cluster.name}", organization="acme"),
        Owner(workflow_id=f"cluster/acme/{cluster.name}", organization="acme"),
    ):
        seen = await run(management.await_cluster_deployment, asked(foreign))
        assert (seen.outcome, seen.status.exists) == (DeploymentOutcome.GONE, False), foreign
        assert seen.status.conditions == [], "nothing of it is told"


async def test_the_colony_kubeconfigs_secret_is_only_its_colonys(mgmt: client.ApiClient) -> None:
    management = ClusterDeploymentActivities(mgmt)
    name = unique("lab") + "-kubeconfigs"
    owner = Owner(workflow_id="colony/acme/lab", organization="acme")
    write = WriteColonyKubeconfigsRequest(
        namespace=NAMESPACE, name=name, colony="lab", owner=owner, clusters={"a": "x/y"}
    )
    assert (await run(management.write_colony_kubeconfigs, write)).written
    assert (await run(management.write_colony_kubeconfigs, write)).written, "replaced"
    other = Owner(workflow_id="colony/acme-labs/lab", organization="acme-labs")
    await expect_error(
        run(management.write_colony_kubeconfigs, write.model_copy(update={"owner": other})),
        ErrorType.FOREIGN_OBJECT,
        retryable=False,
    )
    emptied = write.model_copy(update={"owner": other, "clusters": {}})
    assert not (await run(management.write_colony_kubeconfigs, emptied)).written
    kept = await call(client.CoreV1Api(mgmt).read_namespaced_secret, name, NAMESPACE)
    # The exalsius operator's shape: each value a JSON ObjectReference to the kubeconfig Secret,
    # byte for byte what its Go json.Marshal writes (field order, no spaces).
    assert base64.b64decode(kept.data["a"]) == (
        b'{"kind":"Secret","namespace":"x","name":"y","apiVersion":"v1"}'
    )
    assert json.loads(base64.b64decode(kept.data["a"])) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "namespace": "x",
        "name": "y",
    }
    ours = write.model_copy(update={"clusters": {}})
    await run(management.write_colony_kubeconfigs, ours)
    with pytest.raises(client.ApiException) as gone:
        await call(client.CoreV1Api(mgmt).read_namespaced_secret, name, NAMESPACE)
    assert gone.value.status == 404
