"""Workspace classes: every rule with the message a user sees, quantities, durations, value paths,
and class identity (canonical form, digest, the immutability rule)."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from models.base import user_input
from models.quantity import (
    canonical_quantity,
    format_go_duration,
    parse_go_duration,
    quantity_problem,
)
from models.value_paths import ValuePathError, delete_path, nest_values, parse_value_path
from models.workspace_class import (
    WorkspaceClassSpec,
    canonical_class,
    class_conflict,
    class_digest,
    next_version_name,
)


def jupyter(**changes: Any) -> dict[str, Any]:
    """A valid class (the shape of the hub's jupyter-notebook-0-3-0), with top-level changes."""
    data: dict[str, Any] = {
        "name": "jupyter-notebook-0-3-0",
        "displayName": "Jupyter Notebook",
        "serviceTemplate": {"name": "jupyter-notebook-0-3-0", "namespace": "kcm-system"},
        "defaultResources": {
            "replicas": 1,
            "perReplica": {"cpu": "4", "memory": "8Gi", "storage": "20Gi", "gpuCount": 0},
        },
        "accessEndpoints": [{"name": "http", "protocol": "HTTP", "port": 80}],
        "userFacingConfig": [
            {
                "helmValuePath": "notebookPassword",
                "displayName": "Notebook Password",
                "type": "secret",
                "required": True,
            }
        ],
        "deployTimeout": "15m",
    }
    data.update(changes)
    return data


def with_path(path: str, value: Any) -> dict[str, Any]:
    """`jupyter()` with one nested field set (dotted path; list indexes as numbers)."""
    data = jupyter()
    node: Any = data
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node[part]
    last = parts[-1]
    if last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return data


def only_message(error: ValidationError) -> str:
    errors = error.errors()
    assert len(errors) == 1, errors
    return str(errors[0]["msg"])


def test_valid_class_reads_as_the_crd_writes_it() -> None:
    spec = user_input(WorkspaceClassSpec, jupyter())
    assert spec.deploy_timeout == timedelta(minutes=15)
    assert spec.prompts[0].type == "secret"
    assert spec.effective_prerequisite_deploy_timeout == timedelta(minutes=15)
    dumped = spec.model_dump(mode="json", exclude_none=True)
    assert dumped["deployTimeout"] == "15m"
    assert dumped["defaultResources"]["perReplica"]["gpuCount"] == 0
    assert WorkspaceClassSpec.model_validate_json(spec.model_dump_json()) == spec


def test_deploy_timeout_defaults_to_15_minutes() -> None:
    data = jupyter()
    del data["deployTimeout"]
    assert user_input(WorkspaceClassSpec, data).deploy_timeout == timedelta(minutes=15)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(
            jupyter(name="Jupyter"),
            "workspace class name 'Jupyter' must be a DNS label: lowercase letters, digits and "
            "'-', starting and ending with a letter or digit",
            id="class-name-upper",
        ),
        pytest.param(
            jupyter(name="j" * 64),
            f"workspace class name '{'j' * 64}' is 64 characters long; at most 63 are allowed",
            id="class-name-long",
        ),
        pytest.param(jupyter(displayName=" "), "displayName must not be empty", id="display-name"),
        pytest.param(
            with_path("defaultResources.perReplica.cpu", "4 cores"),
            "cpu '4 cores' is not a Kubernetes quantity: write a number with an optional suffix, "
            'such as "4", "500m", "16Gi" or "100G"',
            id="cpu-not-quantity",
        ),
        pytest.param(
            with_path("defaultResources.perReplica.memory", "-8Gi"),
            "memory '-8Gi' must not be negative",
            id="memory-negative",
        ),
        pytest.param(
            with_path("defaultResources.perReplica.storage", True),
            'storage must be a Kubernetes quantity such as "4", "500m" or "16Gi", got True',
            id="storage-bool",
        ),
        pytest.param(
            with_path("defaultResources.perReplica.gpuCount", -1),
            "gpuCount must be from 0 to 64 GPUs per replica, got -1",
            id="gpu-count-negative",
        ),
        pytest.param(
            with_path("defaultResources.replicas", 0),
            "replicas must be at least 1, got 0",
            id="replicas-zero",
        ),
        pytest.param(
            with_path("defaultResources.perReplica.gpuType", "H100"),
            "gpuType cannot be set on a WorkspaceClass — it is a per-deployment cluster-dependent choice",
            id="gpu-type-on-class",
        ),
        pytest.param(
            with_path(
                "defaultResources.perReplica.gpuNodeSelector", {"nvidia.com/gpu.product": "L40"}
            ),
            "gpuNodeSelector cannot be set on a WorkspaceClass — it is a per-deployment "
            "cluster-dependent choice",
            id="gpu-selector-on-class",
        ),
        pytest.param(
            jupyter(
                accessEndpoints=[
                    {"name": "http", "protocol": "HTTP", "port": 80},
                    {"name": "http", "protocol": "TCP", "port": 81},
                ]
            ),
            "accessEndpoints: access endpoint 'http' is given twice; it must be unique",
            id="endpoint-twice",
        ),
        pytest.param(
            with_path("accessEndpoints.0.name", "Web_UI"),
            "access endpoint name 'Web_UI' must be a DNS label: lowercase letters, digits and '-', "
            "starting and ending with a letter or digit",
            id="endpoint-name",
        ),
        pytest.param(
            with_path("accessEndpoints.0.port", 70000),
            "port must be from 1 to 65535, got 70000",
            id="endpoint-port",
        ),
        pytest.param(
            with_path("accessEndpoints.0.serviceName", "Proxy.Public"),
            "Service name 'Proxy.Public' must be a DNS label: lowercase letters, digits and '-', "
            "starting and ending with a letter or digit",
            id="endpoint-service-name",
        ),
        pytest.param(
            with_path("userFacingConfig.0.default", "hunter2"),
            "prompt 'notebookPassword': a secret prompt cannot have a default: a class is public, "
            "its defaults are not secret",
            id="secret-default",
        ),
        pytest.param(
            jupyter(
                userFacingConfig=[
                    {"helmValuePath": "port", "displayName": "Port", "type": "int", "default": "80"}
                ]
            ),
            "prompt 'port': default '80' is not a int",
            id="int-default-string",
        ),
        pytest.param(
            jupyter(
                userFacingConfig=[
                    {"helmValuePath": "gpu", "displayName": "GPU", "type": "int", "default": True}
                ]
            ),
            "prompt 'gpu': default True is not a int",
            id="int-default-bool",
        ),
        pytest.param(
            jupyter(
                userFacingConfig=[
                    {
                        "helmValuePath": "debug",
                        "displayName": "Debug",
                        "type": "bool",
                        "default": "yes",
                    }
                ]
            ),
            "prompt 'debug': default 'yes' is not a bool",
            id="bool-default-string",
        ),
        pytest.param(
            jupyter(
                userFacingConfig=[
                    {
                        "helmValuePath": "ui",
                        "displayName": "UI",
                        "options": ["lab", "notebook"],
                        "default": "classic",
                    }
                ]
            ),
            "prompt 'ui': default 'classic' is not one of the options ['lab', 'notebook']",
            id="default-not-an-option",
        ),
        pytest.param(
            jupyter(
                userFacingConfig=[
                    {
                        "helmValuePath": "debug",
                        "displayName": "Debug",
                        "type": "bool",
                        "options": ["true"],
                    }
                ]
            ),
            "prompt 'debug': options are for string and int prompts, not bool",
            id="options-on-bool",
        ),
        pytest.param(
            jupyter(
                userFacingConfig=[
                    {
                        "helmValuePath": "n",
                        "displayName": "N",
                        "type": "int",
                        "options": ["1", "two"],
                    }
                ]
            ),
            "prompt 'n': the options of an int prompt must be integers",
            id="int-options",
        ),
        pytest.param(
            jupyter(
                userFacingConfig=[
                    {"helmValuePath": "ui", "displayName": "UI", "options": ["lab", "lab"]}
                ]
            ),
            "prompt 'ui': options must not repeat an answer",
            id="options-repeat",
        ),
        pytest.param(
            jupyter(
                userFacingConfig=[
                    {"helmValuePath": "a.b", "displayName": "A"},
                    {"helmValuePath": "a.b", "displayName": "B"},
                ]
            ),
            "userFacingConfig: prompt helmValuePath 'a.b' is given twice; it must be unique",
            id="prompt-twice",
        ),
        pytest.param(
            jupyter(userFacingConfig=[{"helmValuePath": "_exalsius.x", "displayName": "X"}]),
            "helmValuePath '_exalsius.x' is under '_exalsius', which Colony writes",
            id="prompt-reserved",
        ),
        pytest.param(
            jupyter(userFacingConfig=[{"helmValuePath": "a..b", "displayName": "X"}]),
            "helmValuePath: path 'a..b' has an empty segment",
            id="prompt-path",
        ),
        pytest.param(
            jupyter(resourceInjection={"cpu": ["limits[nvidia.com/gpu]"]}),
            "resourceInjection.cpu: path 'limits[nvidia.com/gpu]' has a bracket segment without "
            'quotes; write it as ["key"]',
            id="injection-unquoted",
        ),
        pytest.param(
            jupyter(resourceInjection={"gpuCount": ["_exalsius.gpus"]}),
            "resourceInjection.gpuCount path '_exalsius.gpus' is under '_exalsius', which Colony "
            "writes itself",
            id="injection-reserved",
        ),
        pytest.param(
            jupyter(resourceInjection={"cpu": ["a.cpu", "a.cpu"]}),
            "resourceInjection.cpu lists a path twice",
            id="injection-twice",
        ),
        pytest.param(
            jupyter(deployTimeout="15 minutes"),
            "deployTimeout: duration '15 minutes' is not a Go duration: write a number and a unit, "
            'such as "15m", "1h30m" or "90s"',
            id="timeout-syntax",
        ),
        pytest.param(
            jupyter(deployTimeout="0"),
            "a deploy timeout must be more than 0 and at most 24h, got 0s",
            id="timeout-zero",
        ),
        pytest.param(
            jupyter(prerequisiteDeployTimeout="25h"),
            "a deploy timeout must be more than 0 and at most 24h, got 25h",
            id="prerequisite-timeout-long",
        ),
        pytest.param(
            jupyter(prerequisites=[{"serviceTemplate": {"name": "jupyter-notebook-0-3-0"}}]),
            "prerequisites: ServiceTemplate 'jupyter-notebook-0-3-0' is the class's own template",
            id="prerequisite-self",
        ),
        pytest.param(
            jupyter(
                prerequisites=[
                    {"serviceTemplate": {"name": "stack"}},
                    {"serviceTemplate": {"name": "stack"}, "namespace": "other"},
                ]
            ),
            "prerequisites: prerequisite ServiceTemplate 'stack' is given twice; it must be unique",
            id="prerequisite-twice",
        ),
        pytest.param(
            jupyter(prerequisites=[{"serviceTemplate": {"name": "stack"}, "namespace": "Infra"}]),
            "prerequisite namespace name 'Infra' must be a DNS label: lowercase letters, digits "
            "and '-', starting and ending with a letter or digit",
            id="prerequisite-namespace",
        ),
        pytest.param(
            with_path("serviceTemplate.name", "Jupyter_1"),
            "ServiceTemplate name 'Jupyter_1' must be lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit",
            id="template-name",
        ),
        pytest.param(
            jupyter(defaultValues={"_exalsius": {"resources": {}}}),
            "defaultValues must not set '_exalsius': Colony writes it from the resources",
            id="default-values-reserved",
        ),
        pytest.param(
            jupyter(defaultValues={"notebookPassword": "changeme"}),
            "defaultValues sets 'notebookPassword', a secret prompt: a class is public, its "
            "values are not secret",
            id="default-values-secret",
        ),
        pytest.param(
            jupyter(userFacingConfig=[{"helmValuePath": "x", "displayName": "X", "type": "file"}]),
            "Input should be 'string', 'int', 'bool', 'secret' or 'publicKey'",
            id="prompt-type",
        ),
        pytest.param(
            jupyter(defaultResources={"perReplica": {"gpuVendor": "Intel"}}),
            "Input should be 'NVIDIA' or 'AMD'",
            id="gpu-vendor",
        ),
        pytest.param(
            jupyter(icon="jupyter.png"),
            "unknown field 'icon' (known fields: accessEndpoints, defaultResources, defaultValues, "
            "deployTimeout, description, displayName, name, prerequisiteDeployTimeout, "
            "prerequisites, resourceInjection, serviceTemplate, userFacingConfig)",
            id="unknown-field",
        ),
    ],
)
def test_class_rules(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        user_input(WorkspaceClassSpec, data)
    assert only_message(caught.value) == message


def test_errors_name_the_field() -> None:
    with pytest.raises(ValidationError) as caught:
        user_input(WorkspaceClassSpec, with_path("accessEndpoints.0.port", 0))
    (error,) = caught.value.errors()
    assert error["loc"] == ("accessEndpoints", 0, "port")


@pytest.mark.parametrize(
    ("prompt"),
    [
        pytest.param({"type": "int", "default": 8192}, id="int"),
        pytest.param({"type": "bool", "default": False}, id="bool"),
        pytest.param(
            {"type": "string", "options": ["lab", "notebook"], "default": "lab"}, id="options"
        ),
        pytest.param({"type": "int", "options": ["1", "2"], "default": 2}, id="int-options"),
        pytest.param({"type": "publicKey", "required": True}, id="public-key"),
        pytest.param({"type": "secret", "required": False}, id="optional-secret"),
    ],
)
def test_prompt_defaults_consistent_with_type(prompt: dict[str, Any]) -> None:
    data = jupyter(userFacingConfig=[{"helmValuePath": "x.y", "displayName": "X", **prompt}])
    assert user_input(WorkspaceClassSpec, data).prompts[0].helm_value_path == "x.y"


# --- quantities, durations, paths ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        pytest.param("4", "4", id="integer"),
        pytest.param(4, "4", id="yaml-int"),
        pytest.param("500m", "500m", id="milli"),
        pytest.param("0.5", "500m", id="fraction"),
        pytest.param("2000", "2k", id="thousands"),
        pytest.param("1500", "1500", id="not-a-multiple"),
        pytest.param("16Gi", "16Gi", id="binary"),
        pytest.param("1024Mi", "1Gi", id="binary-up"),
        pytest.param("1.5Gi", "1536Mi", id="binary-fraction"),
        pytest.param("512", "512", id="small"),
        pytest.param("0.5Ki", "512", id="binary-below-1ki"),
        pytest.param("1.1Ki", "1126400m", id="binary-not-whole"),
        pytest.param("100G", "100G", id="decimal-suffix"),
        pytest.param("1e3", "1e3", id="exponent"),
        pytest.param("0", "0", id="zero"),
        pytest.param("0.0000000001", "1n", id="rounds-up-to-nano"),
    ],
)
def test_canonical_quantity_is_kubernetes_string(given: str | int, canonical: str) -> None:
    assert canonical_quantity(given) == canonical


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("4x", id="unit"),
        pytest.param("Gi", id="no-number"),
        pytest.param("1.5e1.5", id="fractional-exponent"),
        pytest.param("", id="empty"),
        pytest.param([4], id="list"),
    ],
)
def test_not_quantities(value: Any) -> None:
    assert quantity_problem("cpu", value) is not None


@pytest.mark.parametrize(
    ("text", "expected", "written"),
    [
        pytest.param("15m", timedelta(minutes=15), "15m", id="minutes"),
        pytest.param("1h30m", timedelta(minutes=90), "1h30m", id="hours-minutes"),
        pytest.param("90s", timedelta(seconds=90), "1m30s", id="seconds"),
        pytest.param("2.5h", timedelta(hours=2, minutes=30), "2h30m", id="fraction"),
        pytest.param("1500ms", timedelta(seconds=1.5), "1.5s", id="milliseconds"),
        pytest.param("0", timedelta(0), "0s", id="zero"),
    ],
)
def test_go_durations(text: str, expected: timedelta, written: str) -> None:
    assert parse_go_duration(text) == expected
    assert format_go_duration(expected) == written
    assert parse_go_duration(written) == expected


@pytest.mark.parametrize("text", ["15", "m", "1d", "-5m", "15m garbage", ""])
def test_not_go_durations(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_go_duration(text)


@pytest.mark.parametrize(
    ("path", "segments"),
    [
        pytest.param("a.b.c", ["a", "b", "c"], id="dots"),
        pytest.param('a["b.c"].d', ["a", "b.c", "d"], id="double-quoted"),
        pytest.param("a['nvidia.com/gpu']", ["a", "nvidia.com/gpu"], id="single-quoted"),
        pytest.param('limits["x"]["y"]', ["limits", "x", "y"], id="brackets-in-a-row"),
        pytest.param("one", ["one"], id="one"),
    ],
)
def test_value_paths(path: str, segments: list[str]) -> None:
    assert parse_value_path(path) == segments


@pytest.mark.parametrize(
    ("path", "message"),
    [
        pytest.param("", "path is empty", id="empty"),
        pytest.param("a.", "ends with a dot", id="trailing-dot"),
        pytest.param(".a", "empty segment", id="leading-dot"),
        pytest.param("a[b]", "without quotes", id="unquoted"),
        pytest.param('a["b"', "missing a closing bracket", id="unclosed"),
        pytest.param('a["b', "unterminated", id="unterminated"),
        pytest.param('a[""]', "empty quoted segment", id="empty-quoted"),
        pytest.param('a["b"]c', "right after a bracket segment", id="after-bracket"),
    ],
)
def test_bad_value_paths(path: str, message: str) -> None:
    with pytest.raises(ValuePathError, match=message):
        parse_value_path(path)


def test_nest_and_delete_paths() -> None:
    tree = nest_values({"a.b": 1, 'a["c.d"]': 2, "e": 3})
    assert tree == {"a": {"b": 1, "c.d": 2}, "e": 3}
    assert delete_path(tree, ["a", "b"]) == 1
    assert delete_path(tree, ["a", "c.d"]) == 2
    assert tree == {"e": 3}, "maps a removal empties go too"


# --- identity -----------------------------------------------------------------------------------


def spec(data: dict[str, Any]) -> WorkspaceClassSpec:
    return user_input(WorkspaceClassSpec, data)


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(with_path("defaultResources.perReplica.cpu", "4000m"), id="cpu-spelling"),
        pytest.param(
            with_path("defaultResources.perReplica.memory", "8192Mi"), id="memory-spelling"
        ),
        pytest.param(with_path("defaultResources.perReplica.cpu", 4), id="cpu-as-int"),
        pytest.param(with_path("defaultResources.replicas", None), id="replicas-implicit"),
        pytest.param(jupyter(deployTimeout="900s"), id="timeout-spelling"),
        pytest.param(
            {k: v for k, v in jupyter().items() if k != "deployTimeout"}, id="timeout-default"
        ),
        pytest.param(jupyter(prerequisiteDeployTimeout="15m"), id="prerequisite-timeout-resolved"),
        pytest.param(jupyter(defaultValues={}, prerequisites=[]), id="empty-lists"),
    ],
)
def test_same_definition_same_canonical_form(variant: dict[str, Any]) -> None:
    assert canonical_class(spec(variant)) == canonical_class(spec(jupyter()))
    assert class_digest(spec(variant)) == class_digest(spec(jupyter()))
    assert class_conflict(spec(jupyter()), spec(variant)) is None


def test_injection_paths_are_a_set() -> None:
    one = jupyter(resourceInjection={"cpu": ["a.cpu", "b.cpu"]})
    other = jupyter(resourceInjection={"cpu": ["b.cpu", "a.cpu"]})
    assert class_digest(spec(one)) == class_digest(spec(other))


def test_endpoint_order_matters() -> None:
    endpoints = [
        {"name": "api", "protocol": "HTTP", "port": 8000},
        {"name": "ui", "protocol": "HTTP", "port": 3000},
    ]
    one = spec(jupyter(accessEndpoints=endpoints))
    other = spec(jupyter(accessEndpoints=list(reversed(endpoints))))
    assert class_digest(one) != class_digest(other), (
        "the first HTTP endpoint gets the bare hostname"
    )


@pytest.mark.parametrize(
    ("change", "where"),
    [
        pytest.param(
            with_path("defaultResources.perReplica.cpu", "8"),
            "spec.defaultResources.perReplica.cpu",
            id="cpu",
        ),
        pytest.param(jupyter(description="now with GPUs"), "spec.description", id="description"),
        pytest.param(
            # The prerequisites' timeout follows the class's when unset: both change.
            jupyter(deployTimeout="20m"),
            "spec.deployTimeout, spec.prerequisiteDeployTimeout",
            id="timeout",
        ),
        pytest.param(
            with_path("userFacingConfig.0.required", False),
            "spec.userFacingConfig[0].required",
            id="prompt",
        ),
    ],
)
def test_publishing_a_different_definition_is_refused(change: dict[str, Any], where: str) -> None:
    message = class_conflict(spec(jupyter()), spec(change))
    assert message is not None
    assert message.startswith(
        "workspace class 'jupyter-notebook-0-3-0' already exists with a different definition "
        f"(it differs at {where})"
    )
    assert message.endswith("a new version is a new name, such as 'jupyter-notebook-0-3-1'")


def test_different_names_never_conflict() -> None:
    assert (
        class_conflict(
            spec(jupyter()), spec(jupyter(name="jupyter-notebook-0-4-0", description="x"))
        )
        is None
    )


def test_conflict_lists_at_most_three_differences() -> None:
    changed = copy.deepcopy(jupyter(description="a", deployTimeout="20m"))
    changed["defaultResources"]["perReplica"].update(cpu="8", memory="16Gi")
    message = class_conflict(spec(jupyter()), spec(changed))
    # cpu, memory, deployTimeout, description, and the resolved prerequisiteDeployTimeout.
    assert message is not None
    assert "and 2 more)" in message


@pytest.mark.parametrize(
    ("name", "following"),
    [
        pytest.param("jupyter-notebook-0-3-0", "jupyter-notebook-0-3-1", id="versioned"),
        pytest.param("colony-vllm-1-0-9", "colony-vllm-1-0-10", id="two-digits"),
        pytest.param("my-class", "my-class-1-0-0", id="unversioned"),
    ],
)
def test_next_version_name(name: str, following: str) -> None:
    assert next_version_name(name) == following
