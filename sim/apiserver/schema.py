"""OpenAPI v3 structural-schema validation, defaulting and pruning, as kube-apiserver does for CRDs.

Owned by the sim's API server: the store calls `prune`, `apply_defaults` and `validate` (in that
order, like the real server) on every write of a custom resource, and turns the returned
`FieldError`s into a 422 `Invalid` Status whose causes carry `reason`, `message` and `field`.
`fieldvalidation.py` asks `unknown_fields` (the paths `prune` drops) for the `fieldValidation`
parameter (Strict refuses them, Warn warns about them).

Pure functions over plain JSON-shaped dicts; no IO.

Honored keywords: type (object, array, string, integer, number, boolean), properties, required,
items, enum, pattern, minimum/maximum (+ exclusiveMinimum/exclusiveMaximum), minLength/maxLength,
minItems/maxItems, minProperties/maxProperties, additionalProperties (schema or bool),
x-kubernetes-preserve-unknown-fields, x-kubernetes-int-or-string, x-kubernetes-embedded-resource,
anyOf/oneOf/allOf/not (basic), nullable, format (loosely: date-time, date, uuid, ipv4), default.

Not evaluated: x-kubernetes-validations (CEL rules), x-kubernetes-list-type/-map-keys uniqueness,
uniqueItems, multipleOf and the int32/int64 format ranges. Objects the real server would refuse
only because of those rules are accepted here.

Messages are worded like kube-apiserver's field errors (k8s.io/apimachinery/pkg/util/validation/field
fed by k8s.io/kube-openapi's validator), e.g.::

    spec.template: Required value
    spec.port: Invalid value: "string": spec.port in body must be of type integer: "string"
    spec.mode: Unsupported value: "x": supported values: "a", "b"
"""

from __future__ import annotations

import copy
import datetime
import ipaddress
import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

__all__ = [
    "OBJECT_META_FIELDS",
    "FieldError",
    "apply_defaults",
    "prune",
    "prune_with_paths",
    "structural_errors",
    "unknown_fields",
    "unknown_metadata_fields",
    "validate",
]

# Reasons as in metav1.CauseType (k8s.io/apimachinery/pkg/apis/meta/v1/types.go).
REQUIRED = "FieldValueRequired"
INVALID = "FieldValueInvalid"
NOT_SUPPORTED = "FieldValueNotSupported"
TYPE_INVALID = "FieldValueTypeInvalid"
TOO_LONG = "FieldValueTooLong"
TOO_MANY = "FieldValueTooMany"
FORBIDDEN = "FieldValueForbidden"

# Fields every object keeps whatever its schema says: the apiserver handles them itself.
_ALWAYS_KEPT = ("apiVersion", "kind", "metadata")

# The JSON fields of metav1.ObjectMeta (k8s.io/apimachinery/pkg/apis/meta/v1/types.go, 1.37);
# anything else under `metadata` is an unknown field to server-side field validation.
OBJECT_META_FIELDS = frozenset(
    {
        "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
        "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
        "annotations", "ownerReferences", "finalizers", "managedFields",
    }
)  # fmt: skip

_JSON_TYPES = ("object", "array", "string", "integer", "number", "boolean")


@dataclass(frozen=True)
class FieldError:
    """One validation failure, shaped like a kube `StatusCause`.

    Attributes:
        path: the field path, e.g. `spec.config.machines[0].port` ("" for the object itself).
        reason: the cause type, e.g. `FieldValueRequired`.
        message: kube-apiserver's wording without the path, e.g. `Required value`.
    """

    path: str
    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message

    def as_cause(self) -> dict[str, str]:
        """The `StatusCause` dict the API server puts into an `Invalid` Status."""
        return {"reason": self.reason, "message": self.message, "field": self.path}


# --------------------------------------------------------------------------------------------
# helpers


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _index(path: str, i: int) -> str:
    return f"{path}[{i}]"


def _body(path: str) -> str:
    """The subject kube-openapi puts into messages: `spec.port in body`, or `body` at the root."""
    return f"{path} in body" if path else "body"


def _render(value: Any) -> str:
    """A value as field.Error prints it: strings quoted (%q), numbers bare, others as JSON."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if value is None:
        return "null"
    return json.dumps(value, sort_keys=True, default=str)


def _json_type(value: Any) -> str:
    """The JSON type name kube-openapi reports for a value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _is_type(value: Any, type_name: str) -> bool:
    if type_name == "object":
        return isinstance(value, dict)
    if type_name == "array":
        return isinstance(value, list)
    if type_name == "string":
        return isinstance(value, str)
    if type_name == "boolean":
        return isinstance(value, bool)
    if type_name == "integer":
        # Go decodes 3.0 into a float64 and kube-openapi still accepts it as an integer.
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if type_name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return True


def _invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(path, INVALID, f"Invalid value: {_render(value)}: {detail}")


def _type_invalid(path: str, value: Any, expected: str) -> FieldError:
    actual = _json_type(value)
    return FieldError(
        path,
        TYPE_INVALID,
        f'Invalid value: "{actual}": {_body(path)} must be of type {expected}: "{actual}"',
    )


def _format_ok(fmt: str, value: str) -> bool:
    try:
        if fmt == "date-time":
            # RFC 3339; Python < 3.11 would not take "Z", 3.11 does.
            datetime.datetime.fromisoformat(value.replace("z", "Z"))
            return "T" in value.upper()
        if fmt == "date":
            datetime.date.fromisoformat(value)
        elif fmt == "uuid":
            uuid.UUID(value)
        elif fmt == "ipv4":
            ipaddress.IPv4Address(value)
    except ValueError:
        return False
    return True


# --------------------------------------------------------------------------------------------
# validation


def validate(schema: dict[str, Any], obj: Any) -> list[FieldError]:
    """Validate `obj` against an openAPIV3Schema the way kube-apiserver validates custom resources.

    Unknown fields are not errors (the server prunes them; see `prune`). CEL rules
    (x-kubernetes-validations) are NOT evaluated.

    Args:
        schema: the `openAPIV3Schema` of one CRD version.
        obj: the whole object (or any value, for sub-schemas).

    Returns:
        Every error found, in document order; empty when the object is valid.
    """
    errors: list[FieldError] = []
    _validate(schema, obj, "", errors)
    return errors


def _validate(schema: dict[str, Any], value: Any, path: str, errors: list[FieldError]) -> None:
    if value is None:
        if schema.get("nullable") or (
            schema.get("x-kubernetes-preserve-unknown-fields") and "type" not in schema
        ):
            return
        if "type" in schema:
            errors.append(_type_invalid(path, value, schema["type"]))
            return
        if schema.get("x-kubernetes-int-or-string"):
            errors.append(_type_invalid(path, value, "integer,string"))
            return

    type_name = schema.get("type")
    if schema.get("x-kubernetes-int-or-string") and not (
        isinstance(value, str) or _is_type(value, "integer")
    ):
        errors.append(_type_invalid(path, value, "integer,string"))
        return
    if type_name in _JSON_TYPES and not _is_type(value, type_name):
        errors.append(_type_invalid(path, value, type_name))
        return

    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(
            json.dumps(v) if isinstance(v, str) else json.dumps(_render(v)) for v in schema["enum"]
        )
        errors.append(
            FieldError(
                path,
                NOT_SUPPORTED,
                f"Unsupported value: {_render(value)}: supported values: {supported}",
            )
        )

    if isinstance(value, str):
        _validate_string(schema, value, path, errors)
    elif _is_type(value, "number"):
        _validate_number(schema, value, path, errors)
    elif isinstance(value, list):
        _validate_array(schema, value, path, errors)
    elif isinstance(value, dict):
        _validate_object(schema, value, path, errors)

    _validate_junctors(schema, value, path, errors)


def _validate_string(
    schema: dict[str, Any], value: str, path: str, errors: list[FieldError]
) -> None:
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(
            FieldError(
                path, TOO_LONG, f"Too long: may not be more than {schema['maxLength']} bytes"
            )
        )
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append(
            _invalid(
                path, value, f"{_body(path)} should be at least {schema['minLength']} chars long"
            )
        )
    pattern = schema.get("pattern")
    if pattern is not None and re.search(pattern, value) is None:
        errors.append(_invalid(path, value, f"{_body(path)} should match '{pattern}'"))
    fmt = schema.get("format")
    if isinstance(fmt, str) and not _format_ok(fmt, value):
        errors.append(
            _invalid(path, value, f"{_body(path)} must be of type {fmt}: {_render(value)}")
        )


def _validate_number(
    schema: dict[str, Any], value: float, path: str, errors: list[FieldError]
) -> None:
    if "maximum" in schema:
        limit = schema["maximum"]
        if schema.get("exclusiveMaximum") and value >= limit:
            errors.append(_invalid(path, value, f"{_body(path)} should be less than {limit}"))
        elif value > limit:
            errors.append(
                _invalid(path, value, f"{_body(path)} should be less than or equal to {limit}")
            )
    if "minimum" in schema:
        limit = schema["minimum"]
        if schema.get("exclusiveMinimum") and value <= limit:
            errors.append(_invalid(path, value, f"{_body(path)} should be greater than {limit}"))
        elif value < limit:
            errors.append(
                _invalid(path, value, f"{_body(path)} should be greater than or equal to {limit}")
            )


def _validate_array(
    schema: dict[str, Any], value: list[Any], path: str, errors: list[FieldError]
) -> None:
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(
            FieldError(
                path,
                TOO_MANY,
                f"Too many: {len(value)}: must have at most {schema['maxItems']} items",
            )
        )
    if "minItems" in schema and len(value) < schema["minItems"]:
        errors.append(
            _invalid(
                path, len(value), f"{_body(path)} should have at least {schema['minItems']} items"
            )
        )
    items = schema.get("items")
    if isinstance(items, dict):
        for i, item in enumerate(value):
            _validate(items, item, _index(path, i), errors)


def _validate_object(
    schema: dict[str, Any], value: dict[str, Any], path: str, errors: list[FieldError]
) -> None:
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        errors.append(
            FieldError(
                path,
                TOO_MANY,
                f"Too many: {len(value)}: must have at most {schema['maxProperties']} items",
            )
        )
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        errors.append(
            _invalid(
                path,
                len(value),
                f"{_body(path)} should have at least {schema['minProperties']} properties",
            )
        )
    for name in schema.get("required", ()):
        if name not in value:
            errors.append(FieldError(_child(path, name), REQUIRED, "Required value"))

    if schema.get("x-kubernetes-embedded-resource"):
        for name in ("apiVersion", "kind"):
            if not value.get(name):
                errors.append(FieldError(_child(path, name), REQUIRED, "Required value"))

    properties: dict[str, Any] = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    for key, item in value.items():
        sub = properties.get(key)
        if sub is not None:
            _validate(sub, item, _child(path, key), errors)
        elif isinstance(additional, dict):
            _validate(additional, item, _child(path, key), errors)
        elif additional is False and not schema.get("x-kubernetes-preserve-unknown-fields"):
            errors.append(
                FieldError(
                    _child(path, key),
                    FORBIDDEN,
                    f"Forbidden: {_body(_child(path, key))} is a forbidden property",
                )
            )


def _validate_junctors(
    schema: dict[str, Any], value: Any, path: str, errors: list[FieldError]
) -> None:
    for sub in schema.get("allOf", ()):
        _validate(sub, value, path, errors)
    any_of = schema.get("anyOf")
    if any_of and not any(not validate_at(sub, value, path) for sub in any_of):
        errors.append(
            _invalid(path, value, f'"{path or "body"}" must validate at least one schema (anyOf)')
        )
    one_of = schema.get("oneOf")
    if one_of:
        matches = sum(1 for sub in one_of if not validate_at(sub, value, path))
        if matches != 1:
            errors.append(
                _invalid(
                    path, value, f'"{path or "body"}" must validate one and only one schema (oneOf)'
                )
            )
    not_schema = schema.get("not")
    if isinstance(not_schema, dict) and not validate_at(not_schema, value, path):
        errors.append(
            _invalid(path, value, f'"{path or "body"}" must not validate the schema (not)')
        )


def validate_at(schema: dict[str, Any], value: Any, path: str) -> list[FieldError]:
    """Like `validate`, for a value that sits at `path` inside a larger object."""
    errors: list[FieldError] = []
    _validate(schema, value, path, errors)
    return errors


# --------------------------------------------------------------------------------------------
# defaulting


def apply_defaults(schema: dict[str, Any], obj: Any) -> Any:
    """Fill in `default`s the way the apiserver's structural defaulting does, returning a new value.

    Defaults apply to absent properties (and to explicit nulls of non-nullable properties), walking
    `properties`, `items` and `additionalProperties`; defaults are not applied inside
    anyOf/oneOf/allOf/not (structural schemas forbid them there). The input is not modified.
    """
    result = copy.deepcopy(obj)
    _default(schema, result)
    return result


def _default(schema: dict[str, Any], value: Any) -> None:
    if isinstance(value, dict):
        properties: dict[str, Any] = schema.get("properties") or {}
        for key, sub in properties.items():
            if "default" in sub and (
                key not in value or (value[key] is None and not sub.get("nullable"))
            ):
                value[key] = copy.deepcopy(sub["default"])
        for key, item in value.items():
            sub = properties.get(key)
            if sub is None and isinstance(schema.get("additionalProperties"), dict):
                sub = schema["additionalProperties"]
            if sub is not None:
                _default(sub, item)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                if item is None and "default" in items and not items.get("nullable"):
                    value[i] = copy.deepcopy(items["default"])
                else:
                    _default(items, item)


# --------------------------------------------------------------------------------------------
# pruning


def prune(schema: dict[str, Any], obj: Any) -> Any:
    """Drop fields the schema does not know, like the apiserver's structural pruning.

    Kept: everything under `x-kubernetes-preserve-unknown-fields: true` (known properties below it
    are still pruned recursively), values of `additionalProperties`, and `apiVersion`, `kind`,
    `metadata` at the root and in embedded resources (`x-kubernetes-embedded-resource`), whatever
    the schema says of them. `metadata` there is an ObjectMeta: the apiserver decodes it as one
    (`objectmeta.GetObjectMeta` / `SetObjectMeta` in apiextensions-apiserver's coercion), so its
    unknown fields are dropped too. Returns a new value.
    """
    return _prune(schema, copy.deepcopy(obj), "", None, root=True)


def prune_with_paths(schema: dict[str, Any], obj: Any) -> tuple[Any, list[str]]:
    """`prune`, also answering the paths of the fields it dropped, for server-side field validation.

    Paths are written like kube's structural pruning reports them (`spec.templte`,
    `spec.machines[0].prot`, keys of `additionalProperties` maps joined with dots) and sorted, as
    `PruneWithOptions` sorts them. Unknown fields of the ObjectMeta of embedded resources
    (`x-kubernetes-embedded-resource`) are reported too, as kube's metadata coercion does; the
    root's `metadata` is the caller's (the apiserver checks it apart from the schema).
    """
    dropped: list[str] = []
    pruned = _prune(schema, copy.deepcopy(obj), "", dropped, root=True)
    return pruned, sorted(dropped)


def unknown_fields(schema: dict[str, Any], obj: Any) -> list[str]:
    """The sorted paths `prune` would drop from `obj` (see `prune_with_paths`)."""
    return prune_with_paths(schema, obj)[1]


def unknown_metadata_fields(meta: Any, path: str = "metadata") -> list[str]:
    """Paths of the keys of an ObjectMeta that metav1.ObjectMeta does not declare."""
    if not isinstance(meta, dict):
        return []
    return [_child(path, key) for key in meta if key not in OBJECT_META_FIELDS]


def _prune(
    schema: dict[str, Any],
    value: Any,
    path: str,
    dropped: list[str] | None,
    *,
    root: bool = False,
) -> Any:
    if isinstance(value, dict):
        properties: dict[str, Any] = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        embedded = bool(schema.get("x-kubernetes-embedded-resource"))
        keep_meta = root or embedded
        pruned: dict[str, Any] = {}
        for key, item in value.items():
            if keep_meta and key in _ALWAYS_KEPT:
                # The apiserver owns these: ObjectMeta is validated on its own, never by the CRD.
                if key == "metadata" and isinstance(item, dict):
                    if dropped is not None and embedded and not root:
                        dropped.extend(unknown_metadata_fields(item, _child(path, key)))
                    item = {k: v for k, v in item.items() if k in OBJECT_META_FIELDS}
                pruned[key] = item
            elif key in properties:
                pruned[key] = _prune(properties[key], item, _child(path, key), dropped)
            elif isinstance(additional, dict):
                pruned[key] = _prune(additional, item, _child(path, key), dropped)
            elif preserve or additional is True:
                pruned[key] = item
            elif dropped is not None:
                dropped.append(_child(path, key))
        return pruned
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            return [_prune(items, item, _index(path, i), dropped) for i, item in enumerate(value)]
    return value


# --------------------------------------------------------------------------------------------
# structural check of a schema itself


def structural_errors(schema: dict[str, Any], path: str = "openAPIV3Schema") -> list[str]:
    """Basic structural-schema checks the apiserver applies when a CRD is created.

    Checks that every node outside anyOf/oneOf/allOf/not specifies a known `type` (unless it is
    `x-kubernetes-int-or-string` or `x-kubernetes-preserve-unknown-fields`), that the root is an
    object, that `properties` and `additionalProperties` are not combined, and that `required`
    names declared properties where properties are declared. Returns messages; empty when fine.
    """
    problems: list[str] = []
    if schema.get("type") != "object":
        problems.append(f"{path}.type: Required value: must be object at the root")
    _structural(schema, path, problems, in_junctor=False)
    return problems


def _structural(schema: Any, path: str, problems: list[str], *, in_junctor: bool) -> None:
    if not isinstance(schema, dict):
        problems.append(f"{path}: Invalid value: must be an object")
        return
    type_name = schema.get("type")
    # Types inside junctors are only allowed for the int-or-string idiom; not checked here.
    if in_junctor:
        pass
    elif type_name is None:
        if not (
            schema.get("x-kubernetes-int-or-string")
            or schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            problems.append(f"{path}.type: Required value: must not be empty for specified fields")
    elif type_name not in _JSON_TYPES:
        problems.append(f"{path}.type: Unsupported value: {_render(type_name)}")
    properties = schema.get("properties")
    if properties is not None and "additionalProperties" in schema:
        problems.append(
            f"{path}.additionalProperties: Forbidden: must not be used if properties are"
        )
    if isinstance(properties, dict):
        for name in schema.get("required", ()):
            if (
                not in_junctor
                and name not in properties
                and not schema.get("x-kubernetes-preserve-unknown-fields")
            ):
                problems.append(f"{path}.required: Invalid value: {_render(name)}: not a property")
        for name, sub in properties.items():
            _structural(sub, f"{path}.properties[{name}]", problems, in_junctor=in_junctor)
    if isinstance(schema.get("items"), dict):
        _structural(schema["items"], f"{path}.items", problems, in_junctor=in_junctor)
    if isinstance(schema.get("additionalProperties"), dict):
        _structural(
            schema["additionalProperties"],
            f"{path}.additionalProperties",
            problems,
            in_junctor=in_junctor,
        )
    for junctor in ("anyOf", "oneOf", "allOf"):
        for i, sub in enumerate(schema.get(junctor, ())):
            _structural(sub, f"{path}.{junctor}[{i}]", problems, in_junctor=True)
    if "not" in schema:
        _structural(schema["not"], f"{path}.not", problems, in_junctor=True)
