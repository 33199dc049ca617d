"""Every endpoint of the HTTP API through the real ASGI app, against the dev server, the sim and the
worker: what each answers (202, 200) and every refusal (400, 401, 403, 404, 409, 422, 429, 503),
with colonyctl's messages."""

from __future__ import annotations

import asyncio
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from clients.errors import UnavailableError
from infra.config import ColonySettings
from sim.hostprovider.inventory import Sku
from tests.api.conftest import GPU, ApiStack
from tests.conftest import venv_binary
from tests.helpers import eventually, unique

pytestmark = [pytest.mark.e2e]

CLUSTERS = "/v1/kubernetes/clusters"
POOL = {"name": "gpu", "sku": {"gpuModelId": GPU}, "count": 1}


def error_of(response: httpx.Response) -> dict[str, Any]:
    """The error body, checked for its shape."""
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "field", "message"}, body
    detail: dict[str, Any] = body["error"]
    return detail


async def test_catalog_lists_what_each_location_stocks(api_stack: ApiStack) -> None:
    key = await api_stack.key(unique("org"), "kubernetes:read")
    async with api_stack.http(api_stack.app(), key) as http:
        locations = (await http.get("/v1/locations")).json()["items"]
        gpus = (await http.get("/v1/gpu-models")).json()["items"]
        cpus = (await http.get("/v1/cpu-skus")).json()["items"]
        fra1 = await http.get("/v1/locations/fra1")
        unknown = await http.get("/v1/locations/atlantis")
    inventory = api_stack.world.inventory
    assert {loc["id"] for loc in locations} == {"fra1", "hel1", "ber1"}
    h100 = next(g for g in gpus if g["id"] == GPU)
    stock = {s["locationId"]: s for s in h100["stock"]}
    assert stock["fra1"]["total"] == len(inventory.hosts(location="fra1", gpu_model_id=GPU))
    assert stock["fra1"]["free"] == len(
        inventory.hosts(location="fra1", gpu_model_id=GPU, state="free")
    )
    assert {c["id"] for c in cpus} == {"cpu-32c-256g", "cpu-64c-512g"}
    assert fra1.status_code == 200
    assert {s["id"] for s in fra1.json()["skus"]} >= {GPU, "cpu-32c-256g"}
    assert unknown.status_code == 404
    assert error_of(unknown)["message"].startswith("location: unknown location 'atlantis'")


async def test_a_cluster_from_create_to_404(api_stack: ApiStack) -> None:
    key = await api_stack.key(unique("org"))
    name = unique("life")
    async with api_stack.http(api_stack.app(), key) as http:
        created = await http.post(
            CLUSTERS,
            json={
                "name": name,
                "locationId": "fra1",
                "nodePools": [{"name": "gpu", "sku": {"gpuModelId": GPU}, "count": 2}],
            },
        )
        assert created.status_code == 202, created.text
        accepted = created.json()
        assert (accepted["id"], accepted["status"]) == (name, "creating")
        assert created.headers["Location"] == f"{CLUSTERS}/{name}"
        assert "/workflows/cluster%2F" in accepted["webUi"]

        ready = await api_stack.wait_status(http, name, "ready")
        assert ready["kubernetesVersion"] == "v1.37.1"
        assert ready["nodePools"][0]["sku"] == {"gpuModelId": GPU}
        assert ready["nodePools"][0]["readyCount"] == 2
        assert "kubeconfig" not in ready
        assert "heldHosts" not in ready

        async def listed() -> list[str]:
            return [c["id"] for c in (await http.get(CLUSTERS)).json()["items"]]

        # The list reads Temporal's visibility, which may trail a start by a moment.
        await eventually(listed, until=lambda ids: ids == [name], timeout=10, what="listed")

        pools = (await http.get(f"{CLUSTERS}/{name}/node-pools")).json()["items"]
        assert [(p["name"], p["count"]) for p in pools] == [("gpu", 2)]
        assert (await http.get(f"{CLUSTERS}/{name}/node-pools/gpu")).json()["readyCount"] == 2
        nodes = (await http.get(f"{CLUSTERS}/{name}/nodes")).json()["items"]
        assert {(n["pool"], n["state"], n["kubernetesStatus"]) for n in nodes} == {
            ("gpu", "joined", "Ready")
        }
        node = (await http.get(f"{CLUSTERS}/{name}/nodes/{nodes[0]['hostId']}")).json()
        assert node["name"] == nodes[0]["name"]

        added = await http.post(
            f"{CLUSTERS}/{name}/node-pools",
            json={"name": "cpu", "sku": {"cpuSku": "cpu-32c-256g"}, "count": 1},
        )
        assert added.status_code == 202, added.text
        assert (added.json()["kind"], added.json()["status"]) == ("add_node_pool", "updating")
        scaled = await http.patch(f"{CLUSTERS}/{name}/node-pools/gpu", json={"count": 3})
        assert scaled.status_code == 202, scaled.text
        again = await http.post(f"{CLUSTERS}/{name}/node-pools/gpu", json={"count": 3})
        assert again.status_code == 202, again.text
        await api_stack.wait_status(http, name, "ready")
        nodes = (await http.get(f"{CLUSTERS}/{name}/nodes")).json()["items"]
        gpu_node = next(n for n in nodes if n["pool"] == "gpu")
        removed = await http.delete(
            f"{CLUSTERS}/{name}/nodes/{gpu_node['name']}", params={"drain": "false"}
        )
        assert removed.status_code == 202, removed.text
        dropped = await http.delete(f"{CLUSTERS}/{name}/node-pools/cpu")
        assert dropped.status_code == 202, dropped.text
        ready = await api_stack.wait_status(http, name, "ready")
        assert [(p["name"], p["count"]) for p in ready["nodePools"]] == [("gpu", 2)]

        operations = (await http.get(f"{CLUSTERS}/{name}/operations")).json()["items"]
        kinds = [(op["request"]["kind"], op["state"]) for op in operations]
        assert kinds[0] == ("create_cluster", "succeeded")
        assert ("delete_node", "succeeded") in kinds
        first = await http.get(f"{CLUSTERS}/{name}/operations/{operations[0]['id']}")
        assert first.json()["webUi"] == accepted["webUi"]

        deleting = await http.delete(f"{CLUSTERS}/{name}")
        assert deleting.status_code == 202
        assert deleting.json()["status"] == "deleting"
        repeated = await http.delete(f"{CLUSTERS}/{name}")
        assert repeated.status_code in (202, 404)
        if repeated.status_code == 202:
            assert repeated.json()["operationId"] == deleting.json()["operationId"]
        await api_stack.wait_gone(http, name)
        gone = await http.delete(f"{CLUSTERS}/{name}")
        assert gone.status_code == 404
        assert error_of(gone) == {
            "code": "not_found",
            "field": "cluster",
            "message": f"cluster: cluster '{name}' not found",
        }


async def test_a_pool_waiting_for_hosts_is_waiting_never_ready(api_stack: ApiStack) -> None:
    """Asked to wait for capacity, a pool whose hosts are not free yet shows the cluster's status
    `waiting` (its reason, the pool's `waitingForHosts`) until they are, then `ready`; an unknown
    pool is refused naming the pools there are."""
    key = await api_stack.key(unique("org"))
    name = unique("waits")
    world = api_stack.world
    async with api_stack.http(api_stack.app(), key) as http:
        await api_stack.ready_cluster(
            http, name, pools=[{"name": "cpu", "sku": {"cpuSku": "cpu-64c-512g"}, "count": 1}]
        )
        hold = unique("hold")
        free = len(world.inventory.hosts(location="fra1", gpu_model_id=GPU, state="free"))
        if free:  # someone else holds every free H100 of fra1
            world.inventory.claim(hold, "fra1", Sku(gpu_model_id=GPU), free, "someone")
        try:
            pool = {"name": "gpu", "sku": {"gpuModelId": GPU}, "count": 1}
            added = await http.post(
                f"{CLUSTERS}/{name}/node-pools", json={**pool, "waitForCapacity": True}
            )
            assert added.status_code == 202, added.text
            waiting = await api_stack.wait_status(http, name, "waiting")
            assert waiting["reason"] == f"node pool 'gpu' waits for 1 free host(s) of gpu:{GPU}"
            gpu = (await http.get(f"{CLUSTERS}/{name}/node-pools/gpu")).json()
            assert (gpu["waitingForHosts"], gpu["readyCount"]) == (1, 0)
            listed = (await http.get(CLUSTERS)).json()["items"]
            assert [c["status"] for c in listed if c["id"] == name] == ["waiting"]
            unknown = await http.get(f"{CLUSTERS}/{name}/node-pools/nosuch")
            assert (unknown.status_code, error_of(unknown)["message"]) == (
                404,
                f"pool: node pool 'nosuch' does not exist in cluster '{name}' "
                "(its node pools: cpu, gpu)",
            )
        finally:
            if free:
                world.inventory.release_claim(hold)
        ready = await api_stack.wait_status(http, name, "ready")
        gpu_pool = next(p for p in ready["nodePools"] if p["name"] == "gpu")
        assert (gpu_pool["readyCount"], gpu_pool["waitingForHosts"]) == (1, 0)
        assert (await http.delete(f"{CLUSTERS}/{name}")).status_code == 202
        await api_stack.wait_gone(http, name)


async def test_the_same_idempotency_key_repeats_the_first_answer(api_stack: ApiStack) -> None:
    key = await api_stack.key(unique("org"))
    name = unique("idem")
    body = {"name": name, "locationId": "fra1"}
    async with api_stack.http(api_stack.app(), key) as http:
        first = await http.post(CLUSTERS, json=body, headers={"Idempotency-Key": "create-1"})
        again = await http.post(CLUSTERS, json=body, headers={"Idempotency-Key": "create-1"})
        other = await http.post(CLUSTERS, json=body, headers={"Idempotency-Key": "create-2"})
        assert (first.status_code, again.status_code) == (202, 202), again.text
        assert again.json()["repeated"] is True
        assert again.json()["operationId"] == first.json()["operationId"]
        assert other.status_code == 409
        await api_stack.wait_status(http, name, "ready")
        await http.delete(f"{CLUSTERS}/{name}")
        await api_stack.wait_gone(http, name)


async def test_bad_bodies_are_400_or_422_with_colonyctls_messages(api_stack: ApiStack) -> None:
    key = await api_stack.key(unique("org"))
    async with api_stack.http(api_stack.app(), key) as http:

        async def refused(body: Any, *, raw: bytes | None = None) -> tuple[int, dict[str, Any]]:
            if raw is not None:
                response = await http.post(
                    CLUSTERS, content=raw, headers={"Content-Type": "application/json"}
                )
            else:
                response = await http.post(CLUSTERS, json=body)
            return response.status_code, error_of(response)

        assert await refused(None, raw=b"{not json") == (
            400,
            {
                "code": "bad_request",
                "field": "body",
                "message": "body: not valid JSON: Expecting property name enclosed in double "
                "quotes: line 1 column 2 (char 1)",
            },
        )
        assert (await refused(["a"]))[0] == 400
        assert (await refused(None, raw=b""))[1]["message"] == "body: a JSON object is required"
        status, error = await refused({"name": "x", "locationId": "fra1", "owner": "me"})
        assert (status, error["field"]) == (422, "owner")
        # Word for word what `colonyctl cluster create -f` says of the same file.
        assert error["message"] == (
            "owner: unknown field 'owner' (known fields: locationId, name, nodePools, "
            "waitForCapacity)"
        )
        assert await refused({"name": "Bad", "locationId": "fra1"}) == (
            422,
            {
                "code": "invalid",
                "field": "name",
                "message": "name: cluster name 'Bad' may contain only lowercase letters, digits "
                "and hyphens",
            },
        )
        pool = {"name": "gpu", "sku": {"gpuModelId": GPU}, "count": 0}
        status, error = await refused({"name": "x", "locationId": "fra1", "nodePools": [pool]})
        assert (status, error["field"]) == (422, "nodePools[0].count")
        assert error["message"] == (
            "nodePools[0].count: a node pool's count must be from 1 to 100, got 0"
        )
        status, error = await refused({"name": "x", "locationId": "atlantis"})
        assert (status, error["field"]) == (422, "locationId")
        # More than fra1 has in all: no wait can serve it, so none is advised.
        pool["count"] = 13
        for wait in (False, True):
            body = {"name": "x", "locationId": "fra1", "nodePools": [pool]}
            status, error = await refused({**body, "waitForCapacity": wait})
            assert (status, error["field"]) == (422, "nodePools[0].count")
            assert error["message"] == (
                f"nodePools[0].count: 13 hosts of {GPU} asked, location fra1 has 8 in all; "
                "ask for at most 8"
            )
        # Enough in all, too few free now: the advice names the API's own field.
        world = api_stack.world
        hold = unique("hold")
        free = len(world.inventory.hosts(location="fra1", gpu_model_id=GPU, state="free"))
        world.inventory.claim(hold, "fra1", Sku(gpu_model_id=GPU), free - 1, "someone")
        try:
            pool["count"] = 2
            status, error = await refused({"name": "x", "locationId": "fra1", "nodePools": [pool]})
        finally:
            world.inventory.release_claim(hold)
        assert status == 422
        assert error["message"] == (
            f"nodePools[0].count: 2 more host(s) of {GPU} needed in fra1, 1 free now (of 8); "
            "set waitForCapacity to true to queue and wait for them"
        )
        bad_query = await http.delete(f"{CLUSTERS}/x/nodes/n", params={"drain": "maybe"})
        assert bad_query.status_code == 422
        assert error_of(bad_query)["field"] == "drain"


@pytest.mark.parametrize(
    ("path", "body", "field", "message"),
    [
        pytest.param(
            "",
            {"name": "x", "locationId": "fra1", "nodePools": [{**POOL, "count": "3"}]},
            "nodePools[0].count",
            "must be an integer, not the string '3'",
            id="count-string",
        ),
        pytest.param(
            "",
            {"name": "x", "locationId": "fra1", "nodePools": [{**POOL, "count": True}]},
            "nodePools[0].count",
            "must be an integer, not the boolean true",
            id="count-boolean",
        ),
        pytest.param(
            "",
            {"name": "x", "locationId": "fra1", "waitForCapacity": "yes"},
            "waitForCapacity",
            "must be true or false, not the string 'yes'",
            id="wait-yes",
        ),
        pytest.param(
            "/{c}/node-pools/gpu", {"count": 2.0}, "count", "must be an integer, not the number 2",
            id="scale-float",
        ),
        pytest.param(
            "/{c}/node-pools/gpu", {"count": 2, "force": "true"}, "force",
            "must be true or false, not the string 'true'", id="force-string",
        ),
    ],
)  # fmt: skip
async def test_integers_and_booleans_are_strict(
    api_stack: ApiStack, path: str, body: dict[str, Any], field: str, message: str
) -> None:
    """As the OpenAPI document says: an integer is an integer, a boolean a boolean (issue 13)."""
    key = await api_stack.key(unique("org"))
    async with api_stack.http(api_stack.app(), key) as http:
        url = CLUSTERS + path.replace("{c}", unique("nobody"))
        method = "PATCH" if "node-pools" in path else "POST"
        response = await http.request(method, url, json=body)
    assert response.status_code == 422, response.text
    assert error_of(response) == {
        "code": "invalid",
        "field": field,
        "message": f"{field}: {message}",
    }


async def test_a_body_must_be_sent_as_json(api_stack: ApiStack) -> None:
    key = await api_stack.key(unique("org"))
    body = json.dumps({"name": unique("x"), "locationId": "fra1"}).encode()
    async with api_stack.http(api_stack.app(), key) as http:
        for media_type in ("text/plain", "application/x-www-form-urlencoded", None):
            headers = {"Content-Type": media_type} if media_type else {}
            response = await http.post(CLUSTERS, content=body, headers=headers)
            assert response.status_code == 415, (media_type, response.text)
            assert error_of(response) == {
                "code": "unsupported_media_type",
                "field": "body",
                "message": "body: must be sent as application/json, not "
                + (media_type or "without a Content-Type"),
            }
        charset = await http.post(
            CLUSTERS, content=b"[", headers={"Content-Type": "application/json; charset=utf-8"}
        )
        assert charset.status_code == 400, "JSON with a charset is JSON"
        empty = await http.post(
            f"{CLUSTERS}/{unique('nobody')}/operations/op-0001/cancel",
            headers={"Content-Type": "text/plain"},
        )
        assert empty.status_code == 404, "no body, nothing to refuse: the cluster is not found"


async def test_unknown_things_are_404(api_stack: ApiStack) -> None:
    key = await api_stack.key(unique("org"))
    name = unique("nf")
    async with api_stack.http(api_stack.app(), key) as http:
        await api_stack.ready_cluster(http, name)
        cases = {
            ("GET", f"{CLUSTERS}/{unique('nobody')}"): "cluster",
            ("GET", f"{CLUSTERS}/Not_A_Name"): "cluster",
            ("GET", f"{CLUSTERS}/{name}/node-pools/none"): "pool: ",
            ("PATCH", f"{CLUSTERS}/{name}/node-pools/none"): "pool: ",
            ("DELETE", f"{CLUSTERS}/{name}/node-pools/none"): "pool: ",
            ("GET", f"{CLUSTERS}/{name}/nodes/none"): "node: ",
            ("DELETE", f"{CLUSTERS}/{name}/nodes/none"): "node: ",
            ("GET", f"{CLUSTERS}/{name}/operations/op-9999"): "operation: ",
            ("POST", f"{CLUSTERS}/{name}/operations/op-9999/cancel"): "operation: ",
            ("GET", "/v1/nothing-here"): "no such endpoint",
        }
        for (method, path), prefix in cases.items():
            body = {"count": 2} if method == "PATCH" else None
            response = await http.request(method, path, json=body)
            assert response.status_code == 404, (method, path, response.text)
            assert error_of(response)["message"].startswith(prefix), response.text
        await http.delete(f"{CLUSTERS}/{name}")


async def test_conflicts_are_409(api_stack: ApiStack) -> None:
    key = await api_stack.key(unique("org"))
    name = unique("conflict")
    async with api_stack.http(api_stack.app(), key) as http:
        await api_stack.ready_cluster(http, name)
        taken = await http.post(CLUSTERS, json={"name": name, "locationId": "fra1"})
        assert taken.status_code == 409
        assert error_of(taken) == {
            "code": "conflict",
            "field": "name",
            "message": f"name: cluster '{name}' already exists (names are unique until a "
            "deletion completes)",
        }
        pool = {"name": "gpu", "sku": {"gpuModelId": GPU}, "count": 1}
        exists = await http.post(f"{CLUSTERS}/{name}/node-pools", json=pool)
        assert exists.status_code == 409
        assert error_of(exists) == {
            "code": "conflict",
            "field": "name",
            "message": f"name: node pool 'gpu' already exists in cluster '{name}'",
        }
        nodes = (await http.get(f"{CLUSTERS}/{name}/nodes")).json()["items"]
        last = await http.delete(f"{CLUSTERS}/{name}/nodes/{nodes[0]['name']}")
        assert last.status_code == 409
        assert "is the last node of node pool 'gpu'" in error_of(last)["message"]
        create_op = (await http.get(f"{CLUSTERS}/{name}/operations")).json()["items"][0]["id"]
        finished = await http.post(f"{CLUSTERS}/{name}/operations/{create_op}/cancel")
        assert finished.status_code == 409
        assert error_of(finished)["message"].endswith("has already succeeded")
        # A cluster being deleted refuses every other operation (a conflict); once the delete
        # completed, the cluster is simply not found.
        await http.delete(f"{CLUSTERS}/{name}")
        scale = await http.patch(f"{CLUSTERS}/{name}/node-pools/gpu", json={"count": 2})
        assert scale.status_code in (404, 409), scale.text


async def test_kubeconfig_and_token_work_with_kubectl(api_stack: ApiStack, tmp_path: Path) -> None:
    org = unique("org")
    key = await api_stack.key(org, "kubernetes:read", "kubernetes:connect")
    manager = await api_stack.key(org)
    name = unique("creds")
    app = api_stack.app()
    async with api_stack.http(app, manager) as admin, api_stack.http(app, key) as http:
        await api_stack.ready_cluster(admin, name)
        before = datetime.now(UTC)
        credential = await http.post(f"{CLUSTERS}/{name}/token")
        assert credential.status_code == 200, credential.text
        assert credential.headers["Cache-Control"] == "no-store"
        exec_credential = credential.json()
        assert exec_credential["apiVersion"] == "client.authentication.k8s.io/v1"
        expiry = datetime.fromisoformat(
            exec_credential["status"]["expirationTimestamp"].replace("Z", "+00:00")
        )
        assert timedelta(minutes=55) < expiry - before <= timedelta(hours=1, minutes=1)

        kubeconfig = await http.get(f"{CLUSTERS}/{name}/kubeconfig")
        assert kubeconfig.status_code == 200, kubeconfig.text
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(kubeconfig.json()))
        process = await asyncio.create_subprocess_exec(
            venv_binary("kubectl"), "--kubeconfig", str(path), "get", "nodes", "-o", "name",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=dict(os.environ),
        )  # fmt: skip
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
        assert process.returncode == 0, stderr.decode()
        assert stdout.decode().startswith("node/")
        await admin.delete(f"{CLUSTERS}/{name}")


async def test_missing_and_unknown_keys_are_401(api_stack: ApiStack) -> None:
    key = await api_stack.key(unique("org"))
    key_id = key.split("_")[1]
    wrong_secret = f"colony_{key_id}_{'0' * 48}"
    unknown = f"colony_{'a' * 12}_{'0' * 48}"
    app = api_stack.app()
    cases = {
        "none": {},
        "not bearer": {"Authorization": f"Basic {key}"},
        "malformed": {"Authorization": "Bearer hello"},
        "unknown": {"Authorization": f"Bearer {unknown}"},
        "wrong secret": {"Authorization": f"Bearer {wrong_secret}"},
    }
    async with api_stack.http(app) as http:
        for case, headers in cases.items():
            response = await http.get(CLUSTERS, headers=headers)
            assert response.status_code == 401, case
            assert error_of(response)["code"] == "unauthenticated", case
            assert key not in response.text
        assert (
            await http.get(CLUSTERS, headers={"Authorization": f"Bearer {key}"})
        ).status_code == 200


async def test_a_missing_permission_is_403(api_stack: ApiStack) -> None:
    key = await api_stack.key(unique("org"), "kubernetes:read")
    async with api_stack.http(api_stack.app(), key) as http:
        response = await http.post(CLUSTERS, json={"name": unique("x"), "locationId": "fra1"})
    assert response.status_code == 403
    assert error_of(response)["message"] == (
        f"API key {key.split('_')[1]} lacks the permission Kubernetes: Manage (kubernetes:manage)"
    )


async def test_over_its_rate_an_organization_gets_429_with_retry_after(
    api_stack: ApiStack,
) -> None:
    org = unique("org")
    key, other = await api_stack.key(org), await api_stack.key(org)
    app = api_stack.app(rate=0.5, burst=2, queue=0)
    async with api_stack.http(app, key) as http:
        statuses = [(await http.get("/v1/api-key")).status_code for _ in range(3)]
        limited = await http.get("/v1/api-key")
        assert statuses == [200, 200, 429]
        assert limited.status_code == 429
        assert limited.headers["Retry-After"] == "2"
        assert error_of(limited)["code"] == "rate_limited"
        same = await http.get("/v1/api-key", headers={"Authorization": f"Bearer {other}"})
        assert same.status_code == 429, "an organization's keys share its rate"
        elsewhere = await http.get(
            "/v1/api-key", headers={"Authorization": f"Bearer {await api_stack.key(unique('o'))}"}
        )
        assert elsewhere.status_code == 200, "each organization has its own"


async def test_temporal_out_of_reach_is_503(api_stack: ApiStack) -> None:
    async def unreachable() -> Any:
        raise UnavailableError("temporal: cannot reach 127.0.0.1:1: connection refused")

    key = await api_stack.key(unique("org"))
    async with api_stack.http(api_stack.app(connect=unreachable), key) as http:
        response = await http.get(f"{CLUSTERS}/anything")
        created = await http.post(CLUSTERS, json={"name": unique("x"), "locationId": "fra1"})
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "5"
    assert error_of(response) == {
        "code": "unavailable",
        "field": None,
        "message": "temporal: cannot reach 127.0.0.1:1: connection refused",
    }
    assert created.status_code == 503


async def test_a_temporal_client_that_cannot_connect_is_503(api_stack: ApiStack) -> None:
    from clients.temporal import connect

    settings = ColonySettings.from_env({**api_stack.env, "TEMPORAL_ADDRESS": "127.0.0.1:9"})
    key = await api_stack.key(unique("org"))
    app = api_stack.app(connect=lambda: connect(settings, hint=""))  # as `python -m api`
    async with api_stack.http(app, key) as http:
        response = await http.get(CLUSTERS)
    assert response.status_code == 503
    # One line, the reason without the transport's debug text, and no colonyctl hint: the API's
    # callers cannot change its settings.
    assert error_of(response) == {
        "code": "unavailable",
        "field": None,
        "message": "temporal: cannot reach 127.0.0.1:9: connection refused",
    }


async def test_the_host_provider_out_of_reach_is_503(api_stack: ApiStack) -> None:
    key = await api_stack.key(unique("org"))
    app = api_stack.app()
    app.state.colony.settings = ColonySettings.from_env(
        {
            **api_stack.env,
            "COLONY_HOST_PROVIDER_URL": "http://127.0.0.1:9",
            "COLONY_HOST_PROVIDER_API_KEY": "k",
        }
    )
    async with api_stack.http(app, key) as http:
        response = await http.get("/v1/locations")
    assert response.status_code == 503
    assert error_of(response)["message"].startswith("cannot reach the host provider")


async def test_the_openapi_document_and_docs_are_served(api_stack: ApiStack) -> None:
    async with api_stack.http(api_stack.app()) as http:
        schema = (await http.get("/openapi.json")).json()
        docs = await http.get("/docs")
        script = await http.get("/docs-assets/swagger-ui-bundle.js")
        health = await http.get("/healthz")
    assert "/v1/kubernetes/clusters/{cluster_id}/kubeconfig" in schema["paths"]
    assert schema["components"]["securitySchemes"]["ApiKey"]["scheme"] == "bearer"
    assert docs.status_code == 200
    assert "/docs-assets/swagger-ui-bundle.js" in docs.text, "no CDN: make run works offline"
    assert script.status_code == 200
    assert health.json() == {"status": "ok", "service": "colony-api"}
    assert json.dumps(schema)


async def test_healthz_names_the_development_state_it_serves(api_stack: ApiStack) -> None:
    """What `make run` asks before reusing what listens on COLONY_API_PORT."""
    async with api_stack.http(api_stack.app(dev_state_id="state-1")) as http:
        health = await http.get("/healthz")
    assert health.json() == {"status": "ok", "service": "colony-api", "devStateId": "state-1"}
