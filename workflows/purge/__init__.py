"""The contract of `PurgeWorkflow` (`workflows.kit.contract`): one purge of an entity's workflow
that cannot make progress, id `purge/<the entity's workflow id>`, started by the clients
(`clients.purges`: an operator's purge, or an organization's delete of its own stuck
entity); `status` shows its report so far."""

from __future__ import annotations

from temporalio import workflow

from workflows.kit.contract import STATUS_QUERY, Query, WorkflowContract

# The package is also its workflow module's parent, which the sandbox imports for every
# workflow run: its models are passed through, as the workflow modules' own are, so both
# see the same classes.
with workflow.unsafe.imports_passed_through():
    from models.purge import PurgeReport, PurgeRequest, purge_workflow_id


class PurgeContract(WorkflowContract[PurgeRequest, PurgeReport, [str]]):
    """`PurgeWorkflow`'s query."""

    status = Query(STATUS_QUERY, PurgeReport)
    """What the purge has done so far (`outcome` running until it ends)."""


PURGE = PurgeContract("PurgeWorkflow", PurgeRequest, PurgeReport, workflow_id=purge_workflow_id)
"""`PurgeWorkflow`: ends one entity's workflow and removes what it made (`models.purge`)."""
