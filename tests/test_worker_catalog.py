"""The worker's catalog workflow follows the worker's task queue (on the dev server)."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from models.workspace_api import CATALOG_WORKFLOW_ID
from tests.helpers import unique
from worker import ensure_catalog

pytestmark = pytest.mark.e2e


async def test_a_catalog_left_on_another_task_queue_is_started_again_on_ours(
    dev_env: WorkflowEnvironment,
) -> None:
    old_queue, new_queue = unique("gone"), unique("ours")
    await ensure_catalog(dev_env.client, old_queue)  # no worker will ever poll this queue
    await ensure_catalog(dev_env.client, new_queue)

    handle = dev_env.client.get_workflow_handle(CATALOG_WORKFLOW_ID)
    described = await handle.describe()
    assert (described.status, described.task_queue) == (WorkflowExecutionStatus.RUNNING, new_queue)
    # The same queue again changes nothing: the running catalog is kept.
    await ensure_catalog(dev_env.client, new_queue)
    assert (await handle.describe()).run_id == described.run_id
    await handle.terminate(reason="test finished")
