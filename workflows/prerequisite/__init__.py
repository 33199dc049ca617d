"""The contract of `PrerequisiteWorkflow` (`workflows.kit.contract`): one prerequisite on one
cluster, id `prereq/<ClusterDeployment>/<template>`, asked for by workspaces (signal-with-start)
and answering each of them."""

from __future__ import annotations

from temporalio import workflow

from workflows.kit.contract import STATUS_QUERY, Query, Signal, WorkflowContract

# The package is also its workflow module's parent, which the sandbox imports for every
# workflow run: its models are passed through, as the workflow modules' own are, so both
# see the same classes.
with workflow.unsafe.imports_passed_through():
    from models.identity import prerequisite_workflow_id
    from models.workspace_api import PrerequisiteAnswer, PrerequisiteInput, PrerequisiteMessage


class PrerequisiteContract(WorkflowContract[PrerequisiteInput, PrerequisiteAnswer, [str, str]]):
    """`PrerequisiteWorkflow`'s signal and query."""

    prerequisite = Signal("prerequisite", PrerequisiteMessage)
    """A workspace needs the prerequisite: it is answered (`prerequisite_answer`) once it is known."""

    status = Query(STATUS_QUERY, PrerequisiteAnswer)
    """The outcome, or Installing."""


PREREQUISITE = PrerequisiteContract(
    "PrerequisiteWorkflow",
    PrerequisiteInput,
    PrerequisiteAnswer,
    workflow_id=prerequisite_workflow_id,
)
