"""Replay tests: the committed histories in `tests/histories`, recorded from end-to-end runs of every
workflow type (`python -m tests.record_histories`), run against the current workflows.

A history recorded by an earlier version must replay command for command: if it does not, a change
to the workflow would break every workflow of that type already running when the new worker
starts. For each workflow type, a negative control proves the check can fail: a deliberately
altered workflow of that type's name reports nondeterminism on its history.

Two folders hold histories of earlier versions that were deliberately made incompatible, accepted
because no release had shipped and no workflow ran anywhere; the tests pin that they fail, so that
each break is a recorded decision, not an accident:
- `histories/pre-engine/`: `ClusterWorkflow` before the entity engine (waits as workflow-timer
  polls, activities `list_pods_on_node`/`evict_pod`);
- `histories/pre-kit/`: `ClusterWorkflow` before the entity kit (signals to other workflows went
  through the `signal_workflow` activity; search attributes were upserted on every phase set);
- `histories/pre-perf/`: `WorkspaceWorkflow` before its wait for the cluster's creation became
  unconditional (issue 30: the `await-cluster-created` patch cost every workspace a marker and a
  search attribute upsert; histories from before the patch skip that wait).
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from worker import WORKFLOWS
from workflows.capacity import CAPACITY
from workflows.catalog import CATALOG
from workflows.cluster import CLUSTER
from workflows.colony import COLONY
from workflows.kit.contract import WorkflowContract
from workflows.prerequisite import PREREQUISITE
from workflows.purge import PURGE
from workflows.quota import QUOTA
from workflows.workspace import WORKSPACE

HISTORIES = Path(__file__).parent / "histories"
HISTORY_FILES = sorted(HISTORIES.glob("*.json"))
KNOWINGLY_INCOMPATIBLE = sorted(
    [
        *(HISTORIES / "pre-engine").glob("*.json"),
        *(HISTORIES / "pre-kit").glob("*.json"),
        *(HISTORIES / "pre-perf").glob("*.json"),
    ]
)
CONTRACTS: list[WorkflowContract[Any, Any, Any]] = [
    CLUSTER,
    WORKSPACE,
    COLONY,
    CAPACITY,
    PREREQUISITE,
    CATALOG,
    PURGE,
    QUOTA,
]


def load(path: Path) -> WorkflowHistory:
    """A committed history, under its workflow's own id (ids sent to other workflows, and the
    answers that come back carrying them, are made of it)."""
    events = WorkflowHistory.from_json("", path.read_text()).events
    return WorkflowHistory(
        events[0].workflow_execution_started_event_attributes.workflow_id, events
    )


def workflow_type(history: WorkflowHistory) -> str:
    return history.events[0].workflow_execution_started_event_attributes.workflow_type.name


def replayer(*workflows: type) -> Replayer:
    return Replayer(workflows=list(workflows or WORKFLOWS), data_converter=pydantic_data_converter)


def first_history_of(workflow_type_name: str) -> Path:
    return next(p for p in HISTORY_FILES if workflow_type(load(p)) == workflow_type_name)


def test_every_workflow_type_has_committed_histories() -> None:
    # Every type the worker runs (found in the entity packages: a new entity is asked for here).
    running = {workflow._Definition.must_from_class(cls).name for cls in WORKFLOWS}
    assert running == {c.workflow_type for c in CONTRACTS}
    assert {workflow_type(load(p)) for p in HISTORY_FILES} == running
    assert {"cluster-continue_as_new-run1", "cluster-continue_as_new-run3"} <= {
        p.stem for p in HISTORY_FILES
    }, "a run that continued as new, and the run it carried its state to"
    for path in HISTORY_FILES:
        assert path.stat().st_size < 400_000, f"{path.name} is too big to commit"


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem) for p in HISTORY_FILES])
async def test_history_replays_without_nondeterminism(path: Path) -> None:
    result = await replayer().replay_workflow(load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure!r}"


def altered(contract: WorkflowContract[Any, Any, Any]) -> type:
    """A deliberately incompatible workflow of `contract`'s type: its first command is a timer,
    where the real ones upsert their search attributes, call an activity or signal another
    workflow."""
    name = f"Altered{contract.workflow_type}"

    async def run(self: Any, input: Any) -> Any:
        await workflow.sleep(timedelta(days=1))
        raise AssertionError("replay must stop at the first command")

    run.__qualname__ = f"{name}.run"  # a class of its own, as a module-level one is
    cls = type(name, (), {"__module__": __name__, "__qualname__": name, "run": workflow.run(run)})
    return workflow.defn(name=contract.workflow_type, sandboxed=False)(cls)


@pytest.mark.parametrize("contract", [pytest.param(c, id=c.workflow_type) for c in CONTRACTS])
async def test_replay_reports_nondeterminism_of_an_altered_workflow(
    contract: WorkflowContract[Any, Any, Any],
) -> None:
    history = load(first_history_of(contract.workflow_type))
    with pytest.raises(NondeterminismError):
        await replayer(altered(contract)).replay_workflow(history)


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, id=f"{p.parent.name}/{p.stem}") for p in KNOWINGLY_INCOMPATIBLE],
)
async def test_histories_of_earlier_versions_are_knowingly_incompatible(path: Path) -> None:
    result = await replayer().replay_workflow(load(path), raise_on_replay_failure=False)
    assert isinstance(result.replay_failure, NondeterminismError), path.name


def _with_unknown_state_field(history: WorkflowHistory) -> WorkflowHistory:
    """The history of a continued run whose carried state holds a field this release does not
    know (as a newer release, or one that removed a field, would have written it)."""
    events = list(history.events)
    started = events[0].workflow_execution_started_event_attributes
    payload = started.input.payloads[0]
    data = json.loads(payload.data)
    data["state"]["fieldFromAnotherRelease"] = {"anything": [1, 2, 3]}
    data["state"]["nodePools"][0]["nodes"][0]["anotherUnknownField"] = "x"
    payload.data = json.dumps(data).encode()
    return WorkflowHistory(history.workflow_id, events)


async def test_a_state_with_unknown_fields_still_replays() -> None:
    history = _with_unknown_state_field(load(HISTORIES / "cluster-continue_as_new-run2.json"))
    payload = history.events[0].workflow_execution_started_event_attributes.input.payloads[0]
    assert b"fieldFromAnotherRelease" in payload.data
    result = await replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
