"""The single-writer mode of the kit: a workflow that is the one writer of something shared (a
cluster's GPU ledger, a prerequisite's installation on a cluster, the class catalog) takes the
requests of many senders as messages in an inbox and handles them one at a time, in arrival order,
each exactly once by its request id; nothing it owns is ever written by two handlers at once.

- `post(message, request_id)`: from a signal; a request id seen before is dropped.
- `ask(message, request_id)`: from an update; the update waits for the message's own outcome
  (its result, or its refusal raised to the caller). Continue-as-new waits until no update waits.
- `serve(handle, ...)`: the loop. Between two messages it runs the service's chore when a signal
  asked for one (`Chore.due`; a service has no timers), and once it has caught up (nothing left to handle) `caught_up()`. It continues
  as new between any two messages by the kit's one policy (`workflows.kit.run_limit`), carrying
  the messages not yet handled and the ids seen (`models.operations.Inbox`, part of the typed
  state), once every signal it sent has landed.
- `send(...)`: signal another workflow from this one (two events, no activity) without waiting:
  the next message is handled meanwhile. `tell(...)` is the same, awaited.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from temporalio import workflow
from temporalio.exceptions import FailureError

from workflows.kit.engine import Chore, RequestIds
from workflows.kit.run_limit import RunLimit

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel

    from models.operations import Inbox
    from workflows.kit.contract import Signal

MessageT = TypeVar("MessageT")
In = TypeVar("In")
ResultT = TypeVar("ResultT")


async def tell(signal: Signal[In], workflow_id: str, payload: In) -> bool:
    """Signal another workflow from this one (two events, no activity); False, and logged, when it
    does not run (not an error: whoever is gone has nothing left to hear)."""
    try:
        await workflow.get_external_workflow_handle(workflow_id).signal(signal.name, payload)
    except FailureError as error:
        workflow.logger.info("%s not told (%s): %s", workflow_id, signal.name, error)
        return False
    return True


class Service(Generic[MessageT]):
    """The inbox and loop of a single-writer service (see the module docstring).

    Args:
        inbox: the carried inbox (lives in the service's state).
        limit: when the run continues as new.
    """

    def __init__(self, inbox: Inbox[MessageT], limit: RunLimit) -> None:
        self.inbox = inbox
        self.limit = limit
        self.request_ids = RequestIds(inbox.book, limit)
        self._waiting: dict[str, MessageT] = {}
        """Messages an update waits on, by request id (handled before any continue-as-new)."""
        self._outcomes: dict[str, object] = {}
        self._sending: set[asyncio.Task[None]] = set()

    @property
    def pending(self) -> list[MessageT]:
        return self.inbox.pending

    # --- Messages in ----------------------------------------------------------------------------

    def post(self, message: MessageT, request_id: str) -> bool:
        """Queue `message` unless its request id was seen; True when queued."""
        if not self.request_ids.first_time(request_id):
            return False
        self.inbox.pending.append(message)
        return True

    async def ask(self, message: MessageT, request_id: str, result: type[ResultT]) -> ResultT:
        """Queue `message` and wait for its outcome: its result, or the error handling it raised
        (raised here, to the update's caller)."""
        self._waiting[request_id] = message
        self.inbox.pending.append(message)
        await workflow.wait_condition(lambda: request_id in self._outcomes)
        outcome = self._outcomes.pop(request_id)
        if isinstance(outcome, BaseException):
            raise outcome
        if not isinstance(outcome, result):
            raise TypeError(f"{request_id}: {type(outcome).__name__}, not {result.__name__}")
        return outcome

    # --- Messages out ---------------------------------------------------------------------------

    def send(
        self,
        signal: Signal[In],
        workflow_id: str,
        payload: In,
        *,
        gone: tuple[MessageT, str] | None = None,
    ) -> None:
        """Signal another workflow without waiting for it. `gone`, a message and its request id,
        is posted to this inbox if the workflow does not run."""
        task = asyncio.create_task(self._deliver(signal, workflow_id, payload, gone))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _deliver(
        self,
        signal: Signal[In],
        workflow_id: str,
        payload: In,
        gone: tuple[MessageT, str] | None,
    ) -> None:
        if not await tell(signal, workflow_id, payload) and gone is not None:
            self.post(*gone)

    def settled(self) -> bool:
        """Every signal this run sent has landed (or failed)."""
        return not self._sending

    # --- The loop -------------------------------------------------------------------------------

    async def serve(
        self,
        handle: Callable[[MessageT], Awaitable[Any]],
        *,
        closed: Callable[[], bool],
        carry: Callable[[], BaseModel],
        chore: Chore | None = None,
        caught_up: Callable[[], None] = lambda: None,
    ) -> None:
        """Handle messages one at a time until `closed()` (checked between messages, and once
        more after every handler and sent signal has finished, so nothing that arrives
        meanwhile is left unhandled)."""
        while True:
            if closed():
                await workflow.wait_condition(
                    lambda: self.settled() and workflow.all_handlers_finished()
                )
                if closed():
                    return
            await workflow.wait_condition(
                lambda: (
                    bool(self.inbox.pending)
                    or closed()
                    or self.limit.due()
                    or (chore is not None and chore.due())
                )
            )
            if self.limit.due() and not self._waiting:
                caught_up()
                await self.limit.continue_as_new(carry, settled=self.settled)
            if chore is not None and chore.due():
                await chore.run()
                self.limit.handled()
            if self.inbox.pending and not closed():
                await self._handle(self.inbox.pending.pop(0), handle)
            if not self.inbox.pending:
                caught_up()

    async def _handle(
        self, message: MessageT, handle: Callable[[MessageT], Awaitable[Any]]
    ) -> None:
        waited = next((rid for rid, m in self._waiting.items() if m is message), None)
        try:
            outcome = await handle(message)
        except Exception as error:
            if waited is None:
                raise  # a bug: fail the workflow task, so a fixed worker retries it
            outcome = error
        self.limit.handled()
        if waited is not None:
            del self._waiting[waited]
            self._outcomes[waited] = outcome
