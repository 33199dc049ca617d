"""The workspace endpoints of the HTTP API through the real ASGI app, against the dev server, the
sim and the worker: classes (list, get, publish: 201, 200, 409) and workspaces (deploy, get, list,
suspend, resume, delete), every answer (200, 201, 202) and every refusal (400, 403, 404, 409,
422, 503) with colonyctl's messages; secret answers sealed by the API reach the values Secret;
deleting an organization's cluster deletes its workspaces first."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client as kube_client

from infra.sealing import SealingSettings
from models.identity import workspace_service_set_name, workspace_values_secret_name
from models.workspace import workspace_workflow_id
from tests.api.conftest import CPU_SKU, JUPYTER, WORKSPACES, ApiStack
from tests.api.test_api_endpoints import error_of
from tests.exalsius_status import exalsius_problems
from tests.helpers import eventually, unique
from tests.simenv import NAMESPACE, call

pytestmark = [pytest.mark.e2e]

CLASSES = "/v1/workspace-classes"
CPU_POOL = {"name": "cpu", "sku": {"cpuSku": CPU_SKU}, "count": 1}


async def cpu_cluster(stack: ApiStack, http: httpx.AsyncClient) -> str:
    name = unique("wsc")
    await stack.ready_cluster(http, name, pools=[CPU_POOL])
    return name


def notebook(name: str, cluster: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "class": JUPYTER, "cluster": cluster, **extra}


async def workflow_exists(stack: ApiStack, name: str, organization: str) -> bool:
    from temporalio.service import RPCError

    try:
        workflow_id = workspace_workflow_id(name, organization)
        await stack.temporal.get_workflow_handle(workflow_id).describe()
    except RPCError:
        return False
    return True


async def test_classes_are_listed_read_and_published_once(catalog: ApiStack) -> None:
    organization = unique("cls")
    manager = await catalog.key(organization)
    reader = await catalog.key(organization, "read")
    app = catalog.app()
    async with catalog.http(app, manager) as http, catalog.http(app, reader) as read_only:
        listed = await read_only.get(CLASSES)
        assert listed.status_code == 200, listed.text
        names = [c["name"] for c in listed.json()["items"]]
        assert JUPYTER in names
        jupyter = (await read_only.get(f"{CLASSES}/{JUPYTER}")).json()
        assert jupyter["userFacingConfig"][0]["helmValuePath"] == "notebookPassword"
        missing = await read_only.get(f"{CLASSES}/colony-nothing-1-0-0")
        assert (missing.status_code, error_of(missing)["field"]) == (404, "class")
        # The published classes by name, not colonyctl's command for them.
        assert error_of(missing)["message"].startswith(
            "class: workspace class 'colony-nothing-1-0-0' not found (published: "
        )
        assert JUPYTER in error_of(missing)["message"]
        assert "colonyctl" not in error_of(missing)["message"]
        assert (await read_only.get(f"{CLASSES}/Not_A_Name")).status_code == 404

        # A new class (the shipped template, another name): 201, then the same again: 200.
        name = unique("test-nb")
        new = {**jupyter, "name": name, "displayName": "Test notebook"}
        refused = await read_only.post(CLASSES, json={"class": new})
        assert refused.status_code == 403
        published = await http.post(CLASSES, json={"class": new})
        assert published.status_code == 201, published.text
        assert published.json() == {
            "name": name,
            "created": True,
            "objectsCreated": [],
            "objectsSkipped": [],
        }
        again = await http.post(CLASSES, json={"class": new})
        assert (again.status_code, again.json()["created"]) == (200, False)

        async def listed_names() -> list[str]:
            return [c["name"] for c in (await read_only.get(CLASSES)).json()["items"]]

        await eventually(listed_names, until=lambda found: name in found, what="published")
        assert (await read_only.get(f"{CLASSES}/{name}")).json()["displayName"] == "Test notebook"

        # Classes are immutable: another definition under the name is a conflict.
        changed = await http.post(CLASSES, json={"class": {**new, "displayName": "Other"}})
        assert changed.status_code == 409, changed.text
        conflict = error_of(changed)
        assert (conflict["code"], conflict["field"]) == ("conflict", "name")
        assert conflict["message"].startswith(
            f"name: workspace class '{name}' already exists with a different definition "
            "(it differs at spec.displayName)"
        )

        # Refused before anything is published: body shape, rules, templates nobody uses.
        bad_json = await http.post(
            CLASSES, content=b"[", headers={"Content-Type": "application/json"}
        )
        assert (bad_json.status_code, error_of(bad_json)["code"]) == (400, "bad_request")
        unknown = await http.post(CLASSES, json={"class": {**new, "owner": "me"}})
        assert unknown.status_code == 422
        assert "unknown field 'owner'" in error_of(unknown)["message"]
        bad_name = await http.post(CLASSES, json={"class": {**new, "name": "Bad"}})
        assert (bad_name.status_code, error_of(bad_name)["field"]) == (422, "class.name")
        template = {
            "name": unique("unused"),
            "spec": {
                "helm": {
                    "chartSpec": {
                        "chart": "x",
                        "version": "1.0.0",
                        "interval": "10m",
                        "sourceRef": {"kind": "HelmRepository", "name": "r"},
                    }
                }
            },
        }
        unused = await http.post(
            CLASSES, json={"class": {**new, "name": unique("t")}, "serviceTemplates": [template]}
        )
        assert unused.status_code == 422
        assert error_of(unused)["message"].startswith(
            f"serviceTemplates: ServiceTemplate {template['name']} is not used by class"
        )
        no_interval = {**template, "spec": {"helm": {"chartSpec": {"chart": "x"}}}}
        shapeless = await http.post(
            CLASSES, json={"class": {**new, "name": unique("t")}, "serviceTemplates": [no_interval]}
        )
        assert shapeless.status_code == 422
        assert error_of(shapeless)["field"] == "serviceTemplates[0].spec"


async def test_a_workspace_from_deploy_to_404(catalog: ApiStack) -> None:
    stack = catalog
    organization = unique("ws")
    key = await stack.key(organization)
    name = unique("nb")
    password = "pw-" + unique("x")
    async with stack.http(stack.app(), key) as http:
        cluster = await cpu_cluster(stack, http)
        deployed = await http.post(
            WORKSPACES,
            json=notebook(
                name,
                cluster,
                values={"jupyter": {"interface": "notebook"}},
                secretValues={"notebookPassword": password},
            ),
        )
        assert deployed.status_code == 202, deployed.text
        accepted = deployed.json()
        assert (accepted["id"], accepted["class"], accepted["cluster"]) == (name, JUPYTER, cluster)
        assert accepted["operationId"] == "op-0001"
        assert accepted["repeated"] is False
        assert deployed.headers["Location"] == f"{WORKSPACES}/{name}"
        assert f"/workflows/workspace%2F{organization}%2F{name}" in accepted["webUi"]

        running = await stack.wait_workspace(http, name, "Running")
        # The API's cluster id, not the ClusterDeployment (derived: `models.identity`).
        assert (running["id"], running["cluster"], running["class"]) == (name, cluster, JUPYTER)
        assert running["webUi"] == accepted["webUi"]
        assert [a["name"] for a in running["access"]] == ["http"]
        assert password not in str(running)

        # The API sealed the answer, the worker unsealed it into the values Secret only.
        secret = await call(
            kube_client.CoreV1Api(stack.management).read_namespaced_secret,
            workspace_values_secret_name(organization, cluster, name),
            NAMESPACE,
        )
        assert yaml.safe_load(base64.b64decode(secret.data["values"])) == {
            "notebookPassword": password
        }

        async def listed(**params: str) -> list[str]:
            response = await http.get(WORKSPACES, params=params)
            assert response.status_code == 200, response.text
            return [w["id"] for w in response.json()["items"]]

        # The list reads Temporal's visibility, which may trail a start by a moment.
        await eventually(listed, until=lambda ids: ids == [name], timeout=10, what="listed")
        assert await listed(cluster=cluster) == [name]
        assert await listed(cluster=unique("other")) == []
        bad_filter = await http.get(WORKSPACES, params={"cluster": "Bad"})
        assert (bad_filter.status_code, error_of(bad_filter)["field"]) == (422, "cluster")

        suspended = await http.post(f"{WORKSPACES}/{name}/suspend")
        assert suspended.status_code == 202, suspended.text
        assert (suspended.json()["kind"], suspended.json()["workspaceId"]) == ("suspend", name)
        await stack.wait_workspace(http, name, "Suspended")
        twice = await http.post(f"{WORKSPACES}/{name}/suspend")
        assert (twice.status_code, error_of(twice)) == (
            409,
            {
                "code": "conflict",
                "field": "workspace",
                "message": f"workspace: workspace '{name}' is already suspended",
            },
        )
        resumed = await http.post(
            f"{WORKSPACES}/{name}/resume", headers={"Idempotency-Key": "resume-1"}
        )
        assert resumed.status_code == 202, resumed.text
        repeated = await http.post(
            f"{WORKSPACES}/{name}/resume", headers={"Idempotency-Key": "resume-1"}
        )
        assert repeated.json()["operationId"] == resumed.json()["operationId"]
        await stack.wait_workspace(http, name, "Running")
        not_suspended = await http.post(f"{WORKSPACES}/{name}/resume")
        assert not_suspended.status_code == 409
        assert (
            "only a suspended or failed workspace can be resumed"
            in (error_of(not_suspended)["message"])
        )

        deleting = await http.delete(f"{WORKSPACES}/{name}")
        assert deleting.status_code == 202, deleting.text
        assert deleting.json()["kind"] == "delete"
        again = await http.delete(f"{WORKSPACES}/{name}")
        assert again.status_code in (202, 404)
        if again.status_code == 202:
            assert again.json()["operationId"] == deleting.json()["operationId"]
        await stack.wait_workspace_gone(http, name)
        for method, path in (
            ("GET", f"{WORKSPACES}/{name}"),
            ("DELETE", f"{WORKSPACES}/{name}"),
            ("POST", f"{WORKSPACES}/{name}/suspend"),
            ("POST", f"{WORKSPACES}/{name}/resume"),
        ):
            gone = await http.request(method, path)
            assert (gone.status_code, error_of(gone)) == (
                404,
                {
                    "code": "not_found",
                    "field": "workspace",
                    "message": f"workspace: workspace '{name}' not found",
                },
            ), (method, path)
        await http.delete(f"/v1/kubernetes/clusters/{cluster}")
        await stack.wait_gone(http, cluster)


async def test_a_failed_install_reads_as_an_exalsius_status(catalog: ApiStack) -> None:
    """The API's workspace, failed and then running, is a valid status of the exalsius
    WorkspaceDeployment CRD: what a client of the operator reads, it reads here."""
    stack = catalog
    organization = unique("fail")
    key = await stack.key(organization)
    name = unique("nb")
    async with stack.http(stack.app(), key) as http:
        cluster = await cpu_cluster(stack, http)
        stack.world.faults.fail_service_set(
            NAMESPACE,
            workspace_service_set_name(organization, cluster, name),
            "Helm install failed: image pull back-off",
        )
        deployed = await http.post(
            WORKSPACES,
            json=notebook(name, cluster, secretValues={"notebookPassword": "pw"}),
        )
        assert deployed.status_code == 202, deployed.text
        failed = await stack.wait_workspace(http, name, "Failed")
        context = failed["failureContext"]
        assert (context["phaseWhenFailed"], context["reason"]) == ("Deploying", "HelmReleaseFailed")
        assert context["recentEvents"][0]["reason"] == "HelmReleaseFailed"
        assert exalsius_problems(failed) == []

        stack.world.faults.clear()
        resumed = await http.post(f"{WORKSPACES}/{name}/resume")
        assert resumed.status_code == 202, resumed.text

        async def workspace() -> dict[str, Any]:
            body: dict[str, Any] = (await http.get(f"{WORKSPACES}/{name}")).json()
            return body

        # Failed until the resume runs: waited for past it.
        running = await eventually(
            workspace,
            until=lambda w: w["phase"] == "Running" and "currentOperation" not in w,
            timeout=60,
            what="resumed",
        )
        assert "failureContext" not in running
        assert exalsius_problems(running) == []
        await http.delete(f"/v1/kubernetes/clusters/{cluster}")
        await stack.wait_gone(http, cluster)


async def test_refused_deploys_start_nothing(catalog: ApiStack) -> None:
    stack = catalog
    organization = unique("refuse")
    key = await stack.key(organization)
    app = stack.app()
    name = unique("nb")
    async with stack.http(app, key) as http:
        cluster = await cpu_cluster(stack, http)

        async def refused(body: Any, status: int, *, raw: bytes | None = None) -> dict[str, Any]:
            if raw is not None:
                response = await http.post(
                    WORKSPACES, content=raw, headers={"Content-Type": "application/json"}
                )
            else:
                response = await http.post(WORKSPACES, json=body)
            assert response.status_code == status, response.text
            return error_of(response)

        assert (await refused(None, 400, raw=b"{"))["code"] == "bad_request"
        assert (await refused(None, 400, raw=b""))["message"] == "body: a JSON object is required"
        unknown = await refused({**notebook(name, cluster), "owner": "me"}, 422)
        assert unknown["field"] == "owner"
        assert unknown["message"].startswith("owner: unknown field 'owner'")
        assert await refused(notebook("Bad", cluster), 422) == {
            "code": "invalid",
            "field": "name",
            "message": "name: workspace name 'Bad' must be a DNS label: lowercase letters, "
            "digits and '-', starting and ending with a letter or digit",
        }
        # Missing required prompts are refused by name, before anything starts.
        assert await refused(notebook(name, cluster), 422) == {
            "code": "invalid",
            "field": "notebookPassword",
            "message": f"notebookPassword: required by class '{JUPYTER}' (prompt 'Notebook "
            "password'): give it in secretValues, answers or values",
        }
        answered = {"secretValues": {"notebookPassword": "x"}}
        wrong_option = await refused(
            notebook(name, cluster, values={"jupyter": {"interface": "vim"}}, **answered), 422
        )
        assert wrong_option["message"] == (
            "values: prompt 'Interface' (jupyter.interface) must be one of lab, notebook, got 'vim'"
        )
        not_secret = await refused(
            notebook(
                name, cluster, secretValues={"notebookPassword": "x", "jupyter.interface": "lab"}
            ),
            422,
        )
        assert not_secret["message"].startswith(
            "secretValues: 'jupyter.interface' is not a secret prompt of class"
        )
        both = await refused(
            notebook(name, cluster, gpus=1, resources={"perReplica": {"gpuCount": 1}}, **answered),
            422,
        )
        assert both["field"] == "resources"
        assert (await refused(notebook(name, "Bad", **answered), 422))["field"] == "cluster"
        # Unknown things: the cluster (of this organization), the class.
        nowhere = unique("nowhere")
        assert await refused(notebook(name, nowhere, **answered), 404) == {
            "code": "not_found",
            "field": "cluster",
            "message": f"cluster: cluster '{nowhere}' not found",
        }
        no_class = await refused({**notebook(name, cluster), "class": "colony-nothing-1-0-0"}, 404)
        assert no_class["field"] == "class"
        # Without Colony's public key the API cannot seal: 503, and nothing starts.
        keyless = SealingSettings(stack.tmp / "none.pem", stack.tmp / "none-private.pem")
        async with stack.http(stack.app(sealing=keyless), key) as unsealed:
            response = await unsealed.post(WORKSPACES, json=notebook(name, cluster, **answered))
        assert response.status_code == 503, response.text
        assert error_of(response)["message"].startswith(
            "the API is not configured for this: COLONY_SEALING_PUBLIC_KEY_FILE: cannot read"
        )
        assert not await workflow_exists(stack, name, organization), (
            "a refused deploy started a workflow"
        )

        # The same Idempotency-Key repeats the deploy; another key finds the name taken.
        body = notebook(name, cluster, **answered)
        first = await http.post(WORKSPACES, json=body, headers={"Idempotency-Key": "deploy-1"})
        assert first.status_code == 202, first.text
        repeat = await http.post(WORKSPACES, json=body, headers={"Idempotency-Key": "deploy-1"})
        assert (repeat.status_code, repeat.json()["repeated"]) == (202, True)
        taken = await http.post(WORKSPACES, json=body, headers={"Idempotency-Key": "deploy-2"})
        assert (taken.status_code, error_of(taken)) == (
            409,
            {
                "code": "conflict",
                "field": "name",
                "message": f"name: workspace '{name}' already exists (names are unique until a "
                "deletion completes)",
            },
        )
        await stack.wait_workspace(http, name, "Running")

        # Deleting the cluster deletes its workspaces first (found by its ClusterDeployment).
        deleting = await http.delete(f"/v1/kubernetes/clusters/{cluster}")
        assert deleting.status_code == 202, deleting.text
        late = await http.post(WORKSPACES, json=notebook(unique("late"), cluster, **answered))
        assert late.status_code in (404, 409), late.text
        await stack.wait_workspace_gone(http, name)
        await stack.wait_gone(http, cluster)
