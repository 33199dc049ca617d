"""Reliability, part 5: after every other scenario of the session (this one runs last), every
workflow history on the server, every run of every workflow, is exported (`histories/` in the
session's directory, payloads decoded) and searched, with the logs of the stack's processes
(worker, API, sim, dev server), for every secret the suite planted or came across: the notebook passwords given as secret answers, the host provider's API key, Colony's API
key, the management cluster's token, each child cluster's admin token and kubeconfig Secret and a
user's token from the API. Zero hits."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from tests.helpers import history_text
from tests.reliability.scenario import Planted, Scenario, Size

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SIZES = [
    pytest.param(Size.FAST, id="fast"),
    pytest.param(Size.FULL, id="full", marks=[pytest.mark.reliability, pytest.mark.timeout(600)]),
]


@pytest.mark.parametrize("size", SIZES)
async def test_no_history_holds_a_secret(scenario: Scenario, planted: Planted, size: Size) -> None:
    temporal = scenario.stack.client
    exported = scenario.stack.workdir / "histories"
    exported.mkdir(exist_ok=True)
    hits: list[str] = []
    controls_found: Counter[str] = Counter()
    histories = events = size_bytes = 0
    kinds: Counter[str] = Counter()
    async for execution in temporal.list_workflows():
        handle = temporal.get_workflow_handle(execution.id, run_id=execution.run_id)
        history = await handle.fetch_history()
        text = history_text(history)
        histories += 1
        events += len(history.events)
        size_bytes += len(text)
        kinds[execution.workflow_type] += 1
        name = f"{histories:05d}-{execution.id.replace('/', '_')}-{execution.run_id}.json"
        raw = history.to_json()  # payloads base64-encoded: the control is not readable there
        (exported / name).write_text(raw)
        controls_found.update(v for v in planted.controls if v in text and v not in raw)
        hits += [
            f"{secret.kind} of {secret.of or 'the stack'} in {execution.id} ({execution.run_id})"
            for value, secret in planted.values.items()
            if value in text
        ]
    logs = sorted((scenario.stack.workdir / "logs").glob("*.log"))
    for log in logs:
        text = log.read_text(errors="replace")
        hits += [
            f"{secret.kind} of {secret.of or 'the stack'} in {log.name}"
            for value, secret in planted.values.items()
            if value in text
        ]
    scenario.report(
        logs_scanned=[log.name for log in logs],
        histories=histories,
        events=events,
        decoded_megabytes=round(size_bytes / 1e6, 1),
        workflows_by_type=dict(kinds),
        secrets_planted=len(planted.values),
        secrets_by_kind=planted.kinds(),
        controls_found=dict(controls_found),
        hits=len(hits),
        exported_to=str(exported),
    )
    assert histories > 0
    # The scan reads payloads: what a history holds only there, it finds.
    assert set(controls_found) == planted.controls, (controls_found, planted.controls)
    assert hits == [], scenario.failure("secrets in histories:\n" + json.dumps(hits, indent=1))
