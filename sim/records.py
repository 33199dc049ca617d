"""SIMULATOR. What happened in the world, kept for checks after the fact: `WorldRecords`.

A reliability scenario asks questions no object answers once it is gone: was this pod evicted
once, was this host claimed once and released once, was this object created twice? One
`WorldRecords` per world is shared in-process, like the `FaultInjector`, by every API server
(management and child clusters) and the host provider, and keeps, in the order they happened:

- `ObjectCreated`: every object created through a cluster's API (a client's POST that stored
  something: not a dry run, not a refusal). What the sim's own controllers create (pods of a
  Deployment, a child cluster's system objects) is theirs, not a client's, and is not recorded.
- `EvictionRecord`: every eviction the pods/eviction subresource accepted. `repeat` is True when
  the pod was already terminating (it had a deletionTimestamp): the eviction changed nothing, it is
  a repetition of the one that made the pod terminate (a drain retrying after a crash sends it).
- `HostRecord`: every change of a host's hands, `claimed` (free -> claimed, by a claim's
  idempotency key, for an owner) and `released` (claimed -> free); and `claim-repeated`, a claim
  request answered from the claim its idempotency key made before (nothing changed hands).

Every record carries `seq`, one sequence across kinds starting at 1, and `at` (Unix time). At most
`RECORDS_KEPT` are kept (oldest dropped first, counted in `dropped`), so a long-running sim stays
bounded; a reader that needs all of them checks `dropped`.

Served on `GET /sim/v1/records?since=N` by every sim server (the records after `seq` N, as JSON:
`{"next", "dropped", "objectsCreated", "evictions", "hosts"}`), never authenticated or faulted,
like `/sim/v1/faults`. Credentials are never recorded: objects are kept as identity (kind, name,
uid, labels, annotations), never their data.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from aiohttp import web

__all__ = [
    "RECORDS_KEPT",
    "RECORDS_PATH",
    "EvictionRecord",
    "HostChange",
    "HostRecord",
    "ObjectCreated",
    "WorldRecords",
    "add_records_routes",
]

RECORDS_PATH = "/sim/v1/records"
RECORDS_KEPT = 200_000
"""Records kept in all; a scenario makes a few thousand."""

HostChange = Literal["claimed", "released", "claim-repeated"]


@dataclass(frozen=True)
class ObjectCreated:
    """An object a client created through a cluster's API."""

    seq: int
    at: float
    cluster: str
    group: str
    resource: str
    kind: str
    namespace: str
    name: str
    uid: str
    generate_name: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class EvictionRecord:
    """An eviction the pods/eviction subresource accepted."""

    seq: int
    at: float
    cluster: str
    namespace: str
    name: str
    uid: str
    node: str
    """spec.nodeName when evicted ("" for a pod not bound)."""
    repeat: bool
    """The pod was already terminating: this eviction changed nothing."""


@dataclass(frozen=True)
class HostRecord:
    """A host changing hands at the host provider (or a claim answered again)."""

    seq: int
    at: float
    host_id: str
    change: HostChange
    claim: str
    """The idempotency key of the claim that took (or held) the host."""
    owner: str = ""


Record = ObjectCreated | EvictionRecord | HostRecord


class WorldRecords:
    """The world's records (see the module docstring).

    Args:
        clock: Unix time of each record (tests may pass their own).
        kept: how many records are kept before the oldest are dropped.
    """

    def __init__(self, *, clock: Callable[[], float] = time.time, kept: int = RECORDS_KEPT) -> None:
        self._clock = clock
        self._records: deque[Record] = deque(maxlen=kept)
        self._seq = 0
        self.dropped = 0

    @property
    def last_seq(self) -> int:
        """The `seq` of the newest record (0: none yet)."""
        return self._seq

    def _next(self) -> tuple[int, float]:
        if len(self._records) == self._records.maxlen:
            self.dropped += 1
        self._seq += 1
        return self._seq, self._clock()

    def object_created(
        self, cluster: str, group: str, resource: str, obj: Mapping[str, Any]
    ) -> None:
        """Record `obj` as stored by a client's create in `cluster`."""
        meta = obj.get("metadata") or {}
        seq, at = self._next()
        self._records.append(
            ObjectCreated(
                seq=seq,
                at=at,
                cluster=cluster,
                group=group,
                resource=resource,
                kind=str(obj.get("kind") or ""),
                namespace=str(meta.get("namespace") or ""),
                name=str(meta.get("name") or ""),
                uid=str(meta.get("uid") or ""),
                generate_name=str(meta.get("generateName") or ""),
                labels=dict(meta.get("labels") or {}),
                annotations=dict(meta.get("annotations") or {}),
            )
        )

    def evicted(self, cluster: str, pod: Mapping[str, Any], *, repeat: bool) -> None:
        """Record an accepted eviction of `pod` (as it was before the eviction)."""
        meta = pod.get("metadata") or {}
        seq, at = self._next()
        self._records.append(
            EvictionRecord(
                seq=seq,
                at=at,
                cluster=cluster,
                namespace=str(meta.get("namespace") or ""),
                name=str(meta.get("name") or ""),
                uid=str(meta.get("uid") or ""),
                node=str((pod.get("spec") or {}).get("nodeName") or ""),
                repeat=repeat,
            )
        )

    def host_changed(self, host_id: str, change: HostChange, claim: str, owner: str = "") -> None:
        """Record a host changing hands (or a claim answered again from its first answer)."""
        seq, at = self._next()
        self._records.append(
            HostRecord(seq=seq, at=at, host_id=host_id, change=change, claim=claim, owner=owner)
        )

    def since(self, seq: int = 0) -> list[Record]:
        """The records after `seq`, oldest first."""
        return [record for record in self._records if record.seq > seq]

    def wire(self, seq: int = 0) -> dict[str, Any]:
        """The JSON body of GET /sim/v1/records?since=`seq`."""
        body: dict[str, Any] = {
            "next": self._seq,
            "dropped": self.dropped,
            "objectsCreated": [],
            "evictions": [],
            "hosts": [],
        }
        lists = {ObjectCreated: "objectsCreated", EvictionRecord: "evictions", HostRecord: "hosts"}
        for record in self.since(seq):
            body[lists[type(record)]].append(_camel(asdict(record)))
        return body


def _camel(data: dict[str, Any]) -> dict[str, Any]:
    def camel(key: str) -> str:
        head, *rest = key.split("_")
        return head + "".join(part.title() for part in rest)

    return {camel(key): value for key, value in data.items()}


def add_records_routes(app: web.Application, records: WorldRecords) -> None:
    """Mount GET /sim/v1/records on a sim server's application."""

    async def get_records(request: web.Request) -> web.Response:
        raw = request.query.get("since", "0")
        try:
            since = int(raw)
        except ValueError:
            return web.json_response(
                {"error": {"code": "BadRequest", "message": f"since: {raw!r} is not an integer"}},
                status=400,
            )
        return web.json_response(records.wire(since))

    app.router.add_get(RECORDS_PATH, get_records)
