"""Workflows that cannot make progress, and the purge that ends one and removes what it made.

An entity's workflow **cannot make progress** when its workflow task fails on every attempt: an
input its worker cannot decode, a worker bug that raises in workflow code, a nondeterminism
error. Temporal retries such a task forever (the first failure at once, then one attempt per
10-second workflow task timeout), and meanwhile the workflow answers no query and accepts no
update: nothing it was asked to do, not even its delete, can happen. `stuck` tells such a
workflow from one that only hiccuped (a worker killed mid-task): two failures in a row.

Such a workflow is shown, not hidden: a list or a read of its entity answers its last known
phase with `Unresponsive` beside it (why, since when, and the command that clears it), never a
503 for the whole list.

A **purge** (`PurgeRequest`, run by `PurgeWorkflow`, `purge/<entity workflow id>`) ends such a
workflow (terminate) and then removes what it made, found by the ownership marks
(`models.ownership`), never by a name alone: objects on the management cluster and on the
workspace's cluster marked with the workflow's id and organization, a cluster's claimed hosts by
its owner key, a workspace's GPU requests and gateway ports in its cluster's ledger by the
workflow the ledger answers. Its `PurgeReport` says what it removed. A purge of a workflow that
answers deletes the entity the normal way instead (`PurgeOutcome.DELETED`): the entity's own
delete knows best what it made.

Pure: no IO.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import Field

from models.activity_api import KubeconfigRef
from models.base import ColonyModel
from models.identity import SEPARATOR, Entity, entity_workflow_id, parse_entity_workflow_id
from models.ownership import Owner

STUCK_AFTER_FAILURES = 2
"""Workflow task failures in a row after which a workflow cannot make progress: one failure may be
a killed worker (its retry succeeds elsewhere); a second, ten seconds later (Temporal's workflow
task timeout paces the retries), is the same code failing on the same history."""
NOT_TAKEN_AFTER = timedelta(minutes=1)
"""A workflow task no worker has started for this long: the workflow cannot answer (no worker
runs its type on its task queue, or every worker is saturated)."""
PURGEABLE = (Entity.CLUSTER, Entity.WORKSPACE)
"""What a purge ends: a workspace (its release, values, namespace, GPUs, ports) and a cluster (its
ClusterDeployment, hosts and ledger, once it has no workspaces left). A colony's clusters are
purged one by one."""


def purge_workflow_id(workflow_id: str) -> str:
    """The purge of an entity's workflow: `purge/<its workflow id>` (one at a time per entity)."""
    return SEPARATOR.join(("purge", workflow_id))


def owner_command(entity: Entity, name: str) -> str:
    """What the entity's organization runs to clear it (its delete purges one that is stuck)."""
    return f"colonyctl {entity.value} delete {name}"


def operator_command(entity: Entity, organization: str, name: str) -> str:
    """What an operator runs to clear it, for any organization."""
    where = f" --organization {organization}" if organization else ""
    return f"colonyctl {entity.value} purge {name}{where}"


class Unresponsive(ColonyModel):
    """Why an entity's workflow does not answer, shown in place of the status it cannot give."""

    workflow_id: str
    reason: str
    """What is wrong, for a person: the failing task and its last failure, or the query's error."""
    stuck: bool = False
    """It cannot make progress (its workflow task keeps failing): only a purge ends it."""
    failed_tasks: int = 0
    """Its workflow task failed this many times in a row."""
    since: datetime | None = None
    """When the failing (or untaken) workflow task was first scheduled."""
    clear_with: list[str] = Field(default_factory=list)
    """The commands that clear it: its organization's delete, an operator's purge."""

    @property
    def silent(self) -> bool:
        """Nothing it is asked now can be answered: it is stuck, or no worker takes its task (a
        workflow whose task failed once may answer as soon as its retry succeeds)."""
        return self.stuck or not self.failed_tasks


def task_trouble(
    workflow_id: str,
    *,
    attempt: int,
    started: bool,
    scheduled: datetime | None,
    now: datetime,
    failure: str = "",
) -> Unresponsive | None:
    """What a workflow's pending workflow task says about it, or None when it says nothing wrong.

    Args:
        attempt: the pending task's attempt (1: no failure since the last completed task).
        started: a worker has it now.
        scheduled: when the pending task was first scheduled (its original scheduled time).
        now: the time of the look.
        failure: the last failure its history records ("" when unknown).
    """
    failed = max(0, attempt - 1)
    since = f" since {scheduled:%Y-%m-%d %H:%M:%S}Z" if scheduled is not None else ""
    if failed:
        times = "once" if failed == 1 else f"{failed} times in a row"
        reason = f"its workflow task failed {times}{since}" + (f": {failure}" if failure else "")
        return Unresponsive(
            workflow_id=workflow_id,
            reason=reason,
            stuck=failed >= STUCK_AFTER_FAILURES,
            failed_tasks=failed,
            since=scheduled,
        )
    if not started and scheduled is not None and now - scheduled >= NOT_TAKEN_AFTER:
        waited = int((now - scheduled).total_seconds())
        return Unresponsive(
            workflow_id=workflow_id,
            reason=f"no worker has taken its workflow task for {waited}s{since}",
            since=scheduled,
        )
    return None


def with_commands(
    found: Unresponsive, entity: Entity, organization: str, name: str
) -> Unresponsive:
    """`found` with the commands that clear the entity, and its reason saying them when it is
    stuck."""
    commands = [owner_command(entity, name), operator_command(entity, organization, name)]
    reason = found.reason
    if found.stuck:
        reason += (
            f"; it cannot make progress: `{commands[0]}` ends it and removes what it made "
            f"(an operator: `{commands[1]}`)"
        )
    return found.model_copy(update={"clear_with": commands, "reason": reason})


def unanswered_workspaces(cluster: str, found: list[Unresponsive]) -> str:
    """Why a cluster's delete stopped: the workspaces that cannot answer it, each with why and the
    commands that clear it, and what to do then."""
    described = []
    for trouble in found:
        parsed = parse_entity_workflow_id(trouble.workflow_id)
        if parsed is None:
            described.append(f"{trouble.workflow_id} ({trouble.reason})")
            continue
        _, organization, name = parsed
        owner, operator = (
            owner_command(Entity.WORKSPACE, name),
            operator_command(Entity.WORKSPACE, organization, name),
        )
        described.append(
            f"'{name}' (workflow {trouble.workflow_id}: {trouble.reason}; clear it with "
            f"`{owner}`, or an operator with `{operator}`)"
        )
    return (
        f"workspaces of cluster '{cluster}' cannot answer its delete: {'; '.join(described)}; "
        "then repeat the cluster's delete"
    )


# --- the purge -------------------------------------------------------------------------------


class PurgeTarget(ColonyModel):
    """The entity a purge ends: its kind, organization ("" for the default mode's) and name."""

    entity: Entity
    organization: str = ""
    name: str

    @property
    def workflow_id(self) -> str:
        return entity_workflow_id(self.entity, self.organization, self.name)

    def describe(self) -> str:
        """`workspace 'nb' of organization 'acme'`."""
        whose = f" of organization '{self.organization}'" if self.organization else ""
        return f"{self.entity.value} '{self.name}'{whose}"


class PurgeRequest(ColonyModel):
    """`PurgeWorkflow`'s input: what to end, and who asked (for the termination's reason)."""

    target: PurgeTarget
    requested_by: str = ""
    """Who asked (`operator`, or `organization 'acme'` for its own delete), recorded as the
    reason of the termination."""


class PurgeOutcome(StrEnum):
    PURGED = "purged"
    """Its workflow could not make progress: it was terminated, and what it made removed."""
    SWEPT = "swept"
    """Its workflow had ended already (a purge repeated, or terminated by hand): what it left was
    removed."""
    DELETED = "deleted"
    """Its workflow answers: its own delete was sent instead (`operation_id`)."""
    RUNNING = "running"
    """The purge has not finished yet (its workflow `purge_workflow_id` goes on)."""


class RemovedObject(ColonyModel):
    """An object a purge removed, where it was."""

    kind: str
    name: str
    namespace: str = ""
    cluster: str = ""
    """The workspace's cluster (its ClusterDeployment) for an object on it; "" for the
    management cluster."""

    def describe(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        on = f" on {self.cluster}" if self.cluster else ""
        return f"{self.kind} {where}{self.name}{on}"


class PurgeReport(ColonyModel):
    """What a purge did: the entity, how it ended, and everything it removed."""

    target: PurgeTarget
    workflow_id: str
    """The entity's workflow."""
    purge_workflow_id: str = ""
    outcome: PurgeOutcome
    reason: str = ""
    """Why its workflow was ended (its trouble), or why it was deleted normally."""
    terminated: bool = False
    """This purge terminated the workflow (False when it had ended already)."""
    operation_id: str = ""
    """`deleted`: the delete operation its workflow queued."""
    removed: list[RemovedObject] = Field(default_factory=list)
    hosts_released: list[str] = Field(default_factory=list)
    gpu_requests_released: list[str] = Field(default_factory=list)
    ports_released: list[int] = Field(default_factory=list)
    ledger_closed: str = ""
    """A cluster's GPU ledger the purge ended (its workflow id)."""
    left: list[str] = Field(default_factory=list)
    """What was found and not removed, and why (another owner's object of that name, a deletion
    past its deadline)."""

    def describe(self) -> str:
        """One paragraph for a person: what happened and what was removed."""
        what = self.target.describe()
        if self.outcome is PurgeOutcome.DELETED:
            return f"{what} answers: deleted normally (operation {self.operation_id})"
        if self.outcome is PurgeOutcome.RUNNING:
            return f"{what}: purge {self.purge_workflow_id} is still running"
        head = (
            f"{what} purged: its workflow {self.workflow_id} was terminated"
            if self.terminated
            else f"{what}: its workflow {self.workflow_id} had ended; what it left was removed"
        )
        if self.reason:
            head += f" ({self.reason})"
        parts = [head]
        removed = [o.describe() for o in self.removed]
        parts.append("removed: " + (", ".join(removed) if removed else "nothing"))
        if self.gpu_requests_released or self.ports_released:
            released = [f"GPU request {r}" for r in self.gpu_requests_released]
            released += [f"gateway port {p}" for p in self.ports_released]
            parts.append("released in the ledger: " + ", ".join(released))
        if self.hosts_released:
            parts.append("hosts released: " + ", ".join(self.hosts_released))
        if self.ledger_closed:
            parts.append(f"GPU ledger {self.ledger_closed} closed")
        if self.left:
            parts.append("left: " + "; ".join(self.left))
        return "; ".join(parts)


# --- the purge's activities --------------------------------------------------------------------


class PurgeActivity(StrEnum):
    """The registered names of the activities only a purge calls (it calls the deletes of the
    entities' own too)."""

    INSPECT_WORKFLOW = "inspect_workflow"
    TERMINATE_WORKFLOW = "terminate_workflow"
    READ_LEDGER_HOLDINGS = "read_ledger_holdings"
    FIND_MARKED_OBJECTS = "find_marked_objects"
    FIND_MARKED_CHILD_OBJECTS = "find_marked_child_objects"


class InspectWorkflowRequest(ColonyModel):
    workflow_id: str


class InspectWorkflowResult(ColonyModel):
    """An entity's workflow as a purge finds it."""

    found: bool
    """Temporal knows the workflow (running, or ended within its retention)."""
    running: bool = False
    status: str = ""
    """How its latest run stands (`running`, `terminated`, `completed`, ...)."""
    run_id: str = ""
    first_run_id: str = ""
    """Its first run: with the workflow id, a cluster's owner key (`models.identity.owner_key`)."""
    organization: str = ""
    """Its `ColonyOrganization` mark."""
    cluster_mark: str = ""
    """Its `ColonyCluster` mark: a workspace's cluster's ClusterDeployment."""
    trouble: Unresponsive | None = None
    """What is wrong with its workflow task (`task_trouble`), when something is."""
    activities_running: int = 0
    """Activities a worker had started for it: they stop at their next heartbeat once it ends."""


class TerminateWorkflowRequest(ColonyModel):
    workflow_id: str
    run_id: str
    """Only this run: a run started since (the name used again) is never ended by this purge."""
    reason: str


class TerminateWorkflowResult(ColonyModel):
    terminated: bool
    """False: that run had ended already."""


class MarkedObject(ColonyModel):
    """An object found by its ownership marks (never by its name)."""

    kind: str
    name: str
    namespace: str = ""
    owner_key: str = ""
    """A cluster's objects' `colony.dev/owner` (its workflow id and first run)."""
    cluster_deployment: str = ""
    """A ServiceSet's cluster (its `spec.cluster`)."""


class FindMarkedObjectsRequest(ColonyModel):
    """Every object Colony makes on the management cluster (ServiceSets, Secrets,
    ClusterDeployments) in `namespace` that carries `owner`'s marks."""

    namespace: str
    owner: Owner


class FindMarkedObjectsResult(ColonyModel):
    objects: list[MarkedObject] = Field(default_factory=list)


class FindMarkedChildObjectsRequest(ColonyModel):
    """The namespaces (and the routes in them) of a workspace's cluster that carry `owner`'s marks,
    once the ClusterDeployment is found marked as the owner's organization's cluster."""

    kubeconfig: KubeconfigRef
    cluster_deployment: str
    namespace: str
    """Where the ClusterDeployment is (`kcm-system`)."""
    owner: Owner


class FindMarkedChildObjectsResult(ColonyModel):
    reachable: bool = True
    """False: the cluster is gone, or is not the owner's organization's (`problem` says which):
    nothing of it was looked at."""
    problem: str = ""
    namespaces: list[str] = Field(default_factory=list)
    routes: list[MarkedObject] = Field(default_factory=list)
