"""The simulated host provider's HTTP API: a bare-metal GPU host marketplace, JSON over aiohttp.

Colony's host-provider activities talk to it over HTTP exactly as they would to a real provider;
the k0rdent simulation shares the same `Inventory` object in-process. Every route but
`/sim/v1/faults` needs the API key (`Authorization: Bearer <key>` or `X-API-Key: <key>`) and passes
through the `FaultInjector` first under the target "hostprovider".

Routes (and `/sim/v1/records` when the inventory keeps records, see `sim.records`):
    GET    /v1/locations | /v1/gpu-models | /v1/cpu-skus
    GET    /v1/hosts?location=&gpuModelId=&cpuSku=&state=free|claimed
    GET    /v1/hosts/{hostId}
    POST   /v1/claims        {location, sku: {gpuModelId}|{cpuSku}, count, idempotencyKey, owner?}
    GET    /v1/claims/{key}
    DELETE /v1/claims/{key}  release every host of the claim (idempotent)
    POST   /v1/hosts/{hostId}/release   (idempotent)
Errors: `{"error": {"code": "...", "message": "...", ...details}}`.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from sim.apiserver.errors import ApiError
from sim.faults import FaultInjector, add_fault_routes
from sim.hostprovider.inventory import Claim, Inventory, InventoryError, Sku
from sim.records import add_records_routes

__all__ = ["FAULT_TARGET", "ClaimRequest", "HostProviderServer", "create_app"]

FAULT_TARGET = "hostprovider"

_INVENTORY_KEY = web.AppKey("inventory", Inventory)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ClaimRequest(BaseModel):
    """The body of POST /v1/claims."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    location: str
    sku: Sku
    count: int
    idempotency_key: str = Field(min_length=1, max_length=256)
    owner: str | None = Field(None, max_length=256)


def error_response(
    status: int, code: str, message: str, *, headers: dict[str, str] | None = None, **details: Any
) -> web.Response:
    """A JSON error body `{"error": {"code", "message", ...details}}`."""
    return web.json_response(
        {"error": {"code": code, "message": message, **details}}, status=status, headers=headers
    )


def _claim_body(inventory: Inventory, claim: Claim) -> dict[str, Any]:
    body = claim.wire()
    body["hosts"] = [host.wire() for host in inventory.claim_hosts(claim)]
    return body


def _authorized(request: web.Request, api_key: str) -> bool:
    supplied = request.headers.get("X-API-Key")
    auth = request.headers.get("Authorization", "")
    if supplied is None and auth.lower().startswith("bearer "):
        supplied = auth[len("bearer ") :].strip()
    return supplied is not None and hmac.compare_digest(supplied.encode(), api_key.encode())


def _middlewares(api_key: str, faults: FaultInjector | None) -> list[Any]:
    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        # The sim's own control endpoints are neither authenticated nor faulted.
        if request.path.startswith("/sim/"):
            return await handler(request)
        if not _authorized(request, api_key):
            return error_response(
                401,
                "Unauthorized",
                "missing or invalid API key",
                headers={"WWW-Authenticate": 'Bearer realm="hostprovider"'},
            )
        if faults is not None:
            try:
                await faults.before_request(FAULT_TARGET, request.method, request.path)
            except ApiError as exc:
                headers = {}
                retry_after = exc.details.get("retryAfterSeconds")
                if retry_after is not None:
                    headers["Retry-After"] = str(retry_after)
                return error_response(exc.code, exc.reason, exc.message, headers=headers)
        try:
            return await handler(request)
        except InventoryError as exc:
            return error_response(exc.status, exc.code, exc.message, **exc.details)

    return [guard]


def _routes() -> web.RouteTableDef:
    routes = web.RouteTableDef()

    @routes.get("/v1/locations")
    async def locations(request: web.Request) -> web.Response:
        inventory = request.app[_INVENTORY_KEY]
        return web.json_response({"items": [loc.wire() for loc in inventory.locations.values()]})

    @routes.get("/v1/gpu-models")
    async def gpu_models(request: web.Request) -> web.Response:
        inventory = request.app[_INVENTORY_KEY]
        return web.json_response({"items": [m.wire() for m in inventory.gpu_models.values()]})

    @routes.get("/v1/cpu-skus")
    async def cpu_skus(request: web.Request) -> web.Response:
        inventory = request.app[_INVENTORY_KEY]
        return web.json_response({"items": [s.wire() for s in inventory.cpu_skus.values()]})

    @routes.get("/v1/hosts")
    async def hosts(request: web.Request) -> web.Response:
        inventory = request.app[_INVENTORY_KEY]
        query = request.query
        state = query.get("state")
        if state not in (None, "free", "claimed"):
            return error_response(
                422,
                "UnprocessableEntity",
                f"state must be free or claimed, not {state!r}",
                field="state",
            )
        found = inventory.hosts(
            location=query.get("location"),
            gpu_model_id=query.get("gpuModelId"),
            cpu_sku=query.get("cpuSku"),
            state="free" if state == "free" else "claimed" if state == "claimed" else None,
        )
        return web.json_response({"items": [h.wire() for h in found]})

    @routes.get("/v1/hosts/{host_id}")
    async def host(request: web.Request) -> web.Response:
        inventory = request.app[_INVENTORY_KEY]
        host_id = request.match_info["host_id"]
        found = inventory.host(host_id)
        if found is None:
            return error_response(404, "NotFound", f"no host {host_id!r}", hostId=host_id)
        return web.json_response(found.wire())

    @routes.post("/v1/hosts/{host_id}/release")
    async def release_host(request: web.Request) -> web.Response:
        inventory = request.app[_INVENTORY_KEY]
        return web.json_response(inventory.release_host(request.match_info["host_id"]).wire())

    @routes.post("/v1/claims")
    async def create_claim(request: web.Request) -> web.Response:
        inventory = request.app[_INVENTORY_KEY]
        try:
            body = ClaimRequest.model_validate(await request.json())
        except json.JSONDecodeError as exc:
            return error_response(400, "BadRequest", f"body is not JSON: {exc}")
        except ValidationError as exc:
            problems = [
                {"field": ".".join(str(p) for p in e["loc"]), "message": e["msg"]}
                for e in exc.errors()
            ]
            return error_response(
                422, "UnprocessableEntity", "invalid claim request", problems=problems
            )
        claim, created = inventory.claim(
            body.idempotency_key, body.location, body.sku, body.count, body.owner
        )
        return web.json_response(_claim_body(inventory, claim), status=201 if created else 200)

    @routes.get("/v1/claims/{key}")
    async def get_claim(request: web.Request) -> web.Response:
        inventory = request.app[_INVENTORY_KEY]
        claim = inventory.claim_info(request.match_info["key"])
        return web.json_response(_claim_body(inventory, claim))

    @routes.delete("/v1/claims/{key}")
    async def delete_claim(request: web.Request) -> web.Response:
        inventory = request.app[_INVENTORY_KEY]
        claim = inventory.release_claim(request.match_info["key"])
        return web.json_response(_claim_body(inventory, claim))

    return routes


def create_app(
    inventory: Inventory,
    api_key: str,
    faults: FaultInjector | None = None,
    routes: Iterable[web.AbstractRouteDef] = (),
) -> web.Application:
    """The host provider's aiohttp application over `inventory`, guarded by `api_key` (but for
    /sim/v1/faults and the sim's own `routes`, e.g. /sim/v1/identity)."""
    if not api_key:
        raise ValueError("the host provider needs a non-empty API key")
    app = web.Application(middlewares=_middlewares(api_key, faults))
    app[_INVENTORY_KEY] = inventory
    app.add_routes(_routes())
    if faults is not None:
        add_fault_routes(app, faults)
    if inventory.records is not None:
        add_records_routes(app, inventory.records)
    app.add_routes(routes)
    return app


class HostProviderServer:
    """The host provider listening on 127.0.0.1; `url` is known once `start` returns."""

    def __init__(
        self,
        inventory: Inventory,
        api_key: str,
        faults: FaultInjector | None = None,
        routes: Iterable[web.AbstractRouteDef] = (),
    ) -> None:
        self.inventory = inventory
        self.api_key = api_key
        self.faults = faults
        self.routes = tuple(routes)
        self._runner: web.AppRunner | None = None
        self._url: str | None = None

    @property
    def url(self) -> str:
        if self._url is None:
            raise RuntimeError("host provider not started")
        return self._url

    async def start(self, port: int = 0, host: str = "127.0.0.1") -> str:
        """Listen on `host:port` (0: any free port) and return the base URL."""
        runner = web.AppRunner(create_app(self.inventory, self.api_key, self.faults, self.routes))
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        self._runner = runner
        bound_port = runner.addresses[0][1]
        self._url = f"http://{host}:{bound_port}"
        return self._url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self._url = None

    async def __aenter__(self) -> HostProviderServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


def main(argv: list[str] | None = None) -> None:
    """Run the host provider alone: `python -m sim.hostprovider.app --port 8081`.

    The API key comes from --api-key or SIM_HOSTPROVIDER_API_KEY; --faults takes a FaultConfig YAML.
    """
    import argparse
    import os
    from pathlib import Path

    import yaml

    from sim.hostprovider.inventory import load_inventory

    parser = argparse.ArgumentParser(description="Colony's simulated host provider")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--inventory", default=None, help="inventory YAML (default: built-in)")
    parser.add_argument("--api-key", default=os.environ.get("SIM_HOSTPROVIDER_API_KEY", ""))
    parser.add_argument("--faults", default=None, help="fault configuration YAML")
    args = parser.parse_args(argv)
    if not args.api_key:
        parser.error("an API key is needed: --api-key or SIM_HOSTPROVIDER_API_KEY")
    faults = FaultInjector.from_config(
        yaml.safe_load(Path(args.faults).read_text(encoding="utf-8")) if args.faults else None
    )
    app = create_app(load_inventory(args.inventory), args.api_key, faults)
    web.run_app(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
