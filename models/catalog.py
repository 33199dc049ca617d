"""What a location stocks: per SKU (GPU model or CPU SKU), how many hosts it has and how many are
free now; and the rule that refuses a pool the location cannot serve.

Computed by `clients.provider` from the host provider's `GET /v1/hosts` (the provider has
no stock endpoint) for `colonyctl catalog location list/get` and for the checks `cluster create`,
`node-pool create` and `node-pool scale` run before anything starts; the HTTP API reuses both.
Pure: no IO here.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from models.advice import set_option
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
    stock: LocationStock,
    sku: NodeSku,
    *,
    asked: int,
    more: int,
    others: int = 0,
    wait_for_capacity: bool | None,
) -> tuple[str, str] | None:
    """Why the location cannot serve a pool of `sku`, as (field, rule), or None.

    Advice is given only where it can help: a SKU the location does not stock, or more hosts of it
    than the location has in all, are refused whatever the request (no wait can serve them); too
    few free now is refused with the free count, and with the advice to wait for capacity when the
    request can (unless it does). The field is relative to the pool (`sku.gpuModelId`, `count`).

    Args:
        stock: the location's stock.
        sku: the pool's SKU.
        asked: the hosts the pool is to have (its count).
        more: the hosts to claim now (a scale-up's difference; a create's pools of one SKU claim
            at once, so theirs is their sum).
        others: the hosts of the SKU the cluster's other pools have or are to have.
        wait_for_capacity: whether the request waits for hosts to be free; None when it cannot
            (a colony's clusters): its refusal then does not advise it.
    """
    found = stock.sku(sku)
    if found is None:
        stocked = ", ".join(s.id for s in stock.skus) or "nothing"
        return (
            f"sku.{sku_field(sku)}",
            f"location '{stock.id}' does not stock {_describe(sku)} (it stocks: {stocked})",
        )
    if asked + others > found.total:
        room = found.total - others
        by = (
            f" ({asked} by this pool, {others} by the cluster's other pools of it)"
            if others
            else ""
        )
        fix = f"ask for at most {room}" if room > 0 else "the cluster's other pools have them all"
        return (
            "count",
            f"{asked + others} hosts of {sku.id} asked{by}, location {stock.id} has "
            f"{found.total} in all; {fix}",
        )
    if more > found.free and not wait_for_capacity:
        short = (
            f"{more} more host(s) of {sku.id} needed in {stock.id}, {found.free} free now "
            f"(of {found.total})"
        )
        if wait_for_capacity is None:
            return "count", f"{short}; apply it again once enough are free"
        return "count", f"{short}; {set_option('waitForCapacity')} to queue and wait for them"
    return None
