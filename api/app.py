"""The HTTP API's application: `create_app(settings, temporal_client_factory, key_store)`.

Wires the routes (`api.clusters`, `api.catalog`, `api.workspaces`, `api.colonies`, the caller's own key), the error bodies
(`api.errors`), each organization's share (`infra.fairshare`: its rate over all its keys, its
requests in flight and its line) and the rate limit per client address (`infra.ratelimit`),
charged as `api.context` says, and an access log of its own. Called by
`python -m api` (`api.__main__`), by `make run` through it, and by the tests, which pass the dev
server's client and a key store on the simulated management cluster.

The access log replaces uvicorn's: one line per request with the method, the path (never the query
string), the status, the duration and the calling key's public id. Headers are never logged, so
neither an API key nor a cluster token can reach a log; nor do they reach Temporal: a key is
verified here and only the organization it carries goes on, and tokens are issued by the child
cluster straight to this process (`api.clusters`).
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

import api as api_package
from api.bodies import openapi_components
from api.context import ApiContext, Principal, TemporalClientFactory
from api.errors import ApiError, error_responses, install
from api.routes import ANY_KEY
from api.views import KeyView
from infra.config import ColonySettings
from infra.fairshare import FairShare
from infra.keys import KeyStore
from infra.ratelimit import RateLimiter
from infra.sealing import SealingSettings
from infra.settings import SERVICE_NAME, ApiSettings

log = logging.getLogger("colony.api")
access_log = logging.getLogger("colony.api.access")

TITLE = "Colony"
VERSION = "1"
DESCRIPTION = """GPU Kubernetes clusters whose node pools are whole hosts, and the application
workspaces (Jupyter, vLLM, a dev box) that run on them, run by Colony's durable workflows.
Authenticate with an API key: `Authorization: Bearer colony_<id>_<secret>`. Long operations
answer 202; poll the cluster, operation or workspace until it is done. Every refusal is
`{"error": {"code", "field", "message"}}`."""


def create_app(
    settings: ColonySettings,
    temporal_client_factory: TemporalClientFactory,
    key_store: KeyStore,
    *,
    api_settings: ApiSettings | None = None,
    sealing: SealingSettings | None = None,
) -> FastAPI:
    """The API as an ASGI app.

    Args:
        settings: where Temporal, the management cluster and the host provider are.
        temporal_client_factory: connects to Temporal (on first use; a failure is a 503 and the
            next request tries again).
        key_store: where API keys are verified (`infra.keys.KubernetesKeyStore`).
        api_settings: rate limit and server settings; the defaults when None.
        sealing: where Colony's public key is (`COLONY_SEALING_PUBLIC_KEY_FILE` when None): the
            API seals the secret prompt answers of workspace deploys with it.
    """
    api = api_settings or ApiSettings()
    # The docs page serves Swagger UI from the `swagger-ui-bundle-v2` package, not from a CDN:
    # `make run` works offline, and so must its /docs.
    app = FastAPI(
        title=TITLE, version=VERSION, description=DESCRIPTION, docs_url=None, redoc_url=None
    )
    app.mount(DOCS_ASSETS, StaticFiles(directory=swagger_ui_path), name="docs-assets")
    app.add_api_route("/docs", docs, methods=["GET"], include_in_schema=False)
    app.state.colony = ApiContext(
        settings=settings,
        api=api,
        keys=key_store,
        connect=temporal_client_factory,
        share=FairShare(api.rate, api.burst, api.in_flight, api.queue),
        addresses=RateLimiter(api.address_rate, api.address_burst),
        sealing=sealing or SealingSettings.from_env(),
    )
    install(app)
    for router in entity_routers():
        app.include_router(router)
    app.add_api_route(
        "/v1/api-key",
        whoami,
        methods=["GET"],
        response_model=KeyView,
        response_model_exclude_none=True,
        responses=error_responses(401, 429, 503),
        summary="The calling API key",
        tags=["keys"],
    )
    app.add_api_route("/healthz", healthz, methods=["GET"], include_in_schema=False)
    app.middleware("http")(_access_log)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def entity_routers() -> list[APIRouter]:
    """Every module's `ROUTERS` (its entity's routes), found where they are, by module name: a new
    entity's routes need no line here."""
    routers: list[APIRouter] = []
    for found in sorted(pkgutil.iter_modules(api_package.__path__), key=lambda m: m.name):
        if found.name.startswith("_"):
            continue  # `python -m api` itself
        module = importlib.import_module(f"{api_package.__name__}.{found.name}")
        routers += getattr(module, "ROUTERS", ())
    return routers


async def whoami(principal: Principal = ANY_KEY) -> KeyView:
    """The key the request was made with: its organization and permissions (never its secret)."""
    key = principal.key
    return KeyView(
        id=key.id,
        organization=key.organization,
        permissions=key.permissions,
        effective_permissions=sorted(p.value for p in key.effective),
        name=key.name,
        created_at=key.created_at,
        expires_at=key.expires_at,
        last_used_at=key.last_used_at,
    )


DOCS_ASSETS = "/docs-assets"


async def docs() -> HTMLResponse:
    """Swagger UI over this API's OpenAPI document, with its assets served from here."""
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title=f"{TITLE} API",
        swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png",
    )


async def healthz(request: Request) -> dict[str, str]:
    """For load balancers and compose: the process answers (Temporal is not asked), and says it
    is Colony's API (of which development state, under `make run`)."""
    body = {"status": "ok", "service": SERVICE_NAME}
    dev_state_id = request.app.state.colony.api.dev_state_id
    if dev_state_id:
        body["devStateId"] = dev_state_id
    return body


async def _access_log(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    started = time.perf_counter()
    try:
        response = await call_next(request)
    except Exception:
        # Whatever a request hits, the caller gets the error body, not a dropped connection; the
        # traceback is the server's (it holds no header: headers are never part of a message).
        log.exception("unexpected error in %s %s", request.method, request.url.path)
        response = ApiError(500, "internal", "internal error (the server logged it)").response()
    access_log.info(
        "%s %s %d %.1fms key=%s",
        request.method,
        request.url.path,
        response.status_code,
        (time.perf_counter() - started) * 1000,
        getattr(request.state, "key_id", "-"),
    )
    return response


def _openapi(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        schema.setdefault("components", {}).setdefault("schemas", {}).update(openapi_components())
        app.openapi_schema = schema
    return app.openapi_schema
