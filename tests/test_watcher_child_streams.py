"""The watcher's loop over one stream of a child cluster (`Watcher._keep_following`), with stand-ins
for the APIs: a pass the child refuses with 401 (its credentials were rotated) or 404 (no Gateway
API served there) is closed and resumed with the kubeconfig read again; nothing is lost between
passes."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Mapping
from typing import Any, cast

import pytest
import yaml

from infra.kubeapi import KubeError
from watching import service
from watching.service import Watcher, WatcherConfig, _ChildCluster


class Done(Exception):
    """Ends the test's last pass (anything but a `KubeError` leaves the loop)."""


class ChildApi:
    """A child cluster's API as built from a kubeconfig; remembers being closed."""

    def __init__(self, kubeconfig: Mapping[str, Any]) -> None:
        self.kubeconfig = dict(kubeconfig)
        self.closed = False

    async def aclose(self) -> None:
        self.closed = True


class Management:
    """Serves the child's kubeconfig Secret: a new kubeconfig at every read (rotation)."""

    def __init__(self) -> None:
        self.reads = 0

    async def get(self, path: str) -> dict[str, Any]:
        self.reads += 1
        kubeconfig = yaml.safe_dump({"read": self.reads}).encode()
        return {"data": {"value": base64.b64encode(kubeconfig).decode()}}


class Stream:
    """A stream whose passes each yield some events, then end with an error."""

    def __init__(self, api: ChildApi, passes: list[tuple[list[str], Exception]]) -> None:
        self.name = "nodes.kcm-system.training"
        self.api = api
        self._passes = iter(passes)

    async def events(self) -> AsyncIterator[str]:
        events, error = next(self._passes)
        for event in events:
            yield event
        raise error


async def follow(stream: Stream) -> tuple[list[str], Management]:
    management = Management()
    watcher = Watcher(
        cast(Any, management),
        cast(Any, None),
        WatcherConfig(identity="test"),
        child_api=cast(Any, ChildApi),
    )
    child = _ChildCluster(
        key=("kcm-system", "training"),
        uid="uid-1",
        workflow_id="cluster/training",
        cluster_deployment={"metadata": {"namespace": "kcm-system", "name": "training"}},
        wake=asyncio.Event(),
    )
    seen: list[str] = []

    async def on_event(event: Any) -> None:
        seen.append(event)

    async with asyncio.timeout(10):
        with pytest.raises(Done):
            await watcher._keep_following(child, cast(Any, stream), on_event)
    assert watcher.streams[stream.name] is stream
    return seen, management


@pytest.mark.parametrize(
    "refusal",
    [
        pytest.param(KubeError(401, "Unauthorized", "token rotated"), id="401-credentials-rotated"),
        pytest.param(KubeError(404, "NotFound", "no Gateway API"), id="404-not-served"),
    ],
)
async def test_a_refused_pass_resumes_with_the_kubeconfig_read_again(
    refusal: KubeError, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service, "NOT_SERVED_RETRY", 0.0)
    first = ChildApi({"read": 0})
    stream = Stream(first, [(["a", "b"], refusal), (["c"], Done())])

    seen, management = await follow(stream)

    assert seen == ["a", "b", "c"]
    assert first.closed, "the refused pass's client is closed"
    assert management.reads == 1
    assert stream.api is not first
    assert cast(ChildApi, stream.api).kubeconfig == {"read": 1}, "built from the Secret read again"
    assert cast(ChildApi, stream.api).closed, "the last pass's client is closed on the way out"
