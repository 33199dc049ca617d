"""What the parts of `WorkspaceWorkflow` share: the workspace's spec, state and ownership marks,
how it records a condition and shows its phase, and its failure.

`workflows/workspace/workflow.py` (the entity: the queue, updates, signals) and the plans by
concern, `admission.py` (class, cluster, values, prerequisites, GPUs), `install.py` (namespace,
values Secret, ServiceSet), `access.py` (routes through the tenant gateway, or port-forward) and
`teardown.py` (suspend, delete), each receive one `WorkspaceContext`; deterministic code only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from models.activity_api import KubeconfigRef
    from models.ownership import Owner
    from models.workspace import (
        ConditionReason,
        ConditionStatus,
        ConditionType,
        WorkspacePhase,
        WorkspaceSpec,
        WorkspaceState,
        set_condition,
    )
    from models.workspace_api import PortsAnswer, PrerequisiteAnswer


class WorkspaceFailed(ApplicationError):
    """A deploy step failed for a reason the status names (its `type` is the condition reason)."""

    def __init__(self, reason: ConditionReason, message: str) -> None:
        super().__init__(message, type=reason.value, non_retryable=True)


@dataclass
class WorkspaceContext:
    """The workspace a plan works on."""

    spec: WorkspaceSpec
    state: WorkspaceState
    owner: Owner
    """Whose the workspace's objects are: its workflow's, of its organization."""
    shown_changed: Callable[[], None] = field(default=lambda: None)
    """Called when its phase changed: the workflow shows it (search attributes on change)."""
    prerequisite_answers: dict[str, PrerequisiteAnswer] = field(default_factory=dict)
    """Answers to the running operation's prerequisite requests, by request id (an operation
    never spans two runs, so they need not be carried)."""
    ports_answers: dict[str, PortsAnswer] = field(default_factory=dict)
    """Answers to the running operation's (or look's) pool port requests, by request id."""

    @property
    def name(self) -> str:
        return self.spec.name

    def kubeconfig(self) -> KubeconfigRef:
        if self.state.kubeconfig is None:
            raise WorkspaceFailed(ConditionReason.INTERNAL_ERROR, "the cluster was not resolved")
        return self.state.kubeconfig

    def condition(
        self, condition: ConditionType, ok: bool, reason: ConditionReason, message: str
    ) -> None:
        status = ConditionStatus.TRUE if ok else ConditionStatus.FALSE
        self.state.conditions = set_condition(
            self.state.conditions, condition, status, reason, message, workflow.now()
        )

    def set_phase(self, phase: WorkspacePhase, message: str = "") -> None:
        self.state.phase = phase
        self.state.message = message
        self.state.updated_at = workflow.now()
        self.shown_changed()
