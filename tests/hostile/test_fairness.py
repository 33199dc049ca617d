"""Fairness (issue 25): one organization's valid traffic cannot take more than its share of the
API, however many keys it spreads it over. Functional checks, not timings (the figures are
`bench.tenant_flood`'s): an organization's keys share one rate; its requests beyond its share in
flight wait in its own line, never in another organization's; a line that is full is refused at
once with `Retry-After`, naming the organization's limits.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from infra.fairshare import FairShare, TurnRefused
from tests.api import conftest as api_fixtures
from tests.api.conftest import ApiStack
from tests.helpers import eventually, unique

api_stack = api_fixtures.api_stack


@pytest.mark.e2e
async def test_an_organization_s_keys_share_one_rate(api_stack: ApiStack) -> None:
    evil, acme = unique("evil"), unique("acme")
    evil_keys = [await api_stack.key(evil) for _ in range(4)]
    acme_key = await api_stack.key(acme)
    # No refill to speak of: each organization may make its burst of 5 requests, no more.
    app = api_stack.app(rate=0.001, burst=5, queue=0)
    answers: list[httpx.Response] = []
    async with api_stack.http(app) as http:
        for _ in range(3):
            for key in evil_keys:
                headers = {"Authorization": f"Bearer {key}"}
                answers.append(await http.get("/v1/api-key", headers=headers))
        assert [a.status_code for a in answers] == [200] * 5 + [429] * 7, "four keys, one burst"
        refused = answers[-1]
        assert refused.headers["Retry-After"]
        assert refused.json()["error"]["message"].startswith(
            f"too many requests of organization '{evil}' at once (at most 0.001/s, bursts of 5, "
        )
        ours = await http.get("/v1/api-key", headers={"Authorization": f"Bearer {acme_key}"})
        assert ours.status_code == 200, "another organization's share is its own"


async def test_requests_beyond_the_share_in_flight_wait_in_their_own_line() -> None:
    share = FairShare(rate=0, burst=1, in_flight=2, queue=8)
    release = asyncio.Event()
    running: list[str] = []

    async def request(organization: str, name: str) -> None:
        async with share.turn(organization):
            running.append(name)
            await release.wait()

    evil = [asyncio.create_task(request("evil", f"e{i}")) for i in range(6)]
    await eventually(lambda: _now(running), until=lambda now: len(now) == 2, what="2 running")
    acme = asyncio.create_task(request("acme", "a0"))
    await eventually(lambda: _now(running), until=lambda now: "a0" in now, what="acme runs")
    assert sorted(running) == ["a0", "e0", "e1"], "evil's other four wait; acme does not"
    release.set()
    await asyncio.gather(*evil, acme)
    assert running[3:] == ["e2", "e3", "e4", "e5"], "evil's line, in arrival order"


async def test_a_full_line_is_refused_at_once_naming_the_limits() -> None:
    share = FairShare(rate=0, burst=1, in_flight=1, queue=2)
    release = asyncio.Event()

    async def request() -> None:
        async with share.turn("evil"):
            await release.wait()

    held = [asyncio.create_task(request()) for _ in range(3)]  # one runs, two wait
    await eventually(lambda: _line(share, "evil"), until=lambda n: n == 2, what="two waiting")
    with pytest.raises(TurnRefused) as refused:
        async with share.turn("evil"):
            pass
    assert refused.value.message == (
        "too many requests of organization 'evil' at once (at most 1 running, 2 waiting, "
        "over all its keys)"
    )
    async with share.turn("acme"):
        pass  # another organization's line is empty
    release.set()
    await asyncio.gather(*held)


async def test_over_the_rate_a_request_waits_for_its_token_unless_the_line_is_none() -> None:
    patient = FairShare(rate=20, burst=1, in_flight=0, queue=4)
    for _ in range(3):  # a burst of one, then a token every 50 ms: waited for, not refused
        async with patient.turn("evil"):
            pass
    strict = FairShare(rate=0.001, burst=1, in_flight=0, queue=0)
    async with strict.turn("evil"):
        pass
    with pytest.raises(TurnRefused) as refused:
        async with strict.turn("evil"):
            pass
    assert refused.value.retry_after >= 1


async def _now(running: list[str]) -> list[str]:
    return list(running)


async def _line(share: FairShare, organization: str) -> int:
    return share._line(organization).waiting
