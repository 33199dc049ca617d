"""The `colonyctl` command line: the Typer application, and the one place where every failure
becomes its line on stderr and its exit code.

Every refusal is exactly one line, `error: <field>: <rule>`, exit 2 (a `--help` hint follows on a
second line only when stderr is a terminal): the parser's own usage errors (a bad `--count`, a
missing `--name`) included, which `ColonyGroup` formats instead of Typer's boxed panel. Errors the
commands raise are `clients.errors` types, whose class decides the exit code. Help is plain text
(no rich): it is what `colonyctl --help` prints fastest.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import sys
import traceback
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

try:
    # Typer vendors click since 0.24 and exports only BadParameter of its exceptions; the parser's
    # errors are told apart by these classes.
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - an older Typer that depends on click itself
    import click.exceptions as click_exceptions  # type: ignore[no-redef]

from clients.errors import ColonyError, ExitCode
from infra import tracing
from models.advice import for_command_line
from starter import commands
from starter.commands import apply, credentials
from starter.version import version_text

EXIT_CODES_HELP = (
    "Exit codes: 0 success; 1 the operation failed (or Temporal/the API could not be reached); "
    "2 invalid or refused request (nothing was started); 3 cluster, node pool, node, workspace or "
    "class not found."
)
PROG = "colonyctl"
DEBUG_ENV = "COLONY_DEBUG"
"""Set to print the traceback of an unexpected error."""

_CAMEL = re.compile(r"-([a-z0-9])")


def _camel(name: str) -> str:
    return _CAMEL.sub(lambda match: match.group(1).upper(), name.replace("_", "-"))


def field_of(param: Any) -> str:
    """The request field a parameter stands for: `--location-id` -> `locationId`, NAME -> `name`."""
    options = [opt for opt in getattr(param, "opts", []) if opt.startswith("--")]
    return _camel(options[0][2:] if options else str(getattr(param, "name", "") or "argument"))


def _given_value(args: Sequence[str], param: Any) -> str | None:
    """What the user typed for an option (for the message), when it can be found."""
    opts = list(getattr(param, "opts", []))
    for index, arg in enumerate(args):
        flag, equals, value = arg.partition("=")
        if flag in opts:
            if equals:
                return value
            if index + 1 < len(args):
                return args[index + 1]
    return None


def _sentence(text: str) -> str:
    """Click's message as a rule: without "Value error, ", a trailing dot or a capital."""
    text = " ".join(text.split()).removeprefix("Value error, ").rstrip(".")
    return text[:1].lower() + text[1:] if text[:1].isupper() and text[1:2].islower() else text


def usage_message(error: click_exceptions.UsageError, args: Sequence[str]) -> str:
    """A parser error as `<field>: <rule>`."""
    param = getattr(error, "param", None)
    if isinstance(error, click_exceptions.MissingParameter) and param is not None:
        hint = "/".join(o for o in param.opts if o.startswith("--")) or param.name.upper()
        return f"{field_of(param)}: required ({hint})"
    if isinstance(error, click_exceptions.BadParameter) and param is not None:
        value = _given_value(args, param)
        rule = _sentence(error.message)
        if rule.startswith("input should be a valid integer") and value is not None:
            rule = f"'{value}' is not a whole number"
        elif rule.startswith("input should be a valid number") and value is not None:
            rule = f"'{value}' is not a number"
        return f"{field_of(param)}: {rule}"
    if isinstance(error, click_exceptions.NoSuchOption):
        suggestion = (
            f" (did you mean {', '.join(error.possibilities)}?)" if error.possibilities else ""
        )
        return f"{error.option_name}: no such option{suggestion}"
    if isinstance(error, click_exceptions.BadOptionUsage):
        return f"{_camel(error.option_name.lstrip('-'))}: {_sentence(error.message)}"
    message = _sentence(error.message)
    if message.startswith("no such command"):
        # "No such command 'x'. Did you mean 'y'?" on one line: "no such command 'x' (did ...)".
        head, _, suggestion = message.partition(". ")
        return f"command: {head}" + (f" ({_sentence(suggestion)})" if suggestion else "")
    return f"arguments: {message}"


class ColonyGroup(TyperGroup):
    """The root command: runs Typer in non-standalone mode and owns every error's line and code."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        code = self.run(argv, prog_name or PROG, **extra)
        if standalone_mode:
            sys.exit(code)
        return code

    def run(self, argv: list[str], prog_name: str, **extra: Any) -> int:
        """Run the command line; the exit code (never raises but for SystemExit's kin).

        With tracing (`COLONY_TRACE_EXPORT`, or a provider a test installed) the command is one
        span, the root of the trace its workflows and activities continue."""
        if not tracing.wanted(os.environ):
            return self._run(argv, prog_name, **extra)
        provider = None
        if not tracing.enabled():
            try:
                provider = tracing.configure(
                    PROG, os.environ[tracing.TRACE_EXPORT_ENV].strip().lower()
                )
            except ValueError as error:
                _error_line(f"{error} (use 'otlp', 'console' or nothing)")
                return int(ExitCode.USAGE)
        try:
            with tracing.span(f"{PROG} {command_path(argv)}") as span:
                code = self._run(argv, prog_name, **extra)
                tracing.set_attribute(span, "process.exit.code", code)
                return code
        finally:
            if provider is not None:
                tracing.shutdown()  # flush: the process ends with os._exit

    def _run(self, argv: list[str], prog_name: str, **extra: Any) -> int:
        try:
            result = super().main(argv, prog_name=prog_name, standalone_mode=False, **extra)
        except click_exceptions.NoArgsIsHelpError as error:
            # A group without its command shows its help, as kubectl's groups do (exit 0).
            sys.stdout.write(error.format_message() + "\n")
            return int(ExitCode.OK)
        except click_exceptions.UsageError as error:
            _refuse(usage_message(error, argv), error)
            return int(ExitCode.USAGE)
        except typer.Abort:
            return 130
        except ColonyError as error:
            # In the command line's words: an option the API would set is the flag to add.
            _error_line(for_command_line(error.message))
            return int(error.exit_code)
        except KeyboardInterrupt:
            return 130
        except click_exceptions.ClickException as error:
            _error_line(error.format_message())
            return int(error.exit_code)
        except Exception as error:
            _error_line(f"internal error: {type(error).__name__}: {error}")
            if os.environ.get(DEBUG_ENV):
                traceback.print_exc()
            return int(ExitCode.FAILED)
        return result if isinstance(result, int) else int(ExitCode.OK)


def command_path(argv: Sequence[str]) -> str:
    """The command's words (`cluster create`), without its arguments: names and values stay out
    of spans."""
    words: list[str] = []
    group: Any = typer.main.get_command(app)
    for arg in argv:
        commands = getattr(group, "commands", None)
        if arg.startswith("-") or not commands or arg not in commands:
            break
        words.append(arg)
        group = commands[arg]
    return " ".join(words) or "-"


def _error_line(message: str) -> None:
    sys.stderr.write(f"error: {' '.join(message.split())}\n")


def _refuse(message: str, error: click_exceptions.UsageError) -> None:
    _error_line(message)
    if sys.stderr.isatty() and error.ctx is not None:
        sys.stderr.write(f"Try '{error.ctx.command_path} --help' for help.\n")


app = typer.Typer(
    name=PROG,
    cls=ColonyGroup,
    help=f"Colony: GPU Kubernetes clusters on k0rdent, orchestrated by Temporal.\n\n{EXIT_CODES_HELP}",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(wanted: bool) -> None:
    if wanted:
        sys.stdout.write(version_text() + "\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print Colony's version and the Temporal SDK's, and exit.",
        ),
    ] = False,
) -> None:
    # `colonyctl --version` alone is answered before the command line is built (`starter.cli`);
    # this declares it for --help, and answers it wherever else it is given.
    pass


def add_command_groups() -> None:
    """Add every command module's group (`starter.commands.Group`), in the order of their rank."""
    groups = []
    for found in pkgutil.iter_modules(commands.__path__):
        module = importlib.import_module(f"{commands.__name__}.{found.name}")
        group = getattr(module, "GROUP", None)
        if isinstance(group, commands.Group):
            groups.append((group.rank, group.noun, module.app, group.operations))
    for _, noun, typer_app, operations in sorted(groups, key=lambda g: (g[0], g[1])):
        app.add_typer(typer_app, name=noun, epilog=EXIT_CODES_HELP if operations else None)


add_command_groups()
app.command("apply", epilog=EXIT_CODES_HELP)(apply.apply)
app.command("kubeconfig")(credentials.kubeconfig)
app.command("token")(credentials.token)


def run(argv: Sequence[str]) -> int:
    """Run `colonyctl ARGV` in this process; the exit code."""
    command = typer.main.get_command(app)
    assert isinstance(command, ColonyGroup)
    return command.run(list(argv), PROG)
