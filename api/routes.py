"""How the HTTP API's routes are declared, once for every router (`api.clusters`,
`api.workspaces`, `api.colonies`, `api.catalog`): who may call (`Call`, with the permission it
needs), the `Idempotency-Key` header, the refusals each kind of route documents, and the two
shapes of route: a read answers its model, a write takes a JSON body (read strictly by the route,
declared here for the OpenAPI document) and answers what it accepted, 202 unless it says
otherwise; and how an entity's list and get answer it (`entity_views`, `entity_view`): its status
as its view, with the workflow that owns it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, Any, Protocol, TypeVar

from fastapi import APIRouter, Depends, Header, Request
from pydantic import BaseModel

from api.bodies import body_spec
from api.context import ApiContext, Principal, context, each_found, requires
from api.errors import error_responses
from clients.base import WorkflowRef
from clients.classes import TemporalClasses
from clients.clusters import TemporalClusters
from clients.colonies import TemporalColonies
from clients.purges import TemporalPurges
from clients.workspaces import TemporalWorkspaces
from infra.keys import Permission

EndpointT = TypeVar("EndpointT", bound=Callable[..., Any])
ViewT = TypeVar("ViewT")

ANY_KEY = Depends(requires(None), scope="function")
"""Any valid key; the organization's turn is held while the route runs (`api.context.requires`)."""

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


def entity_router(prefix: str, tag: str) -> tuple[APIRouter, tuple[APIRouter, ...]]:
    """A module's one router (every route under `prefix`, documented under `tag`) and its
    `ROUTERS`, the routes the module adds to the API (`api.app.entity_routers`)."""
    router = APIRouter(prefix=prefix, tags=[tag])
    return router, (router,)


@dataclass(frozen=True)
class Call:
    """One call of a route: the request, who makes it (the verified key, whose organization every
    client below acts for) and, for a write, its `Idempotency-Key`."""

    request: Request
    principal: Principal
    idempotency_key: str | None = None

    @property
    def context(self) -> ApiContext:
        return context(self.request)

    @property
    def organization(self) -> str:
        return self.principal.organization

    def clusters(self) -> TemporalClusters:
        return self.context.clusters(self.principal)

    def workspaces(self) -> TemporalWorkspaces:
        return self.context.workspaces(self.principal)

    def classes(self, organization: str | None = None) -> TemporalClasses:
        """The class catalog as `organization` sees it (the caller's when None)."""
        return self.context.classes(self.organization if organization is None else organization)

    def colonies(self) -> TemporalColonies:
        return self.context.colonies(self.principal)

    def purges(self) -> TemporalPurges:
        return self.context.purges()

    def workflow(self, workflow_id: str) -> WorkflowRef:
        return self.context.workflow(workflow_id)


def _reading(permission: Permission) -> Callable[..., Awaitable[Call]]:
    authenticated = Depends(requires(permission), scope="function")

    async def reading(request: Request, principal: Principal = authenticated) -> Call:
        return Call(request, principal)

    return reading


def _writing(permission: Permission) -> Callable[..., Awaitable[Call]]:
    authenticated = Depends(requires(permission), scope="function")

    async def writing(
        request: Request,
        idempotency_key: IdempotencyKey = None,
        principal: Principal = authenticated,
    ) -> Call:
        return Call(request, principal, idempotency_key)

    return writing


READ = Depends(_reading(Permission.READ))
"""A read: a key with Kubernetes Read."""
CONNECT = Depends(_reading(Permission.CONNECT))
"""A credential: a key with Kubernetes Connect."""
MANAGE = Depends(_writing(Permission.MANAGE))
"""A write (with its `Idempotency-Key`): a key with Kubernetes Manage."""
QUOTA_MANAGE = Depends(_reading(Permission.QUOTA_MANAGE))
"""An operator's read or change of any organization's quotas: a key with Quota Manage."""
PURGE = Depends(_writing(Permission.PURGE))
"""An operator's purge of any organization's entity: a key with Operator Purge."""
OPERATOR_READ = Depends(_reading(Permission.PURGE))
"""An operator's read of a purge: a key with Operator Purge."""

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


class Named(Protocol):
    """An entity as a list names it (`ClusterSummary`, ...), and its status."""

    @property
    def name(self) -> str: ...


StatusT = TypeVar("StatusT", bound=Named)
StatusT_co = TypeVar("StatusT_co", bound=Named, covariant=True)


class Entities(Protocol[StatusT_co]):
    """An entity's client as its routes read it (`TemporalClusters`, `TemporalColonies`,
    `TemporalWorkspaces`): a status by name, and the workflow that owns it."""

    async def get(self, name: str) -> StatusT_co: ...

    def workflow(self, name: str) -> WorkflowRef: ...


async def entity_view(
    entities: Entities[StatusT], name: str, view: Callable[[StatusT, WorkflowRef], ViewT]
) -> ViewT:
    """The entity `name` as its get answers it: the `view` of its status and its workflow."""
    status = await entities.get(name)
    return view(status, entities.workflow(status.name))


async def entity_views(
    entities: Entities[StatusT],
    found: Iterable[Named],
    view: Callable[[StatusT, WorkflowRef], ViewT],
) -> list[ViewT]:
    """The entities a list `found`, each as `entity_view` answers it, in order; one deleted
    between the list and its read is left out (`api.context.each_found`)."""
    return await each_found(
        (entity.name for entity in found),
        entities.get,
        lambda status: view(status, entities.workflow(status.name)),
    )
