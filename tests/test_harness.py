"""The test harness itself: both Temporal environments start from the venv's binaries and run work."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.helpers import unique


class Greeting(BaseModel):
    name: str


class GreetingResult(BaseModel):
    text: str


@activity.defn
async def compose_greeting(request: Greeting) -> GreetingResult:
    return GreetingResult(text=f"hello {request.name}")


@workflow.defn
class GreetingWorkflow:
    @workflow.run
    async def run(self, request: Greeting) -> GreetingResult:
        return await workflow.execute_activity(
            compose_greeting,
            request,
            start_to_close_timeout=timedelta(seconds=10),
        )


async def _greet(client: Client, task_queue: str) -> GreetingResult:
    async with Worker(
        client, task_queue=task_queue, workflows=[GreetingWorkflow], activities=[compose_greeting]
    ):
        return await client.execute_workflow(
            GreetingWorkflow.run,
            Greeting(name="colony"),
            id=unique("greeting"),
            task_queue=task_queue,
        )


async def test_dev_server_runs_a_workflow_with_pydantic_payloads(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    result = await _greet(dev_env.client, task_queue)
    assert result == GreetingResult(text="hello colony")


async def test_time_skipping_server_runs_a_workflow(
    time_env: WorkflowEnvironment, task_queue: str
) -> None:
    result = await _greet(time_env.client, task_queue)
    assert result.text == "hello colony"


async def test_dev_server_has_colony_search_attributes(dev_env: WorkflowEnvironment) -> None:
    from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest

    response = await dev_env.client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=dev_env.client.namespace)
    )
    assert {"ColonyCluster", "ColonyPhase"} <= set(response.custom_attributes)
