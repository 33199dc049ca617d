"""The seam (`sim.clusterapi`) means the same on both sides: the same tests drive the emulator's
store in process (`StoreApi`) and an API server over HTTPS through the official client
(`sim.real.kubeapi.KubeApi`, here against the emulator's own server; `tests/test_real_world.py`
runs it against a real kube-apiserver).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from sim.apiserver.errors import ApiError
from sim.apiserver.registry import CONFIGMAPS, CRDS, NAMESPACES, NODES, PODS
from sim.apiserver.server import ClusterServer
from sim.apiserver.store import WatchEvent
from sim.clusterapi import ClusterApi, StoreApi
from sim.crds import load_colony_crds
from sim.real.informer import Informer
from sim.real.kubeapi import KubeApi
from tests.helpers import eventually, unique

Obj = dict[str, Any]


@pytest.fixture(params=["store", "http"])
async def api(request: pytest.FixtureRequest, cluster: ClusterServer) -> AsyncIterator[ClusterApi]:
    """The cluster's API in process, or over HTTPS through the official client."""
    if request.param == "store":
        yield StoreApi(cluster.store)
        return
    remote = await KubeApi(cluster.store.name, cluster.kubeconfig()).start()
    try:
        yield remote
    finally:
        await remote.close()


async def namespace(api: ClusterApi) -> str:
    name = unique("ns")
    await api.create(NAMESPACES, {"metadata": {"name": name}})
    return name


def config_map(name: str, **labels: str) -> Obj:
    return {"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}


async def test_create_get_list_and_errors(api: ClusterApi) -> None:
    ns = await namespace(api)
    created = await api.create(CONFIGMAPS, config_map("a", app="x"), namespace=ns)
    assert (created["kind"], created["metadata"]["namespace"]) == ("ConfigMap", ns)
    await api.create(CONFIGMAPS, config_map("b", app="y"), namespace=ns)
    assert (await api.get(CONFIGMAPS, ns, "a"))["data"] == {"k": "v"}
    listed = await api.list(CONFIGMAPS, ns, label_selector="app=x")
    assert [(o["kind"], o["metadata"]["name"]) for o in listed] == [("ConfigMap", "a")]
    assert await api.try_get(CONFIGMAPS, ns, "absent") is None
    with pytest.raises(ApiError) as missing:
        await api.get(CONFIGMAPS, ns, "absent")
    assert (missing.value.code, missing.value.reason) == (404, "NotFound")
    with pytest.raises(ApiError) as twice:
        await api.create(CONFIGMAPS, config_map("a"), namespace=ns)
    assert (twice.value.code, twice.value.reason) == (409, "AlreadyExists")
    with pytest.raises(ApiError) as invalid:
        await api.create(CONFIGMAPS, config_map("Not_A_Name"), namespace=ns)
    assert (invalid.value.code, invalid.value.reason) == (422, "Invalid")


async def test_mutate_writes_what_changed_and_nothing_else(api: ClusterApi) -> None:
    ns = await namespace(api)
    await api.create(CONFIGMAPS, config_map("m"), namespace=ns)

    def relabel(obj: Obj) -> None:
        obj["metadata"].setdefault("labels", {})["ready"] = "yes"
        obj["data"]["k"] = "w"

    changed = await api.mutate(CONFIGMAPS, ns, "m", relabel)
    stored = await api.get(CONFIGMAPS, ns, "m")
    assert (stored["metadata"]["labels"]["ready"], stored["data"]["k"]) == ("yes", "w")
    assert changed["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    again = await api.mutate(CONFIGMAPS, ns, "m", relabel)
    assert again["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]


async def test_mutate_and_update_status_write_a_status_subresource(api: ClusterApi) -> None:
    node = unique("node")
    await api.create(
        NODES,
        {
            "metadata": {"name": node},
            "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Booting"}]},
        },
    )

    def ready(obj: Obj) -> None:
        obj["metadata"].setdefault("labels", {})["ready"] = "yes"
        obj["status"]["conditions"][0].update(status="True", reason="KubeletReady")

    await api.mutate(NODES, None, node, ready)
    stored = await api.get(NODES, None, node)
    assert stored["metadata"]["labels"]["ready"] == "yes"
    assert stored["status"]["conditions"][0]["status"] == "True"
    await api.update_status(NODES, None, node, {"capacity": {"pods": "10"}})
    # (A real kube-apiserver also defaults the rest: allocatable from capacity, nodeInfo...)
    assert (await api.get(NODES, None, node))["status"]["capacity"] == {"pods": "10"}
    await api.delete(NODES, None, node)
    assert await api.try_get(NODES, None, node) is None


async def test_a_finalizer_holds_a_delete_until_a_mutate_removes_it(api: ClusterApi) -> None:
    ns = await namespace(api)
    body = config_map("held")
    body["metadata"]["finalizers"] = ["colony.dev/test"]
    await api.create(CONFIGMAPS, body, namespace=ns)
    await api.delete(CONFIGMAPS, ns, "held")
    held = await api.get(CONFIGMAPS, ns, "held")
    assert held["metadata"]["deletionTimestamp"]
    await api.mutate(CONFIGMAPS, ns, "held", lambda o: o["metadata"].update(finalizers=[]))
    assert await api.try_get(CONFIGMAPS, ns, "held") is None


async def next_event(
    queue: asyncio.Queue[WatchEvent], wanted: Callable[[WatchEvent], bool]
) -> WatchEvent:
    async def take() -> WatchEvent:
        while not wanted(event := await queue.get()):
            pass
        return event

    return await asyncio.wait_for(take(), 10)


async def test_subscribe_delivers_changes_and_keeps_the_cache(api: ClusterApi) -> None:
    ns = await namespace(api)
    queue = await api.subscribe([CONFIGMAPS.key])
    try:

        def about(kind: str) -> Callable[[WatchEvent], bool]:
            # (A real cluster adds its own ConfigMap to every namespace: kube-root-ca.crt.)
            return lambda e: (
                e.type == kind
                and e.rt.key == CONFIGMAPS.key
                and e.object["metadata"]["namespace"] == ns
                and e.object["metadata"]["name"] == "w"
            )

        await api.create(CONFIGMAPS, config_map("w", app="x"), namespace=ns)
        added = await next_event(queue, about("ADDED"))
        assert (added.object["kind"], added.object["metadata"]["name"]) == ("ConfigMap", "w")
        await api.mutate(CONFIGMAPS, ns, "w", lambda o: o["data"].update(k="changed"))
        modified = await next_event(queue, about("MODIFIED"))
        assert modified.object["data"] == {"k": "changed"}
        assert (api.cache.try_get(CONFIGMAPS, ns, "w") or {})["data"] == {"k": "changed"}
        assert [o["metadata"]["name"] for o in api.cache.list(CONFIGMAPS, ns, label_selector="app=x")] == ["w"]  # fmt: skip
        await api.delete(CONFIGMAPS, ns, "w")
        await next_event(queue, about("DELETED"))
        assert api.cache.try_get(CONFIGMAPS, ns, "w") is None
    finally:
        api.unsubscribe(queue)


async def test_a_crd_created_later_is_served_and_validated(api: ClusterApi) -> None:
    crd = next(c for c in load_colony_crds() if c["spec"]["names"]["kind"] == "Credential")
    key = (crd["spec"]["group"], crd["spec"]["names"]["plural"])
    if api.registry.try_get(*key) is None:
        await api.create(CRDS, crd)

    async def served() -> Any:
        return api.registry.try_get(*key)

    rt = await eventually(served, until=lambda found: found is not None, what="the CRD served")
    ns = await namespace(api)
    credential = {
        "apiVersion": f"{key[0]}/v1beta1",
        "kind": "Credential",
        "metadata": {"name": "c"},
        "spec": {"identityRef": {"apiVersion": "v1", "kind": "Secret", "name": "s"}},
    }
    created = await api.create(rt, credential, namespace=ns)
    assert "status" not in created, "a status subresource drops status on create"
    await api.update_status(rt, ns, "c", {"ready": True})
    assert (await api.get(rt, ns, "c"))["status"]["ready"] is True
    with pytest.raises(ApiError) as invalid:
        await api.create(rt, {**credential, "metadata": {"name": "d"}, "spec": {}}, namespace=ns)
    assert invalid.value.code == 422


async def test_pods_by_field_selector(api: ClusterApi) -> None:
    ns = await namespace(api)
    node = unique("node")
    for name, host in (("on", node), ("off", "elsewhere")):
        await api.create(
            PODS,
            {
                "metadata": {"name": name},
                "spec": {"nodeName": host, "containers": [{"name": "c", "image": "busybox"}]},
            },
            namespace=ns,
        )
    found = await api.list(PODS, ns, field_selector=f"spec.nodeName={node}")
    assert [p["metadata"]["name"] for p in found] == ["on"]


async def test_a_relist_delivers_what_changed_while_the_watch_was_away() -> None:
    """After a 410 Gone or a broken connection the informer lists again: the cache becomes the
    list, and a controller is told of every difference as it would have been by the watch."""
    events: list[WatchEvent] = []
    informer = Informer(
        None,  # type: ignore[arg-type]  # no requests: only the loop's side is driven here
        lambda: CONFIGMAPS,
        events.append,
        asyncio.get_running_loop(),
        "test",
    )

    def item(name: str, version: str) -> Obj:
        return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": version}}

    informer._reset(CONFIGMAPS, [item("kept", "1"), item("changed", "1"), item("gone", "1")])
    assert informer.synced.is_set()
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [
        ("ADDED", "kept"),
        ("ADDED", "changed"),
        ("ADDED", "gone"),
    ]
    events.clear()
    informer._reset(CONFIGMAPS, [item("kept", "1"), item("changed", "2"), item("new", "3")])
    assert sorted((e.type, e.object["metadata"]["name"]) for e in events) == [
        ("ADDED", "new"),
        ("DELETED", "gone"),
        ("MODIFIED", "changed"),
    ]
    assert sorted(name for _, name in informer.objects) == ["changed", "kept", "new"]
