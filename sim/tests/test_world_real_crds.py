"""`SimWorld` on k0rdent's real CRDs: everything the sim and Colony write must validate against them.

k0rdent's released CRDs are read at test time from `../shared/k0rdent-crds/` (next to the repo; never
copied into it) and installed with `WorldConfig.crd_paths`, replacing the sim's own of the same name
(the sim's StateManagementProvider stays: the folder has none). The store validates every write of
a custom resource against the installed schema (create, update, patch, status, and the controllers'
`update_status` / `mutate` shortcuts) and records rejections in `store.rejected_writes` and fields
lost to pruning in `store.pruned_writes`, so a run of the whole lifecycle with empty records proves
the controllers' statuses fit the real status schema, field for field. The lifecycle is driven as
Colony drives it: the official client's CustomObjectsApi, blocking, so it runs in a thread while
the world serves on the test loop.

Skipped cleanly when the folder is absent.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from sim.apiserver.errors import ApiError
from sim.apiserver.registry import CRDS
from sim.apiserver.schema import validate
from sim.crds import crd_schema
from sim.timing import SimTiming
from sim.world import (
    KCM_NAMESPACE,
    REMOTE_CREDENTIAL,
    REMOTE_TEMPLATE,
    SimWorld,
    WorldConfig,
    load_crd_files,
)
from tests.helpers import eventually, eventually_sync, unique

REAL_CRDS = Path(__file__).resolve().parents[2].parent / "shared" / "k0rdent-crds"

pytestmark = pytest.mark.skipif(
    not REAL_CRDS.is_dir(), reason=f"k0rdent's real CRDs not found at {REAL_CRDS}"
)

GROUP = "k0rdent.mirantis.com"
VERSION = "v1beta1"
CLUSTER_LABEL = "colony.dev/cluster"
# k0rdent's hub ServiceTemplate a workspace uses, and its chart values (a GPU notebook).
NOTEBOOK_TEMPLATE = "jupyter-notebook-0-3-0"
NOTEBOOK_VALUES = {
    "_exalsius": {"resources": {"perReplica": {"cpu": "2", "memory": "4Gi", "gpuCount": 1}}},
    "notebookPassword": "secret",
}
Obj = dict[str, Any]


@functools.cache
def real_crds() -> dict[str, Obj]:
    """k0rdent's real CRDs by plural."""
    return {crd["spec"]["names"]["plural"]: crd for crd in load_crd_files([REAL_CRDS])}


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[SimWorld]:
    config_ = WorldConfig(state_dir=tmp_path, timing=SimTiming.instant(), crd_paths=[REAL_CRDS])
    async with SimWorld(config_) as started:
        yield started


def custom_api(kubeconfig: Path) -> client.CustomObjectsApi:
    configuration = client.Configuration()
    config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]  # untyped in the client
        yaml.safe_load(kubeconfig.read_text()),
        client_configuration=configuration,
        persist_config=False,
    )
    return client.CustomObjectsApi(client.ApiClient(configuration))


def condition(obj: Obj | None, type_: str) -> Obj:
    for item in ((obj or {}).get("status") or {}).get("conditions") or []:
        if item.get("type") == type_:
            return cast(Obj, item)
    return {}


def machines_of(world: SimWorld, count: int) -> list[Obj]:
    """`count` GPU hosts of the inventory as remote-cluster machines (address, port, user)."""
    hosts = [h for h in world.inventory.hosts() if h.gpu_count and h.location == "fra1"][:count]
    assert len(hosts) == count
    return [{"address": h.address, "port": h.ssh_port, "user": h.ssh_user} for h in hosts]


def cluster_deployment(name: str, machines: list[Obj]) -> Obj:
    """The ClusterDeployment Colony creates (activities/management.py, same shape)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ClusterDeployment",
        "metadata": {
            "name": name,
            "namespace": KCM_NAMESPACE,
            "labels": {CLUSTER_LABEL: name, "colony.dev/workflow-id": f"cluster-{name}"},
            "annotations": {"colony.dev/workflow-id": f"cluster/{name}"},
        },
        "spec": {
            "template": REMOTE_TEMPLATE,
            "credential": REMOTE_CREDENTIAL,
            "propagateCredentials": True,
            "config": {
                "clusterLabels": {CLUSTER_LABEL: name},
                "clusterNetwork": {
                    "pods": {"cidrBlocks": ["10.244.0.0/16"]},
                    "services": {"cidrBlocks": ["10.96.0.0/12"]},
                },
                "k0s": {"version": "v1.32.5+k0s.0"},
                "k0smotron": {"service": {"type": "LoadBalancer"}},
                "machines": machines,
            },
        },
    }


def service_set(name: str, cluster: str) -> Obj:
    """A ServiceSet deploying one hub ServiceTemplate onto `cluster` through projectsveltos."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ServiceSet",
        "metadata": {"name": name, "namespace": KCM_NAMESPACE, "labels": {CLUSTER_LABEL: cluster}},
        "spec": {
            "cluster": cluster,
            "provider": {"name": "ksm-projectsveltos", "selfManagement": False},
            "services": [
                {
                    "name": "ws-alice",
                    "namespace": "workspaces",
                    "template": NOTEBOOK_TEMPLATE,
                    "values": yaml.safe_dump(NOTEBOOK_VALUES),
                    # The real CRD's valuesFrom: a ConfigMap in the ServiceSet's namespace.
                    "valuesFrom": [{"kind": "ConfigMap", "name": f"{name}-values"}],
                    "helmOptions": {"timeout": "5m", "wait": True},
                }
            ],
        },
    }


def assert_valid_against_real(world: SimWorld) -> int:
    """Every k0rdent object in the world validates against its real CRD; returns how many."""
    checked = 0
    for plural, crd in real_crds().items():
        rt = world.store.registry.get(GROUP, plural)
        items, _ = world.store.list(rt)
        for obj in items:
            problems = validate(crd_schema(crd), obj)
            assert not problems, (plural, obj["metadata"]["name"], problems)
            checked += 1
    return checked


def drive_lifecycle(world: SimWorld, kubeconfig: Path) -> None:
    """Colony's lifecycle over HTTPS with the official client (blocking: run it in a thread)."""
    api = custom_api(kubeconfig)
    name, ss_name = unique("gpu"), unique("ws")
    two, three = machines_of(world, 2), machines_of(world, 3)

    def get_cd() -> Obj | None:
        try:
            return cast(
                Obj,
                api.get_namespaced_custom_object(
                    GROUP, VERSION, KCM_NAMESPACE, "clusterdeployments", name
                ),
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def ready_at_generation(obj: Obj | None) -> bool:
        return (
            obj is not None
            and condition(obj, "Ready").get("status") == "True"
            and obj["status"].get("observedGeneration") == obj["metadata"]["generation"]
        )

    created = cast(
        Obj,
        api.create_namespaced_custom_object(
            GROUP, VERSION, KCM_NAMESPACE, "clusterdeployments", cluster_deployment(name, two)
        ),
    )
    assert created["spec"]["config"]["machines"] == two
    cd = eventually_sync(get_cd, until=ready_at_generation, what=f"{name} Ready")
    assert cd is not None
    assert condition(cd, "Ready")["reason"] == "Succeeded"
    listed = cast(
        Obj,
        api.list_namespaced_custom_object(
            GROUP,
            VERSION,
            KCM_NAMESPACE,
            "clusterdeployments",
            label_selector=f"{CLUSTER_LABEL}={name}",
        ),
    )
    assert [i["metadata"]["name"] for i in listed["items"]] == [name]

    # Add a machine, then remove two, as Colony's scale activities do (merge patch guarded by rv).
    for wanted in (three, three[2:]):
        current = get_cd()
        assert current is not None
        patched = cast(Obj, api.patch_namespaced_custom_object(
            GROUP, VERSION, KCM_NAMESPACE, "clusterdeployments", name,
            {
                "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                "spec": {"config": {"machines": wanted}},
            },
        ))  # fmt: skip
        assert patched["metadata"]["generation"] == current["metadata"]["generation"] + 1
        cd = eventually_sync(get_cd, until=ready_at_generation, what=f"{name} Ready again")
        assert cd is not None
        assert cd["spec"]["config"]["machines"] == wanted

    def get_ss() -> Obj | None:
        try:
            return cast(
                Obj,
                api.get_namespaced_custom_object(
                    GROUP, VERSION, KCM_NAMESPACE, "servicesets", ss_name
                ),
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    client.CoreV1Api(api.api_client).create_namespaced_config_map(
        KCM_NAMESPACE,
        {  # type: ignore[arg-type]  # the client accepts dicts where it hints V1ConfigMap
            "metadata": {"name": f"{ss_name}-values"},
            "data": {"values.yaml": "notebookPassword: from-config-map\n"},
        },
    )
    api.create_namespaced_custom_object(
        GROUP, VERSION, KCM_NAMESPACE, "servicesets", service_set(ss_name, name)
    )
    ss = eventually_sync(
        get_ss,
        until=lambda o: bool(o and (o.get("status") or {}).get("deployed")),
        what=f"{ss_name} deployed",
    )
    assert ss is not None
    services = ss["status"]["services"]
    assert [(s["name"], s["state"]) for s in services] == [("ws-alice", "Deployed")]

    # Deletion in Colony's order: the workspace, then the cluster; each until it is gone.
    api.delete_namespaced_custom_object(GROUP, VERSION, KCM_NAMESPACE, "servicesets", ss_name)
    eventually_sync(get_ss, until=lambda o: o is None, what=f"{ss_name} gone")
    api.delete_namespaced_custom_object(GROUP, VERSION, KCM_NAMESPACE, "clusterdeployments", name)
    eventually_sync(get_cd, until=lambda o: o is None, what=f"{name} gone")
    api.api_client.close()


async def test_world_installs_the_real_crds(world: SimWorld) -> None:
    for plural, crd in real_crds().items():
        installed = world.store.get(CRDS, None, crd["metadata"]["name"])
        assert installed["spec"]["versions"] == crd["spec"]["versions"], plural
        assert world.store.registry.get(GROUP, plural).schema == crd_schema(crd)
    # Kinds the folder lacks keep the sim's CRD.
    smp = world.store.registry.get(GROUP, "statemanagementproviders")
    assert smp.schema is not None


async def test_preloaded_objects_validate_against_real_crds(world: SimWorld) -> None:
    checked = assert_valid_against_real(world)
    # Two ClusterTemplates, two Credentials and the hub's ServiceTemplates, with their status.
    assert checked >= 6
    template = world.store.get(
        world.store.registry.get(GROUP, "clustertemplates"), KCM_NAMESPACE, REMOTE_TEMPLATE
    )
    assert template["status"]["valid"] is True
    assert not world.store.rejected_writes
    assert not world.store.pruned_writes


async def test_lifecycle_through_official_client_validates(world: SimWorld) -> None:
    await asyncio.to_thread(drive_lifecycle, world, world.management_kubeconfig_path)
    assert not list(world.store.rejected_writes)
    # Nor did any write lose a field to pruning: every field the controllers (ServiceSet and
    # Credential status included) and the client wrote is one k0rdent's CRDs define.
    assert not list(world.store.pruned_writes)
    assert assert_valid_against_real(world) >= 6


async def test_invalid_controller_status_write_is_caught(
    world: SimWorld, caplog: pytest.LogCaptureFixture
) -> None:
    rt = world.store.registry.get(GROUP, "clusterdeployments")
    name = unique("bad")
    world.store.create(rt, cluster_deployment(name, machines_of(world, 1)))

    async def ready() -> Obj | None:
        return world.store.try_get(rt, KCM_NAMESPACE, name)

    await eventually(ready, until=lambda o: condition(o, "Ready").get("status") == "True")
    bad_condition = {"type": "Ready", "status": "Maybe", "reason": "Succeeded", "message": ""}
    with caplog.at_level(logging.WARNING, logger="sim.apiserver.store"):
        with pytest.raises(ApiError) as raised:
            world.store.update_status(rt, KCM_NAMESPACE, name, {"conditions": [bad_condition]})
        with pytest.raises(ApiError):
            world.store.mutate(
                rt, KCM_NAMESPACE, name, lambda o: o["status"].update(observedGeneration="one")
            )
    assert raised.value.code == 422
    rejected = list(world.store.rejected_writes)
    assert [(r.kind, r.name, r.operation, r.writer) for r in rejected] == [
        ("ClusterDeployment", name, "status", "controller"),
        ("ClusterDeployment", name, "mutate", "controller"),
    ]
    assert any("status.conditions[0]" in path for path, _, _ in rejected[0].causes)
    assert "rejected by its schema" in caplog.text
    # Nothing was stored: the object still carries the controller's valid status.
    stored = world.store.get(rt, KCM_NAMESPACE, name)
    assert condition(stored, "Ready")["status"] == "True"
