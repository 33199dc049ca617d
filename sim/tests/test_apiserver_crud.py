"""CRUD semantics of the emulated apiserver through the official client over HTTPS."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sim.apiserver.registry import PODS
from sim.apiserver.server import ClusterServer
from sim.apiserver.store import SUFFIX_ALPHABET, clone

call = asyncio.to_thread


def cm(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "data": data}


async def test_create_get_and_server_fields(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    created = await call(core.create_namespaced_config_map, "default", cm("a", x="1"))
    assert created.metadata.uid
    assert created.metadata.creation_timestamp is not None
    assert int(created.metadata.resource_version) > 0
    assert created.metadata.generation == 1
    got = await call(core.read_namespaced_config_map, "a", "default")
    assert got.data == {"x": "1"}
    assert got.metadata.resource_version == created.metadata.resource_version


async def test_create_twice_is_409_already_exists(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    await call(core.create_namespaced_config_map, "default", cm("dup"))
    with pytest.raises(ApiException) as err:
        await call(core.create_namespaced_config_map, "default", cm("dup"))
    assert err.value.status == 409
    body = json.loads(err.value.body)
    assert body["kind"] == "Status"
    assert body["reason"] == "AlreadyExists"
    assert body["details"] == {"name": "dup", "kind": "configmaps"}
    assert body["message"] == 'configmaps "dup" already exists'


async def test_get_missing_is_404_status(api_client: client.ApiClient) -> None:
    apps = client.AppsV1Api(api_client)
    with pytest.raises(ApiException) as err:
        await call(apps.read_namespaced_daemon_set, "nope", "default")
    body = json.loads(err.value.body)
    assert err.value.status == 404
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'daemonsets.apps "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "group": "apps", "kind": "daemonsets"},
        "code": 404,
    }


async def test_generate_name(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    body = {"metadata": {"generateName": "job-"}}
    shared_random = random.getstate()
    first = await call(core.create_namespaced_config_map, "default", body)
    second = await call(core.create_namespaced_config_map, "default", body)
    assert first.metadata.name.startswith("job-")
    assert len(first.metadata.name) == len("job-") + 5
    assert set(first.metadata.name.removeprefix("job-")) <= set(SUFFIX_ALPHABET)
    assert first.metadata.name != second.metadata.name
    # The names come from the simulator's own generator: the `random` module's state belongs to
    # the code under test (Hypothesis warns when it changes while a strategy draws).
    assert random.getstate() == shared_random


async def test_missing_namespace_is_404(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    with pytest.raises(ApiException) as err:
        await call(core.create_namespaced_config_map, "ghost", cm("a"))
    assert err.value.status == 404
    assert json.loads(err.value.body)["details"] == {"name": "ghost", "kind": "namespaces"}
    await call(core.create_namespace, {"metadata": {"name": "ghost"}})
    await call(core.create_namespaced_config_map, "ghost", cm("a"))
    await call(core.create_namespaced_config_map, "kube-system", cm("a"))


async def test_namespace_delete_removes_contents(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    await call(core.create_namespace, {"metadata": {"name": "tmp"}})
    await call(core.create_namespaced_config_map, "tmp", cm("a"))
    await call(core.delete_namespace, "tmp")
    with pytest.raises(ApiException) as err:
        await call(core.read_namespaced_config_map, "a", "tmp")
    assert err.value.status == 404


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        pytest.param("app=web", ["w1", "w2"], id="equals"),
        pytest.param("app==web", ["w1", "w2"], id="double-equals"),
        pytest.param("app!=web", ["d1", "plain"], id="not-equals"),
        pytest.param("app in (web,db)", ["d1", "w1", "w2"], id="in"),
        pytest.param("app notin (web)", ["d1", "plain"], id="notin"),
        pytest.param("tier", ["w2"], id="exists"),
        pytest.param("!tier", ["d1", "plain", "w1"], id="not-exists"),
        pytest.param("app=web,tier=front", ["w2"], id="conjunction"),
    ],
)
async def test_list_label_selector(
    api_client: client.ApiClient, selector: str, expected: list[str]
) -> None:
    core = client.CoreV1Api(api_client)
    for name, labels in {
        "w1": {"app": "web"},
        "w2": {"app": "web", "tier": "front"},
        "d1": {"app": "db"},
        "plain": {},
    }.items():
        await call(core.create_namespaced_config_map, "default", cm(name, labels))
    result = await call(core.list_namespaced_config_map, "default", label_selector=selector)
    assert sorted(i.metadata.name for i in result.items) == expected
    assert int(result.metadata.resource_version) >= 5


def _pod(name: str, node: str | None = None, phase: str | None = None) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    if node:
        pod["spec"]["nodeName"] = node
    if phase:
        pod["status"] = {"phase": phase}
    return pod


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        pytest.param("metadata.name=p1", ["p1"], id="name"),
        pytest.param("metadata.namespace=default", ["p1", "p2", "p3"], id="namespace"),
        pytest.param("spec.nodeName=n1", ["p1", "p2"], id="node"),
        pytest.param("spec.nodeName==n1", ["p1", "p2"], id="node-double-equals"),
        pytest.param("spec.nodeName!=n1", ["p3"], id="node-not"),
        pytest.param("spec.nodeName=", ["p3"], id="unbound"),
        pytest.param("status.phase=Pending", ["p1", "p3"], id="phase"),
        pytest.param("spec.nodeName=n1,status.phase!=Pending", ["p2"], id="conjunction"),
    ],
)
async def test_list_field_selector_pods(
    api_client: client.ApiClient, selector: str, expected: list[str]
) -> None:
    core = client.CoreV1Api(api_client)
    await call(core.create_namespaced_pod, "default", _pod("p1", "n1"))
    await call(core.create_namespaced_pod, "default", _pod("p2", "n1", "Running"))
    await call(core.create_namespaced_pod, "default", _pod("p3"))
    result = await call(core.list_pod_for_all_namespaces, field_selector=selector)
    assert sorted(i.metadata.name for i in result.items) == expected


async def test_list_field_selector_unschedulable_nodes(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    await call(core.create_node, {"metadata": {"name": "a"}, "spec": {"unschedulable": True}})
    await call(core.create_node, {"metadata": {"name": "b"}})
    cordoned = await call(core.list_node, field_selector="spec.unschedulable=true")
    open_ = await call(core.list_node, field_selector="spec.unschedulable=false")
    assert [n.metadata.name for n in cordoned.items] == ["a"]
    assert [n.metadata.name for n in open_.items] == ["b"]


async def test_put_optimistic_concurrency(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    created = await call(core.create_namespaced_config_map, "default", cm("c", v="1"))
    created.data = {"v": "2"}
    updated = await call(core.replace_namespaced_config_map, "c", "default", created)
    assert int(updated.metadata.resource_version) > int(created.metadata.resource_version)
    created.data = {"v": "stale"}
    with pytest.raises(ApiException) as err:
        await call(core.replace_namespaced_config_map, "c", "default", created)  # stale rv
    assert err.value.status == 409
    assert json.loads(err.value.body)["reason"] == "Conflict"
    created.metadata.resource_version = None
    final = await call(core.replace_namespaced_config_map, "c", "default", created)
    assert final.data == {"v": "stale"}  # no resourceVersion: unconditional


@pytest.mark.parametrize(
    ("content_type", "patch", "expected_labels", "expected_data"),
    [
        pytest.param(
            "application/merge-patch+json",
            {"metadata": {"labels": {"a": None, "b": "2"}}, "data": {"k": "v2"}},
            {"b": "2"},
            {"k": "v2", "keep": "1"},
            id="merge",
        ),
        pytest.param(
            "application/strategic-merge-patch+json",
            {"metadata": {"labels": {"$patch": "delete"}}, "data": {"k": "v3"}},
            None,
            {"k": "v3", "keep": "1"},
            id="strategic",
        ),
        pytest.param(
            "application/json-patch+json",
            [
                {"op": "replace", "path": "/data/k", "value": "v4"},
                {"op": "remove", "path": "/data/keep"},
                {"op": "add", "path": "/metadata/labels/c~1d", "value": "x"},
            ],
            {"a": "1", "c/d": "x"},
            {"k": "v4"},
            id="json-patch",
        ),
    ],
)
async def test_patch_types(
    api_client: client.ApiClient,
    content_type: str,
    patch: Any,
    expected_labels: dict[str, str] | None,
    expected_data: dict[str, str],
) -> None:
    core = client.CoreV1Api(api_client)
    await call(core.create_namespaced_config_map, "default", cm("p", {"a": "1"}, k="v", keep="1"))
    patched = await call(
        core.patch_namespaced_config_map, "p", "default", patch, _content_type=content_type
    )
    assert patched.metadata.labels == expected_labels
    assert patched.data == expected_data


async def test_strategic_merge_lists_by_key(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    pod = _pod("sm")
    pod["spec"]["containers"].append({"name": "d", "image": "y"})
    await call(core.create_namespaced_pod, "default", pod)
    # Only images may change in a pod: the patch names one container, the other is kept.
    patch = {"spec": {"containers": [{"name": "d", "image": "x"}]}}
    patched = await call(
        core.patch_namespaced_pod,
        "sm",
        "default",
        patch,
        _content_type="application/strategic-merge-patch+json",
    )
    assert [(c.name, c.image) for c in patched.spec.containers] == [("c", "busybox"), ("d", "x")]


async def test_status_subresource_and_generation(api_client: client.ApiClient) -> None:
    apps = client.AppsV1Api(api_client)
    body = {
        "metadata": {"name": "d"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "d"}},
            "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            },
        },
    }
    created = await call(apps.create_namespaced_deployment, "default", body)
    assert created.metadata.generation == 1
    # Main resource writes ignore status; metadata-only changes keep the generation.
    patched = await call(
        apps.patch_namespaced_deployment,
        "d",
        "default",
        {"metadata": {"labels": {"x": "y"}}, "status": {"replicas": 7}},
    )
    assert patched.metadata.generation == 1
    assert patched.status is None or patched.status.replicas is None
    # Status writes ignore everything but status.
    status = await call(
        apps.patch_namespaced_deployment_status,
        "d",
        "default",
        {"spec": {"replicas": 5}, "status": {"replicas": 1, "readyReplicas": 1}},
    )
    assert status.status.ready_replicas == 1
    assert status.spec.replicas == 1
    assert status.metadata.generation == 1
    bumped = await call(apps.patch_namespaced_deployment, "d", "default", {"spec": {"replicas": 3}})
    assert bumped.metadata.generation == 2
    assert bumped.status.ready_replicas == 1


async def test_pod_binding_subresource(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    await call(core.create_namespaced_pod, "default", _pod("b"))
    binding = {"metadata": {"name": "b"}, "target": {"kind": "Node", "name": "n1"}}
    await call(core.create_namespaced_pod_binding, "b", "default", binding, _preload_content=False)
    pod = await call(core.read_namespaced_pod, "b", "default")
    assert pod.spec.node_name == "n1"
    assert any(c.type == "PodScheduled" and c.status == "True" for c in pod.status.conditions)
    with pytest.raises(ApiException) as err:
        await call(
            core.create_namespaced_pod_binding, "b", "default", binding, _preload_content=False
        )
    assert err.value.status == 409


@pytest.mark.parametrize(
    ("api", "method", "args", "body"),
    [
        pytest.param("core", "create_namespaced_secret", ("default",), {"metadata": {"name": "s"}, "stringData": {"a": "b"}}, id="secret"),
        pytest.param("core", "create_namespaced_service", ("default",), {"metadata": {"name": "svc"}, "spec": {"ports": [{"port": 80}]}}, id="service"),
        pytest.param("core", "create_namespaced_service_account", ("default",), {"metadata": {"name": "sa"}}, id="serviceaccount"),
        pytest.param("core", "create_namespaced_event", ("default",), {"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod", "name": "p"}}, id="event"),
        pytest.param("apps", "create_namespaced_daemon_set", ("default",), {"metadata": {"name": "ds"}, "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}, id="daemonset"),
        pytest.param("policy", "create_namespaced_pod_disruption_budget", ("default",), {"metadata": {"name": "pdb"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"a": "b"}}}}, id="pdb"),
    ],
)  # fmt: skip
async def test_builtin_types_round_trip(
    api_client: client.ApiClient, api: str, method: str, args: tuple[str, ...], body: dict[str, Any]
) -> None:
    apis = {
        "core": client.CoreV1Api(api_client),
        "apps": client.AppsV1Api(api_client),
        "policy": client.PolicyV1Api(api_client),
    }
    created = await call(getattr(apis[api], method), *args, body)
    assert created.metadata.name == body["metadata"]["name"]
    assert created.metadata.uid


async def test_gateway_api_via_custom_objects(api_client: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(api_client)
    group, version = "gateway.networking.k8s.io", "v1"
    gateway = {
        "apiVersion": f"{group}/{version}",
        "kind": "Gateway",
        "metadata": {"name": "gw"},
        "spec": {"gatewayClassName": "sim", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]},
    }  # fmt: skip
    route = {
        "apiVersion": f"{group}/{version}",
        "kind": "HTTPRoute",
        "metadata": {"name": "r", "labels": {"app": "x"}},
        "spec": {"parentRefs": [{"name": "gw"}]},
    }
    await call(
        custom.create_namespaced_custom_object, group, version, "default", "gateways", gateway
    )
    await call(
        custom.create_namespaced_custom_object, group, version, "default", "httproutes", route
    )
    routes = await call(
        custom.list_namespaced_custom_object, group, version, "default", "httproutes",
        label_selector="app=x",
    )  # fmt: skip
    assert [r["metadata"]["name"] for r in routes["items"]] == ["r"]
    status = await call(
        custom.patch_namespaced_custom_object_status, group, version, "default", "gateways", "gw",
        {"status": {"conditions": [{"type": "Programmed", "status": "True"}]}},
    )  # fmt: skip
    assert status["status"]["conditions"][0]["type"] == "Programmed"


async def test_admin_store_shortcuts_emit_like_api(cluster: ClusterServer) -> None:
    from sim.apiserver.registry import CONFIGMAPS

    store = cluster.store
    store.create(CONFIGMAPS, cm("s", k="1"))
    updated = store.mutate(CONFIGMAPS, "default", "s", lambda o: o["data"].update(k="2"))
    assert updated["data"] == {"k": "2"}
    again = store.mutate(CONFIGMAPS, "default", "s", lambda o: None)
    assert again["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"]


async def test_secret_string_data_is_encoded(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    body = {"metadata": {"name": "s"}, "stringData": {"token": "abc"}}
    created = await call(core.create_namespaced_secret, "default", body)
    assert created.data == {"token": "YWJj"}
    assert created.string_data is None


async def test_rbac_objects_are_served(api_client: client.ApiClient) -> None:
    """RBAC objects are stored and served (not enforced), so a client can bind cluster-admin."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    binding = {
        "metadata": {"name": "colony-admin"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        "subjects": [
            {"kind": "ServiceAccount", "name": "colony-admin", "namespace": "kube-system"}
        ],
    }
    await asyncio.to_thread(rbac.create_cluster_role_binding, binding)
    found = await asyncio.to_thread(rbac.read_cluster_role_binding, "colony-admin")
    assert found.role_ref.name == "cluster-admin"
    assert found.subjects[0].name == "colony-admin"
    role = {"metadata": {"name": "reader", "namespace": "default"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}  # fmt: skip
    await asyncio.to_thread(rbac.create_namespaced_role, "default", role)
    roles = await asyncio.to_thread(rbac.list_namespaced_role, "default")
    assert [r.metadata.name for r in roles.items] == ["reader"]


@pytest.mark.parametrize(
    ("content_type", "patch"),
    [
        pytest.param("application/merge-patch+json", {"metadata": {"labels": {"a": "1"}}, "spec": {"activeDeadlineSeconds": 5}}, id="merge"),
        pytest.param("application/json-patch+json", [{"op": "add", "path": "/metadata/labels", "value": {"a": "1"}}], id="json"),
    ],
)  # fmt: skip
async def test_patches_leave_the_stored_versions_untouched(
    cluster: ClusterServer, api_client: client.ApiClient, content_type: str, patch: Any
) -> None:
    # PATCH shares unpatched subtrees with the stored object instead of deep-copying it: the
    # previous version (still in the watch history) must not change.
    store = cluster.store
    store.create(PODS, _pod("hist"), namespace="default")
    before = store.get(PODS, "default", "hist", copy_objects=False)
    snapshot = clone(before)
    core = client.CoreV1Api(api_client)
    patched = await call(
        core.patch_namespaced_pod, "hist", "default", patch, _content_type=content_type
    )
    assert patched.metadata.labels == {"a": "1"}
    assert before == snapshot
    assert store.get(PODS, "default", "hist")["metadata"]["labels"] == {"a": "1"}
