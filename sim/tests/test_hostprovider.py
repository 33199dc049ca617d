"""The simulated host provider over real HTTP (httpx against the aiohttp server)."""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from sim.faults import FAULTS_PATH, FaultInjector
from sim.hostprovider.app import HostProviderServer, create_app
from sim.hostprovider.inventory import Inventory, InventoryFile, load_inventory
from tests.helpers import unique

API_KEY = "test-key"
DOC_NETS = [ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")]


@dataclass
class Provider:
    server: HostProviderServer
    client: httpx.AsyncClient
    faults: FaultInjector

    @property
    def inventory(self) -> Inventory:
        return self.server.inventory


@pytest.fixture
async def provider() -> AsyncIterator[Provider]:
    faults = FaultInjector.from_config({"seed": 7})
    server = HostProviderServer(load_inventory(), API_KEY, faults)
    await server.start()
    async with httpx.AsyncClient(
        base_url=server.url, headers={"Authorization": f"Bearer {API_KEY}"}
    ) as client:
        yield Provider(server, client, faults)
    await server.stop()


def _claim(location: str = "fra1", count: int = 2, **sku: str) -> dict[str, Any]:
    return {
        "location": location,
        "sku": sku or {"gpuModelId": "h100-80gb"},
        "count": count,
        "idempotencyKey": unique("claim"),
        "owner": "cluster-a",
    }


# ------------------------------------------------------------------ default inventory


def test_default_inventory_shape() -> None:
    inventory = load_inventory()
    assert len(inventory.locations) >= 2
    assert len(inventory.gpu_models) >= 3
    assert len(inventory.cpu_skus) >= 2
    hosts = inventory.hosts()
    assert len(hosts) >= 24
    for host in hosts:
        assert any(ipaddress.ip_address(host.address) in net for net in DOC_NETS)
        if host.gpu_model_id:
            assert host.gpu_count == 8
            assert host.gpu_product
        else:
            assert host.cpu_sku
    assert len({(h.address, h.ssh_port) for h in hosts}) == len(hosts)


@pytest.mark.parametrize(
    ("address", "port", "expected"),
    [
        pytest.param("192.0.2.10", 22, "fra1-h100-80gb-01", id="direct"),
        pytest.param("192.0.2.10", None, "fra1-h100-80gb-01", id="direct-any-port"),
        pytest.param("203.0.113.5", 2202, "ber1-a100-80gb-02", id="bastion-port"),
        pytest.param("203.0.113.5", 22, None, id="bastion-wrong-port"),
        pytest.param("192.0.2.250", 22, None, id="unknown"),
    ],
)
def test_host_by_address(address: str, port: int | None, expected: str | None) -> None:
    host = load_inventory().host_by_address(address, port)
    assert (host.id if host else None) == expected


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(
            {
                "locations": [{"id": "x", "name": "x"}],
                "cpuSkus": [{"id": "c", "name": "c", "cpuCores": 1, "memory": "1Gi"}],
                "hostGroups": [
                    {"location": "x", "cpuSku": "c", "count": 1, "firstAddress": "10.0.0.1"}
                ],
            },
            id="non-documentation-address",
        ),
        pytest.param(
            {
                "locations": [{"id": "x", "name": "x"}],
                "hostGroups": [
                    {"location": "x", "cpuSku": "nope", "count": 1, "firstAddress": "192.0.2.1"}
                ],
            },
            id="unknown-sku",
        ),
    ],
)
def test_inventory_rejects(data: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"documentation range|unknown SKU"):
        Inventory(InventoryFile.model_validate(data))


def test_load_inventory_from_file(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(
        "locations: [{id: a, name: A}]\n"
        "gpuModels: [{id: g, name: G, product: NVIDIA-G, memoryGib: 10}]\n"
        "hosts:\n"
        "  - {id: h1, location: a, gpuModelId: g, gpuCount: 8, gpuProduct: NVIDIA-G,"
        " cpuCores: 8, memory: 64Gi, address: 198.51.100.9, sshPort: 2222}\n"
    )
    inventory = load_inventory(path)
    host = inventory.host_by_address("198.51.100.9", 2222)
    assert host is not None
    assert host.id == "h1"


# ------------------------------------------------------------------ catalog and hosts


@pytest.mark.parametrize(
    ("path", "expected_id"),
    [
        pytest.param("/v1/locations", "fra1", id="locations"),
        pytest.param("/v1/gpu-models", "h100-80gb", id="gpu-models"),
        pytest.param("/v1/cpu-skus", "cpu-32c-256g", id="cpu-skus"),
    ],
)
async def test_catalog(provider: Provider, path: str, expected_id: str) -> None:
    response = await provider.client.get(path)
    assert response.status_code == 200
    assert expected_id in [item["id"] for item in response.json()["items"]]


async def test_gpu_model_fields(provider: Provider) -> None:
    items = (await provider.client.get("/v1/gpu-models")).json()["items"]
    h100 = next(m for m in items if m["id"] == "h100-80gb")
    assert h100["product"] == "NVIDIA-H100-80GB-HBM3"
    assert h100["gpusPerHost"] == 8


async def test_host_fields(provider: Provider) -> None:
    response = await provider.client.get("/v1/hosts/fra1-h100-80gb-01")
    assert response.status_code == 200
    host = response.json()
    assert host == {
        "id": "fra1-h100-80gb-01",
        "location": "fra1",
        "gpuModelId": "h100-80gb",
        "cpuSku": None,
        "gpuCount": 8,
        "gpuProduct": "NVIDIA-H100-80GB-HBM3",
        "cpuCores": 112,
        "memory": "2Ti",
        "address": "192.0.2.10",
        "sshPort": 22,
        "sshUser": "root",
        "state": "free",
        "claimedBy": None,
        "owner": None,
    }
    missing = await provider.client.get("/v1/hosts/nope")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "NotFound"


@pytest.mark.parametrize(
    ("params", "check"),
    [
        pytest.param({"location": "hel1"}, lambda h: h["location"] == "hel1", id="location"),
        pytest.param(
            {"gpuModelId": "l40s-48gb"}, lambda h: h["gpuModelId"] == "l40s-48gb", id="gpu-model"
        ),
        pytest.param(
            {"cpuSku": "cpu-64c-512g"}, lambda h: h["cpuSku"] == "cpu-64c-512g", id="cpu-sku"
        ),
        pytest.param({"state": "free"}, lambda h: h["state"] == "free", id="state-free"),
        pytest.param(
            {"location": "fra1", "gpuModelId": "a100-80gb"},
            lambda h: h["location"] == "fra1" and h["gpuModelId"] == "a100-80gb",
            id="combined",
        ),
    ],
)
async def test_host_filters(provider: Provider, params: dict[str, str], check: Any) -> None:
    response = await provider.client.get("/v1/hosts", params=params)
    assert response.status_code == 200
    items = response.json()["items"]
    assert items
    assert all(check(h) for h in items)
    everything = (await provider.client.get("/v1/hosts")).json()["items"]
    assert len([h for h in everything if check(h)]) == len(items)


async def test_host_filter_bad_state(provider: Provider) -> None:
    response = await provider.client.get("/v1/hosts", params={"state": "broken"})
    assert response.status_code == 422


# ------------------------------------------------------------------ claims


async def test_claim_is_idempotent(provider: Provider) -> None:
    body = _claim(count=3)
    first = await provider.client.post("/v1/claims", json=body)
    assert first.status_code == 201
    claim = first.json()
    assert claim["idempotencyKey"] == body["idempotencyKey"]
    assert claim["state"] == "active"
    assert len(claim["hosts"]) == 3
    assert all(h["state"] == "claimed" for h in claim["hosts"])
    assert all(h["claimedBy"] == body["idempotencyKey"] for h in claim["hosts"])
    assert all(h["owner"] == "cluster-a" for h in claim["hosts"])

    again = await provider.client.post("/v1/claims", json=body)
    assert again.status_code == 200
    assert again.json()["hostIds"] == claim["hostIds"]

    got = await provider.client.get(f"/v1/claims/{body['idempotencyKey']}")
    assert got.status_code == 200
    assert got.json()["hostIds"] == claim["hostIds"]

    claimed = await provider.client.get("/v1/hosts", params={"state": "claimed"})
    assert {h["id"] for h in claimed.json()["items"]} == set(claim["hostIds"])


async def test_claim_cpu_sku(provider: Provider) -> None:
    response = await provider.client.post(
        "/v1/claims", json=_claim(location="hel1", count=1, cpuSku="cpu-32c-256g")
    )
    assert response.status_code == 201
    (host,) = response.json()["hosts"]
    assert host["cpuSku"] == "cpu-32c-256g"
    assert host["gpuCount"] == 0


async def test_claim_key_reused_for_other_request(provider: Provider) -> None:
    body = _claim(count=1)
    assert (await provider.client.post("/v1/claims", json=body)).status_code == 201
    response = await provider.client.post("/v1/claims", json={**body, "count": 2})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "IdempotencyKeyReused"


async def test_claim_not_enough_free(provider: Provider) -> None:
    taken = await provider.client.post("/v1/claims", json=_claim(location="hel1", count=3))
    assert taken.status_code == 201
    response = await provider.client.post("/v1/claims", json=_claim(location="hel1", count=2))
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "InsufficientCapacity"
    assert error["free"] == 1
    assert error["requested"] == 2
    # all or none: the refused claim took nothing
    free = await provider.client.get(
        "/v1/hosts", params={"location": "hel1", "gpuModelId": "h100-80gb", "state": "free"}
    )
    assert len(free.json()["items"]) == 1


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(_claim(location="mars1"), id="unknown-location"),
        pytest.param(_claim(gpuModelId="b200"), id="unknown-gpu-model"),
        pytest.param(_claim(cpuSku="cpu-1c"), id="unknown-cpu-sku"),
        pytest.param(_claim(count=0), id="zero-count"),
        pytest.param(_claim(count=-1), id="negative-count"),
        pytest.param({**_claim(), "count": "two"}, id="count-not-int"),
        pytest.param({**_claim(), "sku": {}}, id="empty-sku"),
        pytest.param(
            {**_claim(), "sku": {"gpuModelId": "h100-80gb", "cpuSku": "cpu-32c-256g"}},
            id="two-skus",
        ),
        pytest.param({k: v for k, v in _claim().items() if k != "idempotencyKey"}, id="no-key"),
    ],
)
async def test_claim_invalid(provider: Provider, body: dict[str, Any]) -> None:
    response = await provider.client.post("/v1/claims", json=body)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "UnprocessableEntity"


async def test_claim_not_json(provider: Provider) -> None:
    response = await provider.client.post("/v1/claims", content=b"{nope")
    assert response.status_code == 400


async def test_unknown_claim(provider: Provider) -> None:
    assert (await provider.client.get("/v1/claims/none")).status_code == 404
    assert (await provider.client.delete("/v1/claims/none")).status_code == 404


async def test_release_claim(provider: Provider) -> None:
    body = _claim(location="fra1", count=2, gpuModelId="l40s-48gb")
    claim = (await provider.client.post("/v1/claims", json=body)).json()
    for _ in range(2):  # idempotent
        released = await provider.client.delete(f"/v1/claims/{body['idempotencyKey']}")
        assert released.status_code == 200
        assert released.json()["state"] == "released"
        assert all(h["state"] == "free" for h in released.json()["hosts"])
    for host_id in claim["hostIds"]:
        host = (await provider.client.get(f"/v1/hosts/{host_id}")).json()
        assert host["state"] == "free"
        assert host["claimedBy"] is None


async def test_release_host(provider: Provider) -> None:
    body = _claim(location="ber1", count=2, gpuModelId="a100-80gb")
    claim = (await provider.client.post("/v1/claims", json=body)).json()
    first, second = claim["hostIds"]
    for _ in range(2):  # releasing a free host is fine
        response = await provider.client.post(f"/v1/hosts/{first}/release")
        assert response.status_code == 200
        assert response.json()["state"] == "free"
    partly = (await provider.client.get(f"/v1/claims/{body['idempotencyKey']}")).json()
    assert partly["state"] == "active"
    await provider.client.post(f"/v1/hosts/{second}/release")
    done = (await provider.client.get(f"/v1/claims/{body['idempotencyKey']}")).json()
    assert done["state"] == "released"
    missing = await provider.client.post("/v1/hosts/nope/release")
    assert missing.status_code == 404


# ------------------------------------------------------------------ auth


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="none"),
        pytest.param({"Authorization": "Bearer wrong"}, id="wrong-bearer"),
        pytest.param({"X-API-Key": "wrong"}, id="wrong-api-key"),
        pytest.param({"Authorization": f"Basic {API_KEY}"}, id="not-bearer"),
    ],
)
async def test_unauthorized(provider: Provider, headers: dict[str, str]) -> None:
    async with httpx.AsyncClient(base_url=provider.server.url, headers=headers) as client:
        response = await client.get("/v1/hosts")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "Unauthorized"


async def test_x_api_key_accepted(provider: Provider) -> None:
    async with httpx.AsyncClient(
        base_url=provider.server.url, headers={"X-API-Key": API_KEY}
    ) as client:
        assert (await client.get("/v1/locations")).status_code == 200


def test_empty_api_key_refused() -> None:
    with pytest.raises(ValueError, match="API key"):
        create_app(load_inventory(), "")


# ------------------------------------------------------------------ faults


@pytest.mark.parametrize(
    ("config", "status", "code"),
    [
        pytest.param(
            {"throttle_rate": 1.0, "target": "hostprovider"},
            {429},
            "TooManyRequests",
            id="throttle",
        ),
        pytest.param(
            {"error_rate": 1.0, "error_codes": [500]}, {500}, "InternalError", id="error-500"
        ),
        pytest.param(
            {"error_rate": 1.0, "error_codes": [503]}, {503}, "ServiceUnavailable", id="error-503"
        ),
        pytest.param({"error_rate": 1.0, "path": "/v1/claims"}, {500, 503}, None, id="path-scoped"),
    ],
)
async def test_fault_rates(
    provider: Provider, config: dict[str, Any], status: set[int], code: str | None
) -> None:
    put = await provider.client.put(FAULTS_PATH, json=config)
    assert put.status_code == 200
    response = await provider.client.post("/v1/claims", json=_claim(count=1))
    assert response.status_code in status
    if code is not None:
        assert response.json()["error"]["code"] == code
    if response.status_code == 429:
        assert response.headers["Retry-After"] == "1"
    assert (await provider.client.get(FAULTS_PATH)).status_code == 200
    assert (await provider.client.delete(FAULTS_PATH)).status_code == 200
    assert (await provider.client.post("/v1/claims", json=_claim(count=1))).status_code == 201


async def test_fault_other_target_not_applied(provider: Provider) -> None:
    provider.faults.set_rates(error_rate=1.0)
    provider.faults.replace(provider.faults.config.model_copy(update={"target": "cluster-x"}))
    assert (await provider.client.get("/v1/locations")).status_code == 200


async def test_scripted_fault_then_success(provider: Provider) -> None:
    provider.faults.fail_next(503, times=1, target="hostprovider", path="/v1/claims", method="POST")
    body = _claim(count=1)
    failed = await provider.client.post("/v1/claims", json=body)
    assert failed.status_code == 503
    assert failed.json()["error"]["code"] == "ServiceUnavailable"
    # the failed attempt claimed nothing; the retry under the same key succeeds
    retried = await provider.client.post("/v1/claims", json=body)
    assert retried.status_code == 201


async def test_faults_need_no_key_and_are_not_faulted(provider: Provider) -> None:
    provider.faults.set_rates(error_rate=1.0)
    async with httpx.AsyncClient(base_url=provider.server.url) as anonymous:
        assert (await anonymous.get(FAULTS_PATH)).status_code == 200
        assert (await anonymous.delete(FAULTS_PATH)).status_code == 200
    assert (await provider.client.get("/v1/locations")).status_code == 200


async def test_server_context_manager() -> None:
    async with (
        HostProviderServer(load_inventory(), API_KEY) as server,
        httpx.AsyncClient(base_url=server.url, headers={"X-API-Key": API_KEY}) as client,
    ):
        assert (await client.get("/v1/locations")).status_code == 200
    with pytest.raises(RuntimeError):
        _ = server.url
