"""What the Temporal Web UI shows of Colony, read back through the client on the dev server.

- `worker.ensure_search_attributes` registers every key of `workflows.search_attributes`, with its
  type, on a namespace that has none (as the worker does on a dev server at start);
- a cluster's workflow, described: its search attributes, its static summary and details (set by
  `colonyctl cluster create`) and its current details (the workflow's markdown status);
- a visibility query lists it: `ColonyKind = "cluster" AND ColonyPhase = "ready"`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from google.protobuf.duration_pb2 import Duration
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner

from starter.cli import app, normalize_argv
from tests.helpers import eventually, unique
from tests.simenv import close_client, colony_env, host_provider, management_api, started_world
from worker import build_worker, ensure_search_attributes, search_attribute_commands
from workflows.search_attributes import ALL as SEARCH_ATTRIBUTES
from workflows.search_attributes import COLONY_CLUSTER, COLONY_KIND, COLONY_PHASE

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


TRANSIENT = {RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.UNAVAILABLE}
"""What a dev server busy with the rest of the suite may answer a namespace registration: it cancels
the call when its own handling runs late, possibly after the namespace was made."""


async def register_namespace(client: Client, namespace: str) -> None:
    """Register `namespace`, asking again after a transient answer until it exists (a repeat that
    finds it made answers ALREADY_EXISTS)."""

    async def registered() -> bool:
        try:
            await client.workflow_service.register_namespace(
                RegisterNamespaceRequest(
                    namespace=namespace, workflow_execution_retention_period=Duration(seconds=86400)
                ),
                timeout=timedelta(seconds=30),
            )
        except RPCError as exc:
            if exc.status == RPCStatusCode.ALREADY_EXISTS:
                return True
            if exc.status in TRANSIENT:
                return False
            raise
        return True

    await eventually(registered, timeout=120, interval=1, what=f"namespace {namespace} registered")


async def test_every_search_attribute_is_registered_with_its_type(
    dev_env: WorkflowEnvironment,
) -> None:
    namespace = unique("ns")
    await register_namespace(dev_env.client, namespace)

    async def registered() -> dict[str, int] | None:
        try:
            listed = await dev_env.client.operator_service.list_search_attributes(
                ListSearchAttributesRequest(namespace=namespace)
            )
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return None  # the server's namespace cache has not seen it yet
            raise
        return dict(listed.custom_attributes)

    await eventually(registered, until=lambda found: found is not None, timeout=60)
    await ensure_search_attributes(dev_env.client, namespace)
    await ensure_search_attributes(dev_env.client, namespace)  # a second start changes nothing
    found = await eventually(
        registered,
        until=lambda found: found is not None and {k.name for k in SEARCH_ATTRIBUTES} <= set(found),
        timeout=60,
        what="Colony's search attributes",
    )
    assert found is not None
    for key in SEARCH_ATTRIBUTES:
        assert found[key.name] == IndexedValueType.ValueType(int(key.indexed_value_type))


class FlakyOperator:
    """An operator service that cancels the first `cancels` calls, as a busy dev server does."""

    def __init__(self, cancels: int, then: RPCStatusCode | None = None) -> None:
        self.calls = 0
        self.cancels = cancels
        self.then = then

    async def add_search_attributes(self, request: object, timeout: timedelta) -> None:
        self.calls += 1
        if self.calls <= self.cancels:
            raise RPCError("operation was canceled", RPCStatusCode.CANCELLED, b"")
        if self.then is not None:
            raise RPCError("refused", self.then, b"")


class FakeClient:
    def __init__(self, operator: FlakyOperator) -> None:
        self.operator_service = operator


@pytest.mark.parametrize(
    ("operator", "calls"),
    [
        pytest.param(FlakyOperator(cancels=2), 3, id="cancelled-twice-then-added"),
        pytest.param(FlakyOperator(cancels=0, then=RPCStatusCode.ALREADY_EXISTS), 1, id="has-them"),
        pytest.param(FlakyOperator(cancels=10), 6, id="gives-up-after-six"),
    ],
)
async def test_a_cancelled_search_attribute_registration_is_asked_again(
    operator: FlakyOperator, calls: int
) -> None:
    await ensure_search_attributes(FakeClient(operator), "default", first_pause=0.01)  # type: ignore[arg-type]
    assert operator.calls == calls


def test_the_documented_commands_name_every_key() -> None:
    commands = search_attribute_commands("prod")
    assert len(commands) == len(SEARCH_ATTRIBUTES)
    for key, command in zip(SEARCH_ATTRIBUTES, commands, strict=True):
        assert command == (
            f"temporal operator search-attribute create --namespace prod --name {key.name} "
            "--type Keyword"
        )


@pytest.fixture(scope="module")
async def env(
    dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[dict[str, str]]:
    task_queue = unique("webui")
    async with started_world(tmp_path_factory.mktemp("sim")) as world:
        management = management_api(world)
        async with (
            host_provider(world) as http,
            build_worker(dev_env.client, task_queue, management, http) as worker,
            worker,
        ):
            yield colony_env(
                world,
                TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
                TEMPORAL_NAMESPACE=dev_env.client.namespace,
                COLONY_TASK_QUEUE=task_queue,
            )
        close_client(management)


async def ctl(env: dict[str, str], *args: str) -> None:
    result = await asyncio.to_thread(CliRunner().invoke, app, normalize_argv(args), env=env)
    assert result.exit_code == 0, f"colonyctl {args}: {result.stderr}{result.exception!r}"


async def test_a_cluster_reads_well_in_the_web_ui(
    dev_env: WorkflowEnvironment, env: dict[str, str]
) -> None:
    client: Client = dev_env.client
    name = unique("ui")
    await ctl(
        env, "cluster", "create", name, "--location-id", "fra1",
        "--node-pool", "name=gpu,count=1,gpuModelId=h100-80gb", "--wait", "--timeout", "90",
    )  # fmt: skip
    handle = client.get_workflow_handle(f"cluster/{name}")

    description = await handle.describe()
    attributes = description.typed_search_attributes
    assert attributes.get(COLONY_KIND) == "cluster"
    assert attributes.get(COLONY_CLUSTER) == name
    assert attributes.get(COLONY_PHASE) == "ready"
    assert await description.static_summary() == f"cluster {name} in fra1"
    details = await description.static_details()
    assert details is not None
    assert f"**Cluster** `{name}` in location `fra1`" in details
    assert "| gpu | gpu:h100-80gb | 1 |" in details
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert f"**{name}** in `fra1`: ready" in metadata.current_details
    assert "gpu 1/1" in metadata.current_details

    query = f'ColonyKind = "cluster" AND ColonyPhase = "ready" AND ColonyCluster = "{name}"'

    async def listed() -> list[str]:
        return [w.id async for w in client.list_workflows(query)]

    # Visibility is eventually consistent, even on a dev server.
    assert await eventually(listed, until=lambda ids: ids == [f"cluster/{name}"], timeout=10)
    await ctl(env, "cluster", "delete", name, "--wait", "--timeout", "90")
    deleted = f'ColonyKind = "cluster" AND ColonyPhase = "deleted" AND ColonyCluster = "{name}"'
    assert await eventually(
        lambda: _ids(client, deleted), until=lambda ids: ids == [f"cluster/{name}"], timeout=10
    )


async def _ids(client: Client, query: str) -> list[str]:
    return [w.id async for w in client.list_workflows(query)]
