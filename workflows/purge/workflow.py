"""`PurgeWorkflow`: ends an entity's workflow that cannot make progress and removes what it made,
found by its ownership marks (`models.purge`; its contract: `workflows/purge/__init__.py`).

The plan, one purge per entity (`purge/<its workflow id>`; a purge asked for again while one runs
is that one):
1. **Look** at the entity's workflow (`inspect_workflow`). One that answers is not ended: it is
   told to delete itself (its `delete_requested` signal), which removes what it made the way it
   knows best, and the purge reports `deleted`. One whose workflow task failed once is looked at
   again `RECHECK` later (a killed worker's task succeeds on its retry).
2. A cluster that still has workspaces is refused before anything is ended: they go first (each
   by its delete, or its own purge), as in a cluster's delete.
3. **End** it: terminate that run (never a later one of the same name). Activities a worker was
   running for it stop at their next heartbeat (every 2 s); one in a single call may still finish
   it, so the sweep waits `SETTLE` first when any ran.
4. **Sweep by marks**, in the order a delete goes, each object found by the owner's marks
   (`colony.dev/workflow-id` and `colony.dev/organization`; a cluster's also by its owner key, so
   an earlier cluster of the name is never touched) and deleted only if still the owner's:
   - a workspace: its routes and namespaces on its cluster (found there by their marks, once the
     ClusterDeployment is found marked as the organization's cluster), its ServiceSet (waited
     for: its release is uninstalled), its GPU request and gateway ports in the cluster's ledger
     (those answering its workflow), its values Secret, then its namespaces;
   - a cluster: its ClusterDeployment (waited for until gone), the hosts claimed under its owner
     key, and its GPU ledger (closed);
   - an organization's entity, once nothing was left: its holding in the organization's quota
     ledger (`workflows.quota`), which the ended workflow can no longer give back itself (the
     ledger's audit would drop it too, at its next refusal).
5. **Report** everything removed, and what was left and why.

Idempotent: run again, it finds the workflow ended and sweeps what is left (`swept`). Its history
grows with what it removes, never with waiting: each wait is one heartbeating activity.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from workflows.cluster_calls import (
    DELETE_CLUSTER_DEPLOYMENT,
    LIST_CLAIMED_HOSTS,
    RELEASE_HOSTS,
    await_cluster_deployment,
)
from workflows.kit.activity import HEARTBEAT, HOST_CALL
from workflows.kit.engine import is_failure, reason_of
from workflows.kit.service import tell
from workflows.purge_calls import (
    FIND_MARKED_CHILD_OBJECTS,
    FIND_MARKED_OBJECTS,
    INSPECT_WORKFLOW,
    READ_LEDGER_HOLDINGS,
    TERMINATE_WORKFLOW,
)
from workflows.workspace_calls import (
    DELETE_NAMESPACE,
    DELETE_ROUTES,
    DELETE_SERVICE_SET,
    DELETE_VALUES_SECRET,
    LIST_WORKFLOWS,
)

with workflow.unsafe.imports_passed_through():
    from models.activity_api import (
        AwaitClusterDeploymentRequest,
        DeleteClusterDeploymentRequest,
        DeploymentOutcome,
        DeploymentWait,
        KubeconfigRef,
        ListClaimedHostsRequest,
        ReleaseHostsRequest,
    )
    from models.cluster import DEFAULT_NAMESPACE, cluster_deployment_name, kubeconfig_secret_name
    from models.errors import ErrorType, permanent
    from models.identity import Entity, owner_key, parse_entity_workflow_id
    from models.ownership import Owner
    from models.purge import (
        FindMarkedChildObjectsRequest,
        FindMarkedObjectsRequest,
        InspectWorkflowRequest,
        InspectWorkflowResult,
        MarkedObject,
        PurgeOutcome,
        PurgeReport,
        PurgeRequest,
        RemovedObject,
        TerminateWorkflowRequest,
        operator_command,
    )
    from models.quota import HoldingReport
    from models.workspace_api import (
        CapacityMessage,
        CapacityMessageKind,
        DeleteNamespaceRequest,
        DeleteRequested,
        DeleteRoutesRequest,
        DeleteServiceSetRequest,
        DeleteValuesSecretRequest,
        HoldingsQuery,
        ListWorkflowsRequest,
        ReadLedgerHoldingsRequest,
        RouteSpec,
    )
    from workflows.capacity import CAPACITY
    from workflows.cluster import CLUSTER
    from workflows.purge import PURGE
    from workflows.quota import QUOTA
    from workflows.workspace import WORKSPACE

RECHECK = timedelta(seconds=15)
"""A workflow task that failed once is looked at again after this: past Temporal's 10-second
workflow task timeout, so a task failing for good has failed again by then."""
SETTLE = HOST_CALL + HEARTBEAT
"""How long activities started for the ended workflow may still act: the longest single call
(the host provider's) plus a heartbeat's timeout (a heartbeating wait stops at its next beat)."""
UNINSTALL_DEADLINE = timedelta(minutes=15)
"""How long a workspace's release may take to uninstall (a delete's own deadline)."""
GONE_DEADLINE = timedelta(minutes=30)
"""How long a ClusterDeployment may take to go (machines reset over SSH: a cluster delete's)."""

SERVICE_SET = "ServiceSet"
SECRET = "Secret"
CLUSTER_DEPLOYMENT = "ClusterDeployment"
NAMESPACE = "Namespace"


@workflow.defn(name=PURGE.workflow_type)
class PurgeWorkflow:
    """One purge (see the module docstring)."""

    @workflow.init
    def __init__(self, request: PurgeRequest) -> None:
        target = request.target
        self._request = request
        self._owner = Owner(workflow_id=target.workflow_id, organization=target.organization)
        self._report = PurgeReport(
            target=target,
            workflow_id=target.workflow_id,
            purge_workflow_id=workflow.info().workflow_id,
            outcome=PurgeOutcome.RUNNING,
        )

    @workflow.query(name=PURGE.status.name)
    def status(self) -> PurgeReport:
        """What the purge has done so far."""
        return self._report

    @workflow.run
    async def run(self, request: PurgeRequest) -> PurgeReport:
        """Look, end, sweep, report (see the module docstring)."""
        target, report = request.target, self._report
        if target.entity not in (Entity.WORKSPACE, Entity.CLUSTER):
            raise permanent(ErrorType.INVALID_SPEC, f"a {target.entity.value} cannot be purged")
        found = await self._inspect()
        if found.running and not (found.trouble is not None and found.trouble.stuck):
            await self._delete_normally()
            return report
        if found.organization and found.organization != target.organization:
            raise permanent(
                ErrorType.FOREIGN_OBJECT,
                f"workflow {target.workflow_id} is marked as another organization's: not ended",
            )
        if target.entity is Entity.CLUSTER:
            await self._refuse_while_workspaces(found)
        if found.running:
            trouble = found.trouble.reason if found.trouble is not None else ""
            ended = await TERMINATE_WORKFLOW(
                TerminateWorkflowRequest(
                    workflow_id=target.workflow_id,
                    run_id=found.run_id,
                    reason=f"purged ({self._request.requested_by or 'operator'}): {trouble}",
                )
            )
            report.terminated = ended.terminated
            report.reason = trouble
            if found.activities_running:
                await workflow.sleep(SETTLE)
        if target.entity is Entity.WORKSPACE:
            await self._sweep_workspace(found)
        else:
            await self._sweep_cluster(found)
        if target.organization and not report.left:
            await self._release_quota()
        report.outcome = PurgeOutcome.PURGED if report.terminated else PurgeOutcome.SWEPT
        return report

    async def _release_quota(self) -> None:
        """The ended entity holds nothing any more: its organization's quota ledger hears so."""
        target, info = self._request.target, workflow.info()
        await tell(
            QUOTA.holding,
            QUOTA.workflow_id(target.organization),
            HoldingReport(
                request_id=f"{info.workflow_id}/{info.run_id}/quota",
                holder=target.workflow_id,
                closed=True,
            ),
        )

    # --- Looking ---------------------------------------------------------------------------------

    async def _inspect(self) -> InspectWorkflowResult:
        """The workflow now; once more after `RECHECK` when its task failed only once so far."""
        look = InspectWorkflowRequest(workflow_id=self._owner.workflow_id)
        found = await INSPECT_WORKFLOW(look)
        trouble = found.trouble
        if found.running and trouble is not None and trouble.failed_tasks and not trouble.stuck:
            await workflow.sleep(RECHECK)
            found = await INSPECT_WORKFLOW(look)
        return found

    async def _delete_normally(self) -> None:
        """It answers: its own delete removes what it made (the signal every entity takes from a
        workflow, which cannot send updates)."""
        target, report = self._request.target, self._report
        signal = WORKSPACE.delete_requested if target.entity is Entity.WORKSPACE else None
        signal = signal or CLUSTER.delete_requested
        info = workflow.info()
        await tell(
            signal,
            target.workflow_id,
            DeleteRequested(
                request_id=f"{info.workflow_id}/{info.run_id}/delete",
                reason=f"purge asked by {self._request.requested_by or 'an operator'}",
            ),
        )
        report.outcome = PurgeOutcome.DELETED
        report.reason = (
            "its workflow answers: it was told to delete itself, and removes what it made"
        )

    async def _refuse_while_workspaces(self, found: InspectWorkflowResult) -> None:
        target = self._request.target
        deployment = cluster_deployment_name(target.name, target.organization)
        listed = await LIST_WORKFLOWS(
            ListWorkflowsRequest(
                query=f"ColonyKind = 'workspace' AND ColonyCluster = '{deployment}'"
            )
        )
        names = [
            entity[2]
            for workflow_id in listed.workflow_ids
            if (entity := parse_entity_workflow_id(workflow_id)) is not None
            and entity[:2] == (Entity.WORKSPACE, target.organization)
        ]
        if names:
            commands = "; ".join(
                f"`colonyctl workspace delete {n}` (or `"
                f"{operator_command(Entity.WORKSPACE, target.organization, n)}`)"
                for n in names
            )
            raise permanent(
                ErrorType.OPERATION_REJECTED,
                f"{target.describe()} still has workspaces: {', '.join(names)}; nothing was "
                f"ended. Remove them first: {commands}",
            )

    # --- A workspace -----------------------------------------------------------------------------

    async def _sweep_workspace(self, found: InspectWorkflowResult) -> None:
        owner, report = self._owner, self._report
        marked = await FIND_MARKED_OBJECTS(
            FindMarkedObjectsRequest(namespace=DEFAULT_NAMESPACE, owner=owner)
        )
        service_sets = [o for o in marked.objects if o.kind == SERVICE_SET]
        deployment = found.cluster_mark or next(
            (o.cluster_deployment for o in service_sets if o.cluster_deployment), ""
        )
        child = None
        kubeconfig = KubeconfigRef(
            namespace=DEFAULT_NAMESPACE, secret_name=kubeconfig_secret_name(deployment)
        )
        if deployment:
            try:
                child = await FIND_MARKED_CHILD_OBJECTS(
                    FindMarkedChildObjectsRequest(
                        kubeconfig=kubeconfig,
                        cluster_deployment=deployment,
                        namespace=DEFAULT_NAMESPACE,
                        owner=owner,
                    )
                )
            except Exception as error:
                if not is_failure(error):
                    raise
                # Its cluster does not answer: the rest is still removed; a purge run again
                # looks at the cluster again.
                report.left.append(f"cluster {deployment}: not reached ({reason_of(error)})")
            else:
                if not child.reachable:
                    report.left.append(f"cluster {deployment}: {child.problem}")
        for route in child.routes if child is not None and child.reachable else []:
            deleted = await DELETE_ROUTES(
                DeleteRoutesRequest(
                    kubeconfig=kubeconfig,
                    namespace=route.namespace,
                    routes=[RouteSpec(name=route.name, kind=route.kind, service="", port=0)],
                    owner=owner,
                )
            )
            if route.name in deleted.deleted:
                report.removed.append(self._removed(route, deployment))
        for service_set in service_sets:
            gone = await DELETE_SERVICE_SET(
                DeleteServiceSetRequest(
                    namespace=service_set.namespace,
                    name=service_set.name,
                    owner=owner,
                    wait_until=workflow.now() + UNINSTALL_DEADLINE,
                ),
                wait=UNINSTALL_DEADLINE,
            )
            if gone.foreign:
                report.left.append(f"ServiceSet {service_set.name}: another owner's now")
            elif not gone.existed:
                continue  # gone meanwhile
            elif not gone.gone:
                report.left.append(
                    f"ServiceSet {service_set.namespace}/{service_set.name}: its release was not "
                    f"uninstalled within {int(UNINSTALL_DEADLINE.total_seconds() // 60)}m"
                )
            else:
                report.removed.append(self._removed(service_set))
        if deployment:
            await self._release_holdings(deployment, found)
        for secret in (o for o in marked.objects if o.kind == SECRET):
            deleted_secret = await DELETE_VALUES_SECRET(
                DeleteValuesSecretRequest(namespace=secret.namespace, name=secret.name, owner=owner)
            )
            if deleted_secret.existed and not deleted_secret.foreign:
                report.removed.append(self._removed(secret))
        for name in child.namespaces if child is not None and child.reachable else []:
            gone_namespace = await DELETE_NAMESPACE(
                DeleteNamespaceRequest(
                    kubeconfig=kubeconfig,
                    name=name,
                    owner=owner,
                    wait_until=workflow.now() + UNINSTALL_DEADLINE,
                ),
                wait=UNINSTALL_DEADLINE,
            )
            if gone_namespace.existed and not gone_namespace.foreign:
                report.removed.append(RemovedObject(kind=NAMESPACE, name=name, cluster=deployment))
                if not gone_namespace.gone:
                    report.left.append(f"namespace {name}: still terminating")

    async def _release_holdings(self, deployment: str, found: InspectWorkflowResult) -> None:
        """Give back what the ledger holds for this workspace's workflow: its GPU request (the
        next in line is admitted) and its gateway ports."""
        target, report = self._request.target, self._report
        ledger = CAPACITY.workflow_id(deployment)
        try:
            held = await READ_LEDGER_HOLDINGS(
                ReadLedgerHoldingsRequest(
                    ledger_workflow_id=ledger,
                    query_name=CAPACITY.holdings.name,
                    query=HoldingsQuery(reply_to=target.workflow_id, workspace=target.name),
                )
            )
        except Exception as error:
            if not is_failure(error):
                raise
            report.left.append(
                f"GPU ledger {ledger}: did not answer ({reason_of(error)}); what it holds for "
                "the workspace was not given back"
            )
            return
        me = workflow.info().workflow_id
        run = found.run_id or "-"
        for request in held.requests:
            await tell(
                CAPACITY.capacity,
                ledger,
                CapacityMessage(
                    request_id=f"{me}/{run}/release/{request.request_id}",
                    kind=CapacityMessageKind.RELEASE,
                    target=request.request_id,
                    reason="purged",
                ),
            )
            report.gpu_requests_released.append(request.request_id)
        if held.ports:
            await tell(
                CAPACITY.capacity,
                ledger,
                CapacityMessage(
                    request_id=f"{me}/{run}/release-ports",
                    kind=CapacityMessageKind.RELEASE_PORTS,
                    holder=target.name,
                ),
            )
            report.ports_released.extend(sorted(held.ports.values()))

    # --- A cluster -------------------------------------------------------------------------------

    async def _sweep_cluster(self, found: InspectWorkflowResult) -> None:
        target, owner, report = self._request.target, self._owner, self._report
        key = owner_key(target.workflow_id, found.first_run_id) if found.first_run_id else ""
        marked = await FIND_MARKED_OBJECTS(
            FindMarkedObjectsRequest(namespace=DEFAULT_NAMESPACE, owner=owner)
        )
        deployments = [
            o
            for o in marked.objects
            if o.kind == CLUSTER_DEPLOYMENT and (not key or o.owner_key == key)
        ]
        for deployment in deployments:
            deleted = await DELETE_CLUSTER_DEPLOYMENT(
                DeleteClusterDeploymentRequest(
                    namespace=deployment.namespace, name=deployment.name, owner=deployment.owner_key
                )
            )
            if deleted.foreign or not deleted.existed:
                continue
            waited = await await_cluster_deployment(
                AwaitClusterDeploymentRequest(
                    namespace=deployment.namespace,
                    name=deployment.name,
                    want=DeploymentWait.GONE,
                    deadline=workflow.now() + GONE_DEADLINE,
                    owner=owner,
                ),
                settled=lambda w: w.outcome in (DeploymentOutcome.GONE, DeploymentOutcome.DEADLINE),
            )
            report.removed.append(self._removed(deployment))
            if waited.outcome is DeploymentOutcome.DEADLINE:
                report.left.append(
                    f"ClusterDeployment {deployment.name}: still being torn down after "
                    f"{int(GONE_DEADLINE.total_seconds() // 60)}m; its hosts were kept"
                )
                return
        if key:
            held = await LIST_CLAIMED_HOSTS(ListClaimedHostsRequest(owner=key))
            ids = [host.id for host in held.hosts]
            if ids:
                await RELEASE_HOSTS(ReleaseHostsRequest(host_ids=ids, owner=key))
                report.hosts_released.extend(ids)
        else:
            report.left.append(
                "claimed hosts: the cluster's first run is unknown (its workflow is past "
                "retention), so its owner key is too: release them at the host provider"
            )
        ledger = CAPACITY.workflow_id(cluster_deployment_name(target.name, target.organization))
        info = workflow.info()
        closed = await tell(
            CAPACITY.capacity,
            ledger,
            CapacityMessage(
                request_id=f"{info.workflow_id}/{info.run_id}/close",
                kind=CapacityMessageKind.CLOSE,
            ),
        )
        if closed:
            report.ledger_closed = ledger

    @staticmethod
    def _removed(obj: MarkedObject, cluster: str = "") -> RemovedObject:
        return RemovedObject(kind=obj.kind, name=obj.name, namespace=obj.namespace, cluster=cluster)
