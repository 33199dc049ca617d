"""The pieces every entity client shares (`clients`), without any server: the table that
types what Temporal reports, the one that types the API's refusals, the transport
`starter.backend` picks, and the loop that follows a status.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from temporalio.client import WorkflowQueryFailedError, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from api.errors import field_of
from clients import login
from clients.base import Deadline, polled
from clients.classes import HttpClasses, TemporalClasses
from clients.clusters import HttpClusters, TemporalClusters
from clients.colonies import HttpColonies, TemporalColonies
from clients.errors import (
    ColonyError,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    OperationFailedError,
    UnavailableError,
)
from clients.http import error_of
from clients.provider import DirectCatalog, HttpCatalog
from clients.temporal import Refusals, TemporalSession, failure, plural
from clients.workspaces import HttpWorkspaces, TemporalWorkspaces
from infra.config import ColonySettings
from models.errors import ErrorType, rejected
from starter import backend

MISSING = NotFoundError("cluster: cluster 'c' not found")
WORKSPACE_GONE = NotFoundError("workspace: workspace 'nb' not found")


def refused(error: ApplicationError) -> WorkflowUpdateFailedError:
    return WorkflowUpdateFailedError(error)


# --- what Temporal reports -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reported", "expected", "message"),
    [
        pytest.param(
            RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b""),
            NotFoundError,
            "cluster: cluster 'c' not found",
            id="rpc-not-found-is-the-entitys",
        ),
        pytest.param(
            RPCError("deadline exceeded", RPCStatusCode.DEADLINE_EXCEEDED, b""),
            UnavailableError,
            "cannot read cluster 'c': deadline exceeded",
            id="rpc-other-is-unavailable",
        ),
        pytest.param(
            WorkflowQueryFailedError("query handler failed"),
            UnavailableError,
            "cannot read cluster 'c': query handler failed",
            id="query-failed",
        ),
    ],
)
def test_what_temporal_reports_is_typed_by_status_not_text(
    reported: Exception, expected: type[ColonyError], message: str
) -> None:
    assert isinstance(reported, RPCError | WorkflowQueryFailedError)
    error = failure(reported, doing="cannot read cluster 'c'", missing=MISSING)
    assert type(error) is expected
    assert error.message == message


@pytest.mark.parametrize(
    ("refusal", "refusals", "expected", "message"),
    [
        pytest.param(
            rejected("node pool 'x' does not exist", not_found=True, field="pool"),
            Refusals(),
            NotFoundError,
            "pool: node pool 'x' does not exist",
            id="cluster-not-found-names-its-field",
        ),
        pytest.param(
            rejected("the cluster is being deleted"),
            Refusals(),
            ConflictError,
            "scale_node_pool: the cluster is being deleted",
            id="cluster-no-field-names-the-update",
        ),
        pytest.param(
            rejected("workspace 'nb' is already suspended"),
            Refusals(subject="workspace", not_found=WORKSPACE_GONE),
            ConflictError,
            "workspace: workspace 'nb' is already suspended",
            id="workspace-about-itself",
        ),
        pytest.param(
            rejected("workspace 'nb' is deleted", not_found=True),
            Refusals(subject="workspace", not_found=WORKSPACE_GONE),
            NotFoundError,
            "workspace: workspace 'nb' not found",
            id="workspace-not-found-is-its-own",
        ),
        pytest.param(
            ApplicationError("a different definition", type=ErrorType.CLASS_CONFLICT),
            Refusals(subject="name", subjects={ErrorType.INVALID_SPEC: "spec"}),
            ConflictError,
            "name: a different definition",
            id="class-conflict-names-the-name",
        ),
        pytest.param(
            ApplicationError("schema refused", type=ErrorType.INVALID_SPEC),
            Refusals(subject="name", subjects={ErrorType.INVALID_SPEC: "spec"}),
            InvalidRequestError,
            "spec: schema refused",
            id="class-invalid-names-the-spec",
        ),
        pytest.param(
            ApplicationError("handler crashed", type="Unexpected"),
            Refusals(subject="workspace"),
            OperationFailedError,
            "scale_node_pool: handler crashed",
            id="another-failure-names-the-update",
        ),
    ],
)
def test_an_update_refusal_reads_as_its_entity_says(
    refusal: ApplicationError, refusals: Refusals, expected: type[ColonyError], message: str
) -> None:
    error = failure(refused(refusal), doing="scale_node_pool", missing=MISSING, refusals=refusals)
    assert type(error) is expected
    assert error.message == message


@pytest.mark.parametrize(
    ("refusal", "update", "expected", "message", "field"),
    [
        pytest.param(
            rejected("colony 'lab' is being deleted"),
            "apply",
            ConflictError,
            "colony: colony 'lab' is being deleted",
            "colony",
            id="about-the-colony",
        ),
        pytest.param(
            rejected("this is colony 'lab', not 'lob'", field="name"),
            "apply",
            ConflictError,
            "name: this is colony 'lab', not 'lob'",
            "name",
            id="names-its-field",
        ),
        pytest.param(
            rejected("colony 'lab' is deleted", not_found=True),
            "delete",
            NotFoundError,
            "colony: colony 'lab' not found",
            "colony",
            id="deleted-is-not-found",
        ),
    ],
)
def test_a_colonys_refusals_never_start_with_the_update(
    refusal: ApplicationError, update: str, expected: type[ColonyError], message: str, field: str
) -> None:
    colonies = TemporalColonies(TemporalSession(ColonySettings.from_env({})))
    error = failure(
        refused(refusal), doing=update, missing=MISSING, refusals=colonies.refusals("lab")
    )
    assert type(error) is expected
    assert error.message == message
    assert field_of(error.message) == field


def test_an_update_that_failed_otherwise_is_a_failed_operation() -> None:
    cause = asyncio.CancelledError("interrupted")
    error = failure(
        WorkflowUpdateFailedError(cause),  # type: ignore[arg-type]
        doing="cannot publish x",
        update="publish x",
        missing=MISSING,
    )
    assert type(error) is OperationFailedError
    assert error.message == "publish x: interrupted"


# --- what the API answers --------------------------------------------------------------------


def test_a_code_says_more_than_its_status() -> None:
    body = {"error": {"code": "operation_failed", "message": "op-0001 failed: no hosts"}}
    response = httpx.Response(409, json=body, request=httpx.Request("GET", "http://api/"))
    error = error_of(response)
    assert type(error) is OperationFailedError
    assert error.message == "op-0001 failed: no hosts"


@pytest.mark.parametrize("status", [405, 415, 500, 502])
def test_a_status_the_table_does_not_name_is_unavailable(status: int) -> None:
    response = httpx.Response(status, json={}, request=httpx.Request("GET", "http://api/"))
    assert type(error_of(response)) is UnavailableError


# --- which transport -------------------------------------------------------------------------

TRANSPORTS = [
    pytest.param(backend.clusters, TemporalClusters, HttpClusters, id="clusters"),
    pytest.param(backend.workspaces, TemporalWorkspaces, HttpWorkspaces, id="workspaces"),
    pytest.param(backend.classes, TemporalClasses, HttpClasses, id="classes"),
    pytest.param(backend.colonies, TemporalColonies, HttpColonies, id="colonies"),
    pytest.param(backend.catalog, DirectCatalog, HttpCatalog, id="catalog"),
]


@pytest.mark.parametrize(("choose", "direct", "through_api"), TRANSPORTS)
def test_without_a_login_the_commands_talk_to_temporal(
    choose: object,
    direct: type,
    through_api: type,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(login.CONFIG_DIR_ENV, str(tmp_path))
    assert callable(choose)
    assert type(choose()) is direct


@pytest.mark.parametrize(("choose", "direct", "through_api"), TRANSPORTS)
def test_with_a_login_the_commands_talk_to_the_api_with_its_key(
    choose: object,
    direct: type,
    through_api: type,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(login.CONFIG_DIR_ENV, str(tmp_path))
    login.write_login({login.CONFIG_DIR_ENV: str(tmp_path)}, "http://api.test", "colony_k_s")
    assert callable(choose)
    client = choose()
    assert type(client) is through_api
    assert (client.remote.url, client.remote.key) == ("http://api.test", "colony_k_s")


def test_a_bad_setting_is_refused_in_either_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(login.CONFIG_DIR_ENV, str(tmp_path))
    login.write_login({login.CONFIG_DIR_ENV: str(tmp_path)}, "http://api.test", "colony_k_s")
    monkeypatch.setenv("COLONY_METRICS_PORT", "not-a-port")
    with pytest.raises(InvalidRequestError, match=r"^COLONY_METRICS_PORT: "):
        backend.clusters()


# --- following a status ----------------------------------------------------------------------


async def test_polled_yields_until_the_status_is_gone() -> None:
    statuses = iter(["creating", "ready", None])

    async def read() -> str | None:
        return next(statuses)

    seen = [status async for status in polled(read, first="queued", interval=0)]
    assert seen == ["queued", "creating", "ready"]


def test_a_deadline_of_none_never_passes_and_one_already_due_has() -> None:
    assert not Deadline(None).passed()
    assert not Deadline(60).passed()
    assert Deadline(-1).passed()


@pytest.mark.parametrize(
    ("noun", "nouns"),
    [
        pytest.param("cluster", "clusters", id="cluster"),
        pytest.param("workspace", "workspaces", id="workspace"),
        pytest.param("colony", "colonies", id="colony"),
    ],
)
def test_a_list_that_fails_names_its_entities(noun: str, nouns: str) -> None:
    assert plural(noun) == nouns
