"""Colony's own Prometheus metrics, and the endpoint that serves them with Temporal's.

Activities (and the watcher) call the small functions below where something worth counting
happens; nothing else in them knows about Prometheus. `worker.py` starts the endpoint on
`COLONY_METRICS_PORT` with `serve(...)`: one scrape target carries Colony's metrics, the Python
process' own, and the Temporal runtime's worker metrics (task slots, poll latencies, schedule-to-
start, sticky cache...), which the SDK's Rust core exposes on a loopback port of its own that this
endpoint folds in, so a deployment scrapes one port per worker.

Metric names (all prefixed `colony_`):

| name | type | labels | set by |
| --- | --- | --- | --- |
| `colony_drain_duration_seconds` | histogram | `outcome` (drained, timed_out, forced, node_gone) | `drain_node` |
| `colony_evictions_refused_total` | counter | | `drain_node`, each eviction a budget refused |
| `colony_host_claims_total` | counter | `outcome` (claimed, refused, failed) | `claim_hosts` |
| `colony_activity_errors_total` | counter | `activity`, `error_type` | every activity (`activities.errors.ActivityErrorCounter`) |
| `colony_workspaces_waiting` | gauge | `cluster` | the cluster's GPU ledger (a workflow metric, below) |
| `colony_admission_wait_seconds` | histogram | `cluster` | each workspace admitted (a workflow metric, below) |
| `colony_watcher_leader` | gauge | | the watcher: 1 while this process leads |
| `colony_watcher_signals_total` | counter | `signal`, `outcome` (sent, no_workflow) | the watcher |
| `colony_watcher_relists_total` | counter | `stream_kind` | the watcher, after a 410 Gone |

The two workspace metrics are recorded by workflows through Temporal's workflow metric meter
(`workflows/metrics.py`): replay-safe, and served with the Temporal runtime's metrics on the same
endpoint (its buckets are set in `worker.temporal_runtime`).
"""

from __future__ import annotations

import logging
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry

log = logging.getLogger("colony.metrics")

DRAIN_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200)
"""Seconds: a drain takes seconds without budgets, and up to its deadline (1 h by default) with."""

DRAIN_DURATION = Histogram(
    "colony_drain_duration_seconds",
    "Time from a node's drain start to its end, by outcome.",
    ["outcome"],
    buckets=DRAIN_BUCKETS,
)
EVICTIONS_REFUSED = Counter(
    "colony_evictions_refused",
    "Evictions a PodDisruptionBudget refused (each is retried until the drain's deadline).",
)
HOST_CLAIMS = Counter(
    "colony_host_claims", "Host claims on the host provider, by outcome.", ["outcome"]
)
ACTIVITY_ERRORS = Counter(
    "colony_activity_errors",
    "Activity attempts that failed, by activity and error type.",
    ["activity", "error_type"],
)
WATCHER_LEADER = Gauge("colony_watcher_leader", "1 while this process' watcher holds the Lease.")
WATCHER_SIGNALS = Counter(
    "colony_watcher_signals",
    "Signals the watcher sent to workflows, by signal and outcome.",
    ["signal", "outcome"],
)
WATCHER_RELISTS = Counter(
    "colony_watcher_relists",
    "Relists after a watch's resourceVersion was gone (410), by kind of stream.",
    ["stream_kind"],
)


# --- What activities and the watcher call ---------------------------------------------------------


def drain_finished(seconds: float, outcome: str) -> None:
    """A node's drain ended (`drained`, `timed_out`, `forced` or `node_gone`) after `seconds`."""
    DRAIN_DURATION.labels(outcome=outcome).observe(max(0.0, seconds))


def eviction_refused() -> None:
    """A PodDisruptionBudget refused one eviction."""
    EVICTIONS_REFUSED.inc()


def host_claim(outcome: str) -> None:
    """One claim call ended: `claimed`, `refused` (the provider said no) or `failed`."""
    HOST_CLAIMS.labels(outcome=outcome).inc()


def activity_failed(activity_type: str, error_type: str) -> None:
    """An activity attempt failed with an error of `error_type`."""
    ACTIVITY_ERRORS.labels(activity=activity_type, error_type=error_type).inc()


def watcher_leading(leading: bool) -> None:
    WATCHER_LEADER.set(1 if leading else 0)


def watcher_signal(signal: str, delivered: bool) -> None:
    WATCHER_SIGNALS.labels(signal=signal, outcome="sent" if delivered else "no_workflow").inc()


def watcher_relist(stream_kind: str) -> None:
    WATCHER_RELISTS.labels(stream_kind=stream_kind).inc()


# --- The endpoint ------------------------------------------------------------------------------------


class TemporalRuntimeMetrics(Collector):
    """Folds the Temporal runtime's Prometheus endpoint (loopback) into Colony's registry."""

    def __init__(self, url: str) -> None:
        self._url = url

    def collect(self) -> Iterator[Any]:
        try:
            with urllib.request.urlopen(self._url, timeout=5) as response:
                text = response.read().decode("utf-8")
        except OSError as exc:
            log.warning("Temporal runtime metrics unavailable at %s: %s", self._url, exc)
            return
        yield from text_string_to_metric_families(text)


_servers: dict[int, Any] = {}
_folded: set[str] = set()
_lock = threading.Lock()


def serve(
    port: int,
    *,
    address: str = "0.0.0.0",
    temporal_metrics_url: str | None = None,
    registry: CollectorRegistry = REGISTRY,
) -> int:
    """Serve the registry on `address:port` (0: any free port); the port it listens on.

    Idempotent per port in one process (tests start several workers)."""
    with _lock:
        if temporal_metrics_url and temporal_metrics_url not in _folded:
            registry.register(TemporalRuntimeMetrics(temporal_metrics_url))
            _folded.add(temporal_metrics_url)
        if port and port in _servers:
            return port
        server, _thread = start_http_server(port, addr=address, registry=registry)
        bound = int(server.server_address[1])
        _servers[bound] = server
        return bound
