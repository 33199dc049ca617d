"""Structural pruning of custom resources, as kube-apiserver prunes them (conformance).

What Kubernetes documents ("Extend the Kubernetes API with CustomResourceDefinitions": Field
pruning, Controlling pruning, RawExtension, Subresources), checked through the official client
and kubectl against the sim's API server, reading back what was stored:
- a field the CRD's structural schema does not define is dropped before the object is stored, on
  every write of the main resource (create, update, merge and JSON patch) and of its status
  subresource (update, patch), dry runs included; the request succeeds (with a `Warning` per field
  unless it asked for `fieldValidation=Ignore`; `Strict` refuses it, see
  test_apiserver_fieldvalidation.py);
- `x-kubernetes-preserve-unknown-fields: true` keeps the subtree it is set on, except below the
  properties it still specifies, where pruning applies again;
- `apiVersion`, `kind` and `metadata` are kept at the root and in embedded resources
  (`x-kubernetes-embedded-resource: true`), `metadata` as an ObjectMeta: its unknown fields go;
- the sim's controllers write through the same pruning (`ClusterStore.update_status`), and each
  write that lost fields is recorded in `store.pruned_writes`.

The CRD is the documentation's CronTab, with the documentation's `json` example of
preserve-unknown-fields, an embedded resource and a status subresource added.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sim.apiserver.registry import CRDS, NAMESPACES
from sim.apiserver.server import ClusterServer
from sim.crds import load_colony_crds
from sim.tests.conftest import Kube, call
from sim.tests.test_apiserver_kubectl import KUBECTL, kubectl
from tests.helpers import eventually

GROUP, VERSION, PLURAL, NS = "stable.example.com", "v1", "crontabs", "default"
ARGS = (GROUP, VERSION, NS, PLURAL)
JSON_PATCH = "application/json-patch+json"
Obj = dict[str, Any]

CRONTAB_SCHEMA: Obj = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "cronSpec": {"type": "string"},
                "image": {"type": "string"},
                "replicas": {"type": "integer"},
                # The documentation's example: arbitrary JSON, but spec.foo/bar pruned again.
                "json": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "properties": {
                        "spec": {
                            "type": "object",
                            "properties": {"foo": {"type": "string"}, "bar": {"type": "string"}},
                        }
                    },
                },
                "env": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "object",
                        "properties": {"value": {"type": "string"}},
                    },
                },
                "steps": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"name": {"type": "string"}}},
                },
                "template": {
                    "type": "object",
                    "x-kubernetes-embedded-resource": True,
                    "x-kubernetes-preserve-unknown-fields": True,
                },
                "typedTemplate": {
                    "type": "object",
                    "x-kubernetes-embedded-resource": True,
                    "properties": {
                        "spec": {"type": "object", "properties": {"image": {"type": "string"}}}
                    },
                },
            },
        },
        "status": {
            "type": "object",
            "properties": {
                "replicas": {"type": "integer"},
                "conditions": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "type": {"type": "string"},
                            "status": {"type": "string"},
                            "observedGeneration": {"type": "integer"},
                        },
                    },
                },
                "details": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        },
    },
}


def crontab_crd(schema: Obj | None = None, group: str = GROUP) -> Obj:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "plural": PLURAL,
                "singular": "crontab",
                "kind": "CronTab",
                "shortNames": ["ct"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema or CRONTAB_SCHEMA},
                    "subresources": {"status": {}},
                }
            ],
        },
    }


def crontab(name: str, **spec: Any) -> Obj:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "CronTab",
        "metadata": {"name": name},
        "spec": {"cronSpec": "* * * * */5", "image": "my-awesome-cron-image", **spec},
    }


@dataclass(frozen=True)
class Crontabs:
    """Where a test's CronTabs are: the emulator's own cluster (GROUP, NS), or on the shared
    real control plane a group and a namespace of the test's own."""

    api: client.ApiClient
    group: str = GROUP
    namespace: str = NS

    @property
    def args(self) -> tuple[str, str, str, str]:
        return (self.group, VERSION, self.namespace, PLURAL)

    def crontab(self, name: str, **spec: Any) -> Obj:
        return {**crontab(name, **spec), "apiVersion": f"{self.group}/{VERSION}"}

    async def stored(self, name: str) -> Obj:
        return await obj_call(custom(self.api).get_namespaced_custom_object, *self.args, name)


async def install(target: Kube | client.ApiClient, schema: Obj | None = None) -> Crontabs:
    """Install the CronTab CRD and wait until it is served; on a `Kube`, in a group of the test's
    own (CRDs are cluster-wide and the real control plane is shared)."""
    if isinstance(target, Kube):
        where = Crontabs(target.api, f"{target.name('stable')}.example.com", target.namespace)
    else:
        where = Crontabs(target)
    ext = client.ApiextensionsV1Api(where.api)
    # The client's hints ask for a V1CustomResourceDefinition; it sends a dict as it is.
    await call(ext.create_custom_resource_definition, cast(Any, crontab_crd(schema, where.group)))
    name = f"{PLURAL}.{where.group}"
    await eventually(
        lambda: call(ext.read_custom_resource_definition, name),
        until=lambda crd: any(
            c.type == "Established" and c.status == "True" for c in crd.status.conditions or []
        ),
        what=f"CRD {name} established",
    )
    return where


async def obj_call(fn: Any, *args: Any, **kwargs: Any) -> Obj:
    """A CustomObjectsApi call (typed `object` by the client) answering an object."""
    return cast(Obj, await call(fn, *args, **kwargs))


def custom(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


async def stored(api_client: client.ApiClient, name: str) -> Obj:
    return cast(Obj, await call(custom(api_client).get_namespaced_custom_object, *ARGS, name))


# --------------------------------------------------------------------------- the main resource


async def test_create_prunes_what_the_schema_does_not_define(
    kube: Kube,
) -> None:
    ct = await install(kube)
    body = ct.crontab(
        "full",
        someRandomField=42,
        json={"spec": {"foo": "abc", "bar": "def", "something": "x"}, "status": {"something": "x"}},
        env={"HOME": {"value": "/root", "secret": True}},
        steps=[{"name": "one", "retries": 3}, {"name": "two"}],
        template={
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "b"}, "lables": {"typo": "x"}},
            "spec": {"containers": [{"name": "c", "image": "busybox", "whatever": True}]},
        },
        typedTemplate={
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t", "bogus": 1},
            "spec": {"image": "busybox", "command": ["true"]}, "extra": 1,
        },
    )  # fmt: skip
    body["topLevel"] = "dropped"
    body["metadata"]["annotatons"] = {"typo": "x"}
    body["metadata"]["labels"] = {"app": "cron"}
    created = await obj_call(
        custom(kube.api).create_namespaced_custom_object, *ct.args, body, field_validation="Ignore"
    )
    expected_spec = {
        "cronSpec": "* * * * */5",
        "image": "my-awesome-cron-image",
        # Preserved subtree: kept, except spec.something, where the schema specifies again.
        "json": {"spec": {"foo": "abc", "bar": "def"}, "status": {"something": "x"}},
        "env": {"HOME": {"value": "/root"}},
        "steps": [{"name": "one"}, {"name": "two"}],
        # Embedded and preserved: all kept but its ObjectMeta's unknown field.
        "template": {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "busybox", "whatever": True}]},
        },
        # Embedded, not preserved: apiVersion, kind, metadata implicit, the rest by the schema.
        "typedTemplate": {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t"}, "spec": {"image": "busybox"},
        },
    }  # fmt: skip
    for obj in (created, await ct.stored("full")):
        assert obj["spec"] == expected_spec
        assert sorted(obj) == ["apiVersion", "kind", "metadata", "spec"]
        assert "annotatons" not in obj["metadata"]
        assert obj["metadata"]["labels"] == {"app": "cron"}


async def test_the_default_warns_of_each_pruned_field(kube: Kube) -> None:
    ct = await install(kube)
    body = ct.crontab("warned", someRandomField=42, steps=[{"name": "a", "retries": 1}])
    _, status, headers = await call(
        custom(kube.api).create_namespaced_custom_object_with_http_info, *ct.args, body
    )
    assert status == 201
    assert headers.getlist("Warning") == [
        '299 - "unknown field \\"spec.someRandomField\\""',
        '299 - "unknown field \\"spec.steps[0].retries\\""',
    ]
    assert "someRandomField" not in (await ct.stored("warned"))["spec"]


async def test_a_root_that_preserves_unknown_fields_keeps_them(
    kube: Kube,
) -> None:
    ct = await install(
        kube,
        {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {}},
    )
    body = ct.crontab("free", anything={"goes": [1, 2]})
    body["topLevel"] = {"kept": True}
    body["metadata"]["bogus"] = "still an ObjectMeta"
    await call(custom(kube.api).create_namespaced_custom_object, *ct.args, body)
    obj = await ct.stored("free")
    assert obj["spec"]["anything"] == {"goes": [1, 2]}
    assert obj["topLevel"] == {"kept": True}
    assert "bogus" not in obj["metadata"]


def _replace(api: client.CustomObjectsApi, current: Obj, args: tuple[str, ...]) -> Obj:
    current["spec"]["replicas"] = 2
    current["spec"]["added"] = "by PUT"
    return cast(Obj, api.replace_namespaced_custom_object(*args, "w", current))


def _merge_patch(api: client.CustomObjectsApi, current: Obj, args: tuple[str, ...]) -> Obj:
    return cast(
        Obj,
        api.patch_namespaced_custom_object(
            *args, "w", {"spec": {"replicas": 2, "added": "by merge patch"}}
        ),
    )


def _json_patch(api: client.CustomObjectsApi, current: Obj, args: tuple[str, ...]) -> Obj:
    return cast(
        Obj,
        api.patch_namespaced_custom_object(
            *args, "w",
            [
                {"op": "add", "path": "/spec/replicas", "value": 2},
                {"op": "add", "path": "/spec/added", "value": "by JSON patch"},
            ],
            _content_type=JSON_PATCH,
        ),
    )  # fmt: skip


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(_replace, id="update"),
        pytest.param(_merge_patch, id="merge-patch"),
        pytest.param(_json_patch, id="json-patch"),
    ],
)
async def test_every_write_of_the_main_resource_prunes(kube: Kube, write: Any) -> None:
    ct = await install(kube)
    api = custom(kube.api)
    await call(api.create_namespaced_custom_object, *ct.args, ct.crontab("w", replicas=1))
    current = await ct.stored("w")
    answered = await obj_call(write, api, current, ct.args)
    for obj in (answered, await ct.stored("w")):
        assert obj["spec"]["replicas"] == 2
        assert "added" not in obj["spec"]
    assert answered["metadata"]["generation"] == 2


async def test_a_dry_run_answers_the_pruned_object(kube: Kube) -> None:
    ct = await install(kube)
    answered = await obj_call(
        custom(kube.api).create_namespaced_custom_object, *ct.args,
        ct.crontab("dry", someRandomField=42), dry_run="All",
    )  # fmt: skip
    assert "someRandomField" not in answered["spec"]
    assert answered["spec"]["image"] == "my-awesome-cron-image"


# --------------------------------------------------------------------------- the status subresource


STATUS_WRITTEN: Obj = {
    "replicas": 1,
    # Not in the schema: the status-level generation a controller might wish it had.
    "observedGeneration": 1,
    "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 1, "reason": "X"}],
    "details": {"free": {"form": True}},
}
STATUS_STORED: Obj = {
    "replicas": 1,
    "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 1}],
    "details": {"free": {"form": True}},
}


def _replace_status(api: client.CustomObjectsApi, current: Obj, args: tuple[str, ...]) -> Any:
    current["status"] = STATUS_WRITTEN
    return api.replace_namespaced_custom_object_status_with_http_info(*args, "s", current)


def _merge_patch_status(api: client.CustomObjectsApi, current: Obj, args: tuple[str, ...]) -> Any:
    return api.patch_namespaced_custom_object_status_with_http_info(
        *args, "s", {"status": STATUS_WRITTEN}
    )


def _json_patch_status(api: client.CustomObjectsApi, current: Obj, args: tuple[str, ...]) -> Any:
    return api.patch_namespaced_custom_object_status_with_http_info(
        *args,
        "s",
        [{"op": "add", "path": "/status", "value": STATUS_WRITTEN}],
        _content_type=JSON_PATCH,
    )


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(_replace_status, id="update"),
        pytest.param(_merge_patch_status, id="merge-patch"),
        pytest.param(_json_patch_status, id="json-patch"),
    ],
)
async def test_the_status_subresource_prunes(kube: Kube, write: Any) -> None:
    ct = await install(kube)
    api = custom(kube.api)
    await call(api.create_namespaced_custom_object, *ct.args, ct.crontab("s"))
    current = await ct.stored("s")
    answered, status, headers = await call(write, api, current, ct.args)
    assert status == 200
    assert answered["status"] == STATUS_STORED
    assert (await ct.stored("s"))["status"] == STATUS_STORED
    warned = headers.getlist("Warning")
    assert '299 - "unknown field \\"status.observedGeneration\\""' in warned
    assert '299 - "unknown field \\"status.conditions[0].reason\\""' in warned
    # Status writes leave the spec (and so the generation) alone.
    assert answered["metadata"]["generation"] == 1


async def test_strict_refuses_an_unknown_status_field(kube: Kube) -> None:
    ct = await install(kube)
    api = custom(kube.api)
    await call(api.create_namespaced_custom_object, *ct.args, ct.crontab("strict"))
    with pytest.raises(ApiException) as refused:
        await call(
            api.patch_namespaced_custom_object_status, *ct.args, "strict",
            {"status": {"replicas": 1, "observedGeneration": 1}}, field_validation="Strict",
        )  # fmt: skip
    assert refused.value.status == 422  # a strict PATCH (test_apiserver_fieldvalidation.py)
    assert json.loads(refused.value.body or "{}")["message"].endswith(
        'strict decoding error: unknown field "status.observedGeneration"'
    )
    assert "status" not in await ct.stored("strict")


async def test_a_controller_status_write_is_pruned_and_recorded(
    cluster: ClusterServer, api_client: client.ApiClient
) -> None:
    await install(api_client)
    await call(custom(api_client).create_namespaced_custom_object, *ARGS, crontab("ctl"))
    rt = cluster.store.registry.get(GROUP, PLURAL)
    written = cluster.store.update_status(rt, NS, "ctl", STATUS_WRITTEN)
    assert written["status"] == STATUS_STORED
    assert (await stored(api_client, "ctl"))["status"] == STATUS_STORED
    record = cluster.store.pruned_writes[-1]
    assert (record.kind, record.name, record.operation, record.writer) == (
        "CronTab", "ctl", "status", "controller",
    )  # fmt: skip
    assert record.paths == ("status.conditions[0].reason", "status.observedGeneration")


# --------------------------------------------------------------------------- k0rdent's ServiceSet


REAL_SERVICE_SETS = (
    Path(__file__).resolve().parents[2].parent
    / "shared" / "k0rdent-crds" / "k0rdent.mirantis.com_servicesets.yaml"
)  # fmt: skip


def _service_set_crds() -> list[Any]:
    ours = next(c for c in load_colony_crds() if c["spec"]["names"]["plural"] == "servicesets")
    params = [pytest.param(ours, id="sim-crd")]
    if REAL_SERVICE_SETS.is_file():
        params.append(pytest.param(yaml.safe_load(REAL_SERVICE_SETS.read_text()), id="k0rdent-crd"))
    return params


@pytest.mark.parametrize("crd", _service_set_crds())
async def test_a_service_set_status_keeps_only_the_conditions_generation(
    cluster: ClusterServer, api_client: client.ApiClient, crd: Obj
) -> None:
    """k0rdent's ServiceSet status has no `observedGeneration` of its own: only its conditions
    carry one. What a writer puts at the status level never reaches a reader."""
    cluster.store.create(NAMESPACES, {"metadata": {"name": "kcm-system"}})
    cluster.store.create(CRDS, crd)
    api = custom(api_client)
    where = ("k0rdent.mirantis.com", "v1beta1", "kcm-system", "servicesets")
    await call(
        api.create_namespaced_custom_object, *where,
        {
            "apiVersion": "k0rdent.mirantis.com/v1beta1", "kind": "ServiceSet",
            "metadata": {"name": "ss"},
            "spec": {"cluster": "c", "provider": {"name": "ksm-projectsveltos"}, "services": []},
        },
    )  # fmt: skip
    condition = {
        "type": "ServicesInReadyState", "status": "True", "reason": "Succeeded", "message": "0/0",
        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1,
    }  # fmt: skip
    answered = await obj_call(
        api.patch_namespaced_custom_object_status, *where, "ss",
        {"status": {"deployed": True, "observedGeneration": 1, "conditions": [condition]}},
    )  # fmt: skip
    assert "observedGeneration" not in answered["status"]
    assert answered["status"]["conditions"] == [condition]
    assert answered["status"]["deployed"] is True


# --------------------------------------------------------------------------- kubectl


pytestmark_kubectl = pytest.mark.skipif(
    not KUBECTL.exists(), reason="kubectl is not installed in the venv"
)


@pytestmark_kubectl
async def test_kubectl_create_without_validation_shows_the_pruned_object(kube: Kube) -> None:
    """The documentation's walk-through: `kubectl create --validate=false -f my-crontab.yaml -o
    yaml` answers the object without `someRandomField`."""
    ct = await install(kube)
    path = kube.kubeconfig_file.parent / "my-crontab.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": f"{ct.group}/{VERSION}",
                "kind": "CronTab",
                "metadata": {"name": "my-new-cron-object", "namespace": ct.namespace},
                "spec": {
                    "cronSpec": "* * * * */5",
                    "image": "my-awesome-cron-image",
                    "someRandomField": 42,
                },
            }
        )
    )
    out = await kubectl(
        kube.kubeconfig_file, "create", "--validate=false", "-f", str(path), "-o", "yaml"
    )
    answered = yaml.safe_load(out)
    assert answered["spec"] == {"cronSpec": "* * * * */5", "image": "my-awesome-cron-image"}
    got = yaml.safe_load(
        await kubectl(
            kube.kubeconfig_file,
            "get",
            f"crontabs.{ct.group}",
            "my-new-cron-object",
            "-n",
            ct.namespace,
            "-o",
            "yaml",
        )
    )
    assert got["spec"] == answered["spec"]


@pytestmark_kubectl
async def test_kubectl_patch_of_the_status_subresource_is_pruned(kube: Kube) -> None:
    ct = await install(kube)
    await call(custom(kube.api).create_namespaced_custom_object, *ct.args, ct.crontab("kc"))
    out = await kubectl(
        kube.kubeconfig_file, "patch", f"crontabs.{ct.group}", "kc", "-n", ct.namespace,
        "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"replicas": 3, "observedGeneration": 1}}),
    )  # fmt: skip
    # kubectl patch sends no fieldValidation: the server's default, Warn, prunes and warns.
    assert 'Warning: unknown field "status.observedGeneration"' in out
    got = json.loads(
        await kubectl(
            kube.kubeconfig_file,
            "get",
            f"crontabs.{ct.group}",
            "kc",
            "-n",
            ct.namespace,
            "-o",
            "jsonpath={.status}",
        )
    )
    assert got == {"replicas": 3}
