"""End to end, `examples/`: every file there applied or deployed as the README and
`examples/README.md` say, on the Temporal dev server, the sim (instant timing) and the real worker,
so a file that drifts from the product fails here.

The files are used as they are (only their paths made absolute): the cluster spec, the class with
its ServiceTemplate, the workspaces in the exalsius operator's form and in Colony's, the values
files, the multi-document file, both colonies, and the HTTP API's bodies (through the real ASGI app,
with a key of the test's own organization). Everything made is deleted at the end, through the same
commands a user would run. The names are the examples' own, so they are chosen not to meet any
other test's (which all use `tests.helpers.unique`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner, Result

from api.app import create_app
from infra.config import ColonySettings
from infra.keys import KubernetesKeyStore
from infra.settings import ApiSettings
from models.identity import workspace_service_set_name
from starter.cli import app, normalize_argv
from tests.helpers import eventually, shipped_classes_listed, unique
from tests.simenv import NAMESPACE, call, worker_world

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
K0RDENT = ("k0rdent.mirantis.com", "v1beta1")
PASSWORD = "correct-horse-battery"
"""The notebook's secret prompt: given on the command line, as the README says (no file holds it)."""


@dataclass
class Stack:
    env: dict[str, str]
    management: client.ApiClient
    api: httpx.AsyncClient
    used: set[str]
    """The example files the test has applied (relative to `examples/`)."""

    def example(self, name: str) -> str:
        """The absolute path of `examples/<name>`, recorded as used."""
        path = EXAMPLES / name
        assert path.is_file(), f"examples/{name} is missing"
        self.used.add(name)
        return str(path)

    def body(self, name: str) -> bytes:
        """An HTTP request body from `examples/<name>`, as `curl -d @examples/<name>` sends it."""
        return Path(self.example(name)).read_bytes()

    async def ctl(self, *args: str, expect: int = 0) -> Result:
        """`colonyctl ARGS` (in a thread: the sim and the worker share this loop)."""
        result = await asyncio.to_thread(
            CliRunner().invoke, app, normalize_argv(args), env=self.env
        )
        assert result.exit_code == expect, (
            f"colonyctl {' '.join(args)} exited {result.exit_code}, not {expect}\n"
            f"stdout: {result.stdout}\nstderr: {result.stderr}\n{result.exception!r}"
        )
        return result

    async def json(self, *args: str) -> Any:
        return json.loads((await self.ctl(*args, "-o", "json")).stdout)

    async def colony_phase(self, name: str) -> str:
        result = await asyncio.to_thread(
            CliRunner().invoke, app, ["colony", "get", name, "-o", "json"], env=self.env
        )
        if result.exit_code == 3:
            return "gone"
        assert result.exit_code == 0, result.stderr
        phase: str = json.loads(result.stdout)["phase"]
        return phase


@pytest.fixture(scope="module")
async def stack(
    dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    async with worker_world(
        dev_env.client,
        tmp_path_factory.mktemp("sim"),
        tmp_path_factory.mktemp("sealing"),
        unique("e2e-examples"),
    ) as running:
        store = KubernetesKeyStore(running.management)
        _, key = await store.create(
            unique("examples"),
            ["kubernetes:read", "kubernetes:connect", "kubernetes:manage"],
            name="examples",
        )
        temporal = dev_env.client

        async def connect() -> Any:
            return temporal

        api_app = create_app(
            ColonySettings.from_env(running.env),
            connect,
            store,
            api_settings=ApiSettings(rate=1000.0, burst=1000),
            sealing=running.sealing,
        )
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=api_app),
            base_url="http://colony.test",
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        ) as api:
            stack = Stack(running.env, running.management, api, set())
            await shipped_classes_listed(lambda: stack.json("class", "list"))
            yield stack
        await store.close()
    assert not running.world.store.rejected_writes, list(running.world.store.rejected_writes)


def every_example() -> set[str]:
    return {
        str(path.relative_to(EXAMPLES))
        for path in EXAMPLES.rglob("*")
        if path.is_file() and path.name != "README.md"
    }


async def service_set_values(stack: Stack, cluster: str, workspace: str) -> dict[str, Any]:
    """The Helm values Colony gave a workspace's release (its ServiceSet's)."""
    service_set = await call(
        client.CustomObjectsApi(stack.management).get_namespaced_custom_object,
        *K0RDENT, NAMESPACE, "servicesets", workspace_service_set_name("", cluster, workspace),
    )  # fmt: skip
    values: dict[str, Any] = yaml.safe_load(service_set["spec"]["services"][0]["values"])
    return values


async def colony_reaches(stack: Stack, name: str, phase: str) -> None:
    await eventually(
        lambda: stack.colony_phase(name),
        until=lambda now: now == phase,
        timeout=90,
        interval=0.2,
        what=f"colony {name} {phase}",
    )


async def test_every_example_is_applied_as_the_readme_says(stack: Stack) -> None:
    # The CLI walkthrough's cluster, from its spec.
    await stack.ctl("cluster", "create", "-f", stack.example("cluster.yaml"), "--wait",
                    "--timeout", "90")  # fmt: skip
    training = await stack.json("cluster", "get", "training")
    assert (training["phase"], training["locationId"]) == ("ready", "fra1")
    (pool,) = training["nodePools"]
    assert (pool["name"], pool["readyCount"], pool["labels"]) == ("gpu", 2, {"team": "ml"})

    # A class with its ServiceTemplate (exalsius form), then a workspace of it (exalsius form).
    published = await stack.ctl("class", "publish", "-f", stack.example("workspace-class.yaml"))
    assert "workspaceclass/team-devbox-1-0-0 published" in published.stdout
    applied = await stack.ctl(
        "apply", "-f", stack.example("exalsius/workspace-deployment.yaml"), "--wait",
        "--timeout", "60",
    )  # fmt: skip
    assert "workspace team-box running" in applied.stdout
    team_box = await stack.json("workspace", "get", "team-box")
    assert team_box["resolvedResources"]["perReplica"]["gpuCount"] == 2
    assert (await service_set_values(stack, "training", "team-box"))["shell"] == "zsh"

    # A workspace in Colony's form: an LLM server (its inference stack installed first).
    applied = await stack.ctl("apply", "-f", stack.example("workspace.yaml"), "--wait",
                              "--timeout", "60")  # fmt: skip
    assert "workspace summarizer running" in applied.stdout

    # The values files, with the deploy commands the README shows.
    await stack.ctl(
        "workspace", "deploy", "nb", "--class", "colony-jupyter-1-0-0", "--cluster", "training",
        "--gpus", "1", "--gpu-model", "h100-80gb", "-f", stack.example("values/notebook.yaml"),
        "--set", f"notebookPassword={PASSWORD}", "--wait", "--timeout", "60",
    )  # fmt: skip
    assert (await service_set_values(stack, "training", "nb"))["jupyter"]["interface"] == (
        "notebook"
    )
    await stack.ctl(
        "workspace", "deploy", "llm", "--class", "colony-vllm-1-0-0", "--cluster", "training",
        "-f", stack.example("values/vllm.yaml"), "--set", "vllm.maxModelLen=16384",
        "--wait", "--timeout", "60",
    )  # fmt: skip
    vllm = (await service_set_values(stack, "training", "llm"))["vllm"]
    # The file's values, then --set over them (the file says 8192), as Helm orders them.
    assert (vllm["model"], vllm["dtype"], vllm["maxModelLen"]) == (
        "Qwen/Qwen3-1.7B",
        "bfloat16",
        16384,
    )
    listed = await stack.json("workspace", "list", "--cluster", "training")
    assert sorted((w["name"], w["phase"]) for w in listed) == [
        ("llm", "Running"), ("nb", "Running"), ("summarizer", "Running"), ("team-box", "Running"),
    ]  # fmt: skip

    # Several documents in one file: a cluster and a dev box on it.
    applied = await stack.ctl("apply", "-f", stack.example("apply.yaml"), "--wait",
                              "--timeout", "90")  # fmt: skip
    assert "workspace scratch running" in applied.stdout
    assert (await stack.json("cluster", "get", "sandbox"))["phase"] == "ready"

    # Both colonies, in Colony's form and in the exalsius operator's.
    await stack.ctl("colony", "apply", "-f", stack.example("colony.yaml"))
    await stack.ctl("colony", "apply", "-f", stack.example("exalsius/colony.yaml"))
    await colony_reaches(stack, "research", "Ready")
    await colony_reaches(stack, "edge", "Ready")
    research = await stack.json("colony", "get", "research")
    assert sorted(c["cluster"] for c in research["clusters"]) == [
        "research--north", "research--west",
    ]  # fmt: skip

    # The HTTP API's bodies, as the README's curl sends them.
    created = await stack.api.post(
        "/v1/kubernetes/clusters",
        content=stack.body("api/cluster.json"),
        headers={"Content-Type": "application/json"},
    )
    assert created.status_code == 202, created.text
    assert created.json()["id"] == "inference"
    await eventually(
        lambda: stack.api.get("/v1/kubernetes/clusters/inference"),
        until=lambda got: got.status_code == 200 and got.json()["status"] == "ready",
        timeout=60,
        interval=0.2,
        what="cluster inference ready",
    )
    deployed = await stack.api.post(
        "/v1/workspaces",
        content=stack.body("api/workspace.json"),
        headers={"Content-Type": "application/json"},
    )
    assert deployed.status_code == 202, deployed.text
    chat = await eventually(
        lambda: stack.api.get("/v1/workspaces/chat"),
        until=lambda got: (
            got.status_code == 200
            and got.json()["phase"] == "Running"
            and "currentOperation" not in got.json()
        ),
        timeout=60,
        interval=0.2,
        what="workspace chat running",
    )
    assert [a["name"] for a in chat.json()["access"]] == ["http"]

    assert stack.used == every_example(), "every file under examples/ is applied by this test"

    # Everything goes, as a user would remove it: clusters take their workspaces first.
    await stack.ctl("cluster", "delete", "training", "--wait", "--timeout", "120")
    await stack.ctl("cluster", "delete", "sandbox", "--wait", "--timeout", "120")
    await stack.ctl("colony", "delete", "research")
    await stack.ctl("colony", "delete", "edge")
    assert (await stack.api.delete("/v1/kubernetes/clusters/inference")).status_code == 202
    await colony_reaches(stack, "research", "gone")
    await colony_reaches(stack, "edge", "gone")
    await eventually(
        lambda: stack.api.get("/v1/kubernetes/clusters/inference"),
        until=lambda got: got.status_code == 404,
        timeout=90,
        interval=0.2,
        what="cluster inference deleted",
    )
    await stack.ctl("workspace", "get", "nb", expect=3)
