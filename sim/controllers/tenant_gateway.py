"""SIMULATOR. The tenant gateway of a child cluster: the sim's stand-in for the platform's
per-tenant regional gateway, which in production lives outside the child and forwards
`*.<domain>` to it.

Called by the ClusterDeployment controller once a child cluster is up. A ClusterDeployment that
carries the label `colony.dev/tenant-gateway-domain: <domain>` (a label, so selectors work; the
value is a DNS name such as `acme.colony.example`) gets in its child:

- Namespace `colony-gateway`;
- GatewayClass `colony-sim`, controllerName `sim.colony.dev/gateway-controller` (the child's
  simulated Gateway API implementation, `sim.controllers.gateway`);
- Secret `colony-gateway/tenant-tls` (kubernetes.io/tls): a certificate for `*.<domain>` and
  `<domain>` signed by the sim's CA;
- Gateway `colony-gateway/tenant`, label `colony.dev/tenant-gateway: "true"`, annotation
  `colony.dev/domain: <domain>`, `spec.addresses: [{type: IPAddress, value: 127.0.0.1}]` (so its
  status.addresses is where it listens), listeners, all `allowedRoutes.namespaces.from: All`:
    `https`  HTTPS, hostname `*.<domain>`, TLS Terminate with certificateRef `tenant-tls`;
    `http`   HTTP, hostname `*.<domain>`;
    `tcp-<port>` TCP for every port of the pool: as many as 30000-30009 holds unless the
    ClusterDeployment's annotation `colony.dev/tenant-gateway-tcp-ports: "<first>-<last>"` says
    otherwise.

The listeners' ports are real: the child's data plane (`sim.controllers.gateway_dataplane`) listens
on them on 127.0.0.1 and routes what arrives to the workloads, so `https://<ws>.<domain>:<port>`
and `ssh://<domain>:<port>` can be opened (`curl --cacert <sim CA> --resolve
<ws>.<domain>:<port>:127.0.0.1 ...`). The pool's own ports are taken when free, HTTPS and HTTP get
ports the OS picks (443 and 80 need privileges), and so does any port already in use: several
simulators share a machine. A Gateway that exists keeps its ports while it lives, and a world
restarted with its state takes them again when they are free.

The objects follow the label: a changed domain or pool updates them, a removed label removes them
and closes the listeners (they carry `app.kubernetes.io/managed-by: colony-sim`, and only those
are removed).
"""

from __future__ import annotations

import base64
import contextlib
import re
from collections.abc import Callable, Mapping
from typing import Any

from sim.apiserver.errors import ApiError
from sim.apiserver.registry import GATEWAYCLASSES, GATEWAYS, NAMESPACES, SECRETS, ResourceType
from sim.clusterapi import ClusterApi
from sim.controllers.gateway import CONTROLLER_NAME
from sim.controllers.gateway_dataplane import ListenerPorts, TenantGatewayDataPlane

DOMAIN_LABEL = "colony.dev/tenant-gateway-domain"
TCP_PORTS_ANNOTATION = "colony.dev/tenant-gateway-tcp-ports"
GATEWAY_LABEL = "colony.dev/tenant-gateway"
DOMAIN_ANNOTATION = "colony.dev/domain"
NAMESPACE = "colony-gateway"
GATEWAY_CLASS = "colony-sim"
GATEWAY = "tenant"
TLS_SECRET = "tenant-tls"
DEFAULT_TCP_PORTS = (30000, 30009)
MANAGED = {"app.kubernetes.io/managed-by": "colony-sim"}
# Listener ports must be valid and a pool must fit the Gateway's 64 listeners with https and http.
MAX_TCP_LISTENERS = 62

CertIssuer = Callable[[tuple[str, ...]], tuple[bytes, bytes]]
_RANGE = re.compile(r"^\s*(\d{1,5})\s*-\s*(\d{1,5})\s*$")


def tcp_ports(annotation: str | None) -> tuple[tuple[int, int], str | None]:
    """The pool (first, last) an annotation asks for, and a problem when it cannot be used (then
    the default pool)."""
    if not annotation:
        return DEFAULT_TCP_PORTS, None
    match = _RANGE.match(annotation)
    if match is None:
        return DEFAULT_TCP_PORTS, f'{TCP_PORTS_ANNOTATION} must be "<first>-<last>", not "{annotation}"'  # fmt: skip
    first, last = int(match.group(1)), int(match.group(2))
    if not 1 <= first <= last <= 65535 or last - first + 1 > MAX_TCP_LISTENERS:
        return DEFAULT_TCP_PORTS, (
            f"{TCP_PORTS_ANNOTATION}: {annotation} is not a range of 1 to {MAX_TCP_LISTENERS} "
            "ports within 1-65535"
        )
    return (first, last), None


def desired_gateway(domain: str, ports: ListenerPorts, address: str) -> dict[str, Any]:
    """The tenant Gateway for `domain`, listening on `ports` at `address`."""
    everyone = {"namespaces": {"from": "All"}}
    listeners: list[dict[str, Any]] = [
        {
            "name": "https", "protocol": "HTTPS", "port": ports.https, "hostname": f"*.{domain}",
            "tls": {"mode": "Terminate", "certificateRefs": [{"group": "", "kind": "Secret", "name": TLS_SECRET}]},
            "allowedRoutes": everyone,
        },
        {"name": "http", "protocol": "HTTP", "port": ports.http, "hostname": f"*.{domain}", "allowedRoutes": everyone},
    ]  # fmt: skip
    for port in ports.tcp:
        listeners.append(
            {"name": f"tcp-{port}", "protocol": "TCP", "port": port, "allowedRoutes": everyone}
        )
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {
            "name": GATEWAY,
            "namespace": NAMESPACE,
            "labels": {GATEWAY_LABEL: "true", **MANAGED},
            "annotations": {DOMAIN_ANNOTATION: domain},
        },
        "spec": {
            "gatewayClassName": GATEWAY_CLASS,
            "addresses": [{"type": "IPAddress", "value": address}],
            "listeners": listeners,
        },
    }


async def ensure_tenant_gateway(
    api: ClusterApi,
    cluster_deployment: Mapping[str, Any],
    issue_cert: CertIssuer | None,
    data_plane: TenantGatewayDataPlane,
) -> str | None:
    """Make the child's tenant gateway match the ClusterDeployment's label and annotation, its
    data plane listening on the Gateway's ports.

    Returns a problem worth a Warning event (an unusable port annotation), else None.
    """
    meta = cluster_deployment.get("metadata") or {}
    domain = str((meta.get("labels") or {}).get(DOMAIN_LABEL) or "")
    if not domain:
        await _remove(api)
        await data_plane.stop()
        return None
    pool, problem = tcp_ports((meta.get("annotations") or {}).get(TCP_PORTS_ANNOTATION))
    if await api.try_get(NAMESPACES, None, NAMESPACE) is None:
        await api.create(NAMESPACES, {"metadata": {"name": NAMESPACE, "labels": dict(MANAGED)}})
    await _apply(
        api, GATEWAYCLASSES, None,
        {
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": GATEWAY_CLASS, "labels": dict(MANAGED)},
            "spec": {
                "controllerName": CONTROLLER_NAME,
                # At most 64 bytes (the Gateway API's CRD says so).
                "description": "SIMULATOR: the platform's per-tenant regional gateway",
            },
        },
    )  # fmt: skip
    secret = await api.try_get(SECRETS, NAMESPACE, TLS_SECRET)
    issued_for = ((secret or {}).get("metadata") or {}).get("annotations", {}).get(DOMAIN_ANNOTATION)  # fmt: skip
    if secret is None or issued_for != domain:
        cert, key = issue_cert((f"*.{domain}", domain)) if issue_cert else (b"SIMULATOR", b"SIMULATOR")  # fmt: skip
        await _apply(
            api, SECRETS, NAMESPACE,
            {
                "metadata": {
                    "name": TLS_SECRET, "namespace": NAMESPACE, "labels": dict(MANAGED),
                    "annotations": {DOMAIN_ANNOTATION: domain},
                },
                "type": "kubernetes.io/tls",
                "data": {"tls.crt": base64.b64encode(cert).decode(), "tls.key": base64.b64encode(key).decode()},
            },
        )  # fmt: skip
    ports = await data_plane.listen(
        pool[1] - pool[0] + 1, keep=await _declared_ports(api) or _pool_wish(pool)
    )
    await _apply(api, GATEWAYS, NAMESPACE, desired_gateway(domain, ports, data_plane.host))
    return problem


async def tenant_gateway_pending(api: ClusterApi, cluster_deployment: Mapping[str, Any]) -> str | None:  # fmt: skip
    """What the ClusterDeployment still waits for of its tenant gateway (its Gateway Programmed,
    for the generation asked for: its addresses are known), None when nothing: a cluster attached
    to the gateway is ready once its Gateway is."""
    labels = (cluster_deployment.get("metadata") or {}).get("labels") or {}
    if not labels.get(DOMAIN_LABEL):
        return None
    gateway = await api.try_get(GATEWAYS, NAMESPACE, GATEWAY)
    if gateway is None:
        return f"TenantGateway: Gateway {NAMESPACE}/{GATEWAY} is being created"
    generation = (gateway.get("metadata") or {}).get("generation")
    programmed = any(
        c.get("type") == "Programmed"
        and c.get("status") == "True"
        and c.get("observedGeneration") == generation
        for c in (gateway.get("status") or {}).get("conditions") or []
    )
    return (
        None
        if programmed
        else f"TenantGateway: Gateway {NAMESPACE}/{GATEWAY} is not programmed yet"
    )


async def _declared_ports(api: ClusterApi) -> ListenerPorts | None:
    """The ports the tenant Gateway declares now (a world restarted with its state has them)."""
    gateway = await api.try_get(GATEWAYS, NAMESPACE, GATEWAY)
    listeners = ((gateway or {}).get("spec") or {}).get("listeners") or []
    by_name = {str(x.get("name")): int(x.get("port") or 0) for x in listeners}
    if "https" not in by_name or "http" not in by_name:
        return None
    tcp = tuple(int(x.get("port") or 0) for x in listeners if x.get("protocol") == "TCP")
    return ListenerPorts(by_name["https"], by_name["http"], tcp)


def _pool_wish(pool: tuple[int, int]) -> ListenerPorts:
    """The pool's own ports for the TCP listeners; the OS's choice for HTTPS and HTTP."""
    return ListenerPorts(0, 0, tuple(range(pool[0], pool[1] + 1)))


async def _apply(api: ClusterApi, rt: ResourceType, namespace: str | None, desired: dict[str, Any]) -> None:  # fmt: skip
    """Create the object, or bring its labels, annotations, spec (and data) to `desired`."""
    name = desired["metadata"]["name"]
    current = await api.try_get(rt, namespace, name)
    if current is None:
        await api.create(rt, desired)
        return

    def update(obj: dict[str, Any]) -> None:
        for key in ("labels", "annotations"):
            if key in desired["metadata"]:
                obj["metadata"][key] = {**(obj["metadata"].get(key) or {}), **desired["metadata"][key]}  # fmt: skip
        for key in ("spec", "data", "type"):
            if key in desired:
                obj[key] = desired[key]

    await api.mutate(rt, namespace, name, update)


async def _remove(api: ClusterApi) -> None:
    gateway_class = await api.try_get(GATEWAYCLASSES, None, GATEWAY_CLASS)
    namespace = await api.try_get(NAMESPACES, None, NAMESPACE)
    for obj, rt in ((gateway_class, GATEWAYCLASSES), (namespace, NAMESPACES)):
        labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
        if obj is not None and all(labels.get(k) == v for k, v in MANAGED.items()):
            with contextlib.suppress(ApiError):
                await api.delete(rt, None, obj["metadata"]["name"])
