"""How a workspace's endpoints are reached, as its cluster's tenant gateway is now: the routes to
make, each endpoint's own state, and the RoutesReady condition they add up to (pure, no IO).

`WorkspaceWorkflow` (its access steps) calls these with what `find_tenant_gateway` and
`await_routes` found. Three situations, by the ClusterDeployment's label
`colony.dev/tenant-gateway-domain` (the cluster is attached to a tenant gateway of that domain)
and the Gateway labelled `colony.dev/tenant-gateway=true` in the child (what routes attach to):

- a Gateway: an HTTPRoute per HTTP endpoint (`<workspace>.<domain>` for the first, one label deep)
  and a TCPRoute per SSH/TCP endpoint on its pool port; each endpoint reports how the Gateway's
  controller answered for its route (`Accepted`, or `BackendNotFound` when the chart rendered no
  Service for it, ...). The Gateway decides the hostnames: its domain (annotation
  `colony.dev/domain`, else its wildcard listener's hostname) is used even where the label names
  another, and the condition says they disagree. A Gateway without the label is used too (a
  gateway attached by other means);
- the label, but no Gateway: routing infrastructure not ready (`RoutingInfraNotReady`); the
  endpoints show the URLs they will have and, meanwhile, their `kubectl port-forward` commands;
- neither: every endpoint through `kubectl port-forward`, each on a local port of its own
  (`NoGateway`).

One endpoint's trouble is its own: it never holds the others, nor the workspace's phase.
"""

from __future__ import annotations

from models.workspace import (
    AccessEntry,
    ConditionReason,
    GatewayInfo,
    WorkspaceSpec,
    endpoint_service_name,
    http_hostname,
    plan_access,
)
from models.workspace_api import RouteSpec, RouteState
from models.workspace_class import EndpointProtocol, WorkspaceClassSpec

ROUTE_ACCEPTED = "Accepted"
"""The Gateway API's reason of an accepted route: the endpoint is reachable."""


def routes_for(
    spec: WorkspaceSpec,
    workspace_class: WorkspaceClassSpec,
    gateway: GatewayInfo,
    tcp_ports: dict[str, int],
) -> list[RouteSpec]:
    """The routes that make the endpoints reachable through `gateway`: an HTTPRoute per HTTP
    endpoint, a TCPRoute per SSH/TCP endpoint that holds a pool port (`tcp_ports`)."""
    routes: list[RouteSpec] = []
    primary = True
    for endpoint in workspace_class.access_endpoints:
        service = endpoint_service_name(spec.release_name, endpoint)
        if endpoint.protocol is EndpointProtocol.HTTP:
            routes.append(
                RouteSpec(
                    name=spec.route_name(endpoint.name),
                    kind="HTTPRoute",
                    service=service,
                    port=endpoint.port,
                    hostname=http_hostname(
                        spec.name, endpoint.name, gateway.domain, primary=primary
                    ),
                    section_name="https" if gateway.https else "http",
                )
            )
            primary = False
        elif endpoint.name in tcp_ports:
            routes.append(
                RouteSpec(
                    name=spec.route_name(endpoint.name),
                    kind="TCPRoute",
                    service=service,
                    port=endpoint.port,
                    listener_port=tcp_ports[endpoint.name],
                )
            )
    return routes


def with_route_states(
    spec: WorkspaceSpec, entries: list[AccessEntry], states: list[RouteState]
) -> list[AccessEntry]:
    """The planned entries with what the gateway's controller answered for each one's route:
    ready when accepted, else its reason and message (entries without a route keep theirs)."""
    by_route = {state.name: state for state in states}
    answered: list[AccessEntry] = []
    for entry in entries:
        state = by_route.get(spec.route_name(entry.name))
        if state is None:
            answered.append(entry)
            continue
        answered.append(
            entry.model_copy(
                update={
                    "ready": state.accepted,
                    "reason": ROUTE_ACCEPTED
                    if state.accepted
                    else (state.reason or ConditionReason.ROUTING_IN_PROGRESS.value),
                    "message": "" if state.accepted else state.message,
                }
            )
        )
    return answered


def awaiting_gateway(
    spec: WorkspaceSpec,
    workspace_class: WorkspaceClassSpec,
    domain: str,
    tcp_ports: dict[str, int],
) -> list[AccessEntry]:
    """The entries while the cluster is attached to a tenant gateway of `domain` whose Gateway
    is missing: the URLs they will have, not ready, with the port-forward command that reaches
    each meanwhile."""
    planned = plan_access(
        spec.name, spec.release_name, workspace_class, GatewayInfo(domain=domain), tcp_ports
    )
    forwarded = {
        entry.name: entry
        for entry in plan_access(spec.name, spec.release_name, workspace_class, None)
    }
    return [
        entry.model_copy(
            update={
                "ready": False,
                "reason": ConditionReason.ROUTING_INFRA_NOT_READY.value,
                "message": f"the tenant gateway of *.{domain} is not there yet; meanwhile "
                f"`{forwarded[entry.name].command}`",
                "command": forwarded[entry.name].command,
            }
        )
        for entry in planned
    ]


def gateway_missing_message(cluster: str, domain: str) -> str:
    """RoutesReady's message while the cluster's Gateway is missing."""
    return (
        f"cluster '{cluster}' is attached to the tenant gateway of *.{domain} (its "
        "ClusterDeployment's label colony.dev/tenant-gateway-domain), but its cluster has no "
        "Gateway labelled colony.dev/tenant-gateway=true: the endpoints are routed once it is "
        "there (kubectl port-forward reaches them meanwhile)"
    )


def routes_condition(
    entries: list[AccessEntry], *, expected_domain: str = "", gateway_domain: str = ""
) -> tuple[bool, ConditionReason, str]:
    """RoutesReady from the endpoints routed through a Gateway: True when every one is reachable;
    False with `RoutingError` when an endpoint was refused for a reason that waiting does not
    change (its route's answer, a hostname too long, no pool port), else `RoutingInProgress`.
    The message names each endpoint that is not ready, and a label that disagrees with the
    Gateway's domain.

    Args:
        entries: the endpoints' states (`with_route_states`).
        expected_domain: the ClusterDeployment's label (empty: none).
        gateway_domain: the domain of the Gateway routed through.
    """
    note = ""
    if expected_domain and gateway_domain and expected_domain != gateway_domain:
        note = (
            f" (the ClusterDeployment's label says *.{expected_domain}; the cluster's Gateway "
            f"serves *.{gateway_domain}, which the URLs use)"
        )
    waiting = {ConditionReason.ROUTING_IN_PROGRESS.value, "Pending"}
    not_ready = [entry for entry in entries if not entry.ready]
    if not not_ready:
        count = len(entries)
        return True, ConditionReason.ROUTES_READY, f"all {count} endpoint(s) are routed{note}"
    message = "; ".join(f"{e.name}: {e.reason}: {e.message}".rstrip(": ") for e in not_ready)
    if any(entry.reason not in waiting for entry in not_ready):
        return False, ConditionReason.ROUTING_ERROR, message + note
    return False, ConditionReason.ROUTING_IN_PROGRESS, message + note
