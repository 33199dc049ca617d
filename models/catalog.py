"""What a location stocks: per SKU (GPU model or CPU SKU), how many hosts it has and how many are
free now; and the rule that refuses a pool the location cannot serve.

Computed by `starter.catalog` from the host provider's `GET /v1/hosts` (the provider has no stock
endpoint) for `colonyctl catalog location list/get` and for the checks `cluster create`,
`node-pool create` and `node-pool scale` run before anything starts; the HTTP API reuses both.
Pure: no IO here.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from models.base import ColonyModel
from models.node_pool import NodeSku


class SkuKind(StrEnum):
    GPU = "gpu"
    CPU = "cpu"


class SkuStock(ColonyModel):
    """Hosts of one SKU in one location."""

    kind: SkuKind
    id: str
    total: int
    free: int


class LocationStock(ColonyModel):
    """A location of the catalog and what it stocks."""

    id: str
    name: str = ""
    country: str = ""
    skus: list[SkuStock] = Field(default_factory=list)

    def sku(self, sku: NodeSku) -> SkuStock | None:
        kind = SkuKind.GPU if sku.gpu_model_id else SkuKind.CPU
        return next((s for s in self.skus if s.kind is kind and s.id == sku.id), None)

    def of_kind(self, kind: SkuKind) -> list[SkuStock]:
        return [s for s in self.skus if s.kind is kind]


def sku_field(sku: NodeSku) -> str:
    """The request field that names the SKU: `gpuModelId` or `cpuSku`."""
    return "gpuModelId" if sku.gpu_model_id else "cpuSku"


def _describe(sku: NodeSku) -> str:
    return f"GPU model '{sku.gpu_model_id}'" if sku.gpu_model_id else f"CPU SKU '{sku.cpu_sku}'"


def stock_problem(
    stock: LocationStock, sku: NodeSku, hosts: int, *, wait_for_capacity: bool
) -> tuple[str, str] | None:
    """Why the location cannot serve `hosts` more hosts of `sku` now, as (field, rule), or None.

    A SKU the location does not stock at all is always refused (no wait can help); one it stocks
    but has too few free hosts of is refused with the free count, unless the request waits for
    capacity. The field is relative to the pool (`sku.gpuModelId`, `count`).
    """
    found = stock.sku(sku)
    if found is None:
        stocked = ", ".join(s.id for s in stock.skus) or "nothing"
        return (
            f"sku.{sku_field(sku)}",
            f"location '{stock.id}' does not stock {_describe(sku)} (it stocks: {stocked})",
        )
    if hosts > found.free and not wait_for_capacity:
        return (
            "count",
            f"{hosts} more host(s) of {sku.id} needed in {stock.id}, {found.free} free now "
            f"(of {found.total}); add --wait-for-capacity to queue and wait for them",
        )
    return None
