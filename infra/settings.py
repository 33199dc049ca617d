"""The HTTP API's own settings, read from the environment like the rest of Colony's.

`python -m api` (and `make run`, and the `api` service of docker-compose) reads them with
`ApiSettings.from_env()`; `api.app.create_app` takes them, tests build them directly. `colonyctl`
reads them too: `colonyctl apikey` the keys' namespace (`COLONY_API_NAMESPACE`), `make run`
(`starter.dev.devstate`) the name the API's /healthz answers with. Where Temporal, the
management cluster and the host provider are comes from `infra.config.ColonySettings`,
shared with the worker and `colonyctl` (whose `SettingsError` these raise too).

Environment:
    COLONY_API_HOST: the address uvicorn binds, default 127.0.0.1.
    COLONY_API_PORT: default 8080.
    COLONY_API_RATE: requests per second each organization may make, over all its keys,
        sustained (0: no limit), default 20.
    COLONY_API_BURST: how many requests an organization may start at once above that rate,
        default 40.
    COLONY_API_IN_FLIGHT: how many of an organization's requests run at once (0: no limit),
        default 2; the others wait in its line.
    COLONY_API_QUEUE: how many of an organization's requests wait in its line at most, default
        64; one more is refused (429).
    COLONY_API_NAMESPACE: the management cluster's namespace holding the keys' Secrets, default
        colony-system (created when missing).
    COLONY_API_KEY_CACHE_SECONDS: how long a verified key is trusted without re-reading its
        Secret (a revocation made elsewhere takes this long to reach this process), default 5.
    COLONY_API_ADDRESS_RATE: key verifications (a Secret read of a key not yet verified, a
        scrypt) per second each client address may cause, sustained, default 5.
    COLONY_API_ADDRESS_BURST: how many of them an address may cause at once, default 20.
    COLONY_API_VERIFY_RATE: scrypt verifications per second in all, default 10 (0: no cap).
    COLONY_DEV_STATE_ID: the development state `make run` started this API for; /healthz says
        it, so a second `make run` can tell its own API from another program on the port.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from infra.config import SettingsError
from models.base import user_rule

SERVICE_NAME = "colony-api"
"""What /healthz says it is: `make run` reuses what listens on the API's port only if it is this."""
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_RATE = 20.0
"""20 requests/s per organization: a script polling a few clusters every second stays far below
it, a runaway loop does not."""
DEFAULT_BURST = 40
DEFAULT_IN_FLIGHT = 2
"""An organization's requests running at once: a person and a few scripts rarely have more than a
couple in flight; a flood's dozens wait in its own line instead of in front of everyone else's
requests at Temporal and the worker. What another organization's reads wait for is the flood's
requests running beside them: `bench.tenant_flood` measured acme's p99 under evil's flood at 2.2x
its idle p99 with 4 in flight, 2.0x with 2, 1.3x with 1, evil answered 24 times a second in each
(docs/benchmarks.md)."""
DEFAULT_QUEUE = 64
"""An organization's requests waiting at once: a waiting request costs a sleeping coroutine; only a
client with more connections open than this is refused, rather than made to wait."""
DEFAULT_NAMESPACE = "colony-system"
DEFAULT_ADDRESS_RATE = 5.0
DEFAULT_ADDRESS_BURST = 20
"""Verification work per client address: a client verifies each of its keys once, then its
requests are answered from the key store's memory; only a client presenting new keys (or wrong
ones) over and over reaches this."""
DEFAULT_VERIFY_RATE = 10.0
"""scrypt hashes per second in all: about 35 ms of CPU each, so at most a third of a core goes to
verifying keys, whatever a flood of wrong secrets asks."""
DEFAULT_KEY_CACHE_SECONDS = 5.0
"""Verifying a key is a scrypt hash (tens of milliseconds of CPU, on purpose) and a Secret read;
5 s of trust makes that once per key per 5 s, and bounds how long a revocation made by another
process (`colonyctl apikey revoke`) takes to apply."""

ENV = {
    "host": "COLONY_API_HOST",
    "port": "COLONY_API_PORT",
    "rate": "COLONY_API_RATE",
    "burst": "COLONY_API_BURST",
    "in_flight": "COLONY_API_IN_FLIGHT",
    "queue": "COLONY_API_QUEUE",
    "namespace": "COLONY_API_NAMESPACE",
    "key_cache_seconds": "COLONY_API_KEY_CACHE_SECONDS",
    "address_rate": "COLONY_API_ADDRESS_RATE",
    "address_burst": "COLONY_API_ADDRESS_BURST",
    "verify_rate": "COLONY_API_VERIFY_RATE",
    "dev_state_id": "COLONY_DEV_STATE_ID",
}


class ApiSettings(BaseModel):
    """The API server's settings (see the module docstring for the environment variables)."""

    model_config = ConfigDict(frozen=True)

    host: str = DEFAULT_HOST
    port: int = Field(default=DEFAULT_PORT, ge=1, le=65535)
    rate: float = Field(default=DEFAULT_RATE, ge=0)
    burst: int = Field(default=DEFAULT_BURST, ge=1)
    in_flight: int = Field(default=DEFAULT_IN_FLIGHT, ge=0)
    queue: int = Field(default=DEFAULT_QUEUE, ge=0)
    namespace: str = DEFAULT_NAMESPACE
    key_cache_seconds: float = Field(default=DEFAULT_KEY_CACHE_SECONDS, ge=0)
    address_rate: float = Field(default=DEFAULT_ADDRESS_RATE, ge=0)
    address_burst: int = Field(default=DEFAULT_ADDRESS_BURST, ge=1)
    verify_rate: float = Field(default=DEFAULT_VERIFY_RATE, ge=0)
    dev_state_id: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ApiSettings:
        """The settings from `env` (default: the process environment); a bad value is a
        `SettingsError` naming the variable."""
        environ = os.environ if env is None else env
        given = {field: environ[name] for field, name in ENV.items() if environ.get(name)}
        try:
            return cls.model_validate(given)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            name = ENV.get(str(first["loc"][0]), str(first["loc"][0]))
            raise SettingsError(f"{name}: {user_rule(first)}") from exc
