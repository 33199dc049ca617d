"""One organization's share of the HTTP API: every verified request of an organization, whichever
of its keys it carries, takes its turn in the organization's line before it runs.

`api.context` asks `FairShare.turn(organization)` once a key is verified; the turn is held while
the route runs. Three limits per organization (each API replica counts alone, as
`infra.ratelimit`'s do):

- **rate**: `rate` requests per second sustained, bursts of `burst` (a token bucket), shared by
  all its keys: spreading a flood over more keys buys nothing (issue 25);
- **in flight**: at most `in_flight` of its requests run at once. What a request runs (a describe
  and a query to Temporal, a workflow update, the catalog) is shared with every other
  organization: the Temporal client's connection, the server, the worker's query handling. A
  flood's burst of dozens in flight queued acme's reads behind all of them there;
- **waiting**: at most `queue` more wait for their turn, in arrival order. A request that finds
  its organization's line full is refused at once (429) with the seconds until the line has
  moved; anything else waits rather than being refused.

Why waiting rather than refusing at once: a client that sends again as soon as it is refused (a
flood ignoring `Retry-After`) makes an API that refuses at once answer refusals as fast as the
client can send them, on the event loop every organization's requests share (issue 25 measured
180 refusals a second from 16 connections). A waiting request costs a sleeping coroutine, and
its connection sends nothing more meanwhile; only what exceeds `in_flight + queue` at once is
refused, and that takes a client opening ever more connections.

No web framework here: refusals are `TurnRefused`, which the API answers with 429.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

MAX_ORGANIZATIONS = 10_000
"""Lines kept at most; idle ones (nobody running or waiting, a full bucket) go first. Only
verified keys reach a line, so this is a bound on organizations, not on what clients send."""


class TurnRefused(Exception):
    """The organization's line is full: `retry_after` seconds until it has moved."""

    def __init__(self, organization: str, retry_after: float, message: str) -> None:
        super().__init__(message)
        self.organization = organization
        self.retry_after = retry_after
        self.message = message


@dataclass
class _Line:
    """One organization's bucket, its requests running, and its line of waiting ones."""

    tokens: float
    updated: float
    running: int = 0
    waiting: int = 0
    head: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held by the first request in line: asyncio's lock wakes its waiters in arrival order."""
    freed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when one of the organization's running requests ends."""

    def idle(self, burst: float, now: float, rate: float) -> bool:
        full = rate <= 0 or self.tokens + (now - self.updated) * rate >= burst
        return not self.running and not self.waiting and full


class FairShare:
    """Per-organization rate, requests in flight and line (see the module docstring).

    Args:
        rate: requests per second per organization, sustained; 0: no rate limit.
        burst: requests an organization may start at once above that rate.
        in_flight: its requests running at once; 0: no limit.
        queue: its requests waiting for their turn at most; beyond, refused at once.
        clock: seconds, monotonic (tests pass their own).
    """

    def __init__(
        self,
        rate: float,
        burst: int,
        in_flight: int,
        queue: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_organizations: int = MAX_ORGANIZATIONS,
    ) -> None:
        self.rate = rate
        self.burst = float(max(burst, 1))
        self.in_flight = in_flight
        self.queue = queue
        self._clock = clock
        self._max = max_organizations
        self._lines: dict[str, _Line] = {}

    def _line(self, organization: str) -> _Line:
        line = self._lines.get(organization)
        if line is None:
            if len(self._lines) >= self._max:
                now = self._clock()
                for name in [
                    n for n, x in self._lines.items() if x.idle(self.burst, now, self.rate)
                ]:
                    del self._lines[name]
            line = self._lines[organization] = _Line(self.burst, self._clock())
        return line

    def _take_token(self, line: _Line) -> float:
        """Take a token of the line's bucket, in advance when it has none (only the head of the
        line takes tokens, so the debt is its own): the seconds until that token is there."""
        if self.rate <= 0:
            return 0.0
        now = self._clock()
        line.tokens = min(self.burst, line.tokens + (now - line.updated) * self.rate) - 1.0
        line.updated = now
        return max(0.0, -line.tokens / self.rate)

    def _refusal(self, organization: str, line: _Line) -> TurnRefused:
        """The refusal of a request that finds the line full: `Retry-After` is the time until
        its token would come (after those of the requests waiting)."""
        seconds = 1.0
        if self.rate > 0:
            now = self._clock()
            tokens = min(self.burst, line.tokens + (now - line.updated) * self.rate)
            seconds = max(0.0, 1.0 - tokens) / self.rate + line.waiting / self.rate
        limits = [f"{self.in_flight} running", f"{self.queue} waiting"]
        if self.rate > 0:
            limits.insert(0, f"{self.rate:g}/s, bursts of {self.burst:g}")
        return TurnRefused(
            organization,
            seconds,
            f"too many requests of organization '{organization}' at once "
            f"(at most {', '.join(limits)}, over all its keys)",
        )

    @contextlib.asynccontextmanager
    async def turn(self, organization: str) -> AsyncIterator[None]:
        """Wait for the organization's turn (a token, then a slot), hold it while the block
        runs; `TurnRefused` at once when its line is full."""
        line = self._line(organization)
        if line.waiting >= self.queue and (line.waiting or self._must_wait(line)):
            raise self._refusal(organization, line)
        line.waiting += 1
        try:
            async with line.head:
                wait = self._take_token(line)
                if wait > 0:
                    await asyncio.sleep(wait)
                while self.in_flight and line.running >= self.in_flight:
                    line.freed.clear()
                    await line.freed.wait()
                line.running += 1
        finally:
            line.waiting -= 1
        try:
            yield
        finally:
            line.running -= 1
            line.freed.set()

    def _must_wait(self, line: _Line) -> bool:
        """True when a request arriving now could not start at once (no token or no slot)."""
        if self.in_flight and line.running >= self.in_flight:
            return True
        if self.rate <= 0:
            return False
        now = self._clock()
        return line.tokens + (now - line.updated) * self.rate < 1.0
