"""Tests of the fault injector: rates, scoping, scripted faults and the /sim/v1/faults endpoints."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from aiohttp import web
from pydantic import ValidationError

from sim.apiserver.errors import ApiError
from sim.faults import (
    FAULTS_PATH,
    INJECTED_PATH,
    FaultConfig,
    FaultInjector,
    RequestFault,
    add_fault_routes,
)


class SleepRecorder:
    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


async def _outcome(injector: FaultInjector, target: str, method: str, path: str) -> int:
    try:
        await injector.before_request(target, method, path)
    except ApiError as exc:
        return exc.code
    return 200


async def test_no_faults_by_default() -> None:
    injector = FaultInjector()
    assert await _outcome(injector, "c1", "GET", "/api/v1/pods") == 200


@pytest.mark.parametrize(
    ("config", "expected_codes"),
    [
        pytest.param({"error_rate": 1.0}, {500, 503}, id="error-rate"),
        pytest.param({"error_rate": 1.0, "error_codes": [500]}, {500}, id="error-rate-500-only"),
        pytest.param({"throttle_rate": 1.0}, {429}, id="throttle-rate"),
        pytest.param({"error_rate": 0.0, "throttle_rate": 0.0}, {200}, id="zero-rates"),
    ],
)
async def test_rates_one_always_fault(config: dict[str, Any], expected_codes: set[int]) -> None:
    injector = FaultInjector.from_config({"seed": 1, **config})
    codes = {await _outcome(injector, "c1", "GET", "/api/v1/pods") for _ in range(50)}
    assert codes == expected_codes


async def test_throttle_error_is_kube_429_with_retry_after() -> None:
    injector = FaultInjector.from_config({"throttle_rate": 1.0})
    with pytest.raises(ApiError) as info:
        await injector.before_request("c1", "GET", "/api/v1/pods")
    body = info.value.status_body()
    assert body["code"] == 429
    assert body["reason"] == "TooManyRequests"
    assert body["details"]["retryAfterSeconds"] == 1


async def test_error_500_is_internal_error() -> None:
    injector = FaultInjector.from_config({"error_rate": 1.0, "error_codes": [500]})
    with pytest.raises(ApiError) as info:
        await injector.before_request("c1", "GET", "/x")
    assert info.value.reason == "InternalError"
    assert info.value.message.startswith("Internal error occurred:")


async def test_seeded_runs_repeat() -> None:
    async def run() -> list[int]:
        injector = FaultInjector.from_config({"seed": 42, "error_rate": 0.3, "throttle_rate": 0.2})
        return [await _outcome(injector, "c1", "GET", "/p") for _ in range(100)]

    first, second = await run(), await run()
    assert first == second
    assert {200, 429} <= set(first)


@pytest.mark.parametrize(
    ("scope", "target", "path", "method", "faulted"),
    [
        pytest.param({"target": "c1"}, "c1", "/api/v1/pods", "GET", True, id="target-match"),
        pytest.param({"target": "c1"}, "c2", "/api/v1/pods", "GET", False, id="target-other"),
        pytest.param(
            {"path": "/eviction"}, "c1", "/api/v1/ns/p/eviction", "POST", True, id="path-in"
        ),
        pytest.param({"path": "/eviction"}, "c1", "/api/v1/pods", "GET", False, id="path-out"),
        pytest.param({"method": "post"}, "c1", "/x", "POST", True, id="method-match"),
        pytest.param({"method": "post"}, "c1", "/x", "GET", False, id="method-other"),
        pytest.param(
            {"target": "hostprovider"},
            "hostprovider",
            "/v1/claims",
            "POST",
            True,
            id="hostprovider",
        ),
    ],
)
async def test_scoped_rates(
    scope: dict[str, Any], target: str, path: str, method: str, faulted: bool
) -> None:
    top = FaultInjector.from_config({"error_rate": 1.0, **scope})
    assert (await _outcome(top, target, method, path) != 200) is faulted
    ruled = FaultInjector()
    ruled.add_rule(RequestFault(error_rate=1.0, **scope))
    assert (await _outcome(ruled, target, method, path) != 200) is faulted


async def test_fault_endpoints_are_never_faulted() -> None:
    injector = FaultInjector.from_config({"error_rate": 1.0, "latency_seconds": 5})
    assert injector.decide("c1", "PUT", FAULTS_PATH) == (0.0, None)


async def test_latency_sleeps_and_adds_up() -> None:
    sleeps = SleepRecorder()
    injector = FaultInjector(
        FaultConfig(latency_seconds=0.5, rules=[RequestFault(target="c1", latency_seconds=0.25)]),
        sleep=sleeps,
    )
    await injector.before_request("c1", "GET", "/x")
    await injector.before_request("c2", "GET", "/x")
    assert sleeps.calls == [0.75, 0.5]


async def test_scripted_responses_used_up() -> None:
    injector = FaultInjector()
    injector.fail_next(503, times=2, target="hostprovider", path="/v1/claims")
    outcomes = [await _outcome(injector, "hostprovider", "POST", "/v1/claims") for _ in range(3)]
    assert outcomes == [503, 503, 200]
    assert await _outcome(injector, "c1", "POST", "/v1/claims") == 200


def test_evict_429_counts_down_per_pod_and_cluster() -> None:
    injector = FaultInjector()
    injector.evict_429("ns", "p1", times=2)
    injector.evict_429("ns", "p2", times=1, cluster="c1")
    assert injector.take_eviction_fault("c1", "ns", "p1")
    assert not injector.take_eviction_fault("c1", "ns", "p3")
    assert not injector.take_eviction_fault("c2", "ns", "p2")
    assert injector.take_eviction_fault("c9", "ns", "p1")
    assert not injector.take_eviction_fault("c1", "ns", "p1")
    assert injector.take_eviction_fault("c1", "ns", "p2")
    assert not injector.take_eviction_fault("c1", "ns", "p2")


def test_object_faults() -> None:
    injector = FaultInjector()
    injector.node_never_ready("192.0.2.7")
    injector.fail_cluster_deployment("team-a", "cd1", "boom")
    injector.fail_service_set("team-a", "ss1", "chart failed")
    assert injector.node_never_ready_matches("node-1", "192.0.2.7")
    assert not injector.node_never_ready_matches("node-1", None, "192.0.2.8")
    assert injector.cluster_deployment_failure("team-a", "cd1") == "boom"
    assert injector.cluster_deployment_failure("team-b", "cd1") is None
    assert injector.service_set_failure("team-a", "ss1") == "chart failed"
    assert injector.service_set_failure("team-a", "ss2") is None
    injector.clear()
    assert injector.cluster_deployment_failure("team-a", "cd1") is None
    assert not injector.node_never_ready_matches("192.0.2.7")


def test_from_config_round_trip_and_validation() -> None:
    data = {
        "seed": 3,
        "throttle_rate": 0.5,
        "evictions": [{"namespace": "ns", "pod": "p", "times": 2}],
        "nodes_never_ready": ["n1"],
        "cluster_deployment_failures": [{"namespace": "a", "name": "b", "message": "m"}],
        "service_set_failures": [{"namespace": "a", "name": "s"}],
        "scripted": [{"code": 500, "times": 1}],
        "rules": [{"target": "c1", "error_rate": 0.1}],
    }
    injector = FaultInjector.from_config(data)
    dumped = injector.config.model_dump(mode="json")
    assert FaultInjector.from_config(dumped).config == injector.config
    with pytest.raises(ValidationError):
        FaultInjector.from_config({"error_rate": 2})
    with pytest.raises(ValidationError):
        FaultInjector.from_config({"no_such_field": 1})


@pytest.fixture
async def fault_server() -> AsyncIterator[tuple[FaultInjector, httpx.AsyncClient]]:
    injector = FaultInjector()

    async def pods(request: web.Request) -> web.Response:
        try:
            await injector.before_request("c1", request.method, request.path)
        except ApiError as exc:
            return web.json_response(exc.status_body(), status=exc.code)
        return web.json_response({"items": []})

    app = web.Application()
    add_fault_routes(app, injector)
    app.router.add_get("/api/v1/pods", pods)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        yield injector, client
    await runner.cleanup()


async def test_http_put_get_delete(fault_server: tuple[FaultInjector, httpx.AsyncClient]) -> None:
    injector, client = fault_server
    assert (await client.get("/api/v1/pods")).status_code == 200

    put = await client.put(FAULTS_PATH, json={"throttle_rate": 1.0, "nodes_never_ready": ["n1"]})
    assert put.status_code == 200
    assert put.json()["throttle_rate"] == 1.0
    assert injector.node_never_ready_matches("n1")

    throttled = await client.get("/api/v1/pods")
    assert throttled.status_code == 429
    assert throttled.json()["reason"] == "TooManyRequests"

    got = await client.get(FAULTS_PATH)
    assert got.status_code == 200
    assert got.json()["nodes_never_ready"] == ["n1"]

    replaced = await client.put(FAULTS_PATH, json={"error_rate": 0.0})
    assert replaced.json()["nodes_never_ready"] == []

    await client.put(FAULTS_PATH, json={"error_rate": 1.0})
    assert (await client.delete(FAULTS_PATH)).status_code == 200
    assert (await client.get("/api/v1/pods")).status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"not json", id="not-json"),
        pytest.param(b'{"error_rate": 5}', id="rate-out-of-range"),
        pytest.param(b'{"bogus": 1}', id="unknown-field"),
    ],
)
async def test_http_put_invalid(
    fault_server: tuple[FaultInjector, httpx.AsyncClient], body: bytes
) -> None:
    _, client = fault_server
    response = await client.put(FAULTS_PATH, content=body)
    assert response.status_code == 400
    assert response.json()["reason"] == "BadRequest"


async def test_injected_faults_are_counted(
    fault_server: tuple[FaultInjector, httpx.AsyncClient],
) -> None:
    """Every request seen and every fault answered, by target and code (GET .../injected);
    the fault endpoints' own requests are not counted."""
    injector, client = fault_server
    await client.get("/api/v1/pods")
    await client.put(FAULTS_PATH, json={"throttle_rate": 1.0})
    for _ in range(3):
        assert (await client.get("/api/v1/pods")).status_code == 429
    await client.delete(FAULTS_PATH)
    counted = (await client.get(INJECTED_PATH)).json()
    assert counted == {"requests": {"c1": 4}, "faulted": {"c1": {"429": 3}}}
    assert injector.injected == {("c1", 429): 3}
