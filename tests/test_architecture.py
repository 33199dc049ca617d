"""The layering STYLE.md promises, checked on every run: what each layer may import.

- `workflows/` and `models/` are deterministic and sandbox-safe: no client library, no IO module.
- Nothing outside `sim/` and `tests/` imports `sim` (the product cannot know it talks to a simulator).
- `starter/` (the CLI) does not import `activities` or `workflows` implementations' IO.
- `api/` (the HTTP API) reaches Temporal through the entity clients of `starter.clients` only,
  never the CLI's Typer/rich layer; `starter/` (the CLI) imports nothing of `api/`: what
  both need (the key store, the API's settings) is shared infrastructure, `infra/`, which imports
  no web framework, no command line, no Temporal error type and no layer above it.
- `watching/` (the watcher) talks to Kubernetes and Temporal only: it imports no workflow, CLI or
  simulator code; it signals workflows through their contracts.
- Of `workflows/`, the HTTP API and the watcher import the contracts only
  (`workflows/<entity>/contract.py` and `workflows/kit/contract.py`: names and models, no workflow
  code).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CLIENT_LIBRARIES = {"kubernetes", "httpx", "aiohttp", "requests", "urllib3", "socket", "subprocess"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def python_files(*folders: str) -> list[Path]:
    return [path for folder in folders for path in sorted((ROOT / folder).rglob("*.py"))]


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, id=str(p.relative_to(ROOT))) for p in python_files("workflows", "models")],
)
def test_deterministic_layers_import_no_client_library(path: Path) -> None:
    forbidden = imported_modules(path) & (CLIENT_LIBRARIES | {"sim", "activities", "starter"})
    assert not forbidden, f"{path.relative_to(ROOT)} imports {sorted(forbidden)}"


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, id=str(p.relative_to(ROOT)))
        for p in [
            *python_files(
                "workflows",
                "models",
                "activities",
                "starter",
                "catalog",
                "watching",
                "api",
                "infra",
            ),
            ROOT / "worker.py",
            ROOT / "watcher.py",
        ]
        if p.exists()
    ],
)
def test_product_code_never_imports_the_simulator(path: Path) -> None:
    assert "sim" not in imported_modules(path), f"{path.relative_to(ROOT)} imports sim"


def imported_names(path: Path) -> set[str]:
    """Every module imported, in full (`starter.clients.clusters`, not `starter`)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


CONTRACT = re.compile(r"^workflows\.(kit|[a-z_]+)\.contract(\.|$)")
"""A workflow type's contract module (or the kit's contract classes), and the names in it."""


def workflow_code(names: set[str]) -> set[str]:
    """The imported modules of `workflows/` that are not contracts."""
    return {
        n
        for n in names
        if (n == "workflows" or n.startswith("workflows.")) and not CONTRACT.match(n)
    }


API_MAY_USE_FROM_STARTER = {
    "starter.clients",
    "starter.errors",
    "starter.parsing",
    "starter.credentials",
}
"""Framework-free parts of `starter/`: the entity clients and what they share with the CLI."""


@pytest.mark.parametrize(
    "path", [pytest.param(p, id=str(p.relative_to(ROOT))) for p in python_files("api")]
)
def test_the_api_uses_the_cli_client_functions_not_the_cli(path: Path) -> None:
    names = imported_names(path)
    starter = {".".join(n.split(".")[:2]) for n in names if n.startswith("starter.")}
    assert starter <= API_MAY_USE_FROM_STARTER, sorted(starter)
    assert not {n.split(".")[0] for n in names} & {"typer", "rich", "sim"}
    assert workflow_code(names) == set()


@pytest.mark.parametrize(
    "path", [pytest.param(p, id=str(p.relative_to(ROOT))) for p in python_files("starter")]
)
def test_the_cli_never_imports_the_api(path: Path) -> None:
    assert "api" not in imported_modules(path), f"{path.relative_to(ROOT)} imports api"


def test_the_cli_check_sees_an_import_of_the_api_wherever_it_is(tmp_path: Path) -> None:
    """The check above reads every import, a deferred one in a function too."""
    module = tmp_path / "module.py"
    module.write_text("def f() -> None:\n    from api.views import KeyView\n")
    assert "api" in imported_modules(module)


INFRA_MAY_NOT_IMPORT = {
    *("fastapi", "starlette", "uvicorn", "typer", "rich"),
    *("starter", "api", "workflows", "activities", "sim", "watching"),
}
"""What shared infrastructure must not depend on: a front door's framework or any layer that uses
it."""
INFRA_MAY_IMPORT_OF_TEMPORAL = ("temporalio.envconfig", "temporalio.contrib.opentelemetry")
"""Temporal's connection settings (`ColonySettings.temporal_connect`) and its tracing interceptor
(`infra.tracing.interceptor`); nothing with an error type in it."""


@pytest.mark.parametrize(
    "path", [pytest.param(p, id=str(p.relative_to(ROOT))) for p in python_files("infra")]
)
def test_shared_infrastructure_imports_no_framework_layer_above_or_temporal_error(
    path: Path,
) -> None:
    names = imported_names(path)
    forbidden = {n.split(".")[0] for n in names} & INFRA_MAY_NOT_IMPORT
    forbidden |= {
        n
        for n in names
        if n.split(".")[0] == "temporalio"
        and not any(n == a or n.startswith(f"{a}.") for a in INFRA_MAY_IMPORT_OF_TEMPORAL)
    }
    assert not forbidden, f"{path.relative_to(ROOT)} imports {sorted(forbidden)}"


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, id=str(p.relative_to(ROOT)))
        for p in python_files("activities")
        if p.name != "declarations.py"
    ],
)
def test_activities_reach_the_workflows_declarations_through_one_module(path: Path) -> None:
    assert "workflows" not in imported_modules(path), f"{path.relative_to(ROOT)} imports workflows"


def test_the_infra_check_sees_a_temporal_error_type(tmp_path: Path) -> None:
    """The check above reads the full name: `temporalio.exceptions` is not Temporal's settings."""
    module = tmp_path / "module.py"
    module.write_text("def f() -> None:\n    from temporalio.exceptions import ApplicationError\n")
    assert "temporalio.exceptions" in imported_names(module)
    assert not "temporalio.exceptions".startswith(INFRA_MAY_IMPORT_OF_TEMPORAL)


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, id=str(p.relative_to(ROOT))) for p in python_files("watching")],
)
def test_the_watcher_imports_no_workflow_cli_or_simulator(path: Path) -> None:
    forbidden = imported_modules(path) & {"starter", "sim"}
    assert not forbidden, f"{path.relative_to(ROOT)} imports {sorted(forbidden)}"
    assert workflow_code(imported_names(path)) == set()


ENTITY_PACKAGES = sorted(
    p.name
    for p in (ROOT / "workflows").iterdir()
    if (p / "contract.py").exists() and p.name != "kit"
)


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, id=str(p.relative_to(ROOT)))
        for entity in ENTITY_PACKAGES
        for p in python_files(f"workflows/{entity}")
    ],
)
def test_an_entity_package_knows_the_others_by_their_contracts_only(path: Path) -> None:
    """`workflows/<entity>/` imports another entity's contract, never its workflow code; the
    kit and the shared declarations are everyone's."""
    entity = path.relative_to(ROOT / "workflows").parts[0]
    others = {
        name
        for name in imported_names(path)
        if name.startswith("workflows.")
        and name.split(".")[1] in ENTITY_PACKAGES
        and name.split(".")[1] != entity
    }
    assert workflow_code(others) == set(), f"{path.relative_to(ROOT)} imports {sorted(others)}"
