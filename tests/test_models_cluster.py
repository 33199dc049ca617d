"""The rules of cluster and node-pool requests, each with the exact message a user sees."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from clients.errors import InvalidRequestError
from clients.parsing import parse_pool, validated
from models.cluster import ClusterSpec, ClusterStatus, cluster_workflow_id
from models.node_pool import NodePoolSpec, NodePoolStatus, NodeSku, Taint
from models.operations import AddNodePoolRequest, Operation, ScaleNodePoolRequest
from models.workspace_api import cluster_created_outcome


def gpu_pool(name: str = "gpu", **extra: Any) -> dict[str, Any]:
    return {"name": name, "sku": {"gpuModelId": "h100"}, "count": 1, **extra}


def only_message(error: ValidationError) -> str:
    errors = error.errors()
    assert len(errors) == 1, errors
    return str(errors[0]["msg"])


LONG = "a" * 64


@pytest.mark.parametrize(
    ("name", "message"),
    [
        pytest.param("", "cluster name must not be empty", id="empty"),
        pytest.param(
            LONG,
            f"cluster name '{LONG}' is 64 characters long; at most 63 are allowed",
            id="too-long",
        ),
        pytest.param(
            "Training",
            "cluster name 'Training' may contain only lowercase letters, digits and hyphens",
            id="upper",
        ),
        pytest.param(
            "train_1",
            "cluster name 'train_1' may contain only lowercase letters, digits and hyphens",
            id="underscore",
        ),
        pytest.param("1train", "cluster name '1train' must start with a letter", id="digit-first"),
        pytest.param("-train", "cluster name '-train' must start with a letter", id="hyphen-first"),
        pytest.param(
            "train-", "cluster name 'train-' must not end with a hyphen", id="hyphen-last"
        ),
    ],
)
def test_cluster_name_rules(name: str, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ClusterSpec(name=name, location_id="fra")
    assert only_message(caught.value) == message


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("a", id="one-letter"),
        pytest.param("a" * 63, id="63"),
        pytest.param("gpu-2", id="digits"),
    ],
)
def test_valid_names(name: str) -> None:
    assert ClusterSpec(name=name, location_id="fra").name == name
    assert NodePoolSpec.model_validate(gpu_pool(name)).name == name


def test_pool_name_rules_name_the_pool() -> None:
    with pytest.raises(ValidationError) as caught:
        NodePoolSpec.model_validate(gpu_pool("GPU"))
    assert (
        only_message(caught.value)
        == "node pool name 'GPU' may contain only lowercase letters, digits and hyphens"
    )


def test_location_is_required() -> None:
    with pytest.raises(ValidationError) as caught:
        ClusterSpec(name="training", location_id=" ")
    assert only_message(caught.value) == "locationId must not be empty"


def test_camel_case_json_both_ways() -> None:
    spec = ClusterSpec.model_validate(
        {
            "name": "training",
            "locationId": "fra",
            "nodePools": [gpu_pool(), {**gpu_pool("cpu"), "sku": {"cpuSku": "c"}}],
        }
    )
    assert spec.node_pools[0].sku.gpu_model_id == "h100"
    dumped = spec.model_dump(mode="json")
    assert dumped["locationId"] == "fra"
    assert dumped["nodePools"][1]["sku"] == {"gpuModelId": None, "cpuSku": "c"}
    assert dumped["readyDeadline"] == "PT30M"
    assert ClusterSpec.model_validate(dumped) == spec


def test_defaults_and_overrides() -> None:
    spec = ClusterSpec(name="training", location_id="fra")
    assert (spec.template, spec.credential, spec.namespace) == (
        "remote-cluster-1-0-0",
        "remote-cluster-credential",
        "kcm-system",
    )
    assert (spec.ready_deadline, spec.drain_deadline, spec.drain_parallelism) == (
        timedelta(minutes=30),
        timedelta(hours=1),
        2,
    )
    other = ClusterSpec(name="training", location_id="fra", template="t2", namespace="ns")
    assert (other.template, other.namespace) == ("t2", "ns")
    assert cluster_workflow_id("training") == "cluster/training" == spec.workflow_id


@pytest.mark.parametrize(
    ("pools", "message"),
    [
        pytest.param(
            [gpu_pool(f"p{i}") for i in range(11)],
            "a create request takes at most 10 node pools, got 11",
            id="eleven-pools",
        ),
        pytest.param(
            [gpu_pool("gpu"), gpu_pool("gpu")],
            "node pool 'gpu' is given twice; pool names are unique in a cluster",
            id="duplicate",
        ),
        pytest.param(
            [gpu_pool(taints=[{"key": "dedicated", "effect": "NoExecute"}])],
            "cluster 'training' would have no node free of NoSchedule and NoExecute taints; "
            "the GPU operator, MPI operator and cluster DNS need one: keep at least one pool without such taints",
            id="no-free-node",
        ),
    ],
)
def test_create_request_pool_rules(pools: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ClusterSpec.model_validate({"name": "training", "locationId": "fra", "nodePools": pools})
    assert only_message(caught.value) == message


def test_prefer_no_schedule_leaves_a_node_free() -> None:
    spec = ClusterSpec.model_validate(
        {
            "name": "training",
            "locationId": "fra",
            "nodePools": [gpu_pool(taints=[{"key": "dedicated", "effect": "PreferNoSchedule"}])],
        }
    )
    assert spec.node_pools[0].schedulable_for_system_pods


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(
            {"count": 0}, "a node pool's count must be from 1 to 100, got 0", id="count-0"
        ),
        pytest.param(
            {"count": 101}, "a node pool's count must be from 1 to 100, got 101", id="count-101"
        ),
        pytest.param(
            {"sku": {"gpuModelId": "h100", "cpuSku": "c"}},
            "a node pool's sku needs exactly one of gpuModelId or cpuSku",
            id="two-skus",
        ),
        pytest.param(
            {"sku": {}}, "a node pool's sku needs exactly one of gpuModelId or cpuSku", id="no-sku"
        ),
        pytest.param(
            {"sku": {"cpuSku": " "}}, "a node pool's sku must not be empty", id="blank-sku"
        ),
        pytest.param(
            {"labels": {"team/": "x"}},
            "label key 'team/' is invalid: the name part must be 1 to 63 characters, "
            "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric",
            id="label-key-empty-name",
        ),
        pytest.param(
            {"labels": {"/team": "x"}},
            "label key '/team' has an empty prefix",
            id="label-empty-prefix",
        ),
        pytest.param(
            {"labels": {"Bad_Prefix/team": "x"}},
            "label key 'Bad_Prefix/team' has an invalid prefix: it must be a DNS subdomain",
            id="label-bad-prefix",
        ),
        pytest.param(
            {"labels": {"team": "-x"}},
            "label value '-x' for key 'team' is invalid: it must be at most 63 characters, "
            "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric",
            id="label-bad-value",
        ),
        pytest.param(
            {"labels": {"colony.dev/node-pool": "x"}},
            "label key 'colony.dev/node-pool' uses the prefix 'colony.dev/', which Colony reserves",
            id="label-reserved",
        ),
        pytest.param(
            {
                "taints": [
                    {"key": "a", "effect": "NoSchedule"},
                    {"key": "a", "value": "b", "effect": "NoSchedule"},
                ]
            },
            "taint 'a:NoSchedule' is given twice",
            id="taint-twice",
        ),
    ],
)
def test_node_pool_rules(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        NodePoolSpec.model_validate({**gpu_pool(), **change})
    assert only_message(caught.value) == message


@pytest.mark.parametrize(
    ("value", "line"),
    [
        pytest.param(0, "drainParallelism: must be at least 1, got 0", id="zero"),
        pytest.param(21, "drainParallelism: must be at most 20, got 21", id="above-20"),
        pytest.param("4", "drainParallelism: must be an integer, not the string '4'", id="text"),
    ],
)
def test_pool_drain_parallelism_rule(value: object, line: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        validated(NodePoolSpec, gpu_pool(drainParallelism=value))
    assert str(caught.value) == line


def test_pool_drain_parallelism_is_optional_and_parsed_from_the_command_line() -> None:
    assert NodePoolSpec.model_validate(gpu_pool()).drain_parallelism is None
    for given in (1, 20):
        assert validated(NodePoolSpec, gpu_pool(drainParallelism=given)).drain_parallelism == given
    parsed = parse_pool("name=gpu,count=2,gpuModelId=h100,drainParallelism=10")
    assert validated(NodePoolSpec, parsed).drain_parallelism == 10


def test_taint_rules() -> None:
    with pytest.raises(ValidationError) as caught:
        Taint.model_validate({"key": "a b", "effect": "NoSchedule"})
    assert only_message(caught.value).startswith("taint key 'a b' is invalid")
    with pytest.raises(ValidationError) as caught:
        Taint.model_validate({"key": "a", "effect": "Sometimes"})
    assert "'NoSchedule', 'PreferNoSchedule' or 'NoExecute'" in only_message(caught.value)


def test_valid_labels_and_taints() -> None:
    spec = NodePoolSpec.model_validate(
        gpu_pool(
            labels={"example.com/team": "ml", "tier": ""},
            taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        )
    )
    assert spec.labels["tier"] == ""
    assert not spec.schedulable_for_system_pods
    assert str(NodeSku(cpu_sku="c")) == "cpu:c"


def test_operations_round_trip_through_the_union() -> None:
    operation = Operation(id="op-0001", request=ScaleNodePoolRequest(pool="gpu", count=3))
    again = Operation.model_validate_json(operation.model_dump_json())
    assert isinstance(again.request, ScaleNodePoolRequest)
    added = Operation.model_validate(
        {"id": "op-0002", "request": {"kind": "add_node_pool", "pool": gpu_pool()}}
    )
    assert isinstance(added.request, AddNodePoolRequest)
    status = ClusterStatus(
        name="c", location_id="fra", phase="ready", completed_operations=[operation]
    )
    assert status.operation("op-0001") == operation
    assert status.operation("op-0009") is None


@pytest.mark.parametrize("count", [pytest.param(0, id="zero"), pytest.param(101, id="over-100")])
def test_scale_request_count_rule(count: int) -> None:
    with pytest.raises(ValidationError) as caught:
        ScaleNodePoolRequest(pool="gpu", count=count)
    assert only_message(caught.value) == f"a node pool's count must be from 1 to 100, got {count}"


# --- Unknown fields: refused from users, ignored in history and state -------------------------


def test_user_input_refuses_an_unknown_field_naming_it() -> None:
    from models.base import user_input

    data = {
        "name": "a",
        "locationId": "fra1",
        "nodePools": [{"name": "g", "sku": {"cpuSku": "c"}, "count": 1, "cout": 2}],
    }
    with pytest.raises(ValidationError) as caught:
        user_input(ClusterSpec, data)
    error = caught.value.errors()[0]
    assert error["loc"][:2] == ("nodePools", 0)
    assert "unknown field 'cout'" in error["msg"]


def test_state_written_by_another_release_still_loads() -> None:
    from models.cluster import ClusterPhase, ClusterState

    state = ClusterState.model_validate({"phase": "ready", "fieldFromTheFuture": {"x": 1}})
    assert state.phase is ClusterPhase.READY


@pytest.mark.parametrize(
    ("organization", "name", "workflow_id", "deployment_head"),
    [
        pytest.param("", "training", "cluster/training", None, id="operator-managed"),
        pytest.param("acme", "training", "cluster/acme/training", "acme-training--", id="org"),
        pytest.param(
            "a" * 40,
            "training" + "x" * 30,
            f"cluster/{'a' * 40}/training{'x' * 30}",
            "aaa",
            id="long",
        ),
    ],
)
def test_an_organization_qualifies_the_cluster_identity(
    organization: str, name: str, workflow_id: str, deployment_head: str | None
) -> None:
    spec = ClusterSpec(name=name, location_id="fra1", organization=organization)
    assert spec.workflow_id == workflow_id
    if deployment_head is None:
        assert spec.deployment_name == name, "an operator's cluster keeps its plain name"
        return
    assert spec.deployment_name.startswith(deployment_head)
    assert len(f"{spec.deployment_name}-kubeconfig") <= 63
    assert spec.deployment_name == ClusterSpec.model_validate(spec.model_dump()).deployment_name


def test_colliding_organization_names_get_different_cluster_deployments() -> None:
    a = ClusterSpec(name="labs-cx", location_id="fra1", organization="acme")
    b = ClusterSpec(name="cx", location_id="fra1", organization="acme-labs")
    plain = ClusterSpec(name="acme-labs-cx", location_id="fra1")
    assert len({a.deployment_name, b.deployment_name, plain.deployment_name}) == 3


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param(
            {"name": "a--b"},
            "cluster name 'a--b' must not contain '--': Colony reserves it for the names it "
            "derives (a colony's clusters are <colony>--<clusterName>)",
            id="derived-mark",
        ),
        pytest.param(
            {"name": "lab-west", "colony": "lab"},
            "cluster 'lab-west' of colony 'lab' must be named 'lab--<clusterName>'",
            id="member-of-another-form",
        ),
        pytest.param(
            {"name": "lab--a--b", "colony": "lab"},
            "cluster 'lab--a--b' of colony 'lab' must be named 'lab--<clusterName>'",
            id="member-entry-with-the-mark",
        ),
    ],
)
def test_only_a_colony_names_a_cluster_with_the_derived_mark(
    changes: dict[str, str], message: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        ClusterSpec.model_validate({"locationId": "fra1", **changes})
    assert message in str(caught.value)
    member = ClusterSpec(name="lab--west", location_id="fra1", colony="lab")
    assert member.deployment_name != "lab--west", "a member's ClusterDeployment is derived"


def test_an_organization_name_follows_the_name_rules() -> None:
    with pytest.raises(ValidationError) as caught:
        ClusterSpec(name="training", location_id="fra1", organization="Acme")
    assert "organization name 'Acme' may contain only lowercase letters" in str(caught.value)


def create_status(
    phase: str, create_state: str | None, where: str = "completed", reason: str = ""
) -> ClusterStatus:
    """A cluster's status with its create operation in `create_state` (None: no longer listed)."""
    operations: dict[str, Any] = {}
    if create_state is not None:
        create = {
            "id": "op-0001",
            "request": {"kind": "create_cluster"},
            "state": create_state,
            "reason": reason,
        }
        operations = (
            {"currentOperation": create}
            if where == "current"
            else {"queuedOperations": [create]}
            if where == "queued"
            else {"completedOperations": [create]}
        )
    return ClusterStatus.model_validate(
        {"name": "c", "locationId": "fra", "phase": phase, "reason": reason, **operations}
    )


@pytest.mark.parametrize(
    ("status", "saw_creating", "expected"),
    [
        pytest.param(create_status("creating", "running", "current"), False, None, id="creating"),
        pytest.param(
            create_status("ready", "running", "current"), True, None, id="ready-pools-joining"
        ),
        pytest.param(create_status("ready", "queued", "queued"), False, None, id="create-queued"),
        pytest.param(
            create_status("ready", "succeeded"), True, ("created", ""), id="created-after-a-wait"
        ),
        pytest.param(create_status("ready", None), False, ("created", ""), id="long-created"),
        pytest.param(
            create_status("ready", "failed", reason="node pool 'gpu': no hosts"),
            True,
            ("failed", "creating cluster 'c' failed: node pool 'gpu': no hosts"),
            id="create-failed-while-waited-on",
        ),
        pytest.param(
            create_status("ready", "failed", reason="node pool 'gpu': no hosts"),
            False,
            ("created", ""),
            id="create-failed-before-the-workspace",
        ),
        pytest.param(
            create_status("failed", "failed", reason="control plane not ready"),
            False,
            ("failed", "cluster 'c' failed: control plane not ready"),
            id="cluster-failed",
        ),
        pytest.param(
            create_status("deleting", "cancelled", reason="deleted"),
            True,
            ("gone", "cluster 'c' is being deleted"),
            id="deleting",
        ),
        pytest.param(
            create_status("deleted", None), False, ("gone", "cluster 'c' was deleted"), id="deleted"
        ),
    ],
)
def test_a_wait_for_a_clusters_creation_ends_once_the_create_has(
    status: ClusterStatus, saw_creating: bool, expected: tuple[str, str] | None
) -> None:
    found = cluster_created_outcome("c", status, saw_creating=saw_creating)
    assert ((found.outcome.value, found.message) if found else None) == expected
    assert status.creating is (expected is None)


def test_a_pools_status_starts_as_a_copy_of_its_spec() -> None:
    spec = NodePoolSpec.model_validate(
        {
            "name": "gpu",
            "sku": {"gpuModelId": "h100"},
            "count": 2,
            "labels": {"team": "ml"},
            "taints": [{"key": "gpu", "effect": "NoSchedule"}],
            "drainParallelism": 3,
        }
    )

    status = NodePoolStatus.of(spec)

    shared = set(NodePoolSpec.model_fields) & set(NodePoolStatus.model_fields)
    assert shared == {"name", "sku", "count", "labels", "taints", "drain_parallelism"}
    assert {field: getattr(status, field) for field in shared} == {
        field: getattr(spec, field) for field in shared
    }
    assert (status.ready_count, status.nodes, status.waiting_for_hosts) == (0, [], 0)
    status.labels["added"] = "later"
    status.taints.clear()
    assert spec.labels == {"team": "ml"}
    assert len(spec.taints) == 1
