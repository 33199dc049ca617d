"""Colony's workspace status read as an exalsius client reads a WorkspaceDeployment's: validated
with the exalsius operator's own CRD (`../shared/exalsius/operator-crds/`), as a kube-apiserver
validates a status written to it (`sim.apiserver.schema`: types, enums, required fields,
patterns, formats).

Colony's status is a superset of the exalsius one. What the CRD defines must validate; what it does
not (Colony's own fields: GPU admission, operations, an endpoint's port-forward command and own
reason, the failure's message...) is what such a server would prune, and only the fields listed in
`COLONY_ONLY` may be: anything else Colony writes under an exalsius name, or a typo, fails.

Used by the end-to-end and API tests; skipped when `../shared` is not beside the checkout.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.apiserver.schema import unknown_fields, validate

CRD = (
    Path(__file__).resolve().parents[1].parent
    / "shared"
    / "exalsius"
    / "operator-crds"
    / "workspaces.exalsius.ai_workspacedeployments.yaml"
)
COLONY_ONLY = re.compile(
    r"^("
    r"name|class|cluster|organization|admission|namespace|serviceSet|suspended|createdAt|updatedAt"
    r"|currentOperation|queuedOperations|completedOperations|id|workflowId|webUi"
    r"|access\[\d+\]\.(command|reason)"
    r"|failureContext\.message"
    r"|unresponsive(\..+)?"
    r")$"
)
"""Colony's own status fields (the API's view adds id, workflowId and webUi)."""


def status_schema() -> dict[str, Any]:
    """The `status` schema of the exalsius WorkspaceDeployment CRD (v1); skips without it."""
    if not CRD.exists():
        pytest.skip(f"the exalsius operator's CRDs are not at {CRD.parent}")
    crd = yaml.safe_load(CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    return schema


def exalsius_problems(status: dict[str, Any]) -> list[str]:
    """Why `status` (Colony's JSON, as `colonyctl workspace get -o json` and the API give it) is
    not a valid exalsius WorkspaceDeployment status; empty when it is."""
    schema = status_schema()
    problems = [str(error) for error in validate(schema, status)]
    problems += [
        f"{path}: neither in the exalsius CRD nor one of Colony's own fields"
        for path in unknown_fields(schema, status)
        if not COLONY_ONLY.match(path)
    ]
    return problems
