"""The reliability invariants catch what they must: each check on records that hold it and on
records that break it (a missed or double eviction, a host claimed twice or never released, an
object created twice or two for one identity, a GPU held twice, a request overtaken)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.reliability.invariants import (
    GpuSample,
    PodGpus,
    PodRef,
    check_creates,
    check_evictions,
    check_first_come,
    check_gpu_samples,
    check_hosts,
)

PODS = [
    PodRef("c", "default", "a", "u-a", "n1"),
    PodRef("c", "default", "b", "u-b", "n1"),
    PodRef("c", "kube-system", "cilium-1", "u-ds", "n1", daemon_set=True),
    PodRef("c", "default", "kept", "u-kept", "n2"),
]


def eviction(seq: int, uid: str, *, repeat: bool = False) -> dict[str, Any]:
    name = {"u-a": "a", "u-b": "b", "u-ds": "cilium-1", "u-kept": "kept"}.get(uid, uid)
    node = "n2" if uid == "u-kept" else "n1"
    return {
        "seq": seq,
        "cluster": "c",
        "namespace": "default",
        "name": name,
        "uid": uid,
        "node": node,
        "repeat": repeat,
    }


def test_evictions_once_with_repeats_after_a_crash() -> None:
    records = [eviction(1, "u-a"), eviction(2, "u-a", repeat=True), eviction(3, "u-b")]
    check = check_evictions(records, PODS, {"n1"})
    assert check.holds, check.explain()
    assert check.figures == {
        "pods_on_drained_nodes": 2,
        "evictions": 2,
        "repeated_evictions": 1,
    }


@pytest.mark.parametrize(
    ("records", "violation"),
    [
        pytest.param([eviction(1, "u-a")], "default/b on n1: never evicted", id="missed"),
        pytest.param(
            [eviction(1, "u-a"), eviction(2, "u-b"), eviction(3, "u-a")],
            "c/default/a on n1: evicted twice",
            id="twice",
        ),
        pytest.param(
            [eviction(1, "u-a"), eviction(2, "u-b"), eviction(3, "u-kept")],
            "c/default/kept on n2: evicted, but it is on a node that was not drained",
            id="kept-node",
        ),
        pytest.param(
            [eviction(1, "u-a"), eviction(2, "u-b"), eviction(3, "u-ds")],
            "evicted, but it is a DaemonSet pod",
            id="daemonset",
        ),
        pytest.param(
            [eviction(1, "u-a", repeat=True), eviction(2, "u-a"), eviction(3, "u-b")],
            "repeated eviction before any eviction",
            id="repeat-first",
        ),
    ],
)
def test_evictions_violations(records: list[dict[str, Any]], violation: str) -> None:
    check = check_evictions(records, PODS, {"n1"})
    assert any(violation in v for v in check.violations), check.violations


def host(seq: int, host_id: str, change: str, owner: str = "cluster/o/c/1") -> dict[str, Any]:
    return {"seq": seq, "hostId": host_id, "change": change, "claim": "k", "owner": owner}


def test_hosts_claimed_once_released_once() -> None:
    records = [
        host(1, "h1", "claimed"),
        host(2, "h2", "claimed"),
        host(3, "h1", "claim-repeated"),
        host(4, "h2", "released"),
        host(5, "h1", "released"),
    ]
    check = check_hosts(records, owners=["cluster/o/c/"])
    assert check.holds, check.explain()
    assert check.figures == {"hosts": 2, "claims": 2, "releases": 2, "claims_answered_again": 1}


def test_a_host_held_in_turn_by_two_clusters() -> None:
    records = [
        host(1, "h1", "claimed", owner="cluster/o/c/1"),
        host(2, "h1", "released", owner="cluster/o/c/1"),
        host(3, "h1", "claimed", owner="cluster/o/c/2"),
        host(4, "h1", "released", owner="cluster/o/c/2"),
    ]
    check = check_hosts(records, owners=["cluster/o/c/"])
    assert check.holds, check.explain()
    assert check.figures["claims"] == 2


@pytest.mark.parametrize(
    ("records", "violation"),
    [
        pytest.param(
            [host(1, "h1", "claimed")],
            "h1: claimed by 'cluster/o/c/1' and never released",
            id="leak",
        ),
        pytest.param(
            [
                host(1, "h1", "claimed"),
                host(2, "h1", "released"),
                host(3, "h1", "claimed"),
                host(4, "h1", "released"),
            ],
            "h1: changed hands ['claimed', 'released', 'claimed', 'released'] for 'cluster/o/c/1'",
            id="claimed-twice",
        ),
        pytest.param(
            [host(1, "h1", "released")], "h1: changed hands ['released']", id="released-unclaimed"
        ),
        pytest.param(
            [host(1, "h1", "claimed", owner="cluster/o/other/1"), host(2, "h1", "released")],
            "h1: claimed for 'cluster/o/other/1'",
            id="foreign-owner",
        ),
    ],
)
def test_hosts_violations(records: list[dict[str, Any]], violation: str) -> None:
    check = check_hosts(records, owners=["cluster/o/c/"])
    assert any(violation in v for v in check.violations), check.violations


def created(
    name: str,
    *,
    resource: str = "servicesets",
    namespace: str = "kcm-system",
    marks: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "cluster": "management",
        "group": "k0rdent.mirantis.com",
        "resource": resource,
        "namespace": namespace,
        "name": name,
        "labels": {"colony.dev/workspace": name, "app": "x"} if marks is None else marks,
        "annotations": {},
    }


def test_creates_once_each_identity_one_object() -> None:
    records = [
        created("nb1"),
        created("nb2"),
        created("nb1", resource="secrets"),
        created("unmarked-1", marks={}),
        created("unmarked-2", marks={}),
    ]
    check = check_creates(records)
    assert check.holds, check.explain()
    assert check.figures["objects_created"] == 5


def test_an_object_created_twice() -> None:
    check = check_creates([created("nb1"), created("nb1")])
    assert check.violations == ["management servicesets kcm-system/nb1: created 2 times"]


def test_an_object_made_again_on_purpose() -> None:
    records = [created("nb1"), created("nb1"), created("nb2")]
    resumed = check_creates(records, lambda record: 2 if record["name"] == "nb1" else 1)
    assert resumed.holds, resumed.explain()
    thrice = check_creates([*records, created("nb1")], lambda r: 2 if r["name"] == "nb1" else 1)
    assert thrice.violations == ["management servicesets kcm-system/nb1: created 3 times"]


def test_two_objects_for_one_identity() -> None:
    marks = {"colony.dev/workspace": "nb1"}
    check = check_creates([created("nb1-a", marks=marks), created("nb1-b", marks=marks)])
    assert check.violations == [
        "management servicesets: 2 objects for one identity (colony.dev/workspace=nb1): "
        "['kcm-system/nb1-a', 'kcm-system/nb1-b']"
    ]


def sample(
    holders: list[tuple[str, int, tuple[str, ...]]],
    pods: list[PodGpus],
    nodes: dict[str, int] | None = None,
) -> GpuSample:
    return GpuSample(0.0, nodes or {"n1": 2}, holders, pods)


def gpu_pod(name: str, *, phase: str = "Running", gpus: int = 1, reason: str = "") -> PodGpus:
    return PodGpus(f"ws-{name}", name, "n1", gpus, phase, terminating=False, reason=reason)


def test_gpus_held_once() -> None:
    samples = [
        sample(
            [("a", 1, ("n1",)), ("b", 1, ("n1",))],
            [gpu_pod("a"), gpu_pod("b"), gpu_pod("old", phase="Succeeded")],
        )
    ]
    check = check_gpu_samples(samples, capacity=2)
    assert check.holds, check.explain()
    assert check.figures["peak_gpus_held_by_pods"] == 2


@pytest.mark.parametrize(
    ("gpu_sample", "violation"),
    [
        pytest.param(
            sample([("a", 1, ("n1",)), ("b", 1, ("n1",)), ("c", 1, ("n1",))], []),
            "the ledger's holders hold 3 of 2 GPUs",
            id="ledger-total",
        ),
        pytest.param(
            sample([("a", 2, ("n1",))], [], nodes={"n1": 1, "n2": 1}),
            "the ledger places 2 GPUs on n1, which has 1",
            id="ledger-node",
        ),
        pytest.param(
            sample([], [gpu_pod("a"), gpu_pod("b"), gpu_pod("c")]),
            "pods on n1 hold 3 GPUs of 2",
            id="pods",
        ),
        pytest.param(
            sample([], [gpu_pod("a", phase="Failed", reason="OutOfnvidia.com/gpu")]),
            "refused by its kubelet",
            id="kubelet",
        ),
    ],
)
def test_gpus_held_twice(gpu_sample: GpuSample, violation: str) -> None:
    check = check_gpu_samples([gpu_sample], capacity=2)
    assert any(violation in v for v in check.violations), check.violations


def test_first_come_first_served() -> None:
    assert check_first_come(["a", "b", "c"], ["a", "b", "c"]).holds
    overtaken = check_first_come(["a", "b", "c"], ["a", "c", "b"])
    assert overtaken.violations == ["c (arrived 3) admitted while b (arrived 2) still waited"]
    unknown = check_first_come(["a"], ["a", "x"])
    assert "x: admitted without a request the ledger received" in unknown.violations
