"""Authentication that cannot be turned against a key's owner (issue 13, point 2).

Without a server, the key store over fake Secrets (every read counted) and a fake clock:
- an unknown id costs one Secret read, however often it is presented;
- a wrong secret is remembered by the whole key, so repeating it costs nothing and the owner's
  right secret still passes;
- a proven key is not hashed again, and its Secret is read once per cache period;
- scrypt runs within its budget per second, whatever is presented;
- `admit` (the API's per-address charge) is asked before work, never for what memory answers.

Through the real ASGI app on the dev server and the sim:
- a flood of 192 requests (64 at a time) with the victim's public key id and wrong secrets, from
  the victim's own address and another: every request of the victim answers 200 meanwhile, the
  scrypt budget holds, and the victim's Secret is not read once per request;
- random unknown key ids do not each cost a Secret read;
- every 401 carries `WWW-Authenticate: Bearer`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import urllib3
from fastapi import FastAPI
from kubernetes import client as kube_client
from kubernetes.client.exceptions import ApiException

from api.errors import install
from infra.keys import (
    KeyBusyError,
    KeyRefusedError,
    KeyRequestError,
    KeyStoreUnavailableError,
    KubernetesKeyStore,
    format_key,
    hash_secret,
    secret_name,
)
from tests.api.conftest import ALL_PERMISSIONS, BASE_URL, ApiStack
from tests.helpers import unique

ORGANIZATION = "acme"


# --- the key store, without a server ---------------------------------------------------------


@dataclass
class Response:
    data: bytes


@dataclass
class FakeSecrets:
    """The `CoreV1Api` calls the key store makes, over a dict of Secrets; reads are counted."""

    secrets: dict[str, dict[str, Any]] = field(default_factory=dict)
    reads: Counter[str] = field(default_factory=Counter)
    patch_seconds: float = 0.0
    """How long a patch takes (in the client's thread), as a slow server's would."""
    patched_missing: list[str] = field(default_factory=list)

    def read_namespace(self, name: str, **_: Any) -> Response:
        return Response(json.dumps({"metadata": {"name": name}}).encode())

    def create_namespaced_secret(self, namespace: str, body: dict[str, Any], **_: Any) -> Response:
        self.secrets[body["metadata"]["name"]] = body
        return Response(json.dumps(body).encode())

    def read_namespaced_secret(self, name: str, namespace: str, **_: Any) -> Response:
        self.reads[name] += 1
        if name not in self.secrets:
            raise ApiException(status=404, reason="Not Found")
        return Response(json.dumps(self.secrets[name]).encode())

    def delete_namespaced_secret(self, name: str, namespace: str, **_: Any) -> Response:
        self.secrets.pop(name, None)
        return Response(b"{}")

    def patch_namespaced_secret(self, name: str, namespace: str, body: Any, **_: Any) -> Response:
        time.sleep(self.patch_seconds)
        if name not in self.secrets:
            self.patched_missing.append(name)
            raise ApiException(status=404, reason="Not Found")
        return Response(b"{}")


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass
class Hashes:
    """A fast stand-in for scrypt that counts its calls (the store's work is what is tested)."""

    calls: int = 0

    def __call__(self, secret: str, salt: bytes, algorithm: str) -> bytes:
        self.calls += 1
        return hashlib.sha256(salt + secret.encode()).digest()


@dataclass
class Faked:
    store: KubernetesKeyStore
    secrets: FakeSecrets
    clock: Clock
    hashes: Hashes


@pytest.fixture
async def faked() -> AsyncIterator[Faked]:
    api = kube_client.ApiClient()
    clock, hashes, fake = Clock(), Hashes(), FakeSecrets()
    store = KubernetesKeyStore(api, cache_seconds=5.0, hash_rate=5.0, hasher=hashes, clock=clock)
    store._core = fake  # type: ignore[assignment]
    yield Faked(store, fake, clock, hashes)
    await store.close()
    api.close()  # type: ignore[no-untyped-call]


def wrong(key: str) -> str:
    """The same key id with another secret."""
    return format_key(key.split("_")[1], secrets.token_hex(24))


async def refused(store: KubernetesKeyStore, key: str, **kwargs: Any) -> type[Exception]:
    with pytest.raises((KeyRefusedError, KeyBusyError)) as caught:
        await store.authenticate(key, **kwargs)
    return caught.type


async def test_an_unknown_id_costs_one_read_however_often_it_is_presented(faked: Faked) -> None:
    unknown = format_key("abcdefabcdef", "0" * 48)
    for _ in range(200):
        assert await refused(faked.store, unknown) is KeyRefusedError
    assert faked.secrets.reads[secret_name("abcdefabcdef")] == 1
    assert faked.hashes.calls == 0


async def test_a_wrong_secret_is_remembered_and_never_blocks_the_right_one(faked: Faked) -> None:
    _, key = await faked.store.create(ORGANIZATION, ["read"])
    created = faked.hashes.calls
    attack = wrong(key)
    for _ in range(20):
        assert await refused(faked.store, attack) is KeyRefusedError
    assert faked.hashes.calls == created + 1, "a repeated wrong key is refused from memory"
    record = await faked.store.authenticate(key)
    assert record.organization == ORGANIZATION


async def test_a_proven_key_is_not_hashed_again_and_its_secret_is_read_once_per_period(
    faked: Faked,
) -> None:
    _, key = await faked.store.create(ORGANIZATION, ["read"])
    created = faked.hashes.calls
    for _ in range(60):
        await faked.store.authenticate(key)
        faked.clock.advance(1.0)
    assert faked.hashes.calls == created + 1
    assert faked.secrets.reads[secret_name(key.split("_")[1])] == 12  # one per 5 s of 60 s


async def test_one_key_presented_by_many_requests_at_once_is_read_and_hashed_once(
    faked: Faked,
) -> None:
    _, key = await faked.store.create(ORGANIZATION, ["read"])
    created = faked.hashes.calls
    records = await asyncio.gather(*(faked.store.authenticate(key) for _ in range(20)))
    assert {record.organization for record in records} == {ORGANIZATION}
    attack = wrong(key)
    refusals = await asyncio.gather(*(refused(faked.store, attack) for _ in range(20)))
    assert set(refusals) == {KeyRefusedError}
    assert faked.hashes.calls == created + 2, "one scrypt for the right key, one for the wrong"
    assert faked.secrets.reads[secret_name(key.split("_")[1])] == 1


async def test_scrypt_runs_within_its_budget_per_second(faked: Faked) -> None:
    _, key = await faked.store.create(ORGANIZATION, ["read"])
    created = faked.hashes.calls
    outcomes = Counter([await refused(faked.store, wrong(key)) for _ in range(50)])
    assert faked.hashes.calls - created == 5, "a burst of 5 (hash_rate=5)"
    assert outcomes == {KeyRefusedError: 5, KeyBusyError: 45}
    faked.clock.advance(1.0)
    await faked.store.authenticate(key)
    assert faked.hashes.calls - created == 6, "budget is back after a second"


async def test_admit_is_asked_before_work_and_never_for_what_memory_answers(
    faked: Faked,
) -> None:
    asked: list[str] = []

    def admit() -> None:
        asked.append("work")

    _, key = await faked.store.create(ORGANIZATION, ["read"])
    await faked.store.authenticate(key, admit=admit)
    assert len(asked) == 2, "the first read of the id and the scrypt"
    await faked.store.authenticate(key, admit=admit)
    faked.clock.advance(6.0)
    await faked.store.authenticate(key, admit=admit)
    assert len(asked) == 2, "memory, then a refresh of a proven key: no charge"
    unknown = format_key("abcdefabcdef", "0" * 48)
    await refused(faked.store, unknown, admit=admit)
    await refused(faked.store, unknown, admit=admit)
    assert len(asked) == 3

    def refuse() -> None:
        raise RuntimeError("over the address's budget")

    with pytest.raises(RuntimeError):
        await faked.store.authenticate(wrong(key), admit=refuse)
    await faked.store.authenticate(key, admit=refuse)  # proven: no work, so never refused


async def test_a_revocation_applies_once_the_secret_is_read_again(faked: Faked) -> None:
    _, key = await faked.store.create(ORGANIZATION, ["read"])
    await faked.store.authenticate(key)
    faked.secrets.secrets.clear()  # `colonyctl apikey revoke` in another process
    await faked.store.authenticate(key)
    faked.clock.advance(5.0)
    assert await refused(faked.store, key) is KeyRefusedError


async def test_a_revocation_lets_the_keys_last_use_land_first(faked: Faked) -> None:
    """A key used and revoked at once: its last use, written in the background, is not a patch of
    a deleted Secret (a 404 the management cluster's audit log shows as a refusal)."""
    faked.secrets.patch_seconds = 0.2
    created, key = await faked.store.create(ORGANIZATION, ["read"])
    await faked.store.authenticate(key)
    assert await faked.store.revoke(created.id)
    await faked.store.close()
    assert faked.secrets.patched_missing == []
    assert faked.secrets.secrets == {}


# --- through the ASGI app ---------------------------------------------------------------------


class CountingSecrets:
    """The store's `CoreV1Api`, with its Secret reads counted by name."""

    def __init__(self, core: kube_client.CoreV1Api) -> None:
        self._core = core
        self.reads: Counter[str] = Counter()

    def read_namespaced_secret(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self.reads[name] += 1
        return self._core.read_namespaced_secret(name, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._core, name)


@dataclass
class Guarded:
    stack: ApiStack
    store: KubernetesKeyStore
    core: CountingSecrets
    scrypts: Callable[[], int]
    app: FastAPI

    def http(self, address: str, key: str | None = None) -> httpx.AsyncClient:
        """A client of the app through ASGI, whose requests come from `address`."""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        transport = httpx.ASGITransport(app=self.app, client=(address, 40000))
        return httpx.AsyncClient(
            transport=transport, base_url=BASE_URL, headers=headers, timeout=60
        )


HASH_RATE = 5.0
ADDRESS_RATE, ADDRESS_BURST = 2.0, 4
VICTIM, ELSEWHERE = "192.0.2.10", "198.51.100.7"


@pytest.fixture
async def guarded(api_stack: ApiStack) -> AsyncIterator[Guarded]:
    calls = 0

    def scrypt(secret: str, salt: bytes, algorithm: str) -> bytes:
        nonlocal calls
        calls += 1
        return hash_secret(secret, salt, algorithm)

    store = KubernetesKeyStore(api_stack.management, hash_rate=HASH_RATE, hasher=scrypt)
    core = CountingSecrets(store._core)
    store._core = core  # type: ignore[assignment]
    app = api_stack.app(
        store=store, rate=5.0, burst=10, address_rate=ADDRESS_RATE, address_burst=ADDRESS_BURST
    )
    yield Guarded(api_stack, store, core, lambda: calls, app)
    await store.close()


@pytest.mark.e2e
async def test_a_flood_with_the_victims_key_id_never_locks_the_victim_out(
    guarded: Guarded,
) -> None:
    _, key = await guarded.store.create(unique("victim"), ALL_PERMISSIONS)
    key_id = key.split("_")[1]
    created = guarded.scrypts()
    started = time.monotonic()
    victim_statuses: list[int] = []
    attack_statuses: Counter[int] = Counter()
    challenges: set[str] = set()
    async with (
        guarded.http(VICTIM, key) as victim,
        guarded.http(VICTIM) as neighbour,
        guarded.http(ELSEWHERE) as stranger,
    ):
        victim_statuses.append((await victim.get("/v1/api-key")).status_code)

        async def attack(http: httpx.AsyncClient) -> None:
            answer = await http.get(
                "/v1/kubernetes/clusters", headers={"Authorization": f"Bearer {wrong(key)}"}
            )
            attack_statuses[answer.status_code] += 1
            if answer.status_code == 401:
                challenges.add(answer.headers.get("WWW-Authenticate", ""))

        async def own_request() -> None:
            victim_statuses.append((await victim.get("/v1/kubernetes/clusters")).status_code)

        for _ in range(3):
            # 64 wrong keys at once, half from the victim's own address, and the victim's
            # requests in the middle of them.
            await asyncio.gather(
                *(attack(neighbour if index % 2 else stranger) for index in range(64)),
                *(own_request() for _ in range(3)),
            )
    elapsed = time.monotonic() - started
    assert victim_statuses == [200] * 10
    assert set(attack_statuses) <= {401, 429}, attack_statuses
    assert sum(attack_statuses.values()) == 192
    assert challenges == {'Bearer realm="colony", error="invalid_token"'}
    # One scrypt for the victim's first request, then the budget: bursts of 5, 5 per second.
    scrypts = guarded.scrypts() - created
    assert scrypts <= 1 + HASH_RATE + HASH_RATE * elapsed, (scrypts, elapsed)
    # The victim's Secret: read when first presented, then once per 5 s of cache at most.
    assert guarded.core.reads[secret_name(key_id)] <= 2 + elapsed / 5.0


@pytest.mark.e2e
async def test_unknown_key_ids_do_not_each_cost_a_secret_read(guarded: Guarded) -> None:
    statuses: Counter[int] = Counter()
    started = time.monotonic()
    async with guarded.http(ELSEWHERE) as http:
        for _ in range(100):
            unknown = format_key(secrets.token_hex(6), secrets.token_hex(24))
            answer = await http.get("/v1/api-key", headers={"Authorization": f"Bearer {unknown}"})
            statuses[answer.status_code] += 1
        repeated = format_key(secrets.token_hex(6), secrets.token_hex(24))
        async with guarded.http("203.0.113.5", repeated) as other:
            for _ in range(50):
                assert (await other.get("/v1/api-key")).status_code == 401
    elapsed = time.monotonic() - started
    reads = sum(guarded.core.reads.values())
    # From one address: the burst, then its rate; the repeated id from another: once.
    assert reads <= ADDRESS_BURST + ADDRESS_RATE * elapsed + 1, (reads, elapsed)
    assert set(statuses) <= {401, 429}, statuses
    assert guarded.scrypts() == 0


@pytest.mark.e2e
async def test_every_401_carries_a_bearer_challenge(guarded: Guarded) -> None:
    async with guarded.http(VICTIM) as http:
        missing = await http.get("/v1/api-key")
        malformed = await http.get("/v1/api-key", headers={"Authorization": "Bearer nope"})
    assert (missing.status_code, malformed.status_code) == (401, 401)
    assert missing.headers["WWW-Authenticate"] == 'Bearer realm="colony"'
    assert malformed.headers["WWW-Authenticate"] == 'Bearer realm="colony", error="invalid_token"'


# --- the store's own errors, and how the API answers them ------------------------------------


class Unreachable(FakeSecrets):
    """A management cluster that refuses connections."""

    def read_namespaced_secret(self, name: str, namespace: str, **_: Any) -> Response:
        raise urllib3.exceptions.NewConnectionError(None, "connection refused")  # type: ignore[arg-type]


async def test_an_unreachable_management_cluster_is_the_stores_unavailable_error(
    faked: Faked,
) -> None:
    faked.store._core = Unreachable()  # type: ignore[assignment]
    with pytest.raises(KeyStoreUnavailableError, match=r"^API key store: cannot read Secret "):
        await faked.store.authenticate(format_key("0123456789ab", "f" * 48))


@pytest.mark.parametrize(
    ("organization", "permissions", "field"),
    [
        pytest.param("Acme", ["read"], "organization", id="organization"),
        pytest.param("acme", ["admin"], "permission", id="permission"),
    ],
)
async def test_a_key_asked_for_wrongly_is_the_stores_request_error(
    faked: Faked, organization: str, permissions: list[str], field: str
) -> None:
    with pytest.raises(KeyRequestError, match=rf"^{field}: "):
        await faked.store.create(organization, permissions)
    assert not faked.secrets.secrets


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        pytest.param(KeyRequestError("permission: unknown"), 422, "invalid", id="request"),
        pytest.param(
            KeyStoreUnavailableError("API key store: cannot read"), 503, "unavailable", id="down"
        ),
    ],
)
async def test_the_api_answers_the_stores_errors_as_every_refusal(
    error: Exception, status: int, code: str
) -> None:
    app = FastAPI()
    install(app)

    async def failing() -> None:
        raise error

    app.add_api_route("/failing", failing)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as http:
        answer = await http.get("/failing")
    assert answer.status_code == status
    assert answer.json()["error"]["code"] == code
    assert answer.json()["error"]["message"] == str(error)
