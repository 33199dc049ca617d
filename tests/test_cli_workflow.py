"""`colonyctl` against a stand-in `ClusterWorkflow` on the Temporal dev server, with the sim's host
provider for the catalog: update ids, exit codes by error type, `operation list/get/cancel`,
`cluster get -w`, and the capacity checks of `node-pool create/scale`.

The stand-in registers the workflow's names (the `status` query; the `scale_node_pool`,
`add_node_pool`, `delete_cluster` and `cancel_operation` updates) and records what it was sent,
so the CLI's side of each contract is tested while the real workflow is rebuilt elsewhere. Like
the real one it refuses with `ApplicationError` types: `NotFound` for what does not exist,
`OperationRejected` otherwise.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from typer.testing import CliRunner, Result

from models.cluster import ClusterPhase, ClusterStatus, ClusterWorkflowInput
from models.errors import ErrorType
from models.node_pool import NodePoolStatus
from models.operations import (
    AddNodePoolRequest,
    CancelOperationRequest,
    CreateClusterRequest,
    DeleteClusterRequest,
    Operation,
    OperationAccepted,
    OperationRequest,
    OperationState,
    ScaleNodePoolRequest,
)
from sim.hostprovider.inventory import Sku
from sim.world import SimWorld
from starter.cli import app, normalize_argv
from tests.helpers import eventually, unique
from tests.simenv import colony_env, started_world

pytestmark = pytest.mark.e2e

COLONYCTL = str(Path(sys.executable).parent / "colonyctl")


@workflow.defn(name="ClusterWorkflow")
class StandInCluster:
    """Just enough of ClusterWorkflow's contract: operations are queued, the first one runs, and
    nothing ever finishes unless cancelled; every update id is recorded."""

    @workflow.init
    def __init__(self, request: ClusterWorkflowInput) -> None:
        spec = request.spec
        self.name = spec.name
        self.location = spec.location_id
        self.phase = ClusterPhase.READY
        self.pools = [
            NodePoolStatus(name=p.name, sku=p.sku, count=p.count, ready_count=p.count)
            for p in spec.node_pools
        ]
        now = workflow.now()
        create = Operation(
            id="op-0001",
            request=CreateClusterRequest(),
            state=OperationState.SUCCEEDED,
            submitted_at=now,
            started_at=now,
            finished_at=now + timedelta(seconds=75),
        )
        self.completed: list[Operation] = [create]
        self.running: Operation | None = None
        self.queue: list[Operation] = []
        self.update_ids: list[str] = []
        self.requests: list[dict[str, Any]] = []
        self.by_update_id: dict[str, OperationAccepted] = {}

    @workflow.run
    async def run(self, request: ClusterWorkflowInput) -> ClusterStatus:
        await workflow.wait_condition(lambda: self.phase is ClusterPhase.DELETED)
        return self.status()

    @workflow.query
    def status(self) -> ClusterStatus:
        return ClusterStatus(
            name=self.name,
            location_id=self.location,
            phase=self.phase,
            node_pools=self.pools,
            current_operation=self.running,
            queued_operations=self.queue,
            completed_operations=self.completed,
            updated_at=workflow.now(),
        )

    @workflow.query
    def seen(self) -> dict[str, Any]:
        return {"updateIds": self.update_ids, "requests": self.requests}

    def _accept(self, request: OperationRequest) -> OperationAccepted:
        info = workflow.current_update_info()
        update_id = info.id if info else ""
        self.update_ids.append(update_id)
        if update_id in self.by_update_id:
            return self.by_update_id[update_id]
        self.requests.append(request.model_dump(mode="json", by_alias=True))
        operation = Operation(
            id=f"op-{len(self.completed) + len(self.queue) + (self.running is not None) + 1:04d}",
            request=request,
            submitted_at=workflow.now(),
            update_id=update_id,
        )
        if self.running is None:
            operation.state = OperationState.RUNNING
            operation.started_at = workflow.now()
            self.running = operation
        else:
            self.queue.append(operation)
        accepted = OperationAccepted(
            operation_id=operation.id, kind=operation.kind, position=len(self.queue)
        )
        self.by_update_id[update_id] = accepted
        return accepted

    def _check_pool(self, pool: str) -> None:
        if pool == "rejected":
            raise ApplicationError("pool 'rejected' is refused", type=ErrorType.OPERATION_REJECTED)
        if pool == "gone":  # the details form of "does not exist"
            raise ApplicationError(
                "node pool 'gone' does not exist",
                {"reason": "NotFound"},
                type=ErrorType.OPERATION_REJECTED,
            )
        if all(p.name != pool for p in self.pools):
            raise ApplicationError(
                f"node pool '{pool}' does not exist in cluster '{self.name}'",
                type=ErrorType.NOT_FOUND,
            )

    @workflow.update
    async def scale_node_pool(self, request: ScaleNodePoolRequest) -> OperationAccepted:
        return self._accept(request)

    @scale_node_pool.validator
    def _validate_scale(self, request: ScaleNodePoolRequest) -> None:
        self._check_pool(request.pool)

    @workflow.update
    async def add_node_pool(self, request: AddNodePoolRequest) -> OperationAccepted:
        return self._accept(request)

    @workflow.update
    async def delete_cluster(self, request: DeleteClusterRequest) -> OperationAccepted:
        accepted = self._accept(request)
        self.phase = ClusterPhase.DELETED
        return accepted

    @workflow.update
    async def cancel_operation(self, request: CancelOperationRequest) -> Operation:
        info = workflow.current_update_info()
        self.update_ids.append(info.id if info else "")
        candidates = [self.running, *self.queue]
        found = next((op for op in candidates if op and op.id == request.operation_id), None)
        if found is None:
            raise ApplicationError(
                f"operation '{request.operation_id}' is not queued or running",
                type=ErrorType.NOT_FOUND,
            )
        found.state = OperationState.CANCELLED
        found.reason = f"cancelled: {request.reason}"
        found.finished_at = workflow.now()
        if found is self.running:
            self.running = None
        else:
            self.queue.remove(found)
        self.completed.append(found)
        return found


@dataclass
class StandIn:
    client: Client
    env: dict[str, str]
    world: SimWorld

    async def ctl(self, *args: str, expect: int | None = 0) -> Result:
        result = await asyncio.to_thread(
            CliRunner().invoke, app, normalize_argv(args), env=self.env
        )
        if expect is not None:
            assert result.exit_code == expect, (
                f"colonyctl {' '.join(args)} exited {result.exit_code}, not {expect}\n"
                f"stdout: {result.stdout}\nstderr: {result.stderr}\n{result.exception!r}"
            )
        return result

    async def cluster(self, *pools: str, location: str = "fra1") -> str:
        name = unique("c")
        args = ["cluster", "create", name, "--location-id", location]
        for pool in pools:
            args += ["--node-pool", pool]
        await self.ctl(*args)
        return name

    async def seen(self, name: str) -> dict[str, Any]:
        seen: dict[str, Any] = await self.client.get_workflow_handle(f"cluster/{name}").query(
            "seen"
        )
        return seen


@pytest.fixture(scope="module")
async def standin(
    dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[StandIn]:
    task_queue = unique("cli")
    async with (
        started_world(tmp_path_factory.mktemp("sim")) as world,
        Worker(
            dev_env.client,
            task_queue=task_queue,
            workflows=[StandInCluster],
            workflow_runner=UnsandboxedWorkflowRunner(),
        ),
    ):
        env = colony_env(
            world,
            TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
            TEMPORAL_NAMESPACE=dev_env.client.namespace,
            COLONY_TASK_QUEUE=task_queue,
            COLONY_CACHE_DIR=str(tmp_path_factory.mktemp("cache")),
        )
        yield StandIn(dev_env.client, env, world)


GPU_POOL = "name=gpu,count=2,gpuModelId=h100-80gb"


async def test_every_update_carries_an_id_and_a_repeated_request_id_queues_once(
    standin: StandIn,
) -> None:
    name = await standin.cluster(GPU_POOL)
    scale = ("node-pool", "scale", name, "gpu", "--count", "3", "-o", "json")
    first = json.loads((await standin.ctl(*scale, "--request-id", "retry-1")).stdout)
    again = json.loads((await standin.ctl(*scale, "--request-id", "retry-1")).stdout)
    assert again["operationId"] == first["operationId"]
    other = json.loads((await standin.ctl(*scale)).stdout)
    another = json.loads((await standin.ctl(*scale)).stdout)
    assert len({first["operationId"], other["operationId"], another["operationId"]}) == 3

    seen = await standin.seen(name)
    assert len(seen["requests"]) == 3, "the retried request was queued once"
    ids = seen["updateIds"]
    # Temporal answers a repeated update id itself; the workflow may also see it (continue-as-new).
    assert ids[0] == "retry-1"
    fresh = [i for i in ids if i != "retry-1"]
    assert len(set(fresh)) == len(fresh) == 2
    assert all(len(i) == 36 for i in fresh), "fresh uuids"

    status = json.loads(
        (await standin.ctl("operation", "get", name, first["operationId"], "-o", "json")).stdout
    )
    assert status["updateId"] == "retry-1"


async def test_a_repeated_create_with_its_request_id_is_the_same_create(standin: StandIn) -> None:
    name = unique("c")
    create = ("cluster", "create", name, "--location-id", "fra1", "--request-id", f"{name}-r")
    first = await standin.ctl(*create)
    again = await standin.ctl(*create)
    assert "already started by this request id" in again.stdout
    assert first.stdout.split("(operation ")[1][:7] == again.stdout.split("(operation ")[1][:7]
    conflict = await standin.ctl("cluster", "create", name, "--location-id", "fra1", expect=2)
    assert (
        conflict.stderr
        == f"error: name: cluster '{name}' already exists (names are unique until a deletion completes)\n"
    )


@pytest.mark.parametrize(
    ("pool", "code", "message"),
    [
        pytest.param("absent", 3, "node pool 'absent' does not exist", id="type-not-found"),
        pytest.param("gone", 3, "node pool 'gone' does not exist", id="details-not-found"),
        pytest.param("rejected", 2, "pool 'rejected' is refused", id="rejected"),
    ],
)
async def test_refusals_exit_by_error_type(
    standin: StandIn, pool: str, code: int, message: str
) -> None:
    name = await standin.cluster(GPU_POOL)
    result = await standin.ctl("node-pool", "scale", name, pool, "--count", "1", expect=code)
    assert result.stderr == f"error: scale_node_pool: {message}" + (
        f" in cluster '{name}'\n" if pool == "absent" else "\n"
    )


async def test_missing_cluster_is_not_found_by_rpc_status(standin: StandIn) -> None:
    for args in (
        ("cluster", "get", "no-such-cluster"),
        ("operation", "list", "no-such-cluster"),
        ("operation", "cancel", "no-such-cluster", "op-0001"),
        ("node-pool", "scale", "no-such-cluster", "gpu", "--count", "2"),
    ):
        result = await standin.ctl(*args, expect=3)
        assert result.stderr == "error: cluster: cluster 'no-such-cluster' not found\n"


async def test_operation_list_get_and_cancel(standin: StandIn) -> None:
    name = await standin.cluster(GPU_POOL, "name=cpu,count=1,cpuSku=cpu-32c-256g")
    running = json.loads(
        (await standin.ctl("node-pool", "scale", name, "gpu", "--count", "3", "-o", "json")).stdout
    )
    queued = json.loads(
        (await standin.ctl("node-pool", "scale", name, "cpu", "--count", "2", "-o", "json")).stdout
    )

    listed = await standin.ctl("operation", "list", name)
    link = f"workflow cluster/{name}: http://127.0.0.1:8233/namespaces/default/workflows/cluster%2F{name}"
    assert link in listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == [
        "ID", "KIND", "STATE", "SUBMITTED", "STARTED", "FINISHED", "DURATION", "DETAIL",
    ]  # fmt: skip
    assert [line.split()[:3] for line in lines[1:]] == [
        ["op-0001", "create_cluster", "succeeded"],
        [running["operationId"], "scale_node_pool", "running"],
        [queued["operationId"], "scale_node_pool", "queued"],
    ]
    assert lines[1].split()[6] == "1m15s"
    as_json = json.loads((await standin.ctl("operation", "list", name, "-o", "json")).stdout)
    assert [op["state"] for op in as_json] == ["succeeded", "running", "queued"]

    detail = await standin.ctl("operation", "get", name, queued["operationId"])
    assert "\nSTATE:     queued\n" in detail.stdout
    assert '"pool": "cpu"' in detail.stdout
    as_yaml = await standin.ctl("operation", "get", name, queued["operationId"], "-o", "yaml")
    assert f"id: {queued['operationId']}" in as_yaml.stdout
    missing = await standin.ctl("operation", "get", name, "op-0099", expect=3)
    assert (
        missing.stderr == f"error: operation: operation 'op-0099' not found in cluster '{name}'\n"
    )

    cancelled = json.loads(
        (
            await standin.ctl(
                "operation", "cancel", name, queued["operationId"],
                "--reason", "not needed", "--request-id", "cancel-1", "-o", "json",
            )
        ).stdout
    )  # fmt: skip
    assert (cancelled["id"], cancelled["state"]) == (queued["operationId"], "cancelled")
    assert cancelled["reason"] == "cancelled: not needed"
    assert (await standin.seen(name))["updateIds"][-1] == "cancel-1"
    table = await standin.ctl("operation", "cancel", name, running["operationId"])
    assert table.stdout == f"{running['operationId']} scale_node_pool cancelled: cancelled: \n"
    gone = await standin.ctl("operation", "cancel", name, running["operationId"], expect=3)
    assert "is not queued or running" in gone.stderr


async def test_node_pool_capacity_is_checked_before_anything_starts(standin: StandIn) -> None:
    name = await standin.cluster(GPU_POOL)
    # More than fra1 has in all: refused, and waiting is not advised (nor accepted).
    for wait in ([], ["--wait-for-capacity"]):
        beyond = await standin.ctl(
            "node-pool", "scale", name, "gpu", "--count", "30", *wait, expect=2
        )  # fmt: skip
        assert beyond.stderr == (
            "error: count: 30 hosts of h100-80gb asked, location fra1 has 8 in all; "
            "ask for at most 8\n"
        )
    # Enough in all, too few free now (the stand-in claims none; someone else holds all but
    # one): waiting is advised, and accepted.
    world = standin.world
    hold = unique("hold")
    free = len(world.inventory.hosts(location="fra1", gpu_model_id="h100-80gb", state="free"))
    world.inventory.claim(hold, "fra1", Sku(gpu_model_id="h100-80gb"), free - 1, "someone")
    try:
        short = await standin.ctl("node-pool", "scale", name, "gpu", "--count", "4", expect=2)
        assert short.stderr == (
            "error: count: 2 more host(s) of h100-80gb needed in fra1, 1 free now (of 8); "
            "add --wait-for-capacity to queue and wait for them\n"
        )
        await standin.ctl(
            "node-pool", "scale", name, "gpu", "--count", "4", "--wait-for-capacity"
        )  # fmt: skip
    finally:
        world.inventory.release_claim(hold)
    await standin.ctl("node-pool", "scale", name, "gpu", "--count", "1")  # down: no check
    # fra1 stocks cpu-64c-512g: accepted.
    await standin.ctl(
        "node-pool", "create", name, "--name", "cpu", "--count", "1", "--cpu-sku", "cpu-64c-512g",
    )  # fmt: skip
    not_stocked = await standin.ctl(
        "node-pool", "create", name, "--name", "x", "--count", "1", "--gpu-model-id", "nope",
        expect=2,
    )  # fmt: skip
    assert not_stocked.stderr.startswith("error: sku.gpuModelId: unknown GPU model 'nope'")
    requests = (await standin.seen(name))["requests"]
    assert [r.get("waitForCapacity") for r in requests] == [True, False, False]

    ber = await standin.cluster(location="ber1")
    no_h100 = await standin.ctl(
        "node-pool", "create", ber, "--name", "gpu", "--count", "1", "--gpu-model-id", "h100-80gb",
        expect=2,
    )  # fmt: skip
    assert no_h100.stderr == (
        "error: sku.gpuModelId: location 'ber1' does not stock GPU model 'h100-80gb' "
        "(it stocks: a100-80gb, cpu-64c-512g)\n"
    )
    assert (await standin.seen(ber))["requests"] == []


async def read_line(stream: asyncio.StreamReader) -> dict[str, Any]:
    line = await asyncio.wait_for(stream.readline(), timeout=30)
    assert line, "the watch ended early"
    data: dict[str, Any] = json.loads(line)
    return data


async def test_cluster_get_watch_prints_each_change_until_the_cluster_is_gone(
    standin: StandIn,
) -> None:
    name = await standin.cluster(GPU_POOL)
    watch = await asyncio.create_subprocess_exec(
        COLONYCTL, "cluster", "get", name, "-w", "-o", "json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **standin.env},
    )  # fmt: skip
    try:
        assert watch.stdout is not None
        first = await read_line(watch.stdout)
        assert (first["phase"], first.get("currentOperation")) == ("ready", None)
        await standin.ctl("node-pool", "scale", name, "gpu", "--count", "3")
        second = await read_line(watch.stdout)
        assert second["currentOperation"]["request"]["count"] == 3
        await standin.ctl("cluster", "delete", name)
        last = await read_line(watch.stdout)
        assert last["phase"] == "deleted"
        assert await asyncio.wait_for(watch.wait(), timeout=30) == 0
    finally:
        if watch.returncode is None:
            watch.kill()
            await watch.wait()


async def test_cluster_get_watch_of_a_missing_cluster_is_not_found(standin: StandIn) -> None:
    result = await standin.ctl("cluster", "get", "no-such-cluster", "-w", expect=3)
    assert result.stderr == "error: cluster: cluster 'no-such-cluster' not found\n"


async def test_the_workflow_sees_the_update_id_on_every_command(standin: StandIn) -> None:
    name = await standin.cluster(GPU_POOL)
    await standin.ctl("node-pool", "create", name, "--name", "more", "--count", "1",
                      "--gpu-model-id", "a100-80gb", "--request-id", "add-1")  # fmt: skip
    await standin.ctl("cluster", "delete", name, "--request-id", "delete-1")

    async def ids() -> list[str]:
        return list((await standin.seen(name))["updateIds"])

    assert await eventually(ids, until=lambda i: len(i) == 2, what="both ids") == [
        "add-1",
        "delete-1",
    ]
