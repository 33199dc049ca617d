"""Reliability, part 5: after every other scenario of the session (this one runs last), every
workflow history on the server, every run of every workflow, is exported (`histories/` in the
session's directory, payloads decoded) and searched, with the logs of the stack's processes
(worker, API, sim, dev server), for every secret the suite planted or came across: the notebook passwords given as secret answers, the host provider's API key, Colony's API
key, the management cluster's token, each child cluster's admin token and kubeconfig Secret and a
user's token from the API. Zero hits."""

from __future__ import annotations

import pytest

from tests.reliability.scenario import Planted, Scenario, Size, scan_for_secrets

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SIZES = [
    pytest.param(Size.FAST, id="fast"),
    pytest.param(Size.FULL, id="full", marks=[pytest.mark.reliability, pytest.mark.timeout(600)]),
]


@pytest.mark.parametrize("size", SIZES)
async def test_no_history_holds_a_secret(scenario: Scenario, planted: Planted, size: Size) -> None:
    await scan_for_secrets(scenario, planted)
