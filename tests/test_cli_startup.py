"""What `colonyctl` imports before it answers: its start-up time is mostly imports (issue 10:
every call took 1.2-1.4 s).

- importing the entry module (`starter.cli`) imports the standard library only;
- `--help` and a refused flag or value need no client library (Temporal, Kubernetes, httpx, rich);
- a cached `colonyctl token`, as the kubeconfig runs it (`python -S -P -c ...`), imports nothing
  but a few standard-library modules: kubectl pays for it before each of its commands.

Each check runs a fresh interpreter, so what an earlier test imported does not count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clients.credentials import PLUGIN_CODE, token_plugin
from starter import token_cache

ROOT = Path(__file__).resolve().parents[1]
CLIENT_LIBRARIES = (
    "temporalio",
    "kubernetes",
    "rich",
    "httpx",
    "urllib3",
    "grpc",
    "yaml",
    "opentelemetry",
)
NO_SERVERS = {
    "COLONY_HOST_PROVIDER_CONFIG": "/nonexistent/hostprovider.json",
    "COLONY_MANAGEMENT_KUBECONFIG": "/nonexistent/management.kubeconfig",
    "TEMPORAL_ADDRESS": "127.0.0.1:1",
}


def modules_after(code: str) -> set[str]:
    """Top-level packages imported once `code` has run in a fresh interpreter."""
    script = (
        "import sys, json, io, contextlib\n"
        "before = set(sys.modules)\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        f"    {code}\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in set(sys.modules) - before})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={**os.environ, **NO_SERVERS},
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_the_entry_module_imports_the_standard_library_only() -> None:
    imported = modules_after("import starter.cli")
    assert not imported & {*CLIENT_LIBRARIES, "typer", "pydantic", "models", "activities"}, imported


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["--help"], id="help"),
        pytest.param(["cluster", "create", "--help"], id="command-help"),
        pytest.param(["node-pool", "scale", "x", "gpu", "--count", "two"], id="bad-count"),
        pytest.param(["cluster", "create", "Training", "--location-id", "fra1"], id="bad-name"),
        pytest.param(["node-pool", "create", "c", "--count", "1"], id="missing-name"),
    ],
)
def test_help_and_refusals_import_no_client_library(argv: list[str]) -> None:
    imported = modules_after(f"import starter.cli; starter.cli.run({argv!r})")
    assert not imported & set(CLIENT_LIBRARIES), imported


def test_a_cached_token_imports_almost_nothing(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "COLONY_CACHE_DIR": str(tmp_path),
        "COLONY_MANAGEMENT_KUBECONFIG": "/m/kubeconfig",
        "KUBERNETES_EXEC_INFO": '{"kind":"ExecCredential"}',
    }
    path = token_cache.cache_path(env, "training", "kcm-system")
    token_cache.write(
        path,
        {
            "cluster": "training",
            "namespace": "kcm-system",
            "management": "/m/kubeconfig",
            "token": "cached-token",
            "expirationTimestamp": "2099-01-01T00:00:00Z",
            "expires": "4070908800",
            "handedTo": "",
        },
    )
    command, args, plugin_env = token_plugin("training", "kcm-system")
    assert args[:4] == ["-S", "-P", "-c", PLUGIN_CODE]
    done = subprocess.run(
        [command, "-X", "importtime", *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,  # not the checkout: the plugin finds `starter` through PYTHONPATH alone
        env={**env, **plugin_env},
    )
    assert json.loads(done.stdout)["status"]["token"] == "cached-token"
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines()[1:]}
    heavy = {"json", "typing", "datetime", "re", "site", "runpy", *CLIENT_LIBRARIES}
    assert not imported & heavy, sorted(imported & heavy)
    assert {"starter", "starter.token_cache"} <= imported


def test_version_names_colony_and_the_temporal_sdk_from_metadata_alone() -> None:
    """`colonyctl --version` reads the packages' metadata: neither the SDK nor the command line is
    imported to answer it."""
    from importlib import metadata

    done = subprocess.run(
        [str(Path(sys.executable).parent / "colonyctl"), "--version"],
        capture_output=True,
        text=True,
        env={**os.environ, **NO_SERVERS},
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        f"Colony {metadata.version('colony')} "
        f"(Temporal Python SDK {metadata.version('temporalio')})\n"
    )
    imported = modules_after("import starter.cli; starter.cli.run(['--version'])")
    assert not imported & {*CLIENT_LIBRARIES, "typer", "pydantic"}, imported
