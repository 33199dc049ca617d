"""The contract of `CatalogWorkflow` (`workflows.kit.contract`): Colony's workspace class catalog,
one workflow, id `catalog/workspace-classes`."""

from __future__ import annotations

from temporalio import workflow

from workflows.kit.contract import Query, Signal, Update, WorkflowContract

# The package is also its workflow module's parent, which the sandbox imports for every
# workflow run: its models are passed through, as the workflow modules' own are, so both
# see the same classes.
with workflow.unsafe.imports_passed_through():
    from models.signals import RefreshRequest
    from models.workspace_api import (
        CATALOG_WORKFLOW_ID,
        CatalogInput,
        CatalogStatus,
        PublishObjectsRequest,
        PublishObjectsResult,
        PublishWorkspaceClassRequest,
        PublishWorkspaceClassResult,
    )


def catalog_workflow_id() -> str:
    """The one catalog's id."""
    return CATALOG_WORKFLOW_ID


class CatalogContract(WorkflowContract[CatalogInput, CatalogStatus, []]):
    """`CatalogWorkflow`'s updates, signal and query."""

    publish_class = Update(
        "publish_class", PublishWorkspaceClassRequest, PublishWorkspaceClassResult
    )
    """Store a class (and the objects it needs) unless the identical one is there."""
    publish_objects = Update("publish_objects", PublishObjectsRequest, PublishObjectsResult)
    """Store objects classes will need, when absent."""

    refresh = Signal("refresh", RefreshRequest)
    """Read the classes again (one was applied by other means)."""

    classes = Query("classes", CatalogStatus)
    """The classes as last read from the management cluster."""


CATALOG = CatalogContract(
    "CatalogWorkflow", CatalogInput, CatalogStatus, workflow_id=catalog_workflow_id
)
