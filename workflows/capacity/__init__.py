"""The contract of `CapacityLedgerWorkflow` (`workflows.kit.contract`): the GPU ledger of one
cluster, id `capacity/<ClusterDeployment>`. Workspaces and the cluster's workflow write to it with
`capacity` messages (started by the first one, signal-with-start); any service may say the GPUs
changed; `status` and `answers` tell where requests stand."""

from __future__ import annotations

from temporalio import workflow

from workflows.kit.contract import STATUS_QUERY, Query, Signal, WorkflowContract

# The package is also its workflow module's parent, which the sandbox imports for every
# workflow run: its models are passed through, as the workflow modules' own are, so both
# see the same classes.
with workflow.unsafe.imports_passed_through():
    from models.identity import capacity_workflow_id
    from models.signals import RefreshRequest
    from models.workspace_api import (
        CapacityAnswers,
        CapacityAnswersQuery,
        CapacityLedgerInput,
        CapacityLedgerStatus,
        CapacityMessage,
        HoldingsQuery,
        LedgerHoldings,
    )


class CapacityContract(WorkflowContract[CapacityLedgerInput, CapacityLedgerStatus, [str]]):
    """`CapacityLedgerWorkflow`'s signals and queries."""

    capacity = Signal("capacity", CapacityMessage)
    """A request, a release, pool ports, a change of the cluster's GPUs, or the end."""
    refresh = Signal("refresh", RefreshRequest)
    """Read the cluster's GPU inventory again."""
    capacity_changed = Signal("capacity_changed", RefreshRequest)
    """Another service says the cluster's GPUs changed: read them again, admit who now fits."""

    status = Query(STATUS_QUERY, CapacityLedgerStatus)
    """Inventory, holders and the head of each queue."""
    answers = Query("answers", CapacityAnswers, input=CapacityAnswersQuery)
    """Where requests stand now, positions worked out from their tickets."""
    holdings = Query("holdings", LedgerHoldings, input=HoldingsQuery)
    """What one workspace holds (its live GPU request, its ports), found by the workflow its
    request answers: what a purge of that workspace gives back."""


CAPACITY = CapacityContract(
    "CapacityLedgerWorkflow",
    CapacityLedgerInput,
    CapacityLedgerStatus,
    workflow_id=capacity_workflow_id,
)
