"""The entity base: what a cluster's, a workspace's and a colony's workflow do the same way around
the engine (`workflows.kit.engine`), so each says only what differs: its headline, how it runs an
operation, its chore, and how it shows its phase (the abstract methods below). `live()` is its
whole life: operations one at a time, the chore between them, continue-as-new by the kit's policy,
until it is gone (its phase is its deleted one); the carry across continue-as-new is its input
with the whole state and the policy now.

- **The accept/validate prelude** of every update that queues an operation: an update id already
  seen is the same operation, answered the same way, and its validator lets it through again
  without checking (the state has moved on since it was accepted); a new one is checked by the
  entity's rule, then queued. An update that does only that is declared in one line of the
  workflow class (`queued_update`), from its contract.
- **Delete first**: a delete (an update, or the `delete_requested` signal of a workflow that
  cannot send updates) jumps the queue: the queue is cancelled, the running operation
  interrupted, and a delete already queued or running is the answer to another.
- **A final delete**: a delete that fails says it did not finish and that repeating it finishes
  it (`final`).
- **Admission before the queue**: an update whose operation makes the entity hold more asks
  first (`admitted_update`: the organization's quota ledger, through an activity), one such update
  at a time (`admitting`), with the entity's rule checked again against the state once it is its
  turn; refused there, nothing is queued.
- **Phase and search attributes on change**: what the Web UI and `list` filter on (`ColonyKind`,
  `ColonyPhase`, ...) is upserted only when a value changed, since each upsert is an event in the
  history; the Web UI's details follow every change.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from enum import Enum
from typing import Any, Generic, Protocol, TypeVar

from temporalio import workflow
from temporalio.common import SearchAttributeKey

from workflows.kit.contract import Update
from workflows.kit.engine import Chore, EntityEngine, OpT, is_failure, reason_of
from workflows.kit.run_limit import RunLimit

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel

    from models.errors import rejected
    from models.operations import ContinueAsNewPolicy, OperationBook

RequestT = TypeVar("RequestT")
AcceptedT = TypeVar("AcceptedT", bound=BaseModel)

SearchAttributes = Sequence[tuple[SearchAttributeKey[str], str]]


class EntityState(Protocol[OpT]):
    """What the engine keeps in an entity's state (`ClusterState`, `WorkspaceState`, ...)."""

    @property
    def phase(self) -> Enum:
        """Its phase; the entity is gone once it is its enum's `DELETED` member."""
        ...

    @property
    def book(self) -> OperationBook: ...

    @property
    def queue(self) -> list[OpT]: ...

    @property
    def completed(self) -> list[OpT]: ...


class EntityInput(Protocol):
    """An entity workflow's input (`ClusterWorkflowInput`, ...): its state, None on the first
    run, and its continue-as-new policy."""

    @property
    def state(self) -> object | None: ...

    @property
    def continue_as_new(self) -> ContinueAsNewPolicy: ...

    def model_copy(
        self, *, update: Mapping[str, Any] | None = None, deep: bool = False
    ) -> BaseModel: ...


class EntityWorkflow(ABC, Generic[OpT, RequestT, AcceptedT]):
    """Base of an entity workflow (see the module docstring).

    Args:
        input: the workflow's input: its state is None on the first run; its policy says when
            runs continue as new.
        state: the entity's state (the carried one, or a new one), whose queue, finished
            operations and bookkeeping the engine keeps.
        operation: the entity's operation model (`Operation`), built from an id and a request.
        delete: the entity's delete update in its contract (`CLUSTER.delete_cluster`): its
            request is the delete request (a workflow cancel keeps those queued), its answer
            what every update of the entity answers (`OperationAccepted`).
        first: the first operation's request, queued before any update can arrive on the first
            run (a continued run's queue is carried).
    """

    def __init__(
        self,
        input: EntityInput,
        state: EntityState[OpT],
        operation: Callable[..., OpT],
        delete: Update[Any, AcceptedT],
        first: RequestT,
    ) -> None:
        self._input = input
        self._entity_state = state
        self._deleted = type(state.phase)["DELETED"]
        self.limit = RunLimit(input.continue_as_new)
        self.engine = EntityEngine(
            state.book, state.queue, state.completed, limit=self.limit, headline=self.headline
        )
        self._operation = operation
        self.admitting = asyncio.Lock()
        """Held by the update being admitted (`admitted_update`): one at a time."""
        self._accepted = delete.output
        self._delete_request = delete.input
        if input.state is None:
            self.engine.enqueue(lambda op_id: operation(id=op_id, request=first))

    # --- What each entity says ----------------------------------------------------------------

    @abstractmethod
    def headline(self) -> list[str]:
        """The first lines of the Web UI details (name, phase, reason)."""

    @abstractmethod
    async def execute(self, operation: OpT) -> None:
        """The plan of one operation; raising fails it, `CancelledError` cancels it."""

    @abstractmethod
    def subject(self) -> str:
        """The entity as messages name it (`cluster 'gpu-a'`)."""

    @abstractmethod
    def show_phase(self) -> None:
        """Show the phase (`show(...)` with the entity's search attributes)."""

    def gone(self) -> bool:
        """True once the entity is in its deleted phase."""
        return self._entity_state.phase is self._deleted

    def carry(self) -> BaseModel:
        """The workflow's input with its whole state and the policy now, for continue-as-new."""
        return self._input.model_copy(
            update={"state": self._entity_state, "continue_as_new": self.limit.policy}
        )

    def chore(self) -> Chore | None:
        """What the entity does between operations (None: nothing)."""
        return None

    def on_workflow_cancel(self, running: OpT | None) -> bool:
        """A workflow cancel: by default the queue is dropped but its deletes, and the running
        operation is interrupted unless it is a delete (only a delete ends an entity)."""
        self.engine.cancel_queue(
            "cancelled: the workflow was cancelled",
            keep=lambda op: isinstance(op.request, self._delete_request),
        )
        return running is not None and not isinstance(running.request, self._delete_request)

    async def live(self) -> None:
        """The entity's life, until it is gone (see the module docstring)."""
        self.show_phase()
        await self.engine.run(
            gone=self.gone,
            execute=self.execute,
            carry=self.carry,
            on_workflow_cancel=self.on_workflow_cancel,
            chore=self.chore(),
        )

    # --- Accepting ----------------------------------------------------------------------------

    def accept(self, request: RequestT) -> AcceptedT:
        """An update's answer: the operation its update id queued already, or a new one."""
        known = self.engine.known_update()
        if known is not None:
            return self.accepted(known)
        return self.accepted(
            self.engine.enqueue(lambda op_id: self._operation(id=op_id, request=request))
        )

    def validate(self, check: Callable[[], None]) -> None:
        """An update's validator: `check()` raises the refusal, unless the update id is known."""
        if self.engine.known_update() is None:
            check()

    def accepted(self, operation: OpT) -> AcceptedT:
        return self._accepted.model_validate(
            {
                "operation_id": operation.id,
                "kind": operation.kind,
                "position": self.engine.position(operation),
            }
        )

    # --- Delete first -------------------------------------------------------------------------

    def accept_delete(self, request: RequestT) -> AcceptedT:
        """A delete update's answer: the known one, the pending delete, or this one, first."""
        return self.accepted(self.engine.known_update() or self.delete_first(request))

    def delete_first(self, request: RequestT, *, why: str = "") -> OpT:
        """Queue the delete `request` first (see `EntityEngine.delete_first`); a delete of the
        same kind already pending is the answer instead."""
        return self.engine.delete_first(
            lambda op_id: self._operation(id=op_id, request=request),
            is_delete=lambda op: isinstance(op.request, type(request)),
            subject=self.subject(),
            why=why,
        )

    def refuse_deleted(self) -> None:
        """A delete's validator: a deleted entity is not found (a delete that failed is repeated
        to finish it, so anything short of deleted is accepted)."""
        if self.gone():
            raise rejected(f"{self.subject()} is deleted", not_found=True)

    # --- Phase and search attributes ----------------------------------------------------------

    def show(self, attributes: SearchAttributes) -> None:
        """Upsert the entity's search attributes that changed (only those: a smaller event);
        show the details again. A value its start set already (`clients`' marks) needs
        no upsert at all."""
        current = workflow.info().typed_search_attributes
        changed = [key.value_set(value) for key, value in attributes if current.get(key) != value]
        if changed:
            workflow.upsert_search_attributes(changed)
        self.engine.show_details()


def queued_update(
    update: Update[RequestT, AcceptedT],
    check: Callable[[Any, RequestT], None],
) -> workflow.UpdateMethodMultiParam[[Any, RequestT], Coroutine[Any, Any, AcceptedT]]:
    """An update handler that only queues its operation, for the body of an entity's workflow
    class: registered under the contract's name with the contract's request and answer types
    (what Temporal converts the payloads by), the accept/validate prelude (`EntityWorkflow.accept`
    and `EntityWorkflow.validate`) around the entity's rule `check(workflow, request)`.

        add_node_pool = queued_update(CLUSTER.add_node_pool, _check)

    with its docstring below it, as an attribute's. The rule is a function of the class body
    defined above the line (a method, not yet bound).
    """

    async def handler(
        self: EntityWorkflow[Any, RequestT, AcceptedT], request: RequestT
    ) -> AcceptedT:
        return self.accept(request)

    def validator(self: EntityWorkflow[Any, RequestT, AcceptedT], request: RequestT) -> None:
        self.validate(lambda: check(self, request))

    return _registered(update, handler, validator)


def admitted_update(
    update: Update[RequestT, AcceptedT],
    check: Callable[[Any, RequestT], None],
    admit: Callable[[Any, RequestT], Awaitable[None]],
) -> workflow.UpdateMethodMultiParam[[Any, RequestT], Coroutine[Any, Any, AcceptedT]]:
    """An update handler like `queued_update`'s, whose operation is queued only once
    `admit(workflow, request)` let it (raising refuses it, and nothing is queued). Admissions run
    one at a time (`EntityWorkflow.admitting`); when it is an update's turn, `check` runs again
    against the state then (the queue may have moved while it waited)."""

    async def handler(
        self: EntityWorkflow[Any, RequestT, AcceptedT], request: RequestT
    ) -> AcceptedT:
        known = self.engine.known_update()
        if known is not None:
            return self.accepted(known)
        async with self.admitting:
            check(self, request)
            await admit(self, request)
            return self.accept(request)

    def validator(self: EntityWorkflow[Any, RequestT, AcceptedT], request: RequestT) -> None:
        self.validate(lambda: check(self, request))

    return _registered(update, handler, validator)


def delete_update(
    update: Update[RequestT, AcceptedT],
) -> workflow.UpdateMethodMultiParam[[Any, RequestT], Coroutine[Any, Any, AcceptedT]]:
    """A delete update handler that jumps the queue (`EntityWorkflow.accept_delete`), refused
    only once the entity is deleted (`EntityWorkflow.refuse_deleted`); declared in the workflow
    class's body as `queued_update` is."""

    async def handler(
        self: EntityWorkflow[Any, RequestT, AcceptedT], request: RequestT
    ) -> AcceptedT:
        return self.accept_delete(request)

    def validator(self: EntityWorkflow[Any, RequestT, AcceptedT], request: RequestT) -> None:
        self.refuse_deleted()

    return _registered(update, handler, validator)


def _registered(
    update: Update[RequestT, AcceptedT],
    handler: Callable[[Any, RequestT], Coroutine[Any, Any, AcceptedT]],
    validator: Callable[[Any, RequestT], None],
) -> workflow.UpdateMethodMultiParam[[Any, RequestT], Coroutine[Any, Any, AcceptedT]]:
    # Temporal reads the payload types from the annotations: the contract's, not the TypeVars.
    handler.__annotations__ = {"request": update.input, "return": update.output}
    validator.__annotations__ = {"request": update.input, "return": None}
    handler.__name__ = handler.__qualname__ = update.name
    defined = workflow.update(name=update.name)(handler)
    defined.validator(validator)
    return defined


async def final(delete: Awaitable[None], *, failed: Callable[[str], None]) -> None:
    """Run a delete's plan: a delete is final, so one that fails says it did not finish and that
    repeating it finishes it (`failed(reason)` shows that), then lets the failure through."""
    try:
        await delete
    except Exception as error:
        if not is_failure(error):
            raise
        failed(f"delete did not finish: {reason_of(error)}; repeat the delete to finish it")
        raise
