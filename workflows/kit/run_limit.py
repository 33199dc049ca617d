"""The one continue-as-new policy of every Colony workflow, and the typed carry of its state.

A run ends, continuing as new, only between two operations (entity workflows) or two messages
(single-writer services), never during one, and only once it has handled something (an operation,
a message, a chore, a signal it acted on): a fresh run never continues as new, so a run whose
carried input alone passes a bound cannot loop. Then it ends when Temporal suggests it or the
history passes `ContinueAsNewPolicy.events` or `.bytes` (`models.operations`: one set of bounds,
carried in every workflow's input, which a test lowers to see runs change).

What goes across is the workflow's own input model, built by its `carry()`: the spec and the
whole state, typed (queue, finished operations, request ids, inbox), and the policy itself. A
workflow keeps nothing that matters outside that state: what is not in it is lost at the next run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel

    from models.operations import ContinueAsNewPolicy


class RunLimit:
    """When this run should end (see the module docstring)."""

    def __init__(self, policy: ContinueAsNewPolicy) -> None:
        self.policy = policy
        self._handled = 0

    def handled(self) -> None:
        """Something was handled in this run (it may now end)."""
        self._handled += 1

    def due(self) -> bool:
        """True when the run should continue as new at its next pause."""
        if not self._handled:
            return False
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() > self.policy.events
            or info.get_current_history_size() > self.policy.bytes
        )

    async def continue_as_new(
        self, carry: Callable[[], BaseModel], *, settled: Callable[[], bool] = lambda: True
    ) -> NoReturn:
        """End the run once every handler has finished and `settled()` (nothing of this run is
        still in flight), carrying `carry()`, the workflow's input with its whole state."""
        await workflow.wait_condition(lambda: workflow.all_handlers_finished() and settled())
        workflow.continue_as_new(carry())
