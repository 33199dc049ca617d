"""Server-side printing: `meta.k8s.io/v1` Table responses for `kubectl get`.

kubectl asks for `as=Table`; answering with the columns a real server prints keeps its output
familiar (nodes show Ready/SchedulingDisabled, pods show Terminating). Custom resources get their
CRD's additionalPrinterColumns, evaluated like apiextensions-apiserver's table convertor: a subset of
JSONPath (fields, `[n]`, `[*]`, `[?(@.path=="value")]`), several matches joined with ", ", a
missing value as an empty cell (kubectl prints `<none>`), `date` columns as ages.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
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


# One step of a printer column's JSONPath: `.name`, `['name']`, `[3]`, `[*]`, `[?(@.a.b=="v")]`.
_STEP = re.compile(
    r"""\.(?P<field>[A-Za-z0-9_$-]+)"""
    r"""|\[['"](?P<quoted>[^'"]+)['"]\]"""
    r"""|\[(?P<index>-?\d+)\]"""
    r"""|\[(?P<all>\*)\]"""
    r"""|\[\?\(@(?P<path>(?:\.[A-Za-z0-9_$-]+)+)\s*==\s*['"](?P<value>[^'"]*)['"]\)\]"""
)
Step = tuple[str, Any]


@functools.lru_cache(maxsize=256)
def _compile_path(path: str) -> tuple[Step, ...] | None:
    """The steps of a JSONPath like `.status.conditions[?(@.type=="Ready")].status` (None:
    unsupported, the column stays empty)."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    steps: list[Step] = []
    pos = 0
    while pos < len(text):
        match = _STEP.match(text, pos)
        if match is None:
            return None
        if match["field"] is not None or match["quoted"] is not None:
            steps.append(("field", match["field"] or match["quoted"]))
        elif match["index"] is not None:
            steps.append(("index", int(match["index"])))
        elif match["all"] is not None:
            steps.append(("all", None))
        else:
            steps.append(("filter", (tuple(match["path"].split(".")[1:]), match["value"])))
        pos = match.end()
    return tuple(steps)


def _lookup(value: Any, fields: tuple[str, ...]) -> Any:
    for name in fields:
        if not isinstance(value, dict) or name not in value:
            return None
        value = value[name]
    return value


def evaluate_path(obj: Obj, path: str) -> list[Any]:
    """Every value `path` selects in `obj` (empty when none, or the path is unsupported)."""
    steps = _compile_path(path)
    if steps is None:
        return []
    current: list[Any] = [obj]
    for kind, arg in steps:
        found: list[Any] = []
        for value in current:
            if kind == "field":
                if isinstance(value, dict) and arg in value:
                    found.append(value[arg])
            elif kind == "index":
                if isinstance(value, list) and -len(value) <= arg < len(value):
                    found.append(value[arg])
            elif kind == "all":
                if isinstance(value, list):
                    found.extend(value)
                elif isinstance(value, dict):
                    found.extend(value.values())
            elif isinstance(value, list):
                fields, wanted = arg
                found.extend(
                    item
                    for item in value
                    if isinstance(item, dict) and str(_lookup(item, fields)) == wanted
                )
        current = found
    return current


def _printer_cell(obj: Obj, column: dict[str, Any], now: dt.datetime) -> Any:
    values = evaluate_path(obj, str(column.get("jsonPath", "")))
    if not values:
        return None
    if column.get("type") == "date" and len(values) == 1 and isinstance(values[0], str):
        try:
            return human_age(values[0], now)
        except ValueError:
            return values[0]
    if len(values) == 1 and not isinstance(values[0], dict | list):
        return values[0]
    return ", ".join(_text(v) for v in values)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _crd_table(
    rt: ResourceType, objects: list[Obj], resource_version: str, now: dt.datetime
) -> Obj:
    columns = [_column("Name", "string")]
    for column in rt.printer_columns:
        definition = _column(str(column.get("name", "")), str(column.get("type", "string")))
        definition["format"] = str(column.get("format", ""))
        definition["description"] = str(column.get("description", ""))
        definition["priority"] = int(column.get("priority", 0))
        columns.append(definition)
    rows = [
        {
            "cells": [obj["metadata"]["name"]]
            + [_printer_cell(obj, column, now) for column in rt.printer_columns],
            "object": obj,
        }
        for obj in objects
    ]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": columns,
        "rows": rows,
    }


def table(rt: ResourceType, objects: list[Obj], resource_version: str, now: dt.datetime) -> Obj:
    """A Table of `objects` with Name, the type's columns, and Age (a CRD's printer columns)."""
    if rt.printer_columns:
        return _crd_table(rt, objects, resource_version, now)
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
