"""What every request of the HTTP API shares: settings, the Temporal client, the key store, the
rate limiters, Colony's public sealing key; and the dependencies that hand them to the routes (who
calls, with which key).

`api.app.create_app` builds one `ApiContext` per app and keeps it on `app.state`; the routes
(`api.clusters`, `api.catalog`, `api.workspaces`, `api.colonies`) take it, and the caller's
`Principal`, as FastAPI dependencies.

Authentication runs in this order, so that nobody can spend a key's allowance but its owner:
1. the `Authorization: Bearer colony_<id>_<secret>` header is parsed (401 when missing or
   malformed);
2. the key is verified by the store (401 unknown, revoked, wrong or expired). The store answers
   from memory when it can (`api.keys`); work it must do for this key (reading the Secret of an
   id it has not verified, a scrypt) is charged first to the client address's bucket (429 when
   spent), and scrypt has a budget of its own for all callers (429 while it is spent);
3. only then is the key's own bucket charged (429): a flood with someone's key id and wrong
   secrets never reaches it;
4. the route's permission is checked (403).
Every 401 carries `WWW-Authenticate: Bearer` (RFC 6750). The key itself is never logged, stored,
echoed or sent on; only its public id is put on the request for the access log. The client address
is the connection's peer (`python -m api` runs uvicorn without proxy headers): behind a proxy,
every caller shares the proxy's address, and only unverified work is limited by it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from temporalio.client import Client
from temporalio.service import RPCError

from activities.sealing import PUBLIC_KEY_ENV, Sealer, SealingError, SealingSettings
from activities.settings import ColonySettings, SettingsError
from api.errors import ApiError
from api.keys import ApiKey, KeyBusyError, KeyRefusedError, KeyStore, Permission, key_id_of
from api.ratelimit import RateLimiter
from api.settings import ApiSettings
from starter.client import WorkflowRef
from starter.errors import UnavailableError, temporal_unreachable

TemporalClientFactory = Callable[[], Awaitable[Client]]

PERMISSION_LABELS = {
    Permission.READ: "Kubernetes: Read",
    Permission.CONNECT: "Kubernetes: Connect",
    Permission.MANAGE: "Kubernetes: Manage",
    Permission.CATALOG_PUBLISH: "Catalog: Publish",
}


@dataclass
class ApiContext:
    """One app's shared state (see the module docstring)."""

    settings: ColonySettings
    api: ApiSettings
    keys: KeyStore
    connect: TemporalClientFactory
    limiter: RateLimiter
    """Requests per verified key."""
    addresses: RateLimiter
    """Verification work per client address (before a key is verified)."""
    sealing: SealingSettings
    _client: Client | None = None
    _connecting: asyncio.Lock = field(default_factory=asyncio.Lock)
    _sealer: Sealer | None = None

    async def temporal(self) -> Client:
        """The Temporal client, connected on first use (the API starts, and answers 503, while
        Temporal is down; the next request tries again)."""
        if self._client is not None:
            return self._client
        async with self._connecting:
            if self._client is None:
                try:
                    self._client = await self.connect()
                except UnavailableError:
                    raise
                except (RuntimeError, RPCError, OSError) as exc:
                    raise temporal_unreachable(self.settings.temporal_address, exc) from exc
        return self._client

    def workflow(self, workflow_id: str) -> WorkflowRef:
        """A workflow as the API names it in its answers: `workflowId` and its Web UI page."""
        return WorkflowRef(workflow_id, self.settings.workflow_link(workflow_id))

    def sealer(self) -> Sealer:
        """Colony's public key, with which the API seals the secret answers clients send it in
        plaintext; read on first use. A missing or unreadable key file is the server's
        configuration (`SettingsError`: 503), never the caller's fault."""
        if self._sealer is None:
            try:
                self._sealer = self.sealing.sealer()
            except SealingError as exc:
                raise SettingsError(f"{PUBLIC_KEY_ENV}: {exc}") from exc
        return self._sealer


def context(request: Request) -> ApiContext:
    ctx = request.app.state.colony
    assert isinstance(ctx, ApiContext)
    return ctx


@dataclass(frozen=True)
class Principal:
    """Who calls: the verified key (its organization scopes every cluster it names)."""

    key: ApiKey

    @property
    def organization(self) -> str:
        return self.key.organization


BEARER = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="An API key: `Authorization: Bearer colony_<id>_<secret>`.",
)


REALM = 'Bearer realm="colony"'
"""The `WWW-Authenticate` challenge of a request without a key (RFC 6750 section 3)."""
INVALID_KEY = f'{REALM}, error="invalid_token"'
"""The challenge of a request whose key was refused."""
UNKNOWN_ADDRESS = "unknown"


def _unauthenticated(message: str, challenge: str = INVALID_KEY) -> ApiError:
    return ApiError(401, "unauthenticated", message, headers={"WWW-Authenticate": challenge})


def _rate_limited(wait: float, message: str) -> ApiError:
    seconds = max(1, math.ceil(wait))
    return ApiError(
        429,
        "rate_limited",
        f"{message}: retry in {seconds}s",
        headers={"Retry-After": str(seconds)},
    )


def requires(permission: Permission | None) -> Callable[..., Awaitable[Principal]]:
    """The dependency that authenticates the caller and checks `permission` (None: any valid key),
    in the order the module docstring gives."""

    async def authenticate(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)],
    ) -> Principal:
        if credentials is None or not credentials.credentials:
            raise _unauthenticated(
                "no API key: send the header 'Authorization: Bearer colony_<id>_<secret>'", REALM
            )
        key = credentials.credentials
        key_id = key_id_of(key)
        if key_id is None:
            raise _unauthenticated("the API key is malformed (expected colony_<id>_<secret>)")
        request.state.key_id = key_id
        ctx = context(request)
        address = request.client.host if request.client else UNKNOWN_ADDRESS

        def admit() -> None:
            wait = ctx.addresses.acquire(address)
            if wait > 0:
                raise _rate_limited(
                    wait,
                    f"too many keys to verify from {address} (at most {ctx.api.address_rate:g}/s, "
                    f"bursts of {ctx.api.address_burst})",
                )

        try:
            record = await ctx.keys.authenticate(key, admit=admit)
        except KeyRefusedError as exc:
            raise _unauthenticated(exc.message) from None
        except KeyBusyError as exc:
            raise _rate_limited(
                exc.retry_after, "the API is verifying too many new keys right now"
            ) from None
        wait = ctx.limiter.acquire(key_id)
        if wait > 0:
            raise _rate_limited(
                wait,
                f"too many requests with API key {key_id} (at most {ctx.api.rate:g}/s, bursts of "
                f"{ctx.api.burst})",
            )
        if permission is not None and permission not in record.effective:
            raise ApiError(
                403,
                "forbidden",
                f"API key {key_id} lacks the permission {PERMISSION_LABELS[permission]} "
                f"({permission.value})",
            )
        return Principal(record)

    return authenticate
