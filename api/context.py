"""What every request of the HTTP API shares: settings, the Temporal client, the key store, the
rate limiters, Colony's public sealing key; the entity clients the routes are shells over
(`clients`, through Temporal, acting for the caller's organization); and the dependencies
that hand them to the routes (who calls, with which key).

`api.app.create_app` builds one `ApiContext` per app and keeps it on `app.state`; the routes
(`api.clusters`, `api.catalog`, `api.workspaces`, `api.colonies`) take it, and the caller's
`Principal`, as FastAPI dependencies.

Authentication runs in this order, so that nobody can spend a key's allowance but its owner:
1. the `Authorization: Bearer colony_<id>_<secret>` header is parsed (401 when missing or
   malformed);
2. the key is verified by the store (401 unknown, revoked, wrong or expired). The store answers
   from memory when it can (`infra.keys`); work it must do for this key (reading the Secret of an
   id it has not verified, a scrypt) is charged first to the client address's bucket (429 when
   spent), and scrypt has a budget of its own for all callers (429 while it is spent);
3. only then does the request take its turn in its organization's line (`infra.fairshare`:
   one rate for all the organization's keys, a bound on its requests running at once, a bounded
   line of waiting ones; 429 when the line is full): a flood with someone's key id and wrong
   secrets never reaches it, and a flood with an organization's own keys waits in that
   organization's line, never in another's;
4. the route's permission is checked (403).
The turn is held while the route runs (the dependency yields around it).
Every 401 carries `WWW-Authenticate: Bearer` (RFC 6750). The key itself is never logged, stored,
echoed or sent on; only its public id is put on the request for the access log. The client address
is the connection's peer (`python -m api` runs uvicorn without proxy headers): behind a proxy,
every caller shares the proxy's address, and only unverified work is limited by it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Annotated, TypeVar

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from temporalio.client import Client
from temporalio.service import RPCError

from api.errors import ApiError
from clients.base import WorkflowRef
from clients.classes import TemporalClasses
from clients.clusters import TemporalClusters
from clients.colonies import TemporalColonies
from clients.errors import NotFoundError, UnavailableError, temporal_unreachable
from clients.provider import DirectCatalog
from clients.purges import TemporalPurges
from clients.quotas import TemporalQuotas
from clients.temporal import TemporalSession
from clients.workspaces import TemporalWorkspaces
from infra.config import ColonySettings, SettingsError
from infra.fairshare import FairShare, TurnRefused
from infra.keys import ApiKey, KeyBusyError, KeyRefusedError, KeyStore, Permission, key_id_of
from infra.ratelimit import RateLimiter
from infra.sealing import PUBLIC_KEY_ENV, Sealer, SealingError, SealingSettings
from infra.settings import ApiSettings

TemporalClientFactory = Callable[[], Awaitable[Client]]
S = TypeVar("S")
T = TypeVar("T")

LIST_CONCURRENCY = 8
"""Status queries in flight at once while listing: each is one cheap query, but an organization
with hundreds of clusters must not open hundreds of calls at once."""
API_HINT = "give it in secretValues, answers or values{others}"
"""How an API caller answers a missing required prompt (`colonyctl` asks on a terminal)."""
SHOWN = 80
"""Characters of an unknown id echoed in a message."""

PERMISSION_LABELS = {
    Permission.READ: "Kubernetes: Read",
    Permission.CONNECT: "Kubernetes: Connect",
    Permission.MANAGE: "Kubernetes: Manage",
    Permission.CATALOG_PUBLISH: "Catalog: Publish",
    Permission.QUOTA_MANAGE: "Quota: Manage",
    Permission.PURGE: "Operator: Purge",
}


@dataclass
class ApiContext:
    """One app's shared state (see the module docstring)."""

    settings: ColonySettings
    api: ApiSettings
    keys: KeyStore
    connect: TemporalClientFactory
    share: FairShare
    """Each organization's turns: its rate (over all its keys), in flight and line."""
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

    def session(self, organization: str) -> TemporalSession:
        """Temporal, acting for `organization` (the caller's: its entities are the only ones
        a request can find)."""
        return TemporalSession(self.settings, organization, connector=self.temporal)

    def clusters(self, principal: Principal) -> TemporalClusters:
        return TemporalClusters(self.session(principal.organization))

    def workspaces(self, principal: Principal) -> TemporalWorkspaces:
        """Secret answers are sealed with the API's own key; a missing prompt is named with the
        API's fields."""
        return TemporalWorkspaces(
            self.session(principal.organization), sealer=self.sealer, hint=API_HINT
        )

    def classes(self, organization: str) -> TemporalClasses:
        """The class catalog as `organization` sees it ("": the shared catalog only)."""
        return TemporalClasses(self.session(organization))

    def colonies(self, principal: Principal) -> TemporalColonies:
        return TemporalColonies(self.session(principal.organization))

    def quotas(self, organization: str) -> TemporalQuotas:
        """Organizations' quotas, read (and, for an operator's key, set) through their ledgers."""
        return TemporalQuotas(self.session(organization))

    def purges(self) -> TemporalPurges:
        """Purges of any organization's entities (the operator API's: the target names the
        organization, not the caller's key)."""
        return TemporalPurges(self.session(""))

    def catalog(self) -> DirectCatalog:
        """The host provider's catalog, asked directly."""
        return DirectCatalog(self.settings)

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


def shown(text: str) -> str:
    """A caller's id as a message echoes it: at most `SHOWN` characters."""
    return text if len(text) <= SHOWN else text[:SHOWN] + "..."


async def each_found(
    names: Iterable[str], read: Callable[[str], Awaitable[S]], view: Callable[[S], T]
) -> list[T]:
    """The `view` of what `read` gives for each name, `LIST_CONCURRENCY` reads at once, in order; a
    name whose entity is gone meanwhile (deleted between the list and the read) is left out."""
    limit = asyncio.Semaphore(LIST_CONCURRENCY)

    async def one(name: str) -> T | None:
        async with limit:
            try:
                return view(await read(name))
            except NotFoundError:
                return None

    found = await asyncio.gather(*(one(name) for name in names))
    return [item for item in found if item is not None]


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


def _charge(limiter: RateLimiter, key: str, what: str, rate: float, burst: int) -> None:
    """Take a token of `key`'s bucket, or refuse (429) saying `what` went over which rate."""
    wait = limiter.acquire(key)
    if wait > 0:
        raise _rate_limited(wait, f"{what} (at most {rate:g}/s, bursts of {burst})")


def requires(permission: Permission | None) -> Callable[..., AsyncIterator[Principal]]:
    """The dependency that authenticates the caller, takes its organization's turn for the
    route's run and checks `permission` (None: any valid key), in the order the module docstring
    gives. Declare it with `Depends(..., scope="function")`: the turn ends with the route."""

    async def authenticate(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)],
    ) -> AsyncIterator[Principal]:
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
            _charge(
                ctx.addresses,
                address,
                f"too many keys to verify from {address}",
                ctx.api.address_rate,
                ctx.api.address_burst,
            )

        try:
            record = await ctx.keys.authenticate(key, admit=admit)
        except KeyRefusedError as exc:
            raise _unauthenticated(exc.message) from None
        except KeyBusyError as exc:
            raise _rate_limited(
                exc.retry_after, "the API is verifying too many new keys right now"
            ) from None
        try:
            turn = ctx.share.turn(record.organization)
            async with turn:
                if permission is not None and permission not in record.effective:
                    raise ApiError(
                        403,
                        "forbidden",
                        f"API key {key_id} lacks the permission {PERMISSION_LABELS[permission]} "
                        f"({permission.value})",
                    )
                yield Principal(record)
        except TurnRefused as exc:
            raise _rate_limited(exc.retry_after, exc.message) from None

    return authenticate
