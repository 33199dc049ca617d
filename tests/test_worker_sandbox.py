"""The worker finds the entities' workflows where they are, and passes every other module of
`workflows/` through the sandbox: a module that defines a workflow class is imported again for each
workflow run, so the sandbox still checks its code; one that does not is imported once
(`worker.WORKFLOWS`, `worker.WORKFLOW_HELPER_MODULES`)."""

from __future__ import annotations

import ast
from pathlib import Path

from worker import WORKFLOW_HELPER_MODULES, WORKFLOWS, entity_packages

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS_DIR = ROOT / "workflows"


def _defines_a_workflow(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if isinstance(target, ast.Attribute) and target.attr == "defn":
                    return True
    return False


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def test_every_module_that_defines_no_workflow_is_passed_through_and_no_other() -> None:
    helpers = {
        _module(path)
        for path in WORKFLOWS_DIR.rglob("*.py")
        if path.stem != "__init__" and not _defines_a_workflow(path)
    }
    assert helpers == set(WORKFLOW_HELPER_MODULES)


def test_no_package_is_passed_through_since_it_would_take_its_workflow_module_along() -> None:
    packages = {_module(path.parent) for path in WORKFLOWS_DIR.rglob("__init__.py")}
    assert "workflows.workspace" in packages
    assert not packages & set(WORKFLOW_HELPER_MODULES)


def test_the_worker_runs_the_workflow_of_every_entity_package() -> None:
    defining = {_module(path) for path in WORKFLOWS_DIR.rglob("*.py") if _defines_a_workflow(path)}
    assert defining == {f"{package}.workflow" for package in entity_packages()}
    assert {cls.__module__ for cls in WORKFLOWS} == defining
    assert len(WORKFLOWS) == 8
