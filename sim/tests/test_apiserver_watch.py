"""Watches through the official client: event streams, selectors, timeouts and 410 Gone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from sim.apiserver.auth import CertificateAuthority
from sim.apiserver.registry import CONFIGMAPS
from sim.apiserver.server import ClusterServer
from sim.apiserver.store import ClusterStore
from sim.tests.conftest import Kube, make_api_client
from tests.helpers import unique

call = asyncio.to_thread


def collect(
    list_fn: Any, *args: Any, count: int, timeout: int = 10, **kwargs: Any
) -> list[tuple[str, str]]:
    """Blocking: the first `count` (type, name) events of a watch (or fewer at its timeout)."""
    seen: list[tuple[str, str]] = []
    stream = watch.Watch()
    for event in stream.stream(list_fn, *args, timeout_seconds=timeout, **kwargs):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) >= count:
            stream.stop()
    return seen


async def test_watch_from_resource_version(kube: Kube) -> None:
    core = client.CoreV1Api(kube.api)
    await call(core.create_namespaced_config_map, kube.namespace, {"metadata": {"name": "before"}})
    listed = await call(core.list_namespaced_config_map, kube.namespace)
    rv = listed.metadata.resource_version
    watching = asyncio.create_task(
        call(collect, core.list_namespaced_config_map, kube.namespace, count=3, resource_version=rv)
    )
    await call(core.create_namespaced_config_map, kube.namespace, {"metadata": {"name": "w"}})
    await call(core.patch_namespaced_config_map, "w", kube.namespace, {"data": {"a": "b"}})
    await call(core.delete_namespaced_config_map, "w", kube.namespace)
    assert await watching == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]


async def test_watch_without_version_lists_first(kube: Kube) -> None:
    core = client.CoreV1Api(kube.api)
    await call(core.create_namespaced_config_map, kube.namespace, {"metadata": {"name": "old"}})
    seen = await call(
        collect,
        core.list_namespaced_config_map,
        kube.namespace,
        count=1,
        field_selector="metadata.name=old",  # (a real namespace holds kube-root-ca.crt too)
    )
    assert seen == [("ADDED", "old")]


@pytest.mark.parametrize(
    ("selectors", "expected"),
    [
        pytest.param(
            {"label_selector": "app=x"},
            [("ADDED", "x1"), ("DELETED", "x1"), ("ADDED", "x2")],
            id="labels-enter-and-leave",
        ),
        pytest.param({"field_selector": "metadata.name=x2"}, [("ADDED", "x2")], id="fields"),
    ],
)
async def test_watch_honours_selectors(
    kube: Kube, selectors: dict[str, str], expected: list[tuple[str, str]]
) -> None:
    core = client.CoreV1Api(kube.api)
    rv = (await call(core.list_namespaced_config_map, kube.namespace)).metadata.resource_version
    watching = asyncio.create_task(
        call(
            collect,
            core.list_namespaced_config_map,
            kube.namespace,
            count=len(expected),
            resource_version=rv,
            **selectors,
        )
    )
    await call(core.create_namespaced_config_map, kube.namespace, {"metadata": {"name": "other"}})
    await call(core.create_namespaced_config_map, kube.namespace, {"metadata": {"name": "x1", "labels": {"app": "x"}}})  # fmt: skip
    await call(core.patch_namespaced_config_map, "x1", kube.namespace, {"metadata": {"labels": {"app": "y"}}})  # fmt: skip
    await call(core.create_namespaced_config_map, kube.namespace, {"metadata": {"name": "x2", "labels": {"app": "x"}}})  # fmt: skip
    assert await watching == expected


async def test_watch_timeout_ends_stream(kube: Kube) -> None:
    core = client.CoreV1Api(kube.api)
    rv = (await call(core.list_namespaced_config_map, kube.namespace)).metadata.resource_version
    seen = await call(
        collect,
        core.list_namespaced_config_map,
        kube.namespace,
        count=1,
        timeout=1,
        resource_version=rv,
    )
    assert seen == []


@pytest.fixture
async def short_history(sim_ca: CertificateAuthority) -> AsyncIterator[ClusterServer]:
    name = unique("short")
    server = ClusterServer(name, ClusterStore(name, history_size=3), sim_ca)
    await server.start()
    yield server
    await server.stop()


async def test_watch_too_old_is_410(short_history: ClusterServer) -> None:
    api = make_api_client(short_history)
    core = client.CoreV1Api(api)
    for i in range(6):
        short_history.store.create(CONFIGMAPS, {"metadata": {"name": f"c{i}"}})
    with pytest.raises(ApiException) as err:
        await call(
            collect, core.list_namespaced_config_map, "default", count=1, resource_version="2"
        )
    assert err.value.status == 410
    api.close()


async def test_store_watch_and_subscribe(cluster: ClusterServer) -> None:
    store = cluster.store
    queue = store.subscribe()
    watcher = store.watch(CONFIGMAPS, "default", resource_version=store.resource_version)
    store.create(CONFIGMAPS, {"metadata": {"name": "s"}})
    event = await asyncio.wait_for(watcher.__anext__(), 5)
    assert (event.type, event.object["metadata"]["name"]) == ("ADDED", "s")
    from_queue = await asyncio.wait_for(queue.get(), 5)
    assert from_queue.rt == CONFIGMAPS
    watcher.close()
    store.unsubscribe(queue)
    assert [e async for e in watcher] == []
