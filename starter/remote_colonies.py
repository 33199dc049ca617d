"""`colonyctl`'s remote mode for colonies: the functions of `starter.colony_client`, with the same
signatures, over Colony's HTTP API (`api/colonies.py`) instead of Temporal.

`starter.backend.colonies()` hands the `colony` commands (and `apply -f` of a Colony) this module
once `colonyctl auth login` has stored a URL and key. A manifest is read and validated here as in
direct mode (`models.manifests`), then sent in Colony's form; answers are read back into the same
models (`ColonyStatus`, `ColonyOperationAccepted`), refusals become the same `starter.errors`
types with the API's message (`starter.remote.error_of`), and workflow ids are the API's
(`workflowId`), never worked out from a link.

The organization is the key's: the `organization` arguments the signatures carry are ignored.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from infra.config import ColonySettings
from models.colony import ColonyOperationAccepted, ColonyStatus
from models.manifests import ColonySpec
from starter.client import WorkflowRef
from starter.colony_client import AppliedColony, ColonySummary
from starter.errors import InvalidRequestError
from starter.remote import RemoteClient, parsed
from starter.remote import connect as connect

COLONIES = "/v1/colonies"


def _path(name: str) -> str:
    return f"{COLONIES}/{quote(name, safe='')}"


def _key(name: str) -> str:
    """Under what a colony's workflow is kept among the client's (clusters use their names)."""
    return f"colony/{name}"


async def apply_colony(
    client: RemoteClient,
    settings: ColonySettings,
    spec: ColonySpec,
    *,
    request_id: str | None = None,
) -> AppliedColony:
    if spec.organization:
        raise InvalidRequestError(
            "organization: a colony applied through the API is the key's organization's; "
            "leave it out of the manifest"
        )
    body = {
        "name": spec.name,
        "colonyClusters": [
            entry.model_dump(mode="json", exclude_defaults=True) for entry in spec.colony_clusters
        ],
    }
    applied = await client.call("POST", COLONIES, json=body, request_id=request_id)
    client.remember(applied, _key(spec.name))
    return AppliedColony(
        workflow_id=str(applied.get("workflowId", "")),
        created=bool(applied.get("created", False)),
        operation_id=str(applied.get("operationId", "")),
    )


async def colony_status(client: RemoteClient, name: str, *, organization: str = "") -> ColonyStatus:
    body = await client.call("GET", _path(name))
    client.remember(body, _key(name))
    status: ColonyStatus = parsed(ColonyStatus, body)
    return status


async def list_colonies(
    client: RemoteClient, *, organization: str | None = None
) -> list[ColonySummary]:
    body = await client.call("GET", COLONIES)
    items: list[Any] = body.get("items", []) if isinstance(body, dict) else []
    summaries = []
    for item in items:
        status: ColonyStatus = parsed(ColonyStatus, item)
        summaries.append(
            ColonySummary(
                name=status.name,
                phase=status.phase.value,
                workflow_id=str(item.get("workflowId", "")),
                organization=status.organization,
                web_ui=str(item.get("webUi", "")),
            )
        )
    return sorted(summaries, key=lambda colony: colony.name)


async def delete_colony(
    client: RemoteClient, name: str, *, request_id: str | None = None, organization: str = ""
) -> ColonyOperationAccepted:
    body = await client.call("DELETE", _path(name), request_id=request_id)
    client.remember(body, _key(name))
    accepted: ColonyOperationAccepted = parsed(ColonyOperationAccepted, body)
    return accepted


def colony_workflow(
    settings: ColonySettings, client: RemoteClient, name: str, organization: str = ""
) -> WorkflowRef:
    """The colony's workflow as the API last named it; empty before any answer about it."""
    return client.workflow(_key(name))
