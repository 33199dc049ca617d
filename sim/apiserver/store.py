"""The object store of one simulated cluster: what etcd plus the apiserver's registry logic would do.

Controllers call it directly (same event loop, no HTTP); the HTTP layer translates REST onto it.
Objects are plain JSON-shaped dicts. A stored dict is never mutated after it is stored (every write
stores a new dict), so history entries and raw reads can share it safely; public reads return
copies. Semantics follow kube-apiserver for what Colony uses: resourceVersion and generation,
optimistic concurrency, status subresources, finalizers, graceful pod deletion, ownerReference
garbage collection (background, foreground, orphan), PodDisruptionBudgets and eviction, CRDs with
schema validation, watches with a bounded history (410 Gone past it), and TokenRequest tokens.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import bisect
import builtins
import contextlib
import datetime as dt
import json
import logging
import math
import random
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from sim.apiserver import errors, validation
from sim.apiserver.auth import API_AUDIENCE, TokenAuthority
from sim.apiserver.fieldvalidation import FieldValidation
from sim.apiserver.patch import APPLY_PATCH, JSON_PATCH, MERGE_PATCH, apply_patch
from sim.apiserver.podlogs import ContainerLogs
from sim.apiserver.registry import (
    BUILTINS,
    CRDS,
    NAMESPACES,
    PDBS,
    PODS,
    SECRETS,
    SERVICEACCOUNTS,
    SERVICES,
    ResourceRegistry,
    ResourceType,
    resource_type_from_crd,
    tracks_generation,
)
from sim.apiserver.selectors import LabelSelector, object_filter
from sim.pods import pod_serving

try:  # schema.py is written in parallel; without it CRD objects are stored unvalidated.
    from sim.apiserver import schema as _schema
except ImportError:  # pragma: no cover
    _schema = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
_T = TypeVar("_T")
Predicate = Callable[[Mapping[str, Any]], bool]

# Namespaces every cluster starts with, as on a fresh kubeadm cluster.
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# Watch events kept per cluster; a watch from an older resourceVersion gets 410 Gone.
DEFAULT_HISTORY = 5000
# Schema rejections kept in `ClusterStore.rejected_writes` (oldest dropped first).
REJECTED_WRITES_KEPT = 1000
# Accepted evictions kept in `ClusterStore.evictions` (oldest dropped first).
EVICTIONS_KEPT = 10_000
# kube's default terminationGracePeriodSeconds.
DEFAULT_POD_GRACE = 30
FOREGROUND_FINALIZER = "foregroundDeletion"
ORPHAN_FINALIZER = "orphan"
# apimachinery's generateName alphabet (no vowels, no confusable characters).
SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
# The simulator's own source of generated names, never the `random` module's shared state: that
# belongs to the code under test (and Hypothesis watches it while it draws, in another thread).
_NAME_SUFFIXES = random.Random()
_ALL = "*"  # internal subresource marker: controller writes that may change spec and status
_SHARING_PATCHES = frozenset({MERGE_PATCH, APPLY_PATCH, JSON_PATCH})
# kube-apiserver's answer (etcd3 store) to a continue token whose revision etcd compacted.
_INCONSISTENT_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this response "
    "to retrieve the remainder of the results. Continuing with the provided token results in an "
    "inconsistent list - objects that were created, modified, or deleted between the time the "
    "first chunk was returned and now may show up in the list."
)


def random_suffix(length: int = 5) -> str:
    """A generateName-style suffix (apimachinery's `util/rand.String`)."""
    return "".join(_NAME_SUFFIXES.choices(SUFFIX_ALPHABET, k=length))


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def format_time(when: dt.datetime) -> str:
    """RFC 3339 with second precision and a Z, as Kubernetes serializes metav1.Time."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _clone(value: Any) -> Any:
    if type(value) is dict:
        return {k: _clone(v) for k, v in value.items()}
    if type(value) is list:
        return [_clone(v) for v in value]
    return value


def clone(value: _T) -> _T:
    """Deep copy of a JSON-shaped value (several times faster than copy.deepcopy)."""
    return cast(_T, _clone(value))


@dataclass(frozen=True)
class WatchEvent:
    """One change: type is ADDED, MODIFIED, DELETED (or BOOKMARK)."""

    type: str
    rt: ResourceType
    object: Obj


@dataclass(frozen=True)
class ListChunk:
    """A page of a list: its items, the list's resourceVersion, and the continue token ("" on the
    last page) with the count of objects after it (None when kube would not say: selectors)."""

    items: list[Obj]
    resource_version: int
    continue_token: str
    remaining_item_count: int | None


@dataclass(frozen=True)
class RejectedWrite:
    """A custom-resource write refused by its CRD's schema (the writer got 422 Invalid).

    `writer` is "client" for API writes (create, replace, patch, status subresource) and
    "controller" for the in-process shortcuts `update_status` and `mutate`: a controller's rejected
    write is a sim bug, so it is also logged as a warning (some controllers suppress ApiError).
    """

    kind: str
    namespace: str | None
    name: str
    operation: str  # "create" | "update" | "status" | "mutate"
    writer: str  # "client" | "controller"
    causes: tuple[tuple[str, str, str], ...]  # (field path, message, reason)


@dataclass(frozen=True)
class Eviction:
    """One eviction the pods/eviction subresource accepted (answered 201 Created, not a dry run):
    the pod as it was then. What a test compares with the evictions a drain says it made."""

    namespace: str
    name: str
    uid: str
    node: str  # spec.nodeName, "" for a pod not bound


@dataclass(frozen=True)
class PrunedWrite:
    """A custom-resource write stored without some of its fields, which its CRD's schema does not
    define: structural pruning drops them, as kube-apiserver does (silently, unless the request
    asked for field validation).

    A controller's pruned write is a sim bug (it writes a field the real CRD lacks, which a reader
    would never see against k0rdent), so it is also logged as a warning; a client's shows what a
    real API server would have dropped from that client's object.
    """

    kind: str
    namespace: str | None
    name: str
    operation: str  # "create" | "update" | "status" | "mutate"
    writer: str  # "client" | "controller"
    paths: tuple[str, ...]  # the dropped fields, e.g. "status.observedGeneration"


@dataclass(frozen=True)
class _Change:
    rv: int
    type: str
    rt: ResourceType
    obj: Obj
    old: Obj | None


class Watcher:
    """An async iterator of `WatchEvent`s for one type, namespace and selector; `close()` ends it."""

    def __init__(
        self,
        store: ClusterStore,
        rt: ResourceType,
        namespace: str | None,
        predicate: Predicate | None,
        *,
        copy_objects: bool,
    ) -> None:
        self._store = store
        self.rt = rt
        self._namespace = namespace
        self._predicate = predicate
        self._copy = copy_objects
        self._queue: asyncio.Queue[WatchEvent | None] = asyncio.Queue()
        self.closed = False

    def _matches(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        if self._namespace is not None and obj["metadata"].get("namespace") != self._namespace:
            return False
        return self._predicate is None or self._predicate(obj)

    def _offer(self, change: _Change) -> None:
        now = self._matches(change.obj)
        if change.type == "MODIFIED" and self._predicate is not None:
            # Objects entering or leaving the selected set appear as ADDED / DELETED, as in kube.
            before = self._matches(change.old)
            if now and not before:
                kind = "ADDED"
            elif before and not now:
                kind, now = "DELETED", True
            else:
                kind = "MODIFIED"
        else:
            kind = change.type
        if now:
            self._put(kind, change.obj)

    def _put(self, kind: str, obj: Obj) -> None:
        self._queue.put_nowait(WatchEvent(kind, self.rt, clone(obj) if self._copy else obj))

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self

    async def __anext__(self) -> WatchEvent:
        if self.closed and self._queue.empty():
            raise StopAsyncIteration
        event = await self._queue.get()
        if event is None:
            raise StopAsyncIteration
        return event

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._store._drop_watcher(self)
            self._queue.put_nowait(None)


class ClusterStore:
    """All API objects of one simulated cluster (see the module docstring)."""

    def __init__(
        self,
        name: str,
        registry: ResourceRegistry | None = None,
        clock: Callable[[], dt.datetime] = utc_now,
        *,
        history_size: int = DEFAULT_HISTORY,
    ) -> None:
        self.name = name
        self.registry = registry or ResourceRegistry.builtin()
        self.clock = clock
        self.tokens = TokenAuthority(clock)
        self.resource_version = 1
        # (group, plural) -> namespace ("" when cluster-scoped) -> name -> object
        self._tables: dict[tuple[str, str], dict[str, dict[str, Obj]]] = {}
        self._by_uid: dict[str, tuple[ResourceType, str, str]] = {}
        self._dependents: dict[str, set[str]] = {}  # owner uid -> dependent uids
        self._history: deque[_Change] = deque()
        self._history_size = history_size
        self._evicted_upto = 0  # highest resourceVersion no longer in the history
        self._watchers: dict[tuple[str, str], set[Watcher]] = {}
        self._subscribers: list[asyncio.Queue[WatchEvent]] = []
        self._ip_counter = 0
        # The nodes' container log files, written by the kubelet, read by pods/log.
        self.container_logs = ContainerLogs()
        # Every schema rejection of a custom-resource write, newest last (see RejectedWrite).
        self.rejected_writes: deque[RejectedWrite] = deque(maxlen=REJECTED_WRITES_KEPT)
        # Every eviction accepted, newest last (see Eviction).
        self.evictions: deque[Eviction] = deque(maxlen=EVICTIONS_KEPT)
        # Every custom-resource write that lost fields to pruning, newest last (see PrunedWrite).
        self.pruned_writes: deque[PrunedWrite] = deque(maxlen=REJECTED_WRITES_KEPT)
        # A persisted store writes down how far its resourceVersions may go before it hands them
        # out (see `reserve_resource_versions`); None: kept in memory only.
        self._reserve: Callable[[int], None] | None = None
        self._reserve_block = 0
        self._reserved_upto = 0
        for ns in INITIAL_NAMESPACES:
            self.create(NAMESPACES, {"metadata": {"name": ns}})

    # ------------------------------------------------------------------ persistence

    def snapshot(self) -> Obj:
        """What a later process needs to resume this store (`restore`), JSON-shaped.

        Cheap and consistent when taken on the event loop: stored objects are shared, not copied
        (they are never mutated once stored), so the result may be serialized afterwards, off the
        loop. The watch history is not part of it (see `restore`).
        """
        tables = [
            {"group": group, "plural": plural, "objects": objects}
            for (group, plural), namespaces in sorted(
                self._tables.items(), key=lambda item: item[0] != CRDS.key
            )  # CRDs first: restoring them serves their kinds
            if (objects := [o for table in namespaces.values() for o in table.values()])
        ]
        return {
            "resourceVersion": self.resource_version,
            "reservedResourceVersion": self._reserved_upto,
            "serviceIPs": self._ip_counter,
            "tables": tables,
            "tokens": self.tokens.snapshot(),
            "containerLogs": self.container_logs.snapshot(),
        }

    def restore(self, snapshot: Mapping[str, Any], *, resource_version_floor: int = 0) -> None:
        """Replace the contents of this new store (no watcher yet) with a `snapshot()`.

        Objects come back as they were stored (uid, resourceVersion, generation, timestamps). The
        store's resourceVersion resumes above the snapshot's and above `resource_version_floor`
        (what a killed process reserved past its last snapshot), so no client ever sees one go
        back. The watch history starts empty there: a watch or a continue token from any older
        resourceVersion gets 410 Gone and its client lists again, as after an etcd compaction.
        """
        self._tables.clear()
        self._by_uid.clear()
        self._dependents.clear()
        self._history.clear()
        for table in snapshot.get("tables") or ():
            if table["group"] == CRDS.group and table["plural"] == CRDS.plural:
                for crd in table["objects"]:
                    self.registry.register(resource_type_from_crd(crd))
        for table in snapshot.get("tables") or ():
            rt = self.registry.try_get(table["group"], table["plural"])
            if rt is None:
                log.warning(
                    "%s: %d stored %s.%s dropped: no CRD serves them",
                    self.name, len(table["objects"]), table["plural"], table["group"],
                )  # fmt: skip
                continue
            for obj in table["objects"]:
                meta = obj["metadata"]
                ns = meta.get("namespace", "") if rt.namespaced else ""
                self._table(rt).setdefault(ns, {})[meta["name"]] = obj
                self._by_uid[meta["uid"]] = (rt, ns, meta["name"])
                self._index_owners(meta["uid"], None, obj)
        self.resource_version = max(
            int(snapshot.get("resourceVersion") or 1),
            int(snapshot.get("reservedResourceVersion") or 0),
            resource_version_floor,
        )
        self._reserved_upto = self.resource_version
        self._evicted_upto = self.resource_version
        self._ip_counter = int(snapshot.get("serviceIPs") or 0)
        self.tokens.restore(snapshot.get("tokens") or ())
        self.container_logs.restore(snapshot.get("containerLogs") or ())

    def reserve_resource_versions(self, reserve: Callable[[int], None], block: int) -> None:
        """Before handing out a resourceVersion past the last reserved one, call `reserve(upto)`
        with `block` more, which writes `upto` down: a process killed between two snapshots
        restores above every resourceVersion it gave out (`restore`'s floor)."""
        self._reserve = reserve
        self._reserve_block = block

    # ------------------------------------------------------------------ reads

    def _table(self, rt: ResourceType) -> dict[str, dict[str, Obj]]:
        return self._tables.setdefault(rt.key, {})

    def _peek(self, rt: ResourceType, namespace: str | None, name: str) -> Obj | None:
        ns = (namespace or "default") if rt.namespaced else ""
        return self._tables.get(rt.key, {}).get(ns, {}).get(name)

    def _stored(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        obj = self._peek(rt, namespace, name)
        if obj is None:
            raise errors.not_found(rt, name)
        return obj

    def get(
        self, rt: ResourceType, namespace: str | None, name: str, *, copy_objects: bool = True
    ) -> Obj:
        """The object (a copy unless `copy_objects=False`: then never mutate it); 404 NotFound."""
        obj = self._stored(rt, namespace, name)
        return clone(obj) if copy_objects else obj

    def try_get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj | None:
        obj = self._peek(rt, namespace, name)
        return None if obj is None else clone(obj)

    def _iter(self, rt: ResourceType, namespace: str | None) -> Iterator[Obj]:
        table = self._tables.get(rt.key, {})
        if rt.namespaced and namespace is not None:
            yield from table.get(namespace, {}).values()
        else:
            for objects in table.values():
                yield from objects.values()

    def list(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        copy_objects: bool = True,
    ) -> tuple[list[Obj], int]:
        """Objects of `rt` (in `namespace`, or all) matching the selectors, and the list's rv."""
        predicate = object_filter(label_selector, field_selector)
        candidates = self._iter(rt, namespace)
        items = list(candidates) if predicate is None else list(filter(predicate, candidates))
        items.sort(key=_list_order)
        if copy_objects:
            items = [clone(o) for o in items]
        return items, self.resource_version

    def list_chunk(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        copy_objects: bool = True,
    ) -> ListChunk:
        """One page of `list`: at most `limit` objects after the continue token's last key.

        Like kube-apiserver over etcd, the token carries the first page's resourceVersion and the
        last key served; later pages report that resourceVersion (so an informer's watch after the
        last page replays what changed meanwhile) but read current objects: the sim keeps no
        snapshots. A token older than the kept history answers 410 Expired with a token to
        continue inconsistently, as kube does once etcd compacted the revision.
        """
        rv = self.resource_version
        after: tuple[str, str] | None = None
        if continue_token:
            token_rv, after = _decode_continue(continue_token)
            if token_rv > 0 and token_rv < self._evicted_upto:
                raise errors.ApiError(
                    410, "Expired", _INCONSISTENT_CONTINUE,
                    metadata={"continue": _encode_continue(-1, after)},
                )  # fmt: skip
            if token_rv > 0:
                rv = token_rv
        items, _ = self.list(
            rt, namespace, label_selector=label_selector, field_selector=field_selector,
            copy_objects=False,
        )  # fmt: skip
        if after is not None:
            start = bisect.bisect_right(items, after, key=_list_order)
            items = items[start:]
        token = ""
        remaining: int | None = None
        if limit and limit > 0 and len(items) > limit:
            if not label_selector and not field_selector:
                # etcd counts what is left only for unfiltered lists; kube omits it otherwise.
                remaining = len(items) - limit
            items = items[:limit]
            token = _encode_continue(rv, _list_order(items[-1]))
        if copy_objects:
            items = [clone(o) for o in items]
        return ListChunk(items, rv, token, remaining)

    # ------------------------------------------------------------------ events

    def _emit(self, kind: str, rt: ResourceType, obj: Obj, old: Obj | None) -> None:
        change = _Change(self.resource_version, kind, rt, obj, old)
        self._history.append(change)
        while len(self._history) > self._history_size:
            self._evicted_upto = self._history.popleft().rv
        for watcher in list(self._watchers.get(rt.key, ())):
            watcher._offer(change)
        for queue in self._subscribers:
            queue.put_nowait(WatchEvent(kind, rt, clone(obj)))

    def subscribe(self) -> asyncio.Queue[WatchEvent]:
        """A queue receiving every event of every type from now on (for controllers)."""
        queue: asyncio.Queue[WatchEvent] = asyncio.Queue()
        self._subscribers.append(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[WatchEvent]) -> None:
        with contextlib.suppress(ValueError):
            self._subscribers.remove(queue)

    def watch(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        *,
        resource_version: int | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        copy_objects: bool = True,
    ) -> Watcher:
        """Changes after `resource_version`; without one (or 0), first ADDED for every match.

        Raises ApiError 410 Gone when `resource_version` is older than the kept history.
        """
        predicate = object_filter(label_selector, field_selector)
        watcher = Watcher(self, rt, namespace, predicate, copy_objects=copy_objects)
        if not resource_version:
            items, _ = self.list(rt, namespace, copy_objects=False)
            for obj in items:
                if watcher._matches(obj):
                    watcher._put("ADDED", obj)
        else:
            if resource_version < self._evicted_upto:
                raise errors.gone(
                    f"too old resource version: {resource_version} ({self._evicted_upto + 1})"
                )
            for change in self._history:
                if change.rv > resource_version and change.rt.key == rt.key:
                    watcher._offer(change)
        self._watchers.setdefault(rt.key, set()).add(watcher)
        return watcher

    def _drop_watcher(self, watcher: Watcher) -> None:
        self._watchers.get(watcher.rt.key, set()).discard(watcher)

    # ------------------------------------------------------------------ low-level writes

    def _next_rv(self) -> str:
        self.resource_version += 1
        if self._reserve is not None and self.resource_version > self._reserved_upto:
            self._reserved_upto = self.resource_version + self._reserve_block
            self._reserve(self._reserved_upto)
        return str(self.resource_version)

    def _index_owners(self, uid: str, old: Obj | None, new: Obj | None) -> None:
        def owners(obj: Obj | None) -> set[str]:
            if obj is None:
                return set()
            return {
                ref["uid"] for ref in obj["metadata"].get("ownerReferences") or [] if "uid" in ref
            }

        before, after = owners(old), owners(new)
        for owner in before - after:
            deps = self._dependents.get(owner)
            if deps is not None:
                deps.discard(uid)
                if not deps:
                    del self._dependents[owner]
        for owner in after - before:
            self._dependents.setdefault(owner, set()).add(uid)

    def _write(self, rt: ResourceType, obj: Obj, old: Obj | None) -> Obj:
        """Store `obj` (a fresh dict nobody else holds) with a new resourceVersion; emit."""
        meta = obj["metadata"]
        meta["resourceVersion"] = self._next_rv()
        ns = meta.get("namespace", "") if rt.namespaced else ""
        self._table(rt).setdefault(ns, {})[meta["name"]] = obj
        self._by_uid[meta["uid"]] = (rt, ns, meta["name"])
        self._index_owners(meta["uid"], old, obj)
        self._emit("ADDED" if old is None else "MODIFIED", rt, obj, old)
        return obj

    def _remove(self, rt: ResourceType, obj: Obj) -> None:
        """Remove for good, emit DELETED, then collect garbage and release waiting owners."""
        meta = obj["metadata"]
        ns = meta.get("namespace", "") if rt.namespaced else ""
        objects = self._tables.get(rt.key, {}).get(ns, {})
        if objects.get(meta["name"]) is not obj:
            return
        del objects[meta["name"]]
        self._by_uid.pop(meta["uid"], None)
        self._index_owners(meta["uid"], obj, None)
        final = dict(obj)
        final["metadata"] = dict(meta, resourceVersion=self._next_rv())
        self._emit("DELETED", rt, final, obj)
        orphan = ORPHAN_FINALIZER in (meta.get("finalizers") or [])
        self._after_remove(rt, final, orphan=orphan)

    def _after_remove(self, rt: ResourceType, obj: Obj, *, orphan: bool) -> None:
        meta = obj["metadata"]
        uid = meta["uid"]
        if rt.key == NAMESPACES.key:
            self._purge_namespace(meta["name"])
        elif rt.key == CRDS.key:
            self._unserve_crd(obj)
        elif rt.key == PODS.key:
            self._refresh_pdbs(meta.get("namespace", ""))
            self.container_logs.drop_pod(uid)
        for dep_uid in list(self._dependents.get(uid, ())):
            self._collect(dep_uid, uid, orphan=orphan)
        self._dependents.pop(uid, None)
        for ref in meta.get("ownerReferences") or []:
            self._release_foreground_owner(ref.get("uid", ""))
        if rt.namespaced and meta.get("namespace"):
            self._finish_namespace(meta["namespace"])

    def _collect(self, dep_uid: str, owner_uid: str, *, orphan: bool) -> None:
        """Garbage-collect one dependent of a removed owner (or just drop the reference)."""
        where = self._by_uid.get(dep_uid)
        if where is None:
            return
        rt, ns, name = where
        dep = self._tables[rt.key][ns][name]
        refs = dep["metadata"].get("ownerReferences") or []
        live_owners = [
            r for r in refs if r.get("uid") != owner_uid and r.get("uid") in self._by_uid
        ]
        if orphan or live_owners:
            self.mutate(
                rt,
                ns or None,
                name,
                lambda o: o["metadata"].__setitem__(
                    "ownerReferences",
                    [
                        r
                        for r in o["metadata"].get("ownerReferences") or []
                        if r.get("uid") != owner_uid
                    ],
                ),
            )
        elif not dep["metadata"].get("deletionTimestamp"):
            self.delete(rt, ns or None, name, propagation_policy="Background")

    def _release_foreground_owner(self, owner_uid: str) -> None:
        where = self._by_uid.get(owner_uid)
        if where is None or self._dependents.get(owner_uid):
            return
        rt, ns, name = where
        owner = self._tables[rt.key][ns][name]
        if FOREGROUND_FINALIZER in (owner["metadata"].get("finalizers") or []):
            self.mutate(rt, ns or None, name, _drop_finalizer(FOREGROUND_FINALIZER))

    def _terminate_namespace(self, old: Obj, *, dry_run: bool) -> Obj:
        """A namespace's delete, as kube-apiserver and the namespace controller do it: it turns
        Terminating (new content refused), its contents are deleted as their own deletes go
        (finalizers hold, bound pods wait for their kubelet), and it goes once nothing is left."""
        new = clone(old)
        new["metadata"]["deletionTimestamp"] = self._now()
        new["metadata"]["deletionGracePeriodSeconds"] = 0
        new["status"] = {**(new.get("status") or {}), "phase": "Terminating"}
        if dry_run:
            return new
        name = new["metadata"]["name"]
        self._write(NAMESPACES, new, old)
        for rt in self.registry.all():
            if not rt.namespaced:
                continue
            for obj in list(self._tables.get(rt.key, {}).get(name, {}).values()):
                meta = obj["metadata"]
                if meta.get("deletionTimestamp") or self._peek(rt, name, meta["name"]) is not obj:
                    continue
                with contextlib.suppress(errors.ApiError):
                    self.delete(rt, name, meta["name"], propagation_policy="Background")
        self._finish_namespace(name)
        return clone(self._peek(NAMESPACES, None, name) or new)

    def _finish_namespace(self, namespace: str) -> None:
        """Remove a Terminating namespace once nothing is left in it (its `kubernetes`
        finalizer, which the namespace controller clears then)."""
        found = self._peek(NAMESPACES, None, namespace)
        if found is None or not found["metadata"].get("deletionTimestamp"):
            return
        for rt in self.registry.all():
            if rt.namespaced and self._tables.get(rt.key, {}).get(namespace):
                return
        self._remove(NAMESPACES, found)

    def _purge_namespace(self, namespace: str) -> None:
        for rt in self.registry.all():
            if not rt.namespaced:
                continue
            for obj in list(self._tables.get(rt.key, {}).get(namespace, {}).values()):
                self._remove(rt, obj)
        for table in self._tables.values():
            if not table.get(namespace, True):
                table.pop(namespace, None)

    # ------------------------------------------------------------------ create

    def _now(self) -> str:
        return format_time(self.clock())

    def create(
        self,
        rt: ResourceType,
        obj: Obj,
        *,
        namespace: str | None = None,
        dry_run: bool = False,
        field_validation: FieldValidation | None = None,
    ) -> Obj:
        """Create `obj`; 409 AlreadyExists, 404 for a missing namespace, 422 Invalid.

        `dry_run` (dryRun=All) runs every check and default and answers what would be stored
        (generated name and uid included, no resourceVersion), but stores and emits nothing.
        `field_validation` (HTTP requests only) reports unknown fields first, as kube's decoder.
        """
        if field_validation is not None:
            obj = field_validation.check(rt, obj)
        new = clone(obj)
        meta = new.get("metadata")
        if not isinstance(meta, dict):
            meta = new["metadata"] = {}
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if namespace and body_ns and body_ns != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            ns = namespace or body_ns or "default"
            owner_namespace = self._peek(NAMESPACES, None, ns)
            if owner_namespace is None:
                raise errors.not_found(NAMESPACES, ns)
            if owner_namespace["metadata"].get("deletionTimestamp"):
                raise errors.forbidden_object(
                    rt,
                    str(meta.get("name") or ""),
                    f"unable to create new content in namespace {ns} because it is being "
                    "terminated",
                )
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        name = meta.get("name")
        if not name and meta.get("generateName"):
            for _ in range(20):
                suffix = random_suffix()
                name = f"{meta['generateName']}{suffix}"
                if self._peek(rt, meta.get("namespace"), name) is None:
                    break
            meta["name"] = name
        if not name:
            raise errors.invalid(
                rt,
                "",
                [
                    (
                        "metadata.name",
                        "Required value: name or generateName is required",
                        "FieldValueRequired",
                    )
                ],
            )
        validation.check_name(rt, name)
        if self._peek(rt, meta.get("namespace"), name) is not None:
            raise errors.already_exists(rt, name)
        new["apiVersion"] = rt.api_version
        new["kind"] = rt.kind
        for key in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(key, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self._now()
        meta.pop("generation", None)
        if tracks_generation(rt):
            meta["generation"] = 1
        ip_counter = self._ip_counter
        self._prepare_create(rt, new)
        validation.check(rt, new)
        self._validate_custom(rt, new, "create", "client")
        if dry_run:
            self._ip_counter = ip_counter  # the real server releases a dry run's allocations
            return new
        stored = self._write(rt, new, None)
        self._after_write(rt, stored, None)
        return clone(stored)

    def _prepare_create(self, rt: ResourceType, obj: Obj) -> None:
        key = rt.key
        if key == PODS.key:
            spec = obj.setdefault("spec", {})
            spec.setdefault("terminationGracePeriodSeconds", DEFAULT_POD_GRACE)
            spec.setdefault("restartPolicy", "Always")
            if isinstance(spec, dict):
                _default_pod_resources(spec)
                _admit_default_tolerations(spec)
            # Whatever the client wrote, a new pod's status is the server's (PrepareForCreate).
            obj["status"] = {"phase": "Pending", "qosClass": _qos_class(spec)}
        elif key == NAMESPACES.key:
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj["status"] = {"phase": "Active"}
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj[
                "metadata"
            ]["name"]
        elif key == SERVICES.key:
            spec = obj.setdefault("spec", {})
            spec.setdefault("type", "ClusterIP")
            if spec.get("clusterIP") != "None" and not spec.get("clusterIP"):
                self._ip_counter += 1
                spec["clusterIP"] = f"10.96.{self._ip_counter // 250}.{self._ip_counter % 250 + 1}"
                spec["clusterIPs"] = [spec["clusterIP"]]
            obj.setdefault("status", {"loadBalancer": {}})
        elif key == CRDS.key:
            self._prepare_crd(obj)
        elif key == SECRETS.key:
            _fold_string_data(obj)
        elif rt.has_status and rt not in BUILTINS:
            # Custom resources with a status subresource ignore status on create, like kube.
            obj.pop("status", None)

    def _prepare_crd(self, crd: Obj) -> None:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        expected = f"{names.get('plural', '')}.{spec.get('group', '')}"
        name = crd["metadata"]["name"]
        if name != expected:
            raise errors.invalid(
                CRDS, name,
                [("metadata.name", f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group', "FieldValueInvalid")],
            )  # fmt: skip
        if not spec.get("versions"):
            raise errors.invalid(
                CRDS, name, [("spec.versions", "Required value", "FieldValueRequired")]
            )
        now = self._now()
        accepted = dict(names)
        accepted.setdefault("singular", names.get("plural", ""))
        accepted.setdefault("listKind", f"{names.get('kind', '')}List")
        crd["status"] = {
            "acceptedNames": accepted,
            "storedVersions": [v["name"] for v in spec["versions"] if v.get("storage")],
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": now, "reason": r, "message": m}
                for t, r, m in (
                    ("NamesAccepted", "NoConflicts", "no conflicts found"),
                    ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
                )
            ],
        }

    def _validate_custom(self, rt: ResourceType, obj: Obj, operation: str, writer: str) -> None:
        """Prune, default and validate a custom resource against its openAPIV3Schema (in place).

        Every write path comes here: create, replace, patch, the status subresource and the
        controllers' `update_status` / `mutate`. A rejection is recorded in `rejected_writes`,
        fields lost to pruning (unknown `metadata` fields included) in `pruned_writes`.
        """
        if rt.schema is None or _schema is None:
            return
        pruned, dropped = _schema.prune_with_paths(rt.schema, obj)
        dropped = _schema.unknown_metadata_fields(obj.get("metadata")) + dropped
        if dropped:
            meta = obj.get("metadata") or {}
            self.pruned_writes.append(
                PrunedWrite(
                    rt.kind, meta.get("namespace"), str(meta.get("name", "")), operation, writer,
                    tuple(dropped),
                )
            )  # fmt: skip
            if writer == "controller":
                log.warning(
                    "%s: controller %s of %s %s/%s wrote fields its CRD does not define (pruned): %s",
                    self.name, operation, rt.kind, meta.get("namespace") or "", meta.get("name"),
                    ", ".join(dropped),
                )  # fmt: skip
        defaulted = _schema.apply_defaults(rt.schema, pruned)
        problems = _schema.validate(rt.schema, defaulted)
        if problems:
            meta = obj["metadata"]
            causes = tuple((p.path, p.message, p.reason) for p in problems)
            self.rejected_writes.append(
                RejectedWrite(
                    rt.kind, meta.get("namespace"), meta.get("name", ""), operation, writer, causes
                )
            )
            if writer == "controller":
                log.warning(
                    "%s: controller %s of %s %s/%s rejected by its schema: %s",
                    self.name, operation, rt.kind, meta.get("namespace") or "", meta.get("name"),
                    "; ".join(f"{path}: {message}" for path, message, _ in causes),
                )  # fmt: skip
            raise errors.invalid(rt, meta.get("name", ""), list(causes))
        obj.clear()
        obj.update(defaulted)

    def _after_write(self, rt: ResourceType, obj: Obj, old: Obj | None) -> None:
        key = rt.key
        if key == CRDS.key:
            self.registry.register(resource_type_from_crd(obj))
        elif key == PODS.key or (
            key == PDBS.key and (old is None or old.get("spec") != obj.get("spec"))
        ):
            self._refresh_pdbs(obj["metadata"]["namespace"])

    def _unserve_crd(self, crd: Obj) -> None:
        spec = crd.get("spec") or {}
        group, plural = spec.get("group", ""), (spec.get("names") or {}).get("plural", "")
        rt = self.registry.try_get(group, plural)
        if rt is None:
            return
        for obj in list(self._iter(rt, None)):
            self._remove(rt, obj)
        self.registry.unregister(group, plural)
        self._tables.pop(rt.key, None)

    # ------------------------------------------------------------------ update

    def replace(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        obj: Obj,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        field_validation: FieldValidation | None = None,
    ) -> Obj:
        """PUT: 409 Conflict when the body's resourceVersion is stale (none = unconditional).

        `field_validation` (HTTP requests only) reports the body's unknown fields first."""
        if field_validation is not None:
            obj = field_validation.check(rt, obj)
        old = self._stored(rt, namespace, name)
        new = clone(obj)
        meta = new.get("metadata")
        if not isinstance(meta, dict):
            meta = new["metadata"] = {}
        if meta.get("name", name) != name:
            raise errors.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
            )
        return self._update(rt, old, new, subresource, dry_run=dry_run)

    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        patch: Any,
        patch_type: str,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        copy_objects: bool = True,
        field_validation: FieldValidation | None = None,
    ) -> Obj:
        """PATCH by content type (merge, strategic merge, JSON patch); the result is a copy unless
        `copy_objects=False` (the HTTP layer, which only serializes it: never mutate it).

        `field_validation` (HTTP requests only) reports the unknown fields of the patched object,
        as kube decodes it after applying the patch."""
        old = self._stored(rt, namespace, name)
        if patch_type in _SHARING_PATCHES and rt.key != SECRETS.key:
            # Merge and JSON patches never modify their target (merge copies the dicts on the
            # patched paths and shares the rest, JSON patch deep-copies): no clone of the stored
            # object is needed. _update copies the two levels it writes (top, metadata); secrets
            # also rewrite `data` in place, so they take the cloning path.
            new = apply_patch(old, patch, patch_type)
            if isinstance(new.get("metadata"), dict):
                new = dict(new)
                new["metadata"] = dict(new["metadata"])
        else:
            new = apply_patch(clone(old), patch, patch_type)
        if not isinstance(new.get("metadata"), dict):
            raise errors.bad_request("metadata must be an object")
        if field_validation is not None:
            new = field_validation.check(rt, new, patch=True)
        return self._update(rt, old, new, subresource, dry_run=dry_run, copy_objects=copy_objects)

    def update_status(self, rt: ResourceType, namespace: str | None, name: str, status: Obj) -> Obj:
        """Controller shortcut: replace the status, whatever the resourceVersion."""
        old = self._stored(rt, namespace, name)
        new = clone(old)
        new["status"] = clone(status)
        new["metadata"].pop("resourceVersion", None)
        return self._update(rt, old, new, "status", writer="controller")

    def mutate(
        self, rt: ResourceType, namespace: str | None, name: str, fn: Callable[[Obj], None]
    ) -> Obj:
        """Controller shortcut: read-modify-write of spec, status and metadata, no conflicts."""
        old = self._stored(rt, namespace, name)
        new = clone(old)
        fn(new)
        new["metadata"].pop("resourceVersion", None)
        return self._update(rt, old, new, _ALL, writer="controller")

    def _update(
        self,
        rt: ResourceType,
        old: Obj,
        new: Obj,
        subresource: str | None,
        *,
        writer: str = "client",
        dry_run: bool = False,
        copy_objects: bool = True,
    ) -> Obj:
        """Every update path: PUT, PATCH, status, and the controllers' shortcuts.

        A dry run answers what would be stored, under the old resourceVersion (as etcd3's
        GuaranteedUpdate does), without storing or emitting anything.
        """
        old_meta = old["metadata"]
        name = old_meta["name"]
        rv = new["metadata"].get("resourceVersion")
        if rv and str(rv) != old_meta["resourceVersion"]:
            raise errors.conflict(
                rt, name,
                "the object has been modified; please apply your changes to the latest version and try again",
            )  # fmt: skip
        if subresource == "status":
            if not rt.has_status:
                raise errors.not_found(rt, name)
            result = clone(old)
            if "status" in new:
                result["status"] = new["status"]
            else:
                result.pop("status", None)
        else:
            result = new
            meta = result["metadata"]
            for key in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "namespace", "name"):  # fmt: skip
                if key in old_meta:
                    meta[key] = old_meta[key]
                else:
                    meta.pop(key, None)
            if old_meta.get("deletionTimestamp"):
                added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
                if added:
                    raise errors.invalid(
                        rt, name, [("metadata.finalizers", "Forbidden: no new finalizers can be added if the object is being deleted", "FieldValueForbidden")],
                    )  # fmt: skip
            if subresource != _ALL and rt.has_status:
                if "status" in old:
                    result["status"] = old["status"]
                else:
                    result.pop("status", None)
        result["apiVersion"] = rt.api_version
        result["kind"] = rt.kind
        if rt.key == SECRETS.key:
            _fold_string_data(result)
        meta = result["metadata"]
        if tracks_generation(rt):
            meta["generation"] = old_meta.get("generation", 1)
            if _spec_changed(rt, old, result):
                meta["generation"] += 1
        else:
            meta.pop("generation", None)
        if rt.key == CRDS.key and subresource != "status":
            spec = result.get("spec") or {}
            old_spec = old.get("spec") or {}
            if (spec.get("group"), (spec.get("names") or {}).get("plural")) != (
                old_spec.get("group"),
                (old_spec.get("names") or {}).get("plural"),
            ):
                raise errors.invalid(CRDS, name, [("spec.names.plural", "Invalid value: field is immutable", "FieldValueInvalid")])  # fmt: skip
        operation = {None: "update", _ALL: "mutate"}.get(subresource, subresource or "update")
        if subresource != "status":
            validation.check(rt, result, old, pod_update=subresource is None)
        self._validate_custom(rt, result, operation, writer)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if result == old:
            return clone(old) if copy_objects else old  # a no-op write changes nothing, like kube
        if dry_run:
            return clone(result)
        stored = self._write(rt, result, old)
        self._after_write(rt, stored, old)
        if _ready_to_remove(rt, stored):
            self._remove(rt, stored)
        return clone(stored) if copy_objects else stored

    # ------------------------------------------------------------------ delete

    def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
        preconditions: dict[str, Any] | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """Delete (see the module docstring); returns the object as last seen.

        `dry_run` answers the same (with deletionTimestamp set when the deletion would be
        graceful or wait for finalizers) but changes nothing: no dependents are touched.
        """
        old = self._stored(rt, namespace, name)
        meta = old["metadata"]
        for field in ("uid", "resourceVersion"):
            wanted = (preconditions or {}).get(field)
            if wanted and str(wanted) != meta.get(field):
                raise errors.conflict(
                    rt, name,
                    f"Precondition failed: {field.upper() if field == 'uid' else 'ResourceVersion'} in precondition: {wanted}, {field.upper() if field == 'uid' else 'ResourceVersion'} in object meta: {meta.get(field)}",
                )  # fmt: skip
        policy = propagation_policy or "Background"
        if policy not in ("Background", "Foreground", "Orphan"):
            raise errors.bad_request(f"unknown propagationPolicy {policy!r}")
        if meta.get("deletionTimestamp"):
            if rt.key == PODS.key and grace_period_seconds == 0 and not dry_run:
                self.finalize_pod(meta["namespace"], name)
            return clone(self._peek(rt, namespace, name) or old)
        if rt.key == NAMESPACES.key:
            return self._terminate_namespace(old, dry_run=dry_run)
        if policy == "Orphan" and not dry_run:
            for dep_uid in list(self._dependents.get(meta["uid"], ())):
                self._collect(dep_uid, meta["uid"], orphan=True)
        grace = 0
        if rt.key == PODS.key and (old.get("spec") or {}).get("nodeName"):
            phase = (old.get("status") or {}).get("phase")
            if phase not in ("Succeeded", "Failed"):
                grace = (
                    grace_period_seconds
                    if grace_period_seconds is not None
                    else int(old["spec"].get("terminationGracePeriodSeconds", DEFAULT_POD_GRACE))
                )
        finalizers = list(meta.get("finalizers") or [])
        if policy == "Foreground" and self._dependents.get(meta["uid"]):
            finalizers.append(FOREGROUND_FINALIZER)
        if grace <= 0 and not finalizers:
            if dry_run:
                return clone(old)
            self._remove(rt, old)
            final = clone(old)
            return final
        new = clone(old)
        new_meta = new["metadata"]
        new_meta["deletionTimestamp"] = format_time(
            self.clock() + dt.timedelta(seconds=max(grace, 0))
        )
        new_meta["deletionGracePeriodSeconds"] = max(grace, 0)
        if finalizers:
            new_meta["finalizers"] = finalizers
        # kube bumps the generation when it sets deletionTimestamp (rest.BeforeDelete), where
        # there is one.
        if meta.get("generation"):
            new_meta["generation"] = meta["generation"] + 1
        if dry_run:
            return new
        stored = self._write(rt, new, old)
        if rt.key == PODS.key:
            self._refresh_pdbs(new_meta["namespace"])
        if FOREGROUND_FINALIZER in finalizers:
            for dep_uid in list(self._dependents.get(meta["uid"], ())):
                where = self._by_uid.get(dep_uid)
                if where is not None:
                    dep_rt, dep_ns, dep_name = where
                    self.delete(dep_rt, dep_ns or None, dep_name, propagation_policy="Background")
            self._release_foreground_owner(meta["uid"])
        current = self._peek(rt, namespace, name)
        return clone(current if current is not None else stored)

    def delete_collection(
        self,
        rt: ResourceType,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
        dry_run: bool = False,
    ) -> builtins.list[Obj]:
        items, _ = self.list(
            rt, namespace, label_selector=label_selector, field_selector=field_selector,
            copy_objects=False,
        )  # fmt: skip
        deleted = []
        for obj in items:
            meta = obj["metadata"]
            if self._peek(rt, meta.get("namespace"), meta["name"]) is obj:
                deleted.append(
                    self.delete(
                        rt, meta.get("namespace"), meta["name"],
                        grace_period_seconds=grace_period_seconds,
                        propagation_policy=propagation_policy,
                        dry_run=dry_run,
                    )
                )  # fmt: skip
        return deleted

    def finalize_pod(self, namespace: str, name: str) -> None:
        """Kubelet: the terminating pod's containers are gone; remove it unless finalizers hold it."""
        pod = self._peek(PODS, namespace, name)
        if pod is None or not pod["metadata"].get("deletionTimestamp"):
            return
        if pod["metadata"].get("finalizers"):
            new = clone(pod)
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            self._write(PODS, new, pod)
        else:
            self._remove(PODS, pod)

    # ------------------------------------------------------------------ pods: binding, eviction

    def bind(self, namespace: str, name: str, node_name: str, *, dry_run: bool = False) -> Obj:
        """The binding subresource: set spec.nodeName once; 409 if already bound."""
        pod = self._stored(PODS, namespace, name)
        current = (pod.get("spec") or {}).get("nodeName")
        if current:
            raise errors.conflict(PODS, name, f'pod {name} is already assigned to node "{current}"')
        if pod["metadata"].get("deletionTimestamp"):
            raise errors.conflict(
                PODS, name, f"pod {name} is being deleted, cannot be assigned to a host"
            )
        now = self._now()

        def assign(obj: Obj) -> None:
            obj.setdefault("spec", {})["nodeName"] = node_name
            conditions = [
                c
                for c in (obj.setdefault("status", {}).get("conditions") or [])
                if c.get("type") != "PodScheduled"
            ]
            conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": now})
            obj["status"]["conditions"] = conditions

        if dry_run:
            return clone(pod)
        return self.mutate(PODS, namespace, name, assign)

    def evict(
        self,
        namespace: str,
        name: str,
        delete_options: Mapping[str, Any] | None = None,
        *,
        dry_run: bool = False,
    ) -> None:
        """The eviction subresource: honour PodDisruptionBudgets, then delete gracefully.

        A dry run (the request's or deleteOptions.dryRun ["All"]) checks the budgets only.
        Every eviction accepted (not a dry run) is recorded in `evictions`.
        """
        pod = self._stored(PODS, namespace, name)
        options = delete_options or {}
        if not pod["metadata"].get("deletionTimestamp") and _pod_counts_for_budget(pod):
            labels = pod["metadata"].get("labels") or {}
            budgets = [
                pdb
                for pdb in self._iter(PDBS, namespace)
                if not LabelSelector.from_object((pdb.get("spec") or {}).get("selector")).empty
                and LabelSelector.from_object(pdb["spec"]["selector"]).matches(labels)
            ]
            if len(budgets) > 1:
                raise errors.internal(
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
                )
            if budgets:
                pdb = budgets[0]
                status = self.pdb_status(pdb)
                if status["disruptionsAllowed"] <= 0:
                    pdb_name = pdb["metadata"]["name"]
                    raise errors.too_many_requests(
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                        causes=[{
                            "reason": "DisruptionBudget",
                            "message": f"The disruption budget {pdb_name} needs {status['desiredHealthy']} healthy pods and has {status['currentHealthy']} currently",
                        }],
                    )  # fmt: skip
        grace = options.get("gracePeriodSeconds")
        dry_run = dry_run or "All" in (options.get("dryRun") or ())
        self.delete(
            PODS, namespace, name,
            grace_period_seconds=None if grace is None else int(grace),
            propagation_policy=options.get("propagationPolicy"),
            preconditions=options.get("preconditions"),
            dry_run=dry_run,
        )  # fmt: skip
        if not dry_run:
            meta = pod["metadata"]
            self.evictions.append(
                Eviction(
                    namespace, name, str(meta.get("uid", "")),
                    str((pod.get("spec") or {}).get("nodeName") or ""),
                )
            )  # fmt: skip

    def pdb_status(self, pdb: Obj) -> Obj:
        """A PodDisruptionBudget's status computed from the pods it selects now."""
        spec = pdb.get("spec") or {}
        selector = LabelSelector.from_object(spec.get("selector"))
        pods = [
            p
            for p in self._iter(PODS, pdb["metadata"]["namespace"])
            if not selector.empty and selector.matches(p["metadata"].get("labels"))
        ]
        expected = self._expected_pods(pods)
        healthy = sum(1 for p in pods if pod_serving(p))
        if spec.get("minAvailable") is not None:
            desired = _scaled(spec["minAvailable"], expected)
        elif spec.get("maxUnavailable") is not None:
            desired = max(expected - _scaled(spec["maxUnavailable"], expected), 0)
        else:
            desired = expected  # neither given: no voluntary disruption allowed
        old = pdb.get("status") or {}
        allowed = max(healthy - desired, 0)
        return {
            "observedGeneration": pdb["metadata"].get("generation", 1),
            "disruptionsAllowed": allowed,
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": expected,
            "conditions": [
                {
                    "type": "DisruptionAllowed",
                    "status": "True" if allowed > 0 else "False",
                    "reason": "SufficientPods" if allowed > 0 else "InsufficientPods",
                    "message": "",
                    "observedGeneration": pdb["metadata"].get("generation", 1),
                    "lastTransitionTime": _transition_time(old, allowed > 0, self._now()),
                }
            ],
        }

    def _expected_pods(self, pods: builtins.list[Obj]) -> int:
        """Pods a budget expects: the scale of the pods' controllers where the store knows it
        (like the disruption controller), else one per pod that is not terminating."""
        expected = 0
        counted: set[str] = set()
        for p in pods:
            ref = next(
                (r for r in p["metadata"].get("ownerReferences") or [] if r.get("controller")),
                None,
            )
            where = self._by_uid.get(ref.get("uid", "")) if ref else None
            if ref is not None and where is not None:
                if ref["uid"] not in counted:
                    counted.add(ref["uid"])
                    owner_rt, owner_ns, owner_name = where
                    owner = self._tables[owner_rt.key][owner_ns][owner_name]
                    scale = (owner.get("spec") or {}).get("replicas")
                    if scale is None:
                        scale = (owner.get("status") or {}).get("desiredNumberScheduled")
                    expected += int(scale) if scale is not None else 1
            elif not p["metadata"].get("deletionTimestamp"):
                expected += 1
        return expected

    def _refresh_pdbs(self, namespace: str) -> None:
        budgets = self._tables.get(PDBS.key, {}).get(namespace)
        if not budgets:
            return
        for pdb in list(budgets.values()):
            status = self.pdb_status(pdb)
            if status != pdb.get("status"):
                new = clone(pdb)
                new["status"] = status
                self._write(PDBS, new, pdb)

    # ------------------------------------------------------------------ service account tokens

    def request_token(self, namespace: str, name: str, request: Mapping[str, Any] | None) -> Obj:
        """TokenRequest: a bearer token for the service account, valid `expirationSeconds`."""
        sa = self._stored(SERVICEACCOUNTS, namespace, name)
        spec = dict((request or {}).get("spec") or {})
        seconds = int(spec.get("expirationSeconds") or 3600)
        if seconds < 600:
            raise errors.invalid(
                SERVICEACCOUNTS, name,
                [("spec.expirationSeconds", "Invalid value: may not specify a duration less than 10 minutes", "FieldValueInvalid")],
            )  # fmt: skip
        # No audiences: the API server's own, as kube defaults them.
        audiences = tuple(spec.get("audiences") or ()) or (API_AUDIENCE,)
        token, expires = self.tokens.issue(
            f"system:serviceaccount:{namespace}:{name}",
            expiration_seconds=seconds,
            audiences=audiences,
        )
        spec["expirationSeconds"] = seconds
        spec["audiences"] = list(audiences)
        assert expires is not None
        return {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": self._now(),
                         "uid": sa["metadata"]["uid"]},
            "spec": spec,
            "status": {"token": token, "expirationTimestamp": format_time(expires)},
        }  # fmt: skip


# ---------------------------------------------------------------------- pod defaulting, admission

# DefaultTolerationSeconds admission plugin (on by default): every pod tolerates a not-ready or
# unreachable node for 300 s before the taint manager evicts it.
DEFAULT_TOLERATION_SECONDS = 300
_DEFAULT_TOLERATION_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def _default_pod_resources(spec: Obj) -> None:
    """SetDefaults_Pod: a container's limits without requests default its requests (pods only,
    not pod templates)."""
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            if not isinstance(container, dict):
                continue
            resources = container.get("resources")
            if not isinstance(resources, dict) or not isinstance(resources.get("limits"), dict):
                continue
            requests = resources.get("requests")
            if not isinstance(requests, dict):
                requests = resources["requests"] = {}
            for name, quantity in resources["limits"].items():
                requests.setdefault(name, quantity)


def _admit_default_tolerations(spec: Obj) -> None:
    tolerations = spec.get("tolerations")
    if tolerations is not None and not isinstance(tolerations, list):
        return
    current = list(tolerations or [])
    for taint in _DEFAULT_TOLERATION_TAINTS:
        tolerated = any(
            isinstance(t, dict)
            and t.get("effect") in (None, "", "NoExecute")
            and (t.get("key") == taint or (not t.get("key") and t.get("operator") == "Exists"))
            for t in current
        )
        if not tolerated:
            current.append(
                {
                    "key": taint,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
                }
            )
    spec["tolerations"] = current


def _qos_class(spec: Any) -> str:
    """The pod's QoS class from its containers' cpu and memory (kube's GetPodQOS)."""
    if not isinstance(spec, dict):
        return "BestEffort"
    containers = [
        c
        for key in ("initContainers", "containers")
        for c in spec.get(key) or []
        if isinstance(c, dict)
    ]
    any_set = False
    guaranteed = bool(containers)
    for container in containers:
        raw = container.get("resources")
        resources: Obj = raw if isinstance(raw, dict) else {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        for name in ("cpu", "memory"):
            request, limit = requests.get(name), limits.get(name)
            if _nonzero(request) or _nonzero(limit):
                any_set = True
            if not _nonzero(limit) or (
                request is not None
                and validation.parse_quantity(request) != validation.parse_quantity(limit)
            ):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _nonzero(quantity: Any) -> bool:
    if quantity is None:
        return False
    amount = validation.parse_quantity(quantity)
    return amount is not None and amount != 0


# ---------------------------------------------------------------------- helpers


def _list_order(obj: Obj) -> tuple[str, str]:
    meta = obj["metadata"]
    return (meta.get("namespace", ""), meta["name"])


def _encode_continue(rv: int, last: tuple[str, str]) -> str:
    """kube's continue token: base64url (unpadded) JSON of the list rv and the last key served."""
    namespace, name = last
    start = f"{namespace}/{name}\x00" if namespace else f"{name}\x00"
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


_BASE64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    """(rv, last key) of a continue token; 400 BadRequest for anything else, worded as
    kube-apiserver 1.37 words it ("invalid continue token: continue key is not valid: ...")."""
    try:
        bad = next((i for i, c in enumerate(token) if c not in _BASE64URL), None)
        if bad is not None:
            raise ValueError(f"illegal base64 data at input byte {bad}")
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        decoded = json.loads(raw)
        if not isinstance(decoded, dict) or decoded.get("v") != "meta.k8s.io/v1":
            version = decoded.get("v") if isinstance(decoded, dict) else None
            raise ValueError(f"server does not recognize this encoded version {version or ''}")
        rv, start = decoded.get("rv"), decoded.get("start")
        if not isinstance(rv, int) or not isinstance(start, str) or not start:
            raise ValueError("invalid start or resourceVersion")
    except (binascii.Error, ValueError, UnicodeDecodeError) as exc:
        raise errors.bad_request(
            f"invalid continue token: continue key is not valid: {exc}"
        ) from None
    namespace, _, name = start.rstrip("\x00").rpartition("/")
    return rv, (namespace, name)


def _fold_string_data(secret: Obj) -> None:
    """Secrets store `stringData` base64-encoded into `data`, as the real server does."""
    string_data = secret.pop("stringData", None)
    if string_data:
        data = secret.setdefault("data", {}) or {}
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        secret["data"] = data


def _drop_finalizer(finalizer: str) -> Callable[[Obj], None]:
    def drop(obj: Obj) -> None:
        obj["metadata"]["finalizers"] = [
            f for f in obj["metadata"].get("finalizers") or [] if f != finalizer
        ]

    return drop


def _spec_changed(rt: ResourceType, old: Obj, new: Obj) -> bool:
    if rt.has_status:
        skip = ("metadata", "status")
        keys = (set(old) | set(new)) - set(skip)
        return any(old.get(k) != new.get(k) for k in keys)
    return old.get("spec") != new.get("spec")


def _ready_to_remove(rt: ResourceType, obj: Obj) -> bool:
    meta = obj["metadata"]
    if not meta.get("deletionTimestamp") or meta.get("finalizers"):
        return False
    # A bound pod inside its grace period waits for the kubelet (finalize_pod).
    return not (rt.key == PODS.key and meta.get("deletionGracePeriodSeconds", 0) > 0)


def _pod_counts_for_budget(pod: Obj) -> bool:
    # Pods that are not running (pending, finished) can always be evicted, as in kube.
    return (pod.get("status") or {}).get("phase") == "Running"


def _scaled(value: Any, total: int) -> int:
    """An IntOrString against `total`; percentages round up, as the disruption controller does."""
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


def _transition_time(old_status: Mapping[str, Any], allowed: bool, now: str) -> str:
    for condition in old_status.get("conditions") or []:
        if (
            condition.get("type") == "DisruptionAllowed"
            and (condition.get("status") == "True") == allowed
        ):
            return str(condition.get("lastTransitionTime", now))
    return now
