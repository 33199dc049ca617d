"""The base every Colony model derives from: camelCase JSON, snake_case Python, forward-compatible.

The JSON shapes follow the public API (`locationId`, `nodePools`, `gpuModelId`, `readyCount`), so a
model read from a file, sent through Temporal or printed by `colonyctl -o json` looks the same.

Unknown fields: persisted state, workflow inputs, update payloads recorded in history and activity
results must accept fields a later (or earlier) release wrote, or a removed field would break the
replay and the continue-as-new of every running workflow. So models ignore unknown fields by
default, and strictness is applied where users send data: `user_input(Model, data)` (used by
`colonyctl`, `apply -f` and the HTTP API) refuses any field the model does not know, naming it.

Types, too, are strict for users only: an integer field takes an integer and a boolean field a
boolean, never `"3"`, `true` or `3.0` for a count nor `"yes"` for a flag (pydantic's lax mode would
convert them; the OpenAPI document says integer and boolean). The command line converts what it
parses from text itself (`clients.parsing`) before a model sees it, so a YAML file's `count: "3"`
and an HTTP body's are refused alike. Pydantic's own strict mode is not used: it would refuse an
enum's or a duration's text too, which users rightly send.
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, TypeVar, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import InitErrorDetails, PydanticCustomError

USER_INPUT = "colony.user_input"
"""Validation-context key: set (by `user_input`) when the data comes from a user, not from history."""

ModelT = TypeVar("ModelT", bound=BaseModel)
ValueT = TypeVar("ValueT")


_WHOLE = re.compile(r"^[+-]?\d+$")
_DURATION_FORMS = "seconds, or ISO 8601 like PT30M"


def _shown(text: str) -> str:
    """A user's text quoted in a message (cut: a message stays one short line)."""
    return f"'{text if len(text) <= 40 else text[:40] + '...'}'"


def _described(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"the string {_shown(value)}"
    if isinstance(value, int | float):
        return f"the number {value:g}"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return f"a {type(value).__name__}"


def strict_type_problem(expected: type, value: Any) -> str | None:
    """Why `value` is not an `expected` (`int` or `bool`) as a user must give it; None when it is,
    or is None (which the field's own type decides)."""
    if value is None:
        return None
    if expected is bool:
        return (
            None if isinstance(value, bool) else f"must be true or false, not {_described(value)}"
        )
    if isinstance(value, int) and not isinstance(value, bool):
        return None
    if isinstance(value, str) and not _WHOLE.match(value.strip()):
        # Text that is no number at all: what it is, not which type it has (`count=two` on the
        # command line, `"count": "two"` in a body: the same words).
        return f"{_shown(value)} is not a whole number"
    return f"must be an integer, not {_described(value)}"


def _bound(error: Mapping[str, Any], key: str) -> Any:
    return (error.get("ctx") or {}).get(key)


def _kind_problem(kind: str, value: Any) -> str:
    return f"must be {kind}, not {_described(value)}"


def user_rule(error: Mapping[str, Any]) -> str:
    """The rule a pydantic error says a user broke, in Colony's words (`must be a list, not the
    string 'x'`, `required`, `must be at most 20, got 50`) instead of pydantic's (`Input should be
    a valid list`). Colony's own refusals (`PydanticCustomError`) keep their message.

    Args:
        error: one item of `ValidationError.errors()` (FastAPI's parameter errors have the same
            shape).
    """
    kind = str(error.get("type", ""))
    value = error.get("input")
    message = str(error.get("msg", "")).removeprefix("Value error, ")
    match kind:
        case "missing" | "missing_argument" | "missing_keyword_only_argument":
            return "required"
        case "string_type":
            return _kind_problem("a string", value)
        case "list_type" | "tuple_type" | "set_type":
            return _kind_problem("a list", value)
        case "dict_type" | "model_type" | "model_attributes_type" | "dataclass_type":
            return _kind_problem("an object", value)
        case "int_type" | "int_parsing" | "int_from_float":
            return strict_type_problem(int, value) or message
        case "bool_type" | "bool_parsing":
            return strict_type_problem(bool, value) or message
        case "float_type" | "float_parsing" | "decimal_parsing" | "decimal_type":
            if isinstance(value, str):
                return f"{_shown(value)} is not a number"
            return _kind_problem("a number", value)
        case "enum" | "literal_error":
            expected = str(_bound(error, "expected") or "").replace(" or ", ", ")
            shown = _shown(value) if isinstance(value, str) else _described(value)
            return f"{shown} is not one of {expected}"
        case "greater_than_equal":
            return f"must be at least {_bound(error, 'ge')}, got {value}"
        case "greater_than":
            return f"must be more than {_bound(error, 'gt')}, got {value}"
        case "less_than_equal":
            return f"must be at most {_bound(error, 'le')}, got {value}"
        case "less_than":
            return f"must be less than {_bound(error, 'lt')}, got {value}"
        case "string_too_short":
            return f"must be at least {_bound(error, 'min_length')} characters long"
        case "string_too_long":
            return f"must be at most {_bound(error, 'max_length')} characters long"
        case "too_short":
            return f"must hold at least {_bound(error, 'min_length')} items"
        case "too_long":
            return f"must hold at most {_bound(error, 'max_length')} items"
        case "time_delta_type" | "time_delta_parsing":
            if isinstance(value, str):
                return f"{_shown(value)} is not a duration ({_DURATION_FORMS})"
            return _kind_problem(f"a duration ({_DURATION_FORMS})", value)
        case "datetime_type" | "datetime_parsing" | "datetime_from_date_parsing":
            return _kind_problem("a date and time (ISO 8601)", value)
    return message


def _scalar(annotation: Any) -> type | None:
    """`int` or `bool` when a field holds one (or None), else None."""
    if get_origin(annotation) in (Union, types.UnionType):
        inner = [arg for arg in get_args(annotation) if arg is not type(None)]
        annotation = inner[0] if len(inner) == 1 else None
    return annotation if annotation in (int, bool) else None


@cache
def _strict_fields(model: type[BaseModel]) -> tuple[tuple[tuple[str, ...], type], ...]:
    """The model's integer and boolean fields: (the keys a user may give it by, its type)."""
    found = []
    for name, field in model.model_fields.items():
        kind = _scalar(field.annotation)
        if kind is not None:
            found.append(((field.alias or to_camel(name), name), kind))
    return tuple(found)


class ColonyModel(BaseModel):
    """A pydantic model with camelCase aliases, accepting either spelling on input."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="ignore",
    )

    @model_validator(mode="before")
    @classmethod
    def _refuse_unknown_fields_from_users(cls, data: Any, info: ValidationInfo) -> Any:
        # Only for data a user sent (see the module docstring); history and state stay lenient.
        if not (info.context and info.context.get(USER_INPUT)) or not isinstance(data, dict):
            return data
        known: set[str] = set()
        for name, field in cls.model_fields.items():
            known.update({name, field.alias or to_camel(name)})
        allowed = ", ".join(sorted({f.alias or to_camel(n) for n, f in cls.model_fields.items()}))
        wrong = [
            # Located at the unknown field itself, so that the refusal names it as its field.
            InitErrorDetails(
                type=PydanticCustomError(
                    "extra_forbidden",
                    "unknown field '{name}' (known fields: {allowed})",
                    {"name": str(key), "allowed": allowed},
                ),
                loc=(str(key),),
                input=data[key],
            )
            for key in sorted(data, key=str)
            if key not in known
        ]
        wrong += [
            InitErrorDetails(
                type=PydanticCustomError("int_type" if kind is int else "bool_type", problem),
                loc=(key,),
                input=data[key],
            )
            for keys, kind in _strict_fields(cls)
            for key in dict.fromkeys(keys)
            if key in data and (problem := strict_type_problem(kind, data[key]))
        ]
        if wrong:
            # Raised here, a ValidationError keeps its fields' locations under the model's own.
            raise ValidationError.from_exception_data(cls.__name__, wrong)
        return data


def rule(problem: Callable[[ValueT], str | None]) -> AfterValidator:
    """A field's rule, written once and attached with `Annotated[<type>, rule(problem)]`.

    A value that `problem` finds fault with is refused with its message word for word (a
    `PydanticCustomError`, whose type is the field's name; a `ValueError` would gain a "Value
    error, " prefix), located at the field, so the refusal names it. None is never checked: an
    optional field left unset breaks no rule.

    Args:
        problem: why a value breaks the rule, or None when it keeps it (`models.names`).
    """

    def check(value: ValueT | None, info: ValidationInfo) -> ValueT | None:
        found = None if value is None else problem(value)
        if found:
            raise PydanticCustomError(info.field_name or "value", found)
        return value

    return AfterValidator(check)


def refusal_at(
    model: type[BaseModel] | str,
    location: tuple[str | int, ...],
    code: str,
    message: str,
    value: Any,
) -> ValidationError:
    """A refusal of the value at `location` (under where the validator runs), for a validator to
    raise: pydantic keeps the location, so the refusal names the field it is about, not the
    model that checks it (`colonyClusters[0].locationId: ...`, not `colonyClusters[0]: ...`)."""
    title = model if isinstance(model, str) else model.__name__
    return ValidationError.from_exception_data(
        title,
        [InitErrorDetails(type=PydanticCustomError(code, message), loc=location, input=value)],
    )


def user_input(model: type[ModelT], data: Any) -> ModelT:
    """`model` validated from data a user sent: every rule, no field the model does not know, and
    integers and booleans of their exact type.

    Raises:
        pydantic.ValidationError: naming the field and the rule it breaks.
    """
    return model.model_validate(data, context={USER_INPUT: True})
