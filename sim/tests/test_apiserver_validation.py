"""Validation of built-in types (sim/apiserver/validation.py) through the official client."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from sim.apiserver.validation import POD_UPDATE_FORBIDDEN, parse_quantity
from sim.tests.conftest import NO_SCHEDULER, Kube

call = asyncio.to_thread


def pod(name: str = "web", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "schedulerName": NO_SCHEDULER,
        "containers": [{"name": "c", "image": "busybox"}],
        **spec,
    }
    return {"metadata": {"name": name}, "spec": body}


def deployment(name: str = "app", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "replicas": 1,
        "selector": {"matchLabels": {"app": name}},
        "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        },
        **spec,
    }
    return {"metadata": {"name": name}, "spec": body}


def service(name: str = "svc", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"ports": [{"port": 80}], **spec}}


_KINDS = {
    "pod": ("v1", "Pod"),
    "deployment": ("apps/v1", "Deployment"),
    "daemonset": ("apps/v1", "DaemonSet"),
    "service": ("v1", "Service"),
    "pdb": ("policy/v1", "PodDisruptionBudget"),
    "namespace": ("v1", "Namespace"),
    "node": ("v1", "Node"),
    "configmap": ("v1", "ConfigMap"),
}


def create(api: client.ApiClient, kind: str, body: dict[str, Any], ns: str = "default") -> Any:
    """Create through the official DynamicClient: the typed APIs check bodies client-side
    (pydantic) and would refuse some of the invalid objects before the server sees them."""
    api_version, kind_name = _KINDS[kind]
    resource = DynamicClient(api).resources.get(api_version=api_version, kind=kind_name)
    namespace = ns if resource.namespaced else None
    return resource.create(body={**body, "apiVersion": api_version, "kind": kind_name}, namespace=namespace)  # fmt: skip


def _no_containers() -> dict[str, Any]:
    body = pod()
    body["spec"]["containers"] = []
    return body


def _containers(*containers: dict[str, Any]) -> dict[str, Any]:
    body = pod()
    body["spec"]["containers"] = list(containers)
    return body


def _without_selector() -> dict[str, Any]:
    body = deployment()
    del body["spec"]["selector"]
    return body


def _labels(labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "cfg", "labels": labels}}


@pytest.mark.parametrize(
    ("kind", "body", "field", "message"),
    [
        pytest.param("configmap", {"metadata": {"name": "Bad_Name"}}, "metadata.name", 'Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain', id="name-subdomain"),
        pytest.param("namespace", {"metadata": {"name": "a_b"}}, "metadata.name", 'Invalid value: "a_b": a lowercase RFC 1123 label', id="namespace-label"),
        pytest.param("namespace", {"metadata": {"name": "a.b"}}, "metadata.name", 'Invalid value: "a.b": must not contain dots', id="namespace-dots"),
        pytest.param("service", service("Svc"), "metadata.name", 'Invalid value: "Svc": a lowercase RFC 1123 label', id="service-label"),
        pytest.param("service", service("svc.a"), "metadata.name", 'Invalid value: "svc.a": must not contain dots', id="service-dots"),
        pytest.param("node", {"metadata": {"name": "Node_1"}}, "metadata.name", 'Invalid value: "Node_1": a lowercase RFC 1123 subdomain', id="node-subdomain"),
        pytest.param("configmap", _labels({"bad key": "v"}), "metadata.labels", 'Invalid value: "bad key": name part must consist of', id="label-key"),
        pytest.param("configmap", _labels({"example.com/" + "k" * 64: "v"}), "metadata.labels", "name part must be no more than 63 bytes", id="label-key-long"),
        pytest.param("configmap", _labels({"Bad.Prefix/k": "v"}), "metadata.labels", "prefix part a lowercase RFC 1123 subdomain", id="label-prefix"),
        pytest.param("configmap", _labels({"k": "-v"}), "metadata.labels", 'Invalid value: "-v": a valid label must be an empty string', id="label-value"),
        pytest.param("configmap", _labels({"k": "v" * 64}), "metadata.labels", "must be no more than 63 bytes", id="label-value-long"),
        pytest.param("pod", _no_containers(), "spec.containers", "Required value", id="pod-no-containers"),
        pytest.param("pod", _containers({"image": "i"}), "spec.containers[0].name", "Required value", id="container-name-required"),
        pytest.param("pod", _containers({"name": "C_1", "image": "i"}), "spec.containers[0].name", 'Invalid value: "C_1": a lowercase RFC 1123 label', id="container-name-label"),
        pytest.param("pod", _containers({"name": "c"}), "spec.containers[0].image", "Required value", id="container-image-required"),
        pytest.param("pod", _containers({"name": "c", "image": "i"}, {"name": "c", "image": "j"}), "spec.containers[1].name", 'Duplicate value: "c"', id="container-name-duplicate"),
        pytest.param("pod", pod(restartPolicy="Sometimes"), "spec.restartPolicy", 'Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"', id="restart-policy"),
        pytest.param("pod", _containers({"name": "c", "image": "i", "resources": {"requests": {"cpu": "-1"}}}), "spec.containers[0].resources.requests[cpu]", 'Invalid value: "-1": must be greater than or equal to 0', id="negative-quantity"),
        pytest.param("pod", _containers({"name": "c", "image": "i", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}), "spec.containers[0].resources.requests", 'Invalid value: "2": must be less than or equal to cpu limit of 1', id="request-over-limit"),
        pytest.param("service", service(ports=[]), "spec.ports", "Required value", id="service-ports-required"),
        pytest.param("service", service(ports=[{"port": 70000}]), "spec.ports[0].port", "Invalid value: 70000: must be between 1 and 65535, inclusive", id="service-port-range"),
        pytest.param("pdb", {"metadata": {"name": "b"}, "spec": {"minAvailable": 1, "maxUnavailable": 1, "selector": {"matchLabels": {"a": "b"}}}}, "spec", "minAvailable and maxUnavailable cannot be both set", id="pdb-both"),
        pytest.param("deployment", _without_selector(), "spec.selector", "Required value", id="deployment-selector-required"),
        pytest.param("deployment", deployment(selector={"matchLabels": {"app": "other"}}), "spec.template.metadata.labels", 'Invalid value: {"app":"app"}: `selector` does not match template `labels`', id="deployment-selector-mismatch"),
        pytest.param("daemonset", deployment(template={"metadata": {"labels": {"app": "app"}}, "spec": {"containers": []}}), "spec.template.spec.containers", "Required value", id="daemonset-template-containers"),
    ],
)  # fmt: skip
async def test_invalid_objects_are_422_with_field_causes(
    kube: Kube, kind: str, body: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(ApiException) as err:
        await call(create, kube.api, kind, body, kube.namespace)
    assert err.value.status == 422
    status = json.loads(err.value.body)
    assert status["reason"] == "Invalid"
    causes = status["details"]["causes"]
    assert any(c["field"] == field and message in c["message"] for c in causes), causes


async def test_unparsable_quantity_is_400_like_a_decoding_error(
    kube: Kube,
) -> None:
    body = _containers({"name": "c", "image": "i", "resources": {"limits": {"memory": "lots"}}})
    with pytest.raises(ApiException) as err:
        await call(create, kube.api, "pod", body, kube.namespace)
    assert err.value.status == 400
    assert "quantities must match the regular expression" in json.loads(err.value.body)["message"]


async def test_valid_objects_pass(kube: Kube) -> None:
    await call(create, kube.api, "deployment", deployment(), kube.namespace)
    await call(create, kube.api, "service", service(), kube.namespace)
    await call(create, kube.api, "service", service("1svc"), kube.namespace)  # 1.37: a label
    await call(
        create, kube.api, "service", service("headless", clusterIP="None", ports=[]), kube.namespace
    )
    body = _containers({"name": "c", "image": "i", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": 1, "memory": "1Gi", "nvidia.com/gpu": "8"}}})  # fmt: skip
    await call(create, kube.api, "pod", body, kube.namespace)
    await call(
        create,
        kube.api,
        "configmap",
        _labels({"example.com/tier": "", "a_b.c": "X-1"}),
        kube.namespace,
    )


async def test_pod_spec_is_immutable_but_images_and_added_tolerations_may_change(
    kube: Kube,
) -> None:
    core = client.CoreV1Api(kube.api)
    created = await call(core.create_namespaced_pod, kube.namespace, pod())
    # Tolerations have no merge key: the patch replaces the list, so it keeps the ones the
    # DefaultTolerationSeconds admission added and appends one.
    existing = [kube.api.sanitize_for_serialization(t) for t in created.spec.tolerations]
    patched = await call(
        core.patch_namespaced_pod, "web", kube.namespace,
        {"spec": {"containers": [{"name": "c", "image": "busybox:2"}], "tolerations": [*existing, {"key": "k", "operator": "Exists"}]}},
    )  # fmt: skip
    assert patched.spec.containers[0].image == "busybox:2"
    assert len(patched.spec.tolerations) == 3
    with pytest.raises(ApiException) as dropped:
        await call(core.patch_namespaced_pod, "web", kube.namespace, {"spec": {"tolerations": []}})
    assert dropped.value.status == 422
    with pytest.raises(ApiException) as err:
        await call(
            core.patch_namespaced_pod, "web", kube.namespace, {"spec": {"nodeSelector": {"a": "b"}}}
        )
    assert err.value.status == 422
    cause = json.loads(err.value.body)["details"]["causes"][0]
    assert cause["field"] == "spec"
    # A real server appends a diff of its internal pod types, which the emulator does not.
    assert cause["message"].split("\n")[0] == POD_UPDATE_FORBIDDEN
    # Labels (metadata) still change freely.
    relabelled = await call(
        core.patch_namespaced_pod, "web", kube.namespace, {"metadata": {"labels": {"x": "y"}}}
    )
    assert relabelled.metadata.labels == {"x": "y"}


async def test_deployment_selector_is_immutable(kube: Kube) -> None:
    apps = client.AppsV1Api(kube.api)
    await call(apps.create_namespaced_deployment, kube.namespace, deployment())
    changed = {
        "spec": {
            "selector": {"matchLabels": {"app": "app", "v": "2"}},
            "template": {"metadata": {"labels": {"app": "app", "v": "2"}}},
        }
    }
    with pytest.raises(ApiException) as err:
        await call(apps.patch_namespaced_deployment, "app", kube.namespace, changed)
    assert err.value.status == 422
    assert "spec.selector: Invalid value" in json.loads(err.value.body)["message"]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("100m", "0.1", id="milli"),
        pytest.param("64Gi", str(64 * 2**30), id="binary"),
        pytest.param("1e3", "1000", id="exponent"),
        pytest.param("2k", "2000", id="kilo"),
        pytest.param(8, "8", id="number"),
        pytest.param("1.5", "1.5", id="fraction"),
    ],
)
def test_parse_quantity(text: str | int, value: str) -> None:
    parsed = parse_quantity(text)
    assert parsed is not None
    assert parsed == type(parsed)(value)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("lots", id="word"),
        pytest.param("1Zi", id="bad-suffix"),
        pytest.param("", id="empty"),
        pytest.param(True, id="bool"),
    ],
)
def test_parse_quantity_refuses(text: str | bool) -> None:
    assert parse_quantity(text) is None
