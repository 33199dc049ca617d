"""The simulated Gateway API implementation: GatewayClass, Gateway, HTTPRoute and TCPRoute status
as a conformant controller writes it, created and read through the official client
(CustomObjectsApi, as for any Gateway API client) and listed with kubectl.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from sim.apiserver.registry import NAMESPACES, SECRETS, SERVICES
from sim.apiserver.server import ClusterServer
from sim.apiserver.store import ClusterStore
from sim.controllers.gateway import (
    CONTROLLER_NAME,
    TRAFFIC_CONDITION,
    GatewayController,
    hostnames_intersect,
)
from sim.real.kubeapi import KubeApi
from sim.tests.conftest import call
from tests.helpers import eventually

KUBECTL = Path(sys.executable).parent / "kubectl"
GROUP = "gateway.networking.k8s.io"


@dataclass
class Env:
    cluster: ClusterServer
    api: Any  # CustomObjectsApi: generated hints type every result `object`

    async def create(self, plural: str, obj: dict[str, Any], version: str = "v1") -> None:
        namespace = obj["metadata"].get("namespace")
        if plural == "gatewayclasses":
            await call(self.api.create_cluster_custom_object, GROUP, version, plural, obj)
        else:
            await call(self.api.create_namespaced_custom_object, GROUP, version, namespace, plural, obj)  # fmt: skip

    async def status(
        self, plural: str, namespace: str, name: str, until: Callable[[dict[str, Any]], bool],
        version: str = "v1",
    ) -> dict[str, Any]:  # fmt: skip
        async def probe() -> dict[str, Any]:
            got = await call(self.api.get_namespaced_custom_object, GROUP, version, namespace, plural, name)  # fmt: skip
            return dict(got.get("status") or {})

        return await eventually(probe, until=until, what=f"{plural} {namespace}/{name} status")


@pytest.fixture(params=["store", "http"])
async def env(
    request: pytest.FixtureRequest, cluster: ClusterServer, api_client: client.ApiClient
) -> AsyncIterator[Env]:
    """The controller on the cluster's store in process, or over HTTPS through the official
    client (`sim.real.kubeapi.KubeApi`, as it runs on a real child cluster)."""
    store = cluster.store
    for name, labels in (("infra", {}), ("apps", {}), ("team-a", {"team": "a"}), ("team-b", {"team": "b"})):  # fmt: skip
        store.create(NAMESPACES, {"metadata": {"name": name, "labels": labels}})
    store.create(
        SECRETS,
        {
            "metadata": {"name": "wildcard-tls", "namespace": "infra"},
            "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": "CERT", "tls.key": "KEY"},
        },
    )
    for namespace in ("infra", "apps"):
        store.create(SERVICES, {"metadata": {"name": "web", "namespace": namespace}, "spec": {"ports": [{"port": 80}]}})  # fmt: skip
    api: ClusterStore | KubeApi = store
    if request.param == "http":
        api = await KubeApi(store.name, cluster.kubeconfig()).start()
    task = asyncio.create_task(GatewayController(api).run())
    try:
        yield Env(cluster, client.CustomObjectsApi(api_client))
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if isinstance(api, KubeApi):
            await api.close()


def listener(name: str, protocol: str, port: int, *, hostname: str | None = None,
             origin: str | None = None, selector: dict[str, str] | None = None,
             kinds: list[str] | None = None, cert: str = "wildcard-tls") -> dict[str, Any]:  # fmt: skip
    spec: dict[str, Any] = {"name": name, "protocol": protocol, "port": port}
    if hostname:
        spec["hostname"] = hostname
    if origin:
        namespaces: dict[str, Any] = {"from": origin}
        if selector:
            namespaces["selector"] = {"matchLabels": selector}
        spec["allowedRoutes"] = {"namespaces": namespaces}
    if kinds:
        spec.setdefault("allowedRoutes", {})["kinds"] = [{"kind": k} for k in kinds]
    if protocol == "HTTPS":
        spec["tls"] = {"mode": "Terminate", "certificateRefs": [{"kind": "Secret", "name": cert}]}
    return spec


LISTENERS = [
    listener("http", "HTTP", 80, hostname="*.example.com"),
    listener("web-all", "HTTP", 8080, hostname="*.example.com", origin="All"),
    listener("sel", "HTTP", 8081, origin="Selector", selector={"team": "a"}),
    listener("https", "HTTPS", 443, hostname="*.example.com", origin="All"),
    listener("tcp-30000", "TCP", 30000, origin="All"),
]


async def gateway_setup(env: Env, listeners: list[dict[str, Any]] | None = None, name: str = "gw") -> None:  # fmt: skip
    with contextlib.suppress(client.ApiException):
        await env.create("gatewayclasses", {
            "apiVersion": f"{GROUP}/v1", "kind": "GatewayClass",
            "metadata": {"name": "sim"}, "spec": {"controllerName": CONTROLLER_NAME},
        })  # fmt: skip
    await env.create("gateways", {
        "apiVersion": f"{GROUP}/v1", "kind": "Gateway",
        "metadata": {"name": name, "namespace": "infra"},
        "spec": {"gatewayClassName": "sim", "listeners": listeners or LISTENERS},
    })  # fmt: skip


def http_route(name: str, namespace: str, *, section: str | None = None, port: int | None = None,
               hostnames: list[str] | None = None, backend: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    ref: dict[str, Any] = {"name": "gw", "namespace": "infra"}
    if section:
        ref["sectionName"] = section
    if port:
        ref["port"] = port
    spec: dict[str, Any] = {
        "parentRefs": [ref],
        "rules": [{"backendRefs": [backend or {"name": "web", "port": 80}]}],
    }
    if hostnames:
        spec["hostnames"] = hostnames
    return {"apiVersion": f"{GROUP}/v1", "kind": "HTTPRoute", "metadata": {"name": name, "namespace": namespace}, "spec": spec}  # fmt: skip


def condition(entry: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in entry.get("conditions") or [] if c["type"] == type_), {})


def parent(status: dict[str, Any]) -> dict[str, Any]:
    ours = [p for p in status.get("parents") or [] if p["controllerName"] == CONTROLLER_NAME]
    return ours[0] if ours else {}


def has_parent(status: dict[str, Any]) -> bool:
    return bool(parent(status))


@pytest.mark.parametrize(
    ("listener_name", "other", "expected"),
    [
        pytest.param("", "foo.example.com", True, id="listener-any"),
        pytest.param("*.example.com", "foo.example.com", True, id="wildcard-one-label"),
        pytest.param("*.example.com", "a.b.example.com", True, id="wildcard-many-labels"),
        pytest.param("*.example.com", "example.com", False, id="wildcard-not-apex"),
        pytest.param("*.example.com", "*.foo.example.com", True, id="wildcards-nested"),
        pytest.param("foo.example.com", "*.example.com", True, id="route-wildcard"),
        pytest.param("foo.example.com", "bar.example.com", False, id="exact-mismatch"),
        pytest.param("*.example.com", "foo.example.org", False, id="other-domain"),
    ],
)
def test_hostname_intersection(listener_name: str, other: str, expected: bool) -> None:
    assert hostnames_intersect(listener_name, other) is expected


@pytest.mark.parametrize(
    ("route", "accepted", "reason"),
    [
        pytest.param(http_route("same-ns", "infra", section="http", hostnames=["app.example.com"]), "True", "Accepted", id="same-namespace"),
        pytest.param(http_route("other-ns", "apps", section="http"), "False", "NotAllowedByListeners", id="same-only-listener"),
        pytest.param(http_route("bad-host", "apps", section="web-all", hostnames=["app.other.org"]), "False", "NoMatchingListenerHostname", id="hostname"),
        pytest.param(http_route("apex", "apps", section="web-all", hostnames=["example.com"]), "False", "NoMatchingListenerHostname", id="wildcard-excludes-apex"),
        pytest.param(http_route("no-section", "apps", section="nope"), "False", "NoMatchingParent", id="section-name"),
        pytest.param(http_route("no-port", "apps", port=9999), "False", "NoMatchingParent", id="port"),
        pytest.param(http_route("port", "apps", port=8080), "True", "Accepted", id="port-selects"),
        pytest.param(http_route("selected", "team-a", section="sel"), "True", "Accepted", id="selector-match"),
        pytest.param(http_route("unselected", "team-b", section="sel"), "False", "NotAllowedByListeners", id="selector-miss"),
        pytest.param(http_route("wrong-kind", "apps", section="tcp-30000"), "False", "NotAllowedByListeners", id="tcp-listener"),
    ],
)  # fmt: skip
async def test_route_acceptance(
    env: Env, route: dict[str, Any], accepted: str, reason: str
) -> None:
    await gateway_setup(env)
    await env.create("httproutes", route)
    meta = route["metadata"]
    status = await env.status("httproutes", meta["namespace"], meta["name"], has_parent)
    got = condition(parent(status), "Accepted")
    assert (got["status"], got["reason"]) == (accepted, reason), got
    assert parent(status)["parentRef"]["name"] == "gw"
    assert got["observedGeneration"] == 1


@pytest.mark.parametrize(
    ("namespace", "backend", "grant", "expected"),
    [
        pytest.param("apps", {"name": "web", "port": 80}, False, ("True", "ResolvedRefs"), id="exists"),
        pytest.param("apps", {"name": "ghost", "port": 80}, False, ("False", "BackendNotFound"), id="missing"),
        pytest.param("apps", {"name": "web", "namespace": "infra", "port": 80}, False, ("False", "RefNotPermitted"), id="cross-namespace"),
        pytest.param("apps", {"name": "web", "namespace": "infra", "port": 80}, True, ("True", "ResolvedRefs"), id="granted"),
        pytest.param("apps", {"group": "", "kind": "ConfigMap", "name": "web"}, False, ("False", "InvalidKind"), id="kind"),
    ],
)  # fmt: skip
async def test_backend_refs(
    env: Env, namespace: str, backend: dict[str, Any], grant: bool, expected: tuple[str, str]
) -> None:
    await gateway_setup(env)
    if grant:
        await env.create("referencegrants", {
            "apiVersion": f"{GROUP}/v1beta1", "kind": "ReferenceGrant",
            "metadata": {"name": "apps-to-web", "namespace": "infra"},
            "spec": {"from": [{"group": GROUP, "kind": "HTTPRoute", "namespace": "apps"}],
                     "to": [{"group": "", "kind": "Service", "name": "web"}]},
        }, version="v1beta1")  # fmt: skip
    await env.create("httproutes", http_route("r", namespace, section="web-all", backend=backend))
    status = await env.status("httproutes", namespace, "r", has_parent)
    got = condition(parent(status), "ResolvedRefs")
    assert (got["status"], got["reason"]) == expected
    assert condition(parent(status), "Accepted")["status"] == "True"


async def test_gateway_status_listeners_and_attached_routes(env: Env) -> None:
    await gateway_setup(env)
    await env.create("httproutes", http_route("a", "apps", hostnames=["a.example.com"]))
    await env.create("httproutes", http_route("b", "infra", section="http"))

    def attached(status: dict[str, Any]) -> bool:
        counts = {x["name"]: x["attachedRoutes"] for x in status.get("listeners") or []}
        return counts.get("web-all") == 1 and counts.get("http") == 1

    status = await env.status("gateways", "infra", "gw", attached)
    counts = {x["name"]: x["attachedRoutes"] for x in status["listeners"]}
    # Route a (namespace apps, no sectionName) attaches to every listener admitting apps whose
    # hostname matches: web-all and https; route b to http.
    assert counts == {"http": 1, "web-all": 1, "sel": 0, "https": 1, "tcp-30000": 0}
    assert status["addresses"] == [{"type": "IPAddress", "value": "203.0.113.200"}]
    assert (condition(status, "Accepted")["reason"], condition(status, "Programmed")["status"]) == ("Accepted", "True")  # fmt: skip
    by_name = {x["name"]: x for x in status["listeners"]}
    assert by_name["tcp-30000"]["supportedKinds"] == [{"group": GROUP, "kind": "TCPRoute"}]
    for name in counts:
        assert condition(by_name[name], "Programmed")["status"] == "True", name


async def test_invalid_listeners(env: Env) -> None:
    listeners = [
        listener("ok", "HTTP", 80),
        listener("clash-tcp", "TCP", 80, origin="All"),
        listener("no-cert", "HTTPS", 443, cert="missing"),
        listener("udp", "UDP", 53),
        listener("kinds", "HTTP", 8080, kinds=["HTTPRoute", "GRPCRoute"]),
    ]
    await gateway_setup(env, listeners)

    status = await env.status("gateways", "infra", "gw", lambda s: bool(s.get("listeners")))
    by_name = {x["name"]: x for x in status["listeners"]}

    def reason(name: str, type_: str) -> tuple[str, str]:
        got = condition(by_name[name], type_)
        return got["status"], got["reason"]

    assert reason("ok", "Conflicted") == ("True", "ProtocolConflict")
    assert reason("clash-tcp", "Conflicted") == ("True", "ProtocolConflict")
    assert reason("clash-tcp", "Accepted")[0] == "False"
    assert reason("no-cert", "ResolvedRefs") == ("False", "InvalidCertificateRef")
    assert reason("no-cert", "Programmed") == ("False", "Invalid")
    assert reason("udp", "Accepted") == ("False", "UnsupportedProtocol")
    assert reason("kinds", "ResolvedRefs") == ("False", "InvalidRouteKinds")
    assert by_name["kinds"]["supportedKinds"] == [{"group": GROUP, "kind": "HTTPRoute"}]
    assert condition(status, "Accepted")["reason"] == "ListenersNotValid"


async def test_tcp_routes_on_one_listener(env: Env) -> None:
    await gateway_setup(env)
    for name in ("first", "second"):
        await env.create("tcproutes", {
            "apiVersion": f"{GROUP}/v1alpha2", "kind": "TCPRoute",
            "metadata": {"name": name, "namespace": "apps"},
            "spec": {"parentRefs": [{"name": "gw", "namespace": "infra", "sectionName": "tcp-30000"}],
                     "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]},
        }, version="v1alpha2")  # fmt: skip
        if name == "first":
            await env.status("tcproutes", "apps", "first", has_parent, version="v1alpha2")
    # Oldest first; creationTimestamps have second precision, so ties go by namespace/name
    # (first < second), as the spec's conflict resolution orders them.

    first = await env.status("tcproutes", "apps", "first", has_parent, version="v1alpha2")
    second = await env.status("tcproutes", "apps", "second", has_parent, version="v1alpha2")
    for status in (first, second):
        assert condition(parent(status), "Accepted")["status"] == "True"
    assert condition(parent(first), TRAFFIC_CONDITION) == {}
    shadowed = condition(parent(second), TRAFFIC_CONDITION)
    assert (shadowed["status"], shadowed["reason"]) == ("False", "OlderRouteOnListener")
    assert "apps/first" in shadowed["message"]

    def two(status: dict[str, Any]) -> bool:
        return any(x["name"] == "tcp-30000" and x["attachedRoutes"] == 2 for x in status.get("listeners") or [])  # fmt: skip

    await env.status("gateways", "infra", "gw", two)


async def test_routes_to_gateways_of_others_get_no_entry(env: Env) -> None:
    await gateway_setup(env)
    await env.create("httproutes", http_route("mine", "apps", section="web-all"))
    elsewhere = http_route("elsewhere", "apps")
    elsewhere["spec"]["parentRefs"].append({"name": "not-there", "namespace": "infra"})
    await env.create("httproutes", elsewhere)
    status = await env.status("httproutes", "apps", "elsewhere", has_parent)
    assert [p["parentRef"]["name"] for p in status["parents"]] == ["gw"]


@pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl is not installed in the venv")
async def test_kubectl_gets_gateway_api_objects(env: Env, kubeconfig_file: Path) -> None:
    await gateway_setup(env)
    await env.create("httproutes", http_route("app", "apps", hostnames=["app.example.com"]))
    await env.status("gateways", "infra", "gw", lambda s: bool(s.get("addresses")))

    async def kubectl(*args: str) -> str:
        process = await asyncio.create_subprocess_exec(
            str(KUBECTL), "--kubeconfig", str(kubeconfig_file), *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 0, err.decode()
        return out.decode()

    classes = (await kubectl("get", "gatewayclass")).splitlines()
    assert classes[0].split() == ["NAME", "CONTROLLER", "ACCEPTED", "AGE"]
    assert classes[1].split()[:3] == ["sim", CONTROLLER_NAME, "True"]
    gateways = (await kubectl("get", "gtw", "-n", "infra")).splitlines()
    assert gateways[0].split() == ["NAME", "CLASS", "ADDRESS", "PROGRAMMED", "AGE"]
    assert gateways[1].split()[:4] == ["gw", "sim", "203.0.113.200", "True"]
    routes = (await kubectl("get", "httproutes", "-A")).splitlines()
    assert routes[0].split() == ["NAMESPACE", "NAME", "HOSTNAMES", "AGE"]
    assert '["app.example.com"]' in routes[1]
