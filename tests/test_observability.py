"""Traces and metrics of a real scenario: `colonyctl` -> dev server -> worker -> the sim.

- Tracing: with an in-memory exporter installed, `colonyctl cluster create` is one trace: the
  command's span, Temporal's StartWorkflow/RunWorkflow/StartActivity/RunActivity spans, and the
  activities' Kubernetes and host-provider calls, each a descendant of the command's span.
- Metrics: a worker whose client runs on a Temporal runtime with Prometheus, serving Colony's
  endpoint on a free port; after a create, a drain held once by a budget and a failing claim, one
  scrape shows Colony's metrics and the Temporal runtime's.
- `make run` with COLONY_METRICS_PORT: the worker and the watcher started by `starter.dev.devenv` as
  `make run` starts them, each serving its own endpoint (the watcher's on the next free port).
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner, Result

from infra import metrics, tracing
from infra.config import METRICS_PORT_ENV, WATCHER_METRICS_PORT_ENV
from infra.ports import free_port
from sim.world import SimWorld
from starter.cli import app, normalize_argv
from starter.dev import devenv
from tests.helpers import eventually, unique
from tests.simenv import (
    call,
    child_api,
    close_client,
    colony_env,
    host_provider,
    management_api,
    started_world,
)
from worker import build_worker, temporal_runtime

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class World:
    world: SimWorld
    management: client.ApiClient
    dev_env: WorkflowEnvironment


@pytest.fixture(scope="module")
async def world(
    dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    async with started_world(tmp_path_factory.mktemp("sim")) as sim:
        management = management_api(sim)
        yield World(sim, management, dev_env)
        close_client(management)


@pytest.fixture(autouse=True)
def _no_faults(world: World) -> Iterator[None]:
    world.world.faults.clear()
    yield
    world.world.faults.clear()


async def ctl(env: dict[str, str], *args: str, expect: int = 0) -> Result:
    result = await asyncio.to_thread(CliRunner().invoke, app, normalize_argv(args), env=env)
    assert result.exit_code == expect, f"colonyctl {args}: {result.stderr}{result.exception!r}"
    return result


def env_for(world: World, temporal: Client, task_queue: str) -> dict[str, str]:
    return colony_env(
        world.world,
        TEMPORAL_ADDRESS=temporal.service_client.config.target_host,
        TEMPORAL_NAMESPACE=temporal.namespace,
        COLONY_TASK_QUEUE=task_queue,
    )


def ancestors(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> list[str]:
    names: list[str] = []
    parent = span.parent
    while parent is not None and parent.span_id in by_id:
        above = by_id[parent.span_id]
        names.append(above.name)
        parent = above.parent
    return names


async def test_one_trace_from_the_cli_to_the_kubernetes_calls(world: World) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    task_queue = unique("traced")
    try:
        interceptor = tracing.interceptor()
        assert interceptor is not None
        async with (
            host_provider(world.world) as http,
            build_worker(
                world.dev_env.client,
                task_queue,
                world.management,
                http,
                interceptors=[interceptor],
            ) as worker,
            worker,
        ):
            env = env_for(world, world.dev_env.client, task_queue)
            name = unique("traced")
            await ctl(
                env, "cluster", "create", name, "--location-id", "fra1",
                "--node-pool", "name=gpu,count=1,gpuModelId=h100-80gb", "--wait", "--timeout", "90",
            )  # fmt: skip
            await ctl(env, "cluster", "delete", name, "--wait", "--timeout", "90")
    finally:
        tracing.install(None)

    spans = exporter.get_finished_spans()
    command = next(s for s in spans if s.name == "colonyctl cluster create")
    trace_id = command.context.trace_id
    in_trace = [s for s in spans if s.context.trace_id == trace_id]
    names = {s.name for s in in_trace}
    assert {
        "StartWorkflow:ClusterWorkflow",
        "RunWorkflow:ClusterWorkflow",
        "StartActivity:create_cluster_deployment",
        "RunActivity:create_cluster_deployment",
        "RunActivity:claim_hosts",
        "kube create_namespaced_custom_object",
        "hostprovider POST /v1/claims",
    } <= names, sorted(names)
    by_id = {s.context.span_id: s for s in in_trace}
    kube = next(s for s in in_trace if s.name == "kube create_namespaced_custom_object")
    chain = ancestors(kube, by_id)
    # Temporal's interceptor hangs the workflow's spans (RunWorkflow, StartActivity) under the
    # StartWorkflow span that carried the context, and each RunActivity under its StartActivity.
    assert chain == [
        "RunActivity:create_cluster_deployment",
        "StartActivity:create_cluster_deployment",
        "StartWorkflow:ClusterWorkflow",
        "colonyctl cluster create",
    ], chain
    assert (kube.attributes or {})["http.response.status_code"] == 200
    # Names and ids only: no request body, kubeconfig or token becomes an attribute.
    for span in in_trace:
        for value in (span.attributes or {}).values():
            assert "token" not in str(value).lower()
    # The delete is a trace of its own, rooted in its own command.
    assert any(s.name == "colonyctl cluster delete" for s in spans)


def scrape(port: int) -> dict[str, list[Any]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def value(samples: dict[str, list[Any]], name: str, **labels: str) -> float:
    return sum(
        s.value
        for s in samples.get(name, [])
        if all(s.labels.get(k) == v for k, v in labels.items())
    )


async def test_the_worker_serves_colony_and_temporal_metrics(world: World) -> None:
    runtime, temporal_url = temporal_runtime(0)
    assert runtime is not None
    assert temporal_url is not None
    temporal = await Client.connect(
        world.dev_env.client.service_client.config.target_host,
        namespace=world.dev_env.client.namespace,
        data_converter=pydantic_data_converter,
        runtime=runtime,
    )
    port = metrics.serve(0, address="127.0.0.1", temporal_metrics_url=temporal_url)
    before = scrape(port)
    task_queue = unique("metered")
    async with (
        host_provider(world.world) as http,
        build_worker(temporal, task_queue, world.management, http) as worker,
        worker,
    ):
        env = env_for(world, temporal, task_queue)
        name = unique("metered")
        # One claim fails on the first try (the provider answers 503), then succeeds.
        world.world.faults.fail_next(503, target="hostprovider", path="/v1/claims", method="POST")
        await ctl(
            env, "cluster", "create", name, "--location-id", "fra1",
            "--node-pool", "name=gpu,count=2,gpuModelId=h100-80gb", "--wait", "--timeout", "90",
        )  # fmt: skip
        # A pod on each node; the drain of the removed node is refused once by "its budget".
        api = await child_api(world.management, name)
        core = client.CoreV1Api(api)
        nodes = sorted(n.metadata.name for n in (await call(core.list_node)).items)
        for index, node in enumerate(nodes):
            await call(
                core.create_namespaced_pod,
                "default",
                {
                    "metadata": {"name": f"train-{index}"},
                    "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
                },
            )
            world.world.faults.evict_429("default", f"train-{index}", cluster=name)
        close_client(api)
        await ctl(
            env, "node-pool", "scale", name, "gpu", "--count", "1", "--wait", "--timeout", "90"
        )
        await ctl(env, "cluster", "delete", name, "--wait", "--timeout", "90")

    samples = await eventually(
        lambda: asyncio.to_thread(scrape, port),
        until=lambda s: (
            value(s, "colony_drain_duration_seconds_count")
            > value(before, "colony_drain_duration_seconds_count")
        ),
        timeout=10,
        what="the drain observed",
    )
    assert value(samples, "colony_drain_duration_seconds_count", outcome="drained") >= 1
    assert value(samples, "colony_evictions_refused_total") > value(
        before, "colony_evictions_refused_total"
    )
    assert value(samples, "colony_host_claims_total", outcome="claimed") >= 1
    assert value(samples, "colony_host_claims_total", outcome="failed") >= 1
    assert value(samples, "colony_activity_errors_total", activity="claim_hosts") > value(
        before, "colony_activity_errors_total", activity="claim_hosts"
    )
    # The Temporal runtime's metrics (workflow metrics among them) are folded in.
    temporal_names = [n for n in samples if n.startswith("temporal_")]
    assert any(n.startswith("temporal_worker_task_slots") for n in temporal_names), temporal_names
    assert json.dumps(temporal_names)  # names only, for the failure message above


def scrape_or_empty(port: int) -> dict[str, list[Any]]:
    try:
        return scrape(port)
    except OSError:
        return {}


async def test_make_run_serves_the_worker_and_the_watcher_metrics(
    world: World, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`COLONY_METRICS_PORT=<port> make run`: its worker and watcher both live and both serve."""
    task_queue = unique("makerun")
    worker_port = free_port()
    child_env = env_for(world, world.dev_env.client, task_queue) | {
        METRICS_PORT_ENV: str(worker_port),
        "COLONY_SYSTEM_NAMESPACE": unique("colony-system"),
        "COLONY_WATCHER_ID": "make-run",
        "COLONY_SEALING_PRIVATE_KEY_FILE": str(tmp_path / "sealing" / "private.pem"),
        "COLONY_SEALING_PUBLIC_KEY_FILE": str(tmp_path / "sealing" / "public.pem"),
    }
    for variable, setting in child_env.items():
        monkeypatch.setenv(variable, setting)
    monkeypatch.delenv(WATCHER_METRICS_PORT_ENV, raising=False)
    monkeypatch.setattr(devenv, "STATE_DIR", tmp_path)  # the children's logs
    monkeypatch.chdir(ROOT)
    ports = devenv.metrics_ports(os.environ)
    watcher_port = ports.watcher
    assert ports.worker == worker_port
    assert watcher_port is not None
    assert watcher_port > worker_port
    assert os.environ[WATCHER_METRICS_PORT_ENV] == str(watcher_port)
    assert ports.banner() == (
        f"worker http://127.0.0.1:{worker_port}/metrics, "
        f"watcher http://127.0.0.1:{watcher_port}/metrics"
    )
    processes = devenv.Processes()
    try:
        assert devenv.start_worker(processes)
        assert devenv.start_watcher(processes)
        watcher = await eventually(
            lambda: asyncio.to_thread(scrape_or_empty, watcher_port),
            until=lambda s: value(s, "colony_watcher_leader") == 1,
            timeout=30,
            what="the watcher leading, on its own endpoint",
        )
        # Neither died of "Address already in use".
        assert [name for name, child in processes.children if child.poll() is None] == [
            "worker",
            "watcher",
        ]
        env = env_for(world, world.dev_env.client, task_queue)
        name = unique("makerun")
        await ctl(
            env, "cluster", "create", name, "--location-id", "fra1",
            "--node-pool", "name=gpu,count=2,gpuModelId=h100-80gb", "--wait", "--timeout", "90",
        )  # fmt: skip
        await ctl(
            env, "node-pool", "scale", name, "gpu", "--count", "1", "--wait", "--timeout", "90"
        )
        await ctl(env, "cluster", "delete", name, "--wait", "--timeout", "90")
        worker = await asyncio.to_thread(scrape, worker_port)
        watcher = await eventually(
            lambda: asyncio.to_thread(scrape, watcher_port),
            until=lambda s: value(s, "colony_watcher_signals_total", outcome="sent") >= 1,
            timeout=10,
            what="the watcher's signals counted",
        )
    finally:
        # Off the loop: the sim serves on it, and the children talk to it while they stop.
        await asyncio.to_thread(processes.stop_all)
    assert any(n.startswith("temporal_worker_task_slots") for n in worker), sorted(worker)
    assert value(worker, "colony_drain_duration_seconds_count", outcome="drained") >= 1
    assert value(worker, "colony_host_claims_total", outcome="claimed") >= 1
    # The watcher's endpoint is its own process': its metrics, none of the worker's.
    assert value(watcher, "colony_watcher_leader") == 1
    assert not [n for n in watcher if n.startswith("temporal_")]
    assert value(watcher, "colony_host_claims_total") == 0
    for process, child in processes.children:
        log = (tmp_path / f"{process}.log").read_text()[-2000:]
        assert child.returncode == 0, (process, log)
