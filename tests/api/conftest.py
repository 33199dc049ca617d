"""The HTTP API's test stack: the Temporal dev server, the sim, the real worker, a key store on the
simulated management cluster, and apps built with `api.app.create_app` around them.

One stack for the session (`api_stack`): the sim runs in the test loop (instant timing), the
worker polls its own task queue (with the WorkspaceClass CRD installed and a sealing key pair of
its own: the apps seal with its public key, the worker unseals with its private one), and every
test makes its own app (`stack.app(...)`, with its own rate limit) and its own keys and
organizations (`unique`), so tests share nothing they could disturb. Requests go through the real
ASGI app with `httpx.AsyncClient(transport=ASGITransport)`.

Workspace tests take `catalog` too: the class catalog workflow is one per Temporal namespace
(`catalog/workspace-classes`), and another test module's stack may have moved it to its own task
queue; `catalog` moves it back to this stack's worker and waits for the shipped classes.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from kubernetes import client as kube_client
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from api.app import create_app
from clients.errors import UnavailableError
from infra.config import ColonySettings
from infra.keys import KubernetesKeyStore
from infra.sealing import SealingSettings
from infra.settings import ApiSettings
from sim.world import SimWorld
from tests.helpers import eventually, shipped_classes_listed, unique
from tests.simenv import worker_world
from worker import ensure_catalog

GPU = "h100-80gb"
CPU_SKU = "cpu-32c-256g"
JUPYTER = "colony-jupyter-1-0-0"
WORKSPACES = "/v1/workspaces"
ALL_PERMISSIONS = ("kubernetes:read", "kubernetes:connect", "kubernetes:manage")
BASE_URL = "http://colony.test"


@dataclass
class ApiStack:
    """What an API test needs (see the module docstring)."""

    world: SimWorld
    env: dict[str, str]
    settings: ColonySettings
    temporal: Client
    management: kube_client.ApiClient
    store: KubernetesKeyStore
    tmp: Path
    sealing: SealingSettings
    task_queue: str
    apps: list[FastAPI] = field(default_factory=list)

    def app(
        self,
        *,
        store: Any = None,
        connect: Any = None,
        sealing: SealingSettings | None = None,
        **api: Any,
    ) -> FastAPI:
        """A new app over the stack; `api` overrides `ApiSettings` (a generous rate by default)."""
        temporal = self.temporal

        async def connect_default() -> Client:
            return temporal

        settings = ApiSettings(**{"rate": 1000.0, "burst": 1000, **api})
        app = create_app(
            self.settings,
            connect or connect_default,
            store or self.store,
            api_settings=settings,
            sealing=sealing or self.sealing,
        )
        self.apps.append(app)
        return app

    def http(self, app: FastAPI, key: str | None = None) -> httpx.AsyncClient:
        """A client of the app through its ASGI interface (no socket), with `key` if given."""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url=BASE_URL, headers=headers, timeout=60
        )

    async def key(
        self,
        organization: str,
        *permissions: str,
        expires_at: datetime | None = None,
    ) -> str:
        """A new API key (all permissions unless named)."""
        _, key = await self.store.create(
            organization,
            permissions or ALL_PERMISSIONS,
            name="test",
            expires_at=expires_at,
        )
        return key

    async def ready_cluster(
        self,
        http: httpx.AsyncClient,
        name: str,
        *,
        pools: Iterable[dict[str, Any]] = (
            {"name": "gpu", "sku": {"gpuModelId": GPU}, "count": 1},
        ),
        location: str = "fra1",
    ) -> dict[str, Any]:
        """Create a cluster through the API and wait until it is ready; its last GET body."""
        created = await http.post(
            "/v1/kubernetes/clusters",
            json={"name": name, "locationId": location, "nodePools": list(pools)},
        )
        assert created.status_code == 202, created.text
        return await self.wait_status(http, name, "ready")

    async def wait_status(
        self, http: httpx.AsyncClient, name: str, status: str, timeout: float = 90
    ) -> dict[str, Any]:
        async def probe() -> dict[str, Any]:
            got = await http.get(f"/v1/kubernetes/clusters/{name}")
            assert got.status_code == 200, got.text
            body: dict[str, Any] = got.json()
            assert body["status"] != "failed", body
            return body

        return await eventually(
            probe,
            until=lambda body: body["status"] == status,
            timeout=timeout,
            interval=0.2,
            what=f"cluster {name} {status}",
        )

    async def wait_gone(self, http: httpx.AsyncClient, name: str, timeout: float = 90) -> None:
        async def probe() -> int:
            return (await http.get(f"/v1/kubernetes/clusters/{name}")).status_code

        await eventually(
            probe, until=lambda code: code == 404, timeout=timeout, interval=0.2, what="deleted"
        )

    async def wait_workspace(
        self, http: httpx.AsyncClient, name: str, phase: str, timeout: float = 90
    ) -> dict[str, Any]:
        """Poll `GET /v1/workspaces/{name}` until its phase is `phase` (never Failed first); for
        Running, until its operation finished too (the access step follows Running)."""

        async def probe() -> dict[str, Any]:
            got = await http.get(f"{WORKSPACES}/{name}")
            assert got.status_code == 200, got.text
            body: dict[str, Any] = got.json()
            assert body["phase"] != "Failed" or phase == "Failed", body
            return body

        return await eventually(
            probe,
            until=lambda body: (
                body["phase"] == phase and (phase != "Running" or "currentOperation" not in body)
            ),
            timeout=timeout,
            interval=0.2,
            what=f"workspace {name} {phase}",
        )

    async def wait_workspace_gone(
        self, http: httpx.AsyncClient, name: str, timeout: float = 90
    ) -> None:
        async def probe() -> int:
            return (await http.get(f"{WORKSPACES}/{name}")).status_code

        await eventually(
            probe,
            until=lambda code: code == 404,
            timeout=timeout,
            interval=0.2,
            what=f"workspace {name} deleted",
        )


@pytest.fixture(scope="session")
async def api_stack(
    dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ApiStack]:
    async with worker_world(
        dev_env.client,
        tmp_path_factory.mktemp("api-sim"),
        tmp_path_factory.mktemp("api-sealing"),
        unique("api"),
        catalog=False,
    ) as running:
        store = KubernetesKeyStore(running.management)
        yield ApiStack(
            world=running.world,
            env=running.env,
            settings=ColonySettings.from_env(running.env),
            temporal=dev_env.client,
            management=running.management,
            store=store,
            tmp=tmp_path_factory.mktemp("api"),
            sealing=running.sealing,
            task_queue=running.task_queue,
        )
        await store.close()


@pytest.fixture(scope="module")
async def catalog(api_stack: ApiStack) -> ApiStack:
    """The stack, with the class catalog workflow on its worker and the shipped classes in it."""
    from clients.classes import TemporalClasses
    from clients.temporal import TemporalSession

    await ensure_catalog(api_stack.temporal, api_stack.task_queue)

    async def shipped() -> set[str]:
        try:
            session = TemporalSession.of_client(api_stack.temporal, api_stack.settings)
            status = await TemporalClasses(session).catalog()
        except UnavailableError:
            return set()
        return {c.name for c in status.classes}

    await shipped_classes_listed(shipped)
    return api_stack


@pytest.fixture
def api_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every log record of the test, at DEBUG, whatever logger wrote it."""
    caplog.set_level(logging.DEBUG)
    return caplog
