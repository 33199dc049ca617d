"""What a workflow type offers the rest of Colony, as typed data: its registered name, the id of
each of its workflows, its input and result, and each update, signal and query with its name and
its input and output models.

Each entity declares its contract once, in `workflows/<entity>/__init__.py`, with the classes here.
The workflow registers its handlers under those names (`@workflow.update(name=CLUSTER.add_node_pool
.name)`), and everyone else (the CLI and the HTTP API's clients, the watcher, other workflows,
activities) calls them through the same declarations: no signal, update, query or workflow type
name is written as a string anywhere else (`tests/test_contracts.py` fails on one), and
`tests/test_contracts.py` also checks that each workflow's handlers take and return the types its
contract names.

Importable anywhere: this module imports only the standard library, and a contract module only
`models` and this one, never the workflow code (clients and the watcher import contracts without
pulling in the workflow machinery).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar

In = TypeVar("In")
Out = TypeVar("Out")
IdArgs = ParamSpec("IdArgs")

STATUS_QUERY = "status"
"""The query each entity workflow answers with its status (its contract's `status`): clients that
handle every entity alike ask it by this name."""


@dataclass(frozen=True)
class Signal(Generic[In]):
    """A signal: its registered name and the one model it carries."""

    name: str
    input: type[In]


@dataclass(frozen=True)
class Update(Generic[In, Out]):
    """An update: its registered name, the request model and what it returns."""

    name: str
    input: type[In]
    output: type[Out]


@dataclass(frozen=True)
class Query(Generic[Out]):
    """A query: its registered name, what it returns, and its argument's model (None: it takes
    none)."""

    name: str
    output: type[Out]
    input: type[Any] | None = None


Handler = Signal[Any] | Update[Any, Any] | Query[Any]


class WorkflowContract(Generic[In, Out, IdArgs]):
    """A workflow type's contract. Subclasses declare its handlers as class attributes
    (`add_node_pool = Update("add_node_pool", AddNodePoolRequest, OperationAccepted)`); one instance
    per workflow type gives its name, input, result and id function.

    Args:
        workflow_type: the name the workflow is registered under.
        input: the workflow's input model.
        output: what the workflow returns when it ends.
        workflow_id: the id of one of its workflows (`models.identity`: a function of what picks
            the entity out, injective across organizations).
    """

    def __init__(
        self,
        workflow_type: str,
        input: type[In],
        output: type[Out],
        workflow_id: Callable[IdArgs, str],
    ) -> None:
        self.workflow_type = workflow_type
        self.input = input
        self.output = output
        self.workflow_id = workflow_id

    def handlers(self) -> Iterator[tuple[str, Handler]]:
        """Every declared update, signal and query, with the attribute that declares it."""
        for cls in reversed(type(self).__mro__):
            for attribute, value in vars(cls).items():
                if isinstance(value, Signal | Update | Query):
                    yield attribute, value

    def signals(self) -> dict[str, Signal[Any]]:
        return {h.name: h for _, h in self.handlers() if isinstance(h, Signal)}

    def updates(self) -> dict[str, Update[Any, Any]]:
        return {h.name: h for _, h in self.handlers() if isinstance(h, Update)}

    def queries(self) -> dict[str, Query[Any]]:
        return {h.name: h for _, h in self.handlers() if isinstance(h, Query)}

    def names(self) -> set[str]:
        """The workflow type's name and every handler's."""
        return {self.workflow_type, *(h.name for _, h in self.handlers())}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.workflow_type!r})"
