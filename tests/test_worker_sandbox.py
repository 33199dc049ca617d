"""The worker passes every helper module of `workflows/` through the sandbox, and only those: a
module that defines a workflow class is imported again for each workflow run, so the sandbox still
checks its code; one that does not is imported once (`worker.WORKFLOW_HELPER_MODULES`)."""

from __future__ import annotations

import ast
from pathlib import Path

from worker import WORKFLOW_HELPER_MODULES

WORKFLOWS = Path(__file__).resolve().parents[1] / "workflows"


def _defines_a_workflow(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if isinstance(target, ast.Attribute) and target.attr == "defn":
                    return True
    return False


def test_every_helper_module_and_no_workflow_module_is_passed_through() -> None:
    helpers = {
        ".".join(path.relative_to(WORKFLOWS.parent).with_suffix("").parts)
        for path in WORKFLOWS.rglob("*.py")
        if path.stem != "__init__" and not _defines_a_workflow(path)
    }
    assert helpers == set(WORKFLOW_HELPER_MODULES)
    # A package passed through would take its workflow module with it.
    packages = {".".join(p.relative_to(WORKFLOWS.parent).parts) for p in WORKFLOWS.rglob("*/")}
    assert not packages & set(WORKFLOW_HELPER_MODULES)
    assert "workflows.workspace.workflow" not in WORKFLOW_HELPER_MODULES
