"""The import contracts of `pyproject.toml` (`[tool.importlinter]`, the layers of
docs/architecture.md) hold for the tree, and break on a bad import: each deliberate violation below,
planted in a copy of the product packages, is reported by the contract that forbids it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "models",
    "workflows",
    "activities",
    "infra",
    "clients",
    "starter",
    "api",
    "watching",
    "sim",
    "bench",
    "components",
)
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` on `tree` (its pyproject.toml, its packages first on the path, no cache)."""
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def product_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("tree")
    shutil.copy(ROOT / "pyproject.toml", tree)
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, tree / package, ignore=shutil.ignore_patterns("__pycache__", "tests")
        )
    return tree


def test_the_tree_keeps_every_contract() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "bad_import", "broken"),
    [
        ("models/planted.py", "import sim.hostprovider", "The product never imports the simulator"),
        ("workflows/planted.py", "import httpx", "Workflows and models are deterministic"),
        ("infra/planted.py", "import clients.base", "Layers"),
        (
            "api/planted.py",
            "import workflows.cluster.workflow",
            "know workflows by their contracts",
        ),
        (
            "workflows/workspace/planted.py",
            "import workflows.capacity.workflow",
            "Entity packages are independent",
        ),
        ("activities/planted.py", "import workflows.cluster_calls", "Activities reach"),
        ("api/planted.py", "import components.build", "never imports the real components"),
        ("api/planted.py", "import starter.output", "never the command line"),
        ("starter/planted.py", "import api.app", "Layers"),
        ("clients/planted.py", "import starter.output", "The clients know no front door"),
        ("clients/planted.py", "import fastapi", "The clients know no front door"),
    ],
)
def test_a_deliberate_bad_import_breaks_its_contract(
    product_copy: Path, module: str, bad_import: str, broken: str
) -> None:
    planted = product_copy / module
    planted.write_text(f'"""Planted by the test: a bad import."""\n\n{bad_import}\n')
    try:
        result = lint_imports(product_copy)
    finally:
        planted.unlink()
    assert result.returncode == 1, result.stdout + result.stderr
    broken_section = result.stdout.split("Broken contracts", 1)[-1]
    assert broken in broken_section
    assert planted.stem in broken_section
