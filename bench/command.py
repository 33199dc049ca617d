"""A benchmark's command line, declared once: the parser that reads it and the command its report
records.

Each benchmark declares its options as its module's `COMMAND`, a `Command` of `Option`s (argparse's
own keywords). `Command.parse` reads the arguments with the parser built from them, and
`Command.report` starts the benchmark's `Report` with the command that ran, restated from the
parsed options (`python -m bench.<name> --option value ...`, in the order declared), so the
recorded command cannot drift from the parser. An option left out of the recorded command is
declared `recorded=False` (`--existing`: where the stack came from).

The quick-mode defaults (`scale`, `quick()`) are chosen when the module is imported, as its other
scaled constants are: `python -m bench.<name>` starts with `BENCH_QUICK` already set.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from bench.record import Report


class Option:
    """One long option: its flag, argparse's keywords for it, and whether the command restates it."""

    def __init__(self, flag: str, *, recorded: bool = True, **settings: Any) -> None:
        self.flag = flag
        self.recorded = recorded
        self.settings = settings

    @property
    def dest(self) -> str:
        """The attribute argparse reads it into (`--uncached-runs`: `uncached_runs`)."""
        return self.flag.removeprefix("--").replace("-", "_")

    def restated(self, value: Any) -> list[str]:
        """The option as the recorded command gives it: a flag alone when it is set, a float as
        `{:g}` writes it (`3.0`: `3`)."""
        if isinstance(value, bool):
            return [self.flag] if value else []
        return [self.flag, format(value, "g") if isinstance(value, float) else str(value)]


class Command:
    """The command line of `python -m bench.<name>` (see the module docstring)."""

    def __init__(self, name: str, description: str | None, *options: Option) -> None:
        self.name = name
        self.description = description
        self.options = options

    @property
    def program(self) -> str:
        return f"python -m bench.{self.name}"

    def parser(self) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(prog=self.program, description=self.description)
        for option in self.options:
            parser.add_argument(option.flag, **option.settings)
        return parser

    def parse(self, argv: Sequence[str] | None) -> argparse.Namespace:
        return self.parser().parse_args(argv)

    def line(self, args: argparse.Namespace) -> str:
        """The command that ran, restated from the parsed `args`."""
        words = [self.program]
        for option in self.options:
            if option.recorded:
                words += option.restated(getattr(args, option.dest))
        return " ".join(words)

    def report(self, title: str, args: argparse.Namespace) -> Report:
        """The benchmark's report, recording the command that ran (`line`). Run on the production
        shape (`--temporal cluster`), its results are `<name>-cluster`, beside the dev server's."""
        if getattr(args, "temporal", "dev") == "cluster":
            return Report(f"{self.name}-cluster", f"{title} (production shape)", self.line(args))
        return Report(self.name, title, self.line(args))
