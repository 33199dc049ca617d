"""`python worker.py` and `python watcher.py` started while Temporal is out of reach end at once
with one line saying where and why (as `colonyctl` says it: `infra.unreachable`), not the SDK's
transport error, and a non-zero exit status (`infra.process.UNREACHABLE_EXIT_STATUS`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.ports import free_port
from infra.process import UNREACHABLE_EXIT_STATUS

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("program", ["worker.py", "watcher.py"])
def test_a_process_started_without_temporal_says_so_in_one_line(
    program: str, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "management.kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    provider = tmp_path / "hostprovider.json"
    provider.write_text(json.dumps({"url": "http://127.0.0.1:1", "apiKey": "k"}))
    address = f"127.0.0.1:{free_port()}"  # nothing listens there, nor will (`infra.ports`)
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": address,
        "COLONY_MANAGEMENT_KUBECONFIG": str(kubeconfig),
        "COLONY_HOST_PROVIDER_CONFIG": str(provider),
    }
    done = subprocess.run(
        [sys.executable, program], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == UNREACHABLE_EXIT_STATUS != 0
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, done.stderr
    assert errors[0].endswith(f": temporal: cannot reach {address}: connection refused")
    assert "tonic" not in done.stderr
    assert "Traceback" not in done.stderr
