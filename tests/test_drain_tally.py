"""`DrainTally`: a drain's eviction count across attempts (pure logic of `drain_node`)."""

from __future__ import annotations

import pytest

from models.activity_api import DrainHeartbeat, DrainLedger, DrainProgress, PodInfo
from models.drain import DrainTally


def pod(name: str, *, terminating: bool = False) -> PodInfo:
    return PodInfo(namespace="default", name=name, uid=f"uid-{name}", terminating=terminating)


def test_a_first_attempt_counts_the_evictions_accepted() -> None:
    tally = DrainTally.resume(None)
    assert tally.request([pod("a"), pod("b")]) is True
    assert tally.request([pod("a"), pod("b")]) is False, "asked already: nothing to write ahead"
    tally.evicted(pod("a"))
    assert tally.progress().pods_evicted == 1
    heartbeat = tally.heartbeat()
    assert heartbeat.ledger == DrainLedger(requested=["uid-a", "uid-b"], evicted=["uid-a"])
    assert heartbeat.pods_evicted == 1


@pytest.mark.parametrize(
    ("now_on_the_node", "counted", "after_evicting_c"),
    [
        pytest.param([pod("b"), pod("c")], 1, 2, id="nothing-more-happened"),
        pytest.param(
            [pod("b", terminating=True), pod("c")], 2, 3, id="accepted-after-the-heartbeat"
        ),
        pytest.param([pod("c")], 2, 3, id="accepted-and-gone"),
        pytest.param([], 3, 3, id="all-gone"),
        # A pod of the same name but another uid is another pod: the one asked for is gone.
        pytest.param([PodInfo(namespace="default", name="b", uid="uid-new")], 3, 3, id="recreated"),
    ],
)
def test_a_resumed_attempt_counts_what_the_crashed_one_evicted(
    now_on_the_node: list[PodInfo], counted: int, after_evicting_c: int
) -> None:
    # The crashed attempt asked for a, b and c, and heartbeated a's acceptance only.
    last = DrainHeartbeat(
        pods_evicted=1,
        ledger=DrainLedger(requested=["uid-a", "uid-b", "uid-c"], evicted=["uid-a"]),
    )
    tally = DrainTally.resume(last)
    tally.settle(now_on_the_node)
    assert tally.progress().pods_evicted == counted
    # Evicting what is left adds to it, once per pod.
    tally.evicted(pod("c"))
    tally.evicted(pod("c"))
    assert tally.progress().pods_evicted == after_evicting_c


def test_a_pod_evicted_twice_is_counted_once() -> None:
    tally = DrainTally.resume(
        DrainHeartbeat(pods_evicted=1, ledger=DrainLedger(requested=["uid-a"], evicted=["uid-a"]))
    )
    tally.settle([])
    tally.evicted(pod("a"))
    assert tally.progress().pods_evicted == 1


def test_details_of_a_worker_without_a_ledger_keep_their_count() -> None:
    # An earlier release heartbeated a plain DrainProgress; read back as a heartbeat, no ledger.
    earlier = DrainHeartbeat.model_validate(
        DrainProgress(pods_evicted=3, pods_deleted=["default/x"]).model_dump(by_alias=True)
    )
    tally = DrainTally.resume(earlier)
    tally.settle([pod("d")])
    tally.request([pod("d")])
    tally.evicted(pod("d"))
    assert tally.progress() == DrainProgress(pods_evicted=4, pods_deleted=["default/x"])


def test_the_progress_a_client_reads_ignores_the_ledger() -> None:
    heartbeat = DrainHeartbeat(pods_evicted=2, ledger=DrainLedger(requested=["u"], evicted=["u"]))
    # `colonyctl` and the Web UI read the details as a DrainProgress.
    assert DrainProgress.model_validate(heartbeat.model_dump(by_alias=True)) == DrainProgress(
        pods_evicted=2
    )
