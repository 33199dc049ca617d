"""The watcher's building blocks against an emulated API server (no Temporal): a resumable watch
stream, the resume ConfigMap and Lease leader election.

Each test starts its own `ClusterServer` (the sim's kube-apiserver emulator) on the test's loop;
the watcher's client is asyncio, so it shares the loop with the server without threads.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from infra.kubeapi import KubeApi, KubeError, collection_path
from sim.apiserver.auth import CertificateAuthority
from sim.apiserver.registry import CONFIGMAPS, LEASES, NODES
from sim.apiserver.server import ClusterServer
from sim.apiserver.store import ClusterStore
from tests.helpers import eventually, unique
from watching.leader import LeaseElector, LeaseTiming, micro_time
from watching.state import STATE_CONFIGMAP, ResumeStore
from watching.streams import SYNCED, StreamEvent, WatchStream

FAST = LeaseTiming(lease_duration=1.0, renew_deadline=0.6, retry_period=0.1)
STEADY = LeaseTiming(lease_duration=8.0, renew_deadline=6.0, retry_period=0.2)
"""For a test whose leader must keep its Lease: a renewal may take seconds on a loaded machine
(with FAST, a renewal late by 0.6 s hands the Lease over, and the test would see two leaders
in turn instead of one)."""
NODES_PATH = collection_path("", "v1", "nodes")


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority()


@contextlib.asynccontextmanager
async def server(ca: CertificateAuthority, history: int = 5000) -> AsyncIterator[ClusterServer]:
    name = unique("api")
    started = ClusterServer(name, ClusterStore(name, history_size=history), ca)
    await started.start()
    try:
        yield started
    finally:
        await started.stop()


def node(name: str, ready: str = "True") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


async def take(events: AsyncIterator[StreamEvent], count: int) -> list[StreamEvent]:
    taken: list[StreamEvent] = []
    async with asyncio.timeout(10):
        async for event in events:
            taken.append(event)
            if len(taken) == count:
                break
    return taken


async def test_lists_then_watches_then_resumes_from_a_version(ca: CertificateAuthority) -> None:
    async with server(ca) as api_server:
        store = api_server.store
        store.create(NODES, node("a"))
        api = KubeApi.from_kubeconfig(api_server.kubeconfig())
        try:
            stream = WatchStream(api, "nodes", NODES_PATH, timeout_seconds=1)
            events = stream.events()
            listed = await take(events, 2)
            assert [(e.type, e.obj.get("metadata", {}).get("name")) for e in listed] == [
                ("ADDED", "a"),
                (SYNCED, None),
            ]
            assert not listed[1].relist
            store.mutate(
                NODES, None, "a", lambda n: n["status"]["conditions"][0].update(status="False")
            )
            (changed,) = await take(events, 1)
            assert changed.type == "MODIFIED"
            assert changed.version == changed.obj["metadata"]["resourceVersion"]
            await events.aclose()

            # Another run resumes from that version: what changed since, and no list.
            store.create(NODES, node("b"))
            store.delete(NODES, None, "a")
            resumed = WatchStream(api, "nodes", NODES_PATH, version=changed.version)
            events = resumed.events()
            got = await take(events, 2)
            await events.aclose()
            assert [(e.type, e.obj["metadata"]["name"]) for e in got] == [
                ("ADDED", "b"),
                ("DELETED", "a"),
            ]
            assert resumed.relists == 0
        finally:
            await api.aclose()


async def test_a_version_too_old_relists_and_reports_what_vanished(
    ca: CertificateAuthority,
) -> None:
    async with server(ca, history=3) as api_server:
        store = api_server.store
        store.create(NODES, node("stays"))
        store.create(NODES, node("goes"))
        api = KubeApi.from_kubeconfig(api_server.kubeconfig())
        try:
            stream = WatchStream(api, "nodes", NODES_PATH, timeout_seconds=1)
            events = stream.events()
            await take(events, 3)  # ADDED, ADDED, SYNCED
            old = stream.version
            await events.aclose()
            # While nobody watches, more happens than the server keeps: the version is gone.
            store.delete(NODES, None, "goes")
            for index in range(5):
                store.create(
                    CONFIGMAPS, {"metadata": {"name": f"noise-{index}"}}, namespace="default"
                )
            stream.version = old
            events = stream.events()
            got = await take(events, 3)
            await events.aclose()
        finally:
            await api.aclose()
    # kube-apiserver answers 410 as an ERROR event in a 200 stream: the stream lists again.
    assert [(e.type, e.obj.get("metadata", {}).get("name")) for e in got] == [
        ("DELETED", "goes"),
        ("ADDED", "stays"),
        (SYNCED, None),
    ]
    assert got[2].relist
    assert stream.relists == 1
    # The vanished object carries the list's version (its final state is unknown).
    assert got[0].obj["metadata"]["resourceVersion"] == got[2].version


async def test_unauthorized_is_the_consumers_to_handle(ca: CertificateAuthority) -> None:
    async with server(ca) as api_server:
        token, _ = api_server.store.tokens.issue("rotated")
        api_server.store.tokens.revoke(token)
        api = KubeApi.from_kubeconfig(api_server.kubeconfig(token))
        try:
            stream = WatchStream(api, "nodes", NODES_PATH, fatal_statuses=(401,))
            with pytest.raises(KubeError) as refused:
                await take(stream.events(), 1)
            assert refused.value.status == 401
        finally:
            await api.aclose()


async def test_resume_state_round_trips_through_a_configmap(ca: CertificateAuthority) -> None:
    async with server(ca) as api_server:
        api = KubeApi.from_kubeconfig(api_server.kubeconfig())
        try:
            state = ResumeStore(api, "default")
            assert await state.load() == {}
            state.set("clusterdeployments", "41")
            state.set("nodes.kcm-system.training", "uid-1/97")
            await state.flush()
            state.set("clusterdeployments", "42")
            state.drop("nodes.kcm-system.training")
            await state.flush()
            stored = api_server.store.get(CONFIGMAPS, "default", STATE_CONFIGMAP)
            assert stored["data"] == {"clusterdeployments": "42"}
            again = ResumeStore(api, "default")
            assert await again.load() == {"clusterdeployments": "42"}
            assert again.get("clusterdeployments") == "42"
        finally:
            await api.aclose()


async def test_one_leader_then_a_handover(ca: CertificateAuthority) -> None:
    async with server(ca) as api_server:
        apis = [KubeApi.from_kubeconfig(api_server.kubeconfig()) for _ in range(2)]
        leading: dict[str, bool] = {}
        most = 0

        def tracker(who: str) -> Any:
            def changed(now: bool) -> None:
                nonlocal most
                leading[who] = now
                most = max(most, sum(leading.values()))

            return changed

        electors = [
            LeaseElector(api, "default", who, timing=STEADY, on_change=tracker(who))
            for api, who in zip(apis, ("a", "b"), strict=True)
        ]
        forever = asyncio.Event()
        first = asyncio.create_task(electors[0].run(forever.wait))
        second: asyncio.Task[None] | None = None
        try:
            await eventually(lambda: _now(leading.get("a", False)), timeout=30)
            second = asyncio.create_task(electors[1].run(forever.wait))
            await asyncio.sleep(STEADY.lease_duration * 2)  # b keeps waiting: a renews
            assert not leading.get("b", False)
            lease = api_server.store.get(LEASES, "default", "colony-watcher")
            assert lease["spec"]["holderIdentity"] == "a"
            assert lease["spec"]["renewTime"].endswith("Z")

            # A clean stop releases the Lease: b takes it at its next try, not after expiry.
            first.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await first
            assert (
                api_server.store.get(LEASES, "default", "colony-watcher")["spec"]["holderIdentity"]
                == ""
            )
            await eventually(lambda: _now(leading.get("b", False)), timeout=30)
            assert most == 1
            lease = api_server.store.get(LEASES, "default", "colony-watcher")
            assert lease["spec"]["holderIdentity"] == "b"
            assert lease["spec"]["leaseTransitions"] == 1
            second.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await second
        finally:
            # A failed assertion must not leave the electors asking the server it stops.
            for task in (first, second):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            for api in apis:
                await api.aclose()


async def test_a_leader_that_cannot_renew_stops_leading_before_its_lease_expires(
    ca: CertificateAuthority,
) -> None:
    async with server(ca) as api_server:
        api = KubeApi.from_kubeconfig(api_server.kubeconfig())
        # When the leader's work stopped, and whether the elector still said it led then.
        stopped: list[tuple[float, bool]] = []
        loop = asyncio.get_running_loop()
        elector = LeaseElector(api, "default", "a", timing=FAST)

        async def lead() -> None:
            try:
                await asyncio.Event().wait()
            finally:
                stopped.append((loop.time(), elector.leading))

        task = asyncio.create_task(elector.run(lead))
        try:
            await eventually(lambda: _now(elector.leading), timeout=5)
            # Someone else holds the Lease now, as a contender that judged it expired writes it
            # (its identity and its own duration, renewed now): the leader's renewals fail from
            # here on, and it cannot take the Lease back during the test.
            api_server.store.mutate(
                LEASES,
                "default",
                "colony-watcher",
                lambda lease: lease["spec"].update(
                    holderIdentity="z",
                    leaseDurationSeconds=3600,
                    renewTime=micro_time(datetime.now(UTC)),
                ),
            )
            lost_at = loop.time()
            await eventually(lambda: _now(bool(stopped)), timeout=5)
            stopped_at, leading_when_stopped = stopped[0]
            assert stopped_at - lost_at < FAST.lease_duration
            assert not leading_when_stopped, "the elector still said it led once its work stopped"
            assert not elector.leading
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await api.aclose()


async def _now(value: Any) -> Any:
    return value


async def test_a_stop_is_not_lost_when_an_attempt_completes_at_the_same_moment() -> None:
    # On Python 3.11, `asyncio.wait_for` cancelled in the loop iteration its call completes in
    # returns the result and drops the cancellation: an elector bounded its attempts that way and
    # went on electing after it was told to stop (a watcher's stop then hung; seen under load).
    answered = asyncio.Event()
    attempts = 0

    async def attempt() -> bool:
        nonlocal attempts
        attempts += 1
        await answered.wait()
        answered.clear()
        return False  # a standby: it keeps looking every retry period

    elector = LeaseElector(None, "default", "a", timing=FAST)  # type: ignore[arg-type]
    elector.try_acquire_or_renew = attempt  # type: ignore[method-assign]
    task = asyncio.create_task(elector.run(asyncio.Event().wait))
    await eventually(lambda: _now(attempts), until=lambda n: n == 1, timeout=5)
    answered.set()  # the attempt completes...
    task.cancel()  # ...in the same iteration as the stop
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=5)
