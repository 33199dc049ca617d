"""Deliberately broken stand-ins for two of Colony's workflows, registered under their real names:
each raises on every workflow task, as a worker release with a bug in workflow code would. A test
runs them on a worker of its own task queue, after the real workflows started there, so that the
cluster's and the workspace's running workflows cannot make progress (their next task fails, and
every retry of it).

Kept apart from the tests: the workflow sandbox imports this module, and it imports nothing but
the SDK and the contracts.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from workflows.cluster import CLUSTER
from workflows.workspace import WORKSPACE

BUG = "a worker bug: this release's workflow raises on every task"


@workflow.defn(name=WORKSPACE.workflow_type)
class BrokenWorkspaceWorkflow:
    @workflow.run
    async def run(self, input: dict[str, Any]) -> None:
        raise RuntimeError(BUG)


@workflow.defn(name=CLUSTER.workflow_type)
class BrokenClusterWorkflow:
    @workflow.run
    async def run(self, input: dict[str, Any]) -> None:
        raise RuntimeError(BUG)
