"""Colony's workspace catalog: every class valid and versioned, every ServiceTemplate valid for
k0rdent's real CRD (and the sim's), classes valid for the exalsius CRD, and each class deployable
with answers to its prompts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from catalog.workspaces import REPOSITORY_NAME, CatalogError, load_workspace_catalog
from models.base import user_input
from models.manifests import workspace_class_object
from models.sealed import SealedValue
from models.values import merge_workspace
from models.workspace import WorkspaceSpec
from models.workspace_class import EndpointProtocol, PromptType, WorkspaceClassSpec
from sim.apiserver.schema import unknown_fields, validate
from sim.charts import default_catalog
from sim.crds import crd_schema, load_colony_crds

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
REAL_K0RDENT_CRDS = SHARED / "k0rdent-crds"
EXALSIUS_CRDS = SHARED / "exalsius" / "operator-crds"

CATALOG = load_workspace_catalog()
CLASSES = [pytest.param(c, id=c.name) for c in CATALOG.classes]
TEMPLATES = [pytest.param(t, id=t.name) for t in CATALOG.service_templates]


def test_the_catalog_ships_what_colony_promises() -> None:
    assert [c.name for c in CATALOG.classes] == [
        "colony-jupyter-1-0-0",
        "colony-vllm-1-0-0",
        "colony-devbox-1-0-0",
    ]
    assert [t.chart for t in CATALOG.service_templates] == [
        (REPOSITORY_NAME, "colony-jupyter", "1.0.0"),
        (REPOSITORY_NAME, "colony-inference-stack", "1.0.0"),
        (REPOSITORY_NAME, "colony-vllm", "1.0.0"),
        (REPOSITORY_NAME, "colony-devbox", "1.0.0"),
    ]
    repository = CATALOG.helm_repository
    assert (repository["kind"], repository["metadata"]["name"]) == (
        "HelmRepository",
        REPOSITORY_NAME,
    )
    assert repository["spec"] == {
        "type": "oci",
        "url": "oci://ghcr.io/colony-dev/charts",
        "interval": "10m",
    }


@pytest.mark.parametrize("workspace_class", CLASSES)
def test_class_is_valid_user_input_and_versioned(workspace_class: WorkspaceClassSpec) -> None:
    again = user_input(
        WorkspaceClassSpec, workspace_class.model_dump(mode="json", exclude_none=True)
    )
    assert again == workspace_class
    template = CATALOG.service_template(workspace_class.service_template.name)
    assert template is not None
    assert template.chart is not None
    _, chart, version = template.chart
    versioned = f"{chart}-{version.replace('.', '-')}"
    assert workspace_class.name == versioned, "a class is named after its chart version"
    assert template.name == versioned


def test_what_each_class_offers() -> None:
    jupyter, vllm, devbox = CATALOG.classes
    assert [(e.name, e.protocol, e.port) for e in jupyter.access_endpoints] == [
        ("http", EndpointProtocol.HTTP, 8888)
    ]
    assert jupyter.default_resources.per_replica.gpu_count == 0, (
        "CPU unless a deployment asks for GPUs"
    )
    assert [(e.name, e.protocol, e.port) for e in vllm.access_endpoints] == [
        ("http", EndpointProtocol.HTTP, 8000)
    ]
    assert (vllm.default_resources.per_replica.gpu_count or 0) >= 1
    (stack,) = vllm.prerequisites
    assert (stack.service_template.name, stack.namespace) == (
        "colony-inference-stack-1-0-0",
        "colony-inference",
    )
    assert [(e.name, e.protocol, e.port) for e in devbox.access_endpoints] == [
        ("ssh", EndpointProtocol.SSH, 22)
    ]
    assert any(p.type is PromptType.PUBLIC_KEY and p.required for p in devbox.prompts)
    secrets = [
        p.helm_value_path for c in CATALOG.classes for p in c.prompts if p.type is PromptType.SECRET
    ]
    assert secrets == ["notebookPassword", "huggingfaceToken"]


def k0rdent_schema(kind: str, real: bool) -> dict[str, Any]:
    if real:
        path = REAL_K0RDENT_CRDS / "k0rdent.mirantis.com_servicetemplates.yaml"
        if not path.exists():
            pytest.skip(f"k0rdent's real CRDs are not at {REAL_K0RDENT_CRDS}")
        return crd_schema(yaml.safe_load(path.read_text()))
    (crd,) = [c for c in load_colony_crds() if c["spec"]["names"]["kind"] == kind]
    return crd_schema(crd)


@pytest.mark.parametrize(
    "real", [pytest.param(True, id="k0rdent-crd"), pytest.param(False, id="sim-crd")]
)
@pytest.mark.parametrize("template", TEMPLATES)
def test_service_template_is_valid_for_k0rdent(template: Any, real: bool) -> None:
    schema = k0rdent_schema("ServiceTemplate", real)
    obj = template.to_object()
    assert validate(schema, obj) == []
    assert unknown_fields(schema, obj) == []


@pytest.mark.parametrize("workspace_class", CLASSES)
def test_class_is_valid_for_the_exalsius_crd(workspace_class: WorkspaceClassSpec) -> None:
    path = EXALSIUS_CRDS / "workspaces.exalsius.ai_workspaceclasses.yaml"
    if not path.exists():
        pytest.skip(f"the exalsius CRDs are not at {EXALSIUS_CRDS}")
    schema = yaml.safe_load(path.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    stored = workspace_class_object(workspace_class)
    assert validate(schema, stored) == []
    assert unknown_fields(schema, stored) == []


ANSWERS: dict[str, dict[str, Any]] = {
    "colony-jupyter-1-0-0": {"jupyter.interface": "notebook"},
    "colony-vllm-1-0-0": {"vllm.model": "Qwen/Qwen3-8B", "vllm.maxModelLen": "4096"},
    "colony-devbox-1-0-0": {"ssh.authorizedKeys": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 me@laptop"},
}


@pytest.mark.parametrize("workspace_class", CLASSES)
def test_class_deploys_with_answers_and_injects_resources(
    workspace_class: WorkspaceClassSpec,
) -> None:
    sealed = {
        p.helm_value_path: SealedValue(
            key_id="k", scope=p.helm_value_path, ephemeral_key="e", nonce="n", ciphertext="c"
        )
        for p in workspace_class.prompts
        if p.type is PromptType.SECRET and p.required
    }
    spec = WorkspaceSpec.model_validate(
        {
            "name": "ws",
            "class": workspace_class.name,
            "cluster": "training",
            "resources": {"perReplica": {"gpuCount": 2, "gpuType": "H100"}},
            "answers": ANSWERS[workspace_class.name],
            "sealedAnswers": sealed,
        }
    )
    merged = merge_workspace(
        workspace_class, spec, gpu_resource_name="nvidia.com/gpu", nodes=["gpu-1"]
    )
    per_replica = workspace_class.default_resources.per_replica
    assert merged.values["resources"] == {
        "cpu": per_replica.cpu,
        "memory": per_replica.memory,
        "gpu": 2,
    }
    assert merged.values["replicas"] == 1
    assert merged.values["_exalsius"]["resources"]["perReplica"]["gpuCount"] == 2
    assert merged.values["_exalsius"]["scheduling"]["nodeSelector"] == {
        "exalsius.ai/gpu-model": "H100",
        "kubernetes.io/hostname": "gpu-1",
    }
    assert set(merged.secret_values) == set(sealed)


def test_vllm_tensor_parallelism_follows_the_gpus() -> None:
    vllm = CATALOG.workspace_class("colony-vllm-1-0-0")
    assert vllm is not None
    spec = WorkspaceSpec.model_validate(
        {
            "name": "llm",
            "class": vllm.name,
            "cluster": "c",
            "resources": {"perReplica": {"gpuCount": 4}},
        }
    )
    values = merge_workspace(vllm, spec).values
    assert values["vllm"] == {
        "model": "Qwen/Qwen3-1.7B",
        "maxModelLen": 8192,
        "dtype": "auto",
        "tensorParallelSize": 4,
    }
    assert "huggingfaceToken" not in values


@pytest.mark.parametrize("template", TEMPLATES)
def test_the_simulator_knows_the_charts(template: Any) -> None:
    """The simulated Sveltos installs these charts; skipped until the sim's chart catalog has them."""
    repository, chart, version = template.chart
    if default_catalog().get(repository, chart, version) is None:
        pytest.skip(f"the sim's chart catalog has no {repository}/{chart}:{version} yet")
    assert default_catalog().check(template.spec) is None


@pytest.mark.parametrize("workspace_class", [pytest.param(c, id=c.name) for c in CATALOG.classes])
def test_every_endpoint_names_a_service_its_chart_creates(workspace_class: Any) -> None:
    """Routes and port-forwards address `<release>-<endpoint>`: the chart must create that
    Service (a vLLM endpoint once called `api` beside the chart's port `http` left its route
    unresolved, BackendNotFound, until the routes' deadline)."""
    template = CATALOG.service_template(workspace_class.service_template.name)
    assert template is not None
    assert template.chart is not None
    chart = default_catalog().get(*template.chart)
    assert chart is not None
    release = "wsd-c-w"
    services = {
        workload.name.replace("{release}", release)
        + (f"-{port.name}" if workload.services_per_port or index else "")
        for workload in chart.workloads
        for index, port in enumerate(workload.ports)
    }
    for endpoint in workspace_class.access_endpoints:
        wanted = endpoint.service_name or f"{release}-{endpoint.name}"
        assert wanted in services, f"endpoint {endpoint.name}: no Service {wanted} in {services}"


def test_a_class_naming_a_missing_template_is_caught(tmp_path: Path) -> None:
    from catalog.workspaces import CATALOG_DIR, CONTENT_FILES, REPOSITORY_FILE

    for name in (REPOSITORY_FILE, *CONTENT_FILES):
        text = (CATALOG_DIR / name).read_text()
        if name == "colony-inference-stack.yaml":
            text = "# removed\n"
        (tmp_path / name).write_text(text)
    with pytest.raises(CatalogError) as caught:
        load_workspace_catalog(tmp_path)
    assert str(caught.value) == (
        "class colony-vllm-1-0-0 needs ServiceTemplate colony-inference-stack-1-0-0, which the "
        "catalog does not ship"
    )
