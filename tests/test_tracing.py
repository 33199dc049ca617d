"""The worker's tracing: workflows and activities become OpenTelemetry spans, payloads do not."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from activities.settings import SettingsError
from tests.test_harness import _greet
from worker import tracing_interceptor


async def test_workflow_and_activity_spans_are_recorded(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    config = dev_env.client.config()
    config["interceptors"] = [tracing_interceptor(provider=provider)]
    traced = Client(**config)

    await _greet(traced, task_queue)

    names = {span.name for span in exporter.get_finished_spans()}
    assert {
        "StartWorkflow:GreetingWorkflow",
        "RunWorkflow:GreetingWorkflow",
        "StartActivity:compose_greeting",
        "RunActivity:compose_greeting",
    } <= names
    for span in exporter.get_finished_spans():
        # Ids only: the payload (here the name "colony") never becomes a span attribute.
        assert all("colony" not in str(value) for value in (span.attributes or {}).values())


def test_unknown_exporter_is_refused() -> None:
    with pytest.raises(SettingsError, match="COLONY_TRACE_EXPORT"):
        tracing_interceptor("zipkin")
