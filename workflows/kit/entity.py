"""The entity base: what a cluster's, a workspace's and a colony's workflow do the same way around
the engine (`workflows.kit.engine`), so each says only what differs.

- **The accept/validate prelude** of every update that queues an operation: an update id already
  seen is the same operation, answered the same way, and its validator lets it through again
  without checking (the state has moved on since it was accepted); a new one is checked by the
  entity's rule, then queued.
- **Delete first**: a delete (an update, or the `delete_requested` signal of a workflow that
  cannot send updates) jumps the queue: the queue is cancelled, the running operation
  interrupted, and a delete already queued or running is the answer to another.
- **Phase and search attributes on change**: what the Web UI and `list` filter on (`ColonyKind`,
  `ColonyPhase`, ...) is upserted only when a value changed, since each upsert is an event in the
  history; the Web UI's details follow every change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from temporalio import workflow
from temporalio.common import SearchAttributeKey

from workflows.kit.engine import EntityEngine, OpT

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel

RequestT = TypeVar("RequestT")
AcceptedT = TypeVar("AcceptedT", bound=BaseModel)

SearchAttributes = Sequence[tuple[SearchAttributeKey[str], str]]


class EntityWorkflow(Generic[OpT, RequestT, AcceptedT]):
    """Base of an entity workflow (see the module docstring).

    Args:
        engine: the entity's engine, over its state.
        operation: builds an operation from its id and request (`Operation(id=..., request=...)`).
        accepted: what the entity's updates answer (`OperationAccepted`).
    """

    def __init__(
        self,
        engine: EntityEngine[OpT],
        *,
        operation: Callable[[str, RequestT], OpT],
        accepted: type[AcceptedT],
    ) -> None:
        self.engine = engine
        self._operation = operation
        self._accepted = accepted

    # --- Accepting ----------------------------------------------------------------------------

    def accept(self, request: RequestT) -> AcceptedT:
        """An update's answer: the operation its update id queued already, or a new one."""
        known = self.engine.known_update()
        if known is not None:
            return self.accepted(known)
        return self.accepted(self.engine.enqueue(lambda op_id: self._operation(op_id, request)))

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

    def accept_delete(self, request: RequestT, *, subject: str) -> AcceptedT:
        """A delete update's answer: the known one, the pending delete, or this one, first."""
        known = self.engine.known_update()
        return self.accepted(known or self.delete_first(request, subject=subject))

    def delete_first(self, request: RequestT, *, subject: str, why: str = "") -> OpT:
        """Queue the delete `request` first (see `EntityEngine.delete_first`); a delete of the
        same kind already pending is the answer instead."""
        return self.engine.delete_first(
            lambda op_id: self._operation(op_id, request),
            is_delete=lambda op: isinstance(op.request, type(request)),
            subject=subject,
            why=why,
        )

    def keep_deletes(self, running: OpT | None, delete: type[object]) -> bool:
        """A workflow cancel: the queue is dropped but its deletes, and the running operation is
        interrupted unless it is a delete (only a delete ends an entity, and it is final)."""
        self.engine.cancel_queue(
            "cancelled: the workflow was cancelled",
            keep=lambda op: isinstance(op.request, delete),
        )
        return running is not None and not isinstance(running.request, delete)

    # --- Phase and search attributes ----------------------------------------------------------

    def show(self, attributes: SearchAttributes) -> None:
        """Upsert the entity's search attributes when one changed; show the details again."""
        current = workflow.info().typed_search_attributes
        if any(current.get(key) != value for key, value in attributes):
            workflow.upsert_search_attributes([key.value_set(value) for key, value in attributes])
        self.engine.show_details()
