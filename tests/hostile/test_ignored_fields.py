"""Every accepted field has an effect; a field whose value would be ignored is refused, naming the
field and why: a class's `serviceTemplate.namespace` other than k0rdent's system namespace (the
old API stored it and deployed from `kcm-system` all the same), a ServiceTemplate's
`versionConstraint` (never checked), a Colony's `metadata.namespace` (its clusters' objects go to
`kcm-system` whatever it says), and keys of a colony cluster's `clusterDeploymentSpec` beside
`locationId` (only its template and credential are taken). What has an effect is still taken.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from models.base import user_input
from models.manifests import ManifestError, parse_manifests
from models.workspace_class import TEMPLATE_NAMESPACE, WorkspaceClassSpec
from tests.api.conftest import JUPYTER, ApiStack
from tests.api.test_api_endpoints import error_of
from tests.api.test_cli_remote import user
from tests.helpers import unique

CLASSES = "/v1/workspace-classes"
IGNORED_NAMESPACE = (
    "a ServiceTemplate is read from namespace 'kcm-system', where the ServiceSets Colony writes "
    "find it; 'team-templates' would be ignored: leave it out or give kcm-system"
)


def test_the_template_namespace_is_the_one_the_service_sets_read() -> None:
    from models.cluster import DEFAULT_NAMESPACE

    assert TEMPLATE_NAMESPACE == DEFAULT_NAMESPACE


def a_class(**changes: Any) -> dict[str, Any]:
    return {
        "name": "team-nb-1-0-0",
        "displayName": "Notebook",
        "serviceTemplate": {"name": JUPYTER},
        "defaultResources": {"perReplica": {"cpu": "1"}},
        **changes,
    }


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param(
            {"serviceTemplate": {"name": JUPYTER, "namespace": "team-templates"}},
            f"serviceTemplate.namespace: {IGNORED_NAMESPACE}",
            id="class-template-namespace",
        ),
        pytest.param(
            {
                "prerequisites": [
                    {"serviceTemplate": {"name": "stack-1-0-0", "namespace": "team-templates"}}
                ]
            },
            f"prerequisites[0].serviceTemplate.namespace: {IGNORED_NAMESPACE}",
            id="prerequisite-template-namespace",
        ),
        pytest.param(
            {"serviceTemplate": {"name": JUPYTER, "versionConstraint": ">=1.0.0"}},
            "serviceTemplate.versionConstraint: '>=1.0.0' would not be checked: Colony pins a "
            "ServiceTemplate by its name (a new chart version is a new template name); leave "
            "versionConstraint out",
            id="version-constraint",
        ),
    ],
)
def test_a_class_field_that_would_be_ignored_is_refused(
    changes: dict[str, Any], message: str
) -> None:
    from clients.errors import InvalidRequestError
    from clients.parsing import validated

    with pytest.raises(InvalidRequestError) as caught:
        validated(WorkspaceClassSpec, a_class(**changes))
    assert caught.value.message == message


def test_what_has_an_effect_is_taken_and_stored_classes_are_read_as_they_are() -> None:
    taken = user_input(
        WorkspaceClassSpec,
        a_class(serviceTemplate={"name": JUPYTER, "namespace": TEMPLATE_NAMESPACE}),
    )
    assert taken.service_template.namespace == TEMPLATE_NAMESPACE
    stored = a_class(serviceTemplate={"name": JUPYTER, "namespace": "x", "versionConstraint": "1"})
    assert WorkspaceClassSpec.model_validate(stored).service_template.namespace == "x"
    with pytest.raises(ValidationError):
        user_input(WorkspaceClassSpec, stored)


COLONY = """apiVersion: colony.dev/v1
kind: Colony
metadata: {{name: lab{namespace}}}
spec:
  colonyClusters:
  - clusterName: west
    locationId: fra1
    nodePools: [{{name: cpu, sku: {{cpuSku: cpu-32c-256g}}, count: 1}}]
{extra}"""


@pytest.mark.parametrize(
    ("namespace", "extra", "problem"),
    [
        pytest.param("", "", None, id="plain"),
        pytest.param(", namespace: kcm-system", "", None, id="kcm-system"),
        pytest.param(
            ", namespace: teams",
            "",
            "document 1 (Colony lab): metadata.namespace: a colony's clusters have their "
            "ClusterDeployments in namespace 'kcm-system', whatever the colony's namespace; "
            "'teams' would be ignored: leave metadata.namespace out (or give default or "
            "kcm-system)",
            id="namespace-ignored",
        ),
        pytest.param(
            "",
            "    clusterDeploymentSpec: {template: remote-cluster-1-0-0, config: {a: 1}}\n",
            "document 1 (Colony lab): spec.colonyClusters[0].clusterDeploymentSpec.config: a "
            "cluster claimed from locationId 'fra1' takes only template and credential from "
            "clusterDeploymentSpec; 'config' would be ignored: leave it out, or leave locationId "
            "and nodePools out to apply the spec as written",
            id="deployment-spec-ignored",
        ),
    ],
)
def test_a_colony_field_that_would_be_ignored_is_refused(
    namespace: str, extra: str, problem: str | None
) -> None:
    text = COLONY.format(namespace=namespace, extra=extra)
    if problem is None:
        assert parse_manifests(text)
        return
    with pytest.raises(ManifestError) as caught:
        parse_manifests(text)
    assert str(caught.value) == problem


@pytest.mark.e2e
async def test_the_api_refuses_a_class_field_that_would_be_ignored(catalog: ApiStack) -> None:
    key = await catalog.key(unique("evil"))
    async with catalog.http(catalog.app(), key) as http:
        jupyter = (await http.get(f"{CLASSES}/{JUPYTER}")).json()
        name = unique("team-nb")
        template = {**jupyter["serviceTemplate"], "namespace": "team-templates"}
        refused = await http.post(
            CLASSES, json={"class": {**jupyter, "name": name, "serviceTemplate": template}}
        )
        assert (refused.status_code, error_of(refused)) == (
            422,
            {
                "code": "invalid",
                "field": "class.serviceTemplate.namespace",
                "message": f"class.serviceTemplate.namespace: {IGNORED_NAMESPACE}",
            },
        )
        assert (await http.get(f"{CLASSES}/{name}")).status_code == 404
        # The namespace that has an effect is taken, as the shipped class gives it.
        taken = await http.post(CLASSES, json={"class": {**jupyter, "name": name}})
        assert taken.status_code == 201, taken.text


@pytest.mark.e2e
@pytest.mark.slow
async def test_remote_colonyctl_refuses_a_field_that_would_be_ignored(
    api_stack: ApiStack, api_url: str, tmp_path: Path
) -> None:
    me = user(tmp_path)
    await me.ctl("auth", "login", "--url", api_url, "--api-key", await api_stack.key(unique("e")))
    manifest = tmp_path / "colony.yaml"
    manifest.write_text(COLONY.format(namespace=", namespace: teams", extra=""))
    applied = await me.ctl("apply", "-f", str(manifest), expect=2)
    assert applied.stderr.startswith(
        f"error: {manifest}: document 1 (Colony lab): metadata.namespace: a colony's clusters"
    )
    await me.ctl("colony", "get", "lab", expect=3)
