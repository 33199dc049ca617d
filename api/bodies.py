"""Request bodies: read strictly by the API itself, documented in its OpenAPI schema.

FastAPI would validate a body parameter leniently (unknown fields ignored, the last of two equal
keys taken) and word its own messages. Colony's rule is stricter and its messages are
`colonyctl`'s: so a route reads its body with `read_body(request, Model)`: 415 for a body that is
not `application/json`; 422 for one past the bounds of `models.bounds` (larger than 1 MiB, nested
deeper than a field may be, more tokens than a request has), checked while it is received and
before the JSON parser (which recurses) sees it, or holding a key twice, naming the field; 400 for
what is not JSON or not an object; then `clients.parsing.validated`, which is
`models.base.user_input`: 422 naming the field and the rule (the free-form fields' bounds among
them), unknown fields and integers or booleans of another type refused. Routes declare their body
with `body_spec(Model)`; `openapi_components()` adds the models' schemas (with
`additionalProperties: false`, as they are read) to the document.
"""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from api.errors import ApiError
from api.views import REQUEST_MODELS
from clients.errors import InvalidRequestError
from clients.parsing import validated
from models.bounds import MAX_DOCUMENT_BYTES, InputError, field_of, load_json

ModelT = TypeVar("ModelT", bound=BaseModel)

MAX_BODY_BYTES = MAX_DOCUMENT_BYTES
"""1 MiB (`models.bounds`): ten pools of labels and taints are a few kilobytes, a workspace's
values at most 128 KiB."""
SCHEMA_SUFFIX = "Input"
"""Request schemas are named `<Model>Input` (a model read and answered has two shapes)."""


JSON_MEDIA_TYPE = "application/json"


def _bad(message: str) -> ApiError:
    return ApiError(400, "bad_request", message, field="body")


def _media_type(request: Request) -> str:
    """The body's media type, without parameters (`charset=utf-8`), lowercased."""
    return request.headers.get("content-type", "").partition(";")[0].strip().lower()


async def read_body(request: Request, model: type[ModelT], *, optional: bool = False) -> ModelT:
    """The request's JSON body as `model`, validated as user input.

    Args:
        optional: an empty body reads as `{}` (all of the model's defaults).
    """
    raw = await _received(request)
    media_type = _media_type(request)
    if raw.strip() and media_type != JSON_MEDIA_TYPE:
        # A body is read as what its sender says it is: JSON sent as text/plain (a form, a
        # simple CORS request) is not taken for JSON.
        raise ApiError(
            415,
            "unsupported_media_type",
            f"body: must be sent as {JSON_MEDIA_TYPE}, not {media_type or 'without a Content-Type'}",
            field="body",
        )
    if not raw.strip():
        if not optional:
            raise _bad("body: a JSON object is required")
        data: Any = {}
    else:
        try:
            data = load_json(raw, what="body")
        except InputError as exc:
            if exc.syntax:
                raise _bad(f"body: {exc.message}") from None
            # Too deep: the field the nesting is in; a key twice: the key itself.
            field = (field_of(model, exc.path) if exc.kind == "depth" else "") or exc.where("body")
            raise InvalidRequestError(f"{field}: {exc.message}") from None
    if not isinstance(data, dict):
        raise _bad("body: must be a JSON object")
    return validated(model, data)


async def _received(request: Request) -> bytes:
    """The body, received up to `MAX_BODY_BYTES`: a larger one is refused (422 naming `body` and
    the limit) as soon as it passes the limit, never held whole."""
    received = bytearray()
    async for chunk in request.stream():
        received += chunk
        if len(received) > MAX_BODY_BYTES:
            raise InvalidRequestError(
                f"body: larger than {MAX_BODY_BYTES // 1024} KiB, the most a request body may be"
            )
    return bytes(received)


def body_spec(model: type[BaseModel], *, required: bool = True) -> dict[str, Any]:
    """A route's `openapi_extra` declaring `model` as its JSON body."""
    return {
        "requestBody": {
            "required": required,
            "content": {
                "application/json": {
                    "schema": {"$ref": f"#/components/schemas/{model.__name__}{SCHEMA_SUFFIX}"}
                }
            },
        }
    }


def _closed(schema: Any) -> Any:
    """`schema` with `additionalProperties: false` on every object that lists its properties."""
    if isinstance(schema, dict):
        closed = {key: _closed(value) for key, value in schema.items()}
        if "properties" in closed and closed.get("type", "object") == "object":
            closed["additionalProperties"] = False
        return closed
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    return schema


def openapi_components() -> dict[str, Any]:
    """The request models' schemas, by `<Model>Input` name."""
    _, top = models_json_schema(
        [(model, "validation") for model in REQUEST_MODELS],
        ref_template=f"#/components/schemas/{{model}}{SCHEMA_SUFFIX}",
    )
    return {f"{name}{SCHEMA_SUFFIX}": _closed(schema) for name, schema in top["$defs"].items()}
