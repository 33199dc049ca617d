"""Reading and judging the Kubernetes objects activities fetch, on any cluster: their uid, the
preconditions that delete exactly the object judged, lists read from the API, the refusal of an
object that is not its owner's, how long a wait has left, and the delete of an owner's object
(`delete_owned`: read, judged, deleted only if it is the owner's, optionally waited for).

Used by the activities of `activities.management` and `activities.child_cluster`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio.exceptions import ApplicationError

from activities.watch import ObjectWatch
from infra.kube import Obj
from models.errors import ErrorType, permanent
from models.ownership import Ownership, refusal

ResultT = TypeVar("ResultT", bound=BaseModel)

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
    read: Callable[[], Awaitable[Obj | None]],
    delete: Callable[[Obj], Awaitable[Obj | None]],
    *,
    wait_until: datetime | None = None,
    watch: ObjectWatch | None = None,
    pause: float = 1.0,
) -> Deletion:
    """Delete the object `read` finds if `owns` says it is the owner's; any other of that name is
    left alone, never deleted by its name alone.

    Args:
        owns: whether an object read is the owner's.
        read: reads the object (None when there is none).
        delete: deletes it with the delete options it is given (`only` the object judged); None
            when it was gone already.
        wait_until: wait until the object judged is gone (another of the same name does not
            count), or this time passes (`gone=False`).
        watch: the object's watch, so that the wait ends at its removal; without one, or when
            no event comes, it is looked at every `pause` seconds.
    """
    existing = await read()
    if existing is None:
        return Deletion(existed=False)
    if not owns(existing):
        return Deletion(existed=True, foreign=True)
    deleted = await delete(only(existing))
    if wait_until is None:
        return Deletion(existed=deleted is not None)
    while (found := await read()) is not None and uid(found) == uid(existing):
        left = seconds_until(wait_until)
        if left <= 0:
            return Deletion(existed=True, gone=False)
        if watch is None:
            await asyncio.sleep(min(pause, left))
        else:
            await watch.changed(found, min(pause, left))
    return Deletion(existed=deleted is not None, gone=True)
