"""The HTTP API's security promises, through the real ASGI app on the dev server and the sim:

- each permission does exactly its operations (a table of every endpoint against every kind of
  key, legacy ones included), nothing else;
- a revoked key and an expired key are refused (a revocation made by another process within the
  key cache's seconds);
- one organization's key gets 404 for another organization's cluster and workspace, on every
  endpoint, cannot deploy onto that cluster, and may use the same names for a cluster and a
  workspace of its own (names are unique within an organization, invisible across them);
- the key, and the cluster tokens the API hands out, appear in no log record, no output and no
  workflow history, and the key's secret is not in its Secret;
- a secret prompt answer sent to the API in plaintext appears in no workflow history (payloads
  decoded) and no log: the API sealed it; only the workspace's values Secret holds it.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from kubernetes import client as kube_client

from infra.keys import KubernetesKeyStore, Permission, secret_name
from models.cluster import cluster_workflow_id
from models.identity import workspace_values_secret_name
from tests.api.conftest import BASE_URL, GPU, JUPYTER, WORKSPACES, ApiStack
from tests.helpers import eventually, history_text, unique
from tests.simenv import NAMESPACE, call

pytestmark = [pytest.mark.e2e]

CLUSTERS = "/v1/kubernetes/clusters"
READ, CONNECT, MANAGE = Permission.READ, Permission.CONNECT, Permission.MANAGE


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str
    """`{c}` stands for the ready cluster's path, `{w}` for its running workspace's."""
    needs: Permission | None
    allowed: int
    """What a key with the permission gets: success for reads and credentials, a refusal on
    content (404, 422) for the changes, so the table changes nothing while it proves the key got
    past the permission check."""
    body: Any = None


ENDPOINTS = [
    Endpoint("GET", "/v1/locations", None, 200),
    Endpoint("GET", "/v1/gpu-models", None, 200),
    Endpoint("GET", "/v1/cpu-skus", None, 200),
    Endpoint("GET", "/v1/api-key", None, 200),
    Endpoint("GET", CLUSTERS, READ, 200),
    Endpoint("GET", "{c}", READ, 200),
    Endpoint("GET", "{c}/node-pools", READ, 200),
    Endpoint("GET", "{c}/node-pools/gpu", READ, 200),
    Endpoint("GET", "{c}/nodes", READ, 200),
    Endpoint("GET", "{c}/operations", READ, 200),
    Endpoint("GET", "{c}/operations/op-0001", READ, 200),
    Endpoint("GET", "{c}/kubeconfig", CONNECT, 200),
    Endpoint("POST", "{c}/token", CONNECT, 200),
    Endpoint("POST", CLUSTERS, MANAGE, 422, {"name": "Not-Valid", "locationId": "fra1"}),
    Endpoint("DELETE", f"{CLUSTERS}/never-created", MANAGE, 404),
    Endpoint(
        "POST",
        "{c}/node-pools",
        MANAGE,
        422,
        {"name": "x", "sku": {"gpuModelId": "no-such-gpu"}, "count": 1},
    ),
    Endpoint("PATCH", "{c}/node-pools/none", MANAGE, 404, {"count": 2}),
    Endpoint("POST", "{c}/node-pools/none", MANAGE, 404, {"count": 2}),
    Endpoint("DELETE", "{c}/node-pools/none", MANAGE, 404),
    Endpoint("DELETE", "{c}/nodes/none", MANAGE, 404),
    Endpoint("POST", "{c}/operations/op-9999/cancel", MANAGE, 404),
    Endpoint("GET", "/v1/workspace-classes", READ, 200),
    Endpoint("GET", f"/v1/workspace-classes/{JUPYTER}", READ, 200),
    Endpoint("POST", "/v1/workspace-classes", MANAGE, 422, {"class": {"name": "Not-Valid"}}),
    Endpoint("GET", WORKSPACES, READ, 200),
    Endpoint("GET", "{w}", READ, 200),
    Endpoint(
        "POST", WORKSPACES, MANAGE, 422, {"name": "Not-Valid", "class": JUPYTER, "cluster": "x"}
    ),
    Endpoint("DELETE", f"{WORKSPACES}/never-deployed", MANAGE, 404),
    Endpoint("POST", f"{WORKSPACES}/never-deployed/suspend", MANAGE, 404),
    Endpoint("POST", "{w}/resume", MANAGE, 409),
]


def notebook(name: str, cluster: str, password: str = "pw") -> dict[str, Any]:
    return {
        "name": name,
        "class": JUPYTER,
        "cluster": cluster,
        "secretValues": {"notebookPassword": password},
    }


@dataclass
class Secured:
    stack: ApiStack
    app: FastAPI
    organization: str
    cluster: str
    manager: str
    workspace: str

    @property
    def path(self) -> str:
        return f"{CLUSTERS}/{self.cluster}"

    @property
    def workspace_path(self) -> str:
        return f"{WORKSPACES}/{self.workspace}"

    def resolve(self, path: str) -> str:
        return path.replace("{c}", self.path).replace("{w}", self.workspace_path)


@pytest.fixture(scope="module")
async def secured(catalog: ApiStack) -> AsyncIterator[Secured]:
    """A ready cluster of one organization with a running workspace, and an app to call them
    through."""
    api_stack = catalog
    organization = unique("sec")
    manager = await api_stack.key(organization)
    app = api_stack.app()
    name = unique("guarded")
    workspace = unique("guarded-nb")
    async with api_stack.http(app, manager) as http:
        await api_stack.ready_cluster(http, name)
        deployed = await http.post(WORKSPACES, json=notebook(workspace, name))
        assert deployed.status_code == 202, deployed.text
        await api_stack.wait_workspace(http, workspace, "Running")
        yield Secured(api_stack, app, organization, name, manager, workspace)
        # Its workspaces first: the cluster's delete removes them.
        await http.delete(f"{CLUSTERS}/{name}")
        await api_stack.wait_gone(http, name)


@pytest.mark.parametrize(
    ("granted", "allows"),
    [
        pytest.param(["kubernetes:read"], {READ}, id="read"),
        pytest.param(["kubernetes:connect"], {CONNECT}, id="connect"),
        pytest.param(["kubernetes:manage"], {MANAGE}, id="manage"),
        pytest.param(["clusters:read"], {READ}, id="legacy-read"),
        pytest.param(["clusters:write"], {CONNECT, MANAGE}, id="legacy-write"),
        pytest.param(["read", "connect", "manage"], {READ, CONNECT, MANAGE}, id="all"),
    ],
)
async def test_each_permission_does_exactly_its_operations(
    secured: Secured, granted: list[str], allows: set[Permission]
) -> None:
    key = await secured.stack.key(secured.organization, *granted)
    wrong = []
    async with secured.stack.http(secured.app, key) as http:
        for endpoint in ENDPOINTS:
            path = secured.resolve(endpoint.path)
            response = await http.request(endpoint.method, path, json=endpoint.body)
            allowed = endpoint.needs is None or endpoint.needs in allows
            expected = endpoint.allowed if allowed else 403
            if response.status_code != expected:
                wrong.append(f"{endpoint.method} {path}: {response.status_code} {response.text}")
    assert wrong == []


async def test_a_revoked_key_is_refused(secured: Secured) -> None:
    key = await secured.stack.key(secured.organization, "read")
    async with secured.stack.http(secured.app, key) as http:
        assert (await http.get(secured.path)).status_code == 200
        assert await secured.stack.store.revoke(key.split("_")[1]) is True
        refused = await http.get(secured.path)
    assert refused.status_code == 401
    assert refused.json()["error"]["message"] == "unknown API key (never issued, or revoked)"


async def test_a_revocation_by_another_process_applies_within_the_key_cache(
    secured: Secured,
) -> None:
    stack = secured.stack
    key = await stack.key(secured.organization, "read")
    caching = KubernetesKeyStore(stack.management, cache_seconds=1.0)
    async with stack.http(stack.app(store=caching), key) as http:
        assert (await http.get(secured.path)).status_code == 200
        # `colonyctl apikey revoke` in another process: this API's cache does not know.
        assert await stack.store.revoke(key.split("_")[1]) is True

        async def status() -> int:
            return (await http.get(secured.path)).status_code

        await eventually(status, until=lambda code: code == 401, timeout=5, interval=0.2)
    await caching.close()


async def test_an_expired_key_is_refused(secured: Secured) -> None:
    expires_at = datetime.now(UTC) + timedelta(seconds=2)
    key = await secured.stack.key(secured.organization, "read", expires_at=expires_at)
    async with secured.stack.http(secured.app, key) as http:
        assert (await http.get(secured.path)).status_code == 200

        async def refusal() -> httpx.Response:
            return await http.get(secured.path)

        refused = await eventually(
            refusal, until=lambda r: r.status_code == 401, timeout=10, interval=0.2
        )
    assert "expired at" in refused.json()["error"]["message"]


async def test_another_organization_gets_404_everywhere_and_may_reuse_the_name(
    secured: Secured,
) -> None:
    stack = secured.stack
    other = unique("other")
    key = await stack.key(other)
    mine = await stack.http(secured.app, secured.manager).get(secured.path)
    assert mine.status_code == 200
    async with stack.http(secured.app, key) as http:
        leaks = []
        for endpoint in ENDPOINTS:
            if "{c}" not in endpoint.path and "{w}" not in endpoint.path:
                continue
            path = secured.resolve(endpoint.path)
            response = await http.request(endpoint.method, path, json=endpoint.body)
            if response.status_code != 404:
                leaks.append(f"{endpoint.method} {path}: {response.status_code}")
        for method in ("DELETE", "POST"):
            path = secured.workspace_path + ("/suspend" if method == "POST" else "")
            response = await http.request(method, path)
            if response.status_code != 404:
                leaks.append(f"{method} {path}: {response.status_code}")
        assert leaks == []
        unknown_ws = (await http.get(f"{WORKSPACES}/{unique('never')}")).json()["error"]
        theirs_ws = (await http.get(secured.workspace_path)).json()["error"]
        assert theirs_ws["message"] == unknown_ws["message"].replace(
            unknown_ws["message"].split("'")[1], secured.workspace
        )
        # Their cluster is not there to deploy onto, whatever the workspace is called.
        onto = await http.post(WORKSPACES, json=notebook(unique("intruder"), secured.cluster))
        assert onto.status_code == 404, onto.text
        assert onto.json()["error"]["message"] == f"cluster: cluster '{secured.cluster}' not found"
        assert secured.workspace not in [
            w["id"] for w in (await http.get(WORKSPACES)).json()["items"]
        ]
        unknown = (await http.get(f"{CLUSTERS}/{unique('never')}")).json()["error"]["message"]
        theirs = (await http.get(secured.path)).json()["error"]["message"]
        assert theirs == unknown.replace(unknown.split("'")[1], secured.cluster)
        assert (await http.delete(secured.path)).status_code == 404
        assert secured.cluster not in [c["id"] for c in (await http.get(CLUSTERS)).json()["items"]]

        # Names are unique within an organization: the same name is another cluster here.
        created = await http.post(CLUSTERS, json={"name": secured.cluster, "locationId": "hel1"})
        assert created.status_code == 202, created.text
        own = await stack.wait_status(http, secured.cluster, "ready")
        assert (own["locationId"], own["organization"]) == ("hel1", other)
        # Workspace names too: theirs is no conflict here, it is another workspace (never a 409
        # that would tell them it exists elsewhere).
        same = await http.post(WORKSPACES, json=notebook(secured.workspace, secured.cluster))
        assert same.status_code == 202, same.text
        mine_too = await stack.wait_workspace(http, secured.workspace, "Running")
        assert (
            mine_too["webUi"]
            != (await stack.http(secured.app, secured.manager).get(secured.workspace_path)).json()[
                "webUi"
            ]
        )
        await http.delete(secured.path)
        await stack.wait_gone(http, secured.cluster)
    still = await stack.http(secured.app, secured.manager).get(secured.path)
    assert (still.json()["locationId"], still.json()["status"]) == ("fra1", "ready")
    mine_ws = await stack.http(secured.app, secured.manager).get(secured.workspace_path)
    assert (mine_ws.json()["phase"], mine_ws.json()["cluster"]) == ("Running", secured.cluster)
    for organization in (secured.organization, other):
        workflow_id = cluster_workflow_id(secured.cluster, organization)
        assert (await stack.temporal.get_workflow_handle(workflow_id).describe()).id == workflow_id


def _decoded(value: Any) -> Iterator[str]:
    """Every string in a history's JSON, and what each base64 payload decodes to."""
    if isinstance(value, dict):
        for item in value.values():
            yield from _decoded(item)
    elif isinstance(value, list):
        for item in value:
            yield from _decoded(item)
    elif isinstance(value, str):
        yield value
        with contextlib.suppress(binascii.Error, ValueError):
            yield base64.b64decode(value, validate=True).decode("utf-8", "replace")


async def test_keys_and_tokens_never_reach_logs_or_histories(
    api_stack: ApiStack,
    api_logs: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    organization = unique("secret")
    key = await api_stack.key(organization)
    key_secret = key.split("_")[2]
    name = unique("quiet")
    app = api_stack.app()
    async with api_stack.http(app, key) as http:
        await api_stack.ready_cluster(
            http, name, pools=[{"name": "gpu", "sku": {"gpuModelId": GPU}, "count": 1}]
        )
        await http.patch(f"{CLUSTERS}/{name}/node-pools/gpu", json={"count": 2})
        await api_stack.wait_status(http, name, "ready")
        token = (await http.post(f"{CLUSTERS}/{name}/token")).json()["status"]["token"]
        kubeconfig = (await http.get(f"{CLUSTERS}/{name}/kubeconfig")).json()
        embedded = kubeconfig["users"][0]["user"]["token"]
        await http.get(f"{CLUSTERS}/{name}?api_key={key}")  # a key put where it does not belong
        await http.delete(f"{CLUSTERS}/{name}")
        await api_stack.wait_gone(http, name)
    secrets = {"key": key, "key secret": key_secret, "token": token, "kubeconfig token": embedded}

    # Everything logged in this process, less the test client's own request lines (httpx logs
    # the URL it was asked for, query included: that is the client's log, not the server's).
    records = [
        record.getMessage()
        for record in api_logs.records
        if not (record.name == "httpx" and BASE_URL in record.getMessage())
    ]
    output = capfd.readouterr()
    for what, secret in secrets.items():
        assert not any(secret in text for text in [*records, output.out, output.err]), what
    assert any(f"key={key.split('_')[1]}" in text for text in records), (
        "the access log names the key id"
    )

    # Every history of the namespace (every run of every workflow this session's tests started),
    # not only this organization's.
    histories = []
    ours = 0
    async for execution in api_stack.temporal.list_workflows():
        handle = api_stack.temporal.get_workflow_handle(execution.id, run_id=execution.run_id)
        histories.append(json.loads((await handle.fetch_history()).to_json()))
        ours += execution.id.startswith(f"cluster/{organization}/")
    assert ours >= 1, "this organization's workflow is among them"
    texts = [text for history in histories for text in _decoded(history)]
    for what, secret in secrets.items():
        assert not any(secret in text for text in texts), f"{what} in a workflow history"

    stored = await call(
        kube_client.CoreV1Api(api_stack.management).read_namespaced_secret,
        secret_name(key.split("_")[1]),
        api_stack.store.namespace,
    )
    stored_texts = list(_decoded(kube_client.ApiClient().sanitize_for_serialization(stored)))
    assert not any(key_secret in text for text in stored_texts), "the Secret holds a hash only"


async def test_a_secret_prompt_answer_reaches_no_history_and_no_log(
    secured: Secured,
    api_logs: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    stack = secured.stack
    planted = "planted-" + unique("pw")
    name = unique("sealed")
    async with stack.http(secured.app, secured.manager) as http:
        deployed = await http.post(WORKSPACES, json=notebook(name, secured.cluster, planted))
        assert deployed.status_code == 202, deployed.text
        await stack.wait_workspace(http, name, "Running")
        assert (await http.post(f"{WORKSPACES}/{name}/suspend")).status_code == 202
        await stack.wait_workspace(http, name, "Suspended")
        assert (await http.post(f"{WORKSPACES}/{name}/resume")).status_code == 202
        running = await stack.wait_workspace(http, name, "Running")
        listed = (await http.get(WORKSPACES)).text
        # It reached the chart, through the values Secret beside the ServiceSet.
        secret = await call(
            kube_client.CoreV1Api(stack.management).read_namespaced_secret,
            workspace_values_secret_name(secured.organization, secured.cluster, name),
            NAMESPACE,
        )
        assert planted in base64.b64decode(secret.data["values"]).decode()
        assert (await http.delete(f"{WORKSPACES}/{name}")).status_code == 202
        await stack.wait_workspace_gone(http, name)
    assert planted not in json.dumps(running) + listed

    records = [
        record.getMessage()
        for record in api_logs.records
        if not (record.name == "httpx" and BASE_URL in record.getMessage())
    ]
    output = capfd.readouterr()
    assert not any(planted in text for text in [*records, output.out, output.err])
    assert any(f"POST {WORKSPACES} 202" in text for text in records), "the access log ran"

    scanned = []
    async for execution in stack.temporal.list_workflows():
        handle = stack.temporal.get_workflow_handle(execution.id, run_id=execution.run_id)
        text = history_text(await handle.fetch_history())
        assert planted not in text, f"{execution.id} holds the planted answer"
        workflow_id = f"workspace/{secured.organization}/{name}"
        if execution.id == workflow_id:
            # The scan reads payloads: the sealed answer's scope is there, in the clear.
            assert f"{workflow_id}/notebookPassword" in text
        scanned.append(execution.id)
    assert f"workspace/{secured.organization}/{name}" in scanned
