"""`colonyctl` in remote mode, as a user runs it (console-script processes): `apikey create` on the
operator's side, `auth login`, then create, get, scale, list and delete a cluster through the HTTP
API, kubectl through the exec plugin (token from the API, then from the cache), the same exit codes
and lines as direct mode, and `auth logout` / `apikey revoke`; classes listed and published and a
workspace deployed (its secret sent in plaintext to the API, which seals it: the user has no key
file), suspended, resumed and deleted through the API.

The API is the real app served by uvicorn in the test's loop on a loopback port (beside the sim and
the worker); the remote `colonyctl` processes get no Temporal, management cluster or host
provider: only the stored login.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
import yaml

from infra.ports import free_port
from sim.hostprovider.inventory import Sku
from tests.api.conftest import ALL_PERMISSIONS, CPU_SKU, GPU, JUPYTER, ApiStack
from tests.conftest import venv_binary
from tests.helpers import eventually, unique

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

COLONYCTL = str(Path(sys.executable).parent / "colonyctl")


@dataclass
class Done:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


async def run(*argv: str, env: dict[str, str], stdin: str | None = None) -> Done:
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(
        process.communicate(stdin.encode() if stdin is not None else None), timeout=180
    )
    assert process.returncode is not None
    return Done(process.returncode, out.decode(), err.decode())


@pytest.fixture(scope="module")
async def api_url(api_stack: ApiStack) -> AsyncIterator[str]:
    """The API served over HTTP on loopback, in this loop."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            api_stack.app(),
            host="127.0.0.1",
            port=port,
            access_log=False,
            log_config=None,
            lifespan="off",
        )
    )
    serving = asyncio.create_task(server.serve())

    async def started() -> bool:
        return server.started

    await eventually(started, timeout=15, what="uvicorn started")
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    await serving


@dataclass
class User:
    """A person with nothing but `colonyctl` and a key: no Temporal, no kubeconfig, no provider."""

    env: dict[str, str]
    config: Path
    cache: Path

    async def ctl(self, *args: str, expect: int | None = 0, stdin: str | None = None) -> Done:
        done = await run(COLONYCTL, *args, env=self.env, stdin=stdin)
        if expect is not None:
            assert done.code == expect, f"colonyctl {' '.join(args)}: {done.code}\n{done.stderr}"
        return done


def user(tmp_path: Path) -> User:
    config, cache = tmp_path / "config", tmp_path / "cache"
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("COLONY_", "TEMPORAL_"))
    }
    env.update(
        HOME=str(tmp_path),
        COLONY_CONFIG_DIR=str(config),
        COLONY_CACHE_DIR=str(cache),
        # Nothing to fall back on: whatever works, works through the API.
        TEMPORAL_ADDRESS="127.0.0.1:9",
        COLONY_MANAGEMENT_KUBECONFIG=str(tmp_path / "none.kubeconfig"),
        COLONY_HOST_PROVIDER_CONFIG=str(tmp_path / "none.json"),
    )
    return User(env, config, cache)


async def operator(api_stack: ApiStack, *args: str, expect: int = 0) -> Done:
    """`colonyctl` on the operator's side (the management cluster, Temporal)."""
    done = await run(COLONYCTL, *args, env={**os.environ, **api_stack.env})
    assert done.code == expect, f"colonyctl {' '.join(args)}: {done.code}\n{done.stderr}"
    return done


async def test_a_user_with_a_key_runs_a_cluster_through_the_api(
    api_stack: ApiStack, api_url: str, tmp_path: Path
) -> None:
    organization = unique("remote")
    created = (
        await operator(
            api_stack, "apikey", "create", "--organization", organization,
            "--permission", "read", "--permission", "connect", "--permission", "manage",
            "--name", "remote test", "-o", "json",
        )
    ).json()  # fmt: skip
    key = created["key"]
    assert created["organization"] == organization
    me = user(tmp_path)
    login = await me.ctl("auth", "login", "--url", api_url, "--api-key", "-", stdin=key + "\n")
    assert f"of organization {organization}" in login.stdout
    assert key not in login.stdout + login.stderr
    stored = me.config / "login"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert organization in (await me.ctl("auth", "status")).stdout

    name = unique("rc")
    await me.ctl(
        "cluster", "create", name, "--location-id", "fra1",
        "--node-pool", f"name=gpu,count=1,gpuModelId={GPU}", "--wait", "--timeout", "90",
    )  # fmt: skip
    status = (await me.ctl("cluster", "get", name, "-o", "json")).json()
    assert (status["phase"], status["organization"]) == ("ready", organization)
    scaled = await me.ctl("node-pool", "scale", name, "gpu", "--count", "2", "--wait")
    assert "succeeded" in scaled.stdout
    assert f"workflow cluster/{organization}/{name}: http" in scaled.stderr
    listed = (await me.ctl("cluster", "list", "-o", "json")).json()
    assert [c["name"] for c in listed] == [name]
    operations = (await me.ctl("operation", "list", name, "-o", "json")).json()
    assert [op["request"]["kind"] for op in operations][:2] == ["create_cluster", "scale_node_pool"]
    nodes = await me.ctl("node", "list", name)
    assert nodes.stdout.count("joined") == 2
    locations = (await me.ctl("catalog", "location", "list", "-o", "json")).json()
    assert "fra1" in [loc["id"] for loc in locations]

    # The same refusals, exit codes and lines as in direct mode.
    missing = await me.ctl("cluster", "get", "nope", expect=3)
    assert missing.stderr == "error: cluster: cluster 'nope' not found\n"
    huge = await me.ctl(
        "node-pool", "create", name, "--name", "huge", "--count", "13", "--gpu-model-id", GPU,
        expect=2,
    )  # fmt: skip
    assert huge.stderr == (
        f"error: count: 15 hosts of {GPU} asked (13 by this pool, 2 by the cluster's other pools "
        "of it), location fra1 has 8 in all; ask for at most 6\n"
    )
    # The API advises its own field; colonyctl, remote as local, names its flag.
    world = api_stack.world
    hold = unique("hold")
    free = len(world.inventory.hosts(location="fra1", gpu_model_id=GPU, state="free"))
    if free:
        world.inventory.claim(hold, "fra1", Sku(gpu_model_id=GPU), free, "someone")
    try:
        short = await me.ctl(
            "node-pool", "create", name, "--name", "more", "--count", "1", "--gpu-model-id", GPU,
            expect=2,
        )  # fmt: skip
    finally:
        if free:
            world.inventory.release_claim(hold)
    assert short.stderr == (
        f"error: count: 1 more host(s) of {GPU} needed in fra1, 0 free now (of 8); "
        "add --wait-for-capacity to queue and wait for them\n"
    )
    taken = await me.ctl("cluster", "create", name, "--location-id", "fra1", expect=2)
    assert "already exists" in taken.stderr

    # kubectl through the exec plugin: a token from the API once, then from the cache.
    kubeconfig = tmp_path / "kubeconfig"
    await me.ctl("kubeconfig", name, "--output", str(kubeconfig))
    assert "token:" not in kubeconfig.read_text()
    kubectl = (
        venv_binary("kubectl"),
        "--kubeconfig",
        str(kubeconfig),
        "get",
        "nodes",
        "-o",
        "name",
    )
    tokens = []
    for _ in range(2):
        done = await run(*kubectl, env=me.env)
        assert done.code == 0, done.stderr
        assert done.stdout.count("node/") == 2
        (cached,) = (me.cache / "tokens").iterdir()
        token = re.search(r"^token=(.*)$", cached.read_text(), re.MULTILINE)
        assert token is not None
        tokens.append(token.group(1))
    assert len(set(tokens)) == 1, "one token from the API, then the cache"
    assert f"api:{api_url}:{key.split('_')[1]}" in cached.read_text()

    await me.ctl("cluster", "delete", name, "--wait", "--timeout", "90")
    await me.ctl("cluster", "get", name, expect=3)
    assert (await me.ctl("auth", "logout")).stdout == "logged out\n"
    assert not stored.exists()


async def test_keys_are_listed_and_revoked_by_the_operator(
    api_stack: ApiStack, api_url: str, tmp_path: Path
) -> None:
    organization = unique("ops")
    created = (
        await operator(
            api_stack, "apikey", "create", "--organization", organization,
            "--permission", "clusters:read", "--expires-in", "30d", "-o", "json",
        )
    ).json()  # fmt: skip
    key_id = created["id"]
    assert created["expiresAt"]
    listed = (
        await operator(api_stack, "apikey", "list", "--organization", organization, "-o", "json")
    ).json()
    assert [(k["id"], k["permissions"]) for k in listed] == [(key_id, ["clusters:read"])]
    assert "key" not in listed[0]
    table = await operator(api_stack, "apikey", "list", "--organization", organization)
    assert key_id in table.stdout
    assert created["key"] not in table.stdout

    reader = user(tmp_path)
    await reader.ctl("auth", "login", "--url", api_url, "--api-key", created["key"])
    refused = await reader.ctl("cluster", "create", unique("no"), "--location-id", "fra1", expect=2)
    assert refused.stderr == (
        f"error: API key {key_id} lacks the permission Kubernetes: Manage (kubernetes:manage)\n"
    )

    await operator(api_stack, "apikey", "revoke", key_id)
    await operator(api_stack, "apikey", "revoke", key_id, expect=3)

    # Revoked in another process: refused once this API's trust in the key (5 s) runs out.
    async def listing() -> Done:
        return await reader.ctl("cluster", "list", expect=None)

    gone = await eventually(listing, until=lambda done: done.code == 2, timeout=15, interval=0.5)
    assert gone.stderr == "error: unknown API key (never issued, or revoked)\n"
    again = await reader.ctl(
        "auth", "login", "--url", api_url, "--api-key", created["key"], expect=2
    )
    assert "unknown API key" in again.stderr
    unreachable = await reader.ctl(
        "auth", "login", "--url", "http://127.0.0.1:9", "--api-key", created["key"], expect=1
    )
    assert unreachable.stderr.startswith("error: cannot reach the Colony API at http://127.0.0.1:9")


SHIPPED_JUPYTER = Path(__file__).resolve().parents[2] / "catalog" / "colony-jupyter.yaml"


def class_file(path: Path, name: str, display_name: str = "") -> Path:
    """The shipped Jupyter class file (its ServiceTemplate, then its WorkspaceClass) with the
    class renamed, and its display name changed when given."""
    head = "kind: WorkspaceClass\nmetadata:\n  name: "
    text = SHIPPED_JUPYTER.read_text().replace(head + JUPYTER, head + name)
    if display_name:
        text = text.replace("displayName: ", f"displayName: {display_name} ", 1)
    path.write_text(text)
    documents = list(yaml.safe_load_all(text))
    assert [(d["kind"], d["metadata"]["name"]) for d in documents] == [
        ("ServiceTemplate", JUPYTER),
        ("WorkspaceClass", name),
    ]
    return path


async def test_a_user_deploys_and_deletes_a_workspace_through_the_api(
    catalog: ApiStack, api_url: str, tmp_path: Path
) -> None:
    organization = unique("remote-ws")
    # Catalog Publish: the class below comes with its ServiceTemplate, which only the shared
    # catalog (an operator's) publishes.
    key = await catalog.key(organization, *ALL_PERMISSIONS, "catalog:publish")
    me = user(tmp_path)
    await me.ctl("auth", "login", "--url", api_url, "--api-key", key)
    cluster, name = unique("rwc"), unique("rnb")
    await me.ctl(
        "cluster", "create", cluster, "--location-id", "fra1",
        "--node-pool", f"name=cpu,count=1,cpuSku={CPU_SKU}", "--wait", "--timeout", "90",
    )  # fmt: skip

    # Classes: listed, read, and published from a file (with its ServiceTemplate) once.
    classes = (await me.ctl("class", "list", "-o", "json")).json()
    assert JUPYTER in [c["name"] for c in classes]
    assert "notebookPassword" in (await me.ctl("class", "get", JUPYTER)).stdout
    new_class = unique("remote-nb")
    file = class_file(tmp_path / "class.yaml", new_class)
    published = await me.ctl("class", "publish", "-f", str(file))
    assert published.stdout == f"workspaceclass/{new_class} published\n"
    again = await me.ctl("class", "publish", "-f", str(file))
    assert again.stdout == f"workspaceclass/{new_class} unchanged (already published)\n"
    class_file(file, new_class, display_name="Changed")
    changed = await me.ctl("class", "publish", "-f", str(file), expect=2)
    assert changed.stderr.startswith(
        f"error: name: workspace class '{new_class}' already exists with a different definition"
    )

    # The same refusals and lines as in direct mode.
    deploy = ("workspace", "deploy", name, "--class", JUPYTER, "--cluster", cluster)
    missing = await me.ctl(*deploy, expect=2)
    assert missing.stderr == (
        f"error: notebookPassword: required by class '{JUPYTER}' (prompt 'Notebook password'): "
        "give --set notebookPassword=..., or run on a terminal to be asked\n"
    )
    no_class = await me.ctl(
        "workspace", "deploy", name, "--class", "colony-nothing-1-0-0", "--cluster", cluster,
        expect=3,
    )  # fmt: skip
    assert no_class.stderr.startswith(
        "error: class: workspace class 'colony-nothing-1-0-0' not found (published: "
    )
    assert JUPYTER in no_class.stderr
    elsewhere = await me.ctl(
        "workspace", "deploy", name, "--class", JUPYTER, "--cluster", unique("nowhere"),
        "--set", "notebookPassword=x", expect=3,
    )  # fmt: skip
    assert elsewhere.stderr.startswith("error: cluster: cluster 'nowhere-")

    # No key file on this machine: the password goes to the API in plaintext, sealed there.
    password = "pw-" + unique("remote")
    deployed = await me.ctl(
        *deploy, "--set", f"notebookPassword={password}", "--wait", "--timeout", "90"
    )
    assert f"workspace {name} running" in deployed.stdout
    assert f"workflow workspace/{organization}/{name}: http" in deployed.stderr
    status = (await me.ctl("workspace", "get", name, "-o", "json")).json()
    assert (status["phase"], status["cluster"], status["class"]) == ("Running", cluster, JUPYTER)
    assert password not in json.dumps(status)

    async def listed() -> list[str]:
        done = await me.ctl("workspace", "list", "--cluster", cluster, "-o", "json")
        return [w["name"] for w in done.json()]

    await eventually(listed, until=lambda names: names == [name], timeout=15, what="listed")
    # In natural order, as in direct mode (the API's own list is): -9 before -10.
    extra = [f"{name}-10", f"{name}-9"]
    for other in extra:
        await me.ctl(
            "workspace", "deploy", other, "--class", JUPYTER, "--cluster", cluster,
            "--set", "notebookPassword=x",
        )  # fmt: skip
    await eventually(
        listed, until=lambda names: names == [name, *reversed(extra)], timeout=15, what="ordered"
    )
    wide = (await me.ctl("workspace", "list", "--cluster", cluster, "-o", "wide")).stdout
    assert wide.splitlines()[0].split() == [
        "ORGANIZATION", "NAME", "CLUSTER", "CLASS", "PHASE", "GPUS", "POSITION", "AGE", "STARTED",
    ]  # fmt: skip
    assert [line.split()[1] for line in wide.splitlines()[1:]] == [name, *reversed(extra)]
    # The key's organization, as the operator's list in direct mode names it (not `-`).
    assert [line.split()[0] for line in wide.splitlines()[1:]] == [organization] * 3
    table = (await me.ctl("workspace", "list", "--cluster", cluster)).stdout
    assert {line.split()[0] for line in table.splitlines()[1:]} == {organization}
    records = (await me.ctl("workspace", "list", "--cluster", cluster, "-o", "json")).json()
    assert {w["organization"] for w in records} == {organization}
    for other in extra:
        await me.ctl("workspace", "delete", other, "--wait", "--timeout", "90")
    suspended = await me.ctl("workspace", "suspend", name, "--wait", "--timeout", "90")
    assert f"workspace {name} suspended" in suspended.stdout
    twice = await me.ctl("workspace", "suspend", name, expect=2)
    assert twice.stderr == f"error: workspace: workspace '{name}' is already suspended\n"
    resumed = await me.ctl("workspace", "resume", name, "--wait", "--timeout", "90")
    assert f"workspace {name} running" in resumed.stdout
    deleted = await me.ctl("workspace", "delete", name, "--wait", "--timeout", "90")
    assert f"workspace {name} deleted" in deleted.stdout
    gone = await me.ctl("workspace", "get", name, expect=3)
    assert gone.stderr == f"error: workspace: workspace '{name}' not found\n"
    await me.ctl("cluster", "delete", cluster, "--wait", "--timeout", "90")


async def test_a_user_applies_and_deletes_a_colony_through_the_api(
    api_stack: ApiStack, api_url: str, tmp_path: Path
) -> None:
    organization = unique("remote-col")
    key = await api_stack.key(organization)
    me = user(tmp_path)
    await me.ctl("auth", "login", "--url", api_url, "--api-key", key)
    name = unique("rlab")
    manifest = tmp_path / "colony.yaml"
    manifest.write_text(
        "apiVersion: infra.exalsius.ai/v1\nkind: Colony\n"
        f"metadata: {{name: {name}}}\n"
        "spec:\n  colonyClusters: [{clusterName: west, clusterDeploymentSpec: {template: x}}]\n"
    )
    # A raw ClusterDeployment spec is the operator's: refused by the API, as it would say it.
    raw = await me.ctl("colony", "apply", "-f", str(manifest), expect=2)
    assert raw.stderr.startswith(
        "error: colonyClusters[0].clusterDeploymentSpec: cannot be chosen through the API"
    )
    manifest.write_text(
        "apiVersion: colony.dev/v1\nkind: Colony\n"
        f"metadata: {{name: {name}}}\n"
        "spec:\n  colonyClusters:\n"
        "    - clusterName: west\n      locationId: fra1\n"
        f"      nodePools: [{{name: cpu, sku: {{cpuSku: {CPU_SKU}}}, count: 1}}]\n"
    )
    applied = await me.ctl("colony", "apply", "-f", str(manifest))
    assert applied.stdout == f"colony/{name} created\n"
    # The workflow id is the API's answer, not read out of a link.
    assert f"workflow colony/{organization}/{name}: http" in applied.stderr

    async def phase() -> str:
        got = await me.ctl("colony", "get", name, "-o", "json")
        return str(got.json()["phase"])

    await eventually(phase, until=lambda p: p == "Ready", timeout=120, what="colony ready")
    table = await me.ctl("colony", "get", name)
    assert f"colony {name}: Ready, 1/1 clusters ready" in table.stdout
    assert f"{name}--west" in table.stdout
    listed = (await me.ctl("colony", "list", "-o", "json")).json()
    assert listed == [
        {
            "name": name,
            "organization": organization,
            "phase": "Ready",
            "workflowId": f"colony/{organization}/{name}",
        }
    ]
    again = await me.ctl("apply", "-f", str(manifest))
    assert again.stdout == f"colony/{name} configured\n"
    missing = await me.ctl("colony", "get", "nosuch", expect=3)
    assert missing.stderr == "error: colony: colony 'nosuch' not found\n"

    deleted = await me.ctl("colony", "delete", name)
    assert deleted.stdout == f"colony/{name} deleting\n"

    async def code() -> int:
        return (await me.ctl("colony", "get", name, expect=None)).code

    await eventually(code, until=lambda c: c == 3, timeout=120, what="colony deleted")
    await me.ctl("cluster", "get", f"{name}--west", expect=3)
