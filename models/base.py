"""The base every Colony model derives from: camelCase JSON, snake_case Python, forward-compatible.

The JSON shapes follow the public API (`locationId`, `nodePools`, `gpuModelId`, `readyCount`), so a
model read from a file, sent through Temporal or printed by `colonyctl -o json` looks the same.

Unknown fields: persisted state, workflow inputs, update payloads recorded in history and activity
results must accept fields a later (or earlier) release wrote, or a removed field would break the
replay and the continue-as-new of every running workflow. So models ignore unknown fields by
default, and strictness is applied where users send data: `user_input(Model, data)` (used by
`colonyctl`, `apply -f` and the HTTP API) refuses any field the model does not know, naming it.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationInfo, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

USER_INPUT = "colony.user_input"
"""Validation-context key: set (by `user_input`) when the data comes from a user, not from history."""

ModelT = TypeVar("ModelT", bound=BaseModel)


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
        unknown = sorted(str(key) for key in data if key not in known)
        if unknown:
            names = ", ".join(f"'{key}'" for key in unknown)
            allowed = ", ".join(
                sorted({f.alias or to_camel(n) for n, f in cls.model_fields.items()})
            )
            raise PydanticCustomError(
                "extra_forbidden",
                "unknown field {names} (known fields: {allowed})",
                {"names": names, "allowed": allowed},
            )
        return data


def user_input(model: type[ModelT], data: Any) -> ModelT:
    """`model` validated from data a user sent: every rule, and no field the model does not know.

    Raises:
        pydantic.ValidationError: naming the field and the rule it breaks.
    """
    return model.model_validate(data, context={USER_INPUT: True})
