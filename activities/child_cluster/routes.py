"""Activities on a child cluster's tenant gateway and routes: the Gateway a cluster's workspaces
are reached through, and each workspace's HTTPRoutes and TCPRoutes to it.

`RouteActivities` reaches the child through its kubeconfig Secret
(`activities.child_cluster.clients`). Called by `WorkspaceWorkflow` (access) and
`CapacityLedgerWorkflow` (the gateway's ports) through the declarations in
`workflows.workspace_calls`.

Routes are created with their owner's marks and only ever changed or deleted when they are that
owner's. `await_routes` looks inside the activity, heartbeating, until the gateway's controller has
answered for every route's current spec (`route_state`) or the deadline.
"""

from __future__ import annotations

import asyncio

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from activities.addresses import CustomKind, CustomObjectAddress
from activities.child_cluster.clients import ChildClusterActivities
from activities.declarations import implements, workspace_calls
from activities.errors import kube_error
from activities.heartbeat import report
from activities.kube import call, call_or_none, call_or_raise
from activities.objects import delete_owned, dicts, foreign, seconds_until
from infra.kube import MERGE_PATCH, Obj
from models.activity_api import TENANT_GATEWAY_DOMAIN_LABEL
from models.ownership import Ownership
from models.workspace import GatewayInfo
from models.workspace_api import (
    ApplyRoutesRequest,
    ApplyRoutesResult,
    AwaitRoutesRequest,
    AwaitRoutesResult,
    DeleteRoutesRequest,
    DeleteRoutesResult,
    FindTenantGatewayRequest,
    FindTenantGatewayResult,
    RouteSpec,
    RouteState,
)

GATEWAY_API = "gateway.networking.k8s.io"
ROUTE_KINDS = {
    "HTTPRoute": CustomKind(GATEWAY_API, "v1", "httproutes", "HTTPRoute"),
    "TCPRoute": CustomKind(GATEWAY_API, "v1alpha2", "tcproutes", "TCPRoute"),
}
TENANT_GATEWAY_LABEL = "colony.dev/tenant-gateway"
DOMAIN_ANNOTATION = "colony.dev/domain"
ROUTE_ACCEPTED = "Accepted"
ROUTE_PENDING = "Pending"
"""The Gateway API's reasons: a route accepted, and one no controller has answered for yet."""


def route_state(name: str, route: Obj) -> RouteState:
    """How the gateway's controller answered for a route: accepted (with every backend resolved),
    or the reason and message of the first condition that is not True, and whether the answer is
    for the route's current spec (its conditions' `observedGeneration`)."""
    generation = int((route.get("metadata") or {}).get("generation") or 1)
    parents = dicts((route.get("status") or {}).get("parents"))
    if not parents:
        return RouteState(
            name=name, reason=ROUTE_PENDING, message="waiting for the gateway controller"
        )
    settled = True
    for parent in parents:
        conditions = {c.get("type"): c for c in dicts(parent.get("conditions"))}
        for kind in ("Accepted", "ResolvedRefs"):
            found = conditions.get(kind)
            observed = (found or {}).get("observedGeneration")
            if found is None or (isinstance(observed, int) and observed < generation):
                settled = False
                continue
            if found.get("status") != "True":
                reason = str(found.get("reason") or ROUTE_PENDING)
                message = f"{kind}: {reason}: {found.get('message', '')}".rstrip(": ")
                return RouteState(name=name, settled=True, reason=reason, message=message)
    if not settled:
        return RouteState(
            name=name, reason=ROUTE_PENDING, message="waiting for the gateway controller"
        )
    return RouteState(name=name, accepted=True, settled=True, reason=ROUTE_ACCEPTED)


POLL_FIRST = 1.0
POLL_CAP = 2.0
"""Seconds between looks at routes while waiting for the gateway's controller: 1 s, then every
2 s (free for the workflow's history)."""


class RouteActivities(ChildClusterActivities):
    """The tenant gateway and routes of child clusters, reached through their kubeconfig Secrets."""

    @implements(workspace_calls.FIND_TENANT_GATEWAY)
    async def find_tenant_gateway(
        self, request: FindTenantGatewayRequest
    ) -> FindTenantGatewayResult:
        """The cluster's tenant gateway as it is now: the Gateway labelled
        `colony.dev/tenant-gateway=true` in its child (the first by namespace and name when there
        are several), and, with `cluster_deployment`, the domain the ClusterDeployment's label
        `colony.dev/tenant-gateway-domain` attaches the cluster to."""
        expected = await self._attached_domain(request)
        custom = await self._custom(request.kubeconfig)
        listed = await call_or_none(
            "list Gateways",
            custom.list_cluster_custom_object,
            GATEWAY_API,
            "v1",
            "gateways",
            label_selector=f"{TENANT_GATEWAY_LABEL}=true",
        )
        items = sorted(
            (listed or {}).get("items") or [],
            key=lambda g: (g["metadata"].get("namespace", ""), g["metadata"]["name"]),
        )
        if not items:
            return FindTenantGatewayResult(expected_domain=expected)
        gateway = items[0]
        meta, spec = gateway["metadata"], gateway.get("spec") or {}
        listeners = spec.get("listeners") or []
        domain = str((meta.get("annotations") or {}).get(DOMAIN_ANNOTATION) or "")
        if not domain:
            hostname = next((str(x.get("hostname")) for x in listeners if x.get("hostname")), "")
            domain = hostname.removeprefix("*.")
        https = any(listener.get("protocol") == "HTTPS" for listener in listeners)
        # The listener HTTPRoutes attach to (sectionName "https" or "http"): a URL must name its
        # port when it is not the scheme's own.
        http_port = next(
            (
                int(listener["port"])
                for listener in listeners
                if listener.get("name") == ("https" if https else "http") and listener.get("port")
            ),
            None,
        )
        pool = sorted(
            int(listener["port"]) for listener in listeners if listener.get("protocol") == "TCP"
        )
        routes = await call_or_none(
            "list TCPRoutes",
            custom.list_cluster_custom_object,
            GATEWAY_API,
            "v1alpha2",
            "tcproutes",
        )
        taken: set[int] = set()
        for route in (routes or {}).get("items") or []:
            for parent in (route.get("spec") or {}).get("parentRefs") or []:
                section = str(parent.get("sectionName") or "")
                if parent.get("name") == meta["name"] and section.startswith("tcp-"):
                    with_port = section.removeprefix("tcp-")
                    if with_port.isdigit():
                        taken.add(int(with_port))
        return FindTenantGatewayResult(
            gateway=GatewayInfo(domain=domain, https=https, tcp_ports=pool, http_port=http_port),
            gateway_namespace=str(meta.get("namespace", "")),
            gateway_name=str(meta["name"]),
            gateway_uid=str(meta.get("uid", "")),
            gateway_generation=int(meta.get("generation") or 0),
            taken_ports=sorted(taken),
            expected_domain=expected,
        )

    async def _attached_domain(self, request: FindTenantGatewayRequest) -> str:
        """The domain the ClusterDeployment's label attaches the cluster to ("" when none)."""
        if not request.cluster_deployment:
            return ""
        deployment = await self._cluster_deployment(
            request.kubeconfig.namespace, request.cluster_deployment
        )
        labels = ((deployment or {}).get("metadata") or {}).get("labels") or {}
        return str(labels.get(TENANT_GATEWAY_DOMAIN_LABEL) or "")

    @staticmethod
    def _route_body(request: ApplyRoutesRequest, route: RouteSpec) -> Obj:
        kind = ROUTE_KINDS[route.kind]
        section = (
            route.section_name or "https"
            if route.kind == "HTTPRoute"
            else f"tcp-{route.listener_port}"
        )
        spec: Obj = {
            "parentRefs": [
                {
                    "group": GATEWAY_API,
                    "kind": "Gateway",
                    "name": request.gateway_name,
                    "namespace": request.gateway_namespace,
                    "sectionName": section,
                }
            ],
            "rules": [{"backendRefs": [{"name": route.service, "port": route.port}]}],
        }
        if route.kind == "HTTPRoute":
            spec["hostnames"] = [route.hostname]
        return {
            "apiVersion": f"{kind.group}/{kind.version}",
            "kind": route.kind,
            "metadata": request.owner.mark(
                {"name": route.name, "namespace": request.namespace, "labels": request.labels}
            ),
            "spec": spec,
        }

    @implements(workspace_calls.APPLY_ROUTES)
    async def apply_routes(self, request: ApplyRoutesRequest) -> ApplyRoutesResult:
        """Create the routes; one that exists already is brought to the spec asked for when it is
        the owner's (an earlier attempt's, or routes to a Gateway that moved), and refused when it
        is not."""
        custom = await self._custom(request.kubeconfig)
        result = ApplyRoutesResult()
        for route in request.routes:
            address = self._route(custom, request.namespace, route)
            kind = address.kind
            what = f"create {address}"
            body = self._route_body(request, route)
            try:
                await call(
                    what,
                    custom.create_namespaced_custom_object,
                    kind.group,
                    kind.version,
                    request.namespace,
                    kind.plural,
                    body,
                )
            except ApiException as exc:
                if exc.status != 409:
                    raise kube_error(exc, what) from exc
                existing = await address.read()
                if existing is None:
                    raise kube_error(exc, what) from exc  # deleted in between: the retry creates it
                ownership = request.owner.judge(existing)
                if ownership is not Ownership.OURS:
                    where = f"{request.namespace}/"
                    raise foreign(route.kind, where, route.name, ownership) from exc
                if existing.get("spec") != body["spec"]:
                    await call_or_raise(
                        f"update {address}",
                        custom.patch_namespaced_custom_object,
                        kind.group,
                        kind.version,
                        request.namespace,
                        kind.plural,
                        route.name,
                        {"metadata": {"labels": body["metadata"]["labels"]}, "spec": body["spec"]},
                        _content_type=MERGE_PATCH,
                    )
                    result.updated.append(route.name)
                continue
            result.created.append(route.name)
        return result

    @staticmethod
    def _route(
        custom: client.CustomObjectsApi, namespace: str, route: RouteSpec
    ) -> CustomObjectAddress:
        return ROUTE_KINDS[route.kind].at(custom, namespace, route.name)

    @implements(workspace_calls.AWAIT_ROUTES)
    async def await_routes(self, request: AwaitRoutesRequest) -> AwaitRoutesResult:
        """Wait until the gateway's controller has answered for every route's current spec (or
        the deadline), and report each: accepted, or why not. A route refused for good (its
        Service missing: `BackendNotFound`) is an answer, not a reason to wait on."""
        custom = await self._custom(request.kubeconfig)
        pause = POLL_FIRST
        while True:
            states = []
            for route in request.routes:
                obj = await self._route(custom, request.namespace, route).read()
                if obj is None or not request.owner.owns(obj):
                    states.append(
                        RouteState(
                            name=route.name,
                            settled=True,
                            reason="RouteNotFound",
                            message=f"{route.kind} {request.namespace}/{route.name} not found",
                        )
                    )
                    continue
                states.append(route_state(route.name, obj))
            result = AwaitRoutesResult(routes=states, all_accepted=all(s.accepted for s in states))
            report(result)
            left = seconds_until(request.deadline)
            if all(s.settled for s in states) or left <= 0:
                return result
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, POLL_CAP)

    @implements(workspace_calls.DELETE_ROUTES)
    async def delete_routes(self, request: DeleteRoutesRequest) -> DeleteRoutesResult:
        """Delete the routes that are the owner's; any other of those names is left alone."""
        custom = await self._custom(request.kubeconfig)
        result = DeleteRoutesResult()
        for route in request.routes:
            address = self._route(custom, request.namespace, route)
            deletion = await delete_owned(request.owner.owns, address)
            if deletion.existed and not deletion.foreign:
                result.deleted.append(route.name)
        return result
