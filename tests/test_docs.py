"""The README, `docs/` and `examples/` say only what is true of the product as it is.

Cheap checks, no server: every file path they name exists (and every Markdown link's target and
anchor); every `colonyctl` command line they show parses against the current command line (run
through the Typer app's parser without executing, as `colonyctl ... --help` would check the names);
every `python -m` module they name imports; every HTTP endpoint they show is in the API's OpenAPI
document, and every endpoint of that document is in the API reference. `tests/test_e2e_examples.py`
applies the example files themselves.
"""

from __future__ import annotations

import fnmatch
import functools
import importlib.util
import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer

from api.app import create_app
from infra.config import ColonySettings
from starter.app import app
from starter.cli import normalize_argv
from workflows.search_attributes import ALL as SEARCH_ATTRIBUTES

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
EXAMPLES = REPO / "examples"
DOCUMENTS = sorted([README, EXAMPLES / "README.md", *(REPO / "docs").glob("*.md")])
README_MAX_LINES = 290
"""The README is the user's guide, task first; internals belong in docs/. (280 until issue 26's
table of what runs real and what is simulated.)"""

REPO_ROOTS = (
    "activities|api|bench|catalog|deploy|docs|examples|infra|models|sim|starter|tests|watching|"
    "workflows"
)
REPO_PATH = re.compile(
    rf"(?<![\w./~$-])((?:{REPO_ROOTS})/(?:[\w./-]*/|[\w./-]*\.\w+)?(?![\w/-])"
    r"|docker-compose(?:\.sim)?\.yml|Dockerfile|Makefile|pyproject\.toml|worker\.py|watcher\.py)"
)
"""A path in the repository as the documents write it: from the repository's root, under one of
its top-level folders, a folder (`sim/`) or a file with its extension (`.colony/...`, `~/...`,
URLs, API paths and workflow ids such as `catalog/workspace-classes` are not files of the
checkout). Markdown links are checked apart, relative to their document."""
MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *$", re.MULTILINE)
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
INLINE_COLONYCTL = re.compile(r"`(colonyctl [^`]+)`")
SHELL_OPERATORS = {"<", ">", "|", "||", "&&", ";", "&"}
HELP_WORDS = {"--help", "-h", "--version"}
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
ENDPOINT_MENTION = re.compile(r"`(GET|POST|PUT|PATCH|DELETE) (/v1/[^\s`?,)]*)")
"""An endpoint named in prose: `POST /v1/workspaces` (Colony's; the host provider's are not)."""
API_BASES = ("$API", "http://127.0.0.1:8080", "http://localhost:8000")


def relative(path: Path) -> str:
    return str(path.relative_to(REPO))


def document_ids() -> list[str]:
    return [relative(path) for path in DOCUMENTS]


def code_blocks(text: str) -> Iterator[str]:
    """The logical lines of the fenced code blocks: continuations (`\\`) joined."""
    for block in FENCE.findall(text):
        yield from re.sub(r"\\\n\s*", " ", block).splitlines()


@dataclass(frozen=True)
class CommandLine:
    """A `colonyctl` command line a document shows: runnable (a code block) or a mention."""

    where: str
    text: str
    runnable: bool


def colonyctl_lines(path: Path) -> Iterator[CommandLine]:
    text = path.read_text()
    for line in code_blocks(text):
        words = line.strip().removeprefix("# ")
        if words.startswith("colonyctl "):
            yield CommandLine(relative(path), words, runnable=True)
    for span in INLINE_COLONYCTL.findall(text):
        yield CommandLine(relative(path), " ".join(span.split()), runnable=False)


def example_header_lines() -> Iterator[CommandLine]:
    """The usage line each example file's header comment gives."""
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        for line in path.read_text().splitlines():
            if not line.startswith("#"):
                break
            words = line.lstrip("# ").strip()
            if words.startswith("colonyctl "):
                yield CommandLine(relative(path), words.split("   ")[0], runnable=True)


def argument_lists(line: str) -> list[list[str]]:
    """The argv (after `colonyctl`) of a shown command line: comments and redirections dropped,
    and alternatives written as `cluster|workspace|colony` expanded into one argv each."""
    words = shlex.split(line, comments=True)[1:]
    for index, word in enumerate(words):
        if word in SHELL_OPERATORS:
            words = words[:index]
            break
    argvs: list[list[str]] = [[]]
    for word in words:
        choices = word.split("|") if "|" in word and not word.startswith("-") else [word]
        argvs = [[*argv, choice] for argv in argvs for choice in choices]
    return argvs


ROOT_COMMAND = typer.main.get_command(app)


def parse(argv: list[str], runnable: bool) -> None:
    """Parse `colonyctl ARGV` as the command line would, down to its last subcommand, without
    running anything. A mention (not runnable) may stop at a group or leave required parameters
    out; names, options and values must still be right.

    Raises:
        AssertionError: what the command line would refuse, in its words.
    """
    command: Any = ROOT_COMMAND
    args = normalize_argv(argv)
    name, parent = "colonyctl", None
    while True:
        is_group = hasattr(command, "resolve_command")
        if is_group and not args and not runnable:
            return
        try:
            context = command.make_context(name, list(args), parent=parent)
            if not is_group:
                return
            rest = [*context._protected_args, *context.args]
            if not rest:
                raise AssertionError(f"'{name}' needs a subcommand")
            name, command, args = command.resolve_command(context, rest)
        except AssertionError:
            raise
        except Exception as error:
            if type(error).__name__ == "MissingParameter" and not runnable:
                return
            raise AssertionError(f"{type(error).__name__}: {error}") from error
        parent = context


def shown_command_lines() -> list[CommandLine]:
    lines = [line for path in DOCUMENTS for line in colonyctl_lines(path)]
    return [*lines, *example_header_lines()]


@pytest.mark.parametrize(
    "shown", [pytest.param(line, id=f"{line.where}: {line.text}") for line in shown_command_lines()]
)
def test_every_colonyctl_command_line_shown_parses(shown: CommandLine) -> None:
    for argv in argument_lists(shown.text):
        # `colonyctl X --help` is checked as a mention of X (it needs none of X's arguments).
        runnable = shown.runnable and not HELP_WORDS & set(argv)
        try:
            parse([word for word in argv if word not in HELP_WORDS], runnable)
        except AssertionError as error:
            raise AssertionError(f"{shown.where}: `{shown.text}`: {error}") from None


@pytest.mark.parametrize(
    "wrong",
    [
        pytest.param("colonyctl cluster make training", id="command"),
        pytest.param("colonyctl cluster create training --location fra1", id="option"),
        pytest.param("colonyctl node-pool scale training gpu --count two", id="value"),
        pytest.param("colonyctl workspace deploy nb --cluster training", id="required"),
        pytest.param("colonyctl cluster", id="no-subcommand"),
    ],
)
def test_the_check_refuses_what_the_command_line_refuses(wrong: str) -> None:
    """The parse above is a real check: a wrong command, option or value, or a runnable line
    without its required arguments, fails."""
    (argv,) = argument_lists(wrong)
    with pytest.raises(AssertionError):
        parse(argv, runnable=True)


def test_a_mention_may_leave_out_what_a_command_needs() -> None:
    """`colonyctl apikey` or `colonyctl token` in prose names a command; they parse as mentions."""
    parse(["apikey"], runnable=False)
    parse(["token"], runnable=False)
    with pytest.raises(AssertionError):
        parse(["tokens"], runnable=False)


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    return {
        re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        for heading in HEADING.findall(path.read_text())
    }


@pytest.mark.parametrize("path", DOCUMENTS, ids=document_ids())
def test_every_file_a_document_names_exists(path: Path) -> None:
    text = path.read_text()
    prose = MARKDOWN_LINK.sub("", text)
    missing = sorted(
        {name for name in REPO_PATH.findall(prose) if not (REPO / name.rstrip("/")).exists()}
    )
    assert not missing, f"{relative(path)} names files that do not exist: {missing}"
    broken = []
    for target in MARKDOWN_LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists() or (anchor and anchor not in anchors(linked)):
            broken.append(target)
    assert not broken, f"{relative(path)} links to what does not exist: {broken}"


@pytest.mark.parametrize("path", DOCUMENTS, ids=document_ids())
def test_every_module_a_document_runs_imports(path: Path) -> None:
    modules = set(re.findall(r"python -m ([\w.]*\w)", path.read_text()))
    missing = sorted(module for module in modules if importlib.util.find_spec(module) is None)
    assert not missing, f"{relative(path)} runs modules that do not exist: {missing}"


@functools.cache
def openapi_operations() -> frozenset[tuple[str, str]]:
    """(method, path with its parameters written `{}`) of every operation the API serves."""
    document = create_app(ColonySettings.from_env({}), None, None).openapi()  # type: ignore[arg-type]
    return frozenset(
        (method.upper(), re.sub(r"\{[^}]+\}", "{}", path))
        for path, operations in document["paths"].items()
        for method in operations
    )


def served(operations: frozenset[tuple[str, str]], method: str, path: str) -> bool:
    """Whether `path` (concrete, a placeholder or `{param}`) is served under `method`."""
    concrete = re.sub(r"\{[^}]+\}|<[^>]+>", "x", path.split("?")[0]).rstrip("/")
    return any(
        m == method and re.fullmatch(re.escape(p).replace(r"\{\}", "[^/]+"), concrete)
        for m, p in operations
    )


def curl_requests(text: str) -> Iterator[tuple[str, str]]:
    """(method, path) of every curl call to Colony's API in a document's code blocks."""
    for line in code_blocks(text):
        if not line.strip().startswith("curl "):
            continue
        words = shlex.split(line, comments=True)
        method = words[words.index("-X") + 1] if "-X" in words else "GET"
        for word in words:
            for base in API_BASES:
                if word.startswith(base + "/"):
                    yield method, word[len(base) :]


@pytest.mark.parametrize("path", DOCUMENTS, ids=document_ids())
def test_every_endpoint_a_document_shows_is_served(path: Path) -> None:
    operations = openapi_operations()
    text = path.read_text()
    shown = [*curl_requests(text), *ENDPOINT_MENTION.findall(text)]
    unknown = [f"{method} {url}" for method, url in shown if not served(operations, method, url)]
    assert not unknown, f"{relative(path)} shows endpoints the API does not serve: {unknown}"


def test_the_api_reference_names_every_endpoint() -> None:
    reference = (REPO / "docs" / "api.md").read_text()
    written = {
        (method, re.sub(r"\{[^}]+\}", "{}", url))
        for method, url in re.findall(r"`(GET|POST|PUT|PATCH|DELETE) (/v1/[^`\s?]*)", reference)
    }
    absent = sorted(
        f"{method} {path}"
        for method, path in openapi_operations()
        if path.startswith("/v1/") and (method, path) not in written
    )
    assert not absent, f"docs/api.md lacks: {absent}"


def test_the_search_attributes_are_documented() -> None:
    text = (REPO / "docs" / "observability.md").read_text()
    assert all(f"--name {key.name} " in text for key in SEARCH_ATTRIBUTES)


def test_the_readme_starts_with_the_two_commands_and_stays_a_guide() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"
    first_block = lines[: lines.index("```", 3) + 1]
    assert any(line.startswith("make run ") for line in first_block)
    assert any(line.startswith("make test ") for line in first_block)


def test_every_example_says_what_it_is_and_is_listed() -> None:
    index = (EXAMPLES / "README.md").read_text()
    for path in sorted(p for p in EXAMPLES.rglob("*") if p.is_file() and p.name != "README.md"):
        name = str(path.relative_to(EXAMPLES))
        assert f"]({name})" in index, f"examples/README.md does not list {name}"
        if path.suffix == ".yaml":
            first = path.read_text().splitlines()[0]
            assert first.startswith("# "), f"{name} does not start with a comment saying what it is"
            assert f"examples/{name}" in path.read_text(), f"{name} does not say how to use it"


# --- What a newcomer's first hour asked of the README (issue 31) ------------------------------


def readme_paragraphs() -> list[str]:
    """The README's paragraphs and list items, each on one line."""
    text = FENCE.sub("", README.read_text())
    pieces = re.split(r"\n\s*\n|\n(?=- )", text)
    return [" ".join(piece.split()) for piece in pieces if piece.strip()]


def git_ignored(path: str) -> bool:
    """Whether the checkout's `.gitignore` ignores `path` (a path from the repository's root)."""
    patterns = [
        line.strip()
        for line in (REPO / ".gitignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    parents = [str(parent) + "/" for parent in Path(path).parents if str(parent) != "."]
    return any(
        pattern in parents
        or (not pattern.endswith("/") and fnmatch.fnmatch(Path(path).name, pattern))
        for pattern in patterns
    )


def test_the_walkthroughs_kubeconfigs_are_written_where_git_ignores_them() -> None:
    """A file the README's commands write into the checkout never shows as untracked."""
    written = []
    for line in code_blocks(README.read_text()):
        words = shlex.split(line, comments=True)
        for flag in ("--output", "--kubeconfig"):
            written += [words[i + 1] for i, word in enumerate(words[:-1]) if word == flag]
    assert written, "the walkthrough writes a kubeconfig"
    assert all(not Path(path).is_absolute() and not path.startswith("~") for path in written)
    shown = [path for path in written if not git_ignored(path)]
    assert not shown, f"README.md writes files git shows as untracked: {shown}"
    assert git_ignored(".colony/x.kubeconfig")
    assert not git_ignored("training.kubeconfig")


def test_the_readme_says_what_a_reset_does_to_kubeconfigs() -> None:
    said = [p for p in readme_paragraphs() if "make reset" in p and "colonyctl kubeconfig" in p]
    assert said, "README.md does not say that kubeconfigs are written again after make reset"
    assert any("connection refused" in p for p in said)


def test_the_readme_says_the_tenant_gateway_domain_is_the_operators() -> None:
    said = [p for p in readme_paragraphs() if "tenantGatewayDomain" in p]
    assert any("operator's setting" in p and "422" in p for p in said), said


def test_the_readme_shows_a_signal_and_names_the_page_for_them() -> None:
    """A section on signals: one example a service can send as it is (its workflow, a signal
    of that workflow's contract, a payload its model takes), and the page with all of them."""
    from temporalio.contrib.pydantic import pydantic_data_converter

    from clients.parsing import validated
    from workflows.cluster import CLUSTER
    from workflows.workspace import WORKSPACE

    text = README.read_text()
    heading = next((h for h in HEADING.findall(text) if "Signals" in h), None)
    assert heading is not None, "README.md has no section on signals"
    section = text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    assert "](docs/engine.md#signals-for-other-services)" in section
    assert "signals-for-other-services" in anchors(REPO / "docs" / "engine.md")
    sent = [
        shlex.split(line) for line in code_blocks(section) if line.startswith("temporal workflow")
    ]
    assert len(sent) == 1, sent
    words = sent[0]
    workflow_id, name, payload = (
        words[words.index(flag) + 1] for flag in ("--workflow-id", "--name", "--input")
    )
    contract = {"cluster": CLUSTER, "workspace": WORKSPACE}[workflow_id.split("/")[0]]
    signal = contract.signals()[name]
    # What the worker would decode (camelCase JSON), validated as strictly as users' input.
    decoded = validated(signal.input, json.loads(payload))
    assert pydantic_data_converter.payload_converter.to_payloads([decoded])
    assert getattr(decoded, "request_id", "")
