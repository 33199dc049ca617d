"""CustomResourceDefinitions of pinned upstream projects, read from their Go modules.

The Go module proxy serves a module's whole tree at a version, manifests included, so the CRDs a
real cluster of the simulator's real world needs come from where its binaries come from:

- the Gateway API's (`sigs.k8s.io/gateway-api`, experimental channel: it serves TCPRoute
  v1alpha2, which Colony writes and the standard channel of v1.6 no longer serves), installed in
  every child cluster of the real world, where the tenant gateway and Colony's routes live;
- KWOK's PortForward (`sigs.k8s.io/kwok` at the version `components.build` builds), so a real
  child's KWOK forwards `kubectl port-forward` to the simulator's workloads.

`crds(name)` answers them as dicts; the module is fetched once (`go mod download`, into Go's
module cache: a second call is a lookup). Nothing but the Go module proxy is asked.
`python -m components.manifests` fetches them ahead (as `make run` does for a real world).
"""

from __future__ import annotations

import copy
import functools
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from components import build


@dataclass(frozen=True)
class Manifests:
    """Files of one upstream module at one version."""

    module: str
    version: str
    paths: tuple[str, ...]


GATEWAY_API_VERSION = "v1.6.3"
_GATEWAY_CRDS = "config/crd/experimental/gateway.networking.k8s.io_"

MANIFESTS: dict[str, Manifests] = {
    "gateway-api": Manifests(
        "sigs.k8s.io/gateway-api",
        GATEWAY_API_VERSION,
        tuple(
            f"{_GATEWAY_CRDS}{plural}.yaml"
            for plural in (
                "gatewayclasses",
                "gateways",
                "httproutes",
                "tcproutes",
                "referencegrants",
            )
        ),
    ),
    "kwok-portforward": Manifests(
        "sigs.k8s.io/kwok",
        build.COMPONENTS["kwok"].version,
        ("kustomize/crd/bases/kwok.x-k8s.io_portforwards.yaml",),
    ),
}


class ManifestError(RuntimeError):
    """A module could not be fetched (the message holds Go's output)."""


def module_dir(module: str, version: str) -> Path:
    """Where Go's module cache holds `module@version`, downloaded first if needed."""
    with tempfile.TemporaryDirectory(prefix="colony-manifests-") as outside_any_module:
        result = subprocess.run(
            ["go", "mod", "download", "-json", f"{module}@{version}"],
            cwd=outside_any_module,
            env=build.go_environment(),
            capture_output=True,
            text=True,
        )
    if result.returncode != 0:
        raise ManifestError(f"go mod download {module}@{version}: {result.stdout}{result.stderr}")
    return Path(json.loads(result.stdout)["Dir"])


def crds(name: str) -> list[dict[str, Any]]:
    """The CustomResourceDefinitions of `MANIFESTS[name]`, in order (fresh copies)."""
    return copy.deepcopy(_crds(name))


@functools.cache
def _crds(name: str) -> list[dict[str, Any]]:
    manifests = MANIFESTS[name]
    folder = module_dir(manifests.module, manifests.version)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the Gateway API's are 1.4 MB
    found: list[dict[str, Any]] = []
    for path in manifests.paths:
        for document in yaml.load_all((folder / path).read_text(), Loader=loader):
            if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
                found.append(document)
    return found


def main(argv: list[str] | None = None) -> int:
    """`python -m components.manifests [NAME ...]`: fetch them ahead (all by default)."""
    names = (argv if argv is not None else sys.argv[1:]) or list(MANIFESTS)
    for name in names:
        print(f"{name}: {', '.join(c['metadata']['name'] for c in crds(name))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
