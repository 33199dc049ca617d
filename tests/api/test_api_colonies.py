"""`/v1/colonies` through the real ASGI app on the dev server, the sim and the worker (issue 13):

- a colony is applied (202, `created`), read, listed and re-applied (`created: false`, its apply
  queued) by its organization; its cluster is one of the organization's clusters; its workflow id
  is in every answer (`workflowId`), as remote mode takes it;
- another organization finds nothing (404 on get and delete, an empty list), and may use the same
  name for a colony of its own;
- Read lists and gets, Manage applies and deletes (403 otherwise);
- a raw ClusterDeployment spec (any template, credential) is the operator's: refused (422);
- the delete deletes the colony's clusters, then the colony is not found;
- the OpenAPI document describes the routes and the request's schema.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.conftest import CPU_SKU, ApiStack
from tests.helpers import eventually, unique

pytestmark = [pytest.mark.e2e]

COLONIES = "/v1/colonies"
CLUSTERS = "/v1/kubernetes/clusters"


def colony(name: str, *entries: str) -> dict[str, Any]:
    return {
        "name": name,
        "colonyClusters": [
            {
                "clusterName": entry,
                "locationId": "fra1",
                "nodePools": [{"name": "cpu", "sku": {"cpuSku": CPU_SKU}, "count": 1}],
            }
            for entry in entries
        ],
    }


def error_of(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


async def wait_phase(http: httpx.AsyncClient, name: str, phase: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any]:
        got = await http.get(f"{COLONIES}/{name}")
        assert got.status_code == 200, got.text
        body: dict[str, Any] = got.json()
        assert body["phase"] != "Degraded", body
        return body

    return await eventually(
        probe, until=lambda body: body["phase"] == phase, timeout=120, what=f"{name} {phase}"
    )


async def test_a_colony_from_apply_to_404_within_its_organization(api_stack: ApiStack) -> None:
    mine, theirs = unique("col-a"), unique("col-b")
    manager = await api_stack.key(mine)
    reader = await api_stack.key(mine, "kubernetes:read")
    stranger = await api_stack.key(theirs)
    app = api_stack.app()
    name = unique("lab")
    async with (
        api_stack.http(app, manager) as http,
        api_stack.http(app, reader) as read_only,
        api_stack.http(app, stranger) as other,
    ):
        refused = await read_only.post(COLONIES, json=colony(name, "a"))
        assert refused.status_code == 403, refused.text

        applied = await http.post(COLONIES, json=colony(name, "a"))
        assert applied.status_code == 202, applied.text
        body = applied.json()
        workflow_id = f"colony/{mine}/{name}"
        assert (body["id"], body["created"], body["workflowId"]) == (name, True, workflow_id)
        assert body["webUi"].endswith(workflow_id.replace("/", "%2F"))
        assert applied.headers["Location"] == f"{COLONIES}/{name}"

        ready = await wait_phase(read_only, name, "Ready")
        assert (ready["organization"], ready["workflowId"]) == (mine, workflow_id)
        assert [c["cluster"] for c in ready["clusters"]] == [f"{name}--a"]
        cluster = (await http.get(f"{CLUSTERS}/{name}--a")).json()
        assert (cluster["organization"], cluster["workflowId"]) == (
            mine,
            f"cluster/{mine}/{name}--a",
        )
        listed = (await read_only.get(COLONIES)).json()["items"]
        assert [(c["id"], c["workflowId"]) for c in listed] == [(name, workflow_id)]

        again = await http.post(COLONIES, json=colony(name, "a"))
        assert again.status_code == 202, again.text
        assert (again.json()["created"], again.json()["operationId"] != "") == (False, True)

        # Another organization: nothing to see, nothing to delete, the name is free to use.
        for method in ("GET", "DELETE"):
            hidden = await other.request(method, f"{COLONIES}/{name}")
            assert hidden.status_code == 404, hidden.text
            assert error_of(hidden) == {
                "code": "not_found",
                "field": "colony",
                "message": f"colony: colony '{name}' not found",
            }
        assert (await other.get(COLONIES)).json()["items"] == []
        assert (await other.get(f"{CLUSTERS}/{name}--a")).status_code == 404
        raw = colony(name, "a")
        raw["colonyClusters"][0]["clusterDeploymentSpec"] = {"template": "anything"}
        chosen = await other.post(COLONIES, json=raw)
        assert chosen.status_code == 422
        assert error_of(chosen)["field"] == "colonyClusters[0].clusterDeploymentSpec"
        own = await other.post(COLONIES, json=colony(name, "b"))
        assert own.status_code == 202, own.text
        assert own.json()["workflowId"] == f"colony/{theirs}/{name}"

        assert (await read_only.delete(f"{COLONIES}/{name}")).status_code == 403
        deleted = await http.delete(f"{COLONIES}/{name}")
        assert deleted.status_code == 202, deleted.text
        assert (deleted.json()["kind"], deleted.json()["workflowId"]) == ("delete", workflow_id)
        assert (await other.delete(f"{COLONIES}/{name}")).status_code == 202
        for client, cluster_name in ((http, f"{name}--a"), (other, f"{name}--b")):

            async def gone(client: httpx.AsyncClient = client) -> int:
                return (await client.get(f"{COLONIES}/{name}")).status_code

            await eventually(gone, until=lambda code: code == 404, timeout=120, what="deleted")
            await api_stack.wait_gone(client, cluster_name, timeout=120)


async def test_the_openapi_document_describes_the_colonies(api_stack: ApiStack) -> None:
    async with api_stack.http(api_stack.app()) as http:
        document = (await http.get("/openapi.json")).json()
    paths = document["paths"]
    assert set(paths[COLONIES]) == {"get", "post"}
    assert set(paths[f"{COLONIES}/{{colony_id}}"]) == {"get", "delete"}
    body = paths[COLONIES]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/ColonyApplyRequestInput"}
    schema = document["components"]["schemas"]["ColonyApplyRequestInput"]
    assert (schema["additionalProperties"], sorted(schema["properties"])) == (
        False,
        ["colonyClusters", "name"],
    )
    assert "415" in paths[COLONIES]["post"]["responses"]
