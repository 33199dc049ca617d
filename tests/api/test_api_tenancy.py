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

from typing import Any

import httpx
import pytest
from kubernetes import client as kube_client
from temporalio.client import WorkflowExecutionStatus

from models.cluster import cluster_deployment_name, cluster_workflow_id
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
        assert deployed_b.status_code == 202, deployed_b.text
        await stack.wait_workspace(a, workspace_a, "Running")
        seen_by_b.append(str(await stack.wait_workspace(b, workspace_b, "Running")))
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
