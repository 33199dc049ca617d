"""Every activity a workflow calls, declared once: name, request and result types, timeouts, retry
policy and the summary the Web UI shows on the activity's events.

Call sites name the declaration (`await CLAIM_HOSTS(request)`), never a string, a result type or a
timeout, so the timeouts of one kind of call cannot drift apart between workflows.

Timeouts, and why:
- Every activity heartbeats (the activities wrap themselves in `activities.heartbeat.heartbeating`,
  which beats every couple of seconds, and long waits report their progress in the details), so a
  killed worker's attempt times out after `HEARTBEAT` and is retried on another worker within
  about ten seconds, however long the attempt was allowed to run.
- Every call is cancelled with `WAIT_CANCELLATION_COMPLETED`: when an operation is interrupted (a
  delete jumping the queue, `cancel_operation`, a workflow cancel), its awaits return only once each
  activity has really stopped, so the clean-up sweeps that follow see everything it did.
- Temporary failures are retried with backoff until `schedule_to_close`; permanent ones (the
  types in `models.errors.NON_RETRYABLE`) never are.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Generic, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError
from temporalio.workflow import ActivityCancellationType

from workflows.engine import check_interrupted

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel

    from models.activity_api import (
        ActivityName,
        AddClusterMachinesRequest,
        AwaitClusterDeploymentRequest,
        AwaitClusterDeploymentResult,
        AwaitFreeHostsRequest,
        AwaitFreeHostsResult,
        AwaitNodesRequest,
        AwaitNodesResult,
        CheckClusterPrerequisitesRequest,
        CheckClusterPrerequisitesResult,
        ClaimHostsRequest,
        ClaimHostsResult,
        ClusterMachinesResult,
        CordonNodeRequest,
        CordonNodeResult,
        CreateClusterDeploymentRequest,
        CreateClusterDeploymentResult,
        DeleteClusterDeploymentRequest,
        DeleteClusterDeploymentResult,
        DeleteNodeRequest,
        DeleteNodeResult,
        DrainNodeRequest,
        DrainNodeResult,
        ListClaimedHostsRequest,
        ListClaimedHostsResult,
        ListNodesRequest,
        ListNodesResult,
        ReleaseHostsRequest,
        ReleaseHostsResult,
        RemoveClusterMachinesRequest,
        UncordonNodeRequest,
        UncordonNodeResult,
    )
    from models.colony import WriteColonyKubeconfigsRequest, WriteColonyKubeconfigsResult
    from models.errors import NON_RETRYABLE

RequestT = TypeVar("RequestT", bound=BaseModel)
ResultT = TypeVar("ResultT", bound=BaseModel)

HEARTBEAT = timedelta(seconds=10)
"""Every activity beats every 2 s (`activities.heartbeat.BEAT_EVERY`); 10 s without one means the
worker is gone, and the attempt is retried elsewhere."""

KUBE_CALL = timedelta(seconds=30)
"""One Kubernetes API round trip (or a short read-modify-write loop): seconds."""
HOST_CALL = timedelta(minutes=1)
"""The host provider answers a claim once it has reserved the hosts: slower than a Kubernetes call."""
RETRY_FOR = timedelta(minutes=10)
"""How long temporary failures (5xx, 429, timeouts, conflicts) of one call are retried."""
WAIT_SLACK = timedelta(minutes=5)
"""Added to a wait's own deadline for its start-to-close: the activity returns at the deadline by
itself; this only bounds an attempt that hangs while its heartbeats still arrive."""

RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    non_retryable_error_types=NON_RETRYABLE,
)
"""Temporary failures are retried until `schedule_to_close`; permanent ones never are."""

COMPENSATION_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    non_retryable_error_types=NON_RETRYABLE,
)
"""Clean-up calls (uncordon, release) are retried as long as a normal call; when one still fails it
is reported on the operation and the state keeps saying what is really there."""


@dataclass(frozen=True)
class ActivityCall(Generic[RequestT, ResultT]):
    """One activity as workflows call it.

    Attributes:
        name: the registered activity name.
        result: the result model (the request type is the generic parameter).
        summary: what the Web UI shows for a call, from its request.
        start_to_close: one attempt's limit (a wait's own length is added per call).
        schedule_to_close: all attempts' limit; None for waits (their deadline bounds them).
    """

    name: str
    result: type[ResultT]
    summary: Callable[[RequestT], str]
    start_to_close: timedelta = KUBE_CALL
    schedule_to_close: timedelta | None = RETRY_FOR
    retry: RetryPolicy = field(default_factory=lambda: RETRY)

    async def __call__(
        self,
        request: RequestT,
        *,
        activity_id: str | None = None,
        wait: timedelta | None = None,
    ) -> ResultT:
        """Run the activity with its declared timeouts.

        Args:
            request: the activity's one input model.
            activity_id: a stable id where a client must find the call among pending activities.
            wait: for a wait, how long it may last: one attempt may then run the whole wait, and
                all attempts together the wait plus the usual retry time.

        Raises:
            asyncio.CancelledError: the operation was interrupted (before the call, during it, or
                while it completed anyway: see `workflows.engine.check_interrupted`).
            ActivityError: the activity failed (its cause is the domain `ApplicationError`).
        """
        start_to_close, schedule_to_close = self.start_to_close, self.schedule_to_close
        if wait is not None:
            start_to_close, schedule_to_close = wait + WAIT_SLACK, wait + RETRY_FOR
        check_interrupted()
        try:
            result: ResultT = await workflow.execute_activity(
                self.name,
                request,
                result_type=self.result,
                start_to_close_timeout=start_to_close,
                schedule_to_close_timeout=schedule_to_close,
                heartbeat_timeout=HEARTBEAT,
                retry_policy=self.retry,
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                activity_id=activity_id,
                summary=self.summary(request)[:200],
            )
        except ActivityError as error:
            if isinstance(error.cause, CancelledError):
                # One meaning for "interrupted" in every plan: asyncio's own cancellation.
                raise asyncio.CancelledError() from error
            raise
        check_interrupted()
        return result


# --- Management cluster (k0rdent) ---------------------------------------------------------------

CHECK_CLUSTER_PREREQUISITES = ActivityCall[
    CheckClusterPrerequisitesRequest, CheckClusterPrerequisitesResult
](
    ActivityName.CHECK_CLUSTER_PREREQUISITES,
    CheckClusterPrerequisitesResult,
    lambda r: f"check ClusterTemplate {r.template} and Credential {r.credential}",
)
CREATE_CLUSTER_DEPLOYMENT = ActivityCall[
    CreateClusterDeploymentRequest, CreateClusterDeploymentResult
](
    ActivityName.CREATE_CLUSTER_DEPLOYMENT,
    CreateClusterDeploymentResult,
    lambda r: f"create ClusterDeployment {r.namespace}/{r.name} from {r.template}",
)
AWAIT_CLUSTER_DEPLOYMENT = ActivityCall[
    AwaitClusterDeploymentRequest, AwaitClusterDeploymentResult
](
    ActivityName.AWAIT_CLUSTER_DEPLOYMENT,
    AwaitClusterDeploymentResult,
    lambda r: f"wait until ClusterDeployment {r.namespace}/{r.name} is {r.want.value}",
    schedule_to_close=None,
)
ADD_CLUSTER_MACHINES = ActivityCall[AddClusterMachinesRequest, ClusterMachinesResult](
    ActivityName.ADD_CLUSTER_MACHINES,
    ClusterMachinesResult,
    lambda r: (
        f"add {len(r.machines)} machine(s) to ClusterDeployment {r.name}: "
        + ", ".join(m.address for m in r.machines)
    ),
)
REMOVE_CLUSTER_MACHINES = ActivityCall[RemoveClusterMachinesRequest, ClusterMachinesResult](
    ActivityName.REMOVE_CLUSTER_MACHINES,
    ClusterMachinesResult,
    lambda r: f"remove machine(s) {', '.join(r.addresses)} from ClusterDeployment {r.name}",
)
DELETE_CLUSTER_DEPLOYMENT = ActivityCall[
    DeleteClusterDeploymentRequest, DeleteClusterDeploymentResult
](
    ActivityName.DELETE_CLUSTER_DEPLOYMENT,
    DeleteClusterDeploymentResult,
    lambda r: f"delete ClusterDeployment {r.namespace}/{r.name}",
)

WRITE_COLONY_KUBECONFIGS = ActivityCall[
    WriteColonyKubeconfigsRequest, WriteColonyKubeconfigsResult
](
    ActivityName.WRITE_COLONY_KUBECONFIGS,
    WriteColonyKubeconfigsResult,
    lambda r: f"write Secret {r.namespace}/{r.name}: {len(r.clusters)} cluster(s)",
)

# --- Child clusters ------------------------------------------------------------------------------

LIST_NODES = ActivityCall[ListNodesRequest, ListNodesResult](
    ActivityName.LIST_NODES,
    ListNodesResult,
    lambda r: f"list nodes {r.label_selector}".strip(),
)
AWAIT_NODES = ActivityCall[AwaitNodesRequest, AwaitNodesResult](
    ActivityName.AWAIT_NODES,
    AwaitNodesResult,
    lambda r: (
        f"wait for {len(r.expected)} node(s) to join and be Ready: "
        + ", ".join(e.host_id for e in r.expected)
    ),
    schedule_to_close=None,
)
CORDON_NODE = ActivityCall[CordonNodeRequest, CordonNodeResult](
    ActivityName.CORDON_NODE, CordonNodeResult, lambda r: f"cordon node {r.node_name}"
)
UNCORDON_NODE = ActivityCall[UncordonNodeRequest, UncordonNodeResult](
    ActivityName.UNCORDON_NODE,
    UncordonNodeResult,
    lambda r: f"uncordon node {r.node_name}",
    retry=COMPENSATION_RETRY,
)
DRAIN_NODE = ActivityCall[DrainNodeRequest, DrainNodeResult](
    ActivityName.DRAIN_NODE,
    DrainNodeResult,
    lambda r: f"drain node {r.node_name}" + (" (forced at the deadline)" if r.force else ""),
    schedule_to_close=None,
)
DELETE_NODE = ActivityCall[DeleteNodeRequest, DeleteNodeResult](
    ActivityName.DELETE_NODE,
    DeleteNodeResult,
    lambda r: f"delete node {r.node_name}" + (" and wait until it is gone" if r.wait_until else ""),
    schedule_to_close=None,
)

# --- Host provider -------------------------------------------------------------------------------

CLAIM_HOSTS = ActivityCall[ClaimHostsRequest, ClaimHostsResult](
    ActivityName.CLAIM_HOSTS,
    ClaimHostsResult,
    lambda r: f"claim {r.count} host(s) of {r.sku} in {r.location_id}",
    start_to_close=HOST_CALL,
)
RELEASE_HOSTS = ActivityCall[ReleaseHostsRequest, ReleaseHostsResult](
    ActivityName.RELEASE_HOSTS,
    ReleaseHostsResult,
    lambda r: f"release {len(r.host_ids)} host(s): {', '.join(r.host_ids)}",
    start_to_close=HOST_CALL,
    retry=COMPENSATION_RETRY,
)
LIST_CLAIMED_HOSTS = ActivityCall[ListClaimedHostsRequest, ListClaimedHostsResult](
    ActivityName.LIST_CLAIMED_HOSTS,
    ListClaimedHostsResult,
    lambda r: "list the hosts this cluster holds",
    start_to_close=HOST_CALL,
)
AWAIT_FREE_HOSTS = ActivityCall[AwaitFreeHostsRequest, AwaitFreeHostsResult](
    ActivityName.AWAIT_FREE_HOSTS,
    AwaitFreeHostsResult,
    lambda r: f"wait for {r.count} free host(s) of {r.sku} in {r.location_id}",
    schedule_to_close=None,
)
