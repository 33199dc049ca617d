"""Waiting for one object's next change inside a heartbeating activity: a Kubernetes watch, with
the poll as its fallback.

The waits of the workspace side (a ServiceSet uninstalled, a namespace gone, a release deployed)
look at their object, then pause before looking again. A pause that is a plain sleep makes every
wait react up to a pause late: a deleted workspace's ServiceSet, gone 0.3 s after the delete,
was seen gone a second later, and the next waiter's admission waited for that look. Here the
pause is a watch request on that one object (`fieldSelector=metadata.name=<name>`, from the
resourceVersion of the last look), which ends at the object's first event, so the next look
follows the change at once. The poll stays the fallback: a watch that fails (an API server
without watches, a dropped connection) or ends without an event leaves the rest of the pause to
a sleep, and the next look reads the object again, so a missed event costs at most one pause.

Watches are raw requests on httpx (`infra.kubeapi.KubeApi`, the watcher's client, built from
the activity's `ApiClient` configuration, with the same credentials): a cancelled activity stops
its watch at once, where the official client's blocking watch would hold a worker thread (the
worker's threads run every Kubernetes call) until the watch timed out.

Made by an object's address (`activities.addresses`); used by the waits of
`activities.management.service_sets` and of `activities.objects.delete_owned` (a namespace, a
ServiceSet deleted with `wait_until`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from types import TracebackType
from typing import Any

import httpx
from kubernetes import client

from infra.kubeapi import KubeApi, KubeError

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class ObjectWatch:
    """The changes of one object: `async with ObjectWatch(api, collection, name) as watch`, then
    `await watch.changed(last_seen, pause)` between two looks at it.

    Args:
        api: the client of the cluster the object is in (its configuration: host, CA,
            credentials).
        collection: the URL path of the object's collection (`infra.kubeapi.collection_path`).
        name: the object's name.
    """

    def __init__(self, api: client.ApiClient, collection: str, name: str) -> None:
        self._configuration: client.Configuration = api.configuration
        self._collection = collection
        self._name = name
        self._kube: KubeApi | None = None

    async def __aenter__(self) -> ObjectWatch:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._kube is not None:
            await self._kube.aclose()
            self._kube = None

    async def changed(self, last_seen: Obj | None, pause: float) -> bool:
        """Wait until the object changes after `last_seen` (True), or `pause` seconds pass (False;
        also when no watch could be made: the pause is then slept, as a poll would)."""
        if pause <= 0:
            return False
        loop = asyncio.get_running_loop()
        until = loop.time() + pause
        version = str(((last_seen or {}).get("metadata") or {}).get("resourceVersion") or "")
        if version:
            try:
                async with asyncio.timeout(pause):
                    if await self._next_event(version, pause):
                        return True
            except TimeoutError:
                return False
            except (KubeError, httpx.HTTPError, ValueError) as exc:
                # The fallback: the rest of the pause is a sleep, the next look reads again.
                log.debug("watch of %s/%s failed: %s", self._collection, self._name, exc)
        left = until - loop.time()
        if left > 0:
            await asyncio.sleep(left)
        return False

    async def _next_event(self, version: str, pause: float) -> bool:
        if self._kube is None:
            self._kube = KubeApi(self._configuration)
        events = self._kube.watch(
            self._collection,
            resource_version=version,
            field_selector=f"metadata.name={self._name}",
            timeout_seconds=max(1, math.ceil(pause)),
        )
        async with contextlib.aclosing(events):
            async for kind, _ in events:
                if kind != "BOOKMARK":
                    return True
        return False


class GoneWatch:
    """The deletions of some objects of a collection: `async with GoneWatch(api, collection,
    field_selector) as watch`, then `await watch.gone(names, since, pause)` after a list.

    A drain waits this way for the pods it evicted: a pod goes when its grace period is over (or
    sooner, when its containers exit), which no fixed pause matches; the watch follows each
    deletion as it happens. The fallback is the poll's, as `ObjectWatch`'s.

    Args:
        api: the client of the cluster the objects are in.
        collection: the URL path of their collection (`infra.kubeapi.collection_path`).
        field_selector: which of them the watch follows (`spec.nodeName=<node>`).
    """

    def __init__(self, api: client.ApiClient, collection: str, field_selector: str) -> None:
        self._configuration: client.Configuration = api.configuration
        self._collection = collection
        self._field_selector = field_selector
        self._kube: KubeApi | None = None

    async def __aenter__(self) -> GoneWatch:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._kube is not None:
            await self._kube.aclose()
            self._kube = None

    async def gone(self, names: set[str], since: str, pause: float) -> bool:
        """Wait until every object named in `names` ("namespace/name") is deleted after the list
        at resourceVersion `since` (True), or `pause` seconds pass (False; also when no watch
        could be made: the pause is then slept, as a poll would)."""
        if pause <= 0:
            return False
        if not names:
            return True
        loop = asyncio.get_running_loop()
        until = loop.time() + pause
        if since:
            try:
                async with asyncio.timeout(pause):
                    if await self._deleted(set(names), since, pause):
                        return True
            except TimeoutError:
                return False
            except (KubeError, httpx.HTTPError, ValueError) as exc:
                log.debug(
                    "watch of %s (%s) failed: %s", self._collection, self._field_selector, exc
                )
        left = until - loop.time()
        if left > 0:
            await asyncio.sleep(left)
        return False

    async def _deleted(self, waiting: set[str], since: str, pause: float) -> bool:
        if self._kube is None:
            self._kube = KubeApi(self._configuration)
        events = self._kube.watch(
            self._collection,
            resource_version=since,
            field_selector=self._field_selector,
            timeout_seconds=max(1, math.ceil(pause)),
        )
        async with contextlib.aclosing(events):
            async for kind, obj in events:
                if kind != "DELETED":
                    continue
                meta = obj.get("metadata") or {}
                waiting.discard(f"{meta.get('namespace', '')}/{meta.get('name', '')}")
                if not waiting:
                    return True
        return False
