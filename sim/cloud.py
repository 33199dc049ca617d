"""SIMULATOR. The `cloud` cluster template family: k0rdent's standalone-control-plane templates of
AWS, Azure, GCP and vSphere, and the machines their instance types are.

Read by the world's preload (`sim.world.preload_objects`: a ClusterTemplate per template, its values
schema ConfigMap, a Credential per cloud), by the ClusterTemplate controller (status
`schemaConfigMapName` and `config`), by the ClusterDeployment controller (each of these templates
renders one Cluster API MachineDeployment `<cluster>-md` of `config.workersNumber` replicas) and by
the Cluster API controller (`sim.controllers.capi`: the Node an instance type becomes).

The values schemas are k0rdent's own (`values.schema.json` and `values.yaml` of each chart), read
at run time from a folder of `<chart>/values.schema.json` (`COLONY_K0RDENT_TEMPLATES`, else
`$COLONY_SHARED_DIR/k0rdent-templates`, else `../shared/k0rdent-templates` beside the checkout):
they are reference material, never copied into the project. A world without that folder has no
cloud templates.

Instance types are real ones of each cloud; the GPU models they carry are the host inventory's
(`sim/hostprovider/default_inventory.yaml`), so a cloud worker's GPUs look exactly like a claimed
host's to Colony (GPU Feature Discovery labels, `nvidia.com/gpu` capacity). An instance type the
table does not know boots as a CPU-only mid-size VM.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "CLOUD_CHARTS",
    "CLOUD_TEMPLATES",
    "TEMPLATES_ENV",
    "CloudTemplate",
    "InstanceType",
    "default_values_dir",
    "instance_type",
    "load_cloud_templates",
    "schema_config_map_name",
    "worker_instance_type",
]

# Cluster API's group and names (cluster-api api/core/v1beta2).
CAPI_GROUP = "cluster.x-k8s.io"
API_VERSION = f"{CAPI_GROUP}/v1beta2"
MACHINE_DEPLOYMENTS = (CAPI_GROUP, "machinedeployments")
MACHINE_SETS = (CAPI_GROUP, "machinesets")
MACHINES = (CAPI_GROUP, "machines")
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"

TEMPLATES_ENV = "COLONY_K0RDENT_TEMPLATES"
"""A folder of `<chart>/values.schema.json` + `values.yaml` (k0rdent's cluster template charts)."""

# Chart -> (version, the Credential a cluster of it names), as KCM v1.12.0-rc1 ships them
# (`../shared/k0rdent-templates/README.md`).
CLOUD_CHARTS: Mapping[str, str] = {
    "aws-standalone-cp": "1.0.43",
    "azure-standalone-cp": "1.0.45",
    "gcp-standalone-cp": "1.0.43",
    "vsphere-standalone-cp": "1.0.42",
}


def template_name(chart: str) -> str:
    """KCM's ClusterTemplate name of a chart version: `aws-standalone-cp-1-0-43`."""
    return f"{chart}-{CLOUD_CHARTS[chart].replace('.', '-')}"


CLOUD_TEMPLATES: Mapping[str, str] = {template_name(chart): chart for chart in CLOUD_CHARTS}
"""ClusterTemplate name -> chart."""


# The identity each cloud's Credential names (k0rdent's docs: AWSClusterStaticIdentity,
# AzureClusterIdentity, a Secret for GCP, VSphereClusterIdentity).
CLOUD_IDENTITY_KINDS: Mapping[str, str] = {
    "aws-standalone-cp": "AWSClusterStaticIdentity",
    "azure-standalone-cp": "AzureClusterIdentity",
    "gcp-standalone-cp": "Secret",
    "vsphere-standalone-cp": "VSphereClusterIdentity",
}
IDENTITY_API_VERSIONS: Mapping[str, str] = {
    "AWSClusterStaticIdentity": "infrastructure.cluster.x-k8s.io/v1beta2",
    "AzureClusterIdentity": "infrastructure.cluster.x-k8s.io/v1beta1",
    "VSphereClusterIdentity": "infrastructure.cluster.x-k8s.io/v1beta1",
}


def credential_name(chart: str) -> str:
    """The world's Credential for clusters of a cloud chart (`aws-credential`)."""
    return f"{chart.split('-')[0]}-credential"


def schema_config_map_name(template: str) -> str:
    """The ConfigMap holding a ClusterTemplate's values schema (key `schema`, as KCM's)."""
    return f"{template}-schema"


def is_machine_deployment_chart(chart: str) -> bool:
    """Charts that render one MachineDeployment `<cluster>-md` of `workersNumber` replicas."""
    return chart in CLOUD_CHARTS


@dataclass(frozen=True)
class InstanceType:
    """What one instance type (VM size, VM template) boots as."""

    cpu: int
    memory_gib: int
    gpu_model_id: str | None = None
    """A GPU model of the host inventory (`h100-80gb`), or None for a CPU-only machine."""
    gpu_count: int = 0


# Real instance types of each cloud, with their published vCPUs, memory and GPUs.
_INSTANCE_TYPES: Mapping[str, Mapping[str, InstanceType]] = {
    "aws": {
        "p5.48xlarge": InstanceType(192, 2048, "h100-80gb", 8),
        "p4de.24xlarge": InstanceType(96, 1152, "a100-80gb", 8),
        "g6e.xlarge": InstanceType(4, 32, "l40s-48gb", 1),
        "g6e.12xlarge": InstanceType(48, 384, "l40s-48gb", 4),
        "m5.xlarge": InstanceType(4, 16),
        "t3.large": InstanceType(2, 8),
    },
    "azure": {
        "Standard_ND96isr_H100_v5": InstanceType(96, 1900, "h100-80gb", 8),
        "Standard_NC24ads_A100_v4": InstanceType(24, 220, "a100-80gb", 1),
        "Standard_NC96ads_A100_v4": InstanceType(96, 880, "a100-80gb", 4),
        "Standard_D4s_v5": InstanceType(4, 16),
    },
    "gcp": {
        "a3-highgpu-8g": InstanceType(208, 1872, "h100-80gb", 8),
        "a3-highgpu-1g": InstanceType(26, 234, "h100-80gb", 1),
        "a2-ultragpu-1g": InstanceType(12, 170, "a100-80gb", 1),
        "n2-standard-4": InstanceType(4, 16),
    },
    # vSphere sizes a VM by `worker.cpus` / `worker.memory`; its GPUs are PCI devices the VM
    # template passes through, so the template's name is what says which.
    "vsphere": {
        "ubuntu-2204-h100": InstanceType(0, 0, "h100-80gb", 1),
        "ubuntu-2204-l40s": InstanceType(0, 0, "l40s-48gb", 1),
    },
}
GENERIC = InstanceType(8, 32)
"""An instance type the table does not know: a mid-size CPU-only VM."""


def _cloud(chart: str) -> str:
    return chart.split("-")[0]


def worker_instance_type(chart: str, config: Mapping[str, Any]) -> str:
    """The instance type, VM size or VM template a cloud chart's workers are (its values)."""
    worker = config.get("worker") or {}
    if not isinstance(worker, Mapping):
        return ""
    key = {"azure": "vmSize", "vsphere": "vmTemplate"}.get(_cloud(chart), "instanceType")
    return str(worker.get(key) or "")


def instance_type(chart: str, config: Mapping[str, Any]) -> tuple[str, InstanceType]:
    """(name, size) of the workers of a cluster of `chart` with values `config`."""
    name = worker_instance_type(chart, config)
    known = _INSTANCE_TYPES.get(_cloud(chart), {}).get(name, GENERIC)
    if _cloud(chart) == "vsphere":
        worker = config.get("worker") or {}
        cpus = int(worker.get("cpus") or 2) if isinstance(worker, Mapping) else 2
        memory_mib = int(worker.get("memory") or 4096) if isinstance(worker, Mapping) else 4096
        known = InstanceType(cpus, max(memory_mib // 1024, 1), known.gpu_model_id, known.gpu_count)
    return name, known


@dataclass(frozen=True)
class CloudTemplate:
    """One cloud ClusterTemplate: its name, chart, version and k0rdent's values schema."""

    name: str
    chart: str
    version: str
    schema: Mapping[str, Any]
    defaults: Mapping[str, Any]


def default_values_dir() -> Path | None:
    """The folder of k0rdent's template charts' values, if there is one (module docstring)."""
    candidates = [os.environ.get(TEMPLATES_ENV)]
    shared = os.environ.get("COLONY_SHARED_DIR")
    if shared:
        candidates.append(str(Path(shared) / "k0rdent-templates"))
    candidates.append(str(Path(__file__).resolve().parents[2] / "shared" / "k0rdent-templates"))
    for candidate in candidates:
        if candidate and (Path(candidate) / "aws-standalone-cp" / "values.schema.json").is_file():
            return Path(candidate)
    return None


def load_cloud_templates(values_dir: Path | None) -> list[CloudTemplate]:
    """The cloud templates whose chart values are in `values_dir` (none without it)."""
    if values_dir is None:
        return []
    templates: list[CloudTemplate] = []
    for chart, version in CLOUD_CHARTS.items():
        schema_path = values_dir / chart / "values.schema.json"
        if not schema_path.is_file():
            continue
        values_path = values_dir / chart / "values.yaml"
        defaults = (
            yaml.safe_load(values_path.read_text(encoding="utf-8")) if values_path.is_file() else {}
        )
        templates.append(
            CloudTemplate(
                name=template_name(chart),
                chart=chart,
                version=version,
                schema=json.loads(schema_path.read_text(encoding="utf-8")),
                defaults=defaults if isinstance(defaults, dict) else {},
            )
        )
    return templates


def machine_deployment(
    namespace: str, cluster: str, replicas: int, infrastructure_kind: str, version: str
) -> dict[str, Any]:
    """The MachineDeployment `<cluster>-md` a cloud template's chart renders."""
    name = f"{cluster}-md"[:63]
    return {
        "apiVersion": API_VERSION,
        "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": namespace, "labels": {CLUSTER_NAME_LABEL: cluster}},
        "spec": {
            "clusterName": cluster,
            "replicas": replicas,
            "selector": {"matchLabels": {CLUSTER_NAME_LABEL: cluster}},
            "template": {
                "metadata": {"labels": {CLUSTER_NAME_LABEL: cluster}},
                "spec": {
                    "clusterName": cluster,
                    "version": version,
                    "bootstrap": {
                        "configRef": {
                            "apiGroup": "bootstrap.cluster.x-k8s.io",
                            "kind": "K0sWorkerConfigTemplate",
                            "name": f"{cluster}-machine-config",
                        }
                    },
                    "infrastructureRef": {
                        "apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": infrastructure_kind,
                        "name": f"{cluster}-mt",
                    },
                },
            },
        },
    }


INFRASTRUCTURE_KINDS: Mapping[str, str] = {
    "aws": "AWSMachineTemplate",
    "azure": "AzureMachineTemplate",
    "gcp": "GCPMachineTemplate",
    "vsphere": "VSphereMachineTemplate",
}
