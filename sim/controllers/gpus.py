"""SIMULATOR. NVIDIA facts of the simulated GPU nodes: what GPU Feature Discovery labels, what the
device plugin advertises and what `nvidia-smi` prints.

Used by the k0rdent cluster controller (node labels when a machine registers) and by the kubelet
(the devices a container gets, `nvidia-smi` output). One table per GPU product the bundled
inventory sells; products it does not know get labels derived from the inventory's GPU model
(memory in GiB) and an `nvidia-smi` name made from the label (dashes become spaces).

The values are what real nodes report: GFD's `nvidia.com/gpu.memory` is the framebuffer in MiB as
NVML reports it (an "80GB" H100 reports 81559), `nvidia.com/gpu.product` is the NVML name with
spaces replaced by dashes.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

GPU_RESOURCE = "nvidia.com/gpu"

# The driver and CUDA version every simulated GPU node runs (GPU operator 25.x defaults).
DRIVER_VERSION = "570.133.20"
CUDA_VERSION = "12.8"


@dataclass(frozen=True)
class GpuProduct:
    """One GPU product as NVML and GFD describe it."""

    smi_name: str  # what `nvidia-smi -L` prints
    memory_mib: int  # nvidia.com/gpu.memory
    family: str  # nvidia.com/gpu.family
    compute: tuple[int, int]  # nvidia.com/gpu.compute.major / .minor
    mig_capable: bool


# Keyed by the nvidia.com/gpu.product label value.
PRODUCTS: dict[str, GpuProduct] = {
    "NVIDIA-H100-80GB-HBM3": GpuProduct("NVIDIA H100 80GB HBM3", 81559, "hopper", (9, 0), True),
    "NVIDIA-A100-SXM4-80GB": GpuProduct("NVIDIA A100-SXM4-80GB", 81920, "ampere", (8, 0), True),
    "NVIDIA-L40S": GpuProduct("NVIDIA L40S", 46068, "ada-lovelace", (8, 9), False),
}


def smi_name(product_label: str) -> str:
    """The name `nvidia-smi` prints for a product, from its GFD label."""
    known = PRODUCTS.get(product_label)
    return known.smi_name if known else product_label.replace("-", " ")


def gpu_uuid(node_name: str, index: int) -> str:
    """A GPU's UUID, stable per node name and index (the same host keeps its GPUs' UUIDs)."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'sim.colony.dev/gpu/{node_name}/{index}')}"


def gfd_labels(product_label: str, count: int, memory_gib: int | None = None) -> dict[str, str]:
    """The labels GPU Feature Discovery puts on a node with `count` GPUs of one product."""
    known = PRODUCTS.get(product_label)
    driver_major, driver_minor, driver_rev = DRIVER_VERSION.split(".")
    cuda_major, cuda_minor = CUDA_VERSION.split(".")
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product_label,
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/cuda.driver-version.full": DRIVER_VERSION,
        "nvidia.com/cuda.driver-version.major": driver_major,
        "nvidia.com/cuda.driver-version.minor": driver_minor,
        "nvidia.com/cuda.driver-version.revision": driver_rev,
        "nvidia.com/cuda.runtime-version.full": CUDA_VERSION,
        "nvidia.com/cuda.runtime-version.major": cuda_major,
        "nvidia.com/cuda.runtime-version.minor": cuda_minor,
    }
    if known is not None:
        labels["nvidia.com/gpu.memory"] = str(known.memory_mib)
        labels["nvidia.com/gpu.family"] = known.family
        labels["nvidia.com/gpu.compute.major"] = str(known.compute[0])
        labels["nvidia.com/gpu.compute.minor"] = str(known.compute[1])
        labels["nvidia.com/mig.capable"] = "true" if known.mig_capable else "false"
    elif memory_gib:
        labels["nvidia.com/gpu.memory"] = str(memory_gib * 1024)
    return labels
