"""Reliability, part 3: faults of the infrastructure Colony drives.

- **Rates**: 20% of the requests to the management cluster, every child cluster and the host
  provider answered 429, 500 or 503 (10% throttled, 11.2% of the rest failed), each request 50 ms
  late, drawn from the scenario's seed, on the cluster path (create, scale up, scale down with a
  drain, delete) and the workspace path (deploy with a prerequisite, suspend, resume, delete)
  running side by side: every operation finishes as it would without faults, every pod evicted
  once, every host claimed once and released once, nothing created twice, nothing left behind.
- **Scripted**: a ClusterDeployment that fails (the create fails naming it and k0rdent's message,
  and nothing stays claimed), a ServiceSet that fails (the workspace fails at HelmReleaseReady with
  Helm's message), a node lost (a scale-down removes the lost node first, evicting nothing, and
  releases its host), the tenant gateway gone (a workspace deployed then says so,
  RoutingInfraNotReady, and is reached by port-forward meanwhile). Each teardown leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kubernetes import client as kube

from infra.kube import close_client
from models.cluster import cluster_deployment_name
from tests.reliability.invariants import check_creates, check_evictions, check_hosts
from tests.reliability.paths import CPU, cluster_path, place_pods, reinstalled, workspace_path
from tests.reliability.scenario import (
    JUPYTER,
    Scenario,
    Size,
    child_nodes,
    child_pods,
    cluster_gone,
    deployment,
    finished_operation,
    leftovers,
    pod_refs,
    ready_cluster,
    workspace_gone,
    workspace_in,
)
from tests.reliability.stack import KCM_NAMESPACE, LOCATION, ORGANIZATION, call, poll

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SIZES = [
    pytest.param(Size.FAST, id="fast"),
    pytest.param(Size.FULL, id="full", marks=[pytest.mark.reliability, pytest.mark.timeout(900)]),
]

THROTTLED = 0.1
FAILED = 0.112
"""Of the requests not throttled: 0.1 + 0.9 x 0.112 = 20% faulted in all."""
LATENCY = 0.05


def owners(*clusters: str) -> list[str]:
    return [f"cluster/{ORGANIZATION}/{cluster}/" for cluster in clusters]


@pytest.mark.parametrize("size", SIZES)
async def test_paths_finish_under_20_percent_faults(scenario: Scenario, size: Size) -> None:
    stack = scenario.stack
    window = await scenario.records_mark()
    clusters = (f"faults-{size.value}-c", f"faults-{size.value}-w")
    await stack.set_faults(
        {
            "seed": scenario.rng.randrange(2**31),
            "throttle_rate": THROTTLED,
            "error_rate": FAILED,
            "error_codes": [500, 503],
            "latency_seconds": LATENCY,
        }
    )
    before = await stack.injected()
    try:
        paths = await asyncio.gather(
            cluster_path(scenario, clusters[0], [], beside=clusters[1]),
            workspace_path(scenario, clusters[1], []),
        )
        rates = {k: (await stack.faults())[k] for k in ("throttle_rate", "error_rate")}
    finally:
        await stack.clear_faults()
    assert rates == {"throttle_rate": THROTTLED, "error_rate": FAILED}, rates
    faulted = measured(before, await stack.injected())
    records = await scenario.records_since(window)
    scenario.check(check_hosts(records["hosts"], owners=owners(*clusters)))
    resumed = f"{clusters[1]}-nb" if scenario.full else ""
    scenario.check(check_creates(records["objectsCreated"], reinstalled(resumed)))
    assert await leftovers(scenario) == []
    scenario.report(
        cluster_path=paths[0],
        workspace_path=paths[1],
        faults=faulted,
        sent_again=stack.api.sent_again,
    )


def measured(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Requests and faults between two readings of the sim's counts: management, the child
    clusters (together) and the host provider."""

    def group(target: str) -> str:
        return target if target in ("management", "hostprovider") else "child clusters"

    requests: dict[str, int] = {}
    faulted: dict[str, int] = {}
    for target, count in after["requests"].items():
        key = group(target)
        requests[key] = requests.get(key, 0) + count - before["requests"].get(target, 0)
        codes = after["faulted"].get(target, {})
        old = before["faulted"].get(target, {})
        faulted[key] = faulted.get(key, 0) + sum(n - old.get(c, 0) for c, n in codes.items())
    return {
        key: f"{faulted.get(key, 0)} of {count} ({100 * faulted.get(key, 0) / max(count, 1):.0f}%)"
        for key, count in sorted(requests.items())
    }


# --- Scripted faults -----------------------------------------------------------------------------


async def a_cluster_deployment_fails(scenario: Scenario) -> dict[str, Any]:
    """k0rdent fails the ClusterDeployment: the create fails, naming it and k0rdent's message;
    deleting the failed cluster leaves nothing (no host claimed, no ClusterDeployment)."""
    stack = scenario.stack
    cluster = f"cdfail-{scenario.size.value}"
    message = "machine bootstrap failed: ssh handshake timed out"
    await stack.set_faults(
        {
            "cluster_deployment_failures": [
                {"namespace": KCM_NAMESPACE, "name": deployment(cluster), "message": message}
            ]
        }
    )
    await stack.api.create_cluster(cluster, [{"name": "cpu", "sku": CPU, "count": 2}])
    status = await poll(
        lambda: stack.api.cluster(cluster),
        # The phase turns failed inside the create; the operation is recorded as completed only
        # after its reports to the colony and the quota ledger, so wait for the record itself.
        lambda c: c is not None and c["status"] in ("ready", "failed") and c["completedOperations"],
        what=f"{cluster} settled",
    )
    assert status is not None
    assert status["status"] == "failed", scenario.failure(repr(status))
    assert deployment(cluster) in status["reason"], scenario.failure(status["reason"])
    assert message in status["reason"], scenario.failure(status["reason"])
    create = status["completedOperations"][0]
    assert (create["request"]["kind"], create["state"]) == ("create_cluster", "failed")
    await stack.clear_faults()
    await cluster_gone(scenario, cluster)
    return {"reason": status["reason"]}


async def a_service_set_fails(scenario: Scenario) -> dict[str, Any]:
    """Its Helm install fails: the workspace fails at HelmReleaseReady (HelmReleaseFailed) with
    the install's message, the failed release in its failure context; deleting it leaves nothing."""
    stack = scenario.stack
    cluster = f"ssfail-{scenario.size.value}"
    name = f"{cluster}-nb"
    await ready_cluster(scenario, cluster, [{"name": "cpu", "sku": CPU, "count": 1}])
    password = f"pw-{scenario.rng.getrandbits(96):024x}"
    scenario.planted.add("notebook password", password, name)
    # Deployed suspended, so its ServiceSet's name is known before any install starts.
    await stack.api.deploy(
        {
            "name": name,
            "class": JUPYTER,
            "cluster": cluster,
            "secretValues": {"notebookPassword": password},
            "suspend": True,
        }
    )
    suspended = await workspace_in(scenario, name, {"Suspended"})
    message = "Helm install failed: image pull back-off (registry unreachable)"
    await stack.set_faults(
        {
            "service_set_failures": [
                {"namespace": KCM_NAMESPACE, "name": suspended["serviceSet"], "message": message}
            ]
        }
    )
    await stack.api.workspace_action(name, "resume")
    failed = await workspace_in(scenario, name, {"Failed", "Running"})
    assert failed["phase"] == "Failed", scenario.failure(repr(failed))
    helm = next(c for c in failed["conditions"] if c["type"] == "HelmReleaseReady")
    assert (helm["status"], helm["reason"]) == ("False", "HelmReleaseFailed"), helm
    assert message in helm["message"], helm
    context = failed["failureContext"]
    assert context["phaseWhenFailed"] == "Deploying", context
    assert [(s["state"], s["failureMessage"]) for s in context["serviceSetStatus"]["services"]] == [
        ("Failed", message)
    ]
    await stack.clear_faults()
    await workspace_gone(scenario, name)
    assert await leftovers(scenario, clusters_alive=[cluster]) == []
    await cluster_gone(scenario, cluster)
    return {"reason": helm["message"]}


async def a_node_is_lost(scenario: Scenario) -> dict[str, Any]:
    """A machine vanishes (its Node deleted, its pods gone): a scale-down by one removes that
    node first, evicts nothing (the kept nodes' pods stay), and releases its host."""
    stack = scenario.stack
    cluster = f"lost-{scenario.size.value}"
    await ready_cluster(scenario, cluster, [{"name": "cpu", "sku": CPU, "count": 3}])
    await place_pods(scenario, cluster, 2)
    await stack.clear_faults()  # place_pods scripts some eviction refusals: none wanted here
    nodes = sorted(node.metadata.name for node in await child_nodes(stack, cluster))
    lost = scenario.rng.choice(nodes)
    await stack.set_faults({"nodes_lost": [{"node": lost, "cluster": deployment(cluster)}]})
    await poll(
        lambda: child_nodes(stack, cluster),
        lambda now: lost not in {node.metadata.name for node in now},
        what=f"{lost} gone from the child cluster",
    )
    pods = pod_refs(deployment(cluster), await child_pods(stack, cluster))
    window = await scenario.records_mark()
    accepted = await stack.api.scale(cluster, "cpu", 2)
    operation = await finished_operation(scenario, cluster, accepted["operationId"])
    assert operation["state"] == "succeeded", scenario.failure(repr(operation))
    removed = [node["node"] for node in operation["progress"]["nodes"]]
    assert removed == [lost], scenario.failure(f"lost {lost}, removed {removed}")
    records = await scenario.records_since(window)
    scenario.check(check_evictions(records["evictions"], pods, {lost}))
    released = [h["hostId"] for h in records["hosts"] if h["change"] == "released"]
    assert released == [lost], scenario.failure(f"released {released}")
    assert await leftovers(scenario, clusters_alive=[cluster]) == []
    await stack.clear_faults()
    await cluster_gone(scenario, cluster)
    return {"lost": lost, "removed": removed}


GATEWAY_API = ("gateway.networking.k8s.io", "v1")
DOMAIN = "reliability.example"


async def the_gateway_is_gone(scenario: Scenario) -> dict[str, Any]:
    """A cluster attached to a tenant gateway (`colonyctl`: the API takes no gateway), a notebook
    reached at https://<name>.<domain>; the gateway then disappears from the cluster. A notebook
    deployed afterwards runs, reachable by port-forward meanwhile, and says that the cluster's
    gateway is not there (RoutingInfraNotReady, naming the domain; its future URL not ready), not
    that the cluster has none; deleting both leaves no route nor namespace."""
    stack = scenario.stack
    cluster = f"gw-{scenario.size.value}"
    code, _, err = await stack.ctl(
        "cluster", "create", cluster, "--location-id", LOCATION,
        "--node-pool", f"name=cpu,count=1,cpuSku={CPU['cpuSku']}",
        "--tenant-gateway-domain", DOMAIN, "--wait", "--timeout", "180",
    )  # fmt: skip
    assert code == 0, scenario.failure(err)
    await scenario.planted.add_cluster(stack, cluster, cluster_deployment_name(cluster, ""))
    first, second = f"{cluster}-a", f"{cluster}-b"
    for name in (first, second):
        scenario.planted.add("notebook password", f"pw-{name}-{scenario.seed}-secret", name)
    await local_deploy(scenario, first, cluster)
    reached = await local_workspace(scenario, first)
    [reached_at] = [entry["url"] for entry in reached["access"]]
    # The sim's gateway listens on a local port of its own: the URL says it (`:<port>`).
    assert reached_at.startswith(f"https://{first}.{DOMAIN}"), reached_at
    admin = await stack.child_admin(
        cluster_deployment_name(cluster, "")
    )  # colonyctl's: no organization
    try:
        custom = kube.CustomObjectsApi(admin)
        await call(
            custom.delete_namespaced_custom_object, *GATEWAY_API, "colony-gateway", "gateways",
            "tenant",
        )  # fmt: skip
        await local_deploy(scenario, second, cluster)
        after = await local_workspace(scenario, second)
        assert after["phase"] == "Running", scenario.failure(repr(after))
        routes = next(c for c in after["conditions"] if c["type"] == "RoutesReady")
        assert (routes["status"], routes["reason"]) == ("False", "RoutingInfraNotReady"), routes
        assert DOMAIN in routes["message"], routes
        [entry] = after["access"]
        assert entry["url"].startswith(f"https://{second}.{DOMAIN}"), entry
        assert not entry["ready"], entry
        assert entry["command"].startswith("kubectl port-forward"), entry
        for name in (first, second):
            code, _, err = await stack.ctl(
                "workspace", "delete", name, "--wait", "--timeout", "120"
            )
            assert code == 0, scenario.failure(err)
        left = await call(custom.list_cluster_custom_object, *GATEWAY_API, "httproutes")
        assert left["items"] == [], scenario.failure(repr(left["items"]))
        namespaces = await call(kube.CoreV1Api(admin).list_namespace)
        assert not [n.metadata.name for n in namespaces.items if n.metadata.name.startswith("ws-")]
    finally:
        close_client(admin)
    code, _, err = await stack.ctl("cluster", "delete", cluster, "--wait", "--timeout", "180")
    assert code == 0, scenario.failure(err)
    return {"routes_ready": routes["reason"], "message": routes["message"]}


async def local_deploy(scenario: Scenario, name: str, cluster: str) -> None:
    code, _, err = await scenario.stack.ctl(
        "workspace", "deploy", name, "--class", JUPYTER, "--cluster", cluster,
        "--set", f"notebookPassword=pw-{name}-{scenario.seed}-secret",
        "--wait", "--timeout", "180",
    )  # fmt: skip
    assert code == 0, scenario.failure(err)


async def local_workspace(scenario: Scenario, name: str) -> dict[str, Any]:
    code, out, err = await scenario.stack.ctl("workspace", "get", name, "-o", "json")
    assert code == 0, scenario.failure(err)
    data: dict[str, Any] = json.loads(out)
    return data


@pytest.mark.parametrize("size", SIZES)
async def test_scripted_faults_fail_with_the_right_reason(scenario: Scenario, size: Size) -> None:
    window = await scenario.records_mark()
    outcomes: dict[str, Any] = {
        "cluster deployment fails": await a_cluster_deployment_fails(scenario),
        "service set fails": await a_service_set_fails(scenario),
    }
    if scenario.full:
        outcomes["node lost"] = await a_node_is_lost(scenario)
        outcomes["gateway gone"] = await the_gateway_is_gone(scenario)
    records = await scenario.records_since(window)
    scenario.check(check_hosts(records["hosts"]))
    assert await leftovers(scenario) == []
    scenario.report(**outcomes)
