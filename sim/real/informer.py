"""SIMULATOR. One watched type of a real cluster: what client-go's reflector and informer do, with
the official `kubernetes` client.

An `Informer` lists its type, then watches it from the list's resourceVersion, in a thread of its
own (the official client is blocking); every list and event is handed to the event loop, where
the cache (`objects`) is kept and the changes are passed on (`deliver`). A watch that ends (the
server's timeout) resumes from the last resourceVersion seen (bookmarks included); a 410 Gone or
a broken connection lists again, and the difference between the new list and the cache is
delivered as ADDED, MODIFIED and DELETED events, so a controller misses nothing it would have
seen. `stop()` ends it at once: the open watch's socket is shut, the thread's read fails, the
thread ends.

Used by `sim.real.kubeapi.KubeApi`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from sim.apiserver.registry import ResourceType
from sim.apiserver.store import WatchEvent

log = logging.getLogger(__name__)

Obj = dict[str, Any]
ObjectKey = tuple[str, str]
"""(namespace or "", name)."""

WATCH_SECONDS = 300
"""The server ends a watch after this (its timeoutSeconds); the informer resumes it at once."""
READ_SLACK = 30
"""A watch's read timeout is its timeoutSeconds plus this: a server gone silent is noticed."""
CONNECT_TIMEOUT = 5
RETRY_START, RETRY_CAP = 0.2, 5.0
"""Seconds before a failed list or watch is tried again, doubled per failure up to the cap."""


def object_key(obj: Obj) -> ObjectKey:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class Informer:
    """The objects of one type, kept current by a list and a watch (see the module docstring).

    Args:
        client: the cluster's official client.
        resolve: the type's current `ResourceType` (None while its CRD is not served).
        deliver: called on the loop with every change, after the cache took it.
        loop: the event loop that owns the cache.
    """

    def __init__(
        self,
        client: ApiClient,
        resolve: Callable[[], ResourceType | None],
        deliver: Callable[[WatchEvent], None],
        loop: asyncio.AbstractEventLoop,
        name: str,
    ) -> None:
        self.objects: dict[ObjectKey, Obj] = {}
        self.synced = asyncio.Event()
        self._client = client
        self._resolve = resolve
        self._deliver = deliver
        self._loop = loop
        self._stopped = threading.Event()
        self._response: urllib3.HTTPResponse | None = None
        self._thread = threading.Thread(target=self._run, name=f"informer-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop at once (idempotent): the open watch's socket is shut so its read ends."""
        self._stopped.set()
        response = self._response
        if response is not None:
            # A connection already gone raises: the thread ends anyway.
            with contextlib.suppress(OSError):
                response.shutdown()

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        failures = 0
        while not self._stopped.is_set():
            rt = self._resolve()
            if rt is None:  # its CRD is not served yet
                self._stopped.wait(RETRY_START)
                continue
            try:
                version = self._list(rt)
                failures = 0
                while not self._stopped.is_set():
                    version = self._watch(rt, version)
            except _Relist:
                continue
            except Exception as error:  # a server restarting, a connection cut: list again
                if self._stopped.is_set():
                    return
                failures += 1
                delay = min(RETRY_START * 2 ** (failures - 1), RETRY_CAP)
                log.debug("informer %s: %s (again in %.1fs)", rt.plural, error, delay)
                self._stopped.wait(delay)

    def _request(self, rt: ResourceType, query: list[tuple[str, str]], read: float) -> Any:
        method, url, headers, body, post = self._client.param_serialize(
            "GET",
            collection_path(rt),
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        return self._client.call_api(
            method, url, headers, body, post, _request_timeout=(CONNECT_TIMEOUT, read)
        )

    def _list(self, rt: ResourceType) -> str:
        listed: Obj = json_answer(self._client, self._request(rt, [], 60))
        items = [with_type(rt, item) for item in listed.get("items") or []]
        self._post(self._reset, rt, items)
        return str((listed.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, rt: ResourceType, version: str) -> str:
        """One watch from `version` until the server ends it; the last version seen."""
        query = [
            ("watch", "true"),
            ("resourceVersion", version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(WATCH_SECONDS)),
        ]
        response = self._request(rt, query, WATCH_SECONDS + READ_SLACK)
        if response.status != 200:
            response.read()
            raise ApiException(status=response.status, reason=response.reason)
        self._response = response.response
        try:
            for line in _lines(response.response):
                event = json.loads(line)
                kind, obj = str(event.get("type")), event.get("object") or {}
                if kind == "ERROR":
                    raise _Relist(obj.get("message"))  # 410 Gone: too old, list again
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if kind != "BOOKMARK":
                    self._post(self._event, WatchEvent(kind, rt, with_type(rt, obj)))
        finally:
            self._response = None
            response.response.release_conn()
        return version

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        if not self._stopped.is_set():
            self._loop.call_soon_threadsafe(fn, *args)

    # ------------------------------------------------------------------ on the loop

    def _reset(self, rt: ResourceType, items: list[Obj]) -> None:
        """A fresh list: the cache becomes it; its difference to the old one is delivered."""
        fresh = {object_key(item): item for item in items}
        old, self.objects = self.objects, fresh
        for key, item in fresh.items():
            before = old.get(key)
            if before is None:
                self._deliver(WatchEvent("ADDED", rt, item))
            elif _version(before) != _version(item):
                self._deliver(WatchEvent("MODIFIED", rt, item))
        for key, gone in old.items():
            if key not in fresh:
                self._deliver(WatchEvent("DELETED", rt, gone))
        self.synced.set()

    def _event(self, event: WatchEvent) -> None:
        key = object_key(event.object)
        if event.type == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = event.object
        self._deliver(event)


class _Relist(Exception):
    """The watch cannot go on from its resourceVersion: list again."""


def json_answer(client: ApiClient, response: Any) -> Any:
    """A response's JSON body, read whole; ApiException (with the server's Status as its body)
    when it is not a success."""
    response.read()
    types = {"2XX": "object", "4XX": "object", "5XX": "object"}
    data: Any = client.response_deserialize(response, types).data
    return data


def collection_path(rt: ResourceType, namespace: str | None = None) -> str:
    """`/api/v1/pods`, `/apis/g/v/namespaces/ns/plural`: a type's collection (all namespaces
    when `namespace` is None)."""
    base = f"/apis/{rt.group}/{rt.version}" if rt.group else f"/api/{rt.version}"
    if rt.namespaced and namespace:
        return f"{base}/namespaces/{namespace}/{rt.plural}"
    return f"{base}/{rt.plural}"


def with_type(rt: ResourceType, obj: Obj) -> Obj:
    """The object with its apiVersion and kind (a list's items come without them)."""
    if not obj.get("kind"):
        obj = {"apiVersion": rt.api_version, "kind": rt.kind, **obj}
    return obj


def _version(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _lines(response: urllib3.HTTPResponse) -> Iterator[bytes]:
    """The lines of a streamed body as they arrive (a watch sends one JSON event per line)."""
    pending = b""
    for chunk in response.stream(decode_content=True):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        yield from (line for line in complete if line.strip())
    if pending.strip():
        yield pending
