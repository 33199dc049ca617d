"""SIMULATOR. KWOK for a child cluster of the real world: Nodes kept Ready, pods played, and the
kubelet's port-forward endpoint.

`components.controlplane` starts KWOK for Nodes and pods; a child cluster of the real world also
needs what a kubelet serves kube-apiserver for `kubectl port-forward` (Colony prints that command
for every workspace). So the real world starts its control planes without their KWOK
(`ControlPlane.start(kwok=False)`) and this one instead, with what that needs on top of the
control plane's own flags: `--enable-crds=PortForward` (the PortForward objects
`sim.real.podforward` writes say where each pod's ports go) and `--node-port`, so every Node it
takes over names KWOK's server as its kubelet endpoint. kube-apiserver dials a Node by its
`Hostname` address first (its default `--kubelet-preferred-address-types`): the real world's
Nodes give `localhost` there, where KWOK listens (their `InternalIP` stays the host's address,
which Colony matches its hosts by). KWOK's server speaks TLS with a certificate of its own;
kube-apiserver checks no kubelet certificate unless told to (`--kubelet-certificate-authority`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

from components import build
from components.controlplane import (
    KWOK_NODE_ANNOTATION,
    KWOK_NODE_LEASE_SECONDS,
    POD_CIDR,
    ControlPlane,
    ControlPlaneError,
)
from components.process import GuardedProcess, ProcessError
from infra.ports import free_port

HOST = "127.0.0.1"
NODE_INITIALIZE = "node-initialize"
"""kwokctl's stage that makes a Node Ready."""
JOINED_ANNOTATION = "sim.colony.dev/kubelet-joined"
"""Set to "true" on a Node when its machine's kubelet has joined: KWOK makes it Ready then."""
KUBELET_HOST = "localhost"
"""The Hostname address of the real world's Nodes: where kube-apiserver reaches their KWOK."""
START_TIMEOUT = 60.0


@dataclass
class Kwok:
    """One KWOK controller and its kubelet server (`port`)."""

    process: GuardedProcess
    port: int

    @classmethod
    def start(cls, plane: ControlPlane, *, timeout: float = START_TIMEOUT) -> Kwok:
        """KWOK for `plane`'s Nodes annotated `kwok.x-k8s.io/node: fake`, its log beside the
        control plane's; answers once its health check does.

        Raises:
            ControlPlaneError: it exited or did not answer in time.
        """
        folder = build.ensure("kwok")
        port = free_port()
        process = GuardedProcess.start(
            "kwok",
            [
                folder / "kwok",
                f"--kubeconfig={plane.directory / 'kwok.kubeconfig'}",
                f"--config={_stages(folder / build.KWOK_STAGES, plane.directory)}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                f"--node-lease-duration-seconds={KWOK_NODE_LEASE_SECONDS}",
                f"--cidr={POD_CIDR}",
                f"--server-address={HOST}:{port}",
                f"--node-port={port}",
                "--enable-crds=PortForward",
            ],
            plane.directory / "logs" / "kwok.log",
            # KWOK reads ~/.kwok/kwok.yaml when it exists: a HOME of its own.
            env={"HOME": str(plane.directory), "PATH": "/usr/bin:/bin"},
        )
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2) as probe:  # plain HTTP and TLS share KWOK's port
            while not _healthy(probe, f"http://{HOST}:{port}/healthz"):
                try:
                    process.check()
                except ProcessError as error:
                    raise ControlPlaneError(f"kwok: {error}") from None
                if time.monotonic() > deadline:
                    process.stop()
                    raise ControlPlaneError(f"kwok: not healthy within {timeout}s")
                time.sleep(0.05)
        return cls(process, port)

    def stop(self) -> None:
        self.process.stop()

    def rss(self) -> int:
        return self.process.rss()


def _stages(stages: Path, directory: Path) -> Path:
    """kwokctl's stages, a Node's first Ready waiting for `JOINED_ANNOTATION`: KWOK takes over
    only the Nodes that carry its annotation when it first sees them, and the machines of the real
    world register their Node first (NotReady) and join later (or never, with the
    `node_never_ready` fault)."""
    documents = list(yaml.safe_load_all(stages.read_text()))
    for document in documents:
        if (document.get("metadata") or {}).get("name") == NODE_INITIALIZE:
            selector = document["spec"].setdefault("selector", {})
            selector.setdefault("matchAnnotations", {})[JOINED_ANNOTATION] = "true"
    written = directory / "kwok-stages.yaml"
    written.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return written


def _healthy(probe: httpx.Client, url: str) -> bool:
    try:
        return probe.get(url).status_code == 200
    except httpx.HTTPError:
        return False
