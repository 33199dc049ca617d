"""`CatalogWorkflow`: Colony's workspace class catalog, id `catalog/workspace-classes`.

Classes live on the management cluster as `WorkspaceClass` objects (so `kubectl get wsc` shows
them): the catalog every organization shares (an operator publishes it), and each organization's
own classes, which only it sees (stored under a derived name, `models.identity`, with its
ownership marks). This workflow is how Colony writes and lists them without its clients touching
Kubernetes:
`publish_class` (an update) stores a class with its ServiceTemplates, refusing a different class
under an existing name (classes are immutable: a new version is a new name), and the `classes`
query answers from what it last read. It reads the catalog again after each publish and on
`refresh` (a class applied with kubectl, a watcher's event).

The worker starts it with Colony's shipped catalog (`catalog/`) as its seed: shipped classes that
are absent are published once, at start. Workspaces do not ask this workflow for their class: they
read the stored object itself (`get_workspace_class`), the source of truth.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from workflows.engine import RequestIds, error_type_of, is_failure, reason_of
from workflows.workspace_calls import (
    LIST_WORKSPACE_CLASSES,
    PUBLISH_OBJECTS,
    PUBLISH_WORKSPACE_CLASS,
)

with workflow.unsafe.imports_passed_through():
    from models.errors import ErrorType, rejected
    from models.operations import OperationBook
    from models.signals import RefreshRequest, SignalName
    from models.workspace_api import (
        CatalogInput,
        CatalogStatus,
        ListWorkspaceClassesRequest,
        PublishObjectsRequest,
        PublishObjectsResult,
        PublishWorkspaceClassRequest,
        PublishWorkspaceClassResult,
    )

CONTINUE_AS_NEW_EVENTS = 2_000


@workflow.defn
class CatalogWorkflow:
    """The workspace class catalog (see the module docstring)."""

    @workflow.init
    def __init__(self, input: CatalogInput) -> None:
        self._status = CatalogStatus(classes=input.classes, private=input.private)
        self._book = OperationBook.model_validate(input.book) if input.book else OperationBook()
        self._ids = RequestIds(self._book)
        self._lock = asyncio.Lock()
        self._refresh = not input.classes
        self._seed = input.seed

    @workflow.run
    async def run(self, input: CatalogInput) -> CatalogStatus:
        """Publish the shipped classes that are absent, then keep the listing fresh."""
        for request in self._seed:
            try:
                result = await self._publish(request)
            except Exception as error:
                if not is_failure(error):
                    raise
                workflow.logger.warning(
                    "shipped class %s not published: %s", request.spec.name, reason_of(error)
                )
                continue
            if result.created:
                self._status.seeded.append(request.spec.name)
        self._seed = []
        while True:
            await workflow.wait_condition(lambda: self._refresh or self._history_is_long())
            if self._refresh:
                self._refresh = False
                async with self._lock:
                    await self._read()
            if self._history_is_long():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(
                    CatalogInput(
                        classes=self._status.classes,
                        private=self._status.private,
                        book=self._book.model_dump(mode="json"),
                    )
                )

    def _history_is_long(self) -> bool:
        return workflow.info().get_current_history_length() > CONTINUE_AS_NEW_EVENTS

    async def _read(self) -> None:
        listed = await LIST_WORKSPACE_CLASSES(ListWorkspaceClassesRequest())
        self._status.classes = listed.classes
        self._status.private = listed.private
        self._status.unreadable = listed.unreadable

    @workflow.update
    async def publish_class(
        self, request: PublishWorkspaceClassRequest
    ) -> PublishWorkspaceClassResult:
        """Store a class (and the objects it needs) unless the identical one is there; a different
        class under an existing name is refused (`OperationRejected`, with the rule)."""
        try:
            return await self._publish(request)
        except Exception as error:
            if not is_failure(error):
                raise
            # Refusals and failures reach the caller as ApplicationErrors with the reason.
            if error_type_of(error) == ErrorType.CLASS_CONFLICT:
                raise rejected(reason_of(error).split(": ", 1)[-1]) from error
            raise ApplicationError(reason_of(error), type=error_type_of(error)) from error

    @workflow.update
    async def publish_objects(self, request: PublishObjectsRequest) -> PublishObjectsResult:
        """Store objects classes will need (ServiceTemplates applied on their own) when absent."""
        try:
            async with self._lock:
                return await PUBLISH_OBJECTS(request)
        except Exception as error:
            if not is_failure(error):
                raise
            raise ApplicationError(reason_of(error), type=error_type_of(error)) from error

    @publish_objects.validator
    def _validate_publish_objects(self, request: PublishObjectsRequest) -> None:
        for obj in request.objects:
            metadata = obj.get("metadata")
            if not obj.get("kind") or not isinstance(metadata, dict) or not metadata.get("name"):
                raise rejected("every object needs a kind and metadata.name")

    async def _publish(self, request: PublishWorkspaceClassRequest) -> PublishWorkspaceClassResult:
        async with self._lock:
            result = await PUBLISH_WORKSPACE_CLASS(request)
            await self._read()
            return result

    @workflow.query
    def classes(self) -> CatalogStatus:
        """The classes as last read from the management cluster."""
        return self._status

    @workflow.signal(name=SignalName.REFRESH)
    def refresh(self, request: RefreshRequest) -> None:
        """Read the classes again (one was applied by other means)."""
        if self._ids.first_time(request.request_id):
            self._refresh = True
