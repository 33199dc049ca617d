"""Request rates for the HTTP API: a token bucket for each key of a table, in this process.

`api.context` keeps three tables: one bucket per API key, charged only once the key is verified
(so that nobody but its owner can spend it); one per client address, charged for the work done to
verify keys that are not yet verified (a Secret read, a scrypt); and the key store's single bucket
of scrypt hashes for everyone (`infra.keys`). Each bucket holds up to `burst` tokens and refills at
`rate` per second; a request takes one, and one that finds none is refused with the seconds until
the next token (the 429's `Retry-After`).

In-process: several API replicas each allow the rate (a shared limiter would need a shared store,
which Colony does not run). The table of buckets is bounded: full buckets, which carry no state a
fresh one would not, are dropped first when it grows past `max_keys`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

MAX_KEYS = 10_000
"""Buckets kept at most; random key ids cannot grow the table without bound."""


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    """Token buckets by key: `rate` tokens per second, at most `burst` saved up.

    Args:
        rate: sustained requests per second per key; 0 turns limiting off.
        burst: requests a key may make at once (the bucket's size).
        clock: seconds, monotonic (tests pass their own).
    """

    def __init__(
        self,
        rate: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = MAX_KEYS,
    ) -> None:
        self.rate = rate
        self.burst = float(max(burst, 1))
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: dict[str, _Bucket] = {}

    def acquire(self, key: str) -> float:
        """Take a token for `key`: 0.0 when the request may go on, else the seconds until one
        will be there (nothing is taken then)."""
        if self.rate <= 0:
            return 0.0
        now = self._clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            self._make_room()
            bucket = self._buckets[key] = _Bucket(self.burst, now)
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.updated) * self.rate)
        bucket.updated = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / self.rate

    def _make_room(self) -> None:
        if len(self._buckets) < self._max_keys:
            return
        now = self._clock()
        full = [
            key
            for key, bucket in self._buckets.items()
            if bucket.tokens + (now - bucket.updated) * self.rate >= self.burst
        ]
        for key in full or list(self._buckets)[: len(self._buckets) // 2]:
            del self._buckets[key]
