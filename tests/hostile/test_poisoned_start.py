"""A workflow is started only with input its worker can read: what a start (or an update) sends is
encoded with the worker's data converter, decoded back into the contract's model and compared
before anything is sent (`clients.temporal.check_carried`).

The reported wedge: `values` 200 deep passed every check of the time, the workflow started, and
its worker failed every workflow task (`ValidationError for WorkspaceWorkflowInput ...
json_invalid` -> "Failed decoding arguments"). The API's bounds now refuse such values first
(`test_input_bounds`); this is the net under every door, proven here through the entity clients
themselves, with requests that slip past the models' bounds (an operator's, or a future field
without one): refused, and no workflow exists.
"""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode

from clients.clusters import TemporalClusters
from clients.errors import InvalidRequestError
from clients.temporal import TemporalSession, check_carried
from clients.workspaces import TemporalWorkspaces
from models.cluster import ClusterSpec, ClusterWorkflowInput
from models.colony import ApplyColonyRequest
from models.manifests import ColonySpec
from models.workspace import WorkspaceSpec, WorkspaceWorkflowInput
from tests.api.conftest import JUPYTER, ApiStack
from tests.helpers import unique
from workflows.colony import COLONY

CONVERTER = pydantic_data_converter.payload_converter


def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"a": value}
    return value


def workspace(name: str, organization: str = "", **changes: Any) -> WorkspaceSpec:
    """A deploy request as a model holds it, past the bounds a user's request is checked with."""
    data = {"name": name, "class": JUPYTER, "cluster": "c", "organization": organization, **changes}
    return WorkspaceSpec.model_validate(data)


def test_an_input_its_worker_reads_back_equal_is_carried() -> None:
    spec = workspace("nb", values={"deep": nested(30), "n": 1.5, "t": "x" * 60_000})
    check_carried(CONVERTER, WorkspaceWorkflowInput(spec=spec), WorkspaceWorkflowInput)
    colony = ColonySpec.model_validate({"name": "lab"})
    check_carried(CONVERTER, ApplyColonyRequest(spec=colony), COLONY.updates()["apply"].input)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param(
            workspace("nb", values=nested(200)),
            "request: its workflow could not read it (Invalid JSON: recursion limit exceeded",
            id="200-deep",
        ),
        pytest.param(
            workspace("nb", values={"x": float("nan")}),
            "values: would not reach its workflow as sent (a value JSON cannot carry exactly); "
            "nothing was started",
            id="nan",
        ),
        pytest.param(
            workspace("nb", values={f"k{i}": "x" * 60_000 for i in range(10)}),
            "request: 586 KiB once encoded for its workflow; at most 512 KiB are allowed",
            id="too-large",
        ),
    ],
)
def test_an_input_its_worker_could_not_read_is_refused(spec: WorkspaceSpec, message: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        check_carried(CONVERTER, WorkspaceWorkflowInput(spec=spec), WorkspaceWorkflowInput)
    assert caught.value.message.startswith(message)


async def exists(stack: ApiStack, workflow_id: str) -> bool:
    try:
        await stack.temporal.get_workflow_handle(workflow_id).describe()
    except RPCError as error:
        if error.status != RPCStatusCode.NOT_FOUND:
            raise
        return False
    return True


@pytest.mark.e2e
async def test_no_client_starts_a_workflow_its_worker_cannot_read(api_stack: ApiStack) -> None:
    organization = unique("evil")
    session = TemporalSession.of_client(api_stack.temporal, api_stack.settings, organization)
    started: list[str] = []
    try:
        for values in (nested(200), {"x": float("nan")}):
            spec = workspace(unique("poison"), organization, values=values)
            started.append(spec.workflow_id)
            with pytest.raises(InvalidRequestError):
                await TemporalWorkspaces(session).start(spec)
            assert not await exists(api_stack, spec.workflow_id)
        cluster = ClusterSpec.model_validate(
            {
                "name": unique("poison"),
                "locationId": "fra1",
                "organization": organization,
                "clusterAnnotations": {f"k{i}": "x" * 60_000 for i in range(10)},
            }
        )
        started.append(cluster.workflow_id)
        with pytest.raises(InvalidRequestError) as caught:
            await TemporalClusters(session)._start(
                name=cluster.name,
                organization=organization,
                argument=ClusterWorkflowInput(spec=cluster),
                marks=[],
                summary="a poisoned cluster",
            )
        assert "once encoded for its workflow; at most 512 KiB are allowed" in caught.value.message
        assert not await exists(api_stack, cluster.workflow_id)
    finally:
        # Only where the check failed (the old code) is anything left to end.
        for workflow_id in started:
            if await exists(api_stack, workflow_id):
                await api_stack.temporal.get_workflow_handle(workflow_id).terminate("test")
