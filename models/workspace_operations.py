"""Operations on a workspace: the update payloads `colonyctl` (and the HTTP API) send, and how an
operation is tracked by `WorkspaceWorkflow`'s entity engine (`workflows/kit/engine.py`).

Deploy is queued by the workflow itself when it starts; suspend, resume and delete come as updates
(delete also as the `delete_requested` signal a cluster sends before it goes); `redeploy` is queued
by the workflow when its GPUs were taken (a forced scale-down) and it must wait for new ones.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field

from models.base import ColonyModel
from models.operations import AcceptedOperation, OperationRecord


class WorkspaceOperationKind(StrEnum):
    DEPLOY = "deploy"
    SUSPEND = "suspend"
    RESUME = "resume"
    REDEPLOY = "redeploy"
    DELETE = "delete"


class DeployWorkspaceRequest(ColonyModel):
    """The workspace's first deployment (its spec is the workflow's input)."""

    kind: Literal[WorkspaceOperationKind.DEPLOY] = WorkspaceOperationKind.DEPLOY


class SuspendWorkspaceRequest(ColonyModel):
    """Uninstall the release, keep the namespace, its volumes and the definition; free the GPUs."""

    kind: Literal[WorkspaceOperationKind.SUSPEND] = WorkspaceOperationKind.SUSPEND


class ResumeWorkspaceRequest(ColonyModel):
    """Deploy a suspended workspace again, through GPU admission again."""

    kind: Literal[WorkspaceOperationKind.RESUME] = WorkspaceOperationKind.RESUME


class RedeployWorkspaceRequest(ColonyModel):
    """Its GPUs were taken: wait for admission again, then install on the new placement."""

    kind: Literal[WorkspaceOperationKind.REDEPLOY] = WorkspaceOperationKind.REDEPLOY
    reason: str = ""


class DeleteWorkspaceRequest(ColonyModel):
    """Delete the workspace: routes, release, values Secret, namespace, GPUs. Final."""

    kind: Literal[WorkspaceOperationKind.DELETE] = WorkspaceOperationKind.DELETE
    reason: str = ""


WorkspaceOperationRequest = Annotated[
    DeployWorkspaceRequest
    | SuspendWorkspaceRequest
    | ResumeWorkspaceRequest
    | RedeployWorkspaceRequest
    | DeleteWorkspaceRequest,
    Field(discriminator="kind"),
]


class WorkspaceOperation(OperationRecord[WorkspaceOperationRequest]):
    """One accepted workspace operation: queued, running or finished."""

    @property
    def kind(self) -> WorkspaceOperationKind:
        return self.request.kind


class WorkspaceOperationAccepted(AcceptedOperation[WorkspaceOperationKind]):
    """What a workspace update returns."""
