"""The real tier of the test suite: real Kubernetes control planes (`components.controlplane`) for
the tests marked `real`.

One control plane per test process (per pytest-xdist worker), started on first use and stopped at
the end of the session: `real_control_plane()` answers it, and the session fixture of the same
name in `tests/conftest.py` and `sim/tests/conftest.py` hands it out. Tests share it, so each
works in namespaces of its own (`fresh_namespace`) and gives cluster-scoped objects unique names.
Tests that need a control plane of their own (a child cluster with its own nodes, RBAC applied)
start one with `ControlPlane.start` on the process's shared etcd (`real_etcd()`), about 3 s.

The components are built by `make test` before pytest starts (`make components`); run alone,
the first real test builds what is missing (minutes on a cold machine).
"""

from __future__ import annotations

import atexit
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from kubernetes import client

from components.controlplane import ControlPlane, ControlPlaneError, Etcd
from infra.kube import api_client_from_dict
from tests.helpers import unique

_lock = threading.Lock()
_etcd: Etcd | None = None
_plane: ControlPlane | None = None
_root: tempfile.TemporaryDirectory[str] | None = None


def _directory() -> Path:
    global _root
    if _root is None:
        _root = tempfile.TemporaryDirectory(prefix="colony-real-")
    return Path(_root.name)


def real_etcd() -> Etcd:
    """This process's etcd, shared by every control plane it starts."""
    global _etcd
    with _lock:
        if _etcd is None:
            _etcd = Etcd.start(_directory() / "etcd")
            atexit.register(stop_all)
        return _etcd


def real_control_plane() -> ControlPlane:
    """This process's shared control plane (started on first use)."""
    global _plane
    etcd = real_etcd()
    with _lock:
        if _plane is None:
            _plane = ControlPlane.start(_directory() / "shared", name="shared", etcd=etcd)
        return _plane


def start_control_plane(name: str, *, kwok: bool = True, audit: bool = False) -> ControlPlane:
    """A control plane of the caller's own on this process's etcd; the caller stops it."""
    named = unique(name)
    return ControlPlane.start(
        _directory() / named, name=named, etcd=real_etcd(), kwok=kwok, audit=audit
    )


def wait_for(
    ready: Callable[[], bool], *, what: str, timeout: float = 60.0, interval: float = 0.05
) -> None:
    """Poll `ready` until it holds (blocking); fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(interval)


def stop_all() -> None:
    """Stop the shared control plane and etcd (the session's end; atexit as a fallback)."""
    global _plane, _etcd, _root
    with _lock:
        if _plane is not None:
            _plane.stop()
            _plane = None
        if _etcd is not None:
            _etcd.stop()
            _etcd = None
        if _root is not None:
            _root.cleanup()
            _root = None


def admin_client(plane: ControlPlane) -> client.ApiClient:
    """An official-client `ApiClient` of the plane's admin (close it when done)."""
    return api_client_from_dict(plane.admin_kubeconfig)


def token_client(plane: ControlPlane, token: str) -> client.ApiClient:
    """An official-client `ApiClient` that authenticates with a bearer token."""
    return api_client_from_dict(plane.token_kubeconfig(token))


def fresh_namespace(plane: ControlPlane, prefix: str = "t", timeout: float = 30.0) -> str:
    """A new namespace, once pods may be created in it (kube-controller-manager has made its
    `default` ServiceAccount, which the ServiceAccount admission plugin requires)."""
    name = unique(prefix)
    plane.ensure("/api/v1/namespaces", {"metadata": {"name": name}})
    deadline = time.monotonic() + timeout
    path = f"/api/v1/namespaces/{name}/serviceaccounts/default"
    while plane.request("GET", path).status_code != 200:
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"namespace {name}: no default ServiceAccount in {timeout}s")
        time.sleep(0.02)
    return name


def delete_namespace(plane: ControlPlane, name: str) -> None:
    """Delete a namespace without waiting for its finalization."""
    plane.request("DELETE", f"/api/v1/namespaces/{name}")
