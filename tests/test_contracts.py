"""The workflows' contracts (`workflows/<entity>/__init__.py`) are the one place their names are
written, and what the workflows register.

- No workflow type, update, signal or query name is written as a string in product code (outside
  `tests/` and `sim/`) but in the contract modules: everyone names them through a contract. The
  scan looks at every string constant equal to one of the names, except where such a word is
  data, not a name: a key (`obj["status"]`, `{"status": ...}`, `.get("status")`), a command's
  verb (`colonyctl ... delete`, `kubectl apply`), and the few declarations listed in
  `NOT_NAMES`, each with why.
- Each workflow registers exactly the handlers its contract declares, under its type name, each
  taking and returning the contract's models.
- A contract module imports only `models`, the kit's contract classes and the standard library,
  so clients and the watcher import it without the workflow code.
"""

from __future__ import annotations

import ast
import subprocess
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.workflow import _Definition

from bench.ceiling_workflow import CEILING, CeilingWorkflow
from workflows.capacity import CAPACITY
from workflows.capacity.workflow import CapacityLedgerWorkflow
from workflows.catalog import CATALOG
from workflows.catalog.workflow import CatalogWorkflow
from workflows.cluster import CLUSTER
from workflows.cluster.workflow import ClusterWorkflow
from workflows.colony import COLONY
from workflows.colony.workflow import ColonyWorkflow
from workflows.kit.contract import Query, Signal, Update, WorkflowContract
from workflows.prerequisite import PREREQUISITE
from workflows.prerequisite.workflow import PrerequisiteWorkflow
from workflows.purge import PURGE
from workflows.purge.workflow import PurgeWorkflow
from workflows.workspace import WORKSPACE
from workflows.workspace.workflow import WorkspaceWorkflow

ROOT = Path(__file__).resolve().parents[1]

CONTRACTS: list[tuple[WorkflowContract[Any, Any, Any], type]] = [
    (CLUSTER, ClusterWorkflow),
    (WORKSPACE, WorkspaceWorkflow),
    (COLONY, ColonyWorkflow),
    (CAPACITY, CapacityLedgerWorkflow),
    (PREREQUISITE, PrerequisiteWorkflow),
    (CATALOG, CatalogWorkflow),
    (PURGE, PurgeWorkflow),
]
NAMES = {name for contract, _ in CONTRACTS for name in contract.names()}
REGISTERED = [*CONTRACTS, (CEILING, CeilingWorkflow)]
"""Every contract whose workflow registers it: the entities', and the Temporal ceiling's of the
benchmarks (its names are its own, so not among `NAMES`)."""

NOT_NAMES: dict[tuple[str, str], tuple[set[str], str]] = {
    ("models/operations.py", "OperationKind"): (
        {"add_node_pool", "scale_node_pool", "delete_node_pool", "delete_node", "delete_cluster"},
        "operation kinds: the update that queues one shares its word",
    ),
    ("models/workspace_operations.py", "WorkspaceOperationKind"): (
        {"suspend", "resume", "delete"},
        "workspace operation kinds: the update that queues one shares its word",
    ),
    ("models/activity_api.py", "ActivityName"): ({"delete_node"}, "an activity's name"),
    ("models/workspace_api.py", "WorkspaceActivity"): ({"publish_objects"}, "an activity's name"),
    ("models/workspace_api.py", "EXALSIUS_PREREQUISITE_ROLE"): (
        {"prerequisite"},
        "the exalsius label value `workspaces.exalsius.ai/role=prerequisite`",
    ),
    ("models/identity.py", "capacity_workflow_id"): (
        {"capacity"},
        "the ledger's workflow id is `capacity/<ClusterDeployment>`",
    ),
    ("models/manifests.py", "TOP_LEVEL_FIELDS"): ({"status"}, "a manifest's top-level fields"),
    ("models/workspace.py", "WorkspaceSpec"): ({"answers"}, "the spec's `answers` field"),
    ("bench/ceiling_workflow.py", "CeilingContract"): (
        {"delete"},
        "the contract of the benchmark's own trivial workflow, not an entity's",
    ),
    ("bench/drain_scale.py", "drain_once"): ({"delete"}, "colonyctl's words, run in a thread"),
}
"""Strings equal to a contract name without being one: (file, the class, function or constant
declaring them) -> (those strings, why)."""

VERB_CALLS = {"command", "ctl", "kubectl", "field_validator"}
"""Calls whose string arguments are a command's words or a model's field names: Typer's
`app.command("delete")`, `colonyctl`/`kubectl` argument lists, pydantic's `field_validator`."""
KEY_CALLS = {"get", "pop", "setdefault"}
"""Methods whose first argument is a key."""


def is_contract(name: str) -> bool:
    """True for an entity's contract (`workflows/<entity>/__init__.py`) and the kit's contract
    classes (`workflows/kit/contract.py`, which names the query every entity answers)."""
    parts = Path(name).parts
    if parts == ("workflows", "kit", "contract.py"):
        return True
    return (
        len(parts) == 3
        and parts[0] == "workflows"
        and parts[2] == "__init__.py"
        and parts[1] != "kit"
    )


def product_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [
        ROOT / name
        for name in listed
        if not name.startswith(("tests/", "sim/"))
        and not is_contract(name)
        and (ROOT / name).exists()
    ]


def _callee(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


class NameScan(ast.NodeVisitor):
    """String constants equal to a contract name, outside the places where they are data."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.found: list[tuple[int, str, str]] = []
        self._owners: list[str] = []
        self._skip: set[int] = set()

    def _owned(self, node: ast.AST, owner: str) -> None:
        self._owners.append(owner)
        self.generic_visit(node)
        self._owners.pop()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._owned(node, node.name)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._owned(node, node.name)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._owned(node, node.name)

    def visit_Assign(self, node: ast.Assign) -> None:
        names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        if names and not self._owners:
            self._owned(node, names[0])  # a module constant
        else:
            self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if isinstance(node.target, ast.Name) and node.target.id == "kind" and node.value:
            self._skip.add(id(node.value))  # a discriminator's value: the operation's kind
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        self._skip.update(id(key) for key in node.keys if key is not None)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self._skip.add(id(node.slice))
        self._skip.update(id(e) for e in getattr(node.slice, "elts", []))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        callee = _callee(node)
        if callee in VERB_CALLS:
            self._skip.update(id(arg) for arg in node.args)
        elif callee in KEY_CALLS and node.args:
            self._skip.add(id(node.args[0]))
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if node.value in NAMES and id(node) not in self._skip:
            owner = self._owners[0] if self._owners else ""
            if node.value not in NOT_NAMES.get((self.path, owner), (set(), ""))[0]:
                self.found.append((node.lineno, owner, node.value))


def names_written(path: Path) -> Iterator[str]:
    relative = str(path.relative_to(ROOT))
    scan = NameScan(relative)
    scan.visit(ast.parse(path.read_text(), filename=relative))
    for line, owner, value in scan.found:
        yield f"{relative}:{line} ({owner or 'module'}): {value!r}"


def test_no_workflow_name_is_written_outside_the_contracts() -> None:
    written = [found for path in product_files() for found in names_written(path)]
    assert written == [], "name these through their contract:\n" + "\n".join(written)


def test_the_scan_finds_a_name_written_as_a_string(tmp_path: Path) -> None:
    """The check above can fail: a client that queries `"status"` by hand, a workflow that
    signals `"capacity"`, a type name in a module constant."""
    module = tmp_path / "client.py"
    module.write_text(
        "WORKFLOW = 'ClusterWorkflow'\n"
        "async def get(handle, obj):\n"
        "    data = obj['status']\n"  # a key: not a name
        "    await handle.signal('capacity', data.get('status'))\n"
        "    return await handle.query('status')\n"
    )
    scan = NameScan("client.py")
    scan.visit(ast.parse(module.read_text()))
    assert [(line, value) for line, _, value in scan.found] == [
        (1, "ClusterWorkflow"),
        (4, "capacity"),
        (5, "status"),
    ]


# --- The workflows register what their contracts declare -----------------------------------------


def _hints(fn: Any) -> dict[str, Any]:
    return typing.get_type_hints(fn, globalns=getattr(fn, "__globals__", None))


def _argument(fn: Any) -> Any:
    hints = _hints(fn)
    parameters = [name for name in fn.__code__.co_varnames[1 : fn.__code__.co_argcount]]
    return hints[parameters[0]] if parameters else None


@pytest.mark.parametrize(
    ("contract", "workflow_class"),
    [pytest.param(c, w, id=c.workflow_type) for c, w in REGISTERED],
)
def test_each_workflow_registers_its_contract(
    contract: WorkflowContract[Any, Any, Any], workflow_class: type
) -> None:
    definition = _Definition.must_from_class(workflow_class)
    assert definition.name == contract.workflow_type
    run = definition.run_fn
    assert _hints(run)["return"] is contract.output
    assert _argument(run) is contract.input
    assert set(definition.updates) == set(contract.updates())
    assert set(definition.signals) == set(contract.signals())
    assert set(definition.queries) == set(contract.queries())
    for attribute, declared in contract.handlers():
        if isinstance(declared, Update):
            fn = definition.updates[declared.name].fn
            assert (_argument(fn), _hints(fn)["return"]) == (declared.input, declared.output), (
                attribute
            )
        elif isinstance(declared, Signal):
            assert _argument(definition.signals[declared.name].fn) is declared.input, attribute
        elif isinstance(declared, Query):
            fn = definition.queries[declared.name].fn
            assert (_argument(fn), _hints(fn)["return"]) == (declared.input, declared.output), (
                attribute
            )


CONTRACT_MAY_IMPORT = ("models", "workflows.kit.contract", "__future__", "temporalio")
"""`temporalio` for `workflow.unsafe.imports_passed_through` only: a contract is its workflow
module's package, imported by the sandbox too."""


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, id=str(p.relative_to(ROOT)))
        for p in sorted((ROOT / "workflows").glob("*/__init__.py"))
        if is_contract(str(p.relative_to(ROOT))) and p.parent.name != "kit"
    ],
)
def test_a_contract_imports_models_only(path: Path) -> None:
    tree = ast.parse(path.read_text())
    imported = [
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    ] + [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    ]
    standard = {"collections", "dataclasses", "typing"}
    assert [
        module
        for module in imported
        if not module.startswith(CONTRACT_MAY_IMPORT) and module.split(".")[0] not in standard
    ] == []
