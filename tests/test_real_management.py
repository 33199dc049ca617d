"""Colony on a real management cluster (marker `real`): every object it writes is accepted by a real
kube-apiserver 1.37 serving k0rdent's, exalsius' and Cluster API's own CRDs (CEL rules included),
and the worker, the watcher and the HTTP API do their work with the identities `deploy/rbac.yaml`
grants them, and nothing more.

The management cluster is a control plane of the module's own (`components.controlplane`, with an
audit log) that has what a fresh k0rdent management cluster has (the CRDs read from `../shared/`,
KCM's ClusterTemplates, Credentials and hub ServiceTemplates, as `sim.world.preload_objects`
lists them) and `deploy/rbac.yaml` applied. Nothing of k0rdent runs: where Colony waits on a
status, the test writes it as KCM would.

How "accepted" is checked, for every request of every test (`_every_answer_checked`):
- the API server's audit log: no request of Colony's service accounts is answered 403, and no
  write of theirs is refused (400, 422, 5xx; 409 on a create is the idempotent path, 404 on a
  delete or read its tolerated absence);
- the clients' answers: no `Warning: unknown field` (a field the CRD lacks, which the server
  prunes without failing the request, so that nobody would ever read it).

Skipped cleanly when `../shared/` (or `COLONY_SHARED_DIR`) lacks the CRDs.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import os
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from kubernetes import client
from temporalio.testing import ActivityEnvironment

from activities.management.classes import WorkspaceClassActivities
from activities.management.cluster_deployments import ClusterDeploymentActivities
from activities.management.service_sets import ServiceSetActivities
from clients import credentials
from components.controlplane import ControlPlane
from infra.crds import CRD_DIR, ensure_crds
from infra.keys import KubernetesKeyStore
from infra.kube import api_client_from_dict, close_client
from infra.kubeapi import KubeApi
from infra.sealing import Unsealer, workspace_scope
from models.activity_api import (
    AddClusterMachinesRequest,
    AwaitClusterDeploymentRequest,
    CheckClusterPrerequisitesRequest,
    CreateClusterDeploymentRequest,
    DeleteClusterDeploymentRequest,
    DeploymentOutcome,
    DeploymentWait,
    Machine,
    RemoveClusterMachinesRequest,
)
from models.cluster import DEFAULT_CREDENTIAL, DEFAULT_TEMPLATE, POD_CIDR, SERVICE_CIDR
from models.colony import WriteColonyKubeconfigsRequest
from models.manifests import ColonyClusterSpec
from models.ownership import Owner
from models.workspace_api import (
    WORKSPACE_LABEL,
    ApplyServiceSetRequest,
    AwaitServiceSetRequest,
    DeleteServiceSetRequest,
    DeleteValuesSecretRequest,
    FindServiceSetsRequest,
    ListWorkspaceClassesRequest,
    PublishWorkspaceClassRequest,
    ServiceSetOutcome,
    ServiceSetService,
    WriteValuesSecretRequest,
)
from sim.world import preload_objects
from tests import realcluster
from tests.helpers import eventually, unique
from watching.leader import LeaseTiming
from watching.mapping import Signal
from watching.service import Watcher, WatcherConfig
from worker import catalog_seed

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("COLONY_SHARED_DIR") or ROOT.parent / "shared")
"""The shared reference material beside the checkout (`COLONY_SHARED_DIR` names another place:
a worktree's checkout is not beside it)."""
CRD_FOLDERS = (
    SHARED / "k0rdent-crds",
    SHARED / "exalsius" / "operator-crds",
    SHARED / "capi-crds",
)
RBAC = ROOT / "deploy" / "rbac.yaml"
NAMESPACE = "kcm-system"
SYSTEM = "colony-system"
K0RDENT = ("k0rdent.mirantis.com", "v1beta1")

pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(
        not all(folder.is_dir() for folder in CRD_FOLDERS),
        reason=f"the real CRDs are not all beside the checkout ({', '.join(map(str, CRD_FOLDERS))})",
    ),
]

IDENTITIES = {"worker": "colony-worker", "watcher": "colony-watcher", "api": "colony-api"}
"""Colony's processes and their ServiceAccounts in colony-system (deploy/rbac.yaml)."""


def crds(folders: tuple[Path, ...] = CRD_FOLDERS) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for folder in folders:
        for path in sorted(folder.glob("*.yaml")):
            found.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return found


def established(plane: ControlPlane, name: str) -> bool:
    crd = plane.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    conditions = (crd.json().get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def apply_manifest(plane: ControlPlane, documents: list[dict[str, Any]]) -> None:
    """Create each object as the admin (`kubectl apply` of a fresh file, simply)."""
    for doc in documents:
        group_version, kind = doc["apiVersion"], doc["kind"]
        plural = {
            "Namespace": "namespaces",
            "ServiceAccount": "serviceaccounts",
            "Role": "roles",
            "RoleBinding": "rolebindings",
            "ClusterRole": "clusterroles",
            "ClusterRoleBinding": "clusterrolebindings",
        }[kind]
        base = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
        namespace = (doc.get("metadata") or {}).get("namespace")
        path = f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"
        answer = plane.request("POST", path, doc)
        assert answer.status_code in (201, 409), f"{kind} {doc['metadata']}: {answer.text}"


@dataclass
class Calls:
    """What the official clients were answered: (method, path, status, warnings)."""

    seen: list[tuple[str, str, int, list[str]]] = field(default_factory=list)

    def wrap(self, api: client.ApiClient) -> client.ApiClient:
        original = api.call_api

        def call_api(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            response = original(method, url, *args, **kwargs)
            warnings = response.getheader("Warning")  # type: ignore[no-untyped-call]
            self.seen.append((method, url, response.status, [warnings] if warnings else []))
            return response

        api.call_api = call_api  # type: ignore[method-assign]
        return api

    def unknown_fields(self) -> list[tuple[str, str, list[str]]]:
        return [(m, u, w) for m, u, _, w in self.seen if any("unknown field" in x for x in w)]


@dataclass
class Management:
    """The module's real management cluster and Colony's identities on it."""

    plane: ControlPlane
    admin: client.ApiClient
    calls: Calls
    clients: dict[str, client.ApiClient]
    """Per process (worker, watcher, api): an official client with its ServiceAccount's token."""
    kubeconfigs: dict[str, dict[str, Any]]
    expected_refusals: list[str] = field(default_factory=list)
    """Refusals a test provokes on purpose (what lies outside the grant), checked like the rest."""

    def client(self, who: str) -> client.ApiClient:
        return self.clients[who]


@pytest.fixture(scope="module")
def management() -> Iterator[Management]:
    plane = realcluster.start_control_plane("mgmt", kwok=False, audit=True)
    admin = api_client_from_dict(plane.admin_kubeconfig)
    calls = Calls()
    clients: dict[str, client.ApiClient] = {}
    try:
        for crd in crds():
            answer = plane.request(
                "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd
            )
            assert answer.status_code == 201, answer.text
        for crd in crds():
            name = crd["metadata"]["name"]
            realcluster.wait_for(
                functools.partial(established, plane, name), what=f"{name} Established"
            )
        plane.ensure("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})  # k0rdent's
        apply_manifest(plane, [d for d in yaml.safe_load_all(RBAC.read_text()) if d])
        for plural, obj in preload_objects():
            answer = plane.request(
                "POST", f"/apis/{'/'.join(K0RDENT)}/namespaces/{NAMESPACE}/{plural}", obj
            )
            assert answer.status_code == 201, f"{plural} {obj['metadata']['name']}: {answer.text}"
        kubeconfigs = {
            who: plane.token_kubeconfig(
                plane.service_account_token(SYSTEM, account, create=False, seconds=7200),
                account,
            )
            for who, account in IDENTITIES.items()
        }
        clients = {who: calls.wrap(api_client_from_dict(k)) for who, k in kubeconfigs.items()}
        yield Management(plane, admin, calls, clients, kubeconfigs)
    finally:
        for api in clients.values():
            close_client(api)
        close_client(admin)
        plane.stop()


ALLOWED = {
    # (verb, status): answers that are the idempotent paths of Colony's code, not refusals.
    ("create", 409),  # exists already: judged by its ownership marks
    ("get", 404),  # absent: created, or reported as absent
    ("delete", 404),  # gone already
    ("update", 409),  # a resourceVersion conflict: read again and retried
    ("patch", 409),
}


NOT_SERVED_HERE = {"source.toolkit.fluxcd.io"}
"""Groups this management cluster does not serve (no Flux): the catalog's HelmRepository is then
reported as skipped (404), which Colony tolerates by design."""


def refusals(events: list[dict[str, Any]], since: int) -> list[str]:
    """Requests of Colony's ServiceAccounts answered with an error that is not an idempotent
    path: every 403, every refused write."""
    ours = {f"system:serviceaccount:{SYSTEM}:{a}" for a in IDENTITIES.values()}
    found = []
    for event in events[since:]:
        user = (event.get("user") or {}).get("username")
        code = int((event.get("responseStatus") or {}).get("code") or 0)
        if user not in ours or event.get("stage") != "ResponseComplete" or code < 400:
            continue
        if (event.get("verb"), code) in ALLOWED and code != 403:
            continue
        group = (event.get("objectRef") or {}).get("apiGroup")
        if code == 404 and group in NOT_SERVED_HERE:
            continue
        found.append(f"{user} {event.get('verb')} {event.get('requestURI')}: {code}")
    return found


@pytest.fixture(autouse=True)
def _every_answer_checked(management: Management) -> Iterator[None]:
    events_before = len(management.plane.audit_events())
    calls_before = len(management.calls.seen)
    yield
    expected, management.expected_refusals = management.expected_refusals, []
    assert refusals(management.plane.audit_events(), events_before) == expected
    unknown = [c for c in management.calls.unknown_fields() if c in management.calls.seen[calls_before:]]  # type: ignore[comparison-overlap]  # fmt: skip
    assert unknown == [], f"fields the real CRDs lack (pruned by the server): {unknown}"


async def run(fn: Callable[[Any], Any], request: Any) -> Any:
    return await ActivityEnvironment().run(fn, request)


def machines(count: int, start: int = 10) -> list[Machine]:
    return [Machine(address=f"198.51.100.{start + i}", port=22 + i) for i in range(count)]


# --- the catalog ---------------------------------------------------------------------------------


async def test_the_shipped_catalog_is_published_by_the_worker(management: Management) -> None:
    """What the catalog workflow publishes at the worker's start: every class, its ServiceTemplates
    (the HelmRepository is reported, not fatal: no Flux serves it here)."""
    classes = WorkspaceClassActivities(management.client("worker"))
    for request in catalog_seed().seed:
        published = await run(classes.publish_workspace_class, request)
        assert published.created, request.spec.name
        assert all("HelmRepository" in skipped for skipped in published.objects_skipped)
        again = await run(classes.publish_workspace_class, request)
        assert not again.created
    listed = await run(classes.list_workspace_classes, ListWorkspaceClassesRequest())
    shipped = {r.spec.name for r in catalog_seed().seed}
    assert shipped <= {c.name for c in listed.classes}
    # Read back as stored: nothing of a class was lost to the real CRD's schema.
    for request in catalog_seed().seed:
        stored = next(c for c in listed.classes if c.name == request.spec.name)
        assert stored == request.spec


async def test_an_organizations_own_class_is_published(management: Management) -> None:
    classes = WorkspaceClassActivities(management.client("worker"))
    shared = catalog_seed().seed[0].spec
    own = shared.model_copy(update={"name": unique("own")})
    request = PublishWorkspaceClassRequest(spec=own, organization="acme")
    assert (await run(classes.publish_workspace_class, request)).created
    listed = await run(classes.list_workspace_classes, ListWorkspaceClassesRequest())
    assert [c.name for c in listed.private["acme"]] == [own.name]
    assert listed.private["acme"][0] == own  # read back as written
    assert listed.unreadable == []


async def test_colonys_own_crds_are_served_before_the_catalog_uses_them() -> None:
    """On a cluster without the exalsius operator, the worker installs Colony's WorkspaceClass
    CRD (deploy/crds) and publishes the catalog at once: the CRD must be served by then."""
    plane = await asyncio.to_thread(realcluster.start_control_plane, "bare", kwok=False)
    admin = api_client_from_dict(plane.admin_kubeconfig)
    try:
        plane.ensure("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        assert await ensure_crds(admin) == [c["metadata"]["name"] for c in crds((CRD_DIR,))]
        classes = WorkspaceClassActivities(admin)
        for request in catalog_seed().seed:
            published = await run(classes.publish_workspace_class, request)
            assert published.created
            # No k0rdent here: ServiceTemplates and the HelmRepository are reported, not fatal.
            assert not published.objects_created
    finally:
        close_client(admin)
        await asyncio.to_thread(plane.stop)


# --- clusters --------------------------------------------------------------------------------


def create_request(name: str, **fields: Any) -> CreateClusterDeploymentRequest:
    return CreateClusterDeploymentRequest(
        **{
            "namespace": NAMESPACE,
            "name": name,
            "template": DEFAULT_TEMPLATE,
            "credential": DEFAULT_CREDENTIAL,
            "workflow_id": f"cluster/{name}",
            "owner": f"cluster/{name}/run-1",
            "kubernetes_version": "v1.37.1",
            "pod_cidr": POD_CIDR,
            "service_cidr": SERVICE_CIDR,
            "machines": machines(2),
            **fields,
        }
    )


def write_ready_status(management: Management, name: str) -> None:
    """What KCM writes on a ClusterDeployment that came up (its Ready condition, current)."""
    path = f"/apis/{'/'.join(K0RDENT)}/namespaces/{NAMESPACE}/clusterdeployments/{name}"
    current = management.plane.request("GET", path).json()
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {
        "observedGeneration": current["metadata"]["generation"],
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Succeeded",
                "message": "",
                "lastTransitionTime": now,
            },
        ],
    }
    answer = management.plane._admin.patch(
        f"{path}/status",
        content=json.dumps({"status": status}),
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({}, id="remote-cluster"),
        pytest.param(
            {
                "organization": "acme",
                "tenant_gateway_domain": "acme.example",
                "labels": {"team": "vision"},
                "annotations": {"colony.dev/note": "x"},
            },
            id="organization-gateway-labels",
        ),
    ],
)
async def test_a_cluster_deployments_life(management: Management, fields: dict[str, Any]) -> None:
    """Everything the cluster workflow writes of a ClusterDeployment, as the worker."""
    deployments = ClusterDeploymentActivities(management.client("worker"))
    name = unique("cd")
    prerequisites = await run(
        deployments.check_cluster_prerequisites,
        CheckClusterPrerequisitesRequest(
            namespace=NAMESPACE, template=DEFAULT_TEMPLATE, credential=DEFAULT_CREDENTIAL
        ),
    )
    assert prerequisites.template_found
    assert prerequisites.credential_found
    request = create_request(name, **fields)
    assert (await run(deployments.create_cluster_deployment, request)).created
    assert not (await run(deployments.create_cluster_deployment, request)).created
    added = await run(
        deployments.add_cluster_machines,
        AddClusterMachinesRequest(namespace=NAMESPACE, name=name, machines=machines(1, start=20)),
    )
    assert len(added.machine_addresses) == 3
    removed = await run(
        deployments.remove_cluster_machines,
        RemoveClusterMachinesRequest(namespace=NAMESPACE, name=name, addresses=["198.51.100.10"]),
    )
    assert len(removed.machine_addresses) == 2
    write_ready_status(management, name)
    ready = await run(
        deployments.await_cluster_deployment,
        AwaitClusterDeploymentRequest(
            namespace=NAMESPACE,
            name=name,
            owner=Owner(workflow_id=request.workflow_id, organization=request.organization),
            want=DeploymentWait.READY,
            deadline=datetime.now(UTC) + timedelta(seconds=30),
        ),
    )
    assert ready.outcome is DeploymentOutcome.READY
    deleted = await run(
        deployments.delete_cluster_deployment,
        DeleteClusterDeploymentRequest(namespace=NAMESPACE, name=name, owner=request.owner),
    )
    assert deleted.existed


async def test_a_colony_cluster_from_a_raw_deployment_spec(management: Management) -> None:
    """An exalsius Colony entry's ClusterDeployment spec, applied as written (examples/exalsius)."""
    colony = yaml.safe_load((ROOT / "examples" / "exalsius" / "colony.yaml").read_text())
    entry = ColonyClusterSpec.model_validate(colony["spec"]["colonyClusters"][0])
    spec = entry.to_cluster_spec(colony["metadata"]["name"])
    deployments = ClusterDeploymentActivities(management.client("worker"))
    name = unique(spec.name.replace("--", "-"))
    request = create_request(name, machines=[], deployment_spec=spec.deployment_spec)
    assert (await run(deployments.create_cluster_deployment, request)).created
    assert (
        await run(
            deployments.delete_cluster_deployment,
            DeleteClusterDeploymentRequest(namespace=NAMESPACE, name=name, owner=request.owner),
        )
    ).existed


async def test_a_colonys_kubeconfigs_secret(management: Management) -> None:
    deployments = ClusterDeploymentActivities(management.client("worker"))
    name = unique("colony-kubeconfigs")
    owner = Owner(workflow_id=f"colony/{name}", organization="acme")

    def request(clusters: dict[str, str]) -> WriteColonyKubeconfigsRequest:
        return WriteColonyKubeconfigsRequest(
            namespace=NAMESPACE, name=name, colony="edge", owner=owner, clusters=clusters
        )

    assert (await run(deployments.write_colony_kubeconfigs, request({"a": "a-kubeconfig"}))).written
    assert (
        await run(
            deployments.write_colony_kubeconfigs,
            request({"a": "a-kubeconfig", "b": "b-kubeconfig"}),
        )
    ).written
    assert not (await run(deployments.write_colony_kubeconfigs, request({}))).written


# --- workspaces ----------------------------------------------------------------------------------


async def test_a_workspaces_service_set_and_values_secret(management: Management) -> None:
    """Everything the workspace workflow writes on the management cluster, as the worker."""
    unsealer = Unsealer(X25519PrivateKey.generate())
    service_sets = ServiceSetActivities(management.client("worker"), unsealer)
    workspace = unique("ws")
    owner = Owner(workflow_id=f"workspace/{workspace}", organization="acme")
    labels = {WORKSPACE_LABEL: workspace}
    secret = f"{workspace}-values"
    write = WriteValuesSecretRequest(
        namespace=NAMESPACE,
        name=secret,
        workspace=workspace,
        secret_values={
            "notebookPassword": unsealer.sealer.seal(
                "s3cret", workspace_scope(workspace, "notebookPassword", "acme")
            )
        },
        owner=owner,
        labels=labels,
    )
    assert (await run(service_sets.write_values_secret, write)).keys == 1
    assert (await run(service_sets.write_values_secret, write)).keys == 1
    template = catalog_seed().seed[0].spec.service_template.name
    apply = ApplyServiceSetRequest(
        namespace=NAMESPACE,
        name=f"{workspace}-set",
        cluster_deployment="some-cluster",
        services=[
            ServiceSetService(
                name=workspace,
                namespace=f"ws-{workspace}",
                template=template,
                values={"replicas": 1, "resources": {"gpu": 1}},
                values_from_secret=secret,
            )
        ],
        owner=owner,
        labels=labels,
    )
    created = await run(service_sets.apply_service_set, apply)
    assert created.created
    changed = apply.model_copy(
        update={"services": [apply.services[0].model_copy(update={"values": {"replicas": 2}})]}
    )
    assert not (await run(service_sets.apply_service_set, changed)).created
    found = await run(
        service_sets.find_service_sets,
        FindServiceSetsRequest(
            namespace=NAMESPACE, cluster_deployment="some-cluster", template=template
        ),
    )
    assert apply.name in [s.name for s in found.found]
    waited = await run(
        service_sets.await_service_set,
        AwaitServiceSetRequest(
            namespace=NAMESPACE,
            name=apply.name,
            service=workspace,
            owner=owner,
            deadline=datetime.now(UTC),
        ),
    )
    assert waited.outcome in (ServiceSetOutcome.DEADLINE, ServiceSetOutcome.CHANGED)
    assert (
        await run(
            service_sets.delete_service_set,
            DeleteServiceSetRequest(namespace=NAMESPACE, name=apply.name, owner=owner),
        )
    ).existed
    assert (
        await run(
            service_sets.delete_values_secret,
            DeleteValuesSecretRequest(namespace=NAMESPACE, name=secret, owner=owner),
        )
    ).existed


# --- least privilege ---------------------------------------------------------------------------


async def test_the_workers_start_reads_colonys_crd_and_creates_nothing(
    management: Management,
) -> None:
    """With the exalsius operator's WorkspaceClass CRD there, the worker's start-up check finds it
    (a read its grant allows), and creates nothing (which it may not)."""
    assert await ensure_crds(management.client("worker")) == []


class Signals:
    """The watcher's signals, kept instead of sent to Temporal."""

    def __init__(self) -> None:
        self.sent: list[Signal] = []

    async def send(self, signal: Signal) -> bool:
        self.sent.append(signal)
        return True


async def test_the_watcher_leads_watches_and_follows_a_child_with_its_own_identity(
    management: Management, real_control_plane: ControlPlane
) -> None:
    """The watcher's whole job on the management cluster, as colony-watcher: its namespace
    checked, the Lease taken, its state written, ClusterDeployments listed and watched, a child's
    kubeconfig Secret read (the child here is the process's shared control plane)."""
    worker = ClusterDeploymentActivities(management.client("worker"))
    name = unique("watched")
    request = create_request(name)
    await run(worker.create_cluster_deployment, request)
    kubeconfig = yaml.safe_dump(real_control_plane.admin_kubeconfig)
    management.plane.ensure(
        f"/api/v1/namespaces/{NAMESPACE}/secrets",
        {
            "metadata": {"name": f"{name}-kubeconfig"},
            "data": {"value": base64.b64encode(kubeconfig.encode()).decode()},
        },
    )  # what k0rdent writes
    signals = Signals()
    api = KubeApi.from_kubeconfig(management.kubeconfigs["watcher"])
    leading: list[bool] = []
    watcher = Watcher(
        api,
        signals,
        WatcherConfig(identity=unique("watcher"), lease=LeaseTiming(4.0, 3.0, 0.5)),
    )
    running = asyncio.create_task(watcher.run(on_leading=leading.append))
    try:
        await eventually(lambda: _leading(leading), what="the watcher leading")
        await eventually(
            lambda: _followed(watcher, (NAMESPACE, name)), what="the child cluster followed"
        )
        await eventually(
            lambda: _state_written(management.plane), what="the watcher's resume state written"
        )
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        await api.aclose()
        await run(
            worker.delete_cluster_deployment,
            DeleteClusterDeploymentRequest(namespace=NAMESPACE, name=name, owner=request.owner),
        )
    lease = management.plane.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM}/leases/colony-watcher"
    )
    assert lease.status_code == 200


async def _leading(leading: list[bool]) -> bool:
    return bool(leading) and leading[-1]


async def _followed(watcher: Watcher, key: tuple[str, str]) -> bool:
    return key in watcher._children


async def _state_written(plane: ControlPlane) -> bool:
    answer = await asyncio.to_thread(
        plane.request, "GET", f"/api/v1/namespaces/{SYSTEM}/configmaps/colony-watcher-state"
    )
    return answer.status_code == 200


async def test_the_apis_keys_and_a_childs_token_with_its_own_identity(
    management: Management, real_control_plane: ControlPlane, tmp_path: Path
) -> None:
    """The HTTP API's work on the management cluster, as colony-api: API keys kept as Secrets
    (created, listed, used, revoked), and a child cluster's token issued from its kubeconfig
    Secret (`GET /v1/kubernetes/clusters/<id>/kubeconfig`)."""
    store = KubernetesKeyStore(management.client("api"), SYSTEM, touch_seconds=0)
    key, text = await store.create("acme", ["clusters:read"], name="ci")
    assert [k.id for k in await store.list_keys("acme")] == [key.id]
    assert (await store.authenticate(text)).id == key.id
    assert await store.revoke(key.id)
    await store.close()
    cluster = unique("child")
    kubeconfig = yaml.safe_dump(real_control_plane.admin_kubeconfig)
    management.plane.ensure(
        f"/api/v1/namespaces/{NAMESPACE}/secrets",
        {
            "metadata": {"name": f"{cluster}-kubeconfig"},
            "data": {"value": base64.b64encode(kubeconfig.encode()).decode()},
        },
    )
    api_kubeconfig = tmp_path / "api.kubeconfig"
    api_kubeconfig.write_text(yaml.safe_dump(management.kubeconfigs["api"]))
    issued = await asyncio.to_thread(credentials.issue, api_kubeconfig, cluster, NAMESPACE)
    assert issued.token
    assert issued.expiry > datetime.now(UTC)


@pytest.mark.parametrize(
    ("who", "path", "what"),
    [
        pytest.param("worker", f"/api/v1/namespaces/{SYSTEM}/secrets", "list", id="worker-colony-system-secrets"),
        pytest.param("worker", "/api/v1/namespaces/kube-system/secrets/x", "get", id="worker-kube-system-secret"),
        pytest.param("watcher", f"/api/v1/namespaces/{NAMESPACE}/secrets", "list", id="watcher-lists-secrets"),
        pytest.param("watcher", f"/apis/{'/'.join(K0RDENT)}/namespaces/{NAMESPACE}/servicesets", "list", id="watcher-service-sets"),
        pytest.param("api", f"/apis/{'/'.join(K0RDENT)}/namespaces/{NAMESPACE}/clusterdeployments", "list", id="api-cluster-deployments"),
        pytest.param("api", "/api/v1/namespaces/kube-system/secrets/x", "get", id="api-kube-system-secret"),
        pytest.param("worker", "/api/v1/namespaces/kube-system", "get", id="worker-namespaces"),
    ],
)  # fmt: skip
async def test_what_lies_outside_the_grant_is_refused(
    management: Management, who: str, path: str, what: str
) -> None:
    token = management.kubeconfigs[who]["users"][0]["user"]["token"]
    tls = ssl.create_default_context(cafile=str(management.plane.ca_file))
    async with httpx.AsyncClient(
        base_url=management.plane.server, verify=tls, headers={"Authorization": f"Bearer {token}"}
    ) as http:
        answer = await http.get(path)
    assert answer.status_code == 403, answer.text
    management.expected_refusals.append(
        f"system:serviceaccount:{SYSTEM}:{IDENTITIES[who]} {what} {path}: 403"
    )
