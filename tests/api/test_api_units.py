"""The HTTP API's pure pieces and the remote client's mapping, without a server: rate buckets, key
format and permissions, the documented cluster status, error fields, settings, the stored login
and the API-status-to-exit-code table of remote mode."""

from __future__ import annotations

import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.bodies import openapi_components
from api.errors import field_of
from api.views import ClusterStatusName, status_of
from clients import http as remote
from clients import login
from clients.base import WorkflowRef
from clients.errors import (
    ConflictError,
    ExitCode,
    InvalidRequestError,
    NotFoundError,
    OperationFailedError,
    UnavailableError,
)
from infra.config import SettingsError
from infra.keys import (
    KeyRequestError,
    Permission,
    canonical_permissions,
    effective_permissions,
    format_key,
    hash_secret,
    key_id_of,
    parse_key,
)
from infra.ratelimit import RateLimiter
from infra.settings import ApiSettings
from models.cluster import ClusterPhase, ClusterStatus
from models.operations import Operation, ScaleNodePoolRequest
from starter import token_cache

KEY_ID = "0123456789ab"
SECRET = "f" * 48


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_key_may_burst_then_waits_for_its_rate() -> None:
    clock = Clock()
    limiter = RateLimiter(2.0, 3, clock=clock)
    assert [limiter.acquire("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.acquire("a") == pytest.approx(0.5)
    assert limiter.acquire("b") == 0.0, "another key has its own bucket"
    clock.now = 0.5
    assert limiter.acquire("a") == 0.0
    assert limiter.acquire("a") > 0


def test_rate_zero_means_no_limit() -> None:
    limiter = RateLimiter(0, 1)
    assert all(limiter.acquire("a") == 0.0 for _ in range(1000))


def test_the_bucket_table_stays_bounded() -> None:
    clock = Clock()
    limiter = RateLimiter(1.0, 1, clock=clock, max_keys=10)
    for index in range(100):
        limiter.acquire(f"k{index}")
    assert len(limiter._buckets) <= 10


def test_a_key_reads_back_its_id_and_secret() -> None:
    key = format_key(KEY_ID, SECRET)
    assert key == f"colony_{KEY_ID}_{SECRET}"
    assert parse_key(key) == (KEY_ID, SECRET)
    assert key_id_of(key) == KEY_ID


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param(f"colony_{KEY_ID}", id="no-secret"),
        pytest.param(f"colony_{KEY_ID.upper()}_{SECRET}", id="upper-id"),
        pytest.param(f"colony_{KEY_ID}_{SECRET}x", id="long-secret"),
        pytest.param(f"other_{KEY_ID}_{SECRET}", id="prefix"),
        pytest.param(f"colony_{KEY_ID}_{SECRET}\n", id="newline"),
    ],
)
def test_malformed_keys_are_not_keys(text: str) -> None:
    assert parse_key(text) is None
    assert key_id_of(text) is None


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        pytest.param(["read"], ["kubernetes:read"], id="short"),
        pytest.param(["Kubernetes:Manage", "manage"], ["kubernetes:manage"], id="repeats"),
        pytest.param(["clusters:write"], ["clusters:write"], id="legacy-kept"),
        pytest.param(["catalog_publish"], ["catalog:publish"], id="catalog-publish"),
        pytest.param(["catalog:publish"], ["catalog:publish"], id="catalog-publish-canonical"),
    ],
)
def test_permissions_are_stored_by_their_canonical_names(
    given: list[str], stored: list[str]
) -> None:
    assert canonical_permissions(given) == stored


@pytest.mark.parametrize(
    "given",
    [pytest.param([], id="none"), pytest.param(["admin"], id="unknown")],
)
def test_unknown_or_no_permissions_are_refused(given: list[str]) -> None:
    with pytest.raises(KeyRequestError, match=r"^permission: "):
        canonical_permissions(given)


@pytest.mark.parametrize(
    ("granted", "allowed"),
    [
        pytest.param(["kubernetes:read"], {Permission.READ}, id="read"),
        pytest.param(["clusters:read"], {Permission.READ}, id="legacy-read"),
        pytest.param(
            ["clusters:write"],
            {Permission.CONNECT, Permission.MANAGE},
            id="legacy-write-is-the-rest",
        ),
        pytest.param(["clusters:admin", "kubernetes:connect"], {Permission.CONNECT}, id="unknown"),
    ],
)
def test_legacy_permissions_map_as_the_document_says(
    granted: list[str], allowed: set[Permission]
) -> None:
    assert effective_permissions(granted) == allowed


def test_a_secret_hashes_the_same_with_its_salt_only() -> None:
    first = hash_secret(SECRET, b"s" * 16)
    assert first == hash_secret(SECRET, b"s" * 16)
    assert first != hash_secret(SECRET, b"t" * 16)
    assert SECRET.encode() not in first


def _status(phase: ClusterPhase, *, running: bool = False, queued: bool = False) -> ClusterStatus:
    op = Operation(id="op-0002", request=ScaleNodePoolRequest(pool="gpu", count=2))
    return ClusterStatus(
        name="c",
        location_id="fra1",
        phase=phase,
        current_operation=op if running else None,
        queued_operations=[op] if queued else [],
    )


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        pytest.param(_status(ClusterPhase.CREATING), ClusterStatusName.CREATING, id="creating"),
        pytest.param(_status(ClusterPhase.READY), ClusterStatusName.READY, id="ready"),
        pytest.param(
            _status(ClusterPhase.READY, running=True), ClusterStatusName.UPDATING, id="running"
        ),
        pytest.param(
            _status(ClusterPhase.READY, queued=True), ClusterStatusName.UPDATING, id="queued"
        ),
        pytest.param(_status(ClusterPhase.DELETING), ClusterStatusName.DELETING, id="deleting"),
        pytest.param(_status(ClusterPhase.DELETED), ClusterStatusName.DELETING, id="deleted"),
        pytest.param(_status(ClusterPhase.FAILED), ClusterStatusName.FAILED, id="failed"),
    ],
)
def test_the_documented_status_of_a_cluster(
    status: ClusterStatus, expected: ClusterStatusName
) -> None:
    assert status_of(status) is expected


@pytest.mark.parametrize(
    ("message", "field"),
    [
        pytest.param("name: cluster 'x' already exists", "name", id="field"),
        pytest.param(
            "nodePools[0].sku.gpuModelId: unknown", "nodePools[0].sku.gpuModelId", id="path"
        ),
        pytest.param("scale_node_pool: cluster 'x' is being deleted", None, id="update-name"),
        pytest.param("cannot reach x: refused", None, id="sentence"),
        pytest.param("temporal: cannot reach x: connection refused", None, id="temporal"),
        pytest.param("host provider: 503", None, id="system"),
    ],
)
def test_an_error_names_its_field_only_when_it_is_one(message: str, field: str | None) -> None:
    assert field_of(message) == field


def test_api_settings_from_the_environment() -> None:
    assert ApiSettings.from_env({}) == ApiSettings()
    got = ApiSettings.from_env(
        {"COLONY_API_PORT": "9000", "COLONY_API_RATE": "2.5", "COLONY_API_BURST": "5"}
    )
    assert (got.port, got.rate, got.burst) == (9000, 2.5, 5)
    with pytest.raises(SettingsError, match=r"^COLONY_API_PORT: "):
        ApiSettings.from_env({"COLONY_API_PORT": "http"})


def test_request_schemas_refuse_unknown_fields_as_the_api_does() -> None:
    components = openapi_components()
    for name in ("ClusterCreateRequestInput", "NodePoolSpecInput", "NodeSkuInput", "TaintInput"):
        assert components[name]["additionalProperties"] is False, name
    pools = components["ClusterCreateRequestInput"]["properties"]["nodePools"]
    assert pools["items"]["$ref"] == "#/components/schemas/NodePoolSpecInput"


def test_the_pool_drain_parallelism_is_documented_with_its_bounds() -> None:
    setting = openapi_components()["NodePoolSpecInput"]["properties"]["drainParallelism"]
    bounded = next(choice for choice in setting["anyOf"] if choice.get("type") == "integer")
    assert (bounded["minimum"], bounded["maximum"]) == (1, 20)
    assert "drains at once" in setting["description"]


def test_the_login_is_stored_owner_readable_only(tmp_path: Path) -> None:
    env = {"COLONY_CONFIG_DIR": str(tmp_path / "config")}
    assert login.read_login(env) is None
    path = Path(login.write_login(env, "http://127.0.0.1:8080", format_key(KEY_ID, SECRET)))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert login.read_login(env) == ("http://127.0.0.1:8080", format_key(KEY_ID, SECRET))
    # The exec plugin's cache is keyed by the API and the key's public id, never the secret.
    assert token_cache.source(env) == f"api:http://127.0.0.1:8080:{KEY_ID}"
    assert login.remove_login(env) is True
    assert login.remove_login(env) is False
    assert token_cache.source(env) == token_cache.management_kubeconfig(env)


def test_the_config_dir_follows_xdg() -> None:
    assert login.config_dir({"HOME": "/h"}) == "/h/.config/colony"
    assert login.config_dir({"HOME": "/h", "XDG_CONFIG_HOME": "/x"}) == "/x/colony"
    assert login.config_dir({"HOME": "/h", "COLONY_CONFIG_DIR": "/c"}) == "/c"


def _response(status: int, body: Any) -> httpx.Response:
    return httpx.Response(status, json=body, request=httpx.Request("GET", "http://api/"))


@pytest.mark.parametrize(
    ("status", "code", "error", "exit_code"),
    [
        pytest.param(400, "bad_request", InvalidRequestError, ExitCode.USAGE, id="400"),
        pytest.param(401, "unauthenticated", InvalidRequestError, ExitCode.USAGE, id="401"),
        pytest.param(403, "forbidden", InvalidRequestError, ExitCode.USAGE, id="403"),
        pytest.param(404, "not_found", NotFoundError, ExitCode.NOT_FOUND, id="404"),
        pytest.param(409, "conflict", ConflictError, ExitCode.USAGE, id="409"),
        pytest.param(
            409, "operation_failed", OperationFailedError, ExitCode.FAILED, id="409-failed"
        ),
        pytest.param(422, "invalid", InvalidRequestError, ExitCode.USAGE, id="422"),
        pytest.param(429, "rate_limited", UnavailableError, ExitCode.FAILED, id="429"),
        pytest.param(503, "unavailable", UnavailableError, ExitCode.FAILED, id="503"),
    ],
)
def test_remote_refusals_keep_colonyctls_exit_codes_and_lines(
    status: int, code: str, error: type[Exception], exit_code: ExitCode
) -> None:
    message = "name: cluster 'x' already exists"
    got = remote.error_of(_response(status, {"error": {"code": code, "message": message}}))
    assert type(got) is error
    assert got.exit_code is exit_code
    assert got.message == message


def test_a_refusal_that_is_not_the_apis_says_its_status() -> None:
    got = remote.error_of(_response(502, ["not", "ours"]))
    assert isinstance(got, UnavailableError)
    assert got.message == "Colony API: 502 Bad Gateway"


def test_remote_takes_workflow_ids_from_the_apis_answers() -> None:
    client = remote.RemoteClient("http://api", format_key(KEY_ID, SECRET))
    assert client.workflow("training") == WorkflowRef("")
    client.remember({"webUi": "http://ui/namespaces/default/workflows/x"}, "training")
    assert client.workflow("training") == WorkflowRef(""), "a link alone names no workflow"
    client.remember({"workflowId": "cluster/dev/training", "webUi": "http://ui/w"}, "training")
    assert client.workflow("training") == WorkflowRef("cluster/dev/training", "http://ui/w")


def test_an_api_key_never_shows_in_the_remote_clients_repr() -> None:
    client = remote.RemoteClient("http://api", format_key(KEY_ID, SECRET))
    assert SECRET not in repr(client)


def test_expiry_is_compared_with_now() -> None:
    from infra.keys import ApiKey

    now = datetime(2030, 1, 1, tzinfo=UTC)
    key = ApiKey(id=KEY_ID, organization="dev", created_at=now, expires_at=now)
    assert key.expired(now)
    assert not key.model_copy(update={"expires_at": None}).expired(now)


@pytest.mark.parametrize(
    "name",
    [pytest.param("training\n", id="trailing-newline"), pytest.param("a\nb", id="inner-newline")],
)
def test_a_name_with_a_line_break_is_refused(name: str) -> None:
    # `$` matches before a final newline: names are matched whole (a path id could carry one).
    from models.names import name_problem

    assert name_problem("cluster", name) is not None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("tenantGatewayDomain", "dos-lab.example", id="tenant-gateway-domain"),
        pytest.param("template", "other-cluster-1-0-0", id="template"),
        pytest.param("drainDeadline", 7200, id="drain-deadline"),
    ],
)
def test_an_operators_cluster_setting_is_refused_saying_whose_it_is(field: str, value: str) -> None:
    """Through the API and remote `colonyctl`, in the same words: not an unknown field, nor
    silently dropped, but the operator's (and, for a tenant gateway, why)."""
    import asyncio

    from api.views import ClusterCreateRequest
    from clients.clusters import HttpClusters
    from clients.parsing import validated
    from models.cluster import ClusterSpec

    body = {"name": "training", "locationId": "fra1", field: value}
    with pytest.raises(InvalidRequestError) as refused:
        validated(ClusterCreateRequest, body)
    assert field_of(refused.value.message) == field
    assert refused.value.message.startswith(f"{field}: an operator's setting, not chosen through")

    spec = validated(ClusterSpec, body)
    remote_clusters = HttpClusters(remote.RemoteClient("http://127.0.0.1:1", "colony_x_y"))
    with pytest.raises(InvalidRequestError) as remotely:
        asyncio.run(remote_clusters.create(spec))  # refused before anything is sent
    assert remotely.value.message == refused.value.message


def test_a_tenant_gateway_is_refused_with_the_reason() -> None:
    from models.cluster import operator_setting_problem

    assert operator_setting_problem("tenantGatewayDomain") == (
        "tenantGatewayDomain: an operator's setting, not chosen through the API: tenant gateways "
        "and their domains are the platform's, and a cluster attached to one gets that domain's "
        "names, so an organization cannot claim one (an operator creates such a cluster through "
        "Temporal directly: colonyctl cluster create --tenant-gateway-domain, without a login)"
    )
