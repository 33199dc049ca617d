"""Reading and judging the Kubernetes objects activities fetch, on any cluster: the k0rdent kinds
Colony reads, their uid, the preconditions that delete exactly the object judged, lists read from
the API, the refusal of an object that is not its owner's, how long a wait has left, and the delete
of an owner's object (`delete_owned`: read at its address, judged, deleted only if it is the
owner's, optionally waited for).

Used by the activities of `activities.management` and `activities.child_cluster`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio.exceptions import ApplicationError

from activities.addresses import Address, CustomKind
from infra.kube import Obj
from models.errors import ErrorType, permanent
from models.ownership import Ownership, refusal

ResultT = TypeVar("ResultT", bound=BaseModel)

K0RDENT = ("k0rdent.mirantis.com", "v1beta1")
"""Group and version of k0rdent's objects (ClusterDeployments, ServiceSets, ServiceTemplates)."""
CLUSTER_DEPLOYMENT = CustomKind(
    *K0RDENT, "clusterdeployments", "ClusterDeployment", propagation_policy="Background"
)
"""Deleted in the background: k0rdent's finalizer tears the cluster down after the delete."""
CLUSTER_TEMPLATE = CustomKind(*K0RDENT, "clustertemplates", "ClusterTemplate")
CREDENTIAL = CustomKind(*K0RDENT, "credentials", "Credential")
SERVICE_SET = CustomKind(*K0RDENT, "servicesets", "ServiceSet")
SERVICE_TEMPLATE = CustomKind(*K0RDENT, "servicetemplates", "ServiceTemplate")


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


@dataclass(frozen=True)
class Deletion:
    """What deleting an owner's object came to (the fields of the delete activities' results)."""

    existed: bool
    gone: bool = True
    foreign: bool = False
    """One of that name exists and is not the owner's: it was left alone."""

    def result(self, model: type[ResultT]) -> ResultT:
        """The delete activity's result: the fields of this its model has."""
        fields = {"existed": self.existed, "gone": self.gone, "foreign": self.foreign}
        return model.model_validate({k: v for k, v in fields.items() if k in model.model_fields})


async def delete_owned(
    owns: Callable[[Obj], bool],
    address: Address,
    *,
    wait_until: datetime | None = None,
    pause: float = 1.0,
) -> Deletion:
    """Delete the object at `address` if `owns` says it is the owner's; any other of that name is
    left alone, never deleted by its name alone.

    Args:
        owns: whether an object read is the owner's.
        address: where the object is (read there, and deleted with the options that delete
            `only` the object judged).
        wait_until: wait until the object judged is gone (another of the same name does not
            count), or this time passes (`gone=False`); each pause ends at the object's next
            change (its watch), else after `pause` seconds.
    """
    existing = await address.read()
    if existing is None:
        return Deletion(existed=False)
    if not owns(existing):
        return Deletion(existed=True, foreign=True)
    deleted = await address.delete(only(existing))
    if wait_until is None:
        return Deletion(existed=deleted is not None)
    async with address.watch() as watch:
        while (found := await address.read()) is not None and uid(found) == uid(existing):
            left = seconds_until(wait_until)
            if left <= 0:
                return Deletion(existed=True, gone=False)
            await watch.changed(found, min(pause, left))
    return Deletion(existed=deleted is not None, gone=True)
