"""Record the histories `tests/test_replay.py` replays, of every workflow type, from end-to-end runs:
`python -m tests.record_histories` (about two minutes; it writes `tests/histories/*.json`).

As the end-to-end tests run Colony (`tests/test_e2e_workspaces.py`): a Temporal dev server, a
simulated world with instant timing, the real worker with its real activities, and `colonyctl`
driving it as a user would:
- `colony`: a colony of one GPU cluster applied, ready with its GPU inventory, deleted
  (`ColonyWorkflow`; its cluster's workflow is `cluster-of-colony`);
- `cluster`: a GPU cluster attached to a tenant gateway, scaled up and down around a workspace's
  life, deleted (`ClusterWorkflow`);
- `workspace`: a vLLM workspace on it, deployed (its prerequisite installed, its GPUs admitted,
  its route made), suspended, resumed, deleted (`WorkspaceWorkflow`), with the runs it caused:
  `prerequisite` (`PrerequisiteWorkflow`) and `capacity` (`CapacityLedgerWorkflow`, ended by the
  cluster's delete);
- `cluster-missing_template`: a create that fails at once, then its delete;
- `cluster-continue_as_new`: a cluster started with its continue-as-new policy lowered to one
  event, so each run ends after the first thing it handles: create, scale, delete in three runs
  (`-run1` ...), each carrying the state to the next;
- `catalog`: the class catalog's run so far (`CatalogWorkflow` never ends);
- `purge-stuck`, `purge-swept`, `purge-cluster`: purges (`PurgeWorkflow`) of a workspace whose
  input its worker cannot decode, of a running GPU workspace and then of its cluster, both
  terminated by hand first (what they made is swept by its marks).
- `quota`: an organization's quota ledger (`QuotaWorkflow`): an operator's limit, a cluster of the
  organization admitted, grown (admitted by its workflow), refused a second create, deleted (its
  workflow is `cluster-of-organization`).

`python -m tests.record_histories purge` records only the scenarios named and keeps the others'
files. Regenerate them only on purpose: a change to a workflow that makes a committed history fail
to replay would break every workflow of that type already running in production, so the old files are
the test. When a change is deliberately incompatible (Colony is pre-release: it may be), move the
old files to a folder of their own that `tests/test_replay.py` pins as knowingly incompatible
(`histories/pre-kit/`), record new ones, and say so in the commit.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner

from clients.clusters import TemporalClusters
from clients.errors import QuotaExceededError
from clients.temporal import TemporalSession
from infra.config import ColonySettings
from infra.crds import ensure_crds
from infra.ports import free_port
from infra.sealing import PUBLIC_KEY_ENV, SealingSettings, create_key_pair
from models.cluster import ClusterSpec, ClusterStatus, ClusterWorkflowInput
from models.node_pool import NodePoolSpec, NodeSku
from models.operations import (
    ContinueAsNewPolicy,
    DeleteClusterRequest,
    OperationAccepted,
    ScaleNodePoolRequest,
)
from models.quota import quota_workflow_id
from models.workspace_api import CATALOG_WORKFLOW_ID
from starter.cli import app, normalize_argv
from tests.conftest import venv_binary
from tests.helpers import eventually, shipped_classes_listed, unique
from tests.simenv import close_client, colony_env, host_provider, management_api, started_world
from worker import build_worker, ensure_catalog
from workflows.capacity import CAPACITY
from workflows.cluster import CLUSTER
from workflows.colony import COLONY
from workflows.prerequisite import PREREQUISITE
from workflows.purge import PURGE
from workflows.search_attributes import ALL as SEARCH_ATTRIBUTES
from workflows.workspace import WORKSPACE

HISTORIES = Path(__file__).parent / "histories"
LOCATION = "fra1"
GPU_POOL = "name=gpu,count=1,gpuModelId=h100-80gb"
CPU_SKU = "cpu-32c-256g"
DOMAIN = "dos-lab.example"
VLLM = "colony-vllm-1-0-0"
PREREQUISITE_TEMPLATE = "colony-inference-stack-1-0-0"
PATIENCE = 120.0
"""Seconds any one step may take on a loaded machine (the sim's timing is instant)."""


@dataclass
class Stack:
    """The running Colony: `colonyctl` with its environment, and a Temporal client."""

    env: dict[str, str]
    temporal: Client
    task_queue: str

    async def ctl(self, *args: str) -> str:
        """Run `colonyctl ARGS` (in a thread: the sim and the worker share this loop)."""
        result = await asyncio.to_thread(
            CliRunner().invoke, app, normalize_argv(args), env=self.env
        )
        if result.exit_code != 0:
            raise RuntimeError(
                f"colonyctl {' '.join(args)} exited {result.exit_code}: {result.stdout}"
                f"{result.stderr} {result.exception!r}"
            )
        return result.stdout

    async def json(self, *args: str) -> Any:
        return json.loads(await self.ctl(*args, "-o", "json"))

    async def until(self, what: str, check: Callable[[Any], bool], *args: str) -> Any:
        """Poll `colonyctl ARGS -o json` until `check` holds."""
        return await eventually(
            lambda: self.json(*args), until=check, timeout=PATIENCE, interval=0.2, what=what
        )

    async def closed(self, workflow_id: str) -> None:
        """Wait until the workflow (its last run) has ended."""

        async def status() -> str:
            described = await self.temporal.get_workflow_handle(workflow_id).describe()
            return described.status.name if described.status else ""

        await eventually(
            status, until=lambda s: s != "RUNNING", timeout=PATIENCE, what=f"{workflow_id} ended"
        )


@asynccontextmanager
async def running_colony(workdir: Path) -> AsyncIterator[Stack]:
    """A dev server, a world and the real worker, with the shipped classes published."""
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=venv_binary("temporal"),
        port=free_port(),
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_extra_args=[
            "--dynamic-config-value",
            "frontend.enableUpdateWorkflowExecution=true",
        ],
    )
    keys = workdir / "sealing"
    keys.mkdir()
    create_key_pair(keys / "private.pem", keys / "public.pem")
    unsealer = SealingSettings(keys / "public.pem", keys / "private.pem").unsealer()
    task_queue = unique("record")
    try:
        async with started_world(workdir / "sim") as world:
            management = management_api(world)
            await ensure_crds(management)
            async with (
                host_provider(world) as http,
                build_worker(env.client, task_queue, management, http, unsealer) as worker,
                worker,
            ):
                await ensure_catalog(env.client, task_queue)
                stack = Stack(
                    colony_env(
                        world,
                        TEMPORAL_ADDRESS=env.client.service_client.config.target_host,
                        TEMPORAL_NAMESPACE=env.client.namespace,
                        COLONY_TASK_QUEUE=task_queue,
                        **{PUBLIC_KEY_ENV: str(keys / "public.pem")},
                    ),
                    env.client,
                    task_queue,
                )
                await shipped_classes_listed(lambda: stack.json("class", "list"), timeout=PATIENCE)
                yield stack
            close_client(management)
    finally:
        await env.shutdown()


async def colony(stack: Stack, workdir: Path) -> dict[str, str]:
    """A colony of one GPU cluster: applied, ready with its GPUs, deleted."""
    name = unique("rec-fleet")
    manifest = workdir / "colony.yaml"
    entry = {
        "clusterName": "gpu",
        "locationId": LOCATION,
        "nodePools": [{"name": "gpu", "sku": {"gpuModelId": "h100-80gb"}, "count": 1}],
    }
    manifest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "colony.dev/v1",
                "kind": "Colony",
                "metadata": {"name": name},
                "spec": {"colonyClusters": [entry]},
            }
        )
    )
    await stack.ctl("apply", "-f", str(manifest))
    await stack.until(
        "the colony ready with its GPUs",
        lambda s: s["phase"] == "Ready" and any(c["gpus"] for c in s["clusters"]),
        "colony",
        "get",
        name,
    )
    await stack.ctl("colony", "delete", name)
    await stack.closed(COLONY.workflow_id(name, ""))
    return {
        "colony": COLONY.workflow_id(name, ""),
        "cluster-of-colony": CLUSTER.workflow_id(f"{name}--gpu", ""),
    }


async def workspace(stack: Stack) -> dict[str, str]:
    """A GPU cluster with a tenant gateway, a vLLM workspace's whole life on it, scaling around
    it, then the cluster's delete."""
    cluster, name = unique("rec-gpu"), unique("rec-llm")
    await stack.ctl(
        "cluster", "create", cluster, "--location-id", LOCATION, "--node-pool", GPU_POOL,
        "--tenant-gateway-domain", DOMAIN, "--wait", "--timeout", str(int(PATIENCE)),
    )  # fmt: skip
    await stack.ctl(
        "workspace", "deploy", name, "--class", VLLM, "--cluster", cluster,
        "--set", "vllm.model=Qwen/Qwen3-0.6B",
    )  # fmt: skip
    deployed = ["workspace", "get", name]
    await stack.until(
        "the workspace running, its deploy finished",
        lambda w: w["phase"] == "Running" and "currentOperation" not in w,
        *deployed,
    )
    for verb, phase in (("suspend", "Suspended"), ("resume", "Running")):
        await stack.ctl("workspace", verb, name, "--wait", "--timeout", str(int(PATIENCE)))
        await stack.until(
            f"the workspace {phase}",
            lambda w, phase=phase: w["phase"] == phase and "currentOperation" not in w,
            *deployed,
        )
    await stack.ctl(
        "node-pool", "scale", cluster, "gpu", "--count", "2", "--wait", "--timeout", str(int(PATIENCE))
    )  # fmt: skip
    await stack.ctl("workspace", "delete", name, "--wait", "--timeout", str(int(PATIENCE)))
    await stack.ctl(
        "node-pool", "scale", cluster, "gpu", "--count", "1", "--wait", "--timeout", str(int(PATIENCE))
    )  # fmt: skip
    await stack.ctl("cluster", "delete", cluster, "--wait", "--timeout", str(int(PATIENCE)))
    ledger = CAPACITY.workflow_id(cluster)
    prerequisite = PREREQUISITE.workflow_id(cluster, PREREQUISITE_TEMPLATE)
    for workflow_id in (ledger, prerequisite):
        await stack.closed(workflow_id)
    return {
        "cluster": CLUSTER.workflow_id(cluster, ""),
        "workspace": WORKSPACE.workflow_id(name, ""),
        "capacity": ledger,
        "prerequisite": prerequisite,
    }


async def missing_template(stack: Stack) -> dict[str, str]:
    """A create whose ClusterTemplate does not exist fails at once; its delete finishes it."""
    cluster = unique("rec-missing")
    await stack.ctl(
        "cluster", "create", cluster, "--location-id", LOCATION, "--template", "no-such-1-0-0",
        "--node-pool", f"name=cpu,count=1,cpuSku={CPU_SKU}",
    )  # fmt: skip
    await stack.until(
        "the create failed", lambda s: s["phase"] == "failed", "cluster", "get", cluster
    )
    await stack.ctl("cluster", "delete", cluster, "--wait", "--timeout", str(int(PATIENCE)))
    return {"cluster-missing_template": CLUSTER.workflow_id(cluster, "")}


async def continue_as_new(stack: Stack) -> dict[str, str]:
    """A cluster whose every run ends after the first thing it handles: three runs."""
    spec = ClusterSpec(
        name=unique("rec-can"),
        location_id=LOCATION,
        node_pools=[NodePoolSpec(name="cpu", sku=NodeSku(cpu_sku=CPU_SKU), count=1)],
    )
    await stack.temporal.start_workflow(
        CLUSTER.workflow_type,
        ClusterWorkflowInput(spec=spec, continue_as_new=ContinueAsNewPolicy(events=1)),
        id=spec.workflow_id,
        task_queue=stack.task_queue,
    )
    handle = stack.temporal.get_workflow_handle(spec.workflow_id)  # whichever run is current

    async def status() -> ClusterStatus:
        found: ClusterStatus = await handle.query(CLUSTER.status.name, result_type=ClusterStatus)
        return found

    def idle(found: ClusterStatus) -> bool:
        return found.current_operation is None and not found.queued_operations

    await eventually(
        status, until=lambda s: s.phase.value == "ready" and idle(s), timeout=PATIENCE, what="ready"
    )
    scaled: OperationAccepted = await handle.execute_update(
        CLUSTER.scale_node_pool.name,
        ScaleNodePoolRequest(pool="cpu", count=2),
        result_type=CLUSTER.scale_node_pool.output,
    )
    await eventually(
        status,
        until=lambda s: (
            idle(s) and any(op.id == scaled.operation_id for op in s.completed_operations)
        ),
        timeout=PATIENCE,
        what="scaled",
    )
    await handle.execute_update(
        CLUSTER.delete_cluster.name,
        DeleteClusterRequest(),
        result_type=CLUSTER.delete_cluster.output,
    )
    await stack.closed(spec.workflow_id)
    return {"cluster-continue_as_new": spec.workflow_id}


async def quota(stack: Stack) -> dict[str, str]:
    """An organization's ledger: an operator's limit of one cluster, the organization's cluster
    admitted (by the client layer), grown by a scale-up (admitted by its workflow), a second
    create refused, the cluster deleted (it leaves the ledger)."""
    organization = unique("rec-org")
    await stack.ctl("quota", "set", "--organization", organization, "--clusters", "1")
    settings = ColonySettings.from_env(stack.env)
    clusters = TemporalClusters(TemporalSession.of_client(stack.temporal, settings, organization))
    spec = ClusterSpec(
        name="ledgered",
        location_id=LOCATION,
        organization=organization,
        node_pools=[NodePoolSpec(name="cpu", sku=NodeSku(cpu_sku=CPU_SKU), count=1)],
    )
    await clusters.create(spec)

    async def status() -> ClusterStatus:
        return await clusters.get(spec.name)

    def idle(found: ClusterStatus) -> bool:
        return found.current_operation is None and not found.queued_operations

    await eventually(
        status, until=lambda s: s.phase.value == "ready" and idle(s), timeout=PATIENCE, what="ready"
    )
    try:
        await clusters.create(spec.model_copy(update={"name": "refused"}))
    except QuotaExceededError:
        pass
    else:
        raise RuntimeError("a second cluster was admitted past a quota of one")
    scaled = await clusters.send(spec.name, ScaleNodePoolRequest(pool="cpu", count=2))
    await eventually(
        status,
        until=lambda s: (
            idle(s) and any(op.id == scaled.operation_id for op in s.completed_operations)
        ),
        timeout=PATIENCE,
        what="scaled",
    )
    await clusters.delete(spec.name)
    await stack.closed(spec.workflow_id)
    return {"quota": quota_workflow_id(organization), "cluster-of-organization": spec.workflow_id}


async def stuck(stack: Stack, workflow_id: str) -> None:
    """Wait until the workflow's task has failed twice in a row (`models.purge`)."""

    async def attempt() -> int:
        described = await stack.temporal.get_workflow_handle(workflow_id).describe()
        return described.raw_description.pending_workflow_task.attempt

    await eventually(attempt, until=lambda a: a >= 3, timeout=PATIENCE, what=f"{workflow_id} stuck")


async def purge(stack: Stack) -> dict[str, str]:
    """Three purges on a GPU cluster: of a workspace whose input its worker cannot decode (ended,
    nothing made), of a running workspace whose workflow was terminated by hand (its ServiceSet,
    values Secret, namespace and GPU request swept), then of the cluster, terminated by hand too
    (its ClusterDeployment, hosts and ledger swept)."""
    cluster, deep, name = unique("rec-purge"), unique("rec-deep"), unique("rec-nb")
    await stack.ctl(
        "cluster", "create", cluster, "--location-id", LOCATION, "--node-pool", GPU_POOL,
        "--wait", "--timeout", str(int(PATIENCE)),
    )  # fmt: skip
    await stack.ctl(
        "workspace", "deploy", name, "--class", "colony-jupyter-1-0-0", "--cluster", cluster,
        "--gpus", "1", "--set", "notebookPassword=recorded-pw",
    )  # fmt: skip
    await stack.until(
        "the workspace running",
        lambda w: w["phase"] == "Running" and "currentOperation" not in w,
        "workspace", "get", name,
    )  # fmt: skip
    nested: dict[str, Any] = {}
    node = nested
    for _ in range(200):
        node["v"] = {}
        node = node["v"]
    deep_id = WORKSPACE.workflow_id(deep, "")
    await stack.temporal.start_workflow(
        WORKSPACE.workflow_type,
        {
            "spec": {
                "name": deep,
                "class": "colony-jupyter-1-0-0",
                "cluster": cluster,
                "values": nested,
            }
        },
        id=deep_id,
        task_queue=stack.task_queue,
    )
    await stuck(stack, deep_id)
    await stack.ctl("workspace", "purge", deep)
    for entity, target in (("workspace", name), ("cluster", cluster)):
        workflow_id = f"{entity}/{target}"
        await stack.temporal.get_workflow_handle(workflow_id).terminate("recording a sweep")
        await stack.ctl(entity, "purge", target)
    return {
        "purge-stuck": PURGE.workflow_id(deep_id),
        "purge-swept": PURGE.workflow_id(WORKSPACE.workflow_id(name, "")),
        "purge-cluster": PURGE.workflow_id(CLUSTER.workflow_id(cluster, "")),
    }


SCENARIOS = (
    "colony",
    "workspace",
    "missing_template",
    "continue_as_new",
    "purge",
    "quota",
    "catalog",
)
"""What `record` runs (`python -m tests.record_histories purge` runs only the ones named, and
keeps every other history as it is)."""


async def run_histories(client: Client, workflow_id: str) -> list[str]:
    """The JSON history of every run of the workflow, first run first."""
    first = await client.get_workflow_handle(workflow_id).describe()
    run_id: str | None = first.raw_description.workflow_execution_info.first_run_id or None
    histories: list[str] = []
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        histories.append(history.to_json())
        last = history.events[-1]
        run_id = None
        if last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return histories


async def record(only: set[str] | None = None) -> list[Path]:
    """Run the scenarios (`only` those named) and write their histories; recording all of them
    replaces every history, recording some replaces theirs only."""
    wanted = only or set(SCENARIOS)
    unknown = wanted - set(SCENARIOS)
    if unknown:
        raise SystemExit(f"unknown scenarios: {', '.join(sorted(unknown))} (known: {SCENARIOS})")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        async with running_colony(workdir) as stack:
            scenarios: dict[str, Callable[[], Any]] = {
                "colony": lambda: colony(stack, workdir),
                "workspace": lambda: workspace(stack),
                "missing_template": lambda: missing_template(stack),
                "continue_as_new": lambda: continue_as_new(stack),
                "purge": lambda: purge(stack),
                "quota": lambda: quota(stack),
            }
            recorded: dict[str, str] = {}
            for scenario in SCENARIOS:
                if scenario in wanted and scenario in scenarios:
                    recorded.update(await scenarios[scenario]())
            if "catalog" in wanted:
                recorded["catalog"] = CATALOG_WORKFLOW_ID
            histories = {
                name: await run_histories(stack.temporal, workflow_id)
                for name, workflow_id in recorded.items()
            }
    HISTORIES.mkdir(exist_ok=True)
    if wanted == set(SCENARIOS):
        for stale in HISTORIES.glob("*.json"):
            stale.unlink()
    written: list[Path] = []
    for name, runs in histories.items():
        for index, text in enumerate(runs, start=1):
            suffix = f"-run{index}" if len(runs) > 1 else ""
            path = HISTORIES / f"{name}{suffix}.json"
            path.write_text(text + "\n")
            written.append(path)
    return written


async def main() -> int:
    for path in await record(set(sys.argv[1:])):
        print(f"{path.relative_to(Path.cwd())}: {path.stat().st_size // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
