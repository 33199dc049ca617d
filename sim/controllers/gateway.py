"""SIMULATOR. A Gateway API implementation's controller for one cluster: it owns the
GatewayClasses whose `spec.controllerName` is `sim.colony.dev/gateway-controller` and writes the
status a conformant implementation writes. No traffic is forwarded anywhere.

Started per child cluster, on its API (`sim.clusterapi`: the emulator's store, or a real API
server with the Gateway API's CRDs). Every reconcile recomputes the whole picture from the watched
objects (classes, gateways, routes, grants: the sim's clusters hold a handful of each) and writes
only what changed. Reasons and
semantics are the Gateway API spec's (gateway.networking.k8s.io v1 types, TCPRoute v1alpha2):

GatewayClass: Accepted=True (reason Accepted), SupportedVersion=True.

Gateway (of an accepted class of ours):
- `status.addresses`: the requested `spec.addresses` of type IPAddress or Hostname (other types:
  Accepted=False, UnsupportedAddress), else one IPAddress from 203.0.113.200 upwards (RFC 5737),
  kept for the Gateway's life;
- listeners: protocols HTTP, HTTPS (TLS mode Terminate) and TCP are supported (others: Accepted
  False, UnsupportedProtocol). Listeners that are not distinct are all Conflicted=True and not
  accepted: a TCP listener sharing its port with any other (ProtocolConflict), HTTP and HTTPS on one
  port (ProtocolConflict), two of one protocol on one port with the same hostname
  (HostnameConflict). HTTPS certificateRefs must name existing `kubernetes.io/tls` Secrets with
  tls.crt and tls.key (ResolvedRefs=False InvalidCertificateRef; in another namespace without a
  ReferenceGrant: RefNotPermitted), else the listener is not Programmed. `allowedRoutes.kinds`
  the listener cannot serve are dropped from supportedKinds (ResolvedRefs=False InvalidRouteKinds).
  `attachedRoutes` counts the routes Accepted on the listener;
- conditions Accepted (Accepted, or ListenersNotValid when some listener is not; False when none
  is) and Programmed (Programmed, or Invalid when no listener is programmed).

HTTPRoute and TCPRoute: one `status.parents[]` entry (controllerName ours) per parentRef naming a
Gateway of ours; refs to Gateways that do not exist or are not ours get none (the spec: the
controller of a parent writes its entry). Entries of other controllers are kept. Accepted:
- NoMatchingParent: no listener has the ref's sectionName / port;
- NotAllowedByListeners: no listener left whose supportedKinds include the route's kind and whose
  allowedRoutes.namespaces (Same, the default; All; Selector on the namespace's labels) admit the
  route's namespace;
- NoMatchingListenerHostname (HTTPRoute): no listener hostname intersects the route's hostnames
  (`*.example.com` matches any name with more labels under example.com, not example.com itself);
- else Accepted, attached to every remaining listener.
ResolvedRefs: backendRefs must be core Services (else InvalidKind) that exist (else
BackendNotFound); in another namespace a ReferenceGrant there must allow it (else
RefNotPermitted).

Several TCPRoutes on one TCP listener: as in the Gateway API conformance suite since v1.6 every one
is Accepted and counted, and only the oldest (creationTimestamp, then namespace/name) receives
connections; the others carry the implementation-specific condition
`sim.colony.dev/ReceivingConnections=False`, reason `OlderRouteOnListener`, naming the route that
wins, so the conflict is visible.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sim.apiserver.registry import (
    GATEWAYCLASSES,
    GATEWAYS,
    HTTPROUTES,
    NAMESPACES,
    REFERENCEGRANTS,
    SECRETS,
    SERVICES,
    TCPROUTES,
    ResourceType,
)
from sim.apiserver.selectors import LabelSelector
from sim.apiserver.store import ClusterStore, WatchEvent, format_time, utc_now
from sim.clusterapi import ClusterApi, ClusterReader, cluster_api
from sim.controllers.workqueue import ReconcileLoop

log = logging.getLogger(__name__)

CONTROLLER_NAME = "sim.colony.dev/gateway-controller"
GROUP = "gateway.networking.k8s.io"
# The first address handed out to Gateways that request none (RFC 5737 documentation range).
ADDRESS_POOL_START = ipaddress.IPv4Address("203.0.113.200")
TRAFFIC_CONDITION = "sim.colony.dev/ReceivingConnections"

_WATCHED = frozenset(
    rt.key
    for rt in (
        GATEWAYCLASSES,
        GATEWAYS,
        HTTPROUTES,
        TCPROUTES,
        REFERENCEGRANTS,
        SERVICES,
        SECRETS,
        NAMESPACES,
    )
)
_ROUTE_KINDS_BY_PROTOCOL = {"HTTP": ("HTTPRoute",), "HTTPS": ("HTTPRoute",), "TCP": ("TCPRoute",)}
_ROUTE_TYPES: tuple[ResourceType, ...] = (HTTPROUTES, TCPROUTES)

Obj = dict[str, Any]
Condition = tuple[str, str, str, str]  # type, status, reason, message


@dataclass
class _Listener:
    spec: Obj
    name: str
    protocol: str
    port: int
    hostname: str
    kinds: list[str]
    conditions: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    attached: int = 0

    @property
    def accepted(self) -> bool:
        return self.conditions["Accepted"][0] == "True"


def _conditions(
    previous: Iterable[Mapping[str, Any]],
    wanted: Iterable[Condition],
    generation: int,
    now: str,
) -> list[Obj]:
    """metav1.Conditions: lastTransitionTime moves only when a condition's status does."""
    before = {c.get("type"): c for c in previous}
    out = []
    for type_, status, reason, message in wanted:
        old = before.get(type_) or {}
        out.append(
            {
                "type": type_,
                "status": status,
                "reason": reason,
                "message": message,
                "observedGeneration": generation,
                "lastTransitionTime": old.get("lastTransitionTime", now)
                if old.get("status") == status
                else now,
            }
        )
    return out


def hostnames_intersect(listener: str, route: str) -> bool:
    """Whether a listener hostname and a route hostname can match one request (empty: any)."""
    if not listener or not route or listener == route:
        return True
    if listener.startswith("*."):
        suffix = listener[1:]
        if route.startswith("*."):
            return route[1:].endswith(suffix) or suffix.endswith(route[1:])
        return route.endswith(suffix)
    if route.startswith("*."):
        return listener.endswith(route[1:])
    return False


def _comparable(status: Mapping[str, Any]) -> Any:
    """A status without transition times, to skip writes that change nothing."""
    if isinstance(status, Mapping):
        return {k: _comparable(v) for k, v in status.items() if k != "lastTransitionTime"}
    if isinstance(status, list):
        return [_comparable(v) for v in status]
    return status


class GatewayController:
    """Writes GatewayClass, Gateway and route status for one cluster (see the module docstring)."""

    def __init__(
        self, cluster: ClusterStore | ClusterApi, controller_name: str = CONTROLLER_NAME
    ) -> None:
        self.api = cluster_api(cluster)
        self.controller_name = controller_name
        self._addresses: dict[str, str] = {}  # gateway uid -> assigned IP
        self._writes: list[tuple[ResourceType, Obj, Obj]] = []
        self._loop: ReconcileLoop[str] = ReconcileLoop(
            self.api, f"gateway[{self.api.name}]", self._keys_for, self._reconcile,
            lambda: ["all"], watched=_WATCHED,
        )  # fmt: skip

    @property
    def store(self) -> ClusterReader:
        """The watched objects as they are now (the cluster's informer cache)."""
        return self.api.cache

    async def run(self) -> None:
        """Reconcile on every change of a watched type until cancelled."""
        await self._loop.run()

    @staticmethod
    def _keys_for(event: WatchEvent) -> list[str]:
        return ["all"] if event.rt.key in _WATCHED else []

    # ------------------------------------------------------------------ reconcile

    async def _reconcile(self, _key: str) -> float | None:
        self._writes = []
        self.reconcile()
        writes, self._writes = self._writes, []
        for rt, obj, status in writes:
            meta = obj["metadata"]
            await self.api.update_status(rt, meta.get("namespace"), meta["name"], status)
        return None

    def reconcile(self) -> None:
        """One full pass: classes, then gateways with their listeners, then routes; the statuses
        that changed are left in `_writes`."""
        now = format_time(utc_now())
        classes = self._reconcile_classes(now)
        gateways: dict[tuple[str, str], tuple[Obj, list[_Listener]]] = {}
        for gateway in self.store.list(GATEWAYS):
            if gateway["spec"].get("gatewayClassName") in classes:
                meta = gateway["metadata"]
                gateways[(meta["namespace"], meta["name"])] = (gateway, self._listeners(gateway))
        routes = [(rt, route) for rt in _ROUTE_TYPES for route in self.store.list(rt)]
        routes.sort(
            key=lambda r: (
                r[1]["metadata"].get("creationTimestamp", ""),
                r[1]["metadata"]["namespace"],
                r[1]["metadata"]["name"],
            )
        )
        tcp_winners: dict[tuple[str, str, str], str] = {}
        for rt, route in routes:
            self._reconcile_route(rt, route, gateways, tcp_winners, now)
        for gateway, listeners in gateways.values():
            self._write_gateway(gateway, listeners, now)

    def _reconcile_classes(self, now: str) -> set[str]:
        ours: set[str] = set()
        for gateway_class in self.store.list(GATEWAYCLASSES):
            if (gateway_class.get("spec") or {}).get("controllerName") != self.controller_name:
                continue
            name = gateway_class["metadata"]["name"]
            ours.add(name)
            status = dict(gateway_class.get("status") or {})
            status["conditions"] = _conditions(
                status.get("conditions") or [],
                [
                    (
                        "Accepted",
                        "True",
                        "Accepted",
                        f"Handled by {self.controller_name} (SIMULATOR)",
                    ),
                    (
                        "SupportedVersion",
                        "True",
                        "SupportedVersion",
                        "Gateway API v1.3 (simulated)",
                    ),
                ],
                gateway_class["metadata"].get("generation", 1),
                now,
            )
            self._write(GATEWAYCLASSES, gateway_class, status)
        return ours

    # ------------------------------------------------------------------ listeners

    def _listeners(self, gateway: Obj) -> list[_Listener]:
        namespace = gateway["metadata"]["namespace"]
        listeners = []
        for spec in gateway["spec"].get("listeners") or []:
            protocol = str(spec.get("protocol", ""))
            listener = _Listener(
                spec=spec,
                name=str(spec.get("name", "")),
                protocol=protocol,
                port=int(spec.get("port") or 0),
                hostname=str(spec.get("hostname") or "") if protocol != "TCP" else "",
                kinds=[],
            )
            supported = _ROUTE_KINDS_BY_PROTOCOL.get(protocol, ())
            requested = (spec.get("allowedRoutes") or {}).get("kinds")
            resolved: tuple[str, str, str] = ("True", "ResolvedRefs", "All references resolved")
            if requested:
                listener.kinds = [
                    str(k.get("kind"))
                    for k in requested
                    if k.get("kind") in supported and (k.get("group") or GROUP) == GROUP
                ]
                invalid = [
                    str(k.get("kind"))
                    for k in requested
                    if str(k.get("kind")) not in listener.kinds
                ]
                if invalid:
                    resolved = (
                        "False",
                        "InvalidRouteKinds",
                        f"Route kinds not supported on a {protocol} listener: {', '.join(invalid)}",
                    )
            else:
                listener.kinds = list(supported)
            if protocol == "HTTPS":
                problem = self._certificate_problem(namespace, spec)
                if problem is not None:
                    resolved = problem
            listener.conditions["ResolvedRefs"] = resolved
            if not supported:
                listener.conditions["Accepted"] = (
                    "False",
                    "UnsupportedProtocol",
                    f"Protocol {protocol} is not supported (HTTP, HTTPS and TCP are)",
                )
            else:
                listener.conditions["Accepted"] = ("True", "Accepted", "Listener is accepted")
            listener.conditions["Conflicted"] = ("False", "NoConflicts", "No conflicts")
            listeners.append(listener)
        self._mark_conflicts(listeners)
        for listener in listeners:
            programmed = listener.accepted and listener.conditions["ResolvedRefs"][0] == "True"
            listener.conditions["Programmed"] = (
                ("True", "Programmed", "Listener is programmed (simulated data plane)")
                if programmed
                else ("False", "Invalid", "Listener is not valid: see its other conditions")
            )
        return listeners

    @staticmethod
    def _mark_conflicts(listeners: list[_Listener]) -> None:
        by_port: dict[int, list[_Listener]] = {}
        for listener in listeners:
            by_port.setdefault(listener.port, []).append(listener)
        for port, group in by_port.items():
            if len(group) < 2:
                continue
            protocols = {listener.protocol for listener in group}
            for listener in group:
                reason = ""
                if "TCP" in protocols or len(protocols) > 1:
                    reason = "ProtocolConflict"
                    message = f"Port {port} is used by listeners of protocols {', '.join(sorted(protocols))}"
                elif any(o is not listener and o.hostname == listener.hostname for o in group):
                    reason = "HostnameConflict"
                    message = f"Another listener on port {port} has hostname {listener.hostname or '(any)'}"
                if reason:
                    listener.conditions["Conflicted"] = ("True", reason, message)
                    listener.conditions["Accepted"] = (
                        "False",
                        reason,
                        f"Listener conflicts with another: {message}",
                    )

    def _certificate_problem(self, namespace: str, spec: Obj) -> tuple[str, str, str] | None:
        tls = spec.get("tls") or {}
        refs = tls.get("certificateRefs") or []
        if (tls.get("mode") or "Terminate") != "Terminate":
            return (
                "False",
                "InvalidCertificateRef",
                "HTTPS listeners terminate TLS (mode Terminate)",
            )
        if not refs:
            return ("False", "InvalidCertificateRef", "An HTTPS listener needs a certificateRef")
        for ref in refs:
            kind, group = ref.get("kind") or "Secret", ref.get("group") or ""
            target_ns = ref.get("namespace") or namespace
            name = ref.get("name", "")
            if (group, kind) != ("", "Secret"):
                return (
                    "False",
                    "InvalidCertificateRef",
                    f"Unsupported certificateRef kind {group}/{kind}",
                )
            if target_ns != namespace and not self._granted(
                namespace, "Gateway", target_ns, "", "Secret", name
            ):
                return (
                    "False",
                    "RefNotPermitted",
                    f"Secret {target_ns}/{name} is in another namespace and no ReferenceGrant allows it",
                )
            secret = self.store.try_get(SECRETS, target_ns, name)
            data = (secret or {}).get("data") or {}
            if secret is None:
                return (
                    "False",
                    "InvalidCertificateRef",
                    f"Secret {target_ns}/{name} does not exist",
                )
            if (
                secret.get("type") != "kubernetes.io/tls"
                or not data.get("tls.crt")
                or not data.get("tls.key")
            ):
                return (
                    "False",
                    "InvalidCertificateRef",
                    f"Secret {target_ns}/{name} is not a kubernetes.io/tls Secret with tls.crt and tls.key",
                )
        return None

    def _granted(
        self, from_ns: str, from_kind: str, to_ns: str, to_group: str, to_kind: str, to_name: str
    ) -> bool:
        """Whether a ReferenceGrant in `to_ns` lets `from_kind`s of `from_ns` refer to the object."""
        for grant in self.store.list(REFERENCEGRANTS, to_ns):
            spec = grant.get("spec") or {}
            sources = any(
                f.get("group", "") == GROUP
                and f.get("kind") == from_kind
                and f.get("namespace") == from_ns
                for f in spec.get("from") or []
            )
            targets = any(
                (t.get("group") or "") == to_group
                and t.get("kind") == to_kind
                and (not t.get("name") or t.get("name") == to_name)
                for t in spec.get("to") or []
            )
            if sources and targets:
                return True
        return False

    # ------------------------------------------------------------------ routes

    def _reconcile_route(
        self,
        rt: ResourceType,
        route: Obj,
        gateways: Mapping[tuple[str, str], tuple[Obj, list[_Listener]]],
        tcp_winners: dict[tuple[str, str, str], str],
        now: str,
    ) -> None:
        meta = route["metadata"]
        namespace = meta["namespace"]
        generation = meta.get("generation", 1)
        spec = route.get("spec") or {}
        resolved = self._backend_problem(rt, namespace, spec) or (
            "True",
            "ResolvedRefs",
            "All backend references resolved",
        )
        previous = [
            p
            for p in (route.get("status") or {}).get("parents") or []
            if p.get("controllerName") == self.controller_name
        ]
        entries = [
            p
            for p in (route.get("status") or {}).get("parents") or []
            if p.get("controllerName") != self.controller_name
        ]
        for ref in spec.get("parentRefs") or []:
            if (ref.get("group") or GROUP) != GROUP or (ref.get("kind") or "Gateway") != "Gateway":
                continue
            key = (ref.get("namespace") or namespace, str(ref.get("name", "")))
            if key not in gateways:
                continue  # not a parent of ours: its controller (if any) writes the entry
            _, listeners = gateways[key]
            accepted, attached = self._accept(rt, route, ref, listeners, key[0])
            wanted: list[Condition] = [("Accepted", *accepted), ("ResolvedRefs", *resolved)]
            if rt is TCPROUTES:
                for listener in attached:
                    winner = tcp_winners.setdefault(
                        (*key, listener.name), f"{namespace}/{meta['name']}"
                    )
                    if winner != f"{namespace}/{meta['name']}":
                        wanted.append(
                            (
                                TRAFFIC_CONDITION,
                                "False",
                                "OlderRouteOnListener",
                                f"Listener {listener.name} of Gateway {key[0]}/{key[1]} forwards its connections to the older TCPRoute {winner} only",
                            )
                        )
            for listener in attached:
                listener.attached += 1
            old: Mapping[str, Any] = next(
                (p for p in previous if _same_ref(p.get("parentRef") or {}, ref, namespace)), {}
            )
            entries.append(
                {
                    "parentRef": _ref_as_written(ref),
                    "controllerName": self.controller_name,
                    "conditions": _conditions(old.get("conditions") or [], wanted, generation, now),
                }
            )
        status = dict(route.get("status") or {})
        status["parents"] = entries
        self._write(rt, route, status)

    def _accept(
        self,
        rt: ResourceType,
        route: Obj,
        ref: Mapping[str, Any],
        listeners: list[_Listener],
        gateway_namespace: str,
    ) -> tuple[tuple[str, str, str], list[_Listener]]:
        """((status, reason, message) of Accepted, the listeners the route attaches to)."""
        section, port = ref.get("sectionName"), ref.get("port")
        candidates = [
            listener
            for listener in listeners
            if (not section or listener.name == section) and (not port or listener.port == port)
        ]
        if not candidates:
            wanted = " and ".join(
                part
                for part in (f"name {section}" if section else "", f"port {port}" if port else "")
                if part
            )
            return ("False", "NoMatchingParent", f"No listener with {wanted}"), []
        namespace = route["metadata"]["namespace"]
        allowed = [
            listener
            for listener in candidates
            if rt.kind in listener.kinds
            and self._namespace_allowed(listener, namespace, gateway_namespace)
        ]
        if not allowed:
            return (
                "False",
                "NotAllowedByListeners",
                f"No listener allows {rt.kind}s from namespace {namespace}"
                + (f" (listener {section})" if section else ""),
            ), []
        hostnames = [str(h) for h in (route.get("spec") or {}).get("hostnames") or []]
        if rt is HTTPROUTES and hostnames:
            allowed = [
                listener
                for listener in allowed
                if any(hostnames_intersect(listener.hostname, h) for h in hostnames)
            ]
            if not allowed:
                return (
                    "False",
                    "NoMatchingListenerHostname",
                    f"No listener hostname matches {', '.join(hostnames)}",
                ), []
        return ("True", "Accepted", "Route is accepted"), allowed

    def _namespace_allowed(
        self, listener: _Listener, namespace: str, gateway_namespace: str
    ) -> bool:
        namespaces = (listener.spec.get("allowedRoutes") or {}).get("namespaces") or {}
        origin = namespaces.get("from") or "Same"
        if origin == "All":
            return True
        if origin == "Selector":
            labels = (
                (self.store.try_get(NAMESPACES, None, namespace) or {}).get("metadata") or {}
            ).get("labels") or {}
            return LabelSelector.from_object(namespaces.get("selector")).matches(labels)
        return namespace == gateway_namespace

    def _backend_problem(
        self, rt: ResourceType, namespace: str, spec: Obj
    ) -> tuple[str, str, str] | None:
        for index, rule in enumerate(spec.get("rules") or []):
            for ref_index, backend in enumerate(rule.get("backendRefs") or []):
                kind, group = backend.get("kind") or "Service", backend.get("group") or ""
                target_ns = backend.get("namespace") or namespace
                name = str(backend.get("name", ""))
                where = f"rule {index} backendRef {ref_index}"
                if (group, kind) != ("", "Service"):
                    return (
                        "False",
                        "InvalidKind",
                        f"{where}: unsupported backend kind {group or 'core'}/{kind}",
                    )
                if target_ns != namespace and not self._granted(
                    namespace, rt.kind, target_ns, "", "Service", name
                ):
                    return (
                        "False",
                        "RefNotPermitted",
                        f"{where}: Service {target_ns}/{name} is in another namespace and no ReferenceGrant allows it",
                    )
                if self.store.try_get(SERVICES, target_ns, name) is None:
                    return (
                        "False",
                        "BackendNotFound",
                        f"{where}: Service {target_ns}/{name} not found",
                    )
        return None

    # ------------------------------------------------------------------ gateways

    def _write_gateway(self, gateway: Obj, listeners: list[_Listener], now: str) -> None:
        meta = gateway["metadata"]
        generation = meta.get("generation", 1)
        status = dict(gateway.get("status") or {})
        addresses, address_problem = self._addresses_for(gateway)
        valid = [listener for listener in listeners if listener.accepted]
        programmed = [x for x in listeners if x.conditions["Programmed"][0] == "True"]
        if address_problem is not None:
            accepted: Condition = ("Accepted", "False", "UnsupportedAddress", address_problem)
        elif not valid:
            accepted = ("Accepted", "False", "ListenersNotValid", "No listener is valid")
        elif len(valid) < len(listeners):
            invalid = ", ".join(x.name for x in listeners if not x.accepted)
            accepted = (
                "Accepted",
                "True",
                "ListenersNotValid",
                f"Listeners not accepted: {invalid}",
            )
        else:
            accepted = ("Accepted", "True", "Accepted", "Gateway is accepted")
        if programmed and address_problem is None:
            ready: Condition = (
                "Programmed",
                "True",
                "Programmed",
                "Gateway is programmed (simulated data plane)",
            )
        else:
            ready = ("Programmed", "False", "Invalid", "No listener can be programmed")
        status["addresses"] = addresses
        status["conditions"] = _conditions(
            status.get("conditions") or [], [accepted, ready], generation, now
        )
        previous = {x.get("name"): x for x in status.get("listeners") or []}
        status["listeners"] = [
            {
                "name": listener.name,
                "supportedKinds": [{"group": GROUP, "kind": kind} for kind in listener.kinds],
                "attachedRoutes": listener.attached,
                "conditions": _conditions(
                    (previous.get(listener.name) or {}).get("conditions") or [],
                    [
                        (t, *listener.conditions[t])
                        for t in ("Accepted", "Conflicted", "Programmed", "ResolvedRefs")
                    ],
                    generation,
                    now,
                ),
            }
            for listener in listeners
        ]
        self._write(GATEWAYS, gateway, status)

    def _addresses_for(self, gateway: Obj) -> tuple[list[Obj], str | None]:
        requested = gateway["spec"].get("addresses") or []
        if requested:
            unsupported = [
                a
                for a in requested
                if (a.get("type") or "IPAddress") not in ("IPAddress", "Hostname")
            ]
            if unsupported:
                kinds = ", ".join(str(a.get("type")) for a in unsupported)
                return [], f"Address types not supported: {kinds} (IPAddress and Hostname are)"
            return [
                {"type": a.get("type") or "IPAddress", "value": a.get("value", "")}
                for a in requested
            ], None
        uid = gateway["metadata"]["uid"]
        if uid not in self._addresses:
            current = [
                a.get("value")
                for a in (gateway.get("status") or {}).get("addresses") or []
                if a.get("type") == "IPAddress"
            ]
            used = set(self._addresses.values())
            if current and current[0] not in used:
                self._addresses[uid] = str(current[0])
            else:
                candidate = ADDRESS_POOL_START
                while str(candidate) in used:
                    candidate += 1
                self._addresses[uid] = str(candidate)
        return [{"type": "IPAddress", "value": self._addresses[uid]}], None

    def _write(self, rt: ResourceType, obj: Obj, status: Obj) -> None:
        if _comparable(obj.get("status") or {}) == _comparable(status):
            return
        self._writes.append((rt, obj, status))


def _ref_as_written(ref: Mapping[str, Any]) -> Obj:
    """The parentRef as the route wrote it, defaults filled in as the CRD's defaulting would."""
    out: Obj = {
        "group": ref.get("group") or GROUP,
        "kind": ref.get("kind") or "Gateway",
        "name": ref.get("name", ""),
    }
    for key in ("namespace", "sectionName", "port"):
        if ref.get(key):
            out[key] = ref[key]
    return out


def _same_ref(a: Mapping[str, Any], b: Mapping[str, Any], namespace: str) -> bool:
    return all(
        (a.get(k) or (namespace if k == "namespace" else None))
        == (b.get(k) or (namespace if k == "namespace" else None))
        for k in ("name", "namespace", "sectionName", "port")
    )
