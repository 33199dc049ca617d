"""Finding what an owner made on the management cluster by its ownership marks alone: the
ServiceSets, Secrets and ClusterDeployments in a namespace that carry Colony's `managed-by` label,
the owner's organization label and its workflow's annotation (`models.ownership.Owner.owns`).
Nothing is found by its name.

`MarkedObjectActivities` receives the management cluster's client (`worker.py`). Called by
`PurgeWorkflow` (`workflows.purge_calls`), which then deletes each object through the entities'
own delete activities, each judging it again before it deletes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client

from activities.declarations import implements, purge_calls
from activities.kube import call_or_none
from activities.objects import CLUSTER_DEPLOYMENT, K0RDENT, SERVICE_SET, dicts
from infra.kube import Obj
from models.activity_api import OWNER_ANNOTATION
from models.ownership import MANAGED_BY, MANAGED_BY_LABEL
from models.purge import FindMarkedObjectsRequest, FindMarkedObjectsResult, MarkedObject

COLONY_MADE = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
"""The label selector of everything Colony makes (the owner is judged on each object found)."""


def marked_object(kind: str, obj: Obj) -> MarkedObject:
    """What a purge needs of an object it found: where it is, its owner key, its cluster."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    return MarkedObject(
        kind=kind,
        name=str(meta.get("name") or ""),
        namespace=str(meta.get("namespace") or ""),
        owner_key=str((meta.get("annotations") or {}).get(OWNER_ANNOTATION) or ""),
        cluster_deployment=str(spec.get("cluster") or "") if kind == SERVICE_SET.name else "",
    )


class MarkedObjectActivities:
    """The management cluster's objects an owner made, found by their marks."""

    def __init__(self, management_api: client.ApiClient) -> None:
        self._core = client.CoreV1Api(management_api)
        self._custom = client.CustomObjectsApi(management_api)

    @implements(purge_calls.FIND_MARKED_OBJECTS)
    async def find_marked_objects(
        self, request: FindMarkedObjectsRequest
    ) -> FindMarkedObjectsResult:
        """The ServiceSets, Secrets and ClusterDeployments of `namespace` that are the owner's."""
        namespace = request.namespace
        lists: list[tuple[str, Callable[..., Any], tuple[Any, ...]]] = [
            (
                SERVICE_SET.name,
                self._custom.list_namespaced_custom_object,
                (*K0RDENT, namespace, SERVICE_SET.plural),
            ),
            ("Secret", self._core.list_namespaced_secret, (namespace,)),
            (
                CLUSTER_DEPLOYMENT.name,
                self._custom.list_namespaced_custom_object,
                (*K0RDENT, namespace, CLUSTER_DEPLOYMENT.plural),
            ),
        ]
        found = FindMarkedObjectsResult()
        for kind, list_call, args in lists:
            listed = await call_or_none(
                f"list {kind}s in {namespace}", list_call, *args, label_selector=COLONY_MADE
            )
            found.objects += [
                marked_object(kind, obj)
                for obj in dicts((listed or {}).get("items"))
                if request.owner.owns(obj)
            ]
        return found
