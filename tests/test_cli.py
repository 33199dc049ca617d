"""`colonyctl` without any server: input is validated through `models/` before anything starts.

Every refusal is one line on stderr (`error: <field>: <rule>`) and exit code 2; nothing here needs
Temporal, the host provider or Kubernetes (the host provider config points nowhere, so the catalog
check is skipped, and validation fails before any connection would be made).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from activities.settings import ColonySettings
from starter.cli import app, normalize_argv

NO_SERVERS = {
    "COLONY_HOST_PROVIDER_CONFIG": "/nonexistent/hostprovider.json",
    "COLONY_MANAGEMENT_KUBECONFIG": "/nonexistent/management.kubeconfig",
    "TEMPORAL_ADDRESS": "127.0.0.1:1",
}


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, normalize_argv(args), env=NO_SERVERS)
    return result.exit_code, result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ("cluster", "create", "Training", "--location-id", "fra1"),
            "error: name: cluster name 'Training' may contain only lowercase letters, digits and hyphens",
            id="uppercase-name",
        ),
        pytest.param(
            ("cluster", "create", "9lives", "--location-id", "fra1"),
            "error: name: cluster name '9lives' must start with a letter",
            id="digit-first",
        ),
        pytest.param(
            ("cluster", "create", "trailing-", "--location-id", "fra1"),
            "error: name: cluster name 'trailing-' must not end with a hyphen",
            id="trailing-hyphen",
        ),
        pytest.param(
            ("cluster", "create", "a" * 64, "--location-id", "fra1"),
            "is 64 characters long; at most 63 are allowed",
            id="too-long",
        ),
        pytest.param(
            ("cluster", "create", "ok"),
            "error: locationId: required",
            id="no-location",
        ),
        pytest.param(
            (
                "cluster",
                "create",
                "ok",
                "--location-id",
                "fra1",
                "--node-pool",
                "name=gpu,count=0,gpuModelId=h100-80gb",
            ),
            "error: nodePools[0].count: a node pool's count must be from 1 to 100, got 0",
            id="pool-count-0",
        ),
        pytest.param(
            (
                "cluster",
                "create",
                "ok",
                "--location-id",
                "fra1",
                "--node-pool",
                '{"name": "gpu", "count": 1, "sku": {"gpuModelId": "a", "cpuSku": "b"}}',
            ),
            "error: nodePools[0].sku: a node pool's sku needs exactly one of gpuModelId or cpuSku",
            id="two-skus",
        ),
        pytest.param(
            (
                "cluster",
                "create",
                "ok",
                "--location-id",
                "fra1",
                "--node-pool",
                "name=gpu,count=1,gpuModelId=a",
                "--node-pool",
                "name=gpu,count=1,cpuSku=b",
            ),
            "node pool 'gpu' is given twice",
            id="duplicate-pools",
        ),
        pytest.param(
            ("cluster", "create", "ok", "--location-id", "fra1", "--ready-deadline", "soon"),
            "error: readyDeadline: 'soon' is not a duration",
            id="bad-duration",
        ),
        pytest.param(
            ("node-pool", "scale", "c", "gpu", "--count", "101"),
            "error: count: a node pool's count must be from 1 to 100, got 101",
            id="scale-101",
        ),
        pytest.param(
            ("node-pool", "create", "c", "--name", "gpu", "--count", "2"),
            "error: sku: a node pool's sku needs exactly one of gpuModelId or cpuSku",
            id="pool-without-sku",
        ),
        pytest.param(
            (
                "node-pool",
                "create",
                "c",
                "--name",
                "gpu",
                "--count",
                "2",
                "--gpu-model-id",
                "x",
                "--label",
                "colony.dev/pool=x",
            ),
            "uses the prefix 'colony.dev/', which Colony reserves",
            id="reserved-label",
        ),
        pytest.param(
            (
                "node-pool",
                "create",
                "c",
                "--name",
                "gpu",
                "--count",
                "2",
                "--gpu-model-id",
                "x",
                "--taint",
                "dedicated=gpu:Sometimes",
            ),
            "error: taints[0].effect:",
            id="bad-taint-effect",
        ),
    ],
)
def test_invalid_requests_are_refused_on_one_line(args: tuple[str, ...], message: str) -> None:
    code, stderr = invoke(*args)
    assert code == 2
    assert message in stderr
    assert len(stderr.strip().splitlines()) == 1, stderr


def test_a_file_is_validated_like_flags(tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(
        "name: training\nlocationId: fra1\nnodePools:\n"
        "  - {name: gpu, sku: {gpuModelId: h100-80gb}, count: 2, taints: [{key: a, effect: NoSchedule}]}\n"
    )
    code, stderr = invoke("cluster", "create", "-f", str(spec))
    assert code == 2
    assert "would have no node free of NoSchedule and NoExecute taints" in stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    code, stderr = invoke("apply", "-f", str(broken))
    assert (code, stderr.startswith("error: file:")) == (2, True)


def test_unreachable_temporal_is_a_failure_not_a_crash() -> None:
    code, stderr = invoke("cluster", "get", "training")
    assert code == 1
    assert stderr.startswith("error: cannot reach Temporal at 127.0.0.1:1")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param(["--drain=false"], ["--no-drain"], id="drain-false"),
        pytest.param(["--drain=true"], ["--drain"], id="drain-true"),
        pytest.param(["--force=0"], ["--no-force"], id="force-0"),
        pytest.param(["--output=json"], ["--output=json"], id="untouched"),
    ],
)
def test_boolean_flags_accept_the_products_spelling(argv: list[str], expected: list[str]) -> None:
    assert normalize_argv(argv) == expected


def test_help_documents_exit_codes() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    assert "3 cluster, node pool or node not found" in text


def test_settings_defaults_and_link(tmp_path: Path) -> None:
    config = tmp_path / "hp.json"
    config.write_text('{"url": "http://127.0.0.1:9999/", "apiKey": "k"}')
    settings = ColonySettings.from_env({"COLONY_HOST_PROVIDER_CONFIG": str(config)})
    assert settings.temporal_address == "127.0.0.1:7233"
    assert settings.task_queue == "colony"
    assert settings.require_host_provider() == ("http://127.0.0.1:9999", "k")
    assert "k" not in repr(settings.host_provider_api_key)
    assert (
        settings.workflow_link("cluster/training")
        == "http://127.0.0.1:8233/namespaces/default/workflows/cluster%2Ftraining"
    )
