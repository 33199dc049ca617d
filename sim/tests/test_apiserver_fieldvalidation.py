"""Server-side field validation (`fieldValidation`): Strict, Warn (the default) and Ignore, through the
official client and kubectl, for custom resources (schema pruning) and built-ins (top level, metadata).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sim.apiserver import schema
from sim.apiserver.fieldvalidation import FieldValidation, unknown_fields, warning_header
from sim.apiserver.registry import CONFIGMAPS, CRDS, NAMESPACES, SECRETS
from sim.apiserver.server import ClusterServer
from sim.crds import load_colony_crds
from sim.crds.samples import cluster_deployment_remote
from sim.tests.conftest import Kube, call
from sim.tests.test_apiserver_kubectl import KUBECTL, kubectl

GROUP, VERSION, PLURAL = "k0rdent.mirantis.com", "v1beta1", "clusterdeployments"
NS = "kcm-system"


def install_crds(cluster: ClusterServer) -> None:
    cluster.store.create(NAMESPACES, {"metadata": {"name": NS}})
    for crd in load_colony_crds():
        cluster.store.create(CRDS, crd)


def typo_cd(name: str) -> dict[str, Any]:
    cd = cluster_deployment_remote(name)
    cd["spec"]["templte"] = cd["spec"].pop("template")
    # spec.config is free-form (x-kubernetes-preserve-unknown-fields): typos there are kept.
    cd["spec"]["config"]["machines"][1]["prot"] = 2202
    cd["spec"]["propagateCredentails"] = cd["spec"].pop("propagateCredentials")
    return cd


def status_body(exc: ApiException) -> dict[str, Any]:
    return cast(dict[str, Any], json.loads(exc.body or "{}"))


# ------------------------------------------------------------------------------ pure


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "items": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"port": {"type": "integer"}}},
                },
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "embedded": {
                    "type": "object",
                    "x-kubernetes-embedded-resource": True,
                    "properties": {"spec": {"type": "object"}},
                },
            },
        }
    },
}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param({"spec": {"items": [{"port": 1}]}}, [], id="known"),
        pytest.param({"spec": {"zeta": 1, "alpha": 2}}, ["spec.alpha", "spec.zeta"], id="sorted"),
        pytest.param({"spec": {"items": [{}, {"prot": 2}]}}, ["spec.items[1].prot"], id="index"),
        pytest.param({"spec": {"labels": {"a": "b"}, "free": {"x": {"y": 1}}}}, [], id="kept"),
        pytest.param({"status": {}}, ["status"], id="root"),
        pytest.param(
            {"apiVersion": "v1", "kind": "K", "metadata": {"name": "n", "bogus": 1}},
            [],
            id="root-meta-is-the-callers",
        ),
        pytest.param(
            {"spec": {"embedded": {"apiVersion": "v1", "kind": "K", "metadata": {"nam": "x"}, "x": 1}}},
            ["spec.embedded.metadata.nam", "spec.embedded.x"],
            id="embedded",
        ),
    ],
)  # fmt: skip
def test_prune_reports_the_paths_it_drops(obj: dict[str, Any], expected: list[str]) -> None:
    pruned, dropped = schema.prune_with_paths(SCHEMA, obj)
    assert dropped == expected
    assert pruned == schema.prune(SCHEMA, obj)


def test_builtins_report_top_level_and_metadata_fields_only() -> None:
    secret = {
        "metadata": {"name": "s", "lables": {}},
        "data": {},
        "strinData": {},
        "spec": {"x": 1},
    }
    assert unknown_fields(SECRETS, secret) == ["metadata.lables", "spec", "strinData"]
    cm = {"metadata": {"name": "c"}, "data": {}, "binaryData": {}, "immutable": True}
    assert unknown_fields(CONFIGMAPS, cm) == []


def test_directive_parsing_and_warning_header() -> None:
    assert FieldValidation.from_query(None, "CreateOptions").directive == "Warn"
    assert FieldValidation.from_query("", "CreateOptions").directive == "Warn"
    with pytest.raises(Exception, match='fieldValidation: Unsupported value: "strict"'):
        FieldValidation.from_query("strict", "PatchOptions")
    assert warning_header('unknown field "spec.x"') == '299 - "unknown field \\"spec.x\\""'


# ------------------------------------------------------------------------------ official client


async def test_strict_refuses_unknown_fields_of_a_custom_resource(
    cluster: ClusterServer, api_client: client.ApiClient
) -> None:
    install_crds(cluster)
    api = client.CustomObjectsApi(api_client)
    with pytest.raises(ApiException) as caught:
        await call(
            api.create_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, typo_cd("gpu-a"),
            field_validation="Strict",
        )  # fmt: skip
    assert caught.value.status == 400
    body = status_body(caught.value)
    assert body["reason"] == "BadRequest"
    assert body["message"] == (
        'ClusterDeployment in version "v1beta1" cannot be handled as a ClusterDeployment: '
        'strict decoding error: unknown field "spec.propagateCredentails", '
        'unknown field "spec.templte"'
    )
    rt = cluster.store.registry.get(GROUP, PLURAL)
    assert cluster.store.try_get(rt, NS, "gpu-a") is None

    cd = cluster_deployment_remote("gpu-a")
    await call(
        api.create_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, cd,
        field_validation="Strict",
    )  # fmt: skip
    # PATCH checks the patched object; its message has no "cannot be handled" prefix.
    with pytest.raises(ApiException) as caught:
        await call(
            api.patch_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, "gpu-a",
            {"spec": {"credentail": "x"}, "metadata": {"labelz": {}}}, field_validation="Strict",
        )  # fmt: skip
    assert caught.value.status == 422
    assert status_body(caught.value)["message"].endswith(
        'strict decoding error: unknown field "metadata.labelz", unknown field "spec.credentail"'
    )
    # PUT, like create.
    stored = cast(
        dict[str, Any],
        await call(api.get_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, "gpu-a"),
    )
    stored["spec"]["extra"] = True
    with pytest.raises(ApiException) as caught:
        await call(
            api.replace_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, "gpu-a", stored,
            field_validation="Strict",
        )  # fmt: skip
    assert (
        'strict decoding error: unknown field "spec.extra"' in status_body(caught.value)["message"]
    )


async def test_warn_is_the_default_and_ignore_is_silent(
    cluster: ClusterServer, api_client: client.ApiClient
) -> None:
    install_crds(cluster)
    api = client.CustomObjectsApi(api_client)
    rt = cluster.store.registry.get(GROUP, PLURAL)
    for name, directive in (("warned", None), ("explicit", "Warn"), ("ignored", "Ignore")):
        cd = typo_cd(name)
        cd["spec"]["template"] = "remote-cluster-1-0-0"
        cd["metadata"]["lables"] = {"x": "y"}
        # field_validation=None sends no parameter at all: the server's default applies.
        _, status, headers = await call(
            api.create_namespaced_custom_object_with_http_info,
            GROUP, VERSION, NS, PLURAL, cd, field_validation=directive,
        )  # fmt: skip
        assert status == 201
        expected = [
            '299 - "unknown field \\"metadata.lables\\""',
            '299 - "unknown field \\"spec.propagateCredentails\\""',
            '299 - "unknown field \\"spec.templte\\""',
        ]
        warnings = headers.getlist("Warning")
        assert warnings == ([] if directive == "Ignore" else expected), name
        stored = cluster.store.get(rt, NS, name)
        assert "templte" not in stored["spec"]
        assert "lables" not in stored["metadata"]


async def test_unsupported_directive_is_invalid(
    cluster: ClusterServer, api_client: client.ApiClient
) -> None:
    api = client.CoreV1Api(api_client)
    with pytest.raises(ApiException) as caught:
        await call(
            api.create_namespaced_config_map, "default",
            client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c")), field_validation="strict",
        )  # fmt: skip
    assert caught.value.status == 422
    assert status_body(caught.value)["message"] == (
        'CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "strict": '
        'supported values: "", "Ignore", "Strict", "Warn"'
    )


# ------------------------------------------------------------------------------ kubectl


@pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl is not installed in the venv")
async def test_kubectl_apply_validates_unknown_fields(
    cluster: ClusterServer, kubeconfig_file: Path
) -> None:
    install_crds(cluster)
    rt = cluster.store.registry.get(GROUP, PLURAL)
    cd = typo_cd("gpu-a")
    cd["spec"]["template"] = "remote-cluster-1-0-0"
    path = kubeconfig_file.parent / "cd.json"
    path.write_text(json.dumps(cd))

    error = await kubectl(kubeconfig_file, "apply", "-f", str(path), check=False)
    assert (
        'Error from server (BadRequest): error when creating "' + str(path) + '": '
        'ClusterDeployment in version "v1beta1" cannot be handled as a ClusterDeployment: '
        'strict decoding error: unknown field "spec.propagateCredentails", '
        'unknown field "spec.templte"'
    ) in error
    assert cluster.store.try_get(rt, NS, "gpu-a") is None

    out = await kubectl(kubeconfig_file, "apply", "--validate=warn", "-f", str(path), check=False)
    assert 'Warning: unknown field "spec.templte"' in out
    assert "clusterdeployment.k0rdent.mirantis.com/gpu-a created" in out
    assert "templte" not in cluster.store.get(rt, NS, "gpu-a")["spec"]

    # Configuring the existing object goes through PATCH, checked the same way.
    cd["spec"]["credential"] = "other-cred"
    path.write_text(json.dumps(cd))
    error = await kubectl(kubeconfig_file, "apply", "-f", str(path), check=False)
    assert 'strict decoding error: unknown field "spec.propagateCredentails"' in error
    out = await kubectl(kubeconfig_file, "apply", "--validate=false", "-f", str(path), check=False)
    assert "Warning" not in out
    assert "configured" in out
    assert cluster.store.get(rt, NS, "gpu-a")["spec"]["credential"] == "other-cred"


@pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl is not installed in the venv")
async def test_kubectl_checks_builtins_top_level_and_metadata(
    cluster: ClusterServer, kubeconfig_file: Path
) -> None:
    # kubectl, not the typed official client: its pydantic models refuse unknown fields themselves.
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s", "namespace": "default", "annotatons": {"a": "b"}},
        "type": "Opaque",
        "stringData": {"k": "v"},
        "strngData": {"k": "v"},
    }
    path = kubeconfig_file.parent / "secret.json"
    path.write_text(json.dumps(secret))
    error = await kubectl(kubeconfig_file, "create", "-f", str(path), check=False)
    assert (
        'Secret in version "v1" cannot be handled as a Secret: strict decoding error: '
        'unknown field "metadata.annotatons", unknown field "strngData"'
    ) in error
    await kubectl(kubeconfig_file, "create", "--validate=false", "-f", str(path))
    stored = cluster.store.get(SECRETS, "default", "s")
    assert "strngData" not in stored
    assert "annotatons" not in stored["metadata"]
    assert stored["data"] == {"k": "dg=="}

    # A built-in's nested fields are not known to the sim: accepted, as documented.
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}, "data": {"a": "b"}}  # fmt: skip
    path.write_text(json.dumps(cm))
    await kubectl(kubeconfig_file, "create", "-f", str(path))
    patch = ("patch", "configmap", "c", "--type", "merge", "-p", '{"dta": {"x": "y"}}')
    # kubectl patch has no --validate: it leaves the directive to the server's default, Warn.
    out = await kubectl(kubeconfig_file, *patch)
    assert 'Warning: unknown field "dta"' in out
    assert "dta" not in cluster.store.get(CONFIGMAPS, "default", "c")


@pytest.mark.parametrize(
    "content_type",
    [
        pytest.param("application/merge-patch+json", id="merge"),
        pytest.param("application/strategic-merge-patch+json", id="strategic"),
    ],
)
async def test_strict_patch_of_a_builtin(kube: Kube, content_type: str) -> None:
    """A strict PATCH: 422 Invalid of an unnamed object, one cause at field `patch` (its value,
    the patched object, encoded as each server encodes it)."""
    api = client.CoreV1Api(kube.api)
    await call(api.create_namespaced_config_map, kube.namespace, {"metadata": {"name": "c"}})
    with pytest.raises(ApiException) as caught:
        await call(
            api.patch_namespaced_config_map, "c", kube.namespace, {"dta": {"x": "y"}},
            field_validation="Strict", _content_type=content_type,
        )  # fmt: skip
    assert caught.value.status == 422
    body = status_body(caught.value)
    assert body["reason"] == "Invalid"
    assert body["message"].startswith(' "" is invalid: patch: Invalid value: "')
    assert body["message"].endswith('": strict decoding error: unknown field "dta"')
    [cause] = body["details"]["causes"]
    assert (cause["field"], cause["reason"]) == ("patch", "FieldValueInvalid")
