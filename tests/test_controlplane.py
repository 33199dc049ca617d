"""The control-plane launcher (`components.controlplane`): real control planes that start, serve
as Kubernetes 1.37.2, share one etcd without seeing each other's objects, hand out working
identities and KWOK nodes, and leave no process behind, even when their owner is killed.
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from components.controlplane import ControlPlane, ControlPlaneError, Etcd, node_ready
from components.process import GuardedProcess, ProcessError, wait_until_gone
from tests.helpers import eventually_sync, unique

pytestmark = pytest.mark.real

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def shared_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Etcd]:
    with Etcd.start(tmp_path_factory.mktemp("etcd")) as etcd:
        yield etcd


@pytest.fixture(scope="module")
def planes(
    shared_etcd: Etcd, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ControlPlane, ControlPlane]]:
    first = ControlPlane.start(tmp_path_factory.mktemp("first"), name="first", etcd=shared_etcd)
    try:
        second = ControlPlane.start(
            tmp_path_factory.mktemp("second"), name="second", etcd=shared_etcd, kwok=False
        )
    except BaseException:
        first.stop()
        raise
    yield first, second
    second.stop()
    first.stop()


def as_token(plane: ControlPlane, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=plane.server,
        verify=ssl.create_default_context(cafile=str(plane.ca_file)),
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )


def test_control_planes_on_one_etcd_see_only_their_own_objects(
    planes: tuple[ControlPlane, ControlPlane],
) -> None:
    first, second = planes
    for plane in planes:
        assert plane.request("GET", "/version").json()["gitVersion"] == "v1.37.2"
    name = unique("cm")
    body = {"metadata": {"name": name}, "data": {"plane": "first"}}
    assert first.request("POST", "/api/v1/namespaces/default/configmaps", body).status_code == 201
    assert first.request("GET", f"/api/v1/namespaces/default/configmaps/{name}").is_success
    missing = second.request("GET", f"/api/v1/namespaces/default/configmaps/{name}")
    assert missing.status_code == 404
    # Each has its own CA: one's admin certificate means nothing to the other.
    assert (
        first.admin_kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"]
        != (second.admin_kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"])
    )


def test_figures_name_every_step_and_process(planes: tuple[ControlPlane, ControlPlane]) -> None:
    first, second = planes
    figures = first.figures()
    assert list(figures.start_seconds) == [
        "certificates",
        "kube-apiserver",
        "controllers",
        "total",
    ]  # no "etcd": it is shared, not the plane's own
    assert set(figures.rss_bytes) == {
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
    }
    assert all(value > 10 * 2**20 for value in figures.rss_bytes.values()), figures
    assert set(second.rss()) == {"kube-apiserver", "kube-controller-manager", "kube-scheduler"}


def test_service_account_tokens_are_real_identities_under_rbac(
    planes: tuple[ControlPlane, ControlPlane],
) -> None:
    first, _ = planes
    namespace = unique("sa")
    token = first.service_account_token(namespace, "reader")
    with as_token(first, token) as reader:
        review = reader.post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        assert review.json()["status"]["userInfo"]["username"] == (
            f"system:serviceaccount:{namespace}:reader"
        )
        # Nothing granted: RBAC refuses.
        refused = reader.get(f"/api/v1/namespaces/{namespace}/secrets")
        assert refused.status_code == 403, refused.text
        first.ensure(
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
            {
                "metadata": {"name": "view"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "view",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
            },
        )
        allowed = eventually_sync(
            lambda: reader.get(f"/api/v1/namespaces/{namespace}/configmaps").status_code,
            until=lambda status: status == 200,
            what="the RoleBinding in force",
        )
        assert allowed == 200
    kubeconfig = first.token_kubeconfig(token)
    assert kubeconfig["users"][0]["user"] == {"token": token}


def test_a_kwok_node_runs_what_the_scheduler_puts_on_it(
    planes: tuple[ControlPlane, ControlPlane],
) -> None:
    first, _ = planes
    node = unique("node")
    ready = first.add_node(node, labels={"pool": node}, capacity={"nvidia.com/gpu": "8"})
    assert node_ready(ready)
    assert ready["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    pod = {
        "metadata": {"name": node},
        "spec": {
            "nodeSelector": {"pool": node},
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"limits": {"nvidia.com/gpu": "2"}},
                }
            ],
        },
    }
    assert first.request("POST", "/api/v1/namespaces/default/pods", pod).status_code == 201
    running = eventually_sync(
        lambda: first.request("GET", f"/api/v1/namespaces/default/pods/{node}").json(),
        until=lambda p: p["status"].get("phase") == "Running",
        what="the pod Running",
    )
    assert running["spec"]["nodeName"] == node  # kube-scheduler bound it
    assert running["status"]["podIP"]  # KWOK played the kubelet
    first.request("DELETE", f"/api/v1/namespaces/default/pods/{node}")
    eventually_sync(
        lambda: first.request("GET", f"/api/v1/namespaces/default/pods/{node}").status_code,
        until=lambda status: status == 404,
        what="the pod gone (KWOK finishes a graceful delete)",
    )


def test_stop_leaves_no_process(shared_etcd: Etcd, tmp_path: Path) -> None:
    plane = ControlPlane.start(tmp_path, name=unique("stop"), etcd=shared_etcd)
    pids = plane.pids()
    assert set(pids) == {"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}
    plane.stop()
    plane.stop()  # idempotent
    assert all(wait_until_gone(pid, 5) for pid in pids.values()), pids
    assert shared_etcd.process.alive()  # not the plane's to stop


OWNER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from components.controlplane import ControlPlane
    plane = ControlPlane.start(Path(sys.argv[1]), name="orphan")
    print(json.dumps(plane.pids()), flush=True)
    time.sleep(600)
    """
)


def test_a_killed_owner_leaves_no_process(tmp_path: Path) -> None:
    """A test worker killed by a timeout (SIGKILL: no clean-up of its own runs) takes its control
    plane, etcd included, with it."""
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout is not None
        pids: dict[str, int] = json.loads(owner.stdout.readline())
        assert set(pids) == {
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kwok",
        }
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
        assert all(wait_until_gone(pid, 30) for pid in pids.values()), pids
    finally:
        owner.kill()


def test_a_server_killed_with_its_guard(tmp_path: Path) -> None:
    """The server dies with its guard too (PR_SET_PDEATHSIG), should anyone SIGKILL the guard."""
    process = GuardedProcess.start("sleep", ["/bin/sleep", "300"], tmp_path / "sleep.log")
    assert process.alive()
    os.kill(process._guard.pid, signal.SIGKILL)
    assert wait_until_gone(process.pid, 10)
    process.stop()


def test_a_server_that_exits_is_reported_with_its_log(tmp_path: Path) -> None:
    process = GuardedProcess.start(
        "failing", ["/bin/sh", "-c", "echo broken flag >&2; exit 3"], tmp_path / "f.log"
    )
    deadline = time.monotonic() + 10
    while process.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.raises(ProcessError, match="failing exited with 3:\nbroken flag"):
        process.check()


def test_a_control_plane_that_cannot_start_says_why_and_leaves_nothing(tmp_path: Path) -> None:
    dead = Etcd(
        url="http://127.0.0.1:9",  # discard: nothing answers there
        directory=tmp_path,
        process=GuardedProcess.start("idle", ["/bin/sleep", "300"], tmp_path / "idle.log"),
        start_seconds=0.0,
    )
    try:
        with pytest.raises(ControlPlaneError, match="kube-apiserver") as error:
            ControlPlane.start(tmp_path / "plane", name="doomed", etcd=dead, timeout=8)
        assert "waiting for /readyz" in str(error.value)
    finally:
        dead.stop()
    leftovers = subprocess.run(
        ["pgrep", "-f", str(tmp_path / "plane")], capture_output=True, text=True
    ).stdout.split()
    assert leftovers == []
