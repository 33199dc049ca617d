"""Manifests: every file under ../shared/exalsius/ is accepted or refused as decided below, refusals
name the document and the field, Colony's own forms parse, and the classes Colony stores validate
against the exalsius WorkspaceClass CRD."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import yaml

from models.cluster import ClusterSpec
from models.manifests import (
    ColonySpec,
    ManifestError,
    ManifestKind,
    ServiceTemplateManifest,
    parse_manifests,
    workspace_class_object,
)
from models.sealed import SealedValue
from models.value_paths import MISSING, get_path, parse_value_path
from models.values import merge_workspace, split_plaintext_secrets
from models.workspace import WorkspaceSpec
from models.workspace_class import WorkspaceClassSpec
from sim.apiserver.schema import unknown_fields, validate

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
EXALSIUS = SHARED / "exalsius"

ACCEPT = "accept"
REFUSE = "refuse"

# The decision for every file under ../shared/exalsius/, and why. A file without a decision fails
# `test_every_shared_manifest_has_a_decision`, so a new one cannot slip by unjudged.
EXPECTED: dict[str, tuple[str, Any]] = {
    # CRDs are what the exalsius operator's chart installs; Colony takes the objects they define
    # (and stores classes as such objects), never the definitions.
    "operator-crds/infra.exalsius.ai_colonies.yaml": (
        REFUSE,
        ("kind", "Colony does not take apiextensions.k8s.io/v1 CustomResourceDefinition"),
    ),
    "operator-crds/workspaces.exalsius.ai_workspaceclasses.yaml": (
        REFUSE,
        ("kind", "Colony does not take apiextensions.k8s.io/v1 CustomResourceDefinition"),
    ),
    "operator-crds/workspaces.exalsius.ai_workspacedeployments.yaml": (
        REFUSE,
        ("kind", "Colony does not take apiextensions.k8s.io/v1 CustomResourceDefinition"),
    ),
    # A Colony whose only cluster is a raw ClusterDeployment spec (docker template): accepted as
    # written, the cluster is created from that spec.
    "operator-examples/docker-colony.yaml": (ACCEPT, [("Colony", "docker-colony")]),
    # Written for an older Colony API: k8sVersion, hostedControlPlaneEnabled, externalAddress and
    # remoteClusterEnabled are not in the CRD, so `kubectl apply` (strict validation) refuses it too.
    "operator-examples/remote-colony.yaml": (
        REFUSE,
        ("spec.externalAddress", "unknown field 'externalAddress'"),
    ),
    # The operator's examples: four unversioned classes and deployments of them.
    "operator-examples/workspaces_workspace-classes.yaml": (
        ACCEPT,
        [
            ("WorkspaceClass", "jupyter-notebook"),
            ("WorkspaceClass", "llm-inference"),
            ("WorkspaceClass", "slurm-cluster"),
            ("WorkspaceClass", "dev-pod"),
        ],
    ),
    "operator-examples/workspaces_workspace-deployment-devpod.yaml": (
        ACCEPT,
        [("Workspace", "thorsten-dev")],
    ),
    "operator-examples/workspaces_workspace-deployment-jupyter.yaml": (
        ACCEPT,
        [("Workspace", "thorsten-nb")],
    ),
    "operator-examples/workspaces_workspace-deployment-llm-rawselector.yaml": (
        ACCEPT,
        [("Workspace", "thorsten-llama-l40")],
    ),
    "operator-examples/workspaces_workspace-deployment-llm.yaml": (
        ACCEPT,
        [("Workspace", "thorsten-llama")],
    ),
    "operator-examples/workspaces_workspace-deployment-slurm.yaml": (
        ACCEPT,
        [("Workspace", "thorsten-slurm")],
    ),
    # The workspace hub: versioned classes, their ServiceTemplates, and example deployments.
    "workspace-hub/examples_devpod_0.2.0_example-workspacedeployment.yaml": (
        ACCEPT,
        [("Workspace", "my-devpod")],
    ),
    "workspace-hub/examples_jupyter-notebook_0.3.0_example-workspacedeployment.yaml": (
        ACCEPT,
        [("Workspace", "my-notebook")],
    ),
    "workspace-hub/examples_llm-d-model_0.3.0_example-workspacedeployment.yaml": (
        ACCEPT,
        [("Workspace", "my-llm-model")],
    ),
    "workspace-hub/examples_marimo_0.3.0_example-workspacedeployment.yaml": (
        ACCEPT,
        [("Workspace", "my-marimo")],
    ),
    "workspace-hub/manifests_devpod_0.2.0_servicetemplate.yaml": (
        ACCEPT,
        [("ServiceTemplate", "devpod-0-2-0")],
    ),
    "workspace-hub/manifests_devpod_0.2.0_workspaceclass.yaml": (
        ACCEPT,
        [("WorkspaceClass", "devpod-0-2-0")],
    ),
    "workspace-hub/manifests_jupyter-notebook_0.3.0_servicetemplate.yaml": (
        ACCEPT,
        [("ServiceTemplate", "jupyter-notebook-0-3-0")],
    ),
    "workspace-hub/manifests_jupyter-notebook_0.3.0_workspaceclass.yaml": (
        ACCEPT,
        [("WorkspaceClass", "jupyter-notebook-0-3-0")],
    ),
    "workspace-hub/manifests_llm-d-infra_0.3.0_servicetemplate.yaml": (
        ACCEPT,
        [("ServiceTemplate", "llm-d-infra-0-3-0")],
    ),
    "workspace-hub/manifests_llm-d-model_0.3.0_servicetemplate.yaml": (
        ACCEPT,
        [("ServiceTemplate", "llm-d-model-0-3-0")],
    ),
    "workspace-hub/manifests_llm-d-model_0.3.0_workspaceclass.yaml": (
        ACCEPT,
        [("WorkspaceClass", "llm-d-model-0-3-0")],
    ),
    "workspace-hub/manifests_marimo_0.3.0_servicetemplate.yaml": (
        ACCEPT,
        [("ServiceTemplate", "marimo-0-3-0")],
    ),
    "workspace-hub/manifests_marimo_0.3.0_workspaceclass.yaml": (
        ACCEPT,
        [("WorkspaceClass", "marimo-0-3-0")],
    ),
}


def shared_files() -> list[str]:
    if not EXALSIUS.is_dir():
        return []
    return sorted(
        str(p.relative_to(EXALSIUS)) for p in EXALSIUS.rglob("*") if p.suffix in (".yaml", ".yml")
    )


def need_shared() -> None:
    if not EXALSIUS.is_dir():
        pytest.skip(f"the exalsius manifests are not at {EXALSIUS}")


def test_every_shared_manifest_has_a_decision() -> None:
    need_shared()
    assert set(shared_files()) == set(EXPECTED)


@pytest.mark.parametrize("name", [pytest.param(name, id=name) for name in sorted(EXPECTED)])
def test_shared_manifest(name: str) -> None:
    need_shared()
    path = EXALSIUS / name
    if not path.exists():
        pytest.skip(f"{name} is not in this copy of the shared folder")
    outcome, detail = EXPECTED[name]
    if outcome == ACCEPT:
        manifests = parse_manifests(path.read_text(), name)
        assert [(m.kind.value, m.name) for m in manifests] == detail
        return
    field, reason = detail
    with pytest.raises(ManifestError) as caught:
        parse_manifests(path.read_text(), name)
    problem = caught.value.problems[0]
    assert problem.field == field
    assert reason in problem.message
    assert str(caught.value).startswith(f"{name}: document 1 (")


@functools.cache
def shared_classes() -> dict[str, WorkspaceClassSpec]:
    classes: dict[str, WorkspaceClassSpec] = {}
    for name, (outcome, _) in EXPECTED.items():
        path = EXALSIUS / name
        if outcome != ACCEPT or not path.exists():
            continue
        for manifest in parse_manifests(path.read_text(), name):
            if isinstance(manifest.request, WorkspaceClassSpec):
                classes[manifest.name] = manifest.request
    return classes


def shared_deployments() -> list[Any]:
    return [
        pytest.param(name, id=name)
        for name, (outcome, detail) in sorted(EXPECTED.items())
        if outcome == ACCEPT and detail[0][0] == "Workspace"
    ]


def fake_seal(spec: WorkspaceSpec, workspace_class: WorkspaceClassSpec) -> WorkspaceSpec:
    """What `colonyctl apply` does before sending (infra.sealing.seal_workspace_secrets), with
    a stand-in for the cryptography: plaintext secrets become sealed answers."""
    stripped, plaintext = split_plaintext_secrets(spec, workspace_class)
    sealed = {
        path: SealedValue(key_id="k", scope=path, ephemeral_key="e", nonce="n", ciphertext="c")
        for path in plaintext
    }
    return stripped.model_copy(update={"sealed_answers": sealed})


@pytest.mark.parametrize("name", shared_deployments())
def test_shared_deployments_merge_with_their_classes(name: str) -> None:
    """Colony does what they say: each deployment's values resolve against its class (found in the
    same folder), once its plaintext secrets are sealed as `colonyctl apply` seals them."""
    need_shared()
    (manifest,) = parse_manifests((EXALSIUS / name).read_text(), name)
    spec = manifest.request
    assert isinstance(spec, WorkspaceSpec)
    workspace_class = shared_classes().get(spec.class_name)
    if workspace_class is None:
        pytest.skip(f"class {spec.class_name} is not in the shared folder")
    sealed = fake_seal(spec, workspace_class)
    merged = merge_workspace(workspace_class, sealed)
    secrets = [p.helm_value_path for p in workspace_class.prompts if p.type == "secret"]
    assert set(merged.secret_values) == set(sealed.sealed_answers)
    for path in secrets:
        assert get_path(merged.values, parse_value_path(path)) is MISSING, (
            "no secret in plain values"
        )


def test_raw_selector_deployment_keeps_its_selector() -> None:
    need_shared()
    name = "operator-examples/workspaces_workspace-deployment-llm-rawselector.yaml"
    (manifest,) = parse_manifests((EXALSIUS / name).read_text())
    spec = manifest.request
    assert isinstance(spec, WorkspaceSpec)
    assert spec.cluster == "default-child-adopted"
    assert spec.class_name == "llm-inference"
    assert spec.resources is not None
    assert spec.resources.per_replica.gpu_node_selector == {"nvidia.com/gpu.product": "NVIDIA-L40"}


def exalsius_crd(kind: str) -> dict[str, Any]:
    path = EXALSIUS / "operator-crds" / f"workspaces.exalsius.ai_{kind}.yaml"
    if not path.exists():
        pytest.skip(f"{path} not found")
    crd = yaml.safe_load(path.read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_stored_classes_are_valid_exalsius_objects() -> None:
    need_shared()
    schema = exalsius_crd("workspaceclasses")
    assert shared_classes()
    for name, workspace_class in shared_classes().items():
        stored = workspace_class_object(workspace_class, {"colony.dev/digest": "x"})
        assert validate(schema, stored) == [], name
        assert unknown_fields(schema, stored) == [], name
        (again,) = parse_manifests(yaml.safe_dump(stored))
        assert again.request == workspace_class, "stored and read back, the same class"


# --- Refusals name the document and the field ---------------------------------------------------

CLASS = """
apiVersion: workspaces.exalsius.ai/v1
kind: WorkspaceClass
metadata: {name: nb-1-0-0}
spec:
  displayName: Notebook
  serviceTemplate: {name: nb-1-0-0}
  defaultResources: {perReplica: {cpu: "2"}}
"""


def refusal(text: str) -> list[str]:
    with pytest.raises(ManifestError) as caught:
        parse_manifests(text)
    return [str(problem) for problem in caught.value.problems]


@pytest.mark.parametrize(
    ("text", "problems"),
    [
        pytest.param(
            CLASS.replace('cpu: "2"', 'cpu: "2 cores"'),
            [
                "document 1 (WorkspaceClass nb-1-0-0): spec.defaultResources.perReplica.cpu: cpu "
                "'2 cores' is not a Kubernetes quantity: write a number with an optional suffix, "
                'such as "4", "500m", "16Gi" or "100G"'
            ],
            id="class-field",
        ),
        pytest.param(
            CLASS + "  accessEndpoints: [{name: web, protocol: HTTP, port: 0}]\n",
            [
                "document 1 (WorkspaceClass nb-1-0-0): spec.accessEndpoints[0].port: port must be from 1 to 65535, got 0"
            ],
            id="list-index",
        ),
        pytest.param(
            CLASS.replace("metadata: {name: nb-1-0-0}", "metadata: {name: NB}"),
            [
                "document 1 (WorkspaceClass NB): metadata.name: workspace class name 'NB' must be a "
                "DNS label: lowercase letters, digits and '-', starting and ending with a letter or digit"
            ],
            id="class-name",
        ),
        pytest.param(
            CLASS + "  name: other\n",
            [
                "document 1 (WorkspaceClass nb-1-0-0): spec.name: unknown field (the class's name is metadata.name)"
            ],
            id="name-in-spec",
        ),
        pytest.param(
            CLASS.replace("  displayName: Notebook\n", ""),
            ["document 1 (WorkspaceClass nb-1-0-0): spec.displayName: required"],
            id="required",
        ),
        pytest.param(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n",
            [
                "document 1 (Deployment x): kind: Colony does not take apps/v1 Deployment; it takes "
                "workspaces.exalsius.ai/v1 WorkspaceClass, workspaces.exalsius.ai/v1 WorkspaceDeployment, "
                "k0rdent.mirantis.com/v1beta1 ServiceTemplate, infra.exalsius.ai/v1 Colony, colony.dev/v1 "
                "Cluster, colony.dev/v1 WorkspaceClass, colony.dev/v1 Workspace, colony.dev/v1 Colony"
            ],
            id="unknown-kind",
        ),
        pytest.param(
            "kind: WorkspaceClass\n",
            ["document 1 (WorkspaceClass): apiVersion: required"],
            id="no-api-version",
        ),
        pytest.param(
            "apiVersion: colony.dev/v1\nkind: Workspace\nspec: {}\n",
            ["document 1 (Workspace): metadata.name: required"],
            id="no-name",
        ),
        pytest.param(
            CLASS + "extra: 1\n",
            [
                "document 1 (WorkspaceClass nb-1-0-0): extra: unknown field (a document has apiVersion, kind, metadata and spec)"
            ],
            id="top-level-field",
        ),
        pytest.param(
            "- a\n- b\n",
            ["document 1: document: must be a map with apiVersion and kind"],
            id="not-a-map",
        ),
        pytest.param(
            """
apiVersion: workspaces.exalsius.ai/v1
kind: WorkspaceDeployment
metadata: {name: nb}
spec: {workspaceClassRef: nb-1-0-0}
""",
            ["document 1 (WorkspaceDeployment nb): spec.clusterDeploymentRef: required"],
            id="deployment-required",
        ),
        pytest.param(
            """
apiVersion: workspaces.exalsius.ai/v1
kind: WorkspaceDeployment
metadata: {name: nb}
spec:
  workspaceClassRef: NB
  clusterDeploymentRef: {name: training, namespace: kcm-system}
""",
            [
                "document 1 (WorkspaceDeployment nb): spec.workspaceClassRef: workspace class name 'NB' "
                "must be a DNS label: lowercase letters, digits and '-', starting and ending with a letter or digit"
            ],
            id="deployment-class-field",
        ),
        pytest.param(
            """
apiVersion: workspaces.exalsius.ai/v1
kind: WorkspaceDeployment
metadata: {name: nb}
spec:
  workspaceClassRef: nb-1-0-0
  clusterDeploymentRef: {name: training, namespace: kcm-system}
  resources: {perReplica: {gpuCount: 1, gpuType: H100, gpuNodeSelector: {a: b}}}
""",
            [
                "document 1 (WorkspaceDeployment nb): spec.resources.perReplica: give gpuType or "
                "gpuNodeSelector, not both: each one alone selects the GPU nodes"
            ],
            id="deployment-resources",
        ),
        pytest.param(
            """
apiVersion: workspaces.exalsius.ai/v1
kind: WorkspaceDeployment
metadata: {name: nb}
spec:
  workspaceClassRef: nb-1-0-0
  clusterDeploymentRef: {name: training, namespace: kcm-system}
  owner: {username: me}
""",
            [
                "document 1 (WorkspaceDeployment nb): spec.owner: unknown field 'owner' (known fields: "
                "clusterDeploymentRef, resources, suspend, values, workspaceClassRef)"
            ],
            id="deployment-unknown",
        ),
        pytest.param(
            """
apiVersion: workspaces.exalsius.ai/v1
kind: WorkspaceDeployment
metadata: {name: nb}
spec:
  workspaceClassRef: nb-1-0-0
  clusterDeploymentRef: {name: training, namespace: team-a}
""",
            [
                "document 1 (WorkspaceDeployment nb): spec.clusterDeploymentRef.namespace: Colony's "
                "clusters have their ClusterDeployments in namespace 'kcm-system'; 'team-a' holds "
                "none of them: set it to kcm-system"
            ],
            id="deployment-cluster-namespace",
        ),
        pytest.param(
            """
apiVersion: workspaces.exalsius.ai/v1
kind: WorkspaceDeployment
metadata: {name: nb, namespace: team-a}
spec:
  workspaceClassRef: nb-1-0-0
  clusterDeploymentRef: {name: training, namespace: kcm-system}
""",
            [
                "document 1 (WorkspaceDeployment nb): metadata.namespace: a workspace's ServiceSet "
                "and values Secret go beside its cluster's ClusterDeployment, in namespace "
                "'kcm-system'; 'team-a' is not it: leave metadata.namespace out or set it to "
                "kcm-system"
            ],
            id="deployment-namespace",
        ),
        pytest.param(
            """
apiVersion: colony.dev/v1
kind: Workspace
metadata: {name: nb, namespace: default}
spec: {class: nb-1-0-0, cluster: training}
""",
            [
                "document 1 (Workspace nb): metadata.namespace: a workspace's ServiceSet and values "
                "Secret go beside its cluster's ClusterDeployment, in namespace 'kcm-system'; "
                "'default' is not it: leave metadata.namespace out or set it to kcm-system"
            ],
            id="colony-workspace-namespace",
        ),
        pytest.param(
            """
apiVersion: infra.exalsius.ai/v1
kind: Colony
metadata: {name: c}
spec:
  colonyClusters: [{clusterName: a, nodePools: []}]
""",
            [
                "document 1 (Colony c): spec.colonyClusters[0].nodePools: unknown field 'nodePools' "
                "(known fields: clusterAnnotations, clusterDeploymentSpec, clusterLabels, clusterName)"
            ],
            id="exalsius-colony-has-no-pools",
        ),
        pytest.param(
            """
apiVersion: colony.dev/v1
kind: Colony
metadata: {name: c}
spec:
  colonyClusters:
  - clusterName: a
    nodePools: [{name: gpu, sku: {gpuModelId: h100}, count: 1}]
""",
            [
                "document 1 (Colony c): spec.colonyClusters[0].locationId: locationId is required with nodePools: it says where hosts are claimed"
            ],
            id="colony-pools-need-a-location",
        ),
        pytest.param(
            """
apiVersion: infra.exalsius.ai/v1
kind: Colony
metadata: {name: c}
spec:
  colonyClusters: [{clusterName: a}]
""",
            [
                "document 1 (Colony c): spec.colonyClusters[0].clusterDeploymentSpec: cluster 'a' gives neither "
                "clusterDeploymentSpec nor locationId and nodePools: there is nothing to build it from"
            ],
            id="colony-nothing-to-build",
        ),
        pytest.param(
            """
apiVersion: k0rdent.mirantis.com/v1beta1
kind: ServiceTemplate
metadata: {name: t}
spec: {helm: {chartSpec: {chart: c, sourceRef: {kind: HelmRepository, name: r}}}, kustomize: {}}
""",
            [
                "document 1 (ServiceTemplate t): spec: helm, kustomize and resources are mutually exclusive; got helm, kustomize"
            ],
            id="template-exclusive",
        ),
        pytest.param(
            """
apiVersion: k0rdent.mirantis.com/v1beta1
kind: ServiceTemplate
metadata: {name: t}
spec: {helm: {chartSpec: {chart: c, version: 1.0, interval: 10m, sourceRef: {kind: HelmRepository, name: r}}}}
""",
            [
                'document 1 (ServiceTemplate t): spec.helm.chartSpec.version: version must be a string (quote it: "1.0.0")'
            ],
            id="template-version-type",
        ),
        pytest.param(
            """
apiVersion: k0rdent.mirantis.com/v1beta1
kind: ServiceTemplate
metadata: {name: t}
spec: {helm: {chartSpec: {chart: c, interval: 10m, sourceRef: {kind: OCIRepository, name: r}}}}
""",
            [
                "document 1 (ServiceTemplate t): spec.helm.chartSpec.sourceRef.kind: kind must be one of HelmRepository, GitRepository, Bucket"
            ],
            id="template-source-kind",
        ),
        pytest.param(
            """
apiVersion: k0rdent.mirantis.com/v1beta1
kind: ServiceTemplate
metadata: {name: t}
spec: {helm: {chartSpec: {chart: c, version: "1.0.0", sourceRef: {kind: HelmRepository, name: r}}}}
""",
            [
                "document 1 (ServiceTemplate t): spec.helm.chartSpec.interval: required: how often "
                "the chart source is checked, a duration such as 10m"
            ],
            id="template-no-interval",
        ),
        pytest.param(
            """
apiVersion: k0rdent.mirantis.com/v1beta1
kind: ServiceTemplate
metadata: {name: t}
spec: {helm: {}}
""",
            [
                "document 1 (ServiceTemplate t): spec.helm: one of chartSpec, chartRef or chartSource must be set"
            ],
            id="template-no-chart",
        ),
        pytest.param(
            CLASS
            + "---\n"
            + CLASS.replace("nb-1-0-0}", "nb-2-0-0}").replace('"2"', '"x"')
            + "---\nkind: X\n",
            [
                "document 2 (WorkspaceClass nb-2-0-0): spec.defaultResources.perReplica.cpu: cpu 'x' "
                'is not a Kubernetes quantity: write a number with an optional suffix, such as "4", '
                '"500m", "16Gi" or "100G"',
                "document 3 (X): apiVersion: required",
            ],
            id="every-document-reported",
        ),
    ],
)
def test_refusals(text: str, problems: list[str]) -> None:
    assert refusal(text) == problems


def test_yaml_errors_are_refusals() -> None:
    with pytest.raises(ManifestError) as caught:
        parse_manifests("a: [", "broken.yaml")
    assert str(caught.value).startswith("broken.yaml: document 0: yaml: ")


# --- Colony's own forms -------------------------------------------------------------------------


def test_colony_forms() -> None:
    text = """
apiVersion: colony.dev/v1
kind: Cluster
metadata: {name: training}
spec:
  locationId: fra1
  nodePools: [{name: gpu, sku: {gpuModelId: h100-80gb}, count: 2}]
---
apiVersion: colony.dev/v1
kind: WorkspaceClass
metadata: {name: nb-1-0-0}
spec:
  displayName: Notebook
  serviceTemplate: {name: nb-1-0-0}
  defaultResources: {perReplica: {cpu: "2"}}
  deployTimeout: 20m
---
apiVersion: colony.dev/v1
kind: Workspace
metadata: {name: nb}
spec:
  class: nb-1-0-0
  cluster: training
  resources: {perReplica: {gpuCount: 1, gpuType: H100}}
  answers: {ui: lab}
---
apiVersion: colony.dev/v1
kind: Colony
metadata: {name: fleet, namespace: kcm-system}
spec:
  colonyClusters:
  - clusterName: west
    locationId: fra1
    nodePools: [{name: gpu, sku: {gpuModelId: h100-80gb}, count: 1}]
    clusterLabels: {team: ml}
  - clusterName: lab
    clusterDeploymentSpec: {template: docker-hosted-cp-1-0-0, credential: docker-stub-credential}
---
apiVersion: v1
kind: List
items:
- apiVersion: k0rdent.mirantis.com/v1beta1
  kind: ServiceTemplate
  metadata: {name: nb-1-0-0, labels: {app: nb}}
  spec: {helm: {chartSpec: {chart: nb, version: "1.0.0", interval: 10m, sourceRef: {kind: HelmRepository, name: repo}}}}
"""
    manifests = parse_manifests(text)
    assert [(m.index, m.kind, m.name) for m in manifests] == [
        (1, ManifestKind.CLUSTER, "training"),
        (2, ManifestKind.WORKSPACE_CLASS, "nb-1-0-0"),
        (3, ManifestKind.WORKSPACE, "nb"),
        (4, ManifestKind.COLONY, "fleet"),
        (5, ManifestKind.SERVICE_TEMPLATE, "nb-1-0-0"),
    ]
    cluster, workspace_class, workspace, colony, template = (m.request for m in manifests)
    assert isinstance(cluster, ClusterSpec)
    assert cluster.node_pools[0].count == 2
    assert isinstance(workspace_class, WorkspaceClassSpec)
    assert workspace_class.deploy_timeout.total_seconds() == 1200
    assert isinstance(workspace, WorkspaceSpec)
    assert workspace.answers == {"ui": "lab"}
    assert isinstance(colony, ColonySpec)
    assert colony.namespace == "kcm-system"
    west, lab = colony.colony_clusters
    west_spec = west.to_cluster_spec("fleet")
    assert (west_spec.name, west_spec.location_id, west_spec.node_pools[0].name) == (
        "fleet--west",
        "fra1",
        "gpu",
    )
    assert west_spec.colony == "fleet"
    # A raw ClusterDeployment spec is applied as written: its template builds the workers.
    lab_spec = lab.to_cluster_spec("fleet")
    assert lab_spec.deployment_spec == lab.cluster_deployment_spec
    assert lab_spec.node_pools == []
    assert lab_spec.template == lab.cluster_deployment_spec["template"]
    assert isinstance(template, ServiceTemplateManifest)
    assert template.chart == ("repo", "nb", "1.0.0")
    assert template.to_object()["metadata"] == {
        "name": "nb-1-0-0",
        "namespace": "kcm-system",
        "labels": {"app": "nb"},
    }


def test_empty_documents_are_skipped() -> None:
    assert parse_manifests("---\n# nothing\n---\n") == []


@pytest.mark.parametrize(
    "metadata",
    [
        pytest.param("{name: nb, namespace: kcm-system}", id="beside-the-cluster"),
        pytest.param("{name: nb}", id="left-out"),
    ],
)
def test_a_deployments_namespaces_are_honoured_where_its_cluster_is(metadata: str) -> None:
    (manifest,) = parse_manifests(
        f"""
apiVersion: workspaces.exalsius.ai/v1
kind: WorkspaceDeployment
metadata: {metadata}
spec:
  workspaceClassRef: nb-1-0-0
  clusterDeploymentRef: {{name: training, namespace: kcm-system}}
"""
    )
    assert isinstance(manifest.request, WorkspaceSpec)
    assert (manifest.request.name, manifest.request.cluster) == ("nb", "training")
