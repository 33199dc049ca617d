"""The custom resource definitions Colony itself brings to the management cluster (`deploy/crds/`).

Called by `worker.py` at startup (and by tests that build a world): a CRD the cluster does not
serve yet is created and waited for until the API server serves it (Established: the catalog
publishes classes right after); one that exists is left as it is (an operator who installed it,
or a newer Colony, owns it). Whether it exists is read first, so a worker whose ServiceAccount
may only read it (deploy/rbac.yaml: the operator applies `deploy/crds/` once) never asks to create
it; a worker that may do neither logs the refusal and goes on (the objects of that kind then fail
with a clear 404).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from infra.kube import Obj, request

log = logging.getLogger("colony.crds")

CRD_DIR = Path(__file__).resolve().parent.parent / "deploy" / "crds"
ESTABLISHED_SECONDS = 30.0
"""How long a new CRD may take to be served: an instant on an idle API server; past this the
worker goes on (its objects' calls then fail and are retried like any other)."""
POLL_SECONDS = 0.1


def colony_crds(directory: Path = CRD_DIR) -> list[dict[str, Any]]:
    """Colony's CRDs, as manifests."""
    return [yaml.safe_load(path.read_text()) for path in sorted(directory.glob("*.yaml"))]


def established(crd: Obj) -> bool:
    """Whether the API server serves a CRD's resources (its Established condition)."""
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


async def ensure_crds(management_api: client.ApiClient, directory: Path = CRD_DIR) -> list[str]:
    """Create the CRDs the management cluster lacks and wait until they are served; return the
    names created."""
    extensions = client.ApiextensionsV1Api(management_api)
    created: list[str] = []
    for crd in colony_crds(directory):
        name = str((crd.get("metadata") or {}).get("name"))
        try:
            await request(f"read CRD {name}", extensions.read_custom_resource_definition, name)
            continue
        except ApiException as exc:
            if exc.status != 404:
                log.warning("CRD %s not read (%s %s)", name, exc.status, exc.reason)
                continue
        try:
            await request(f"create CRD {name}", extensions.create_custom_resource_definition, crd)
        except ApiException as exc:
            if exc.status == 409:
                continue
            log.warning("CRD %s not created (%s %s)", name, exc.status, exc.reason)
            continue
        created.append(name)
    for name in created:
        await _until_established(extensions, name)
    return created


async def _until_established(extensions: client.ApiextensionsV1Api, name: str) -> None:
    deadline = time.monotonic() + ESTABLISHED_SECONDS
    while True:
        crd = await request(f"read CRD {name}", extensions.read_custom_resource_definition, name)
        if established(crd):
            return
        if time.monotonic() > deadline:
            log.warning("CRD %s not established after %.0f s", name, ESTABLISHED_SECONDS)
            return
        await asyncio.sleep(POLL_SECONDS)
