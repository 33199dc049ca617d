"""Unit tests of the sim's OpenAPI v3 structural validation, defaulting and pruning."""

from __future__ import annotations

from typing import Any

import pytest

from sim.apiserver.schema import FieldError, apply_defaults, prune, structural_errors, validate


def _spec(**props: Any) -> dict[str, Any]:
    """A root schema with `spec` holding the given properties."""
    return {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": props}},
    }


VALIDATE_CASES = [
    pytest.param(
        _spec(port={"type": "integer"}),
        {"spec": {"port": "string"}},
        [
            FieldError(
                "spec.port",
                "FieldValueTypeInvalid",
                'Invalid value: "string": spec.port in body must be of type integer: "string"',
            )
        ],
        id="type-integer-wrong",
    ),
    pytest.param(_spec(port={"type": "integer"}), {"spec": {"port": 22}}, [], id="type-integer-ok"),
    pytest.param(
        _spec(port={"type": "integer"}), {"spec": {"port": 22.0}}, [], id="type-integer-float-whole"
    ),
    pytest.param(
        _spec(flag={"type": "boolean"}),
        {"spec": {"flag": 1}},
        [
            FieldError(
                "spec.flag",
                "FieldValueTypeInvalid",
                'Invalid value: "integer": spec.flag in body must be of type boolean: "integer"',
            )
        ],
        id="type-boolean-wrong",
    ),
    pytest.param(
        _spec(n={"type": "integer"}),
        {"spec": {"n": True}},
        [
            FieldError(
                "spec.n",
                "FieldValueTypeInvalid",
                'Invalid value: "boolean": spec.n in body must be of type integer: "boolean"',
            )
        ],
        id="type-bool-is-not-integer",
    ),
    pytest.param(_spec(x={"type": "number"}), {"spec": {"x": 1.5}}, [], id="type-number-ok"),
    pytest.param(
        _spec(x={"type": "array"}),
        {"spec": {"x": {}}},
        [
            FieldError(
                "spec.x",
                "FieldValueTypeInvalid",
                'Invalid value: "object": spec.x in body must be of type array: "object"',
            )
        ],
        id="type-array-wrong",
    ),
    pytest.param(
        {"type": "object", "properties": {"spec": {"type": "object"}}},
        {"spec": "x"},
        [
            FieldError(
                "spec",
                "FieldValueTypeInvalid",
                'Invalid value: "string": spec in body must be of type object: "string"',
            )
        ],
        id="type-object-wrong",
    ),
    pytest.param(
        {
            "type": "object",
            "properties": {"spec": {"type": "object", "properties": {}}},
            "required": ["spec"],
        },
        {},
        [FieldError("spec", "FieldValueRequired", "Required value")],
        id="required-root",
    ),
    pytest.param(
        _spec(t={"type": "object", "required": ["a", "b"], "properties": {"a": {}, "b": {}}}),
        {"spec": {"t": {"a": 1}}},
        [FieldError("spec.t.b", "FieldValueRequired", "Required value")],
        id="required-nested",
    ),
    pytest.param(
        _spec(mode={"type": "string", "enum": ["a", "b"]}),
        {"spec": {"mode": "x"}},
        [
            FieldError(
                "spec.mode",
                "FieldValueNotSupported",
                'Unsupported value: "x": supported values: "a", "b"',
            )
        ],
        id="enum",
    ),
    pytest.param(
        _spec(mode={"type": "string", "enum": ["a", "b"]}),
        {"spec": {"mode": "b"}},
        [],
        id="enum-ok",
    ),
    pytest.param(
        _spec(name={"type": "string", "pattern": "^[a-z]+$"}),
        {"spec": {"name": "ABC"}},
        [
            FieldError(
                "spec.name",
                "FieldValueInvalid",
                "Invalid value: \"ABC\": spec.name in body should match '^[a-z]+$'",
            )
        ],
        id="pattern",
    ),
    pytest.param(
        _spec(port={"type": "integer", "maximum": 100}),
        {"spec": {"port": 101}},
        [
            FieldError(
                "spec.port",
                "FieldValueInvalid",
                "Invalid value: 101: spec.port in body should be less than or equal to 100",
            )
        ],
        id="maximum",
    ),
    pytest.param(
        _spec(port={"type": "integer", "maximum": 100, "exclusiveMaximum": True}),
        {"spec": {"port": 100}},
        [
            FieldError(
                "spec.port",
                "FieldValueInvalid",
                "Invalid value: 100: spec.port in body should be less than 100",
            )
        ],
        id="exclusive-maximum",
    ),
    pytest.param(
        _spec(port={"type": "integer", "minimum": 1}),
        {"spec": {"port": 0}},
        [
            FieldError(
                "spec.port",
                "FieldValueInvalid",
                "Invalid value: 0: spec.port in body should be greater than or equal to 1",
            )
        ],
        id="minimum",
    ),
    pytest.param(
        _spec(port={"type": "number", "minimum": 1, "exclusiveMinimum": True}),
        {"spec": {"port": 1}},
        [
            FieldError(
                "spec.port",
                "FieldValueInvalid",
                "Invalid value: 1: spec.port in body should be greater than 1",
            )
        ],
        id="exclusive-minimum",
    ),
    pytest.param(
        _spec(name={"type": "string", "maxLength": 3}),
        {"spec": {"name": "abcd"}},
        [FieldError("spec.name", "FieldValueTooLong", "Too long: may not be more than 3 bytes")],
        id="max-length",
    ),
    pytest.param(
        _spec(name={"type": "string", "minLength": 1}),
        {"spec": {"name": ""}},
        [
            FieldError(
                "spec.name",
                "FieldValueInvalid",
                'Invalid value: "": spec.name in body should be at least 1 chars long',
            )
        ],
        id="min-length",
    ),
    pytest.param(
        _spec(xs={"type": "array", "maxItems": 1, "items": {"type": "string"}}),
        {"spec": {"xs": ["a", "b"]}},
        [FieldError("spec.xs", "FieldValueTooMany", "Too many: 2: must have at most 1 items")],
        id="max-items",
    ),
    pytest.param(
        _spec(xs={"type": "array", "minItems": 1, "items": {"type": "string"}}),
        {"spec": {"xs": []}},
        [
            FieldError(
                "spec.xs",
                "FieldValueInvalid",
                "Invalid value: 0: spec.xs in body should have at least 1 items",
            )
        ],
        id="min-items",
    ),
    pytest.param(
        _spec(
            config={
                "type": "object",
                "properties": {
                    "machines": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"port": {"type": "integer"}},
                        },
                    }
                },
            }
        ),
        {"spec": {"config": {"machines": [{"port": 22}, {"port": "x"}]}}},
        [
            FieldError(
                "spec.config.machines[1].port",
                "FieldValueTypeInvalid",
                'Invalid value: "string": spec.config.machines[1].port in body must be of type'
                ' integer: "string"',
            )
        ],
        id="items-path",
    ),
    pytest.param(
        _spec(
            labels={
                "type": "object",
                "maxProperties": 1,
                "additionalProperties": {"type": "string"},
            }
        ),
        {"spec": {"labels": {"a": "1", "b": "2"}}},
        [FieldError("spec.labels", "FieldValueTooMany", "Too many: 2: must have at most 1 items")],
        id="max-properties",
    ),
    pytest.param(
        _spec(labels={"type": "object", "minProperties": 1}),
        {"spec": {"labels": {}}},
        [
            FieldError(
                "spec.labels",
                "FieldValueInvalid",
                "Invalid value: 0: spec.labels in body should have at least 1 properties",
            )
        ],
        id="min-properties",
    ),
    pytest.param(
        _spec(labels={"type": "object", "additionalProperties": {"type": "string"}}),
        {"spec": {"labels": {"a": 1}}},
        [
            FieldError(
                "spec.labels.a",
                "FieldValueTypeInvalid",
                'Invalid value: "integer": spec.labels.a in body must be of type string: "integer"',
            )
        ],
        id="additional-properties-schema",
    ),
    pytest.param(
        _spec(labels={"type": "object", "additionalProperties": False}),
        {"spec": {"labels": {"a": 1}}},
        [
            FieldError(
                "spec.labels.a",
                "FieldValueForbidden",
                "Forbidden: spec.labels.a in body is a forbidden property",
            )
        ],
        id="additional-properties-false",
    ),
    pytest.param(
        _spec(config={"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
        {"spec": {"config": {"anything": [1, {"goes": True}]}}},
        [],
        id="preserve-unknown-fields",
    ),
    pytest.param(
        _spec(port={"x-kubernetes-int-or-string": True}),
        {"spec": {"port": "http"}},
        [],
        id="int-or-string-string",
    ),
    pytest.param(
        _spec(port={"x-kubernetes-int-or-string": True}),
        {"spec": {"port": 80}},
        [],
        id="int-or-string-int",
    ),
    pytest.param(
        _spec(port={"x-kubernetes-int-or-string": True}),
        {"spec": {"port": [80]}},
        [
            FieldError(
                "spec.port",
                "FieldValueTypeInvalid",
                'Invalid value: "array": spec.port in body must be of type integer,string: "array"',
            )
        ],
        id="int-or-string-wrong",
    ),
    pytest.param(
        _spec(
            obj={
                "type": "object",
                "x-kubernetes-embedded-resource": True,
                "x-kubernetes-preserve-unknown-fields": True,
            }
        ),
        {"spec": {"obj": {"kind": "Pod"}}},
        [FieldError("spec.obj.apiVersion", "FieldValueRequired", "Required value")],
        id="embedded-resource",
    ),
    pytest.param(
        _spec(ref={"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}),
        {"spec": {"ref": {"c": 1}}},
        [
            FieldError(
                "spec.ref",
                "FieldValueInvalid",
                'Invalid value: {"c": 1}: "spec.ref" must validate at least one schema (anyOf)',
            )
        ],
        id="any-of",
    ),
    pytest.param(
        _spec(ref={"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}),
        {"spec": {"ref": {"b": 1}}},
        [],
        id="any-of-ok",
    ),
    pytest.param(
        _spec(ref={"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}),
        {"spec": {"ref": {"a": 1, "b": 1}}},
        [
            FieldError(
                "spec.ref",
                "FieldValueInvalid",
                'Invalid value: {"a": 1, "b": 1}: "spec.ref" must validate one and only one'
                " schema (oneOf)",
            )
        ],
        id="one-of",
    ),
    pytest.param(
        _spec(n={"type": "integer", "allOf": [{"minimum": 1}, {"maximum": 5}]}),
        {"spec": {"n": 9}},
        [
            FieldError(
                "spec.n",
                "FieldValueInvalid",
                "Invalid value: 9: spec.n in body should be less than or equal to 5",
            )
        ],
        id="all-of",
    ),
    pytest.param(
        _spec(ref={"type": "object", "not": {"required": ["a"]}}),
        {"spec": {"ref": {"a": 1}}},
        [
            FieldError(
                "spec.ref",
                "FieldValueInvalid",
                'Invalid value: {"a": 1}: "spec.ref" must not validate the schema (not)',
            )
        ],
        id="not",
    ),
    pytest.param(
        _spec(s={"type": "string", "nullable": True}), {"spec": {"s": None}}, [], id="nullable-ok"
    ),
    pytest.param(
        _spec(s={"type": "string"}),
        {"spec": {"s": None}},
        [
            FieldError(
                "spec.s",
                "FieldValueTypeInvalid",
                'Invalid value: "null": spec.s in body must be of type string: "null"',
            )
        ],
        id="null-not-nullable",
    ),
    pytest.param(
        _spec(t={"type": "string", "format": "date-time"}),
        {"spec": {"t": "2024-05-01T10:00:00Z"}},
        [],
        id="format-date-time-ok",
    ),
    pytest.param(
        _spec(t={"type": "string", "format": "date-time"}),
        {"spec": {"t": "yesterday"}},
        [
            FieldError(
                "spec.t",
                "FieldValueInvalid",
                'Invalid value: "yesterday": spec.t in body must be of type date-time: "yesterday"',
            )
        ],
        id="format-date-time-bad",
    ),
    pytest.param(
        _spec(n={"type": "integer", "format": "int32"}),
        {"spec": {"n": 2**40}},
        [],
        id="format-int32-range-not-checked",
    ),
    pytest.param(
        _spec(name={"type": "string"}),
        {"spec": {"name": "x", "unknown": 1}},
        [],
        id="unknown-fields-are-not-errors",
    ),
]


@pytest.mark.parametrize(("schema", "obj", "expected"), VALIDATE_CASES)
def test_validate(schema: dict[str, Any], obj: dict[str, Any], expected: list[FieldError]) -> None:
    assert validate(schema, obj) == expected


def test_field_error_as_cause_and_str() -> None:
    err = FieldError("spec.template", "FieldValueRequired", "Required value")
    assert err.as_cause() == {
        "reason": "FieldValueRequired",
        "message": "Required value",
        "field": "spec.template",
    }
    assert str(err) == "spec.template: Required value"


def test_validate_collects_all_errors() -> None:
    schema = _spec(
        a={"type": "integer"},
        b={"type": "string", "enum": ["x"]},
    )
    errors = validate(schema, {"spec": {"a": "no", "b": "y"}})
    assert [e.path for e in errors] == ["spec.a", "spec.b"]


DEFAULT_CASES = [
    pytest.param(
        _spec(interval={"type": "string", "default": "10m"}),
        {"spec": {}},
        {"spec": {"interval": "10m"}},
        id="absent-gets-default",
    ),
    pytest.param(
        _spec(interval={"type": "string", "default": "10m"}),
        {"spec": {"interval": "1m"}},
        {"spec": {"interval": "1m"}},
        id="present-kept",
    ),
    pytest.param(
        _spec(interval={"type": "string", "default": "10m"}),
        {"spec": {"interval": None}},
        {"spec": {"interval": "10m"}},
        id="null-non-nullable-gets-default",
    ),
    pytest.param(
        _spec(interval={"type": "string", "default": "10m", "nullable": True}),
        {"spec": {"interval": None}},
        {"spec": {"interval": None}},
        id="null-nullable-kept",
    ),
    pytest.param(
        _spec(
            xs={
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"port": {"type": "integer", "default": 22}},
                },
            }
        ),
        {"spec": {"xs": [{}, {"port": 2200}]}},
        {"spec": {"xs": [{"port": 22}, {"port": 2200}]}},
        id="items",
    ),
    pytest.param(
        _spec(
            m={
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "properties": {"on": {"type": "boolean", "default": False}},
                },
            }
        ),
        {"spec": {"m": {"a": {}}}},
        {"spec": {"m": {"a": {"on": False}}}},
        id="additional-properties",
    ),
    pytest.param(
        {
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "default": {},
                    "properties": {"n": {"type": "integer", "default": 1}},
                }
            },
        },
        {},
        {"spec": {"n": 1}},
        id="default-object-then-its-defaults",
    ),
]


@pytest.mark.parametrize(("schema", "obj", "expected"), DEFAULT_CASES)
def test_apply_defaults(
    schema: dict[str, Any], obj: dict[str, Any], expected: dict[str, Any]
) -> None:
    before = repr(obj)
    assert apply_defaults(schema, obj) == expected
    assert repr(obj) == before, "input must not be modified"


PRUNE_CASES = [
    pytest.param(
        _spec(a={"type": "string"}),
        {"apiVersion": "v1", "kind": "X", "metadata": {"name": "n"}, "spec": {"a": "1", "b": 2}},
        {"apiVersion": "v1", "kind": "X", "metadata": {"name": "n"}, "spec": {"a": "1"}},
        id="unknown-dropped-meta-kept",
    ),
    pytest.param(
        _spec(config={"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
        {"spec": {"config": {"anything": {"deep": 1}}}},
        {"spec": {"config": {"anything": {"deep": 1}}}},
        id="preserve-unknown-fields",
    ),
    pytest.param(
        _spec(
            c={
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {"known": {"type": "object", "properties": {"a": {}}}},
            }
        ),
        {"spec": {"c": {"other": 1, "known": {"a": 1, "b": 2}}}},
        {"spec": {"c": {"other": 1, "known": {"a": 1}}}},
        id="known-under-preserve-still-pruned",
    ),
    pytest.param(
        _spec(
            xs={
                "type": "array",
                "items": {"type": "object", "properties": {"name": {"type": "string"}}},
            }
        ),
        {"spec": {"xs": [{"name": "a", "junk": 1}]}},
        {"spec": {"xs": [{"name": "a"}]}},
        id="items",
    ),
    pytest.param(
        _spec(
            m={
                "type": "object",
                "additionalProperties": {"type": "object", "properties": {"a": {}}},
            }
        ),
        {"spec": {"m": {"k": {"a": 1, "b": 2}}}},
        {"spec": {"m": {"k": {"a": 1}}}},
        id="additional-properties",
    ),
    pytest.param(
        _spec(
            obj={
                "type": "object",
                "x-kubernetes-embedded-resource": True,
                "properties": {"spec": {"type": "object", "properties": {}}},
            }
        ),
        {"spec": {"obj": {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {"x": 1}}}},
        {"spec": {"obj": {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {}}}},
        id="embedded-resource-keeps-meta",
    ),
]


@pytest.mark.parametrize(("schema", "obj", "expected"), PRUNE_CASES)
def test_prune(schema: dict[str, Any], obj: dict[str, Any], expected: dict[str, Any]) -> None:
    assert prune(schema, obj) == expected


STRUCTURAL_CASES = [
    pytest.param(_spec(a={"type": "string"}), [], id="ok"),
    pytest.param(
        {"type": "object", "properties": {"spec": {"properties": {}}}},
        [
            "openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified fields"
        ],
        id="missing-type",
    ),
    pytest.param(
        _spec(
            port={
                "x-kubernetes-int-or-string": True,
                "anyOf": [{"type": "integer"}, {"type": "string"}],
            }
        ),
        [],
        id="int-or-string-idiom",
    ),
    pytest.param(
        {"type": "string"},
        ["openAPIV3Schema.type: Required value: must be object at the root"],
        id="root-not-object",
    ),
]


@pytest.mark.parametrize(("schema", "expected"), STRUCTURAL_CASES)
def test_structural_errors(schema: dict[str, Any], expected: list[str]) -> None:
    assert structural_errors(schema) == expected
