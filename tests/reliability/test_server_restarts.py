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

import pytest

from tests.reliability.disrupted import disrupted_paths
from tests.reliability.scenario import Scenario, Size, restart_temporal

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SIZES = [
    pytest.param(Size.FAST, id="fast"),
    pytest.param(Size.FULL, id="full", marks=[pytest.mark.reliability, pytest.mark.timeout(900)]),
]


@pytest.mark.parametrize("size", SIZES)
async def test_operations_finish_across_temporal_restarts(scenario: Scenario, size: Size) -> None:
    paths = await disrupted_paths(
        scenario,
        f"restart-{size.value}",
        times=6 if scenario.full else 2,
        units=400 if scenario.full else 120,
        action=restart_temporal,
        figures="restarts",
    )
    scenario.report(**paths)
