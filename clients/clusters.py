"""Clusters, their node pools, nodes, operations and credentials: one client, two transports.

`Clusters` declares what a caller can do with clusters (create, get, list, send an operation,
cancel or read one, and, once for both transports, follow an operation to its end or watch a
cluster change); `TemporalClusters` does it through `ClusterWorkflow` (`colonyctl` in direct
mode, and the HTTP API with its caller's organization), `HttpClusters` through the API
(`/v1/kubernetes/clusters`, `colonyctl`'s remote mode).

A cluster is `(organization, name)`; its workflow id is
`models.cluster.cluster_workflow_id(name, organization)`. Requests are validated by the models
before a client gets them; before the Temporal transport sends a create or a node pool's add or
scale, it checks them against the host provider's catalog (`clients.checks`: the location, the
SKUs, the stock), as the API does for its callers through this same client; through the API,
the server runs them. A create of an organization's cluster is then admitted by the
organization's quotas (`clients.quotas.admit`) before its workflow starts; a pool's add
or scale-up is admitted by the cluster's workflow before it queues it. Either refusal is a
`QuotaExceededError` naming the quota, its use and its limit.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic.alias_generators import to_camel
from temporalio.client import Client, WorkflowExecutionDescription
from temporalio.common import SearchAttributePair

from clients import checks, quotas
from clients.base import WATCH_SECONDS, Deadline, WorkflowRef, new_request_id, polled
from clients.errors import (
    ColonyError,
    InvalidRequestError,
    NotFoundError,
    OperationFailedError,
    UnavailableError,
)
from clients.http import HttpEntity, RemoteClient, parsed
from clients.temporal import TemporalEntity, organization_clause
from models.activity_api import DrainProgress, parse_drain_activity_id
from models.cluster import (
    DEFAULT_CREDENTIAL,
    DEFAULT_DRAIN_DEADLINE,
    DEFAULT_DRAIN_PARALLELISM,
    DEFAULT_JOIN_DEADLINE,
    DEFAULT_NAMESPACE,
    DEFAULT_READY_DEADLINE,
    DEFAULT_TEMPLATE,
    ClusterPhase,
    ClusterSpec,
    ClusterStatus,
    ClusterWorkflowInput,
    operator_setting_problem,
)
from models.identity import parse_entity_workflow_id
from models.operations import (
    FIRST_OPERATION_ID,
    AddNodePoolRequest,
    CancelOperationRequest,
    DeleteClusterRequest,
    DeleteNodePoolRequest,
    DeleteNodeRequest,
    Operation,
    OperationAccepted,
    ScaleNodePoolRequest,
)
from models.purge import Unresponsive
from workflows.cluster import CLUSTER
from workflows.search_attributes import COLONY_CLUSTER, COLONY_PHASE

WORKFLOW_TYPE = CLUSTER.workflow_type
CANCEL_OPERATION_UPDATE = CLUSTER.cancel_operation.name
CLUSTER_KIND = "cluster"
"""`ColonyKind` of cluster workflows (the workflow upserts the same value)."""

ClusterRequest = (
    AddNodePoolRequest
    | ScaleNodePoolRequest
    | DeleteNodePoolRequest
    | DeleteNodeRequest
    | DeleteClusterRequest
)
"""An operation a caller sends a cluster; its `kind` names the workflow's update."""


@dataclass
class Started:
    """A cluster workflow just started (or found started by the same request id)."""

    workflow_id: str
    operation_id: str
    repeated: bool = False
    """True when this request id had started it already: nothing new was started."""


@dataclass
class ClusterSummary:
    """One line of `colonyctl cluster list`."""

    name: str
    phase: str
    workflow_id: str
    started: str
    organization: str = ""
    web_ui: str = ""
    """The cluster's workflow in the Web UI (from the settings, or the API's answer)."""


def operations(status: ClusterStatus) -> list[Operation]:
    """Every operation the status knows, oldest first: finished, running, then queued."""
    running = [status.current_operation] if status.current_operation else []
    return [*status.completed_operations, *running, *status.queued_operations]


def operation_not_found(cluster: str, operation_id: str) -> NotFoundError:
    return NotFoundError(f"operation: operation '{operation_id}' not found in cluster '{cluster}'")


def started_at(moment: datetime | None) -> str:
    """When a list says an entity started."""
    return moment.isoformat(timespec="seconds") if moment else ""


class Clusters(ABC):
    """What a caller can do with clusters, whichever transport carries it."""

    @abstractmethod
    async def create(self, spec: ClusterSpec, *, request_id: str | None = None) -> Started:
        """Start the cluster's workflow; its creation is its first operation.

        Raises:
            ConflictError: a cluster of that name exists in the organization (and was not
                created by `request_id`).
        """

    @abstractmethod
    async def get(self, name: str) -> ClusterStatus:
        """The cluster's status; `NotFoundError` when it does not exist (or was deleted)."""

    @abstractmethod
    async def list_all(self, *, organization: str | None = None) -> list[ClusterSummary]:
        """Every cluster whose deletion has not completed.

        Args:
            organization: only this organization's ("" the default mode's); None: everyone's
                (the operator's view; through the API, always the key's organization's).
        """

    @abstractmethod
    async def send(
        self, name: str, request: ClusterRequest, *, request_id: str | None = None
    ) -> OperationAccepted:
        """Send an operation; a refusal is a typed error.

        Args:
            request_id: the update id; the same id again returns the first call's operation.
        """

    @abstractmethod
    async def cancel_operation(
        self, name: str, operation_id: str, *, reason: str = "", request_id: str | None = None
    ) -> Operation:
        """Cancel one queued or running operation; the cancelled operation once it has settled
        (its compensation done)."""

    @abstractmethod
    async def get_operation(self, name: str, operation_id: str) -> Operation:
        """One operation of the cluster, wherever it is; `NotFoundError` when the status does not
        hold it (never submitted, or older than the finished operations it keeps)."""

    @abstractmethod
    def workflow(self, name: str) -> WorkflowRef:
        """The cluster's workflow (through the API: as its answers named it)."""

    @abstractmethod
    async def read(self, name: str) -> ClusterStatus | None:
        """The status now, or the final one once the workflow has ended (phase deleted); None
        once it is gone without one."""

    async def delete(self, name: str, *, request_id: str | None = None) -> OperationAccepted:
        """Delete the cluster, its pools and every node: final."""
        return await self.send(name, DeleteClusterRequest(), request_id=request_id)

    async def wait_for_operation(
        self,
        name: str,
        operation_id: str,
        on_status: Callable[[ClusterStatus, Operation | None], None],
        *,
        give_up_after: float | None = None,
    ) -> Operation | None:
        """Poll the status until the operation has finished; None when the cluster is gone
        without reporting it. `on_status` sees every status read, for a live display."""
        deadline = Deadline(give_up_after)
        async for status in polled(lambda: self.read(name)):
            operation = status.operation(operation_id)
            on_status(status, operation)
            finished = operation is not None and operation.state.finished
            if finished or status.phase is ClusterPhase.DELETED:
                return operation
            if deadline.passed():
                raise OperationFailedError(
                    f"{operation_id} did not finish within {give_up_after:.0f}s"
                )
        return None

    async def watch(
        self, name: str, *, interval: float = WATCH_SECONDS
    ) -> AsyncIterator[ClusterStatus]:
        """The cluster's status now, then each time it changes, until it is gone (the last one
        is then its final status, phase deleted, when the transport has one).

        Raises:
            NotFoundError: the cluster does not exist when the watch starts.
        """
        first = await self.get(name)
        last = ""
        async for status in polled(lambda: self.read(name), first=first, interval=interval):
            # updatedAt is the workflow's clock at the query: it changes on every read.
            key = status.model_dump_json(exclude={"updated_at"})
            if key != last:
                last = key
                yield status
            if status.phase is ClusterPhase.DELETED:
                return


# --- through Temporal ------------------------------------------------------------------------


def cluster_details(spec: ClusterSpec) -> str:
    """The Web UI's static details of a cluster's workflow: what was asked for, in markdown (the
    workflow's current details say where it stands)."""
    lines = [
        f"**Cluster** `{spec.name}` in location `{spec.location_id}`"
        + (f", organization `{spec.organization}`" if spec.organization else ""),
        "",
        f"ClusterDeployment `{spec.deployment_name}` (k0rdent); owns hosts claimed from the host "
        "provider.",
    ]
    if spec.tenant_gateway_domain:
        lines += [
            "",
            f"Tenant gateway `{spec.tenant_gateway_domain}`: workspaces get HTTPS hostnames there.",
        ]
    if spec.node_pools:
        lines += ["", "| pool | SKU | count |", "| --- | --- | --- |"]
        lines += [f"| {pool.name} | {pool.sku} | {pool.count} |" for pool in spec.node_pools]
    return "\n".join(lines)


def live_drains(
    client: Client, description: WorkflowExecutionDescription
) -> dict[tuple[str, str], DrainProgress]:
    """The running drains' progress, from their heartbeat details among the pending activities
    (the workflow records a drain's counts when it ends, so an hour-long drain costs its history
    nothing; meanwhile they live here, where the Web UI shows them too)."""
    converter = client.data_converter.payload_converter
    live: dict[tuple[str, str], DrainProgress] = {}
    for pending in description.raw_description.pending_activities:
        key = parse_drain_activity_id(pending.activity_id)
        payloads = pending.heartbeat_details.payloads
        if key is None or not payloads:
            continue
        try:
            details = converter.from_payload(payloads[0], DrainProgress)
        except Exception:  # details of another shape (another release): show what we know
            continue
        if isinstance(details, DrainProgress):
            live[key] = details
    return live


class TemporalClusters(TemporalEntity[ClusterStatus], Clusters):
    """Clusters through `ClusterWorkflow`, for the session's organization."""

    contract = CLUSTER
    noun = kind = CLUSTER_KIND
    first_phase = ClusterPhase.CREATING.value

    async def create(self, spec: ClusterSpec, *, request_id: str | None = None) -> Started:
        await checks.check_cluster(self.session.settings, spec)
        request_id = request_id or new_request_id()
        admitted = await quotas.admit(
            self.session,
            spec.organization,
            holder=spec.workflow_id,
            request_id=request_id,
            need=spec.quota_need(),
            subject=f"cluster '{spec.name}'",
        )
        try:
            repeated = await self._start(
                name=spec.name,
                organization=spec.organization,
                argument=ClusterWorkflowInput(spec=spec),
                marks=[SearchAttributePair(COLONY_CLUSTER, spec.name)],
                request_id=request_id,
                summary=f"cluster {spec.name} in {spec.location_id}",
                details=cluster_details(spec),
            )
        except ColonyError:
            await admitted.release()
            raise
        # The create is the workflow's first operation: its id is known without asking the
        # workflow, so an answer about a started create never depends on reading it back.
        return Started(spec.workflow_id, FIRST_OPERATION_ID, repeated)

    async def _live(
        self, status: ClusterStatus, description: WorkflowExecutionDescription
    ) -> ClusterStatus:
        """The status with the running drains' live progress merged in from their heartbeats."""
        return status.with_live_drains(live_drains(await self.session.client(), description))

    async def get(self, name: str) -> ClusterStatus:
        status, description = await self._status(name)
        if status.phase is ClusterPhase.DELETED:
            raise self.not_found(name)
        return await self._live(status, description)

    async def read(self, name: str) -> ClusterStatus | None:
        status, running = await self._now_or_final(name)
        if status is None or running is None:
            return status
        return await self._live(status, running)

    async def send(
        self, name: str, request: ClusterRequest, *, request_id: str | None = None
    ) -> OperationAccepted:
        """An add or a scale is first checked against the location's stock."""
        settings = self.session.settings
        if isinstance(request, AddNodePoolRequest):
            await checks.check_new_pool(
                settings,
                await self.get(name),
                request.pool,
                wait_for_capacity=request.wait_for_capacity,
            )
        elif isinstance(request, ScaleNodePoolRequest):
            await checks.check_scale(settings, await self.get(name), request)
        elif isinstance(request, DeleteClusterRequest):
            # One whose workflow cannot make progress is purged (`TemporalEntity._delete`).
            return await self._delete(
                name,
                request.kind.value,
                request,
                OperationAccepted,
                request_id,
                requested_by=self.requested_by,
            )
        accepted: OperationAccepted = await self._update(
            name, request.kind.value, request, OperationAccepted, request_id
        )
        return accepted

    async def stand_in(
        self, name: str, description: WorkflowExecutionDescription, unresponsive: Unresponsive
    ) -> ClusterStatus:
        """Its last phase from its marks (its location and pools are in the state it cannot
        give)."""
        phase = description.typed_search_attributes.get(COLONY_PHASE) or ""
        known = {p.value for p in ClusterPhase}
        return ClusterStatus(
            name=name,
            location_id="",
            phase=ClusterPhase(phase) if phase in known else ClusterPhase.CREATING,
            organization=self.session.organization,
            reason=unresponsive.reason,
            created_at=description.start_time,
            unresponsive=unresponsive,
        )

    async def cancel_operation(
        self, name: str, operation_id: str, *, reason: str = "", request_id: str | None = None
    ) -> Operation:
        request = CancelOperationRequest(operation_id=operation_id, reason=reason)
        operation: Operation = await self._update(
            name, CANCEL_OPERATION_UPDATE, request, Operation, request_id
        )
        return operation

    async def get_operation(self, name: str, operation_id: str) -> Operation:
        operation = (await self.get(name)).operation(operation_id)
        if operation is None:
            raise operation_not_found(name, operation_id)
        return operation

    async def list_all(self, *, organization: str | None = None) -> list[ClusterSummary]:
        """From Temporal visibility (the ColonyOrganization and ColonyPhase marks; the dev server
        has visibility, the time-skipping server does not)."""
        query = (
            f"WorkflowType = '{WORKFLOW_TYPE}' AND ExecutionStatus = 'Running' "
            f"AND WorkflowId STARTS_WITH 'cluster/'"
        )
        found: list[ClusterSummary] = []
        async for execution, owner in self._listed(
            query + organization_clause(organization), organization
        ):
            entity = parse_entity_workflow_id(execution.id)
            if entity is None or entity[1] != owner:
                continue  # not a cluster's id, or marks that contradict it
            found.append(
                ClusterSummary(
                    name=entity[2],
                    phase=execution.typed_search_attributes.get(COLONY_PHASE) or "",
                    workflow_id=execution.id,
                    started=started_at(execution.start_time),
                    organization=owner,
                    web_ui=self.session.workflow(execution.id).link,
                )
            )
        return sorted(found, key=lambda c: (c.organization, c.name))


# --- through the HTTP API --------------------------------------------------------------------

CLUSTERS = "/v1/kubernetes/clusters"
OPERATOR_FIELDS = {
    "template": DEFAULT_TEMPLATE,
    "credential": DEFAULT_CREDENTIAL,
    "namespace": DEFAULT_NAMESPACE,
    "ready_deadline": DEFAULT_READY_DEADLINE,
    "join_deadline": DEFAULT_JOIN_DEADLINE,
    "drain_deadline": DEFAULT_DRAIN_DEADLINE,
    "drain_parallelism": DEFAULT_DRAIN_PARALLELISM,
    "tenant_gateway_domain": "",
}
"""What an API user cannot choose, with its default: the operator's settings stay the operator's
(`models.cluster.OPERATOR_SETTINGS` says why, as the API does)."""


class HttpClusters(HttpEntity[ClusterStatus], Clusters):
    """Clusters through the HTTP API, as the key's organization's."""

    collection = CLUSTERS
    noun = "cluster"
    status_type = ClusterStatus

    async def create(self, spec: ClusterSpec, *, request_id: str | None = None) -> Started:
        for name, default in OPERATOR_FIELDS.items():
            if getattr(spec, name) != default:
                field_name = type(spec).model_fields[name].alias or to_camel(name)
                raise InvalidRequestError(operator_setting_problem(field_name))
        body = {
            "name": spec.name,
            "locationId": spec.location_id,
            "nodePools": [p.model_dump(mode="json", exclude_none=True) for p in spec.node_pools],
            "waitForCapacity": spec.wait_for_capacity,
        }
        accepted = await self.remote.call(
            "POST", CLUSTERS, json=body, request_id=request_id, about=self.about(spec.name)
        )
        return Started(
            workflow_id=str(accepted.get("workflowId", "")),
            operation_id=str(accepted.get("operationId", "")),
            repeated=bool(accepted.get("repeated", False)),
        )

    async def get(self, name: str) -> ClusterStatus:
        return await self._get(name)

    async def read(self, name: str) -> ClusterStatus | None:
        """The status; None once the API no longer has it (a delete that completed)."""
        try:
            return await self._get(name)
        except NotFoundError:
            return None

    def _route(self, name: str, request: ClusterRequest) -> tuple[str, str, Any, dict[str, str]]:
        """(method, path, body, query) of an operation as the API takes it."""
        match request:
            case AddNodePoolRequest():
                body = {
                    **request.pool.model_dump(mode="json", exclude_none=True),
                    "waitForCapacity": request.wait_for_capacity,
                }
                return "POST", self.path(name, "node-pools"), body, {}
            case ScaleNodePoolRequest():
                body = {
                    "count": request.count,
                    "force": request.force,
                    "waitForCapacity": request.wait_for_capacity,
                }
                return "PATCH", self.path(name, "node-pools", request.pool), body, {}
            case DeleteNodePoolRequest():
                query = {"force": str(request.force).lower()}
                return "DELETE", self.path(name, "node-pools", request.pool), None, query
            case DeleteNodeRequest():
                query = {"drain": str(request.drain).lower(), "force": str(request.force).lower()}
                return "DELETE", self.path(name, "nodes", request.node), None, query
        return "DELETE", self.path(name), None, {}

    async def send(
        self, name: str, request: ClusterRequest, *, request_id: str | None = None
    ) -> OperationAccepted:
        method, path, body, query = self._route(name, request)
        accepted = await self.remote.call(
            method, path, json=body, params=query, request_id=request_id, about=self.about(name)
        )
        return parsed(OperationAccepted, accepted)

    async def cancel_operation(
        self, name: str, operation_id: str, *, reason: str = "", request_id: str | None = None
    ) -> Operation:
        path = self.path(name, "operations", operation_id, "cancel")
        body = await self.remote.call(
            "POST", path, json={"reason": reason}, request_id=request_id, about=self.about(name)
        )
        return parsed(Operation, body)

    async def get_operation(self, name: str, operation_id: str) -> Operation:
        body = await self.remote.call(
            "GET", self.path(name, "operations", operation_id), about=self.about(name)
        )
        return parsed(Operation, body)

    async def list_all(self, *, organization: str | None = None) -> list[ClusterSummary]:
        summaries = [
            ClusterSummary(
                name=status.name,
                phase=status.phase.value,
                started=started_at(status.created_at),
                organization=status.organization,
                **listed,
            )
            for status, listed in await self._listed()
        ]
        return sorted(summaries, key=lambda c: c.name)

    async def kubeconfig(self, name: str) -> dict[str, Any]:
        """The API's kubeconfig of the cluster (a token embedded)."""
        body = await self.remote.call("GET", self.path(name, "kubeconfig"))
        if not isinstance(body, dict):
            raise UnavailableError("Colony API: the kubeconfig is not an object")
        return body

    async def token(self, name: str) -> tuple[str, datetime]:
        """A new cluster token from the API (`POST .../token`), and when it expires."""
        body = await self.remote.call("POST", self.path(name, "token"))
        try:
            status = body["status"]
            expiry = datetime.fromisoformat(
                str(status["expirationTimestamp"]).replace("Z", "+00:00")
            )
            return str(status["token"]), expiry
        except (KeyError, TypeError, ValueError) as exc:
            raise UnavailableError("Colony API: the token answer is not an ExecCredential") from exc


def issue_token(url: str, key: str, cluster: str) -> tuple[str, datetime]:
    """A new cluster token from the API, and when it expires (blocking: the exec plugin has no
    event loop)."""
    return asyncio.run(HttpClusters(RemoteClient(url, key)).token(cluster))
