"""The simulated world and Colony's real clients over it, for activity, CLI and end-to-end tests.

Tests (and only tests) import `sim`: `started_world` runs a `SimWorld` in the test's event loop with
instant timing, and the clients are built exactly as `worker.py` builds them, from the files the
sim writes. Blocking Kubernetes calls made by tests go through `asyncio.to_thread`, so the sim,
which shares the loop, keeps serving.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import yaml
from kubernetes import client
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from activities.management.cluster_deployments import ClusterDeploymentActivities
from infra.crds import ensure_crds
from infra.kube import api_client_from_dict, api_client_from_file, close_client
from infra.sealing import PUBLIC_KEY_ENV, SealingSettings, create_key_pair
from models.activity_api import (
    AwaitClusterDeploymentRequest,
    DeploymentWait,
    GetClusterDeploymentStatusResult,
)
from sim.timing import SimTiming
from sim.world import (
    EMULATED,
    WORLD_ENV,
    SimWorld,
    World,
    WorldConfig,
    make_world,
    world_kind,
)
from worker import build_worker, ensure_catalog, host_provider_client

NAMESPACE = "kcm-system"
SHARED = Path(
    os.environ.get("COLONY_SHARED_DIR") or Path(__file__).resolve().parents[1].parent / "shared"
)
"""The shared reference material beside the checkout (`COLONY_SHARED_DIR` names another place: a
worktree's checkout has none beside it)."""
REAL_K0RDENT_CRDS = SHARED / "k0rdent-crds"
"""k0rdent's own CRDs, beside the checkout where present (CI has them): every world the tests start
serves those instead of the sim's, so each object Colony writes is validated against the real
schemas (an invalid one is a 422 and the test fails)."""


def e2e_world() -> str:
    """The world end-to-end tests run on: `COLONY_WORLD` ("emulated", the default, or "real":
    real control planes, `sim.real`)."""
    return world_kind(os.environ.get(WORLD_ENV))


@asynccontextmanager
async def started_world(
    state_dir: Path, *, world: str | None = None, **timing: float
) -> AsyncIterator[World]:
    """A world with instant timing (named delays may be overridden, e.g. pod_terminate=0.2), of
    the kind `world` names (default: the emulated one; the end-to-end suites that run on either
    pass `e2e_world()`)."""
    sim_timing = SimTiming.instant()
    if timing:
        sim_timing = SimTiming(time_scale=1.0, delays=dict.fromkeys(sim_timing.delays, 0.0))
        sim_timing = sim_timing.with_delays(**timing)
    crds = [REAL_K0RDENT_CRDS] if REAL_K0RDENT_CRDS.is_dir() else None
    config = WorldConfig(
        state_dir=state_dir, timing=sim_timing, crd_paths=crds, world=world or EMULATED
    )
    async with make_world(config) as started:
        yield started
        if isinstance(started, SimWorld):
            # Whatever a test sent on purpose, nothing the simulated k0rdent wrote may break the
            # schema.
            refused = [w for w in started.store.rejected_writes if w.writer != "client"]
            assert not refused, f"the sim's controllers wrote invalid objects: {refused}"
            # Nor a field k0rdent's CRDs lack: a real API server prunes it, no reader would see it.
            pruned = [w for w in started.store.pruned_writes if w.writer != "client"]
            assert not pruned, f"the sim's controllers wrote fields their CRDs lack: {pruned}"
        else:
            refused = started.rejected_writes()
            assert not refused, f"the real servers refused the sim's controllers: {refused}"


@dataclass(frozen=True)
class WorkerWorld:
    """A simulated world with Colony's worker polling a task queue of its own over it.

    Attributes:
        env: what a worker, `colonyctl` or the API is given for it: Temporal, the task queue, the
            world's kubeconfig and host provider, the sealing public key.
    """

    world: World
    management: client.ApiClient
    sealing: SealingSettings
    task_queue: str
    env: dict[str, str]


@asynccontextmanager
async def worker_world(
    temporal: Client,
    state_dir: Path,
    keys_dir: Path,
    task_queue: str,
    *,
    catalog: bool = True,
    world: str | None = None,
) -> AsyncIterator[WorkerWorld]:
    """A started world (its CRDs installed) and a worker on `task_queue` with a sealing key pair
    of its own (in `keys_dir`); with `catalog`, the class catalog's workflow started too."""
    create_key_pair(keys_dir / "private.pem", keys_dir / "public.pem")
    sealing = SealingSettings(keys_dir / "public.pem", keys_dir / "private.pem")
    async with started_world(state_dir, world=world) as started:
        management = management_api(started)
        await ensure_crds(management)
        async with (
            host_provider(started) as http,
            build_worker(temporal, task_queue, management, http, sealing.unsealer()) as worker,
            worker,
        ):
            if catalog:
                await ensure_catalog(temporal, task_queue)
            env = colony_env(
                started,
                TEMPORAL_ADDRESS=temporal.service_client.config.target_host,
                TEMPORAL_NAMESPACE=temporal.namespace,
                COLONY_TASK_QUEUE=task_queue,
                **{PUBLIC_KEY_ENV: str(sealing.public_key_file)},
            )
            yield WorkerWorld(started, management, sealing, task_queue, env)
        close_client(management)


def colony_env(world: World, **extra: str) -> dict[str, str]:
    """The environment a worker or `colonyctl` would be given for this world."""
    return {
        "COLONY_MANAGEMENT_KUBECONFIG": str(world.management_kubeconfig_path),
        "COLONY_HOST_PROVIDER_CONFIG": str(world.hostprovider_json_path),
        **extra,
    }


def management_api(world: World) -> client.ApiClient:
    return api_client_from_file(world.management_kubeconfig_path)


def host_provider(world: World) -> httpx.AsyncClient:
    data = json.loads(world.hostprovider_json_path.read_text())
    return host_provider_client(data["url"], data["apiKey"])


async def child_api(api: client.ApiClient, cluster: str) -> client.ApiClient:
    """An admin client of a child cluster, from its kubeconfig Secret (the test plays the admin)."""
    secret = await asyncio.to_thread(
        client.CoreV1Api(api).read_namespaced_secret, f"{cluster}-kubeconfig", NAMESPACE
    )
    kubeconfig = yaml.safe_load(base64.b64decode(secret.data["value"]))
    return api_client_from_dict(kubeconfig)


async def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A blocking client call, off the loop the sim serves on."""
    return await asyncio.to_thread(fn, *args, **kwargs)


__all__ = [
    "NAMESPACE",
    "call",
    "child_api",
    "close_client",
    "colony_env",
    "host_provider",
    "management_api",
    "started_world",
]


async def deployment_status(
    management: ClusterDeploymentActivities, name: str, namespace: str = NAMESPACE
) -> GetClusterDeploymentStatusResult:
    """The ClusterDeployment's status as the management activities read it: their wait, with a
    deadline already passed, looks once and answers."""
    waited = await ActivityEnvironment().run(
        management.await_cluster_deployment,
        AwaitClusterDeploymentRequest(
            namespace=namespace, name=name, want=DeploymentWait.READY, deadline=datetime.now(UTC)
        ),
    )
    return waited.status
