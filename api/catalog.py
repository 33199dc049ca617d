"""`/v1/locations`, `/v1/gpu-models`, `/v1/cpu-skus`: the host provider's catalog with what each
location stocks (hosts per SKU, free now), from the host provider through
`clients.provider.DirectCatalog`, as `colonyctl catalog` shows it in direct mode.

Any valid key may read the catalog (it names no organization's resources). Mounted by
`api.app.create_app`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from api.context import Principal, context
from api.errors import error_responses
from api.routes import ANY_KEY, entity_router, reads
from api.views import (
    CpuSkuList,
    CpuSkuView,
    GpuModelList,
    GpuModelView,
    LocationList,
    SkuLocationStock,
)
from clients.errors import UnavailableError
from models.catalog import LocationStock, SkuKind

router, ROUTERS = entity_router("/v1", "catalog")
"""The routes this module adds to the API (`api.app.entity_routers`)."""

READS = error_responses(401, 404, 422, 429, 503)

ViewT = TypeVar("ViewT", bound=BaseModel)


def _stock_by_sku(stock: list[LocationStock], kind: SkuKind) -> dict[str, list[SkuLocationStock]]:
    by_sku: dict[str, list[SkuLocationStock]] = {}
    for location in stock:
        for sku in location.of_kind(kind):
            by_sku.setdefault(sku.id, []).append(
                SkuLocationStock(location_id=location.id, total=sku.total, free=sku.free)
            )
    return by_sku


def _views(
    items: list[dict[str, Any]], make: Callable[[dict[str, Any]], ViewT], what: str
) -> list[ViewT]:
    """The provider's items as views; an item of an unexpected shape is the provider's fault."""
    try:
        return [make(item) for item in items]
    except ValidationError as exc:
        raise UnavailableError(f"host provider: unexpected {what} in the catalog: {exc}") from exc


@reads(router, "/locations", LocationList, "List locations", responses=READS)
async def list_locations(request: Request, principal: Principal = ANY_KEY) -> LocationList:
    """Every location (data center), with the GPU models and CPU SKUs it stocks: total and free
    hosts of each."""
    return LocationList(items=await context(request).catalog().stock())


@reads(router, "/locations/{location_id}", LocationStock, "Get a location", responses=READS)
async def get_location(
    request: Request, location_id: str, principal: Principal = ANY_KEY
) -> LocationStock:
    return await context(request).catalog().location_stock(location_id)


async def _skus(
    request: Request, kind: SkuKind, catalog_kind: str, view: type[ViewT], what: str
) -> list[ViewT]:
    """The catalog's SKUs of one kind as views, each with its stock per location."""
    catalog = context(request).catalog()
    stock = _stock_by_sku(await catalog.stock(), kind)
    items = await catalog.fetch(catalog_kind)
    return _views(
        items,
        lambda item: view.model_validate({**item, "stock": stock.get(str(item.get("id")), [])}),
        what,
    )


@reads(router, "/gpu-models", GpuModelList, "List GPU models", responses=READS)
async def list_gpu_models(request: Request, principal: Principal = ANY_KEY) -> GpuModelList:
    """GPU models (a GPU node is a whole host of one model), with their stock per location."""
    return GpuModelList(
        items=await _skus(request, SkuKind.GPU, "gpu-model", GpuModelView, "GPU model")
    )


@reads(router, "/cpu-skus", CpuSkuList, "List CPU SKUs", responses=READS)
async def list_cpu_skus(request: Request, principal: Principal = ANY_KEY) -> CpuSkuList:
    """Whole-host CPU SKUs, with their stock per location."""
    return CpuSkuList(items=await _skus(request, SkuKind.CPU, "cpu-sku", CpuSkuView, "CPU SKU"))
