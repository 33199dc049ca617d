"""The parts of the layering (docs/architecture.md) that the import contracts of `pyproject.toml`
(`lint-imports`, tests/test_import_contracts.py) cannot express, checked on every run:

- `workflows/` and `models/` import no standard-library IO module (`socket`, `subprocess`): the
  contracts see Colony's packages and installed libraries, not the standard library;
- the two top-level scripts (`worker.py`, `watcher.py`) never import the simulator: the contracts
  cover packages only;
- `api/` takes from `starter/` only the framework-free parts it shares with the CLI (an allow-list:
  the contracts forbid, they do not allow);
- `infra/` uses of Temporal only its connection settings and its tracing interceptor, nothing with
  an error type in it (the contracts see `temporalio`, not its modules).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

STANDARD_LIBRARY_IO = {"socket", "subprocess", "ssl", "urllib"}


def imported_names(path: Path) -> set[str]:
    """Every module imported, in full (`clients.clusters`, not `starter`), a deferred
    import inside a function too."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def top_level(names: set[str]) -> set[str]:
    return {name.split(".")[0] for name in names}


def python_files(*folders: str) -> list[Path]:
    return [path for folder in folders for path in sorted((ROOT / folder).rglob("*.py"))]


def params(paths: list[Path]) -> list[object]:
    return [pytest.param(p, id=str(p.relative_to(ROOT))) for p in paths]


@pytest.mark.parametrize("path", params(python_files("workflows", "models")))
def test_deterministic_layers_import_no_standard_library_io(path: Path) -> None:
    forbidden = top_level(imported_names(path)) & STANDARD_LIBRARY_IO
    assert not forbidden, f"{path.relative_to(ROOT)} imports {sorted(forbidden)}"


@pytest.mark.parametrize("path", params([ROOT / "worker.py", ROOT / "watcher.py"]))
def test_the_scripts_never_import_the_simulator(path: Path) -> None:
    assert "sim" not in top_level(imported_names(path)), f"{path.name} imports sim"


API_MAY_USE_FROM_STARTER = {
    "clients",
    "clients.errors",
    "clients.parsing",
    "clients.credentials",
}
"""Framework-free parts of `starter/`: the entity clients and what they share with the CLI."""


@pytest.mark.parametrize("path", params(python_files("api")))
def test_the_api_uses_the_entity_clients_not_the_cli(path: Path) -> None:
    names = imported_names(path)
    starter = {".".join(n.split(".")[:2]) for n in names if n.startswith("starter.")}
    assert starter <= API_MAY_USE_FROM_STARTER, sorted(starter)


INFRA_MAY_IMPORT_OF_TEMPORAL = ("temporalio.envconfig", "temporalio.contrib.opentelemetry")
"""Temporal's connection settings (`ColonySettings.temporal_connect`) and its tracing interceptor
(`infra.tracing.interceptor`); nothing with an error type in it."""


def temporal_beyond_settings(names: set[str]) -> set[str]:
    return {
        n
        for n in names
        if n.split(".")[0] == "temporalio"
        and not any(n == a or n.startswith(f"{a}.") for a in INFRA_MAY_IMPORT_OF_TEMPORAL)
    }


@pytest.mark.parametrize("path", params(python_files("infra")))
def test_shared_infrastructure_imports_no_temporal_error(path: Path) -> None:
    forbidden = temporal_beyond_settings(imported_names(path))
    assert not forbidden, f"{path.relative_to(ROOT)} imports {sorted(forbidden)}"


def test_the_checks_see_deferred_and_full_imports(tmp_path: Path) -> None:
    """The checks above read every import, a deferred one in a function too, by its full name:
    `temporalio.exceptions` is not Temporal's settings."""
    module = tmp_path / "module.py"
    module.write_text(
        "import subprocess\n"
        "def f() -> None:\n"
        "    from temporalio.exceptions import ApplicationError\n"
        "    from starter.app import app\n"
    )
    names = imported_names(module)
    assert top_level(names) & STANDARD_LIBRARY_IO == {"subprocess"}
    assert temporal_beyond_settings(names) == {
        "temporalio.exceptions",
        "temporalio.exceptions.ApplicationError",
    }
    assert "starter.app" in names
