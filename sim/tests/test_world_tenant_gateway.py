"""The tenant gateway in child clusters: a ClusterDeployment labelled with a domain gets the
Gateway standing in for the platform's regional one, and routes attach to it as they would in
production. Checked through the official client and kubectl on the child.
"""

from __future__ import annotations

import asyncio
import base64
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from kubernetes import client, config

from sim.controllers.gateway import CONTROLLER_NAME
from sim.controllers.tenant_gateway import DOMAIN_LABEL, TCP_PORTS_ANNOTATION, tcp_ports
from sim.tests.conftest import call
from sim.timing import SimTiming
from sim.world import KCM_NAMESPACE, REMOTE_CREDENTIAL, REMOTE_TEMPLATE, SimWorld, WorldConfig
from tests.helpers import eventually, unique

KUBECTL = Path(sys.executable).parent / "kubectl"
GROUP = "gateway.networking.k8s.io"
DOMAIN = "acme.colony.example"


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[SimWorld]:
    async with SimWorld(WorldConfig(state_dir=tmp_path, timing=SimTiming.instant())) as started:
        yield started


async def child(
    world: SimWorld, name: str, labels: dict[str, str], annotations: dict[str, str] | None = None
) -> tuple[Any, Any, Path]:
    """(CoreV1Api, CustomObjectsApi, kubeconfig path) of the child of a new ClusterDeployment."""
    rt = world.store.registry.get("k0rdent.mirantis.com", "clusterdeployments")
    world.store.create(
        rt,
        {
            "metadata": {"name": name, "namespace": KCM_NAMESPACE, "labels": labels,
                         "annotations": annotations or {}},
            "spec": {"template": REMOTE_TEMPLATE, "credential": REMOTE_CREDENTIAL,
                     "config": {"machines": [{"address": "192.0.2.10", "port": 22, "user": "root"}]}},
        },
    )  # fmt: skip

    async def kubeconfig() -> str:
        secret = world.store.try_get(
            world.store.registry.get("", "secrets"), KCM_NAMESPACE, f"{name}-kubeconfig"
        )
        return str(((secret or {}).get("data") or {}).get("value") or "")

    text = base64.b64decode(await eventually(kubeconfig, what="child kubeconfig")).decode()
    path = world.state_dir / f"{name}.kubeconfig"
    path.write_text(text)
    configuration = client.Configuration()
    config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]  # untyped in the client
        yaml.safe_load(text), client_configuration=configuration, persist_config=False
    )
    api = client.ApiClient(configuration)
    return client.CoreV1Api(api), client.CustomObjectsApi(api), path


async def gateway_status(custom: Any, until: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    async def probe() -> dict[str, Any]:
        try:
            got = await call(custom.get_namespaced_custom_object, GROUP, "v1", "colony-gateway", "gateways", "tenant")  # fmt: skip
        except client.ApiException:
            return {}
        return dict(got)

    return await eventually(probe, until=until, what="tenant gateway")


def condition(entry: dict[str, Any], type_: str) -> str:
    return next((c["status"] for c in entry.get("conditions") or [] if c["type"] == type_), "")


@pytest.mark.parametrize(
    ("annotation", "pool", "problem"),
    [
        pytest.param(None, (30000, 30009), False, id="default"),
        pytest.param("31000-31003", (31000, 31003), False, id="custom"),
        pytest.param("31000", (30000, 30009), True, id="not-a-range"),
        pytest.param("1-100", (30000, 30009), True, id="too-many"),
    ],
)
def test_tcp_port_pool(annotation: str | None, pool: tuple[int, int], problem: bool) -> None:
    got, message = tcp_ports(annotation)
    assert got == pool
    assert (message is not None) is problem


async def test_tenant_gateway_in_the_child(world: SimWorld) -> None:
    name = unique("tenant")
    core, custom, kubeconfig = await child(world, name, {DOMAIN_LABEL: DOMAIN})

    def programmed(gateway: dict[str, Any]) -> bool:
        return condition(gateway.get("status") or {}, "Programmed") == "True"

    gateway = await gateway_status(custom, programmed)
    meta, spec, status = gateway["metadata"], gateway["spec"], gateway["status"]
    assert meta["labels"]["colony.dev/tenant-gateway"] == "true"
    assert meta["annotations"]["colony.dev/domain"] == DOMAIN
    assert spec["gatewayClassName"] == "colony-sim"
    assert status["addresses"] == [{"type": "Hostname", "value": DOMAIN}]
    listeners = {x["name"]: x for x in spec["listeners"]}
    assert list(listeners)[:2] == ["https", "http"]
    assert [x for x in listeners if x.startswith("tcp-")] == [
        f"tcp-{p}" for p in range(30000, 30010)
    ]
    assert (listeners["https"]["port"], listeners["https"]["hostname"]) == (443, f"*.{DOMAIN}")
    assert listeners["https"]["tls"]["certificateRefs"][0]["name"] == "tenant-tls"
    assert (listeners["http"]["port"], listeners["tcp-30004"]["port"]) == (80, 30004)
    assert all(x["allowedRoutes"]["namespaces"]["from"] == "All" for x in listeners.values())
    assert all(condition(x, "Programmed") == "True" for x in status["listeners"])

    gateway_class = await call(custom.get_cluster_custom_object, GROUP, "v1", "gatewayclasses", "colony-sim")  # fmt: skip
    assert gateway_class["spec"]["controllerName"] == CONTROLLER_NAME
    assert condition(gateway_class["status"], "Accepted") == "True"
    secret = await call(core.read_namespaced_secret, "tenant-tls", "colony-gateway")
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret.data["tls.crt"]))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(names.get_values_for_type(x509.DNSName)) == {f"*.{DOMAIN}", DOMAIN}

    # A workspace's routes, from its own namespace, as Colony will attach them.
    await call(core.create_namespace, {"metadata": {"name": "ws-alice"}})
    await call(core.create_namespaced_service, "ws-alice", {"metadata": {"name": "nb"}, "spec": {"ports": [{"port": 8888}]}})  # fmt: skip
    parent = {"name": "tenant", "namespace": "colony-gateway", "sectionName": "https"}
    await call(custom.create_namespaced_custom_object, GROUP, "v1", "ws-alice", "httproutes", {
        "apiVersion": f"{GROUP}/v1", "kind": "HTTPRoute", "metadata": {"name": "nb"},
        "spec": {"parentRefs": [parent], "hostnames": [f"alice-nb.{DOMAIN}"],
                 "rules": [{"backendRefs": [{"name": "nb", "port": 8888}]}]},
    })  # fmt: skip
    await call(custom.create_namespaced_custom_object, GROUP, "v1alpha2", "ws-alice", "tcproutes", {
        "apiVersion": f"{GROUP}/v1alpha2", "kind": "TCPRoute", "metadata": {"name": "ssh"},
        "spec": {"parentRefs": [{**parent, "sectionName": "tcp-30003"}],
                 "rules": [{"backendRefs": [{"name": "nb", "port": 8888}]}]},
    })  # fmt: skip

    def attached(gateway: dict[str, Any]) -> bool:
        counts = {x["name"]: x["attachedRoutes"] for x in (gateway.get("status") or {}).get("listeners") or []}  # fmt: skip
        return counts.get("https") == 1 and counts.get("tcp-30003") == 1

    await gateway_status(custom, attached)
    route = await call(custom.get_namespaced_custom_object, GROUP, "v1", "ws-alice", "httproutes", "nb")  # fmt: skip
    (entry,) = route["status"]["parents"]
    assert condition(entry, "Accepted") == "True"
    assert condition(entry, "ResolvedRefs") == "True"

    if KUBECTL.exists():
        process = await asyncio.create_subprocess_exec(
            str(KUBECTL), "--kubeconfig", str(kubeconfig), "get", "gateways", "-A",
            "-l", "colony.dev/tenant-gateway=true",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 0, err.decode()
        row = out.decode().splitlines()[1].split()
        assert row[:5] == ["colony-gateway", "tenant", "colony-sim", DOMAIN, "True"]


async def test_tenant_gateway_follows_the_label(world: SimWorld) -> None:
    name = unique("tenant")
    _, custom, _ = await child(world, name, {DOMAIN_LABEL: DOMAIN}, {TCP_PORTS_ANNOTATION: "31000-31001"})  # fmt: skip
    gateway = await gateway_status(custom, lambda g: bool(g.get("status")))
    assert [x["name"] for x in gateway["spec"]["listeners"]] == ["https", "http", "tcp-31000", "tcp-31001"]  # fmt: skip

    rt = world.store.registry.get("k0rdent.mirantis.com", "clusterdeployments")
    world.store.patch(
        rt, KCM_NAMESPACE, name, {"metadata": {"labels": {DOMAIN_LABEL: "beta.colony.example"}}},
        "application/merge-patch+json",
    )  # fmt: skip

    def moved(gateway: dict[str, Any]) -> bool:
        addresses = (gateway.get("status") or {}).get("addresses") or []
        return addresses == [{"type": "Hostname", "value": "beta.colony.example"}]

    moved_gateway = await gateway_status(custom, moved)
    assert moved_gateway["spec"]["listeners"][0]["hostname"] == "*.beta.colony.example"

    world.store.patch(
        rt, KCM_NAMESPACE, name, {"metadata": {"labels": {DOMAIN_LABEL: None}}},
        "application/merge-patch+json",
    )  # fmt: skip
    await gateway_status(custom, lambda g: g == {})
