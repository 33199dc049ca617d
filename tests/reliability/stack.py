"""The reliability suite's private stack: every part a separate process, each one stoppable.

- the Temporal dev server, with its state in a SQLite file, so it can be stopped (SIGTERM or
  SIGKILL) and started again on the same port and database (`restart_temporal`);
- the simulator, `python -m sim`, with the suite's inventory (`inventory.yaml`): its fault
  configuration (`/sim/v1/faults`) and its records (`/sim/v1/records`) are read and set over HTTP;
- Colony's worker, `python worker.py`, killed with SIGKILL and started again (`kill_worker`);
- Colony's HTTP API, `python -m api`, the front door every scenario goes through (an API key of
  the suite's organization; no rate limit), and `colonyctl` in local mode for what only it offers
  (a cluster attached to a tenant gateway).

The test process holds a Temporal client (histories, the GPU ledgers' status), the management
cluster's admin kubeconfig (kubeconfig Secrets, k0rdent objects) and an httpx client of the API.
Nothing here reaches into a process's memory: what a scenario knows, it asked a surface.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import yaml
from kubernetes import client as kube
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from infra.kube import api_client_from_dict, api_client_from_file, close_client
from infra.ports import free_port, port_open
from infra.sealing import PRIVATE_KEY_ENV, PUBLIC_KEY_ENV, create_key_pair
from tests.helpers import eventually, shipped_classes_listed
from workflows.search_attributes import ALL as SEARCH_ATTRIBUTES

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
INVENTORY = Path(__file__).with_name("inventory.yaml")
LOCATION = "rel1"
ORGANIZATION = "reliability"
TASK_QUEUE = "reliability"
KCM_NAMESPACE = "kcm-system"
K0RDENT = ("k0rdent.mirantis.com", "v1beta1")
START_DEADLINE = 60.0
"""How long a process of the stack may take to come up on a loaded 2-core machine."""

T = TypeVar("T")


OBSERVER_AGAIN = (429, 500, 502, 503, 504)
"""What the sim answers when it injects a fault (`sim.faults`): the faults scenario aims them at
Colony, but they hit the suite's own calls too, which simply send again (a faulted request did
nothing: the fault is decided before the request is served)."""


async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """A blocking client call of the suite's own (setting up pods, reading what Colony made), off
    the loop; sent again while the sim answers with an injected fault (`OBSERVER_AGAIN`)."""
    deadline = time.monotonic() + AGAIN_DEADLINE
    while True:
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except kube.ApiException as exc:
            if exc.status not in OBSERVER_AGAIN or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.2)


@dataclass
class Process:
    """One child process of the stack, its output appended to `log`."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    process: asyncio.subprocess.Process | None = None
    starts: int = 0

    async def start(self) -> None:
        self.starts += 1
        with self.log.open("ab") as sink:
            sink.write(f"\n=== start {self.starts} at {time.time():.3f}\n".encode())
            self.process = await asyncio.create_subprocess_exec(
                *self.argv,
                cwd=REPO,
                env=self.env,
                stdout=sink,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def signal(self, sig: signal.Signals, *, timeout: float = 30.0) -> None:
        """Send `sig` and wait for the exit (SIGKILL after `timeout`)."""
        process = self.process
        if process is None or process.returncode is not None:
            return
        process.send_signal(sig)
        try:
            await asyncio.wait_for(process.wait(), timeout)
        except TimeoutError:
            process.kill()
            await process.wait()

    def tail(self, lines: int = 40) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class ApiError(AssertionError):
    """An answer of the API that the scenario did not expect."""


AGAIN = (429, 503)
"""The API's answers that say "not now, send it again" (rate limited; Temporal, the management
cluster or the host provider out of reach): a client sends the same request again, with the same
Idempotency-Key, so a mutation that did land is not made twice."""
AGAIN_DEADLINE = 120.0
"""How long the suite's client keeps sending a request the API answers 503 or 429 (a Temporal
restart, 20% of the management cluster's answers failing under the faults scenario)."""


@dataclass
class Api:
    """The HTTP API of the stack, as the suite's organization (every permission)."""

    http: httpx.AsyncClient
    sent_again: int = 0
    """Requests sent again after a 503 or 429."""

    async def send(
        self, method: str, path: str, *, idempotency_key: str | None = None, **kwargs: Any
    ) -> httpx.Response:
        """Send a request, again while the API answers 503 or 429 (see `AGAIN`)."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        deadline = time.monotonic() + AGAIN_DEADLINE
        while True:
            try:
                answer = await self.http.request(method, path, headers=headers, **kwargs)
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
            else:
                if answer.status_code not in AGAIN or time.monotonic() > deadline:
                    return answer
            self.sent_again += 1
            await asyncio.sleep(0.5)

    async def request(
        self,
        method: str,
        path: str,
        *,
        expect: tuple[int, ...] = (200, 201, 202),
        idempotency_key: str | None = None,
        **kwargs: Any,
    ) -> Any:
        answer = await self.send(method, path, idempotency_key=idempotency_key, **kwargs)
        if answer.status_code not in expect:
            raise ApiError(f"{method} {path}: {answer.status_code} {answer.text}")
        return answer.json() if answer.content else None

    async def create_cluster(self, name: str, pools: list[dict[str, Any]]) -> dict[str, Any]:
        body = {"name": name, "locationId": LOCATION, "nodePools": pools}
        answer: dict[str, Any] = await self.request(
            "POST", "/v1/kubernetes/clusters", json=body, idempotency_key=f"create-{name}"
        )
        return answer

    async def cluster(self, name: str) -> dict[str, Any] | None:
        answer = await self.send("GET", f"/v1/kubernetes/clusters/{name}")
        if answer.status_code == 404:
            return None
        if answer.status_code != 200:
            raise ApiError(f"GET cluster {name}: {answer.status_code} {answer.text}")
        body: dict[str, Any] = answer.json()
        return body

    async def scale(self, cluster: str, pool: str, count: int, **extra: Any) -> dict[str, Any]:
        answer: dict[str, Any] = await self.request(
            "PATCH",
            f"/v1/kubernetes/clusters/{cluster}/node-pools/{pool}",
            json={"count": count, **extra},
            idempotency_key=f"scale-{cluster}-{pool}-{count}-{uuid.uuid4().hex[:6]}",
        )
        return answer

    async def delete_cluster(self, name: str) -> dict[str, Any]:
        answer: dict[str, Any] = await self.request(
            "DELETE", f"/v1/kubernetes/clusters/{name}", idempotency_key=f"delete-{name}"
        )
        return answer

    async def kubeconfig(self, cluster: str) -> dict[str, Any]:
        """The cluster's kubeconfig with a one-hour token, as a user gets it."""
        answer = await self.send("GET", f"/v1/kubernetes/clusters/{cluster}/kubeconfig")
        if answer.status_code != 200:
            raise ApiError(f"kubeconfig {cluster}: {answer.status_code} {answer.text}")
        data: dict[str, Any] = yaml.safe_load(answer.text)
        return data

    async def deploy(self, body: dict[str, Any]) -> dict[str, Any]:
        answer: dict[str, Any] = await self.request(
            "POST", "/v1/workspaces", json=body, idempotency_key=f"deploy-{body['name']}"
        )
        return answer

    async def workspace(self, name: str) -> dict[str, Any] | None:
        answer = await self.send("GET", f"/v1/workspaces/{name}")
        if answer.status_code == 404:
            return None
        if answer.status_code != 200:
            raise ApiError(f"GET workspace {name}: {answer.status_code} {answer.text}")
        body: dict[str, Any] = answer.json()
        return body

    async def workspaces(self, cluster: str) -> list[dict[str, Any]]:
        body = await self.request("GET", "/v1/workspaces", params={"cluster": cluster})
        items: list[dict[str, Any]] = body["items"]
        return items

    async def workspace_action(self, name: str, action: str) -> dict[str, Any]:
        answer: dict[str, Any] = await self.request(
            "POST",
            f"/v1/workspaces/{name}/{action}",
            idempotency_key=f"{action}-{name}-{uuid.uuid4().hex[:6]}",
        )
        return answer

    async def delete_workspace(self, name: str) -> dict[str, Any]:
        answer: dict[str, Any] = await self.request(
            "DELETE", f"/v1/workspaces/{name}", idempotency_key=f"delete-ws-{name}"
        )
        return answer


@dataclass(kw_only=True)
class Stack:
    """A running stack as the scenarios see it: its surfaces (the API, a Temporal client, the
    sim's records and Kubernetes APIs) and the disruptions every stack offers. Two kinds:
    `DevServerStack` (the module docstring's) and the production shape's
    (`tests.reliability.cluster.ClusterStack`)."""

    workdir: Path
    """Where the stack keeps its files: the sim's in `sim/`, the processes' logs in `logs/`."""
    env: dict[str, str]
    client: Client
    api: Api
    api_key: str
    management: kube.ApiClient
    hostprovider_url: str
    hostprovider_key: str
    sim_url: str
    worker_kills: int = 0
    temporal_restarts: int = 0
    notes: list[str] = field(default_factory=list)

    # --- the sim ---------------------------------------------------------------------------------

    async def records(self, since: int = 0) -> dict[str, Any]:
        async with httpx.AsyncClient(verify=False, timeout=30) as http:
            answer = await http.get(f"{self.sim_url}/sim/v1/records", params={"since": since})
        answer.raise_for_status()
        body: dict[str, Any] = answer.json()
        return body

    async def claimed_hosts(self) -> list[dict[str, Any]]:
        """The hosts the provider lists as claimed (by anyone)."""
        async with httpx.AsyncClient(
            base_url=self.hostprovider_url,
            headers={"Authorization": f"Bearer {self.hostprovider_key}"},
            timeout=30,
        ) as http:
            deadline = time.monotonic() + AGAIN_DEADLINE
            while True:
                answer = await http.get("/v1/hosts", params={"state": "claimed"})
                if answer.status_code not in OBSERVER_AGAIN or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
        answer.raise_for_status()
        items: list[dict[str, Any]] = answer.json()["items"]
        return items

    async def set_faults(self, config: dict[str, Any]) -> None:
        async with httpx.AsyncClient(verify=False, timeout=30) as http:
            answer = await http.put(f"{self.sim_url}/sim/v1/faults", json=config)
        answer.raise_for_status()

    async def faults(self) -> dict[str, Any]:
        async with httpx.AsyncClient(verify=False, timeout=30) as http:
            answer = await http.get(f"{self.sim_url}/sim/v1/faults")
        answer.raise_for_status()
        body: dict[str, Any] = answer.json()
        return body

    async def add_eviction_faults(self, evictions: list[dict[str, Any]]) -> None:
        """Script refusals of evictions beside the faults in place (their random generator
        goes on where it was: no seed is sent)."""
        config = await self.faults()
        config["evictions"] = [*config["evictions"], *evictions]
        config["seed"] = None
        await self.set_faults(config)

    async def injected(self) -> dict[str, Any]:
        """Requests the sim saw and faults it answered, by target (since it started)."""
        async with httpx.AsyncClient(verify=False, timeout=30) as http:
            answer = await http.get(f"{self.sim_url}/sim/v1/faults/injected")
        answer.raise_for_status()
        body: dict[str, Any] = answer.json()
        return body

    async def clear_faults(self) -> None:
        async with httpx.AsyncClient(verify=False, timeout=30) as http:
            answer = await http.delete(f"{self.sim_url}/sim/v1/faults")
        answer.raise_for_status()

    async def k0rdent_objects(self, plural: str) -> list[dict[str, Any]]:
        listed: Any = await call(
            kube.CustomObjectsApi(self.management).list_namespaced_custom_object,
            *K0RDENT,
            KCM_NAMESPACE,
            plural,
        )
        items: list[dict[str, Any]] = listed["items"]
        return items

    async def management_secrets(self) -> list[Any]:
        listed = await call(kube.CoreV1Api(self.management).list_namespaced_secret, KCM_NAMESPACE)
        return list(listed.items)

    async def child_admin(self, deployment: str) -> kube.ApiClient:
        """An admin client of a child cluster, from its ClusterDeployment's kubeconfig Secret."""
        secret = await call(
            kube.CoreV1Api(self.management).read_namespaced_secret,
            f"{deployment}-kubeconfig",
            KCM_NAMESPACE,
        )
        return api_client_from_dict(yaml.safe_load(base64.b64decode(secret.data["value"])))

    # --- processes -------------------------------------------------------------------------------

    async def kill_worker(self) -> None:
        """SIGKILL a worker; another (or the same, started again) takes over."""
        raise NotImplementedError

    async def restart_temporal(self, sig: signal.Signals, down_for: float = 0.0) -> float:
        """Stop Temporal with `sig` and start it again; the seconds it was unreachable."""
        raise NotImplementedError

    async def ctl(self, *args: str, timeout: float = 180.0) -> tuple[int, str, str]:
        """`colonyctl ARGS` in local mode (organization ""), as a separate process."""
        process = await asyncio.create_subprocess_exec(
            str(VENV_BIN / "colonyctl"),
            *args,
            cwd=REPO,
            env=self.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout)
        return process.returncode or 0, stdout.decode(), stderr.decode()

    def describe_failure(self) -> str:
        """The processes' last lines, for a failure's message."""
        raise NotImplementedError


@dataclass(kw_only=True)
class DevServerStack(Stack):
    """The dev server's stack: one Temporal process on SQLite, one worker, one API."""

    temporal_port: int
    temporal: Process
    sim: Process
    worker: Process
    api_process: Process

    async def kill_worker(self) -> None:
        """SIGKILL the worker (no goodbye to the server, no graceful drain) and start another."""
        await self.worker.signal(signal.SIGKILL)
        self.worker_kills += 1
        await self.start_worker()

    async def start_worker(self) -> None:
        marker = self.worker.starts + 1
        await self.worker.start()

        async def polling() -> bool:
            if not self.worker.running:
                raise AssertionError(f"worker.py exited:\n{self.worker.tail()}")
            text = self.worker.text()
            start = text.rfind(f"=== start {marker} ")
            return start >= 0 and "worker on task queue" in text[start:]

        await eventually(polling, timeout=START_DEADLINE, interval=0.1, what="worker.py polling")

    async def restart_temporal(self, sig: signal.Signals, down_for: float = 0.0) -> float:
        """Stop the dev server with `sig`, leave it down `down_for` seconds, start it again on the
        same port and database; the seconds it was unreachable."""
        began = time.monotonic()
        await self.temporal.signal(sig)
        await asyncio.sleep(down_for)
        await self.temporal.start()
        self.temporal_restarts += 1
        await wait_for_temporal(self.temporal, self.temporal_port)
        return time.monotonic() - began

    def describe_failure(self) -> str:
        return "\n".join(
            f"--- {p.name} (last lines)\n{p.tail()}"
            for p in (self.worker, self.api_process, self.sim, self.temporal)
        )


async def wait_for_temporal(process: Process, port: int) -> None:
    async def up() -> bool:
        if not process.running:
            raise AssertionError(f"the Temporal dev server exited:\n{process.tail()}")
        return await asyncio.to_thread(port_open, port)

    await eventually(up, timeout=START_DEADLINE, interval=0.1, what="Temporal dev server")


async def connect_temporal(process: Process, port: int) -> Client:
    async def connected() -> Client | None:
        if not process.running:  # its port may answer for a while after a failed start
            raise AssertionError(f"the Temporal dev server exited:\n{process.tail()}")
        try:
            return await Client.connect(f"127.0.0.1:{port}", data_converter=pydantic_data_converter)
        except RuntimeError:
            return None

    temporal = await eventually(
        connected, timeout=START_DEADLINE, interval=0.2, what="a Temporal client"
    )
    assert temporal is not None
    return temporal


@contextlib.asynccontextmanager
async def running_stack(workdir: Path, *, sim_time_scale: float) -> AsyncIterator[DevServerStack]:
    """Start every process of the stack in `workdir`; stop them all on the way out."""
    logs = workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("COLONY_", "TEMPORAL_"))}
    grpc = free_port()
    temporal_argv = [
        str(VENV_BIN / "temporal"), "server", "start-dev",
        "--ip", "127.0.0.1", "--port", str(grpc), "--headless",
        "--db-filename", str(workdir / "temporal.db"), "--log-level", "error",
        "--dynamic-config-value", "frontend.enableUpdateWorkflowExecution=true",
    ]  # fmt: skip
    for key in SEARCH_ATTRIBUTES:
        temporal_argv += ["--search-attribute", f"{key.name}=Keyword"]
    sim_dir = workdir / "sim"
    processes: list[Process] = []

    def process(name: str, argv: list[str], env: dict[str, str]) -> Process:
        made = Process(name, argv, env, logs / f"{name}.log")
        processes.append(made)
        return made

    temporal = process("temporal", temporal_argv, base_env)
    sim = process(
        "sim",
        [
            sys.executable, "-m", "sim", "--state-dir", str(sim_dir),
            "--inventory", str(INVENTORY), "--time-scale", str(sim_time_scale),
            "--log-level", "WARNING",
            # Its invariants are read from the emulator's records (evictions among them).
            "--world", "emulated",
        ],
        base_env,
    )  # fmt: skip
    management: kube.ApiClient | None = None
    temporal_client: Client | None = None
    try:
        await temporal.start()
        await sim.start()
        await wait_for_temporal(temporal, grpc)
        await eventually(
            lambda: asyncio.to_thread((sim_dir / "world.json").exists),
            timeout=START_DEADLINE,
            what="the simulator",
        )
        world = json.loads((sim_dir / "world.json").read_text())
        hostprovider = json.loads((sim_dir / "hostprovider.json").read_text())
        keys = workdir / "sealing"
        create_key_pair(keys / "private.pem", keys / "public.pem")
        api_port = free_port()
        env = {
            **base_env,
            "TEMPORAL_ADDRESS": f"127.0.0.1:{grpc}",
            "TEMPORAL_NAMESPACE": "default",
            "COLONY_TASK_QUEUE": TASK_QUEUE,
            "COLONY_MANAGEMENT_KUBECONFIG": str(sim_dir / "management.kubeconfig"),
            "COLONY_HOST_PROVIDER_CONFIG": str(sim_dir / "hostprovider.json"),
            PUBLIC_KEY_ENV: str(keys / "public.pem"),
            PRIVATE_KEY_ENV: str(keys / "private.pem"),
            "COLONY_API_PORT": str(api_port),
            "COLONY_API_RATE": "0",
            "COLONY_CACHE_DIR": str(workdir / "cache"),
            "COLONY_CONFIG_DIR": str(workdir / "config"),
            "HOME": str(workdir),
        }
        worker = process("worker", [sys.executable, "worker.py"], env)
        api_process = process("api", [sys.executable, "-m", "api"], env)
        temporal_client = await connect_temporal(temporal, grpc)
        management = api_client_from_file(sim_dir / "management.kubeconfig")
        stack = DevServerStack(
            workdir=workdir,
            env=env,
            temporal_port=grpc,
            temporal=temporal,
            sim=sim,
            worker=worker,
            api_process=api_process,
            client=temporal_client,
            api=Api(httpx.AsyncClient()),
            api_key="",
            management=management,
            hostprovider_url=hostprovider["url"],
            hostprovider_key=hostprovider["apiKey"],
            sim_url=world["management"]["url"],
        )
        await stack.start_worker()
        await api_process.start()
        code, out, err = await stack.ctl(
            "apikey", "create", "--organization", ORGANIZATION,
            "--permission", "read", "--permission", "connect", "--permission", "manage",
            "-o", "json",
        )  # fmt: skip
        assert code == 0, err
        stack.api_key = json.loads(out)["key"]
        stack.api = Api(
            httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{api_port}",
                headers={"Authorization": f"Bearer {stack.api_key}"},
                timeout=60,
            )
        )
        await eventually(
            lambda: asyncio.to_thread(port_open, api_port),
            timeout=START_DEADLINE,
            interval=0.1,
            what="the API",
        )
        await wait_for_classes(stack.api)
        try:
            yield stack
        finally:
            await stack.api.http.aclose()
    finally:
        if management is not None:
            close_client(management)
        for running in reversed(processes):
            await running.signal(signal.SIGTERM, timeout=15)


async def wait_for_classes(api: Api) -> None:
    """The worker publishes the shipped classes at start; the suite deploys them."""

    async def classes() -> list[Any]:
        body = await api.request("GET", "/v1/workspace-classes")
        items: list[Any] = body["items"]
        return items

    await shipped_classes_listed(classes, timeout=START_DEADLINE)


async def poll(
    probe: Callable[[], Awaitable[T]],
    until: Callable[[T], bool],
    *,
    what: str,
    timeout: float = 120.0,
    interval: float = 0.25,
) -> T:
    """`eventually` with the suite's defaults: generous deadlines, quarter-second polls."""
    return await eventually(probe, until=until, timeout=timeout, interval=interval, what=what)
