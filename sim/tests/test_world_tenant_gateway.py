"""The tenant gateway in child clusters: a ClusterDeployment labelled with a domain gets the
Gateway standing in for the platform's regional one, routes attach to it as they would in
production, and its listeners are real local ports that route to the simulated workloads.
Checked through the official client and kubectl on the child, and over HTTPS and TCP as a user's
browser, curl or ssh would connect (the name sent as SNI and Host, checked against the sim CA).
"""

from __future__ import annotations

import asyncio
import base64
import shutil
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from cryptography import x509
from kubernetes import client, config

from sim.apiserver.store import ClusterStore
from sim.controllers.gateway import CONTROLLER_NAME
from sim.controllers.gateway_dataplane import TenantGatewayDataPlane
from sim.controllers.tenant_gateway import DOMAIN_LABEL, TCP_PORTS_ANNOTATION, tcp_ports
from sim.tests.conftest import call
from sim.timing import SimTiming
from sim.world import KCM_NAMESPACE, REMOTE_CREDENTIAL, REMOTE_TEMPLATE, SimWorld, WorldConfig
from tests.access import gateway_get
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
    assert status["addresses"] == [{"type": "IPAddress", "value": "127.0.0.1"}]
    listeners = {x["name"]: x for x in spec["listeners"]}
    assert list(listeners)[:2] == ["https", "http"]
    tcp = [x for x in spec["listeners"] if x["protocol"] == "TCP"]
    assert len(tcp) == 10, "the default pool's size"
    assert all(x["name"] == f"tcp-{x['port']}" for x in tcp)
    assert listeners["https"]["hostname"] == f"*.{DOMAIN}"
    assert listeners["https"]["tls"]["certificateRefs"][0]["name"] == "tenant-tls"
    ports = {x["port"] for x in spec["listeners"]}
    assert len(ports) == len(spec["listeners"]), "one port per listener"
    for port in ports:  # every listener's port is a real one on the Gateway's address
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()
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
        "spec": {"parentRefs": [{**parent, "sectionName": tcp[3]["name"]}],
                 "rules": [{"backendRefs": [{"name": "nb", "port": 8888}]}]},
    })  # fmt: skip

    def attached(gateway: dict[str, Any]) -> bool:
        counts = {x["name"]: x["attachedRoutes"] for x in (gateway.get("status") or {}).get("listeners") or []}  # fmt: skip
        return counts.get("https") == 1 and counts.get(tcp[3]["name"]) == 1

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
        assert row[:5] == ["colony-gateway", "tenant", "colony-sim", "127.0.0.1", "True"]


async def test_tenant_gateway_follows_the_label(world: SimWorld) -> None:
    name = unique("tenant")
    _, custom, _ = await child(world, name, {DOMAIN_LABEL: DOMAIN}, {TCP_PORTS_ANNOTATION: "31000-31001"})  # fmt: skip
    gateway = await gateway_status(custom, lambda g: bool(g.get("status")))
    listeners = gateway["spec"]["listeners"]
    assert [x["name"] for x in listeners][:2] == ["https", "http"]
    # The pool's size is the annotation's; its ports are those when free (another simulator on
    # this machine may hold them).
    assert len(listeners) == 4
    https = listeners[0]["port"]

    rt = world.store.registry.get("k0rdent.mirantis.com", "clusterdeployments")
    world.store.patch(
        rt, KCM_NAMESPACE, name, {"metadata": {"labels": {DOMAIN_LABEL: "beta.colony.example"}}},
        "application/merge-patch+json",
    )  # fmt: skip

    def moved(gateway: dict[str, Any]) -> bool:
        listeners = (gateway.get("spec") or {}).get("listeners") or [{}]
        return bool(listeners[0].get("hostname") == "*.beta.colony.example")

    moved_gateway = await gateway_status(custom, moved)
    assert moved_gateway["spec"]["listeners"][0]["port"] == https, "the ports stay"

    world.store.patch(
        rt, KCM_NAMESPACE, name, {"metadata": {"labels": {DOMAIN_LABEL: None}}},
        "application/merge-patch+json",
    )  # fmt: skip
    await gateway_status(custom, lambda g: g == {})

    async def closed() -> bool:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", https)
        except OSError:
            return True
        writer.close()
        return False

    assert await eventually(closed, what="the HTTPS listener closed with the Gateway")


async def accepted(custom: Any, version: str, plural: str, namespace: str, name: str) -> None:
    async def probe() -> str:
        route = await call(custom.get_namespaced_custom_object, GROUP, version, namespace, plural, name)  # fmt: skip
        parents = (route.get("status") or {}).get("parents") or [{}]
        return condition(parents[0], "Accepted")

    await eventually(probe, until=lambda s: s == "True", what=f"{plural} {name} accepted")


async def test_the_gateway_routes_to_the_workloads(world: SimWorld) -> None:
    name = unique("tenant")
    core, custom, _ = await child(world, name, {DOMAIN_LABEL: DOMAIN})
    gateway = await gateway_status(
        custom, lambda g: condition(g.get("status") or {}, "Programmed") == "True"
    )
    ports = {x["name"]: x["port"] for x in gateway["spec"]["listeners"]}
    tcp = next(x["name"] for x in gateway["spec"]["listeners"] if x["protocol"] == "TCP")
    namespace = "ws-bob"
    await call(core.create_namespace, {"metadata": {"name": namespace}})
    await call(core.create_namespaced_pod, namespace, {
        "metadata": {"name": "nb-0", "labels": {"app": "nb"},
                     "annotations": {"sim.colony.dev/serves": '{"8888": "jupyter", "22": "ssh"}'}},
        "spec": {"containers": [{"name": "notebook", "image": "quay.io/jupyter/base-notebook",
                                 "ports": [{"name": "http", "containerPort": 8888}]}]},
    })  # fmt: skip
    await call(core.create_namespaced_service, namespace, {
        "metadata": {"name": "nb"},
        "spec": {"selector": {"app": "nb"},
                 "ports": [{"name": "http", "port": 8888, "targetPort": "http"}, {"name": "ssh", "port": 22}]},
    })  # fmt: skip
    await call(core.create_namespaced_service, namespace, {
        "metadata": {"name": "nobody"}, "spec": {"selector": {"app": "none"}, "ports": [{"port": 80}]},
    })  # fmt: skip
    routes = {"nb": ("https", "nb", 8888), "plain": ("http", "nb", 8888), "empty": ("https", "nobody", 80)}  # fmt: skip
    for route, (section, service, port) in routes.items():
        await call(custom.create_namespaced_custom_object, GROUP, "v1", namespace, "httproutes", {
            "apiVersion": f"{GROUP}/v1", "kind": "HTTPRoute", "metadata": {"name": route},
            "spec": {"parentRefs": [{"name": "tenant", "namespace": "colony-gateway", "sectionName": section}],
                     "hostnames": [f"{route}.{DOMAIN}"],
                     "rules": [{"backendRefs": [{"name": service, "port": port}]}]},
        })  # fmt: skip
    await call(custom.create_namespaced_custom_object, GROUP, "v1alpha2", namespace, "tcproutes", {
        "apiVersion": f"{GROUP}/v1alpha2", "kind": "TCPRoute", "metadata": {"name": "ssh"},
        "spec": {"parentRefs": [{"name": "tenant", "namespace": "colony-gateway", "sectionName": tcp}],
                 "rules": [{"backendRefs": [{"name": "nb", "port": 22}]}]},
    })  # fmt: skip
    for route in routes:
        await accepted(custom, "v1", "httproutes", namespace, route)
    await accepted(custom, "v1alpha2", "tcproutes", namespace, "ssh")

    async def phase() -> str:
        return str((await call(core.read_namespaced_pod, "nb-0", namespace)).status.phase)

    await eventually(phase, until=lambda p: p == "Running", what="the notebook running")

    https = f"https://nb.{DOMAIN}:{ports['https']}"
    lab = await gateway_get(f"{https}/", "127.0.0.1", world.ca_path)
    assert lab.status_code == 200
    assert "SIMULATED JupyterLab" in lab.text
    assert f"<td>{namespace}</td>" in lab.text
    api = await gateway_get(f"{https}/api", "127.0.0.1", world.ca_path)
    assert api.json() == {"version": "2.14.2"}
    assert api.headers["X-Colony-Simulated"] == f"{namespace}/nb-0"
    plain = await gateway_get(f"http://plain.{DOMAIN}:{ports['http']}/api", "127.0.0.1", world.ca_path)  # fmt: skip
    assert plain.json() == {"version": "2.14.2"}
    # Envoy's answers: a host without a route, a route on the other listener, no endpoints.
    unknown = await gateway_get(f"https://who.{DOMAIN}:{ports['https']}/", "127.0.0.1", world.ca_path)  # fmt: skip
    assert unknown.status_code == 404
    other_listener = await gateway_get(f"http://nb.{DOMAIN}:{ports['http']}/", "127.0.0.1", world.ca_path)  # fmt: skip
    assert other_listener.status_code == 404
    empty = await gateway_get(f"https://empty.{DOMAIN}:{ports['https']}/", "127.0.0.1", world.ca_path)  # fmt: skip
    assert (empty.status_code, empty.text) == (503, "no healthy upstream")
    # The certificate is *.<domain>'s: another name is refused in the TLS handshake.
    with pytest.raises(httpx.ConnectError):
        await gateway_get(f"https://nb.elsewhere.example:{ports['https']}/", "127.0.0.1", world.ca_path)  # fmt: skip

    reader, writer = await asyncio.open_connection("127.0.0.1", ports[tcp])
    banner = await asyncio.wait_for(reader.readline(), 30)
    writer.close()
    assert banner == f"SSH-2.0-OpenSSH_9.6p1 SIMULATED colony-sim {namespace}/nb-0\r\n".encode()

    curl = shutil.which("curl")
    if curl is not None:  # the command the docs give, as a user types it
        process = await asyncio.create_subprocess_exec(
            curl, "-sS", "--cacert", str(world.ca_path),
            "--resolve", f"nb.{DOMAIN}:{ports['https']}:127.0.0.1", f"{https}/api",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode == 0, err.decode()
        assert out == b'{"version": "2.14.2"}'


async def test_the_data_plane_takes_the_ports_it_is_asked_for_when_free() -> None:
    store = ClusterStore(unique("dp"))
    first = TenantGatewayDataPlane(store, "colony-gateway", "tenant")
    ports = await first.listen(2)
    assert len({ports.https, ports.http, *ports.tcp}) == 4
    assert await first.listen(2) == ports, "a Gateway keeps its ports"
    smaller = await first.listen(1)
    assert smaller.tcp == ports.tcp[:1], "the highest pool port closes first"
    await first.stop()

    # A restarted world asks for the ports its Gateway declared: free again, they are taken.
    again = TenantGatewayDataPlane(store, "colony-gateway", "tenant")
    try:
        assert await again.listen(2, keep=ports) == ports
        # A port in use (here: by the running data plane) is replaced by one the OS picks.
        third = TenantGatewayDataPlane(store, "colony-gateway", "tenant")
        try:
            other = await third.listen(2, keep=ports)
            assert not {other.https, other.http, *other.tcp} & {ports.https, ports.http, *ports.tcp}
        finally:
            await third.stop()
    finally:
        await again.stop()
