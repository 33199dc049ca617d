"""`QuotaWorkflow`: one organization's quota ledger, id `quota/<organization>` (its contract:
`workflows/quota/__init__.py`; the decisions: `models.quota.QuotaBook`).

It is the one writer of what the organization holds, in the kit's single-writer mode
(`workflows.kit.service`): admissions, releases, reports and an operator's changes are handled
one at a time, in arrival order, so two creates racing for the last room are decided one after
the other and never both fit. Its whole state (limits set by operators, every holder's holding,
the catalog facts, the messages not yet handled) is carried across continue-as-new, and lives in
Temporal's history: a worker that crashes loses nothing, the next one replays it.

- `admit` (an update): a client before it starts an entity, a cluster's workflow before it queues
  growth. Refused with `QuotaExceeded` (the quota, its use, its limit) before anything starts;
  refused in the validator, without a history event, when nothing queued could change the
  answer and the last audit is recent. An admission that would be refused, or a create that finds
  its name held, first **audits** the holders (at most every `AUDIT_INTERVAL`: which holders'
  workflows still run, one activity), dropping those whose workflow is gone without saying so (a
  terminated workflow, a client that died between admission and start), then decides again.
- `release` (an update): a client whose start failed gives back the holder its admission made.
- `holding` (a signal): an entity holds less (after each operation), or is gone.
- `set_limits` (an update): an operator's overrides.

Started by the first admission (or an operator's change) of the organization and never ended:
an idle ledger waits without timers and costs no history.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from workflows.kit.engine import is_failure, reason_of
from workflows.kit.run_limit import RunLimit
from workflows.kit.service import Service
from workflows.workspace_calls import AWAIT_WORKFLOWS_CLOSED

with workflow.unsafe.imports_passed_through():
    from models.errors import over_quota
    from models.quota import (
        AdmitQuotaRequest,
        HoldingReport,
        QuotaAdmission,
        QuotaBook,
        QuotaLedgerInput,
        QuotaLedgerState,
        QuotaLedgerStatus,
        QuotaMessage,
        QuotaProblem,
        QuotaReleased,
        ReleaseQuotaRequest,
        SetQuotaRequest,
    )
    from models.workspace_api import AwaitWorkflowsClosedRequest
    from workflows.quota import QUOTA

AUDIT_WAIT = timedelta(seconds=0)
"""An audit looks once (a wait of no length): which holders' workflows run now."""


@workflow.defn(name=QUOTA.workflow_type)
class QuotaWorkflow:
    """One organization's quota ledger (see the module docstring)."""

    @workflow.init
    def __init__(self, input: QuotaLedgerInput) -> None:
        self._state = input.state or QuotaLedgerState(organization=input.organization)
        self._book = QuotaBook(self._state)
        self._limit = RunLimit(input.continue_as_new)
        self._service: Service[QuotaMessage] = Service(self._state.inbox, self._limit)

    @workflow.run
    async def run(self, input: QuotaLedgerInput) -> QuotaLedgerStatus:
        """Handle messages one at a time, for as long as the organization exists."""
        await self._service.serve(
            self._handle,
            closed=lambda: False,
            carry=lambda: QuotaLedgerInput(
                organization=self._state.organization,
                state=self._state,
                continue_as_new=self._limit.policy,
            ),
        )
        return self._book.status()

    async def _handle(
        self, message: QuotaMessage
    ) -> QuotaAdmission | QuotaReleased | QuotaLedgerStatus | None:
        book = self._book
        match message:
            case AdmitQuotaRequest():
                return await self._admit(message)
            case ReleaseQuotaRequest():
                return QuotaReleased(released=book.release(message))
            case HoldingReport():
                book.report(message, workflow.now())
            case SetQuotaRequest():
                self._state.overrides = self._state.overrides.changed(message.limits, message.reset)
                return book.status()
        return None

    async def _admit(self, request: AdmitQuotaRequest) -> QuotaAdmission:
        book = self._book
        if (book.taken(request) or book.problem(request)) and book.audit_due(workflow.now()):
            await self._audit()
        if book.taken(request):
            return QuotaAdmission(taken=True)
        problem = book.problem(request)
        if problem is not None:
            raise self._refusal(problem)
        return book.admit(request, workflow.now())

    async def _audit(self) -> None:
        """Forget the holders whose workflows are gone without saying so (see the module doc)."""
        holders = sorted(self._state.holders)
        try:
            found = await AWAIT_WORKFLOWS_CLOSED(
                AwaitWorkflowsClosedRequest(workflow_ids=holders, deadline=workflow.now()),
                wait=AUDIT_WAIT,
            )
        except Exception as error:
            if not is_failure(error):
                raise
            # Deciding on what the ledger knows is safe (it may refuse, never over-admit); the
            # next audit is an interval away, so a broken lookup is not retried per request.
            workflow.logger.warning("quota audit failed: %s", reason_of(error))
            self._state.audited_at = workflow.now()
            return
        gone = self._book.forget_gone(found.open, workflow.now())
        if gone:
            workflow.logger.info("quota holders gone without a word: %s", ", ".join(gone))

    def _refusal(self, problem: QuotaProblem) -> Exception:
        return over_quota(problem.message(self._state.organization), problem.field)

    # --- Messages in ---------------------------------------------------------------------------

    @workflow.update(name=QUOTA.admit.name)
    async def admit(self, request: AdmitQuotaRequest) -> QuotaAdmission:
        """Let the holder hold its need, or refuse naming the quota, its use and its limit."""
        return await self._service.ask(request, _update_id(), QuotaAdmission)

    @admit.validator
    def _validate_admit(self, request: AdmitQuotaRequest) -> None:
        # A refusal nothing could change (no message ahead of it, a recent audit) costs no
        # history: a flood of refused creates is answered here.
        book = self._book
        if self._service.pending or book.audit_due(workflow.now()) or book.taken(request):
            return
        problem = book.problem(request)
        if problem is not None:
            raise self._refusal(problem)

    @workflow.update(name=QUOTA.release.name)
    async def release(self, request: ReleaseQuotaRequest) -> QuotaReleased:
        """Forget a create's holder whose start failed."""
        return await self._service.ask(request, _update_id(), QuotaReleased)

    @workflow.update(name=QUOTA.set_limits.name)
    async def set_limits(self, request: SetQuotaRequest) -> QuotaLedgerStatus:
        """An operator's overrides (set ones replace the default, reset ones go back to it)."""
        return await self._service.ask(request, _update_id(), QuotaLedgerStatus)

    @workflow.signal(name=QUOTA.holding.name)
    def holding(self, report: HoldingReport) -> None:
        """An entity holds less now, or is gone."""
        self._service.post(report, report.request_id)

    @workflow.query(name=QUOTA.status.name)
    def status(self) -> QuotaLedgerStatus:
        """The overrides, the use and every holder."""
        return self._book.status()


def _update_id() -> str:
    info = workflow.current_update_info()
    assert info is not None, "called from an update handler"
    return info.id
