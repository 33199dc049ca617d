"""One resumable watch of one collection: list once, then watch from the last resourceVersion,
resuming after every disconnect and relisting on 410 Gone, as client-go's reflector does.

Used by `watching.service` (ClusterDeployments, each child cluster's Nodes and Gateways). The stream
yields what happened; the consumer signals, then records `StreamEvent.version` as the point to
resume from (so an event is acknowledged only once its signal went out: at least once).

A relist replaces what the stream knew: objects that vanished while the stream was not watching
come out as DELETED with the list's resourceVersion (their final state is unknown, as client-go's
`DeletedFinalStateUnknown`), and a SYNCED event marks the end of every list, saying whether it
was a relist (events may have been missed: the consumer asks the owners to look for themselves).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx

from infra.kubeapi import Gone, KubeApi, KubeError, Obj

log = logging.getLogger("colony.watcher")

WATCH_TIMEOUT_SECONDS = 300
"""Server-side timeout of one watch request; the stream re-watches from where it was."""
BACKOFF_FIRST = 0.5
BACKOFF_CAP = 30.0
"""Seconds between attempts after an error: 0.5 s doubling to 30 s, reset by a working watch."""

SYNCED = "SYNCED"
"""The end of a list: every current object has been yielded."""


@dataclass(frozen=True)
class StreamEvent:
    """One change: ADDED, MODIFIED, DELETED, or SYNCED at the end of a list."""

    type: str
    obj: Obj
    version: str
    """What to resume from once this event is handled ("" for the items of a list: a list is
    acknowledged as a whole, by its SYNCED event)."""
    relist: bool = False
    """On SYNCED: this list replaced an earlier state (after a 410), events may have been missed."""


def uid_of(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


@dataclass
class WatchStream:
    """The list-then-watch loop of one collection."""

    api: KubeApi
    name: str
    """The stream's key: in logs, request ids of relists and the persisted state."""
    path: str
    label_selector: str | None = None
    version: str = ""
    """Where the next watch starts; empty: list first."""
    timeout_seconds: int = WATCH_TIMEOUT_SECONDS
    fatal_statuses: tuple[int, ...] = ()
    """Statuses raised to the consumer instead of retried (401 for a child cluster: its
    credentials were rotated, the consumer reads the kubeconfig again)."""
    known: dict[str, Obj] = field(default_factory=dict)
    """The objects the stream has seen, by uid (what a relist compares against)."""
    relists: int = 0
    """Lists after the first (410 Gone); tests and metrics read it."""
    _listed: bool = False

    def __post_init__(self) -> None:
        # Resuming from a persisted version: a list now (after a 410) replaces a state that
        # another run saw, so it is a relist too.
        self._listed = bool(self.version)

    async def events(self) -> AsyncIterator[StreamEvent]:
        """Events until cancelled; errors are retried with back-off (but `fatal_statuses`)."""
        backoff = BACKOFF_FIRST
        while True:
            try:
                if not self.version:
                    async for event in self._list():
                        yield event
                async for event in self._watch():
                    yield event
                    backoff = BACKOFF_FIRST
            except Gone:
                log.info("%s: resourceVersion %s is gone, listing again", self.name, self.version)
                self.version = ""
                continue
            except KubeError as exc:
                if exc.status in self.fatal_statuses:
                    raise
                log.warning("%s: %s; retrying in %.1fs", self.name, exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_CAP)
            except (httpx.HTTPError, ValueError) as exc:
                log.warning("%s: %s; retrying in %.1fs", self.name, exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_CAP)

    async def _list(self) -> AsyncIterator[StreamEvent]:
        items, version = await self.api.list(self.path, label_selector=self.label_selector)
        relist = self._listed
        if relist:
            self.relists += 1
        self._listed = True
        current = {uid_of(item): item for item in items}
        for uid, gone in list(self.known.items()):
            if uid not in current:
                meta = {**(gone.get("metadata") or {}), "resourceVersion": version}
                yield StreamEvent("DELETED", {**gone, "metadata": meta}, "")
        self.known = current
        for item in items:
            yield StreamEvent("ADDED", item, "")
        self.version = version
        yield StreamEvent(SYNCED, {}, version, relist=relist)

    async def _watch(self) -> AsyncIterator[StreamEvent]:
        async for kind, obj in self.api.watch(
            self.path,
            resource_version=self.version,
            label_selector=self.label_selector,
            timeout_seconds=self.timeout_seconds,
        ):
            version = str((obj.get("metadata") or {}).get("resourceVersion") or self.version)
            if kind == "BOOKMARK":
                self.version = version
                continue
            uid = uid_of(obj)
            if kind == "DELETED":
                self.known.pop(uid, None)
            else:
                self.known[uid] = obj
            self.version = version
            yield StreamEvent(kind, obj, version)
