"""Checks against the host provider's catalog that run before anything starts: the location and
SKUs exist, the location stocks each SKU, has as many hosts of it in all as the cluster's pools of
it ask (no wait could serve more), and enough free hosts now (unless the request waits for
capacity).

The catalog is only advice here (the workflow's claim is what counts), so when the host provider
is not configured or cannot be reached the checks are skipped with a warning rather than blocking
the request. Called by the Temporal transport before it sends a create, a node pool's add or
scale (`clients.clusters.TemporalClusters`) or a colony's new clusters
(`clients.colonies`), for `colonyctl` in direct mode and for the HTTP API alike. Raises
`InvalidRequestError` with the field named.
No printing: the warning is logged (`colony.checks`), which without a logging configuration (the
CLI's case) Python writes to stderr as the bare line.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable

from clients.errors import InvalidRequestError, NotFoundError, UnavailableError
from clients.provider import DirectCatalog
from infra.config import ColonySettings
from models.catalog import LocationStock, stock_problem
from models.cluster import ClusterSpec, ClusterStatus
from models.manifests import ColonySpec
from models.node_pool import NodePoolSpec, NodePoolStatus, NodeSku
from models.operations import ScaleNodePoolRequest

log = logging.getLogger("colony.checks")


def _unknown_sku(ids: dict[str, set[str]], sku: NodeSku, field: str) -> None:
    if sku.gpu_model_id and sku.gpu_model_id not in ids["gpu-model"]:
        raise InvalidRequestError(
            f"{field}.gpuModelId: unknown GPU model '{sku.gpu_model_id}' "
            f"(catalog: {', '.join(sorted(ids['gpu-model']))})"
        )
    if sku.cpu_sku and sku.cpu_sku not in ids["cpu-sku"]:
        raise InvalidRequestError(
            f"{field}.cpuSku: unknown CPU SKU '{sku.cpu_sku}' "
            f"(catalog: {', '.join(sorted(ids['cpu-sku']))})"
        )


async def _stock(
    conf: ColonySettings, location_id: str, field: str
) -> tuple[dict[str, set[str]], LocationStock] | None:
    """The catalog's ids and the location's stock; None (checks skipped) without a provider."""
    if not conf.host_provider_url:
        return None
    catalog = DirectCatalog(conf)
    try:
        ids = await catalog.catalog_ids()
        if location_id not in ids["location"]:
            raise InvalidRequestError(
                f"{field}: unknown location '{location_id}' "
                f"(catalog: {', '.join(sorted(ids['location']))})"
            )
        return ids, await catalog.location_stock(location_id)
    except (UnavailableError, NotFoundError) as exc:
        log.warning("warning: catalog not checked: %s", exc.message)
        return None


def _others(pools: Iterable[NodePoolStatus], pool: str, sku: NodeSku) -> int:
    """The hosts of `sku` the cluster's pools but `pool` have or are to have (their counts)."""
    return sum(p.count for p in pools if p.sku == sku and p.name != pool)


async def check_cluster(conf: ColonySettings, spec: ClusterSpec, *, can_wait: bool = True) -> None:
    """Refuse a create whose location or SKUs the catalog does not offer, or cannot serve now.

    Args:
        can_wait: the request can wait for capacity (a colony's clusters cannot): a refusal for
            too few free hosts then advises it.
    """
    if spec.deployment_spec is not None:
        return  # built by its template (a cloud's instances): no host of the provider's
    found = await _stock(conf, spec.location_id, "locationId")
    if found is None:
        return
    ids, stock = found
    # Pools of one SKU draw on the same hosts: each is checked against their sum.
    wanted: Counter[str] = Counter()
    for pool in spec.node_pools:
        wanted[pool.sku.id] += pool.count
    for index, pool in enumerate(spec.node_pools):
        _unknown_sku(ids, pool.sku, f"nodePools[{index}].sku")
        problem = stock_problem(
            stock,
            pool.sku,
            asked=pool.count,
            more=wanted[pool.sku.id],
            others=wanted[pool.sku.id] - pool.count,
            wait_for_capacity=spec.wait_for_capacity if can_wait else None,
        )
        if problem:
            field, rule = problem
            raise InvalidRequestError(f"nodePools[{index}].{field}: {rule}")


async def check_colony(
    conf: ColonySettings, spec: ColonySpec, *, existing: frozenset[str] = frozenset()
) -> None:
    """Refuse a colony one of whose new clusters the catalog cannot serve, as a cluster create is
    refused, naming its entry (`colonyClusters[1].nodePools[0].sku.gpuModelId: ...`).

    Args:
        existing: the entries (`clusterName`) whose clusters run already: not checked again.
    """
    for index, entry in enumerate(spec.colony_clusters):
        if not entry.location_id or entry.cluster_name in existing:
            continue  # a raw ClusterDeployment spec claims no hosts of the provider's
        try:
            await check_cluster(
                conf, entry.to_cluster_spec(spec.name, spec.organization), can_wait=False
            )
        except InvalidRequestError as exc:
            raise InvalidRequestError(f"colonyClusters[{index}].{exc.message}") from exc


async def check_new_pool(
    conf: ColonySettings, status: ClusterStatus, pool: NodePoolSpec, *, wait_for_capacity: bool
) -> None:
    """Refuse a pool the cluster's location does not stock, or has too few free hosts for."""
    found = await _stock(conf, status.location_id, "locationId")
    if found is None:
        return
    ids, stock = found
    _unknown_sku(ids, pool.sku, "sku")
    problem = stock_problem(
        stock,
        pool.sku,
        asked=pool.count,
        more=pool.count,
        others=_others(status.node_pools, pool.name, pool.sku),
        wait_for_capacity=wait_for_capacity,
    )
    if problem:
        raise InvalidRequestError(": ".join(problem))


async def check_scale(
    conf: ColonySettings, status: ClusterStatus, request: ScaleNodePoolRequest
) -> None:
    """Refuse a scale-up the location has too few free hosts for; scaling down needs none."""
    pool = status.pool(request.pool)
    if pool is None or request.count <= pool.count:
        return  # an unknown pool is the workflow's to refuse (not found)
    if pool.sku.instance_type is not None:
        return  # a template's workers pool: its cloud's instances, not the provider's hosts
    found = await _stock(conf, status.location_id, "locationId")
    if found is None:
        return
    _, stock = found
    problem = stock_problem(
        stock,
        pool.sku,
        asked=request.count,
        more=request.count - pool.count,
        others=_others(status.node_pools, pool.name, pool.sku),
        wait_for_capacity=request.wait_for_capacity,
    )
    if problem:
        raise InvalidRequestError(": ".join(problem))
