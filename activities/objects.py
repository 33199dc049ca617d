"""Reading and judging the Kubernetes objects activities fetch, on any cluster: their uid, the
preconditions that delete exactly the object judged, lists read from the API, the refusal of an
object that is not its owner's, and how long a wait has left.

Used by the activities of `activities.management` and `activities.child_cluster`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from temporalio.exceptions import ApplicationError

from infra.kube import Obj
from models.errors import ErrorType, permanent
from models.ownership import Ownership, refusal

K0RDENT = ("k0rdent.mirantis.com", "v1beta1")
"""Group and version of k0rdent's objects (ClusterDeployments, ServiceSets, ServiceTemplates)."""


def seconds_until(deadline: datetime) -> float:
    return (deadline - datetime.now(UTC)).total_seconds()


def foreign(kind: str, where: str, name: str, ownership: Ownership) -> ApplicationError:
    """The refusal to take over an object of the name asked for that is not the owner's."""
    return permanent(ErrorType.FOREIGN_OBJECT, refusal(kind, where, name, ownership))


def uid(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def only(obj: Obj) -> Obj:
    """Delete options that delete exactly the object read and judged (a replacement in between
    answers 409, and is read and judged again on the retry)."""
    return {"preconditions": {"uid": uid(obj)}}


def dicts(value: Any) -> list[Obj]:
    """The objects of a list read from the API (anything else: none)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []
