"""SIMULATOR. `sim.clusterapi.ClusterApi` over a real kube-apiserver, through the official
`kubernetes` client: the other side of the seam from the emulator's `StoreApi`.

Requests are the client's own (`ApiClient.param_serialize`, `call_api`, `response_deserialize`:
its kubeconfig handling, TLS, client certificates and bearer tokens), run in a small thread pool
of this API's (the client is blocking; the event loop never waits on a socket). Watches are
`sim.real.informer.Informer`s, one per type subscribed to, started on the first `subscribe` that
names it; their objects are `cache`. CustomResourceDefinitions are always watched: `registry`
serves the built-in types and every CRD the cluster has (a type becomes known as soon as its CRD
is created).

Errors: the client's `ApiException` becomes `sim.apiserver.errors.ApiError` with the server's
own Status (code, reason, message, details), as the emulator raises it. Writes are what a
controller-runtime controller does: `mutate` reads, changes a copy and writes the object with
the resourceVersion it read (spec and metadata with a PUT, status with a PUT of its status
subresource), reading again on a conflict.

Used by the real world (`sim.real.world`, `sim.real.child`); tests drive it against the emulator
over HTTP too (`sim/tests/test_kubeapi.py`), which is how the seam is shown to mean the same on
both sides.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from sim.apiserver.errors import ApiError
from sim.apiserver.registry import (
    CRDS,
    ResourceRegistry,
    ResourceType,
    resource_type_from_crd,
)
from sim.apiserver.selectors import LabelSelector
from sim.apiserver.store import WatchEvent, clone
from sim.clusterapi import ClusterReader, Key
from sim.real.informer import Informer, collection_path, json_answer, object_key, with_type

log = logging.getLogger(__name__)

Obj = dict[str, Any]

REQUEST_TIMEOUT = (5.0, 30.0)
"""(connect, read) seconds of an ordinary request: a hung server fails the call, the controller
retries its reconcile."""
WORKERS = 8
"""Requests in flight at once per API (the loop's controllers await them)."""
POOL_SIZE = 32
"""Connections kept per API: a watch holds one per watched type."""
CONFLICT_RETRIES = 10
"""Reads again after a 409 Conflict before giving up (the reconcile is then retried)."""


class KubeApi:
    """A real cluster's API (see the module docstring). `await start()` before use, `await
    close()` after.

    Args:
        name: the cluster's name as the simulator knows it (a ClusterDeployment's, or
            "management").
        kubeconfig: how to reach it (the official client's kubeconfig handling).
        rejected: where refused writes are kept (shared by the APIs of one world).
    """

    def __init__(
        self,
        name: str,
        kubeconfig: Mapping[str, Any],
        *,
        rejected: deque[ApiError] | None = None,
    ) -> None:
        self._name = name
        configuration = client.Configuration()
        config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]  # untyped upstream
            dict(kubeconfig), client_configuration=configuration, persist_config=False
        )
        # A connection per informer's watch and per request thread, kept for reuse.
        configuration.connection_pool_maxsize = POOL_SIZE
        # No retries inside urllib3: a failed request fails its reconcile, which is retried.
        configuration.retries = False
        self._client = client.ApiClient(configuration)
        self._registry = ResourceRegistry.builtin()
        self._executor = ThreadPoolExecutor(WORKERS, thread_name_prefix=f"kubeapi-{name}")
        self._informers: dict[Key, Informer] = {}
        self._subscribers: list[tuple[frozenset[Key], asyncio.Queue[WatchEvent]]] = []
        self._cache = _InformerCache(self._informers)
        self.rejected: deque[ApiError] = deque(maxlen=1000) if rejected is None else rejected
        """Writes the server refused as invalid or forbidden (400, 403, 422): a simulator
        controller writing what a real server does not take is a simulator bug."""

    @property
    def name(self) -> str:
        return self._name

    @property
    def registry(self) -> ResourceRegistry:
        return self._registry

    @property
    def cache(self) -> ClusterReader:
        return self._cache

    async def start(self) -> KubeApi:
        """Learn the cluster's CRDs (and keep learning them)."""
        await self._informer(CRDS.key)
        return self

    async def close(self) -> None:
        """Stop every watch and the request threads (idempotent)."""
        for informer in self._informers.values():
            informer.stop()
        self._informers.clear()
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._client.close()  # type: ignore[no-untyped-call]  # untyped upstream

    # ------------------------------------------------------------------ requests

    async def _call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
    ) -> Any:
        """One request and its JSON answer; ApiError for a failed one."""

        def call() -> Any:
            serialized = self._client.param_serialize(
                method,
                path,
                query_params=query or [],
                header_params={"Accept": "application/json", "Content-Type": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self._client.call_api(*serialized, _request_timeout=REQUEST_TIMEOUT)
            return json_answer(self._client, response)

        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, call)
        except ApiException as error:
            refused = api_error(error)
            if method != "GET" and refused.code in (400, 403, 422):
                log.warning("%s %s refused: %s", method, path, refused.message)
                self.rejected.append(refused)
            raise refused from error

    async def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        found: Obj = await self._call("GET", object_path(rt, namespace, name))
        return found

    async def try_get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj | None:
        try:
            return await self.get(rt, namespace, name)
        except ApiError as error:
            if error.code == 404:
                return None
            raise

    async def list(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        query = [("labelSelector", label_selector)] if label_selector else []
        if field_selector:
            query.append(("fieldSelector", field_selector))
        listed = await self._call("GET", collection_path(rt, namespace), query=query)
        return [with_type(rt, item) for item in listed.get("items") or []]

    async def create(self, rt: ResourceType, obj: Obj, *, namespace: str | None = None) -> Obj:
        body = with_type(rt, dict(obj))
        namespace = namespace or (body.get("metadata") or {}).get("namespace")
        created: Obj = await self._call("POST", collection_path(rt, namespace), body=body)
        return created

    async def mutate(
        self, rt: ResourceType, namespace: str | None, name: str, fn: Callable[[Obj], None]
    ) -> Obj:
        """Main resource first (metadata, spec: a 409 reads and applies `fn` again), then the
        status subresource, each written only when `fn` changed it."""
        path = object_path(rt, namespace, name)
        status_changed = False
        for _ in range(CONFLICT_RETRIES):
            current = await self.get(rt, namespace, name)
            desired = clone(current)
            fn(desired)
            status_changed = rt.has_status and desired.get("status") != current.get("status")
            if _without_status(desired, rt) == _without_status(current, rt):
                break
            with contextlib.suppress(_Conflict):
                current = await self._put(path, desired)
                break
        else:
            raise ApiError(409, "Conflict", f"{rt.plural} {name}: kept changing under a mutate")
        if not status_changed:
            return current

        def set_status(obj: Obj) -> None:
            probe = clone(obj)
            fn(probe)
            obj["status"] = probe.get("status")

        return await self.update_status(rt, namespace, name, None, set_status)

    async def update_status(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        status: Obj | None,
        compute: Callable[[Obj], None] | None = None,
    ) -> Obj:
        """Replace the status (or let `compute` set it on each fresh read), whatever the
        resourceVersion: a conflict reads again."""
        path = object_path(rt, namespace, name) + ("/status" if rt.has_status else "")
        for _ in range(CONFLICT_RETRIES):
            current = await self.get(rt, namespace, name)
            if compute is not None:
                compute(current)
            else:
                current["status"] = clone(status)
            with contextlib.suppress(_Conflict):
                return await self._put(path, current)
        raise ApiError(409, "Conflict", f"{rt.plural} {name}: status kept changing")

    async def _put(self, path: str, body: Obj) -> Obj:
        try:
            stored: Obj = await self._call("PUT", path, body=body)
        except ApiError as error:
            if error.code == 409 and error.reason == "Conflict":
                raise _Conflict from error
            raise
        return stored

    async def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
    ) -> None:
        options: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        await self._call("DELETE", object_path(rt, namespace, name), body=options)

    async def evict(self, namespace: str, name: str) -> None:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        await self._call("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", body=body)

    # ------------------------------------------------------------------ watches

    async def subscribe(self, watched: Collection[Key]) -> asyncio.Queue[WatchEvent]:
        queue: asyncio.Queue[WatchEvent] = asyncio.Queue()
        self._subscribers.append((frozenset(watched), queue))
        await asyncio.gather(*(self._informer(key) for key in watched))  # their lists at once
        return queue

    def unsubscribe(self, queue: asyncio.Queue[WatchEvent]) -> None:
        self._subscribers = [(keys, q) for keys, q in self._subscribers if q is not queue]

    async def _informer(self, key: Key) -> Informer:
        """The informer of `key`, started (and its first list in the cache) if it was not."""
        informer = self._informers.get(key)
        if informer is None:
            informer = Informer(
                self._client,
                lambda: self._registry.try_get(*key),
                self._deliver,
                asyncio.get_running_loop(),
                f"{self._name}-{key[1]}",
            )
            self._informers[key] = informer
            informer.start()
        await informer.synced.wait()
        return informer

    def _deliver(self, event: WatchEvent) -> None:
        if event.rt.key == CRDS.key:
            self._learn(event)
        for keys, queue in self._subscribers:
            if event.rt.key in keys:
                queue.put_nowait(event)

    def _learn(self, event: WatchEvent) -> None:
        """Keep `registry` in step with the cluster's CRDs."""
        spec = event.object.get("spec") or {}
        key = (str(spec.get("group") or ""), str((spec.get("names") or {}).get("plural") or ""))
        if event.type == "DELETED":
            self._registry.unregister(*key)
        else:
            self._registry.register(resource_type_from_crd(event.object))


class _Conflict(Exception):
    """A write lost to a concurrent one (409 Conflict): read again."""


class _InformerCache:
    """`ClusterReader` over the informers' objects (copies: callers may change what they get)."""

    def __init__(self, informers: Mapping[Key, Informer]) -> None:
        self._informers = informers

    def _objects(self, rt: ResourceType) -> dict[tuple[str, str], Obj]:
        informer = self._informers.get(rt.key)
        if informer is None:
            raise LookupError(f"{rt.plural} are not watched: subscribe to them first")
        return informer.objects

    def try_get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj | None:
        found = self._objects(rt).get((namespace or "" if rt.namespaced else "", name))
        return None if found is None else clone(found)

    def list(
        self, rt: ResourceType, namespace: str | None = None, *, label_selector: str | None = None
    ) -> list[Obj]:
        selector = LabelSelector.parse(label_selector)
        found = [
            clone(obj)
            for key, obj in sorted(self._objects(rt).items())
            if (namespace is None or key[0] == namespace)
            and selector.matches((obj.get("metadata") or {}).get("labels") or {})
        ]
        return found


def object_path(rt: ResourceType, namespace: str | None, name: str) -> str:
    return f"{collection_path(rt, namespace)}/{name}"


def api_error(error: ApiException) -> ApiError:
    """The server's Status as an ApiError (its code, reason, message and details)."""
    status: Obj = {}
    with contextlib.suppress(ValueError, TypeError):
        status = json.loads(error.body or "{}")
    if not isinstance(status, dict):
        status = {}
    details = status.get("details") if isinstance(status.get("details"), dict) else None
    return ApiError(
        int(error.status or 500),
        str(status.get("reason") or error.reason or "Unknown"),
        str(status.get("message") or error.body or error.reason or ""),
        details=details,
    )


def _without_status(obj: Obj, rt: ResourceType) -> Obj:
    """What a PUT of the main resource writes (status goes through its subresource)."""
    if not rt.has_status:
        return obj
    return {key: value for key, value in obj.items() if key != "status"}


__all__ = ["KubeApi", "api_error", "object_key", "object_path"]
