"""The workspace class catalog (the classes workspaces are deployed from): one client, two
transports. `TemporalClasses` reads and publishes through the catalog workflow
(`catalog/workspace-classes`, which keeps the classes on the management cluster), `HttpClasses`
through the HTTP API (`/v1/workspace-classes`).

Classes are immutable: publishing the identical class again is success (`created` False); a
different definition under an existing name is refused (`ConflictError` naming the rule: a new
version is a new name), before anything is published (`check_class_conflicts`), by `colonyctl
class publish`, `apply -f` and the API alike. An organization sees the shared catalog's classes
and its own (`CatalogStatus.for_organization`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from clients.base import new_request_id
from clients.errors import ConflictError, InvalidRequestError, NotFoundError, UnavailableError
from clients.http import RemoteClient, items_of, not_through_the_api, parsed
from clients.temporal import Refusals, TemporalSession, check_carried, reported
from models.cluster import DEFAULT_NAMESPACE
from models.errors import ErrorType
from models.workspace_api import (
    CATALOG_WORKFLOW_ID,
    CatalogStatus,
    PublishObjectsRequest,
    PublishObjectsResult,
    PublishWorkspaceClassRequest,
    PublishWorkspaceClassResult,
)
from models.workspace_class import WorkspaceClassSpec, class_conflict, reserved_class_name_problem
from workflows.catalog import CATALOG

CLASSES_QUERY = CATALOG.classes.name
PUBLISH_CLASS_UPDATE = CATALOG.publish_class.name
PUBLISH_OBJECTS_UPDATE = CATALOG.publish_objects.name
SHOWN_CLASSES = 10
"""Published classes a refusal names (the catalog may hold many)."""
NOT_RUNNING = UnavailableError(
    f"the workspace class catalog ({CATALOG_WORKFLOW_ID}) is not running: start Colony's worker, "
    "which starts it"
)
"""The catalog workflow does not run (the worker starts it)."""


def class_not_found(name: str, published: Iterable[str]) -> NotFoundError:
    """A class nobody published, refused naming those that are (the same words for `colonyctl`
    and the HTTP API: neither's command is the other's)."""
    names = sorted(published)
    shown = ", ".join(names[:SHOWN_CLASSES]) + (
        f" and {len(names) - SHOWN_CLASSES} more" if len(names) > SHOWN_CLASSES else ""
    )
    return NotFoundError(
        f"class: workspace class '{name}' not found "
        + (f"(published: {shown})" if names else "(no class is published)")
    )


def check_class_name(request: PublishWorkspaceClassRequest) -> None:
    """Refuse a class published under a name Colony reserves (`InvalidRequestError` naming
    `name`): its shipped catalog's prefix (the worker seeds the shipped classes itself, never
    through here), or the mark of derived names; for an organization's own class and the shared
    catalog alike."""
    problem = reserved_class_name_problem(request.spec.name)
    if problem:
        raise InvalidRequestError(f"name: {problem}")


def check_class_conflicts(
    requests: list[PublishWorkspaceClassRequest], catalog: CatalogStatus
) -> None:
    """Refuse, before anything is published, a class under a reserved name (`check_class_name`),
    or one that exists with another definition (`ConflictError`: classes are immutable, a new
    version is a new name)."""
    for request in requests:
        check_class_name(request)
    published = {c.name: c for c in catalog.classes}
    for request in requests:
        existing = published.get(request.spec.name)
        conflict = class_conflict(existing, request.spec) if existing else None
        if conflict:
            raise ConflictError(f"name: {conflict}")


class WorkspaceClasses(ABC):
    """What a caller can do with the class catalog, whichever transport carries it."""

    @abstractmethod
    async def catalog(self) -> CatalogStatus:
        """The published classes the caller sees.

        Raises:
            UnavailableError: the catalog cannot be read (its workflow does not run, Temporal or
                the API cannot be reached).
        """

    @abstractmethod
    async def get(self, name: str) -> WorkspaceClassSpec:
        """One class the caller sees, by its exact name; `NotFoundError` when there is none."""

    @abstractmethod
    async def publish(
        self, request: PublishWorkspaceClassRequest, *, request_id: str | None = None
    ) -> PublishWorkspaceClassResult:
        """Publish a class (with the objects it needs, such as its ServiceTemplates)."""


class TemporalClasses(WorkspaceClasses):
    """The catalog workflow's classes, as the session's organization sees them (the shared
    catalog's, and its own)."""

    def __init__(self, session: TemporalSession) -> None:
        self.session = session

    async def catalog(self) -> CatalogStatus:
        handle = (await self.session.client()).get_workflow_handle(CATALOG_WORKFLOW_ID)
        with reported("cannot read the workspace class catalog", NOT_RUNNING):
            status: CatalogStatus = await handle.query(CLASSES_QUERY, result_type=CatalogStatus)
        return status.for_organization(self.session.organization)

    async def get(self, name: str) -> WorkspaceClassSpec:
        """By its exact name, the organization's own before the shared catalog's (another
        organization's own class is none)."""
        classes = (await self.catalog()).classes
        found = next((c for c in classes if c.name == name), None)
        if found is None:
            raise class_not_found(name, (c.name for c in classes))
        return found

    async def _update(
        self,
        update: str,
        request: Any,
        result_type: type[Any],
        request_id: str | None,
        *,
        what: str,
        refusals: Refusals,
    ) -> Any:
        """Send the catalog an update; `what` names it in messages (`publish jupyter-1-0-0`)."""
        client = await self.session.client()
        declared = CATALOG.updates()[update]
        check_carried(client.data_converter.payload_converter, request, declared.input)
        handle = client.get_workflow_handle(CATALOG_WORKFLOW_ID)
        with reported(f"cannot {what}", NOT_RUNNING, update=what, refusals=refusals):
            return await handle.execute_update(
                update, request, id=request_id or new_request_id(), result_type=result_type
            )

    async def publish(
        self, request: PublishWorkspaceClassRequest, *, request_id: str | None = None
    ) -> PublishWorkspaceClassResult:
        """A different definition under an existing name is refused (`ConflictError` naming
        the rule); an object of the class the management cluster refuses (its schema) is an
        `InvalidRequestError` naming the `spec`; so is a class under a name Colony reserves
        (`check_class_name`), before anything is sent."""
        check_class_name(request)
        result: PublishWorkspaceClassResult = await self._update(
            PUBLISH_CLASS_UPDATE,
            request,
            PublishWorkspaceClassResult,
            request_id,
            what=f"publish {request.spec.name}",
            refusals=Refusals(subject="name", subjects={ErrorType.INVALID_SPEC: "spec"}),
        )
        return result

    async def publish_objects(
        self, objects: list[dict[str, Any]], *, request_id: str | None = None
    ) -> PublishObjectsResult:
        """Store objects classes need on their own (k0rdent ServiceTemplates `apply -f` was given
        without a class); existing ones are left as they are."""
        result: PublishObjectsResult = await self._update(
            PUBLISH_OBJECTS_UPDATE,
            PublishObjectsRequest(objects=objects),
            PublishObjectsResult,
            request_id,
            what="publish objects",
            refusals=Refusals(subject="objects"),
        )
        return result


class HttpClasses(WorkspaceClasses):
    """The catalog through the HTTP API, as the key's organization sees it."""

    collection = "/v1/workspace-classes"

    def __init__(self, remote: RemoteClient) -> None:
        self.remote = remote

    async def catalog(self) -> CatalogStatus:
        items = items_of(await self.remote.call("GET", self.collection))
        return CatalogStatus(classes=[parsed(WorkspaceClassSpec, item) for item in items])

    async def get(self, name: str) -> WorkspaceClassSpec:
        body = await self.remote.call("GET", f"{self.collection}/{quote(name, safe='')}")
        return parsed(WorkspaceClassSpec, body)

    async def publish(
        self, request: PublishWorkspaceClassRequest, *, request_id: str | None = None
    ) -> PublishWorkspaceClassResult:
        """The class and its ServiceTemplates, in the API's form; other objects, or templates
        of another namespace, are the operator's to publish."""
        for obj in request.objects:
            if obj.get("kind") != "ServiceTemplate":
                raise not_through_the_api(
                    "kind", f"{obj.get('kind')} objects cannot be published through the API"
                )
            namespace = (obj.get("metadata") or {}).get("namespace")
            if namespace not in (None, DEFAULT_NAMESPACE):
                raise not_through_the_api(
                    "namespace",
                    f"ServiceTemplates are published in {DEFAULT_NAMESPACE} through the API, not "
                    f"{namespace}",
                )
        body = {
            "class": request.spec.model_dump(mode="json", exclude_none=True),
            "serviceTemplates": [_service_template(obj) for obj in request.objects],
        }
        answer = await self.remote.call("POST", self.collection, json=body, request_id=request_id)
        return parsed(PublishWorkspaceClassResult, answer)


def _service_template(obj: dict[str, Any]) -> dict[str, Any]:
    """A ServiceTemplate object (as `ServiceTemplateManifest.to_object` makes it) as the API
    takes it."""
    metadata = obj.get("metadata") or {}
    template: dict[str, Any] = {"name": metadata.get("name", ""), "spec": obj.get("spec") or {}}
    if metadata.get("labels"):
        template["labels"] = metadata["labels"]
    return template
