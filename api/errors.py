"""Every refusal of the HTTP API as one JSON body and the status a client expects.

`{"error": {"code": "conflict", "field": "name", "message": "name: cluster 'training' already
exists ..."}}`: the message is the line `colonyctl` prints after `error: ` (both get it from the same
`clients.errors` types), the code is stable, the field is named when the refusal is about one.

| raised | status | code |
| --- | --- | --- |
| body not JSON, not an object | 400 | bad_request |
| a body not sent as `application/json` | 415 | unsupported_media_type |
| `InvalidRequestError` (a rule, an unknown field, the catalog) | 422 | invalid |
| FastAPI's own parameter validation (`?drain=maybe`) | 422 | invalid |
| no key, unknown, revoked, expired key | 401 | unauthenticated, with `WWW-Authenticate: Bearer` |
| the key lacks the permission | 403 | forbidden |
| `NotFoundError`, an unknown route, another organization's cluster, workspace or colony | 404 | not_found |
| `QuotaExceededError` (the organization would exceed a quota: the message names it, its use and its limit) | 409 | quota_exceeded |
| `ConflictError` (name taken, the cluster's or workspace's state refuses it, a class published with another definition) | 409 | conflict |
| `OperationFailedError` | 409 | operation_failed |
| over the key's rate, or the verification rate of the address or of the API | 429 | rate_limited, with `Retry-After` |
| `UnavailableError` (Temporal, the management cluster or the provider down), `SettingsError`, the key store unreachable (`infra.keys.KeyStoreUnavailableError`) | 503 | unavailable |

Installed on the app by `api.app.create_app`; `api.context` and the routes raise `ApiError` or the
`clients.errors` types.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.views import ErrorBody, ErrorDetail
from clients import errors
from clients.errors import ColonyError
from infra.config import SettingsError
from infra.keys import KeyRequestError, KeyStoreError
from models.base import user_rule
from models.operations import OperationKind
from workflows.cluster import CLUSTER

UNAVAILABLE_RETRY_SECONDS = 5
"""`Retry-After` of a 503: Temporal or the management cluster restarting takes seconds."""

_FIELD = re.compile(r"^[A-Za-z][A-Za-z0-9_.\[\]]*$")
_NOT_FIELDS = {kind.value for kind in OperationKind} | {
    CLUSTER.cancel_operation.name,
    "host provider",
    "temporal",
}
"""Message prefixes that name what refused, not a field (`scale_node_pool: ...`, when the workflow
named no field); a workspace's refusals name the workspace (`workspace: workspace 'nb' is already
suspended`), and `suspend` is a field of a deploy."""


class ApiError(Exception):
    """A refusal decided by the API itself (authentication, permissions, rate, body shape)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.headers = headers or {}

    def response(self) -> JSONResponse:
        """The refusal as the API answers it: `ErrorBody` with the status and headers."""
        body = ErrorBody(error=ErrorDetail(code=self.code, field=self.field, message=self.message))
        return JSONResponse(
            body.model_dump(mode="json"), status_code=self.status, headers=self.headers
        )


def field_of(message: str) -> str | None:
    """The field a `<field>: <rule>` message names; None for a sentence."""
    head, separator, _ = message.partition(": ")
    if not separator or head in _NOT_FIELDS or not _FIELD.match(head):
        return None
    return head


ANSWERS: list[tuple[type[ColonyError], int, str]] = [
    (errors.QuotaExceededError, 409, "quota_exceeded"),
    (errors.ConflictError, 409, "conflict"),
    (errors.InvalidRequestError, 422, "invalid"),
    (errors.NotFoundError, 404, "not_found"),
    (errors.OperationFailedError, 409, "operation_failed"),
]
"""The status and code of each domain error, subclasses first (a conflict is a refusal too);
`clients.http` reads them back. Any other (`UnavailableError`, and a bare `ColonyError`:
an answer Colony could not use, e.g. an empty kubeconfig Secret) is a 503: the platform could
not serve this now."""


def status_of(error: ColonyError) -> tuple[int, str]:
    """The status and code of a domain error (`ANSWERS`)."""
    return next(
        ((status, code) for kind, status, code in ANSWERS if isinstance(error, kind)),
        (503, "unavailable"),
    )


def colony_error_response(error: ColonyError) -> JSONResponse:
    status, code = status_of(error)
    headers = {"Retry-After": str(UNAVAILABLE_RETRY_SECONDS)} if status == 503 else None
    message = " ".join(error.message.split())
    return ApiError(status, code, message, field=field_of(message), headers=headers).response()


def _validation_field(location: tuple[Any, ...]) -> str:
    parts = [str(part) for part in location]
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        parts = parts[1:]
    return ".".join(parts) or "request"


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _colony_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ColonyError)
    return colony_error_response(exc)


async def _key_store_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, KeyStoreError)
    as_reported = (
        errors.InvalidRequestError(exc.message)
        if isinstance(exc, KeyRequestError)
        else errors.UnavailableError(exc.message)
    )
    return colony_error_response(as_reported)


async def _settings_error(request: Request, exc: Exception) -> JSONResponse:
    return ApiError(
        503,
        "unavailable",
        f"the API is not configured for this: {exc}",
        headers={"Retry-After": str(UNAVAILABLE_RETRY_SECONDS)},
    ).response()


async def _request_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = exc.errors()
    first = problems[0] if problems else {"loc": (), "msg": "invalid request"}
    field = _validation_field(tuple(first.get("loc", ())))
    return ApiError(422, "invalid", f"{field}: {user_rule(first)}", field=field).response()


async def _http_exception(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 404:
        return ApiError(
            404, "not_found", f"no such endpoint: {request.method} {request.url.path}"
        ).response()
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        message = f"{request.method} is not allowed on {request.url.path}"
        return ApiError(405, "method_not_allowed", message, headers=headers).response()
    code = "bad_request" if exc.status_code < 500 else "internal"
    return ApiError(exc.status_code, code, str(exc.detail), headers=headers).response()


def install(app: FastAPI) -> None:
    """Every refusal as an `ErrorBody` (see the module docstring)."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(ColonyError, _colony_error)
    app.add_exception_handler(KeyStoreError, _key_store_error)
    app.add_exception_handler(SettingsError, _settings_error)
    app.add_exception_handler(RequestValidationError, _request_validation)
    app.add_exception_handler(StarletteHTTPException, _http_exception)


ERROR_DESCRIPTIONS = {
    400: "The body is not JSON, or not an object.",
    415: "The body is not sent as `application/json`.",
    401: "No API key, or an unknown, revoked or expired one.",
    403: "The key lacks the permission this needs.",
    404: "Unknown (or deleted) cluster, pool, node, operation, workspace, class or colony; another "
    "organization's cluster, workspace or colony.",
    409: "The name is taken, the cluster's or workspace's state refuses the operation now, a "
    "class of that name exists with another definition, or the organization would exceed a quota "
    "(code `quota_exceeded`: the message names the quota, its use and its limit).",
    422: "A field breaks a rule (the message names the field and the rule).",
    429: "Over the key's request rate, or (before a key is verified) the client address's or the "
    "API's rate of key verifications; retry after `Retry-After` seconds.",
    503: "Temporal, the management cluster or the host provider cannot be reached.",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for the refusals an endpoint can answer."""
    return {
        status: {"model": ErrorBody, "description": ERROR_DESCRIPTIONS[status]}
        for status in statuses
    }
