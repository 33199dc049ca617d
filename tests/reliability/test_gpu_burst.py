"""Reliability, part 4: no over-commit under a burst. 3 x G one-GPU notebooks sent to the API at
once for a cluster of G GPUs: exactly G run, the other 2 x G wait in the order the ledger received
their requests (positions 1 to 2 x G), each release admits the first in line, and at no sampled
moment do the ledger's holders or the child cluster's pods hold more than G GPUs (every half
second: the ledger's `status`, the pods bound to the node and what they request)."""

from __future__ import annotations

import pytest

from tests.reliability.invariants import check_first_come, check_gpu_samples, check_hosts
from tests.reliability.scenario import (
    Burst,
    GpuSampler,
    Scenario,
    Size,
    cluster_gone,
    ledger_order,
    leftovers,
    ready_cluster,
    the_ledger,
)
from tests.reliability.stack import ORGANIZATION

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SIZES = [
    pytest.param(Size.FAST, id="fast"),
    pytest.param(Size.FULL, id="full", marks=[pytest.mark.reliability, pytest.mark.timeout(900)]),
]


@pytest.mark.parametrize("size", SIZES)
async def test_a_burst_never_over_commits(scenario: Scenario, size: Size) -> None:
    # An 8-GPU H100 host (G = 8: 24 notebooks), or an L40S host of 2 GPUs (G = 2: 6 notebooks).
    gpu_model, gpus = ("h100-80gb", 8) if scenario.full else ("l40s-48gb", 2)
    stack = scenario.stack
    cluster = f"burst-{size.value}"
    window = await scenario.records_mark()
    await ready_cluster(
        scenario, cluster, [{"name": "gpu", "sku": {"gpuModelId": gpu_model}, "count": 1}]
    )
    burst = Burst(scenario, cluster, gpu_model, gpus)
    async with GpuSampler(scenario, cluster) as sampler:
        await burst.send()
        await burst.settle(timeout=300)
        await burst.release_all(timeout=120)
    ledger = await the_ledger(scenario, cluster)
    arrivals, admissions = await ledger_order(stack.client, ledger)
    assert sorted(arrivals) == sorted(burst.names), scenario.failure(repr(arrivals))
    # Exactly G ran at first: the first G the ledger received.
    assert burst.running_at_settle == sorted(arrivals[:gpus]), scenario.failure(
        f"running {burst.running_at_settle}, first received {arrivals[:gpus]}"
    )
    # The others waited in the order received: positions 1..2G.
    waiting_order = sorted(burst.first_positions, key=burst.first_positions.__getitem__)
    assert sorted(burst.first_positions.values()) == list(range(1, 2 * gpus + 1))
    assert waiting_order == arrivals[gpus:], scenario.failure(
        f"positions {burst.first_positions}, received {arrivals}"
    )
    scenario.check(check_first_come(arrivals, admissions))
    scenario.check(check_gpu_samples(sampler.samples, capacity=gpus))
    assert len(sampler.samples) > sampler.ledger_unanswered, scenario.failure("no ledger sample")
    await cluster_gone(scenario, cluster)
    records = await scenario.records_since(window)
    scenario.check(check_hosts(records["hosts"], owners=[f"cluster/{ORGANIZATION}/{cluster}/"]))
    assert await leftovers(scenario) == []
    scenario.report(
        gpus=gpus,
        notebooks=len(burst.names),
        api_accepted_in_received_order=burst.accepted_order == arrivals,
        ledger_unanswered_samples=sampler.ledger_unanswered,
    )
