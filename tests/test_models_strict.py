"""Integers and booleans from users are strict (issue 13): `models.base.user_input` refuses a string,
a boolean or a fraction for an integer and anything but true/false for a boolean, naming the field,
at any depth; state and history read by `model_validate` stay lenient (a release must replay
yesterday's histories whatever they hold).
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from api.views import ClusterCreateRequest, NodePoolScaleRequest, WorkspaceDeployRequest
from clients.errors import InvalidRequestError
from clients.parsing import validated
from models.base import user_input
from models.cluster import ClusterSpec
from models.operations import ScaleNodePoolRequest

POOL = {"name": "gpu", "sku": {"gpuModelId": "h100-80gb"}, "count": 2}


@pytest.mark.parametrize(
    ("model", "data", "message"),
    [
        pytest.param(
            NodePoolScaleRequest,
            {"count": "3"},
            "count: must be an integer, not the string '3'",
            id="count-string",
        ),
        pytest.param(
            NodePoolScaleRequest,
            {"count": True},
            "count: must be an integer, not the boolean true",
            id="count-boolean",
        ),
        pytest.param(
            NodePoolScaleRequest,
            {"count": 3.0},
            "count: must be an integer, not the number 3",
            id="count-float",
        ),
        pytest.param(
            NodePoolScaleRequest,
            {"count": 3, "force": 1},
            "force: must be true or false, not the number 1",
            id="force-one",
        ),
        pytest.param(
            ClusterCreateRequest,
            {"name": "t", "locationId": "fra1", "waitForCapacity": "yes"},
            "waitForCapacity: must be true or false, not the string 'yes'",
            id="wait-yes",
        ),
        pytest.param(
            ClusterCreateRequest,
            {"name": "t", "locationId": "fra1", "nodePools": [POOL, {**POOL, "count": "3"}]},
            "nodePools[1].count: must be an integer, not the string '3'",
            id="nested-count",
        ),
        pytest.param(
            WorkspaceDeployRequest,
            {"name": "nb", "class": "c", "cluster": "t", "gpus": "1"},
            "gpus: must be an integer, not the string '1'",
            id="optional-integer",
        ),
        pytest.param(
            WorkspaceDeployRequest,
            {"name": "nb", "class": "c", "cluster": "t", "resources": {"replicas": [1]}},
            "resources.replicas: must be an integer, not a list",
            id="nested-optional-integer",
        ),
        pytest.param(
            ScaleNodePoolRequest,
            {"pool": "gpu", "count": 2, "wait_for_capacity": "false"},
            "waitForCapacity: must be true or false, not the string 'false'",
            id="python-name",
        ),
    ],
)
def test_users_give_integers_and_booleans_of_their_type(
    model: type[Any], data: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        validated(model, data)
    assert refused.value.message == message


def test_every_wrong_type_is_named() -> None:
    with pytest.raises(ValidationError) as refused:
        user_input(NodePoolScaleRequest, {"count": "3", "force": "no"})
    assert [e["loc"] for e in refused.value.errors()] == [("count",), ("force",)]


def test_right_types_and_none_pass() -> None:
    assert validated(NodePoolScaleRequest, {"count": 3, "force": True}).count == 3
    deploy = validated(WorkspaceDeployRequest, {"name": "n", "class": "c", "cluster": "t"})
    assert deploy.gpus is None
    spec = validated(ClusterSpec, {"name": "t", "locationId": "fra1", "readyDeadline": "PT5M"})
    assert spec.ready_deadline.total_seconds() == 300


def test_state_and_history_stay_lenient() -> None:
    """Not user input: what a workflow wrote is read as it was written."""
    assert NodePoolScaleRequest.model_validate({"count": "3"}).count == 3


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(
            {"name": "t", "locationId": "fra1", "nodePools": [{**POOL, "count": "two"}]},
            "nodePools[0].count: 'two' is not a whole number",
            id="count-words",
        ),
        pytest.param({"locationId": "fra1"}, "name: required", id="missing"),
        pytest.param(
            {"name": None, "locationId": "fra1"}, "name: must be a string, not null", id="null"
        ),
        pytest.param(
            {"name": "t", "locationId": ["fra1"]},
            "locationId: must be a string, not a list",
            id="string-a-list",
        ),
        pytest.param(
            {"name": "t", "locationId": "fra1", "nodePools": {}},
            "nodePools: must be a list, not an object",
            id="list-an-object",
        ),
        pytest.param(
            {"name": "t", "locationId": "fra1", "nodePools": ["gpu"]},
            "nodePools[0]: must be an object, not the string 'gpu'",
            id="object-a-string",
        ),
        pytest.param(
            {"name": "t", "locationId": "fra1", "readyDeadline": "soon"},
            "readyDeadline: 'soon' is not a duration (seconds, or ISO 8601 like PT30M)",
            id="duration",
        ),
        pytest.param(
            {
                "name": "t",
                "locationId": "fra1",
                "nodePools": [{**POOL, "taints": [{"key": "a", "effect": "Sometimes"}]}],
            },
            "nodePools[0].taints[0].effect: 'Sometimes' is not one of 'NoSchedule', "
            "'PreferNoSchedule', 'NoExecute'",
            id="enum",
        ),
        pytest.param(
            {"name": "t", "locationId": "fra1", "drainParallelism": 50},
            "drainParallelism: must be at most 20, got 50",
            id="bound",
        ),
    ],
)
def test_pydantics_own_words_never_reach_a_user(data: dict[str, Any], message: str) -> None:
    """Every refusal says the rule in Colony's words, whatever rule pydantic checked."""
    with pytest.raises(InvalidRequestError) as refused:
        validated(ClusterSpec, data)
    assert refused.value.message == message
