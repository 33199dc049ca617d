"""Finding what an owner made on a workspace's cluster by its ownership marks alone: the
namespaces that carry Colony's `managed-by` label, the owner's organization label and its
workflow's annotation, and the HTTPRoutes and TCPRoutes in them that carry the same. Nothing is
found by its name.

The cluster itself is trusted only once its ClusterDeployment is found marked as a cluster of the
owner's organization (a workspace's workflow names its cluster by the ClusterDeployment; another
organization's cluster of that name is never looked into).

`MarkedChildObjectActivities` reaches the child through its kubeconfig Secret
(`activities.child_cluster.clients`). Called by `PurgeWorkflow` (`workflows.purge_calls`), which
then deletes each object through the workspace's own delete activities.
"""

from __future__ import annotations

from kubernetes import client

from activities.child_cluster.clients import ChildClusterActivities
from activities.child_cluster.routes import ROUTE_KINDS
from activities.declarations import implements, purge_calls
from activities.kube import call_or_none
from activities.management.marked import COLONY_MADE, marked_object
from activities.objects import dicts
from models.ownership import MANAGED_BY, MANAGED_BY_LABEL, ORGANIZATION_LABEL
from models.purge import (
    FindMarkedChildObjectsRequest,
    FindMarkedChildObjectsResult,
    MarkedObject,
)


class MarkedChildObjectActivities(ChildClusterActivities):
    """A child cluster's objects an owner made, found by their marks."""

    @implements(purge_calls.FIND_MARKED_CHILD_OBJECTS)
    async def find_marked_child_objects(
        self, request: FindMarkedChildObjectsRequest
    ) -> FindMarkedChildObjectsResult:
        """The owner's namespaces on the cluster, and its routes in them; nothing when the
        cluster is gone or is not the owner's organization's."""
        deployment = await self._cluster_deployment(request.namespace, request.cluster_deployment)
        if deployment is None:
            return FindMarkedChildObjectsResult(
                reachable=False, problem="its ClusterDeployment is gone, and its objects with it"
            )
        labels = (deployment.get("metadata") or {}).get("labels") or {}
        if (
            labels.get(MANAGED_BY_LABEL) != MANAGED_BY
            or labels.get(ORGANIZATION_LABEL) != request.owner.organization
        ):
            return FindMarkedChildObjectsResult(
                reachable=False,
                problem="its ClusterDeployment is not marked as this organization's cluster: "
                "not looked into",
            )
        secret = await call_or_none(
            f"read Secret {request.kubeconfig.namespace}/{request.kubeconfig.secret_name}",
            self._management.read_namespaced_secret,
            request.kubeconfig.secret_name,
            request.kubeconfig.namespace,
        )
        if secret is None:
            return FindMarkedChildObjectsResult(
                reachable=False, problem="it has no kubeconfig Secret (it is being torn down)"
            )
        core = await self._core(request.kubeconfig)
        custom = await self._custom(request.kubeconfig)
        listed = await call_or_none(
            "list namespaces", core.list_namespace, label_selector=COLONY_MADE
        )
        found = FindMarkedChildObjectsResult()
        for namespace in dicts((listed or {}).get("items")):
            if not request.owner.owns(namespace):
                continue
            name = str((namespace.get("metadata") or {}).get("name") or "")
            found.namespaces.append(name)
            found.routes += await self._routes(custom, name, request)
        return found

    @staticmethod
    async def _routes(
        custom: client.CustomObjectsApi, namespace: str, request: FindMarkedChildObjectsRequest
    ) -> list[MarkedObject]:
        routes: list[MarkedObject] = []
        for kind in ROUTE_KINDS.values():
            listed = await call_or_none(
                f"list {kind.name}s in {namespace}",
                custom.list_namespaced_custom_object,
                kind.group,
                kind.version,
                namespace,
                kind.plural,
                label_selector=COLONY_MADE,
            )
            routes += [
                marked_object(kind.name, obj)
                for obj in dicts((listed or {}).get("items"))
                if request.owner.owns(obj)
            ]
        return routes
