"""What a command needs before it talks to anything: the settings from the environment, and one
event loop to run its async steps in; and a read command's whole answer, what it fetched shown as
`-o` asks (`show`, a list's `show_list`).

Imported by command bodies only once their input is parsed and validated, so a refusal never pays
for Temporal's imports (`infra.config` reads Temporal's env config).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from clients.errors import InvalidRequestError
from infra.config import ColonySettings, SettingsError
from starter import output
from starter.options import OutputFormat

if TYPE_CHECKING:
    from clients.base import WorkflowRef

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


def show(
    fetch: Callable[[], Coroutine[Any, Any, T]],
    fmt: OutputFormat,
    print_text: Callable[[T], None],
) -> None:
    """A read command's answer: what `fetch` answers (run as `run` runs a step), as JSON or YAML,
    or for the table format as `print_text` prints it."""
    found = run(fetch)
    if not output.emit(found, fmt):
        print_text(found)


def show_list(
    fetch: Callable[[], Coroutine[Any, Any, list[T]]],
    fmt: OutputFormat,
    print_table: Callable[[list[T]], None],
    fields: Sequence[str],
    *,
    keys: Mapping[str, str] = {},
) -> None:
    """A list command's answer: each item `fetch` lists as a JSON or YAML record of its `fields`
    (`output.records`, named as `keys` says), or for the table format the table `print_table`
    draws."""
    found = run(fetch)
    if not output.emit(output.records(found, *fields, keys=keys), fmt):
        print_table(found)
