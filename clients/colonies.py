"""Colonies (groups of clusters, the exalsius Colony): one client, two transports. `Colonies`
declares what a caller can do (apply, get, list, delete); `TemporalColonies` does it through
`ColonyWorkflow` (`colonyctl colony` and `apply -f` in direct mode, and the HTTP API with its
caller's organization), `HttpColonies` through the API (`/v1/colonies`, remote mode).

A colony is `(organization, name)`, as a cluster is: its workflow id is
`models.colony.colony_workflow_id(name, organization)`, and the organization is recorded in the
workflow's `ColonyOrganization` search attribute at start for the lists. Another organization's
colony is simply not found. A manifest is read and validated by the models as in direct mode,
then sent in Colony's form through the API; the catalog checks of a colony's new clusters run
where the Temporal transport runs (`clients.checks.check_colony`), and so does their admission by
the organization's quotas (`clients.quotas.admit`, each new cluster as its own holder, as a
cluster's create is), before the colony starts or hears of them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from temporalio.client import WorkflowExecutionDescription
from temporalio.common import SearchAttributePair, WorkflowIDConflictPolicy

from clients import checks, quotas
from clients.base import WorkflowRef
from clients.errors import ColonyError, InvalidRequestError, NotFoundError
from clients.http import HttpEntity, parsed
from clients.temporal import Refusals, TemporalEntity, organization_clause
from models.colony import (
    ApplyColonyRequest,
    ColonyOperationAccepted,
    ColonyPhase,
    ColonyStatus,
    ColonyWorkflowInput,
    DeleteColonyRequest,
)
from models.manifests import ColonySpec
from models.purge import Unresponsive
from workflows.colony import COLONY
from workflows.search_attributes import COLONY_KIND, COLONY_NAME, COLONY_PHASE

WORKFLOW = COLONY.workflow_type
COLONY_KIND_VALUE = "colony"
"""`ColonyKind` of colony workflows (the workflow upserts the same value)."""


@dataclass
class AppliedColony:
    """A colony applied: its workflow, and whether it was started now or given the manifest."""

    workflow_id: str
    created: bool
    operation_id: str = ""
    """The apply operation queued on a running colony (empty for a colony started now: its
    first apply is queued by the workflow itself)."""


@dataclass
class ColonySummary:
    """One line of `colonyctl colony list`."""

    name: str
    phase: str
    workflow_id: str
    organization: str = ""
    web_ui: str = ""
    """The colony's Web UI page when the transport knows it (the API's answer); else empty."""


class Colonies(ABC):
    """What a caller can do with colonies, whichever transport carries it."""

    @abstractmethod
    async def apply(self, spec: ColonySpec, *, request_id: str | None = None) -> AppliedColony:
        """Start the colony's workflow, or send the changed manifest to the one that runs, once
        the catalog was found to serve its new clusters (`InvalidRequestError` naming the entry
        otherwise)."""

    @abstractmethod
    async def get(self, name: str) -> ColonyStatus:
        """The colony's status (not found once it was deleted)."""

    @abstractmethod
    async def list_all(self, *, organization: str | None = None) -> list[ColonySummary]:
        """Every running colony.

        Args:
            organization: only this organization's (None: everyone's, the operator's view;
                through the API, always the key's organization's).
        """

    @abstractmethod
    async def delete(self, name: str, *, request_id: str | None = None) -> ColonyOperationAccepted:
        """Ask the colony to delete its clusters (and their workspaces), then itself."""

    @abstractmethod
    def workflow(self, name: str) -> WorkflowRef:
        """The colony's workflow (through the API: as its answers named it)."""


class TemporalColonies(TemporalEntity[ColonyStatus], Colonies):
    """Colonies through `ColonyWorkflow`, for the session's organization."""

    contract = COLONY
    noun = kind = COLONY_KIND_VALUE
    first_phase = ColonyPhase.PROVISIONING.value

    async def apply(self, spec: ColonySpec, *, request_id: str | None = None) -> AppliedColony:
        """Of `spec.organization`."""
        owner = self.acting_for(spec.organization)
        workflow_id = owner.workflow_id(spec.name, spec.organization)
        try:
            await owner._running(spec.name)
        except NotFoundError:
            running = None
        else:
            running = await owner.get(spec.name)  # not found once it was deleted
        existing = frozenset(c.entry for c in running.clusters) if running else frozenset()
        # Before anything starts, as for a cluster: the catalog serves every new cluster, and the
        # organization's quotas admit them.
        await checks.check_colony(self.session.settings, spec, existing=existing)
        admitted = await self._admit(spec, existing)
        try:
            if running is not None:
                apply = ApplyColonyRequest(spec=spec)
                accepted: ColonyOperationAccepted = await owner._update(
                    spec.name, apply.kind, apply, ColonyOperationAccepted, request_id
                )
                return AppliedColony(workflow_id, created=False, operation_id=accepted.operation_id)
            await owner._start(
                name=spec.name,
                organization=spec.organization,
                argument=ColonyWorkflowInput(spec=spec),
                marks=[SearchAttributePair(COLONY_NAME, spec.name)],
                summary=f"colony {spec.name}: {len(spec.colony_clusters)} cluster(s)",
                if_running=WorkflowIDConflictPolicy.USE_EXISTING,
            )
        except ColonyError:
            for one in admitted:
                await one.release()
            raise
        return AppliedColony(workflow_id, created=True)

    async def _admit(self, spec: ColonySpec, existing: frozenset[str]) -> list[quotas.Admitted]:
        """Admit each new cluster of the colony by its organization's quotas (none admitted when
        one is refused). A member's admission is named after its colony and entry, so applying
        the manifest again while the member is still to start is the same admission."""
        admitted: list[quotas.Admitted] = []
        try:
            for index, entry in enumerate(spec.colony_clusters):
                if entry.cluster_name in existing:
                    continue
                member = entry.to_cluster_spec(spec.name, spec.organization)
                try:
                    admitted.append(
                        await quotas.admit(
                            self.session,
                            spec.organization,
                            holder=member.workflow_id,
                            request_id=f"colony/{spec.name}/{entry.cluster_name}",
                            need=member.quota_need(),
                            subject=f"cluster '{member.name}'",
                        )
                    )
                except ColonyError as exc:
                    raise type(exc)(f"colonyClusters[{index}].{exc.message}") from exc
        except ColonyError:
            for one in admitted:
                await one.release()
            raise
        return admitted

    def refusals(self, name: str) -> Refusals:
        # Refusals the workflow gives no field are about the colony itself (being deleted), as a
        # workspace's: never named after the update (`apply`, `delete`), which is no field.
        return Refusals(subject="colony", not_found=self.not_found(name))

    async def get(self, name: str) -> ColonyStatus:
        status, _ = await self._status(name)
        if status.phase is ColonyPhase.DELETED:
            raise self.not_found(name)
        return status

    async def stand_in(
        self, name: str, description: WorkflowExecutionDescription, unresponsive: Unresponsive
    ) -> ColonyStatus:
        """Its last phase from its marks (its clusters are in the state it cannot give; each is
        listed and purged on its own)."""
        phase = description.typed_search_attributes.get(COLONY_PHASE) or ""
        known = {p.value for p in ColonyPhase}
        return ColonyStatus(
            name=name,
            organization=self.session.organization,
            phase=ColonyPhase(phase) if phase in known else ColonyPhase.PROVISIONING,
            ready_clusters=0,
            total_clusters=0,
            unresponsive=unresponsive,
        )

    async def list_all(self, *, organization: str | None = None) -> list[ColonySummary]:
        """From visibility (`ColonyKind = 'colony'`, the ColonyName and ColonyPhase marks)."""
        query = f"{COLONY_KIND.name} = '{COLONY_KIND_VALUE}' AND ExecutionStatus = 'Running'"
        found: list[ColonySummary] = []
        async for execution, owner in self._listed(
            query + organization_clause(organization), organization
        ):
            attributes = execution.typed_search_attributes
            found.append(
                ColonySummary(
                    name=attributes.get(COLONY_NAME) or execution.id.rpartition("/")[2],
                    phase=attributes.get(COLONY_PHASE) or "",
                    workflow_id=execution.id,
                    organization=owner,
                )
            )
        return sorted(found, key=lambda colony: (colony.organization, colony.name))

    async def delete(self, name: str, *, request_id: str | None = None) -> ColonyOperationAccepted:
        await self.get(name)  # a deleted colony's workflow may still run: not found
        delete = DeleteColonyRequest()
        accepted: ColonyOperationAccepted = await self._update(
            name, delete.kind, delete, ColonyOperationAccepted, request_id
        )
        return accepted


COLONIES = "/v1/colonies"


class HttpColonies(HttpEntity[ColonyStatus], Colonies):
    """Colonies through the HTTP API, as the key's organization's."""

    collection = COLONIES
    noun = "colony"
    status_type = ColonyStatus

    async def apply(self, spec: ColonySpec, *, request_id: str | None = None) -> AppliedColony:
        if spec.organization:
            raise InvalidRequestError(
                "organization: a colony applied through the API is the key's organization's; "
                "leave it out of the manifest"
            )
        body = {
            "name": spec.name,
            "colonyClusters": [
                entry.model_dump(mode="json", exclude_defaults=True)
                for entry in spec.colony_clusters
            ],
        }
        applied = await self.remote.call(
            "POST", COLONIES, json=body, request_id=request_id, about=self.about(spec.name)
        )
        return AppliedColony(
            workflow_id=str(applied.get("workflowId", "")),
            created=bool(applied.get("created", False)),
            operation_id=str(applied.get("operationId", "")),
        )

    async def get(self, name: str) -> ColonyStatus:
        return await self._get(name)

    async def list_all(self, *, organization: str | None = None) -> list[ColonySummary]:
        summaries = [
            ColonySummary(
                name=status.name,
                phase=status.phase.value,
                organization=status.organization,
                **listed,
            )
            for status, listed in await self._listed()
        ]
        return sorted(summaries, key=lambda colony: colony.name)

    async def delete(self, name: str, *, request_id: str | None = None) -> ColonyOperationAccepted:
        body = await self.remote.call(
            "DELETE", self.path(name), request_id=request_id, about=self.about(name)
        )
        return parsed(ColonyOperationAccepted, body)
