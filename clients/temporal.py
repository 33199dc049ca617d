"""The Temporal transport every entity client shares: the connection, the session (the settings
and the organization a client acts for), what an entity's workflows have in common (started with
their marks, found running, queried, sent updates, listed), and the one table that turns what
Temporal reports into `clients.errors`.

The entity clients (`clients.clusters`, `.workspaces`, `.classes`, `.colonies`) build on
`TemporalEntity`; `colonyctl` in direct mode and the HTTP API (`api/`, with the caller's
organization) use them. Workflows are addressed by their registered names and ids: their code is
not imported, only their contracts (`models/`).

**Failures** are decided by what Temporal reports, never by matching message text
(`failure`, one table for every entity):

| Temporal reports | error |
| --- | --- |
| RPC status NOT_FOUND (no such workflow), or the workflow no longer runs | the entity's `NotFoundError` |
| any other RPC status (unreachable, overloaded, a deadline) | `UnavailableError` |
| a query that failed | `UnavailableError` |
| an update refused with `{"reason": "NotFound"}` (or of type `NotFound`) | `NotFoundError` |
| an update refused as `OperationRejected` or `ClassConflict` | `ConflictError` (the state refuses it) |
| an update refused as `InvalidSpec` | `InvalidRequestError` |
| an update refused as `QuotaExceeded` (the ledger's, or a cluster's passing it on) | `QuotaExceededError` |
| any other update failure | `OperationFailedError` |

A refusal's message starts with the request field its details name (`{"field": "pool"}`), else
with what the entity says a refusal is about (`Refusals`): `pool: node pool 'x' does not exist`.

**Carried, or not started.** What a start or an update sends must reach its workflow as sent:
it is encoded with the data converter the worker uses, decoded back into the model the worker
decodes it into (the contract's), and compared (`check_carried`). An input the worker could not
decode (the pydantic JSON parser's depth limit, a value JSON cannot carry), or that would change
on the way, or one past Temporal's payload size, is refused (`InvalidRequestError`, naming the
field) before anything is started: no workflow can be started with input its worker cannot read.

**Idempotency.** Each update carries the caller's request id, or a fresh uuid, as its Temporal
update id; the workflow answers the same id again with the operation it queued, so a retried
command never queues twice. A start carries it in the memo: a create repeated with the same id
is the same create, not a name conflict.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, ClassVar, Generic, Self, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionDescription,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.client import WorkflowExecutionStatus as ExecutionStatus
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import PayloadConverter
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from activities.workflow_health import unresponsive_of
from clients import errors
from clients.base import WorkflowRef, new_request_id, not_found
from clients.errors import ColonyError, NotFoundError, UnavailableError
from infra import tracing
from infra.config import ColonySettings
from models.bounds import MAX_WORKFLOW_PAYLOAD_BYTES
from models.errors import REJECTED_FIELD, REJECTED_NOT_FOUND, ErrorType
from models.identity import Entity
from models.names import name_problem
from models.purge import PurgeRequest, PurgeTarget, Unresponsive, with_commands
from workflows.kit.contract import STATUS_QUERY, WorkflowContract
from workflows.purge import PURGE
from workflows.search_attributes import COLONY_KIND, COLONY_ORGANIZATION, COLONY_PHASE

StatusT = TypeVar("StatusT", bound=BaseModel)
AcceptedT = TypeVar("AcceptedT", bound=BaseModel)

TROUBLED_QUERY = timedelta(seconds=5)
"""How long a status query may take when the workflow's task has just failed once: its retry
answers in milliseconds when it succeeds; otherwise its marks are shown."""
PURGE_OPERATION = "purge"
"""The operation id a delete answers with when it purged the entity (`TemporalEntity._delete`)."""
UNANSWERED_STATUSES = (
    RPCStatusCode.FAILED_PRECONDITION,
    RPCStatusCode.DEADLINE_EXCEEDED,
    RPCStatusCode.CANCELLED,
)
"""What Temporal answers a query or an update a workflow cannot take: its workflow task in a failed
state, or no answer in time (the server's deadline, or the client's: "Timeout expired")."""

REQUEST_ID_MEMO = "requestId"
"""Memo key of the request id an entity was started with (see the module docstring)."""


async def connect(settings: ColonySettings, *, hint: str = errors.TEMPORAL_HINT) -> Client:
    """A Temporal client with the pydantic data converter, or an `UnavailableError` saying where
    it looked.

    Args:
        hint: what the reader of the refusal can do (`colonyctl`'s user can set TEMPORAL_ADDRESS;
            the HTTP API's caller cannot, and gets none).
    """
    interceptor = tracing.interceptor()
    try:
        return await Client.connect(
            **settings.temporal_connect,
            data_converter=pydantic_data_converter,
            # With tracing, the command's span continues into the workflows it starts or updates.
            interceptors=[interceptor] if interceptor is not None else [],
        )
    except RuntimeError as exc:
        raise errors.temporal_unreachable(settings.temporal_address, exc, hint=hint) from exc


# --- the table -------------------------------------------------------------------------------

REFUSED_AS: dict[str, type[ColonyError]] = {
    ErrorType.OPERATION_REJECTED: errors.ConflictError,
    ErrorType.CLASS_CONFLICT: errors.ConflictError,
    ErrorType.INVALID_SPEC: errors.InvalidRequestError,
    ErrorType.QUOTA_EXCEEDED: errors.QuotaExceededError,
}
"""An update refusal's error by its type (a refusal of another type failed the operation)."""


@dataclass(frozen=True)
class Refusals:
    """How one entity's update refusals read (see the module docstring)."""

    subject: str = ""
    """The field a refusal is about when the workflow names none; empty: the update's name."""
    subjects: Mapping[str, str] = field(default_factory=dict)
    """Another subject for the refusals of one type (`InvalidSpec` of a class is its `spec`)."""
    not_found: NotFoundError | None = None
    """What a not-found refusal is; None: its own message, as a `NotFoundError`."""


def rejection_is_not_found(error: ApplicationError) -> bool:
    """True when an update's refusal says that what it names does not exist (by type or details)."""
    if error.type == ErrorType.NOT_FOUND:
        return True
    first = error.details[0] if error.details else None
    return isinstance(first, dict) and first.get("reason") == REJECTED_NOT_FOUND


def rejected_field(error: ApplicationError) -> str:
    """The request field a refusal names in its details (`models.errors.rejected`); empty when
    none."""
    first = error.details[0] if error.details else None
    named = first.get(REJECTED_FIELD) if isinstance(first, dict) else None
    return named if isinstance(named, str) else ""


def update_error(
    update: str, exc: WorkflowUpdateFailedError, refusals: Refusals = Refusals()
) -> ColonyError:
    """The typed error of an update the workflow refused or failed."""
    cause = exc.cause
    if not isinstance(cause, ApplicationError):
        return errors.OperationFailedError(f"{update}: {cause or exc}")
    named = rejected_field(cause)
    about = named or refusals.subjects.get(cause.type or "", refusals.subject) or update
    if rejection_is_not_found(cause):
        return refusals.not_found or NotFoundError(f"{about}: {cause.message}")
    refused = REFUSED_AS.get(cause.type or "")
    if refused is not None:
        return refused(f"{about}: {cause.message}")
    return errors.OperationFailedError(f"{named or update}: {cause.message}")


def failure(
    exc: RPCError | WorkflowQueryFailedError | WorkflowUpdateFailedError,
    *,
    doing: str,
    missing: ColonyError,
    update: str = "",
    refusals: Refusals = Refusals(),
) -> ColonyError:
    """The typed error of what Temporal reported while doing `doing`; `missing` when the
    workflow does not exist.

    Args:
        update: what a failed update is called in its message (`doing` when empty).
    """
    if isinstance(exc, WorkflowUpdateFailedError):
        return update_error(update or doing, exc, refusals)
    if isinstance(exc, WorkflowQueryFailedError):
        return UnavailableError(f"{doing}: {exc}")
    if exc.status == RPCStatusCode.NOT_FOUND:
        return missing
    return UnavailableError(f"{doing}: {exc.message}")


@contextmanager
def reported(
    doing: str, missing: ColonyError, *, update: str = "", refusals: Refusals = Refusals()
) -> Iterator[None]:
    """What Temporal reports inside, as `failure` types it."""
    try:
        yield
    except (RPCError, WorkflowQueryFailedError, WorkflowUpdateFailedError) as exc:
        raise failure(exc, doing=doing, missing=missing, update=update, refusals=refusals) from exc


# --- what a workflow is sent ---------------------------------------------------------------


def _sent_as(location: tuple[Any, ...]) -> str:
    """A field of what a workflow is sent as the request names it (its input's `spec.` is the
    request itself)."""
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else ("." if path else "") + str(part)
    return path.removeprefix("spec.") if path != "spec" else ""


def _difference(sent: Any, read: Any, location: tuple[Any, ...] = ()) -> tuple[Any, ...] | None:
    """Where `read` first differs from `sent`, followed through their models' fields (the
    free-form values below them are compared whole); None when they are equal."""
    if isinstance(sent, BaseModel) and type(read) is type(sent):
        for name, info in type(sent).model_fields.items():
            found = _difference(
                getattr(sent, name), getattr(read, name), (*location, info.alias or name)
            )
            if found is not None:
                return found
        return None
    return None if sent == read else location


def check_carried(converter: PayloadConverter, sent: BaseModel, read_as: Any) -> None:
    """Refuse what a workflow would not get as it was sent (see the module docstring).

    Args:
        converter: the data converter's payload converter (the worker's: pydantic's).
        sent: the workflow's input, or an update's request.
        read_as: the type the worker decodes it into (the contract's).

    Raises:
        InvalidRequestError: too large once encoded, not decodable, or changed on the way, naming
            the field where known.
    """
    payloads = converter.to_payloads([sent])
    size = sum(payload.ByteSize() for payload in payloads)
    if size > MAX_WORKFLOW_PAYLOAD_BYTES:
        raise errors.InvalidRequestError(
            f"request: {size // 1024} KiB once encoded for its workflow; at most "
            f"{MAX_WORKFLOW_PAYLOAD_BYTES // 1024} KiB are allowed"
        )
    try:
        (read,) = converter.from_payloads(payloads, [read_as])
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        field = _sent_as(tuple(first["loc"])) or "request"
        raise errors.InvalidRequestError(
            f"{field}: its workflow could not read it ({first['msg']}); nothing was started"
        ) from exc
    where = _difference(sent, read)
    if where is not None:
        raise errors.InvalidRequestError(
            f"{_sent_as(where) or 'request'}: would not reach its workflow as sent (a value "
            "JSON cannot carry exactly); nothing was started"
        )


# --- the session -----------------------------------------------------------------------------


@dataclass
class TemporalSession:
    """Where a client reaches Temporal, and for which organization it acts (empty: the operator's
    entities, as `colonyctl` names them in direct mode; the HTTP API passes its caller's).

    The connection is made on first use and kept for the event loop it was made in: a command
    that runs several steps (each its own loop) connects once per step, and a refusal decided
    before anything is sent never connects at all.
    """

    settings: ColonySettings
    organization: str = ""
    connector: Callable[[], Awaitable[Client]] | None = None
    """How to connect; `connect(settings)`, with `colonyctl`'s hint, when None."""
    _client: Client | None = field(default=None, repr=False)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)

    @classmethod
    def of_client(
        cls, client: Client, settings: ColonySettings, organization: str = ""
    ) -> TemporalSession:
        """A session over a client connected already (the tests', a benchmark's)."""

        async def connected() -> Client:
            return client

        return cls(settings, organization, connector=connected)

    async def client(self) -> Client:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            connector = self.connector or (lambda: connect(self.settings))
            self._client = await connector()
            self._loop = loop
        return self._client

    def acting_for(self, organization: str) -> TemporalSession:
        """The same session (and connection), for another organization."""
        return replace(self, organization=organization)

    def workflow(self, workflow_id: str) -> WorkflowRef:
        return WorkflowRef(workflow_id, self.settings.workflow_link(workflow_id))


def plural(noun: str) -> str:
    """`clusters`, `workspaces`, `colonies`."""
    return f"{noun[:-1]}ies" if noun.endswith("y") else f"{noun}s"


def unanswered(cause: BaseException | None) -> bool:
    """True when Temporal's error says the workflow itself did not answer (not that Temporal is
    unreachable): a query that failed, or a query or update refused because its workflow task is
    failing or no worker took it in time."""
    if isinstance(cause, WorkflowQueryFailedError):
        return True
    return isinstance(cause, RPCError) and cause.status in UNANSWERED_STATUSES


def organization_of(description: WorkflowExecutionDescription | WorkflowExecution) -> str:
    """The organization a workflow's entity belongs to, from its mark (empty: an operator's)."""
    return description.typed_search_attributes.get(COLONY_ORGANIZATION) or ""


def organization_clause(organization: str | None) -> str:
    """What narrows a visibility query to one organization's workflows: nothing for None
    (everyone's) or "" (the default mode's, which no visibility filter matches: the lister
    filters by the mark).

    Raises:
        InvalidRequestError: an organization that is no valid name (it is quoted into the query:
            no quote can slip in).
    """
    if not organization:
        return ""
    problem = name_problem("organization", organization)
    if problem:
        raise errors.InvalidRequestError(f"organization: {problem}")
    return f" AND {COLONY_ORGANIZATION.name} = '{organization}'"


# --- an entity's workflows -------------------------------------------------------------------


class TemporalEntity(Generic[StatusT]):
    """What an entity client needs of its workflows through Temporal, for its session's
    organization. An entity says its workflow's contract (type, status model, id function), its
    noun and marks; the rest is the same for every entity."""

    contract: ClassVar[WorkflowContract[Any, Any, [str, str]]]
    """Its workflow type's contract (`CLUSTER`, ...)."""
    noun: ClassVar[str]
    """The entity in messages: `cannot read cluster 'x'`."""
    kind: ClassVar[str]
    """Its workflows' `ColonyKind` mark (the workflow upserts the same value)."""
    first_phase: ClassVar[str]
    """Its workflows' `ColonyPhase` mark at start, until the workflow upserts its own."""
    owned: ClassVar[bool] = False
    """Lookups check the organization's mark too, and bind to the workflow's first run, so that an
    update cannot reach an entity created again under the name meanwhile (workspaces)."""

    requested_by: str = "its organization's delete"
    """Who a purge this client starts says asked for it (an operator's client says so)."""

    def __init__(self, session: TemporalSession) -> None:
        self.session = session

    @property
    def workflow_type(self) -> str:
        return self.contract.workflow_type

    @property
    def status_type(self) -> type[StatusT]:
        """What its workflows return and answer the status query with."""
        status: type[StatusT] = self.contract.output
        return status

    def workflow_id(self, name: str, organization: str) -> str:
        return self.contract.workflow_id(name, organization)

    def acting_for(self, organization: str) -> Self:
        """This client for another organization (sharing the connection): what a create, deploy
        or apply of an organization's spec reads back."""
        other = copy.copy(self)
        other.session = self.session.acting_for(organization)
        return other

    def not_found(self, name: str) -> NotFoundError:
        return not_found(self.noun, name)

    def refusals(self, name: str) -> Refusals:
        """How this entity's update refusals read (`Refusals`)."""
        return Refusals()

    def workflow(self, name: str) -> WorkflowRef:
        """The entity's workflow, with its Web UI page."""
        return self.session.workflow(self.workflow_id(name, self.session.organization))

    def _reading(self, name: str) -> AbstractContextManager[None]:
        return reported(f"cannot read {self.noun} '{name}'", self.not_found(name))

    async def _handle(self, name: str) -> WorkflowHandle[Any, Any]:
        client = await self.session.client()
        return client.get_workflow_handle(
            self.workflow_id(name, self.session.organization), result_type=self.status_type
        )

    async def _running(
        self, name: str
    ) -> tuple[WorkflowHandle[Any, Any], WorkflowExecutionDescription]:
        """The handle and description of the entity's workflow when it runs; its `NotFoundError`
        otherwise (a deleted entity's workflow has completed)."""
        handle = await self._handle(name)
        with self._reading(name):
            description = await handle.describe()
        if description.status != ExecutionStatus.RUNNING or not self._belongs(description):
            raise self.not_found(name)
        if self.owned:
            first_run = description.raw_description.workflow_execution_info.first_run_id
            client = await self.session.client()
            handle = client.get_workflow_handle(
                handle.id, first_execution_run_id=first_run or None, result_type=self.status_type
            )
        return handle, description

    async def _refuse_while_purged(self, name: str) -> None:
        """An entity whose workflow has ended while its purge still removes what it made is not
        gone yet: its name is not free until the purge has finished.

        Raises:
            ConflictError: a purge of the entity's workflow runs.
        """
        purge_id = PURGE.workflow_id(self.workflow_id(name, self.session.organization))
        client = await self.session.client()
        try:
            purge = await client.get_workflow_handle(purge_id).describe()
        except RPCError:
            return
        if purge.status == ExecutionStatus.RUNNING:
            raise errors.ConflictError(
                f"name: {self.noun} '{name}' is being purged (workflow {purge_id} removes what "
                "it made); its name is free once that has finished"
            )

    def _belongs(self, description: WorkflowExecutionDescription) -> bool:
        """The workflow id names the organization already; its mark must agree (when checked)."""
        return not self.owned or organization_of(description) == self.session.organization

    async def _query(
        self,
        handle: WorkflowHandle[Any, Any],
        name: str,
        description: WorkflowExecutionDescription | None = None,
    ) -> StatusT:
        """The `status` query's answer; when the workflow cannot answer it (its workflow task
        failing, no worker taking it, the query failing), what its marks say with why
        (`stand_in`), so that one wedged workflow never fails a list or a read. One whose
        description shows it cannot answer (`Unresponsive.silent`) is not asked at all, and one
        whose task failed once only briefly (`TROUBLED_QUERY`): a query to a workflow whose task
        is failing waits out its RPC's timeout (30 s) before it fails."""
        trouble = await self._trouble(description) if description is not None else None
        if description is not None and trouble is not None and trouble.silent:
            return await self._stand_in(name, description, trouble)
        try:
            with self._reading(name):
                status: StatusT = await handle.query(
                    STATUS_QUERY,
                    result_type=self.status_type,
                    rpc_timeout=TROUBLED_QUERY if trouble is not None else None,
                )
        except UnavailableError as error:
            if description is None or not unanswered(error.__cause__):
                raise
            trouble = await self._trouble(description) or Unresponsive(
                workflow_id=description.id, reason=f"its status query failed: {error.message}"
            )
            return await self._stand_in(name, description, trouble)
        return status

    async def _trouble(self, description: WorkflowExecutionDescription) -> Unresponsive | None:
        """What keeps the workflow from answering (`activities.workflow_health`); None: nothing."""
        return await unresponsive_of(await self.session.client(), description)

    async def _stand_in(
        self, name: str, description: WorkflowExecutionDescription, trouble: Unresponsive
    ) -> StatusT:
        found = with_commands(trouble, Entity(self.noun), self.session.organization, name)
        return await self.stand_in(name, description, found)

    async def stand_in(
        self, name: str, description: WorkflowExecutionDescription, unresponsive: Unresponsive
    ) -> StatusT:
        """The status of an entity whose workflow cannot answer: its name, its last phase from
        its marks, and `unresponsive` (each entity says how its status holds that)."""
        raise UnavailableError(f"cannot read {self.noun} '{name}': {unresponsive.reason}")

    async def _status(self, name: str) -> tuple[StatusT, WorkflowExecutionDescription]:
        """The running entity's status (its `status` query, or `stand_in` when it cannot answer),
        and its workflow's description."""
        handle, description = await self._running(name)
        return await self._query(handle, name, description), description

    async def _now_or_final(
        self, name: str
    ) -> tuple[StatusT | None, WorkflowExecutionDescription | None]:
        """(the status now, the workflow's description) while it runs; (the status it returned,
        None) once it completed (phase deleted: an entity's workflow completes when it is
        deleted); (None, None) when it ended any other way (terminated, cancelled)."""
        handle = await self._handle(name)
        with self._reading(name):
            description = await handle.describe()
            if not self._belongs(description):
                raise self.not_found(name)
            if description.status == ExecutionStatus.RUNNING:
                return await self._query(handle, name, description), description
            if description.status != ExecutionStatus.COMPLETED:
                return None, None
            final = await handle.result()
        status: StatusT | None = final if isinstance(final, self.status_type) else None
        return status, None

    async def _update(
        self,
        name: str,
        update: str,
        request: BaseModel,
        result_type: type[Any],
        request_id: str | None,
    ) -> Any:
        """Send an update to the running entity; the refusal is a typed error (`failure`). One
        its workflow cannot take (its workflow task failing) is refused saying why, at once."""
        handle, description = await self._running(name)
        trouble = await self._trouble(description)
        if trouble is not None and trouble.silent:
            raise self.cannot_answer(name, trouble)
        declared = self.contract.updates().get(update)
        client = await self.session.client()
        check_carried(
            client.data_converter.payload_converter,
            request,
            declared.input if declared is not None else type(request),
        )
        try:
            with reported(update, self.not_found(name), refusals=self.refusals(name)):
                return await handle.execute_update(
                    update, request, id=request_id or new_request_id(), result_type=result_type
                )
        except UnavailableError as error:
            if not unanswered(error.__cause__):
                raise
            _, description = await self._running(name)
            trouble = await self._trouble(description) or Unresponsive(
                workflow_id=description.id, reason=f"it did not take the update: {error.message}"
            )
            raise self.cannot_answer(name, trouble) from error

    def cannot_answer(self, name: str, trouble: Unresponsive) -> ColonyError:
        """The refusal of an update the entity's workflow cannot take: a conflict when it cannot
        make progress (the message says what clears it), else unavailable for now (a task that
        failed once is retried)."""
        found = with_commands(trouble, Entity(self.noun), self.session.organization, name)
        message = f"{self.noun}: {self.noun} '{name}' cannot answer now: {found.reason}"
        if found.stuck:
            return errors.ConflictError(message)
        return UnavailableError(f"{message}; try again in a few seconds")

    async def _delete(
        self,
        name: str,
        update: str,
        request: BaseModel,
        result_type: type[AcceptedT],
        request_id: str | None,
        *,
        requested_by: str,
    ) -> AcceptedT:
        """Send the entity's delete. One whose workflow cannot make progress (`models.purge`:
        its workflow task failed twice in a row) is purged instead: `PurgeWorkflow` ends it and
        removes what it made, found by its marks; the answer is the `purge` operation, with the
        purge's workflow id.

        Args:
            requested_by: who asked, recorded as the reason of a termination.
        """
        _, description = await self._running(name)
        trouble = await self._trouble(description)
        if trouble is None or not trouble.stuck:
            try:
                accepted: AcceptedT = await self._update(
                    name, update, request, result_type, request_id
                )
                return accepted
            except (errors.ConflictError, UnavailableError):
                _, description = await self._running(name)
                trouble = await self._trouble(description)
                if trouble is None or not trouble.stuck:
                    raise
        purge = await self.start_purge(name, requested_by=requested_by)
        return result_type.model_validate(
            {
                "operation_id": PURGE_OPERATION,
                "kind": request.model_dump()["kind"],
                "position": 1,
                "purge_workflow_id": purge,
            }
        )

    async def start_purge(self, name: str, *, requested_by: str) -> str:
        """Start the purge of the entity's workflow (`PurgeWorkflow`), or find the one running;
        its workflow id."""
        target = PurgeTarget(
            entity=Entity(self.noun), organization=self.session.organization, name=name
        )
        purge_id = PURGE.workflow_id(target.workflow_id)
        client = await self.session.client()
        with reported(f"cannot purge {self.noun} '{name}'", self.not_found(name)):
            await client.start_workflow(
                PURGE.workflow_type,
                PurgeRequest(target=target, requested_by=requested_by),
                id=purge_id,
                task_queue=self.session.settings.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                static_summary=f"purge {target.describe()}",
            )
        return purge_id

    async def _start(
        self,
        *,
        name: str,
        organization: str,
        argument: BaseModel,
        marks: list[SearchAttributePair[Any]],
        memo: dict[str, Any] | None = None,
        request_id: str | None = None,
        summary: str,
        details: str = "",
        if_running: WorkflowIDConflictPolicy = WorkflowIDConflictPolicy.FAIL,
    ) -> bool:
        """Start the entity's workflow in `organization` with its marks (its kind, organization
        and first phase, and `marks` of its own: at start, so that a list sees it as soon as the
        start was answered); True when `request_id` had started it already (nothing new was
        started).

        Args:
            if_running: what a start finds running: refused (a name taken), or that one
                (`USE_EXISTING`, for an entity whose apply starts it or gives it the manifest).

        Raises:
            ConflictError: the name is taken in the organization (names are unique until a
                deletion completes), by another request.
        """
        workflow_id = self.workflow_id(name, organization)
        client = await self.session.client()
        check_carried(client.data_converter.payload_converter, argument, self.contract.input)
        await self.acting_for(organization)._refuse_while_purged(name)
        try:
            await client.start_workflow(
                self.workflow_type,
                argument,
                id=workflow_id,
                task_queue=self.session.settings.task_queue,
                # A deleted entity's workflow has completed: its name may be used again.
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                id_conflict_policy=if_running,
                memo={**(memo or {}), **({REQUEST_ID_MEMO: request_id} if request_id else {})}
                or None,
                search_attributes=TypedSearchAttributes(
                    [
                        SearchAttributePair(COLONY_KIND, self.kind),
                        *marks,
                        SearchAttributePair(COLONY_ORGANIZATION, organization),
                        SearchAttributePair(COLONY_PHASE, self.first_phase),
                    ]
                ),
                static_summary=summary,
                static_details=details or None,
            )
        except WorkflowAlreadyStartedError as exc:
            if request_id and await self._started_by(workflow_id, request_id, organization):
                return True
            raise errors.ConflictError(
                f"name: {self.noun} '{name}' already exists (names are unique until a deletion "
                "completes)"
            ) from exc
        except RPCError as exc:
            raise failure(
                exc, doing=f"cannot start {self.noun} '{name}'", missing=self.not_found(name)
            ) from exc
        return False

    async def _started_by(self, workflow_id: str, request_id: str, organization: str) -> bool:
        """True when the running workflow `workflow_id` of `organization` was started with
        `request_id`."""
        client = await self.session.client()
        try:
            description = await client.get_workflow_handle(workflow_id).describe()
            memo = await description.memo_value(REQUEST_ID_MEMO, None)
        except RPCError:
            return False
        return (
            description.status == ExecutionStatus.RUNNING
            and memo == request_id
            and organization_of(description) == organization
        )

    async def _listed(
        self, query: str, organization: str | None
    ) -> AsyncIterator[tuple[WorkflowExecution, str]]:
        """The workflows `query` finds in Temporal visibility (narrowed to `organization` with
        `organization_clause`), each with its organization; those of another organization
        (None: everyone's) are left out."""
        client = await self.session.client()
        doing = f"cannot list {plural(self.noun)}"
        with reported(doing, UnavailableError(doing)):
            async for execution in client.list_workflows(query):
                owner = organization_of(execution)
                if organization is not None and owner != organization:
                    continue  # another organization's ("" matches no visibility filter)
                yield execution, owner
