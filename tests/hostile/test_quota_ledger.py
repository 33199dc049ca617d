"""The quota ledger (`QuotaWorkflow`) on the time-skipping server: concurrent creates never pass a
quota, its accounting survives the worker's crash, growth of a running cluster is admitted by the
cluster's workflow (the real `admit_quota` activity, over a stand-in catalog) and refused in the
ledger's words before anything is queued, entities give back what they held when they shrink and
when they are deleted, a holder whose workflow never started is forgotten by an audit, and a
refusal nothing could change costs the ledger no history.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
from temporalio import activity
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.quotas import QuotaActivities
from activities.temporal import TemporalActivities
from clients import quotas
from clients.errors import QuotaExceededError
from clients.temporal import TemporalSession
from infra.config import ColonySettings
from models.cluster import ClusterPhase
from models.errors import ErrorType
from models.operations import DeleteClusterRequest, ScaleNodePoolRequest
from models.quota import (
    DEFAULT_LIMITS,
    PENDING_GRACE,
    AdmitQuotaRequest,
    QuotaHolding,
    QuotaLedgerStatus,
    QuotaLimits,
    quota_workflow_id,
)
from models.workspace_api import (
    AwaitWorkflowsClosedRequest,
    AwaitWorkflowsClosedResult,
    WorkspaceActivity,
)
from tests.cluster_world import FakeColony, pool, start, worker
from tests.helpers import eventually, unique
from workflows.cluster import CLUSTER
from workflows.quota import QUOTA
from workflows.quota.workflow import QuotaWorkflow

pytestmark = pytest.mark.slow

H100_FRA = "fra/gpu:h100"


def session(env: WorkflowEnvironment, task_queue: str, **defaults: Any) -> TemporalSession:
    settings = ColonySettings(
        temporal_connect={},
        task_queue=task_queue,
        quota_defaults=DEFAULT_LIMITS.changed(QuotaLimits.model_validate(defaults), ()),
    )
    return TemporalSession.of_client(env.client, settings)


@contextlib.asynccontextmanager
async def ledger_worker(env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Worker]:
    """A worker running the ledger and the audit's activity (as `worker.py` does), caching no
    workflow: every task replays the ledger from its history, as a new worker after a crash does
    (and none is left on a sticky queue of a worker that stopped, which the time-skipping
    server, whose clock stands still, would never give up on)."""
    temporal = TemporalActivities(env.client, task_queue)
    async with Worker(
        env.client,
        task_queue=task_queue,
        workflows=[QuotaWorkflow],
        activities=[temporal.await_workflows_closed],
        max_cached_workflows=0,
    ) as running:
        yield running


async def ledger_status(env: WorkflowEnvironment, organization: str) -> QuotaLedgerStatus:
    handle = env.client.get_workflow_handle(quota_workflow_id(organization))
    status: QuotaLedgerStatus = await handle.query(QUOTA.status.name, result_type=QuotaLedgerStatus)
    return status


async def test_concurrent_creates_never_pass_the_quota_even_across_a_worker_crash(
    time_env: WorkflowEnvironment, task_queue: str
) -> None:
    organization = unique("evil")
    client_session = session(time_env, task_queue, clusters=5)

    async def create(index: int) -> str:
        try:
            await quotas.admit(
                client_session,
                organization,
                holder=f"cluster/{organization}/c{index}",
                request_id=f"req-{index}",
                need=QuotaHolding(clusters=1),
                subject=f"cluster 'c{index}'",
            )
        except QuotaExceededError as exc:
            return exc.message
        return "admitted"

    async with ledger_worker(time_env, task_queue):
        first = await asyncio.gather(*(create(i) for i in range(3)))
        # Thirty at once; the worker dies while they are being decided.
        racing = [asyncio.ensure_future(create(i)) for i in range(3, 33)]
        await eventually(
            lambda: ledger_status(time_env, organization),
            until=lambda status: status.usage.clusters >= 4,
            timeout=30,
            what="some of the racing creates decided",
        )
    async with ledger_worker(time_env, task_queue):  # a new worker: the ledger replays
        outcomes = [*first, *await asyncio.gather(*racing)]
        status = await ledger_status(time_env, organization)
    assert outcomes.count("admitted") == 5
    refused = {o for o in outcomes if o != "admitted"}
    assert refused == {
        f"quota.clusters: organization '{organization}' would exceed its quota of 5 clusters: "
        "5 in use, 1 more asked"
    }
    assert status.usage.clusters == 5
    assert len(status.holders) == 5


async def test_a_create_whose_workflow_never_started_is_forgotten_by_an_audit(
    time_env: WorkflowEnvironment, task_queue: str
) -> None:
    organization = unique("org")
    client_session = session(time_env, task_queue, clusters=1)

    async def admit(name: str) -> None:
        await quotas.admit(
            client_session,
            organization,
            holder=f"cluster/{organization}/{name}",
            request_id=unique("req"),
            need=QuotaHolding(clusters=1),
            subject=f"cluster '{name}'",
        )

    async with ledger_worker(time_env, task_queue):
        await admit("orphan")  # its client died before it started the workflow
        with pytest.raises(QuotaExceededError):
            await admit("next")
        await time_env.sleep(PENDING_GRACE + timedelta(minutes=1))
        await admit("next")  # the refusal's audit found the orphan's workflow never ran
        status = await ledger_status(time_env, organization)
    assert [h.holder for h in status.holders] == [f"cluster/{organization}/next"]


async def test_a_refusal_nothing_could_change_costs_the_ledger_no_history(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """On the dev server (the time-skipping server keeps the workflow task of a rejected update;
    Temporal's own server drops it: a validator's refusal leaves no event)."""
    organization = unique("org")
    handle = await quotas.ledger(session(dev_env, task_queue), organization)

    def request(index: int) -> AdmitQuotaRequest:
        return AdmitQuotaRequest(
            holder=f"workspace/{organization}/w{index}",
            request_id=f"r{index}",
            need=QuotaHolding(workspaces=1),
            creates=True,
            defaults=DEFAULT_LIMITS.changed(QuotaLimits(workspaces=1), ()),
        )

    async with ledger_worker(dev_env, task_queue):
        await handle.execute_update(QUOTA.admit.name, request(0))
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update(QUOTA.admit.name, request(1))  # audits: history
        events = len((await handle.fetch_history()).events)
        for index in range(2, 12):
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await handle.execute_update(QUOTA.admit.name, request(index))
            cause = refused.value.cause
            assert isinstance(cause, ApplicationError)
            assert cause.type == ErrorType.QUOTA_EXCEEDED
        assert len((await handle.fetch_history()).events) == events


@dataclass
class CountedWorld(FakeColony):
    """The cluster's stand-in world, with the real lookup of which workflows run (the ledger's
    audit asks it: the stand-in's "none" would make it forget the running cluster)."""

    temporal: TemporalActivities | None = None

    @activity.defn(name=WorkspaceActivity.AWAIT_WORKFLOWS_CLOSED)
    async def await_workflows_closed(
        self, request: AwaitWorkflowsClosedRequest
    ) -> AwaitWorkflowsClosedResult:
        assert self.temporal is not None
        return await self.temporal.await_workflows_closed(request)


class Catalog:
    """The host provider's catalog as `admit_quota` reads it: 20 hosts of `h100` (8 GPUs each)
    and 20 of `cpu-32` in location `fra` (the cluster world's)."""

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/gpu-models":
            return httpx.Response(200, json={"items": [{"id": "h100", "gpusPerHost": 8}]})
        if request.url.path == "/v1/hosts":
            hosts = [
                {"id": f"{sku}-{n}", "location": "fra", **{field: sku}}
                for sku, field in (("h100", "gpuModelId"), ("cpu-32", "cpuSku"))
                for n in range(20)
            ]
            return httpx.Response(200, json={"items": hosts})
        return httpx.Response(404, json={"error": {"message": "no such path"}})


async def test_a_running_cluster_s_growth_is_admitted_by_its_workflow_and_given_back(
    time_env: WorkflowEnvironment, task_queue: str
) -> None:
    organization = unique("acme")
    fake = CountedWorld(temporal=TemporalActivities(time_env.client, task_queue))
    provider = httpx.AsyncClient(
        base_url="http://provider.test", transport=httpx.MockTransport(Catalog().handle)
    )
    activity = QuotaActivities(
        time_env.client, task_queue, provider, DEFAULT_LIMITS.changed(QuotaLimits(hosts=3), ())
    )
    fake.quota = activity.admit_quota
    await quotas.ledger(session(time_env, task_queue), organization)
    async with provider, worker(time_env, task_queue, fake, workflows=(QuotaWorkflow,)):
        run = await start(time_env, task_queue, fake, pool("gpu", 2), organization=organization)
        await run.ready()
        holder = run.handle.id
        status = await eventually(
            lambda: ledger_status(time_env, organization),
            until=lambda s: [h.holder for h in s.holders] == [holder],
            what="the cluster reported itself",
        )
        assert status.usage.hosts == 2

        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await run.handle.execute_update(
                CLUSTER.scale_node_pool.name, ScaleNodePoolRequest(pool="gpu", count=4)
            )
        cause = refused.value.cause
        assert isinstance(cause, ApplicationError)
        assert cause.type == ErrorType.QUOTA_EXCEEDED
        assert cause.message == (
            f"organization '{organization}' would exceed its quota of 3 hosts: "
            "2 in use, 2 more asked"
        )
        assert (await run.status()).queued_operations == [], "nothing was queued"

        accepted = await run.handle.execute_update(
            CLUSTER.scale_node_pool.name,
            ScaleNodePoolRequest(pool="gpu", count=3),
            result_type=CLUSTER.scale_node_pool.output,
        )
        await run.finished(accepted)
        grown = (await ledger_status(time_env, organization)).usage
        assert (grown.hosts, grown.gpus) == (3, 24), "counted by the catalog: 8 GPUs per host"

        down = await run.handle.execute_update(
            CLUSTER.scale_node_pool.name,
            ScaleNodePoolRequest(pool="gpu", count=1, force=True),
            result_type=CLUSTER.scale_node_pool.output,
        )
        await run.finished(down)
        await eventually(
            lambda: ledger_status(time_env, organization),
            until=lambda s: s.usage.hosts == 1,
            what="the scale-down given back",
        )

        await run.handle.execute_update(CLUSTER.delete_cluster.name, DeleteClusterRequest())
        assert (await run.handle.result()).phase is ClusterPhase.DELETED
        final = await eventually(
            lambda: ledger_status(time_env, organization),
            until=lambda s: not s.holders,
            what="the deleted cluster gone from the ledger",
        )
        assert (final.usage.clusters, final.usage.hosts) == (0, 0)
