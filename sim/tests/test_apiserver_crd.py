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

from sim.tests.conftest import Kube
from tests.helpers import eventually

call = asyncio.to_thread
GROUP, VERSION, PLURAL = "sim.colony.io", "v1beta1", "widgets"
"""GROUP: for tests of a cluster of their own; on a shared one `install_crd` picks a group."""


def widget_crd(scope: str = "Namespaced", *, group: str = GROUP) -> dict[str, Any]:
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
        "metadata": {"name": f"{PLURAL}.{group}"},
        "spec": {
            "group": group,
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


def widget(name: str, *, group: str = GROUP, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{group}/{VERSION}", "kind": "Widget", "metadata": {"name": name}, "spec": spec}  # fmt: skip


def established(crd: Any) -> bool:
    return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])


async def install_crd(kube: Kube, group: str = "") -> str:
    """Install the Widget CRD in a group of the test's own (CRDs are cluster-scoped, and the real
    control plane is shared), and wait until it is Established; answer the group."""
    group = group or f"{kube.name('sim')}.colony.io"
    ext = client.ApiextensionsV1Api(kube.api)
    await call(ext.create_custom_resource_definition, widget_crd(group=group))
    await eventually(
        lambda: call(ext.read_custom_resource_definition, f"{PLURAL}.{group}"),
        until=established,
        what="the CRD Established",
    )
    return group


async def remove_crd(kube: Kube, group: str) -> None:
    """Delete the Widget CRD and wait until it is gone (a real server first deletes its objects,
    behind the CRD's customresourcecleanup finalizer)."""
    ext = client.ApiextensionsV1Api(kube.api)
    await call(ext.delete_custom_resource_definition, f"{PLURAL}.{group}")

    async def crds() -> list[str]:
        listed = await call(ext.list_custom_resource_definition)
        return [c.metadata.name for c in listed.items]

    await eventually(
        crds, until=lambda names: f"{PLURAL}.{group}" not in names, what="the CRD gone"
    )


async def test_crd_serves_validates_and_defaults(kube: Kube) -> None:
    group = await install_crd(kube)
    custom = client.CustomObjectsApi(kube.api)
    created = await call(custom.create_namespaced_custom_object, group, VERSION, kube.namespace, PLURAL, widget("w", group=group, size=2))  # fmt: skip
    assert created["spec"] == {"size": 2, "color": "red"}
    assert created["metadata"]["generation"] == 1
    await remove_crd(kube, group)


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
    kube: Kube, spec: dict[str, Any], field: str, reason: str
) -> None:
    group = await install_crd(kube)
    custom = client.CustomObjectsApi(kube.api)
    with pytest.raises(ApiException) as err:
        await call(custom.create_namespaced_custom_object, group, VERSION, kube.namespace, PLURAL, widget("bad", group=group, **spec))  # fmt: skip
    assert err.value.status == 422
    body = json.loads(err.value.body)
    assert body["reason"] == "Invalid"
    assert body["details"]["kind"] == "Widget"
    assert body["details"]["group"] == group
    assert [(c["field"], c["reason"]) for c in body["details"]["causes"]] == [(field, reason)]
    assert body["message"].startswith(f'Widget.{group} "bad" is invalid: {field}')
    await remove_crd(kube, group)


async def test_crd_update_validated_and_status_subresource(kube: Kube) -> None:
    group = await install_crd(kube)
    custom = client.CustomObjectsApi(kube.api)
    args = (group, VERSION, kube.namespace, PLURAL)
    await call(custom.create_namespaced_custom_object, *args, {**widget("w", group=group, size=1), "status": {"ready": True}})  # fmt: skip
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
    await remove_crd(kube, group)


async def test_crd_delete_unserves(kube: Kube) -> None:
    group = await install_crd(kube)
    custom = client.CustomObjectsApi(kube.api)
    await call(custom.create_namespaced_custom_object, group, VERSION, kube.namespace, PLURAL, widget("w", group=group, size=1))  # fmt: skip
    await remove_crd(kube, group)
    with pytest.raises(ApiException) as err:
        await call(custom.list_namespaced_custom_object, group, VERSION, kube.namespace, PLURAL)
    assert err.value.status == 404
    await install_crd(kube, group)
    listed = await call(
        custom.list_namespaced_custom_object, group, VERSION, kube.namespace, PLURAL
    )
    assert listed["items"] == []  # objects went with their definition
    await remove_crd(kube, group)


async def test_a_new_crd_is_established_by_the_server(kube: Kube) -> None:
    """The create's answer: Established at once on the emulator; on a real server a controller
    sets NamesAccepted and Established an instant later (clients wait: `install_crd`)."""
    group = f"{kube.name('sim')}.colony.io"
    ext = client.ApiextensionsV1Api(kube.api)
    created = await call(ext.create_custom_resource_definition, widget_crd(group=group))
    assert established(created) is not kube.real
    await eventually(
        lambda: call(ext.read_custom_resource_definition, f"{PLURAL}.{group}"),
        until=established,
        what="the CRD Established",
    )
    await remove_crd(kube, group)


async def test_dynamic_client(kube: Kube, tmp_path: Path) -> None:
    group = await install_crd(kube)
    dyn = await call(DynamicClient, kube.api, cache_file=str(tmp_path / "discovery.json"))
    widgets = await call(dyn.resources.get, api_version=f"{group}/{VERSION}", kind="Widget")
    await call(widgets.create, body=widget("dyn", group=group, size=4), namespace=kube.namespace)
    got = await call(widgets.get, name="dyn", namespace=kube.namespace)
    assert got.spec.size == 4
    nodes = await call(dyn.resources.get, api_version="v1", kind="Node")
    node = kube.name("n-dyn")
    await call(nodes.create, body={"metadata": {"name": node, "labels": {"dyn": node}}})
    listed = await call(nodes.get, label_selector=f"dyn={node}")
    assert [n.metadata.name for n in listed.items] == [node]
    await call(nodes.delete, name=node)
    pdbs = await call(dyn.resources.get, api_version="policy/v1", kind="PodDisruptionBudget")
    assert pdbs.namespaced
    await call(widgets.delete, name="dyn", namespace=kube.namespace)
    await eventually(
        lambda: call(widgets.get, namespace=kube.namespace),
        until=lambda result: result.items == [],
        what="widget gone",
    )
    await remove_crd(kube, group)
