"""The entity engine: what every long-lived entity workflow (a cluster, a workspace, a colony)
shares, so none of them re-implements it with its own weak points. The single-writer services (a
cluster's GPU ledger, a prerequisite's installer, the class catalog) share its request ids,
interruption-free steps and run limit through `workflows.kit.service`.

It owns:
- the **operation queue**: operations accepted by updates (each with its update id, so a retried
  update returns the operation it queued instead of queueing another, across continue-as-new too),
  run one at a time in arrival order, kept with their outcome (bounded);
- **running, finishing and cancelling** an operation: `cancel(op)` drops a queued one or interrupts
  the running one; a workflow cancel request (Web UI, `temporal workflow cancel`) interrupts the
  running operation and drops the queue, and the entity **keeps running** (only its own delete ends
  it); `delete_first(...)` is how a delete jumps the queue;
- **interruption that never orphans**: interrupting cancels the operation's task; every activity is
  called with `WAIT_CANCELLATION_COMPLETED` (`workflows.kit.activity`), so its await returns only
  once the activity has really stopped; because an activity that finished anyway still returns its
  result, the operation's forward path stops at the next activity call it makes (`ActivityCall`
  asks `check_interrupted()`), and its compensation runs under `settle()`, which a second interrupt
  cannot stop. What a late-finishing call did is then found by the entity's sweep by owner;
- a **chore** between operations (never during one): a look at the world a signal asked for, or
  that the entity takes by itself after a while without one (`Refresh` is the usual one);
- **continue-as-new** between operations, by the one policy of `workflows.kit.run_limit`, carrying
  the entity's whole state (queue, finished operations, ids seen) in its typed input. Waits happen
  inside heartbeating activities, so an operation's own events grow with what it does (nodes,
  pools), never with how long it waits; continue-as-new between operations then bounds every run;
- the **Web UI**: current details as short markdown (headline, running operation, queue);
- **request ids** of signals (`RequestIds`), so a repeated signal is acted on once.

The entity supplies what differs (`workflows.kit.entity` gives the rest of what entities share):
how to execute an operation, which operations a workflow cancel stops, its chore, its headline and
its carry.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, Protocol, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

from workflows.kit.run_limit import RunLimit

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel

    from models.operations import OperationBook, OperationState, operation_id

T = TypeVar("T")

Interrupted = (Exception, asyncio.CancelledError)
"""What a plan's compensation handlers catch: failures and interruptions, but never what the SDK
uses to tear a workflow down (eviction from the worker's cache) nor `GeneratorExit` (a suspended
coroutine being closed): compensating then would start work that can no longer run."""

COMPLETED_KEPT = 20
"""Finished operations kept in state (enough for `--wait` to find its own)."""
UPDATE_IDS_KEPT = 500
"""Update ids remembered (with the operation each queued) for deduplication."""
REQUEST_IDS_KEPT = 1_000
"""Signal request ids remembered for deduplication: a watcher resends within seconds, not days."""
INTERRUPT_DELAY = timedelta(milliseconds=1)
"""An interrupt cancels the operation's task from a timer, not from the update handler that asked
for it. Updates and signals run before the activity results of the same workflow task are applied,
so cancelling at once may request the cancel of an activity whose completion is already in
history; Temporal's time-skipping test server then rejects the workflow task forever
(`ACTIVITY_UNKNOWN`; temporalio/sdk-java#2391, sdk-typescript#1058). A timer fires in a later
task, together with any result that arrived with it, so the cancel only reaches activities still
running. Cost: one timer (two events) per interruption."""


class EntityOperation(Protocol):
    """What the engine needs of an operation: `models.operations.OperationRecord`'s fields, and the
    kind each entity's operation names (`Operation.kind`, `WorkspaceOperation.kind`, ...)."""

    id: str
    state: OperationState
    reason: str
    submitted_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    update_id: str

    @property
    def request(self) -> object: ...

    @property
    def kind(self) -> str: ...


OpT = TypeVar("OpT", bound=EntityOperation)


@dataclass(frozen=True)
class Chore:
    """What an entity does between operations, never during one: when `due()` (a signal asked for
    it), and by itself once `every()` has passed without one (None: not now). `run` resets what
    made it due."""

    due: Callable[[], bool]
    run: Callable[[], Awaitable[None]]
    every: Callable[[], timedelta | None] = lambda: None


# --- Interruption scope --------------------------------------------------------------------------


@dataclass
class _Scope:
    interrupted: bool = False


_SCOPE: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar("colony_scope", default=None)


def check_interrupted() -> None:
    """Raise `asyncio.CancelledError` when the running operation was interrupted.

    Called by every activity call before it starts and after it returns, so a forward path stops
    at its next step even when an activity completed despite the cancel (its result is returned
    under `WAIT_CANCELLATION_COMPLETED`). Code under `settle()` is never interrupted this way.
    """
    scope = _SCOPE.get()
    if scope is not None and scope.interrupted:
        raise asyncio.CancelledError()


def _uncancel() -> None:
    # A caught cancellation leaves the task "cancelling" on Python 3.11+; clear it so the next
    # await does not raise again.
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


async def settle(work: Coroutine[Any, Any, T]) -> T:
    """Run `work` (a compensation or a clean-up) to its end, whatever interrupts the caller.

    It runs in its own task, outside the interruption scope, and a cancel of the caller while it
    runs is swallowed (and re-raised after it): nothing can stop a compensation half-way.
    """
    if isinstance(sys.exc_info()[1], GeneratorExit):
        # A `finally` on the way out of a coroutine being closed: a workflow left to the garbage
        # collector (sdk-python #494), maybe on another workflow's loop. Nothing may run; the
        # next worker to hold the workflow replays it.
        work.close()
        raise GeneratorExit
    context = contextvars.copy_context()
    context.run(_SCOPE.set, None)
    task: asyncio.Task[T] = context.run(asyncio.create_task, work)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.done():
                raise
            cancelled = True
            _uncancel()
    if cancelled:
        raise asyncio.CancelledError()
    return result


async def settle_all(*works: Coroutine[Any, Any, Any]) -> list[BaseException]:
    """Run every clean-up on its own (one failing does not stop the others); return the failures."""
    results = await settle(_gather_all(*works))
    return [result for result in results if isinstance(result, BaseException)]


async def _gather_all(*works: Coroutine[Any, Any, Any]) -> list[Any]:
    return list(await asyncio.gather(*works, return_exceptions=True))


# --- Errors ---------------------------------------------------------------------------------------


def reason_of(error: BaseException) -> str:
    """The message a user should read for a failed step: what was being done, in words (`claim
    hosts`, not the activity's registered name `claim_hosts`), and why it failed."""
    if isinstance(error, ActivityError):
        step = (error.activity_type or "a step").replace("_", " ")
        if isinstance(error.cause, ApplicationError):
            return f"{step}: {error.cause.message}"
        if error.cause is not None:
            return f"{step}: {error.cause}"
    if isinstance(error, ApplicationError):
        return error.message
    return str(error) or type(error).__name__


def error_type_of(error: BaseException) -> str | None:
    """The domain error type (`models.errors.ErrorType` value) of a failed step, if it has one."""
    cause = error.cause if isinstance(error, ActivityError) else error
    return cause.type if isinstance(cause, ApplicationError) else None


def is_failure(error: BaseException) -> bool:
    """A step's failure the plan handles (an activity or domain error), as opposed to a bug or a
    cancellation, which propagate."""
    if isinstance(error, ActivityError) and isinstance(error.cause, CancelledError):
        return False
    return isinstance(error, ActivityError | ApplicationError)


# --- Request ids ----------------------------------------------------------------------------------


class RequestIds:
    """Signal request ids seen, bounded; `first_time(id)` is True once per id (and counts, for the
    run limit, as something handled)."""

    def __init__(self, book: OperationBook, limit: RunLimit) -> None:
        self._book = book
        self._limit = limit
        self._seen = set(book.request_ids)

    def first_time(self, request_id: str) -> bool:
        self._limit.handled()
        if not request_id:
            return True  # an id-less signal cannot be deduplicated; act on it
        if request_id in self._seen:
            return False
        self._seen.add(request_id)
        self._book.request_ids.append(request_id)
        if len(self._book.request_ids) > REQUEST_IDS_KEPT:
            dropped = self._book.request_ids.pop(0)
            self._seen.discard(dropped)
        return True


class RefreshState(Protocol):
    """Carried state with the flag of a look asked for and not yet taken (carried, so a continued
    run still takes a look its previous run was asked for)."""

    refresh_due: bool


class Refresh:
    """A look at the world that signals ask for (`ask`, once per request id) and that the entity
    takes between operations as its chore (`chore()`), or by itself once `every()` has passed.

    The flag clears as the look starts, so a signal that arrives during the look asks again.
    """

    def __init__(
        self,
        state: RefreshState,
        request_ids: RequestIds,
        look: Callable[[], Awaitable[None]],
        *,
        every: Callable[[], timedelta | None] = lambda: None,
    ) -> None:
        self._state = state
        self._request_ids = request_ids
        self._look = look
        self._every = every

    def ask(self, request_id: str) -> None:
        """A refresh signal: take the look at the next chance (a repeated request id asks once)."""
        if self._request_ids.first_time(request_id):
            self._state.refresh_due = True

    async def look(self) -> None:
        """Take the look now, which answers what was asked so far."""
        self._state.refresh_due = False
        await self._look()

    def chore(self) -> Chore:
        return Chore(due=lambda: self._state.refresh_due, run=self.look, every=self._every)


# --- The engine -----------------------------------------------------------------------------------


@dataclass
class Interruption:
    """Why the running operation is being interrupted."""

    reason: str
    by_workflow_cancel: bool = False


class EntityEngine(Generic[OpT]):
    """The operation queue and runner of one entity workflow (see the module docstring).

    Args:
        book: the persisted bookkeeping (lives in the entity's state).
        queue: the persisted queue of accepted operations (lives in the entity's state).
        completed: the persisted list of finished operations (lives in the entity's state).
        limit: when the run continues as new.
        headline: the first lines of the Web UI details (name, phase, reason).
    """

    def __init__(
        self,
        book: OperationBook,
        queue: list[OpT],
        completed: list[OpT],
        *,
        limit: RunLimit,
        headline: Callable[[], list[str]],
    ) -> None:
        self.book = book
        self.queue = queue
        self.completed = completed
        self.limit = limit
        self.request_ids = RequestIds(book, limit)
        self.running: OpT | None = None
        self._headline = headline
        self._task: asyncio.Task[None] | None = None
        self._scope: _Scope | None = None
        self._interruption: Interruption | None = None
        self._canceller: asyncio.Task[None] | None = None
        self._workflow_cancel_handled = False

    # --- Accepting --------------------------------------------------------------------------

    def known_update(self) -> OpT | None:
        """The operation an update with the current update id already queued, if any."""
        info = workflow.current_update_info()
        if info is None or info.id not in self.book.update_ids:
            return None
        return self.find(self.book.update_ids[info.id])

    def enqueue(self, make: Callable[[str], OpT], *, front: bool = False) -> OpT:
        """Queue a new operation built by `make(operation_id)`, remembering the update id."""
        operation = make(operation_id(self.book.next_operation))
        self.book.next_operation += 1
        operation.submitted_at = workflow.now()
        info = workflow.current_update_info()
        if info is not None:
            operation.update_id = info.id
            self.book.update_ids[info.id] = operation.id
            while len(self.book.update_ids) > UPDATE_IDS_KEPT:
                self.book.update_ids.pop(next(iter(self.book.update_ids)))
        if front:
            self.queue.insert(0, operation)
        else:
            self.queue.append(operation)
        self.show_details()
        return operation

    def position(self, operation: OpT) -> int:
        """1-based place in the queue; 0 when it runs or has finished."""
        for index, queued in enumerate(self.queue):
            if queued is operation:
                return index + 1
        return 0

    def find(self, operation_id: str) -> OpT | None:
        """The operation with this id: running, queued or finished."""
        for candidate in [self.running, *self.queue, *self.completed]:
            if candidate is not None and candidate.id == operation_id:
                return candidate
        return None

    def pending(self, wanted: Callable[[OpT], bool]) -> OpT | None:
        """The running or first queued operation `wanted` picks, if any."""
        return next(
            (op for op in [self.running, *self.queue] if op is not None and wanted(op)), None
        )

    def delete_first(
        self,
        make: Callable[[str], OpT],
        *,
        is_delete: Callable[[OpT], bool],
        subject: str,
        why: str = "",
    ) -> OpT:
        """How a delete jumps the queue: a delete already running or queued is the answer;
        otherwise the queue is cancelled, the running operation interrupted (its compensation
        runs, its activities settle), and the delete `make` builds is queued first.

        Args:
            subject: what is deleted, for the reasons (`cluster 'gpu'`).
            why: who asked, added to the interruption's reason.
        """
        pending = self.pending(is_delete)
        if pending is not None:
            return pending
        self.cancel_queue(f"cancelled: {subject} is being deleted")
        self.interrupt(
            Interruption(f"interrupted: {subject} is being deleted" + (f" ({why})" if why else ""))
        )
        return self.enqueue(make, front=True)

    # --- Cancelling -------------------------------------------------------------------------

    def cancel(self, operation: OpT, reason: str) -> None:
        """Drop a queued operation, or interrupt the running one (its compensation then runs)."""
        if operation is self.running:
            self.interrupt(Interruption(reason))
            return
        if operation in self.queue:
            self.queue.remove(operation)
            self._finish(operation, OperationState.CANCELLED, reason)

    def cancel_queue(self, reason: str, *, keep: Callable[[OpT], bool] = lambda _: False) -> None:
        """Cancel every queued operation (but those `keep` says to keep)."""
        for queued in list(self.queue):
            if not keep(queued):
                self.cancel(queued, reason)

    def interrupt(self, interruption: Interruption) -> None:
        """Interrupt the running operation (idempotent: the first reason stays)."""
        if self._task is None or self._task.done() or self._scope is None:
            return
        if self._interruption is None:
            self._interruption = interruption
        if not self._scope.interrupted:
            # No new activity starts from here on (`check_interrupted`); those in flight are
            # cancelled from the timer (see INTERRUPT_DELAY).
            self._scope.interrupted = True
            self._canceller = asyncio.create_task(self._cancel_later(self._task))

    @staticmethod
    async def _cancel_later(task: asyncio.Task[None]) -> None:
        await workflow.sleep(INTERRUPT_DELAY)
        if not task.done():
            task.cancel()

    @property
    def interrupted(self) -> bool:
        return self._interruption is not None

    # --- Running ----------------------------------------------------------------------------

    async def run(
        self,
        *,
        gone: Callable[[], bool],
        execute: Callable[[OpT], Awaitable[None]],
        carry: Callable[[], BaseModel],
        on_workflow_cancel: Callable[[OpT | None], bool],
        chore: Chore | None = None,
    ) -> None:
        """Run queued operations one at a time, and the chore between them, until `gone()`; then
        return once every handler has finished.

        Args:
            gone: True once the entity is gone.
            execute: the plan of one operation; raising fails it, `CancelledError` cancels it.
            carry: the workflow's input with its whole state, for continue-as-new (between
                operations, when the run limit says so).
            on_workflow_cancel: called when the workflow is cancelled, with the running operation
                (or None while idle); it drops what it wants dropped from the queue and answers
                whether the running operation is to be interrupted (a delete is not).
            chore: what the entity does between operations (see `Chore`).
        """
        while not gone():
            if self.limit.due():
                await self.limit.continue_as_new(carry)
            if chore is not None and chore.due():
                await self._chore(chore)
            elif self.queue:
                await self._run(self.queue.pop(0), execute, on_workflow_cancel)
            else:
                await self._idle(gone, chore, on_workflow_cancel)
        await workflow.wait_condition(workflow.all_handlers_finished)

    async def _idle(
        self,
        gone: Callable[[], bool],
        chore: Chore | None,
        on_workflow_cancel: Callable[[OpT | None], bool],
    ) -> None:
        """Wait for an operation, the chore, the end or the run limit."""
        try:
            await workflow.wait_condition(
                lambda: (
                    bool(self.queue)
                    or gone()
                    or self.limit.due()
                    or (chore is not None and chore.due())
                ),
                timeout=chore.every() if chore is not None else None,
            )
        except TimeoutError:
            if chore is not None:
                await self._chore(chore)  # by itself: nothing told the entity for a while
        except asyncio.CancelledError:
            if not self._take_workflow_cancel():
                raise  # the worker is evicting the workflow: nothing to handle
            _uncancel()
            self._workflow_cancelled(None, on_workflow_cancel)

    async def _chore(self, chore: Chore) -> None:
        await chore.run()
        self.limit.handled()
        self.show_details()

    def _take_workflow_cancel(self) -> bool:
        """True once, for the run's workflow cancel request. The main task is cancelled only by
        that request (Temporal delivers it once per run) or by the worker evicting the workflow
        from its cache, which must be let through."""
        if self._workflow_cancel_handled or workflow.cancellation_reason() is None:
            return False
        self._workflow_cancel_handled = True
        return True

    def _workflow_cancelled(
        self, running: OpT | None, on_workflow_cancel: Callable[[OpT | None], bool]
    ) -> None:
        workflow.logger.info("workflow cancel requested: stopping the running operation")
        if on_workflow_cancel(running) and running is not None:
            self.interrupt(
                Interruption(
                    "cancelled: the workflow was cancelled (its operations stop; the entity stays)",
                    by_workflow_cancel=True,
                )
            )

    async def _run(
        self,
        operation: OpT,
        execute: Callable[[OpT], Awaitable[None]],
        on_workflow_cancel: Callable[[OpT | None], bool],
    ) -> None:
        operation.state = OperationState.RUNNING
        operation.started_at = workflow.now()
        self.running = operation
        self._interruption = None
        self._scope = _Scope()
        self.show_details()
        context = contextvars.copy_context()
        context.run(_SCOPE.set, self._scope)
        task: asyncio.Task[None] = context.run(
            asyncio.create_task, _as_coroutine(execute(operation))
        )
        self._task = task
        while not task.done():
            try:
                # Shielded: a workflow cancel must not cancel the operation behind our back; it is
                # turned into an interruption with a reason, below.
                await asyncio.shield(task)
            except asyncio.CancelledError:
                if task.done():
                    break
                if not self._take_workflow_cancel():
                    raise  # the worker is evicting the workflow: nothing to handle
                _uncancel()
                self._workflow_cancelled(operation, on_workflow_cancel)
            except BaseException:
                if not task.done():
                    # Not the operation's outcome: the coroutine itself is being closed (an
                    # evicted workflow's, by the garbage collector) or torn down; let it go.
                    raise
                break  # the outcome is read from the task below
        state, reason = self._outcome(operation, task)
        self.running = None
        self._task = None
        self._scope = None
        # The plan may have written notes on the operation (a compensation that failed, pools that
        # could not be added); they follow the outcome's own reason.
        notes = operation.reason
        if notes and notes not in reason:
            reason = f"{reason}; {notes}" if reason else notes
        self._finish(operation, state, reason)
        self._interruption = None

    def _outcome(self, operation: OpT, task: asyncio.Task[None]) -> tuple[OperationState, str]:
        """How the operation's task ended, as its state and reason; a bug is raised (it fails the
        workflow task, so a fixed worker retries it)."""
        interrupted = self._interruption.reason if self._interruption else "cancelled"
        if task.cancelled():
            return OperationState.CANCELLED, interrupted
        error = task.exception()
        if error is None:
            return OperationState.SUCCEEDED, ""
        if isinstance(error, asyncio.CancelledError):
            return OperationState.CANCELLED, interrupted
        if not is_failure(error):
            raise error
        reason = reason_of(error)
        workflow.logger.warning("operation %s failed: %s", operation.id, reason)
        return OperationState.FAILED, reason

    def _finish(self, operation: OpT, state: OperationState, reason: str) -> None:
        operation.state = state
        operation.reason = reason
        operation.finished_at = workflow.now()
        self.completed.append(operation)
        del self.completed[:-COMPLETED_KEPT]
        self.book.operations_run += 1
        self.limit.handled()
        self.show_details()

    # --- Web UI -----------------------------------------------------------------------------

    def show_details(self) -> None:
        """The Web UI's "current details": headline, running operation, queue (metadata, adds
        nothing to the history)."""
        lines = list(self._headline())
        if self.running is not None:
            lines.append(f"running: {self.running.id} {self.running.kind}")
        if self.queue:
            lines.append("queued: " + ", ".join(f"{op.id} {op.kind}" for op in self.queue))
        workflow.set_current_details("\n\n".join(lines))


async def _as_coroutine(awaitable: Awaitable[None]) -> None:
    await awaitable
