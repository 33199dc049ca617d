"""Colony's side of the workspace workflows, for every client: the class catalog (list, get,
publish), and workspaces (prepare a request, start its workflow, read it, send it suspend, resume
and delete, list them, follow one).

`colonyctl` and the HTTP API (`api/workspaces.py`) call these functions, so the two cannot drift
apart; `starter.remote_workspaces` mirrors their signatures over HTTP for `colonyctl`'s remote
mode. No Typer, no rich, no FastAPI, no printing. Failures are the typed errors of
`starter.errors`, decided as in `starter.client` (whose `connect` and request ids this module
shares): a workflow that does not run is `NotFoundError`, an update the workspace's state refuses
`ConflictError` (a name taken too; `NotFoundError` when the refusal's details say so), a request
that breaks a rule `InvalidRequestError`, Temporal unreachable `UnavailableError`.

The workflows are addressed by their registered names and ids (`workspace/[<organization>/]<name>`,
`catalog/workspace-classes`); their code is not imported, only their contracts (`models/`).

**Organizations.** A workspace belongs to an organization (`WorkspaceSpec.organization`, empty for
the workspaces an operator deploys through Temporal directly), and its name is unique within it:
its workflow id holds both (`models.identity`), so two organizations' workspaces of one name are
two workflows, and neither can find, refuse or change the other's. `start_workspace` records the
organization in the `ColonyOrganization` search attribute and the cluster's name in the memo
(`cluster`; `ColonyCluster` is the cluster's ClusterDeployment, injective across organizations).
Every function that reads or changes a workspace takes `organization` (the HTTP API passes its
caller's; `colonyctl` in direct mode the default mode's ""); `list_workspaces` takes None for
every organization's (the operator's view).

**One deploy path.** `deploy` is how every deploy starts, `colonyctl workspace deploy` and `apply
-f` in direct mode as well as `POST /v1/workspaces` (and `starter.remote_workspaces.deploy` sends
the same request to that route): before anything starts, it checks, in this order, that the
cluster exists in the caller's organization (`NotFoundError`, exit 3 / 404, naming `cluster`)
and can take workspaces (`ConflictError` naming its phase, exit 2 / 409, when it failed or is
being deleted: `check_cluster`), that the class is published, and, through `prepare_workspace`,
that every required prompt is answered (asked for when the caller can ask, else refused by name),
every prompt is checked against the class (`models/values.py`, the same rules the workflow
applies) and every plaintext answer to a secret prompt is sealed with Colony's public key
(`activities/sealing.py`): a secret never leaves the client in plaintext.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from temporalio.client import (
    Client,
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
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from activities.settings import ColonySettings
from models.capacity import Decision
from models.cluster import ClusterPhase, ClusterStatus, cluster_deployment_name
from models.errors import ErrorType
from models.identity import capacity_workflow_id, parse_entity_workflow_id
from models.names import name_problem, natural_key
from models.value_paths import MISSING, get_path, parse_value_path, value_path_problem
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
    workspace_workflow_id,
)
from models.workspace_api import (
    CAPACITY_ANSWERS_QUERY,
    CATALOG_WORKFLOW_ID,
    CapacityAnswers,
    CapacityAnswersQuery,
    CatalogStatus,
    PublishObjectsRequest,
    PublishObjectsResult,
    PublishWorkspaceClassRequest,
    PublishWorkspaceClassResult,
)
from models.workspace_class import Prompt, PromptType, WorkspaceClassSpec
from models.workspace_operations import WorkspaceOperationAccepted, WorkspaceOperationKind
from starter.client import (
    WorkflowRef,
    new_request_id,
    query_status,
    rejected_field,
    rejection_is_not_found,
)
from starter.client import connect as connect
from starter.errors import (
    ColonyError,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    OperationFailedError,
    UnavailableError,
)
from workflows.search_attributes import (
    COLONY_CLUSTER,
    COLONY_KIND,
    COLONY_ORGANIZATION,
    COLONY_PHASE,
)

if TYPE_CHECKING:  # only a request with a secret needs the cryptography
    from activities.sealing import Sealer

WORKSPACE_WORKFLOW = "WorkspaceWorkflow"
STATUS_QUERY = "status"
CLASSES_QUERY = "classes"
PUBLISH_CLASS_UPDATE = "publish_class"
PUBLISH_OBJECTS_UPDATE = "publish_objects"
WORKSPACE_KIND = "workspace"
"""`ColonyKind` of workspace workflows (the workflow upserts the same value)."""
REQUEST_ID_MEMO = "requestId"
"""Memo key of the request id a workspace was deployed with: a deploy repeated with the same id
is the same deploy, not a name conflict."""
CLASS_MEMO = "class"
"""Memo key of the workspace's class (for `workspace list`, without a query per workspace)."""
CLUSTER_MEMO = "cluster"
"""Memo key of the workspace's cluster as its organization names it (`ColonyCluster` holds the
cluster's ClusterDeployment)."""
GPUS_MEMO = "gpus"
"""Memo key of the GPUs the workspace asks for (replicas x gpuCount of its resolved resources),
for `workspace list -o wide` without a query per workspace."""
POLL_SECONDS = 0.5
"""How often a follower asks a workspace for its status: a query costs its history nothing."""
SHOWN = 80
"""Characters of a user's path echoed in a message."""

Asker = Callable[[Prompt], Any]
"""Asks a person for one prompt's answer (a terminal); returns the answer as typed."""
SealerSource = Callable[[], "Sealer"]
"""Gives the sealer of Colony's public key, loaded only when a request holds a secret."""
CLI_HINT = "give --set {path}=...{others}, or run on a terminal to be asked"
"""How `colonyctl` says a missing required prompt can be answered."""
NO_WORKSPACES_PHASES = (ClusterPhase.FAILED, ClusterPhase.DELETING, ClusterPhase.DELETED)
"""A cluster in these phases takes no new workspace: a failed one has nothing to run it on (its
ClusterDeployment may never have been made), a deleting one deletes its workspaces. A creating
cluster takes them: they wait in line for its GPUs."""


def workspace_not_found(name: str) -> NotFoundError:
    return NotFoundError(f"workspace: workspace '{name}' not found")


SHOWN_CLASSES = 10
"""Published classes a refusal names (the catalog may hold many)."""


def class_not_found(name: str, published: Iterable[str]) -> NotFoundError:
    """A class nobody published, refused naming those that are (the same words for `colonyctl`
    and the HTTP API: neither's command is the other's)."""
    names = sorted(published)
    shown = ", ".join(names[:SHOWN_CLASSES]) + (
        f" and {len(names) - SHOWN_CLASSES} more" if len(names) > SHOWN_CLASSES else ""
    )
    return NotFoundError(
        f"class: workspace class '{name}' not found "
        + (f"(published: {shown})" if names else "(no class is published)")
    )


def _rpc_error(exc: RPCError, what: str, name: str) -> ColonyError:
    if exc.status == RPCStatusCode.NOT_FOUND:
        return workspace_not_found(name)
    return UnavailableError(f"{what}: {exc.message}")


# --- The class catalog --------------------------------------------------------------------------


def _catalog_unavailable(exc: RPCError, failed: str) -> UnavailableError:
    """The catalog workflow could not be reached: not running (the worker starts it), or Temporal
    answered `exc` to what `failed` says."""
    if exc.status == RPCStatusCode.NOT_FOUND:
        return UnavailableError(
            f"the workspace class catalog ({CATALOG_WORKFLOW_ID}) is not running: start "
            "Colony's worker, which starts it"
        )
    return UnavailableError(f"{failed}: {exc.message}")


async def catalog(client: Client, organization: str = "") -> CatalogStatus:
    """The published classes `organization` sees (the shared catalog's and its own; "" the shared
    catalog's only), as the catalog workflow last read them from the management cluster.

    Raises:
        UnavailableError: the catalog workflow does not run (the worker starts it) or Temporal
            cannot be reached.
    """
    handle = client.get_workflow_handle(CATALOG_WORKFLOW_ID)
    try:
        status: CatalogStatus = await handle.query(CLASSES_QUERY, result_type=CatalogStatus)
    except RPCError as exc:
        raise _catalog_unavailable(exc, "cannot read the workspace class catalog") from exc
    except WorkflowQueryFailedError as exc:
        raise UnavailableError(f"cannot read the workspace class catalog: {exc}") from exc
    return status.for_organization(organization)


async def get_class(client: Client, name: str, organization: str = "") -> WorkspaceClassSpec:
    """One class `organization` sees, by its exact name (its own before the shared catalog's);
    `NotFoundError` when there is none (another organization's own class is none)."""
    classes = (await catalog(client, organization)).classes
    found = next((c for c in classes if c.name == name), None)
    if found is None:
        raise class_not_found(name, (c.name for c in classes))
    return found


async def publish_class(
    client: Client, request: PublishWorkspaceClassRequest, *, request_id: str | None = None
) -> PublishWorkspaceClassResult:
    """Publish a class (with the objects it needs, such as its ServiceTemplates).

    Publishing the identical class again is success (`created` False); a different definition
    under an existing name is refused (`ConflictError` naming the rule: a new version is a new
    name).
    """
    handle = client.get_workflow_handle(CATALOG_WORKFLOW_ID)
    try:
        result: PublishWorkspaceClassResult = await handle.execute_update(
            PUBLISH_CLASS_UPDATE,
            request,
            id=request_id or new_request_id(),
            result_type=PublishWorkspaceClassResult,
        )
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        if isinstance(cause, ApplicationError) and cause.type in (
            ErrorType.OPERATION_REJECTED,
            ErrorType.CLASS_CONFLICT,
        ):
            raise ConflictError(f"name: {cause.message}") from exc
        if isinstance(cause, ApplicationError) and cause.type == ErrorType.INVALID_SPEC:
            # The management cluster refused an object of the class (its schema).
            raise InvalidRequestError(f"spec: {cause.message}") from exc
        raise OperationFailedError(
            f"publish {request.spec.name}: {getattr(cause, 'message', None) or cause or exc}"
        ) from exc
    except RPCError as exc:
        raise _catalog_unavailable(exc, f"cannot publish {request.spec.name}") from exc
    return result


async def publish_objects(
    client: Client, objects: list[dict[str, Any]], *, request_id: str | None = None
) -> PublishObjectsResult:
    """Store objects classes need on their own (k0rdent ServiceTemplates `apply -f` was given
    without a class); existing ones are left as they are."""
    handle = client.get_workflow_handle(CATALOG_WORKFLOW_ID)
    try:
        result: PublishObjectsResult = await handle.execute_update(
            PUBLISH_OBJECTS_UPDATE,
            PublishObjectsRequest(objects=objects),
            id=request_id or new_request_id(),
            result_type=PublishObjectsResult,
        )
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        if isinstance(cause, ApplicationError) and cause.type == ErrorType.OPERATION_REJECTED:
            raise InvalidRequestError(f"objects: {cause.message}") from exc
        raise OperationFailedError(
            f"publish objects: {getattr(cause, 'message', None) or cause or exc}"
        ) from exc
    except RPCError as exc:
        raise _catalog_unavailable(exc, "cannot publish objects") from exc
    return result


def check_class_conflicts(
    requests: list[PublishWorkspaceClassRequest], catalog: CatalogStatus
) -> None:
    """Refuse, before anything is published, a class that exists with another definition
    (`ConflictError`: classes are immutable, a new version is a new name)."""
    from models.workspace_class import class_conflict

    published = {c.name: c for c in catalog.classes}
    for request in requests:
        existing = published.get(request.spec.name)
        conflict = class_conflict(existing, request.spec) if existing else None
        if conflict:
            raise ConflictError(f"name: {conflict}")


async def workspace_exists(client: Client, name: str, organization: str = "") -> bool:
    """True when a workspace of that name runs in the organization (deleting counts: its name is
    not free yet)."""
    try:
        await _describe_running(client, name, organization)
    except NotFoundError:
        return False
    return True


# --- Preparing a deploy request -----------------------------------------------------------------


def _answered(spec: WorkspaceSpec, plaintext_secrets: dict[str, str], prompt: Prompt) -> bool:
    path = prompt.helm_value_path
    segments = tuple(parse_value_path(path))
    if any(tuple(parse_value_path(p)) == segments for p in spec.answers):
        return True
    if any(tuple(parse_value_path(p)) == segments for p in spec.sealed_answers):
        return True
    if path in plaintext_secrets:
        return True
    if get_path(spec.values, list(segments)) not in (MISSING, None, ""):
        return True
    return prompt.type is not PromptType.SECRET and prompt.default is not None


def missing_prompts(spec: WorkspaceSpec, workspace_class: WorkspaceClassSpec) -> list[Prompt]:
    """The class's required prompts the request leaves unanswered, in the class's order."""
    _, plaintext = split_plaintext_secrets(spec, workspace_class)
    return [
        prompt
        for prompt in workspace_class.prompts
        if prompt.required and not _answered(spec, plaintext, prompt)
    ]


def public_key_sealer() -> Sealer:
    """The sealer of Colony's public key from `COLONY_SEALING_PUBLIC_KEY_FILE` (`colonyctl`'s);
    a missing or unreadable key is refused (`InvalidRequestError`)."""
    # Imported here: only a request with a secret needs the cryptography and the key file.
    from activities.sealing import PUBLIC_KEY_ENV, SealingError, SealingSettings

    try:
        return SealingSettings.from_env().sealer()
    except SealingError as exc:
        raise InvalidRequestError(
            f"sealing: {exc} (set {PUBLIC_KEY_ENV} to Colony's public key)"
        ) from exc


def _seal(
    spec: WorkspaceSpec, workspace_class: WorkspaceClassSpec, sealer: SealerSource
) -> WorkspaceSpec:
    from activities.sealing import seal_workspace_secrets

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
    refused naming the first missing prompt (`InvalidRequestError`).

    Args:
        hint: how the caller may answer it, with `{path}` and `{others}` (the other missing
            prompts) to fill in.
    """
    missing = missing_prompts(spec, workspace_class)
    if missing and ask is None:
        first = missing[0]
        others = (
            f" (and {', '.join(p.helm_value_path for p in missing[1:])})" if missing[1:] else ""
        )
        raise InvalidRequestError(
            f"{first.helm_value_path}: required by class '{workspace_class.name}' (prompt "
            f"'{first.display_name}'): " + hint.format(path=first.helm_value_path, others=others)
        )
    if missing and ask is not None:
        answers = dict(spec.answers)
        for prompt in missing:
            answers[prompt.helm_value_path] = ask(prompt)
        spec = spec.model_copy(update={"answers": answers})
    return spec


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


def resources_from_flags(
    gpus: int | None, gpu_model: str | None, replicas: int | None
) -> dict[str, Any] | None:
    """The `resources` of a request from `--gpus`, `--gpu-model` and `--replicas` (the HTTP API's
    `gpus`, `gpuModel`, `replicas`); None when none is given (the class's defaults)."""
    per_replica: dict[str, Any] = {}
    if gpus is not None:
        per_replica["gpuCount"] = gpus
    if gpu_model:
        per_replica["gpuType"] = gpu_model
    if not per_replica and replicas is None:
        return None
    resources: dict[str, Any] = {"perReplica": per_replica}
    if replicas is not None:
        resources["replicas"] = replicas
    return resources


# --- Workspaces ---------------------------------------------------------------------------------


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


async def check_cluster(client: Client, cluster: str, *, organization: str = "") -> ClusterStatus:
    """The cluster a workspace is to run on, when it can take one.

    Args:
        cluster: the cluster as `organization` names it.
        organization: the caller's (empty: the operator's clusters, as `colonyctl` names them).

    Raises:
        NotFoundError: no such cluster in the organization (another organization's is not
            found either), naming `cluster`.
        ConflictError: it failed or is being deleted, naming `cluster` and the phase.
    """
    status = await query_status(client, cluster, organization=organization)
    if status.phase in NO_WORKSPACES_PHASES:
        reason = (
            f" ({status.reason})" if status.phase is ClusterPhase.FAILED and status.reason else ""
        )
        raise ConflictError(
            f"cluster: cluster '{cluster}' is {status.phase.value}{reason}: it takes no workspaces"
        )
    return status


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


async def deploy(
    client: Client,
    settings: ColonySettings,
    spec: WorkspaceSpec,
    *,
    workspace_class: WorkspaceClassSpec | None = None,
    ask: Asker | None = None,
    sealer: SealerSource = public_key_sealer,
    hint: str = CLI_HINT,
    secret_values: dict[str, str] | None = None,
    request_id: str | None = None,
) -> StartedWorkspace:
    """Deploy a workspace: everything checked before anything starts (see the module docstring),
    then its workflow started.

    Args:
        spec: the request as the user gave it, of its organization (`spec.organization`: the
            caller's; empty for the operator in direct mode), on its cluster as that organization
            names it.
        workspace_class: the class, when the caller has it already (`apply -f` of a class and
            its workspace); else read from the catalog.
        ask, sealer, hint: as `prepare_workspace` takes them.
        secret_values: secret answers given apart from the others (`with_secret_values`).
        request_id: as `start_workspace` takes it.
    """
    await check_cluster(client, spec.cluster, organization=spec.organization)
    pinned = workspace_class or await get_class(client, spec.class_name, spec.organization)
    if secret_values:
        spec = with_secret_values(spec, secret_values, pinned)
    prepared = prepare_workspace(spec, pinned, ask=ask, sealer=sealer, hint=hint)
    return await start_workspace(
        client,
        settings,
        prepared,
        workspace_class=pinned,
        request_id=request_id,
    )


@dataclass
class StartedWorkspace:
    """A workspace workflow just started (or found started by the same request id)."""

    workflow_id: str
    repeated: bool = False
    """True when this request id had started it already: nothing new was started."""


async def start_workspace(
    client: Client,
    settings: ColonySettings,
    spec: WorkspaceSpec,
    *,
    workspace_class: WorkspaceClassSpec | None = None,
    request_id: str | None = None,
) -> StartedWorkspace:
    """Start the workspace's workflow (its deploy is its first operation), in the spec's
    organization.

    Args:
        spec: the prepared request (`prepare_workspace`): secrets sealed.
        workspace_class: its class, for the Web UI's details.
        request_id: the same id again finds the first deploy instead of refusing the name.

    Raises:
        ConflictError: a workspace of that name exists in the organization (names are unique
            within one until a deletion completes).
    """
    organization = spec.organization
    memo: dict[str, Any] = {CLASS_MEMO: spec.class_name, CLUSTER_MEMO: spec.cluster}
    if workspace_class is not None:
        memo[GPUS_MEMO] = resolve_resources(workspace_class.default_resources, spec.resources).gpus
    if request_id:
        memo[REQUEST_ID_MEMO] = request_id
    try:
        await client.start_workflow(
            WORKSPACE_WORKFLOW,
            WorkspaceWorkflowInput(spec=spec),
            id=spec.workflow_id,
            task_queue=settings.task_queue,
            # A deleted workspace's workflow has completed: its name may be used again.
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            memo=memo,
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(COLONY_KIND, WORKSPACE_KIND),
                    SearchAttributePair(COLONY_CLUSTER, spec.cluster_deployment),
                    # At start, never from the workflow: it marks whose the workspace is, and
                    # continue-as-new carries it over.
                    SearchAttributePair(COLONY_ORGANIZATION, organization),
                    SearchAttributePair(COLONY_PHASE, WorkspacePhase.PENDING.value),
                ]
            ),
            static_summary=workspace_summary(spec),
            static_details=workspace_details(spec, workspace_class),
        )
    except WorkflowAlreadyStartedError as exc:
        if request_id and await _started_by(client, spec.workflow_id, request_id, organization):
            return StartedWorkspace(spec.workflow_id, repeated=True)
        raise ConflictError(
            f"name: workspace '{spec.name}' already exists (names are unique until a deletion "
            "completes)"
        ) from exc
    except RPCError as exc:
        raise _rpc_error(exc, f"cannot deploy workspace '{spec.name}'", spec.name) from exc
    return StartedWorkspace(spec.workflow_id)


async def _started_by(client: Client, workflow_id: str, request_id: str, organization: str) -> bool:
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


def organization_of(description: WorkflowExecutionDescription) -> str:
    """The organization a workspace belongs to (empty: an operator's)."""
    return description.typed_search_attributes.get(COLONY_ORGANIZATION) or ""


def _belongs(description: WorkflowExecutionDescription, organization: str) -> bool:
    """The workflow id names the organization already; its search attribute must agree."""
    return organization_of(description) == organization


async def _describe_running(
    client: Client, name: str, organization: str
) -> tuple[WorkflowHandle[Any, Any], WorkflowExecutionDescription]:
    """The handle (bound to this workspace's chain of runs, so an update cannot reach a
    workspace created again under the name meanwhile) and description of the running workspace
    `name` of `organization`; `NotFoundError` otherwise."""
    workflow_id = workspace_workflow_id(name, organization)
    handle = client.get_workflow_handle(workflow_id)
    try:
        description = await handle.describe()
    except RPCError as exc:
        raise _rpc_error(exc, f"cannot read workspace '{name}'", name) from exc
    if description.status != ExecutionStatus.RUNNING or not _belongs(description, organization):
        raise workspace_not_found(name)
    first_run = description.raw_description.workflow_execution_info.first_run_id
    bound = client.get_workflow_handle(workflow_id, first_execution_run_id=first_run or None)
    return bound, description


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
            CAPACITY_ANSWERS_QUERY,
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


async def workspace_status(client: Client, name: str, *, organization: str = "") -> WorkspaceStatus:
    """The workspace's status (its workflow's `status` query); `NotFoundError` when the
    organization has no workspace of that name (never deployed, or deleted)."""
    handle, _ = await _describe_running(client, name, organization)
    try:
        status: WorkspaceStatus = await handle.query(STATUS_QUERY, result_type=WorkspaceStatus)
    except WorkflowQueryFailedError as exc:
        raise UnavailableError(f"cannot read workspace '{name}': {exc}") from exc
    except RPCError as exc:
        raise _rpc_error(exc, f"cannot read workspace '{name}'", name) from exc
    if status.phase is WorkspacePhase.DELETED:
        raise workspace_not_found(name)
    return await with_current_position(client, status, organization)


async def read_workspace(
    client: Client, name: str, *, organization: str = ""
) -> WorkspaceStatus | None:
    """The status of a running workspace workflow, or the final one it returned once it ended
    (phase Deleted); None when it ended without one (terminated)."""
    handle = client.get_workflow_handle(
        workspace_workflow_id(name, organization), result_type=WorkspaceStatus
    )
    try:
        description = await handle.describe()
        if not _belongs(description, organization):
            raise workspace_not_found(name)
        if description.status == ExecutionStatus.RUNNING:
            status: WorkspaceStatus = await handle.query(STATUS_QUERY, result_type=WorkspaceStatus)
            return await with_current_position(client, status, organization)
        if description.status != ExecutionStatus.COMPLETED:
            return None
        final = await handle.result()
    except RPCError as exc:
        raise _rpc_error(exc, f"cannot read workspace '{name}'", name) from exc
    except WorkflowQueryFailedError as exc:
        raise UnavailableError(f"cannot read workspace '{name}': {exc}") from exc
    return final if isinstance(final, WorkspaceStatus) else None


def _update_error(update: str, name: str, exc: WorkflowUpdateFailedError) -> ColonyError:
    """The typed error of a refused or failed update; a refusal names the field it is about (the
    workspace itself, unless the workflow named another), as every refusal does."""
    cause = exc.cause
    if not isinstance(cause, ApplicationError):
        return OperationFailedError(f"{update}: {cause or exc}")
    if rejection_is_not_found(cause):
        return workspace_not_found(name)
    field = rejected_field(cause) or "workspace"
    if cause.type == ErrorType.OPERATION_REJECTED:
        # The workspace's state refuses it (already suspended, being deleted).
        return ConflictError(f"{field}: {cause.message}")
    if cause.type == ErrorType.INVALID_SPEC:
        return InvalidRequestError(f"{field}: {cause.message}")
    return OperationFailedError(f"{update}: {cause.message}")


UPDATES = {
    WorkspaceOperationKind.SUSPEND.value,
    WorkspaceOperationKind.RESUME.value,
    WorkspaceOperationKind.DELETE.value,
}
"""The updates a client may send a workspace."""


async def send(
    client: Client,
    name: str,
    update: str,
    request: BaseModel,
    *,
    request_id: str | None = None,
    organization: str = "",
) -> WorkspaceOperationAccepted:
    """Send an operation (`suspend`, `resume`, `delete`) to the organization's workspace `name`;
    the workflow's refusal (already suspended, being deleted) is a `ConflictError`.

    Args:
        request_id: the update id; the same id again returns the first call's operation.
    """
    handle, _ = await _describe_running(client, name, organization)
    try:
        accepted: WorkspaceOperationAccepted = await handle.execute_update(
            update,
            request,
            id=request_id or new_request_id(),
            result_type=WorkspaceOperationAccepted,
        )
    except WorkflowUpdateFailedError as exc:
        raise _update_error(update, name, exc) from exc
    except RPCError as exc:
        raise _rpc_error(exc, update, name) from exc
    return accepted


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
    """The workspace's Web UI page when the backend knows it (the API's answer); else empty."""
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


async def list_workspaces(
    client: Client, *, cluster: str | None = None, organization: str | None = None
) -> list[WorkspaceSummary]:
    """Every workspace whose workflow runs, from Temporal visibility (`ColonyKind = 'workspace'`),
    optionally of one cluster; phases are the ones the workflows last upserted.

    Args:
        cluster: only this cluster's (of `organization`; of the default mode when None).
        organization: only this organization's ("" the default mode's); None: everyone's.
    """
    query = f"{COLONY_KIND.name} = '{WORKSPACE_KIND}' AND ExecutionStatus = 'Running'"
    if organization and name_problem("organization", organization):
        raise InvalidRequestError(f"organization: {name_problem('organization', organization)}")
    if cluster:
        # Cluster and organization names are DNS labels (validated): nothing to escape.
        if name_problem("cluster", cluster):
            raise InvalidRequestError(f"cluster: {name_problem('cluster', cluster)}")
        deployment = cluster_deployment_name(cluster, organization or "")
        query += f" AND {COLONY_CLUSTER.name} = '{deployment}'"
    if organization:
        query += f" AND {COLONY_ORGANIZATION.name} = '{organization}'"
    found: list[WorkspaceSummary] = []
    try:
        async for execution in client.list_workflows(query):
            attributes = execution.typed_search_attributes
            owner = attributes.get(COLONY_ORGANIZATION) or ""
            entity = parse_entity_workflow_id(execution.id)
            if entity is None or entity[1] != owner:
                continue  # not a workspace's id, or marks that contradict it
            if organization is not None and owner != organization:
                continue  # another organization's ("" matches no visibility filter)
            found.append(
                WorkspaceSummary(
                    name=entity[2],
                    cluster=str(await execution.memo_value(CLUSTER_MEMO, "")),
                    class_name=str(await execution.memo_value(CLASS_MEMO, "")),
                    phase=attributes.get(COLONY_PHASE) or "",
                    workflow_id=execution.id,
                    started=execution.start_time.isoformat(timespec="seconds"),
                    organization=owner,
                    deployment=attributes.get(COLONY_CLUSTER) or "",
                    gpus=_whole(await execution.memo_value(GPUS_MEMO, None)),
                )
            )
    except RPCError as exc:
        raise UnavailableError(f"cannot list workspaces: {exc.message}") from exc
    await fill_positions(client, found)
    return sorted(found, key=lambda w: w.order)


def _whole(value: Any) -> int | None:
    """A memo's count (absent in workspaces started before it was written: None)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


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
                CAPACITY_ANSWERS_QUERY,
                CapacityAnswersQuery(workspaces=[s.name for s in summaries]),
                result_type=CapacityAnswers,
            )
        except (RPCError, WorkflowQueryFailedError):
            continue  # the ledger cannot be asked now: the list still shows them Waiting
        by_workspace = {a.workspace: a.position for a in answers.answers}
        for summary in summaries:
            summary.position = by_workspace.get(summary.name, 0)


async def wait_for_workspace(
    client: Client,
    name: str,
    done: Callable[[WorkspaceStatus], bool],
    on_status: Callable[[WorkspaceStatus], None],
    *,
    give_up_after: float | None = None,
    organization: str = "",
) -> WorkspaceStatus | None:
    """Poll the workspace's status until `done` holds or its workflow ends; the last status
    (the final one, phase Deleted, once the workflow returned), or None when it ended without
    one. `on_status` sees every status read, for a live display.

    Raises:
        OperationFailedError: `give_up_after` seconds passed first.
    """
    deadline = None if give_up_after is None else time.monotonic() + give_up_after
    while True:
        status = await read_workspace(client, name, organization=organization)
        if status is None:
            return None
        on_status(status)
        if done(status) or status.phase is WorkspacePhase.DELETED:
            return status
        if deadline is not None and time.monotonic() > deadline:
            raise OperationFailedError(
                f"workspace '{name}' is {status.phase.value} after {give_up_after:.0f}s "
                f"({status.message or 'no message'})"
            )
        await asyncio.sleep(POLL_SECONDS)


def workspace_workflow(
    settings: ColonySettings, client: Client, name: str, organization: str = ""
) -> WorkflowRef:
    """The workspace's workflow (the same function in `starter.remote_workspaces` answers what
    the API said)."""
    workflow_id = workspace_workflow_id(name, organization)
    return WorkflowRef(workflow_id, settings.workflow_link(workflow_id))
