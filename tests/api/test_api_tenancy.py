"""Two organizations whose names collide under `<organization>-<name>` never meet: through the real
ASGI app, the dev server, the worker and the sim.

Organization `<base>` with cluster `labs-cx` (A) and organization `<base>-labs` with cluster `cx`
(B) were one ClusterDeployment, `<base>-labs-cx`, when names were glued with hyphens: B's create
failed naming A's cluster and workflow, B's workspace ran on A's hosts, and B's cluster delete
deleted A's workspace and closed A's GPU ledger. Here each gets a cluster and a GPU workspace of
its own, B deletes its cluster, and A's cluster, workspace, pod and ledger are untouched; nothing
B was answered names anything of A's.
"""

from __future__ import annotations

import asyncio
import json
from functools import partial
from typing import Any

import httpx
import pytest
from kubernetes import client as kube_client
from temporalio.client import WorkflowExecutionStatus
from typer.testing import CliRunner

from clients.colonies import TemporalColonies
from clients.errors import NotFoundError
from clients.temporal import TemporalSession
from clients.workspaces import TemporalWorkspaces
from models.cluster import cluster_deployment_name, cluster_workflow_id
from models.manifests import ColonySpec
from models.workspace import WorkspaceSpec
from models.workspace_operations import DeleteWorkspaceRequest
from starter.cli import app, normalize_argv
from tests.api.conftest import JUPYTER, WORKSPACES, ApiStack
from tests.helpers import eventually, unique
from tests.simenv import call, child_api, close_client

pytestmark = [pytest.mark.e2e]

CLUSTERS = "/v1/kubernetes/clusters"
GPU_POOL = {"name": "gpu", "sku": {"gpuModelId": "a100-80gb"}, "count": 1}


def gpu_notebook(name: str, cluster: str) -> dict[str, Any]:
    return {
        "name": name,
        "class": JUPYTER,
        "cluster": cluster,
        "gpus": 1,
        "secretValues": {"notebookPassword": "pw"},
    }


async def running_pods(stack: ApiStack, deployment: str, namespace: str) -> list[str]:
    api = await child_api(stack.management, deployment)
    try:
        listed = await call(kube_client.CoreV1Api(api).list_namespaced_pod, namespace)
    finally:
        close_client(api)
    return [p.metadata.name for p in listed.items if p.status.phase == "Running"]


async def ledger_holders(stack: ApiStack, workflow_id: str) -> list[str] | None:
    """The workspaces the GPU ledger says hold GPUs (its `status` query); None once it ended."""
    handle = stack.temporal.get_workflow_handle(workflow_id)
    if (await handle.describe()).status != WorkflowExecutionStatus.RUNNING:
        return None
    status = await handle.query("status")
    return sorted(holder["workspace"] for holder in status["holders"])


async def test_two_organizations_with_colliding_names_never_meet(catalog: ApiStack) -> None:
    """Every harm is collected rather than asserted at once, so a run against code that lets the
    organizations meet reports each way they did."""
    stack = catalog
    base = unique("acme")
    org_a, cluster_a, workspace_a = base, "labs-cx", unique("nb-a")
    org_b, cluster_b, workspace_b = f"{base}-labs", "cx", unique("nb-b")
    deployment_a = cluster_deployment_name(cluster_a, org_a)
    ledger_a = f"capacity/{deployment_a}"
    app = stack.app()
    seen_by_b: list[str] = []
    harms: list[str] = []

    async def as_b(response: httpx.Response) -> httpx.Response:
        seen_by_b.append(f"{response.request.method} {response.request.url}: {response.text}")
        return response

    async with (
        stack.http(app, await stack.key(org_a)) as a,
        stack.http(app, await stack.key(org_b)) as b,
    ):
        await stack.ready_cluster(a, cluster_a, pools=[GPU_POOL])
        created = await as_b(
            await b.post(
                CLUSTERS, json={"name": cluster_b, "locationId": "fra1", "nodePools": [GPU_POOL]}
            )
        )
        assert created.status_code == 202, created.text

        async def b_cluster() -> dict[str, Any]:
            got = await as_b(await b.get(f"{CLUSTERS}/{cluster_b}"))
            assert got.status_code == 200, got.text
            body: dict[str, Any] = got.json()
            return body

        settled_b = await eventually(
            b_cluster,
            until=lambda body: body["status"] in ("ready", "failed"),
            timeout=90,
            interval=0.2,
            what="B's cluster settled",
        )
        if settled_b["status"] != "ready":
            harms.append(f"B's cluster failed: {settled_b.get('reason')}")

        # A workspace on each side, each on its own organization's cluster (and hosts).
        deployed_a = await a.post(WORKSPACES, json=gpu_notebook(workspace_a, cluster_a))
        assert deployed_a.status_code == 202, deployed_a.text
        deployed_b = await as_b(await b.post(WORKSPACES, json=gpu_notebook(workspace_b, cluster_b)))
        await stack.wait_workspace(a, workspace_a, "Running")
        if deployed_b.status_code == 202:
            seen_by_b.append(str(await stack.wait_workspace(b, workspace_b, "Running")))
        else:
            harms.append(f"B could not deploy onto its cluster: {deployed_b.text[:300]}")
        assert await running_pods(stack, deployment_a, f"ws-{workspace_a}")
        if await running_pods(stack, deployment_a, f"ws-{workspace_b}"):
            harms.append("B's workspace runs on A's cluster")
        if await ledger_holders(stack, ledger_a) != [workspace_a]:
            harms.append(f"A's ledger holds {await ledger_holders(stack, ledger_a)}")
        for path in (CLUSTERS, WORKSPACES, f"{WORKSPACES}/{workspace_b}"):
            await as_b(await b.get(path))

        # B deletes its cluster (its workspace goes first).
        deleted = await as_b(await b.delete(f"{CLUSTERS}/{cluster_b}"))
        assert deleted.status_code == 202, deleted.text
        await stack.wait_gone(b, cluster_b, timeout=120)
        gone = await as_b(await b.get(f"{WORKSPACES}/{workspace_b}"))
        assert gone.status_code == 404, gone.text

        # A's cluster, workspace, pod and ledger are untouched.
        mine = (await a.get(f"{CLUSTERS}/{cluster_a}")).json()
        if (mine.get("status"), mine.get("organization")) != ("ready", org_a):
            harms.append(f"A's cluster: {mine}")
        ours = await a.get(f"{WORKSPACES}/{workspace_a}")
        if ours.status_code != 200 or ours.json()["phase"] != "Running":
            harms.append(f"A's workspace: {ours.status_code} {ours.text[:300]}")
        if not await running_pods(stack, deployment_a, f"ws-{workspace_a}"):
            harms.append("A's workspace's pod is gone")
        if await ledger_holders(stack, ledger_a) != [workspace_a]:
            harms.append(f"A's ledger after B's delete: {await ledger_holders(stack, ledger_a)}")
        for path in (CLUSTERS, WORKSPACES):
            await as_b(await b.get(path))

        # Nothing B was ever answered names A's organization's objects.
        of_a = [
            cluster_workflow_id(cluster_a, org_a),
            f"workspace/{org_a}/",
            workspace_a,
            deployment_a,
            ledger_a,
        ]
        harms += [
            f"B was told {name}: {text[:300]}"
            for text in seen_by_b
            for name in of_a
            if name in text
        ]
        assert harms == [], "\n".join(harms)

        await a.delete(f"{CLUSTERS}/{cluster_a}")
        await stack.wait_gone(a, cluster_a, timeout=120)


async def operator_ctl(stack: ApiStack, *args: str) -> str:
    """Local-mode `colonyctl` (the operator's: Temporal directly), its stdout."""
    result = await asyncio.to_thread(
        CliRunner().invoke, app, normalize_argv(args), env={**stack.env, "HOME": str(stack.tmp)}
    )
    assert result.exit_code == 0, f"colonyctl {' '.join(args)}: {result.stderr}"
    return str(result.stdout)


def operator_colonies(stack: ApiStack) -> TemporalColonies:
    """The operator's colonies (`colonyctl colony` in direct mode)."""
    return TemporalColonies(TemporalSession.of_client(stack.temporal, stack.settings))


async def test_names_are_per_organization_and_an_operator_sees_every_organization(
    catalog: ApiStack,
) -> None:
    """Two organizations use the same names for a cluster, a workspace and a colony: each is
    its own (no 409, no 404 for the other's), and local-mode `colonyctl` lists every one of them
    with its ORGANIZATION, or only one organization's with `--organization`."""
    stack = catalog
    orgs = [unique("org-a"), unique("org-b")]
    cluster, workspace, colony_name = unique("training"), unique("nb"), unique("lab")
    app_ = stack.app()
    for organization in orgs:
        async with stack.http(app_, await stack.key(organization)) as http:
            await stack.ready_cluster(http, cluster, pools=[])
            deployed = await http.post(
                WORKSPACES,
                json={
                    "name": workspace,
                    "class": JUPYTER,
                    "cluster": cluster,
                    "secretValues": {"notebookPassword": "pw"},
                },
            )
            assert deployed.status_code == 202, deployed.text
            await stack.wait_workspace(http, workspace, "Running")
        applied = await operator_colonies(stack).apply(
            ColonySpec(name=colony_name, organization=organization)
        )
        assert (applied.workflow_id, applied.created) == (
            f"colony/{organization}/{colony_name}",
            True,
        )
    # Another organization's colony of that name is not there for a third.
    with pytest.raises(NotFoundError):
        await operator_colonies(stack).acting_for(unique("c")).get(colony_name)
    assert (
        await operator_colonies(stack).acting_for(orgs[0]).get(colony_name)
    ).organization == orgs[0]

    async def listed(kind: str, *extra: str) -> list[tuple[str, str]]:
        rows = json.loads(await operator_ctl(stack, kind, "list", *extra, "-o", "json"))
        return sorted(
            (row["organization"], row["name"])
            for row in rows
            if row["name"] in (cluster, workspace, colony_name)
        )

    async def every_organizations(kind: str, name: str) -> None:
        await eventually(
            lambda: listed(kind),
            until=lambda rows: rows == [(org, name) for org in orgs],
            timeout=15,
            what=f"every organization's {kind} listed",
        )
        assert await listed(kind, "--organization", orgs[1]) == [(orgs[1], name)]
        table = await operator_ctl(stack, kind, "list", "--organization", orgs[0])
        assert table.splitlines()[0].split()[0] == "ORGANIZATION"
        assert [line.split()[:2] for line in table.splitlines()[1:]] == [[orgs[0], name]]

    await every_organizations("cluster", cluster)
    await every_organizations("workspace", workspace)
    await every_organizations("colony", colony_name)

    for organization in orgs:
        await operator_colonies(stack).acting_for(organization).delete(colony_name)
        async with stack.http(app_, await stack.key(organization)) as http:
            await http.delete(f"{CLUSTERS}/{cluster}")
            await stack.wait_gone(http, cluster, timeout=120)


CLASSES = "/v1/workspace-classes"


async def test_an_organizations_own_classes_are_its_own_and_the_shared_catalog_is_an_operators(
    catalog: ApiStack,
) -> None:
    stack = catalog
    org_a, org_b, org_c = unique("cls-a"), unique("cls-b"), unique("cls-c")
    operator_key = await stack.key(unique("ops"), "read", "manage", "catalog:publish")
    app_ = stack.app()

    async def names(http: httpx.AsyncClient) -> list[str]:
        listed = await http.get(CLASSES)
        assert listed.status_code == 200, listed.text
        return [c["name"] for c in listed.json()["items"]]

    async with (
        stack.http(app_, await stack.key(org_a)) as a,
        stack.http(app_, await stack.key(org_b)) as b,
        stack.http(app_, operator_key) as operator,
    ):
        jupyter = (await a.get(f"{CLASSES}/{JUPYTER}")).json()
        name = unique("team-nb")
        published = await a.post(CLASSES, json={"class": {**jupyter, "name": name}})
        assert published.status_code == 201, published.text

        # A sees its class; B does not (404, not listed), and the name is free for B's own.
        assert name in await names(a)
        assert (await b.get(f"{CLASSES}/{name}")).status_code == 404
        assert name not in await names(b)
        theirs = {**jupyter, "name": name, "displayName": "B's notebook"}
        assert (await b.post(CLASSES, json={"class": theirs})).status_code == 201
        assert (await b.get(f"{CLASSES}/{name}")).json()["displayName"] == "B's notebook"
        assert (await a.get(f"{CLASSES}/{name}")).json()["displayName"] == jupyter["displayName"]

        # An organization's class takes no shared class's name (a shipped one's is reserved:
        # `colony-` is Colony's), and publishes no templates.
        shadow = await a.post(CLASSES, json={"class": {**jupyter, "displayName": "Mine"}})
        assert (shadow.status_code, shadow.json()["error"]["field"]) == (422, "name"), shadow.text
        template = {
            "name": name,
            "spec": {
                "helm": {
                    "chartSpec": {
                        "chart": "colony-jupyter",
                        "version": "1.0.0",
                        "interval": "10m",
                        "sourceRef": {"kind": "HelmRepository", "name": "colony-catalog"},
                    }
                }
            },
        }
        with_template = {
            "class": {**jupyter, "name": unique("t"), "serviceTemplate": {"name": name}},
            "serviceTemplates": [template],
        }
        refused = await a.post(CLASSES, json=with_template)
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["field"] == "serviceTemplates"
        assert "catalog:publish" in refused.json()["error"]["message"]

        # The shared catalog is the operator's: every organization sees what it publishes there.
        shared = unique("shared-nb")
        by_operator = await operator.post(CLASSES, json={"class": {**jupyter, "name": shared}})
        assert by_operator.status_code == 201, by_operator.text
        for http in (a, b):
            got = await eventually(
                partial(http.get, f"{CLASSES}/{shared}"),
                until=lambda r: r.status_code == 200,
                timeout=10,
                what="the shared class seen",
            )
            assert got.json()["name"] == shared
        late = await b.post(CLASSES, json={"class": {**jupyter, "name": shared}})
        assert late.status_code == 409, "a shared name is no organization's to take"

        # A workspace pins its organization's class: A's runs on A's, and a workspace of
        # another organization pinning that name, whatever its client did, finds no class.
        cluster = unique("cls")
        await stack.ready_cluster(a, cluster, pools=[])
        deployed = await a.post(
            WORKSPACES,
            json={
                "name": unique("nb"),
                "class": name,
                "cluster": cluster,
                "secretValues": {"notebookPassword": "pw"},
            },
        )
        assert deployed.status_code == 202, deployed.text
        running = await stack.wait_workspace(a, deployed.json()["id"], "Running")
        assert running["class"] == name
        intruder = WorkspaceSpec.model_validate(
            {"name": unique("nb"), "class": name, "cluster": cluster, "organization": org_c}
        )
        session = TemporalSession.of_client(stack.temporal, stack.settings)
        await TemporalWorkspaces(session).start(intruder)
        handle = stack.temporal.get_workflow_handle(intruder.workflow_id)
        failed = await eventually(
            lambda: handle.query("status"),
            until=lambda status: status["phase"] == "Failed",
            timeout=30,
            what="the intruder's workspace failed",
        )
        assert failed["message"].startswith(f"WorkspaceClass '{name}' not found")
        await handle.execute_update("delete", DeleteWorkspaceRequest())
        await a.delete(f"{CLUSTERS}/{cluster}")
        await stack.wait_gone(a, cluster, timeout=120)
