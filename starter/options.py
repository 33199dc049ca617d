"""The options several `colonyctl` commands share, declared once (Typer annotations), and the
options every command that submits an operation takes (`submits`, `Submission`).

Imported when the command line is built, so it holds only what the parser needs (Typer and the
standard library): `colonyctl --help` and a refused flag must not pay for Temporal, pydantic or rich.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Annotated, Any

import typer


class OutputFormat(StrEnum):
    """`-o`: a table for people, or the API's own JSON/YAML shape for scripts."""

    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


OutputOption = Annotated[
    OutputFormat, typer.Option("--output", "-o", help="table, json or yaml", case_sensitive=False)
]


class ListFormat(StrEnum):
    """`-o` of a list that has more columns to show: `wide` is the table with them (kubectl's)."""

    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"

    @property
    def output(self) -> OutputFormat:
        """The format `starter.output.emit` knows (wide is a table)."""
        return OutputFormat.TABLE if self is ListFormat.WIDE else OutputFormat(self.value)


ListOutputOption = Annotated[
    ListFormat,
    typer.Option("--output", "-o", help="table, wide, json or yaml", case_sensitive=False),
]
WaitOption = Annotated[
    bool, typer.Option("--wait", "-w", help="Follow the operation live until it finishes.")
]
TimeoutOption = Annotated[
    float | None,
    typer.Option("--timeout", help="With --wait: give up waiting after this many seconds."),
]
RequestIdOption = Annotated[
    str | None,
    typer.Option(
        "--request-id",
        help="Idempotency key: sending the same command again with the same id returns the "
        "first one's operation instead of queueing another (default: a new id per call).",
    ),
]
WaitForCapacityOption = Annotated[
    bool,
    typer.Option(
        "--wait-for-capacity",
        help="When the location has too few free hosts, queue and wait for them instead of "
        "refusing the request.",
    ),
]
ClusterArgument = Annotated[str, typer.Argument(help="Cluster name.", show_default=False)]
OrganizationFilterOption = Annotated[
    str | None,
    typer.Option(
        "--organization",
        help="Only this organization's (local mode: an operator sees every organization's; "
        "'' for the default mode's, without one). Through the API, a key sees its own only.",
        show_default=False,
    ),
]


@dataclass(frozen=True)
class Submission:
    """How a command that submits an operation reports it: `--wait` (and `--timeout`) to follow
    it to its end, `--request-id` to make a retry the same request, `-o` for scripts."""

    wait: bool = False
    timeout: float | None = None
    request_id: str | None = None
    fmt: OutputFormat = OutputFormat.TABLE

    def one_of(self, suffix: str) -> Submission:
        """This submission for one of several requests of a command (`apply -f`): each its own
        request id, derived from the command's."""
        return replace(self, request_id=f"{self.request_id}-{suffix}" if self.request_id else None)


SUBMISSION_OPTIONS = [
    inspect.Parameter("wait", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=WaitOption),
    inspect.Parameter(
        "timeout", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=TimeoutOption
    ),
    inspect.Parameter(
        "request_id", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=RequestIdOption
    ),
    inspect.Parameter(
        "fmt", inspect.Parameter.KEYWORD_ONLY, default=OutputFormat.TABLE, annotation=OutputOption
    ),
]
"""`--wait`, `--timeout`, `--request-id` and `-o`, last on every submitting command's line."""


def submits(command: Callable[..., None]) -> Callable[..., None]:
    """A command that submits an operation, with the options every such command takes: Typer
    sees them (`SUBMISSION_OPTIONS`) after the command's own, and the command gets them as its
    `submission` argument."""
    own = [
        parameter
        for parameter in inspect.signature(command, eval_str=True).parameters.values()
        if parameter.name != "submission"
    ]

    @functools.wraps(command)
    def with_submission(*args: Any, **options: Any) -> None:
        submission = Submission(
            wait=options.pop("wait"),
            timeout=options.pop("timeout"),
            request_id=options.pop("request_id"),
            fmt=options.pop("fmt"),
        )
        command(*args, submission=submission, **options)

    parameters = [*own, *SUBMISSION_OPTIONS]
    with_submission.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    with_submission.__annotations__ = {p.name: p.annotation for p in parameters}
    return with_submission
