"""The demo `make run` plays: a colony and a GPU cluster's whole life, through `colonyctl` as a
user would.

Picks a location and a GPU model from the host provider's catalog and applies a colony of two
clusters (in two locations when the stock allows), shown with its GPU inventory. Then creates a
cluster with a GPU pool of 2 (attached to a tenant gateway), scales it to 3, runs a small GPU
workload in it (kubectl through the credential-free kubeconfig `colonyctl kubeconfig` writes),
scales it to 1 (the drain evicts the workload's pods on the removed nodes), removes the workload,
deploys a Jupyter notebook with one GPU from Colony's class catalog and opens it, at the URL Colony
prints (through the tenant gateway: by name, at the Gateway's address, trusting the simulator's CA)
and through `kubectl port-forward` to its Service, printing what answered; deploys a dev box that asks for every GPU of the node, which waits for the notebook's, deletes the
notebook (the dev box is admitted and runs), and tears everything down: the cluster (its workspaces
first) and the colony (its clusters). Every step prints its Web UI link (colonyctl does) and how
long it took; the table at the end sums them up.

Run it with the dev environment up (`make run` does it all): `python -m starter.dev.scenario`.
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import shutil
import ssl
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from rich.console import Console
from rich.table import Table

console = Console(highlight=False)

WORKLOAD_REPLICAS = 3
GPUS_PER_POD = 4
"""Half an 8-GPU host per pod, with a CPU request so the least-allocated scheduler spreads them."""
STATE_DIR = Path(".colony")
"""Where the stack that the demo plays on keeps its files: `make run`'s; `make stack` gives
`--state-dir .colony/stack`."""
KUBECONFIG = STATE_DIR / "demo.kubeconfig"
GATEWAY_DOMAIN = "demo.colony.example"
"""The simulated tenant gateway's domain: workspaces get https://<name>.<domain>:<port>, served by
the simulator on 127.0.0.1 (no DNS: the demo connects to the Gateway's address by name, as
`curl --resolve` does)."""
SIM_WORLD = STATE_DIR / "sim" / "world.json"
"""Where the simulator says where its CA is (the CA that signs the gateway's certificate)."""
OPEN_TIMEOUT_SECONDS = 30.0
NOTEBOOK_CLASS = "colony-jupyter-1-0-0"
DEVBOX_CLASS = "colony-devbox-1-0-0"
DEMO_SSH_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl demo@colony"
)
STEP_DEADLINE_SECONDS = 300.0


def _colonyctl() -> list[str]:
    beside = Path(sys.executable).parent / "colonyctl"
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "starter.cli"]


def _kubectl() -> str:
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    if not found:
        raise SystemExit("scenario: kubectl not found (make installs it into .venv/bin)")
    return found


class StepFailed(Exception):
    pass


def ctl(*args: str, parse: bool = False) -> Any:
    """Run colonyctl; its stderr (links, live progress) goes to the terminal, stdout is returned."""
    command = [*_colonyctl(), *args]
    console.print(f"[dim]$ colonyctl {' '.join(args)}[/dim]")
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise StepFailed(f"colonyctl {' '.join(args)} exited {done.returncode}")
    if parse:
        return json.loads(done.stdout)
    if done.stdout.strip():
        console.print(done.stdout.rstrip(), markup=False)
    return done.stdout


def kubectl(*args: str, stdin: str | None = None) -> str:
    command = [_kubectl(), "--kubeconfig", str(KUBECONFIG), *args]
    console.print(f"[dim]$ kubectl {' '.join(args)}[/dim]")
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise StepFailed(f"kubectl {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def workload_manifest(gpu_model: str) -> str:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "trainer", "namespace": "default"},
        "spec": {
            "replicas": WORKLOAD_REPLICAS,
            "selector": {"matchLabels": {"app": "trainer"}},
            "template": {
                "metadata": {"labels": {"app": "trainer"}},
                "spec": {
                    "nodeSelector": {"colony.dev/sku": gpu_model},
                    "containers": [
                        {
                            "name": "cuda",
                            "image": "nvcr.io/nvidia/cuda:12.8.1-base-ubuntu24.04",
                            "command": ["sleep", "infinity"],
                            "resources": {
                                "requests": {"cpu": "16", "memory": "64Gi"},
                                "limits": {"nvidia.com/gpu": str(GPUS_PER_POD)},
                            },
                        }
                    ],
                },
            },
        },
    }
    return json.dumps(deployment)


@dataclass
class Scenario:
    name: str = field(default_factory=lambda: f"demo-{uuid.uuid4().hex[:6]}")
    timings: list[tuple[str, float, str]] = field(default_factory=list)

    def step(self, title: str) -> _Step:
        return _Step(self, title)


class _Step:
    def __init__(self, scenario: Scenario, title: str) -> None:
        self.scenario = scenario
        self.title = title
        self.note = ""

    def __enter__(self) -> _Step:
        console.rule(f"[bold]{self.title}")
        self.started = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        elapsed = time.monotonic() - self.started
        if exc[0] is None:
            self.scenario.timings.append((self.title, elapsed, self.note))
            console.print(f"[green]done[/green] in {elapsed:.1f}s {self.note}")


def poll(what: str, read: Any, done: Any, deadline: float = STEP_DEADLINE_SECONDS) -> Any:
    """`read()` every half second until `done(value)`; StepFailed after `deadline` seconds."""
    until = time.monotonic() + deadline
    while True:
        value = read()
        if done(value):
            return value
        if time.monotonic() > until:
            raise StepFailed(f"{what}: not within {deadline:.0f}s")
        time.sleep(0.5)


def quiet_ctl(*args: str) -> tuple[int, str]:
    """colonyctl without failing the step: its exit code and stdout (for "is it gone yet")."""
    done = subprocess.run([*_colonyctl(), *args], capture_output=True, text=True, check=False)
    return done.returncode, done.stdout


def colony_manifest(name: str, gpu: str, locations: list[str]) -> str:
    """Colony's own form of a colony: two clusters with one GPU node each."""
    clusters = [
        {
            "clusterName": cluster,
            "locationId": location,
            "nodePools": [{"name": "gpu", "sku": {"gpuModelId": gpu}, "count": 1}],
        }
        for cluster, location in zip(("east", "west"), locations, strict=True)
    ]
    return json.dumps(
        {
            "apiVersion": "colony.dev/v1",
            "kind": "Colony",
            "metadata": {"name": name},
            "spec": {"colonyClusters": clusters},
        }
    )


def locations_with(locations: list[dict[str, Any]], gpu: str, first: str) -> list[str]:
    """Two locations stocking `gpu` with a free host, `first` first; `first` twice if no other."""
    others = [
        loc["id"]
        for loc in locations
        if loc["id"] != first
        and any(s.get("id") == gpu and int(s.get("free", 0)) > 0 for s in loc.get("skus", []))
    ]
    return [first, others[0] if others else first]


def _title(page: str) -> str:
    found = re.search(r"<title>(.*?)</title>", page, re.S)
    return found.group(1).strip() if found else page.strip()[:80]


def sim_ca() -> Path | None:
    """The simulator's CA certificate, when `make run`'s simulator wrote where it is."""
    try:
        ca = Path(json.loads(SIM_WORLD.read_text())["ca"])
    except (OSError, ValueError, KeyError):
        return None
    return ca if ca.exists() else None


def open_through_gateway(url: str, address: str, ca: Path | None) -> str:
    """GET `url` from the gateway at `address` as if its name resolved there (SNI and Host are
    the URL's; the certificate is checked against `ca`), following a same-site redirect; one line
    saying what answered."""
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 443
    trust = ssl.create_default_context(cafile=str(ca)) if ca else ssl.create_default_context()
    path = parts.path or "/"
    with httpx.Client(verify=trust, timeout=OPEN_TIMEOUT_SECONDS) as http:
        for _ in range(3):
            response = http.get(
                f"{parts.scheme}://{address}:{port}{path}",
                headers={"Host": parts.netloc},
                extensions={"sni_hostname": host},
            )
            location = response.headers.get("Location", "")
            if not (response.is_redirect and location.startswith("/")):
                break
            path = location
    return (
        f"{response.status_code} {_title(response.text)} (at {parts.scheme}://{parts.netloc}{path})"
    )


def open_through_port_forward(namespace: str, service: str, port: int, path: str) -> str:
    """`kubectl port-forward` to the Service on a free local port, GET `path`; one line."""
    command = [_kubectl(), "--kubeconfig", str(KUBECONFIG), "port-forward", "-n", namespace]
    console.print(f"[dim]$ kubectl port-forward -n {namespace} svc/{service} :{port}[/dim]")
    forward = subprocess.Popen(
        [*command, f"svc/{service}", f":{port}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = forward.stdout.readline() if forward.stdout is not None else ""
        local = re.search(r"127\.0\.0\.1:(\d+) ->", line)
        if local is None:
            raise StepFailed(f"kubectl port-forward did not start: {line.strip()}")
        answer = httpx.get(f"http://127.0.0.1:{local.group(1)}{path}", timeout=OPEN_TIMEOUT_SECONDS)
        return f"{answer.status_code} {answer.text.strip()[:80]} (at http://127.0.0.1:{local.group(1)}{path})"  # fmt: skip
    finally:
        forward.terminate()
        forward.wait(timeout=OPEN_TIMEOUT_SECONDS)


def pods_evicted(operation: dict[str, Any]) -> int:
    return sum(int(node.get("podsEvicted", 0)) for node in operation["progress"]["nodes"])


def open_notebook(notebook: str, url: str) -> None:
    """Open the notebook at the URL Colony printed and through a port-forward; print both."""
    address = kubectl(
        "get", "gateway", "-n", "colony-gateway", "tenant",
        "-o", "jsonpath={.status.addresses[0].value}",
    ).strip()  # fmt: skip
    ca = sim_ca()
    service = kubectl("get", "svc", "-n", f"ws-{notebook}", "-o", "name").split()[0]
    try:
        through_gateway = open_through_gateway(url, address, ca)
        console.print(f"gateway {url}: {through_gateway}", markup=False)
        answered = open_through_port_forward(
            f"ws-{notebook}", service.removeprefix("service/"), 8888, "/api"
        )
    except httpx.HTTPError as exc:
        raise StepFailed(f"opening {notebook}: {exc!r}") from exc
    console.print(f"port-forward {service}: {answered}", markup=False)
    parts = urlsplit(url)
    console.print(
        f"[dim]open it yourself: curl --cacert {ca or '<the CA>'} --resolve "
        f"{parts.hostname}:{parts.port}:{address} {url}/lab[/dim]"
    )


@dataclass
class Demo:
    """What the demo's steps share: its scenario (their timings), its names, and where it runs."""

    scenario: Scenario
    location: str
    gpu: str

    @property
    def name(self) -> str:
        """The demo's cluster."""
        return self.scenario.name

    @property
    def fleet(self) -> str:
        """The demo's colony."""
        return f"{self.name}-fleet"

    @property
    def notebook(self) -> str:
        return f"notebook-{self.name.removeprefix('demo-')}"

    @property
    def devbox(self) -> str:
        return f"devbox-{self.name.removeprefix('demo-')}"


def apply_colony(demo: Demo, places: list[str]) -> None:
    """A colony of two clusters, applied from a manifest, until both are Ready."""
    fleet = demo.fleet
    with demo.scenario.step(f"apply colony {fleet}: two clusters ({', '.join(places)})") as step:
        manifest = STATE_DIR / f"{fleet}.yaml"
        manifest.write_text(colony_manifest(fleet, demo.gpu, places))
        ctl("apply", "-f", str(manifest))
        colony = poll(
            f"colony {fleet} ready",
            lambda: ctl("colony", "get", fleet, "-o", "json", parse=True),
            # Ready, and each cluster's GPU inventory read (right after its report).
            lambda status: (
                status["phase"] == "Ready" and all(c["gpus"] for c in status["clusters"])
            ),
        )
        gpus = sum(g["total"] for c in colony["clusters"] for g in c.get("gpus", []))
        step.note = f"({colony['readyClusters']} clusters Ready, {gpus} GPUs)"
    ctl("colony", "get", fleet)


def create_and_scale(demo: Demo) -> None:
    """The demo's cluster, with a GPU pool of 2 then 3."""
    name = demo.name
    with demo.scenario.step(f"create {name} with a GPU pool of 2") as step:
        ctl(
            "cluster", "create", name, "--location-id", demo.location,
            "--node-pool", f"name=gpu,count=2,gpuModelId={demo.gpu}",
            "--tenant-gateway-domain", GATEWAY_DOMAIN, "--wait",
        )  # fmt: skip
        step.note = "(control plane ready, 2 nodes Ready)"
    ctl("node", "list", name)

    with demo.scenario.step("scale the GPU pool to 3") as step:
        ctl("node-pool", "scale", name, "gpu", "--count", "3", "--wait")
        step.note = "(3 nodes Ready)"


def run_workload(demo: Demo) -> None:
    """A GPU workload on the cluster through kubectl, with the kubeconfig `colonyctl` writes."""
    ctl("kubeconfig", "--cluster", demo.name, "--output", str(KUBECONFIG))
    console.print(kubectl("get", "nodes", "-L", "colony.dev/node-pool,colony.dev/sku"))
    kubectl("apply", "-f", "-", stdin=workload_manifest(demo.gpu))
    deadline = time.monotonic() + 60
    while True:
        pods = json.loads(kubectl("get", "pods", "-l", "app=trainer", "-o", "json"))["items"]
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        if len(running) >= WORKLOAD_REPLICAS:
            break
        if time.monotonic() > deadline:
            raise StepFailed("the workload did not start within 60s")
        time.sleep(0.5)
    console.print(kubectl("get", "pods", "-o", "wide"))


def drain(demo: Demo) -> None:
    """Scale the pool down to 1: the nodes it removes are drained, their pods evicted."""
    with demo.scenario.step("scale the GPU pool to 1 (drain)") as step:
        operation = ctl(
            "node-pool", "scale", demo.name, "gpu", "--count", "1", "--wait", "-o", "json",
            parse=True,
        )  # fmt: skip
        evicted = pods_evicted(operation)
        step.note = f"({len(operation['progress']['nodes'])} nodes drained, {evicted} pods evicted)"
    console.print(kubectl("get", "pods", "-o", "wide"))
    # The workload's pods hold the last node's GPUs (Colony counts GPUs it did not place as used):
    # remove it so the notebook gets one.
    kubectl("delete", "deployment", "trainer", "--wait=true")


def deploy_notebook(demo: Demo) -> None:
    """A notebook with one GPU, its password sealed by `colonyctl`, then opened at the URL
    Colony gives and through a port-forward."""
    notebook = demo.notebook
    ctl("class", "list")
    with demo.scenario.step(f"deploy notebook {notebook} with 1 GPU") as step:
        password = secrets.token_urlsafe(12)
        console.print(f"notebook password (sealed by colonyctl before it leaves): {password}")
        ctl(
            "workspace", "deploy", notebook, "--class", NOTEBOOK_CLASS, "--cluster", demo.name,
            "--gpus", "1", "--gpu-model", demo.gpu, "--set", f"notebookPassword={password}",
            "--wait",
        )  # fmt: skip
        status = ctl("workspace", "get", notebook, "-o", "json", parse=True)
        urls = [entry["url"] for entry in status["access"] if entry.get("url")]
        step.note = f"(Running, {', '.join(urls)})"
    ctl("workspace", "get", notebook)
    console.print(
        kubectl("get", "pods", "-n", f"ws-{notebook}", "-o", "wide"), markup=False, highlight=False
    )
    with demo.scenario.step(f"open {notebook}") as step:
        open_notebook(notebook, urls[0])
        step.note = "(through the gateway and kubectl port-forward)"


def devbox_waits_its_turn(demo: Demo) -> None:
    """A dev box asking for every GPU of the node waits in line, and runs once the notebook is
    deleted."""
    node = json.loads(kubectl("get", "nodes", "-o", "json"))["items"][0]
    node_gpus = int(node["status"]["allocatable"].get("nvidia.com/gpu", "1"))
    devbox, notebook = demo.devbox, demo.notebook
    with demo.scenario.step(f"deploy dev box {devbox} with all {node_gpus} GPUs: it waits") as step:
        ctl(
            "workspace", "deploy", devbox, "--class", DEVBOX_CLASS, "--cluster", demo.name,
            "--gpus", str(node_gpus), "--gpu-model", demo.gpu,
            "--set", f"ssh.authorizedKeys={DEMO_SSH_KEY}",
        )  # fmt: skip
        waiting = poll(
            f"{devbox} waiting",
            lambda: ctl("workspace", "get", devbox, "-o", "json", parse=True),
            lambda status: status["phase"] == "Waiting",
        )
        step.note = f"(Waiting, position {(waiting.get('admission') or {}).get('position', '?')})"
    ctl("workspace", "get", devbox)

    with demo.scenario.step(f"delete {notebook}: {devbox} is admitted and runs") as step:
        ctl("workspace", "delete", notebook, "--wait")
        poll(
            f"{devbox} running",
            lambda: ctl("workspace", "get", devbox, "-o", "json", parse=True),
            lambda status: status["phase"] == "Running",
        )
        step.note = "(GPUs freed, the next in line admitted)"
    ctl("workspace", "get", devbox)


def delete_all(demo: Demo) -> None:
    """The cluster (its workspaces first), then the colony."""
    with demo.scenario.step(f"delete {demo.name}") as step:
        ctl("cluster", "delete", demo.name, "--wait")
        step.note = "(its workspaces first, then the ClusterDeployment; hosts released)"
    KUBECONFIG.unlink(missing_ok=True)

    fleet = demo.fleet
    with demo.scenario.step(f"delete colony {fleet}") as step:
        ctl("colony", "delete", fleet)
        poll(
            f"colony {fleet} deleted",
            lambda: quiet_ctl("colony", "get", fleet, "-o", "json")[0],
            lambda code: code == 3,
        )
        step.note = "(both clusters deleted, kubeconfigs Secret removed)"


def run() -> Scenario:
    """The demo, step by step, each step timed."""
    scenario = Scenario()
    locations = ctl("catalog", "location", "list", "-o", "json", parse=True)
    models = ctl("catalog", "gpu-model", "list", "-o", "json", parse=True)
    location = next((loc["id"] for loc in locations if loc["id"] == "fra1"), locations[0]["id"])
    demo = Demo(scenario, location, models[0]["id"])
    console.print(f"cluster [bold]{demo.name}[/bold] in {location} with {demo.gpu} nodes")
    apply_colony(demo, locations_with(locations, demo.gpu, location))
    create_and_scale(demo)
    run_workload(demo)
    drain(demo)
    deploy_notebook(demo)
    devbox_waits_its_turn(demo)
    delete_all(demo)
    return scenario


def main(argv: list[str] | None = None) -> int:
    global STATE_DIR, KUBECONFIG, SIM_WORLD
    parser = argparse.ArgumentParser(prog="python -m starter.dev.scenario", description=__doc__)
    parser.add_argument(
        "--state-dir", type=Path, default=STATE_DIR, help="the stack's files (default .colony)"
    )
    STATE_DIR = parser.parse_args(argv).state_dir
    KUBECONFIG, SIM_WORLD = STATE_DIR / "demo.kubeconfig", STATE_DIR / "sim" / "world.json"
    try:
        scenario = run()
    except StepFailed as exc:
        console.print(f"[red]scenario failed:[/red] {exc}")
        return 1
    summary = Table(title="scenario timings (simulated infrastructure)", title_justify="left")
    summary.add_column("step")
    summary.add_column("seconds", justify="right")
    summary.add_column("")
    for title, seconds, note in scenario.timings:
        summary.add_row(title, f"{seconds:.1f}", note)
    console.print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
