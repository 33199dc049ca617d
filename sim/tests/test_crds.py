"""Colony's sim CRDs: structurally sound, matching k0rdent's real CRDs, accepting Colony's objects."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.apiserver.schema import apply_defaults, prune, structural_errors, validate
from sim.crds import crd_schema, load_colony_crds, samples

REAL_CRDS = Path(__file__).resolve().parents[2].parent / "shared" / "k0rdent-crds"
HUB = Path(__file__).resolve().parents[2].parent / "shared" / "exalsius" / "workspace-hub"

REAL_CAPI_CRDS = Path(__file__).resolve().parents[2].parent / "shared" / "capi-crds"

COLONY = {
    crd["spec"]["names"]["kind"]: crd
    for crd in load_colony_crds()
    if crd["spec"]["group"] == "k0rdent.mirantis.com"
}
CAPI = {
    crd["spec"]["names"]["kind"]: crd
    for crd in load_colony_crds()
    if crd["spec"]["group"] == "cluster.x-k8s.io"
}


def _with_status(obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "status": status}


SAMPLES: list[Any] = [
    pytest.param(samples.credential, id="credential"),
    pytest.param(samples.cluster_template, id="cluster-template"),
    pytest.param(samples.cluster_deployment_remote, id="cluster-deployment-remote"),
    pytest.param(samples.cluster_deployment_hosted, id="cluster-deployment-hosted"),
    pytest.param(
        lambda: _with_status(
            samples.cluster_deployment_remote(), samples.cluster_deployment_status()
        ),
        id="cluster-deployment-status-ready",
    ),
    pytest.param(
        lambda: _with_status(
            samples.cluster_deployment_remote(), samples.cluster_deployment_status(ready=False)
        ),
        id="cluster-deployment-status-failed",
    ),
    pytest.param(samples.service_template, id="service-template"),
    pytest.param(samples.service_set, id="service-set"),
    pytest.param(
        lambda: _with_status(samples.service_set(), samples.service_set_status()),
        id="service-set-status-deployed",
    ),
    pytest.param(
        lambda: _with_status(samples.service_set(), samples.service_set_status("Failed", "boom")),
        id="service-set-status-failed",
    ),
    pytest.param(samples.multi_cluster_service, id="multi-cluster-service"),
    pytest.param(samples.state_management_provider, id="state-management-provider"),
]


def _hub_service_templates() -> list[Path]:
    return sorted(HUB.glob("manifests_*_servicetemplate.yaml")) if HUB.is_dir() else []


def _load_real() -> dict[str, dict[str, Any]]:
    if not REAL_CRDS.is_dir():
        pytest.skip(f"k0rdent's real CRDs not found at {REAL_CRDS}")
    return _parse_real()


@functools.cache
def _parse_real() -> dict[str, dict[str, Any]]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    real: dict[str, dict[str, Any]] = {}
    for path in sorted(REAL_CRDS.glob("*.yaml")):
        crd = yaml.load(path.read_text(), Loader=loader)
        real[crd["spec"]["names"]["kind"]] = crd
    return real


def test_all_kinds_present() -> None:
    assert set(COLONY) == {
        "ClusterDeployment",
        "ClusterTemplate",
        "Credential",
        "ServiceTemplate",
        "ServiceSet",
        "MultiClusterService",
        "StateManagementProvider",
    }


@pytest.mark.parametrize("kind", sorted(COLONY))
def test_colony_crd_is_structural(kind: str) -> None:
    crd = COLONY[kind]
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["spec"]["group"] == "k0rdent.mirantis.com"
    assert crd["metadata"]["name"] == f"{crd['spec']['names']['plural']}.k0rdent.mirantis.com"
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1beta1"
    assert version["served"]
    assert version["storage"]
    assert version["subresources"] == {"status": {}}
    assert structural_errors(crd_schema(crd)) == []


@pytest.mark.parametrize("make", SAMPLES)
def test_sample_valid_for_colony_crd(make: Callable[[], dict[str, Any]]) -> None:
    obj = make()
    schema = crd_schema(COLONY[obj["kind"]])
    assert validate(schema, obj) == []
    # Colony's samples use only fields the CRD knows: pruning must not lose anything.
    assert prune(schema, obj) == obj
    assert validate(schema, apply_defaults(schema, obj)) == []


@pytest.mark.parametrize(
    ("make", "mutate", "path", "reason"),
    [
        pytest.param(
            samples.cluster_deployment_remote,
            lambda o: o["spec"].pop("template"),
            "spec.template",
            "FieldValueRequired",
            id="cd-without-template",
        ),
        pytest.param(
            samples.credential,
            lambda o: o["spec"].pop("identityRef"),
            "spec.identityRef",
            "FieldValueRequired",
            id="credential-without-identity",
        ),
        pytest.param(
            samples.service_set,
            lambda o: o["spec"].pop("provider"),
            "spec.provider",
            "FieldValueRequired",
            id="service-set-without-provider",
        ),
        pytest.param(
            lambda: _with_status(samples.service_set(), samples.service_set_status()),
            lambda o: o["status"]["services"][0].update(state="Exploded"),
            "status.services[0].state",
            "FieldValueNotSupported",
            id="service-state-enum",
        ),
        pytest.param(
            samples.service_template,
            lambda o: o["spec"]["helm"]["chartSpec"].update(interval="ten minutes"),
            "spec.helm.chartSpec.interval",
            "FieldValueInvalid",
            id="chart-interval-pattern",
        ),
    ],
)
def test_colony_crd_rejects(
    make: Callable[[], dict[str, Any]],
    mutate: Callable[[dict[str, Any]], Any],
    path: str,
    reason: str,
) -> None:
    obj = make()
    mutate(obj)
    errors = validate(crd_schema(COLONY[obj["kind"]]), obj)
    assert [(e.path, e.reason) for e in errors] == [(path, reason)]


def test_cluster_deployment_defaults() -> None:
    schema = crd_schema(COLONY["ClusterDeployment"])
    obj = samples.cluster_deployment_remote()
    del obj["spec"]["propagateCredentials"]
    assert apply_defaults(schema, obj)["spec"]["propagateCredentials"] is True


# ------------------------------------------------------------------ against k0rdent's real CRDs


@pytest.mark.parametrize("make", SAMPLES)
def test_sample_valid_for_real_crd(make: Callable[[], dict[str, Any]]) -> None:
    real = _load_real()
    obj = make()
    if obj["kind"] not in real:
        pytest.skip(f"no real CRD for {obj['kind']} in {REAL_CRDS}")
    schema = crd_schema(real[obj["kind"]])
    assert validate(schema, obj) == []
    assert prune(schema, obj) == obj, "a field Colony sets is unknown to k0rdent"


@pytest.mark.parametrize("path", _hub_service_templates(), ids=lambda p: p.name)
def test_hub_service_template_valid_for_both(path: Path) -> None:
    real = _load_real()
    obj = yaml.safe_load(path.read_text())
    assert obj["kind"] == "ServiceTemplate"
    for crd in (COLONY["ServiceTemplate"], real["ServiceTemplate"]):
        schema = crd_schema(crd)
        assert validate(schema, obj) == []
        assert prune(schema, obj) == obj


def test_hub_service_templates_found_when_shared_exists() -> None:
    if not HUB.is_dir():
        pytest.skip(f"workspace hub manifests not found at {HUB}")
    assert _hub_service_templates()


@pytest.mark.parametrize("kind", sorted(set(COLONY) - {"StateManagementProvider"}))
def test_scope_and_names_match_real(kind: str) -> None:
    real = _load_real()[kind]
    ours = COLONY[kind]
    assert ours["spec"]["scope"] == real["spec"]["scope"]
    assert ours["metadata"]["name"] == real["metadata"]["name"]
    for key in ("plural", "singular", "listKind"):
        assert ours["spec"]["names"][key] == real["spec"]["names"][key]
    assert sorted(ours["spec"]["names"].get("shortNames", [])) == sorted(
        real["spec"]["names"].get("shortNames", [])
    )


def _walk(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, sub in (schema.get("properties") or {}).items():
        yield from _walk(sub, f"{path}.{name}" if path else name)
    if isinstance(schema.get("items"), dict):
        yield from _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _walk(schema["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("kind", sorted(set(COLONY) - {"StateManagementProvider"}))
def test_fields_and_types_match_real(kind: str) -> None:
    """Every field of Colony's CRD exists in k0rdent's with the same type and constraints."""
    assert _schema_problems(crd_schema(COLONY[kind]), crd_schema(_load_real()[kind])) == []


def test_capi_kinds_present() -> None:
    assert set(CAPI) == {"MachineDeployment", "MachineSet", "Machine"}


@pytest.mark.parametrize("kind", sorted(CAPI))
def test_capi_crd_matches_cluster_api(kind: str) -> None:
    """The sim's Cluster API CRDs: structural, named and scoped as Cluster API's (read from
    `../shared/capi-crds/`), every field there with the same type and constraints (v1beta2)."""
    if not REAL_CAPI_CRDS.is_dir():
        pytest.skip(f"Cluster API's CRDs not found at {REAL_CAPI_CRDS}")
    ours = CAPI[kind]
    assert structural_errors(crd_schema(ours, "v1beta2")) == []
    real = next(
        crd
        for path in sorted(REAL_CAPI_CRDS.glob("*.yaml"))
        if (crd := yaml.safe_load(path.read_text()))["spec"]["names"]["kind"] == kind
    )
    assert ours["metadata"]["name"] == real["metadata"]["name"]
    assert ours["spec"]["scope"] == real["spec"]["scope"]
    for key in ("plural", "singular", "listKind"):
        assert ours["spec"]["names"][key] == real["spec"]["names"][key]
    (version,) = ours["spec"]["versions"]
    theirs = next(v for v in real["spec"]["versions"] if v["name"] == version["name"])
    assert theirs["storage"]
    assert version["storage"]
    assert set(version["subresources"]) == set(theirs["subresources"])
    assert _schema_problems(crd_schema(ours, "v1beta2"), crd_schema(real, "v1beta2")) == []


def _schema_problems(ours: dict[str, Any], reference: dict[str, Any]) -> list[str]:
    real = dict(_walk(reference, ""))
    problems: list[str] = []
    for path, node in _walk(ours, ""):
        if path not in real:
            problems.append(f"{path}: not in the reference CRD")
            continue
        theirs = real[path]
        # Where k0rdent leaves a preserve-unknown-fields node untyped, ours may say "object".
        if "type" in theirs and node.get("type") != theirs.get("type"):
            problems.append(f"{path}: type {node.get('type')} != {theirs.get('type')}")
        for keyword in (
            "enum",
            "pattern",
            "minimum",
            "maximum",
            "minLength",
            "maxLength",
            "format",
            "default",
        ):
            if keyword in node and node[keyword] != theirs.get(keyword):
                problems.append(f"{path}: {keyword} {node[keyword]!r} != {theirs.get(keyword)!r}")
        for name in node.get("required", ()):
            if name not in theirs.get("required", ()):
                problems.append(f"{path}: requires {name}, k0rdent does not")
        for name in theirs.get("required", ()):
            if name not in node.get("required", ()) and name in (node.get("properties") or {}):
                problems.append(f"{path}: the reference requires {name}, ours does not")
    return problems
