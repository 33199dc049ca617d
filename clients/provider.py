"""The host provider's catalog as Colony's clients see it: locations, GPU models, CPU SKUs, and what
each location stocks (hosts per SKU, free now). One client, two transports: `DirectCatalog`
asks the provider itself, `HttpCatalog` asks Colony's HTTP API (remote mode), which answers from
a `DirectCatalog` of its own.

Direct is plain HTTP with httpx, straight to the provider (the catalog is neither Kubernetes nor
a workflow). Stock is computed from the provider's `GET /v1/hosts?location=...`, which lists every
host with its state; the provider has no stock endpoint. Used by `colonyctl catalog`, by the checks
the Temporal transport runs before a create, an add or a scale (`clients.checks`), and by the HTTP
API's catalog routes. Raises `clients.errors` types; no Typer or rich here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import defaultdict
from typing import Any
from urllib.parse import quote

import httpx

from clients.errors import NotFoundError, UnavailableError
from clients.http import RemoteClient, items_of, parsed
from infra.config import ColonySettings
from infra.provider_errors import http_error_body
from models.catalog import LocationStock, SkuKind, SkuStock

CATALOG_PATHS = {
    "location": "/v1/locations",
    "gpu-model": "/v1/gpu-models",
    "cpu-sku": "/v1/cpu-skus",
}
HOSTS_PATH = "/v1/hosts"
TIMEOUT = httpx.Timeout(10.0, connect=3.0)


class ProviderCatalog(ABC):
    """What a caller can read of the host provider's catalog, whichever transport carries it."""

    @abstractmethod
    async def fetch(self, kind: str) -> list[dict[str, Any]]:
        """The catalog's items of one kind ("location", "gpu-model", "cpu-sku")."""

    @abstractmethod
    async def stock(self) -> list[LocationStock]:
        """Every location with its stock."""

    @abstractmethod
    async def location_stock(self, location_id: str) -> LocationStock:
        """One location with its stock; `NotFoundError` when the catalog has no such location."""


class DirectCatalog(ProviderCatalog):
    """The catalog from the host provider itself (`settings.require_host_provider()`)."""

    def __init__(self, settings: ColonySettings) -> None:
        self.settings = settings

    async def _get(self, path: str, params: dict[str, str] | None = None) -> Any:
        url, key = self.settings.require_host_provider()
        async with httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=TIMEOUT
        ) as http:
            try:
                response = await http.get(path, params=params)
                response.raise_for_status()
            except httpx.HTTPStatusError as exc:
                error = http_error_body(exc.response)
                raise UnavailableError(
                    f"host provider: {exc.response.status_code} "
                    f"{error.get('code') or exc.response.reason_phrase}: "
                    f"{error.get('message') or exc.response.text[:200]}"
                ) from exc
            except httpx.TransportError as exc:
                raise UnavailableError(f"cannot reach the host provider at {url}: {exc}") from exc
        return response.json()

    async def fetch(self, kind: str) -> list[dict[str, Any]]:
        return items_of(await self._get(CATALOG_PATHS[kind]))

    async def hosts(self, location_id: str) -> list[dict[str, Any]]:
        """Every host of a location, as the provider lists them (for stock and quota facts)."""
        return items_of(await self._get(HOSTS_PATH, {"location": location_id}))

    async def catalog_ids(self) -> dict[str, set[str]]:
        """The ids of every kind, for validation."""
        return {
            kind: {str(item.get("id")) for item in await self.fetch(kind)} for kind in CATALOG_PATHS
        }

    async def stock(self) -> list[LocationStock]:
        """Two requests: the locations, then every host."""
        locations = await self.fetch("location")
        hosts = items_of(await self._get(HOSTS_PATH))
        return [stock_of(location, hosts) for location in locations]

    async def location_stock(self, location_id: str) -> LocationStock:
        locations = await self.fetch("location")
        location = next((loc for loc in locations if loc.get("id") == location_id), None)
        if location is None:
            known = ", ".join(sorted(str(loc.get("id")) for loc in locations))
            raise NotFoundError(f"location: unknown location '{location_id}' (catalog: {known})")
        return stock_of(location, await self.hosts(location_id))


class HttpCatalog(ProviderCatalog):
    """The catalog through Colony's HTTP API (`/v1/locations`, `/v1/gpu-models`,
    `/v1/cpu-skus`), read into the same models."""

    def __init__(self, remote: RemoteClient) -> None:
        self.remote = remote

    async def fetch(self, kind: str) -> list[dict[str, Any]]:
        return items_of(await self.remote.call("GET", CATALOG_PATHS[kind]))

    async def stock(self) -> list[LocationStock]:
        return [parsed(LocationStock, item) for item in await self.fetch("location")]

    async def location_stock(self, location_id: str) -> LocationStock:
        path = f"{CATALOG_PATHS['location']}/{quote(location_id, safe='')}"
        return parsed(LocationStock, await self.remote.call("GET", path))


def stock_of(location: dict[str, Any], hosts: list[dict[str, Any]]) -> LocationStock:
    """A location's stock from the provider's hosts (those of other locations are ignored)."""
    counts: dict[tuple[SkuKind, str], list[int]] = defaultdict(lambda: [0, 0])
    for host in hosts:
        if host.get("location") != location.get("id"):
            continue
        if host.get("gpuModelId"):
            key = (SkuKind.GPU, str(host["gpuModelId"]))
        elif host.get("cpuSku"):
            key = (SkuKind.CPU, str(host["cpuSku"]))
        else:
            continue
        counts[key][0] += 1
        counts[key][1] += host.get("state") == "free"
    return LocationStock(
        id=str(location.get("id")),
        name=str(location.get("name") or ""),
        country=str(location.get("country") or ""),
        skus=[
            SkuStock(kind=kind, id=sku, total=total, free=free)
            # GPU models first, as the catalog lists them; then CPU SKUs.
            for (kind, sku), (total, free) in sorted(
                counts.items(), key=lambda item: (item[0][0] is not SkuKind.GPU, item[0][1])
            )
        ],
    )
