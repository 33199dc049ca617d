"""A running workspace's access (step 6 of `workflows/workspace/workflow.py`'s plan, RoutesReady):
routes follow the cluster's tenant gateway (the decisions are pure, `models.workspace_access`).

Through the cluster's tenant Gateway: an HTTPRoute per HTTP endpoint and a TCPRoute on a pool port
for TCP/SSH ones (pool ports from the cluster's ledger: one writer per cluster), each endpoint
reporting how the Gateway's controller answered for its route (one refused, its Service missing,
holds neither the others nor the phase). A ClusterDeployment attached to a tenant gateway whose
Gateway is missing: RoutingInfraNotReady, until it is there. No tenant gateway: each endpoint's
`kubectl port-forward`, on a local port of its own.

Between operations (the workflow's chore), a running workspace routes again when the gateway may
have changed: told by the watcher (`gateway_changed`), or by itself (`ROUTES_RETRY` while its
routes are in progress or its Gateway is missing, `ROUTES_FALLBACK` otherwise). A look that finds
nothing new costs one activity. An endpoint whose Service is missing (`BackendNotFound`: the
chart renders it late, or not at all) is looked at again with a backoff, `ROUTES_BACKEND_RETRY`
doubled after each look that still misses it up to `ROUTES_FALLBACK`: routed seconds after a
late Service appears, at a bounded cost when it never does.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from workflows.kit.engine import is_failure, reason_of
from workflows.workspace.admission import tell_ledger
from workflows.workspace.context import WorkspaceContext
from workflows.workspace_calls import (
    APPLY_ROUTES,
    AWAIT_ROUTES,
    DELETE_ROUTES,
    FIND_TENANT_GATEWAY,
    SIGNAL_WITH_START,
)

with workflow.unsafe.imports_passed_through():
    from models.workspace import (
        ConditionReason,
        ConditionStatus,
        ConditionType,
        GatewayInfo,
        RouteRecord,
        WorkspacePhase,
        condition,
        plan_access,
        workspace_namespace,
    )
    from models.workspace_access import (
        awaiting_gateway,
        gateway_missing_message,
        routes_condition,
        routes_for,
        with_route_states,
    )
    from models.workspace_api import (
        ApplyRoutesRequest,
        AwaitRoutesRequest,
        CapacityLedgerInput,
        CapacityMessage,
        CapacityMessageKind,
        DeleteRoutesRequest,
        FindTenantGatewayRequest,
        FindTenantGatewayResult,
        RouteSpec,
        SignalWithStartRequest,
        workspace_labels,
    )
    from models.workspace_class import EndpointProtocol, WorkspaceClassSpec
    from workflows.capacity import CAPACITY

ROUTES_SETTLE = timedelta(minutes=1)
"""How long the access step waits for the gateway's controller to answer for new routes; past
it, the endpoints not answered for are `RoutingInProgress` and the next look sees the answer."""
ROUTES_RETRY = timedelta(minutes=1)
"""A running workspace whose routes are in progress, or whose Gateway is missing, looks at its
gateway this often by itself."""
ROUTES_FALLBACK = timedelta(minutes=10)
"""... and any other running one this often: the watcher's `gateway_changed` tells it within a
second; this only bounds how stale routes get without one (a look that finds nothing new is one
activity). An endpoint refused for good (its chart renders no Service) waits for a change, not for
time, so it is looked at no more often."""
ROUTES_PENDING = {ConditionReason.ROUTING_IN_PROGRESS, ConditionReason.ROUTING_INFRA_NOT_READY}
"""RoutesReady's reasons that time may change: looked at again after `ROUTES_RETRY`."""
BACKEND_NOT_FOUND = "BackendNotFound"
"""The Gateway API's reason of a route whose Service does not exist (yet)."""
ROUTES_BACKEND_RETRY = timedelta(seconds=5)
"""The first look again after routing found an endpoint's Service missing; each look that still
misses it doubles the wait, up to `ROUTES_FALLBACK` (7 looks in the first ten minutes, then the
fallback's one per ten minutes). As the exalsius operator requeues while routes are not ready
(controller-runtime's exponential backoff): a Service rendered late (a hook, a controller the
chart installs) appears within seconds, and one that appears after t is routed by about 2t."""
BACKEND_BACKOFF_PATCH = "routes-backend-backoff"
"""`workflow.patched` id of the backoff: a history recorded before it waits `ROUTES_FALLBACK`."""


async def route(
    ws: WorkspaceContext,
    workspace_class: WorkspaceClassSpec,
    found: FindTenantGatewayResult | None = None,
) -> None:
    """Make the endpoints reachable as the cluster's gateway is now (`found`, or looked at
    now). Routing never fails the workspace: what goes wrong is the endpoints' state and
    RoutesReady's (`RoutingError`), and the next look tries again."""
    try:
        found = found or await _find_gateway(ws)
        ws.state.gateway_fingerprint = found.fingerprint()
        if found.gateway is not None:
            await _route_through_gateway(ws, workspace_class, found, found.gateway)
        elif found.expected_domain:
            _await_gateway(ws, workspace_class, found.expected_domain)
        else:
            await _route_by_port_forward(ws, workspace_class)
    except Exception as error:
        if not is_failure(error):
            raise  # an interruption (a delete) or a bug
        message = f"routes could not be made: {reason_of(error)}"
        ws.state.access = [
            entry.model_copy(
                update={
                    "ready": False,
                    "reason": ConditionReason.ROUTING_ERROR.value,
                    "message": message,
                }
            )
            for entry in ws.state.access
            or plan_access(ws.spec.name, ws.spec.release_name, workspace_class, None)
        ]
        ws.condition(ConditionType.ROUTES_READY, False, ConditionReason.ROUTING_ERROR, message)


async def _find_gateway(ws: WorkspaceContext) -> FindTenantGatewayResult:
    return await FIND_TENANT_GATEWAY(
        FindTenantGatewayRequest(
            kubeconfig=ws.kubeconfig(), cluster_deployment=ws.spec.cluster_deployment
        )
    )


async def _route_through_gateway(
    ws: WorkspaceContext,
    workspace_class: WorkspaceClassSpec,
    found: FindTenantGatewayResult,
    gateway: GatewayInfo,
) -> None:
    """An HTTPRoute per HTTP endpoint and a TCPRoute per SSH/TCP one on its pool port, each
    endpoint reported as the Gateway's controller (of `gateway`, as `found`) answered for its
    route."""
    spec, state = ws.spec, ws.state
    await _allocate_ports(ws, workspace_class, gateway, found.taken_ports)
    routes = routes_for(spec, workspace_class, gateway, state.tcp_ports)
    await remove_routes(ws, keep={route.name for route in routes})
    entries = plan_access(spec.name, spec.release_name, workspace_class, gateway, state.tcp_ports)
    if routes:
        namespace = workspace_namespace(spec.name)
        await APPLY_ROUTES(
            ApplyRoutesRequest(
                kubeconfig=ws.kubeconfig(),
                namespace=namespace,
                gateway_namespace=found.gateway_namespace,
                gateway_name=found.gateway_name,
                routes=routes,
                owner=ws.owner,
                labels=workspace_labels(spec.name),
            )
        )
        state.routes = [RouteRecord(name=r.name, kind=r.kind) for r in routes]
        seen = await AWAIT_ROUTES(
            AwaitRoutesRequest(
                kubeconfig=ws.kubeconfig(),
                namespace=namespace,
                routes=routes,
                owner=ws.owner,
                deadline=workflow.now() + ROUTES_SETTLE,
            ),
            wait=ROUTES_SETTLE,
        )
        entries = with_route_states(spec, entries, seen.routes)
    state.access = entries
    missing = any(entry.reason == BACKEND_NOT_FOUND for entry in entries)
    state.backend_looks = state.backend_looks + 1 if missing else 0
    ok, reason, message = routes_condition(
        entries, expected_domain=found.expected_domain, gateway_domain=gateway.domain
    )
    ws.condition(ConditionType.ROUTES_READY, ok, reason, message)


def _await_gateway(ws: WorkspaceContext, workspace_class: WorkspaceClassSpec, domain: str) -> None:
    """The cluster is attached to a tenant gateway whose Gateway is missing: the routes made
    stay (they attach again when it is back), the endpoints wait for it."""
    ws.state.access = awaiting_gateway(ws.spec, workspace_class, domain, ws.state.tcp_ports)
    ws.condition(
        ConditionType.ROUTES_READY,
        False,
        ConditionReason.ROUTING_INFRA_NOT_READY,
        gateway_missing_message(ws.spec.cluster, domain),
    )


async def _route_by_port_forward(ws: WorkspaceContext, workspace_class: WorkspaceClassSpec) -> None:
    """No tenant gateway: no routes (those of a gateway that went are removed, its pool
    ports given back), every endpoint through `kubectl port-forward`."""
    await remove_routes(ws)
    await release_ports(ws)
    ws.state.access = plan_access(ws.spec.name, ws.spec.release_name, workspace_class, None)
    ws.condition(
        ConditionType.ROUTES_READY,
        True,
        ConditionReason.NO_GATEWAY,
        "no tenant gateway: reach the endpoints with kubectl port-forward",
    )


async def look_at_routes(ws: WorkspaceContext) -> None:
    """Between operations, when the gateway may have changed: route again if it did (or if
    some endpoint is not reachable yet); a look that finds nothing new costs one activity."""
    state = ws.state
    state.routes_look_due = False
    if state.phase is not WorkspacePhase.RUNNING or state.class_spec is None:
        return
    try:
        found = await _find_gateway(ws)
    except Exception as error:
        if not is_failure(error):
            raise
        workflow.logger.warning("looking at the tenant gateway failed: %s", reason_of(error))
        return
    routes_ready = condition(state.conditions, ConditionType.ROUTES_READY)
    if (
        found.fingerprint() == state.gateway_fingerprint
        and routes_ready is not None
        and routes_ready.status is ConditionStatus.TRUE
    ):
        return
    await route(ws, state.class_spec, found)


def routes_look_interval(ws: WorkspaceContext) -> timedelta | None:
    """How long a running workspace waits for a `gateway_changed` before it looks anyway:
    `ROUTES_RETRY` while routes are in progress or the Gateway is missing, a backoff from
    `ROUTES_BACKEND_RETRY` while an endpoint's Service is missing, `ROUTES_FALLBACK`
    otherwise."""
    if ws.state.phase is not WorkspacePhase.RUNNING:
        return None
    routes_ready = condition(ws.state.conditions, ConditionType.ROUTES_READY)
    if routes_ready is not None and routes_ready.reason in ROUTES_PENDING:
        return ROUTES_RETRY
    looks = ws.state.backend_looks
    if looks and workflow.patched(BACKEND_BACKOFF_PATCH):
        # The exponent is capped: 2**looks alone would grow without end.
        backoff: timedelta = ROUTES_BACKEND_RETRY * 2 ** min(looks - 1, 16)
        return min(backoff, ROUTES_FALLBACK)
    return ROUTES_FALLBACK


async def _allocate_ports(
    ws: WorkspaceContext,
    workspace_class: WorkspaceClassSpec,
    gateway: GatewayInfo,
    taken: list[int],
) -> None:
    """Pool ports for the TCP/SSH endpoints, from the cluster's ledger: one writer per cluster,
    so two workspaces deployed at once never get the same listener."""
    endpoints = [
        e.name for e in workspace_class.access_endpoints if e.protocol is not EndpointProtocol.HTTP
    ]
    state = ws.state
    if not endpoints or not gateway.tcp_ports:
        return
    if set(endpoints) <= set(state.tcp_ports) and set(state.tcp_ports.values()) <= set(
        gateway.tcp_ports
    ):
        return  # held already, and still in the pool: a look again asks the ledger nothing
    request_id = _ports_message_id(ws, "ports")
    ours = set(state.tcp_ports.values())
    await SIGNAL_WITH_START(
        SignalWithStartRequest(
            workflow=CAPACITY.workflow_type,
            workflow_id=CAPACITY.workflow_id(ws.spec.cluster_deployment),
            input=CapacityLedgerInput(cluster=ws.spec.cluster_deployment).model_dump(mode="json"),
            signal=CAPACITY.capacity.name,
            payload=CapacityMessage(
                request_id=request_id,
                kind=CapacityMessageKind.PORTS,
                holder=ws.spec.name,
                endpoints=endpoints,
                pool=gateway.tcp_ports,
                taken=[port for port in taken if port not in ours],
                reply_to=workflow.info().workflow_id,
            ).model_dump(mode="json"),
            static_summary=f"GPU ledger of cluster {ws.spec.cluster}",
        )
    )
    await workflow.wait_condition(lambda: request_id in ws.ports_answers)
    state.tcp_ports = dict(ws.ports_answers.pop(request_id).ports)


async def release_ports(ws: WorkspaceContext) -> None:
    if not ws.state.tcp_ports:
        return
    await tell_ledger(
        ws,
        CapacityMessage(
            request_id=_ports_message_id(ws, "release-ports"),
            kind=CapacityMessageKind.RELEASE_PORTS,
            holder=ws.spec.name,
        ),
    )
    ws.state.tcp_ports = {}


def _ports_message_id(ws: WorkspaceContext, kind: str) -> str:
    """A new id for each message about pool ports (a look at the routes may send several in
    one operation; the ledger acts on an id once)."""
    state = ws.state
    state.ports_messages += 1
    return f"{ws.spec.name}/{state.incarnation}/{kind}#{state.ports_messages}"


async def remove_routes(ws: WorkspaceContext, keep: set[str] | None = None) -> None:
    """Delete the routes this workspace made (but those named in `keep`)."""
    spec, state = ws.spec, ws.state
    gone = [r for r in state.routes if r.name not in (keep or set())]
    if gone and state.kubeconfig is not None:
        await DELETE_ROUTES(
            DeleteRoutesRequest(
                kubeconfig=state.kubeconfig,
                namespace=workspace_namespace(spec.name),
                routes=[RouteSpec(name=r.name, kind=r.kind, service="", port=1) for r in gone],
                owner=ws.owner,
            )
        )
    state.routes = [r for r in state.routes if r not in gone]


async def unroute(ws: WorkspaceContext) -> None:
    """The front door goes first: routes and pool ports, before the release behind them."""
    await remove_routes(ws)
    await release_ports(ws)
    ws.state.access = []
    ws.state.gateway_fingerprint = ""
