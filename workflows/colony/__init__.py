"""The contract of `ColonyWorkflow` (`workflows.kit.contract`): one workflow per colony, id
`colony/[<organization>/]<name>`: `apply` and `delete` from users, `cluster_report` from its
clusters' workflows, `status`."""

from __future__ import annotations

from temporalio import workflow

from workflows.kit.contract import STATUS_QUERY, Query, Signal, Update, WorkflowContract

# The package is also its workflow module's parent, which the sandbox imports for every
# workflow run: its models are passed through, as the workflow modules' own are, so both
# see the same classes.
with workflow.unsafe.imports_passed_through():
    from models import colony as model
    from models.colony import ColonyStatus, ColonyWorkflowInput, colony_workflow_id


class ColonyContract(WorkflowContract[ColonyWorkflowInput, ColonyStatus, [str, str]]):
    """`ColonyWorkflow`'s updates, signal and query."""

    apply = Update("apply", model.ApplyColonyRequest, model.ColonyOperationAccepted)
    """Bring the colony to a changed manifest."""
    delete = Update("delete", model.DeleteColonyRequest, model.ColonyOperationAccepted)
    """Jumps the queue: every cluster is deleted, then the colony."""

    cluster_report = Signal("cluster_report", model.ClusterReport)
    """A cluster of the colony reports where it stands (after each of its operations)."""

    status = Query(STATUS_QUERY, ColonyStatus)


COLONY = ColonyContract(
    "ColonyWorkflow", ColonyWorkflowInput, ColonyStatus, workflow_id=colony_workflow_id
)
