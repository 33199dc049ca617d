"""The custom resource definitions Colony itself brings to the management cluster (`deploy/crds/`).

Called by `worker.py` at startup (and by tests that build a world): a CRD the cluster does not
serve yet is created; one that exists is left as it is (an operator who installed it, or a newer
Colony, owns it). Creating a CRD needs `create` on customresourcedefinitions; a worker without it
logs the refusal and goes on (the objects of that kind then fail with a clear 404).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from infra.kube import request

log = logging.getLogger("colony.crds")

CRD_DIR = Path(__file__).resolve().parent.parent / "deploy" / "crds"


def colony_crds(directory: Path = CRD_DIR) -> list[dict[str, Any]]:
    """Colony's CRDs, as manifests."""
    return [yaml.safe_load(path.read_text()) for path in sorted(directory.glob("*.yaml"))]


async def ensure_crds(management_api: client.ApiClient, directory: Path = CRD_DIR) -> list[str]:
    """Create the CRDs the management cluster lacks; return the names created."""
    extensions = client.ApiextensionsV1Api(management_api)
    created: list[str] = []
    for crd in colony_crds(directory):
        name = str((crd.get("metadata") or {}).get("name"))
        try:
            await request(f"create CRD {name}", extensions.create_custom_resource_definition, crd)
        except ApiException as exc:
            if exc.status == 409:
                continue
            log.warning("CRD %s not created (%s %s)", name, exc.status, exc.reason)
            continue
        created.append(name)
    return created
