"""SIMULATOR. The seam between the simulator's controllers and "a cluster's API".

The controllers that play k0rdent, the host provider's machines, ServiceSet installs and the
tenant gateway (`sim.controllers.k0rdent*`, `gateway`, `tenant_gateway`, `gateway_dataplane`)
never hold a cluster's store: they hold a `ClusterApi`. It has two implementations:

- `StoreApi`: the emulator's in-process `ClusterStore` (the instant default; every call is a
  direct store call, no HTTP);
- `sim.real.kubeapi.KubeApi`: a real kube-apiserver through the official `kubernetes` client,
  its watches included (the world of `COLONY_WORLD=real`, `sim.real`).

What a controller may do through it is what a controller-runtime controller does: read and write
objects (`get`, `list`, `create`, `mutate`, `update_status`, `delete`), follow the changes of the
types it watches (`subscribe`), and read those types synchronously from `cache`, the informer
cache kept by the same watches (the tenant gateway's TLS handshake picks its certificate in a
synchronous callback). Writes answer what the server stored; reads through the async methods see
every write made before them (read-your-writes), reads from `cache` may lag a little behind, as
an informer's do.

Errors are `sim.apiserver.errors.ApiError` whichever the implementation (the real one turns the
client's `ApiException` into it), so `contextlib.suppress(ApiError)` means the same on both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from typing import Any, Protocol

from sim.apiserver.registry import ResourceRegistry, ResourceType
from sim.apiserver.store import ClusterStore, WatchEvent

Obj = dict[str, Any]
Key = tuple[str, str]
"""A resource type's (group, plural), as `ResourceType.key`."""


class ClusterReader(Protocol):
    """Synchronous reads of the current objects of the watched types (an informer's cache)."""

    def try_get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj | None: ...

    def list(
        self, rt: ResourceType, namespace: str | None = None, *, label_selector: str | None = None
    ) -> list[Obj]: ...


class ClusterApi(Protocol):
    """One cluster's API as the simulator's controllers use it (see the module docstring)."""

    @property
    def name(self) -> str:
        """The cluster's name (the management cluster's, or a ClusterDeployment's)."""
        ...

    @property
    def registry(self) -> ResourceRegistry:
        """The types it serves now: the built-ins and the CRDs installed."""
        ...

    @property
    def cache(self) -> ClusterReader:
        """Synchronous reads of the types subscribed to (see `subscribe`)."""
        ...

    async def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        """The object; ApiError 404 when there is none."""
        ...

    async def try_get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj | None: ...

    async def list(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]: ...

    async def create(self, rt: ResourceType, obj: Obj, *, namespace: str | None = None) -> Obj: ...

    async def mutate(
        self, rt: ResourceType, namespace: str | None, name: str, fn: Callable[[Obj], None]
    ) -> Obj:
        """Read, apply `fn` to a copy, write what changed (metadata, spec and status alike);
        a conflict reads again. A change that changes nothing writes nothing."""
        ...

    async def update_status(
        self, rt: ResourceType, namespace: str | None, name: str, status: Obj
    ) -> Obj:
        """Replace the object's status, whatever its resourceVersion."""
        ...

    async def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
    ) -> None: ...

    async def evict(self, namespace: str, name: str) -> None:
        """The pods/eviction subresource: ApiError 429 while a PodDisruptionBudget refuses."""
        ...

    async def subscribe(self, watched: Collection[Key]) -> asyncio.Queue[WatchEvent]:
        """A queue of the changes of the `watched` types from now on, their cache filled (an
        implementation may deliver other types' changes too: filter by `event.rt.key`)."""
        ...

    def unsubscribe(self, queue: asyncio.Queue[WatchEvent]) -> None: ...


class _StoreReader:
    """The store itself is always current: it is its own cache."""

    def __init__(self, store: ClusterStore) -> None:
        self._store = store

    def try_get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj | None:
        return self._store.try_get(rt, namespace, name)

    def list(
        self, rt: ResourceType, namespace: str | None = None, *, label_selector: str | None = None
    ) -> list[Obj]:
        return self._store.list(rt, namespace, label_selector=label_selector)[0]


class StoreApi:
    """`ClusterApi` over the emulator's in-process store: direct calls, no HTTP, no copies of
    events beyond the store's own."""

    def __init__(self, store: ClusterStore) -> None:
        self.store = store
        self._reader = _StoreReader(store)

    @property
    def name(self) -> str:
        return self.store.name

    @property
    def registry(self) -> ResourceRegistry:
        return self.store.registry

    @property
    def cache(self) -> ClusterReader:
        return self._reader

    async def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        return self.store.get(rt, namespace, name)

    async def try_get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj | None:
        return self.store.try_get(rt, namespace, name)

    async def list(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        return self.store.list(
            rt, namespace, label_selector=label_selector, field_selector=field_selector
        )[0]

    async def create(self, rt: ResourceType, obj: Obj, *, namespace: str | None = None) -> Obj:
        return self.store.create(rt, obj, namespace=namespace)

    async def mutate(
        self, rt: ResourceType, namespace: str | None, name: str, fn: Callable[[Obj], None]
    ) -> Obj:
        return self.store.mutate(rt, namespace, name, fn)

    async def update_status(
        self, rt: ResourceType, namespace: str | None, name: str, status: Obj
    ) -> Obj:
        return self.store.update_status(rt, namespace, name, status)

    async def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
    ) -> None:
        self.store.delete(
            rt,
            namespace,
            name,
            grace_period_seconds=grace_period_seconds,
            propagation_policy=propagation_policy,
        )

    async def evict(self, namespace: str, name: str) -> None:
        self.store.evict(namespace, name)

    async def subscribe(self, watched: Collection[Key]) -> asyncio.Queue[WatchEvent]:
        return self.store.subscribe()

    def unsubscribe(self, queue: asyncio.Queue[WatchEvent]) -> None:
        self.store.unsubscribe(queue)


def cluster_api(target: ClusterStore | ClusterApi) -> ClusterApi:
    """`target` as a ClusterApi: a store is wrapped in a `StoreApi` (what tests of one controller
    hand it), an API is itself."""
    return StoreApi(target) if isinstance(target, ClusterStore) else target


def cluster_reader(target: ClusterStore | ClusterReader) -> ClusterReader:
    """`target` as a ClusterReader: a store reads itself, a reader is itself."""
    return _StoreReader(target) if isinstance(target, ClusterStore) else target
