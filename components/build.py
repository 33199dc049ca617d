"""Build the pinned third-party servers from the Go module proxy, once per version, into a cache
outside the work tree.

Each component is a small wrapper module of the project's own (`components/go/<name>/go.mod`,
with its `go.sum`): it requires the upstream module at one version, pins every module upstream
maps with `replace` (Go ignores a dependency's replace directives), and names the commands to
build as `tool` lines. `ensure("kubernetes")` builds them with the machine's Go toolchain
(`GOTOOLCHAIN=local`: nothing but modules is fetched) and answers the folder holding the binaries.

The cache key is the component's name, its upstream version and a digest of everything that
changes the binaries (go.mod, go.sum, the link flags, the Go version), so a second `ensure` is a
lookup, and a changed pin builds afresh beside the old one. Builds run under a file lock: test
processes started side by side wait for one build instead of running three.

Run `python -m components.build [NAME ...]` to build ahead (all by default); it prints what it
built and how long it took.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

MODULES = Path(__file__).resolve().parent / "go"
CACHE = Path(
    os.environ.get("COLONY_COMPONENTS_CACHE", Path.home() / ".cache" / "colony" / "components")
)
"""Built binaries, by component and key. Outside the work tree, so a fresh clone reuses them."""

KUBERNETES_VERSION = "v1.37.2"
KWOK_STAGES = "kwok-stages.yaml"
_VERSION_PACKAGE = "k8s.io/component-base/version"


@dataclass(frozen=True)
class Component:
    """A wrapper module and what to build from it."""

    name: str
    upstream: str
    """The upstream module whose version names the build (`k8s.io/kubernetes`)."""
    commands: dict[str, str]
    """Binary name -> the package that is its `main`."""
    ldflags: tuple[str, ...] = field(default=())
    files: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Data files put beside the binaries: name (a relative path) -> paths inside the upstream
    module; one path is copied as it is (a server's default configuration, read from disk), more
    are concatenated as one multi-document YAML (KWOK's stages, which its binary does not embed)."""

    @property
    def module(self) -> Path:
        return MODULES / self.name

    @property
    def version(self) -> str:
        """The upstream version the wrapper module requires."""
        for line in (self.module / "go.mod").read_text().splitlines():
            words = line.split()
            if words[:1] == ["require"] and words[1:2] == [self.upstream]:
                return words[2]
            if words[:1] == [self.upstream]:
                return words[1]
        raise LookupError(f"{self.module}/go.mod does not require {self.upstream}")

    def key(self, go_version: str) -> str:
        digest = hashlib.sha256()
        for name in ("go.mod", "go.sum"):
            digest.update((self.module / name).read_bytes())
        digest.update(" ".join(self.ldflags).encode())
        if self.files:  # (only then: the keys of components without files stay as they were)
            digest.update(repr(sorted(self.files.items())).encode())
        digest.update(go_version.encode())
        return f"{self.name}-{self.version}-{digest.hexdigest()[:12]}"


COMPONENTS: dict[str, Component] = {
    component.name: component
    for component in (
        Component(
            "etcd",
            "go.etcd.io/etcd/server/v3",
            {"etcd": "go.etcd.io/etcd/server/v3"},
        ),
        Component(
            "kubernetes",
            "k8s.io/kubernetes",
            {
                name: f"k8s.io/kubernetes/cmd/{name}"
                for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
            },
            # What hack/lib/version.sh stamps; without it the servers report v0.0.0-master.
            ldflags=(
                f"-X {_VERSION_PACKAGE}.gitVersion={KUBERNETES_VERSION}",
                f"-X {_VERSION_PACKAGE}.gitMajor=1",
                f"-X {_VERSION_PACKAGE}.gitMinor=37",
                f"-X {_VERSION_PACKAGE}.gitTreeState=clean",
                f"-X {_VERSION_PACKAGE}.buildDate=2026-01-01T00:00:00Z",
            ),
        ),
        Component(
            "kwok",
            "sigs.k8s.io/kwok",
            {"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
            # The stages kwokctl gives a cluster of real binaries (pkg/kwokctl/runtime/cluster.go:
            # node-fast, node heartbeats with Leases, pod-fast); `kwok` alone has none.
            files={
                KWOK_STAGES: tuple(
                    f"kustomize/stage/{path}.yaml"
                    for path in (
                        "node/fast/node-initialize",
                        "node/heartbeat-with-lease/node-heartbeat-with-lease",
                        "pod/fast/pod-ready",
                        "pod/fast/pod-complete",
                        "pod/fast/pod-delete",
                    )
                )
            },
        ),
        Component(
            "temporal",
            "go.temporal.io/server",
            {
                "temporal-server": "go.temporal.io/server/cmd/server",
                "temporal-sql-tool": "go.temporal.io/server/cmd/tools/sql",
            },
        ),
        Component(
            "temporal-ui",
            "github.com/temporalio/ui-server/v2",
            {"temporal-ui-server": "github.com/temporalio/ui-server/v2/cmd/server"},
            # The UI server reads its configuration from <root>/config/<env>.yaml; docker.yaml is
            # the one the temporalio/ui image runs, a template of TEMPORAL_* variables.
            files={"config/docker.yaml": ("config/docker.yaml",)},
        ),
    )
}


class BuildError(RuntimeError):
    """A component could not be built; the message holds the tail of Go's output."""


def go_environment() -> dict[str, str]:
    """Go's environment for a build: the local toolchain only, no VCS stamping (the wrapper
    modules sit in the project's repository, whose state must not change the binaries)."""
    env = dict(os.environ)
    env["GOTOOLCHAIN"] = "local"
    env["GOFLAGS"] = "-buildvcs=false -mod=readonly"
    env.setdefault("CGO_ENABLED", "0")
    return env


def go_version() -> str:
    """`go env GOVERSION`; raises BuildError when no Go toolchain is on the PATH."""
    go = shutil.which("go")
    if go is None:
        raise BuildError("no `go` on the PATH: the real components are built with Go 1.26")
    return subprocess.run(
        [go, "env", "GOVERSION"], check=True, capture_output=True, text=True, env=go_environment()
    ).stdout.strip()


def built(name: str) -> Path | None:
    """The folder of `name`'s binaries if they are built for the current pins, else None."""
    component = COMPONENTS[name]
    folder = CACHE / component.key(go_version())
    return folder if (folder / ".complete").exists() else None


def ensure(name: str, *, log: bool = True) -> Path:
    """The folder holding `name`'s binaries, built first if they are not in the cache yet."""
    component = COMPONENTS[name]
    folder = CACHE / component.key(go_version())
    if (folder / ".complete").exists():
        return folder
    with _locked(CACHE / f".{component.name}.lock"):
        if (folder / ".complete").exists():  # built by another process while we waited
            return folder
        started = time.monotonic()
        if log:
            print(
                f"building {component.name} {component.version} (once; cached in {folder})",
                file=sys.stderr,
                flush=True,
            )
        _build(component, folder)
        if log:
            print(
                f"built {component.name} in {time.monotonic() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    return folder


def binary(component: str, command: str) -> Path:
    """The path of one binary (`binary("kubernetes", "kube-apiserver")`), built if needed."""
    return ensure(component) / command


def _build(component: Component, folder: Path) -> None:
    staging = folder.with_name(folder.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    flags = ["-s", "-w", *component.ldflags]
    command = [
        "go",
        "build",
        "-trimpath",
        "-ldflags",
        " ".join(flags),
        "-o",
        f"{staging}/",
        *component.commands.values(),
    ]
    result = subprocess.run(
        command, cwd=component.module, env=go_environment(), capture_output=True, text=True
    )
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
        raise BuildError(f"building {component.name} failed ({' '.join(command)}):\n{tail}")
    for binary_name, package in component.commands.items():
        produced = staging / _go_binary_name(package)
        if binary_name != produced.name:
            produced.rename(staging / binary_name)
    if component.files:
        upstream = _module_dir(component)
        for name, paths in component.files.items():
            target = staging / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if len(paths) == 1:
                shutil.copyfile(upstream / paths[0], target)
            else:
                documents = [(upstream / path).read_text().strip() for path in paths]
                target.write_text("\n---\n".join(documents) + "\n")
    (staging / ".complete").write_text(component.version + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)


def _module_dir(component: Component) -> Path:
    """Where the module cache holds the upstream module the wrapper requires."""
    listed = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", component.upstream],
        cwd=component.module,
        env=go_environment(),
        capture_output=True,
        text=True,
    )
    if listed.returncode != 0 or not listed.stdout.strip():
        raise BuildError(f"cannot find {component.upstream} in the module cache: {listed.stderr}")
    return Path(listed.stdout.strip())


def _go_binary_name(package: str) -> str:
    """The name `go build -o DIR/` gives a main package: its last element, or the one before a
    major-version suffix (`go.etcd.io/etcd/server/v3` -> `server`)."""
    elements = package.split("/")
    last = elements[-1]
    if len(elements) > 1 and last[:1] == "v" and last[1:].isdigit():
        return elements[-2]
    return last


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m components.build", description=__doc__)
    parser.add_argument("names", nargs="*", help=f"of {', '.join(COMPONENTS)} (default: all)")
    names = parser.parse_args(argv).names or list(COMPONENTS)
    unknown = sorted(set(names) - set(COMPONENTS))
    if unknown:
        parser.error(f"unknown component(s) {', '.join(unknown)}; known: {', '.join(COMPONENTS)}")
    try:
        for name in names:
            print(f"{name}: {ensure(name)}")
    except BuildError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
