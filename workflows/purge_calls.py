"""The activities only a purge calls (`workflows.purge`), declared once (`workflows.kit.activity`):
a look at the workflow it ends, the termination, the ledger's holdings of a workspace, and the
searches by ownership marks on the management cluster and a workspace's cluster. The deletes it
runs are the entities' own declarations (`workflows.workspace_calls`, `workflows.cluster_calls`).
"""

from __future__ import annotations

from temporalio import workflow

from workflows.kit.activity import ActivityCall

with workflow.unsafe.imports_passed_through():
    from models.purge import (
        FindMarkedChildObjectsRequest,
        FindMarkedChildObjectsResult,
        FindMarkedObjectsRequest,
        FindMarkedObjectsResult,
        InspectWorkflowRequest,
        InspectWorkflowResult,
        PurgeActivity,
        TerminateWorkflowRequest,
        TerminateWorkflowResult,
    )
    from models.workspace_api import LedgerHoldings, ReadLedgerHoldingsRequest

INSPECT_WORKFLOW = ActivityCall(
    PurgeActivity.INSPECT_WORKFLOW,
    InspectWorkflowRequest,
    InspectWorkflowResult,
    lambda r: f"look at workflow {r.workflow_id}",
)
TERMINATE_WORKFLOW = ActivityCall(
    PurgeActivity.TERMINATE_WORKFLOW,
    TerminateWorkflowRequest,
    TerminateWorkflowResult,
    lambda r: f"terminate workflow {r.workflow_id} (run {r.run_id})",
)
READ_LEDGER_HOLDINGS = ActivityCall(
    PurgeActivity.READ_LEDGER_HOLDINGS,
    ReadLedgerHoldingsRequest,
    LedgerHoldings,
    lambda r: f"ask {r.ledger_workflow_id} what {r.query.reply_to} holds",
)
FIND_MARKED_OBJECTS = ActivityCall(
    PurgeActivity.FIND_MARKED_OBJECTS,
    FindMarkedObjectsRequest,
    FindMarkedObjectsResult,
    lambda r: f"find objects in {r.namespace} marked as {r.owner.workflow_id}'s",
)
FIND_MARKED_CHILD_OBJECTS = ActivityCall(
    PurgeActivity.FIND_MARKED_CHILD_OBJECTS,
    FindMarkedChildObjectsRequest,
    FindMarkedChildObjectsResult,
    lambda r: f"find objects on {r.cluster_deployment} marked as {r.owner.workflow_id}'s",
)
