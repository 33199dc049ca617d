"""Values: Helm's merge, `--set` parsing, resources field by field, prompts, resource injection in
the exalsius operator's shape, and secrets kept out of plain values."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from models.capacity import GpuSelector
from models.sealed import SealedValue
from models.values import (
    SetError,
    ValuesError,
    capacity_request,
    effective_values,
    gpu_selector,
    merge_values,
    merge_workspace,
    parse_set,
    resolve_resources,
    split_plaintext_secrets,
    user_values,
)
from models.workspace import WorkspaceSpec
from models.workspace_class import WorkspaceClassSpec, WorkspaceResources


def sealed(path: str) -> SealedValue:
    return SealedValue(
        key_id="k", scope=f"workspace/nb/{path}", ephemeral_key="e", nonce="n", ciphertext="c"
    )


NOTEBOOK = WorkspaceClassSpec.model_validate(
    {
        "name": "notebook-1-0-0",
        "displayName": "Notebook",
        "serviceTemplate": {"name": "notebook-1-0-0"},
        "defaultResources": {
            "replicas": 1,
            "perReplica": {"cpu": "2", "memory": "8192Mi", "storage": "20Gi", "gpuCount": 0},
        },
        "userFacingConfig": [
            {
                "helmValuePath": "auth.password",
                "displayName": "Password",
                "type": "secret",
                "required": True,
            },
            {
                "helmValuePath": "ui",
                "displayName": "UI",
                "options": ["lab", "notebook"],
                "default": "lab",
            },
            {"helmValuePath": "idle.minutes", "displayName": "Idle", "type": "int", "default": 60},
            {"helmValuePath": "debug", "displayName": "Debug", "type": "bool"},
            {"helmValuePath": "ssh.key", "displayName": "Key", "type": "publicKey"},
            {"helmValuePath": "model", "displayName": "Model", "required": True},
        ],
        "defaultValues": {"image": {"repository": "jupyter", "tag": "1"}, "extraEnv": ["A=1"]},
        "resourceInjection": {
            "cpu": ["resources.cpu"],
            "memory": ["resources.memory"],
            "gpuCount": ['resources["nvidia.com/gpu"]'],
            "replicas": ["replicas"],
        },
    }
)


def spec(**changes: Any) -> WorkspaceSpec:
    data: dict[str, Any] = {
        "name": "nb",
        "class": "notebook-1-0-0",
        "cluster": "training",
        "answers": {"model": "qwen"},
        "sealedAnswers": {"auth.password": sealed("auth.password")},
    }
    data.update(changes)
    return WorkspaceSpec.model_validate(data)


# --- Helm's merge ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "override", "merged"),
    [
        pytest.param(
            {"a": {"b": 1, "c": 2}},
            {"a": {"c": 3, "d": 4}},
            {"a": {"b": 1, "c": 3, "d": 4}},
            id="maps-merge",
        ),
        pytest.param({"a": [1, 2, 3]}, {"a": [4]}, {"a": [4]}, id="lists-replace"),
        pytest.param({"a": {"b": 1}}, {"a": "flat"}, {"a": "flat"}, id="scalar-replaces-map"),
        pytest.param({"a": "flat"}, {"a": {"b": 1}}, {"a": {"b": 1}}, id="map-replaces-scalar"),
        pytest.param(
            {"a": {"b": 1}, "c": 2}, {"a": None}, {"a": None, "c": 2}, id="null-is-kept-for-helm"
        ),
        pytest.param(
            {"a": {"b": {"c": 1, "d": 2}}},
            {"a": {"b": {"d": None}}},
            {"a": {"b": {"c": 1, "d": None}}},
            id="deep-null",
        ),
        pytest.param({}, {"a": 1}, {"a": 1}, id="empty-base"),
        pytest.param({"a": 1}, {}, {"a": 1}, id="empty-override"),
    ],
)
def test_merge_values_as_helm_merges_files(
    base: dict[str, Any], override: dict[str, Any], merged: dict[str, Any]
) -> None:
    before = (copy.deepcopy(base), copy.deepcopy(override))
    assert merge_values(base, override) == merged
    assert (base, override) == before, "inputs are not modified"


def test_null_deletes_the_key_in_what_the_chart_sees() -> None:
    merged = merge_values({"a": {"b": 1, "c": 2}, "d": 3}, {"a": {"b": None}, "d": None})
    assert effective_values(merged) == {"a": {"c": 2}}


def test_merge_result_shares_nothing_with_inputs() -> None:
    base = {"a": {"b": [1]}}
    merged = merge_values(base, {})
    merged["a"]["b"].append(2)
    assert base == {"a": {"b": [1]}}


# --- --set ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "values"),
    [
        pytest.param("a=b", {"a": "b"}, id="string"),
        pytest.param("a.b.c=1", {"a": {"b": {"c": 1}}}, id="dots-and-int"),
        pytest.param("a=1,b=2", {"a": 1, "b": 2}, id="comma"),
        pytest.param("a=true,b=FALSE", {"a": True, "b": False}, id="bools"),
        pytest.param("a=null", {"a": None}, id="null"),
        pytest.param("a=0", {"a": 0}, id="zero"),
        pytest.param("a=007", {"a": "007"}, id="leading-zero-stays-text"),
        pytest.param("a=1.5", {"a": "1.5"}, id="floats-stay-text"),
        pytest.param("a=-3", {"a": -3}, id="negative"),
        pytest.param("a=", {"a": ""}, id="empty"),
        pytest.param("a[0]=x", {"a": ["x"]}, id="index"),
        pytest.param("a[2]=x", {"a": [None, None, "x"]}, id="index-pads"),
        pytest.param("a[0].b=1,a[0].c=2", {"a": [{"b": 1, "c": 2}]}, id="index-then-key"),
        pytest.param("a[0][1]=x", {"a": [[None, "x"]]}, id="nested-index"),
        pytest.param("a={x,2,true}", {"a": ["x", 2, True]}, id="list-literal"),
        pytest.param("a={x,y},b=1", {"a": ["x", "y"], "b": 1}, id="list-then-more"),
        pytest.param(
            r"nodeSelector.kubernetes\.io/arch=amd64",
            {"nodeSelector": {"kubernetes.io/arch": "amd64"}},
            id="escaped-dot",
        ),
        pytest.param(r"a=b\,c", {"a": "b,c"}, id="escaped-comma"),
        pytest.param("a=b=c", {"a": "b=c"}, id="equals-in-value"),
        pytest.param("a.b=x,a.c=y", {"a": {"b": "x", "c": "y"}}, id="same-map"),
    ],
)
def test_set_parses_as_helm(expression: str, values: dict[str, Any]) -> None:
    assert parse_set(expression) == values


def test_set_string_forces_text() -> None:
    assert parse_set("a=1,b=true,c=null", force_string=True) == {"a": "1", "b": "true", "c": "null"}


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        pytest.param("a", "--set 'a': key 'a' has no value", id="no-value"),
        pytest.param("a,b=1", "--set 'a,b=1': key 'a' has no value", id="comma-before-value"),
        pytest.param("a[x]=1", "--set 'a[x]=1': index 'x' is not a number", id="index-text"),
        pytest.param("a[-1]=1", "--set 'a[-1]=1': negative index -1", id="negative-index"),
        pytest.param(
            "a[70000]=1",
            "--set 'a[70000]=1': index 70000 is greater than the maximum supported index 65536",
            id="index-max",
        ),
        pytest.param(
            "a[0", "--set 'a[0': an index is missing its closing ']'", id="unclosed-index"
        ),
        pytest.param(
            "a={x,y", "--set 'a={x,y': a list value is missing its closing '}'", id="unclosed-list"
        ),
        pytest.param(
            "a[0]x=1", "--set 'a[0]x=1': unexpected 'x' after index [0]", id="after-index"
        ),
        pytest.param("", "--set '': is empty", id="empty"),
        pytest.param(".a=1", "--set '.a=1': a key is empty", id="empty-key"),
    ],
)
def test_bad_set(expression: str, message: str) -> None:
    with pytest.raises(SetError) as caught:
        parse_set(expression)
    assert str(caught.value) == message


def test_user_values_order_files_then_set_then_set_string() -> None:
    values = user_values(
        files=[{"a": {"b": 1, "c": [1]}, "x": 1}, {"a": {"b": 2}}],
        sets=["a.c[1]=9", "x=2"],
        string_sets=["x=3"],
    )
    assert values == {"a": {"b": 2, "c": [1, 9]}, "x": "3"}


# --- Resources ------------------------------------------------------------------------------------


def test_resources_override_field_by_field() -> None:
    overrides = WorkspaceResources.model_validate(
        {"replicas": 2, "perReplica": {"memory": "16Gi", "gpuCount": 1, "gpuType": "H100"}}
    )
    resolved = resolve_resources(NOTEBOOK.default_resources, overrides)
    assert resolved.model_dump(mode="json", exclude_none=True) == {
        "replicas": 2,
        "perReplica": {
            "cpu": "2",
            "memory": "16Gi",
            "storage": "20Gi",
            "gpuCount": 1,
            "gpuType": "H100",
        },
    }


def test_no_overrides_is_the_class_with_one_replica() -> None:
    defaults = WorkspaceResources.model_validate({"perReplica": {"cpu": "1"}})
    assert resolve_resources(defaults, None).replicas == 1


@pytest.mark.parametrize(
    ("per_replica", "selector"),
    [
        pytest.param(
            {"gpuCount": 1, "gpuType": "H100"},
            GpuSelector(labels={"exalsius.ai/gpu-model": "H100"}),
            id="gpu-type",
        ),
        pytest.param(
            {"gpuCount": 1, "gpuNodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L40"}},
            GpuSelector(labels={"nvidia.com/gpu.product": "NVIDIA-L40"}),
            id="raw-selector",
        ),
        pytest.param({"gpuCount": 1, "gpuVendor": "AMD"}, GpuSelector(vendor="AMD"), id="vendor"),
        pytest.param({"gpuCount": 1}, GpuSelector(), id="any"),
    ],
)
def test_gpu_selector(per_replica: dict[str, Any], selector: GpuSelector) -> None:
    resources = WorkspaceResources.model_validate({"replicas": 2, "perReplica": per_replica})
    assert gpu_selector(resources) == selector
    request = capacity_request("nb#1", "nb", resources)
    assert request is not None
    assert (request.replicas, request.gpus_per_replica, request.selector) == (2, 1, selector)


def test_cpu_only_workspaces_ask_the_ledger_nothing() -> None:
    assert (
        capacity_request("nb#1", "nb", resolve_resources(NOTEBOOK.default_resources, None)) is None
    )


# --- Prompts --------------------------------------------------------------------------------------


def test_prompts_defaults_answers_and_secrets() -> None:
    merged = merge_workspace(NOTEBOOK, spec(values={"debug": "true", "idle": {"minutes": "30"}}))
    values = merged.values
    assert values["ui"] == "lab", "default applied"
    assert values["idle"] == {"minutes": 30}, "typed from the value at the prompt's path"
    assert values["debug"] is True
    assert values["model"] == "qwen"
    assert "auth" not in values, "a secret never reaches plain values"
    assert merged.secret_values == {"auth.password": sealed("auth.password")}


def test_answers_win_over_values() -> None:
    merged = merge_workspace(
        NOTEBOOK, spec(values={"ui": "lab"}, answers={"model": "m", "ui": "notebook"})
    )
    assert merged.values["ui"] == "notebook"


def test_string_prompts_take_numbers_as_text() -> None:
    merged = merge_workspace(NOTEBOOK, spec(answers={"model": 123}))
    assert merged.values["model"] == "123"


@pytest.mark.parametrize(
    ("changes", "problems"),
    [
        pytest.param(
            {"answers": {}, "sealedAnswers": {}},
            ["prompt 'Password' (auth.password) is required", "prompt 'Model' (model) is required"],
            id="required",
        ),
        pytest.param(
            {"answers": {"model": ""}},
            ["prompt 'Model' (model) is required"],
            id="required-empty",
        ),
        pytest.param(
            {"values": {"auth": {"password": "hunter2"}}, "sealedAnswers": {}},
            [
                "prompt 'Password' (auth.password) is a secret and arrived in plaintext: seal it "
                "with Colony's public key (colonyctl does this for you) and give it in sealedAnswers"
            ],
            id="plaintext-secret-in-values",
        ),
        pytest.param(
            {"answers": {"model": "m", "auth.password": "hunter2"}, "sealedAnswers": {}},
            [
                "prompt 'Password' (auth.password) is a secret and arrived in plaintext: seal it "
                "with Colony's public key (colonyctl does this for you) and give it in sealedAnswers"
            ],
            id="plaintext-secret-in-answers",
        ),
        pytest.param(
            {"answers": {"model": "m", "idle.minutes": "soon"}},
            ["prompt 'Idle' (idle.minutes) must be an integer, got 'soon'"],
            id="int",
        ),
        pytest.param(
            {"answers": {"model": "m", "idle.minutes": True}},
            ["prompt 'Idle' (idle.minutes) must be an integer, got True"],
            id="bool-is-not-int",
        ),
        pytest.param(
            {"answers": {"model": "m", "debug": "maybe"}},
            ["prompt 'Debug' (debug) must be true or false, got 'maybe'"],
            id="bool",
        ),
        pytest.param(
            {"answers": {"model": "m", "ui": "classic"}},
            ["prompt 'UI' (ui) must be one of lab, notebook, got 'classic'"],
            id="options",
        ),
        pytest.param(
            {"answers": {"model": ["a"]}},
            ["prompt 'Model' (model) must be a string, got ['a']"],
            id="string",
        ),
        pytest.param(
            {"answers": {"model": "m", "ssh.key": "my key"}},
            [
                "prompt 'Key' (ssh.key) must be SSH public keys, one per line (\"ssh-ed25519 AAAA... "
                "user@host\"); 'my key' is not one"
            ],
            id="public-key",
        ),
        pytest.param(
            {"answers": {"model": "m", "modle": "typo"}},
            [
                "answers: 'modle' is not a prompt of class 'notebook-1-0-0' (its prompts: "
                "auth.password, ui, idle.minutes, debug, ssh.key, model)"
            ],
            id="unknown-answer",
        ),
        pytest.param(
            {"sealedAnswers": {"auth.password": sealed("p"), "model": sealed("m")}, "answers": {}},
            ["prompt 'Model' (model) is not a secret: give it in answers, not sealedAnswers"],
            id="sealed-non-secret",
        ),
        pytest.param(
            {"sealedAnswers": {"auth.password": sealed("p"), "token": sealed("t")}},
            ["sealedAnswers: 'token' is not a prompt of class 'notebook-1-0-0'"],
            id="sealed-unknown",
        ),
    ],
)
def test_prompt_problems(changes: dict[str, Any], problems: list[str]) -> None:
    with pytest.raises(ValuesError) as caught:
        merge_workspace(NOTEBOOK, spec(**changes))
    assert caught.value.problems == problems
    assert str(caught.value) == "; ".join(problems)


def test_public_keys_one_per_line() -> None:
    keys = "ssh-ed25519 AAAAC3Nza user@host\n\necdsa-sha2-nistp256 AAAAE2Vj other\n"
    assert (
        merge_workspace(NOTEBOOK, spec(answers={"model": "m", "ssh.key": keys})).values["ssh"][
            "key"
        ]
        == keys
    )


def test_split_plaintext_secrets_for_sealing() -> None:
    request = spec(values={"auth": {"password": "hunter2"}, "keep": 1}, sealedAnswers={})
    stripped, plaintext = split_plaintext_secrets(request, NOTEBOOK)
    assert plaintext == {"auth.password": "hunter2"}
    assert stripped.values == {"keep": 1}
    assert request.values["auth"] == {"password": "hunter2"}, "the original is not modified"
    from_answers, plaintext = split_plaintext_secrets(
        spec(answers={"model": "m", "auth.password": 1234}, sealedAnswers={}), NOTEBOOK
    )
    assert plaintext == {"auth.password": "1234"}
    assert from_answers.answers == {"model": "m"}


# --- Injection ------------------------------------------------------------------------------------


def test_resources_injected_where_charts_read_them() -> None:
    request = spec(
        resources={"replicas": 2, "perReplica": {"gpuCount": 2, "gpuType": "H100", "cpu": "0.5"}}
    )
    merged = merge_workspace(
        NOTEBOOK, request, gpu_resource_name="nvidia.com/gpu", nodes=["n1", "n1"]
    )
    assert merged.values["_exalsius"] == {
        "resources": {
            "replicas": 2,
            "perReplica": {
                "cpu": "500m",
                "memory": "8Gi",
                "storage": "20Gi",
                "gpuCount": 2,
                "gpuType": "H100",
                "gpuResourceName": "nvidia.com/gpu",
            },
        },
        "scheduling": {
            "nodeSelector": {"exalsius.ai/gpu-model": "H100", "kubernetes.io/hostname": "n1"}
        },
    }
    assert merged.values["resources"] == {"cpu": "500m", "memory": "8Gi", "nvidia.com/gpu": 2}
    assert merged.values["replicas"] == 2
    assert merged.values["image"] == {"repository": "jupyter", "tag": "1"}, "class defaults kept"


def test_replicas_on_several_nodes_are_not_pinned() -> None:
    request = spec(resources={"replicas": 2, "perReplica": {"gpuCount": 1}})
    merged = merge_workspace(NOTEBOOK, request, nodes=["n1", "n2"])
    assert "scheduling" not in merged.values["_exalsius"], "any GPU, two nodes: nothing to pin"


def test_cpu_only_workspace_has_no_gpu_scheduling() -> None:
    merged = merge_workspace(NOTEBOOK, spec())
    assert merged.values["_exalsius"]["resources"] == {
        "replicas": 1,
        "perReplica": {"cpu": "2", "memory": "8Gi", "storage": "20Gi", "gpuCount": 0},
    }
    assert "scheduling" not in merged.values["_exalsius"]


def test_vendor_gives_the_gpu_resource_name() -> None:
    request = spec(resources={"perReplica": {"gpuCount": 1, "gpuVendor": "AMD"}})
    per_replica = merge_workspace(NOTEBOOK, request).values["_exalsius"]["resources"]["perReplica"]
    assert (per_replica["gpuVendor"], per_replica["gpuResourceName"]) == ("AMD", "amd.com/gpu")


def test_injection_overwrites_user_values_with_a_warning() -> None:
    merged = merge_workspace(NOTEBOOK, spec(values={"resources": {"cpu": 16}, "replicas": 1}))
    assert merged.values["resources"]["cpu"] == "2"
    assert merged.warnings == [
        "Colony overwrote values.resources.cpu (16) with the resolved cpu ('2'): use "
        "resources.perReplica.cpu instead"
    ], "replicas matched the resolved value: no warning"


def test_slurm_umbrella_injection() -> None:
    slurm = WorkspaceClassSpec.model_validate(
        {
            "name": "slurm-cluster",
            "displayName": "Slurm",
            "serviceTemplate": {"name": "slurm-workspace-1.0.0"},
            "defaultResources": {
                "replicas": 3,
                "perReplica": {"cpu": "8", "memory": "32Gi", "gpuCount": 1},
            },
            "resourceInjection": {
                "replicas": ["slurm.workerNodes.count"],
                "cpu": [
                    "slurm.workerNodes.resources.requests.cpu",
                    "slurm.workerNodes.resources.limits.cpu",
                ],
                "gpuCount": ['slurm.workerNodes.resources.limits["nvidia.com/gpu"]'],
            },
        }
    )
    request = WorkspaceSpec.model_validate(
        {
            "name": "s",
            "class": "slurm-cluster",
            "cluster": "c",
            "resources": {"replicas": 5, "perReplica": {"gpuCount": 4}},
        }
    )
    workers = merge_workspace(slurm, request).values["slurm"]["workerNodes"]
    assert workers == {
        "count": 5,
        "resources": {"requests": {"cpu": "8"}, "limits": {"cpu": "8", "nvidia.com/gpu": 4}},
    }


def test_merged_values_never_hold_a_sealed_value() -> None:
    merged = merge_workspace(NOTEBOOK, spec())
    assert "ciphertext" not in str(merged.values)
    assert "auth" not in merged.model_dump(mode="json")["values"]
