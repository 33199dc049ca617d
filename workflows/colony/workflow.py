"""`ColonyWorkflow`: a group of clusters, id `colony/[<organization>/]<name>` (the exalsius Colony,
as a workflow). A colony and every cluster it runs belong to one organization.

Built on the entity kit (`workflows/kit/`; its contract: `workflows/colony/__init__.py`): `apply`
(queued at start with the manifest, and again whenever a changed manifest is applied) and `delete`
run one at a time; delete jumps the queue.

- Apply runs one cluster entity per entry: a `ClusterWorkflow` for `<colony>--<clusterName>`
  (`models.identity.colony_member_name`: two colonies' entries never share a cluster),
  started as a child whose parent-close policy is ABANDON (a cluster outlives a colony's run and
  continue-as-new, and a re-applied colony adopts the clusters that run already). An entry no
  longer in the manifest is deleted (signal `delete_requested`: its workspaces first). One
  cluster's failure does not hold back the others.
- Each cluster reports where it stands after every operation (signal `cluster_report`); between
  operations the colony then reads that cluster's GPU inventory (an activity), so the inventory
  follows node pool changes, not a timer; a deleted cluster leaves the list. Phase: Provisioning until every cluster is ready, Ready, Degraded when one
  failed; condition ClustersReady.
- The Secret `<colony>-kubeconfigs` (derived, for an organization's colony: `models.identity`) on
  the management cluster lists, per ready cluster, its kubeconfig Secret in the exalsius operator's
  shape (keyed by ClusterDeployment, each value a JSON ObjectReference); it carries the colony's
  ownership marks, and only such a one is replaced or deleted.
- Delete asks every cluster to delete itself, waits until their workflows have ended, removes the
  kubeconfigs Secret, and ends.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

from workflows.cluster_calls import WRITE_COLONY_KUBECONFIGS
from workflows.kit.engine import Chore, is_failure, reason_of
from workflows.kit.entity import EntityWorkflow, delete_update, queued_update
from workflows.kit.service import tell
from workflows.search_attributes import (
    COLONY_KIND,
    COLONY_NAME,
    COLONY_ORGANIZATION,
    COLONY_PHASE,
)
from workflows.workspace_calls import AWAIT_WORKFLOWS_CLOSED, READ_GPU_INVENTORY

with workflow.unsafe.imports_passed_through():
    from models.activity_api import KubeconfigRef
    from models.capacity import GpuNode
    from models.cluster import (
        DEFAULT_NAMESPACE,
        ClusterWorkflowInput,
        cluster_deployment_name,
        kubeconfig_secret_name,
    )
    from models.colony import (
        ApplyColonyRequest,
        ClusterReport,
        ColonyClusterStatus,
        ColonyCondition,
        ColonyOperation,
        ColonyOperationAccepted,
        ColonyOperationRequest,
        ColonyPhase,
        ColonyState,
        ColonyStatus,
        ColonyWorkflowInput,
        DeleteColonyRequest,
        GpuOffering,
        WriteColonyKubeconfigsRequest,
        colony_kubeconfigs_secret,
    )
    from models.errors import rejected
    from models.manifests import ColonyClusterSpec
    from models.ownership import Owner
    from models.signals import ScaleRequested
    from models.templates import MACHINE_DEPLOYMENT_POOL, WORKERS_FIELD
    from models.workspace_api import (
        AwaitWorkflowsClosedRequest,
        DeleteRequested,
        ReadGpuInventoryRequest,
    )
    from workflows.cluster import CLUSTER
    from workflows.colony import COLONY

KIND = "colony"
DELETE_DEADLINE = timedelta(hours=1)
"""How long a colony's delete waits for its clusters (and their workspaces) to be gone."""


@workflow.defn(name=COLONY.workflow_type)
class ColonyWorkflow(
    EntityWorkflow[ColonyOperation, ColonyOperationRequest, ColonyOperationAccepted]
):
    """A colony of clusters (see the module docstring)."""

    @workflow.init
    def __init__(self, input: ColonyWorkflowInput) -> None:
        self._state = input.state or ColonyState(spec=input.spec)
        super().__init__(
            input, self._state, ColonyOperation, COLONY.delete, ApplyColonyRequest(spec=input.spec)
        )

    @property
    def _name(self) -> str:
        return self._state.spec.name

    @property
    def _organization(self) -> str:
        return self._state.spec.organization

    def _kubeconfig_secret(self, cluster: str) -> str:
        """The Secret k0rdent writes the cluster's kubeconfig to (named by its ClusterDeployment,
        which carries the organization)."""
        return kubeconfig_secret_name(cluster_deployment_name(cluster, self._organization))

    @workflow.run
    async def run(self, input: ColonyWorkflowInput) -> ColonyStatus:
        """Apply and delete, and between them follow the clusters' reports."""
        await self.live()
        return self.status()

    def carry(self) -> ColonyWorkflowInput:
        """The input with the spec now (an apply changes it), the whole state and the policy."""
        return ColonyWorkflowInput(
            spec=self._state.spec, state=self._state, continue_as_new=self.limit.policy
        )

    def chore(self) -> Chore:
        """Following the clusters' reports (their GPUs, the kubeconfigs Secret)."""
        return Chore(due=lambda: bool(self._state.reports_due), run=self._follow_reports)

    def on_workflow_cancel(self, running: ColonyOperation | None) -> bool:
        """A colony's operations only start and stop clusters' workflows: a workflow cancel
        leaves them be."""
        return False

    async def execute(self, operation: ColonyOperation) -> None:
        request = operation.request
        if isinstance(request, DeleteColonyRequest):
            await self._delete()
        else:
            await self._apply(request)

    # --- Apply -----------------------------------------------------------------------------------

    async def _apply(self, request: ApplyColonyRequest) -> None:
        state = self._state
        if request.spec.name != self._name:
            raise rejected(f"this is colony '{self._name}', not '{request.spec.name}'")
        before = {entry.cluster_name: entry for entry in state.spec.colony_clusters}
        state.spec = request.spec
        wanted = {entry.cluster_name: entry for entry in request.spec.colony_clusters}
        known = {cluster.entry: cluster for cluster in state.clusters}
        for entry_name, entry in wanted.items():
            if entry_name in known:
                await self._rescale(known[entry_name].cluster, before.get(entry_name), entry)
                continue
            spec = entry.to_cluster_spec(self._name, self._organization)
            # Running already (a re-applied colony): adopted. Only this colony's entry can run
            # under that id: member names are injective over (organization, colony, entry).
            with contextlib.suppress(WorkflowAlreadyStartedError):
                await workflow.start_child_workflow(
                    CLUSTER.workflow_type,
                    ClusterWorkflowInput(spec=spec),
                    result_type=CLUSTER.output,
                    id=spec.workflow_id,
                    parent_close_policy=ParentClosePolicy.ABANDON,
                    static_summary=f"cluster {spec.name} of colony {self._name}",
                )
            state.clusters.append(ColonyClusterStatus(entry=entry_name, cluster=spec.name))
        for entry_name, cluster in known.items():
            if entry_name not in wanted:
                await self._ask_delete(cluster.cluster, "it left the colony's manifest")
                cluster.phase = "deleting"
        self._update_phase()

    async def _rescale(
        self, cluster: str, before: ColonyClusterSpec | None, entry: ColonyClusterSpec
    ) -> None:
        """A template entry re-applied with another `workersNumber`: its cluster scales its
        `workers` pool through the same path as `node-pool scale` (drain included)."""
        workers = _workers_number(entry)
        if before is None or workers is None or workers == _workers_number(before):
            return
        if not workflow.patched(RESCALE_PATCH):
            return  # colonies that ran before this: a changed entry was not acted on
        info = workflow.info()
        await tell(
            CLUSTER.scale_requested,
            CLUSTER.workflow_id(cluster, self._organization),
            ScaleRequested(
                request_id=f"{info.workflow_id}/scale/{cluster}/{info.get_current_history_length()}",
                pool=MACHINE_DEPLOYMENT_POOL,
                count=workers,
                reason=f"colony '{self._name}' re-applied with workersNumber {workers}",
            ),
        )

    async def _ask_delete(self, cluster: str, reason: str) -> None:
        await tell(
            CLUSTER.delete_requested,
            CLUSTER.workflow_id(cluster, self._organization),
            DeleteRequested(
                request_id=f"{workflow.info().workflow_id}/delete/{cluster}", reason=reason
            ),
        )

    # --- Reports ---------------------------------------------------------------------------------

    @workflow.signal(name=COLONY.cluster_report.name)
    def cluster_report(self, report: ClusterReport) -> None:
        """A cluster of the colony reports where it stands (after each of its operations)."""
        if not self.engine.request_ids.first_time(report.request_id):
            return
        for cluster in self._state.clusters:
            if cluster.cluster == report.cluster:
                cluster.phase = report.phase
                cluster.reason = report.reason
                cluster.nodes = report.nodes
                cluster.ready_nodes = report.ready_nodes
                if cluster.cluster not in self._state.reports_due:
                    self._state.reports_due.append(cluster.cluster)
        self._update_phase()

    async def _follow_reports(self) -> None:
        """The chore: read the GPUs of the clusters that reported, and rewrite the kubeconfigs
        Secret."""
        state = self._state
        due, state.reports_due = set(state.reports_due), []
        # A deleted cluster leaves the list first (never while the list is walked: the cluster
        # after it would be skipped), then the ready ones that reported read their GPUs.
        state.clusters = [
            c for c in state.clusters if not (c.cluster in due and c.phase == "deleted")
        ]
        for cluster in state.clusters:
            if cluster.cluster in due and cluster.phase == "ready":
                await self._read_nodes(cluster)
        await self._write_kubeconfigs()
        self._update_phase()

    async def _read_nodes(self, cluster: ColonyClusterStatus) -> None:
        """The cluster's GPUs from its nodes; and, for an entry given as a raw ClusterDeployment
        spec, its node counts too: its template makes its machines, not Colony's node pools, so
        its report (which counts the pools' nodes) has none."""
        try:
            inventory = await READ_GPU_INVENTORY(
                ReadGpuInventoryRequest(
                    kubeconfig=KubeconfigRef(
                        namespace=DEFAULT_NAMESPACE,
                        secret_name=self._kubeconfig_secret(cluster.cluster),
                    )
                )
            )
        except Exception as error:
            if not is_failure(error):
                raise
            workflow.logger.warning("GPUs of %s not read: %s", cluster.cluster, reason_of(error))
            cluster.gpus = []
            return
        cluster.gpus = _offerings(inventory.nodes)
        entry = next(
            (e for e in self._state.spec.colony_clusters if e.cluster_name == cluster.entry), None
        )
        if entry is not None and not entry.node_pools:
            cluster.nodes = len(inventory.nodes)
            cluster.ready_nodes = sum(1 for node in inventory.nodes if node.ready)

    async def _write_kubeconfigs(self) -> None:
        ready = sorted(c.cluster for c in self._state.clusters if c.phase == "ready")
        if ready == self._state.secret_written_for:
            return
        await WRITE_COLONY_KUBECONFIGS(
            WriteColonyKubeconfigsRequest(
                namespace=DEFAULT_NAMESPACE,
                name=colony_kubeconfigs_secret(self._name, self._organization),
                colony=self._name,
                owner=Owner(
                    workflow_id=workflow.info().workflow_id, organization=self._organization
                ),
                # Keyed by ClusterDeployment, as the exalsius operator keys it: what reads the
                # Secret (its training-job controller) knows the clusters by their deployments.
                clusters={
                    cluster_deployment_name(name, self._organization): (
                        f"{DEFAULT_NAMESPACE}/{self._kubeconfig_secret(name)}"
                    )
                    for name in ready
                },
            )
        )
        self._state.secret_written_for = ready

    # --- Delete ----------------------------------------------------------------------------------

    async def _delete(self) -> None:
        state = self._state
        self._set_phase(ColonyPhase.DELETING)
        clusters = [c.cluster for c in state.clusters]
        await asyncio.gather(
            *(
                self._ask_delete(name, f"colony '{self._name}' is being deleted")
                for name in clusters
            )
        )
        if clusters:
            left = await AWAIT_WORKFLOWS_CLOSED(
                AwaitWorkflowsClosedRequest(
                    workflow_ids=[
                        CLUSTER.workflow_id(name, self._organization) for name in clusters
                    ],
                    deadline=workflow.now() + DELETE_DEADLINE,
                ),
                wait=DELETE_DEADLINE,
            )
            if left.open:
                self._set_phase(ColonyPhase.DEGRADED)
                raise rejected(
                    f"clusters of colony '{self._name}' not deleted within 1h: "
                    f"{', '.join(left.open)}; repeat the delete to finish it"
                )
        state.clusters = []
        await self._write_kubeconfigs()
        self._set_phase(ColonyPhase.DELETED)

    # --- Updates and query -------------------------------------------------------------------------

    def _check_apply(self, request: ApplyColonyRequest) -> None:
        if self._state.phase in (ColonyPhase.DELETING, ColonyPhase.DELETED):
            raise rejected(f"colony '{self._name}' is being deleted")
        if request.spec.name != self._name:
            raise rejected(
                f"this is colony '{self._name}', not '{request.spec.name}'", field="name"
            )
        if request.spec.organization != self._organization:
            raise rejected(
                f"colony '{self._name}' belongs to another organization", field="organization"
            )

    apply = queued_update(COLONY.apply, _check_apply)
    """Bring the colony to a changed manifest (clusters added and removed)."""

    delete = delete_update(COLONY.delete)
    """Delete the colony's clusters (and their workspaces), then the colony."""

    @workflow.query(name=COLONY.status.name)
    def status(self) -> ColonyStatus:
        """The colony as it is: phase, clusters, GPU inventory."""
        state = self._state
        return ColonyStatus(
            name=self._name,
            organization=self._organization,
            phase=state.phase,
            ready_clusters=sum(1 for c in state.clusters if c.phase == "ready"),
            total_clusters=len(state.clusters),
            conditions=state.conditions,
            clusters=state.clusters,
            kubeconfigs_secret=colony_kubeconfigs_secret(self._name, self._organization),
            current_operation=self.engine.running,
            completed_operations=state.completed,
        )

    # --- Helpers -------------------------------------------------------------------------------------

    def _update_phase(self) -> None:
        state = self._state
        if state.phase in (ColonyPhase.DELETING, ColonyPhase.DELETED):
            return
        phases = [c.phase for c in state.clusters]
        ready = sum(1 for p in phases if p == "ready")
        failed = [c for c in state.clusters if c.phase == "failed"]
        phase = (
            ColonyPhase.DEGRADED
            if failed
            else ColonyPhase.READY
            if phases and ready == len(phases)
            else ColonyPhase.PROVISIONING
        )
        message = (
            "; ".join(f"{c.cluster}: {c.reason}" for c in failed)
            or f"{ready} of {len(phases)} clusters ready"
        )
        condition = ColonyCondition(
            type="ClustersReady",
            status="True" if phase is ColonyPhase.READY else "False",
            reason={
                ColonyPhase.READY: "AllClustersReady",
                ColonyPhase.DEGRADED: "ClusterFailed",
            }.get(phase, "Provisioning"),
            message=message,
            last_transition_time=workflow.now(),
        )
        previous = next((c for c in state.conditions if c.type == "ClustersReady"), None)
        if previous is not None and previous.status == condition.status:
            condition.last_transition_time = previous.last_transition_time
        state.conditions = [condition]
        self._set_phase(phase)

    def _set_phase(self, phase: ColonyPhase) -> None:
        self._state.phase = phase
        self.show_phase()

    def subject(self) -> str:
        return f"colony '{self._name}'"

    def show_phase(self) -> None:
        self.show(
            [
                (COLONY_KIND, KIND),
                (COLONY_NAME, self._name),
                (COLONY_ORGANIZATION, self._organization),
                (COLONY_PHASE, self._state.phase.value),
            ]
        )

    def headline(self) -> list[str]:
        state = self._state
        ready = sum(1 for c in state.clusters if c.phase == "ready")
        lines = [
            f"**colony {self._name}**: {state.phase.value}, {ready}/{len(state.clusters)} ready"
        ]
        for cluster in state.clusters:
            gpus = ", ".join(f"{g.total}x {g.model}" for g in cluster.gpus)
            lines.append(f"- {cluster.cluster}: {cluster.phase}" + (f" ({gpus})" if gpus else ""))
        return lines


def _offerings(nodes: list[GpuNode]) -> list[GpuOffering]:
    """The kinds of GPU the nodes offer (exalsius Colony status `gpuInventory`)."""
    offerings: dict[str, GpuOffering] = {}
    for node in nodes:
        if node.allocatable <= 0:
            continue
        model = node.model or "unknown"
        offering = offerings.setdefault(
            model,
            GpuOffering(
                model=model,
                vendor=node.vendor.value if node.vendor else "",
                resource_name=node.resource_name,
                node_selector={"exalsius.ai/gpu-model": model} if node.model else {},
            ),
        )
        offering.total += node.allocatable
        offering.nodes += 1
    return sorted(offerings.values(), key=lambda o: o.model)


RESCALE_PATCH = "colony-rescales-template-entries"
"""`workflow.patched` id: a re-applied manifest whose template entry changed `workersNumber`
scales that cluster (histories recorded before never sent it)."""


def _workers_number(entry: ColonyClusterSpec) -> int | None:
    """A template entry's `config.workersNumber` (None: it has none, or it claims hosts)."""
    config = (entry.cluster_deployment_spec or {}).get("config") or {}
    value = config.get(WORKERS_FIELD) if isinstance(config, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None
