"""`colonyctl` without any server: input is validated through `models/` before anything starts.

Every refusal is one line on stderr (`error: <field>: <rule>`) and exit code 2, the parser's own
(a bad `--count`, a missing `--name`) included; nothing here needs Temporal, the host provider or
Kubernetes (the host provider config points nowhere, so the catalog check is skipped, and
validation fails before any connection would be made). Exit codes are decided by error type.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from typer.testing import CliRunner

from clients.errors import (
    ConflictError,
    ExitCode,
    InvalidRequestError,
    NotFoundError,
    OperationFailedError,
    temporal_unreachable,
)
from clients.temporal import update_error
from infra.config import ColonySettings
from starter.cli import app, normalize_argv

COLONYCTL = str(Path(sys.executable).parent / "colonyctl")

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


@pytest.mark.parametrize(
    ("args", "line"),
    [
        pytest.param(
            ("node-pool", "scale", "x", "gpu", "--count", "two"),
            "error: count: 'two' is not a whole number",
            id="count-two",
        ),
        pytest.param(
            ("node-pool", "create", "c", "--count", "1", "--cpu-sku", "x"),
            "error: name: required (--name)",
            id="missing-name",
        ),
        pytest.param(("cluster", "get"), "error: name: required (NAME)", id="missing-argument"),
        pytest.param(
            ("cluster", "get", "c", "-o", "xml"),
            "error: output: 'xml' is not one of 'table', 'json', 'yaml'",
            id="bad-output",
        ),
        pytest.param(
            ("cluster", "get", "c", "--bogus"), "error: --bogus: no such option", id="no-option"
        ),
        pytest.param(
            ("node-pool", "scale", "x", "gpu", "--count"),
            "error: count: option '--count' requires an argument",
            id="no-value",
        ),
        pytest.param(
            ("clusters",),
            "error: command: no such command 'clusters' (did you mean 'cluster', 'class'?)",
            id="no-command",
        ),
        pytest.param(
            ("cluster", "get", "a", "b"),
            "error: arguments: got unexpected extra argument(s) (b)",
            id="extra-argument",
        ),
        pytest.param(
            ("cluster", "create", "ok", "--location-id", "fra1", "--bogus", "1"),
            "error: --bogus: no such option",
            id="create-no-option",
        ),
    ],
)
def test_parser_refusals_are_one_line(args: tuple[str, ...], line: str) -> None:
    code, stderr = invoke(*args)
    assert (code, stderr) == (2, line + "\n")


def test_a_help_hint_follows_a_refusal_only_on_a_terminal() -> None:
    args = [COLONYCTL, "node-pool", "scale", "x", "gpu", "--count", "two"]
    piped = subprocess.run(args, capture_output=True, text=True, env={**os.environ, **NO_SERVERS})
    assert (piped.returncode, piped.stderr) == (2, "error: count: 'two' is not a whole number\n")

    leader, follower = pty.openpty()
    try:
        process = subprocess.run(
            args, stdout=subprocess.DEVNULL, stderr=follower, env={**os.environ, **NO_SERVERS}
        )
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the terminal's last writer has gone
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(leader)
    lines = seen.decode().splitlines()
    assert process.returncode == 2
    assert lines == [
        "error: count: 'two' is not a whole number",
        "Try 'colonyctl node-pool scale --help' for help.",
    ]


def update_failed(error: ApplicationError) -> WorkflowUpdateFailedError:
    return WorkflowUpdateFailedError(error)


@pytest.mark.parametrize(
    ("cause", "expected", "code"),
    [
        pytest.param(
            ApplicationError("node pool 'x' does not exist", type="NotFound"),
            NotFoundError,
            ExitCode.NOT_FOUND,
            id="type-not-found",
        ),
        pytest.param(
            ApplicationError(
                "node pool 'x' does not exist", {"reason": "NotFound"}, type="OperationRejected"
            ),
            NotFoundError,
            ExitCode.NOT_FOUND,
            id="details-not-found",
        ),
        pytest.param(
            # The text alone decides nothing (it used to: "does not exist" meant exit 3).
            # A refusal by the cluster's state: a conflict (409 through the API), exit 2.
            ApplicationError("node pool 'x' does not exist", type="OperationRejected"),
            ConflictError,
            ExitCode.USAGE,
            id="rejected",
        ),
        pytest.param(
            ApplicationError("bad spec", type="InvalidSpec"),
            InvalidRequestError,
            ExitCode.USAGE,
            id="invalid-spec",
        ),
        pytest.param(
            ApplicationError("Update handler for 'cancel_operation' expected but not found"),
            OperationFailedError,
            ExitCode.FAILED,
            id="other",
        ),
    ],
)
def test_update_refusals_map_to_exit_codes_by_type(
    cause: ApplicationError, expected: type[Exception], code: ExitCode
) -> None:
    error = update_error("scale_node_pool", update_failed(cause))
    assert type(error) is expected
    assert error.exit_code is code
    assert error.message == f"scale_node_pool: {cause.message}"


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
    # One line naming the address, why and what to do; not the transport's debug text.
    assert (code, stderr) == (
        1,
        "error: temporal: cannot reach 127.0.0.1:1: connection refused "
        "(set TEMPORAL_ADDRESS, or start it with make run)\n",
    )


@pytest.mark.parametrize(
    ("cause", "line"),
    [
        pytest.param(
            "Failed client connect: Server connection error: tonic::transport::Error(Transport, "
            'ConnectError(ConnectError("tcp connect error", 127.0.0.1:1, Os { code: 111, kind: '
            'ConnectionRefused, message: "Connection refused" })))',
            "temporal: cannot reach a:1: connection refused (hint)",
            id="refused",
        ),
        pytest.param(
            "Failed client connect: Server connection error: tonic::transport::Error(Transport, "
            'ConnectError(ConnectError("dns error", Custom { kind: Uncategorized, error: "failed '
            'to lookup address information: Name or service not known" })))',
            "temporal: cannot reach a:1: its name does not resolve (hint)",
            id="dns",
        ),
        pytest.param("something else entirely", "temporal: cannot reach a:1 (hint)", id="other"),
    ],
)
def test_temporal_out_of_reach_is_said_once_without_the_transports_words(
    cause: str, line: str
) -> None:
    assert temporal_unreachable("a:1", RuntimeError(cause), hint="hint").message == line


def test_a_file_may_not_carry_unknown_fields(tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text("name: training\nlocationId: fra1\nnodePool: []\n")
    code, stderr = invoke("cluster", "create", "-f", str(spec))
    assert code == 2
    assert stderr.startswith("error: ")
    assert "unknown field 'nodePool'" in stderr


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
    assert "3 cluster, node pool, node, workspace or class not found" in text


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


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        pytest.param(
            'name: t\nlocationId: fra1\nnodePools:\n  - {name: gpu, sku: {gpuModelId: x}, count: "3"}\n',
            "error: nodePools[0].count: must be an integer, not the string '3'",
            id="count-string",
        ),
        pytest.param(
            "name: t\nlocationId: fra1\nnodePools:\n  - {name: gpu, sku: {gpuModelId: x}, count: true}\n",
            "error: nodePools[0].count: must be an integer, not the boolean true",
            id="count-boolean",
        ),
        pytest.param(
            "name: t\nlocationId: fra1\nwaitForCapacity: yes-please\n",
            "error: waitForCapacity: must be true or false, not the string 'yes-please'",
            id="flag-string",
        ),
        pytest.param(
            "name: t\nlocationId: fra1\ndrainParallelism: 2.5\n",
            "error: drainParallelism: must be an integer, not the number 2.5",
            id="count-fraction",
        ),
    ],
)
@pytest.mark.parametrize("command", [("cluster", "create", "-f"), ("apply", "-f")])
def test_a_file_gives_integers_and_booleans_of_their_type(
    tmp_path: Path, yaml_text: str, message: str, command: tuple[str, ...]
) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml_text)
    code, stderr = invoke(*command, str(spec))
    assert (code, stderr) == (2, message + "\n")


def test_the_command_line_converts_its_own_text_before_the_strict_model() -> None:
    """`count=2` is text on the command line, and becomes the integer the model takes: the request
    passes validation and fails only to reach Temporal (exit 1, not 2)."""
    code, stderr = invoke(
        "cluster", "create", "ok", "--location-id", "fra1",
        "--node-pool", "name=gpu,count=2,gpuModelId=h100-80gb",
    )  # fmt: skip
    assert (code, stderr.startswith("error: temporal: cannot reach")) == (1, True), stderr
    code, stderr = invoke(
        "cluster", "create", "ok", "--location-id", "fra1",
        "--node-pool", "name=gpu,count=two,gpuModelId=h100-80gb",
    )  # fmt: skip
    # The words README promises, as `--count two` gets them from the parser.
    assert (code, stderr) == (2, "error: nodePools[0].count: 'two' is not a whole number\n")


def test_version_is_an_option_of_the_command_line_too() -> None:
    result = CliRunner().invoke(app, ["--version"], env=NO_SERVERS)
    assert (result.exit_code, result.stdout.startswith("Colony ")) == (0, True), result.stdout
    assert "Temporal Python SDK" in result.stdout
    assert "--version" in CliRunner().invoke(app, ["--help"]).stdout


@pytest.mark.parametrize(
    ("args", "line"),
    [
        pytest.param(
            ("kubeconfig", "--output", "kc"), "error: cluster: required (CLUSTER)\n", id="none"
        ),
        pytest.param(
            ("kubeconfig", "a", "--cluster", "b", "--output", "kc"),
            "error: cluster: given twice, as 'a' and 'b' (give CLUSTER once)\n",
            id="two",
        ),
    ],
)
def test_kubeconfig_takes_the_cluster_as_every_command_does(
    args: tuple[str, ...], line: str
) -> None:
    assert invoke(*args) == (2, line)


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(("kubeconfig", "training", "--output"), id="argument"),
        pytest.param(("kubeconfig", "--cluster", "training", "--output"), id="former-option"),
    ],
)
def test_kubeconfig_writes_for_the_cluster_given_either_way(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """Past the cluster's name: the management kubeconfig (nonexistent here) is what refuses."""
    code, stderr = invoke(*args, str(tmp_path / "kc"))
    assert code == 2
    assert stderr.startswith("error: management cluster kubeconfig /nonexistent"), stderr


def test_apikey_create_help_names_every_permission() -> None:
    """Every permission a key can hold is offered where keys are made, by both its names."""
    from infra.keys import Permission
    from starter.commands.apikey import PERMISSIONS_HELP

    for permission in Permission:
        assert permission.value in PERMISSIONS_HELP
        assert permission.name.lower() in PERMISSIONS_HELP
