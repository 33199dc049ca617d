"""Ownership marks: what every object Colony makes carries to say whose it is, and the one test of
them that every lookup, update, delete and sweep applies before it touches an object.

A name alone never selects an object: a namespace `ws-nb` in a child cluster may be the user's own,
a ServiceSet of a derived name may (by a hostile guess, or an operator's hand) be someone else's.
So each object carries

- the label `app.kubernetes.io/managed-by: colony` (Colony made it),
- the label `colony.dev/organization: <organization>` ("" in the default mode),
- the annotation `colony.dev/workflow-id: <the owning workflow's id>` (verbatim: label values
  cannot hold "/"; the watcher signals this workflow when the object changes),

and `Owner.judge` tells an object that is this owner's (`OURS`) from one without Colony's marks
(`UNMARKED`: never adopted, never deleted) and one of another owner (`FOREIGN`: the same). Activities
receive the `Owner` in their requests (`models/workspace_api.py`, `models/activity_api.py`).

Pure: no IO.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

from models.base import ColonyModel
from models.identity import Entity, entity_workflow_id, parse_entity_workflow_id

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "colony"
ORGANIZATION_LABEL = "colony.dev/organization"
"""The organization owning the object ("" in the default mode); the same key API key Secrets use."""
OWNER_WORKFLOW_ANNOTATION = "colony.dev/workflow-id"
"""The owning workflow's id, verbatim."""


class Ownership(StrEnum):
    """Whose an object is, as an `Owner` sees it."""

    OURS = "ours"
    """Colony's, this organization's, this workflow's."""
    UNMARKED = "unmarked"
    """Without Colony's marks: someone else made it (a user, an operator, another tool)."""
    FOREIGN = "foreign"
    """Colony's, but another owner's (another workflow, another organization)."""


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _strings(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


class Owner(ColonyModel):
    """The workflow (and its organization) an object belongs to."""

    workflow_id: str
    organization: str = ""

    def labels(self) -> dict[str, str]:
        """The owner's labels, to merge into an object's."""
        return {MANAGED_BY_LABEL: MANAGED_BY, ORGANIZATION_LABEL: self.organization}

    def annotations(self) -> dict[str, str]:
        """The owner's annotations, to merge into an object's."""
        return {OWNER_WORKFLOW_ANNOTATION: self.workflow_id}

    def mark(self, metadata: dict[str, Any]) -> dict[str, Any]:
        """`metadata` with the owner's labels and annotations added (theirs win over any given)."""
        return {
            **metadata,
            "labels": {**(metadata.get("labels") or {}), **self.labels()},
            "annotations": {**(metadata.get("annotations") or {}), **self.annotations()},
        }

    def judge(self, obj: Mapping[str, Any]) -> Ownership:
        """Whose `obj` (a Kubernetes object as a dict) is, from this owner's side."""
        meta = _metadata(obj)
        labels, annotations = _strings(meta.get("labels")), _strings(meta.get("annotations"))
        workflow_id = annotations.get(OWNER_WORKFLOW_ANNOTATION)
        if labels.get(MANAGED_BY_LABEL) != MANAGED_BY or not workflow_id:
            return Ownership.UNMARKED
        if workflow_id == self.workflow_id and labels.get(ORGANIZATION_LABEL) == self.organization:
            return Ownership.OURS
        return Ownership.FOREIGN

    def owns(self, obj: Mapping[str, Any]) -> bool:
        return self.judge(obj) is Ownership.OURS


class EntitySpec(ColonyModel):
    """The request of an entity that one workflow owns (a cluster, a workspace): that workflow's
    id and the owner its objects are marked with follow from its kind, organization and name."""

    entity: ClassVar[Entity]
    if TYPE_CHECKING:
        # Declared by each request where its JSON has them (a base's fields would come first).
        name: str
        organization: str

    @property
    def workflow_id(self) -> str:
        """`<entity>/[<organization>/]<name>` (`models.identity.entity_workflow_id`)."""
        return entity_workflow_id(self.entity, self.organization, self.name)

    @property
    def owner(self) -> Owner:
        """Whose the entity's objects are: its workflow's, of its organization."""
        return Owner(workflow_id=self.workflow_id, organization=self.organization)


def marked_entity(obj: Mapping[str, Any]) -> tuple[Entity, str, str] | None:
    """(entity, organization, name) of the cluster, workspace or colony workflow whose marks `obj`
    carries, when they are Colony's and agree with each other (the organization label is the
    workflow id's); None for anything else (unmarked, a marked ledger's or prerequisite's object,
    or marks that contradict themselves)."""
    meta = _metadata(obj)
    labels, annotations = _strings(meta.get("labels")), _strings(meta.get("annotations"))
    if labels.get(MANAGED_BY_LABEL) != MANAGED_BY:
        return None
    found = parse_entity_workflow_id(str(annotations.get(OWNER_WORKFLOW_ANNOTATION) or ""))
    if found is None or labels.get(ORGANIZATION_LABEL) != found[1]:
        return None
    return found


def refusal(kind: str, where: str, name: str, ownership: Ownership) -> str:
    """Why Colony will not take over an object that is not its owner's (never naming the owner,
    which may be another organization)."""
    whose = (
        "is not Colony's (it has no Colony ownership marks)"
        if ownership is Ownership.UNMARKED
        else "belongs to something else Colony runs"
    )
    return (
        f"{kind} {where}{name} already exists and {whose}: Colony neither adopts nor deletes it; "
        "remove or rename it, or use another name"
    )
