"""Opt-in: the same workflow on Temporal running in a container (testcontainers).

Skipped cleanly where no Docker engine answers (this project's CI machines have none); on a
developer laptop with Docker it proves the docker-compose image of Temporal works with Colony's
payload converter.
"""

from __future__ import annotations

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from tests.helpers import eventually
from tests.test_harness import _greet

pytestmark = pytest.mark.docker

TEMPORAL_IMAGE = "temporalio/temporal:1.9.1"


async def test_workflow_runs_on_temporal_in_a_container(task_queue: str) -> None:
    from testcontainers.core.container import DockerContainer

    container = (
        DockerContainer(TEMPORAL_IMAGE)
        .with_command("server start-dev --ip 0.0.0.0 --headless")
        .with_exposed_ports(7233)
    )
    with container:
        address = f"{container.get_container_host_ip()}:{container.get_exposed_port(7233)}"

        async def connect() -> Client | None:
            try:
                return await Client.connect(address, data_converter=pydantic_data_converter)
            except RuntimeError:
                return None

        client = await eventually(connect, timeout=60, interval=0.5, what="Temporal in Docker")
        assert client is not None
        result = await _greet(client, task_queue)
        assert result.text == "hello colony"
