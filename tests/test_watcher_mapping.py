"""What the watcher sends for what it sees: signal, target workflow, request id (pure logic)."""

from __future__ import annotations

from typing import Any

import pytest

from models.ownership import Owner
from models.signals import GatewayChanged, NodeEvent, NodeEventType, RefreshRequest
from watching.leader import micro_time
from watching.mapping import (
    Fingerprints,
    gateway_changed,
    gateway_fingerprint,
    gateway_relisted,
    kubeconfig_secret,
    node_event,
    node_fingerprint,
    object_fingerprint,
    object_refresh,
    owner_workflow_id,
    ready_status,
    relist_refresh,
    workspace_owners,
)
from workflows.cluster import CLUSTER
from workflows.workspace import WORKSPACE


def obj(
    name: str = "training",
    *,
    uid: str = "u-1",
    rv: str = "42",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
    generation: int = 1,
    namespace: str = "kcm-system",
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": rv,
            "generation": generation,
            "labels": labels if labels is not None else {},
            "annotations": annotations if annotations is not None else {},
        },
        "status": status or {},
    }


def marked(workflow_id: str, organization: str = "") -> dict[str, Any]:
    """An object with Colony's ownership marks for `workflow_id` of `organization`."""
    owner = Owner(workflow_id=workflow_id, organization=organization)
    return obj(labels=owner.labels(), annotations=owner.annotations())


def node(
    name: str = "h100-003",
    *,
    ready: str | None = "True",
    unschedulable: bool = False,
    rv: str = "7",
) -> dict[str, Any]:
    conditions = [{"type": "MemoryPressure", "status": "False"}]
    if ready is not None:
        conditions.append({"type": "Ready", "status": ready, "lastHeartbeatTime": "t1"})
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": rv},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {"conditions": conditions},
    }


@pytest.mark.parametrize(
    ("kind", "found", "expected"),
    [
        pytest.param(
            "ClusterDeployment",
            marked("cluster/acme/training", "acme"),
            ("cluster/acme/training", "ClusterDeployment/u-1/42"),
            id="cluster-deployment",
        ),
        pytest.param(
            "ConfigMap",
            marked("cluster/lab"),
            ("cluster/lab", "ConfigMap/u-1/42"),
            id="any-marked-kind",
        ),
        # Only a cluster acts on `refresh` (it looks at its nodes): a workspace's ServiceSet or a
        # colony's object changing is no signal, only an event in a history for nothing.
        pytest.param("ServiceSet", marked("workspace/notebook"), None, id="a-workspaces"),
        pytest.param("Secret", marked("colony/acme/lab", "acme"), None, id="a-colonys"),
        pytest.param("ClusterDeployment", obj(), None, id="not-ours"),
        pytest.param(
            "ClusterDeployment",
            obj(annotations={"colony.dev/workflow-id": "cluster/acme/training"}),
            None,
            id="annotated-without-colony-marks",
        ),
        pytest.param(
            "ServiceSet",
            marked("workspace/acme/nb", "acme-labs"),
            None,
            id="organization-label-contradicts-the-workflow",
        ),
        pytest.param(
            "ServiceSet", marked("workspace/nb", "acme"), None, id="an-organization-on-a-default-id"
        ),
        pytest.param("ServiceSet", marked("capacity/x"), None, id="not-an-entity-workflow"),
        pytest.param("ClusterDeployment", marked(""), None, id="empty-owner"),
    ],
)
def test_owned_object_changes_become_refresh(
    kind: str, found: dict[str, Any], expected: tuple[str, str] | None
) -> None:
    signal = object_refresh(kind, found)
    if expected is None:
        assert signal is None
        return
    assert signal is not None
    assert (signal.workflow_id, signal.request_id) == expected
    assert signal.name == CLUSTER.refresh.name
    assert isinstance(signal.payload, RefreshRequest)
    assert kind in signal.payload.reason


def test_the_workflow_id_is_taken_verbatim() -> None:
    # The label holds a label-safe form ("cluster.acme.training"); the annotation the real id.
    cd = marked("cluster/acme/training", "acme")
    cd["metadata"]["labels"]["colony.dev/workflow-id"] = "cluster.acme.training"
    assert owner_workflow_id(cd) == "cluster/acme/training"


@pytest.mark.parametrize(
    ("event_type", "ready", "unschedulable", "expected_ready"),
    [
        pytest.param("ADDED", "True", False, "True", id="added-ready"),
        pytest.param("MODIFIED", "False", False, "False", id="not-ready"),
        pytest.param("MODIFIED", "Unknown", True, "Unknown", id="kubelet-stopped-cordoned"),
        pytest.param("MODIFIED", None, False, "Unknown", id="no-ready-condition"),
        pytest.param("DELETED", "True", False, "True", id="deleted"),
    ],
)
def test_node_changes_become_node_event(
    event_type: str, ready: str | None, unschedulable: bool, expected_ready: str
) -> None:
    signal = node_event(
        "acme-training",
        "cluster/acme/training",
        event_type,
        node(ready=ready, unschedulable=unschedulable),
    )
    assert signal.workflow_id == "cluster/acme/training"
    assert signal.name == CLUSTER.node_event.name
    payload = signal.payload
    assert isinstance(payload, NodeEvent)
    assert payload == NodeEvent(
        request_id="node/acme-training/uid-h100-003/7",
        node="h100-003",
        type=NodeEventType(event_type),
        ready_status=expected_ready,
        unschedulable=unschedulable,
        resource_version="7",
    )
    # The payload is what the workflow's signal contract reads (camelCase on the wire).
    wire = payload.model_dump(by_alias=True, mode="json")
    assert wire["requestId"] == "node/acme-training/uid-h100-003/7"
    assert wire["readyStatus"] == expected_ready


def test_relist_refresh_ids_name_the_stream_and_the_list() -> None:
    signal = relist_refresh("cluster/x", "nodes.kcm-system.x", "991")
    assert signal is not None
    assert signal.request_id == "relist/nodes.kcm-system.x/991"
    assert signal.name == CLUSTER.refresh.name


@pytest.mark.parametrize("owner", ["workspace/nb", "workspace/acme/nb", "colony/lab"])
def test_a_relist_refreshes_no_workflow_that_does_nothing_with_it(owner: str) -> None:
    assert relist_refresh(owner, "clusterdeployments", "991") is None


def test_same_event_twice_has_the_same_request_id() -> None:
    # A restarted watcher, a relist or a second watcher during a handover send the same id.
    first = node_event("c", "cluster/c", "MODIFIED", node(rv="9"))
    again = node_event("c", "cluster/c", "MODIFIED", node(rv="9"))
    later = node_event("c", "cluster/c", "MODIFIED", node(rv="10"))
    assert first.request_id == again.request_id != later.request_id


def test_heartbeats_are_not_worth_a_signal() -> None:
    seen = Fingerprints()
    ready = node(rv="1")
    heartbeat = node(rv="2")
    heartbeat["status"]["conditions"][1]["lastHeartbeatTime"] = "t2"
    assert seen.changed("ADDED", "n", node_fingerprint(ready))
    assert not seen.changed("MODIFIED", "n", node_fingerprint(heartbeat))
    assert seen.changed("MODIFIED", "n", node_fingerprint(node(ready="False", rv="3")))
    assert seen.changed("MODIFIED", "n", node_fingerprint(node(ready="False", unschedulable=True)))
    assert seen.changed("DELETED", "n", node_fingerprint(node()))
    assert "n" not in seen.known()


@pytest.mark.parametrize(
    ("change", "worth"),
    [
        pytest.param(
            {"status": {"conditions": [{"type": "Ready", "status": "True", "message": "later"}]}},
            False,
            id="message-only",
        ),
        pytest.param(
            {
                "status": {
                    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "x"}]
                }
            },
            False,
            id="time-only",
        ),
        pytest.param(
            {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
            True,
            id="condition-status",
        ),
        pytest.param({"generation": 2}, True, id="spec-changed"),
    ],
)
def test_owned_objects_are_signalled_when_what_matters_changes(
    change: dict[str, Any], worth: bool
) -> None:
    base = obj(status={"conditions": [{"type": "Ready", "status": "True", "message": "first"}]})
    changed = obj(
        status=change.get("status", base["status"]), generation=change.get("generation", 1)
    )
    seen = Fingerprints()
    assert seen.changed("ADDED", "u-1", object_fingerprint(base))
    assert seen.changed("MODIFIED", "u-1", object_fingerprint(changed)) is worth


def test_ready_status_and_kubeconfig_secret() -> None:
    assert ready_status(node(ready="False")) == "False"
    assert ready_status({"metadata": {}}) == "Unknown"
    assert kubeconfig_secret(obj("acme-training")) == ("kcm-system", "acme-training-kubeconfig")


def test_lease_times_are_micro_times() -> None:
    from datetime import UTC, datetime

    assert micro_time(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05.000000Z"


# --- Tenant Gateways of child clusters ----------------------------------------------------------


def test_a_gateway_change_goes_to_a_workspace_with_an_id_of_its_state() -> None:
    gateway = obj("tenant", uid="g-1", rv="77", namespace="colony-gateway")
    signal = gateway_changed("workspace/acme/nb", "acme-labs--x", "DELETED", gateway)
    assert (signal.workflow_id, signal.name) == (
        "workspace/acme/nb",
        WORKSPACE.gateway_changed.name,
    )
    assert signal.payload == GatewayChanged(
        request_id="gateway/acme-labs--x/g-1/77",
        cluster="acme-labs--x",
        gateway="colony-gateway/tenant",
        type=NodeEventType.DELETED,
    )
    relisted = gateway_relisted("workspace/nb", "labs", "gateways.kcm-system.labs", "90")
    assert relisted.request_id == "relist/gateways.kcm-system.labs/90"


@pytest.mark.parametrize(
    ("before", "after", "changed"),
    [
        pytest.param({}, {"generation": 2}, True, id="spec-changed"),
        pytest.param({}, {"annotations": {"colony.dev/domain": "b.example"}}, True, id="domain"),
        pytest.param(
            {"status": {"conditions": [{"type": "Programmed", "status": "True"}]}},
            {"status": {"conditions": [{"type": "Programmed", "status": "False"}]}},
            True,
            id="programmed",
        ),
        pytest.param(
            {"status": {"conditions": [{"type": "Programmed", "status": "True", "message": "a"}]}},
            {"status": {"conditions": [{"type": "Programmed", "status": "True", "message": "b"}]}},
            False,
            id="only-a-message",
        ),
        pytest.param({}, {"rv": "99"}, False, id="only-its-version"),
        pytest.param(
            {"status": {"listeners": [{"name": "https", "attachedRoutes": 1}]}},
            {"status": {"listeners": [{"name": "https", "attachedRoutes": 2}]}},
            False,
            id="another-route-attached",
        ),
    ],
)
def test_a_gateway_is_signalled_when_what_routes_depend_on_changes(
    before: dict[str, Any], after: dict[str, Any], changed: bool
) -> None:
    seen = Fingerprints()
    assert seen.changed("ADDED", "g-1", gateway_fingerprint(obj("tenant", **before)))
    assert seen.changed("MODIFIED", "g-1", gateway_fingerprint(obj("tenant", **after))) is changed


def test_the_workspaces_of_a_child_are_its_organizations_namespaces_owners() -> None:
    cluster = marked("cluster/acme/labs", "acme")
    namespaces = [
        marked("workspace/acme/nb", "acme"),
        marked("workspace/acme/nb", "acme"),
        marked("workspace/acme/box", "acme"),
        marked("workspace/other/nb", "other"),  # made by hand in acme's child: not signalled
        marked("cluster/acme/labs", "acme"),  # not a workspace's
        obj("user-namespace"),  # no marks
    ]
    assert workspace_owners(namespaces, cluster) == ["workspace/acme/box", "workspace/acme/nb"]
    assert workspace_owners(namespaces, obj("not-colonys")) == []
