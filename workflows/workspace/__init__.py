"""The contract of `WorkspaceWorkflow` (`workflows.kit.contract`): one workflow per workspace, id
`workspace/[<organization>/]<name>`. Users suspend, resume and delete it through updates; its
cluster's ledger, its prerequisites' workflows, its cluster (or colony) and the watcher answer or
tell it through signals; `status` shows it."""

from __future__ import annotations

from temporalio import workflow

from workflows.kit.contract import STATUS_QUERY, Query, Signal, Update, WorkflowContract

# The package is also its workflow module's parent, which the sandbox imports for every
# workflow run: its models are passed through, as the workflow modules' own are, so both
# see the same classes.
with workflow.unsafe.imports_passed_through():
    from models import workspace_operations as op
    from models.capacity import CapacityAnswer
    from models.signals import GatewayChanged
    from models.workspace import WorkspaceStatus, WorkspaceWorkflowInput, workspace_workflow_id
    from models.workspace_api import DeleteRequested, PortsAnswer, PrerequisiteAnswer


class WorkspaceContract(WorkflowContract[WorkspaceWorkflowInput, WorkspaceStatus, [str, str]]):
    """`WorkspaceWorkflow`'s updates, signals and query."""

    suspend = Update("suspend", op.SuspendWorkspaceRequest, op.WorkspaceOperationAccepted)
    resume = Update("resume", op.ResumeWorkspaceRequest, op.WorkspaceOperationAccepted)
    delete = Update("delete", op.DeleteWorkspaceRequest, op.WorkspaceOperationAccepted)
    """Jumps the queue: the queue is cancelled and the running operation interrupted."""

    capacity_answer = Signal("capacity_answer", CapacityAnswer)
    """The ledger's answer to the workspace's GPU request, and every later change of it."""
    ports_answer = Signal("ports_answer", PortsAnswer)
    """The ledger's answer: the workspace's gateway pool ports."""
    prerequisite_answer = Signal("prerequisite_answer", PrerequisiteAnswer)
    """A prerequisite's workflow reports its outcome."""
    delete_requested = Signal("delete_requested", DeleteRequested)
    """`delete` for senders that cannot send updates (its cluster's or colony's workflow)."""
    gateway_changed = Signal("gateway_changed", GatewayChanged)
    """Its cluster's tenant Gateway appeared, changed or went (the watcher)."""

    status = Query(STATUS_QUERY, WorkspaceStatus)


WORKSPACE = WorkspaceContract(
    "WorkspaceWorkflow", WorkspaceWorkflowInput, WorkspaceStatus, workflow_id=workspace_workflow_id
)
