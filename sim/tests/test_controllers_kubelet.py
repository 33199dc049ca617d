"""The kubelet as a client sees it: container states, exit codes, restarts, GPUs per container,
admission, and the pods/log subresource with kube's options and errors (official client; kubectl
where it has a verb for it).

Each test gets a cluster served over HTTPS with a kubelet and a scheduler-free store: pods are
created with `spec.nodeName`, as the sim's scheduler would bind them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sim.apiserver import podlogs
from sim.apiserver.auth import CertificateAuthority
from sim.apiserver.errors import ApiError
from sim.apiserver.registry import NODES
from sim.apiserver.server import ClusterServer
from sim.apiserver.store import ClusterStore
from sim.controllers.gpus import gpu_uuid
from sim.controllers.kubelet import Kubelet
from sim.faults import FaultInjector
from sim.tests.conftest import call, make_api_client
from sim.timing import SimTiming
from tests.helpers import eventually, unique

KUBECTL = Path(sys.executable).parent / "kubectl"
NODE = "gpu-node-1"
H100 = "NVIDIA H100 80GB HBM3"


@dataclass
class Env:
    server: ClusterServer
    core: client.CoreV1Api
    faults: FaultInjector
    kubeconfig: Path

    @property
    def store(self) -> ClusterStore:
        return self.server.store


def gpu_node(name: str = NODE, gpus: int = 8) -> dict[str, Any]:
    capacity = {"cpu": "112", "memory": "2Ti", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.count": str(gpus),
            },
        },
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "addresses": [{"type": "InternalIP", "address": "192.0.2.10"}],
        },
    }


@pytest.fixture
async def env(sim_ca: CertificateAuthority, tmp_path: Path) -> AsyncIterator[Env]:
    name = unique("kubelet")
    faults = FaultInjector()
    server = ClusterServer(name, ClusterStore(name), sim_ca, faults=faults)
    await server.start()
    server.store.create(NODES, gpu_node())
    task = asyncio.create_task(Kubelet(server.store, SimTiming.instant(), faults=faults).run())
    api = make_api_client(server)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(server.kubeconfig()))
    try:
        yield Env(server, client.CoreV1Api(api), faults, kubeconfig)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        api.close()  # type: ignore[no-untyped-call]  # untyped in the client
        await server.stop()


def pod(
    name: str,
    command: list[str] | None = None,
    *,
    gpus: int = 0,
    restart: str = "Never",
    node: str | None = NODE,
    containers: list[dict[str, Any]] | None = None,
) -> Any:
    """A Pod body (a plain dict, which the official client accepts where it hints V1Pod)."""
    container: dict[str, Any] = {
        "name": "main",
        "image": "nvcr.io/nvidia/cuda:12.8.1-base-ubuntu24.04",
    }
    if command is not None:
        container["command"] = command
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec: dict[str, Any] = {"restartPolicy": restart, "containers": containers or [container]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


async def settled(env: Env, name: str, until: Callable[[Any], bool] | None = None) -> Any:
    """The pod once `until` holds (default: Succeeded or Failed)."""

    def done(p: Any) -> bool:
        return p.status.phase in ("Succeeded", "Failed")

    async def probe() -> Any:
        return await call(env.core.read_namespaced_pod, name, "default")

    return await eventually(probe, until=until or done, what=f"pod {name} settled")


async def logs(env: Env, name: str, **options: Any) -> str:
    return str(await call(env.core.read_namespaced_pod_log, name, "default", **options))


async def log_error(env: Env, name: str, **options: Any) -> tuple[int, str]:
    with pytest.raises(ApiException) as err:
        await logs(env, name, **options)
    return err.value.status, json.loads(err.value.body or "{}")["message"]


def running(p: Any) -> bool:
    return bool(p.status.container_statuses) and all(
        s.state.running is not None for s in p.status.container_statuses
    )


# --------------------------------------------------------------------------- containers


async def test_gpu_check_prints_its_one_gpu_and_succeeds(env: Env) -> None:
    await call(
        env.core.create_namespaced_pod, "default", pod("gpu-check", ["nvidia-smi", "-L"], gpus=1)
    )
    done = await settled(env, "gpu-check")
    assert done.status.phase == "Succeeded"
    state = done.status.container_statuses[0].state.terminated
    assert (state.exit_code, state.reason) == (0, "Completed")
    assert await logs(env, "gpu-check") == f"GPU 0: {H100} (UUID: {gpu_uuid(NODE, 0)})\n"


async def test_gpus_are_never_shared_between_pods(env: Env) -> None:
    command = ["sh", "-c", "nvidia-smi -L; sleep infinity"]
    for name in ("a", "b"):
        await call(
            env.core.create_namespaced_pod, "default", pod(name, command, gpus=1, restart="Always")
        )
    await call(
        env.core.create_namespaced_pod, "default", pod("c", command, gpus=2, restart="Always")
    )
    for name in ("a", "b", "c"):
        await settled(env, name, running)
    seen = [line for name in ("a", "b", "c") for line in (await logs(env, name)).splitlines()]
    assert len(seen) == 4
    uuids = {line.split("UUID: ")[1].rstrip(")") for line in seen}
    assert uuids == {gpu_uuid(NODE, i) for i in range(4)}, "four distinct GPUs, lowest first"
    assert (await logs(env, "c")).splitlines()[1].startswith("GPU 1: ")


async def test_gpus_are_released_when_a_pod_finishes(env: Env) -> None:
    await call(
        env.core.create_namespaced_pod, "default", pod("first", ["nvidia-smi", "-L"], gpus=8)
    )
    await settled(env, "first")
    await call(
        env.core.create_namespaced_pod, "default", pod("second", ["nvidia-smi", "-L"], gpus=8)
    )
    assert (await settled(env, "second")).status.phase == "Succeeded"
    assert len((await logs(env, "second")).splitlines()) == 8


async def test_no_gpu_no_nvidia_smi(env: Env) -> None:
    await call(env.core.create_namespaced_pod, "default", pod("no-gpu", ["nvidia-smi", "-L"]))
    done = await settled(env, "no-gpu")
    assert done.status.phase == "Failed"
    state = done.status.container_statuses[0].state.terminated
    assert (state.exit_code, state.reason) == (128, "StartError")
    assert "executable file not found in $PATH" in state.message
    assert await logs(env, "no-gpu") == ""


@pytest.mark.parametrize(
    ("command", "phase", "exit_code", "reason"),
    [
        pytest.param(["sh", "-c", "echo ok"], "Succeeded", 0, "Completed", id="zero"),
        pytest.param(["sh", "-c", "echo bad; exit 3"], "Failed", 3, "Error", id="nonzero"),
        pytest.param(["false"], "Failed", 1, "Error", id="false"),
    ],
)
async def test_finite_commands_finish(
    env: Env, command: list[str], phase: str, exit_code: int, reason: str
) -> None:
    await call(env.core.create_namespaced_pod, "default", pod("job", command))
    done = await settled(env, "job")
    assert done.status.phase == phase
    state = done.status.container_statuses[0].state.terminated
    assert (state.exit_code, state.reason) == (exit_code, reason)
    ready = {c.type: c.status for c in done.status.conditions}
    assert ready["Ready"] == "False"


async def test_on_failure_restarts_and_previous_logs(env: Env) -> None:
    await call(
        env.core.create_namespaced_pod, "default",
        pod("flaky", ["sh", "-c", "echo attempt; exit 1"], restart="OnFailure"),
    )  # fmt: skip

    def restarted(p: Any) -> bool:
        statuses = p.status.container_statuses or []
        return bool(statuses) and statuses[0].restart_count >= 1

    restarting = await settled(env, "flaky", restarted)
    assert restarting.status.phase in ("Running", "Pending")
    status = restarting.status.container_statuses[0]
    assert status.last_state.terminated.exit_code == 1
    assert await logs(env, "flaky", previous=True) == "attempt\n"


async def test_long_running_images_keep_running(env: Env) -> None:
    server = pod("server", None, restart="Always")
    server["spec"]["containers"][0]["image"] = "vllm/vllm-openai:v0.9.1"
    await call(env.core.create_namespaced_pod, "default", server)
    up = await settled(env, "server", running)
    assert up.status.phase == "Running"
    assert "Uvicorn running on http://0.0.0.0:8000" in await logs(env, "server")


async def test_kubelet_rejects_pods_beyond_the_nodes_gpus(env: Env) -> None:
    """Pods bound directly (no scheduler) are admitted against what the node has left."""
    await call(
        env.core.create_namespaced_pod, "default",
        pod("holder", ["sleep", "infinity"], gpus=6, restart="Always"),
    )  # fmt: skip
    await settled(env, "holder", running)
    await call(
        env.core.create_namespaced_pod, "default", pod("greedy", ["nvidia-smi", "-L"], gpus=4)
    )
    rejected = await settled(env, "greedy")
    assert rejected.status.phase == "Failed"
    assert rejected.status.reason == "OutOfnvidia.com/gpu"
    assert rejected.status.message == (
        "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 4, "
        "used: 6, capacity: 8"
    )


# --------------------------------------------------------------------------- pods/log


async def test_log_options(env: Env) -> None:
    await call(
        env.core.create_namespaced_pod, "default",
        pod("lines", ["sh", "-c", "echo one; echo two; echo three"]),
    )  # fmt: skip
    await settled(env, "lines")
    assert await logs(env, "lines", tail_lines=2) == "two\nthree\n"
    assert await logs(env, "lines", tail_lines=0) == ""
    assert await logs(env, "lines", limit_bytes=5) == "one\nt"
    assert await logs(env, "lines", since_seconds=3600) == "one\ntwo\nthree\n"
    stamped = (await logs(env, "lines", timestamps=True)).splitlines()
    assert [line.split(" ", 1)[1] for line in stamped] == ["one", "two", "three"]
    assert stamped[0].split(" ", 1)[0].endswith("Z")
    assert len(stamped[0].split(" ", 1)[0]) == len("2026-01-01T00:00:00.000000000Z")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param({"tail_lines": -1}, 'PodLogOptions "lines" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0', id="tail"),
        pytest.param({"limit_bytes": 0}, 'PodLogOptions "lines" is invalid: limitBytes: Invalid value: 0: must be greater than 0', id="limit"),
        pytest.param({"since_seconds": 0}, 'PodLogOptions "lines" is invalid: sinceSeconds: Invalid value: 0: must be greater than 0', id="since"),
    ],
)  # fmt: skip
async def test_invalid_log_options_are_422(env: Env, options: dict[str, Any], message: str) -> None:
    await call(env.core.create_namespaced_pod, "default", pod("lines", ["echo", "x"]))
    assert await log_error(env, "lines", **options) == (422, message)


async def test_log_errors(env: Env) -> None:
    core = env.core
    two = pod("two", containers=[
        {"name": "app", "image": "busybox", "command": ["sleep", "infinity"]},
        {"name": "sidecar", "image": "busybox", "command": ["sleep", "infinity"]},
    ], restart="Always")  # fmt: skip
    two["spec"]["initContainers"] = [{"name": "setup", "image": "busybox", "command": ["true"]}]
    await call(core.create_namespaced_pod, "default", two)
    assert await log_error(env, "two") == (
        400,
        "a container name must be specified for pod two, choose one of: [app sidecar] "
        "or one of the init containers: [setup]",
    )
    assert await log_error(env, "two", container="nope") == (
        400, "container nope is not valid for pod two",
    )  # fmt: skip
    await settled(env, "two", running)
    assert await log_error(env, "two", container="app", previous=True) == (
        400, 'previous terminated container "app" in pod "two" not found',
    )  # fmt: skip
    with pytest.raises(ApiException) as missing:
        await logs(env, "ghost")
    assert missing.value.status == 404

    # Not scheduled yet: no kubelet to ask, kube answers 200 with nothing.
    await call(core.create_namespaced_pod, "default", pod("unbound", ["echo", "x"], node=None))
    assert await logs(env, "unbound") == ""

    # A node whose kubelet stopped after the pod started: the API server cannot reach it.
    await call(
        core.create_namespaced_pod,
        "default",
        pod("cut-off", ["sleep", "infinity"], restart="Always"),
    )
    await settled(env, "cut-off", running)
    env.faults.stop_kubelet(NODE)
    status, message = await log_error(env, "cut-off")
    assert status == 500
    assert "192.0.2.10:10250" in message


async def test_log_of_a_container_still_being_created_is_400(
    cluster: ClusterServer, api_client: client.ApiClient
) -> None:
    """Bound, admitted, not started yet (a slow image pull): the kubelet's own 400."""
    cluster.store.create(NODES, gpu_node())
    slow = SimTiming(time_scale=1.0).with_delays(pod_start=600)
    task = asyncio.create_task(Kubelet(cluster.store, slow).run())
    try:
        core = client.CoreV1Api(api_client)
        await call(core.create_namespaced_pod, "default", pod("waiting", ["echo", "x"]))

        async def creating() -> Any:
            return await call(core.read_namespaced_pod, "waiting", "default")

        created = await eventually(creating, until=lambda p: bool(p.status.container_statuses))
        assert created.status.container_statuses[0].state.waiting.reason == "ContainerCreating"
        with pytest.raises(ApiException) as err:
            await call(core.read_namespaced_pod_log, "waiting", "default")
        assert (err.value.status, json.loads(err.value.body or "{}")["message"]) == (
            400, 'container "main" in pod "waiting" is waiting to start: ContainerCreating',
        )  # fmt: skip
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_follow_streams_until_the_container_ends(env: Env) -> None:
    await call(
        env.core.create_namespaced_pod, "default",
        pod("ticker", ["sh", "-c", "echo first; sleep 0.3; echo second; sleep 0.3; echo third"]),
    )  # fmt: skip
    await settled(env, "ticker", running)

    def follow() -> str:
        response: Any = env.core.read_namespaced_pod_log(
            "ticker", "default", follow=True, _preload_content=False
        )
        return b"".join(response.stream()).decode()

    # Returns only once the stream ends: when the container exits.
    assert await asyncio.wait_for(call(follow), 20) == "first\nsecond\nthird\n"
    assert (await settled(env, "ticker")).status.phase == "Succeeded"


# --------------------------------------------------------------------------- kubectl


@pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl is not installed in the venv")
async def test_kubectl_logs(env: Env) -> None:
    await call(
        env.core.create_namespaced_pod, "default",
        pod("talker", ["sh", "-c", "echo a; echo b; echo c; sleep infinity"], restart="Always"),
    )  # fmt: skip
    await settled(env, "talker", running)

    async def kubectl(*args: str) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            str(KUBECTL), "--kubeconfig", str(env.kubeconfig), *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), 60)
        return process.returncode or 0, out.decode(), err.decode()

    async def shown() -> str:
        return (await kubectl("logs", "talker"))[1]

    assert await eventually(shown, until=lambda out: out == "a\nb\nc\n") == "a\nb\nc\n"
    assert (await kubectl("logs", "talker", "--tail=1"))[1] == "c\n"
    assert (await kubectl("logs", "talker", "-c", "main", "--limit-bytes=3"))[1] == "a\nb"
    await call(
        env.core.create_namespaced_pod, "default",
        pod("counter", ["sh", "-c", "echo 1; sleep 0.2; echo 2; sleep 0.2; echo 3"]),
    )  # fmt: skip
    await settled(env, "counter", running)
    # -f returns once the container ends, with everything it printed.
    assert (await kubectl("logs", "-f", "counter"))[1] == "1\n2\n3\n"
    code, _, err = await kubectl("logs", "talker", "--previous")
    assert code != 0
    assert 'previous terminated container "main" in pod "talker" not found' in err


@pytest.mark.parametrize(
    ("status", "previous", "expected"),
    [
        pytest.param({"state": {"running": {}}, "containerID": "c://1"}, False, "c://1", id="running"),
        pytest.param({"state": {"terminated": {"containerID": "c://2"}}}, False, "c://2", id="terminated"),
        pytest.param({"state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": {"terminated": {"containerID": "c://3"}}}, False, "c://3", id="backoff-reads-last-run"),
        pytest.param({"state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": {"terminated": {"containerID": "c://3"}}}, True, "c://3", id="previous"),
        pytest.param({"state": {"waiting": {"reason": "ErrImagePull"}}}, False, 'container "c" in pod "p" is waiting to start: image can\'t be pulled', id="image-pull"),
        pytest.param({"state": {"terminated": {"exitCode": 1}}}, False, 'container "c" in pod "p" is terminated', id="terminated-without-id"),
        pytest.param({"state": {}}, False, 'container "c" in pod "p" is waiting to start - no logs yet', id="no-state"),
    ],
)  # fmt: skip
def test_which_run_a_log_read_gets(status: dict[str, Any], previous: bool, expected: str) -> None:
    """The kubelet's validateContainerLogStatus, state by state."""
    pod_ = {"metadata": {"name": "p"}, "status": {"containerStatuses": [{"name": "c", **status}]}}
    if expected.startswith("c://"):
        assert podlogs.container_id_for_logs(pod_, "c", previous) == expected
        return
    with pytest.raises(ApiError) as err:
        podlogs.container_id_for_logs(pod_, "c", previous)
    assert (err.value.code, err.value.message) == (400, expected)
