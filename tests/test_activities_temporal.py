"""`TemporalActivities.signal_with_start` when the server answers "already started".

Temporal's time-skipping test server answers one of two callers racing to signal-with-start the
same workflow id that it is already started (a real server never does: the step is atomic). A
loaded run of `test_a_prerequisite_is_installed_once_for_two_concurrent_workspaces` met it: raised
as is, the answer could not be reported as the attempt's failure, the attempt timed out, and the
late retry started a second installation run. These tests give the activity a client that answers
that way and check that it ends as signal-with-start would: the running run signalled, or one that
ended in between started again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.testing import ActivityEnvironment

from activities.errors import CONFLICT
from activities.temporal import START_RACES, TemporalActivities
from models.workspace_api import SignalWithStartRequest

REQUEST = SignalWithStartRequest(
    workflow="PrerequisiteWorkflow",
    workflow_id="prereq/c/t",
    input={},
    signal="prerequisite",
    payload={"request_id": "r-2"},
)


@dataclass
class Described:
    run_id: str
    status: WorkflowExecutionStatus


@dataclass
class RacingTemporal:
    """A client whose signal-with-start answers "already started" `races` times, while the run
    it describes is `status`."""

    races: int
    status: WorkflowExecutionStatus = WorkflowExecutionStatus.RUNNING
    starts: int = 0
    signals: list[tuple[str, str | None, str, Any]] = field(default_factory=list)

    async def start_workflow(self, *args: Any, **kwargs: Any) -> Any:
        self.starts += 1
        if self.starts <= self.races:
            raise WorkflowAlreadyStartedError(REQUEST.workflow_id, REQUEST.workflow)
        return _Started()

    def get_workflow_handle(self, workflow_id: str, *, run_id: str | None = None) -> Any:
        return _Handle(self, workflow_id, run_id)


class _Started:
    result_run_id = "run-new"


@dataclass
class _Handle:
    temporal: RacingTemporal
    workflow_id: str
    run_id: str | None

    async def describe(self) -> Described:
        return Described("run-1", self.temporal.status)

    async def signal(self, name: str, payload: Any) -> None:
        self.temporal.signals.append((self.workflow_id, self.run_id, name, payload))


async def signal_with_start(temporal: RacingTemporal) -> str:
    activities = TemporalActivities(temporal, "queue")  # type: ignore[arg-type]
    result = await ActivityEnvironment().run(activities.signal_with_start, REQUEST)
    return result.run_id


async def test_the_running_run_is_signalled_when_the_server_says_already_started() -> None:
    temporal = RacingTemporal(races=1)
    assert await signal_with_start(temporal) == "run-1"
    assert temporal.starts == 1
    assert temporal.signals == [(REQUEST.workflow_id, "run-1", "prerequisite", REQUEST.payload)]


async def test_a_run_that_ended_in_between_is_started_again() -> None:
    temporal = RacingTemporal(races=1, status=WorkflowExecutionStatus.COMPLETED)
    assert await signal_with_start(temporal) == "run-new"
    assert temporal.starts == 2
    assert temporal.signals == []


async def test_runs_that_keep_starting_and_ending_are_a_conflict_to_retry() -> None:
    temporal = RacingTemporal(races=START_RACES, status=WorkflowExecutionStatus.COMPLETED)
    with pytest.raises(ApplicationError) as raised:
        await signal_with_start(temporal)
    assert raised.value.type == CONFLICT
    assert not raised.value.non_retryable
    assert temporal.starts == START_RACES


async def test_without_a_race_it_is_one_signal_with_start() -> None:
    temporal = RacingTemporal(races=0)
    assert await signal_with_start(temporal) == "run-new"
    assert (temporal.starts, temporal.signals) == (1, [])
