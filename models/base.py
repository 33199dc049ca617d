"""The base every Colony model derives from: camelCase JSON, snake_case Python.

The JSON shapes follow the public API (`locationId`, `nodePools`, `gpuModelId`, `readyCount`), so a
model read from a file, sent through Temporal or printed by `colonyctl -o json` looks the same.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class ColonyModel(BaseModel):
    """A pydantic model with camelCase aliases, accepting either spelling on input."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="forbid",
    )
