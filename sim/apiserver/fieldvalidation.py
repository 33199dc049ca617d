"""Server-side field validation (KEP-2885): the `fieldValidation` parameter of writes.

Owned by the sim's API server: `http.py` reads the query parameter of POST, PUT and PATCH (and of
their status subresource) into a `FieldValidation`, and the store asks it to `check` the decoded
body (create, PUT) or the patched object (PATCH) before anything else, as kube-apiserver reports
unknown fields while decoding. Controllers write through the store without one: nothing is checked.

What counts as unknown:
- custom resources: every field structural pruning drops (`schema.prune_with_paths`), plus unknown
  `metadata` fields, in kube's order (metadata first, then the sorted pruned paths);
- built-in types (the sim keeps no full schemas for them): top-level fields the type does not
  declare and unknown `metadata` fields only; nested typos in a built-in's spec go unnoticed.

Directives, worded as kube-apiserver answers them (staging/src/k8s.io/apiserver/pkg/endpoints/
handlers/{rest,create,update,patch}.go):
- `Strict`: create and PUT, 400 BadRequest `Kind in version "v1beta1" cannot be handled as a
  Kind: strict decoding error: unknown field "spec.templte", unknown field "spec.x"`; PATCH, 422
  Invalid ` "" is invalid: patch: Invalid value: "<the patched object>": strict decoding error:
  unknown field "spec.templte"` (one cause, field `patch`), as kube-apiserver 1.37 answers.
- `Warn` (the server's default when the parameter is absent, `fieldValidation()` in rest.go): the
  fields are pruned and each one adds a `Warning: 299 - "unknown field \\"spec.templte\\""` header.
- `Ignore`: pruned silently.
Any other value: 422 Invalid against the request's options kind, like `dryRun`.

Not reported: duplicate fields in a JSON body (the real server reports `duplicate field "x"` the
same way); the body decoder keeps the last one silently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sim.apiserver import schema
from sim.apiserver.errors import ApiError
from sim.apiserver.registry import (
    CLUSTERROLEBINDINGS,
    CLUSTERROLES,
    CONFIGMAPS,
    EVENTS,
    ROLEBINDINGS,
    ROLES,
    SECRETS,
    SERVICEACCOUNTS,
    ResourceType,
)

__all__ = ["IGNORE", "STRICT", "WARN", "FieldValidation", "unknown_fields", "warning_header"]

STRICT = "Strict"
WARN = "Warn"
IGNORE = "Ignore"
# metav1 validation's allowed set, listed sorted as sets.List() renders it in the error.
_SUPPORTED = ("", IGNORE, STRICT, WARN)

_COMMON = frozenset({"apiVersion", "kind", "metadata"})
_EVENT_FIELDS = frozenset({
    "involvedObject", "reason", "message", "source", "firstTimestamp", "lastTimestamp", "count",
    "type", "eventTime", "series", "action", "related", "reportingComponent", "reportingInstance",
})  # fmt: skip
# Top-level JSON fields of the built-in types whose body is not spec/status (k8s.io/api, 1.37).
_TOP_LEVEL: dict[tuple[str, str], frozenset[str]] = {
    SECRETS.key: frozenset({"data", "stringData", "type", "immutable"}),
    CONFIGMAPS.key: frozenset({"data", "binaryData", "immutable"}),
    SERVICEACCOUNTS.key: frozenset({"secrets", "imagePullSecrets", "automountServiceAccountToken"}),
    EVENTS.key: _EVENT_FIELDS,
    CLUSTERROLES.key: frozenset({"rules", "aggregationRule"}),
    ROLES.key: frozenset({"rules"}),
    CLUSTERROLEBINDINGS.key: frozenset({"subjects", "roleRef"}),
    ROLEBINDINGS.key: frozenset({"subjects", "roleRef"}),
}
# Every other built-in of the sim is a spec/status type.
_SPEC_STATUS = frozenset({"spec", "status"})


def unknown_fields(rt: ResourceType, obj: dict[str, Any]) -> list[str]:
    """The paths of the fields of `obj` the server would drop as unknown, in kube's order."""
    paths = schema.unknown_metadata_fields(obj.get("metadata"))
    if rt.schema is not None:
        paths += schema.unknown_fields(rt.schema, obj)
    else:
        paths += _unknown_top_level(rt, obj)
    return paths


def _unknown_top_level(rt: ResourceType, obj: dict[str, Any]) -> list[str]:
    if rt.schema is not None:
        return []  # the store prunes custom resources by their schema
    known = _COMMON | _TOP_LEVEL.get(rt.key, _SPEC_STATUS)
    return sorted(key for key in obj if key not in known)


def _without_unknown(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` less its unknown metadata fields and (built-ins) unknown top-level fields, which the
    real server's typed decoding drops; a custom resource's own fields are left to pruning."""
    top = _unknown_top_level(rt, obj)
    meta = obj.get("metadata")
    meta_keys = (
        [key for key in meta if key not in schema.OBJECT_META_FIELDS]
        if isinstance(meta, dict)
        else []
    )
    if not top and not meta_keys:
        return obj
    cleaned = {key: value for key, value in obj.items() if key not in top}
    if meta_keys and isinstance(meta, dict):
        cleaned["metadata"] = {k: v for k, v in meta.items() if k not in meta_keys}
    return cleaned


def warning_header(text: str) -> str:
    """A `Warning` header value as kube's warning recorder writes it: code 299, agent `-`, and the
    text quoted like Go's strconv.Quote (JSON escaping agrees for the ASCII field paths here)."""
    return f"299 - {json.dumps(text)}"


@dataclass
class FieldValidation:
    """The directive of one write request, collecting the warnings its response carries.

    Attributes:
        directive: `Strict`, `Warn` or `Ignore`.
        warnings: texts for `Warning` headers (Warn only), without duplicates, in report order.
    """

    directive: str = WARN
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def from_query(cls, value: str | None, options_kind: str) -> FieldValidation:
        """The directive of `?fieldValidation=`; absent or empty means `Warn`, like kube.

        Raises:
            ApiError: 422 Invalid (kube's `ValidateFieldValidation`) for any other value.
        """
        if value is None or value == "":
            return cls(WARN)
        if value not in _SUPPORTED:
            supported = ", ".join(json.dumps(v) for v in _SUPPORTED)
            message = f"Unsupported value: {json.dumps(value)}: supported values: {supported}"
            raise ApiError(
                422, "Invalid",
                f'{options_kind}.meta.k8s.io "" is invalid: fieldValidation: {message}',
                details={"group": "meta.k8s.io", "kind": options_kind, "causes": [
                    {"reason": "FieldValueNotSupported", "field": "fieldValidation", "message": message}
                ]},
            )  # fmt: skip
        return cls(value)

    def check(
        self, rt: ResourceType, obj: dict[str, Any], *, patch: bool = False
    ) -> dict[str, Any]:
        """Report the unknown fields of a decoded body (or, with `patch`, a patched object).

        Returns:
            `obj` without the unknown fields the store would otherwise keep (unknown `metadata`
            fields; a built-in's unknown top-level fields), as kube drops them under Warn and
            Ignore. A custom resource's other unknown fields are pruned by the store.

        Raises:
            ApiError: 400 BadRequest under `Strict` when there is any unknown field.
        """
        cleaned = _without_unknown(rt, obj)
        if self.directive == IGNORE:
            return cleaned
        problems = [f'unknown field "{path}"' for path in unknown_fields(rt, obj)]
        if not problems:
            return cleaned
        if self.directive == WARN:
            self.warnings += [p for p in dict.fromkeys(problems) if p not in self.warnings]
            return cleaned
        strict = f"strict decoding error: {', '.join(problems)}"
        if patch:
            # kube-apiserver 1.37 (patch.go): 422 Invalid of an unnamed object, the patched
            # object's JSON as the value of field "patch" (the real one prints its own encoding
            # of it: the value is not byte for byte the same; the reason after it is).
            value = json.dumps(obj, separators=(",", ":"), sort_keys=True)
            cause = f"Invalid value: {json.dumps(value)}: {strict}"
            raise ApiError(
                422,
                "Invalid",
                f' "" is invalid: patch: {cause}',
                details={
                    "causes": [{"reason": "FieldValueInvalid", "message": cause, "field": "patch"}]
                },
            )
        if not patch:
            # transformDecodeError names the body's own kind and version (the URL's when absent).
            api_version = obj.get("apiVersion")
            version = (
                api_version.rpartition("/")[2] if isinstance(api_version, str) and api_version
                else rt.version
            )  # fmt: skip
            kind = obj.get("kind") if isinstance(obj.get("kind"), str) and obj["kind"] else rt.kind
            strict = f"{kind} in version {json.dumps(version)} cannot be handled as a {rt.kind}: {strict}"
        raise ApiError(400, "BadRequest", strict)
