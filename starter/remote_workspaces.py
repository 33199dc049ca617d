"""`colonyctl`'s remote mode for workspaces and classes: the functions of
`starter.workspace_client`, with the same signatures, over Colony's HTTP API (`api/workspaces.py`)
instead of Temporal.

`starter.backend.workspaces()` hands the `workspace` and `class` commands this module once
`colonyctl auth login` has stored a URL and key. Answers are read back into the same models
(`WorkspaceStatus`, `WorkspaceClassSpec`, ...), refusals become the same `starter.errors` types
with the API's message (`starter.remote.error_of`), so the lines and exit codes are the ones of
direct mode.

**Secrets are not sealed here.** In direct mode `colonyctl` seals every secret prompt answer with
Colony's public key before the request leaves it; in remote mode it sends them in plaintext to
the API (over the login's URL: use https), which seals them with the same key before the workflow
starts, so no plaintext reaches a workflow either way. The client needs no key file.

The organization is the key's: the `organization` arguments the signatures carry are ignored.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel

from activities.settings import ColonySettings
from models.cluster import DEFAULT_NAMESPACE
from models.workspace import WorkspacePhase, WorkspaceSpec, WorkspaceStatus
from models.workspace_api import (
    CatalogStatus,
    PublishWorkspaceClassRequest,
    PublishWorkspaceClassResult,
)
from models.workspace_class import WorkspaceClassSpec
from models.workspace_operations import WorkspaceOperationAccepted
from starter.client import WorkflowRef
from starter.errors import InvalidRequestError, NotFoundError, OperationFailedError
from starter.remote import RemoteClient, parsed
from starter.remote import connect as connect
from starter.workspace_client import (
    CLI_HINT,
    POLL_SECONDS,
    UPDATES,
    Asker,
    SealerSource,
    StartedWorkspace,
    WorkspaceSummary,
    answer_missing,
    public_key_sealer,
)

CLASSES = "/v1/workspace-classes"
WORKSPACES = "/v1/workspaces"


def _path(base: str, name: str, *rest: str) -> str:
    return "/".join([base, quote(name, safe=""), *rest])


def _link_key(name: str) -> str:
    """Under what a workspace's workflow is kept among the client's (clusters use their names)."""
    return f"workspace/{name}"


# --- The class catalog ---------------------------------------------------------------------------


async def catalog(client: RemoteClient) -> CatalogStatus:
    body = await client.call("GET", CLASSES)
    items = body.get("items", []) if isinstance(body, dict) else []
    return CatalogStatus(classes=[parsed(WorkspaceClassSpec, item) for item in items])


async def get_class(client: RemoteClient, name: str) -> WorkspaceClassSpec:
    found: WorkspaceClassSpec = parsed(
        WorkspaceClassSpec, await client.call("GET", _path(CLASSES, name))
    )
    return found


def _service_template(obj: dict[str, Any]) -> dict[str, Any]:
    """A ServiceTemplate object (as `ServiceTemplateManifest.to_object` makes it) as the API
    takes it."""
    metadata = obj.get("metadata") or {}
    template: dict[str, Any] = {"name": metadata.get("name", ""), "spec": obj.get("spec") or {}}
    if metadata.get("labels"):
        template["labels"] = metadata["labels"]
    return template


async def publish_class(
    client: RemoteClient, request: PublishWorkspaceClassRequest, *, request_id: str | None = None
) -> PublishWorkspaceClassResult:
    for obj in request.objects:
        if obj.get("kind") != "ServiceTemplate":
            raise InvalidRequestError(
                f"kind: {obj.get('kind')} objects cannot be published through the API (log out "
                "to use Temporal directly)"
            )
        namespace = (obj.get("metadata") or {}).get("namespace")
        if namespace not in (None, DEFAULT_NAMESPACE):
            raise InvalidRequestError(
                f"namespace: ServiceTemplates are published in {DEFAULT_NAMESPACE} through the "
                f"API, not {namespace} (log out to use Temporal directly)"
            )
    body = {
        "class": request.spec.model_dump(mode="json", exclude_none=True),
        "serviceTemplates": [_service_template(obj) for obj in request.objects],
    }
    answer = await client.call("POST", CLASSES, json=body, request_id=request_id)
    result: PublishWorkspaceClassResult = parsed(PublishWorkspaceClassResult, answer)
    return result


# --- Workspaces ----------------------------------------------------------------------------------


async def deploy(
    client: RemoteClient,
    settings: ColonySettings,
    spec: WorkspaceSpec,
    *,
    workspace_class: WorkspaceClassSpec | None = None,
    ask: Asker | None = None,
    sealer: SealerSource = public_key_sealer,
    hint: str = CLI_HINT,
    secret_values: dict[str, str] | None = None,
    request_id: str | None = None,
) -> StartedWorkspace:
    """`POST /v1/workspaces`, where the API runs `starter.workspace_client.deploy` (the cluster,
    the class, every prompt checked; secrets sealed there). Only the missing required prompts
    are handled here first, as in direct mode (asked for on a terminal, else refused by name
    with `colonyctl`'s hint), so a user is asked before the request leaves; the class is read
    for that, so an unknown class is found before an unknown cluster here. `sealer` is unused:
    the API seals what it receives."""
    if spec.sealed_answers:
        raise InvalidRequestError(
            "sealedAnswers: sealed answers cannot be sent through the API (it seals plaintext "
            "answers itself); log out to use Temporal directly"
        )
    if spec.organization:
        raise InvalidRequestError(
            "organization: a workspace deployed through the API is the key's organization's; "
            "leave it out of the manifest"
        )
    pinned = workspace_class or await get_class(client, spec.class_name)
    spec = answer_missing(spec, pinned, ask=ask, hint=hint)
    body: dict[str, Any] = {
        "name": spec.name,
        "class": spec.class_name,
        "cluster": spec.cluster,
        "values": spec.values,
        "answers": spec.answers,
        "secretValues": secret_values or {},
        "suspend": spec.suspend,
    }
    if spec.resources is not None:
        body["resources"] = spec.resources.model_dump(mode="json", exclude_none=True)
    accepted = await client.call("POST", WORKSPACES, json=body, request_id=request_id)
    client.remember(accepted, _link_key(spec.name))
    return StartedWorkspace(
        workflow_id=str(accepted.get("workflowId", "")),
        repeated=bool(accepted.get("repeated", False)),
    )


async def workspace_status(
    client: RemoteClient, name: str, *, organization: str | None = None
) -> WorkspaceStatus:
    body = await client.call("GET", _path(WORKSPACES, name))
    client.remember(body, _link_key(name))
    status: WorkspaceStatus = parsed(WorkspaceStatus, body)
    return status


async def read_workspace(
    client: RemoteClient, name: str, *, organization: str | None = None
) -> WorkspaceStatus | None:
    """The workspace's status; `NotFoundError` once it is gone (the API keeps no final status:
    `wait_for_workspace` makes the end of a deleted workspace's life out of that)."""
    return await workspace_status(client, name)


async def send(
    client: RemoteClient,
    name: str,
    update: str,
    request: BaseModel,
    *,
    request_id: str | None = None,
    organization: str | None = None,
) -> WorkspaceOperationAccepted:
    if update not in UPDATES:
        raise InvalidRequestError(f"{update}: not available through the API")
    method, path = (
        ("DELETE", _path(WORKSPACES, name))
        if update == "delete"
        else ("POST", _path(WORKSPACES, name, update))
    )
    body = await client.call(method, path, request_id=request_id)
    client.remember(body, _link_key(name))
    accepted: WorkspaceOperationAccepted = parsed(WorkspaceOperationAccepted, body)
    return accepted


async def list_workspaces(
    client: RemoteClient, *, cluster: str | None = None, organization: str | None = None
) -> list[WorkspaceSummary]:
    body = await client.call("GET", WORKSPACES, params={"cluster": cluster} if cluster else None)
    summaries = []
    for item in body.get("items", []) if isinstance(body, dict) else []:
        status: WorkspaceStatus = parsed(WorkspaceStatus, item)
        link = str(item.get("webUi", ""))
        summaries.append(
            WorkspaceSummary(
                name=status.name,
                cluster=status.cluster,
                class_name=status.class_name,
                phase=status.phase.value,
                workflow_id=str(item.get("workflowId", "")),
                started=status.created_at.isoformat(timespec="seconds")
                if status.created_at
                else "",
                web_ui=link,
                position=status.admission.position if status.admission is not None else 0,
                gpus=status.resolved_resources.gpus if status.resolved_resources else None,
            )
        )
    return sorted(summaries, key=lambda w: w.order)


async def wait_for_workspace(
    client: RemoteClient,
    name: str,
    done: Callable[[WorkspaceStatus], bool],
    on_status: Callable[[WorkspaceStatus], None],
    *,
    give_up_after: float | None = None,
    organization: str | None = None,
) -> WorkspaceStatus | None:
    """Poll the workspace until `done` holds. The commands follow a workspace the API has just
    accepted an operation for, so once the API no longer finds it, it was deleted (a fast delete
    may be done before the first poll): its last status seen, phase Deleted (Temporal would have
    given the final one)."""
    deadline = None if give_up_after is None else time.monotonic() + give_up_after
    last: WorkspaceStatus | None = None
    while True:
        try:
            status = await workspace_status(client, name)
        except NotFoundError:
            seen = last or WorkspaceStatus.model_validate(
                {"name": name, "class": "", "cluster": "", "phase": WorkspacePhase.DELETED}
            )
            gone = seen.model_copy(
                update={"phase": WorkspacePhase.DELETED, "message": "deleted", "access": []}
            )
            on_status(gone)
            return gone
        last = status
        on_status(status)
        if done(status):
            return status
        if deadline is not None and time.monotonic() > deadline:
            raise OperationFailedError(
                f"workspace '{name}' is {status.phase.value} after {give_up_after:.0f}s "
                f"({status.message or 'no message'})"
            )
        await asyncio.sleep(POLL_SECONDS)


def workspace_workflow(settings: ColonySettings, client: RemoteClient, name: str) -> WorkflowRef:
    """The workspace's workflow as the API last named it; empty before any answer about it."""
    return client.workflow(_link_key(name))
