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
from sim.tests.conftest import Kube
from tests.helpers import eventually

call = asyncio.to_thread
ROOT_CA = "kube-root-ca.crt"
"""The ConfigMap kube-controller-manager writes into every namespace of a real cluster."""
NO_SCHEDULER = "colony-test-none"
"""A scheduler nobody runs: pods that name it stay unbound until the test binds them."""


def cm(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "data": data}


async def test_create_get_and_server_fields(kube: Kube) -> None:
    core = client.CoreV1Api(kube.api)
    created = await call(core.create_namespaced_config_map, kube.namespace, cm("a", x="1"))
    assert created.metadata.uid
    assert created.metadata.creation_timestamp is not None
    assert int(created.metadata.resource_version) > 0
    assert created.metadata.generation is None  # only kinds with a spec to observe have one
    got = await call(core.read_namespaced_config_map, "a", kube.namespace)
    assert got.data == {"x": "1"}
    assert got.metadata.resource_version == created.metadata.resource_version


async def test_create_twice_is_409_already_exists(kube: Kube) -> None:
    core = client.CoreV1Api(kube.api)
    await call(core.create_namespaced_config_map, kube.namespace, cm("dup"))
    with pytest.raises(ApiException) as err:
        await call(core.create_namespaced_config_map, kube.namespace, cm("dup"))
    assert err.value.status == 409
    body = json.loads(err.value.body)
    assert body["kind"] == "Status"
    assert body["reason"] == "AlreadyExists"
    assert body["details"] == {"name": "dup", "kind": "configmaps"}
    assert body["message"] == 'configmaps "dup" already exists'


async def test_get_missing_is_404_status(kube: Kube) -> None:
    apps = client.AppsV1Api(kube.api)
    with pytest.raises(ApiException) as err:
        await call(apps.read_namespaced_daemon_set, "nope", kube.namespace)
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


async def test_generate_name(kube: Kube) -> None:
    core = client.CoreV1Api(kube.api)
    body = {"metadata": {"generateName": "job-"}}
    shared_random = random.getstate()
    first = await call(core.create_namespaced_config_map, kube.namespace, body)
    second = await call(core.create_namespaced_config_map, kube.namespace, body)
    assert first.metadata.name.startswith("job-")
    assert len(first.metadata.name) == len("job-") + 5
    assert set(first.metadata.name.removeprefix("job-")) <= set(SUFFIX_ALPHABET)
    assert first.metadata.name != second.metadata.name
    # The names come from the simulator's own generator: the `random` module's state belongs to
    # the code under test (Hypothesis warns when it changes while a strategy draws).
    assert random.getstate() == shared_random


async def test_missing_namespace_is_404(kube: Kube) -> None:
    core = client.CoreV1Api(kube.api)
    ghost = kube.name("ghost")
    with pytest.raises(ApiException) as err:
        await call(core.create_namespaced_config_map, ghost, cm("a"))
    assert err.value.status == 404
    assert json.loads(err.value.body)["details"] == {"name": ghost, "kind": "namespaces"}
    await call(core.create_namespace, {"metadata": {"name": ghost}})
    await call(core.create_namespaced_config_map, ghost, cm("a"))
    await call(core.create_namespaced_config_map, "kube-system", cm(kube.name("a")))
    await call(core.delete_namespace, ghost)


async def test_namespace_delete_removes_contents(kube: Kube) -> None:
    core = client.CoreV1Api(kube.api)
    tmp = kube.name("tmp")
    await call(core.create_namespace, {"metadata": {"name": tmp}})
    await call(core.create_namespaced_config_map, tmp, cm("a"))
    await call(core.delete_namespace, tmp)

    async def config_map_status() -> int:
        try:
            await call(core.read_namespaced_config_map, "a", tmp)
        except ApiException as error:
            return int(error.status)
        return 200

    await eventually(config_map_status, until=lambda status: status == 404, what="contents gone")
    await eventually(
        lambda: call(core.list_namespace, field_selector=f"metadata.name={tmp}"),
        until=lambda listed: listed.items == [],
        what="the namespace gone",
    )


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
async def test_list_label_selector(kube: Kube, selector: str, expected: list[str]) -> None:
    core = client.CoreV1Api(kube.api)
    for name, labels in {
        "w1": {"app": "web"},
        "w2": {"app": "web", "tier": "front"},
        "d1": {"app": "db"},
        "plain": {},
    }.items():
        await call(core.create_namespaced_config_map, kube.namespace, cm(name, labels))
    result = await call(core.list_namespaced_config_map, kube.namespace, label_selector=selector)
    names = sorted(i.metadata.name for i in result.items if i.metadata.name != ROOT_CA)
    assert names == expected
    assert int(result.metadata.resource_version) >= 5


async def test_every_namespace_gets_the_root_ca_config_map_only_on_real(kube: Kube) -> None:
    """kube-controller-manager's root-ca-cert-publisher puts the cluster's CA in every namespace;
    the emulator has no such controller (sim/CONTRACT.md, differences from a real API server)."""
    core = client.CoreV1Api(kube.api)
    listed = await call(core.list_namespaced_config_map, kube.namespace)
    names = [i.metadata.name for i in listed.items]
    assert names == ([ROOT_CA] if kube.real else [])


def _pod(name: str, node: str | None = None, phase: str | None = None) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {"name": name},
        # No scheduler acts on these (a real control plane has one): the tests bind them.
        "spec": {"schedulerName": NO_SCHEDULER, "containers": [{"name": "c", "image": "busybox"}]},
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
        pytest.param("", ["p1", "p2", "p3"], id="namespace"),
        pytest.param("spec.nodeName=n1", ["p1", "p2"], id="node"),
        pytest.param("spec.nodeName==n1", ["p1", "p2"], id="node-double-equals"),
        pytest.param("spec.nodeName!=n1", ["p3"], id="node-not"),
        pytest.param("spec.nodeName=", ["p3"], id="unbound"),
        pytest.param("status.phase=Pending", ["p1", "p3"], id="phase"),
        pytest.param("spec.nodeName=n1,status.phase!=Pending", ["p2"], id="conjunction"),
    ],
)
async def test_list_field_selector_pods(kube: Kube, selector: str, expected: list[str]) -> None:
    core = client.CoreV1Api(kube.api)
    node = kube.name("n1")  # no such Node: nothing runs these pods
    await call(core.create_namespaced_pod, kube.namespace, _pod("p1", node))
    await call(core.create_namespaced_pod, kube.namespace, _pod("p2", node))
    await call(
        core.patch_namespaced_pod_status, "p2", kube.namespace, {"status": {"phase": "Running"}}
    )
    await call(core.create_namespaced_pod, kube.namespace, _pod("p3"))
    in_namespace = f"metadata.namespace={kube.namespace}"
    result = await call(
        core.list_pod_for_all_namespaces,
        field_selector=",".join(
            part for part in (in_namespace, selector.replace("n1", node)) if part
        ),
    )
    assert sorted(i.metadata.name for i in result.items) == expected


async def test_pod_status_is_set_by_the_server_on_create(kube: Kube) -> None:
    """What a client writes in a new pod's status is dropped: Pending, with its QoS class."""
    core = client.CoreV1Api(kube.api)
    created = await call(
        core.create_namespaced_pod,
        kube.namespace,
        {**_pod("p", kube.name("n")), "status": {"phase": "Running", "podIP": "10.1.2.3"}},
    )
    assert created.status.phase == "Pending"
    assert created.status.pod_ip is None
    assert created.status.qos_class == "BestEffort"


async def test_a_pod_of_a_missing_service_account_is_refused_only_on_real(kube: Kube) -> None:
    """kube-apiserver's ServiceAccount admission plugin refuses a pod whose ServiceAccount does
    not exist (in a new namespace, for the instant before kube-controller-manager makes
    `default`); the emulator has no such admission and no ServiceAccount controller."""
    core = client.CoreV1Api(kube.api)
    body = _pod("p")
    body["spec"]["serviceAccountName"] = "missing"
    if not kube.real:
        created = await call(core.create_namespaced_pod, kube.namespace, body)
        assert created.spec.service_account_name == "missing"
        return
    with pytest.raises(ApiException) as refused:
        await call(core.create_namespaced_pod, kube.namespace, body)
    assert refused.value.status == 403
    assert json.loads(refused.value.body)["message"] == (
        f'pods "p" is forbidden: error looking up service account {kube.namespace}/missing: '
        'serviceaccount "missing" not found'
    )


async def test_list_field_selector_unschedulable_nodes(kube: Kube) -> None:
    core = client.CoreV1Api(kube.api)
    a, b = kube.name("a"), kube.name("b")
    mark = {"colony.dev/test": kube.namespace}
    await call(core.create_node, {"metadata": {"name": a, "labels": mark}, "spec": {"unschedulable": True}})  # fmt: skip
    await call(core.create_node, {"metadata": {"name": b, "labels": mark}})
    ours = f"colony.dev/test={kube.namespace}"
    cordoned = await call(
        core.list_node, field_selector="spec.unschedulable=true", label_selector=ours
    )
    open_ = await call(
        core.list_node, field_selector="spec.unschedulable=false", label_selector=ours
    )
    assert [n.metadata.name for n in cordoned.items] == [a]
    assert [n.metadata.name for n in open_.items] == [b]
    for node in (a, b):
        await call(core.delete_node, node)


async def test_put_optimistic_concurrency(kube: Kube) -> None:
    core = client.CoreV1Api(kube.api)
    created = await call(core.create_namespaced_config_map, kube.namespace, cm("c", v="1"))
    created.data = {"v": "2"}
    updated = await call(core.replace_namespaced_config_map, "c", kube.namespace, created)
    assert int(updated.metadata.resource_version) > int(created.metadata.resource_version)
    created.data = {"v": "stale"}
    with pytest.raises(ApiException) as err:
        await call(core.replace_namespaced_config_map, "c", kube.namespace, created)  # stale rv
    assert err.value.status == 409
    assert json.loads(err.value.body)["reason"] == "Conflict"
    created.metadata.resource_version = None
    final = await call(core.replace_namespaced_config_map, "c", kube.namespace, created)
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
    kube: Kube,
    content_type: str,
    patch: Any,
    expected_labels: dict[str, str] | None,
    expected_data: dict[str, str],
) -> None:
    core = client.CoreV1Api(kube.api)
    await call(
        core.create_namespaced_config_map, kube.namespace, cm("p", {"a": "1"}, k="v", keep="1")
    )
    patched = await call(
        core.patch_namespaced_config_map, "p", kube.namespace, patch, _content_type=content_type
    )
    assert patched.metadata.labels == expected_labels
    assert patched.data == expected_data


@pytest.mark.parametrize(
    ("stored", "patch", "expected"),
    [
        pytest.param(["a", "b"], [], ["a", "b"], id="empty-list-keeps"),
        pytest.param(["a", "b"], None, None, id="null-clears"),
        pytest.param(["a", "b"], ["c"], ["c", "a", "b"], id="new-goes-first"),
        pytest.param(["a", "b"], ["b"], ["a", "b"], id="present"),
        pytest.param(["a", "b"], ["b", "c"], ["a", "b", "c"], id="after-a-present-one"),
        pytest.param(["a", "b"], ["c", "a"], ["c", "a", "b"], id="before-a-present-one"),
        pytest.param(["a", "b", "c"], ["c", "d"], ["a", "b", "c", "d"], id="interleaved"),
    ],
)
async def test_strategic_merge_of_finalizers(
    kube: Kube, stored: list[str], patch: list[str] | None, expected: list[str] | None
) -> None:
    """Finalizers merge as a set (patchStrategy merge), in the order kube-apiserver gives them."""
    core = client.CoreV1Api(kube.api)
    body = {"metadata": {"name": "f", "finalizers": [f"x.io/{f}" for f in stored]}}
    await call(core.create_namespaced_config_map, kube.namespace, body)
    finalizers = None if patch is None else [f"x.io/{f}" for f in patch]
    patched = await call(
        core.patch_namespaced_config_map,
        "f",
        kube.namespace,
        {"metadata": {"finalizers": finalizers}},
        _content_type="application/strategic-merge-patch+json",
    )
    assert patched.metadata.finalizers == (
        None if expected is None else [f"x.io/{f}" for f in expected]
    )
    await call(
        core.patch_namespaced_config_map,
        "f",
        kube.namespace,
        {"metadata": {"finalizers": None}},
        _content_type="application/merge-patch+json",
    )


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        pytest.param([{"name": "e", "image": "z"}], "c d e:z", id="in-place"),
        pytest.param([{"name": "x", "image": "z"}], "x:z c d e", id="new-goes-first"),
        pytest.param([{"name": "d", "$patch": "delete"}], "c e", id="delete"),
    ],
)
async def test_strategic_merge_keyed_list_order(
    kube: Kube, patch: list[Any], expected: str
) -> None:
    """Containers merge by name, in the order kube gives merged lists (new ones first)."""
    apps = client.AppsV1Api(kube.api)
    containers = [{"name": n, "image": "i"} for n in ("c", "d", "e")]
    body = {
        "metadata": {"name": "o"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "o"}},
            "template": {"metadata": {"labels": {"app": "o"}}, "spec": {"containers": containers}},
        },
    }
    await call(apps.create_namespaced_deployment, kube.namespace, body)
    patched = await call(
        apps.patch_namespaced_deployment,
        "o",
        kube.namespace,
        {"spec": {"template": {"spec": {"containers": patch}}}},
        _content_type="application/strategic-merge-patch+json",
    )
    shown = " ".join(
        c.name + ("" if c.image == "i" else f":{c.image}")
        for c in patched.spec.template.spec.containers
    )
    assert shown == expected


async def test_strategic_merge_lists_by_key(kube: Kube) -> None:
    core = client.CoreV1Api(kube.api)
    pod = _pod("sm")
    pod["spec"]["containers"].append({"name": "d", "image": "y"})
    await call(core.create_namespaced_pod, kube.namespace, pod)
    # Only images may change in a pod: the patch names one container, the other is kept.
    patch = {"spec": {"containers": [{"name": "d", "image": "x"}]}}
    patched = await call(
        core.patch_namespaced_pod,
        "sm",
        kube.namespace,
        patch,
        _content_type="application/strategic-merge-patch+json",
    )
    assert [(c.name, c.image) for c in patched.spec.containers] == [("c", "busybox"), ("d", "x")]


async def test_status_subresource_and_generation(kube: Kube) -> None:
    apps = client.AppsV1Api(kube.api)
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
    created = await call(apps.create_namespaced_deployment, kube.namespace, body)
    assert created.metadata.generation == 1
    # Main resource writes ignore status; metadata-only changes keep the generation.
    patched = await call(
        apps.patch_namespaced_deployment,
        "d",
        kube.namespace,
        {"metadata": {"labels": {"x": "y"}}, "status": {"replicas": 7}},
    )
    assert patched.metadata.generation == 1
    # (On a real control plane the deployment controller writes status meanwhile: never 7.)
    assert patched.status is None or patched.status.replicas != 7
    # Status writes ignore everything but status.
    status = await call(
        apps.patch_namespaced_deployment_status,
        "d",
        kube.namespace,
        {"spec": {"replicas": 5}, "status": {"replicas": 1, "readyReplicas": 1}},
    )
    assert status.status.ready_replicas == 1
    assert status.spec.replicas == 1
    assert status.metadata.generation == 1
    bumped = await call(
        apps.patch_namespaced_deployment, "d", kube.namespace, {"spec": {"replicas": 3}}
    )
    assert bumped.metadata.generation == 2
    # (That main writes keep the status is shown with a custom resource, which no controller
    # writes: test_apiserver_crd.py. Here a real deployment controller owns the status.)


async def test_pod_binding_subresource(kube: Kube) -> None:
    core = client.CoreV1Api(kube.api)
    await call(core.create_namespaced_pod, kube.namespace, _pod("b"))
    binding = {"metadata": {"name": "b"}, "target": {"kind": "Node", "name": "n1"}}
    await call(
        core.create_namespaced_pod_binding, "b", kube.namespace, binding, _preload_content=False
    )
    pod = await call(core.read_namespaced_pod, "b", kube.namespace)
    assert pod.spec.node_name == "n1"
    assert any(c.type == "PodScheduled" and c.status == "True" for c in pod.status.conditions)
    with pytest.raises(ApiException) as err:
        await call(
            core.create_namespaced_pod_binding, "b", kube.namespace, binding, _preload_content=False
        )
    assert err.value.status == 409


@pytest.mark.parametrize(
    ("api", "method", "body"),
    [
        pytest.param("core", "create_namespaced_secret", {"metadata": {"name": "s"}, "stringData": {"a": "b"}}, id="secret"),
        pytest.param("core", "create_namespaced_service", {"metadata": {"name": "svc"}, "spec": {"ports": [{"port": 80}]}}, id="service"),
        pytest.param("core", "create_namespaced_service_account", {"metadata": {"name": "sa"}}, id="serviceaccount"),
        pytest.param("core", "create_namespaced_event", {"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod", "name": "p"}}, id="event"),
        pytest.param("apps", "create_namespaced_daemon_set", {"metadata": {"name": "ds"}, "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}, id="daemonset"),
        pytest.param("policy", "create_namespaced_pod_disruption_budget", {"metadata": {"name": "pdb"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"a": "b"}}}}, id="pdb"),
    ],
)  # fmt: skip
async def test_builtin_types_round_trip(
    kube: Kube, api: str, method: str, body: dict[str, Any]
) -> None:
    apis = {
        "core": client.CoreV1Api(kube.api),
        "apps": client.AppsV1Api(kube.api),
        "policy": client.PolicyV1Api(kube.api),
    }
    if "involvedObject" in body:  # an event is about an object of its own namespace
        body = {**body, "involvedObject": {**body["involvedObject"], "namespace": kube.namespace}}
    created = await call(getattr(apis[api], method), kube.namespace, body)
    assert created.metadata.name == body["metadata"]["name"]
    assert created.metadata.uid


@pytest.mark.parametrize(
    ("involved", "valid"),
    [
        pytest.param("", False, id="none"),
        pytest.param("elsewhere", False, id="another"),
        pytest.param(None, True, id="own"),
    ],
)
async def test_an_event_is_about_an_object_of_its_own_namespace(
    kube: Kube, involved: str | None, valid: bool
) -> None:
    core = client.CoreV1Api(kube.api)
    namespace = kube.namespace if involved is None else involved
    body = {
        "metadata": {"name": "e"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": namespace},
    }
    if valid:
        await call(core.create_namespaced_event, kube.namespace, body)
        return
    with pytest.raises(ApiException) as err:
        await call(core.create_namespaced_event, kube.namespace, body)
    assert err.value.status == 422
    assert json.loads(err.value.body)["message"] == (
        f'Event "e" is invalid: involvedObject.namespace: Invalid value: "{namespace}": '
        "does not match event.namespace"
    )


async def test_gateway_api_via_custom_objects(kube: Kube) -> None:
    if kube.real:
        pytest.skip(
            "no Gateway API CRDs here (nothing but the pinned components is downloaded); the "
            "emulator serves the types as built-ins (sim/CONTRACT.md)"
        )
    custom = client.CustomObjectsApi(kube.api)
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
        custom.create_namespaced_custom_object, group, version, kube.namespace, "gateways", gateway
    )
    await call(
        custom.create_namespaced_custom_object, group, version, kube.namespace, "httproutes", route
    )
    routes = await call(
        custom.list_namespaced_custom_object, group, version, kube.namespace, "httproutes",
        label_selector="app=x",
    )  # fmt: skip
    assert [r["metadata"]["name"] for r in routes["items"]] == ["r"]
    status = await call(
        custom.patch_namespaced_custom_object_status, group, version, kube.namespace, "gateways", "gw",
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


async def test_secret_string_data_is_encoded(kube: Kube) -> None:
    core = client.CoreV1Api(kube.api)
    body = {"metadata": {"name": "s"}, "stringData": {"token": "abc"}}
    created = await call(core.create_namespaced_secret, kube.namespace, body)
    assert created.data == {"token": "YWJj"}
    assert created.string_data is None


async def test_rbac_objects_are_served(kube: Kube) -> None:
    """RBAC objects are stored and served (the emulator does not enforce them: sim/CONTRACT.md),
    so a client can bind cluster-admin."""
    rbac = client.RbacAuthorizationV1Api(kube.api)
    name = kube.name("colony-admin")
    binding = {
        "metadata": {"name": name},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "kube-system"}],
    }
    await call(rbac.create_cluster_role_binding, binding)
    found = await call(rbac.read_cluster_role_binding, name)
    assert found.role_ref.name == "cluster-admin"
    assert found.subjects[0].name == name
    role = {"metadata": {"name": "reader", "namespace": kube.namespace}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}  # fmt: skip
    await call(rbac.create_namespaced_role, kube.namespace, role)
    roles = await call(rbac.list_namespaced_role, kube.namespace)
    assert [r.metadata.name for r in roles.items] == ["reader"]
    await call(rbac.delete_cluster_role_binding, name)


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
