"""Create outcomes tell the truth, and so do the answers that start them.

A create that lost the capacity race (its check saw free hosts; by its claim another tenant had
them all) used to read `ready` with `nodePools: []`: now the cluster reads `degraded`, with the
`NodePoolsReady` condition (False, the create's error type) and the operation's reason, in the
API and in `colonyctl`, until the pool is added again. The race is made deterministic: the other
tenant's claim is taken first, and the check's catalog read fails (the check is advice and is then
skipped, as when the provider is briefly unreachable), so the create starts and its claim loses.

And an API answer never says failure for work it started: a create or a deploy answers 202 with
its first operation even when the workflow cannot be read back at that moment (the old API
answered 503 `cannot read workspace ...: Timeout expired` for a workflow it had started).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, Interceptor, OutboundInterceptor, QueryWorkflowInput
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode

from models.cluster import (
    NODE_POOLS_READY,
    ClusterPhase,
    ClusterState,
    PoolShortfall,
    shortfall_reason,
)
from models.operations import FIRST_OPERATION_ID
from sim.hostprovider.inventory import Sku
from tests.api.conftest import ALL_PERMISSIONS, CPU_SKU, WORKSPACES, ApiStack
from tests.api.test_api_workspaces import cpu_cluster, notebook
from tests.api.test_cli_remote import user
from tests.helpers import eventually, unique

CLUSTERS = "/v1/kubernetes/clusters"
CPU_POOL = {"name": "cpu", "sku": {"cpuSku": CPU_SKU}, "count": 1}


# --- the status, unit by unit -------------------------------------------------------------------


def test_a_ready_cluster_missing_its_create_pools_is_shown_degraded() -> None:
    missing = PoolShortfall(
        pool="gpu", asked=2, got=0, error_type="HostsUnavailable", reason="0 free now (of 6)"
    )
    state = ClusterState(phase=ClusterPhase.READY, shortfall=[missing])
    phase, reason = state.shown()
    assert phase is ClusterPhase.DEGRADED
    assert (
        reason
        == shortfall_reason([missing])
        == (
            "created without node pool 'gpu' (0 of 2 nodes): 0 free now (of 6); add or scale the "
            "pool again once hosts are free, or delete the cluster"
        )
    )
    (condition,) = state.conditions_shown()
    assert (condition.type, condition.status, condition.reason) == (
        NODE_POOLS_READY,
        "False",
        "HostsUnavailable",
    )
    state.settle_shortfall("gpu")
    assert state.shown() == (ClusterPhase.READY, "")
    assert state.conditions_shown() == []
    # A failed or deleting cluster says that, whatever its create missed.
    failed = ClusterState(phase=ClusterPhase.FAILED, reason="gone", shortfall=[missing])
    assert failed.shown() == (ClusterPhase.FAILED, "gone")


# --- through the API and colonyctl --------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.slow
async def test_a_create_that_lost_the_capacity_race_reads_degraded_not_ready(
    api_stack: ApiStack, api_url: str, tmp_path: Path
) -> None:
    world = api_stack.world
    key = await api_stack.key(unique("evil"), *ALL_PERMISSIONS)
    name = unique("race")
    hold = unique("neighbour")
    free = len(world.inventory.hosts(location="fra1", cpu_sku=CPU_SKU, state="free"))
    assert free > 0
    # Another tenant has every free host of the SKU by the time this create claims; its check
    # could not read the catalog, so it starts all the same (the race, made deterministic).
    world.inventory.claim(hold, "fra1", Sku(cpu_sku=CPU_SKU), free, "neighbour")
    world.faults.fail_next(503, target="hostprovider", path="/v1/locations", method="GET")
    try:
        async with api_stack.http(api_stack.app(), key) as http:
            created = await http.post(
                CLUSTERS, json={"name": name, "locationId": "fra1", "nodePools": [CPU_POOL]}
            )
            world.faults.clear()
            assert created.status_code == 202, created.text
            assert created.json()["operationId"] == FIRST_OPERATION_ID

            async def probe() -> dict[str, Any]:
                body: dict[str, Any] = (await http.get(f"{CLUSTERS}/{name}")).json()
                return body

            body = await eventually(
                probe,
                until=lambda b: b["phase"] != "creating" and "currentOperation" not in b,
                timeout=90,
                interval=0.2,
                what="the create finished",
            )
            (create,) = [op for op in body["completedOperations"] if op["id"] == FIRST_OPERATION_ID]
            assert create["state"] == "failed"
            assert (body["status"], body["phase"], body["nodePools"]) == (
                "degraded",
                "degraded",
                [],
            )
            assert body["reason"].startswith("created without node pool 'cpu' (0 of 1 node): ")
            why = create["reason"].removeprefix("node pool 'cpu': ")
            assert "InsufficientCapacity" in why
            assert why in body["reason"]
            (condition,) = [c for c in body["conditions"] if c["type"] == NODE_POOLS_READY]
            assert (condition["status"], condition["reason"]) == ("False", "HostsUnavailable")
            assert why in condition["message"]

            me = user(tmp_path)
            await me.ctl("auth", "login", "--url", api_url, "--api-key", key)
            shown = (await me.ctl("cluster", "get", name)).stdout
            assert f"cluster {name}  location fra1  phase degraded" in shown
            assert "reason: created without node pool 'cpu' (0 of 1 node): " in shown
            assert f"condition: {NODE_POOLS_READY}=False (HostsUnavailable)" in shown
            listed = (await me.ctl("cluster", "list", "-o", "json")).json()
            assert [c["phase"] for c in listed if c["name"] == name] == ["degraded"]

            # Hosts free again: the pool added again, the cluster is what it was asked to be.
            world.inventory.release_claim(hold)
            added = await http.post(f"{CLUSTERS}/{name}/node-pools", json=CPU_POOL)
            assert added.status_code == 202, added.text
            ready = await api_stack.wait_status(http, name, "ready")
            assert [p["name"] for p in ready["nodePools"]] == ["cpu"]
            assert NODE_POOLS_READY not in [c["type"] for c in ready.get("conditions", [])]
            await http.delete(f"{CLUSTERS}/{name}")
            await api_stack.wait_gone(http, name)
    finally:
        world.faults.clear()
        world.inventory.release_claim(hold)


class _BlindQueries(Interceptor):
    """A Temporal client that cannot read the workflows whose ids start with `prefix` (as a worker
    failing every workflow task cannot answer a query): starts and updates go through."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _BlindOutbound(next, self.prefix)


class _BlindOutbound(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, prefix: str) -> None:
        super().__init__(next)
        self.prefix = prefix

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        if input.id.startswith(self.prefix):
            raise RPCError("Timeout expired", RPCStatusCode.DEADLINE_EXCEEDED, b"")
        return await super().query_workflow(input)


def blind_app(stack: ApiStack, prefix: str) -> Any:
    """An app over the stack whose Temporal client cannot read `prefix...` workflows."""
    temporal = stack.temporal
    blind = Client(
        temporal.service_client,
        namespace=temporal.namespace,
        data_converter=pydantic_data_converter,
        interceptors=[_BlindQueries(prefix)],
    )

    async def connect() -> Client:
        return blind

    return stack.app(connect=connect)


@pytest.mark.e2e
async def test_an_answer_reports_the_work_it_started_even_when_it_cannot_read_it_back(
    catalog: ApiStack,
) -> None:
    organization = unique("blind")
    key = await catalog.key(organization)
    async with catalog.http(catalog.app(), key) as http:
        # A create whose workflow cannot be read at that moment: 202 with its create.
        async with catalog.http(blind_app(catalog, "cluster/"), key) as blind:
            name = unique("unread")
            created = await blind.post(
                CLUSTERS, json={"name": name, "locationId": "fra1", "nodePools": [CPU_POOL]}
            )
            assert created.status_code == 202, created.text
            assert (created.json()["status"], created.json()["operationId"]) == (
                "creating",
                FIRST_OPERATION_ID,
            )
        ready = await catalog.wait_status(http, name, "ready")
        assert ready["completedOperations"][0]["id"] == FIRST_OPERATION_ID
        assert ready["completedOperations"][0]["request"]["kind"] == "create_cluster"

        # A deploy whose workspace cannot be read (its cluster and class can): 202, its deploy.
        async with catalog.http(blind_app(catalog, "workspace/"), key) as blind:
            cluster = await cpu_cluster(catalog, http)
            workspace = unique("unread")
            deployed = await blind.post(
                WORKSPACES,
                json=notebook(
                    workspace, cluster, secretValues={"notebookPassword": "hunter2hunter2"}
                ),
            )
            assert deployed.status_code == 202, deployed.text
            assert (deployed.json()["phase"], deployed.json()["operationId"]) == (
                "Pending",
                FIRST_OPERATION_ID,
            )
        running = await catalog.wait_workspace(http, workspace, "Running")
        assert running["completedOperations"][0]["id"] == FIRST_OPERATION_ID
        for doomed in (name, cluster):
            await http.delete(f"{CLUSTERS}/{doomed}")
        for doomed in (name, cluster):
            await catalog.wait_gone(http, doomed)
