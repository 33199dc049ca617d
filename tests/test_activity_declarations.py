"""Every activity workflows declare is implemented once, by a method linked to its declaration.

- The worker registers exactly one implementation per declaration, found on its providers
  (`activities.declarations.implementations`) (`workflows.cluster_calls`,
  `workflows.workspace_calls`), and nothing undeclared; each under the declared name, made with
  `activities.declarations.implements`.
- `implements` refuses, at import, a method whose result is not the declared one or whose
  argument is not one request model; and mypy refuses one whose request or result type differs
  from the declaration's (run here on small modules, beside a right one as the control).
- A wait (`WaitCall`) is called with its length and a call (`ActivityCall`) without one: mypy
  refuses either the other way round (beside the right calls, the control).
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client
from temporalio import activity

from activities.declarations import declaration_of, declarations, implementations, implements
from models.activity_api import AwaitNodesResult, KubeconfigRef, ListNodesRequest, ListNodesResult
from worker import activity_callables
from workflows.cluster_calls import LIST_NODES

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
async def registered() -> list[Any]:
    management = client.ApiClient()
    async with httpx.AsyncClient() as http:
        temporal: Any = object()  # only kept by TemporalActivities, never called here
        callables, clients = activity_callables(management, http, temporal, "queue")
        clients.close()
    management.close()
    return callables


def test_declarations_are_found() -> None:
    names = [d.name for d in declarations()]
    assert {"claim_hosts", "apply_service_set", "signal_with_start"} <= set(names)
    assert len(names) == len(set(names)), "two declarations of one name"


def test_every_declaration_has_exactly_one_registered_implementation(registered: list[Any]) -> None:
    declared = Counter(str(d.name) for d in declarations())
    implemented = Counter(
        str(activity._Definition.must_from_callable(fn).name) for fn in registered
    )
    assert implemented == declared, (
        f"declared, not registered: {sorted(declared - implemented)}; "
        f"registered, not declared (or twice): {sorted(implemented - declared)}"
    )


def test_every_registered_activity_is_linked_to_its_declaration(registered: list[Any]) -> None:
    for fn in registered:
        declaration = declaration_of(fn)
        assert declaration is not None, f"{fn.__qualname__} is not made with implements(...)"
        assert activity._Definition.must_from_callable(fn).name == declaration.name


def test_a_result_other_than_the_declared_one_fails_at_import() -> None:
    with pytest.raises(TypeError, match="declared to return ListNodesResult"):

        class Wrong:
            @implements(LIST_NODES)
            async def list_nodes(self, request: ListNodesRequest) -> AwaitNodesResult:
                raise NotImplementedError


async def two_arguments(self: Any, request: ListNodesRequest, extra: int) -> ListNodesResult:
    raise NotImplementedError


async def not_a_model(self: Any, request: dict[str, Any]) -> ListNodesResult:
    raise NotImplementedError


@pytest.mark.parametrize(
    "method",
    [pytest.param(two_arguments, id="two-arguments"), pytest.param(not_a_model, id="a-dict")],
)
def test_an_argument_other_than_one_request_model_fails_at_import(method: Any) -> None:
    with pytest.raises(TypeError, match=method.__name__):
        implements(LIST_NODES)(method)


def test_a_right_implementation_is_an_activity_of_the_declared_name() -> None:
    class Right:
        @implements(LIST_NODES)
        async def list_nodes(self, request: ListNodesRequest) -> ListNodesResult:
            return ListNodesResult(nodes=[])

    assert activity._Definition.must_from_callable(Right().list_nodes).name == "list_nodes"
    assert declaration_of(Right.list_nodes) is LIST_NODES


async def test_a_providers_activities_are_found_bound_and_nothing_else() -> None:
    """`implementations` is what the worker registers: each provider's methods made with
    `implements`, bound to that provider; its other methods are not activities."""

    class Provider:
        def __init__(self) -> None:
            self.asked = 0

        @implements(LIST_NODES)
        async def list_nodes(self, request: ListNodesRequest) -> ListNodesResult:
            self.asked += 1
            return ListNodesResult(nodes=[])

        async def helper(self, request: ListNodesRequest) -> ListNodesResult:
            return ListNodesResult(nodes=[])

    provider = Provider()
    found = implementations(provider)
    assert [declaration_of(f) for f in found] == [LIST_NODES]
    await found[0](ListNodesRequest(kubeconfig=KubeconfigRef(namespace="n", secret_name="s")))
    assert provider.asked == 1


def mypy_refuses(folder: Path, modules: Iterable[str]) -> set[str]:
    """The modules (`<folder>/<name>.py`) that `mypy --strict` refuses, run as `make lint` runs it."""
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", "--strict"]
        + [str(folder / f"{name}.py") for name in modules],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    refused = {
        Path(line.split(":")[0]).stem for line in checked.stdout.splitlines() if ": error:" in line
    }
    assert refused or checked.returncode == 0, checked.stdout + checked.stderr
    return refused


IMPLEMENTATIONS = {
    "right": ("ListNodesRequest", "ListNodesResult"),
    "wrong_request": ("AwaitNodesRequest", "ListNodesResult"),
    "wrong_result": ("ListNodesRequest", "AwaitNodesResult"),
}


def test_mypy_refuses_an_implementation_of_other_types_than_declared(tmp_path: Path) -> None:
    for name, (request, result) in IMPLEMENTATIONS.items():
        (tmp_path / f"{name}.py").write_text(
            "from activities.declarations import cluster_calls, implements\n"
            "from models.activity_api import AwaitNodesRequest, AwaitNodesResult, "
            "ListNodesRequest, ListNodesResult\n\n\n"
            "class Implementation:\n"
            "    @implements(cluster_calls.LIST_NODES)\n"
            f"    async def list_nodes(self, request: {request}) -> {result}:\n"
            "        raise NotImplementedError\n"
        )
    assert mypy_refuses(tmp_path, IMPLEMENTATIONS) == {"wrong_request", "wrong_result"}


CALLS = {
    "right_calls": ("AWAIT_NODES(waiting, wait=LENGTH)", "LIST_NODES(listing)"),
    "wait_without_length": ("AWAIT_NODES(waiting)", "LIST_NODES(listing)"),
    "call_with_length": ("AWAIT_NODES(waiting, wait=LENGTH)", "LIST_NODES(listing, wait=LENGTH)"),
}


def test_mypy_refuses_a_wait_without_its_length_and_a_call_with_one(tmp_path: Path) -> None:
    for name, (wait, call) in CALLS.items():
        (tmp_path / f"{name}.py").write_text(
            "from datetime import timedelta\n\n"
            "from models.activity_api import AwaitNodesRequest, ListNodesRequest\n"
            "from workflows.cluster_calls import AWAIT_NODES, LIST_NODES\n\n"
            "LENGTH = timedelta(minutes=1)\n\n\n"
            "async def calls(waiting: AwaitNodesRequest, listing: ListNodesRequest) -> None:\n"
            f"    await {wait}\n"
            f"    await {call}\n"
        )
    assert mypy_refuses(tmp_path, CALLS) == {"wait_without_length", "call_with_length"}
