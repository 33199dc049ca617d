"""Server-side printing: `meta.k8s.io/v1` Table responses for `kubectl get`.

kubectl asks for `as=Table`; answering with the columns a real server prints keeps its output
familiar (nodes show Ready/SchedulingDisabled, pods show Terminating).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from sim.apiserver.registry import DEPLOYMENTS, NODES, PODS, ResourceType

Obj = dict[str, Any]


def human_age(created: str | None, now: dt.datetime) -> str:
    """kubectl's short duration: 42s, 5m, 3h, 2d."""
    if not created:
        return "<unknown>"
    then = dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
    seconds = max(int((now - then).total_seconds()), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * 2 or (unit == "m" and seconds >= 120):
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _node_status(node: Obj) -> str:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    text = "Unknown" if ready is None else "NotReady"
    if ready is not None and ready.get("status") == "True":
        text = "Ready"
    if (node.get("spec") or {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    return text


def _node_roles(node: Obj) -> str:
    prefix = "node-role.kubernetes.io/"
    labels = node["metadata"].get("labels") or {}
    roles = sorted(k[len(prefix) :] for k in labels if k.startswith(prefix))
    return ",".join(roles) or "<none>"


def _pod_ready(pod: Obj) -> str:
    containers = (pod.get("spec") or {}).get("containers") or []
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return f"{sum(1 for s in statuses if s.get('ready'))}/{len(containers)}"


def _pod_status(pod: Obj) -> str:
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    return str((pod.get("status") or {}).get("phase") or "Pending")


Column = tuple[str, str, Callable[[Obj], Any]]

_COLUMNS: dict[tuple[str, str], list[Column]] = {
    NODES.key: [
        ("Status", "string", _node_status),
        ("Roles", "string", _node_roles),
    ],
    PODS.key: [
        ("Ready", "string", _pod_ready),
        ("Status", "string", _pod_status),
        ("Restarts", "integer", lambda p: 0),
    ],
    DEPLOYMENTS.key: [
        (
            "Ready",
            "string",
            lambda d: (
                f"{(d.get('status') or {}).get('readyReplicas', 0)}/{(d.get('spec') or {}).get('replicas', 1)}"
            ),
        ),
    ],
}


def _column(name: str, kind: str) -> dict[str, Any]:
    return {
        "name": name,
        "type": kind,
        "format": "name" if name == "Name" else "",
        "description": "",
        "priority": 0,
    }


def table(rt: ResourceType, objects: list[Obj], resource_version: str, now: dt.datetime) -> Obj:
    """A Table of `objects` with Name, the type's columns, and Age."""
    extra = _COLUMNS.get(rt.key, [])
    columns = [_column("Name", "string")]
    columns += [_column(name, kind) for name, kind, _ in extra]
    columns.append(_column("Age", "string"))
    if rt.key == NODES.key:
        columns.append(_column("Version", "string"))
    rows = []
    for obj in objects:
        meta = obj["metadata"]
        cells: list[Any] = [meta["name"]]
        cells += [fn(obj) for _, _, fn in extra]
        cells.append(human_age(meta.get("creationTimestamp"), now))
        if rt.key == NODES.key:
            info = (obj.get("status") or {}).get("nodeInfo") or {}
            cells.append(info.get("kubeletVersion", ""))
        rows.append({"cells": cells, "object": obj})
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": columns,
        "rows": rows,
    }
