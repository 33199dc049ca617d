"""Activities on the host provider's HTTP API: claiming and releasing whole hosts.

`HostProviderActivities` receives an `httpx.AsyncClient` whose base URL and API key `worker.py`
set from the settings (the key lives in the client's headers, never in a request or a log line).
Called by `ClusterWorkflow` (through the declarations in `workflows.cluster_calls`) when pools grow, shrink, fail to join and when a cluster is deleted.

Every activity heartbeats (`activities.heartbeat`, through `activities.declarations.implements`), and a request already sent is never abandoned:
when the workflow cancels an activity, the request in flight is allowed to finish before the
cancellation is reported, so a claim cannot land after the workflow's owner sweep has looked.

Idempotency: a claim carries the workflow's idempotency key, so a repeated call returns the same
hosts; a release checks the host's owner first and treats free or foreign hosts as already
released, so repeating it never frees a host someone else has claimed since.

Every request is a span when tracing is configured (`infra.tracing`); claims are counted by
outcome (`infra.metrics`).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import httpx
from temporalio.exceptions import ApplicationError

from activities.declarations import cluster_calls, implements
from activities.errors import http_error, transport_error
from activities.heartbeat import report
from infra import metrics, tracing
from infra.inflight import finish
from models.activity_api import (
    AwaitFreeHostsRequest,
    AwaitFreeHostsResult,
    ClaimHostsRequest,
    ClaimHostsResult,
    Host,
    ListClaimedHostsRequest,
    ListClaimedHostsResult,
    ReleaseHostsRequest,
    ReleaseHostsResult,
)
from models.errors import ErrorType

REQUEST_TIMEOUT = httpx.Timeout(20.0, connect=5.0)
"""Below the one-minute start-to-close of a host-provider activity."""
FREE_HOSTS_POLL = 5.0
"""Seconds between looks at the free hosts while waiting for capacity."""


def host_of(data: dict[str, Any]) -> Host:
    """A `Host` from the provider's JSON host."""
    return Host(
        id=str(data["id"]),
        address=str(data["address"]),
        ssh_port=int(data.get("sshPort") or 22),
        ssh_user=str(data.get("sshUser") or "root"),
        sku_id=str(data.get("gpuModelId") or data.get("cpuSku") or ""),
        location_id=str(data.get("location") or ""),
    )


class HostProviderActivities:
    """Claims and releases on the host provider."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self._http = http

    async def _request(
        self, what: str, method: str, path: str, *, json: Any = None, params: Any = None
    ) -> httpx.Response:
        attributes = {"colony.call": what, "http.request.method": method, "url.path": path}
        with tracing.span(f"hostprovider {method} {path}", attributes) as span:
            try:
                # Cancelled by the workflow, a request on the wire is let finish (within
                # REQUEST_TIMEOUT), so that what it does lands before the cancellation is reported.
                response = await finish(
                    self._http.request(
                        method, path, json=json, params=params, timeout=REQUEST_TIMEOUT
                    )
                )
                tracing.set_attribute(span, "http.response.status_code", response.status_code)
                response.raise_for_status()
            except httpx.HTTPStatusError as exc:
                raise http_error(exc, what) from exc
            except httpx.TransportError as exc:
                raise transport_error(exc, what) from exc
            return response

    @implements(cluster_calls.CLAIM_HOSTS)
    async def claim_hosts(self, request: ClaimHostsRequest) -> ClaimHostsResult:
        """Claim `count` hosts of the SKU, all or none, under the request's idempotency key."""
        sku = (
            {"gpuModelId": request.sku.gpu_model_id}
            if request.sku.gpu_model_id
            else {"cpuSku": request.sku.cpu_sku}
        )
        try:
            response = await self._request(
                f"claim {request.count} hosts of {request.sku} in {request.location_id}",
                "POST",
                "/v1/claims",
                json={
                    "location": request.location_id,
                    "sku": sku,
                    "count": request.count,
                    "idempotencyKey": request.idempotency_key,
                    "owner": request.owner,
                },
            )
        except ApplicationError as exc:
            # Refused: the provider said no (not enough hosts, bad SKU); failed: it could not
            # answer (retried by the policy, each attempt counts).
            metrics.host_claim("refused" if exc.non_retryable else "failed")
            raise
        metrics.host_claim("claimed")
        return ClaimHostsResult(hosts=[host_of(h) for h in response.json().get("hosts") or []])

    @implements(cluster_calls.RELEASE_HOSTS)
    async def release_hosts(self, request: ReleaseHostsRequest) -> ReleaseHostsResult:
        """Give back the hosts `owner` holds among `host_ids`; the others count as released."""
        result = ReleaseHostsResult()
        for host_id in request.host_ids:
            what = f"release host {host_id}"
            try:
                found = await self._request(f"read host {host_id}", "GET", f"/v1/hosts/{host_id}")
            except ApplicationError as exc:
                if exc.type != ErrorType.NOT_FOUND:
                    raise
                result.already_released.append(host_id)
                continue
            host = found.json()
            if host.get("state") != "claimed" or host.get("owner") != request.owner:
                result.already_released.append(host_id)
                continue
            await self._request(what, "POST", f"/v1/hosts/{host_id}/release")
            result.released.append(host_id)
        return result

    @implements(cluster_calls.LIST_CLAIMED_HOSTS)
    async def list_claimed_hosts(self, request: ListClaimedHostsRequest) -> ListClaimedHostsResult:
        """Every host `owner` holds (the sweep of a cluster delete)."""
        response = await self._request(
            "list claimed hosts", "GET", "/v1/hosts", params={"state": "claimed"}
        )
        items = response.json().get("items") or []
        return ListClaimedHostsResult(
            hosts=[host_of(h) for h in items if h.get("owner") == request.owner]
        )

    @implements(cluster_calls.AWAIT_FREE_HOSTS)
    async def await_free_hosts(self, request: AwaitFreeHostsRequest) -> AwaitFreeHostsResult:
        """Look at the free hosts of the SKU in the location until `count` are free or the deadline."""
        params = {"state": "free", "location": request.location_id}
        if request.sku.gpu_model_id:
            params["gpuModelId"] = request.sku.gpu_model_id
        else:
            params["cpuSku"] = request.sku.cpu_sku or ""
        while True:
            response = await self._request(
                f"list free hosts of {request.sku} in {request.location_id}",
                "GET",
                "/v1/hosts",
                params=params,
            )
            free = len(response.json().get("items") or [])
            result = AwaitFreeHostsResult(free=free, enough=free >= request.count)
            report(result)
            left = (request.deadline - datetime.now(UTC)).total_seconds()
            if result.enough or left <= 0:
                return result
            await asyncio.sleep(min(FREE_HOSTS_POLL, left))
