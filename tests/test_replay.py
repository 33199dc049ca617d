"""Replay tests: the committed histories in tests/histories run against the current ClusterWorkflow.

A history recorded by an earlier version (`python -m tests.record_histories`) must replay
command for command: if it does not, a change to the workflow would break every cluster workflow
already running when the new worker starts. The last test proves the check can fail.

`histories/pre-engine/` holds the histories of the workflow before the entity engine (waits as
workflow-timer polls, activities `list_pods_on_node`/`evict_pod`). That change was deliberately
incompatible, accepted because no release had shipped and no cluster workflow ran anywhere: the
test below pins that they fail, so that the break is a recorded decision, not an accident.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

with workflow.unsafe.imports_passed_through():
    from models.activity_api import ActivityName, ListClaimedHostsRequest, ListClaimedHostsResult
    from models.cluster import ClusterStatus, ClusterWorkflowInput
    from workflows.cluster.workflow import ClusterWorkflow

HISTORIES = Path(__file__).parent / "histories"
HISTORY_FILES = sorted(HISTORIES.glob("*.json"))
PRE_ENGINE_FILES = sorted((HISTORIES / "pre-engine").glob("*.json"))
PRE_KIT_FILES = sorted((HISTORIES / "pre-kit").glob("*.json"))


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(f"cluster/{path.stem}", path.read_text())


def test_histories_are_committed() -> None:
    names = {path.stem for path in HISTORY_FILES}
    assert {"scale_and_drain", "missing_template", "continue_as_new-run1"} <= names, names
    for path in HISTORY_FILES:
        assert path.stat().st_size < 200_000, f"{path.name} is too big to commit"


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem) for p in HISTORY_FILES])
async def test_history_replays_without_nondeterminism(path: Path) -> None:
    replayer = Replayer(workflows=[ClusterWorkflow], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure!r}"


@workflow.defn(name="ClusterWorkflow")
class AlteredClusterWorkflow:
    """A deliberately incompatible `ClusterWorkflow`: its first command is another activity, where
    the real one upserts its search attributes and checks the template and credential."""

    @workflow.run
    async def run(self, input: ClusterWorkflowInput) -> ClusterStatus:
        await workflow.execute_activity(
            ActivityName.LIST_CLAIMED_HOSTS,
            ListClaimedHostsRequest(owner="nobody"),
            result_type=ListClaimedHostsResult,
            start_to_close_timeout=timedelta(seconds=30),
        )
        raise AssertionError("replay must stop at the first command")


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, id=f"{p.parent.name}/{p.stem}") for p in PRE_ENGINE_FILES + PRE_KIT_FILES],
)
async def test_histories_before_the_engine_are_knowingly_incompatible(path: Path) -> None:
    replayer = Replayer(workflows=[ClusterWorkflow], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(load(path), raise_on_replay_failure=False)
    assert isinstance(result.replay_failure, NondeterminismError), path.name


async def test_replay_reports_nondeterminism_of_an_altered_workflow() -> None:
    replayer = Replayer(workflows=[AlteredClusterWorkflow], data_converter=pydantic_data_converter)
    with pytest.raises(NondeterminismError):
        await replayer.replay_workflow(load(HISTORIES / "missing_template.json"))


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
    history = _with_unknown_state_field(load(HISTORIES / "continue_as_new-run2.json"))
    payload = history.events[0].workflow_execution_started_event_attributes.input.payloads[0]
    assert b"fieldFromAnotherRelease" in payload.data
    replayer = Replayer(workflows=[ClusterWorkflow], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
