"""The contract of `ClusterWorkflow` (`workflows.kit.contract`): one workflow per cluster, id
`cluster/[<organization>/]<name>`. Users change the cluster through its updates (each queues an
operation and answers with its id and place), other services tell it about the world through its
signals, and `status` shows it."""

from __future__ import annotations

from temporalio import workflow

from workflows.kit.contract import STATUS_QUERY, Query, Signal, Update, WorkflowContract

# The package is also its workflow module's parent, which the sandbox imports for every
# workflow run: its models are passed through, as the workflow modules' own are, so both
# see the same classes.
with workflow.unsafe.imports_passed_through():
    from models import operations as op
    from models.cluster import ClusterStatus, ClusterWorkflowInput, cluster_workflow_id
    from models.signals import NodeEvent, RefreshRequest, ScaleRequested
    from models.workspace_api import DeleteRequested, GpuHoldersMessage


class ClusterContract(WorkflowContract[ClusterWorkflowInput, ClusterStatus, [str, str]]):
    """`ClusterWorkflow`'s updates, signals and query."""

    add_node_pool = Update("add_node_pool", op.AddNodePoolRequest, op.OperationAccepted)
    scale_node_pool = Update("scale_node_pool", op.ScaleNodePoolRequest, op.OperationAccepted)
    delete_node_pool = Update("delete_node_pool", op.DeleteNodePoolRequest, op.OperationAccepted)
    delete_node = Update("delete_node", op.DeleteNodeRequest, op.OperationAccepted)
    delete_cluster = Update("delete_cluster", op.DeleteClusterRequest, op.OperationAccepted)
    """Jumps the queue: the queue is cancelled and the running operation interrupted."""
    cancel_operation = Update("cancel_operation", op.CancelOperationRequest, op.Operation)
    """Answers once the operation has settled."""

    refresh = Signal("refresh", RefreshRequest)
    """Look at the nodes now (the watcher, after a ClusterDeployment's change or a relist)."""
    node_event = Signal("node_event", NodeEvent)
    """A Node's change, from the watcher."""
    delete_requested = Signal("delete_requested", DeleteRequested)
    """`delete_cluster` for senders that cannot send updates (its colony's workflow)."""
    scale_requested = Signal("scale_requested", ScaleRequested)
    """`scale_node_pool` for senders that cannot send updates (its colony's workflow)."""
    gpu_holders = Signal("gpu_holders", GpuHoldersMessage)
    """Which workspaces hold GPUs on which nodes, from the cluster's GPU ledger."""

    status = Query(STATUS_QUERY, ClusterStatus)


CLUSTER = ClusterContract(
    "ClusterWorkflow", ClusterWorkflowInput, ClusterStatus, workflow_id=cluster_workflow_id
)
