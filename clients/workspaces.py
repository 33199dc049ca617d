"""Workspaces: one client, two transports. `Workspaces` declares what a caller can do (deploy, get,
list, suspend, resume and delete, and, once for both transports, follow one until it settles);
`TemporalWorkspaces` does it through `WorkspaceWorkflow` (`colonyctl` in direct mode, and the
HTTP API with its caller's organization), `HttpWorkspaces` through the API (`/v1/workspaces`,
`colonyctl`'s remote mode).

**Organizations.** A workspace belongs to an organization (`WorkspaceSpec.organization`, empty for
the workspaces an operator deploys through Temporal directly), and its name is unique within it:
its workflow id holds both (`models.identity`), so two organizations' workspaces of one name are
two workflows, and neither can find, refuse or change the other's. A start records the
organization in the `ColonyOrganization` search attribute and the cluster's name in the memo
(`cluster`; `ColonyCluster` is the cluster's ClusterDeployment, injective across organizations),
and every lookup checks that mark (`TemporalEntity.owned`).

**One deploy path.** `deploy` is how every deploy starts, `colonyctl workspace deploy` and `apply
-f` in direct mode as well as `POST /v1/workspaces` (and `HttpWorkspaces.deploy` sends the same
request to that route): before anything starts, it checks, in this order, that the cluster
exists in the caller's organization (`NotFoundError`, exit 3 / 404, naming `cluster`) and can
take workspaces (`ConflictError` naming its phase, exit 2 / 409, when it failed or is being
deleted: `models.deploy.cluster_problem`), that the class is published, that the GPU model asked
for is one of the cluster's (`models.deploy.gpu_model_problem`), and, through
`prepare_workspace`, that every required prompt is answered (asked for when the caller can ask,
else refused by name: `models.deploy.missing_prompt_problem`), every prompt is checked against
the class (`models/values.py`, the same rules the workflow applies) and every plaintext answer to
a secret prompt is sealed with Colony's public key (`activities/sealing.py`): a secret never
leaves the client in plaintext. Through the API, the missing prompts are handled here first (a
person is asked before the request leaves), and the API seals what it receives: the client needs
no key file, and sends secrets to the API only (over the login's URL: use https). Last, the
organization's quotas admit one more workspace (`clients.quotas.admit`:
`QuotaExceededError` naming the quota, its use and its limit) before the workflow starts.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from temporalio.client import Client, WorkflowExecutionDescription, WorkflowQueryFailedError
from temporalio.common import SearchAttributePair
from temporalio.service import RPCError

from clients import quotas
from clients.base import Deadline, WorkflowRef, new_request_id, polled
from clients.classes import HttpClasses, TemporalClasses
from clients.clusters import TemporalClusters, started_at
from clients.errors import (
    ColonyError,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    OperationFailedError,
)
from clients.http import HttpEntity, RemoteClient, parsed
from clients.temporal import (
    Refusals,
    TemporalEntity,
    TemporalSession,
    organization_clause,
)
from models.capacity import Decision
from models.cluster import ClusterStatus, cluster_deployment_name
from models.deploy import (
    cluster_problem,
    gpu_model_problem,
    missing_prompt_problem,
    missing_prompts,
)
from models.identity import capacity_workflow_id, parse_entity_workflow_id
from models.names import name_problem, natural_key
from models.purge import Unresponsive
from models.quota import WORKSPACE_NEED
from models.value_paths import parse_value_path, value_path_problem
from models.values import (
    ValuesError,
    merge_workspace,
    resolve_resources,
    split_plaintext_secrets,
)
from models.workspace import (
    AdmissionState,
    WorkspacePhase,
    WorkspaceSpec,
    WorkspaceStatus,
    WorkspaceWorkflowInput,
)
from models.workspace_api import CapacityAnswers, CapacityAnswersQuery
from models.workspace_class import Prompt, PromptType, WorkspaceClassSpec
from models.workspace_operations import (
    DeleteWorkspaceRequest,
    ResumeWorkspaceRequest,
    SuspendWorkspaceRequest,
    WorkspaceOperationAccepted,
)
from workflows.capacity import CAPACITY
from workflows.search_attributes import COLONY_CLUSTER, COLONY_GPU_MODEL, COLONY_KIND, COLONY_PHASE
from workflows.workspace import WORKSPACE

if TYPE_CHECKING:  # only a request with a secret needs the cryptography
    from infra.sealing import Sealer

WORKSPACE_WORKFLOW = WORKSPACE.workflow_type
WORKSPACE_KIND = "workspace"
"""`ColonyKind` of workspace workflows (the workflow upserts the same value)."""
CLASS_MEMO = "class"
"""Memo key of the workspace's class (for `workspace list`, without a query per workspace)."""
CLUSTER_MEMO = "cluster"
"""Memo key of the workspace's cluster as its organization names it (`ColonyCluster` holds the
cluster's ClusterDeployment)."""
GPUS_MEMO = "gpus"
"""Memo key of the GPUs the workspace asks for (replicas x gpuCount of its resolved resources),
for `workspace list -o wide` without a query per workspace."""
SHOWN = 80
"""Characters of a user's path echoed in a message."""

Asker = Callable[[Prompt], Any]
"""Asks a person for one prompt's answer (a terminal); returns the answer as typed."""
SealerSource = Callable[[], "Sealer"]
"""Gives the sealer of Colony's public key, loaded only when a request holds a secret."""
CLI_HINT = "give --set {path}=...{others}, or run on a terminal to be asked"
"""How `colonyctl` says a missing required prompt can be answered."""

WorkspaceRequest = SuspendWorkspaceRequest | ResumeWorkspaceRequest | DeleteWorkspaceRequest
"""An operation a caller sends a workspace; its `kind` names the workflow's update."""


@dataclass(frozen=True)
class Deployment:
    """A deploy as a front door asks for it (`Workspaces.deploy`)."""

    spec: WorkspaceSpec
    """The request as the user gave it, on its cluster as its organization names it."""
    workspace_class: WorkspaceClassSpec | None = None
    """The class, when the caller has it already (`apply -f` of a class and its workspace);
    else read from the catalog."""
    ask: Asker | None = None
    """Asks a person for a missing required prompt; without it, one is refused by name."""
    secret_values: dict[str, str] = field(default_factory=dict)
    """Secret answers given apart from the others (the API's `secretValues`:
    `with_secret_values`)."""
    request_id: str | None = None
    """The same id again finds the first deploy instead of refusing the name."""


@dataclass
class StartedWorkspace:
    """A workspace workflow just started (or found started by the same request id)."""

    workflow_id: str
    repeated: bool = False
    """True when this request id had started it already: nothing new was started."""


@dataclass
class WorkspaceSummary:
    """One line of `colonyctl workspace list`."""

    name: str
    cluster: str
    class_name: str
    phase: str
    workflow_id: str
    started: str
    organization: str = ""
    web_ui: str = ""
    """The workspace's Web UI page when the transport knows it (the API's answer); else empty."""
    position: int = 0
    """Waiting for GPUs: its place in line now (asked of its cluster's ledger); else 0."""
    deployment: str = ""
    """Its cluster's ClusterDeployment (what its ledger is named by); empty from the API."""
    gpus: int | None = None
    """The GPUs it asks for (replicas x gpuCount); None when not known (deployed without its
    class at hand, or before its resources were resolved)."""

    @property
    def order(self) -> tuple[str, tuple[tuple[int, int, str], ...]]:
        """Where it is listed: by organization, then by name as people count (`burst-2` before
        `burst-10`)."""
        return self.organization, natural_key(self.name)


# --- preparing a deploy request --------------------------------------------------------------


def public_key_sealer() -> Sealer:
    """The sealer of Colony's public key from `COLONY_SEALING_PUBLIC_KEY_FILE` (`colonyctl`'s);
    a missing or unreadable key is refused (`InvalidRequestError`)."""
    # Imported here: only a request with a secret needs the cryptography and the key file.
    from infra.sealing import PUBLIC_KEY_ENV, SealingError, SealingSettings

    try:
        return SealingSettings.from_env().sealer()
    except SealingError as exc:
        raise InvalidRequestError(
            f"sealing: {exc} (set {PUBLIC_KEY_ENV} to Colony's public key)"
        ) from exc


def _seal(
    spec: WorkspaceSpec, workspace_class: WorkspaceClassSpec, sealer: SealerSource
) -> WorkspaceSpec:
    from infra.sealing import seal_workspace_secrets

    _, plaintext = split_plaintext_secrets(spec, workspace_class)
    if not plaintext:
        return spec
    return seal_workspace_secrets(spec, workspace_class, sealer())


def answer_missing(
    spec: WorkspaceSpec,
    workspace_class: WorkspaceClassSpec,
    *,
    ask: Asker | None = None,
    hint: str = CLI_HINT,
) -> WorkspaceSpec:
    """The request with every required prompt answered: asked for with `ask` when given, else
    refused naming the first missing prompt (`InvalidRequestError`, with `hint`: see
    `models.deploy.missing_prompt_problem`)."""
    missing = missing_prompts(spec, workspace_class)
    if ask is None:
        problem = missing_prompt_problem(missing, workspace_class.name, hint)
        if problem:
            raise InvalidRequestError(problem)
        return spec
    answers = dict(spec.answers)
    for prompt in missing:
        answers[prompt.helm_value_path] = ask(prompt)
    return spec.model_copy(update={"answers": answers}) if missing else spec


def prepare_workspace(
    spec: WorkspaceSpec,
    workspace_class: WorkspaceClassSpec,
    *,
    ask: Asker | None = None,
    sealer: SealerSource = public_key_sealer,
    hint: str = CLI_HINT,
) -> WorkspaceSpec:
    """The request to send: every required prompt answered, every answer checked against the
    class, every secret sealed. Nothing is started here.

    Args:
        spec: the request as the user gave it (secrets possibly in plaintext, in `values` or
            `answers`).
        workspace_class: the class it pins (from the catalog).
        ask: asks a person for a missing required prompt (a terminal); without it, a missing
            one is refused, naming the prompt.
        sealer: Colony's public key, asked for only when the request holds a secret (the HTTP
            API passes its own: it seals what remote clients send in plaintext).
        hint: how a missing prompt may be given (`answer_missing`).

    Raises:
        InvalidRequestError: a required prompt is missing, an answer breaks a prompt's rule (type,
            options), or a secret cannot be sealed (no public key).
    """
    spec = answer_missing(spec, workspace_class, ask=ask, hint=hint)
    sealed = _seal(spec, workspace_class, sealer)
    try:
        merge_workspace(workspace_class, sealed)
    except ValuesError as exc:
        raise InvalidRequestError(f"values: {'; '.join(exc.problems)}") from exc
    return sealed


def check_gpu_model(
    spec: WorkspaceSpec, workspace_class: WorkspaceClassSpec, cluster: ClusterStatus
) -> None:
    """Refuse a GPU model the cluster has no node pool of, listing its models
    (`models.deploy.gpu_model_problem`), as `cluster create` refuses a SKU the catalog lacks."""
    problem = gpu_model_problem(spec.cluster, cluster, spec, workspace_class)
    if problem:
        raise InvalidRequestError(problem)


def with_secret_values(
    spec: WorkspaceSpec, secret_values: dict[str, str], workspace_class: WorkspaceClassSpec
) -> WorkspaceSpec:
    """The request with `secretValues` (the HTTP API's field) among its answers, to be sealed with
    the others; each must answer one of the class's secret prompts, and only once."""
    secret = {
        tuple(parse_value_path(p.helm_value_path)): p.helm_value_path
        for p in workspace_class.prompts
        if p.type is PromptType.SECRET
    }
    answers = dict(spec.answers)
    answered = {tuple(parse_value_path(path)) for path in answers}
    for path in secret_values:
        shown = path if len(path) <= SHOWN else path[:SHOWN] + "..."
        problem = value_path_problem(path)
        if problem:
            raise InvalidRequestError(f"secretValues: answer '{shown}': {problem}")
        key = tuple(parse_value_path(path))
        if key not in secret:
            known = ", ".join(secret.values()) or "none"
            raise InvalidRequestError(
                f"secretValues: '{shown}' is not a secret prompt of class "
                f"'{workspace_class.name}' (its secret prompts: {known}); give other answers in "
                "answers or values"
            )
        if key in answered:
            raise InvalidRequestError(
                f"secretValues: prompt '{secret[key]}' is answered in answers too; give one"
            )
        answers[secret[key]] = secret_values[path]
    return spec.model_copy(update={"answers": answers})


# --- the interface ---------------------------------------------------------------------------


class Workspaces(ABC):
    """What a caller can do with workspaces, whichever transport carries it."""

    @abstractmethod
    async def deploy(self, deployment: Deployment) -> StartedWorkspace:
        """Deploy a workspace: everything checked before anything starts (see the module
        docstring), then its workflow started."""

    @abstractmethod
    async def get(self, name: str) -> WorkspaceStatus:
        """The workspace's status; `NotFoundError` when the caller has no workspace of that name
        (never deployed, or deleted)."""

    @abstractmethod
    async def list_all(
        self, *, cluster: str | None = None, organization: str | None = None
    ) -> list[WorkspaceSummary]:
        """Every workspace whose deletion has not completed, optionally of one cluster.

        Args:
            cluster: only this cluster's (of `organization`; of the default mode when None).
            organization: only this organization's ("" the default mode's); None: everyone's
                (through the API, always the key's organization's).
        """

    @abstractmethod
    async def send(
        self, name: str, request: WorkspaceRequest, *, request_id: str | None = None
    ) -> WorkspaceOperationAccepted:
        """Send an operation (suspend, resume, delete); the workflow's refusal (already
        suspended, being deleted) is a `ConflictError`."""

    @abstractmethod
    def workflow(self, name: str) -> WorkflowRef:
        """The workspace's workflow (through the API: as its answers named it)."""

    @abstractmethod
    async def read(self, name: str) -> WorkspaceStatus | None:
        """The status now, or the final one once the workspace is gone (phase Deleted); None
        when its workflow ended without one (terminated)."""

    async def wait(
        self,
        name: str,
        done: Callable[[WorkspaceStatus], bool],
        on_status: Callable[[WorkspaceStatus], None],
        *,
        give_up_after: float | None = None,
    ) -> WorkspaceStatus | None:
        """Poll the workspace's status until `done` holds or it is gone; the last status (phase
        Deleted once gone), or None when its workflow ended without one. `on_status` sees every
        status read, for a live display.

        Raises:
            OperationFailedError: `give_up_after` seconds passed first.
        """
        deadline = Deadline(give_up_after)
        async for status in polled(lambda: self.read(name)):
            on_status(status)
            if done(status) or status.phase is WorkspacePhase.DELETED:
                return status
            if deadline.passed():
                raise OperationFailedError(
                    f"workspace '{name}' is {status.phase.value} after {give_up_after:.0f}s "
                    f"({status.message or 'no message'})"
                )
        return None


# --- through Temporal ------------------------------------------------------------------------


def workspace_summary(spec: WorkspaceSpec) -> str:
    """The Web UI's one-line summary of a workspace's workflow."""
    return f"workspace {spec.name} ({spec.class_name}) on cluster {spec.cluster}"


def workspace_details(spec: WorkspaceSpec, workspace_class: WorkspaceClassSpec | None) -> str:
    """The Web UI's static details of a workspace's workflow: what was asked for, in markdown
    (never a value: values may be large; secrets are sealed anyway). The workflow's current
    details say where it stands."""
    lines = [
        f"**Workspace** `{spec.name}` of class `{spec.class_name}` on cluster `{spec.cluster}`",
    ]
    if workspace_class is not None:
        lines += ["", f"{workspace_class.display_name}: {workspace_class.description}".strip()]
        endpoints = ", ".join(
            f"{e.name} ({e.protocol.value} {e.port})" for e in workspace_class.access_endpoints
        )
        if endpoints:
            lines += ["", f"Endpoints: {endpoints}"]
    resources = spec.resources.per_replica if spec.resources else None
    if resources is not None and resources.gpu_count:
        model = resources.gpu_type or (
            ",".join(f"{k}={v}" for k, v in (resources.gpu_node_selector or {}).items())
            or "any model"
        )
        replicas = spec.resources.replicas if spec.resources and spec.resources.replicas else 1
        lines += ["", f"GPUs: {replicas} x {resources.gpu_count} ({model})"]
    if spec.sealed_answers:
        lines += ["", f"Sealed answers: {', '.join(sorted(spec.sealed_answers))}"]
    if spec.suspend:
        lines += ["", "Deployed suspended."]
    return "\n".join(lines)


def workspace_memo(
    spec: WorkspaceSpec, workspace_class: WorkspaceClassSpec | None
) -> dict[str, Any]:
    """What a workspace's workflow carries for the lists (its class, its cluster, and the GPUs it
    asks for when its class is at hand)."""
    memo: dict[str, Any] = {CLASS_MEMO: spec.class_name, CLUSTER_MEMO: spec.cluster}
    if workspace_class is not None:
        memo[GPUS_MEMO] = resolve_resources(workspace_class.default_resources, spec.resources).gpus
    return memo


def _whole(value: Any) -> int | None:
    """A memo's count (absent in workspaces started before it was written: None)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


async def with_current_position(
    client: Client, status: WorkspaceStatus, organization: str = ""
) -> WorkspaceStatus:
    """A waiting workspace's status with its position in line as its cluster's ledger works it out
    now (`answers` query): the ledger does not tell waiters when the line moves, so the workflow
    knows only the position of its first answer. Unchanged when it does not wait, or when the
    ledger cannot be asked (the status then shows the workflow's last answer).

    Args:
        organization: the workspace's (its cluster's ledger is named by the ClusterDeployment of
            the organization's cluster).
    """
    admission = status.admission
    if admission is None or admission.state is not AdmissionState.WAITING:
        return status
    deployment = cluster_deployment_name(status.cluster, organization)
    ledger = client.get_workflow_handle(capacity_workflow_id(deployment))
    try:
        found: CapacityAnswers = await ledger.query(
            CAPACITY.answers.name,
            CapacityAnswersQuery(request_ids=[admission.request_id]),
            result_type=CapacityAnswers,
        )
    except (RPCError, WorkflowQueryFailedError):
        return status
    answer = next(iter(found.answers), None)
    if answer is None or answer.decision is not Decision.WAITING:
        return status  # admitted (or released) this instant: the workspace is being told
    current = admission.model_copy(update={"position": answer.position, "message": answer.message})
    return status.model_copy(update={"admission": current})


async def fill_positions(client: Client, found: list[WorkspaceSummary]) -> None:
    """The current place in line of each waiting workspace: one `answers` query per cluster
    (positions are worked out by the ledger when asked; the workspaces are not told)."""
    waiting: dict[str, list[WorkspaceSummary]] = {}
    for summary in found:
        if summary.phase == WorkspacePhase.WAITING.value:
            waiting.setdefault(summary.deployment, []).append(summary)
    for deployment, summaries in waiting.items():
        ledger = client.get_workflow_handle(capacity_workflow_id(deployment))
        try:
            answers: CapacityAnswers = await ledger.query(
                CAPACITY.answers.name,
                CapacityAnswersQuery(workspaces=[s.name for s in summaries]),
                result_type=CapacityAnswers,
            )
        except (RPCError, WorkflowQueryFailedError):
            continue  # the ledger cannot be asked now: the list still shows them Waiting
        by_workspace = {a.workspace: a.position for a in answers.answers}
        for summary in summaries:
            summary.position = by_workspace.get(summary.name, 0)


class TemporalWorkspaces(TemporalEntity[WorkspaceStatus], Workspaces):
    """Workspaces through `WorkspaceWorkflow`, for the session's organization.

    Args:
        sealer: Colony's public key, loaded when a request holds a secret (`colonyctl`'s key file
            by default; the HTTP API passes its own).
        hint: how the caller's front door answers a missing prompt (`colonyctl`'s flags by
            default; the API names its fields).
    """

    contract = WORKSPACE
    noun = kind = WORKSPACE_KIND
    first_phase = WorkspacePhase.PENDING.value
    owned = True

    def __init__(
        self,
        session: TemporalSession,
        *,
        sealer: SealerSource = public_key_sealer,
        hint: str = CLI_HINT,
    ) -> None:
        super().__init__(session)
        self.sealer = sealer
        self.hint = hint

    def refusals(self, name: str) -> Refusals:
        # A workspace's refusals are about the workspace itself (already suspended, deleted).
        return Refusals(subject="workspace", not_found=self.not_found(name))

    async def check_cluster(self, cluster: str) -> ClusterStatus:
        """The cluster (as the session's organization names it) a workspace is to run on, when it
        can take one.

        Raises:
            NotFoundError: no such cluster in the organization, naming `cluster`.
            ConflictError: it failed or is being deleted, naming `cluster` and the phase.
        """
        status = await TemporalClusters(self.session).get(cluster)
        problem = cluster_problem(cluster, status)
        if problem:
            raise ConflictError(problem)
        return status

    async def deploy(self, deployment: Deployment) -> StartedWorkspace:
        """Of the spec's organization (`spec.organization`: the API's caller's; empty for the
        operator in direct mode)."""
        spec = deployment.spec
        owner = self.acting_for(spec.organization)
        cluster = await owner.check_cluster(spec.cluster)
        pinned = deployment.workspace_class or await TemporalClasses(owner.session).get(
            spec.class_name
        )
        check_gpu_model(spec, pinned, cluster)
        if deployment.secret_values:
            spec = with_secret_values(spec, deployment.secret_values, pinned)
        prepared = prepare_workspace(
            spec, pinned, ask=deployment.ask, sealer=self.sealer, hint=self.hint
        )
        return await self.start(prepared, workspace_class=pinned, request_id=deployment.request_id)

    async def start(
        self,
        spec: WorkspaceSpec,
        *,
        workspace_class: WorkspaceClassSpec | None = None,
        request_id: str | None = None,
    ) -> StartedWorkspace:
        """Start the workspace's workflow (its deploy is its first operation), in the spec's
        organization, as `deploy` does once everything is checked.

        Args:
            spec: the prepared request (`prepare_workspace`): secrets sealed.
            workspace_class: its class, for the Web UI's details.
        """
        request_id = request_id or new_request_id()
        admitted = await quotas.admit(
            self.session,
            spec.organization,
            holder=spec.workflow_id,
            request_id=request_id,
            need=WORKSPACE_NEED,
            subject=f"workspace '{spec.name}'",
        )
        try:
            repeated = await self._start(
                name=spec.name,
                organization=spec.organization,
                argument=WorkspaceWorkflowInput(spec=spec),
                # Every mark the workflow shows from the start, so that its first task upserts none.
                marks=[
                    SearchAttributePair(COLONY_CLUSTER, spec.cluster_deployment),
                    SearchAttributePair(COLONY_GPU_MODEL, spec.gpu_model),
                ],
                memo=workspace_memo(spec, workspace_class),
                request_id=request_id,
                summary=workspace_summary(spec),
                details=workspace_details(spec, workspace_class),
            )
        except ColonyError:
            await admitted.release()
            raise
        return StartedWorkspace(spec.workflow_id, repeated=repeated)

    async def exists(self, name: str) -> bool:
        """True when a workspace of that name runs (deleting counts: its name is not free yet)."""
        try:
            await self._running(name)
        except NotFoundError:
            return False
        return True

    async def get(self, name: str) -> WorkspaceStatus:
        status, _ = await self._status(name)
        if status.phase is WorkspacePhase.DELETED:
            raise self.not_found(name)
        return await self._with_position(status)

    async def _with_position(self, status: WorkspaceStatus) -> WorkspaceStatus:
        client = await self.session.client()
        return await with_current_position(client, status, self.session.organization)

    async def read(self, name: str) -> WorkspaceStatus | None:
        status, running = await self._now_or_final(name)
        if status is None or running is None:
            return status
        return await self._with_position(status)

    async def send(
        self, name: str, request: WorkspaceRequest, *, request_id: str | None = None
    ) -> WorkspaceOperationAccepted:
        """A delete of a workspace whose workflow cannot make progress purges it
        (`TemporalEntity._delete`)."""
        if isinstance(request, DeleteWorkspaceRequest):
            return await self._delete(
                name,
                request.kind.value,
                request,
                WorkspaceOperationAccepted,
                request_id,
                requested_by=self.requested_by,
            )
        accepted: WorkspaceOperationAccepted = await self._update(
            name, request.kind.value, request, WorkspaceOperationAccepted, request_id
        )
        return accepted

    async def stand_in(
        self, name: str, description: WorkflowExecutionDescription, unresponsive: Unresponsive
    ) -> WorkspaceStatus:
        """Its class and cluster from the memo its start wrote, its last phase from its marks."""
        phase = description.typed_search_attributes.get(COLONY_PHASE) or ""
        known = {p.value for p in WorkspacePhase}
        return WorkspaceStatus.model_validate(
            {
                "name": name,
                "organization": self.session.organization,
                "class": str(await description.memo_value(CLASS_MEMO, "")),
                "cluster": str(await description.memo_value(CLUSTER_MEMO, "")),
                "phase": phase if phase in known else WorkspacePhase.PENDING,
                "message": unresponsive.reason,
                "created_at": description.start_time,
                "unresponsive": unresponsive,
            }
        )

    async def list_all(
        self, *, cluster: str | None = None, organization: str | None = None
    ) -> list[WorkspaceSummary]:
        """From Temporal visibility (`ColonyKind = 'workspace'`); phases are the ones the
        workflows last upserted."""
        query = f"{COLONY_KIND.name} = '{WORKSPACE_KIND}' AND ExecutionStatus = 'Running'"
        of_organization = organization_clause(organization)
        if cluster:
            # Cluster and organization names are DNS labels (validated): nothing to escape.
            if name_problem("cluster", cluster):
                raise InvalidRequestError(f"cluster: {name_problem('cluster', cluster)}")
            deployment = cluster_deployment_name(cluster, organization or "")
            query += f" AND {COLONY_CLUSTER.name} = '{deployment}'"
        found: list[WorkspaceSummary] = []
        async for execution, owner in self._listed(query + of_organization, organization):
            entity = parse_entity_workflow_id(execution.id)
            if entity is None or entity[1] != owner:
                continue  # not a workspace's id, or marks that contradict it
            attributes = execution.typed_search_attributes
            found.append(
                WorkspaceSummary(
                    name=entity[2],
                    cluster=str(await execution.memo_value(CLUSTER_MEMO, "")),
                    class_name=str(await execution.memo_value(CLASS_MEMO, "")),
                    phase=attributes.get(COLONY_PHASE) or "",
                    workflow_id=execution.id,
                    started=started_at(execution.start_time),
                    organization=owner,
                    deployment=attributes.get(COLONY_CLUSTER) or "",
                    gpus=_whole(await execution.memo_value(GPUS_MEMO, None)),
                )
            )
        await fill_positions(await self.session.client(), found)
        return sorted(found, key=lambda w: w.order)


# --- through the HTTP API --------------------------------------------------------------------

WORKSPACES = "/v1/workspaces"


class HttpWorkspaces(HttpEntity[WorkspaceStatus], Workspaces):
    """Workspaces through the HTTP API, as the key's organization's."""

    collection = WORKSPACES
    noun = "workspace"
    status_type = WorkspaceStatus

    def __init__(self, remote: RemoteClient) -> None:
        super().__init__(remote)
        self._seen: dict[str, WorkspaceStatus] = {}

    async def deploy(self, deployment: Deployment) -> StartedWorkspace:
        """`POST /v1/workspaces`, where the API runs `TemporalWorkspaces.deploy` (the cluster, the
        class, every prompt checked; secrets sealed there). Only the missing required prompts are
        handled here first, as in direct mode, so a user is asked before the request leaves; the
        class is read for that, so an unknown class is found before an unknown cluster here."""
        spec = deployment.spec
        if spec.sealed_answers:
            raise InvalidRequestError(
                "sealedAnswers: sealed answers cannot be sent through the API (it seals plaintext "
                "answers itself); log out to use Temporal directly"
            )
        if spec.organization:
            raise InvalidRequestError(
                "organization: a workspace deployed through the API is the key's organization's; "
                "leave it out of the manifest"
            )
        pinned = deployment.workspace_class or await HttpClasses(self.remote).get(spec.class_name)
        spec = answer_missing(spec, pinned, ask=deployment.ask)
        body: dict[str, Any] = {
            "name": spec.name,
            "class": spec.class_name,
            "cluster": spec.cluster,
            "values": spec.values,
            "answers": spec.answers,
            "secretValues": deployment.secret_values,
            "suspend": spec.suspend,
        }
        if spec.resources is not None:
            body["resources"] = spec.resources.model_dump(mode="json", exclude_none=True)
        accepted = await self.remote.call(
            "POST",
            WORKSPACES,
            json=body,
            request_id=deployment.request_id,
            about=self.about(spec.name),
        )
        return StartedWorkspace(
            workflow_id=str(accepted.get("workflowId", "")),
            repeated=bool(accepted.get("repeated", False)),
        )

    async def get(self, name: str) -> WorkspaceStatus:
        return await self._get(name)

    async def read(self, name: str) -> WorkspaceStatus | None:
        """The status; once the API no longer finds it, it was deleted (the commands follow a
        workspace the API has just accepted an operation for; a fast delete may be done before
        the first poll): its last status seen, phase Deleted (the API keeps no final status)."""
        try:
            self._seen[name] = await self._get(name)
        except NotFoundError:
            seen = self._seen.get(name) or WorkspaceStatus.model_validate(
                {"name": name, "class": "", "cluster": "", "phase": WorkspacePhase.DELETED}
            )
            return seen.model_copy(
                update={"phase": WorkspacePhase.DELETED, "message": "deleted", "access": []}
            )
        return self._seen[name]

    async def send(
        self, name: str, request: WorkspaceRequest, *, request_id: str | None = None
    ) -> WorkspaceOperationAccepted:
        method, path = (
            ("DELETE", self.path(name))
            if isinstance(request, DeleteWorkspaceRequest)
            else ("POST", self.path(name, request.kind.value))
        )
        body = await self.remote.call(method, path, request_id=request_id, about=self.about(name))
        return parsed(WorkspaceOperationAccepted, body)

    async def list_all(
        self, *, cluster: str | None = None, organization: str | None = None
    ) -> list[WorkspaceSummary]:
        summaries = []
        for item in await self._items({"cluster": cluster} if cluster else None):
            status = parsed(WorkspaceStatus, item)
            summaries.append(
                WorkspaceSummary(
                    name=status.name,
                    cluster=status.cluster,
                    class_name=status.class_name,
                    phase=status.phase.value,
                    workflow_id=str(item.get("workflowId", "")),
                    started=started_at(status.created_at),
                    organization=status.organization,
                    web_ui=str(item.get("webUi", "")),
                    position=status.admission.position if status.admission is not None else 0,
                    gpus=status.resolved_resources.gpus if status.resolved_resources else None,
                )
            )
        return sorted(summaries, key=lambda w: w.order)
