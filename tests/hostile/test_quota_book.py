"""The quota ledger's pure decisions (`models.quota.QuotaBook`) and what entities are counted by
(`cluster_need`): which quota an admission would exceed and how the refusal reads, creates that
find their name held, reports that only ever lower, audits that forget what is gone, and the
location share that keeps one organization from taking a location's whole stock of a SKU."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from models.node_pool import NodePoolSpec, NodePoolStatus, NodeSku
from models.operations import AddNodePoolRequest, DeleteNodePoolRequest, ScaleNodePoolRequest
from models.quota import (
    DEFAULT_LIMITS,
    PENDING_GRACE,
    AdmitQuotaRequest,
    HoldingReport,
    QuotaBook,
    QuotaFacts,
    QuotaHolding,
    QuotaLedgerState,
    QuotaLimits,
    QuotaName,
    ReleaseQuotaRequest,
    cluster_need,
    share_limit,
)

NOW = datetime(2026, 12, 4, tzinfo=UTC)
CPU = "fra1/cpu:cpu-32c-256g"
H100 = "fra1/gpu:h100-80gb"
FACTS = QuotaFacts(gpus_per_host={"h100-80gb": 8}, stock={CPU: 6, H100: 8})


def book(**limits: float) -> QuotaBook:
    state = QuotaLedgerState(organization="evil")
    state.overrides = QuotaLimits.model_validate(limits)
    return QuotaBook(state)


def create(holder: str, hosts: dict[str, int] | None = None, **extra: object) -> AdmitQuotaRequest:
    return AdmitQuotaRequest.model_validate(
        {
            "holder": holder,
            "request_id": f"r-{holder}",
            "need": QuotaHolding(clusters=1, hosts=hosts or {}),
            "creates": True,
            "defaults": DEFAULT_LIMITS,
            "facts": FACTS,
            **extra,
        }
    )


def test_six_small_clusters_cannot_take_a_location_s_whole_sku() -> None:
    """Issue 25: evil's six 1-host clusters took all six cpu-32c-256g hosts of fra1."""
    ledger = book()
    admitted = []
    for index in range(6):
        request = create(f"cluster/evil/c{index}", {CPU: 1})
        problem = ledger.problem(request)
        if problem is None:
            ledger.admit(request, NOW)
            admitted.append(index)
        else:
            assert problem.quota is QuotaName.LOCATION_SHARE
            assert problem.message("evil") == (
                "organization 'evil' would exceed its location share of 50% of location "
                "'fra1''s 6 cpu-32c-256g hosts (at most 3): 3 in use, 1 more asked"
            )
            assert problem.field == "quota.locationShare"
    assert admitted == [0, 1, 2]
    assert ledger.usage().hosts == 3


@pytest.mark.parametrize(
    ("limits", "need", "quota", "message"),
    [
        pytest.param(
            {"clusters": 2},
            {},
            QuotaName.CLUSTERS,
            "organization 'evil' would exceed its quota of 2 clusters: 2 in use, 1 more asked",
            id="clusters",
        ),
        pytest.param(
            {"hosts": 3, "location_share": 1.0},
            {CPU: 2},
            QuotaName.HOSTS,
            "organization 'evil' would exceed its quota of 3 hosts: 2 in use, 2 more asked",
            id="hosts",
        ),
        pytest.param(
            {"gpus": 16},
            {H100: 2},
            QuotaName.GPUS,
            "organization 'evil' would exceed its quota of 16 GPUs: 8 in use, 16 more asked",
            id="gpus",
        ),
    ],
)
def test_a_refusal_names_the_quota_its_use_and_its_limit(
    limits: dict[str, float], need: dict[str, int], quota: QuotaName, message: str
) -> None:
    ledger = book(**limits)
    first = {CPU: 2} if quota is QuotaName.HOSTS else {H100: 1} if quota is QuotaName.GPUS else {}
    for index in range(2 if quota is QuotaName.CLUSTERS else 1):
        ledger.admit(create(f"cluster/evil/held{index}", first), NOW)
    problem = ledger.problem(create("cluster/evil/more", need))
    assert problem is not None
    assert (problem.quota, problem.message("evil")) == (quota, message)


def test_defaults_apply_where_the_operator_set_nothing() -> None:
    ledger = book(hosts=1)
    request = create("cluster/evil/a", {H100: 1}, defaults=QuotaLimits(gpus=4, hosts=100))
    problem = ledger.problem(request)
    assert problem is not None
    assert (problem.quota, problem.limit) == (QuotaName.GPUS, 4), "the default GPU quota"
    assert ledger.problem(create("cluster/evil/b", {CPU: 2})) is not None, "the override: 1 host"


def test_a_create_finds_its_name_held_by_another_request_but_not_by_its_own() -> None:
    ledger = book()
    first = create("cluster/evil/a")
    ledger.admit(first, NOW)
    assert not ledger.taken(first), "the same request again"
    assert ledger.problem(first) is None
    assert ledger.taken(create("cluster/evil/a", request_id="another"))


def test_growth_raises_a_holding_to_its_need_and_reports_only_lower_it() -> None:
    ledger = book(hosts=4, location_share=1.0)
    ledger.admit(create("cluster/evil/a", {CPU: 2}), NOW)
    grow = AdmitQuotaRequest(
        holder="cluster/evil/a", request_id="u1", need=QuotaHolding(clusters=1, hosts={CPU: 4})
    )
    assert ledger.problem(grow) is None, "the cluster's own 2 hosts are not counted twice"
    ledger.admit(grow, NOW)
    assert ledger.usage().hosts == 4
    ledger.report(
        HoldingReport(
            request_id="r1",
            holder="cluster/evil/a",
            holding=QuotaHolding(clusters=1, hosts={CPU: 9}),
        ),
        NOW,
    )
    assert ledger.usage().hosts == 4, "a report never raises"
    ledger.report(
        HoldingReport(
            request_id="r2",
            holder="cluster/evil/a",
            holding=QuotaHolding(clusters=1, hosts={CPU: 1}),
        ),
        NOW,
    )
    assert (ledger.usage().hosts, ledger.usage().clusters) == (1, 1)
    ledger.report(HoldingReport(request_id="r3", holder="cluster/evil/a", closed=True), NOW)
    assert ledger.usage().clusters == 0
    assert ledger.state.holders == {}


def test_a_release_forgets_only_an_unconfirmed_create_of_its_own_request() -> None:
    ledger = book()
    ledger.admit(create("cluster/evil/a"), NOW)
    assert not ledger.release(ReleaseQuotaRequest(holder="cluster/evil/a", request_id="other"))
    assert ledger.release(
        ReleaseQuotaRequest(holder="cluster/evil/a", request_id="r-cluster/evil/a")
    )
    ledger.admit(create("cluster/evil/b"), NOW)
    ledger.report(
        HoldingReport(request_id="x", holder="cluster/evil/b", holding=QuotaHolding(clusters=1)),
        NOW,
    )
    assert not ledger.release(
        ReleaseQuotaRequest(holder="cluster/evil/b", request_id="r-cluster/evil/b")
    ), "confirmed by its workflow: it runs"


def test_an_audit_forgets_holders_whose_workflows_are_gone_after_the_grace() -> None:
    ledger = book()
    ledger.admit(create("cluster/evil/running"), NOW)
    ledger.admit(create("cluster/evil/young"), NOW + PENDING_GRACE)
    ledger.admit(create("cluster/evil/never-started"), NOW)
    ledger.report(HoldingReport(request_id="t", holder="cluster/evil/terminated"), NOW)
    later = NOW + PENDING_GRACE + timedelta(seconds=1)
    gone = ledger.forget_gone(["cluster/evil/running"], later)
    assert sorted(gone) == ["cluster/evil/never-started", "cluster/evil/terminated"]
    assert sorted(ledger.state.holders) == ["cluster/evil/running", "cluster/evil/young"]
    assert not ledger.audit_due(later)


def test_a_cluster_holds_the_peak_of_its_pools_and_its_queue() -> None:
    gpu, cpu = NodeSku(gpu_model_id="h100-80gb"), NodeSku(cpu_sku="cpu-32c-256g")
    pools = [
        NodePoolStatus(name="gpu", sku=gpu, count=2),
        NodePoolStatus(name="cpu", sku=cpu, count=1),
    ]
    queue = [
        DeleteNodePoolRequest(pool="gpu"),
        ScaleNodePoolRequest(pool="cpu", count=3),
        AddNodePoolRequest(pool=NodePoolSpec(name="more", sku=gpu, count=1)),
    ]
    need = cluster_need("fra1", pools, queue)
    assert need == QuotaHolding(clusters=1, hosts={CPU: 3, H100: 2})


@pytest.mark.parametrize(
    ("stock", "share", "limit"),
    [
        pytest.param(6, 0.5, 3, id="half of six"),
        pytest.param(1, 0.5, 1, id="a single host still serves someone"),
        pytest.param(7, 0.5, 3, id="rounded down"),
        pytest.param(8, 1.0, 8, id="all"),
    ],
)
def test_the_share_of_a_location(stock: int, share: float, limit: int) -> None:
    assert share_limit(stock, share) == limit
