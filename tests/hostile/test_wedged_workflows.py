"""Nothing can be undeletable (issue 25): a hostile organization's workflows that cannot make
progress, end to end through the HTTP API and remote-mode `colonyctl`, on the dev server, the sim
and the real worker.

- **An undecodable input** (`values` nested 200 deep, started straight through Temporal as the
  report found it: every workflow task fails `Failed decoding arguments`): the organization's
  list and read still answer 200, showing it unresponsive with its workflow id and what clears
  it; its cluster's delete fails within the stated deadline naming it and the commands; its
  organization's own delete answers at once and purges it; the cluster's delete then finishes.
- **A worker bug** (a release whose `ClusterWorkflow` and `WorkspaceWorkflow` raise on every task,
  taking over a task queue where a cluster and a running GPU workspace live): an operator's key
  (Operator Purge) purges the workspace through the operator API (its ServiceSet, values Secret,
  namespace and GPU request removed, each said), a cluster that still has the workspace is
  refused, and remote `colonyctl cluster purge --organization` ends the cluster (its
  ClusterDeployment and hosts); a purge repeated finds nothing left; a tenant's key cannot purge.
- An operator's purge of a workspace whose workflow answers deletes it the normal way.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client as kube_client
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from infra.config import ColonySettings
from models.cluster import cluster_deployment_name
from models.identity import workspace_service_set_name, workspace_values_secret_name
from models.purge import NOT_TAKEN_AFTER
from models.signals import GatewayChanged, RefreshRequest
from models.workspace import workspace_namespace, workspace_workflow_id
from models.workspace_api import CapacityLedgerStatus
from tests.api.conftest import CPU_SKU, JUPYTER, WORKSPACES, ApiStack, api_stack, catalog
from tests.api.test_api_endpoints import error_of
from tests.api.test_cli_remote import api_url, user
from tests.exalsius_status import exalsius_problems
from tests.helpers import eventually, unique
from tests.hostile.broken_workflows import BUG, BrokenClusterWorkflow, BrokenWorkspaceWorkflow
from tests.simenv import NAMESPACE, call, child_api, host_provider
from worker import WORKFLOWS, build_worker
from workflows.capacity import CAPACITY
from workflows.cluster import CLUSTER
from workflows.search_attributes import (
    COLONY_CLUSTER,
    COLONY_KIND,
    COLONY_ORGANIZATION,
    COLONY_PHASE,
)
from workflows.workspace import WORKSPACE

__all__ = ["api_stack", "api_url", "catalog"]  # the fixtures this module takes from tests/api

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CLUSTERS = "/v1/kubernetes/clusters"
CPU_POOL = {"name": "cpu", "sku": {"cpuSku": CPU_SKU}, "count": 1}
PASSWORD = {"notebookPassword": "hostile-wedge-pw"}
STUCK_WITHIN = 60.0
"""A workflow whose every task fails is stuck (two failures in a row) about ten seconds after its
first task: Temporal's workflow task timeout paces the retries."""
CLUSTER_DELETE_DEADLINE = NOT_TAKEN_AFTER.total_seconds()
"""The stated deadline of a cluster delete whose workspaces cannot answer (`models.purge`)."""


def nested(depth: int) -> dict[str, Any]:
    """A mapping `depth` levels deep."""
    root: dict[str, Any] = {}
    node = root
    for _ in range(depth):
        node["v"] = {}
        node = node["v"]
    return root


async def poison(stack: ApiStack, organization: str, name: str, cluster: str) -> str:
    """Start a workspace's workflow straight through Temporal, with the marks a deploy writes and
    an input its worker cannot decode (what the API started in the report); its workflow id."""
    workflow_id = workspace_workflow_id(name, organization)
    await stack.temporal.start_workflow(
        WORKSPACE.workflow_type,
        {
            "spec": {
                "name": name,
                "class": JUPYTER,
                "cluster": cluster,
                "organization": organization,
                "values": nested(200),
            }
        },
        id=workflow_id,
        task_queue=stack.task_queue,
        search_attributes=TypedSearchAttributes(
            [
                SearchAttributePair(COLONY_KIND, "workspace"),
                SearchAttributePair(COLONY_ORGANIZATION, organization),
                SearchAttributePair(COLONY_CLUSTER, cluster_deployment_name(cluster, organization)),
                SearchAttributePair(COLONY_PHASE, "Pending"),
            ]
        ),
        memo={"class": JUPYTER, "cluster": cluster},
    )
    return workflow_id


def item(body: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((i for i in body.get("items", []) if i["name"] == name), None)


async def listed_stuck(http: httpx.AsyncClient, collection: str, name: str) -> dict[str, Any]:
    """The list's item `name` once it shows its workflow stuck (the list answers 200 throughout)."""

    async def probe() -> dict[str, Any] | None:
        listed = await http.get(collection)
        assert listed.status_code == 200, listed.text
        return item(listed.json(), name)

    found = await eventually(
        probe,
        until=lambda i: i is not None and bool((i.get("unresponsive") or {}).get("stuck")),
        timeout=STUCK_WITHIN,
        interval=0.5,
        what=f"{name} listed as stuck",
    )
    assert found is not None
    return found


async def purge_report(http: httpx.AsyncClient, path: str) -> dict[str, Any]:
    """An operator's purge through the API: 200 with the report, or 202 and then its `GET` until
    it has finished."""
    answer = await http.post(path)
    assert answer.status_code in (200, 202), answer.text
    if answer.status_code == 200:
        return dict(answer.json())

    async def report() -> dict[str, Any]:
        got = await http.get(path)
        assert got.status_code == 200, got.text
        return dict(got.json())

    return await eventually(
        report, until=lambda r: r["outcome"] != "running", timeout=120, interval=0.5, what="purged"
    )


async def exists(read: Any, *args: Any) -> bool:
    try:
        await call(read, *args)
    except kube_client.ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


async def test_an_undecodable_workspace_is_shown_deleted_at_once_and_holds_no_cluster_delete(
    catalog: ApiStack,
) -> None:
    stack = catalog
    organization = unique("evil")
    key = await stack.key(organization)
    async with stack.http(stack.app(), key) as http:
        cluster = unique("deep")
        await stack.ready_cluster(http, cluster, pools=[CPU_POOL])
        healthy = unique("nb")
        deployed = await http.post(
            WORKSPACES,
            json={"name": healthy, "class": JUPYTER, "cluster": cluster, "secretValues": PASSWORD},
        )
        assert deployed.status_code == 202, deployed.text
        await stack.wait_workspace(http, healthy, "Running")
        poisoned = unique("deep200")
        workflow_id = await poison(stack, organization, poisoned, cluster)

        # The organization's list answers 200 throughout: the poisoned one is shown stuck, with
        # its workflow, why and what clears it; the healthy one as it is.
        shown = await listed_stuck(http, WORKSPACES, poisoned)
        unresponsive = shown["unresponsive"]
        assert unresponsive["workflowId"] == workflow_id
        assert unresponsive["failedTasks"] >= 2
        assert "Failed decoding arguments" in unresponsive["reason"]
        assert "WorkspaceWorkflowInput" in unresponsive["reason"]
        assert unresponsive["clearWith"] == [
            f"colonyctl workspace delete {poisoned}",
            f"colonyctl workspace purge {poisoned} --organization {organization}",
        ]
        assert (shown["phase"], shown["cluster"], shown["workflowId"]) == (
            "Pending",
            cluster,
            workflow_id,
        )
        listed = (await http.get(WORKSPACES)).json()
        other = item(listed, healthy)
        assert other is not None
        assert (other["phase"], other.get("unresponsive")) == ("Running", None)
        read = await http.get(f"{WORKSPACES}/{poisoned}")
        assert read.status_code == 200, read.text
        assert read.json()["unresponsive"]["workflowId"] == workflow_id
        assert read.json()["organization"] == organization
        assert exalsius_problems(read.json()) == []  # still the exalsius status, and Colony's
        # Anything but a delete is refused at once, saying why (never a 503 that invites
        # retrying forever).
        suspended = await http.post(f"{WORKSPACES}/{poisoned}/suspend")
        assert suspended.status_code == 409, suspended.text
        assert "cannot answer now" in error_of(suspended)["message"]

        # The cluster's delete fails within its stated deadline, naming the workspace and the
        # commands that clear it (the healthy one is deleted meanwhile, as a delete does).
        started = time.monotonic()
        deleting = await http.delete(f"{CLUSTERS}/{cluster}")
        assert deleting.status_code == 202, deleting.text

        async def cluster_body() -> dict[str, Any]:
            return dict((await http.get(f"{CLUSTERS}/{cluster}")).json())

        failed = await eventually(
            cluster_body,
            until=lambda b: b.get("status") == "failed",
            timeout=CLUSTER_DELETE_DEADLINE + 30,
            interval=0.5,
            what="the cluster's delete failed",
        )
        assert time.monotonic() - started < CLUSTER_DELETE_DEADLINE
        reason = failed["reason"]
        assert f"workspaces of cluster '{cluster}' cannot answer its delete: '{poisoned}'" in reason
        assert f"`colonyctl workspace delete {poisoned}`" in reason
        assert f"`colonyctl workspace purge {poisoned} --organization {organization}`" in reason
        assert "then repeat the cluster's delete" in reason
        assert healthy not in reason

        # The organization's own delete answers at once: the workflow is purged.
        started = time.monotonic()
        purged = await http.delete(f"{WORKSPACES}/{poisoned}")
        assert time.monotonic() - started < 10
        assert purged.status_code == 202, purged.text
        assert purged.json()["operationId"] == "purge"
        assert purged.json()["purgeWorkflowId"] == f"purge/{workflow_id}"
        await stack.wait_workspace_gone(http, poisoned)
        await stack.wait_workspace_gone(http, healthy)

        # Repeated, the cluster's delete finishes: its hosts are released.
        again = await http.delete(f"{CLUSTERS}/{cluster}")
        assert again.status_code == 202, again.text
        await stack.wait_gone(http, cluster)
    cluster_workflow = CLUSTER.workflow_id(cluster, organization)
    assert not [
        h
        for h in stack.world.inventory.hosts(state="claimed")
        if (h.owner or "").startswith(f"{cluster_workflow}/")
    ]


async def test_a_worker_bug_is_purged_by_an_operator_through_the_api_and_colonyctl(
    catalog: ApiStack, api_url: str, tmp_path: Path
) -> None:
    stack = catalog
    organization = unique("evil")
    key = await stack.key(organization)
    queue = unique("release")
    on_queue = replace(
        stack,
        settings=ColonySettings.from_env({**stack.env, "COLONY_TASK_QUEUE": queue}),
        apps=[],
    )
    cluster, name = unique("wedged"), unique("nb")
    deployment = cluster_deployment_name(cluster, organization)
    cluster_id = CLUSTER.workflow_id(cluster, organization)
    workspace_id = workspace_workflow_id(name, organization)
    async with host_provider(stack.world) as hosts:
        # A release that works: a GPU cluster and a running workspace holding its GPU.
        async with (
            build_worker(
                stack.temporal, queue, stack.management, hosts, stack.sealing.unsealer()
            ) as worker,
            worker,
            on_queue.http(on_queue.app(), key) as http,
        ):
            await on_queue.ready_cluster(http, cluster)
            deployed = await http.post(
                WORKSPACES,
                json={
                    "name": name,
                    "class": JUPYTER,
                    "cluster": cluster,
                    "gpus": 1,
                    "secretValues": PASSWORD,
                },
            )
            assert deployed.status_code == 202, deployed.text
            running = await on_queue.wait_workspace(http, name, "Running")
            assert running["admission"]["state"] == "admitted"

        # The next release raises in both workflows; woken, their tasks fail on every attempt.
        broken = [
            w
            for w in WORKFLOWS
            if w.__name__ not in ("WorkspaceWorkflow", "ClusterWorkflow")  # the classes' names
        ]
        async with (
            build_worker(
                stack.temporal,
                queue,
                stack.management,
                hosts,
                stack.sealing.unsealer(),
                workflows=[*broken, BrokenWorkspaceWorkflow, BrokenClusterWorkflow],
            ) as worker,
            worker,
        ):
            await stack.temporal.get_workflow_handle(workspace_id).signal(
                WORKSPACE.gateway_changed.name,
                GatewayChanged(request_id=unique("wake"), cluster=deployment),
            )
            await stack.temporal.get_workflow_handle(cluster_id).signal(
                CLUSTER.refresh.name, RefreshRequest(request_id=unique("wake"))
            )
            app = stack.app()
            async with stack.http(app, key) as tenant:
                shown = await listed_stuck(tenant, WORKSPACES, name)
                assert BUG in shown["unresponsive"]["reason"]
                assert shown["phase"] == "Running"  # its last phase, from its marks
                shown_cluster = await listed_stuck(tenant, CLUSTERS, cluster)
                assert shown_cluster["unresponsive"]["workflowId"] == cluster_id
                # A tenant's key cannot reach the operator API, not even for its own.
                own = await tenant.post(
                    f"/v1/operator/organizations/{organization}/workspaces/{name}/purge"
                )
                assert own.status_code == 403, own.text
                assert "Operator: Purge" in error_of(own)["message"]

            operator_key = await stack.key(unique("ops"), "operator:purge")
            workspace_purge = f"/v1/operator/organizations/{organization}/workspaces/{name}/purge"
            cluster_purge = (
                f"/v1/operator/organizations/{organization}/kubernetes/clusters/{cluster}/purge"
            )
            async with stack.http(app, operator_key) as operator:
                # The cluster still has the workspace: refused, nothing ended.
                refused = await operator.post(cluster_purge)
                assert refused.status_code == 409, refused.text
                assert f"still has workspaces: {name}" in error_of(refused)["message"]

                report = await purge_report(operator, workspace_purge)
            assert (report["outcome"], report["terminated"]) == ("purged", True)
            assert BUG in report["reason"]
            removed = {(o["kind"], o["name"]) for o in report["removed"]}
            service_set = workspace_service_set_name(organization, cluster, name)
            values = workspace_values_secret_name(organization, cluster, name)
            assert {
                ("ServiceSet", service_set),
                ("Secret", values),
                ("Namespace", workspace_namespace(name)),
            } <= removed
            assert len(report["gpuRequestsReleased"]) == 1
            assert report["left"] == []
            assert "removed: " in report["summary"]

            # Gone where they were, found by their marks; the ledger holds nothing for it.
            custom = kube_client.CustomObjectsApi(stack.management)
            core = kube_client.CoreV1Api(stack.management)
            assert not await exists(
                custom.get_namespaced_custom_object,
                "k0rdent.mirantis.com",
                "v1beta1",
                NAMESPACE,
                "servicesets",
                service_set,
            )
            assert not await exists(core.read_namespaced_secret, values, NAMESPACE)
            child = await child_api(stack.management, deployment)
            assert not await exists(
                kube_client.CoreV1Api(child).read_namespace, workspace_namespace(name)
            )
            ledger: CapacityLedgerStatus = await stack.temporal.get_workflow_handle(
                CAPACITY.workflow_id(deployment)
            ).query(CAPACITY.status.name, result_type=CapacityLedgerStatus)
            assert ledger.holders == []

            # The cluster, through remote colonyctl logged in with the operator's key.
            operator_cli = user(tmp_path)
            await operator_cli.ctl("auth", "login", "--url", api_url, "--api-key", operator_key)
            done = await operator_cli.ctl(
                "cluster", "purge", cluster, "--organization", organization, "-o", "json"
            )
            report = done.json()
            assert (report["outcome"], report["terminated"]) == ("purged", True)
            assert ("ClusterDeployment", deployment) in {
                (o["kind"], o["name"]) for o in report["removed"]
            }
            assert report["hostsReleased"]
            assert report["ledgerClosed"] == CAPACITY.workflow_id(deployment)
            assert not [
                h
                for h in stack.world.inventory.hosts(state="claimed")
                if (h.owner or "").startswith(f"{cluster_id}/")
            ]
            assert not await exists(
                custom.get_namespaced_custom_object,
                "k0rdent.mirantis.com",
                "v1beta1",
                NAMESPACE,
                "clusterdeployments",
                deployment,
            )

            # Repeated, a purge finds nothing left, and says so.
            again = await operator_cli.ctl(
                "workspace", "purge", name, "--organization", organization, "-o", "json"
            )
            assert (again.json()["outcome"], again.json()["removed"]) == ("swept", [])
            said = await operator_cli.ctl(
                "cluster", "purge", cluster, "--organization", organization
            )
            assert f"its workflow {cluster_id} had ended" in said.stdout
            assert "removed: nothing" in said.stdout
            # A remote purge names the organization: the operator API acts on one.
            nameless = await operator_cli.ctl("workspace", "purge", name, expect=2)
            assert "organization: " in nameless.stderr


async def test_an_operators_purge_of_a_workspace_that_answers_deletes_it_normally(
    catalog: ApiStack,
) -> None:
    stack = catalog
    organization = unique("calm")
    key = await stack.key(organization)
    app = stack.app()
    async with stack.http(app, key) as http:
        cluster, name = unique("calm"), unique("nb")
        await stack.ready_cluster(http, cluster, pools=[CPU_POOL])
        deployed = await http.post(
            WORKSPACES,
            json={"name": name, "class": JUPYTER, "cluster": cluster, "secretValues": PASSWORD},
        )
        assert deployed.status_code == 202, deployed.text
        await stack.wait_workspace(http, name, "Running")
        operator_key = await stack.key(unique("ops"), "operator:purge")
        async with stack.http(app, operator_key) as operator:
            answer = await operator.post(
                f"/v1/operator/organizations/{organization}/workspaces/{name}/purge"
            )
        assert answer.status_code == 200, answer.text
        report = answer.json()
        assert (report["outcome"], report["terminated"]) == ("deleted", False)
        assert report["operationId"].startswith("op-")
        assert report["summary"].endswith(
            f"answers: deleted normally (operation {report['operationId']})"
        )
        await stack.wait_workspace_gone(http, name)
        await http.delete(f"{CLUSTERS}/{cluster}")
        await stack.wait_gone(http, cluster)
