"""The HTTP transport every entity client shares in remote mode: Colony's HTTP API (`api/`),
reached with the login `colonyctl auth login` stored (`clients.login`), and the one table that
turns the API's refusals back into `clients.errors`.

`starter.backend` hands the commands the `Http*` entity clients (`clients.clusters`,
`.workspaces`, `.classes`, `.colonies`, `.provider`) once a login exists. Answers are read back
into the same models the Temporal transport gives (`ClusterStatus`, `Operation`,
`WorkspaceStatus`, ...), so `-o json` prints the same shapes; workflow ids are the API's
(`workflowId` in its answers), never worked out from a link. Refusals carry the API's message,
which is the one `colonyctl` prints in direct mode, so the lines and exit codes stay the same:

| API status | error | exit |
| --- | --- | --- |
| 400, 422, 401, 403 | `InvalidRequestError` | 2 |
| 409 | `ConflictError` (`OperationFailedError` for code `operation_failed`, `QuotaExceededError` for `quota_exceeded`) | 2 (1) |
| 404 | `NotFoundError` | 3 |
| 429 (after `Retry-After`, 3 times), 5xx, unreachable | `UnavailableError` | 1 |

The organization is the key's. The key goes in the `Authorization` header and nowhere else (never
in a message).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypedDict, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from clients import errors, login
from clients.base import WorkflowRef
from clients.errors import ColonyError, InvalidRequestError, UnavailableError

ModelT = TypeVar("ModelT", bound=BaseModel)

TIMEOUT = httpx.Timeout(60.0, connect=5.0)
"""A cancel answers once the operation has settled: give it time."""
RATE_RETRIES = 3
MAX_RETRY_AFTER = 30.0
NOT_THROUGH_THE_API = "log out to use Temporal directly"
"""What a user can do about a request the API does not take from anyone (an operator's field)."""

# --- the table -------------------------------------------------------------------------------

REFUSED_AS: dict[int, type[ColonyError]] = {
    400: errors.InvalidRequestError,
    401: errors.InvalidRequestError,
    403: errors.InvalidRequestError,
    422: errors.InvalidRequestError,
    404: errors.NotFoundError,
    409: errors.ConflictError,
}
"""A refusal's error by its status; any other status is `UnavailableError`."""
REFUSED_AS_BY_CODE: dict[str, type[ColonyError]] = {
    "operation_failed": errors.OperationFailedError,
    "quota_exceeded": errors.QuotaExceededError,
}
"""Codes that say more than their status (a 409 that is a failure, not the state refusing)."""


def error_of(response: httpx.Response) -> ColonyError:
    """The typed error of an API refusal (see the module docstring), with the API's message."""
    try:
        detail = response.json().get("error") or {}
        message = str(detail["message"])
        code = str(detail.get("code", ""))
    except (ValueError, KeyError, AttributeError, TypeError):
        message = f"Colony API: {response.status_code} {response.reason_phrase}"
        code = ""
    refused = REFUSED_AS_BY_CODE.get(code) or REFUSED_AS.get(response.status_code)
    return (refused or UnavailableError)(message)


def retry_after(response: httpx.Response) -> float:
    try:
        return min(float(response.headers.get("Retry-After", "1")), MAX_RETRY_AFTER)
    except ValueError:
        return 1.0


def answer(response: httpx.Response) -> Any:
    if not response.is_success:
        raise error_of(response)
    try:
        return response.json()
    except ValueError as exc:
        raise UnavailableError(
            f"Colony API: {response.status_code} with a body that is not JSON"
        ) from exc


def parsed(model: type[ModelT], data: Any) -> ModelT:
    """An answer read into a model; a shape this release cannot read is the server's problem."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise UnavailableError(f"Colony API: unexpected answer: {exc}") from exc


def items_of(body: Any) -> list[dict[str, Any]]:
    """The `items` of a list answer."""
    items = body.get("items") if isinstance(body, dict) else None
    return [item for item in items or [] if isinstance(item, dict)]


def not_through_the_api(field_name: str, rule: str) -> InvalidRequestError:
    return InvalidRequestError(f"{field_name}: {rule} ({NOT_THROUGH_THE_API})")


# --- the client ------------------------------------------------------------------------------


@dataclass
class RemoteClient:
    """Where the API is and the key to call it with (the key is never shown: `repr=False`)."""

    url: str
    key: str = field(repr=False)
    workflows: dict[str, WorkflowRef] = field(default_factory=dict)
    """The workflows the API named in its answers (`workflowId`, `webUi`), by what they are of
    (`cluster/<name>`, `workspace/<name>`, `colony/<name>`): remote mode never works a workflow
    id out for itself."""

    @classmethod
    def of_login(cls, env: Mapping[str, str] = os.environ) -> RemoteClient:
        """The client of the stored login (`colonyctl auth login`)."""
        stored = login.read_login(env)
        if stored is None:
            raise InvalidRequestError(
                "not logged in: run `colonyctl auth login --url URL --api-key KEY`"
            )
        return cls(*stored)

    def remember(self, body: Any, key: str) -> None:
        """Keep the workflow an answer about `key` names, if it names one."""
        if not isinstance(body, dict) or not isinstance(body.get("workflowId"), str):
            return
        if body["workflowId"]:
            link = body.get("webUi")
            self.workflows[key] = WorkflowRef(
                body["workflowId"], link if isinstance(link, str) else ""
            )

    def workflow(self, key: str) -> WorkflowRef:
        """The workflow of `key` as the API last named it; empty before any answer about it."""
        return self.workflows.get(key, WorkflowRef(""))

    async def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, str] | None = None,
        request_id: str | None = None,
        about: str = "",
    ) -> Any:
        """One API call; its JSON answer, or the typed error of its refusal. A 429 is retried
        after its `Retry-After`, a few times.

        Args:
            about: what the answer is about (`cluster/<name>`): the workflow it names is kept.
        """
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
        body = answer(response)
        if about:
            self.remember(body, about)
        return body


# --- an entity's resources -------------------------------------------------------------------

StatusT = TypeVar("StatusT", bound=BaseModel)


class Listed(TypedDict):
    """What the API's list adds to each entity's status: its workflow, and that workflow's page in
    the Web UI (a summary's `workflow_id` and `web_ui`)."""

    workflow_id: str
    web_ui: str


class HttpEntity(Generic[StatusT]):
    """What an entity client needs of the API: its resources under `collection`, read into the
    entity's status model, and the workflows the answers name."""

    collection: ClassVar[str]
    """`/v1/kubernetes/clusters`, `/v1/workspaces`, ..."""
    noun: ClassVar[str]
    status_type: type[StatusT]

    def __init__(self, remote: RemoteClient) -> None:
        self.remote = remote

    def path(self, name: str, *rest: str) -> str:
        return "/".join([self.collection, *(quote(part, safe="") for part in (name, *rest))])

    def about(self, name: str) -> str:
        """What an answer about the entity `name` is kept under (`RemoteClient.call`)."""
        return f"{self.noun}/{name}"

    def workflow(self, name: str) -> WorkflowRef:
        """The entity's workflow as the API last named it; empty before any answer about it."""
        return self.remote.workflow(self.about(name))

    async def _get(self, name: str) -> StatusT:
        body = await self.remote.call("GET", self.path(name), about=self.about(name))
        return parsed(self.status_type, body)

    async def _items(self, params: dict[str, str] | None = None) -> list[dict[str, Any]]:
        return items_of(await self.remote.call("GET", self.collection, params=params))

    async def _listed(self, params: dict[str, str] | None = None) -> list[tuple[StatusT, Listed]]:
        """The API's list: each item read into the entity's status, with what the list adds."""
        return [
            (
                parsed(self.status_type, item),
                Listed(
                    workflow_id=str(item.get("workflowId", "")), web_ui=str(item.get("webUi", ""))
                ),
            )
            for item in await self._items(params)
        ]
