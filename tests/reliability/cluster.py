"""The reliability suite's production-shaped stack: `make stack`'s processes (`starter.dev.stack`),
in the session's temporary directory, on free ports: PostgreSQL, Temporal as four processes
(frontend, history, matching, worker), the sim with the suite's inventory, 2 workers, 2 watchers,
2 API replicas (the Web UI too, as `make stack` runs it).

The scenarios see it as they see the dev server's (`tests.reliability.stack.Stack`: the API, a
Temporal client, the sim's records and Kubernetes APIs), plus what only this shape offers: every
process killed, stopped and started again by name (`kill`, `restart`), the worker that runs an
activity found from the workflow's pending activities, the watcher that leads from its Lease.

The API client sends each request to the replicas in turn, and one a replica does not answer
(killed, starting again) to the other with the same Idempotency-Key, as a client behind a load
balancer does (`FailoverApi`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client as kube
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from infra.kube import api_client_from_file, close_client
from starter.dev.stack import LocalStack, free_ports
from tests.reliability.stack import (
    AGAIN,
    AGAIN_DEADLINE,
    INVENTORY,
    ORGANIZATION,
    TASK_QUEUE,
    Api,
    Stack,
    call,
    wait_for_classes,
)

SYSTEM_NAMESPACE = "colony-system"
WATCHER_LEASE = "colony-watcher"


@dataclass
class FailoverApi(Api):
    """The API's replicas behind one client (see the module docstring)."""

    replicas: list[httpx.AsyncClient] = field(default_factory=list)
    failovers: int = 0
    """Requests sent again to another replica because theirs did not answer."""
    served: Counter[int] = field(default_factory=Counter)
    """Answers by replica (index into `replicas`)."""
    _turn: int = 0

    async def send(
        self, method: str, path: str, *, idempotency_key: str | None = None, **kwargs: Any
    ) -> httpx.Response:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        deadline = time.monotonic() + AGAIN_DEADLINE
        while True:
            index = self._turn % len(self.replicas)
            self._turn += 1
            try:
                answer = await self.replicas[index].request(method, path, headers=headers, **kwargs)
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                self.failovers += 1
                continue  # the next replica, at once
            self.served[index] += 1
            if answer.status_code not in AGAIN or time.monotonic() > deadline:
                return answer
            self.sent_again += 1
            await asyncio.sleep(0.5)

    async def aclose(self) -> None:
        for replica in self.replicas:
            await replica.aclose()


@dataclass(kw_only=True)
class ClusterStack(Stack):
    """The production shape, running (see the module docstring)."""

    local: LocalStack
    api: FailoverApi
    disruptions: Counter[str] = field(default_factory=Counter)
    """What was done to which process: `SIGKILL temporal-history` -> times."""

    # --- processes -------------------------------------------------------------------------------

    def pid(self, name: str) -> int | None:
        return self.local.children[name].pid

    def running(self, name: str) -> bool:
        return self.local.children[name].running

    async def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        """Send `sig` to one process and wait for its end; it stays down."""
        await asyncio.to_thread(self.local.children[name].signal, sig)
        self.disruptions[f"{sig.name} {name}"] += 1

    async def start(self, name: str) -> float:
        """Start one process again; the seconds until it served."""
        began = time.monotonic()
        await asyncio.to_thread(self.local.start, name)
        return time.monotonic() - began

    async def restart(self, name: str, sig: signal.Signals, down_for: float = 0.0) -> float:
        """Stop one process with `sig`, leave it down `down_for` s, start it again on the same
        ports and state; the seconds from the signal until it served again."""
        began = time.monotonic()
        await self.kill(name, sig)
        await asyncio.sleep(down_for)
        await self.start(name)
        return time.monotonic() - began

    async def kill_worker(self) -> None:
        await self.restart("worker-1", signal.SIGKILL)
        self.worker_kills += 1

    def worker_named(self, identity: str) -> str | None:
        """The worker process a Temporal worker identity (`<pid>@<host>`) belongs to."""
        pid, _, _ = identity.partition("@")
        for name in self.local.names("worker"):
            if str(self.pid(name)) == pid:
                return name
        return None

    async def lease_holder(self) -> str:
        """The identity holding the watchers' Lease now ("" when none)."""
        lease = await call(
            kube.CoordinationV1Api(self.management).read_namespaced_lease,
            WATCHER_LEASE,
            SYSTEM_NAMESPACE,
        )
        return str(lease.spec.holder_identity or "")

    def watcher_named(self, identity: str) -> str | None:
        """The watcher process a Lease identity (`<hostname>-<pid>`) belongs to."""
        for name in self.local.names("watcher"):
            if identity == f"{socket.gethostname()}-{self.pid(name)}":
                return name
        return None

    def describe_failure(self) -> str:
        return self.local.describe()


@contextlib.asynccontextmanager
async def running_cluster(workdir: Path, *, sim_time_scale: float) -> AsyncIterator[ClusterStack]:
    """Start the production shape in `workdir`; stop every process on the way out."""
    overrides = {
        "COLONY_TASK_QUEUE": TASK_QUEUE,
        "COLONY_API_RATE": "0",
        "COLONY_CACHE_DIR": str(workdir / "cache"),
        "COLONY_CONFIG_DIR": str(workdir / "config"),
        "HOME": str(workdir),
    }
    sim_args = [
        "--inventory", str(INVENTORY), "--time-scale", str(sim_time_scale),
        "--log-level", "WARNING",
    ]  # fmt: skip
    local = await asyncio.to_thread(
        LocalStack.create, workdir, free_ports(), sim_args=sim_args, colony_env=overrides
    )
    management: kube.ApiClient | None = None
    api: FailoverApi | None = None
    try:
        await asyncio.to_thread(local.up)
        sim_dir = local.plan.sim_dir
        world = json.loads((sim_dir / "world.json").read_text())
        hostprovider = json.loads((sim_dir / "hostprovider.json").read_text())
        temporal = await Client.connect(
            local.temporal_address, data_converter=pydantic_data_converter
        )
        management = api_client_from_file(sim_dir / "management.kubeconfig")
        api = FailoverApi(httpx.AsyncClient())
        stack = ClusterStack(
            workdir=workdir,
            env=local.env(),
            client=temporal,
            api=api,
            api_key="",
            management=management,
            hostprovider_url=hostprovider["url"],
            hostprovider_key=hostprovider["apiKey"],
            sim_url=world["management"]["url"],
            local=local,
        )
        code, out, err = await stack.ctl(
            "apikey", "create", "--organization", ORGANIZATION,
            "--permission", "read", "--permission", "connect", "--permission", "manage",
            "-o", "json",
        )  # fmt: skip
        assert code == 0, err
        stack.api_key = json.loads(out)["key"]
        await api.http.aclose()
        api.replicas = [
            httpx.AsyncClient(
                base_url=url, headers={"Authorization": f"Bearer {stack.api_key}"}, timeout=60
            )
            for url in local.api_urls
        ]
        api.http = api.replicas[0]
        await wait_for_classes(api)
        yield stack
    finally:
        if api is not None:
            await api.aclose()
        if management is not None:
            close_client(management)
        await asyncio.to_thread(local.stop)
