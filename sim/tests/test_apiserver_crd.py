"""CustomResourceDefinitions: serving, schema validation, status subresource, unserving; DynamicClient."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from tests.helpers import eventually

call = asyncio.to_thread
GROUP, VERSION, PLURAL = "sim.colony.io", "v1beta1", "widgets"


def widget_crd(scope: str = "Namespaced") -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["size"],
                "properties": {
                    "size": {"type": "integer", "minimum": 1},
                    "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                },
            },
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {
                "plural": PLURAL,
                "singular": "widget",
                "kind": "Widget",
                "shortNames": ["wd"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                }
            ],
        },
    }


def widget(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Widget", "metadata": {"name": name}, "spec": spec}  # fmt: skip


async def install_crd(api_client: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(api_client)
    created = await call(ext.create_custom_resource_definition, widget_crd())
    assert any(c.type == "Established" and c.status == "True" for c in created.status.conditions)


async def test_crd_serves_validates_and_defaults(api_client: client.ApiClient) -> None:
    await install_crd(api_client)
    custom = client.CustomObjectsApi(api_client)
    created = await call(custom.create_namespaced_custom_object, GROUP, VERSION, "default", PLURAL, widget("w", size=2))  # fmt: skip
    assert created["spec"] == {"size": 2, "color": "red"}
    assert created["metadata"]["generation"] == 1


@pytest.mark.parametrize(
    ("spec", "field", "reason"),
    [
        pytest.param({}, "spec.size", "FieldValueRequired", id="required"),
        pytest.param({"size": 0}, "spec.size", "FieldValueInvalid", id="minimum"),
        pytest.param(
            {"size": 1, "color": "green"}, "spec.color", "FieldValueNotSupported", id="enum"
        ),
        pytest.param({"size": "big"}, "spec.size", "FieldValueTypeInvalid", id="type"),
    ],
)
async def test_crd_schema_rejects_invalid(
    api_client: client.ApiClient, spec: dict[str, Any], field: str, reason: str
) -> None:
    await install_crd(api_client)
    custom = client.CustomObjectsApi(api_client)
    with pytest.raises(ApiException) as err:
        await call(custom.create_namespaced_custom_object, GROUP, VERSION, "default", PLURAL, widget("bad", **spec))  # fmt: skip
    assert err.value.status == 422
    body = json.loads(err.value.body)
    assert body["reason"] == "Invalid"
    assert body["details"]["kind"] == "Widget"
    assert body["details"]["group"] == GROUP
    assert [(c["field"], c["reason"]) for c in body["details"]["causes"]] == [(field, reason)]
    assert body["message"].startswith(f'Widget.{GROUP} "bad" is invalid: {field}')


async def test_crd_update_validated_and_status_subresource(api_client: client.ApiClient) -> None:
    await install_crd(api_client)
    custom = client.CustomObjectsApi(api_client)
    args = (GROUP, VERSION, "default", PLURAL)
    await call(custom.create_namespaced_custom_object, *args, {**widget("w", size=1), "status": {"ready": True}})  # fmt: skip
    current = await call(custom.get_namespaced_custom_object, *args, "w")
    assert "status" not in current  # ignored on create, like kube
    with pytest.raises(ApiException) as err:
        await call(custom.patch_namespaced_custom_object, *args, "w", {"spec": {"size": -1}})
    assert err.value.status == 422
    status = await call(custom.patch_namespaced_custom_object_status, *args, "w", {"status": {"ready": True}, "spec": {"size": 9}})  # fmt: skip
    assert status["status"] == {"ready": True}
    assert status["spec"]["size"] == 1
    updated = await call(custom.patch_namespaced_custom_object, *args, "w", {"spec": {"size": 3}})
    assert updated["metadata"]["generation"] == 2
    assert updated["status"] == {"ready": True}


async def test_crd_delete_unserves(api_client: client.ApiClient) -> None:
    await install_crd(api_client)
    custom = client.CustomObjectsApi(api_client)
    ext = client.ApiextensionsV1Api(api_client)
    await call(custom.create_namespaced_custom_object, GROUP, VERSION, "default", PLURAL, widget("w", size=1))  # fmt: skip
    await call(ext.delete_custom_resource_definition, f"{PLURAL}.{GROUP}")
    with pytest.raises(ApiException) as err:
        await call(custom.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL)
    assert err.value.status == 404
    await install_crd(api_client)
    listed = await call(custom.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL)
    assert listed["items"] == []  # objects went with their definition


async def test_dynamic_client(api_client: client.ApiClient, tmp_path: Path) -> None:
    await install_crd(api_client)
    dyn = await call(DynamicClient, api_client, cache_file=str(tmp_path / "discovery.json"))
    widgets = await call(dyn.resources.get, api_version=f"{GROUP}/{VERSION}", kind="Widget")
    await call(widgets.create, body=widget("dyn", size=4), namespace="default")
    got = await call(widgets.get, name="dyn", namespace="default")
    assert got.spec.size == 4
    nodes = await call(dyn.resources.get, api_version="v1", kind="Node")
    await call(nodes.create, body={"metadata": {"name": "n-dyn", "labels": {"a": "b"}}})
    listed = await call(nodes.get, label_selector="a=b")
    assert [n.metadata.name for n in listed.items] == ["n-dyn"]
    pdbs = await call(dyn.resources.get, api_version="policy/v1", kind="PodDisruptionBudget")
    assert pdbs.namespaced
    await call(widgets.delete, name="dyn", namespace="default")
    await eventually(
        lambda: call(widgets.get, namespace="default"),
        until=lambda result: result.items == [],
        what="widget gone",
    )
