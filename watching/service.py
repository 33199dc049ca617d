"""The watcher: streams of the management cluster and of every child cluster, turned into signals.

Run by `watcher.py` (its own process) or by `worker.py` when `COLONY_WATCHER_IN_WORKER=1`; either
way through `Watcher.run`, which elects a leader first (`watching.leader`): only the process holding
the Lease watches and signals, the others wait to take over.

While leading:
- one stream per owned kind on the management cluster (`OWNED`: ClusterDeployments labelled
  `colony.dev/cluster`); any object of theirs carrying Colony's ownership marks
  (`models.ownership`: Colony's, and the organization label agreeing with the
  `colony.dev/workflow-id` annotation) gets that workflow `refresh` signals when it changes, if
  the workflow acts on one (`watching.mapping.takes_refresh`; an annotation alone steers
  nothing);
- for each ClusterDeployment, a stream of its child cluster's Nodes through the kubeconfig Secret
  `<name>-kubeconfig` (waiting for the Secret while the cluster is being created), whose changes
  become `node_event` signals to the ClusterDeployment's workflow, and a stream of its tenant
  Gateways (label `colony.dev/tenant-gateway=true`), whose changes become `gateway_changed`
  signals to the workspaces with a namespace in that child (listed when the Gateway changes);
  both stop when the ClusterDeployment goes;
- every stream resumes from the resourceVersion persisted in `watching.state` (a restart watches
  from there, it does not list), and after a relist (410 Gone) each owner that acts on a
  `refresh` gets one.

A stream handles its events one at a time, in order: a signal is retried (same request id) until
Temporal takes it, and only then is the event's resourceVersion recorded. So a crash re-sends a
few signals at most, which their request ids make harmless, and loses none.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import socket
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import yaml

from infra import metrics
from infra.config import ColonySettings
from infra.kubeapi import KubeApi, KubeError, Obj, collection_path
from watching.leader import LeaseElector, LeaseTiming
from watching.mapping import (
    CLUSTER_LABEL,
    KUBECONFIG_KEY,
    TENANT_GATEWAY_SELECTOR,
    WORKSPACE_LABEL,
    Fingerprints,
    Signal,
    gateway_changed,
    gateway_fingerprint,
    gateway_relisted,
    kubeconfig_secret,
    node_event,
    node_fingerprint,
    object_fingerprint,
    object_refresh,
    owner_workflow_id,
    relist_refresh,
    workspace_owners,
)
from watching.signals import SignalSender
from watching.state import ResumeStore
from watching.streams import SYNCED, StreamEvent, WatchStream, uid_of

log = logging.getLogger("colony.watcher")

SYSTEM_NAMESPACE = "colony-system"
"""Colony's own namespace on the management cluster: the Lease and the state ConfigMap."""
SIGNALLED_KEPT = 1000
SIGNAL_RETRY_FIRST = 0.5
SIGNAL_RETRY_CAP = 10.0
"""Seconds between attempts at a signal Temporal did not take: 0.5 s doubling to 10 s."""
SECRET_RETRY_FIRST = 1.0
SECRET_RETRY_CAP = 15.0
"""Seconds between looks for a child's kubeconfig Secret (k0rdent writes it once the control
plane is up); a change of the ClusterDeployment looks at once."""
NOT_SERVED_RETRY = 300.0
"""Seconds before a child that does not serve Gateways (no Gateway API CRDs) is asked again."""
GATEWAYS = ("gateway.networking.k8s.io", "v1", "gateways")


@dataclass(frozen=True)
class OwnedKind:
    """A kind of management-cluster object Colony creates and the watcher follows."""

    kind: str
    group: str
    version: str
    plural: str
    selector: str
    """Label selector of Colony's objects (a key: objects carrying that label)."""
    children: bool = False
    """True for ClusterDeployments: each has a child cluster whose Nodes are watched."""

    @property
    def stream(self) -> str:
        return self.plural


CLUSTER_DEPLOYMENTS = OwnedKind(
    "ClusterDeployment",
    "k0rdent.mirantis.com",
    "v1beta1",
    "clusterdeployments",
    CLUSTER_LABEL,
    children=True,
)
OWNED = (CLUSTER_DEPLOYMENTS,)
"""ServiceSets are not followed: their owners (workspaces, prerequisites) act on no `refresh`,
and a workspace's own waits read its ServiceSet through a watch of their own."""


@dataclass(frozen=True)
class WatcherConfig:
    """How one watcher process runs (from the environment in `watcher.py`)."""

    identity: str
    system_namespace: str = SYSTEM_NAMESPACE
    watch_namespace: str | None = None
    """Where the owned objects are; None: every namespace (needs a ClusterRole)."""
    lease: LeaseTiming = field(default_factory=LeaseTiming)
    watch_timeout_seconds: int = 300
    owned: tuple[OwnedKind, ...] = OWNED

    @classmethod
    def from_settings(cls, settings: ColonySettings) -> WatcherConfig:
        """From Colony's settings (`COLONY_WATCHER_ID`, `COLONY_SYSTEM_NAMESPACE`,
        `COLONY_WATCH_NAMESPACE`)."""
        return cls(
            identity=settings.watcher_id or default_identity(),
            system_namespace=settings.system_namespace,
            watch_namespace=settings.watch_namespace or None,
        )


def default_identity() -> str:
    """`<hostname>-<pid>`: unique among the replicas of a deployment (each has its hostname)."""
    return f"{socket.gethostname()}-{os.getpid()}"


ChildApiFactory = Callable[[Mapping[str, Any]], KubeApi]


def _child_api(kubeconfig: Mapping[str, Any]) -> KubeApi:
    return KubeApi.from_kubeconfig(kubeconfig)


@dataclass(frozen=True)
class _ChildCluster:
    """A child cluster whose Nodes and Gateways are followed."""

    key: tuple[str, str]
    """Its ClusterDeployment's namespace and name."""
    uid: str
    """Its ClusterDeployment's uid: a cluster of the same name made later is another one."""
    workflow_id: str
    """The cluster's workflow, told of its Nodes."""
    cluster_deployment: Obj
    wake: asyncio.Event
    """Set when the ClusterDeployment changes: its kubeconfig Secret may be there now."""


@dataclass
class _Child:
    """The Node and Gateway streams of one child cluster."""

    cluster: _ChildCluster
    task: asyncio.Task[None]


class Watcher:
    """Streams and signals, for as long as `lead()` runs."""

    def __init__(
        self,
        management: KubeApi,
        signals: SignalSender,
        config: WatcherConfig,
        *,
        child_api: ChildApiFactory = _child_api,
    ) -> None:
        self.management = management
        self._signals = signals
        self.config = config
        self._child_api = child_api
        self._children: dict[tuple[str, str], _Child] = {}
        self._state: ResumeStore | None = None
        self.elector: LeaseElector | None = None
        self.streams: dict[str, WatchStream] = {}
        """Every stream of the current term, by name (tests and stats)."""
        self.signalled: deque[Signal] = deque(maxlen=SIGNALLED_KEPT)
        """The last signals delivered by this process, in order (tests, debugging)."""

    @property
    def relists(self) -> int:
        return sum(stream.relists for stream in self.streams.values())

    # --- Leading ---------------------------------------------------------------------------------

    async def run(self, *, on_leading: Callable[[bool], None] | None = None) -> None:
        """Elect, then `lead()` whenever this process holds the Lease; until cancelled (the Lease
        is released on the way out)."""
        await _retrying("creating Colony's namespace", self.ensure_namespace)

        def changed(leading: bool) -> None:
            metrics.watcher_leading(leading)
            if on_leading is not None:
                on_leading(leading)

        self.elector = LeaseElector(
            self.management,
            self.config.system_namespace,
            self.config.identity,
            timing=self.config.lease,
            on_change=changed,
        )
        await self.elector.run(self.lead)

    async def ensure_namespace(self) -> None:
        """Colony's namespace holds the Lease and the state; create it if it is missing. Read
        first: deploy/rbac.yaml creates it and lets the watcher read it, never create one."""
        namespaces = collection_path("", "v1", "namespaces")
        try:
            await self.management.get(f"{namespaces}/{self.config.system_namespace}")
            return
        except KubeError as exc:
            if exc.status == 403:
                return  # not ours to look at: assumed there (deploy/ creates it)
            if exc.status != 404:
                raise
        try:
            await self.management.create(
                namespaces,
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": self.config.system_namespace},
                },
            )
        except KubeError as exc:
            if exc.status not in (409, 403):
                raise
            # 409: created meanwhile; 403: not ours to create, assumed there.

    async def lead(self) -> None:
        """Watch and signal until cancelled (leadership lost or the process stops)."""
        state = ResumeStore(self.management, self.config.system_namespace)
        await state.load()
        self._state = state
        self.streams = {}
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(state.run())
                for owned in self.config.owned:
                    group.create_task(self._follow(owned))
        finally:
            children = list(self._children.values())
            self._children.clear()
            for child in children:
                child.task.cancel()
            if children:
                await asyncio.wait([c.task for c in children])

    async def _deliver(self, signal: Signal) -> None:
        """Send until Temporal takes it (a missing workflow counts as taken)."""
        pause = SIGNAL_RETRY_FIRST
        while True:
            try:
                delivered = await self._signals.send(signal)
            except (RuntimeError, OSError) as exc:
                # temporalio's RPCError is a RuntimeError: Temporal is down or refuses for now.
                log.warning(
                    "signal %s to %s failed: %s", signal.request_id, signal.workflow_id, exc
                )
                await asyncio.sleep(pause)
                pause = min(pause * 2, SIGNAL_RETRY_CAP)
                continue
            metrics.watcher_signal(signal.name, delivered)
            if delivered:
                self.signalled.append(signal)
            return

    def _acknowledge(self, stream: str, value: str) -> None:
        if self._state is not None:
            self._state.set(stream, value)

    # --- The management cluster's objects ----------------------------------------------------------

    def _path(self, owned: OwnedKind) -> str:
        return collection_path(
            owned.group, owned.version, owned.plural, self.config.watch_namespace
        )

    async def _follow(self, owned: OwnedKind) -> None:
        assert self._state is not None
        stored = self._state.get(owned.stream)
        if stored and owned.children:
            await self._discover_children(owned)
        stream = WatchStream(
            self.management,
            owned.stream,
            self._path(owned),
            label_selector=owned.selector,
            version=stored,
            timeout_seconds=self.config.watch_timeout_seconds,
        )
        self.streams[owned.stream] = stream
        seen = Fingerprints()
        async for event in stream.events():
            await self._on_owned(owned, stream, seen, event)

    async def _discover_children(self, owned: OwnedKind) -> None:
        """Resuming: the child clusters that exist now (their ADDED events are in the past)."""
        pause = SECRET_RETRY_FIRST
        while True:
            try:
                items, _ = await self.management.list(
                    self._path(owned), label_selector=owned.selector
                )
                break
            except (KubeError, httpx.HTTPError) as exc:
                log.warning("listing %s: %s", owned.plural, exc)
                await asyncio.sleep(pause)
                pause = min(pause * 2, SECRET_RETRY_CAP)
        for item in items:
            self._ensure_child(item)

    async def _on_owned(
        self, owned: OwnedKind, stream: WatchStream, seen: Fingerprints, event: StreamEvent
    ) -> None:
        if event.type == SYNCED:
            if event.relist:
                metrics.watcher_relist(owned.stream)
                for obj in stream.known.values():
                    workflow_id = owner_workflow_id(obj)
                    refresh = (
                        relist_refresh(workflow_id, owned.stream, event.version)
                        if workflow_id
                        else None
                    )
                    if refresh is not None:
                        await self._deliver(refresh)
            self._acknowledge(owned.stream, event.version)
            return
        obj = event.obj
        if owned.children:
            if event.type == "DELETED":
                self._stop_child(obj)
            else:
                self._ensure_child(obj)
        if seen.changed(event.type, uid_of(obj), object_fingerprint(obj)):
            signal = object_refresh(owned.kind, obj)
            if signal is not None:
                await self._deliver(signal)
        if event.version:
            self._acknowledge(owned.stream, event.version)

    # --- Child clusters ----------------------------------------------------------------------------

    @staticmethod
    def _child_key(cluster_deployment: Obj) -> tuple[str, str]:
        meta = cluster_deployment.get("metadata") or {}
        return str(meta.get("namespace", "")), str(meta.get("name", ""))

    @staticmethod
    def _child_stream(key: tuple[str, str]) -> str:
        return f"nodes.{key[0]}.{key[1]}"

    def _ensure_child(self, cluster_deployment: Obj) -> None:
        workflow_id = owner_workflow_id(cluster_deployment)
        if workflow_id is None:
            return
        key = self._child_key(cluster_deployment)
        uid = uid_of(cluster_deployment)
        current = self._children.get(key)
        if current is not None and current.cluster.uid == uid:
            current.cluster.wake.set()  # its Secret may be there now
            return
        if current is not None:
            current.task.cancel()  # the same name, another cluster
        cluster = _ChildCluster(key, uid, workflow_id, cluster_deployment, asyncio.Event())
        task = asyncio.create_task(
            self._follow_child(cluster), name=f"watch nodes and gateways of {key[0]}/{key[1]}"
        )
        self._children[key] = _Child(cluster, task)

    def _stop_child(self, cluster_deployment: Obj) -> None:
        key = self._child_key(cluster_deployment)
        uid = uid_of(cluster_deployment)
        child = self._children.pop(key, None)
        if child is not None and child.cluster.uid != uid:
            self._children[key] = child  # a newer cluster of that name: not this delete's
            return
        if child is not None:
            child.task.cancel()
        # Their saved positions go too (also when it went while no watcher ran).
        for stream in (self._child_stream(key), self._gateway_stream(key)):
            if self._state is not None and self._state.get(stream).startswith(f"{uid}/"):
                self._state.drop(stream)

    async def _kubeconfig(self, cluster_deployment: Obj, wake: asyncio.Event) -> dict[str, Any]:
        """The child's kubeconfig, once k0rdent has written its Secret."""
        namespace, name = kubeconfig_secret(cluster_deployment)
        path = f"{collection_path('', 'v1', 'secrets', namespace)}/{name}"
        pause = SECRET_RETRY_FIRST
        while True:
            try:
                secret = await self.management.get(path)
                value = (secret.get("data") or {}).get(KUBECONFIG_KEY)
                if value:
                    loaded = yaml.safe_load(base64.b64decode(value))
                    if isinstance(loaded, dict):
                        return loaded
            except KubeError as exc:
                if exc.status != 404:
                    log.warning("reading Secret %s/%s: %s", namespace, name, exc)
            except (httpx.HTTPError, ValueError, yaml.YAMLError) as exc:
                log.warning("reading Secret %s/%s: %s", namespace, name, exc)
            wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(pause):  # not `wait_for` (see `LeaseElector._attempt`)
                    await wake.wait()
            pause = min(pause * 2, SECRET_RETRY_CAP)

    @staticmethod
    def _gateway_stream(key: tuple[str, str]) -> str:
        return f"gateways.{key[0]}.{key[1]}"

    async def _follow_child(self, child: _ChildCluster) -> None:
        kubeconfig = await self._kubeconfig(child.cluster_deployment, child.wake)
        async with asyncio.TaskGroup() as group:
            group.create_task(self._follow_nodes(child, kubeconfig))
            group.create_task(self._follow_gateways(child, kubeconfig))

    def _resume_version(self, stream_name: str, uid: str) -> str:
        stored = self._state.get(stream_name) if self._state is not None else ""
        stored_uid, _, stored_version = stored.partition("/")
        return stored_version if stored_uid == uid else ""

    async def _keep_following(
        self,
        child: _ChildCluster,
        stream: WatchStream,
        on_event: Callable[[StreamEvent], Awaitable[None]],
    ) -> None:
        """Hand a child stream's events to `on_event`, one at a time, until cancelled.

        The stream's fatal statuses end a pass: 401, the kubeconfig changed (credentials
        rotated), so it is read again and the stream resumes; 404 (Gateways only), no Gateway API
        in this child, so no tenant gateway to follow for now: asked again later.
        """
        self.streams[stream.name] = stream
        while True:
            try:
                async for event in stream.events():
                    await on_event(event)
            except KubeError as exc:
                if exc.status == 404:
                    log.info("%s: Gateways are not served; asking again later", stream.name)
                    await asyncio.sleep(NOT_SERVED_RETRY)
                else:
                    log.info("%s: %s; reading the kubeconfig again", stream.name, exc)
            finally:
                await stream.api.aclose()
            stream.api = self._child_api(
                await self._kubeconfig(child.cluster_deployment, child.wake)
            )

    async def _follow_nodes(self, child: _ChildCluster, kubeconfig: dict[str, Any]) -> None:
        stream_name = self._child_stream(child.key)
        stream = WatchStream(
            self._child_api(kubeconfig),
            stream_name,
            collection_path("", "v1", "nodes"),
            version=self._resume_version(stream_name, child.uid),
            timeout_seconds=self.config.watch_timeout_seconds,
            fatal_statuses=(401,),
        )
        seen = Fingerprints()
        await self._keep_following(child, stream, lambda event: self._on_node(event, child, seen))

    async def _on_node(self, event: StreamEvent, child: _ChildCluster, seen: Fingerprints) -> None:
        stream_name = self._child_stream(child.key)
        if event.type == SYNCED:
            if event.relist:
                metrics.watcher_relist("nodes")
                refresh = relist_refresh(child.workflow_id, stream_name, event.version)
                if refresh is not None:
                    await self._deliver(refresh)
            self._acknowledge(stream_name, f"{child.uid}/{event.version}")
            return
        node = event.obj
        if seen.changed(event.type, uid_of(node), node_fingerprint(node)):
            await self._deliver(node_event(child.key[1], child.workflow_id, event.type, node))
        if event.version:
            self._acknowledge(stream_name, f"{child.uid}/{event.version}")

    async def _follow_gateways(self, child: _ChildCluster, kubeconfig: dict[str, Any]) -> None:
        stream_name = self._gateway_stream(child.key)
        stream = WatchStream(
            self._child_api(kubeconfig),
            stream_name,
            collection_path(*GATEWAYS),
            label_selector=TENANT_GATEWAY_SELECTOR,
            version=self._resume_version(stream_name, child.uid),
            timeout_seconds=self.config.watch_timeout_seconds,
            fatal_statuses=(401, 404),
        )
        seen = Fingerprints()
        await self._keep_following(
            child, stream, lambda event: self._on_gateway(event, child, stream, seen)
        )

    async def _on_gateway(
        self, event: StreamEvent, child: _ChildCluster, stream: WatchStream, seen: Fingerprints
    ) -> None:
        cluster = child.key[1]
        if event.type == SYNCED:
            if event.relist:
                metrics.watcher_relist("gateways")
                for owner in await self._workspaces_of(stream.api, child.cluster_deployment):
                    await self._deliver(
                        gateway_relisted(owner, cluster, stream.name, event.version)
                    )
            self._acknowledge(stream.name, f"{child.uid}/{event.version}")
            return
        gateway = event.obj
        if seen.changed(event.type, uid_of(gateway), gateway_fingerprint(gateway)):
            for owner in await self._workspaces_of(stream.api, child.cluster_deployment):
                await self._deliver(gateway_changed(owner, cluster, event.type, gateway))
        if event.version:
            self._acknowledge(stream.name, f"{child.uid}/{event.version}")

    async def _workspaces_of(self, child: KubeApi, cluster_deployment: Obj) -> list[str]:
        """The workspaces with a namespace in the child (their marks name them), listed now:
        a Gateway changes rarely, a workspace comes and goes more often."""
        pause = SECRET_RETRY_FIRST
        while True:
            try:
                namespaces, _ = await child.list(
                    collection_path("", "v1", "namespaces"), label_selector=WORKSPACE_LABEL
                )
                return workspace_owners(namespaces, cluster_deployment)
            except KubeError as exc:
                if exc.status == 401:
                    raise  # rotated credentials: the stream reads the kubeconfig again
                log.warning("listing the workspace namespaces: %s; retrying", exc)
                await asyncio.sleep(pause)
                pause = min(pause * 2, SECRET_RETRY_CAP)
            except httpx.HTTPError as exc:
                log.warning("listing the workspace namespaces: %s; retrying", exc)
                await asyncio.sleep(pause)
                pause = min(pause * 2, SECRET_RETRY_CAP)


async def _retrying(what: str, step: Callable[[], Awaitable[None]]) -> None:
    pause = SECRET_RETRY_FIRST
    while True:
        try:
            await step()
            return
        except (KubeError, httpx.HTTPError) as exc:
            log.warning("%s: %s; retrying", what, exc)
            await asyncio.sleep(pause)
            pause = min(pause * 2, SECRET_RETRY_CAP)
