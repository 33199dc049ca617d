"""`CatalogWorkflow`: Colony's workspace class catalog, id `catalog/workspace-classes` (its
contract: `workflows/catalog/__init__.py`).

Classes live on the management cluster as `WorkspaceClass` objects (so `kubectl get wsc` shows
them): the catalog every organization shares (an operator publishes it), and each organization's
own classes, which only it sees (stored under a derived name, `models.identity`, with its
ownership marks). This workflow is how Colony writes and lists them without its clients touching
Kubernetes:
`publish_class` (an update) stores a class with its ServiceTemplates, refusing a different class
under an existing name (classes are immutable: a new version is a new name), and the `classes`
query answers from what it last read. It reads the catalog again after each publish and on
`refresh` (a class applied with kubectl, a watcher's event).

It is the one writer of the catalog, in the kit's single-writer mode (`workflows.kit.service`):
publishes are handled one at a time, each update waiting for its own outcome, and a read of the
classes happens between two of them.

The worker starts it with Colony's shipped catalog (`catalog/`) as its seed: shipped classes that
are absent are published once, at start. Workspaces do not ask this workflow for their class: they
read the stored object itself (`get_workspace_class`), the source of truth.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from workflows.kit.engine import Refresh, error_type_of, is_failure, reason_of
from workflows.kit.run_limit import RunLimit
from workflows.kit.service import Service
from workflows.workspace_calls import (
    LIST_WORKSPACE_CLASSES,
    PUBLISH_OBJECTS,
    PUBLISH_WORKSPACE_CLASS,
)

with workflow.unsafe.imports_passed_through():
    from models import workspace_api
    from models.errors import ErrorType, rejected
    from models.signals import RefreshRequest
    from workflows.catalog import CATALOG


@workflow.defn(name=CATALOG.workflow_type)
class CatalogWorkflow:
    """The workspace class catalog (see the module docstring)."""

    @workflow.init
    def __init__(self, input: workspace_api.CatalogInput) -> None:
        self._state = input.state or workspace_api.CatalogState()
        self._limit = RunLimit(input.continue_as_new)
        self._service: Service[workspace_api.CatalogMessage] = Service(
            self._state.inbox, self._limit
        )
        self._classes_look = Refresh(self._state, self._service.request_ids, self._read)

    @workflow.run
    async def run(self, input: workspace_api.CatalogInput) -> workspace_api.CatalogStatus:
        """Publish the shipped classes that are absent, then keep the listing fresh."""
        for request in input.seed:
            await self._seed(request)
        await self._service.serve(
            self._handle,
            closed=lambda: False,
            carry=lambda: workspace_api.CatalogInput(
                state=self._state, continue_as_new=self._limit.policy
            ),
            chore=self._classes_look.chore(),
        )
        return self._state.status

    async def _seed(self, request: workspace_api.PublishWorkspaceClassRequest) -> None:
        try:
            result = await self._publish(request)
        except Exception as error:
            if not is_failure(error):
                raise
            workflow.logger.warning(
                "shipped class %s not published: %s", request.spec.name, reason_of(error)
            )
            return
        if result.created:
            self._state.status.seeded.append(request.spec.name)

    async def _handle(
        self, message: workspace_api.CatalogMessage
    ) -> workspace_api.PublishWorkspaceClassResult | workspace_api.PublishObjectsResult:
        """One publish; a refusal or failure reaches its caller as an `ApplicationError` with the
        reason."""
        try:
            if isinstance(message, workspace_api.PublishObjectsRequest):
                return await PUBLISH_OBJECTS(message)
            return await self._publish(message)
        except Exception as error:
            if not is_failure(error):
                raise
            if error_type_of(error) == ErrorType.CLASS_CONFLICT:
                raise rejected(reason_of(error).split(": ", 1)[-1]) from error
            raise ApplicationError(reason_of(error), type=error_type_of(error)) from error

    async def _publish(
        self, request: workspace_api.PublishWorkspaceClassRequest
    ) -> workspace_api.PublishWorkspaceClassResult:
        result = await PUBLISH_WORKSPACE_CLASS(request)
        await self._classes_look.look()
        return result

    async def _read(self) -> None:
        listed = await LIST_WORKSPACE_CLASSES(workspace_api.ListWorkspaceClassesRequest())
        status = self._state.status
        status.classes = listed.classes
        status.private = listed.private
        status.unreadable = listed.unreadable

    @workflow.update(name=CATALOG.publish_class.name)
    async def publish_class(
        self, request: workspace_api.PublishWorkspaceClassRequest
    ) -> workspace_api.PublishWorkspaceClassResult:
        """Store a class (and the objects it needs) unless the identical one is there; a different
        class under an existing name is refused (`OperationRejected`, with the rule)."""
        return await self._service.ask(
            request, _update_id(), workspace_api.PublishWorkspaceClassResult
        )

    @workflow.update(name=CATALOG.publish_objects.name)
    async def publish_objects(
        self, request: workspace_api.PublishObjectsRequest
    ) -> workspace_api.PublishObjectsResult:
        """Store objects classes will need (ServiceTemplates applied on their own) when absent."""
        return await self._service.ask(request, _update_id(), workspace_api.PublishObjectsResult)

    @publish_objects.validator
    def _validate_publish_objects(self, request: workspace_api.PublishObjectsRequest) -> None:
        for obj in request.objects:
            metadata = obj.get("metadata")
            if not obj.get("kind") or not isinstance(metadata, dict) or not metadata.get("name"):
                raise rejected("every object needs a kind and metadata.name")

    @workflow.query(name=CATALOG.classes.name)
    def classes(self) -> workspace_api.CatalogStatus:
        """The classes as last read from the management cluster."""
        return self._state.status

    @workflow.signal(name=CATALOG.refresh.name)
    def refresh(self, request: RefreshRequest) -> None:
        """Read the classes again (one was applied by other means)."""
        self._classes_look.ask(request.request_id)


def _update_id() -> str:
    info = workflow.current_update_info()
    assert info is not None, "called from an update handler"
    return info.id
