"""Errors name the HTTP status and reason as the system answered them (issue 10: an injected 403
was reported as "403 InternalError").

The sim's fault injector answers a scripted 403 with a Status whose reason is `InternalError`
(and the host provider with the code `InternalError`); the status line says `403 Forbidden`.
A generic reason that contradicts the status is not believed; a specific one is kept.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.errors import http_error, kube_error, kube_message, status_name
from activities.host_provider import HostProviderActivities
from models.activity_api import ListClaimedHostsRequest
from models.errors import ErrorType
from sim.world import SimWorld
from tests.simenv import call, close_client, host_provider, management_api, started_world


def api_exception(status: int, phrase: str, body: dict[str, object] | None) -> ApiException:
    exc = ApiException(status=status, reason=phrase)
    exc.body = json.dumps(body) if body is not None else None
    return exc


def status_body(code: int, reason: str, message: str) -> dict[str, object]:
    return {
        "kind": "Status",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


@pytest.mark.parametrize(
    ("status", "reason", "phrase", "expected"),
    [
        pytest.param(403, "InternalError", "Forbidden", "403 Forbidden", id="403-injected"),
        pytest.param(403, "Forbidden", "Forbidden", "403 Forbidden", id="403-kube"),
        pytest.param(409, "AlreadyExists", "Conflict", "409 AlreadyExists", id="409-specific"),
        pytest.param(
            409, "InsufficientCapacity", "Conflict", "409 InsufficientCapacity", id="provider-code"
        ),
        pytest.param(429, "TooManyRequests", "Too Many Requests", "429 TooManyRequests", id="429"),
        pytest.param(503, None, "Service Unavailable", "503 Service Unavailable", id="no-reason"),
        pytest.param(401, "NotFound", "Unauthorized", "401 Unauthorized", id="contradiction"),
    ],
)
def test_status_name(status: int, reason: str | None, phrase: str, expected: str) -> None:
    assert status_name(status, reason, phrase) == expected


def test_kube_message_names_the_status_line_when_the_reason_contradicts_it() -> None:
    exc = api_exception(403, "Forbidden", status_body(403, "InternalError", "injected fault"))
    assert kube_message(exc) == "403 Forbidden: injected fault"
    error = kube_error(exc, "list nodes")
    assert (error.type, error.non_retryable) == (ErrorType.FORBIDDEN, True)


def test_http_error_names_the_status_line_when_the_code_contradicts_it() -> None:
    request = httpx.Request("GET", "http://provider/v1/hosts")
    response = httpx.Response(
        403,
        json={"error": {"code": "InternalError", "message": "injected fault"}},
        request=request,
    )
    error = http_error(httpx.HTTPStatusError("403", request=request, response=response), "list")
    assert error.message == "list: 403 Forbidden: injected fault"


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SimWorld]:
    async with started_world(tmp_path_factory.mktemp("sim")) as world:
        yield world


async def test_an_injected_403_reads_403_forbidden_end_to_end(world: SimWorld) -> None:
    world.faults.fail_next(403, target="management", path="/api/v1/namespaces")
    api = management_api(world)
    try:
        with pytest.raises(ApiException) as caught:
            await call(client.CoreV1Api(api).list_namespace)
    finally:
        close_client(api)
    assert kube_message(caught.value).startswith("403 Forbidden: ")

    world.faults.fail_next(403, target="hostprovider", path="/v1/hosts")
    async with host_provider(world) as http:
        with pytest.raises(ApplicationError) as failed:
            await ActivityEnvironment().run(
                HostProviderActivities(http).list_claimed_hosts, ListClaimedHostsRequest(owner="o")
            )
    assert "403 Forbidden: injected fault" in failed.value.message
    assert "InternalError" not in failed.value.message
