"""API keys: their format, their permissions, how they are hashed, and the store that keeps them as
one Kubernetes Secret per key on the management cluster.

Called by the HTTP API (`api.context` authenticates every request through `KeyStore.authenticate`)
and by `colonyctl apikey create|list|revoke` (`starter/commands/apikey.py`, the operator's side).
No web framework and no Temporal here: the store's refusals and failures are its own errors
(`KeyRequestError`, `KeyStoreUnavailableError`), which each front door maps once to what it
reports (`api.errors`, `starter.commands.apikey`).

A key reads `colony_<id>_<secret>`: `id` (12 hex digits) is public, names the key's Secret and
appears in logs; `secret` (48 hex digits, 192 random bits) is shown once, when the key is created,
and never stored: the Secret holds a salted scrypt hash of it. Deleting the Secret revokes the key.

The Secret (namespace `colony-system` by default, created when missing):

    metadata.name          colony-api-key-<id>
    metadata.labels        app.kubernetes.io/managed-by=colony, colony.dev/component=api-key,
                           colony.dev/api-key-id=<id>, colony.dev/organization=<organization>
    metadata.annotations   colony.dev/permissions (comma-separated, as granted),
                           colony.dev/name (what the key is for), colony.dev/created-at,
                           colony.dev/expires-at (optional), colony.dev/last-used-at (RFC 3339)
    type                   colony.dev/api-key
    data                   algorithm (scrypt:n=16384:r=8:p=1), salt (hex), hash (hex)

Permissions are the product's: Kubernetes Read (clusters, pools, nodes, operations), Connect
(kubeconfig, token) and Manage (create, scale, delete); and two of an operator's: Catalog Publish,
to publish workspace classes to the catalog every organization shares, and Quota Manage, to read
and set any organization's quotas. Legacy keys carry `clusters:read`, which
grants Read, or `clusters:write`, which grants "the rest" (Connect and Manage), as the product
document says; a key stores what it was granted and is mapped on use.

Verifying a key costs a Secret read and a scrypt (on purpose), so whoever presents keys, valid or
not, must not be able to make the store do that at will (issue 13):
- a key's Secret, once read, is used for `cache_seconds` (then read again, so that a revocation
  made elsewhere applies); an id that has no Secret is remembered as unknown for
  `NEGATIVE_SECONDS`;
- a secret proven right is remembered with the hash it matched: while the key's Secret holds that
  hash, the same key is not hashed again;
- a key that failed is remembered by its id *and* a digest of the whole key for
  `NEGATIVE_SECONDS`: repeating a wrong secret costs nothing, and an attacker's wrong secret never
  blocks the owner's right one;
- the same id read, or the same key verified, by many requests at once is read or hashed once;
- scrypt runs at most `hash_rate` times a second in all (`KeyBusyError` beyond), so a flood of
  new wrong secrets cannot take the CPU; an owner whose key was proven needs no scrypt at all;
- what still costs work for a presented key (reading the Secret of an id not proven here, a
  scrypt) is first announced to the caller's `admit`, which may refuse it: the HTTP API charges
  it to the client's address there (`api.context`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import hmac
import json
import logging
import math
import re
import secrets
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Hashable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Generic, Protocol, TypeVar

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import Field

from infra.kube import none_when_missing, parse_time
from infra.ratelimit import RateLimiter
from infra.settings import DEFAULT_KEY_CACHE_SECONDS, DEFAULT_NAMESPACE, DEFAULT_VERIFY_RATE
from models.base import ColonyModel
from models.names import name_problem

log = logging.getLogger("colony.api.keys")

KEY_PREFIX = "colony"
ID_HEX_DIGITS = 12
SECRET_HEX_DIGITS = 48
_KEY = re.compile(
    rf"^{KEY_PREFIX}_([0-9a-f]{{{ID_HEX_DIGITS}}})_([0-9a-f]{{{SECRET_HEX_DIGITS}}})$"
)
_KEY_ID = re.compile(rf"^[0-9a-f]{{{ID_HEX_DIGITS}}}$")

SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
"""scrypt's interactive-login parameters (16 MiB, tens of milliseconds): the secret is random, so
this is defence in depth for a leaked Secret, not the only protection."""
ALGORITHM = f"scrypt:n={SCRYPT_N}:r={SCRYPT_R}:p={SCRYPT_P}"
SALT_BYTES = 16
HASH_BYTES = 32

SECRET_TYPE = "colony.dev/api-key"
LABEL_COMPONENT = "colony.dev/component"
LABEL_KEY_ID = "colony.dev/api-key-id"
LABEL_ORGANIZATION = "colony.dev/organization"
ANNOTATION_PERMISSIONS = "colony.dev/permissions"
ANNOTATION_NAME = "colony.dev/name"
ANNOTATION_CREATED = "colony.dev/created-at"
ANNOTATION_EXPIRES = "colony.dev/expires-at"
ANNOTATION_LAST_USED = "colony.dev/last-used-at"
COMPONENT = "api-key"

TOUCH_SECONDS = 60.0
"""`last-used-at` is written at most once a minute per key: a write per request would cost more
than the request, and "last used" needs no finer grain."""
NEGATIVE_SECONDS = 30.0
"""How long an id without a Secret, or a key that failed verification, is refused from memory:
ids are drawn at random when a key is created, so no key comes to exist under an id someone
presented before; the memory is bounded (`MAX_REMEMBERED`) whatever a flood presents."""
MAX_REMEMBERED = 10_000
"""Entries each of the store's memories keeps at most (the oldest go first)."""
UNKNOWN_KEY = "unknown API key (never issued, or revoked)"
MERGE_PATCH = "application/merge-patch+json"
REQUEST_TIMEOUT = (5.0, 20.0)
"""(connect, read) seconds of one call to the management cluster: a request waits for the key's
Secret, so a hung API server is a failure in seconds, not a hung request."""


class Permission(StrEnum):
    """What a key may do (the product's "Kubernetes: Read / Connect / Manage")."""

    READ = "kubernetes:read"
    """Read clusters, node pools, nodes and operations."""
    CONNECT = "kubernetes:connect"
    """Get a kubeconfig or a cluster token."""
    MANAGE = "kubernetes:manage"
    """Create, scale and delete clusters, node pools and nodes; cancel operations."""
    CATALOG_PUBLISH = "catalog:publish"
    """Publish workspace classes (and their ServiceTemplates) to the catalog every organization
    shares: an operator's. Without it, a key with Manage publishes its organization's own classes,
    which only that organization sees."""
    QUOTA_MANAGE = "quota:manage"
    """Read and set any organization's quotas (`/v1/organizations/{organization}/quota`): an
    operator's. Without it, a key reads its own organization's quotas and use (`/v1/quota`)."""
    PURGE = "operator:purge"
    """End any organization's cluster or workspace whose workflow cannot make progress and remove
    what it made (`/v1/operator/...`): an operator's."""


LEGACY_PERMISSIONS: dict[str, frozenset[Permission]] = {
    "clusters:read": frozenset({Permission.READ}),
    "clusters:write": frozenset({Permission.CONNECT, Permission.MANAGE}),
}
"""A legacy key "needs clusters:read to read and clusters:write for the rest" (product document)."""

PERMISSION_NAMES: dict[str, str] = {
    **{p.value: p.value for p in Permission},
    **{p.name.lower(): p.value for p in Permission},
    **{name: name for name in LEGACY_PERMISSIONS},
}
"""What `colonyctl apikey create --permission` accepts (`read` for `kubernetes:read`), and the name
stored for each."""


def canonical_permissions(names: Iterable[str]) -> list[str]:
    """The permissions as stored (sorted, without repeats); `KeyRequestError` names an unknown one."""
    granted: set[str] = set()
    for name in names:
        canonical = PERMISSION_NAMES.get(name.strip().lower())
        if canonical is None:
            known = ", ".join(sorted(PERMISSION_NAMES))
            raise KeyRequestError(f"permission: unknown permission '{name}' (known: {known})")
        granted.add(canonical)
    if not granted:
        raise KeyRequestError("permission: a key needs at least one permission")
    return sorted(granted)


def effective_permissions(granted: Iterable[str]) -> frozenset[Permission]:
    """What stored permissions allow, legacy names mapped; unknown names (a later release's) grant
    nothing."""
    allowed: set[Permission] = set()
    for name in granted:
        if name in LEGACY_PERMISSIONS:
            allowed |= LEGACY_PERMISSIONS[name]
        elif name in Permission.__members__.values():
            allowed.add(Permission(name))
    return frozenset(allowed)


class ApiKey(ColonyModel):
    """A key as stored: everything but its secret (which is nowhere)."""

    id: str
    organization: str
    permissions: list[str] = Field(default_factory=list)
    """As granted (legacy names included); `effective` is what they allow."""
    name: str = ""
    created_at: datetime
    expires_at: datetime | None = None
    last_used_at: datetime | None = None

    @property
    def effective(self) -> frozenset[Permission]:
        return effective_permissions(self.permissions)

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now


class KeyStoreError(Exception):
    """What the store could not do, in words safe to show (`message`: never a key)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class KeyRequestError(KeyStoreError):
    """A key cannot be made as asked (`<field>: <rule>`): the request's fault."""


class KeyStoreUnavailableError(KeyStoreError):
    """The management cluster, where the keys live, did not answer: nobody's fault, try again."""


class KeyRefusedError(KeyStoreError):
    """The presented key is not a valid one: malformed, unknown, revoked, wrong or expired. The
    message says which in words safe to show (never the key)."""


class KeyBusyError(Exception):
    """The key cannot be verified now: the store's scrypt budget for this second is spent. Not
    the key's fault: in `retry_after` seconds there is budget again."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"key verification busy; retry in {retry_after:.1f}s")
        self.retry_after = retry_after


Admit = Callable[[], None]
"""Told before the store does costly work for a presented key; raises to refuse that work."""


def admit_all() -> None:
    """The `Admit` of callers that limit nothing (the operator's `colonyctl`)."""


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Memory(Generic[K, V]):
    """A bounded map whose entries expire `seconds` after they were set (oldest dropped first)."""

    def __init__(self, seconds: float, limit: int = MAX_REMEMBERED) -> None:
        self._seconds = seconds
        self._limit = limit
        self._entries: OrderedDict[K, tuple[V, datetime]] = OrderedDict()

    def get(self, key: K, now: datetime) -> tuple[V] | None:
        """`(value,)` when `key` was set less than `seconds` ago; None otherwise."""
        entry = self._entries.get(key)
        if entry is None or (now - entry[1]).total_seconds() >= self._seconds:
            return None
        return (entry[0],)

    def set(self, key: K, value: V, now: datetime) -> None:
        self._entries.pop(key, None)
        self._entries[key] = (value, now)
        while len(self._entries) > self._limit:
            self._entries.popitem(last=False)

    def forget(self, key: K) -> None:
        self._entries.pop(key, None)


class _OneAtATime(Generic[K]):
    """One lock per key, dropped once nobody holds or awaits it: concurrent requests about the
    same key do its work once (the others find it done)."""

    def __init__(self) -> None:
        self._locks: dict[K, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: K) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


def format_key(key_id: str, secret: str) -> str:
    return f"{KEY_PREFIX}_{key_id}_{secret}"


def parse_key(text: str) -> tuple[str, str] | None:
    """(id, secret) of a well-formed key; None otherwise."""
    match = _KEY.fullmatch(text)
    return (match.group(1), match.group(2)) if match else None


def key_id_of(text: str) -> str | None:
    """The public id of a well-formed key (for rate limits and logs); None otherwise."""
    parsed = parse_key(text)
    return parsed[0] if parsed else None


def valid_key_id(key_id: str) -> bool:
    return bool(_KEY_ID.fullmatch(key_id))


def hash_secret(secret: str, salt: bytes, algorithm: str = ALGORITHM) -> bytes:
    """The stored hash of a key's secret (blocking: tens of milliseconds of CPU)."""
    params = dict(part.split("=", 1) for part in algorithm.split(":")[1:])
    if not algorithm.startswith("scrypt:"):
        raise ValueError(f"unknown key hash algorithm {algorithm!r}")
    return hashlib.scrypt(
        secret.encode(),
        salt=salt,
        n=int(params["n"]),
        r=int(params["r"]),
        p=int(params["p"]),
        maxmem=128 * 1024 * 1024,
        dklen=HASH_BYTES,
    )


def secret_name(key_id: str) -> str:
    return f"colony-api-key-{key_id}"


def _timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _unb64(text: str | None) -> str:
    return base64.b64decode(text or "").decode() if text else ""


@dataclass(frozen=True)
class _Stored:
    key: ApiKey
    algorithm: str
    salt: bytes
    hash: bytes


def _from_secret(obj: dict[str, Any]) -> _Stored | None:
    """A key from its Secret; None for a Secret that is not (or no longer) a readable key."""
    metadata = obj.get("metadata") or {}
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    data = obj.get("data") or {}
    created = parse_time(annotations.get(ANNOTATION_CREATED)) or parse_time(
        metadata.get("creationTimestamp")
    )
    key_id = labels.get(LABEL_KEY_ID, "")
    if not (valid_key_id(key_id) and created and data.get("hash") and data.get("salt")):
        return None
    try:
        salt = bytes.fromhex(_unb64(data.get("salt")))
        digest = bytes.fromhex(_unb64(data.get("hash")))
    except ValueError:
        return None
    permissions = [p for p in annotations.get(ANNOTATION_PERMISSIONS, "").split(",") if p]
    key = ApiKey(
        id=key_id,
        organization=labels.get(LABEL_ORGANIZATION, ""),
        permissions=permissions,
        name=annotations.get(ANNOTATION_NAME, ""),
        created_at=created,
        expires_at=parse_time(annotations.get(ANNOTATION_EXPIRES)),
        last_used_at=parse_time(annotations.get(ANNOTATION_LAST_USED)),
    )
    return _Stored(key, _unb64(data.get("algorithm")) or ALGORITHM, salt, digest)


class KeyStore(Protocol):
    """What the HTTP API needs of a key store: to verify the keys it is presented (making keys is
    `colonyctl apikey`'s, on `KubernetesKeyStore`)."""

    async def authenticate(self, key: str, *, admit: Admit = admit_all) -> ApiKey:
        """The key's record when `key` is a valid, unexpired key; `KeyRefusedError` otherwise,
        `KeyBusyError` when it cannot be verified now. `admit` is called before costly work for
        the key (see the module docstring); what it raises is raised."""
        ...

    async def close(self) -> None: ...


def _unavailable(what: str, exc: ApiException) -> KeyStoreUnavailableError:
    return KeyStoreUnavailableError(f"API key store: cannot {what}: {exc.status} {exc.reason}")


async def _request(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """One call to the management cluster, in a thread; its JSON body. `ApiException` is the
    caller's to read (a 404, a 409); a transport failure is `KeyStoreUnavailableError`.

    Args:
        what: what the call does, for the message ("read Secret colony-api-key-<id>").
        fn: a bound `CoreV1Api` method.
    """

    def blocking() -> Any:
        response = fn(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
        return json.loads(response.data) if response.data else {}

    try:
        return await asyncio.to_thread(blocking)
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise KeyStoreUnavailableError(
            f"API key store: cannot {what}: {type(exc).__name__}: {exc}"
        ) from exc


class KubernetesKeyStore:
    """API keys as Secrets in `namespace` of the management cluster (see the module docstring).

    Args:
        api: the management cluster's client (the caller owns it and closes it).
        cache_seconds: how long a key's Secret, once read, is used before it is read again (how
            long a revocation made by another process takes to apply here).
        hash_rate: scrypt verifications per second in all (bursts of as many); 0: no cap.
        hasher: hashes a secret (`hash_secret`; tests count the calls).
        clock: now (tests pass their own).
    """

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str = DEFAULT_NAMESPACE,
        *,
        cache_seconds: float = DEFAULT_KEY_CACHE_SECONDS,
        touch_seconds: float = TOUCH_SECONDS,
        hash_rate: float = DEFAULT_VERIFY_RATE,
        hasher: Callable[[str, bytes, str], bytes] = hash_secret,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.namespace = namespace
        self._core = client.CoreV1Api(api)
        self._touch_seconds = touch_seconds
        self._hasher = hasher
        self._clock = clock
        self._namespace_ready = False
        # Key id -> its Secret as read, for `cache_seconds`; ids found without one.
        self._records: _Memory[str, _Stored] = _Memory(cache_seconds)
        self._unknown: _Memory[str, None] = _Memory(NEGATIVE_SECONDS)
        # Key id -> (sha256 of the key proven right, the stored hash it matched).
        self._proven: _Memory[str, tuple[bytes, bytes]] = _Memory(math.inf)
        # (key id, sha256 of a key that failed): refused without work for a while.
        self._refused: _Memory[tuple[str, bytes], None] = _Memory(NEGATIVE_SECONDS)
        self._reading: _OneAtATime[str] = _OneAtATime()
        self._verifying: _OneAtATime[tuple[str, bytes]] = _OneAtATime()
        self._hashes = RateLimiter(
            hash_rate, max(1, math.ceil(hash_rate)), clock=lambda: self._clock().timestamp()
        )
        self._touched: dict[str, datetime] = {}
        self._background: set[asyncio.Task[None]] = set()
        # Key id -> its last-use write in flight, which a revocation lets finish first.
        self._writing: dict[str, asyncio.Task[None]] = {}

    async def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One client call; None for a 404, `KeyStoreUnavailableError` for anything but
        success."""
        return await none_when_missing(
            _request(what, fn, *args, **kwargs), lambda exc: _unavailable(what, exc)
        )

    async def _ensure_namespace(self) -> None:
        if self._namespace_ready:
            return
        found = await self._call(
            f"read Namespace {self.namespace}", self._core.read_namespace, self.namespace
        )
        if found is None:
            try:
                await _request(
                    f"create Namespace {self.namespace}",
                    self._core.create_namespace,
                    {"metadata": {"name": self.namespace}},
                )
            except ApiException as exc:
                if exc.status != 409:  # created meanwhile by another process: fine
                    raise _unavailable(f"create Namespace {self.namespace}", exc) from exc
        self._namespace_ready = True

    async def create(
        self,
        organization: str,
        permissions: Iterable[str],
        *,
        name: str = "",
        expires_at: datetime | None = None,
    ) -> tuple[ApiKey, str]:
        problem = name_problem("organization", organization)
        if problem:
            raise KeyRequestError(f"organization: {problem}")
        granted = canonical_permissions(permissions)
        if len(name) > 200 or "\n" in name:
            raise KeyRequestError("name: at most 200 characters on one line")
        now = self._clock()
        if expires_at is not None and expires_at <= now:
            raise KeyRequestError("expiresAt: must be in the future")
        await self._ensure_namespace()
        secret = secrets.token_hex(SECRET_HEX_DIGITS // 2)
        salt = secrets.token_bytes(SALT_BYTES)
        digest = await asyncio.to_thread(self._hasher, secret, salt, ALGORITHM)
        while True:
            key_id = secrets.token_hex(ID_HEX_DIGITS // 2)
            annotations = {
                ANNOTATION_PERMISSIONS: ",".join(granted),
                ANNOTATION_NAME: name,
                ANNOTATION_CREATED: _timestamp(now),
            }
            if expires_at is not None:
                annotations[ANNOTATION_EXPIRES] = _timestamp(expires_at)
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": secret_name(key_id),
                    "labels": {
                        "app.kubernetes.io/managed-by": "colony",
                        LABEL_COMPONENT: COMPONENT,
                        LABEL_KEY_ID: key_id,
                        LABEL_ORGANIZATION: organization,
                    },
                    "annotations": annotations,
                },
                "type": SECRET_TYPE,
                "data": {
                    "algorithm": _b64(ALGORITHM),
                    "salt": _b64(salt.hex()),
                    "hash": _b64(digest.hex()),
                },
            }
            try:
                created = await _request(
                    "create a key", self._core.create_namespaced_secret, self.namespace, body
                )
            except ApiException as exc:
                if exc.status == 409:
                    continue  # 48 random bits collided: draw another id
                raise _unavailable("create a key", exc) from exc
            stored = _from_secret(created)
            if stored is None:
                raise KeyStoreUnavailableError(
                    "API key store: the created Secret does not read back"
                )
            return stored.key, format_key(key_id, secret)

    async def list_keys(self, organization: str | None = None) -> list[ApiKey]:
        selector = f"{LABEL_COMPONENT}={COMPONENT}"
        if organization:
            selector += f",{LABEL_ORGANIZATION}={organization}"
        found = await self._call(
            "list API keys",
            self._core.list_namespaced_secret,
            self.namespace,
            label_selector=selector,
        )
        keys = [
            stored.key for obj in (found or {}).get("items", []) if (stored := _from_secret(obj))
        ]
        return sorted(keys, key=lambda key: (key.created_at, key.id))

    async def _read(self, key_id: str) -> _Stored | None:
        obj = await self._call(
            f"read Secret {secret_name(key_id)}",
            self._core.read_namespaced_secret,
            secret_name(key_id),
            self.namespace,
        )
        return _from_secret(obj) if obj else None

    async def get(self, key_id: str) -> ApiKey | None:
        if not valid_key_id(key_id):
            return None
        stored = await self._read(key_id)
        return stored.key if stored else None

    async def revoke(self, key_id: str) -> bool:
        self._records.forget(key_id)
        self._proven.forget(key_id)
        if not valid_key_id(key_id):
            return False
        stored = await self._read(key_id)
        if stored is None:
            return False
        writing = self._writing.get(key_id)
        if writing is not None:
            # Its last use, being written, lands on the Secret rather than on nothing: a patch
            # after the delete would be a 404 every audit log shows as a refusal.
            await asyncio.wait({writing}, timeout=5)
        deleted = await self._call(
            f"delete Secret {secret_name(key_id)}",
            self._core.delete_namespaced_secret,
            secret_name(key_id),
            self.namespace,
        )
        return deleted is not None

    async def authenticate(self, key: str, *, admit: Admit = admit_all) -> ApiKey:
        parsed = parse_key(key)
        if parsed is None:
            raise KeyRefusedError("the API key is malformed (expected colony_<id>_<secret>)")
        key_id, secret = parsed
        now = self._clock()
        fingerprint = hashlib.sha256(key.encode()).digest()
        if self._refused.get((key_id, fingerprint), now) is not None:
            raise KeyRefusedError(UNKNOWN_KEY)
        stored = await self._stored(key_id, admit)
        if stored is None:
            raise KeyRefusedError(UNKNOWN_KEY)
        if not self._is_proven(key_id, fingerprint, stored):
            async with self._verifying.hold((key_id, fingerprint)):
                # The request this one waited for may have settled it, either way.
                if self._refused.get((key_id, fingerprint), self._clock()) is not None:
                    raise KeyRefusedError(UNKNOWN_KEY)
                if not self._is_proven(key_id, fingerprint, stored):
                    await self._verify(key_id, secret, fingerprint, stored, admit)
        record = stored.key
        if record.expired(now):
            raise KeyRefusedError(
                f"API key {key_id} expired at {_timestamp(record.expires_at or now)}"
            )
        self._touch(key_id, now)
        return record

    def _is_proven(self, key_id: str, fingerprint: bytes, stored: _Stored) -> bool:
        """True when this very key was verified against the hash its Secret holds now."""
        proven = self._proven.get(key_id, self._clock())
        return proven is not None and (
            hmac.compare_digest(proven[0][0], fingerprint)
            and hmac.compare_digest(proven[0][1], stored.hash)
        )

    def _remembered(self, key_id: str) -> tuple[_Stored | None] | None:
        """`(its Secret, or None for none,)` when the store knows it without reading."""
        now = self._clock()
        if self._unknown.get(key_id, now) is not None:
            return (None,)
        return self._records.get(key_id, now)

    async def _stored(self, key_id: str, admit: Admit) -> _Stored | None:
        """The key's Secret: as read less than `cache_seconds` ago, else read now, once for all
        the requests that ask meanwhile. Reading the Secret of an id no key was proven of here is
        work the caller must be admitted to; refreshing a proven key's is not (that happens once
        per `cache_seconds`, however many ask)."""
        known = self._remembered(key_id)
        if known is not None:
            return known[0]
        async with self._reading.hold(key_id):
            known = self._remembered(key_id)
            if known is not None:
                return known[0]  # read by the request this one waited for
            if self._proven.get(key_id, self._clock()) is None:
                admit()
            stored = await self._read(key_id)
            now = self._clock()
            if stored is None:
                self._unknown.set(key_id, None, now)
                self._proven.forget(key_id)
            else:
                self._records.set(key_id, stored, now)
            return stored

    async def _verify(
        self, key_id: str, secret: str, fingerprint: bytes, stored: _Stored, admit: Admit
    ) -> None:
        """Hash the presented secret against the Secret's, within the store's scrypt budget."""
        admit()
        wait = self._hashes.acquire("scrypt")
        if wait > 0:
            raise KeyBusyError(wait)
        digest = await asyncio.to_thread(self._hasher, secret, stored.salt, stored.algorithm)
        now = self._clock()
        if not hmac.compare_digest(digest, stored.hash):
            self._refused.set((key_id, fingerprint), None, now)
            raise KeyRefusedError(UNKNOWN_KEY)
        self._proven.set(key_id, (fingerprint, stored.hash), now)

    def _touch(self, key_id: str, now: datetime) -> None:
        """Record the key's last use, at most every `touch_seconds`, off the request's path."""
        last = self._touched.get(key_id)
        if last is not None and (now - last).total_seconds() < self._touch_seconds:
            return
        self._touched[key_id] = now
        task = asyncio.create_task(self._write_last_use(key_id, now))
        self._background.add(task)
        self._writing[key_id] = task
        task.add_done_callback(self._background.discard)
        task.add_done_callback(functools.partial(self._written, key_id))

    def _written(self, key_id: str, task: asyncio.Task[None]) -> None:
        if self._writing.get(key_id) is task:
            del self._writing[key_id]

    async def _write_last_use(self, key_id: str, now: datetime) -> None:
        patch = {"metadata": {"annotations": {ANNOTATION_LAST_USED: _timestamp(now)}}}
        try:
            await self._call(
                f"patch Secret {secret_name(key_id)}",
                self._core.patch_namespaced_secret,
                secret_name(key_id),
                self.namespace,
                patch,
                _content_type=MERGE_PATCH,
            )
        except KeyStoreUnavailableError as exc:
            # Last use is bookkeeping: a request must not fail, or wait, for it.
            log.warning("cannot record the last use of API key %s: %s", key_id, exc.message)

    async def close(self) -> None:
        """Wait for the last-use writes in flight (bounded), so none is cut off."""
        if self._background:
            with contextlib.suppress(TimeoutError):
                # Not `wait_for`: on Python 3.11 it drops a cancellation that arrives as its call
                # completes.
                async with asyncio.timeout(5):
                    await asyncio.gather(*self._background, return_exceptions=True)
