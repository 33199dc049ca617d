"""Label and field selectors, parsed once and matched against plain-dict objects.

Used by the store for list/watch filtering and by eviction/PDB logic for `LabelSelector` objects.
The grammar follows apimachinery: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`,
`a>1`, `a<1` for labels; `path=v`, `path==v`, `path!=v` for fields (any dotted path is accepted,
which covers metadata.name, spec.nodeName, status.phase, spec.unschedulable, involvedObject.*).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sim.apiserver.errors import bad_request

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_SET_RE = re.compile(rf"^\s*(!)?\s*({_KEY})\s+(in|notin)\s*\((.*)\)\s*$")
_OP_RE = re.compile(rf"^\s*({_KEY})\s*(==|!=|=|>|<)\s*([-A-Za-z0-9_.]*)\s*$")
_EXISTS_RE = re.compile(rf"^\s*(!)?\s*({_KEY})\s*$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "in", "notin", "exists", "!exists", "gt", "lt"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "in":
            return present and labels[self.key] in self.values
        if self.op == "notin":
            return not present or labels[self.key] not in self.values
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if not present:
            return False
        try:
            actual = int(labels[self.key])
            bound = int(next(iter(self.values)))
        except ValueError:
            return False
        return actual > bound if self.op == "gt" else actual < bound


def _split_terms(text: str) -> list[str]:
    terms: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(ch)
    terms.append("".join(current))
    return [t for t in (term.strip() for term in terms) if t]


class LabelSelector:
    """A parsed label selector; an empty one matches everything."""

    def __init__(self, requirements: list[Requirement]) -> None:
        self.requirements = requirements
        # `key=value` terms (the common case) as pairs, checked with one dict lookup each.
        self._equals = tuple(
            (r.key, next(iter(r.values)))
            for r in requirements
            if r.op == "in" and len(r.values) == 1
        )
        self._others = tuple(r for r in requirements if not (r.op == "in" and len(r.values) == 1))

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        """Parse the string form used in `?labelSelector=`; 400 BadRequest on bad syntax."""
        reqs: list[Requirement] = []
        for term in _split_terms(text or ""):
            if m := _SET_RE.match(term):
                if m.group(1):
                    raise bad_request(f"unable to parse requirement: {term!r}")
                values = frozenset(v.strip() for v in m.group(4).split(",") if v.strip())
                reqs.append(Requirement(m.group(2), m.group(3), values))
            elif m := _OP_RE.match(term):
                op = {"=": "in", "==": "in", "!=": "notin", ">": "gt", "<": "lt"}[m.group(2)]
                reqs.append(Requirement(m.group(1), op, frozenset({m.group(3)})))
            elif m := _EXISTS_RE.match(term):
                reqs.append(Requirement(m.group(2), "!exists" if m.group(1) else "exists"))
            else:
                raise bad_request(f"unable to parse requirement: {term!r}")
        return cls(reqs)

    @classmethod
    def from_object(cls, selector: Mapping[str, Any] | None) -> LabelSelector:
        """A `metav1.LabelSelector` (matchLabels/matchExpressions) as a selector."""
        reqs: list[Requirement] = []
        if not selector:
            return cls(reqs)
        for key, value in (selector.get("matchLabels") or {}).items():
            reqs.append(Requirement(key, "in", frozenset({str(value)})))
        for expr in selector.get("matchExpressions") or []:
            op = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}.get(
                expr.get("operator", ""), ""
            )
            if not op:
                raise bad_request(f"{expr.get('operator')!r} is not a valid selector operator")
            reqs.append(Requirement(expr["key"], op, frozenset(expr.get("values") or ())))
        return cls(reqs)

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if not labels:
            labels = {}
        for key, value in self._equals:
            if labels.get(key, _MISSING) != value:
                return False
        return not self._others or all(r.matches(labels) for r in self._others)


_MISSING = object()


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping):
            current = None
            break
        current = current.get(part)
    if current is None:
        # Unset booleans read as "false" (spec.unschedulable), everything else as "".
        return "false" if path == "spec.unschedulable" else ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


class FieldSelector:
    """A parsed field selector: a conjunction of `path=value` / `path!=value` terms."""

    def __init__(self, terms: list[tuple[str, bool, str]]) -> None:
        self.terms = terms  # (path, equal, value)

    @classmethod
    def parse(cls, text: str | None) -> FieldSelector:
        terms: list[tuple[str, bool, str]] = []
        for term in _split_terms(text or ""):
            if "!=" in term:
                path, value = term.split("!=", 1)
                terms.append((path.strip(), False, value.strip()))
            elif "==" in term:
                path, value = term.split("==", 1)
                terms.append((path.strip(), True, value.strip()))
            elif "=" in term:
                path, value = term.split("=", 1)
                terms.append((path.strip(), True, value.strip()))
            else:
                raise bad_request(f"invalid selector: {term!r}; can't understand {term!r}")
        return cls(terms)

    @property
    def empty(self) -> bool:
        return not self.terms

    def value_of(self, path: str) -> str | None:
        """The value an equality term pins `path` to, if any (lets the store use an index)."""
        for p, equal, value in self.terms:
            if p == path and equal:
                return value
        return None

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all((_field_value(obj, p) == v) == eq for p, eq, v in self.terms)


@functools.lru_cache(maxsize=512)
def object_filter(
    label_selector: str | None, field_selector: str | None
) -> Callable[[Mapping[str, Any]], bool] | None:
    """One predicate for both selectors, or None when neither filters anything.

    Cached by selector text: controllers and clients repeat the same few selectors, and parsing
    cost more than matching a thousand objects (a syntax error raises and is not cached).
    """
    labels = LabelSelector.parse(label_selector)
    fields = FieldSelector.parse(field_selector)
    if labels.empty and fields.empty:
        return None
    if fields.empty:
        matches = labels.matches

        def by_labels(obj: Mapping[str, Any]) -> bool:
            return matches(obj["metadata"].get("labels"))

        return by_labels

    def predicate(obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        return labels.matches(meta.get("labels")) and fields.matches(obj)

    return predicate
