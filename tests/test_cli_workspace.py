"""`colonyctl workspace`, `class` and `apply -f` without any server: what is refused before anything
starts, how a deploy request is prepared (prompts asked or refused by name, answers checked
against the class, secrets sealed on the client), and every manifest under `../shared/exalsius/`
accepted or refused by `apply --dry-run` with the reason naming the field.

Temporal points nowhere (`127.0.0.1:1`): a refusal that needed it would exit 1, not 2.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from typer.testing import CliRunner

from catalog.workspaces import load_workspace_catalog
from clients.errors import InvalidRequestError
from clients.workspaces import (
    WorkspaceSummary,
    check_gpu_model,
    prepare_workspace,
    workspace_details,
)
from infra.sealing import (
    PUBLIC_KEY_ENV,
    Sealer,
    Unsealer,
    create_key_pair,
    workspace_scope,
)
from models.cluster import ClusterPhase, ClusterStatus
from models.deploy import gpu_model_problem, missing_prompts
from models.node_pool import NodePoolSpec, NodePoolStatus, NodeSku
from models.operations import AddNodePoolRequest, Operation
from models.workspace import WorkspaceSpec, WorkspaceStatus
from models.workspace_class import Prompt, PromptType, WorkspaceClassSpec
from starter import workspace_output
from starter.cli import app, normalize_argv
from starter.commands import workspace as workspace_command
from tests.test_manifests import ACCEPT, EXALSIUS, EXPECTED

CATALOG = load_workspace_catalog()
NO_SERVERS = {
    "COLONY_HOST_PROVIDER_CONFIG": "/nonexistent/hostprovider.json",
    "COLONY_MANAGEMENT_KUBECONFIG": "/nonexistent/management.kubeconfig",
    "TEMPORAL_ADDRESS": "127.0.0.1:1",
}


def invoke(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> Any:
    return CliRunner().invoke(
        app, normalize_argv(args), env={**NO_SERVERS, **(env or {})}, input=stdin
    )


def jupyter() -> WorkspaceClassSpec:
    found = CATALOG.workspace_class("colony-jupyter-1-0-0")
    assert found is not None
    return found


def notebook(**extra: Any) -> WorkspaceSpec:
    return WorkspaceSpec.model_validate(
        {"name": "nb", "class": "colony-jupyter-1-0-0", "cluster": "training", **extra}
    )


@pytest.fixture
def keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Unsealer:
    create_key_pair(tmp_path / "private.pem", tmp_path / "public.pem")
    monkeypatch.setenv(PUBLIC_KEY_ENV, str(tmp_path / "public.pem"))
    from infra.sealing import load_private_key

    return Unsealer(load_private_key(tmp_path / "private.pem"))


# --- Preparing a request ------------------------------------------------------------------------


def test_a_missing_required_prompt_is_refused_by_name() -> None:
    assert [p.helm_value_path for p in missing_prompts(notebook(), jupyter())] == [
        "notebookPassword"
    ]
    with pytest.raises(InvalidRequestError) as refused:
        prepare_workspace(notebook(), jupyter())
    assert refused.value.message == (
        "notebookPassword: required by class 'colony-jupyter-1-0-0' (prompt 'Notebook password'): "
        "give --set notebookPassword=..., or run on a terminal to be asked"
    )


def test_a_secret_given_with_set_is_sealed_for_its_workspace_and_path(keys: Unsealer) -> None:
    prepared = prepare_workspace(
        notebook(values={"notebookPassword": "s3cret", "jupyter": {"interface": "lab"}}),
        jupyter(),
    )
    assert "notebookPassword" not in prepared.values
    assert prepared.values == {"jupyter": {"interface": "lab"}}
    assert "s3cret" not in prepared.model_dump_json()
    sealed = prepared.sealed_answers["notebookPassword"]
    assert keys.unseal(sealed, workspace_scope("nb", "notebookPassword")) == "s3cret"


def test_missing_prompts_are_asked_for_secrets_included(keys: Unsealer) -> None:
    asked: list[str] = []

    def ask(prompt: Prompt) -> Any:
        asked.append(prompt.helm_value_path)
        return "typed-at-the-terminal"

    prepared = prepare_workspace(notebook(), jupyter(), ask=ask)
    assert asked == ["notebookPassword"], "the interface has a default: not asked"
    assert prepared.answers == {}
    secret = prepared.sealed_answers["notebookPassword"]
    assert keys.unseal(secret, workspace_scope("nb", "notebookPassword")) == (
        "typed-at-the-terminal"
    )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param(
            {"notebookPassword": "x", "jupyter": {"interface": "vim"}},
            "values: prompt 'Interface' (jupyter.interface) must be one of lab, notebook, got 'vim'",
            id="not-an-option",
        ),
        pytest.param(
            {"notebookPassword": "x", "jupyter": {"interface": 3}},
            "values: prompt 'Interface' (jupyter.interface) must be one of lab, notebook, got '3'",
            id="wrong-type",
        ),
    ],
)
def test_answers_are_checked_against_the_class(
    keys: Unsealer, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        prepare_workspace(notebook(values=values), jupyter())
    assert refused.value.message == message


def test_a_secret_without_the_public_key_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PUBLIC_KEY_ENV, "/nonexistent/public.pem")
    with pytest.raises(InvalidRequestError) as refused:
        prepare_workspace(notebook(values={"notebookPassword": "x"}), jupyter())
    assert refused.value.message.startswith("sealing: cannot read the sealing public key")
    assert "COLONY_SEALING_PUBLIC_KEY_FILE" in refused.value.message


def test_a_request_without_secrets_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PUBLIC_KEY_ENV, "/nonexistent/public.pem")
    sealer = Sealer(X25519PrivateKey.generate().public_key())
    sealed = sealer.seal("x", workspace_scope("nb", "notebookPassword"))
    prepared = prepare_workspace(notebook(sealedAnswers={"notebookPassword": sealed}), jupyter())
    assert prepared.sealed_answers == {"notebookPassword": sealed}


def gpu_cluster(*pools: NodeSku, adding: NodeSku | None = None) -> ClusterStatus:
    """Cluster `training` with a pool of each SKU (one add of `adding` queued)."""
    queued = (
        [
            Operation(
                id="op-0002",
                request=AddNodePoolRequest(pool=NodePoolSpec(name="more", sku=adding, count=1)),
            )
        ]
        if adding
        else []
    )
    return ClusterStatus(
        name="training",
        location_id="fra1",
        phase=ClusterPhase.READY,
        node_pools=[NodePoolStatus(name=f"p{i}", sku=sku, count=1) for i, sku in enumerate(pools)],
        queued_operations=queued,
    )


H100, A100 = NodeSku(gpu_model_id="h100-80gb"), NodeSku(gpu_model_id="a100-80gb")
CPU = NodeSku(cpu_sku="cpu-32c-256g")


@pytest.mark.parametrize(
    ("cluster", "resources", "problem"),
    [
        pytest.param(
            gpu_cluster(H100, A100, CPU),
            {"perReplica": {"gpuCount": 1, "gpuType": "h200"}},
            "resources.perReplica.gpuType: cluster 'training' has no GPU model 'h200' (its GPU "
            "models: a100-80gb, h100-80gb)",
            id="unknown-model-lists-the-clusters",
        ),
        pytest.param(
            gpu_cluster(CPU),
            {"perReplica": {"gpuCount": 1, "gpuType": "h100-80gb"}},
            "resources.perReplica.gpuType: cluster 'training' has no GPU model 'h100-80gb' (it "
            "has no GPUs)",
            id="a-cpu-cluster",
        ),
        pytest.param(
            gpu_cluster(H100),
            {"perReplica": {"gpuCount": 2, "gpuType": "h100-80gb"}},
            None,
            id="its-model",
        ),
        pytest.param(
            gpu_cluster(CPU, adding=A100),
            {"perReplica": {"gpuCount": 1, "gpuType": "a100-80gb"}},
            None,
            id="a-pool-being-added",
        ),
        pytest.param(gpu_cluster(CPU), {"perReplica": {"gpuCount": 1}}, None, id="any-model"),
        pytest.param(
            gpu_cluster(CPU),
            {"perReplica": {"gpuCount": 0, "gpuType": "h200"}},
            None,
            id="no-gpus-asked",
        ),
        pytest.param(
            gpu_cluster(),
            {"perReplica": {"gpuCount": 1, "gpuType": "h200"}},
            None,
            id="a-raw-clusters-gpus-are-the-ledgers-to-judge",
        ),
    ],
)
def test_a_gpu_model_the_cluster_lacks_is_refused_naming_its_models(
    cluster: ClusterStatus, resources: dict[str, Any], problem: str | None
) -> None:
    spec = notebook(resources=resources)
    assert gpu_model_problem("training", cluster, spec, jupyter()) == problem
    if problem:
        with pytest.raises(InvalidRequestError) as refused:
            check_gpu_model(spec, jupyter(), cluster)
        assert refused.value.message == problem


def test_terminal_prompts_hide_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    hidden: list[str] = []

    def getpass(label: str, stream: Any = None) -> str:
        hidden.append(label)
        return "" if len(hidden) == 1 else "typed"  # an empty answer is asked again

    monkeypatch.setattr("getpass.getpass", getpass)
    secret = Prompt(helm_value_path="pw", display_name="Password", type=PromptType.SECRET)
    assert workspace_command.ask_prompt(secret) == "typed"
    assert hidden == ["Password: ", "Password: "]


def test_the_web_ui_details_say_what_was_asked_for() -> None:
    spec = notebook(resources={"perReplica": {"gpuCount": 2, "gpuType": "h100-80gb"}})
    details = workspace_details(spec, jupyter())
    assert details.splitlines()[0] == (
        "**Workspace** `nb` of class `colony-jupyter-1-0-0` on cluster `training`"
    )
    assert "GPUs: 1 x 2 (h100-80gb)" in details
    assert "Endpoints: http (HTTP 8888)" in details


# --- Refused before anything starts -------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "line"),
    [
        pytest.param(
            ("workspace", "deploy", "NB", "--class", "colony-jupyter-1-0-0", "--cluster", "c"),
            "error: name: workspace name 'NB' must be a DNS label: lowercase letters, digits and "
            "'-', starting and ending with a letter or digit",
            id="name",
        ),
        pytest.param(
            ("workspace", "deploy", "nb", "--cluster", "c"),
            "error: class: required (--class)",
            id="no-class",
        ),
        pytest.param(
            (
                "workspace",
                "deploy",
                "nb",
                "--class",
                "x-1-0-0",
                "--cluster",
                "c",
                "--set",
                "a[x]=1",
            ),
            None,
            id="bad-set",
        ),
        pytest.param(
            ("workspace", "deploy", "nb", "--class", "x-1-0-0", "--cluster", "c", "--gpus", "65"),
            "error: resources.perReplica.gpuCount: gpuCount must be from 0 to 64 GPUs per "
            "replica, got 65",
            id="too-many-gpus",
        ),
        pytest.param(
            (
                "workspace",
                "deploy",
                "nb",
                "--class",
                "x-1-0-0",
                "--cluster",
                "c",
                "--set",
                "_exalsius.resources.replicas=2",
            ),
            "error: values: values must not set '_exalsius': Colony writes it from the "
            "resources; set resources instead",
            id="reserved-values",
        ),
        pytest.param(
            ("cluster", "create", "c", "--location-id", "fra1", "--tenant-gateway-domain", "Lab"),
            "error: tenantGatewayDomain: tenantGatewayDomain 'Lab' must be a DNS name such as "
            "'dos-lab.example': lowercase labels of letters, digits and '-', separated by dots",
            id="gateway-domain",
        ),
    ],
)
def test_refused_on_one_line_before_anything_starts(
    args: tuple[str, ...], line: str | None
) -> None:
    result = invoke(*args)
    assert result.exit_code == 2, result.stderr
    assert len(result.stderr.splitlines()) == 1
    if line is not None:
        assert result.stderr == line + "\n"
    else:
        assert result.stderr.startswith("error: set: ")


def test_a_values_file_must_be_a_mapping(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("- a\n- b\n")
    result = invoke(
        "workspace", "deploy", "nb", "--class", "x-1-0-0", "--cluster", "c", "-f", str(values)
    )
    assert (result.exit_code, result.stderr) == (
        2,
        f"error: values: {values} must hold a mapping of Helm values\n",
    )


def test_values_files_then_sets_in_helms_order(tmp_path: Path) -> None:
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("a: {b: 1, c: 1}\nlist: [1, 2]\n")
    second.write_text("a: {c: 2}\n")
    spec = workspace_command.build_workspace_spec(
        name="nb", class_name="x-1-0-0", cluster="c", gpus=2, gpu_model="h100-80gb",
        replicas=None, sets=["a.c=3", "list={9}"], string_sets=["s=007"],
        values_files=[first, second], suspended=False,
    )  # fmt: skip
    assert spec.values == {"a": {"b": 1, "c": 3}, "list": [9], "s": "007"}
    assert spec.resources is not None
    assert spec.resources.per_replica.gpu_count == 2
    assert spec.resources.per_replica.gpu_type == "h100-80gb"


def test_class_publish_refuses_a_file_without_a_class(tmp_path: Path) -> None:
    template = CATALOG.service_template("colony-jupyter-1-0-0")
    assert template is not None
    path = tmp_path / "template.yaml"
    path.write_text(yaml.safe_dump(template.to_object()))
    result = invoke("class", "publish", "-f", str(path))
    assert (result.exit_code, result.stderr) == (
        2,
        f"error: file: {path} holds no WorkspaceClass\n",
    )


def test_class_publish_refuses_a_template_no_class_uses(tmp_path: Path) -> None:
    path = tmp_path / "classes.yaml"
    jupyter_file = (Path("catalog") / "colony-jupyter.yaml").read_text()
    stack = (Path("catalog") / "colony-inference-stack.yaml").read_text()
    path.write_text(jupyter_file + "\n---\n" + stack)
    result = invoke("class", "publish", "-f", str(path))
    assert result.exit_code == 2
    assert result.stderr == (
        "error: kind: ServiceTemplate colony-inference-stack-1-0-0 is not used by a class of this "
        "file (colonyctl apply -f publishes templates on their own)\n"
    )


def test_apply_takes_a_colony_with_the_other_kinds(tmp_path: Path) -> None:
    path = tmp_path / "colony.yaml"
    path.write_text(
        "apiVersion: colony.dev/v1\nkind: Colony\nmetadata: {name: fleet}\n"
        "spec: {colonyClusters: [{clusterName: west, locationId: fra1}]}\n"
    )
    result = invoke("apply", "--dry-run", "-f", str(path))
    assert (result.exit_code, result.stdout) == (
        0,
        "colony/fleet valid (dry run: nothing applied)\n",
    )


def test_apply_reads_stdin_and_lists_every_problem_on_one_line() -> None:
    text = (
        "apiVersion: workspaces.exalsius.ai/v1\nkind: WorkspaceDeployment\nmetadata: {name: a}\n"
        "spec: {clusterDeploymentRef: {name: c, namespace: kcm-system}}\n---\n"
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
    )
    result = invoke("apply", "-f", "-", stdin=text)
    assert result.exit_code == 2
    assert result.stderr == (
        "error: stdin: document 1 (WorkspaceDeployment a): spec.workspaceClassRef: required; "
        "stdin: document 2 (Pod p): kind: Colony does not take v1 Pod; it takes "
        "workspaces.exalsius.ai/v1 WorkspaceClass, workspaces.exalsius.ai/v1 WorkspaceDeployment, "
        "k0rdent.mirantis.com/v1beta1 ServiceTemplate, infra.exalsius.ai/v1 Colony, colony.dev/v1 "
        "Cluster, colony.dev/v1 WorkspaceClass, colony.dev/v1 Workspace, colony.dev/v1 Colony\n"
    )


def test_apply_dry_run_of_the_shipped_catalog() -> None:
    files = [
        "-f",
        "catalog/colony-jupyter.yaml",
        "-f",
        "catalog/colony-inference-stack.yaml",
        "-f",
        "catalog/colony-vllm.yaml",
    ]
    result = invoke("apply", *files, "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [
        "servicetemplate/colony-jupyter-1-0-0 valid (dry run: nothing applied)",
        "workspaceclass/colony-jupyter-1-0-0 valid (dry run: nothing applied)",
        "servicetemplate/colony-inference-stack-1-0-0 valid (dry run: nothing applied)",
        "servicetemplate/colony-vllm-1-0-0 valid (dry run: nothing applied)",
        "workspaceclass/colony-vllm-1-0-0 valid (dry run: nothing applied)",
    ]


# --- Every shared exalsius manifest: accepted, or refused naming the field ----------------------


@pytest.mark.parametrize("name", [pytest.param(name, id=name) for name in sorted(EXPECTED)])
def test_apply_dry_run_of_every_shared_manifest(name: str) -> None:
    path = EXALSIUS / name
    if not path.exists():
        pytest.skip(f"the exalsius manifests are not at {EXALSIUS}")
    outcome, detail = EXPECTED[name]
    result = invoke("apply", "-f", str(path), "--dry-run", "-o", "json")
    if outcome == ACCEPT:
        assert result.exit_code == 0, result.stderr
        import json

        assert [(d["kind"], d["name"]) for d in json.loads(result.stdout)] == detail
        return
    field, reason = detail
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"error: {path}: document 1 (")
    assert f": {field}: " in result.stderr
    assert reason in result.stderr


# --- The text views -----------------------------------------------------------------------------


def test_workspace_get_shows_the_failure_context(capsys: pytest.CaptureFixture[str]) -> None:
    status = WorkspaceStatus.model_validate(
        {
            "name": "nb",
            "class": "colony-jupyter-1-0-0",
            "cluster": "training",
            "phase": "Failed",
            "message": "wsd-training-nb failed: image pull",
            "conditions": [
                {"type": "HelmReleaseReady", "status": "False", "reason": "HelmReleaseFailed"}
            ],
            "admission": {
                "requestId": "r",
                "state": "waiting",
                "position": 2,
                "message": "waiting for GPU capacity: position 2 in the queue for any GPU",
            },
            "failureContext": {
                "phaseWhenFailed": "Deploying",
                "reason": "wsd-training-nb failed: image pull",
                "serviceSetStatus": {
                    "name": "wsd-training-nb",
                    "services": [
                        {"name": "wsd-training-nb", "state": "Failed", "failureMessage": "boom"}
                    ],
                },
                "recentEvents": [
                    {"type": "Warning", "reason": "BackOff", "message": "Pod/x: pull"}
                ],
            },
        }
    )
    workspace_output.print_workspace(status)
    text = capsys.readouterr().out
    assert "PHASE:" in text
    assert "Failed" in text
    assert "ADMISSION:  waiting for GPUs: position 2\n" in text
    assert "phase when failed: Deploying" in text
    assert "service wsd-training-nb: Failed: boom" in text
    assert "Warning BackOff: Pod/x: pull" in text
    assert "HelmReleaseFailed" in text


@pytest.mark.parametrize(
    ("message", "resources", "line"),
    [
        pytest.param(
            "waiting for GPU capacity: position 1 in the queue for exalsius.ai/gpu-model=h100-80gb "
            "(1 x 1 GPU (exalsius.ai/gpu-model=h100-80gb))",
            {"perReplica": {"gpuCount": 1, "gpuType": "h100-80gb"}},
            "waiting for GPUs: position 1 in the queue for 1 x 1 GPU h100-80gb",
            id="once",
        ),
        pytest.param(
            "its GPUs' node left the cluster; waiting for GPU capacity: position 1 in the queue "
            "for any GPU (2 x 4 GPUs (any GPU))",
            {"replicas": 2, "perReplica": {"gpuCount": 4}},
            "its GPUs' node left the cluster; waiting for GPUs: position 1 in the queue for "
            "2 x 4 GPUs of any model",
            id="what-happened-kept",
        ),
        pytest.param("", None, "waiting for GPUs: position 1", id="nothing-known"),
    ],
)
def test_a_waiting_workspace_says_where_it_waits_once(
    message: str, resources: dict[str, Any] | None, line: str
) -> None:
    status = WorkspaceStatus.model_validate(
        {
            "name": "nb",
            "class": "colony-jupyter-1-0-0",
            "cluster": "training",
            "phase": "Waiting",
            "resolvedResources": resources,
            "admission": {"requestId": "r", "state": "waiting", "position": 1, "message": message},
        }
    )
    assert workspace_output.admission_text(status) == line


# --- workspace list -------------------------------------------------------------------------------

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("ago", "age"),
    [
        pytest.param(timedelta(seconds=45), "45s", id="seconds"),
        pytest.param(timedelta(minutes=12, seconds=5), "12m", id="minutes"),
        pytest.param(timedelta(hours=5, minutes=59), "5h", id="hours"),
        pytest.param(timedelta(days=3, hours=2), "3d", id="days"),
        pytest.param(timedelta(seconds=-3), "0s", id="clock-skew"),
    ],
)
def test_age_is_said_as_kubectl_says_it(ago: timedelta, age: str) -> None:
    assert workspace_output.age_text((NOW - ago).isoformat(), NOW) == age


def test_an_unknown_start_has_no_age() -> None:
    assert workspace_output.age_text("", NOW) == "-"


def summary(name: str, **extra: Any) -> WorkspaceSummary:
    fields: dict[str, Any] = {
        "cluster": "training",
        "class_name": "colony-jupyter-1-0-0",
        "phase": "Running",
        "workflow_id": f"workspace/{name}",
        "started": (NOW - timedelta(minutes=3)).isoformat(),
    }
    return WorkspaceSummary(name=name, **{**fields, **extra})


def test_workspaces_are_listed_in_natural_order_and_wide_adds_gpus_position_and_age() -> None:
    found = [
        summary("burst-10", phase="Waiting", position=2, gpus=4),
        summary("burst-2", gpus=None),
        summary("burst-1", organization="acme", gpus=0),
    ]
    ordered = sorted(found, key=lambda w: w.order)
    assert [(w.organization, w.name) for w in ordered] == [
        ("", "burst-2"),
        ("", "burst-10"),
        ("acme", "burst-1"),
    ]
    columns, rows = workspace_output.workspace_rows(ordered, now=NOW)
    assert columns == ("ORGANIZATION", "NAME", "CLUSTER", "CLASS", "PHASE", "STARTED")
    assert rows[1][4] == "Waiting (position 2)"
    columns, rows = workspace_output.workspace_rows(ordered, wide=True, now=NOW)
    assert columns[5:8] == ("GPUS", "POSITION", "AGE")
    assert [row[:8] for row in rows] == [
        ("-", "burst-2", "training", "colony-jupyter-1-0-0", "Running", "-", "-", "3m"),
        ("-", "burst-10", "training", "colony-jupyter-1-0-0", "Waiting", 4, 2, "3m"),
        ("acme", "burst-1", "training", "colony-jupyter-1-0-0", "Running", 0, "-", "3m"),
    ]


def test_only_the_list_takes_wide() -> None:
    refused = CliRunner().invoke(app, ["workspace", "get", "nb", "-o", "wide"])
    assert refused.exit_code == 2
    assert "wide" in refused.stderr
