"""Activities on a child cluster's namespaces: a workspace's namespace made and deleted, and its
recent events (the context of a failure).

`NamespaceActivities` reaches the child through its kubeconfig Secret
(`activities.child_cluster.clients`). Called by `WorkspaceWorkflow` and `PrerequisiteWorkflow`
through the declarations in `workflows.workspace_calls`.

A namespace is created with its owner's marks, and one of that name is only taken over or deleted
when it is that owner's: a user's own namespace (`ws-nb` without Colony's marks) is refused on
create (`ForeignObject`) and left alone on delete. A delete with `wait_until` follows the
namespace's next change through a watch (`activities.watch`), polling only as a fallback.
"""

from __future__ import annotations

from datetime import UTC, datetime

from kubernetes.client.exceptions import ApiException

from activities.addresses import NamespaceAddress
from activities.child_cluster.clients import ChildClusterActivities
from activities.declarations import implements, workspace_calls
from activities.errors import kube_error
from activities.kube import call, call_or_none
from activities.objects import delete_owned, foreign
from models.ownership import Ownership
from models.workspace import EventSummary
from models.workspace_api import (
    DeleteNamespaceRequest,
    DeleteNamespaceResult,
    EnsureNamespaceRequest,
    EnsureNamespaceResult,
    RecentEventsRequest,
    RecentEventsResult,
)

POLL = 1.0
"""Seconds between looks at a namespace being deleted, when its watch gives no event."""


class NamespaceActivities(ChildClusterActivities):
    """Namespaces and their events in child clusters, reached through their kubeconfig Secrets."""

    @implements(workspace_calls.ENSURE_NAMESPACE)
    async def ensure_namespace(self, request: EnsureNamespaceRequest) -> EnsureNamespaceResult:
        """Create the namespace with the owner's marks; one that exists is taken only if it is
        the owner's (an earlier attempt's): a user's own is refused, untouched."""
        core = await self._core(request.kubeconfig)
        what = f"create namespace {request.name}"
        body = {"metadata": request.owner.mark({"name": request.name, "labels": request.labels})}
        try:
            await call(what, core.create_namespace, body)
        except ApiException as exc:
            if exc.status != 409:
                raise kube_error(exc, what) from exc
            existing = await NamespaceAddress(core, request.name).read()
            if existing is None:
                raise kube_error(exc, what) from exc  # deleted in between: the retry creates it
            ownership = request.owner.judge(existing)
            if ownership is not Ownership.OURS:
                raise foreign("namespace", "", request.name, ownership) from exc
            if (existing.get("metadata") or {}).get("deletionTimestamp"):
                # Ours, still terminating after an earlier delete: the retry creates it anew.
                raise kube_error(exc, f"{what} (the previous one is still being deleted)") from exc
            return EnsureNamespaceResult(created=False)
        return EnsureNamespaceResult(created=True)

    @implements(workspace_calls.DELETE_NAMESPACE)
    async def delete_namespace(self, request: DeleteNamespaceRequest) -> DeleteNamespaceResult:
        """Delete the namespace if it is the owner's (and, with `wait_until`, wait till it is gone);
        any other of that name, a user's own above all, is left as it is."""
        namespace = NamespaceAddress(await self._core(request.kubeconfig), request.name)
        deletion = await delete_owned(
            request.owner.owns, namespace, wait_until=request.wait_until, pause=POLL
        )
        return deletion.result(DeleteNamespaceResult)

    @implements(workspace_calls.RECENT_EVENTS)
    async def recent_events(self, request: RecentEventsRequest) -> RecentEventsResult:
        """The namespace's last events (for a failure's context)."""
        core = await self._core(request.kubeconfig)
        listed = await call_or_none(
            f"list events in {request.namespace}", core.list_namespaced_event, request.namespace
        )
        events = []
        for event in (listed or {}).get("items") or []:
            involved = event.get("involvedObject") or {}
            seen = event.get("lastTimestamp") or event.get("eventTime") or ""
            events.append(
                EventSummary(
                    type=str(event.get("type") or "Normal"),
                    reason=str(event.get("reason", "")),
                    message=f"{involved.get('kind', '')}/{involved.get('name', '')}: "
                    f"{event.get('message', '')}",
                    last_seen=datetime.fromisoformat(str(seen).replace("Z", "+00:00"))
                    if seen
                    else None,
                )
            )
        events.sort(key=lambda e: e.last_seen or datetime.min.replace(tzinfo=UTC))
        return RecentEventsResult(events=events[-request.limit :])
