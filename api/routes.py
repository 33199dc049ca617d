"""How the HTTP API's routes are declared, once for every router (`api.clusters`,
`api.workspaces`, `api.colonies`, `api.catalog`): who may call (the permission dependencies),
the `Idempotency-Key` header, the refusals each kind of route documents, and the two shapes of
route: a read answers its model, a write takes a JSON body (read strictly by the route, declared
here for the OpenAPI document) and answers what it accepted, 202 unless it says otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Header
from pydantic import BaseModel

from api.bodies import body_spec
from api.context import requires
from api.errors import error_responses
from infra.keys import Permission

EndpointT = TypeVar("EndpointT", bound=Callable[..., Any])

READ = Depends(requires(Permission.READ))
CONNECT = Depends(requires(Permission.CONNECT))
MANAGE = Depends(requires(Permission.MANAGE))
ANY_KEY = Depends(requires(None))

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=200,
        pattern=r"^[\x21-\x7e]+$",
        description="Retries with the same key return the first request's operation instead of "
        "queueing another (a create: the same cluster).",
    ),
]

READS = error_responses(401, 403, 404, 422, 429, 503)
WRITES = error_responses(400, 401, 403, 404, 409, 415, 422, 429, 503)


def reads(
    router: APIRouter,
    path: str,
    model: type[BaseModel],
    summary: str,
    *,
    responses: dict[int | str, dict[str, Any]] = READS,
) -> Callable[[EndpointT], EndpointT]:
    """`GET path`, answering `model`."""
    return router.get(
        path,
        response_model=model,
        response_model_exclude_none=True,
        responses=responses,
        summary=summary,
    )


def writes(
    router: APIRouter,
    method: str,
    path: str,
    model: type[BaseModel],
    summary: str,
    *,
    body: type[BaseModel] | None = None,
    body_required: bool = True,
    status_code: int = 202,
    responses: dict[int | str, dict[str, Any]] = WRITES,
    name: str | None = None,
    description: str | None = None,
) -> Callable[[EndpointT], EndpointT]:
    """`method path`, taking `body` (when it has one) and answering `model`."""
    return router.api_route(
        path,
        methods=[method],
        status_code=status_code,
        response_model=model,
        response_model_exclude_none=True,
        responses=responses,
        openapi_extra=body_spec(body, required=body_required) if body else None,
        summary=summary,
        name=name,
        description=description,
    )
