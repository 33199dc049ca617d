"""The CRDs Colony's sim installs for k0rdent's resources (group k0rdent.mirantis.com, v1beta1) and
Cluster API's MachineDeployments, MachineSets and Machines (cluster.x-k8s.io, v1beta2).

Smaller versions of k0rdent's own CRDs, written for the sim: only the fields Colony and the sim use,
with the same names, types, constraints and scopes, so an object valid here is valid for k0rdent
(minus the CEL rules, which neither these nor the sim's validator evaluate). The sim's world setup
installs them into the management cluster; `samples.py` holds objects of the shapes Colony creates.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

__all__ = ["CRD_FILES", "crd_schema", "load_colony_crds"]

# The order installs the templates and credentials before what refers to them.
CRD_FILES = (
    "credentials.yaml",
    "clustertemplates.yaml",
    "servicetemplates.yaml",
    "statemanagementproviders.yaml",
    "clusterdeployments.yaml",
    "servicesets.yaml",
    "multiclusterservices.yaml",
    # Cluster API's worker objects, which the cloud templates render (`sim.controllers.capi`).
    "machinedeployments.yaml",
    "machinesets.yaml",
    "machines.yaml",
)


def load_colony_crds() -> list[dict[str, Any]]:
    """Every Colony CRD as a CustomResourceDefinition dict (apiextensions.k8s.io/v1)."""
    package = resources.files(__name__)
    crds: list[dict[str, Any]] = []
    for name in CRD_FILES:
        loaded = yaml.safe_load(package.joinpath(name).read_text(encoding="utf-8"))
        if not isinstance(loaded, dict):
            raise ValueError(f"{name}: not a single YAML document")
        crds.append(loaded)
    return crds


def crd_schema(crd: dict[str, Any], version: str = "v1beta1") -> dict[str, Any]:
    """The openAPIV3Schema of one version of a CRD; KeyError when the version is not there."""
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            schema: dict[str, Any] = entry["schema"]["openAPIV3Schema"]
            return schema
    raise KeyError(f"{crd['metadata']['name']} has no version {version}")
