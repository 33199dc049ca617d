"""`colonyctl`'s remote mode: the functions of `starter.client` and `starter.catalog`, with the
same signatures, over Colony's HTTP API (`api/`) instead of Temporal and the host provider.

`starter.backend` hands the commands this module instead of `starter.client` once `colonyctl auth
login` has stored a URL and key (`starter.login`): the commands do not know which one they call.
Answers are read back into the same models (`ClusterStatus`, `Operation`, `LocationStock`), so
`-o json` prints the same shapes, and refusals become the same `starter.errors` types, carrying
the API's message, which is the one `colonyctl` prints in direct mode: the exit codes (0/1/2/3)
and the lines stay the same.

| API status | error | exit |
| --- | --- | --- |
| 400, 422, 401, 403 | `InvalidRequestError` | 2 |
| 409 | `ConflictError` (`OperationFailedError` for `operation_failed`) | 2 (1) |
| 404 | `NotFoundError` | 3 |
| 429 (after `Retry-After`, 3 times), 5xx, unreachable | `UnavailableError` | 1 |

The organization is the key's: the `organization` arguments the signatures carry are ignored.
The key goes in the `Authorization` header and nowhere else (never in a message).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from infra.config import ColonySettings
from models.catalog import LocationStock
from models.cluster import (
    DEFAULT_CREDENTIAL,
    DEFAULT_DRAIN_DEADLINE,
    DEFAULT_DRAIN_PARALLELISM,
    DEFAULT_JOIN_DEADLINE,
    DEFAULT_NAMESPACE,
    DEFAULT_READY_DEADLINE,
    DEFAULT_TEMPLATE,
    ClusterSpec,
    ClusterStatus,
)
from models.operations import (
    AddNodePoolRequest,
    DeleteClusterRequest,
    DeleteNodePoolRequest,
    DeleteNodeRequest,
    Operation,
    OperationAccepted,
    ScaleNodePoolRequest,
)
from starter import login
from starter.client import POLL_SECONDS, WATCH_SECONDS, ClusterSummary, Started, WorkflowRef
from starter.client import operations as operations
from starter.errors import (
    ColonyError,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    OperationFailedError,
    UnavailableError,
)

CHECKS_LOCALLY = False
"""The API runs the catalog checks itself (with the same functions) and refuses with their
message: the CLI must not need the host provider."""

CLUSTERS = "/v1/kubernetes/clusters"
TIMEOUT = httpx.Timeout(60.0, connect=5.0)
"""A cancel answers once the operation has settled: give it time."""
RATE_RETRIES = 3
MAX_RETRY_AFTER = 30.0


@dataclass
class RemoteClient:
    """Where the API is and the key to call it with (the key is never shown: `repr=False`)."""

    url: str
    key: str = field(repr=False)
    workflows: dict[str, WorkflowRef] = field(default_factory=dict)
    """The workflows the API named in its answers (`workflowId`, `webUi`), by what they are of
    (a cluster's name; `workspace/<name>`, `colony/<name>`): remote mode never works a workflow
    id out for itself."""

    def remember(self, body: Any, name: str) -> None:
        """Keep the workflow an answer about `name` names, if it names one."""
        if not isinstance(body, dict) or not isinstance(body.get("workflowId"), str):
            return
        if body["workflowId"]:
            link = body.get("webUi")
            self.workflows[name] = WorkflowRef(
                body["workflowId"], link if isinstance(link, str) else ""
            )

    def workflow(self, name: str) -> WorkflowRef:
        """The workflow of `name` as the API last named it; empty before any answer about it."""
        return self.workflows.get(name, WorkflowRef(""))

    async def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, str] | None = None,
        request_id: str | None = None,
    ) -> Any:
        """One API call; its JSON answer, or the typed error of its refusal. A 429 is retried
        after its `Retry-After`, a few times."""
        headers = {"Authorization": f"Bearer {self.key}"}
        if request_id:
            headers["Idempotency-Key"] = request_id
        # One connection per call: a command makes a few calls (a poll one every half second),
        # and nothing is left open when the command ends.
        for attempt in range(RATE_RETRIES + 1):
            async with httpx.AsyncClient(base_url=self.url, timeout=TIMEOUT) as http:
                try:
                    response = await http.request(
                        method, path, json=json, params=params, headers=headers
                    )
                except httpx.TransportError as exc:
                    raise UnavailableError(
                        f"cannot reach the Colony API at {self.url}: {exc}"
                    ) from exc
            if response.status_code != 429 or attempt == RATE_RETRIES:
                break
            await asyncio.sleep(retry_after(response))
        return answer(response)


def retry_after(response: httpx.Response) -> float:
    try:
        return min(float(response.headers.get("Retry-After", "1")), MAX_RETRY_AFTER)
    except ValueError:
        return 1.0


def error_of(response: httpx.Response) -> ColonyError:
    """The typed error of an API refusal (see the module docstring), with the API's message."""
    try:
        detail = response.json().get("error") or {}
        message = str(detail["message"])
        code = str(detail.get("code", ""))
    except (ValueError, KeyError, AttributeError, TypeError):
        message = f"Colony API: {response.status_code} {response.reason_phrase}"
        code = ""
    status = response.status_code
    if status in (400, 401, 403, 422):
        return InvalidRequestError(message)
    if status == 404:
        return NotFoundError(message)
    if status == 409:
        return (
            OperationFailedError(message) if code == "operation_failed" else ConflictError(message)
        )
    return UnavailableError(message)


def answer(response: httpx.Response) -> Any:
    if not response.is_success:
        raise error_of(response)
    try:
        return response.json()
    except ValueError as exc:
        raise UnavailableError(
            f"Colony API: {response.status_code} with a body that is not JSON"
        ) from exc


def parsed(model: type[Any], data: Any) -> Any:
    """An answer read into a model; a shape this release cannot read is the server's problem."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise UnavailableError(f"Colony API: unexpected answer: {exc}") from exc


def _cluster_path(name: str, *rest: str) -> str:
    return "/".join([CLUSTERS, quote(name, safe=""), *(quote(part, safe="") for part in rest)])


# --- starter.client's functions --------------------------------------------------------------


async def connect(settings: ColonySettings) -> RemoteClient:
    """The client of the stored login (`colonyctl auth login`)."""
    import os

    stored = login.read_login(os.environ)
    if stored is None:
        raise InvalidRequestError(
            "not logged in: run `colonyctl auth login --url URL --api-key KEY`"
        )
    return RemoteClient(*stored)


_API_DEFAULTS = {
    "template": DEFAULT_TEMPLATE,
    "credential": DEFAULT_CREDENTIAL,
    "namespace": DEFAULT_NAMESPACE,
    "ready_deadline": DEFAULT_READY_DEADLINE,
    "join_deadline": DEFAULT_JOIN_DEADLINE,
    "drain_deadline": DEFAULT_DRAIN_DEADLINE,
    "drain_parallelism": DEFAULT_DRAIN_PARALLELISM,
}
"""What an API user cannot choose: the operator's settings stay the operator's."""


async def start_cluster(
    client: RemoteClient,
    settings: ColonySettings,
    spec: ClusterSpec,
    *,
    request_id: str | None = None,
) -> Started:
    for name, default in _API_DEFAULTS.items():
        if getattr(spec, name) != default:
            field_name = spec.model_fields[name].alias or name
            raise InvalidRequestError(
                f"{field_name}: cannot be chosen through the API (log out to use Temporal directly)"
            )
    body = {
        "name": spec.name,
        "locationId": spec.location_id,
        "nodePools": [pool.model_dump(mode="json", exclude_none=True) for pool in spec.node_pools],
        "waitForCapacity": spec.wait_for_capacity,
    }
    accepted = await client.call("POST", CLUSTERS, json=body, request_id=request_id)
    client.remember(accepted, spec.name)
    return Started(
        workflow_id=str(accepted.get("workflowId", "")),
        operation_id=str(accepted.get("operationId", "")),
        repeated=bool(accepted.get("repeated", False)),
    )


async def query_status(client: RemoteClient, name: str, *, organization: str = "") -> ClusterStatus:
    body = await client.call("GET", _cluster_path(name))
    client.remember(body, name)
    status: ClusterStatus = parsed(ClusterStatus, body)
    return status


def _route(name: str, update: str, request: BaseModel) -> tuple[str, str, Any, dict[str, str]]:
    """(method, path, body, query) of an update as the API takes it."""
    match request:
        case AddNodePoolRequest():
            body = {
                **request.pool.model_dump(mode="json", exclude_none=True),
                "waitForCapacity": request.wait_for_capacity,
            }
            return "POST", _cluster_path(name, "node-pools"), body, {}
        case ScaleNodePoolRequest():
            body = {
                "count": request.count,
                "force": request.force,
                "waitForCapacity": request.wait_for_capacity,
            }
            return "PATCH", _cluster_path(name, "node-pools", request.pool), body, {}
        case DeleteNodePoolRequest():
            query = {"force": str(request.force).lower()}
            return "DELETE", _cluster_path(name, "node-pools", request.pool), None, query
        case DeleteNodeRequest():
            query = {"drain": str(request.drain).lower(), "force": str(request.force).lower()}
            return "DELETE", _cluster_path(name, "nodes", request.node), None, query
        case DeleteClusterRequest():
            return "DELETE", _cluster_path(name), None, {}
    raise InvalidRequestError(f"{update}: not available through the API")


async def send(
    client: RemoteClient,
    name: str,
    update: str,
    request: BaseModel,
    *,
    request_id: str | None = None,
    organization: str = "",
) -> OperationAccepted:
    method, path, body, query = _route(name, update, request)
    accepted = await client.call(method, path, json=body, params=query, request_id=request_id)
    client.remember(accepted, name)
    result: OperationAccepted = parsed(OperationAccepted, accepted)
    return result


async def cancel_operation(
    client: RemoteClient,
    name: str,
    operation_id: str,
    *,
    reason: str = "",
    request_id: str | None = None,
    organization: str = "",
) -> Operation:
    body = await client.call(
        "POST",
        _cluster_path(name, "operations", operation_id, "cancel"),
        json={"reason": reason},
        request_id=request_id,
    )
    client.remember(body, name)
    operation: Operation = parsed(Operation, body)
    return operation


async def get_operation(
    client: RemoteClient, name: str, operation_id: str, *, organization: str = ""
) -> Operation:
    body = await client.call("GET", _cluster_path(name, "operations", operation_id))
    client.remember(body, name)
    operation: Operation = parsed(Operation, body)
    return operation


async def list_clusters(
    client: RemoteClient, *, organization: str | None = None
) -> list[ClusterSummary]:
    body = await client.call("GET", CLUSTERS)
    summaries = []
    for item in body.get("items", []) if isinstance(body, dict) else []:
        status: ClusterStatus = parsed(ClusterStatus, item)
        link = str(item.get("webUi", ""))
        summaries.append(
            ClusterSummary(
                name=status.name,
                phase=status.phase.value,
                workflow_id=str(item.get("workflowId", "")),
                started=(
                    status.created_at.isoformat(timespec="seconds") if status.created_at else ""
                ),
                organization=status.organization,
                web_ui=link,
            )
        )
    return sorted(summaries, key=lambda c: c.name)


async def wait_for_operation(
    client: RemoteClient,
    name: str,
    operation_id: str,
    on_status: Callable[[ClusterStatus, Operation | None], None],
    *,
    give_up_after: float | None = None,
    organization: str = "",
) -> Operation | None:
    """Poll the cluster until the operation has finished; None when the cluster is gone first
    (a delete that completed: the API no longer has its status)."""
    deadline = None if give_up_after is None else time.monotonic() + give_up_after
    while True:
        try:
            status = await query_status(client, name)
        except NotFoundError:
            return None
        operation = status.operation(operation_id)
        on_status(status, operation)
        if operation is not None and operation.state.finished:
            return operation
        if deadline is not None and time.monotonic() > deadline:
            raise OperationFailedError(f"{operation_id} did not finish within {give_up_after:.0f}s")
        await asyncio.sleep(POLL_SECONDS)


async def watch_status(
    client: RemoteClient, name: str, *, interval: float = WATCH_SECONDS, organization: str = ""
) -> AsyncIterator[ClusterStatus]:
    """The cluster's status now, then each time it changes, until it is gone.

    Raises:
        NotFoundError: the cluster does not exist when the watch starts.
    """
    status: ClusterStatus | None = await query_status(client, name)
    last = ""
    while status is not None:
        key = status.model_dump_json(exclude={"updated_at"})
        if key != last:
            last = key
            yield status
        await asyncio.sleep(interval)
        try:
            status = await query_status(client, name)
        except NotFoundError:
            return


def cluster_workflow(
    settings: ColonySettings, client: RemoteClient, name: str, organization: str = ""
) -> WorkflowRef:
    """The cluster's workflow as the API last named it; empty before any answer about it."""
    return client.workflow(name)


# --- starter.catalog's functions -------------------------------------------------------------

CATALOG_PATHS = {
    "location": "/v1/locations",
    "gpu-model": "/v1/gpu-models",
    "cpu-sku": "/v1/cpu-skus",
}


async def fetch(settings: ColonySettings, kind: str) -> list[dict[str, Any]]:
    client = await connect(settings)
    body = await client.call("GET", CATALOG_PATHS[kind])
    items = body.get("items") if isinstance(body, dict) else None
    return [item for item in items or [] if isinstance(item, dict)]


async def stock(settings: ColonySettings) -> list[LocationStock]:
    return [parsed(LocationStock, item) for item in await fetch(settings, "location")]


async def location_stock(settings: ColonySettings, location_id: str) -> LocationStock:
    client = await connect(settings)
    body = await client.call("GET", f"/v1/locations/{quote(location_id, safe='')}")
    found: LocationStock = parsed(LocationStock, body)
    return found


# --- credentials -----------------------------------------------------------------------------


async def kubeconfig(client: RemoteClient, name: str) -> dict[str, Any]:
    """The API's kubeconfig of the cluster (a token embedded)."""
    body = await client.call("GET", _cluster_path(name, "kubeconfig"))
    if not isinstance(body, dict):
        raise UnavailableError("Colony API: the kubeconfig is not an object")
    return body


def issue_token(url: str, key: str, cluster: str) -> tuple[str, datetime]:
    """A new cluster token from the API (`POST .../token`), and when it expires (blocking: the
    exec plugin has no event loop)."""
    return asyncio.run(_issue_token(RemoteClient(url, key), cluster))


async def _issue_token(client: RemoteClient, cluster: str) -> tuple[str, datetime]:
    body = await client.call("POST", _cluster_path(cluster, "token"))
    try:
        status = body["status"]
        expiry = datetime.fromisoformat(str(status["expirationTimestamp"]).replace("Z", "+00:00"))
        return str(status["token"]), expiry
    except (KeyError, TypeError, ValueError) as exc:
        raise UnavailableError("Colony API: the token answer is not an ExecCredential") from exc
