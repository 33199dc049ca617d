"""The payloads of the signals other services (a watcher, a scheduler, the workspace and capacity
workflows) send Colony's entity workflows, one model per signal. The signals' names, and which
workflow takes which, are the workflows' contracts (`workflows/<entity>/__init__.py`).

Every signal carries a `request_id` chosen by the sender: a workflow acts on an id once and ignores
it when it arrives again (a sender that is unsure whether its signal landed simply sends it again).
The ids seen are kept, bounded, across continue-as-new (`workflows.kit.engine.RequestIds`).

Workflow to workflow, the pattern is the same in both directions: signal with a request id (and the
id of the workflow to answer, where an answer is expected), and answer by a signal carrying that
request id, or let the caller poll a query.
"""

from __future__ import annotations

from enum import StrEnum

from models.base import ColonyModel


class RefreshRequest(ColonyModel):
    """Look at the world now (nodes and their readiness), instead of at the next operation.

    `temporal workflow signal --workflow-id cluster/training --name refresh --input '{"requestId": "r1"}'`
    """

    request_id: str
    reason: str = ""
    """Who asks and why, for the log ("watcher reconnected", "operator")."""


class NodeEventType(StrEnum):
    """What happened to a Node, as a Kubernetes watch reports it."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


class NodeEvent(ColonyModel):
    """A Node of the cluster changed: sent by the watcher (or any service watching the cluster).

    `temporal workflow signal --workflow-id cluster/training --name node_event --input
    '{"requestId": "n-42", "node": "h100-003", "type": "MODIFIED", "readyStatus": "False"}'`
    """

    request_id: str
    node: str
    """The Node's name (Colony's nodes are named after their host id)."""
    type: NodeEventType = NodeEventType.MODIFIED
    ready_status: str = "Unknown"
    """The Node's Ready condition: "True", "False" or "Unknown"."""
    unschedulable: bool = False
    resource_version: str = ""
    """The Node's resourceVersion, so a late, older event never overwrites a newer one."""


class GatewayChanged(ColonyModel):
    """A tenant Gateway of the workspace's cluster appeared, changed or went: look at it now and
    route the workspace's endpoints as it is (sent by the watcher to every workspace with a
    namespace in that cluster; a workspace also looks by itself, less often).

    `temporal workflow signal --workflow-id workspace/nb --name gateway_changed --input
    '{"requestId": "g-1", "gateway": "colony-gateway/tenant", "type": "DELETED"}'`
    """

    request_id: str
    cluster: str = ""
    """The ClusterDeployment whose child holds the Gateway."""
    gateway: str = ""
    """`<namespace>/<name>` of the Gateway."""
    type: NodeEventType = NodeEventType.MODIFIED
    """ADDED, MODIFIED or DELETED, as the watch reported it."""


class ScaleRequested(ColonyModel):
    """To a cluster (signal `scale_requested`): set a pool's count, as the `scale_node_pool`
    update does, from a sender that cannot send updates (its colony's workflow, when a re-applied
    manifest changes a template entry's `workersNumber`). Checked by the same rules; a refusal is
    logged on the cluster, nothing is queued."""

    request_id: str
    pool: str
    count: int
    reason: str = ""
