"""Workspace requests (rules and messages), the Kubernetes names a workspace uses, its access list,
conditions, and the persisted state's leniency."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from models.base import user_input
from models.identity import (
    capacity_workflow_id,
    cluster_deployment_name,
    prerequisite_workflow_id,
    workspace_service_set_name,
)
from models.workspace import (
    ConditionReason,
    ConditionStatus,
    ConditionType,
    GatewayInfo,
    WorkspacePhase,
    WorkspaceSpec,
    WorkspaceState,
    WorkspaceStatus,
    allocate_pool_port,
    capacity_request_id,
    condition,
    endpoint_service_name,
    plan_access,
    port_forward_command,
    set_condition,
    workspace_namespace,
    workspace_workflow_id,
)
from models.workspace_class import AccessEndpoint, WorkspaceClassSpec


def request(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"name": "nb", "class": "colony-jupyter-1-0-0", "cluster": "training"}
    data.update(changes)
    return data


def only_message(error: ValidationError) -> str:
    errors = error.errors()
    assert len(errors) == 1, errors
    return str(errors[0]["msg"])


def test_request_reads_and_writes_class() -> None:
    spec = user_input(
        WorkspaceSpec, request(resources={"perReplica": {"gpuCount": 2, "gpuType": "H100"}})
    )
    assert spec.class_name == "colony-jupyter-1-0-0"
    assert spec.workflow_id == "workspace/nb"
    dumped = spec.model_dump(mode="json", exclude_none=True)
    assert dumped["class"] == "colony-jupyter-1-0-0"
    assert dumped["resources"]["perReplica"] == {"gpuCount": 2, "gpuType": "H100"}
    assert WorkspaceSpec.model_validate_json(spec.model_dump_json()) == spec


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(
            request(name="n" * 61),
            f"workspace name '{'n' * 61}' is 61 characters long; at most 60 are allowed",
            id="name-61",
        ),
        pytest.param(
            request(name="My_Notebook"),
            "workspace name 'My_Notebook' must be a DNS label: lowercase letters, digits and '-', "
            "starting and ending with a letter or digit",
            id="name-chars",
        ),
        pytest.param(
            request(**{"class": "Jupyter"}),
            "workspace class name 'Jupyter' must be a DNS label: lowercase letters, digits and "
            "'-', starting and ending with a letter or digit",
            id="class",
        ),
        pytest.param(
            request(cluster="1st"), "cluster name '1st' must start with a letter", id="cluster"
        ),
        pytest.param(
            request(values={"_exalsius": {"resources": {}}}),
            "values must not set '_exalsius': Colony writes it from the resources; set resources instead",
            id="reserved-values",
        ),
        pytest.param(
            request(answers={"a..b": 1}),
            "answer 'a..b': path 'a..b' has an empty segment",
            id="answer-path",
        ),
        pytest.param(
            request(
                resources={
                    "perReplica": {
                        "gpuType": "H100",
                        "gpuNodeSelector": {"nvidia.com/gpu.product": "X"},
                    }
                }
            ),
            "give gpuType or gpuNodeSelector, not both: each one alone selects the GPU nodes",
            id="gpu-type-and-selector",
        ),
        pytest.param(
            request(resources={"perReplica": {"gpuNodeSelector": {}}}),
            "gpuNodeSelector must name at least one node label",
            id="empty-selector",
        ),
        pytest.param(
            request(resources={"perReplica": {"gpuNodeSelector": {"nvidia.com/gpu product": "X"}}}),
            "gpuNodeSelector: label key 'nvidia.com/gpu product' is invalid: the name part must be "
            "1 to 63 characters, alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric",
            id="selector-key",
        ),
        pytest.param(
            request(resources={"perReplica": {"gpuType": "H100 80GB"}}),
            "gpuType 'H100 80GB' must be a node label value (it is matched against "
            "exalsius.ai/gpu-model): 1 to 63 alphanumerics, '-', '_' or '.', starting and ending "
            "with an alphanumeric",
            id="gpu-type",
        ),
        pytest.param(
            request(resources={"replicas": 0}), "replicas must be at least 1, got 0", id="replicas"
        ),
        pytest.param(
            request(gpus=2),
            "unknown field 'gpus' (known fields: answers, class, cluster, name, organization, "
            "resources, sealedAnswers, suspend, values)",
            id="unknown-field",
        ),
    ],
)
def test_request_rules(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        user_input(WorkspaceSpec, data)
    assert only_message(caught.value) == message


def test_an_answer_is_plain_or_sealed_not_both() -> None:
    sealed = {
        "keyId": "k",
        "scope": "workspace/nb/token",
        "ephemeralKey": "e",
        "nonce": "n",
        "ciphertext": "c",
    }
    with pytest.raises(ValidationError) as caught:
        user_input(WorkspaceSpec, request(answers={"token": "x"}, sealedAnswers={"token": sealed}))
    assert only_message(caught.value) == (
        "prompt 'token' is answered both in answers and in sealedAnswers; give one"
    )


def test_selector_may_read_colony_labels() -> None:
    spec = user_input(
        WorkspaceSpec,
        request(resources={"perReplica": {"gpuNodeSelector": {"colony.dev/sku": "h100"}}}),
    )
    assert spec.resources is not None


# --- Names ----------------------------------------------------------------------------------------


def test_ids_and_namespace() -> None:
    assert workspace_workflow_id("nb") == "workspace/nb"
    assert workspace_workflow_id("nb", "acme") == "workspace/acme/nb"
    assert capacity_workflow_id("training") == "capacity/training"
    assert prerequisite_workflow_id("training", "colony-inference-stack-1-0-0") == (
        "prereq/training/colony-inference-stack-1-0-0"
    )
    assert workspace_namespace("nb") == "ws-nb"
    assert workspace_namespace("n" * 60) == "ws-" + "n" * 60
    assert len(workspace_namespace("n" * 60)) == 63
    assert capacity_request_id("nb", "0f3a-run", 2) == "nb/0f3a-run#2"


def test_a_workspace_names_its_objects_from_its_organization_and_cluster() -> None:
    """Derived names (`models.identity`): readable heads, injective over (organization, cluster,
    workspace); the namespace keeps the exalsius `ws-<name>`."""
    spec = user_input(WorkspaceSpec, request(organization="acme"))
    assert spec.workflow_id == "workspace/acme/nb"
    assert spec.cluster_workflow_id == "cluster/acme/training"
    assert spec.cluster_deployment == cluster_deployment_name("acme", "training")
    assert spec.service_set_name == workspace_service_set_name("acme", "training", "nb")
    assert spec.service_set_name.startswith("wsd-training-nb--")
    assert spec.release_name.startswith("wsd-training-nb--")
    assert len(spec.release_name) <= 53
    assert spec.values_secret_name.startswith("wsd-training-nb-values--")
    assert spec.route_name("http").startswith("nb-http--")
    default = user_input(WorkspaceSpec, request())
    assert default.cluster_deployment == "training"
    for name in ("service_set_name", "release_name", "values_secret_name"):
        assert getattr(default, name) != getattr(spec, name), name


def test_an_organization_name_follows_the_name_rules() -> None:
    with pytest.raises(ValidationError) as caught:
        user_input(WorkspaceSpec, request(organization="Acme"))
    assert "organization name 'Acme' may contain only lowercase letters" in only_message(
        caught.value
    )


def test_endpoint_services_follow_the_chart_convention() -> None:
    endpoint = AccessEndpoint(name="http", protocol="HTTP", port=80)
    assert endpoint_service_name("wsd-training-nb", endpoint) == "wsd-training-nb-http"
    fixed = AccessEndpoint(name="hub", protocol="HTTP", port=80, service_name="proxy-public")
    assert endpoint_service_name("wsd-training-nb", fixed) == "proxy-public"


# --- Access ---------------------------------------------------------------------------------------


def workspace_class(*endpoints: dict[str, Any]) -> WorkspaceClassSpec:
    return WorkspaceClassSpec.model_validate(
        {
            "name": "c-1-0-0",
            "displayName": "C",
            "serviceTemplate": {"name": "c-1-0-0"},
            "defaultResources": {"perReplica": {}},
            "accessEndpoints": list(endpoints),
        }
    )


LLM = workspace_class(
    {"name": "api", "protocol": "HTTP", "port": 8000},
    {"name": "ssh", "protocol": "SSH", "port": 22},
    {"name": "chat", "protocol": "HTTP", "port": 3000},
    {"name": "db", "protocol": "TCP", "port": 5432},
)


def test_access_through_a_gateway() -> None:
    gateway = GatewayInfo(domain="dos-lab.example", https=True, tcp_ports=[2200, 2201])
    entries = plan_access("llm", "wsd-training-llm", LLM, gateway, {"ssh": 2201, "db": 2200})
    assert [(e.name, e.url, e.ready) for e in entries] == [
        ("api", "https://llm.dos-lab.example", False),
        ("ssh", "ssh://dos-lab.example:2201", False),
        ("chat", "https://llm-chat.dos-lab.example", False),
        ("db", "tcp://dos-lab.example:2200", False),
    ]
    assert entries[0].message == "waiting for the gateway to accept the route"


def test_http_listener_gives_http_urls() -> None:
    entries = plan_access(
        "llm", "wsd-training-llm", LLM, GatewayInfo(domain="dev.local", https=False)
    )
    assert entries[0].url == "http://llm.dev.local"


@pytest.mark.parametrize(
    ("https", "http_port", "url"),
    [
        pytest.param(True, 443, "https://llm.d.example", id="https-on-443"),
        pytest.param(True, 8443, "https://llm.d.example:8443", id="https-elsewhere"),
        pytest.param(False, 80, "http://llm.d.example", id="http-on-80"),
        pytest.param(False, 443, "http://llm.d.example:443", id="http-on-443"),
        pytest.param(True, None, "https://llm.d.example", id="unknown-port"),
    ],
)
def test_urls_name_a_listener_port_that_is_not_the_schemes_own(
    https: bool, http_port: int | None, url: str
) -> None:
    gateway = GatewayInfo(domain="d.example", https=https, http_port=http_port)
    assert plan_access("llm", "training", LLM, gateway)[0].url == url


def test_exhausted_or_missing_port_pool() -> None:
    full = plan_access(
        "llm", "wsd-training-llm", LLM, GatewayInfo(domain="d.example", tcp_ports=[2200]), {}
    )
    assert full[1].url == ""
    assert full[1].message == (
        "port pool exhausted: all 1 TCP listeners of the tenant gateway are in use; ask an "
        "administrator to widen the pool"
    )
    none = plan_access("llm", "wsd-training-llm", LLM, GatewayInfo(domain="d.example"), {})
    assert none[1].message == (
        "the tenant gateway has no TCP listeners (port pool); ask an administrator for one"
    )


def test_hostname_label_too_long() -> None:
    name = "w" * 60
    entries = plan_access(name, "wsd-training-llm", LLM, GatewayInfo(domain="d.example"))
    assert entries[0].url == f"https://{name}.d.example"
    assert entries[2].url == ""
    assert entries[2].message.startswith(f"hostname label '{name}-chat' exceeds 63 characters")


def test_access_without_a_gateway_is_a_port_forward() -> None:
    entries = plan_access("llm", "wsd-training-llm", LLM, None, kubeconfig="~/.kube/training")
    assert entries[0].ready
    assert entries[0].url == "http://localhost:8000"
    assert entries[0].command == (
        "kubectl --kubeconfig ~/.kube/training port-forward -n ws-llm svc/wsd-training-llm-api 8000:8000"
    )
    assert entries[1].url == "ssh://localhost:8022"
    assert entries[1].command.endswith("svc/wsd-training-llm-ssh 8022:22")
    assert entries[1].message == f"no gateway: reach it with `{entries[1].command}`"


def test_port_forward_command_without_kubeconfig() -> None:
    endpoint = AccessEndpoint(name="http", protocol="HTTP", port=80)
    assert port_forward_command("wsd-training-nb", "nb", endpoint) == (
        "kubectl port-forward -n ws-nb svc/wsd-training-nb-http 8080:80"
    )


@pytest.mark.parametrize(
    ("ports", "local"),
    [
        pytest.param([80, 80], [8080, 8081], id="two-on-80"),
        pytest.param([80, 8081, 80], [8080, 8081, 8082], id="skips-a-taken-one"),
        pytest.param([8888, 22, 8888, 8022], [8888, 8022, 8889, 8023], id="unprivileged-too"),
        pytest.param([65535, 65535], [65535, 1024], id="wraps-to-the-first-unprivileged"),
    ],
)
def test_every_endpoint_is_forwarded_on_a_local_port_of_its_own(
    ports: list[int], local: list[int]
) -> None:
    endpoints = [
        {"name": f"e{index}", "protocol": "HTTP", "port": port} for index, port in enumerate(ports)
    ]
    entries = plan_access("nb", "rel", workspace_class(*endpoints), None)
    assert [int(e.command.split()[-1].split(":")[0]) for e in entries] == local
    assert [e.url for e in entries] == [f"http://localhost:{port}" for port in local]
    assert {e.reason for e in entries} == {"NoGateway"}


def test_planned_endpoints_say_what_they_wait_for() -> None:
    gateway = GatewayInfo(domain="d.example", tcp_ports=[2200])
    entries = plan_access("llm", "rel", LLM, gateway, {"ssh": 2200})
    assert [(e.name, e.reason) for e in entries] == [
        ("api", "RoutingInProgress"),
        ("ssh", "RoutingInProgress"),
        ("chat", "RoutingInProgress"),
        ("db", "PortPoolExhausted"),
    ]
    long = plan_access("w" * 60, "rel", LLM, GatewayInfo(domain="d.example"))
    assert long[2].reason == "RoutingError"


@pytest.mark.parametrize(
    ("pool", "taken", "port"),
    [
        pytest.param([2202, 2200, 2201], {2200}, 2201, id="lowest-free"),
        pytest.param([2200], {2200}, None, id="exhausted"),
        pytest.param([], set(), None, id="no-pool"),
    ],
)
def test_pool_ports(pool: list[int], taken: set[int], port: int | None) -> None:
    assert allocate_pool_port(pool, taken) == port


# --- Conditions, status and state -----------------------------------------------------------------

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def test_set_condition_moves_the_transition_time_only_on_change() -> None:
    conditions = set_condition(
        [],
        ConditionType.FEASIBLE,
        ConditionStatus.FALSE,
        ConditionReason.WAITING_FOR_GPU_CAPACITY,
        "pos 2",
        T0,
    )
    later = T0 + timedelta(minutes=5)
    conditions = set_condition(
        conditions,
        ConditionType.FEASIBLE,
        ConditionStatus.FALSE,
        ConditionReason.WAITING_FOR_GPU_CAPACITY,
        "pos 1",
        later,
    )
    feasible = condition(conditions, ConditionType.FEASIBLE)
    assert feasible is not None
    assert (feasible.message, feasible.last_transition_time) == ("pos 1", T0)
    conditions = set_condition(
        conditions,
        ConditionType.FEASIBLE,
        ConditionStatus.TRUE,
        ConditionReason.GPU_CAPACITY_RESERVED,
        "",
        later,
    )
    conditions = set_condition(
        conditions,
        ConditionType.READY,
        ConditionStatus.FALSE,
        ConditionReason.HELM_RELEASE_NOT_READY,
        "",
        later,
    )
    feasible = condition(conditions, ConditionType.FEASIBLE)
    assert feasible is not None
    assert feasible.last_transition_time == later
    assert [c.type for c in conditions] == ["Feasible", "Ready"]


def test_status_uses_the_exalsius_vocabulary() -> None:
    status = WorkspaceStatus.model_validate(
        {
            "name": "nb",
            "class": "colony-jupyter-1-0-0",
            "cluster": "training",
            "phase": "Failed",
            "failureContext": {
                "phaseWhenFailed": "Deploying",
                "reason": "HelmReleaseFailed",
                "serviceSetStatus": {
                    "name": "wsd-training-nb",
                    "services": [
                        {"name": "wsd-training-nb", "state": "Failed", "failureMessage": "boom"}
                    ],
                },
                "recentEvents": [
                    {"type": "Warning", "reason": "HelmReleaseFailed", "message": "boom"}
                ],
            },
            "access": [
                {"name": "http", "protocol": "HTTP", "url": "https://nb.example", "ready": True}
            ],
        }
    )
    assert status.phase is WorkspacePhase.FAILED
    assert status.failure_context is not None
    assert status.failure_context.phase_when_failed is WorkspacePhase.DEPLOYING
    dumped = status.model_dump(mode="json", exclude_defaults=True)
    assert dumped["failureContext"]["serviceSetStatus"]["services"][0]["failureMessage"] == "boom"
    assert dumped["access"][0] == {
        "name": "http",
        "protocol": "HTTP",
        "url": "https://nb.example",
        "ready": True,
    }


def test_persisted_state_ignores_fields_it_does_not_know() -> None:
    state = WorkspaceState.model_validate({"phase": "Waiting", "someFutureField": {"x": 1}})
    assert state.phase is WorkspacePhase.WAITING
    assert WorkspaceState.model_validate_json(state.model_dump_json()) == state
