"""The contract of `QuotaWorkflow` (`workflows.kit.contract`): one organization's quota ledger, id
`quota/<organization>`. Admissions (updates) come from the client layer before an entity starts
and from a cluster's workflow before it queues growth; entities report what they hold (a signal);
operators set the limits (an update); `status` shows the use."""

from __future__ import annotations

from temporalio import workflow

from workflows.kit.contract import STATUS_QUERY, Query, Signal, Update, WorkflowContract

# The package is also its workflow module's parent, which the sandbox imports for every
# workflow run: its models are passed through, as the workflow modules' own are, so both
# see the same classes.
with workflow.unsafe.imports_passed_through():
    from models.quota import (
        AdmitQuotaRequest,
        HoldingReport,
        QuotaAdmission,
        QuotaLedgerInput,
        QuotaLedgerStatus,
        QuotaReleased,
        ReleaseQuotaRequest,
        SetQuotaRequest,
        quota_workflow_id,
    )


class QuotaContract(WorkflowContract[QuotaLedgerInput, QuotaLedgerStatus, [str]]):
    """`QuotaWorkflow`'s updates, signal and query."""

    admit = Update("admit", AdmitQuotaRequest, QuotaAdmission)
    """Let a holder hold a need, or refuse (`QuotaExceeded`) naming the quota, use and limit."""
    release = Update("release", ReleaseQuotaRequest, QuotaReleased)
    """Forget a create's holder whose start failed (never a confirmed one)."""
    set_limits = Update("set_limits", SetQuotaRequest, QuotaLedgerStatus)
    """An operator's overrides."""

    holding = Signal("holding", HoldingReport)
    """An entity holds less now, or is gone."""

    status = Query(STATUS_QUERY, QuotaLedgerStatus)


QUOTA = QuotaContract(
    "QuotaWorkflow", QuotaLedgerInput, QuotaLedgerStatus, workflow_id=quota_workflow_id
)
