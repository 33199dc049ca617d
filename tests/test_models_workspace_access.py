"""The access step's decisions (`models.workspace_access`), the failure context, names in natural
order, where prerequisites go and what labels say, and the status a client of the exalsius
operator reads (pure logic)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from models.names import natural_key
from models.workspace import (
    ConditionReason,
    EventSummary,
    GatewayInfo,
    ServiceSetStatusSummary,
    ServiceStateSummary,
    WorkspacePhase,
    WorkspaceSpec,
    WorkspaceStatus,
    failure_context,
    plan_access,
)
from models.workspace_access import (
    awaiting_gateway,
    gateway_missing_message,
    routes_condition,
    routes_for,
    with_route_states,
)
from models.workspace_api import RouteState, prerequisite_labels, workspace_labels
from models.workspace_class import PrerequisiteSpec, WorkspaceClassSpec
from tests.exalsius_status import exalsius_problems

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DOMAIN = "acme.example"
SPEC = WorkspaceSpec.model_validate({"name": "nb", "class": "two-1-0-0", "cluster": "training"})
TWO = WorkspaceClassSpec.model_validate(
    {
        "name": "two-1-0-0",
        "displayName": "Two",
        "serviceTemplate": {"name": "two-1-0-0"},
        "defaultResources": {"perReplica": {}},
        "accessEndpoints": [
            {"name": "web", "protocol": "HTTP", "port": 80},
            {"name": "admin", "protocol": "HTTP", "port": 80},
            {"name": "ssh", "protocol": "SSH", "port": 22},
        ],
    }
)


# --- Routes ------------------------------------------------------------------------------------


def test_routes_through_a_gateway_one_label_deep() -> None:
    gateway = GatewayInfo(domain=DOMAIN, https=True, tcp_ports=[30000])
    routes = routes_for(SPEC, TWO, gateway, {"ssh": 30000})
    assert [(r.kind, r.hostname, r.listener_port, r.service) for r in routes] == [
        ("HTTPRoute", f"nb.{DOMAIN}", 0, f"{SPEC.release_name}-web"),
        ("HTTPRoute", f"nb-admin.{DOMAIN}", 0, f"{SPEC.release_name}-admin"),
        ("TCPRoute", "", 30000, f"{SPEC.release_name}-ssh"),
    ]
    assert [r.section_name for r in routes[:2]] == ["https", "https"]
    # No pool port: no TCPRoute (the endpoint says the pool is exhausted).
    assert len(routes_for(SPEC, TWO, gateway, {})) == 2


def test_each_endpoint_reports_its_own_route() -> None:
    gateway = GatewayInfo(domain=DOMAIN, tcp_ports=[30000])
    planned = plan_access("nb", SPEC.release_name, TWO, gateway, {"ssh": 30000})
    states = [
        RouteState(name=SPEC.route_name("web"), accepted=True, settled=True, reason="Accepted"),
        RouteState(
            name=SPEC.route_name("admin"),
            settled=True,
            reason="BackendNotFound",
            message="ResolvedRefs: BackendNotFound: Service ws-nb/x-admin not found",
        ),
    ]
    entries = with_route_states(SPEC, planned, states)
    assert [(e.name, e.ready, e.reason) for e in entries] == [
        ("web", True, "Accepted"),
        ("admin", False, "BackendNotFound"),
        ("ssh", False, "RoutingInProgress"),  # its route not answered for yet
    ]
    assert entries[0].message == ""
    ok, reason, message = routes_condition(entries)
    assert (ok, reason) == (False, ConditionReason.ROUTING_ERROR)
    assert message.startswith("admin: BackendNotFound: ResolvedRefs: BackendNotFound: Service")
    assert "ssh: RoutingInProgress: waiting for the gateway to accept the route" in message
    assert "web" not in message


@pytest.mark.parametrize(
    ("reasons", "expected"),
    [
        pytest.param(["Accepted", "Accepted"], (True, ConditionReason.ROUTES_READY), id="ready"),
        pytest.param(
            ["Accepted", "Pending"], (False, ConditionReason.ROUTING_IN_PROGRESS), id="pending"
        ),
        pytest.param(
            ["RoutingInProgress", "NoMatchingParent"],
            (False, ConditionReason.ROUTING_ERROR),
            id="refused",
        ),
        pytest.param(
            ["Accepted", "PortPoolExhausted"], (False, ConditionReason.ROUTING_ERROR), id="pool"
        ),
    ],
)
def test_routes_ready_adds_the_endpoints_up(
    reasons: list[str], expected: tuple[bool, ConditionReason]
) -> None:
    entries = [
        e.model_copy(update={"ready": r == "Accepted", "reason": r})
        for e, r in zip(
            plan_access("nb", "rel", TWO, GatewayInfo(domain=DOMAIN))[:2], reasons, strict=True
        )
    ]
    assert routes_condition(entries)[:2] == expected


def test_a_label_that_disagrees_with_the_gateway_is_said() -> None:
    entries = [
        e.model_copy(update={"ready": True, "reason": "Accepted"})
        for e in plan_access("nb", "rel", TWO, GatewayInfo(domain=DOMAIN))
    ]
    ok, _, message = routes_condition(entries, expected_domain="old.example", gateway_domain=DOMAIN)
    assert ok
    assert message == (
        "all 3 endpoint(s) are routed (the ClusterDeployment's label says *.old.example; the "
        f"cluster's Gateway serves *.{DOMAIN}, which the URLs use)"
    )
    assert routes_condition(entries, expected_domain=DOMAIN, gateway_domain=DOMAIN)[2] == (
        "all 3 endpoint(s) are routed"
    )


def test_while_the_gateway_is_missing_endpoints_wait_and_can_be_forwarded() -> None:
    entries = awaiting_gateway(SPEC, TWO, DOMAIN, {"ssh": 30001})
    assert [(e.url, e.ready, e.reason) for e in entries] == [
        (f"https://nb.{DOMAIN}", False, "RoutingInfraNotReady"),
        (f"https://nb-admin.{DOMAIN}", False, "RoutingInfraNotReady"),
        (f"ssh://{DOMAIN}:30001", False, "RoutingInfraNotReady"),
    ]
    assert [e.command.split()[-1] for e in entries] == ["8080:80", "8081:80", "8022:22"]
    assert entries[0].message.endswith(f"meanwhile `{entries[0].command}`")
    message = gateway_missing_message("training", DOMAIN)
    assert "colony.dev/tenant-gateway-domain" in message
    assert "colony.dev/tenant-gateway=true" in message


# --- Failure context ---------------------------------------------------------------------------


def test_the_failure_is_the_first_of_the_recent_events() -> None:
    events = [
        EventSummary(last_seen=T0 + timedelta(seconds=s), reason=f"E{s}", message=str(s))
        for s in (1, 3, 2)
    ]
    context = failure_context(
        WorkspacePhase.DEPLOYING,
        ConditionReason.HELM_RELEASE_FAILED,
        "rel failed: image pull back-off",
        T0 + timedelta(seconds=9),
        events=events,
    )
    assert (context.reason, context.message) == (
        "HelmReleaseFailed",
        "rel failed: image pull back-off",
    )
    assert [(e.type, e.reason) for e in context.recent_events] == [
        ("Warning", "HelmReleaseFailed"),
        ("Normal", "E3"),
        ("Normal", "E2"),
        ("Normal", "E1"),
    ]
    many = [EventSummary(last_seen=T0, reason=f"E{i}") for i in range(20)]
    capped = failure_context(
        WorkspacePhase.PENDING, ConditionReason.GPU_OFFERING_UNAVAILABLE, "no", T0, events=many
    )
    assert len(capped.recent_events) == 10


# --- The exalsius CRD's schema ------------------------------------------------------------------


def failed_status(**changes: Any) -> dict[str, Any]:
    context = failure_context(
        WorkspacePhase.DEPLOYING,
        ConditionReason.HELM_RELEASE_FAILED,
        "rel failed: boom",
        T0,
        service_set_status=ServiceSetStatusSummary(
            name="wsd", services=[ServiceStateSummary(name="rel", state="Failed")]
        ),
    )
    status = WorkspaceStatus.model_validate(
        {
            "name": "nb",
            "class": "two-1-0-0",
            "cluster": "training",
            "phase": "Failed",
            "message": "rel failed: boom",
            "conditions": [
                {
                    "type": "HelmReleaseReady",
                    "status": "False",
                    "reason": "HelmReleaseFailed",
                    "message": "rel failed: boom",
                    "lastTransitionTime": T0,
                }
            ],
            "failureContext": context,
            "access": plan_access("nb", "rel", TWO, None),
        }
    )
    dumped: dict[str, Any] = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    dumped.update(changes)
    return dumped


def test_colonys_status_is_a_valid_exalsius_status() -> None:
    assert exalsius_problems(failed_status()) == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        pytest.param(
            {"phase": "Suspended"}, 'phase: Unsupported value: "Suspended"', id="phase-enum"
        ),
        pytest.param(
            {"conditions": [{"type": "Ready", "status": "False", "reason": "free text"}]},
            "conditions[0].lastTransitionTime: Required value",
            id="condition-required",
        ),
        pytest.param(
            {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "False",
                        "reason": "wsd-nb: Helm install failed",
                        "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ]
            },
            "conditions[0].reason: Invalid value",
            id="free-text-reason",
        ),
        pytest.param(
            {"failureContext": {"phaseWhenFailed": "Deploying", "reason": "X", "cause": "?"}},
            "failureContext.cause: neither in the exalsius CRD",
            id="unknown-field",
        ),
    ],
)
def test_the_schema_check_finds_what_an_exalsius_client_could_not_read(
    change: dict[str, Any], problem: str
) -> None:
    problems = exalsius_problems(failed_status(**change))
    assert any(p.startswith(problem) for p in problems), problems


# --- Names, namespaces, labels ------------------------------------------------------------------


def test_names_sort_as_people_count() -> None:
    names = ["burst-10", "burst-2", "burst-1", "alpha", "burst-02", "b10", "b9x"]
    assert sorted(names, key=natural_key) == [
        "alpha",
        "b9x",
        "b10",
        "burst-1",
        "burst-02",
        "burst-2",
        "burst-10",
    ]


@pytest.mark.parametrize(
    ("prerequisite", "namespace"),
    [
        pytest.param(
            {"serviceTemplate": {"name": "colony-inference-stack-1-0-0"}},
            "colony-inference-stack-1-0-0-system",
            id="its-own",
        ),
        pytest.param(
            {"serviceTemplate": {"name": "stack.v1"}, "namespace": "llm-d"},
            "llm-d",
            id="as-the-class-says",
        ),
        pytest.param(
            {"serviceTemplate": {"name": "stack.v1"}}, "stack-v1-system", id="dots-become-hyphens"
        ),
    ],
)
def test_a_prerequisite_without_a_namespace_gets_its_own(
    prerequisite: dict[str, Any], namespace: str
) -> None:
    assert PrerequisiteSpec.model_validate(prerequisite).install_namespace == namespace


def test_a_long_prerequisite_namespace_is_cut_with_a_hash() -> None:
    long = PrerequisiteSpec.model_validate({"serviceTemplate": {"name": "t" * 60}})
    assert len(long.install_namespace) == 63
    assert long.install_namespace.startswith("t" * 40)


def test_colonys_objects_carry_the_exalsius_labels_beside_its_own() -> None:
    assert workspace_labels("nb") == {
        "colony.dev/workspace": "nb",
        "workspaces.exalsius.ai/workspace": "nb",
    }
    labels = prerequisite_labels("colony-inference-stack-1-0-0", "training")
    assert labels == {
        "colony.dev/prerequisite": "colony-inference-stack-1-0-0",
        "colony.dev/cluster": "training",
        "workspaces.exalsius.ai/role": "prerequisite",
        "workspaces.exalsius.ai/cluster-deployment": "training",
        "workspaces.exalsius.ai/template": "colony-inference-stack-1-0-0",
    }
    long = prerequisite_labels("t" * 80, "training")
    assert len(long["workspaces.exalsius.ai/template"]) == 63
