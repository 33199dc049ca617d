"""SIMULATOR. The pod network of one simulated cluster: which pod ports listen, connecting to
them, and Services resolved to the pods behind them.

A container listens on every port it declares (`ports[].containerPort`, TCP), while it runs
(`state.running`) in a pod that is Running. What it answers there is `sim/podnet/apps.py`'s
`http` page, unless the pod says more in its annotation `sim.colony.dev/serves` (SIMULATOR only,
written by the sim's charts, `sim/charts.yaml`), a JSON map from port to app:

    sim.colony.dev/serves: '{"8888": "jupyter", "8000": {"app": "openai", "model": "Qwen/Qwen3-1.7B"}}'

A port named there listens too (in the first container) even if no container declares it.

`connect_pod(pod, port)` opens an in-memory connection (`sim/podnet/pipe.py`) to a
listening port and starts the app on its other end; a port nothing listens on raises
`PortRefused` with the dial error a node would see. `Backends.pick(store, namespace, service,
port)` is what kube-proxy does for a ClusterIP: the Service's port, its ready endpoints (Running
pods that match the selector, Ready, not terminating), one of them in turn, and the target port
(a named targetPort is looked up in that pod's container ports).

Called by the port-forward handler of the emulated apiserver and the tenant gateway's data plane.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sim.apiserver.registry import PODS, SERVICES
from sim.apiserver.store import ClusterStore, parse_time
from sim.clusterapi import ClusterReader, cluster_reader
from sim.podnet.apps import APP_KINDS, PodIdentity, ServedApp, serve
from sim.podnet.pipe import PipeEnd, pipe
from sim.pods import pod_serving

log = logging.getLogger(__name__)

SERVES_ANNOTATION = "sim.colony.dev/serves"
CHART_LABEL = "helm.sh/chart"

_serving: set[asyncio.Task[None]] = set()
"""Apps playing on open connections (kept referenced until they end)."""


class PortRefused(Exception):
    """Nothing listens on the port: the message is the dial error (`connect: connection refused`)."""


class NoEndpoints(Exception):
    """A Service with no ready endpoint for the port: the message says why."""


def served_apps(pod: Mapping[str, Any]) -> dict[int, ServedApp]:
    """The apps the pod's annotation names, by port (unknown kinds and bad entries are skipped,
    with a warning: a typo must not silently serve the wrong app)."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(SERVES_ANNOTATION)
    if not raw:
        return {}
    try:
        declared = json.loads(raw)
    except ValueError:
        log.warning("pod %s: %s is not JSON: %r", _name(pod), SERVES_ANNOTATION, raw)
        return {}
    apps: dict[int, ServedApp] = {}
    for port, value in declared.items() if isinstance(declared, dict) else ():
        entry = {"app": value} if isinstance(value, str) else value
        kind = str((entry or {}).get("app") or "") if isinstance(entry, dict) else ""
        if not str(port).isdigit() or kind not in APP_KINDS:
            log.warning("pod %s: %s entry %r: %r is not one of %s", _name(pod), SERVES_ANNOTATION, port, value, APP_KINDS)  # fmt: skip
            continue
        apps[int(port)] = ServedApp(kind=kind, model=str(entry.get("model") or ""))
    return apps


def _name(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


@dataclass(frozen=True)
class Listener:
    """A port a running container of a pod listens on, and what it serves there."""

    container: Mapping[str, Any]
    app: ServedApp


def listener(pod: Mapping[str, Any], port: int) -> Listener | None:
    """What listens on `port` of `pod` right now, or None."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return None
    containers = list((pod.get("spec") or {}).get("containers") or [])
    apps = served_apps(pod)
    owner = next(
        (
            c
            for c in containers
            if any(
                int(p.get("containerPort", 0)) == port and (p.get("protocol") or "TCP") == "TCP"
                for p in c.get("ports") or []
            )
        ),
        containers[0] if port in apps and containers else None,
    )
    if owner is None:
        return None
    running = {
        s.get("name"): "running" in (s.get("state") or {})
        for s in status.get("containerStatuses") or []
    }
    if not running.get(owner.get("name")):
        return None
    return Listener(owner, apps.get(port, ServedApp()))


def listening_ports(pod: Mapping[str, Any]) -> list[int]:
    """Every port something listens on in `pod` right now (declared TCP container ports and the
    ports its `sim.colony.dev/serves` annotation names), ascending."""
    declared = {
        int(port.get("containerPort", 0))
        for container in (pod.get("spec") or {}).get("containers") or []
        for port in container.get("ports") or []
        if (port.get("protocol") or "TCP") == "TCP"
    }
    candidates = (declared | set(served_apps(pod))) - {0}
    return sorted(port for port in candidates if listener(pod, port) is not None)


def identity(pod: Mapping[str, Any], found: Listener, port: int) -> PodIdentity:
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    started = next(
        (
            str(s["state"]["running"].get("startedAt") or "")
            for s in status.get("containerStatuses") or []
            if s.get("name") == found.container.get("name") and "running" in (s.get("state") or {})
        ),
        "",
    )
    return PodIdentity(
        started_at=parse_time(started).timestamp() if started else time.time(),
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        container=str(found.container.get("name", "")),
        image=str(found.container.get("image", "")),
        port=port,
        node=str((pod.get("spec") or {}).get("nodeName") or ""),
        pod_ip=str(status.get("podIP") or ""),
        chart=str((meta.get("labels") or {}).get(CHART_LABEL) or ""),
    )


def connect_pod(pod: Mapping[str, Any], port: int) -> PipeEnd:
    """A connection to `port` of `pod` (the client end; the app plays the other).

    Raises:
        PortRefused: nothing listens there now.
    """
    found = listener(pod, port)
    if found is None:
        ip = (pod.get("status") or {}).get("podIP") or "127.0.0.1"
        raise PortRefused(f"dial tcp {ip}:{port}: connect: connection refused")
    client, server = pipe()
    task = asyncio.create_task(
        serve(server, found.app, identity(pod, found, port)),
        name=f"sim-app-{_name(pod)}:{port}",
    )
    _serving.add(task)
    task.add_done_callback(_serving.discard)
    return client


def _target_port(pod: Mapping[str, Any], target: Any) -> int | None:
    """The container port a Service's targetPort means in this pod (None: the pod lacks the name)."""
    if isinstance(target, int) or (isinstance(target, str) and target.isdigit()):
        return int(target)
    for container in (pod.get("spec") or {}).get("containers") or []:
        for declared in container.get("ports") or []:
            if declared.get("name") == target:
                return int(declared.get("containerPort", 0)) or None
    return None


class Backends:
    """Service -> endpoint choice of one cluster, in turn across ready endpoints (kube-proxy
    picks at random; in turn is as fair and repeatable)."""

    def __init__(self) -> None:
        self._turn: dict[tuple[str, str, int], int] = {}

    def pick(
        self, cluster: ClusterStore | ClusterReader, namespace: str, service: str, port: int
    ) -> tuple[dict[str, Any], int]:
        """(pod, target port) for a connection to Service namespace/service on `port`, as the
        cluster's store (or a real cluster's informer cache) has them now.

        Raises:
            NoEndpoints: no such Service or port, or no ready pod behind it.
        """
        store = cluster_reader(cluster)
        svc = store.try_get(SERVICES, namespace, service)
        if svc is None:
            raise NoEndpoints(f'service "{namespace}/{service}" not found')
        spec = svc.get("spec") or {}
        declared = next((p for p in spec.get("ports") or [] if int(p.get("port", 0)) == port), None)
        if declared is None:
            raise NoEndpoints(f'service "{namespace}/{service}" has no port {port}')
        selector = spec.get("selector") or {}
        if not selector:
            raise NoEndpoints(f'service "{namespace}/{service}" has no selector (no endpoints)')
        target = declared.get("targetPort", declared["port"])
        pods = store.list(PODS, namespace)
        endpoints: list[tuple[dict[str, Any], int]] = []
        for pod in sorted(pods, key=lambda p: str(p["metadata"]["name"])):
            labels = pod["metadata"].get("labels") or {}
            if not pod_serving(pod) or any(labels.get(k) != v for k, v in selector.items()):
                continue
            target_port = _target_port(pod, target)
            if target_port is not None:
                endpoints.append((pod, target_port))
        if not endpoints:
            raise NoEndpoints(f'no healthy upstream: service "{namespace}/{service}" has no ready endpoints')  # fmt: skip
        key = (namespace, service, port)
        turn = self._turn.get(key, 0)
        self._turn[key] = turn + 1
        return endpoints[turn % len(endpoints)]
