"""API keys: their format, their permissions, how they are hashed, and the store that keeps them as
one Kubernetes Secret per key on the management cluster.

Called by the HTTP API (`api.auth` authenticates every request through `KeyStore.authenticate`)
and by `colonyctl apikey create|list|revoke` (`starter/commands/apikey.py`, the operator's side).
No FastAPI here.

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
(kubeconfig, token) and Manage (create, scale, delete); and Catalog Publish, an operator's, to
publish workspace classes to the catalog every organization shares. Legacy keys carry `clusters:read`, which
grants Read, or `clusters:write`, which grants "the rest" (Connect and Manage), as the product
document says; a key stores what it was granted and is mapped on use.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import logging
import re
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import Field
from temporalio.exceptions import ApplicationError

from activities.kube import MERGE_PATCH, call
from api.settings import DEFAULT_KEY_CACHE_SECONDS, DEFAULT_NAMESPACE
from models.base import ColonyModel
from models.names import name_problem
from starter.errors import InvalidRequestError, UnavailableError

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
    """The permissions as stored (sorted, without repeats); `InvalidRequestError` names an unknown one."""
    granted: set[str] = set()
    for name in names:
        canonical = PERMISSION_NAMES.get(name.strip().lower())
        if canonical is None:
            known = ", ".join(sorted(PERMISSION_NAMES))
            raise InvalidRequestError(f"permission: unknown permission '{name}' (known: {known})")
        granted.add(canonical)
    if not granted:
        raise InvalidRequestError("permission: a key needs at least one permission")
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


class KeyRefusedError(Exception):
    """The presented key is not a valid one: malformed, unknown, revoked, wrong or expired. The
    message says which in words safe to show (never the key)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


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


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


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
    created = _parse_time(annotations.get(ANNOTATION_CREATED)) or _parse_time(
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
        expires_at=_parse_time(annotations.get(ANNOTATION_EXPIRES)),
        last_used_at=_parse_time(annotations.get(ANNOTATION_LAST_USED)),
    )
    return _Stored(key, _unb64(data.get("algorithm")) or ALGORITHM, salt, digest)


class KeyStore(Protocol):
    """Where API keys live; `KubernetesKeyStore` is the one Colony runs."""

    async def create(
        self,
        organization: str,
        permissions: Iterable[str],
        *,
        name: str = "",
        expires_at: datetime | None = None,
    ) -> tuple[ApiKey, str]:
        """A new key: its record, and the key itself (to show once; it is stored nowhere)."""
        ...

    async def list_keys(self, organization: str | None = None) -> list[ApiKey]:
        """Every key (of one organization), oldest first."""
        ...

    async def revoke(self, key_id: str) -> bool:
        """Delete a key; False when there was none with that id."""
        ...

    async def authenticate(self, key: str) -> ApiKey:
        """The key's record when `key` is a valid, unexpired key; `KeyRefusedError` otherwise."""
        ...

    async def close(self) -> None: ...


class KubernetesKeyStore:
    """API keys as Secrets in `namespace` of the management cluster (see the module docstring).

    Args:
        api: the management cluster's client (the caller owns it and closes it).
        cache_seconds: how long a verified key is trusted before its Secret is read again.
        clock: now (tests pass their own).
    """

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str = DEFAULT_NAMESPACE,
        *,
        cache_seconds: float = DEFAULT_KEY_CACHE_SECONDS,
        touch_seconds: float = TOUCH_SECONDS,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.namespace = namespace
        self._core = client.CoreV1Api(api)
        self._cache_seconds = cache_seconds
        self._touch_seconds = touch_seconds
        self._clock = clock
        self._namespace_ready = False
        # key id -> (sha256 of the presented key, record, when verified): a hit costs a hash, not
        # a scrypt and a Secret read. Only a key that verified is cached.
        self._verified: dict[str, tuple[bytes, ApiKey, datetime]] = {}
        self._touched: dict[str, datetime] = {}
        self._background: set[asyncio.Task[None]] = set()

    async def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One client call; None for a 404, `UnavailableError` for anything but success."""
        try:
            return await call(what, fn, *args, **kwargs)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise UnavailableError(
                f"API key store: cannot {what}: {exc.status} {exc.reason}"
            ) from exc
        except (
            ApplicationError
        ) as exc:  # transport failures, as `activities.kube.call` reports them
            raise UnavailableError(f"API key store: cannot {what}: {exc.message}") from exc

    async def _ensure_namespace(self) -> None:
        if self._namespace_ready:
            return
        found = await self._call(
            f"read Namespace {self.namespace}", self._core.read_namespace, self.namespace
        )
        if found is None:
            try:
                await call(
                    f"create Namespace {self.namespace}",
                    self._core.create_namespace,
                    {"metadata": {"name": self.namespace}},
                )
            except ApiException as exc:
                if exc.status != 409:  # created meanwhile by another process: fine
                    raise UnavailableError(
                        f"API key store: cannot create Namespace {self.namespace}: "
                        f"{exc.status} {exc.reason}"
                    ) from exc
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
            raise InvalidRequestError(f"organization: {problem}")
        granted = canonical_permissions(permissions)
        if len(name) > 200 or "\n" in name:
            raise InvalidRequestError("name: at most 200 characters on one line")
        now = self._clock()
        if expires_at is not None and expires_at <= now:
            raise InvalidRequestError("expiresAt: must be in the future")
        await self._ensure_namespace()
        secret = secrets.token_hex(SECRET_HEX_DIGITS // 2)
        salt = secrets.token_bytes(SALT_BYTES)
        digest = await asyncio.to_thread(hash_secret, secret, salt)
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
                created = await call(
                    f"create Secret {secret_name(key_id)}",
                    self._core.create_namespaced_secret,
                    self.namespace,
                    body,
                )
            except ApiException as exc:
                if exc.status == 409:
                    continue  # 48 random bits collided: draw another id
                raise UnavailableError(
                    f"API key store: cannot create a key: {exc.status} {exc.reason}"
                ) from exc
            except ApplicationError as exc:
                raise UnavailableError(
                    f"API key store: cannot create a key: {exc.message}"
                ) from exc
            stored = _from_secret(created)
            if stored is None:
                raise UnavailableError("API key store: the created Secret does not read back")
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
        self._verified.pop(key_id, None)
        if not valid_key_id(key_id):
            return False
        stored = await self._read(key_id)
        if stored is None:
            return False
        deleted = await self._call(
            f"delete Secret {secret_name(key_id)}",
            self._core.delete_namespaced_secret,
            secret_name(key_id),
            self.namespace,
        )
        return deleted is not None

    async def authenticate(self, key: str) -> ApiKey:
        parsed = parse_key(key)
        if parsed is None:
            raise KeyRefusedError("the API key is malformed (expected colony_<id>_<secret>)")
        key_id, secret = parsed
        now = self._clock()
        fingerprint = hashlib.sha256(key.encode()).digest()
        cached = self._verified.get(key_id)
        if (
            cached is not None
            and hmac.compare_digest(cached[0], fingerprint)
            and (now - cached[2]).total_seconds() < self._cache_seconds
        ):
            record = cached[1]
        else:
            stored = await self._read(key_id)
            if stored is None:
                self._verified.pop(key_id, None)
                raise KeyRefusedError("unknown API key (never issued, or revoked)")
            digest = await asyncio.to_thread(hash_secret, secret, stored.salt, stored.algorithm)
            if not hmac.compare_digest(digest, stored.hash):
                raise KeyRefusedError("unknown API key (never issued, or revoked)")
            record = stored.key
            self._verified[key_id] = (fingerprint, record, now)
        if record.expired(now):
            raise KeyRefusedError(
                f"API key {key_id} expired at {_timestamp(record.expires_at or now)}"
            )
        self._touch(key_id, now)
        return record

    def _touch(self, key_id: str, now: datetime) -> None:
        """Record the key's last use, at most every `touch_seconds`, off the request's path."""
        last = self._touched.get(key_id)
        if last is not None and (now - last).total_seconds() < self._touch_seconds:
            return
        self._touched[key_id] = now
        task = asyncio.create_task(self._write_last_use(key_id, now))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

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
        except UnavailableError as exc:
            # Last use is bookkeeping: a request must not fail, or wait, for it.
            log.warning("cannot record the last use of API key %s: %s", key_id, exc.message)

    async def close(self) -> None:
        """Wait for the last-use writes in flight (bounded), so none is cut off."""
        if self._background:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.gather(*self._background, return_exceptions=True), timeout=5
                )
