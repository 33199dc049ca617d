"""Reliability, part 2: the Temporal server restarted (SIGTERM or SIGKILL, a seeded choice; the
dev server started again on the same port and SQLite database) in the middle of cluster and
workspace operations, at seeded moments of their progress: every operation resumes and finishes
as it would have (create, scale up, scale down with a drain, delete; deploy with a prerequisite,
suspend, resume, delete), every host is claimed once and released once, nothing is created twice
and nothing is left behind.

The two paths run at the same time, so most restarts fall while both have work in flight; the
worker and the API stay up through each restart (the API answers 503 meanwhile, and the suite's
client sends the request again with the same Idempotency-Key).
"""

from __future__ import annotations

import asyncio

import pytest

from tests.reliability.invariants import check_creates, check_hosts
from tests.reliability.paths import cluster_path, reinstalled, workspace_path
from tests.reliability.scenario import (
    Disruptor,
    Scenario,
    Size,
    combined,
    history_progress,
    leftovers,
    records_progress,
    restart_temporal,
)
from tests.reliability.stack import ORGANIZATION

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SIZES = [
    pytest.param(Size.FAST, id="fast"),
    pytest.param(Size.FULL, id="full", marks=[pytest.mark.reliability, pytest.mark.timeout(900)]),
]


@pytest.mark.parametrize("size", SIZES)
async def test_operations_finish_across_temporal_restarts(scenario: Scenario, size: Size) -> None:
    restarts = 6 if scenario.full else 2
    stack = scenario.stack
    window = await scenario.records_mark()
    workflows: list[str] = []
    progress = combined(records_progress(stack), history_progress(stack.client, workflows))
    clusters = (f"restart-{size.value}-c", f"restart-{size.value}-w")
    async with Disruptor(
        scenario,
        progress,
        times=restarts,
        units=400 if scenario.full else 120,
        action=restart_temporal,
        jitter=1.0,
    ) as restarter:
        paths = await asyncio.gather(
            cluster_path(scenario, clusters[0], workflows, beside=clusters[1]),
            workspace_path(scenario, clusters[1], workflows),
        )
    scenario.report(**restarter.figures("restarts"), sent_again=stack.api.sent_again)
    scenario.report(restarted_with=[d.what for d in restarter.done])
    assert len(restarter.done) >= restarts, scenario.failure(
        f"the operations finished after {len(restarter.done)} of {restarts} restarts"
    )
    records = await scenario.records_since(window)
    scenario.check(
        check_hosts(records["hosts"], owners=[f"cluster/{ORGANIZATION}/{c}/" for c in clusters])
    )
    resumed = f"{clusters[1]}-nb" if scenario.full else ""
    scenario.check(check_creates(records["objectsCreated"], reinstalled(resumed)))
    assert await leftovers(scenario) == []
    scenario.report(cluster_path=paths[0], workspace_path=paths[1])
