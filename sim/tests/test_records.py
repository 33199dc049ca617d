"""The world's records (`sim.records`): clients' creates, evictions (first and repeated) and hosts
changing hands, kept in order and served on GET /sim/v1/records by the API and host provider
servers; what is refused, dry-run, or made by the sim's own controllers is not recorded."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client

from sim.apiserver.auth import CertificateAuthority
from sim.apiserver.server import ClusterServer
from sim.apiserver.store import ClusterStore
from sim.hostprovider.app import HostProviderServer
from sim.hostprovider.inventory import load_inventory
from sim.records import RECORDS_PATH, EvictionRecord, HostRecord, ObjectCreated, WorldRecords
from sim.tests.conftest import call, make_api_client
from sim.tests.test_world_node_faults import child_api
from sim.timing import SimTiming
from sim.world import SimWorld, WorldConfig
from tests.helpers import unique

API_KEY = "records-key"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 1
        return self.now


def test_records_are_numbered_in_order_across_kinds() -> None:
    records = WorldRecords(clock=Clock())
    records.object_created(
        "c1", "", "secrets", {"kind": "Secret", "metadata": {"name": "s", "namespace": "ns"}}
    )
    records.host_changed("h1", "claimed", "key-1", "cluster/a")
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": {"nodeName": "n1"}}
    records.evicted("c1", pod, repeat=False)
    assert [r.seq for r in records.since()] == [1, 2, 3]
    assert [type(r) for r in records.since(1)] == [HostRecord, EvictionRecord]
    assert records.since(3) == []
    assert records.last_seq == 3
    (created,) = [r for r in records.since() if isinstance(r, ObjectCreated)]
    assert (created.cluster, created.resource, created.kind, created.namespace, created.name) == (
        "c1",
        "secrets",
        "Secret",
        "ns",
        "s",
    )
    assert created.at == 1001.0


def test_wire_is_camel_case_and_filtered_by_seq() -> None:
    records = WorldRecords()
    records.host_changed("h1", "claimed", "key-1", "cluster/a")
    records.host_changed("h1", "released", "key-1", "cluster/a")
    body = records.wire(1)
    assert body["next"] == 2
    assert body["dropped"] == 0
    assert [(h["hostId"], h["change"], h["claim"]) for h in body["hosts"]] == [
        ("h1", "released", "key-1")
    ]
    assert body["objectsCreated"] == body["evictions"] == []


def test_the_oldest_records_are_dropped_and_counted() -> None:
    records = WorldRecords(kept=2)
    for n in range(5):
        records.host_changed(f"h{n}", "claimed", "k")
    assert [r.seq for r in records.since()] == [4, 5]
    assert records.dropped == 3
    assert records.wire()["dropped"] == 3


# --- Through the API server ---------------------------------------------------------------------


@pytest.fixture
async def recorded() -> AsyncIterator[tuple[ClusterServer, WorldRecords]]:
    records = WorldRecords()
    name = unique("rec")
    server = ClusterServer(name, ClusterStore(name), CertificateAuthority(), records=records)
    await server.start()
    try:
        yield server, records
    finally:
        await server.stop()


def _pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": "x"}},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "busybox"}]},
    }


async def test_a_clients_creates_are_recorded_not_refusals_nor_dry_runs(
    recorded: tuple[ClusterServer, WorldRecords],
) -> None:
    server, records = recorded
    api = make_api_client(server)
    core = client.CoreV1Api(api)
    try:
        secret = {
            "metadata": {
                "name": "values",
                "labels": {"colony.dev/workspace": "nb"},
                "annotations": {"colony.dev/workflow-id": "workspace/nb"},
            },
            "stringData": {"password": "not-recorded"},
        }
        await asyncio.to_thread(core.create_namespaced_secret, "default", secret)
        with pytest.raises(client.ApiException) as refused:
            await asyncio.to_thread(core.create_namespaced_secret, "default", secret)
        assert refused.value.status == 409
        await asyncio.to_thread(
            core.create_namespaced_config_map,
            "default",
            {"metadata": {"name": "cm"}},
            dry_run="All",
        )
        await asyncio.to_thread(
            core.create_namespaced_config_map,
            "default",
            {"metadata": {"generateName": "gen-"}},
        )
    finally:
        api.close()
    created = [r for r in records.since() if isinstance(r, ObjectCreated)]
    assert [(r.cluster, r.resource, r.namespace, r.name[:4]) for r in created] == [
        (server.name, "secrets", "default", "valu"),
        (server.name, "configmaps", "default", "gen-"),
    ]
    assert created[0].labels == {"colony.dev/workspace": "nb"}
    assert created[0].annotations == {"colony.dev/workflow-id": "workspace/nb"}
    assert created[1].generate_name == "gen-"
    assert "not-recorded" not in repr(records.wire())


async def test_an_eviction_of_a_terminating_pod_is_recorded_as_a_repeat(
    recorded: tuple[ClusterServer, WorldRecords],
) -> None:
    server, records = recorded
    api = make_api_client(server)
    core = client.CoreV1Api(api)
    try:
        pod = await asyncio.to_thread(core.create_namespaced_pod, "default", _pod("p1"))
        since = records.last_seq
        eviction = {"metadata": {"name": "p1", "namespace": "default"}}
        await asyncio.to_thread(
            core.create_namespaced_pod_eviction, "p1", "default", eviction, dry_run="All"
        )
        # No kubelet runs here: the pod stays terminating for its grace period.
        for _ in range(2):
            await asyncio.to_thread(core.create_namespaced_pod_eviction, "p1", "default", eviction)
    finally:
        api.close()
    evictions = [r for r in records.since(since) if isinstance(r, EvictionRecord)]
    assert [(r.name, r.uid, r.node, r.repeat) for r in evictions] == [
        ("p1", pod.metadata.uid, "node-1", False),
        ("p1", pod.metadata.uid, "node-1", True),
    ]


async def test_records_are_served_over_http(
    recorded: tuple[ClusterServer, WorldRecords],
) -> None:
    server, records = recorded
    records.host_changed("h1", "claimed", "k1")
    records.host_changed("h2", "claimed", "k1")
    async with httpx.AsyncClient(base_url=server.url, verify=False) as http:
        answer = await http.get(RECORDS_PATH, params={"since": "1"})
        refused = await http.get(RECORDS_PATH, params={"since": "x"})
    assert answer.status_code == 200
    assert [h["hostId"] for h in answer.json()["hosts"]] == ["h2"]
    assert refused.status_code == 400


# --- The host provider ---------------------------------------------------------------------------


async def test_hosts_changing_hands_are_recorded() -> None:
    records = WorldRecords()
    server = HostProviderServer(load_inventory(records=records), API_KEY)
    await server.start()
    try:
        async with httpx.AsyncClient(
            base_url=server.url, headers={"Authorization": f"Bearer {API_KEY}"}
        ) as http:
            body = {
                "location": "fra1",
                "sku": {"gpuModelId": "h100-80gb"},
                "count": 2,
                "idempotencyKey": "claim-1",
                "owner": "cluster/a",
            }
            first = (await http.post("/v1/claims", json=body)).json()
            again = await http.post("/v1/claims", json=body)
            assert again.status_code == 200
            one, two = (host["id"] for host in first["hosts"])
            await http.post(f"/v1/hosts/{one}/release")
            await http.post(f"/v1/hosts/{one}/release")  # already free: nothing changes hands
            await http.delete("/v1/claims/claim-1")
            await http.delete("/v1/claims/claim-1")
            served = (await http.get(RECORDS_PATH)).json()
    finally:
        await server.stop()
    hosts = [r for r in records.since() if isinstance(r, HostRecord)]
    assert [(r.host_id, r.change, r.claim, r.owner) for r in hosts] == [
        (one, "claimed", "claim-1", "cluster/a"),
        (two, "claimed", "claim-1", "cluster/a"),
        (one, "claim-repeated", "claim-1", "cluster/a"),
        (two, "claim-repeated", "claim-1", "cluster/a"),
        (one, "released", "claim-1", "cluster/a"),
        (two, "released", "claim-1", "cluster/a"),
    ]
    assert len(served["hosts"]) == 6


# --- One world, one set of records ----------------------------------------------------------------


async def test_a_world_shares_its_records_with_child_clusters_and_the_host_provider(
    tmp_path: Path,
) -> None:
    """A client's create on a child cluster lands in the world's records, beside the management
    cluster's and the host provider's; the child's own system workloads (its controllers' creates)
    do not, and every server answers /sim/v1/records with the same records."""
    async with SimWorld(WorldConfig(state_dir=tmp_path, timing=SimTiming.instant())) as world:
        name = unique("rec")
        core = await child_api(world, name)
        child_url = core.api_client.configuration.host
        try:
            await call(core.create_namespace, {"metadata": {"name": "team"}})
        finally:
            core.api_client.close()
        created = [r for r in world.records.since() if isinstance(r, ObjectCreated)]
        assert [(r.cluster, r.resource, r.name) for r in created] == [(name, "namespaces", "team")]
        hostprovider = json.loads(world.hostprovider_json_path.read_text())["url"]
        async with httpx.AsyncClient(verify=False) as http:
            answers = [
                (await http.get(f"{base}{RECORDS_PATH}")).json()
                for base in (world.management.url, child_url, hostprovider)
            ]
        assert answers[0] == answers[1] == answers[2]
        assert answers[0]["objectsCreated"][0]["name"] == "team"
