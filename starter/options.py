"""The options several `colonyctl` commands share, declared once (Typer annotations).

Imported when the command line is built, so it holds only what the parser needs (Typer and the
standard library): `colonyctl --help` and a refused flag must not pay for Temporal, pydantic or rich.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

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
