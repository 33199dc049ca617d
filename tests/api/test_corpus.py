"""One front door (issue 13, point 5): every bad request of `tests/data/bad_requests.yaml` is refused
the same way by the HTTP API and by local-mode `colonyctl`, and starts nothing.

Both run against one world: the Temporal dev server, the sim and the real worker of `api_stack`.
The API is the real ASGI app with a key of a fresh organization; `colonyctl` is the Typer app
in process (`CliRunner`, in a thread: the sim and the worker serve from the test's loop), with the
operator's environment and no login (local mode). Each side has the same three clusters by name,
of its own (the organization's, the operator's): ready with a one-node pool `cpu`, failed, and
being deleted (its ClusterDeployment's delete answered 503 until the module ends).

For each request: the API answers the expected 4xx with `error.field` the case's field; colonyctl
exits 2 (3 for not found) with one line naming the same field (word for word the API's message
when the case says `same`; each holding the words the case `says`, and neither pydantic's nor
the transport's); the sim's objects and hosts are unchanged, and no workflow was started
(visibility, at once). The last test makes sure of the last point once visibility has caught up: a
sentinel workflow started after the corpus is visible, and it is the only workflow started since
the corpus began.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from temporalio.client import Client
from typer.testing import CliRunner

from clients.clusters import TemporalClusters
from clients.errors import NotFoundError
from clients.temporal import TemporalSession
from models.cluster import ClusterPhase, ClusterSpec, cluster_deployment_name
from models.manifests import COLONY
from models.node_pool import NodePoolSpec
from sim.faults import RequestFault
from sim.world import SimWorld
from starter.cli import app as colonyctl
from starter.cli import normalize_argv
from tests.api.conftest import CPU_SKU, JUPYTER, ApiStack
from tests.helpers import eventually, unique
from tests.simenv import NAMESPACE

pytestmark = [pytest.mark.e2e]

CORPUS = Path(__file__).resolve().parents[1] / "data" / "bad_requests.yaml"
CASES: list[dict[str, Any]] = yaml.safe_load(CORPUS.read_text(encoding="utf-8"))
CLUSTERS = "/v1/kubernetes/clusters"
CHURNING = {"events", "leases"}
"""Kinds the sim writes on its own while nothing is asked of it."""
CPU_POOL = {"name": "cpu", "sku": {"cpuSku": CPU_SKU}, "count": 1}
FOREIGN_WORDS = ("Input should", "Field required", "valid integer", "tonic::", "Value error")


def test_the_corpus_is_large_and_its_ids_unique() -> None:
    assert len(CASES) >= 80
    assert len({case["id"] for case in CASES}) == len(CASES)


def filled(value: Any, names: dict[str, str]) -> Any:
    """`value` with every `{placeholder}` of its strings replaced (JSON in a string stays JSON)."""
    if isinstance(value, str):
        for key, name in names.items():
            value = value.replace("{" + key + "}", name)
        return value
    if isinstance(value, list):
        return [filled(item, names) for item in value]
    if isinstance(value, dict):
        return {filled(key, names): filled(item, names) for key, item in value.items()}
    return value


@dataclass(frozen=True)
class Request:
    """One case as each side sends it."""

    method: str
    path: str
    body: Any
    cli: list[str]
    file: Any


def manifest(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A `colony.dev/v1` manifest of `spec` (its name in metadata)."""
    return {
        "apiVersion": COLONY,
        "kind": kind,
        "metadata": {"name": spec["name"]},
        "spec": {key: value for key, value in spec.items() if key != "name"},
    }


def request_of(case: dict[str, Any], names: dict[str, str], jupyter: dict[str, Any]) -> Request:
    if "workspace_class" in case:
        spec = {**jupyter, "name": names["new"], **filled(case["workspace_class"], names)}
        return Request(
            "POST",
            "/v1/workspace-classes",
            {"class": spec},
            ["class", "publish", "-f", "{file}"],
            manifest("WorkspaceClass", spec),
        )
    if "colony" in case:
        spec = filled(case["colony"], names)
        return Request(
            "POST",
            "/v1/colonies",
            spec,
            ["colony", "apply", "-f", "{file}"],
            manifest("Colony", spec),
        )
    api = filled(case["api"], names)
    return Request(
        api["method"],
        api["path"],
        api.get("body"),
        filled(case["cli"], names),
        filled(case.get("file"), names),
    )


@dataclass(frozen=True)
class Side:
    """The clusters of one side, by placeholder."""

    ready: str
    failed: str
    deleting: str
    node: str

    def names(self, new: str) -> dict[str, str]:
        return {
            "ready": self.ready,
            "failed": self.failed,
            "deleting": self.deleting,
            "node": self.node,
            "new": new,
        }


@dataclass
class Corpus:
    stack: ApiStack
    http: httpx.AsyncClient
    env: dict[str, str]
    files: Path
    api_side: Side
    cli_side: Side
    jupyter: dict[str, Any]
    began: datetime

    async def through_api(self, request: Request) -> tuple[int, dict[str, Any]]:
        kwargs: dict[str, Any] = {} if request.body is None else {"json": request.body}
        answer = await self.http.request(request.method, request.path, **kwargs)
        body = answer.json() if answer.content else {}
        return answer.status_code, body.get("error") or body

    async def through_cli(self, case_id: str, request: Request) -> tuple[int, str]:
        args = list(request.cli)
        if request.file is not None:
            path = self.files / f"{case_id}.yaml"
            if isinstance(request.file, str):
                path.write_text(request.file)
            elif isinstance(request.file, list):
                path.write_text(yaml.safe_dump_all(request.file, sort_keys=False))
            else:
                path.write_text(yaml.safe_dump(request.file, sort_keys=False))
            args = [arg.replace("{file}", str(path)) for arg in args]
        result = await asyncio.to_thread(
            CliRunner().invoke, colonyctl, normalize_argv(args), env=self.env
        )
        return result.exit_code, result.stderr


def sim_state(
    world: SimWorld,
) -> tuple[frozenset[tuple[str, str, str]], frozenset[tuple[str, str]]]:
    """What a started request would change in the sim: the management cluster's objects, and who
    holds which host."""
    objects = set()
    for rt in world.store.registry.all():
        if rt.plural in CHURNING:
            continue
        items, _ = world.store.list(rt, copy_objects=False)
        for obj in items:
            metadata = obj.get("metadata") or {}
            objects.add((rt.plural, metadata.get("namespace", ""), metadata.get("name", "")))
    hosts = {(host.id, host.claimed_by or "") for host in world.inventory.hosts()}
    return frozenset(objects), frozenset(hosts)


def visibility_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def started_since(client: Client, moment: datetime) -> list[str]:
    """Ids of the workflows started since `moment`, as visibility knows them now."""
    query = f"StartTime >= '{visibility_time(moment)}'"
    return [execution.id async for execution in client.list_workflows(query)]


# --- the two sides' clusters ------------------------------------------------------------------


def operator(stack: ApiStack) -> TemporalClusters:
    """The operator's clusters (`colonyctl` in direct mode sees the same)."""
    return TemporalClusters(TemporalSession.of_client(stack.temporal, stack.settings))


async def operator_status(stack: ApiStack, name: str) -> ClusterPhase | None:
    try:
        return (await operator(stack).get(name)).phase
    except NotFoundError:
        return None


async def operator_cluster(stack: ApiStack, name: str, pools: list[dict[str, Any]]) -> None:
    spec = ClusterSpec(
        name=name,
        location_id="fra1",
        node_pools=[NodePoolSpec.model_validate(pool) for pool in pools],
    )
    await operator(stack).create(spec)


async def phase_of_both(stack: ApiStack, http: httpx.AsyncClient, name: str, wanted: str) -> None:
    """Wait until the organization's and the operator's cluster `name` are in phase `wanted`."""

    async def api_status() -> str:
        return str((await http.get(f"{CLUSTERS}/{name}")).json().get("status"))

    async def cli_status() -> str:
        phase = await operator_status(stack, name)
        return phase.value if phase else "gone"

    api_wanted = {"ready": "ready", "failed": "failed", "deleting": "deleting"}[wanted]
    await eventually(
        api_status, until=lambda s: s == api_wanted, timeout=90, what=f"{name} {wanted}"
    )
    await eventually(cli_status, until=lambda s: s == wanted, timeout=90, what=f"{name} {wanted}")


@pytest.fixture(scope="module")
async def corpus(
    catalog: ApiStack, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Corpus]:
    stack = catalog
    organization = unique("corpus")
    key = await stack.key(organization)
    ready, failed, deleting = unique("cr"), unique("cf"), unique("cd")
    files = tmp_path_factory.mktemp("corpus")
    env = {**stack.env, "COLONY_CONFIG_DIR": str(files / "no-login")}
    world = stack.world
    for owner in (organization, ""):
        world.faults.fail_cluster_deployment(
            NAMESPACE, cluster_deployment_name(failed, owner), "injected: no control plane"
        )
    holds: list[RequestFault] = [
        RequestFault(
            path=f"/clusterdeployments/{cluster_deployment_name(deleting, owner)}",
            method="DELETE",
            error_rate=1.0,
            error_codes=[503],
        )
        for owner in (organization, "")
    ]
    async with stack.http(stack.app(), key) as http:
        for name, pools in ((ready, [CPU_POOL]), (failed, []), (deleting, [])):
            created = await http.post(
                CLUSTERS, json={"name": name, "locationId": "fra1", "nodePools": pools}
            )
            assert created.status_code == 202, created.text
            await operator_cluster(stack, name, pools)
        await phase_of_both(stack, http, ready, "ready")
        await phase_of_both(stack, http, deleting, "ready")
        await phase_of_both(stack, http, failed, "failed")
        for hold in holds:
            world.faults.add_rule(hold)
        assert (await http.delete(f"{CLUSTERS}/{deleting}")).status_code == 202
        await operator(stack).delete(deleting)
        await phase_of_both(stack, http, deleting, "deleting")
        api_node = (await http.get(f"{CLUSTERS}/{ready}/nodes")).json()["items"][0]["name"]
        operator_node = (await operator(stack).get(ready)).node_pools[0].nodes[0]
        jupyter = (await http.get(f"/v1/workspace-classes/{JUPYTER}")).json()
        yield Corpus(
            stack=stack,
            http=http,
            env=env,
            files=files,
            api_side=Side(ready, failed, deleting, api_node),
            cli_side=Side(ready, failed, deleting, operator_node.name),
            jupyter=jupyter,
            began=datetime.now(UTC),
        )
        world.faults.clear()
        for name in (ready, failed, deleting):
            # The held deletes go on once the faults are cleared and may be over by now: a delete
            # of a cluster already gone answers 404 (NotFoundError), and that is what is wanted.
            await http.delete(f"{CLUSTERS}/{name}")
            with contextlib.suppress(NotFoundError):
                await operator(stack).delete(name)
        for name in (ready, failed, deleting):
            await stack.wait_gone(http, name, timeout=120)
            await eventually(
                lambda name=name: operator_status(stack, name),  # type: ignore[misc]
                until=lambda phase: phase is None,
                timeout=120,
                what=f"operator's {name} deleted",
            )


# --- the corpus --------------------------------------------------------------------------------


@pytest.mark.parametrize("case", [pytest.param(case, id=case["id"]) for case in CASES])
async def test_a_bad_request_is_refused_alike_by_the_api_and_colonyctl(
    corpus: Corpus, case: dict[str, Any]
) -> None:
    new = unique("bad")
    moment = datetime.now(UTC)
    before = sim_state(corpus.stack.world)
    api_request = request_of(case, corpus.api_side.names(new), corpus.jupyter)
    cli_request = request_of(case, corpus.cli_side.names(new), corpus.jupyter)
    status, error = await corpus.through_api(api_request)
    code, stderr = await corpus.through_cli(case["id"], cli_request)

    field = case["field"]
    expected = case.get("status", 422)
    assert (status, error.get("field")) == (expected, field), error
    assert str(error["message"]).startswith(f"{field}: "), error
    assert code == (3 if expected == 404 else 2), stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    assert f"{case.get('cli_field', field)}: " in lines[0], lines[0]
    if case.get("same"):
        assert lines[0] == f"error: {error['message']}"
    says = case.get("says") or {}
    assert says.get("api", "") in error["message"], error
    assert says.get("cli", "") in lines[0], lines[0]
    for message in (str(error["message"]), lines[0]):
        # Pydantic's, Typer's and the Temporal transport's own words never reach a user.
        assert not any(words in message for words in FOREIGN_WORDS), message
    assert sim_state(corpus.stack.world) == before, "the sim changed"
    assert await started_since(corpus.stack.temporal, moment) == []


async def test_the_corpus_started_no_workflow(corpus: Corpus) -> None:
    """Visibility is written after the start: a sentinel started after the whole corpus is seen
    once every earlier start is, and it must be the only workflow started since the corpus
    began."""
    client = corpus.stack.temporal
    sentinel = await client.start_workflow(
        "CorpusSentinel", id=unique("corpus-sentinel"), task_queue=unique("nobody-polls")
    )
    try:
        found = await eventually(
            lambda: started_since(client, corpus.began),
            until=lambda ids: sentinel.id in ids,
            timeout=30,
            what="the sentinel in visibility",
        )
        assert found == [sentinel.id]
    finally:
        await sentinel.terminate("the corpus is checked")
