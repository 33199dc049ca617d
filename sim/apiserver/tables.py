"""Server-side printing: `meta.k8s.io/v1` Table responses for `kubectl get`.

kubectl asks for `as=Table`; answering with the columns a real server prints keeps its output
familiar (nodes show Ready/SchedulingDisabled, pods show Terminating, Completed, CrashLoopBackOff).
Built-in types get kube-apiserver's own columns (pkg/printers/internalversion): the server always
sends the wide ones too, with priority 1, and `kubectl get -o wide` is what shows them (pods: IP,
NODE, NOMINATED NODE, READINESS GATES; nodes: INTERNAL-IP ... CONTAINER-RUNTIME). Custom resources get their
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

from sim.apiserver.registry import (
    CLUSTERROLEBINDINGS,
    CLUSTERROLES,
    CONFIGMAPS,
    CRDS,
    DAEMONSETS,
    DEPLOYMENTS,
    EVENTS,
    LEASES,
    NAMESPACES,
    NODES,
    PDBS,
    PODS,
    ROLEBINDINGS,
    ROLES,
    SECRETS,
    SERVICEACCOUNTS,
    SERVICES,
    ResourceType,
)
from sim.pods import condition_true

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
    # printNode: Ready when True, NotReady for False *and* Unknown, Unknown without the condition.
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


def _node_address(node: Obj, kind: str) -> str:
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == kind:
            return str(address.get("address") or "<none>")
    return "<none>"


def _node_info(node: Obj, key: str) -> str:
    return str(((node.get("status") or {}).get("nodeInfo") or {}).get(key) or "<unknown>")


def _finished_at(terminated: Obj | None) -> str:
    return str((terminated or {}).get("finishedAt") or "")


def _terminated_reason(terminated: Obj, prefix: str = "") -> str:
    if terminated.get("reason"):
        return prefix + str(terminated["reason"])
    if terminated.get("signal"):
        return f"{prefix}Signal:{terminated['signal']}"
    return f"{prefix}ExitCode:{terminated.get('exitCode', 0)}"


def _pod_summary(pod: Obj, now: dt.datetime) -> tuple[str, str, str]:
    """(READY, STATUS, RESTARTS) as kube's printPod computes them."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    total = len(spec.get("containers") or [])
    ready = 0
    restarts = 0
    last_restart = ""
    phase = str(status.get("phase") or "Pending")
    reason = str(status.get("reason") or phase)
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"
    init_specs = spec.get("initContainers") or []
    initializing = False
    for index, container in enumerate(status.get("initContainerStatuses") or []):
        restarts += int(container.get("restartCount") or 0)
        last_restart = max(
            last_restart, _finished_at((container.get("lastState") or {}).get("terminated"))
        )
        state = container.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated is not None and terminated.get("exitCode", 0) == 0:
            continue
        if terminated is not None:
            reason = _terminated_reason(terminated, "Init:")
        elif waiting is not None and waiting.get("reason") not in (None, "", "PodInitializing"):
            reason = f"Init:{waiting['reason']}"
        else:
            reason = f"Init:{index}/{len(init_specs)}"
        initializing = True
        break
    initialized = any(
        c.get("type") == "Initialized" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    if not initializing or initialized:
        restarts, last_restart = 0, ""
        running = False
        for container in reversed(status.get("containerStatuses") or []):
            restarts += int(container.get("restartCount") or 0)
            last_restart = max(
                last_restart, _finished_at((container.get("lastState") or {}).get("terminated"))
            )
            state = container.get("state") or {}
            waiting, terminated = state.get("waiting"), state.get("terminated")
            if waiting is not None and waiting.get("reason"):
                reason = str(waiting["reason"])
            elif terminated is not None:
                reason = _terminated_reason(terminated)
            elif container.get("ready") and state.get("running") is not None:
                running = True
                ready += 1
        if reason == "Completed" and running:
            pod_ready = condition_true(status, "Ready")
            reason = "Running" if pod_ready else "NotReady"
    if pod["metadata"].get("deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            reason = "Terminating"
    restarts_text = str(restarts)
    if restarts and last_restart:
        restarts_text = f"{restarts} ({human_age(last_restart, now)} ago)"
    return f"{ready}/{total}", reason, restarts_text


def _pod_readiness_gates(pod: Obj) -> str:
    gates = (pod.get("spec") or {}).get("readinessGates") or []
    if not gates:
        return "<none>"
    conditions = {
        c.get("type"): c.get("status") for c in (pod.get("status") or {}).get("conditions") or []
    }
    true = sum(1 for g in gates if conditions.get(g.get("conditionType")) == "True")
    return f"{true}/{len(gates)}"


def _pod_ip(pod: Obj) -> str:
    ips = (pod.get("status") or {}).get("podIPs") or []
    return str((ips[0] or {}).get("ip") or "<none>") if ips else "<none>"


def _selector_text(selector: Obj | None) -> str:
    """metav1.FormatLabelSelector: `a=b,c in (d,e)`, `<none>` when empty."""
    if not selector:
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key", ""), expression.get("operator", "")
        values = ",".join(sorted(str(v) for v in expression.get("values") or []))
        if operator == "In":
            parts.append(f"{key} in ({values})")
        elif operator == "NotIn":
            parts.append(f"{key} notin ({values})")
        elif operator == "Exists":
            parts.append(key)
        elif operator == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts) or "<none>"


def _labels_text(labels: Obj | None) -> str:
    """labels.FormatLabels: `a=b,c=d`, `<none>` when empty."""
    return ",".join(f"{k}={v}" for k, v in sorted((labels or {}).items())) or "<none>"


def _containers(template_spec: Obj, field: str) -> str:
    return ",".join(str(c.get(field, "")) for c in template_spec.get("containers") or [])


def _template_spec(obj: Obj) -> Obj:
    return dict((((obj.get("spec") or {}).get("template") or {}).get("spec")) or {})


def _service_external_ip(service: Obj) -> str:
    spec = service.get("spec") or {}
    kind = spec.get("type") or "ClusterIP"
    external = list(spec.get("externalIPs") or [])
    if kind == "LoadBalancer":
        ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        external += [str(i.get("ip") or i.get("hostname") or "") for i in ingress]
        return ",".join(e for e in external if e) or "<pending>"
    if kind == "ExternalName":
        return str(spec.get("externalName") or "<none>")
    return ",".join(external) or "<none>"


def _service_ports(service: Obj) -> str:
    ports = (service.get("spec") or {}).get("ports") or []
    texts = []
    for port in ports:
        protocol = port.get("protocol") or "TCP"
        if port.get("nodePort"):
            texts.append(f"{port.get('port')}:{port['nodePort']}/{protocol}")
        else:
            texts.append(f"{port.get('port')}/{protocol}")
    return ",".join(texts) or "<none>"


def _int_or_na(value: Any) -> Any:
    return "N/A" if value is None else value


def _event_source(event: Obj) -> str:
    source = event.get("source") or {}
    component = source.get("component") or event.get("reportingComponent") or ""
    host = source.get("host") or ""
    return f"{component}, {host}" if host else str(component)


def _binding_subjects(binding: Obj, kind: str) -> str:
    names = []
    for subject in binding.get("subjects") or []:
        if subject.get("kind") != kind:
            continue
        if kind == "ServiceAccount":
            names.append(f"{subject.get('namespace', '')}/{subject.get('name', '')}")
        else:
            names.append(str(subject.get("name", "")))
    return ", ".join(names)


# A built-in type's server-side columns after Name: (name, type, priority, cell). "Age" columns
# take the object's creationTimestamp; priority 1 columns are the ones kubectl prints with -o wide.
# Copied from kube's pkg/printers/internalversion/printers.go (column names, order, priorities).
Cell = Callable[[Obj, dt.datetime], Any]
Column = tuple[str, str, int, Cell]


def _age(obj: Obj, now: dt.datetime) -> str:
    return human_age(obj["metadata"].get("creationTimestamp"), now)


def _created_at(obj: Obj, _now: dt.datetime) -> str:
    return str(obj["metadata"].get("creationTimestamp") or "")


_AGE: Column = ("Age", "string", 0, _age)
_CREATED_AT: Column = ("Created At", "date", 0, _created_at)
_BINDING: list[Column] = [
    ("Role", "string", 0, lambda b, _: f"{(b.get('roleRef') or {}).get('kind', '')}/{(b.get('roleRef') or {}).get('name', '')}"),
    _AGE,
    ("Users", "string", 1, lambda b, _: _binding_subjects(b, "User")),
    ("Groups", "string", 1, lambda b, _: _binding_subjects(b, "Group")),
    ("ServiceAccounts", "string", 1, lambda b, _: _binding_subjects(b, "ServiceAccount")),
]  # fmt: skip

_COLUMNS: dict[tuple[str, str], list[Column]] = {
    NODES.key: [
        ("Status", "string", 0, lambda n, _: _node_status(n)),
        ("Roles", "string", 0, lambda n, _: _node_roles(n)),
        _AGE,
        ("Version", "string", 0, lambda n, _: ((n.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")),
        ("Internal-IP", "string", 1, lambda n, _: _node_address(n, "InternalIP")),
        ("External-IP", "string", 1, lambda n, _: _node_address(n, "ExternalIP")),
        ("OS-Image", "string", 1, lambda n, _: _node_info(n, "osImage")),
        ("Kernel-Version", "string", 1, lambda n, _: _node_info(n, "kernelVersion")),
        ("Container-Runtime", "string", 1, lambda n, _: _node_info(n, "containerRuntimeVersion")),
    ],
    PODS.key: [
        ("Ready", "string", 0, lambda p, now: _pod_summary(p, now)[0]),
        ("Status", "string", 0, lambda p, now: _pod_summary(p, now)[1]),
        ("Restarts", "string", 0, lambda p, now: _pod_summary(p, now)[2]),
        _AGE,
        ("IP", "string", 1, lambda p, _: _pod_ip(p)),
        ("Node", "string", 1, lambda p, _: (p.get("spec") or {}).get("nodeName") or "<none>"),
        ("Nominated Node", "string", 1, lambda p, _: (p.get("status") or {}).get("nominatedNodeName") or "<none>"),
        ("Readiness Gates", "string", 1, lambda p, _: _pod_readiness_gates(p)),
    ],
    DEPLOYMENTS.key: [
        ("Ready", "string", 0, lambda d, _: f"{(d.get('status') or {}).get('readyReplicas', 0)}/{(d.get('spec') or {}).get('replicas', 1)}"),
        ("Up-to-date", "string", 0, lambda d, _: (d.get("status") or {}).get("updatedReplicas", 0)),
        ("Available", "string", 0, lambda d, _: (d.get("status") or {}).get("availableReplicas", 0)),
        _AGE,
        ("Containers", "string", 1, lambda d, _: _containers(_template_spec(d), "name")),
        ("Images", "string", 1, lambda d, _: _containers(_template_spec(d), "image")),
        ("Selector", "string", 1, lambda d, _: _selector_text((d.get("spec") or {}).get("selector"))),
    ],
    DAEMONSETS.key: [
        ("Desired", "integer", 0, lambda d, _: (d.get("status") or {}).get("desiredNumberScheduled", 0)),
        ("Current", "integer", 0, lambda d, _: (d.get("status") or {}).get("currentNumberScheduled", 0)),
        ("Ready", "integer", 0, lambda d, _: (d.get("status") or {}).get("numberReady", 0)),
        ("Up-to-date", "integer", 0, lambda d, _: (d.get("status") or {}).get("updatedNumberScheduled", 0)),
        ("Available", "integer", 0, lambda d, _: (d.get("status") or {}).get("numberAvailable", 0)),
        ("Node Selector", "string", 0, lambda d, _: _labels_text(_template_spec(d).get("nodeSelector"))),
        _AGE,
        ("Containers", "string", 1, lambda d, _: _containers(_template_spec(d), "name")),
        ("Images", "string", 1, lambda d, _: _containers(_template_spec(d), "image")),
        ("Selector", "string", 1, lambda d, _: _selector_text((d.get("spec") or {}).get("selector"))),
    ],
    SERVICES.key: [
        ("Type", "string", 0, lambda s, _: (s.get("spec") or {}).get("type") or "ClusterIP"),
        ("Cluster-IP", "string", 0, lambda s, _: (s.get("spec") or {}).get("clusterIP") or "<none>"),
        ("External-IP", "string", 0, lambda s, _: _service_external_ip(s)),
        ("Port(s)", "string", 0, lambda s, _: _service_ports(s)),
        _AGE,
        ("Selector", "string", 1, lambda s, _: _labels_text((s.get("spec") or {}).get("selector"))),
    ],
    NAMESPACES.key: [
        ("Status", "string", 0, lambda n, _: (n.get("status") or {}).get("phase") or "Active"),
        _AGE,
    ],
    SECRETS.key: [
        ("Type", "string", 0, lambda s, _: s.get("type") or "Opaque"),
        ("Data", "string", 0, lambda s, _: len(s.get("data") or {})),
        _AGE,
    ],
    CONFIGMAPS.key: [
        ("Data", "string", 0, lambda c, _: len(c.get("data") or {}) + len(c.get("binaryData") or {})),
        _AGE,
    ],
    SERVICEACCOUNTS.key: [
        ("Secrets", "string", 0, lambda s, _: len(s.get("secrets") or [])),
        _AGE,
    ],
    PDBS.key: [
        ("Min Available", "string", 0, lambda p, _: _int_or_na((p.get("spec") or {}).get("minAvailable"))),
        ("Max Unavailable", "string", 0, lambda p, _: _int_or_na((p.get("spec") or {}).get("maxUnavailable"))),
        ("Allowed Disruptions", "integer", 0, lambda p, _: (p.get("status") or {}).get("disruptionsAllowed", 0)),
        _AGE,
    ],
    LEASES.key: [
        ("Holder", "string", 0, lambda lease, _: (lease.get("spec") or {}).get("holderIdentity") or ""),
        _AGE,
    ],
    CRDS.key: [_CREATED_AT],
    CLUSTERROLES.key: [_CREATED_AT],
    ROLES.key: [_CREATED_AT],
    ROLEBINDINGS.key: _BINDING,
    CLUSTERROLEBINDINGS.key: _BINDING,
}  # fmt: skip

# Events are the one built-in table without a leading Name column (Name is a wide column at the end).
_EVENT_COLUMNS: list[Column] = [
    ("Last Seen", "string", 0, lambda e, now: human_age(e.get("lastTimestamp") or e.get("eventTime") or e["metadata"].get("creationTimestamp"), now)),
    ("Type", "string", 0, lambda e, _: e.get("type") or ""),
    ("Reason", "string", 0, lambda e, _: e.get("reason") or ""),
    ("Object", "string", 0, lambda e, _: f"{str((e.get('involvedObject') or {}).get('kind', '')).lower()}/{(e.get('involvedObject') or {}).get('name', '')}"),
    ("Subobject", "string", 1, lambda e, _: (e.get("involvedObject") or {}).get("fieldPath") or ""),
    ("Source", "string", 1, lambda e, _: _event_source(e)),
    ("Message", "string", 0, lambda e, _: str(e.get("message") or "").strip()),
    ("First Seen", "string", 1, lambda e, now: human_age(e.get("firstTimestamp") or e["metadata"].get("creationTimestamp"), now)),
    ("Count", "string", 1, lambda e, _: e.get("count") or 1),
    ("Name", "string", 1, lambda e, _: e["metadata"]["name"]),
]  # fmt: skip


def _column(name: str, kind: str, priority: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "type": kind,
        "format": "name" if name == "Name" else "",
        "description": "",
        "priority": priority,
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


def _row_conditions(rt: ResourceType, obj: Obj) -> list[dict[str, Any]] | None:
    # kube marks finished pods' rows so clients may dim or hide them (podSuccessConditions).
    if rt.key != PODS.key:
        return None
    phase = (obj.get("status") or {}).get("phase")
    if phase == "Succeeded":
        return [{"type": "Completed", "status": "True", "reason": "Succeeded",
                 "message": "The pod has completed successfully."}]  # fmt: skip
    if phase == "Failed":
        return [{"type": "Completed", "status": "True", "reason": "Failed",
                 "message": "The pod failed."}]  # fmt: skip
    return None


def table(rt: ResourceType, objects: list[Obj], resource_version: str, now: dt.datetime) -> Obj:
    """A Table of `objects`: a CRD's printer columns, or a built-in type's columns as kube-apiserver
    prints them (Name first, wide columns with priority 1), or Name and Age for anything else."""
    if rt.printer_columns:
        return _crd_table(rt, objects, resource_version, now)
    if rt.key == EVENTS.key:
        extra, leading_name = _EVENT_COLUMNS, False
    else:
        extra, leading_name = _COLUMNS.get(rt.key, [_AGE]), True
    columns = [_column("Name", "string")] if leading_name else []
    columns += [_column(name, kind, priority) for name, kind, priority, _ in extra]
    rows = []
    for obj in objects:
        cells: list[Any] = [obj["metadata"]["name"]] if leading_name else []
        cells += [cell(obj, now) for _, _, _, cell in extra]
        row: dict[str, Any] = {"cells": cells, "object": obj}
        conditions = _row_conditions(rt, obj)
        if conditions:
            row["conditions"] = conditions
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": columns,
        "rows": rows,
    }
