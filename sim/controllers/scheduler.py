"""SIMULATOR. kube-scheduler for one emulated cluster: binds pending pods to nodes with room.

Started per child cluster by the k0rdent controller (and by tests on a bare store). A pass runs
whenever a pod or node changes: every pod with an empty `spec.nodeName` is tried against every node,
using the filters the real scheduler's default plugins apply (NodeUnschedulable, NodeReady via the
not-ready taint, TaintToleration, NodeAffinity/nodeSelector, NodeResourcesFit for cpu, memory,
`nvidia.com/gpu`, any other requested extended resource, and the pod count), and scored by least
allocated. Pods that fit nowhere get `PodScheduled=False, reason Unschedulable` with the real
scheduler's "0/N nodes are available: ..." message and are retried on the next change.

The quantity and toleration helpers here are shared by the other sim controllers.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from sim.apiserver.errors import ApiError
from sim.apiserver.registry import NODES, PODS
from sim.apiserver.store import ClusterStore, WatchEvent, clone
from sim.controllers.workqueue import ReconcileLoop

log = logging.getLogger(__name__)

GPU = "nvidia.com/gpu"
DEFAULT_SCHEDULER = "default-scheduler"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def parse_quantity(value: Any) -> Decimal:
    """A Kubernetes resource quantity ("100m", "8Gi", "1e3", 2) as a Decimal in base units.

    Raises:
        ValueError: not a quantity.
    """
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _QUANTITY.match(str(value).strip())
    if match is None or match.group(2) not in _SUFFIXES:
        raise ValueError(f"not a quantity: {value!r}")
    try:
        return Decimal(match.group(1)) * _SUFFIXES[match.group(2)]
    except InvalidOperation as exc:
        raise ValueError(f"not a quantity: {value!r}") from exc


def _add(total: dict[str, Decimal], resources: Mapping[str, Any] | None) -> None:
    for name, quantity in (resources or {}).items():
        total[name] = total.get(name, Decimal(0)) + parse_quantity(quantity)


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """Effective requests of a pod, as the scheduler computes them.

    Per container, requests default to limits when only limits are given (the apiserver's
    defaulting); the pod needs the sum over containers or the largest init container, whichever
    is larger, per resource.
    """
    spec = pod.get("spec") or {}
    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        _add(total, {**(resources.get("limits") or {}), **(resources.get("requests") or {})})
    for container in spec.get("initContainers") or []:
        resources = container.get("resources") or {}
        one: dict[str, Decimal] = {}
        _add(one, {**(resources.get("limits") or {}), **(resources.get("requests") or {})})
        for name, quantity in one.items():
            total[name] = max(total.get(name, Decimal(0)), quantity)
    _add(total, spec.get("overhead"))
    return total


def node_allocatable(node: Mapping[str, Any]) -> dict[str, Decimal]:
    """`status.allocatable` (falling back to capacity) as Decimals."""
    status = node.get("status") or {}
    out: dict[str, Decimal] = {}
    _add(out, status.get("allocatable") or status.get("capacity"))
    return out


def node_is_ready(node: Mapping[str, Any]) -> bool:
    """True when the node's Ready condition is True."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def pod_is_terminated(pod: Mapping[str, Any]) -> bool:
    """Succeeded or Failed pods hold no resources."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def toleration_matches(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Whether one toleration tolerates one taint (core/v1 ToleratesTaint semantics)."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return bool((toleration.get("value") or "") == (taint.get("value") or ""))


def untolerated_taints(
    tolerations: Iterable[Mapping[str, Any]], taints: Iterable[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The NoSchedule/NoExecute taints none of the tolerations tolerate."""
    tolerations = list(tolerations)
    return [
        taint
        for taint in taints
        if taint.get("effect") in ("NoSchedule", "NoExecute")
        and not any(toleration_matches(t, taint) for t in tolerations)
    ]


def _match_expression(expression: Mapping[str, Any], value: str | None) -> bool:
    operator = expression.get("operator")
    values = [str(v) for v in expression.get("values") or []]
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and values:
        try:
            left, right = int(value), int(values[0])
        except ValueError:
            return False
        return left > right if operator == "Gt" else left < right
    return False


def node_matches_selector(pod_spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """nodeSelector and required node affinity (matchExpressions and matchFields on the name)."""
    metadata = node.get("metadata") or {}
    labels: Mapping[str, str] = metadata.get("labels") or {}
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != str(value):
            return False
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    fields = {"metadata.name": metadata.get("name")}
    for term in terms:
        expressions = term.get("matchExpressions") or []
        field_expressions = term.get("matchFields") or []
        if not expressions and not field_expressions:
            continue
        if all(_match_expression(e, labels.get(e.get("key", ""))) for e in expressions) and all(
            _match_expression(e, fields.get(e.get("key", ""))) for e in field_expressions
        ):
            return True
    return False


def _format_resource(name: str) -> str:
    return name


class _NodeState:
    def __init__(self, node: dict[str, Any]) -> None:
        self.node = node
        self.name: str = node["metadata"]["name"]
        self.allocatable = node_allocatable(node)
        self.used: dict[str, Decimal] = {}
        self.pods = 0

    def free(self, resource: str) -> Decimal:
        return self.allocatable.get(resource, Decimal(0)) - self.used.get(resource, Decimal(0))

    def add(self, requests: Mapping[str, Decimal]) -> None:
        for name, quantity in requests.items():
            self.used[name] = self.used.get(name, Decimal(0)) + quantity
        self.pods += 1

    def score(self) -> Decimal:
        """Least-allocated score: mean free fraction of cpu and memory (higher is emptier)."""
        fractions = []
        for resource in ("cpu", "memory"):
            capacity = self.allocatable.get(resource, Decimal(0))
            if capacity > 0:
                fractions.append(self.free(resource) / capacity)
        return sum(fractions, Decimal(0)) / len(fractions) if fractions else Decimal(0)


def _why_not(
    pod: Mapping[str, Any], requests: Mapping[str, Decimal], node: _NodeState
) -> str | None:
    """Why `pod` cannot go onto `node`, worded as the scheduler's plugins word it; None if it fits."""
    spec = pod.get("spec") or {}
    tolerations = spec.get("tolerations") or []
    node_spec = node.node.get("spec") or {}
    if node_spec.get("unschedulable") and not any(
        toleration_matches(t, {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"})
        for t in tolerations
    ):
        return "node(s) were unschedulable"
    if not node_is_ready(node.node):
        return "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"
    untolerated = untolerated_taints(tolerations, node_spec.get("taints") or [])
    if untolerated:
        taint = untolerated[0]
        return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"
    if not node_matches_selector(spec, node.node):
        return "node(s) didn't match Pod's node affinity/selector"
    if node.pods + 1 > node.allocatable.get("pods", Decimal(110)):
        return "Too many pods"
    for resource, quantity in sorted(requests.items()):
        if quantity > 0 and node.free(resource) < quantity:
            return f"Insufficient {_format_resource(resource)}"
    return None


def _unschedulable_message(total: int, reasons: Counter[str]) -> str:
    parts = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
    suffix = f": {parts}" if parts else ""
    return (
        f"0/{total} nodes are available{suffix}. preemption: 0/{total} nodes are available: "
        f"{total} Preemption is not helpful for scheduling."
    )


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _set_pod_scheduled(pod: dict[str, Any], status: str, reason: str, message: str) -> bool:
    """Set the PodScheduled condition in place; True if anything changed."""
    pod_status = pod.setdefault("status", {})
    conditions: list[dict[str, Any]] = pod_status.setdefault("conditions", [])
    for condition in conditions:
        if condition.get("type") == "PodScheduled":
            if (
                condition.get("status") == status
                and condition.get("reason", "") == reason
                and condition.get("message", "") == message
            ):
                return False
            if condition.get("status") != status:
                condition["lastTransitionTime"] = _now()
            condition.update(status=status, reason=reason, message=message)
            if not reason:
                condition.pop("reason")
                condition.pop("message")
            return True
    condition = {"type": "PodScheduled", "status": status, "lastTransitionTime": _now()}
    if reason:
        condition.update(reason=reason, message=message)
    conditions.append(condition)
    return True


class Scheduler:
    """Binds pending pods of one `ClusterStore` to its nodes (see the module docstring)."""

    def __init__(self, store: ClusterStore, scheduler_name: str = DEFAULT_SCHEDULER) -> None:
        self.store = store
        self.scheduler_name = scheduler_name
        self._loop: ReconcileLoop[str] = ReconcileLoop(
            store, f"scheduler[{store.name}]", self._keys_for, self._reconcile, lambda: ["pass"]
        )

    async def run(self) -> None:
        """Schedule on every pod or node change until cancelled."""
        await self._loop.run()

    @staticmethod
    def _keys_for(event: WatchEvent) -> list[str]:
        return ["pass"] if event.rt.key in (PODS.key, NODES.key) else []

    async def _reconcile(self, _key: str) -> float | None:
        self.schedule_pending()
        return None

    def _wants(self, pod: Mapping[str, Any]) -> bool:
        spec = pod.get("spec") or {}
        return (
            not spec.get("nodeName")
            and not (pod.get("metadata") or {}).get("deletionTimestamp")
            and not pod_is_terminated(pod)
            and (spec.get("schedulerName") or DEFAULT_SCHEDULER) == self.scheduler_name
        )

    def schedule_pending(self) -> int:
        """One scheduling pass; returns how many pods were bound."""
        # The store's own objects, not copies: this pass only reads them and never awaits, and it
        # runs on every pod change. Copying every pod of a 1,000-pod cluster per change was
        # nine tenths of the simulator's time in a drain of 100 nodes (`bench.drain_scale`).
        pods, _ = self.store.list(PODS, copy_objects=False)
        pending = [clone(pod) for pod in pods if self._wants(pod)]
        if not pending:
            return 0
        nodes_list, _ = self.store.list(NODES)
        nodes = {node["metadata"]["name"]: _NodeState(node) for node in nodes_list}
        for pod in pods:
            bound = (pod.get("spec") or {}).get("nodeName")
            if bound in nodes and not pod_is_terminated(pod):
                nodes[bound].add(pod_requests(pod))
        pending.sort(
            key=lambda p: (
                -int((p.get("spec") or {}).get("priority") or 0),
                p["metadata"].get("creationTimestamp") or "",
                p["metadata"]["name"],
            )
        )
        bound_count = 0
        for pod in pending:
            if self._place(pod, nodes):
                bound_count += 1
        return bound_count

    def _place(self, pod: dict[str, Any], nodes: dict[str, _NodeState]) -> bool:
        meta = pod["metadata"]
        try:
            requests = pod_requests(pod)
        except ValueError as exc:
            self._mark_unschedulable(pod, f"invalid resource requests: {exc}")
            return False
        reasons: Counter[str] = Counter()
        feasible: list[_NodeState] = []
        for node in nodes.values():
            reason = _why_not(pod, requests, node)
            if reason is None:
                feasible.append(node)
            else:
                reasons[reason] += 1
        if not feasible:
            self._mark_unschedulable(pod, _unschedulable_message(len(nodes), reasons))
            return False
        best = max(feasible, key=lambda n: (n.score(), [-ord(c) for c in n.name]))

        try:
            self.store.bind(meta.get("namespace") or "default", meta["name"], best.name)
        except ApiError as exc:  # gone or bound since the list; the next pass sees it
            log.debug("binding %s/%s failed: %s", meta.get("namespace"), meta["name"], exc)
            return False
        best.add(requests)
        return True

    def _mark_unschedulable(self, pod: dict[str, Any], message: str) -> None:
        probe = {"status": {"conditions": list((pod.get("status") or {}).get("conditions") or [])}}
        if not _set_pod_scheduled(probe, "False", "Unschedulable", message):
            return
        meta = pod["metadata"]

        def mark(obj: dict[str, Any]) -> None:
            _set_pod_scheduled(obj, "False", "Unschedulable", message)

        try:
            self.store.mutate(PODS, meta.get("namespace"), meta["name"], mark)
        except ApiError as exc:
            log.debug("marking %s/%s failed: %s", meta.get("namespace"), meta["name"], exc)
