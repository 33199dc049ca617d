"""Reliability, part 1: the worker killed with SIGKILL at seeded moments, again and again, in the
middle of a drain, of workspace installs that share a prerequisite, and of a burst of GPU
admissions; afterwards every pod was evicted once, every host claimed once and released once, no
object created twice (nor two for one identity), and no two workspaces ever held the same GPU.

Each kill lands after the worker made progress since it started (a seeded number of sim records
and history events, then a seeded jitter of up to half a second), so kills spread over the whole
operation and the next worker always has something to take over. A new `python worker.py` starts
at once; the killed one's activities are retried once their heartbeats stop (10 s).
"""

from __future__ import annotations

import pytest

from tests.reliability.disrupted import disrupted_drain, disrupted_installs, owners
from tests.reliability.invariants import (
    check_creates,
    check_first_come,
    check_gpu_samples,
    check_hosts,
)
from tests.reliability.scenario import (
    Burst,
    Disruptor,
    GpuSampler,
    Scenario,
    Size,
    cluster_gone,
    combined,
    history_progress,
    kill_worker,
    ledger_order,
    leftovers,
    ready_cluster,
    records_progress,
    the_ledger,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FULL = pytest.param(
    Size.FULL, id="full", marks=[pytest.mark.reliability, pytest.mark.timeout(1200)]
)
SIZES = [pytest.param(Size.FAST, id="fast"), FULL]
FULL_ONLY = [FULL]
"""The drain and the burst of admissions run in `make reliability` only: `make test` keeps one
kill scenario (the installs), within its two minutes."""


# --- A drain -------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", FULL_ONLY)
async def test_drain_survives_worker_kills(scenario: Scenario, size: Size) -> None:
    """A pool of N+1 nodes, each running bare pods (and the DaemonSet every child runs), scaled to
    1 while the worker is killed: every pod of the N drained nodes evicted once (the DaemonSet's
    left), none of the kept node's; the drain's own count of evictions is the sim's; every host
    claimed once and released once (by the drain or the delete); nothing created twice."""
    drained = await disrupted_drain(
        scenario, f"drain-{size.value}", drained_nodes=20, per_node=3, times=10, action=kill_worker
    )
    scenario.report(**drained, sent_again=scenario.stack.api.sent_again)


# --- Workspace installs sharing a prerequisite ----------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
async def test_installs_with_a_prerequisite_survive_worker_kills(
    scenario: Scenario, size: Size
) -> None:
    """LLM servers (whose class needs the inference stack installed first, once per cluster) and a
    notebook deployed at once on a fresh GPU cluster while the worker is killed: all run, the
    prerequisite is installed once, nothing is created twice, no GPU is held twice; deleting them
    and the cluster leaves nothing. A round whose installs finish before the kills are spent is
    followed by another, on another fresh cluster."""
    servers, kills = (3, 10) if scenario.full else (1, 1)
    installed = await disrupted_installs(
        scenario, f"install-{size.value}", servers=servers, times=kills, action=kill_worker
    )
    scenario.report(**installed, sent_again=scenario.stack.api.sent_again)


# --- A burst of GPU admissions --------------------------------------------------------------------


@pytest.mark.parametrize("size", FULL_ONLY)
async def test_a_burst_of_admissions_survives_worker_kills(scenario: Scenario, size: Size) -> None:
    """3 x G one-GPU notebooks at once on G GPUs (L40S hosts of 2), then released one at a time
    until all have run, while the worker is killed: admitted in the order received, never more
    than G GPUs held (ledger and pods, sampled), nothing created twice, every host claimed once
    and released once."""
    hosts, kills = 2, 10
    gpus = 2 * hosts
    stack = scenario.stack
    cluster = f"admit-{size.value}"
    window = await scenario.records_mark()
    await ready_cluster(
        scenario, cluster, [{"name": "gpu", "sku": {"gpuModelId": "l40s-48gb"}, "count": hosts}]
    )
    burst = Burst(scenario, cluster, "l40s-48gb", gpus)
    ledgers: list[str] = []
    progress = combined(records_progress(stack), history_progress(stack.client, ledgers))

    async with (
        GpuSampler(scenario, cluster) as sampler,
        Disruptor(scenario, progress, times=kills, units=20 * 3 * gpus) as killer,
    ):
        await burst.send()
        ledgers.append(await the_ledger(scenario, cluster))
        await burst.settle(timeout=600)
        await burst.release_all(timeout=300)
    scenario.report(**killer.figures())
    assert len(killer.done) >= kills, scenario.failure(
        f"the burst was over after {len(killer.done)} of {kills} kills"
    )
    arrivals, admissions = await ledger_order(stack.client, ledgers[0])
    scenario.check(check_first_come(arrivals, admissions))
    scenario.check(check_gpu_samples(sampler.samples, capacity=gpus))
    assert len(sampler.samples) > sampler.ledger_unanswered, scenario.failure("no ledger sample")
    records = await scenario.records_since(window)
    scenario.check(check_creates(records["objectsCreated"]))
    await cluster_gone(scenario, cluster)
    records = await scenario.records_since(window)
    scenario.check(check_hosts(records["hosts"], owners=owners(cluster)))
    assert await leftovers(scenario) == []
    scenario.report(
        notebooks=len(burst.names),
        gpus=gpus,
        ledger_unanswered_samples=sampler.ledger_unanswered,
        sent_again=stack.api.sent_again,
    )
