"""Property-based fuzzing of the HTTP API from its own OpenAPI document (schemathesis), through the
real ASGI app on the dev server, the sim and the worker.

Every operation of the document gets data that fits its schema (positive) and data that does not
(negative), with a key of every permission; the cluster (and workspace) in the path is a real,
ready cluster of the key's organization (with a running workspace on it) half of the time (so
bodies and queries reach the workflows' validators) and a generated name otherwise. Checked on
every answer: never a 5xx, the status is one the document lists for the operation, the body
matches its schema and content type, negative data is refused. And afterwards: nothing was
started by a refused request, no workflow the fuzzing did not get a 202 for exists (clusters and
workspaces alike), and the cluster and the workspace hold no operation they did not accept.

Bounded: `COLONY_FUZZ_EXAMPLES` examples per operation and mode (default 8), well under a minute.
Hypothesis runs in a worker thread and hands each request to the test's event loop, where the
app, the sim and the worker run.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from tests.api.conftest import BASE_URL, JUPYTER, WORKSPACES, ApiStack
from tests.helpers import unique

pytestmark = [pytest.mark.e2e]

EXAMPLES = int(os.environ.get("COLONY_FUZZ_EXAMPLES", "8"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
CHANGES = {"POST", "PATCH", "DELETE"}


def _httpx_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """schemathesis's request arguments (requests-style) as httpx takes them."""
    kwargs = dict(kwargs)
    if "data" in kwargs and isinstance(kwargs["data"], str | bytes):
        kwargs["content"] = kwargs.pop("data")
    return {
        key: value
        for key, value in kwargs.items()
        if key in {"method", "url", "params", "headers", "json", "content", "data"}
    }


async def test_fuzzing_the_openapi_document_finds_no_server_error_and_starts_nothing(
    catalog: ApiStack,
) -> None:
    api_stack = catalog
    organization = unique("fuzz")
    manager = await api_stack.key(organization)
    keys = [
        manager,
        await api_stack.key(organization, "read"),
        await api_stack.key(organization, "connect"),
    ]
    app = api_stack.app()
    name = unique("target")
    workspace = unique("target-nb")
    async with api_stack.http(app, manager) as admin:
        await api_stack.ready_cluster(admin, name)
        deployed = await admin.post(
            WORKSPACES,
            json={
                "name": workspace,
                "class": JUPYTER,
                "cluster": name,
                "secretValues": {"notebookPassword": "pw"},
            },
        )
        assert deployed.status_code == 202, deployed.text
        await api_stack.wait_workspace(admin, workspace, "Running")
        before = {
            op["id"]
            for op in (await admin.get(f"/v1/kubernetes/clusters/{name}/operations")).json()[
                "items"
            ]
        }
    schema = schemathesis.openapi.from_dict(app.openapi())
    loop = asyncio.get_running_loop()
    http = api_stack.http(app)
    accepted: list[tuple[str, str, int, Any]] = []
    failures: list[str] = []
    now: dict[str, str] = {}

    def send(case: Any) -> httpx.Response:
        kwargs = _httpx_kwargs(case.as_transport_kwargs(base_url=BASE_URL))
        future = asyncio.run_coroutine_threadsafe(http.request(**kwargs), loop)
        return future.result(timeout=120)

    def fuzz() -> int:
        count = 0
        for result in schema.get_all_operations():
            operation = result.ok()
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                # The real cluster (and its pool, its workspace, a real class) with the manager
                # key, so that bodies and queries reach the workflows' validators; generated names
                # with a key of any permission. The real cluster and workspace are never deleted
                # by the fuzzing: the deeper paths need them.
                real = {
                    parameter: value
                    for parameter, value in (
                        ("cluster_id", name),
                        ("pool", "gpu"),
                        ("workspace_id", workspace),
                        ("class_name", JUPYTER),
                    )
                    if f"{{{parameter}}}" in operation.path
                }
                deletes_it = operation.method.upper() == "DELETE" and operation.path.endswith(
                    ("{cluster_id}", "{workspace_id}")
                )
                variants: list[tuple[str, dict[str, str]]] = [(keys[count % 3], {})]
                if real and not deletes_it:
                    variants.append((manager, real))
                for key, path_parameters in variants:
                    strategy = operation.as_strategy(
                        mode,
                        headers={"Authorization": f"Bearer {key}"},
                        path_parameters=path_parameters or None,
                    )

                    @settings(
                        max_examples=EXAMPLES,
                        deadline=None,
                        database=None,
                        derandomize=True,
                        phases=[Phase.generate],
                        suppress_health_check=list(HealthCheck),
                    )
                    @given(case=strategy)
                    def check(case: Any) -> None:
                        response = send(case)
                        if case.method.upper() in CHANGES and response.status_code < 300:
                            accepted.append(
                                (
                                    case.method,
                                    case.formatted_path,
                                    response.status_code,
                                    response.json(),
                                )
                            )
                        try:
                            case.validate_response(response, checks=CHECKS)
                        except Exception as exc:  # one line per failure, all of them reported
                            failures.append(
                                f"{case.method} {case.formatted_path} ({now['mode']}): {exc}"
                            )

                    now["mode"] = mode
                    try:
                        check()
                    except Unsatisfiable:
                        # Negative mode for an operation with nothing to get wrong (no parameter,
                        # no body): no such request exists.
                        assert mode is GenerationMode.NEGATIVE, operation.path
                        continue
                    count += 1
        return count

    runs = await asyncio.to_thread(fuzz)
    await http.aclose()
    assert runs > 30
    assert failures == [], "\n".join(failures[:10])

    # Nothing the fuzzing was refused for started anything.
    accepted_ids = {str(body.get("operationId")) for *_, body in accepted if isinstance(body, dict)}
    created = {
        str(body.get("id"))
        for method, path, _, body in accepted
        if path == "/v1/kubernetes/clusters"
    }
    deployed_ids = {str(body.get("id")) for method, path, _, body in accepted if path == WORKSPACES}
    colonies = {
        str(body.get("id"))
        for method, path, _, body in accepted
        if method.upper() == "POST" and path == "/v1/colonies"
    }
    # A colony's clusters are named by its entries, which its answer does not list.
    of_colonies = tuple(f"cluster/{organization}/{c}-" for c in colonies)
    workflows = [
        execution.id
        async for execution in api_stack.temporal.list_workflows(
            f"ColonyOrganization = '{organization}'"
        )
        if not (of_colonies and execution.id.startswith(of_colonies))
    ]
    assert sorted(workflows) == sorted(
        [f"cluster/{organization}/{c}" for c in {name, *created}]
        + [f"workspace/{organization}/{w}" for w in {workspace, *deployed_ids}]
        + [f"colony/{organization}/{c}" for c in colonies]
    )
    async with api_stack.http(app, manager) as admin:
        after = (await admin.get(f"/v1/kubernetes/clusters/{name}/operations")).json()["items"]
        assert {op["id"] for op in after} - before <= accepted_ids
        # The workspace: its deploy, and only the suspends and resumes the fuzzing got a 202 for.
        ops = (await admin.get(f"{WORKSPACES}/{workspace}")).json()
        held = [
            op["id"]
            for op in [
                *ops["completedOperations"],
                ops.get("currentOperation"),
                *ops["queuedOperations"],
            ]
            if op
        ]
        assert set(held) - {"op-0001"} <= accepted_ids
        for cluster in {name, *created}:
            await admin.delete(f"/v1/kubernetes/clusters/{cluster}")
        for colony in colonies:
            await admin.delete(f"/v1/colonies/{colony}")
