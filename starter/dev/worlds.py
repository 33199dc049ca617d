"""Which simulated world `make run` starts: `COLONY_WORLD`.

Unset (or `emulated`): the simulator's emulated clusters, instant to start, kept in `.colony/`
across runs. `real`: the simulator on real Kubernetes control planes (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, KWOK: `python -m sim --world real`), which `make run`
builds first where they are not built yet (`components.build`: minutes once, then a lookup).
A real world is not kept across runs: it starts fresh with a fresh development state.

Used by `starter.dev.devenv`. The names are the simulator's (`sim.world.WORLD_ENV`, `WORLDS`);
the front doors never import the simulator, so they are written here again.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping

from components import build, manifests

WORLD_ENV = "COLONY_WORLD"
EMULATED, REAL = "emulated", "real"
REAL_START_DEADLINE_SECONDS = 600.0
"""A real world's start: about 10 s alone, minutes on two cores busy with other work."""
COMPONENTS = ("etcd", "kubernetes", "kwok")
UPSTREAM_MANIFESTS = ("gateway-api", "kwok-portforward")


class WorldSettingError(Exception):
    """`COLONY_WORLD` names no world; the message says which ones there are."""


def dev_world(environ: Mapping[str, str]) -> str:
    """The world `COLONY_WORLD` names ("emulated" when unset or empty)."""
    text = environ.get(WORLD_ENV, "").strip().lower() or EMULATED
    if text not in (EMULATED, REAL):
        raise WorldSettingError(
            f"{WORLD_ENV}={environ.get(WORLD_ENV)!r}: it is {EMULATED} (the default) or {REAL}"
        )
    return text


def build_real_components() -> float:
    """Build what a real world runs (once per pinned version) and fetch the upstream CRDs it
    installs; the seconds it took (a lookup when everything is there)."""
    began = time.monotonic()
    for name in COMPONENTS:
        if build.built(name) is None:
            print(f"real world: building {name} (once)", file=sys.stderr, flush=True)
        build.ensure(name, log=False)
    for name in UPSTREAM_MANIFESTS:
        manifests.crds(name)
    return time.monotonic() - began
