"""Metrics workflows record, through Temporal's workflow metric meter.

The meter is replay-safe (nothing is recorded while a workflow replays), and its instruments are
served with the Temporal runtime's metrics, which `worker.py` folds into Colony's `/metrics`
endpoint (`infra.metrics`). Names follow Colony's `colony_` prefix.
"""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow

WORKSPACES_WAITING = "colony_workspaces_waiting"
ADMISSION_WAIT = "colony_admission_wait_seconds"
ADMISSION_BUCKETS = (1, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600)
"""Seconds: a workspace waits for GPUs from nothing to a day."""
HISTOGRAM_BUCKETS = {ADMISSION_WAIT: [float(b) for b in ADMISSION_BUCKETS]}
"""Bucket overrides for the Temporal runtime's Prometheus exporter."""


def workspaces_waiting(cluster: str, count: int) -> None:
    """How many workspaces wait for GPUs on `cluster` now (the cluster's ledger sets it)."""
    workflow.metric_meter().create_gauge(
        WORKSPACES_WAITING, "Workspaces waiting for GPUs to be admitted, per cluster."
    ).set(count, {"cluster": cluster})


def admission_waited(cluster: str, asked_at: datetime) -> None:
    """A workspace asked for GPUs at `asked_at` and was admitted now."""
    waited = max(0.0, (workflow.now() - asked_at).total_seconds())
    workflow.metric_meter().create_histogram_float(
        ADMISSION_WAIT, "Time a workspace waited for GPUs before it was admitted.", "s"
    ).record(waited, {"cluster": cluster})
