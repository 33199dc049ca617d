"""`/v1/locations`, `/v1/gpu-models`, `/v1/cpu-skus`: the host provider's catalog with what each
location stocks (hosts per SKU, free now), from `starter.catalog` as `colonyctl catalog` shows it.

Any valid key may read the catalog (it names no organization's resources). Mounted by
`api.app.create_app`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ValidationError

from api.context import Principal, context, requires
from api.errors import error_responses
from api.views import (
    CpuSkuList,
    CpuSkuView,
    GpuModelList,
    GpuModelView,
    LocationList,
    SkuLocationStock,
)
from models.catalog import LocationStock, SkuKind
from starter import catalog
from starter.errors import UnavailableError

router = APIRouter(prefix="/v1", tags=["catalog"])

ANY_KEY = Depends(requires(None))
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


@router.get(
    "/locations",
    response_model=LocationList,
    response_model_exclude_none=True,
    responses=READS,
    summary="List locations",
)
async def list_locations(request: Request, principal: Principal = ANY_KEY) -> LocationList:
    """Every location (data center), with the GPU models and CPU SKUs it stocks: total and free
    hosts of each."""
    return LocationList(items=await catalog.stock(context(request).settings))


@router.get(
    "/locations/{location_id}",
    response_model=LocationStock,
    response_model_exclude_none=True,
    responses=READS,
    summary="Get a location",
)
async def get_location(
    request: Request, location_id: str, principal: Principal = ANY_KEY
) -> LocationStock:
    return await catalog.location_stock(context(request).settings, location_id)


@router.get(
    "/gpu-models",
    response_model=GpuModelList,
    response_model_exclude_none=True,
    responses=READS,
    summary="List GPU models",
)
async def list_gpu_models(request: Request, principal: Principal = ANY_KEY) -> GpuModelList:
    """GPU models (a GPU node is a whole host of one model), with their stock per location."""
    settings = context(request).settings
    stock = _stock_by_sku(await catalog.stock(settings), SkuKind.GPU)
    items = await catalog.fetch(settings, "gpu-model")
    return GpuModelList(
        items=_views(
            items,
            lambda item: GpuModelView.model_validate(
                {**item, "stock": stock.get(str(item.get("id")), [])}
            ),
            "GPU model",
        )
    )


@router.get(
    "/cpu-skus",
    response_model=CpuSkuList,
    response_model_exclude_none=True,
    responses=READS,
    summary="List CPU SKUs",
)
async def list_cpu_skus(request: Request, principal: Principal = ANY_KEY) -> CpuSkuList:
    """Whole-host CPU SKUs, with their stock per location."""
    settings = context(request).settings
    stock = _stock_by_sku(await catalog.stock(settings), SkuKind.CPU)
    items = await catalog.fetch(settings, "cpu-sku")
    return CpuSkuList(
        items=_views(
            items,
            lambda item: CpuSkuView.model_validate(
                {**item, "stock": stock.get(str(item.get("id")), [])}
            ),
            "CPU SKU",
        )
    )
