"""The pure rules about workflows that cannot make progress (`models.purge`) and the clients'
reading of Temporal's answers (`clients.temporal.unanswered`): when a workflow is stuck,
what a person is told, and which targets a purge takes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from temporalio.service import RPCError, RPCStatusCode

from clients.errors import InvalidRequestError
from clients.purges import checked_target
from clients.temporal import unanswered
from models.identity import Entity
from models.purge import (
    NOT_TAKEN_AFTER,
    PurgeOutcome,
    PurgeReport,
    PurgeTarget,
    RemovedObject,
    Unresponsive,
    task_trouble,
    unanswered_workspaces,
    with_commands,
)

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
ID = "workspace/evil/deep200"


@pytest.mark.parametrize(
    ("attempt", "started", "waited", "expected"),
    [
        pytest.param(1, True, timedelta(hours=1), None, id="a task in progress is fine"),
        pytest.param(1, False, timedelta(seconds=5), None, id="a task just scheduled is fine"),
        pytest.param(
            1, False, NOT_TAKEN_AFTER, (False, 0, "no worker has taken"), id="a task nobody takes"
        ),
        pytest.param(2, True, timedelta(0), (False, 1, "failed once"), id="one failure"),
        pytest.param(3, True, timedelta(0), (True, 2, "2 times in a row"), id="two failures"),
        pytest.param(40, False, timedelta(0), (True, 39, "39 times"), id="many failures"),
    ],
)
def test_a_workflow_is_stuck_after_its_task_failed_twice_in_a_row(
    attempt: int, started: bool, waited: timedelta, expected: tuple[bool, int, str] | None
) -> None:
    found = task_trouble(
        ID,
        attempt=attempt,
        started=started,
        scheduled=NOW - waited,
        now=NOW,
        failure="Failed decoding arguments",
    )
    if expected is None:
        assert found is None
        return
    assert found is not None
    stuck, failed, said = expected
    assert (found.stuck, found.failed_tasks, found.workflow_id) == (stuck, failed, ID)
    assert said in found.reason
    assert ("Failed decoding arguments" in found.reason) == bool(failed)


def test_a_stuck_workflow_says_what_clears_it() -> None:
    trouble = Unresponsive(workflow_id=ID, reason="its workflow task failed 3 times", stuck=True)
    found = with_commands(trouble, Entity.WORKSPACE, "evil", "deep200")
    assert found.clear_with == [
        "colonyctl workspace delete deep200",
        "colonyctl workspace purge deep200 --organization evil",
    ]
    assert found.reason == (
        "its workflow task failed 3 times; it cannot make progress: `colonyctl workspace delete "
        "deep200` ends it and removes what it made (an operator: `colonyctl workspace purge "
        "deep200 --organization evil`)"
    )
    hiccup = with_commands(trouble.model_copy(update={"stuck": False}), Entity.CLUSTER, "", "c")
    assert hiccup.reason == "its workflow task failed 3 times"
    assert hiccup.clear_with[1] == "colonyctl cluster purge c"


def test_a_cluster_delete_names_each_workspace_that_cannot_answer() -> None:
    message = unanswered_workspaces(
        "c1",
        [
            Unresponsive(workflow_id=ID, reason="its workflow task failed 2 times in a row"),
            Unresponsive(workflow_id="workspace/nb", reason="no worker has taken it for 61s"),
        ],
    )
    assert message == (
        "workspaces of cluster 'c1' cannot answer its delete: 'deep200' (workflow "
        f"{ID}: its workflow task failed 2 times in a row; clear it with `colonyctl workspace "
        "delete deep200`, or an operator with `colonyctl workspace purge deep200 --organization "
        "evil`); 'nb' (workflow workspace/nb: no worker has taken it for 61s; clear it with "
        "`colonyctl workspace delete nb`, or an operator with `colonyctl workspace purge nb`); "
        "then repeat the cluster's delete"
    )


def test_a_report_says_what_was_removed() -> None:
    target = PurgeTarget(entity=Entity.WORKSPACE, organization="evil", name="deep200")
    report = PurgeReport(
        target=target,
        workflow_id=ID,
        outcome=PurgeOutcome.PURGED,
        terminated=True,
        reason="its workflow task failed 2 times in a row",
        removed=[RemovedObject(kind="Namespace", name="ws-deep200", cluster="evil-c1--x")],
        gpu_requests_released=["deep200/r#1"],
        ports_released=[30022],
        left=["ServiceSet s: its release was not uninstalled within 15m"],
    )
    assert report.describe() == (
        f"workspace 'deep200' of organization 'evil' purged: its workflow {ID} was terminated "
        "(its workflow task failed 2 times in a row); removed: Namespace ws-deep200 on "
        "evil-c1--x; released in the ledger: GPU request deep200/r#1, gateway port 30022; left: "
        "ServiceSet s: its release was not uninstalled within 15m"
    )
    swept = PurgeReport(target=target, workflow_id=ID, outcome=PurgeOutcome.SWEPT)
    assert swept.describe() == (
        f"workspace 'deep200' of organization 'evil': its workflow {ID} had ended; what it left "
        "was removed; removed: nothing"
    )


@pytest.mark.parametrize(
    ("entity", "organization", "name", "problem"),
    [
        pytest.param(Entity.COLONY, "evil", "x", "kind: a colony is not purged", id="colony"),
        pytest.param(Entity.WORKSPACE, "Evil!", "nb", "organization: ", id="organization"),
        pytest.param(Entity.WORKSPACE, "evil", "a/b", "name: ", id="workspace name"),
        pytest.param(Entity.CLUSTER, "evil", "Bad_Name", "name: ", id="cluster name"),
    ],
)
def test_a_purge_refuses_what_no_entity_can_be(
    entity: Entity, organization: str, name: str, problem: str
) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        checked_target(entity, organization, name)
    assert refused.value.message.startswith(problem)


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        pytest.param(RPCStatusCode.FAILED_PRECONDITION, True, id="workflow task failed state"),
        pytest.param(RPCStatusCode.CANCELLED, True, id="the client's timeout"),
        pytest.param(RPCStatusCode.DEADLINE_EXCEEDED, True, id="the server's deadline"),
        pytest.param(RPCStatusCode.UNAVAILABLE, False, id="Temporal itself is down"),
        pytest.param(RPCStatusCode.NOT_FOUND, False, id="no such workflow"),
    ],
)
def test_only_a_workflow_that_does_not_answer_is_shown_in_its_place(
    status: RPCStatusCode, expected: bool
) -> None:
    assert unanswered(RPCError("x", status, b"")) is expected
