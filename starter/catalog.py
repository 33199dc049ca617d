"""The host provider's read-only catalog (locations, GPU models, CPU SKUs), for `colonyctl catalog`
and for checking a create request's locationId and SKUs before anything starts.

Plain HTTP with httpx, straight to the provider: the catalog is not Kubernetes and not a workflow.
"""

from __future__ import annotations

from typing import Any

import httpx

from activities.errors import http_error_body
from activities.settings import ColonySettings
from starter.clusters import CliError

CATALOG_PATHS = {
    "location": "/v1/locations",
    "gpu-model": "/v1/gpu-models",
    "cpu-sku": "/v1/cpu-skus",
}
TIMEOUT = httpx.Timeout(10.0, connect=3.0)


async def fetch(settings: ColonySettings, kind: str) -> list[dict[str, Any]]:
    """The catalog's items of one kind ("location", "gpu-model", "cpu-sku")."""
    url, key = settings.require_host_provider()
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=TIMEOUT
    ) as http:
        try:
            response = await http.get(CATALOG_PATHS[kind])
            response.raise_for_status()
        except httpx.HTTPStatusError as exc:
            error = http_error_body(exc.response)
            raise CliError(
                f"host provider: {exc.response.status_code} {error.get('message') or exc.response.reason_phrase}"
            ) from exc
        except httpx.TransportError as exc:
            raise CliError(f"cannot reach the host provider at {url}: {exc}") from exc
    items = response.json().get("items") or []
    return [item for item in items if isinstance(item, dict)]


async def catalog_ids(settings: ColonySettings) -> dict[str, set[str]]:
    """The ids of every kind, for validation."""
    return {
        kind: {str(item.get("id")) for item in await fetch(settings, kind)}
        for kind in CATALOG_PATHS
    }
