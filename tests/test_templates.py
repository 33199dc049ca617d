"""A cluster template's values checked against its own schema, and the pool its MachineDeployment
is (`models.templates`), on k0rdent's real template schemas (`../shared/k0rdent-templates/`, read
at test time; skipped when absent)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from models.templates import config_problems, schema_problem, template_pool

SHARED = Path(os.environ.get("COLONY_SHARED_DIR") or Path(__file__).resolve().parents[2] / "shared")
TEMPLATES = SHARED / "k0rdent-templates"

pytestmark = pytest.mark.skipif(
    not TEMPLATES.is_dir(), reason=f"k0rdent's templates not found at {TEMPLATES}"
)


def defaults(chart: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((TEMPLATES / chart / "values.yaml").read_text())
    return loaded


def schema(chart: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((TEMPLATES / chart / "values.schema.json").read_text())
    return loaded


AWS_OK = {
    "controlPlaneNumber": 1,
    "workersNumber": 2,
    "region": "eu-central-1",
    "clusterIdentity": {"name": "aws-cluster-identity", "namespace": "kcm-system"},
    "worker": {"instanceType": "g6e.xlarge", "iamInstanceProfile": "nodes"},
}


@pytest.mark.parametrize(
    "chart",
    ["aws-standalone-cp", "azure-standalone-cp", "gcp-standalone-cp", "vsphere-standalone-cp",
     "remote-cluster", "docker-hosted-cp"],
)  # fmt: skip
def test_real_schemas_are_usable(chart: str) -> None:
    assert schema_problem(schema(chart)) is None


def test_a_valid_config_has_no_problems() -> None:
    assert config_problems(schema("aws-standalone-cp"), AWS_OK, defaults("aws-standalone-cp")) == []


@pytest.mark.parametrize(
    ("change", "field", "rule"),
    [
        pytest.param({"workersNumber": -1}, "config.workersNumber", "minimum", id="minimum"),
        pytest.param({"workersNumber": "two"}, "config.workersNumber", "not of type", id="type"),
        pytest.param({"region": None}, "config.region", "not of type", id="null"),
        pytest.param(
            {"worker": {"instanceType": 5}}, "config.worker.instanceType", "not of type",
            id="nested",
        ),
    ],
)  # fmt: skip
def test_a_refusal_names_the_field_and_the_rule(
    change: dict[str, Any], field: str, rule: str
) -> None:
    problems = config_problems(
        schema("aws-standalone-cp"), {**AWS_OK, **change}, defaults("aws-standalone-cp")
    )
    assert problems, "refused"
    assert problems[0].startswith(f"{field}: "), problems
    assert rule in problems[0] or "less than the minimum" in problems[0], problems


def test_a_missing_top_level_value_is_named() -> None:
    config = {k: v for k, v in AWS_OK.items() if k != "clusterIdentity"}
    assert config_problems(schema("aws-standalone-cp"), config) == [
        "config.clusterIdentity: 'clusterIdentity' is a required property",
    ]


@pytest.mark.parametrize(
    ("chart", "config", "expected"),
    [
        pytest.param("aws-standalone-cp", AWS_OK, ("g6e.xlarge", 2, 0), id="aws"),
        pytest.param("azure-standalone-cp", {"workersNumber": 3, "worker": {"vmSize": "Standard_NC24ads_A100_v4"}},
                     ("Standard_NC24ads_A100_v4", 3, 0), id="azure"),
        pytest.param("gcp-standalone-cp", {"workersNumber": 1, "worker": {"instanceType": "a3-highgpu-1g"}},
                     ("a3-highgpu-1g", 1, 0), id="gcp"),
        pytest.param("vsphere-standalone-cp", {"workersNumber": 1, "worker": {"vmTemplate": "ubuntu-2204-h100"}},
                     ("ubuntu-2204-h100", 1, 0), id="vsphere"),
    ],
)  # fmt: skip
def test_cloud_templates_have_a_workers_pool(
    chart: str, config: dict[str, Any], expected: tuple[str, int, int]
) -> None:
    pool = template_pool(schema(chart), config)
    assert pool is not None
    assert (pool.instance_type, pool.count, pool.minimum) == expected
    assert pool.name == "workers"


@pytest.mark.parametrize("chart", ["remote-cluster", "docker-hosted-cp"])
def test_templates_without_sized_workers_have_no_pool(chart: str) -> None:
    assert template_pool(schema(chart), {"workersNumber": 2}) is None
