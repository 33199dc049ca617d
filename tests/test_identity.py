"""The names and ids of `models.identity`: injective over (organization, kind, names), hyphen splits
included, within Kubernetes' limits; and the ownership test of `models.ownership`.

Injectivity is proved twice: the identity's key is decodable (`Identity.parse(key)` gives it back,
so different identities have different keys), and, over every way of cutting one hyphenated string
into an organization and names (the collisions of `<org>-<name>`), the names differ.
"""

from __future__ import annotations

import re
from itertools import combinations
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from models import identity
from models.identity import (
    CLUSTER_DEPLOYMENT_MAX,
    HELM_RELEASE_MAX,
    Entity,
    Identity,
    Kind,
    cluster_deployment_name,
    colony_kubeconfigs_secret_name,
    colony_member_entry,
    colony_member_name,
    entity_workflow_id,
    parse_entity_workflow_id,
    prerequisite_service_set_name,
    route_name,
    workspace_class_object_name,
    workspace_release_name,
    workspace_service_set_name,
    workspace_values_secret_name,
)
from models.ownership import MANAGED_BY_LABEL, Owner, Ownership, refusal

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

segment = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)
"""A piece of a name between hyphens."""
names = st.lists(segment, min_size=1, max_size=4).map("-".join)
"""A name users may give a cluster, an organization or a workspace (no "--")."""
organizations = st.one_of(st.just(""), names)
long_names = st.lists(segment, min_size=6, max_size=12).map("-".join).map(lambda n: n[:63])


def splits(text: str, parts: int) -> list[tuple[str, ...]]:
    """Every way of cutting `text` at its hyphens into `parts` non-empty names."""
    pieces = text.split("-")
    return [
        tuple("-".join(pieces[a:b]) for a, b in zip((0, *cut), (*cut, len(pieces)), strict=True))
        for cut in combinations(range(1, len(pieces)), parts - 1)
    ]


@st.composite
def identities(draw: st.DrawFn) -> Identity:
    kind = draw(st.sampled_from(list(Kind)))
    parts = draw(st.lists(names, min_size=1, max_size=3))
    return Identity(draw(organizations), kind, tuple(parts))


@given(identities())
def test_an_identity_key_gives_the_identity_back(found: Identity) -> None:
    assert Identity.parse(found.key) == found


@given(identities(), identities())
def test_different_identities_have_different_keys_and_hashes(a: Identity, b: Identity) -> None:
    if a != b:
        assert a.key != b.key
        assert a.digest() != b.digest()


@given(st.lists(segment, min_size=2, max_size=6).map("-".join))
def test_cluster_deployments_are_injective_over_hyphen_splits(joined: str) -> None:
    """`acme`/`labs-cx` and `acme-labs`/`cx` (and every other cut) are different clusters, and none
    is the default-mode cluster named `acme-labs-cx`."""
    made = {(org, name): cluster_deployment_name(org, name) for org, name in splits(joined, 2)}
    made[("", joined)] = cluster_deployment_name("", joined)
    assert len(set(made.values())) == len(made), made
    assert made[("", joined)] == joined, "a default-mode cluster keeps its plain name"


@given(st.lists(segment, min_size=3, max_size=6).map("-".join), organizations)
def test_workspace_names_are_injective_over_cluster_and_workspace_splits(
    joined: str, organization: str
) -> None:
    """`a-b` + `c` and `a` + `b-c` (the old `wsd-<cluster>-<workspace>` collision), for every
    derived name of a workspace, and across organizations cut from the same string."""
    for make in (
        workspace_service_set_name,
        workspace_values_secret_name,
        workspace_release_name,
        prerequisite_service_set_name,
    ):
        made = {
            (org, cluster, workspace): make(org, cluster, workspace)
            for org, cluster, workspace in [
                *splits(joined, 3),
                *((organization, c, w) for c, w in splits(joined, 2)),
            ]
        }
        assert len(set(made.values())) == len(made), (make.__name__, made)


@given(organizations, names, names, names)
def test_kinds_never_share_a_name(organization: str, cluster: str, workspace: str, e: str) -> None:
    made = [
        cluster_deployment_name(organization or "o", cluster),
        workspace_service_set_name(organization, cluster, workspace),
        workspace_values_secret_name(organization, cluster, workspace),
        workspace_release_name(organization, cluster, workspace),
        prerequisite_service_set_name(organization, cluster, workspace),
        route_name(organization, cluster, workspace, e),
        colony_kubeconfigs_secret_name(organization or "o", cluster),
    ]
    assert len(set(made)) == len(made), made


@given(organizations, long_names, long_names)
def test_names_fit_their_limits_and_rules(organization: str, cluster: str, workspace: str) -> None:
    deployment = cluster_deployment_name(organization or "acme", cluster)
    assert len(deployment) <= CLUSTER_DEPLOYMENT_MAX
    assert len(f"{deployment}-kubeconfig") <= 63
    release = workspace_release_name(organization, cluster, workspace)
    assert len(release) <= HELM_RELEASE_MAX
    for name in (deployment, release):
        assert DNS_1035.fullmatch(name), name
    for name in (
        workspace_service_set_name(organization, cluster, workspace),
        workspace_values_secret_name(organization, cluster, workspace),
        prerequisite_service_set_name(organization, cluster, "colony-inference.stack-1.0.0"),
        route_name(organization, cluster, workspace, "http"),
        colony_kubeconfigs_secret_name(organization or "acme", cluster),
    ):
        assert len(name) <= 63
        assert DNS_1123_LABEL.fullmatch(name), name
        assert identity.is_derived(name)


@given(names)
def test_plain_names_are_never_derived(name: str) -> None:
    assert not identity.is_derived(name)
    assert cluster_deployment_name("", name) == name


def test_derived_names_read_as_what_they_name() -> None:
    deployment = cluster_deployment_name("acme", "labs-cx")
    assert deployment.startswith("acme-labs-cx--")
    # The collisions the issue found: both now differ (and read the same to a person).
    assert deployment != cluster_deployment_name("acme-labs", "cx")
    assert workspace_service_set_name("", "a-b", "c") != workspace_service_set_name("", "a", "b-c")
    assert workspace_service_set_name("acme", "gpu", "nb").startswith("wsd-gpu-nb--")
    assert workspace_values_secret_name("", "gpu", "nb").startswith("wsd-gpu-nb-values--")
    assert prerequisite_service_set_name("", "gpu", "stack-1.0").startswith(
        "wsprereq-gpu-stack-1-0--"
    )
    assert route_name("acme", "gpu", "nb", "http").startswith("nb-http--")
    assert colony_kubeconfigs_secret_name("", "lab") == "lab-kubeconfigs"


def test_an_identity_refuses_a_part_holding_the_separator() -> None:
    with pytest.raises(ValueError, match="contains '/'"):
        Identity("acme", Kind.ROUTE, ("a/b",))
    with pytest.raises(ValueError, match="non-empty"):
        Identity("acme", Kind.ROUTE, ())


@given(st.lists(segment, min_size=2, max_size=6).map("-".join))
def test_colony_members_are_injective_over_hyphen_splits(joined: str) -> None:
    members = {
        (colony, entry): colony_member_name(colony, entry) for colony, entry in splits(joined, 2)
    }
    assert len(set(members.values())) == len(members)
    for (colony, entry), member in members.items():
        assert colony_member_entry(colony, member) == entry
        deployment = cluster_deployment_name("", member)
        assert identity.is_derived(deployment), "a member's ClusterDeployment is never plain"
        assert deployment != cluster_deployment_name("", joined)


@given(st.sampled_from(list(Entity)), organizations, names)
def test_workflow_ids_give_their_entity_back(entity: Entity, organization: str, name: str) -> None:
    workflow_id = entity_workflow_id(entity, organization, name)
    assert parse_entity_workflow_id(workflow_id) == (entity, organization, name)


@given(st.lists(segment, min_size=2, max_size=5).map("-".join))
def test_workflow_ids_are_injective_over_hyphen_splits(joined: str) -> None:
    ids = {
        entity_workflow_id(Entity.WORKSPACE, org, name)
        for org, name in [*splits(joined, 2), ("", joined)]
    }
    assert len(ids) == len(splits(joined, 2)) + 1


@pytest.mark.parametrize(
    "workflow_id",
    [
        pytest.param("capacity/x", id="not-an-entity"),
        pytest.param("cluster//x", id="empty-organization"),
        pytest.param("cluster/a/b/c", id="too-many-segments"),
        pytest.param("cluster/", id="empty-name"),
    ],
)
def test_other_ids_are_no_entity(workflow_id: str) -> None:
    assert parse_entity_workflow_id(workflow_id) is None


# --- Ownership marks ---------------------------------------------------------------------------


def marked(owner: Owner, drop: str = "") -> dict[str, Any]:
    metadata = owner.mark({"name": "x", "labels": {"a": "b"}})
    metadata["labels"].pop(drop, None)
    return {"metadata": metadata}


def test_an_owner_knows_its_marks_from_anyone_elses() -> None:
    ours = Owner(workflow_id="workspace/acme/nb", organization="acme")
    assert ours.judge(marked(ours)) is Ownership.OURS
    assert marked(ours)["metadata"]["labels"]["a"] == "b"
    assert ours.judge({"metadata": {"name": "x"}}) is Ownership.UNMARKED
    assert ours.judge(marked(ours, drop=MANAGED_BY_LABEL)) is Ownership.UNMARKED
    other_organization = Owner(workflow_id="workspace/acme/nb", organization="acme-labs")
    assert ours.judge(marked(other_organization)) is Ownership.FOREIGN
    other_workflow = Owner(workflow_id="workspace/acme/nb2", organization="acme")
    assert ours.judge(marked(other_workflow)) is Ownership.FOREIGN
    assert ours.judge({}) is Ownership.UNMARKED


def test_a_refusal_names_the_object_never_its_owner() -> None:
    message = refusal("namespace", "", "ws-adopt", Ownership.UNMARKED)
    assert message.startswith("namespace ws-adopt already exists and is not Colony's")
    assert "neither adopts nor deletes" in message
    assert "acme" not in refusal("ServiceSet", "kcm-system/", "x", Ownership.FOREIGN)


def deployment_marked(workflow_id: str, organization: str) -> dict[str, Any]:
    return {"metadata": Owner(workflow_id=workflow_id, organization=organization).mark({})}


@pytest.mark.parametrize(
    ("deployment", "name", "expected"),
    [
        pytest.param(
            deployment_marked("cluster/acme/labs-cx", "acme"),
            cluster_deployment_name("acme", "labs-cx"),
            "cluster/acme/labs-cx",
            id="an-organizations",
        ),
        pytest.param(deployment_marked("cluster/x", ""), "x", "cluster/x", id="default-mode"),
        pytest.param(
            deployment_marked("cluster/acme/labs-cx", "acme"),
            cluster_deployment_name("acme-labs", "cx"),
            "",
            id="marks-of-another-clusters-deployment",
        ),
        pytest.param(
            deployment_marked("cluster/acme/labs-cx", "acme-labs"),
            cluster_deployment_name("acme", "labs-cx"),
            "",
            id="organization-label-contradicts",
        ),
        pytest.param(
            {"metadata": {"annotations": {"colony.dev/workflow-id": "cluster/x"}}},
            "x",
            "",
            id="annotated-without-colony-marks",
        ),
        pytest.param(deployment_marked("workspace/x", ""), "x", "", id="not-a-cluster"),
        pytest.param({}, "x", "", id="absent"),
    ],
)
def test_the_ledger_trusts_only_marks_that_name_this_very_cluster_deployment(
    deployment: dict[str, Any], name: str, expected: str
) -> None:
    """The GPU ledger tells the workflow its ClusterDeployment's marks name who holds GPUs: only
    when those marks are Colony's, agree, and derive back to this ClusterDeployment's name."""
    from activities.child_cluster.nodes import cluster_owner_of

    assert cluster_owner_of(deployment, name) == expected


def class_object(name: str, organization: str, class_name: str) -> dict[str, Any]:
    owner = Owner(workflow_id="catalog/workspace-classes", organization=organization)
    metadata = owner.mark({"name": name, "annotations": {"colony.dev/class-name": class_name}})
    return {"metadata": metadata}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param({"metadata": {"name": "nb-1-0-0"}}, "", id="shared-by-kubectl"),
        pytest.param(
            {"metadata": {"name": "nb", "labels": {MANAGED_BY_LABEL: "colony"}}}, "", id="shared"
        ),
        pytest.param(
            class_object(workspace_class_object_name("acme", "nb"), "acme", "nb"),
            "acme",
            id="an-organizations-own",
        ),
        pytest.param(
            class_object(workspace_class_object_name("acme", "nb"), "acme-labs", "nb"),
            None,
            id="marked-for-another-organization-than-its-name",
        ),
        pytest.param(
            class_object("nb", "acme", "nb"), None, id="an-organizations-under-a-plain-name"
        ),
    ],
)
def test_a_class_object_is_shared_or_one_organizations(
    obj: dict[str, Any], expected: str | None
) -> None:
    from activities.management.classes import class_organization

    assert class_organization(obj) == expected
