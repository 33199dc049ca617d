"""The link from each activity's implementation to its declaration, so that they cannot drift apart.

Workflows declare every activity once, in sandbox-safe modules (`workflows.cluster_calls`,
`workflows.workspace_calls`): its name, request and result types, timeouts, retry policy and
summary. An implementation names its declaration instead of repeating any of it:

    @implements(cluster_calls.CLAIM_HOSTS)
    async def claim_hosts(self, request: ClaimHostsRequest) -> ClaimHostsResult:

`implements` registers the method under the declared name (`activity.defn`), makes it heartbeat
(`activities.heartbeat.heartbeating`), and holds it to the declared types twice:
- in mypy: the decorator is typed by the declaration (`ActivityDeclaration[RequestT, ResultT]`), so a
  method taking another request or returning another result does not type-check;
- at import: the method's annotated request and result must be the declared classes themselves,
  and it takes one argument; anything else raises `TypeError` when the module is imported.
`tests/test_activity_declarations.py` checks that every declaration has exactly one implementation
registered in `worker.py`, and every registered activity a declaration.

This module is the activities' one way to the declarations (`cluster_calls`, `workspace_calls`,
`purge_calls`, `DECLARATION_MODULES`), and to the search attributes workflows carry
(`search_attributes`): where workflows keep them may change; only these imports follow. It also
hands on the one workflow contract an activity talks to by name, the quota ledger's (`QUOTA`:
`admit_quota` sends its `admit` update, which no workflow can send itself).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio import activity

from activities.heartbeat import heartbeating
from workflows import cluster_calls, purge_calls, search_attributes, workspace_calls
from workflows.kit.activity import ActivityDeclaration
from workflows.quota import QUOTA

__all__ = [
    "DECLARATION_MODULES",
    "QUOTA",
    "cluster_calls",
    "declarations",
    "implementations",
    "implements",
    "purge_calls",
    "search_attributes",
    "workspace_calls",
]

DECLARATION_MODULES: tuple[ModuleType, ...] = (cluster_calls, workspace_calls, purge_calls)
"""Where the activities workflows call are declared."""

DECLARATION_ATTRIBUTE = "__colony_declaration__"
"""Set on every implementation: the declaration it implements."""

SelfT = TypeVar("SelfT")
RequestT = TypeVar("RequestT", bound=BaseModel)
ResultT = TypeVar("ResultT", bound=BaseModel)


def declarations() -> list[ActivityDeclaration[Any, Any]]:
    """Every declared activity, in the order of the declaring modules."""
    return [
        value
        for module in DECLARATION_MODULES
        for value in vars(module).values()
        if isinstance(value, ActivityDeclaration)
    ]


def implementations(*providers: object) -> list[Callable[..., Any]]:
    """Every activity the providers implement (their methods made with `implements`), bound to
    them: what the worker registers, found rather than listed."""
    found: list[Callable[..., Any]] = []
    for provider in providers:
        for name, member in inspect.getmembers(type(provider)):
            if declaration_of(member) is not None:
                found.append(getattr(provider, name))
    return found


def declaration_of(implementation: Callable[..., Any]) -> ActivityDeclaration[Any, Any] | None:
    """The declaration an implementation names (None: not made with `implements`)."""
    found = getattr(implementation, DECLARATION_ATTRIBUTE, None)
    return found if isinstance(found, ActivityDeclaration) else None


def implements(
    declaration: ActivityDeclaration[RequestT, ResultT],
) -> Callable[
    [Callable[[SelfT, RequestT], Awaitable[ResultT]]],
    Callable[[SelfT, RequestT], Awaitable[ResultT]],
]:
    """Make the decorated method the implementation of `declaration` (see the module docstring).

    Raises:
        TypeError: at import, when the method's annotations are not the declaration's types.
    """

    def decorate(
        method: Callable[[SelfT, RequestT], Awaitable[ResultT]],
    ) -> Callable[[SelfT, RequestT], Awaitable[ResultT]]:
        _check_annotations(method, declaration)
        defined = activity.defn(name=declaration.name)(heartbeating(method))
        setattr(defined, DECLARATION_ATTRIBUTE, declaration)
        return defined

    return decorate


def _check_annotations(
    method: Callable[..., Any], declaration: ActivityDeclaration[Any, Any]
) -> None:
    where = f"{method.__module__}.{method.__qualname__} (activity {declaration.name})"
    parameters = list(inspect.signature(method).parameters)
    if len(parameters) != 2:
        raise TypeError(f"{where}: takes (self, request), not ({', '.join(parameters)})")
    hints = typing.get_type_hints(method)
    request = hints.get(parameters[1])
    if request is not declaration.request:
        raise TypeError(
            f"{where}: takes {request!r}, but it is declared to take {declaration.request.__name__}"
        )
    if hints.get("return") is not declaration.result:
        raise TypeError(
            f"{where}: returns {hints.get('return')!r}, but it is declared to return "
            f"{declaration.result.__name__}"
        )
