"""The worker's tracing: workflows and activities become OpenTelemetry spans, payloads do not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from infra import tracing
from infra.config import ColonySettings, SettingsError
from tests.test_harness import _greet
from worker import tracing_interceptor


async def test_workflow_and_activity_spans_are_recorded(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    config = dev_env.client.config()
    try:
        config["interceptors"] = [tracing_interceptor(provider=provider)]
        traced = Client(**config)
        await _greet(traced, task_queue)
    finally:
        tracing.install(None)

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
    with pytest.raises(SettingsError, match="COLONY_TRACE_EXPORT"):
        ColonySettings.from_env({"COLONY_TRACE_EXPORT": "zipkin"})


@pytest.mark.parametrize(
    ("export", "exporter"),
    [
        pytest.param("otlp", "OTLPSpanExporter", id="otlp"),
        pytest.param("console", "ConsoleSpanExporter", id="console"),
    ],
)
def test_exporters_by_configuration(export: str, exporter: str) -> None:
    provider = tracing.configure("colony-test", export)
    try:
        assert provider is not None
        assert tracing.enabled()
        processors = provider._active_span_processor._span_processors
        assert [type(p.span_exporter).__name__ for p in processors] == [exporter]  # type: ignore[attr-defined]
        assert provider.resource.attributes["service.name"] == "colony-test"
    finally:
        tracing.shutdown()
    assert not tracing.enabled()
    assert tracing.configure("colony-test", "") is None


def test_no_tracing_costs_a_null_context() -> None:
    with tracing.span("kube read_node", {"x": 1}) as span:
        assert span is None
    assert tracing.interceptor() is None


def test_colonyctl_refuses_an_unknown_exporter_on_one_line() -> None:
    from typer.testing import CliRunner

    from starter.cli import app

    result = CliRunner().invoke(
        app, ["catalog", "location", "list"], env={"COLONY_TRACE_EXPORT": "zipkin"}
    )
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: COLONY_TRACE_EXPORT: unknown exporter 'zipkin' (use 'otlp', 'console' or nothing)"
    ]
    assert not tracing.enabled()


def test_colonyctl_traces_its_command_to_the_console(tmp_path: Path) -> None:
    """`COLONY_TRACE_EXPORT=console colonyctl ...` in a process of its own: the command's span
    is printed (flushed before the process' `os._exit`)."""
    done = subprocess.run(
        [sys.executable, "-m", "starter.cli", "cluster", "get", "absent"],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parents[1],
        env={
            **os.environ,
            "COLONY_TRACE_EXPORT": "console",
            "TEMPORAL_ADDRESS": "127.0.0.1:1",
            "COLONY_CACHE_DIR": str(tmp_path),
        },
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert '"name": "colonyctl cluster get"' in done.stdout
