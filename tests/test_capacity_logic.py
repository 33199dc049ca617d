"""The GPU capacity ledger: admission, placement, waiting in order, release, inventory changes,
idempotency, scale-down refusal; and a property-based test of random interleavings with crashes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.capacity import (
    FINISHED_KEPT,
    CapacityLedger,
    CapacityLedgerState,
    CapacityRequest,
    Decision,
    GpuNode,
    GpuSelector,
    gpu_node,
    scale_down_problem,
)
from models.workspace_class import GPU_MODEL_LABEL, GpuVendor

H100 = GpuSelector(labels={GPU_MODEL_LABEL: "H100"})
A100 = GpuSelector(labels={GPU_MODEL_LABEL: "A100"})
L40_RAW = GpuSelector(labels={"nvidia.com/gpu.product": "NVIDIA-L40"})
ANY = GpuSelector()


def node(name: str, model: str = "H100", gpus: int = 8, **extra: Any) -> GpuNode:
    return GpuNode(name=name, model=model, vendor=GpuVendor.NVIDIA, allocatable=gpus, **extra)


def ledger(*nodes: GpuNode) -> CapacityLedger:
    book = CapacityLedger(CapacityLedgerState(cluster="training"))
    book.refresh_inventory(nodes)
    return book


def ask(
    book: CapacityLedger,
    rid: str,
    replicas: int = 1,
    gpus: int = 1,
    selector: GpuSelector = H100,
    workspace: str | None = None,
) -> Any:
    request = CapacityRequest(
        request_id=rid,
        workspace=workspace or f"ws-{rid}",
        replicas=replicas,
        gpus_per_replica=gpus,
        selector=selector,
    )
    return book.request(request)


@pytest.mark.parametrize(
    ("nodes", "replicas", "gpus", "placed"),
    [
        pytest.param([node("a", gpus=8), node("b", gpus=4)], 1, 4, ["b"], id="best-fit"),
        pytest.param(
            [node("a", gpus=4), node("b", gpus=4)], 2, 4, ["a", "b"], id="replica-per-node"
        ),
        pytest.param([node("a", gpus=8)], 2, 4, ["a", "a"], id="replicas-share-a-node"),
        pytest.param(
            [node("a", gpus=3), node("b", gpus=8)], 3, 2, ["a", "b", "b"], id="fill-small-first"
        ),
    ],
)
def test_placement(nodes: list[GpuNode], replicas: int, gpus: int, placed: list[str]) -> None:
    answer = ask(ledger(*nodes), "r1", replicas, gpus).answer
    assert answer.decision is Decision.ADMITTED
    assert [p.node for p in answer.placements] == placed
    assert all(p.gpus == gpus for p in answer.placements)


@pytest.mark.parametrize(
    ("nodes", "replicas", "gpus", "selector", "message"),
    [
        pytest.param(
            [node("a", model="A100")],
            1,
            1,
            H100,
            "cluster 'training' has no GPUs matching exalsius.ai/gpu-model=H100",
            id="no-such-model",
        ),
        pytest.param(
            [node("a", gpus=4), node("b", gpus=4)],
            1,
            8,
            H100,
            "cluster 'training' has 8 GPUs matching exalsius.ai/gpu-model=H100 on 2 nodes, room for "
            "at most 0 replicas of 8; the workspace needs 1",
            id="no-node-big-enough",
        ),
        pytest.param(
            [node("a", gpus=8)],
            3,
            4,
            H100,
            "cluster 'training' has 8 GPUs matching exalsius.ai/gpu-model=H100 on 1 node, room for "
            "at most 2 replicas of 4; the workspace needs 3",
            id="too-few-in-total",
        ),
        pytest.param(
            [node("a", gpus=8)],
            1,
            1,
            GpuSelector(vendor=GpuVendor.AMD),
            "cluster 'training' has no GPUs matching vendor=AMD",
            id="vendor",
        ),
        pytest.param(
            [node("a", model="L40", labels={"nvidia.com/gpu.product": "NVIDIA-L40-S"})],
            1,
            1,
            L40_RAW,
            "cluster 'training' has no GPUs matching nvidia.com/gpu.product=NVIDIA-L40",
            id="raw-selector-is-exact",
        ),
        pytest.param(
            [], 1, 1, ANY, "cluster 'training' has no GPUs matching any GPU", id="no-gpus"
        ),
    ],
)
def test_infeasible_fails_at_once(
    nodes: list[GpuNode], replicas: int, gpus: int, selector: GpuSelector, message: str
) -> None:
    book = ledger(*nodes)
    answer = ask(book, "r1", replicas, gpus, selector).answer
    assert answer.decision is Decision.INFEASIBLE
    assert answer.message == message
    assert not book.state.waiting
    assert not book.state.reservations


@pytest.mark.parametrize(
    ("labels", "allocatable", "expected"),
    [
        pytest.param(
            {"exalsius.ai/gpu-model": "H100", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            {"nvidia.com/gpu": 8, "cpu": 64},
            ("H100", GpuVendor.NVIDIA, "nvidia.com/gpu", 8),
            id="nvidia",
        ),
        pytest.param(
            {"exalsius.ai/gpu-model": "MI300X"},
            {"amd.com/gpu": 8},
            ("MI300X", GpuVendor.AMD, "amd.com/gpu", 8),
            id="amd",
        ),
        pytest.param(
            {"exalsius.ai/gpu-vendor": "AMD"},
            {"nvidia.com/gpu": 0},
            ("", GpuVendor.AMD, "nvidia.com/gpu", 0),
            id="vendor-label",
        ),
        pytest.param({}, {"cpu": 16}, ("", None, "nvidia.com/gpu", 0), id="cpu-node"),
    ],
)
def test_gpu_node_from_the_api(
    labels: dict[str, str], allocatable: dict[str, int], expected: tuple[Any, ...]
) -> None:
    found = gpu_node("n1", labels, allocatable, ready=False, foreign_used=1)
    assert (found.model, found.vendor, found.resource_name, found.allocatable) == expected
    assert (found.ready, found.schedulable, found.foreign_used) == (False, True, 1)


def test_admitted_answers_name_the_gpu_resource() -> None:
    book = ledger(gpu_node("amd-1", {"exalsius.ai/gpu-model": "MI300X"}, {"amd.com/gpu": 8}))
    answer = ask(book, "r1", selector=GpuSelector(vendor=GpuVendor.AMD)).answer
    assert (answer.decision, answer.resource_name) == (Decision.ADMITTED, "amd.com/gpu")


def test_selectors_match_canonical_label_and_raw_labels() -> None:
    book = ledger(
        node("h", model="H100"),
        node("l", model="L40", labels={"nvidia.com/gpu.product": "NVIDIA-L40"}),
        GpuNode(name="amd", vendor=None, resource_name="amd.com/gpu", allocatable=8),
    )
    assert ask(book, "r1", selector=L40_RAW).answer.nodes == ["l"]
    assert ask(book, "r2", selector=H100).answer.nodes == ["h"]
    assert ask(book, "r3", selector=GpuSelector(vendor=GpuVendor.AMD)).answer.nodes == ["amd"]


def test_waiting_in_order_and_release_admits_the_next() -> None:
    book = ledger(node("a", gpus=8))
    assert ask(book, "r1", gpus=8).answer.decision is Decision.ADMITTED
    second = ask(book, "r2", gpus=4).answer
    third = ask(book, "r3", gpus=4).answer
    assert (second.decision, second.position) == (Decision.WAITING, 1)
    assert (third.decision, third.position) == (Decision.WAITING, 2)
    assert second.message == (
        "waiting for GPU capacity: position 1 in the queue for exalsius.ai/gpu-model=H100 "
        "(1 x 4 GPUs (exalsius.ai/gpu-model=H100))"
    )
    released = book.release("r1", "deleted")
    assert released.held
    assert [a.request_id for a in released.changes.admitted] == ["r2", "r3"]
    assert book.answer("r1") is not None
    assert book.answer("r1").decision is Decision.RELEASED  # type: ignore[union-attr]


def test_head_of_line_blocks_later_requests_of_the_same_selector() -> None:
    book = ledger(node("a", gpus=8), node("b", model="A100", gpus=8))
    ask(book, "big-1", gpus=6)
    blocked = ask(book, "big-2", gpus=6).answer
    small = ask(book, "small", gpus=1).answer
    assert blocked.decision is Decision.WAITING
    assert (small.decision, small.position) == (Decision.WAITING, 2), (
        "it would fit, but waits its turn"
    )
    other = ask(book, "other", gpus=8, selector=A100).answer
    assert other.decision is Decision.ADMITTED, "another selector has its own queue"
    changes = book.release("big-1").changes
    assert [a.request_id for a in changes.admitted] == ["big-2", "small"]


def test_moved_reports_new_positions() -> None:
    book = ledger(node("a", gpus=2))
    ask(book, "r1", gpus=2)
    ask(book, "r2", gpus=2)
    ask(book, "r3", gpus=2)
    changes = book.release("r1").changes
    assert [a.request_id for a in changes.admitted] == ["r2"]
    assert [(a.request_id, a.position) for a in changes.moved] == [("r3", 1)]


def test_request_and_release_are_idempotent() -> None:
    book = ledger(node("a", gpus=4))
    first = ask(book, "r1", gpus=4).answer
    waiting = ask(book, "r2", gpus=4).answer
    state = book.state.model_dump_json()
    assert ask(book, "r1", gpus=4).answer == first
    assert ask(book, "r2", gpus=4).answer == waiting
    assert book.state.model_dump_json() == state, "a repeated request changes nothing"
    assert book.release("r1").held
    again = book.release("r1")
    assert not again.held
    assert again.changes.empty
    assert ask(book, "r1", gpus=4).answer.decision is Decision.RELEASED, "never admitted again"


def test_release_that_overtakes_its_request() -> None:
    book = ledger(node("a", gpus=4))
    assert not book.release("r1", "deleted").held
    answer = ask(book, "r1", gpus=1).answer
    assert answer.decision is Decision.RELEASED
    assert answer.message == "deleted before it was requested"
    assert not book.state.reservations


def test_infeasible_is_remembered() -> None:
    book = ledger(node("a", gpus=4))
    assert ask(book, "r1", gpus=8).answer.decision is Decision.INFEASIBLE
    book.refresh_inventory([node("a", gpus=8)])
    assert ask(book, "r1", gpus=8).answer.decision is Decision.INFEASIBLE, "same id, same answer"
    assert ask(book, "r2", gpus=8, workspace="ws-r1").answer.decision is Decision.ADMITTED


def test_a_new_request_of_a_workspace_supersedes_its_old_one() -> None:
    book = ledger(node("a", gpus=4))
    ask(book, "nb#1", gpus=4, workspace="nb")
    ask(book, "other", gpus=4, workspace="other")
    result = ask(book, "nb#2", gpus=2, workspace="nb")
    assert book.answer("nb#1").decision is Decision.RELEASED  # type: ignore[union-attr]
    assert [a.request_id for a in result.changes.admitted] == ["other"], (
        "the freed GPUs go in order"
    )
    assert result.answer.decision is Decision.WAITING


def test_foreign_pods_count_as_used() -> None:
    book = ledger(node("a", gpus=8, foreign_used=6))
    assert ask(book, "r1", gpus=4).answer.decision is Decision.WAITING
    changes = book.capacity_changed([node("a", gpus=8, foreign_used=2)])
    assert [a.request_id for a in changes.admitted] == ["r1"]


@pytest.mark.parametrize(
    "down",
    [
        pytest.param(node("a", ready=False), id="not-ready"),
        pytest.param(node("a", schedulable=False), id="cordoned"),
    ],
)
def test_unusable_nodes_get_no_new_workspaces_but_count_as_existing(down: GpuNode) -> None:
    book = ledger(down)
    answer = ask(book, "r1", gpus=1).answer
    assert answer.decision is Decision.WAITING, "not infeasible: the node exists"
    assert [a.request_id for a in book.refresh_inventory([node("a")]).admitted] == ["r1"]


def test_reservations_on_a_node_that_goes_not_ready_are_kept() -> None:
    book = ledger(node("a"))
    ask(book, "r1", gpus=8)
    changes = book.refresh_inventory([node("a", ready=False)])
    assert changes.empty
    assert book.answer("r1").decision is Decision.ADMITTED  # type: ignore[union-attr]


def test_pool_growth_admits_waiters_in_order() -> None:
    book = ledger(node("a", gpus=8))
    ask(book, "r1", gpus=8)
    ask(book, "r2", gpus=8)
    ask(book, "r3", gpus=8)
    changes = book.refresh_inventory([node("a"), node("b"), node("c")])
    assert [(a.request_id, a.nodes) for a in changes.admitted] == [("r2", ["b"]), ("r3", ["c"])]


def test_a_removed_node_displaces_its_workspaces_to_the_front_of_the_line() -> None:
    book = ledger(node("a"), node("b"))
    ask(book, "r1", gpus=8)
    ask(book, "r2", gpus=8)
    ask(book, "r3", gpus=8)
    assert book.answer("r1").nodes == ["a"]  # type: ignore[union-attr]
    changes = book.refresh_inventory([node("b")])
    assert [(a.request_id, a.decision, a.position) for a in changes.displaced] == [
        ("r1", Decision.WAITING, 1)
    ]
    assert "its GPUs' node left the cluster" in changes.displaced[0].message
    assert [(a.request_id, a.position) for a in changes.moved] == [("r3", 2)]
    regrown = book.refresh_inventory([node("b"), node("c")])
    assert [a.request_id for a in regrown.admitted] == ["r1"], "it was there first"


def test_a_shrunk_node_displaces_the_youngest_reservations() -> None:
    book = ledger(node("a", gpus=8))
    ask(book, "old", gpus=4)
    ask(book, "young", gpus=4)
    changes = book.refresh_inventory([node("a", gpus=4)])
    assert [a.request_id for a in changes.displaced] == ["young"]
    assert book.answer("old").decision is Decision.ADMITTED  # type: ignore[union-attr]


def test_scale_down_refused_naming_the_workspaces() -> None:
    book = ledger(node("gpu-1"), node("gpu-2"), node("gpu-3", gpus=4))
    ask(book, "r1", gpus=8, workspace="notebook")
    ask(book, "r2", replicas=2, gpus=4, workspace="llm")
    assert [p.node for p in book.answer("r2").placements] == ["gpu-3", "gpu-2"]  # type: ignore[union-attr]
    assert scale_down_problem(book.state, "training", "gpu", []) is None
    assert scale_down_problem(book.state, "training", "gpu", ["gpu-9"]) is None
    assert scale_down_problem(book.state, "training", "gpu", ["gpu-1", "gpu-2"]) == (
        "scaling node pool 'gpu' of cluster 'training' down would take GPUs from running "
        "workspaces: notebook (8 GPUs on gpu-1), llm (4 GPUs on gpu-2); delete or suspend them "
        "first, or force the scale-down (they go back to waiting for GPUs)"
    )


def test_state_round_trips_through_json() -> None:
    book = ledger(node("a", gpus=4), node("b", model="A100"))
    ask(book, "r1", gpus=4)
    ask(book, "r2", gpus=2)
    ask(book, "r3", gpus=16)
    book.release("gone")
    copy = CapacityLedgerState.model_validate_json(book.state.model_dump_json())
    assert copy == book.state
    assert copy.model_dump_json() == book.state.model_dump_json()


def test_finished_ids_are_bounded() -> None:
    book = ledger(node("a"))
    for index in range(FINISHED_KEPT + 10):
        book.release(f"r{index}")
    assert len(book.state.finished) == FINISHED_KEPT
    assert book.state.finished[0].request_id == "r10"


# --- Property-based: random interleavings, duplicates and crashes ---------------------------------

SELECTORS = [H100, ANY, H100, A100, L40_RAW, GpuSelector(vendor=GpuVendor.NVIDIA)]
"""Weighted towards one queue (H100), where ordering is most contested."""
MODELS = [
    ("H100", {}),
    ("H100", {}),
    ("A100", {}),
    ("L40", {"nvidia.com/gpu.product": "NVIDIA-L40"}),
    ("", {"nvidia.com/gpu.product": "NVIDIA-L40"}),
]

node_strategy = st.builds(
    lambda index, model, allocatable, down, cordoned, foreign: GpuNode(
        name=f"n{index}",
        model=MODELS[model][0],
        labels=MODELS[model][1],
        vendor=GpuVendor.NVIDIA,
        allocatable=allocatable,
        ready=not down,
        schedulable=not cordoned,
        foreign_used=foreign,
    ),
    st.integers(0, 4),
    st.integers(0, len(MODELS) - 1),
    st.sampled_from([0, 2, 4, 4, 8]),
    st.integers(0, 9).map(lambda roll: roll == 0),  # one node in ten NotReady
    st.integers(0, 9).map(lambda roll: roll == 0),  # one in ten cordoned
    st.sampled_from([0, 0, 0, 1, 3]),
)
inventory_strategy = st.lists(node_strategy, min_size=1, max_size=5).map(
    lambda nodes: list({n.name: n for n in nodes}.values())
)
request_operation = st.tuples(
    st.just("request"),
    st.integers(0, 11),  # workspace (repeats supersede)
    st.sampled_from([1, 1, 1, 2, 3]),  # replicas
    st.sampled_from([1, 1, 2, 2, 4]),  # GPUs per replica
    st.integers(0, len(SELECTORS) - 1),
)


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of the strategies, drawn in proportion to its weight."""
    total = sum(weight for weight, _ in choices)

    def pick(roll: int) -> st.SearchStrategy[Any]:
        for weight, strategy in choices:
            if roll < weight:
                return strategy
            roll -= weight
        raise AssertionError(roll)

    return st.integers(0, total - 1).flatmap(pick)


operation = weighted(
    (45, request_operation),  # requests dominate, so the cluster fills and queues form
    (15, st.tuples(st.just("release"), st.integers(1, 40))),
    (10, st.tuples(st.just("duplicate"), st.integers(0, 60))),
    (10, st.tuples(st.just("inventory"), inventory_strategy)),
    (10, st.tuples(st.just("changed"))),
    (10, st.tuples(st.just("crash"))),
)


def reserved(book: CapacityLedger) -> dict[str, int]:
    return book.reserved()


def fits(book: CapacityLedger, request: CapacityRequest) -> bool:
    """An independent check that a request could be placed now (not the ledger's own code)."""
    held = reserved(book)
    room = 0
    for candidate in book.state.nodes:
        if candidate.ready and candidate.schedulable and request.selector.matches(candidate):
            free = candidate.allocatable - candidate.foreign_used - held.get(candidate.name, 0)
            room += max(0, free) // request.gpus_per_replica
    return room >= request.replicas


def check_invariants(
    book: CapacityLedger, arrival: dict[str, int], newly_admitted: set[str]
) -> None:
    state = book.state
    nodes = {n.name: n for n in state.nodes}
    held = reserved(book)
    active = [r.request for r in state.reservations] + [w.request for w in state.waiting]
    ids = [r.request_id for r in active]
    assert len(ids) == len(set(ids)), "a request is held or waits, never both, never twice"
    workspaces = [r.workspace for r in active]
    assert len(workspaces) == len(set(workspaces)), "a workspace has at most one request"
    for reservation in state.reservations:
        assert all(p.node in nodes for p in reservation.placements), "no GPUs on a gone node"
    for name, count in held.items():
        assert count <= nodes[name].allocatable, f"node {name} over-committed"
    for reservation in state.reservations:
        rid = reservation.request.request_id
        if rid not in newly_admitted:
            continue
        for placement in reservation.placements:
            target = nodes[placement.node]
            assert target.usable, f"{rid} admitted onto unusable node {target.name}"
            assert held[target.name] + target.foreign_used <= target.allocatable, (
                f"{rid} admitted onto GPUs already used on {target.name}"
            )
        for waiting in state.waiting:
            same_queue = waiting.request.selector.key == reservation.request.selector.key
            assert not (same_queue and arrival[waiting.request.request_id] < arrival[rid]), (
                f"{rid} admitted before {waiting.request.request_id}, which came first"
            )
    heads: dict[str, CapacityRequest] = {}
    for waiting in state.waiting:
        heads.setdefault(waiting.request.selector.key, waiting.request)
    for head in heads.values():
        assert not fits(book, head), f"{head.request_id} fits but waits"


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(initial=inventory_strategy, operations=st.lists(operation, min_size=10, max_size=60))
def test_random_interleavings_never_overcommit_nor_overtake(
    initial: list[GpuNode], operations: list[tuple[Any, ...]]
) -> None:
    book = CapacityLedger(CapacityLedgerState(cluster="c"))
    twin = CapacityLedger(CapacityLedgerState(cluster="c"))  # never crashes: must agree throughout
    book.refresh_inventory(initial)
    twin.refresh_inventory(initial)
    arrival: dict[str, int] = {}
    delivered: list[tuple[str, Any]] = []
    counter = 0
    for op in operations:
        # Placed now: new reservations, and displaced ones placed again elsewhere.
        before_held = {r.request.request_id: r.placements for r in book.state.reservations}
        kind = op[0]
        if kind == "crash":
            book = CapacityLedger(
                CapacityLedgerState.model_validate_json(book.state.model_dump_json())
            )
            assert book.state == twin.state
            continue
        if kind == "duplicate":
            if not delivered:
                continue
            kind, payload = delivered[op[1] % len(delivered)]
            before = book.state.model_dump_json()
            if kind == "request":
                expected = book.answer(payload.request_id)
                result = book.request(payload)
                assert twin.request(payload) == result
                assert result.answer == expected
            else:
                result_release = book.release(payload)
                assert twin.release(payload) == result_release
                assert not result_release.held
            assert book.state.model_dump_json() == before, "a duplicate delivery changes nothing"
            continue
        if kind == "request":
            _, workspace, replicas, gpus, selector = op
            counter += 1
            request = CapacityRequest(
                request_id=f"r{counter}",
                workspace=f"ws{workspace}",
                replicas=replicas,
                gpus_per_replica=gpus,
                selector=SELECTORS[selector],
            )
            arrival[request.request_id] = counter
            result = book.request(request)
            assert twin.request(request) == result
            delivered.append(("request", request))
        elif kind == "release":
            rid = f"r{op[1]}"
            assert twin.release(rid) == book.release(rid)
            delivered.append(("release", rid))
        elif kind == "inventory":
            assert twin.refresh_inventory(op[1]) == book.refresh_inventory(op[1])
        else:
            assert twin.capacity_changed() == book.capacity_changed()
        placed = {
            r.request.request_id
            for r in book.state.reservations
            if before_held.get(r.request.request_id) != r.placements
        }
        check_invariants(book, arrival, placed)
        assert book.state == twin.state
