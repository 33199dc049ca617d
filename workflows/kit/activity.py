"""How a workflow calls an activity: one declaration per activity (name, request and result types,
the summary the Web UI shows) that is either a call (`ActivityCall`, with its attempt's timeout) or a
wait (`WaitCall`, whose every call says how long it may last), and the one retry policy.

Call sites name the declaration (`await CLAIM_HOSTS(request)`, declared in
`workflows/cluster_calls.py` and `workflows/workspace_calls.py`), never a string, a result type or a
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
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Generic, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError
from temporalio.workflow import ActivityCancellationType

from workflows.kit.engine import check_interrupted

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel

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
"""Every call's: temporary failures are retried until `schedule_to_close`, permanent ones never.
Clean-up calls (uncordon, release) are retried as long as any other; when one still fails it is
reported on the operation and the state keeps saying what is really there."""


@dataclass(frozen=True)
class ActivityDeclaration(Generic[RequestT, ResultT]):
    """One activity as workflows call it: a call (`ActivityCall`) or a wait (`WaitCall`).

    Attributes:
        name: the registered activity name.
        request: the request model (the one argument).
        result: the result model.
        summary: what the Web UI shows for a call, from its request.
    """

    name: str
    request: type[RequestT]
    result: type[ResultT]
    summary: Callable[[RequestT], str]

    async def _execute(
        self,
        request: RequestT,
        *,
        start_to_close: timedelta,
        schedule_to_close: timedelta,
        activity_id: str | None,
    ) -> ResultT:
        """Run the activity with these timeouts.

        Raises:
            asyncio.CancelledError: the operation was interrupted (before the call, during it, or
                while it completed anyway: see `workflows.kit.engine.check_interrupted`).
            ActivityError: the activity failed (its cause is the domain `ApplicationError`).
        """
        check_interrupted()
        try:
            result: ResultT = await workflow.execute_activity(
                self.name,
                request,
                result_type=self.result,
                start_to_close_timeout=start_to_close,
                schedule_to_close_timeout=schedule_to_close,
                heartbeat_timeout=HEARTBEAT,
                retry_policy=RETRY,
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


@dataclass(frozen=True)
class ActivityCall(ActivityDeclaration[RequestT, ResultT]):
    """An activity that does one thing and answers: each attempt within `start_to_close`,
    temporary failures retried for `RETRY_FOR`.

    Attributes:
        start_to_close: one attempt's limit (`KUBE_CALL`, or `HOST_CALL` for the host provider).
    """

    start_to_close: timedelta = KUBE_CALL

    async def __call__(self, request: RequestT, *, activity_id: str | None = None) -> ResultT:
        """Run the activity (see `ActivityDeclaration._execute`).

        Args:
            request: the activity's one input model.
            activity_id: a stable id where a client must find the call among pending activities.
        """
        return await self._execute(
            request,
            start_to_close=self.start_to_close,
            schedule_to_close=RETRY_FOR,
            activity_id=activity_id,
        )


@dataclass(frozen=True)
class WaitCall(ActivityDeclaration[RequestT, ResultT]):
    """An activity that waits (heartbeating) until something happens or its deadline passes: every
    call says how long it may last, and its timeouts follow (one attempt may run the whole wait
    plus `WAIT_SLACK`; all attempts together the wait plus the usual `RETRY_FOR`). A wait cannot
    be called without its length: mypy refuses it."""

    async def __call__(
        self, request: RequestT, *, wait: timedelta, activity_id: str | None = None
    ) -> ResultT:
        """Run the wait (see `ActivityDeclaration._execute`).

        Args:
            request: the activity's one input model (its own deadline inside, `wait` from now).
            wait: how long it may last.
            activity_id: a stable id where a client must find the call among pending activities.
        """
        return await self._execute(
            request,
            start_to_close=wait + WAIT_SLACK,
            schedule_to_close=wait + RETRY_FOR,
            activity_id=activity_id,
        )

    async def within(self, deadline: timedelta, request: Callable[[datetime], RequestT]) -> ResultT:
        """Run a wait of at most `deadline` from now: `request(until)` builds the request with
        the moment it gives up (its `wait_until`), and the call's timeouts follow the wait."""
        return await self(request(workflow.now() + deadline), wait=deadline)
