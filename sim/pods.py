"""What the simulator's parts agree a pod's state means, written once: whether a pod serves (the
Eviction API's PodDisruptionBudget count, `sim.apiserver.store`; a Service's endpoints,
`sim.podnet.network`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def condition_true(status: Mapping[str, Any], kind: str) -> bool:
    """Whether the status holds the condition `kind` with status True."""
    return any(
        c.get("type") == kind and c.get("status") == "True" for c in status.get("conditions") or []
    )


def pod_serving(pod: Mapping[str, Any]) -> bool:
    """Running, Ready and not terminating: a healthy pod to a budget, an endpoint to a Service."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and condition_true(status, "Ready")
