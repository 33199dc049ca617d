"""Purges: the operator's way to end an entity whose workflow cannot make progress and remove what
it made (`models.purge`), for any organization. One client, two transports: `TemporalPurges`
(`colonyctl` in local mode, and the operator HTTP API) and `HttpPurges` (the operator HTTP API,
`/v1/operator/...`, `colonyctl`'s remote mode with a key that has Operator Purge).

**One path with the delete.** A purge is the entity's delete as its own client sends it
(`TemporalWorkspaces.send`, `TemporalClusters.send`): one whose workflow answers is deleted the
normal way (the purge reports `deleted` and the operation queued), one that cannot make progress
is handed to `PurgeWorkflow`, and one whose workflow has ended already (a purge repeated, a
termination by hand) is swept of what it left. So a purge is always safe to run, and to run again.

The answer waits up to `wait` seconds for the purge to finish, then reports it `running` (the
purge goes on; `report` reads how far it got, and its end).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from urllib.parse import quote

from temporalio.client import WorkflowExecutionStatus as ExecutionStatus
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from clients.base import Deadline, polled
from clients.clusters import TemporalClusters
from clients.errors import (
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    OperationFailedError,
    UnavailableError,
)
from clients.http import RemoteClient, parsed
from clients.temporal import TemporalSession, reported
from clients.workspaces import TemporalWorkspaces
from models.errors import ErrorType
from models.identity import Entity
from models.names import name_problem
from models.operations import DeleteClusterRequest
from models.purge import PURGEABLE, PurgeOutcome, PurgeReport, PurgeTarget
from models.workspace import workspace_name_problem
from models.workspace_operations import DeleteWorkspaceRequest
from workflows.purge import PURGE

PURGE_WAIT = 30.0
"""Seconds a purge's answer waits for it to finish (well under the HTTP client's 60 s); a longer
one (a release that takes minutes to uninstall) is answered `running`, and followed."""
REQUESTED_BY = "an operator's purge"
"""What a purge through this client records as who asked (the termination's reason)."""


def checked_target(entity: Entity, organization: str, name: str) -> PurgeTarget:
    """The target of a purge, its names checked before anything is asked of anyone.

    Raises:
        InvalidRequestError: an entity that is not purged, or a name no entity can have.
    """
    if entity not in PURGEABLE:
        raise InvalidRequestError(f"kind: a {entity.value} is not purged (its clusters are)")
    if organization:
        problem = name_problem("organization", organization)
        if problem:
            raise InvalidRequestError(f"organization: {problem}")
    problem = (
        workspace_name_problem(name)
        if entity is Entity.WORKSPACE
        else name_problem("cluster", name)
    )
    if problem:
        raise InvalidRequestError(f"name: {problem}")
    return PurgeTarget(entity=entity, organization=organization, name=name)


class Purges(ABC):
    """What an operator can do about an entity whose workflow cannot make progress."""

    @abstractmethod
    async def purge(self, target: PurgeTarget, *, wait: float = PURGE_WAIT) -> PurgeReport:
        """End the entity's workflow if it cannot make progress and remove what it made, or
        delete it the normal way if it answers (see the module docstring).

        Raises:
            ConflictError: the purge was refused (a cluster that still has workspaces).
        """

    @abstractmethod
    async def report(self, target: PurgeTarget) -> PurgeReport:
        """The last purge of the entity: how far it got (`running`), or what it did.

        Raises:
            NotFoundError: the entity was never purged (within Temporal's retention).
        """

    async def purge_and_follow(
        self, target: PurgeTarget, *, give_up_after: float | None = None
    ) -> PurgeReport:
        """`purge`, then its report until it has finished (or `give_up_after` seconds)."""
        deadline = Deadline(give_up_after)
        started = await self.purge(target)
        if started.outcome is not PurgeOutcome.RUNNING:
            return started
        async for report in polled(lambda: self.report(target), first=started):
            if report.outcome is not PurgeOutcome.RUNNING:
                return report
            if deadline.passed():
                raise OperationFailedError(
                    f"{report.purge_workflow_id} did not finish within {give_up_after:.0f}s; "
                    "it goes on (run the purge again to see how far it got)"
                )
        return started


class TemporalPurges(Purges):
    """Purges through Temporal: the entities' own clients, and `PurgeWorkflow`."""

    def __init__(self, session: TemporalSession) -> None:
        self.session = session

    def _entity(self, target: PurgeTarget) -> TemporalWorkspaces | TemporalClusters:
        entity: TemporalWorkspaces | TemporalClusters = (
            TemporalWorkspaces(self.session)
            if target.entity is Entity.WORKSPACE
            else TemporalClusters(self.session)
        ).acting_for(target.organization)
        entity.requested_by = REQUESTED_BY
        return entity

    async def purge(self, target: PurgeTarget, *, wait: float = PURGE_WAIT) -> PurgeReport:
        entity = self._entity(target)
        try:
            accepted = (
                await entity.send(target.name, DeleteWorkspaceRequest(reason=REQUESTED_BY))
                if isinstance(entity, TemporalWorkspaces)
                else await entity.send(target.name, DeleteClusterRequest())
            )
        except (NotFoundError, ConflictError, UnavailableError) as refused:
            # Not running (ended, or never there): what it left is swept by its marks. A purge
            # running already is joined. A workflow whose task failed once is the purge's to
            # look at again. Any other refusal stands.
            if isinstance(refused, ConflictError) and not await self._purging(target):
                raise
            purge_id = await entity.start_purge(target.name, requested_by=REQUESTED_BY)
        else:
            if accepted.purge_workflow_id is None:
                return PurgeReport(
                    target=target,
                    workflow_id=target.workflow_id,
                    outcome=PurgeOutcome.DELETED,
                    operation_id=accepted.operation_id,
                    reason="its workflow answers: its own delete was queued, and removes what "
                    "it made",
                )
            purge_id = accepted.purge_workflow_id
        return await self._finished_within(purge_id, target, wait)

    async def _purging(self, target: PurgeTarget) -> bool:
        client = await self.session.client()
        try:
            found = await client.get_workflow_handle(
                PURGE.workflow_id(target.workflow_id)
            ).describe()
        except RPCError:
            return False
        return found.status == ExecutionStatus.RUNNING

    async def _finished_within(
        self, purge_id: str, target: PurgeTarget, wait: float
    ) -> PurgeReport:
        client = await self.session.client()
        handle = client.get_workflow_handle(purge_id, result_type=PurgeReport)
        try:
            async with asyncio.timeout(wait):
                finished: PurgeReport = await handle.result()
                return finished
        except TimeoutError:
            return await self.report(target)
        except WorkflowFailureError as exc:
            raise purge_refused(target, exc) from exc

    async def report(self, target: PurgeTarget) -> PurgeReport:
        client = await self.session.client()
        handle = client.get_workflow_handle(
            PURGE.workflow_id(target.workflow_id), result_type=PurgeReport
        )
        missing = NotFoundError(f"purge: {target.describe()} was never purged")
        with reported(f"cannot read the purge of {target.describe()}", missing):
            described = await handle.describe()
            if described.status == ExecutionStatus.RUNNING:
                running: PurgeReport = await handle.query(
                    PURGE.status.name, result_type=PurgeReport
                )
                return running
        try:
            finished: PurgeReport = await handle.result()
        except WorkflowFailureError as exc:
            raise purge_refused(target, exc) from exc
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise missing from exc
            raise
        return finished


def purge_refused(
    target: PurgeTarget, exc: WorkflowFailureError
) -> ConflictError | OperationFailedError:
    """The typed error of a purge that failed: refused (a cluster with workspaces: a conflict), or
    failed."""
    cause: BaseException | None = exc.cause
    while cause is not None and not isinstance(cause, ApplicationError):
        cause = cause.__cause__
    message = cause.message if isinstance(cause, ApplicationError) else str(exc)
    if isinstance(cause, ApplicationError) and cause.type == ErrorType.OPERATION_REJECTED:
        return ConflictError(f"name: {message}")
    return OperationFailedError(f"purge of {target.describe()} failed: {message}")


# --- through the HTTP API --------------------------------------------------------------------

OPERATOR = "/v1/operator/organizations"
COLLECTIONS = {Entity.WORKSPACE: "workspaces", Entity.CLUSTER: "kubernetes/clusters"}
"""Where each purgeable entity is under an organization in the operator API."""


def purge_path(target: PurgeTarget) -> str:
    """`/v1/operator/organizations/<organization>/<entities>/<name>/purge`."""
    organization, name = quote(target.organization, safe=""), quote(target.name, safe="")
    return f"{OPERATOR}/{organization}/{COLLECTIONS[target.entity]}/{name}/purge"


class HttpPurges(Purges):
    """Purges through the operator HTTP API (a key with Operator Purge)."""

    def __init__(self, remote: RemoteClient) -> None:
        self.remote = remote

    def _refuse_without_organization(self, target: PurgeTarget) -> None:
        if not target.organization:
            raise InvalidRequestError(
                "organization: the operator API acts on an organization's entities: give "
                "--organization"
            )

    async def purge(self, target: PurgeTarget, *, wait: float = PURGE_WAIT) -> PurgeReport:
        self._refuse_without_organization(target)
        body = await self.remote.call("POST", purge_path(target))
        return parsed(PurgeReport, body)

    async def report(self, target: PurgeTarget) -> PurgeReport:
        self._refuse_without_organization(target)
        return parsed(PurgeReport, await self.remote.call("GET", purge_path(target)))
