"""Test helpers: polling with a deadline (never bare sleeps) and unique names per test."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, TypeVar

from temporalio.client import WorkflowHistory

T = TypeVar("T")


def unique(prefix: str) -> str:
    """A name no other test uses: task queues, workflow ids, cluster names."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def eventually(
    probe: Callable[[], Awaitable[T]],
    *,
    until: Callable[[T], bool] = bool,
    timeout: float = 30.0,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """Poll `probe` until `until(result)` holds; fail with the last result once `timeout` passes."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = await probe()
        if until(last):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s; last value: {last!r}")
        await asyncio.sleep(interval)


def eventually_sync(
    probe: Callable[[], T],
    *,
    until: Callable[[T], bool] = bool,
    timeout: float = 30.0,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """Blocking twin of `eventually` for tests that drive blocking clients."""
    deadline = time.monotonic() + timeout
    while True:
        last = probe()
        if until(last):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s; last value: {last!r}")
        time.sleep(interval)


async def shipped_classes_listed(
    listed: Callable[[], Awaitable[Iterable[Any]]], *, timeout: float = 60.0
) -> None:
    """Wait until a front door lists every class of the shipped catalog (the worker publishes
    them as it starts). `listed` answers what it lists now: names, or JSON records with `name`
    (`colonyctl class list -o json`, the API's `items`)."""
    from catalog.workspaces import load_workspace_catalog

    shipped = {c.name for c in load_workspace_catalog().classes}

    async def names() -> set[str]:
        return {item if isinstance(item, str) else item["name"] for item in await listed()}

    await eventually(
        names, until=lambda now: shipped <= now, timeout=timeout, what="the shipped classes"
    )


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def history_text(history: WorkflowHistory) -> str:
    """Everything a history holds, readable: its JSON with every payload decoded.

    `to_json()` writes payloads (inputs, results, signals, memos, search attributes, failures'
    details) base64-encoded, so a secret in one would not show in it as typed: searching it alone
    would find nothing, whatever the history holds.
    """
    text = history.to_json()
    decoded = []
    for value in _strings(json.loads(text)):
        try:
            decoded.append(base64.b64decode(value, validate=True).decode("utf-8", "replace"))
        except (binascii.Error, ValueError):
            continue
    return "\n".join([text, *decoded])
