"""What a watch event becomes: the signal, its target workflow and its request id (pure, no IO).

Called by `watching.service` for every event of every stream; unit-tested on its own
(`tests/test_watcher_mapping.py`).

Request ids make every signal idempotent (a workflow ignores an id it has seen), and they are built
from what identifies one state of one object, so a watcher that sends the same event twice (after a
restart, a relist, or a second watcher during a handover) costs nothing:

- an object Colony owns changed (a ClusterDeployment, any object carrying Colony's ownership
  marks, `models.ownership`): `refresh` to the workflow its `colony.dev/workflow-id` names, when
  that workflow acts on one (its contract declares `refresh`: a cluster looks at its nodes; a
  workspace or a colony would only add an event to its history), request id
  `<Kind>/<uid>/<resourceVersion>`;
- a Node of a child cluster changed: `node_event`, request id `node/<cluster>/<uid>/<resourceVersion>`;
- a tenant Gateway of a child cluster (label `colony.dev/tenant-gateway=true`) appeared, changed or
  went: `gateway_changed` to every workspace with a namespace in that child (its marks name the
  workspace's workflow, of the cluster's own organization), request id
  `gateway/<cluster>/<uid>/<resourceVersion>`;
- a stream was relisted (410 Gone: events may have been missed): `refresh` to the owners that act
  on one, request id `relist/<stream>/<resourceVersion of the list>`.

Not every event is worth a signal, since each one is an event in the workflow's history: a Node
is signalled when what the workflow records changes (Ready, unschedulable, added, deleted), not on
every status heartbeat; an owned object when its generation, deletion or status changes, not when
only timestamps or messages move (`Fingerprints`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from models.identity import Entity, entity_workflow_id, parse_entity_workflow_id
from models.ownership import marked_entity
from models.signals import GatewayChanged, NodeEvent, NodeEventType, RefreshRequest
from workflows.cluster import CLUSTER
from workflows.colony import COLONY
from workflows.kit.contract import WorkflowContract
from workflows.workspace import WORKSPACE

CLUSTER_LABEL = "colony.dev/cluster"
"""ClusterDeployments Colony created carry it (the cluster's name)."""
WORKSPACE_LABEL = "colony.dev/workspace"
"""What Colony made for a workspace carries it (the workspace's name): its namespace in the child
cluster, its ServiceSet."""
TENANT_GATEWAY_SELECTOR = "colony.dev/tenant-gateway=true"
"""The Gateways routing looks for in a child cluster (`activities.child_cluster.routes.RouteActivities.find_tenant_gateway`)."""
DOMAIN_ANNOTATION = "colony.dev/domain"
"""A tenant Gateway's domain, when its listeners do not say it."""
KUBECONFIG_SECRET_SUFFIX = "-kubeconfig"
KUBECONFIG_KEY = "value"
"""k0rdent writes a child cluster's kubeconfig to Secret `<ClusterDeployment>-kubeconfig`, key
`value`, in the ClusterDeployment's namespace."""

_VOLATILE_KEYS = frozenset(
    {
        "lastTransitionTime",
        "lastUpdateTime",
        "lastHeartbeatTime",
        "lastProbeTime",
        "message",
        "observedGeneration",
    }
)
"""Status keys whose change alone says nothing a workflow acts on (KCM rewrites messages with
counters and times on every reconcile)."""

ATTACHED_ROUTES = frozenset({"attachedRoutes"})
"""A Gateway listener's count of routes attached to it."""

Obj = dict[str, Any]


@dataclass(frozen=True)
class Signal:
    """One signal to send: to `workflow_id`, named `name`, carrying `payload`."""

    workflow_id: str
    name: str
    """The signal's name, from the receiving workflow's contract (`workflows.<entity>`)."""
    payload: RefreshRequest | NodeEvent | GatewayChanged

    @property
    def request_id(self) -> str:
        return self.payload.request_id


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def owner_workflow_id(obj: Obj) -> str | None:
    """The workflow that owns `obj` (its `colony.dev/workflow-id` annotation), when the object
    carries Colony's ownership marks and they agree with each other (`models.ownership`: Colony
    made it, and its organization label is the workflow id's); None otherwise. An annotation alone
    makes no owner: nothing merely annotated can steer signals to another organization's workflow."""
    found = marked_entity(obj)
    return entity_workflow_id(*found) if found else None


CONTRACTS: dict[Entity, WorkflowContract[Any, Any, Any]] = {
    Entity.CLUSTER: CLUSTER,
    Entity.WORKSPACE: WORKSPACE,
    Entity.COLONY: COLONY,
}
"""The contract of each entity whose workflow an object's marks can name."""


def takes_refresh(workflow_id: str) -> bool:
    """True when the workflow acts on `refresh` (its contract declares it)."""
    found = parse_entity_workflow_id(workflow_id)
    return found is not None and CLUSTER.refresh.name in CONTRACTS[found[0]].signals()


def object_refresh(kind: str, obj: Obj) -> Signal | None:
    """`refresh` for an owned object's change; None when nothing owns it, or its owner would do
    nothing with it."""
    workflow_id = owner_workflow_id(obj)
    if workflow_id is None or not takes_refresh(workflow_id):
        return None
    meta = _meta(obj)
    request_id = f"{kind}/{meta.get('uid', '')}/{meta.get('resourceVersion', '')}"
    return Signal(
        workflow_id,
        CLUSTER.refresh.name,
        RefreshRequest(
            request_id=request_id, reason=f"watcher: {kind} {meta.get('name', '')} changed"
        ),
    )


def relist_refresh(workflow_id: str, stream: str, list_version: str) -> Signal | None:
    """`refresh` after a relist: events may have been missed (deletions above all); None for an
    owner that would do nothing with it."""
    if not takes_refresh(workflow_id):
        return None
    return Signal(
        workflow_id,
        CLUSTER.refresh.name,
        RefreshRequest(
            request_id=f"relist/{stream}/{list_version}",
            reason=f"watcher: {stream} relisted, events may have been missed",
        ),
    )


def ready_status(node: Obj) -> str:
    """The Node's Ready condition status ("True", "False", "Unknown"); "Unknown" without one."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            return str(condition.get("status") or "Unknown")
    return "Unknown"


def node_event(cluster: str, workflow_id: str, event_type: str, node: Obj) -> Signal:
    """`node_event` for a Node of `cluster` (the ClusterDeployment's name)."""
    meta = _meta(node)
    version = str(meta.get("resourceVersion", ""))
    return Signal(
        workflow_id,
        CLUSTER.node_event.name,
        NodeEvent(
            request_id=f"node/{cluster}/{meta.get('uid', '')}/{version}",
            node=str(meta.get("name", "")),
            type=NodeEventType(event_type),
            ready_status=ready_status(node),
            unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
            resource_version=version,
        ),
    )


def gateway_changed(workflow_id: str, cluster: str, event_type: str, gateway: Obj) -> Signal:
    """`gateway_changed` to a workspace of `cluster` (the ClusterDeployment's name)."""
    meta = _meta(gateway)
    return Signal(
        workflow_id,
        WORKSPACE.gateway_changed.name,
        GatewayChanged(
            request_id=f"gateway/{cluster}/{meta.get('uid', '')}/{meta.get('resourceVersion', '')}",
            cluster=cluster,
            gateway=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
            type=NodeEventType(event_type),
        ),
    )


def gateway_relisted(workflow_id: str, cluster: str, stream: str, list_version: str) -> Signal:
    """`gateway_changed` after a relist of a child's Gateways: one may have gone unseen."""
    return Signal(
        workflow_id,
        WORKSPACE.gateway_changed.name,
        GatewayChanged(request_id=f"relist/{stream}/{list_version}", cluster=cluster),
    )


def gateway_fingerprint(gateway: Obj) -> str:
    """What routes depend on in a Gateway: its spec (generation), its domain annotation, its
    deletion and its status without times, messages and route counts (every route a workspace
    attaches moves `attachedRoutes`: signalling that would tell every workspace of the cluster
    about every other one's deploy)."""
    meta = _meta(gateway)
    return json.dumps(
        [
            meta.get("generation"),
            (meta.get("annotations") or {}).get(DOMAIN_ANNOTATION),
            bool(meta.get("deletionTimestamp")),
            _stable(gateway.get("status"), ATTACHED_ROUTES),
        ],
        sort_keys=True,
        default=str,
    )


def workspace_owners(namespaces: list[Obj], cluster_deployment: Obj) -> list[str]:
    """The workspaces of a child cluster: the workflows its namespaces' marks name, when they are
    workspaces of the cluster's own organization (a namespace made in the child by hand, naming
    another organization's workspace, steers nothing there)."""
    cluster = marked_entity(cluster_deployment)
    if cluster is None:
        return []
    owners = set()
    for namespace in namespaces:
        found = marked_entity(namespace)
        if found is not None and found[0] is Entity.WORKSPACE and found[1] == cluster[1]:
            owners.add(entity_workflow_id(*found))
    return sorted(owners)


def node_fingerprint(node: Obj) -> tuple[str, bool]:
    """What the workflow records of a Node: its readiness and whether it is cordoned."""
    return ready_status(node), bool((node.get("spec") or {}).get("unschedulable"))


def _stable(value: Any, also: frozenset[str] = frozenset()) -> Any:
    if isinstance(value, dict):
        return {
            k: _stable(v, also)
            for k, v in value.items()
            if k not in _VOLATILE_KEYS and k not in also
        }
    if isinstance(value, list):
        return [_stable(v, also) for v in value]
    return value


def object_fingerprint(obj: Obj) -> str:
    """An owned object's generation, deletion and status without times and messages."""
    meta = _meta(obj)
    return json.dumps(
        [meta.get("generation"), bool(meta.get("deletionTimestamp")), _stable(obj.get("status"))],
        sort_keys=True,
        default=str,
    )


class Fingerprints:
    """The last signalled fingerprint of each object of one stream, to skip events that change
    nothing a workflow acts on. Empty after a restart: the first event of each object is sent."""

    def __init__(self) -> None:
        self._seen: dict[str, Any] = {}

    def changed(self, event_type: str, uid: str, fingerprint: Any) -> bool:
        """True when the event is worth a signal (and remember it as signalled)."""
        if event_type == "DELETED":
            self._seen.pop(uid, None)
            return True
        if uid in self._seen and self._seen[uid] == fingerprint:
            return False
        self._seen[uid] = fingerprint
        return True

    def forget(self, uid: str) -> None:
        self._seen.pop(uid, None)

    def known(self) -> set[str]:
        return set(self._seen)


def kubeconfig_secret(cluster_deployment: Obj) -> tuple[str, str]:
    """(namespace, name) of the Secret holding a ClusterDeployment's child kubeconfig."""
    meta = _meta(cluster_deployment)
    return str(meta.get("namespace", "")), f"{meta.get('name', '')}{KUBECONFIG_SECRET_SUFFIX}"
