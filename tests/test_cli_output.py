"""How `colonyctl` prints: whole cells when stdout is not a terminal, taints as kubectl writes them,
operation durations, a list as a table or as records of its fields.

Under pytest stdout is not a terminal, as in a pipe: nothing may be cut or wrapped.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from clients.colonies import ColonySummary
from models.cluster import ClusterPhase, ClusterStatus
from models.node_pool import NodePoolStatus, NodeSku, Taint, TaintEffect
from models.operations import (
    Operation,
    OperationState,
    ScaleNodePoolRequest,
)
from starter import output, session
from starter.options import OutputFormat

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("taint", "text"),
    [
        pytest.param(
            Taint(key="dedicated", value="gpu", effect=TaintEffect.NO_SCHEDULE),
            "dedicated=gpu:NoSchedule",
            id="key-value",
        ),
        pytest.param(
            Taint(key="gpu", effect=TaintEffect.NO_EXECUTE), "gpu:NoExecute", id="key-only"
        ),
        pytest.param(
            Taint(key="example.com/x", value="1", effect=TaintEffect.PREFER_NO_SCHEDULE),
            "example.com/x=1:PreferNoSchedule",
            id="prefixed",
        ),
    ],
)
def test_taints_print_as_kubectl_prints_them(taint: Taint, text: str) -> None:
    assert output.taint_text(taint) == text


@pytest.mark.parametrize(
    ("started", "finished", "now", "text"),
    [
        pytest.param(None, None, T0, "-", id="queued"),
        pytest.param(T0, T0 + timedelta(seconds=42), None, "42s", id="seconds"),
        pytest.param(T0, T0 + timedelta(seconds=125), None, "2m05s", id="minutes"),
        pytest.param(T0, T0 + timedelta(hours=1, minutes=3), None, "1h03m", id="hours"),
        pytest.param(T0, None, T0 + timedelta(seconds=7), "7s", id="running"),
    ],
)
def test_operation_duration(
    started: datetime | None, finished: datetime | None, now: datetime | None, text: str
) -> None:
    operation = Operation(
        id="op-0002",
        request=ScaleNodePoolRequest(pool="gpu", count=2),
        started_at=started,
        finished_at=finished,
    )
    assert output.duration_text(operation, now) == text


def test_plain_tables_keep_every_cell_whole() -> None:
    long_cell = "blocked by " + "; ".join(f"default/train-{i}: budget" for i in range(30))
    text = output.plain_table(["ID", "DETAIL"], [("op-0001", long_cell), ("op-0002", "-")])
    lines = text.splitlines()
    assert lines[0].split() == ["ID", "DETAIL"]
    assert lines[1] == f"op-0001   {long_cell}"
    assert lines[2] == "op-0002   -"


def test_cluster_get_off_a_terminal_prints_whole_cells(capsys: pytest.CaptureFixture[str]) -> None:
    reason = "control plane waits on " + "x" * 300
    failed = Operation(
        id="op-0002",
        request=ScaleNodePoolRequest(pool="gpu", count=3),
        state=OperationState.FAILED,
        reason="drain did not finish: " + "pod " * 80,
        submitted_at=T0,
        started_at=T0,
        finished_at=T0 + timedelta(seconds=90),
    )
    status = ClusterStatus(
        name="training",
        location_id="fra1",
        phase=ClusterPhase.READY,
        reason=reason,
        node_pools=[
            NodePoolStatus(
                name="gpu",
                sku=NodeSku(gpu_model_id="h100-80gb"),
                count=2,
                ready_count=2,
                labels={"team": "ml"},
                taints=[
                    Taint(key="dedicated", value="gpu", effect=TaintEffect.NO_SCHEDULE),
                    Taint(key="gpu", effect=TaintEffect.NO_EXECUTE),
                ],
            )
        ],
        completed_operations=[failed],
    )
    output.print_cluster(status)
    printed = capsys.readouterr().out
    assert reason in printed
    assert " ".join(failed.reason.split()) in printed
    assert "dedicated=gpu:NoSchedule,gpu:NoExecute" in printed
    assert "1m30s" in printed
    assert "…" not in printed


@pytest.mark.parametrize(
    ("left", "shown"),
    [
        pytest.param(timedelta(minutes=41, seconds=7), "41m07s", id="minutes"),
        pytest.param(timedelta(hours=1, minutes=2), "1h02m", id="hours"),
        pytest.param(timedelta(seconds=-5), "0s", id="passed"),
    ],
)
def test_a_draining_node_shows_the_time_left_of_its_own_deadline(
    left: timedelta, shown: str
) -> None:
    from models.operations import NodeProgress, Operation, OperationProgress, ScaleNodePoolRequest
    from starter.output import node_progress_rows

    now = datetime(2026, 1, 1, tzinfo=UTC)
    operation = Operation(
        id="op-0002",
        request=ScaleNodePoolRequest(pool="gpu", count=1),
        progress=OperationProgress(
            nodes=[
                NodeProgress(
                    node="n1",
                    step="draining",
                    drain_deadline=now + left,
                    blocking_pods=["default/db-0: budget"],
                ),
                NodeProgress(node="n2", step="removed", drain_deadline=now),
            ]
        ),
    )
    rows = node_progress_rows(operation, now)
    assert rows[0][5] == shown
    assert rows[0][6] == "default/db-0: budget"
    assert rows[1][5] == "-"


def test_a_list_is_a_table_or_records_of_its_fields(capsys: pytest.CaptureFixture[str]) -> None:
    async def fetch() -> list[ColonySummary]:
        return [
            ColonySummary("east", "Ready", "colony/acme/east", organization="acme"),
            ColonySummary("west", "Provisioning", "colony//west", web_ui="http://ui/west"),
        ]

    fields = ("name", "organization", "phase", "workflow_id")
    session.show_list(fetch, OutputFormat.TABLE, output.print_colonies, fields)
    assert capsys.readouterr().out.splitlines() == [
        "ORGANIZATION   NAME   PHASE",
        "acme           east   Ready",
        "-              west   Provisioning",
    ]
    session.show_list(fetch, OutputFormat.JSON, output.print_colonies, fields)
    assert json.loads(capsys.readouterr().out) == [
        {
            "name": "east",
            "organization": "acme",
            "phase": "Ready",
            "workflowId": "colony/acme/east",
        },
        {"name": "west", "organization": "", "phase": "Provisioning", "workflowId": "colony//west"},
    ]


def test_a_followed_drain_off_a_terminal_prints_whole_cells(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--wait` piped (stderr not a terminal): the drain's table at the end, each cell whole and
    on its own line, as the other tables off a terminal; nothing cut or wrapped."""
    from models.operations import NodeProgress, OperationProgress

    node = "training-gpu-h100-80gb-0003"
    blocking = [
        f"default/training-job-worker-{i}: Cannot evict pod as it would violate the pod's "
        "disruption budget"
        for i in range(3)
    ]
    draining = Operation(
        id="op-0002",
        request=ScaleNodePoolRequest(pool="gpu", count=1),
        state=OperationState.RUNNING,
        started_at=T0,
        progress=OperationProgress(
            nodes=[
                NodeProgress(
                    node=node,
                    step="draining",
                    pods_remaining=3,
                    drain_deadline=T0 + timedelta(hours=1),
                    blocking_pods=blocking,
                )
            ]
        ),
    )
    status = ClusterStatus(name="training", location_id="fra1", phase=ClusterPhase.READY)

    class Following:
        async def wait_for_operation(
            self, cluster: str, operation_id: str, show: Any, give_up_after: float | None
        ) -> Operation:
            show(status, draining)
            return draining

    from starter.submit import follow

    assert asyncio.run(follow(Following(), "training", "op-0002", None)) is draining  # type: ignore[arg-type]
    printed = capsys.readouterr().err
    assert "…" not in printed
    (row,) = [line for line in printed.splitlines() if line.startswith(node)]
    assert row.split()[:4] == [node, "draining", "0", "3"]
    assert row.endswith("; ".join(blocking))
    assert "2026-11-30T13:00:00Z" in row
