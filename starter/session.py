"""What a command needs before it talks to anything: the settings from the environment, and one
event loop to run its async steps in.

Imported by command bodies only once their input is parsed and validated, so a refusal never pays
for Temporal's imports (`infra.config` reads Temporal's env config).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from infra.config import ColonySettings, SettingsError
from starter import output
from starter.errors import InvalidRequestError

if TYPE_CHECKING:
    from starter.clients.base import WorkflowRef

T = TypeVar("T")


def settings() -> ColonySettings:
    """The settings from the environment; an incomplete configuration is refused (exit 2)."""
    try:
        return ColonySettings.from_env()
    except SettingsError as exc:
        raise InvalidRequestError(str(exc)) from exc


def run(step: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run one async step of a command; configuration problems met inside are refusals."""
    try:
        return asyncio.run(step())
    except SettingsError as exc:
        raise InvalidRequestError(str(exc)) from exc


def print_link(workflow: WorkflowRef) -> None:
    """A workflow and its Web UI page, on stderr (stdout stays what scripts parse); nothing when
    the transport does not know its page."""
    if workflow.link:
        output.info(f"workflow {workflow.workflow_id}: {workflow.link}")
