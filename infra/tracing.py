"""OpenTelemetry tracing for every Colony process: one trace from `colonyctl` through the workflow
to each activity and its Kubernetes and host-provider calls.

- `configure(service, export)` is called once per process (`worker.py`, `watcher.py`, `colonyctl`
  when `COLONY_TRACE_EXPORT` is set): `otlp` sends spans over OTLP/HTTP to
  `OTEL_EXPORTER_OTLP_ENDPOINT` (the exporter reads the standard OTEL_* variables itself),
  `console` prints them, empty means no tracing at all;
- `interceptor()` is Temporal's `TracingInterceptor` on the configured tracer, for the client
  (`starter.client.connect`: the trace context travels in the headers of start, signal and
  update) and the worker (workflow, update and activity spans continue that trace);
- `span(name, ...)` is what the code around an outgoing call uses (`infra.kube.request`, the
  host provider's `_request`, `colonyctl`'s command): a no-op costing one global read when tracing
  is not configured.

OpenTelemetry is imported only once tracing is configured, so `colonyctl` starts without it (its
start-up is mostly imports; `tests/test_cli_startup.py`). Span attributes carry names and ids,
never payloads, so no secret reaches an exporter.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer
    from temporalio.contrib.opentelemetry import TracingInterceptor

TRACE_EXPORT_ENV = "COLONY_TRACE_EXPORT"
TRACER_NAME = "colony"

_tracer: Tracer | None = None
_provider: TracerProvider | None = None


def configure(service_name: str, export: str) -> TracerProvider | None:
    """Set up tracing for this process as `export` says; the provider (to shut down on exit), or
    None when `export` is empty."""
    if not export:
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SpanExporter,
    )

    exporter: SpanExporter
    if export == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    elif export == "console":
        exporter = ConsoleSpanExporter()
    else:
        raise ValueError(f"{TRACE_EXPORT_ENV}: unknown exporter {export!r}")
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    install(provider)
    return provider


def install(provider: TracerProvider | None) -> None:
    """Trace with `provider` from now on (None: stop tracing). Tests install an in-memory one."""
    global _tracer, _provider
    _provider = provider
    _tracer = None if provider is None else provider.get_tracer(TRACER_NAME)


def enabled() -> bool:
    return _tracer is not None


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether this process should trace: configured already, or asked to by the environment."""
    return enabled() or bool(environ.get(TRACE_EXPORT_ENV, "").strip())


def interceptor() -> TracingInterceptor | None:
    """Temporal's tracing interceptor on the configured tracer; None without tracing."""
    if _tracer is None:
        return None
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return TracingInterceptor(_tracer)


@contextlib.contextmanager
def span(name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[Span | None]:
    """A span around the block (exceptions are recorded on it), or nothing without tracing."""
    if _tracer is None:
        yield None
        return
    clean = {k: v for k, v in (attributes or {}).items() if v is not None}
    with _tracer.start_as_current_span(name, attributes=clean) as current:
        yield current


def set_attribute(current: Span | None, key: str, value: Any) -> None:
    """Set an attribute on a span `span()` gave (None without tracing)."""
    if current is not None and value is not None:
        current.set_attribute(key, value)


def shutdown() -> None:
    """Flush and stop the configured provider (on a process' way out); tracing stops."""
    provider = _provider
    install(None)
    if provider is not None:
        provider.shutdown()
