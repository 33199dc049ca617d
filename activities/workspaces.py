"""Activities of the workspace side: classes, ServiceSets and values Secrets on the management
cluster; namespaces, GPU inventory, the tenant gateway and routes in child clusters.

`WorkspaceActivities` receives the management cluster's `ApiClient` (and shares the child-cluster
client cache with `ChildClusterActivities`); `worker.py` registers its methods. Called by
`WorkspaceWorkflow`, `CapacityLedgerWorkflow`, `PrerequisiteWorkflow` and `CatalogWorkflow`
through `workflows/workspace_calls.py`.

Ownership (`models.ownership`): everything created here carries its owner's marks, and an object
of the name asked for is only ever taken over, changed, waited on or deleted when it is that
owner's. One without Colony's marks (a user's own namespace `ws-nb`) or another owner's is refused
on create (`ForeignObject`, naming it) and left alone on delete: never adopted, never deleted.

Every method is idempotent: creates tolerate an existing object that is ours and the same (or
update it to what is asked), deletes tolerate absence, and waits (`await_service_set`, `await_routes`, deletes
with `wait_until`) look inside the activity, heartbeating, and return on a change or a deadline.
The waits on one object (a ServiceSet, a namespace) react to its next change through a watch and
poll only as a fallback (`activities.watch`): a deleted workspace's ServiceSet is seen gone the
moment k0rdent lets it go, not at the next second's look.
Secret prompt values arrive sealed and are unsealed only in `write_values_secret`, straight into
the Secret: they never appear in a result, a log line or workflow history.
"""

from __future__ import annotations

import asyncio
import base64
from datetime import UTC, datetime
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.child_cluster import ChildClients
from activities.errors import kube_error
from activities.heartbeat import heartbeating, report
from activities.kube import MERGE_PATCH, Obj, call, call_or_none, call_or_raise
from activities.sealing import SealingError, Unsealer, unseal_secret_values
from activities.watch import ObjectWatch
from models.activity_api import TENANT_GATEWAY_DOMAIN_LABEL
from models.capacity import gpu_node
from models.errors import ErrorType, permanent
from models.identity import (
    Entity,
    cluster_deployment_name,
    entity_workflow_id,
    workspace_class_object_name,
)
from models.manifests import EXALSIUS_WORKSPACES, workspace_class_object
from models.ownership import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    ORGANIZATION_LABEL,
    Owner,
    Ownership,
    marked_entity,
    refusal,
)
from models.workspace import (
    EventSummary,
    GatewayInfo,
    ServiceSetStatusSummary,
    ServiceStateSummary,
)
from models.workspace_api import (
    CATALOG_WORKFLOW_ID,
    CLASS_NAME_ANNOTATION,
    PREREQUISITE_LABEL,
    ApplyRoutesRequest,
    ApplyRoutesResult,
    ApplyServiceSetRequest,
    ApplyServiceSetResult,
    AwaitRoutesRequest,
    AwaitRoutesResult,
    AwaitServiceSetRequest,
    AwaitServiceSetResult,
    CheckServiceTemplateRequest,
    CheckServiceTemplateResult,
    DeleteNamespaceRequest,
    DeleteNamespaceResult,
    DeleteRoutesRequest,
    DeleteRoutesResult,
    DeleteServiceSetRequest,
    DeleteServiceSetResult,
    DeleteValuesSecretRequest,
    DeleteValuesSecretResult,
    EnsureNamespaceRequest,
    EnsureNamespaceResult,
    FindServiceSetsRequest,
    FindServiceSetsResult,
    FindTenantGatewayRequest,
    FindTenantGatewayResult,
    FoundServiceSet,
    GetWorkspaceClassRequest,
    GetWorkspaceClassResult,
    ListWorkspaceClassesRequest,
    ListWorkspaceClassesResult,
    PublishObjectsRequest,
    PublishObjectsResult,
    PublishWorkspaceClassRequest,
    PublishWorkspaceClassResult,
    ReadGpuInventoryRequest,
    ReadGpuInventoryResult,
    RecentEventsRequest,
    RecentEventsResult,
    RouteSpec,
    RouteState,
    ServiceSetOutcome,
    WorkspaceActivity,
    WriteValuesSecretRequest,
    WriteValuesSecretResult,
)
from models.workspace_class import WorkspaceClassSpec, class_conflict
from watching.kubeapi import collection_path

K0RDENT = ("k0rdent.mirantis.com", "v1beta1")
EXALSIUS = ("workspaces.exalsius.ai", "v1")
GATEWAY_API = "gateway.networking.k8s.io"
ROUTE_VERSIONS = {"HTTPRoute": ("v1", "httproutes"), "TCPRoute": ("v1alpha2", "tcproutes")}
TENANT_GATEWAY_LABEL = "colony.dev/tenant-gateway"
DOMAIN_ANNOTATION = "colony.dev/domain"
SVELTOS = "ksm-projectsveltos"
PLURALS = {
    "ServiceTemplate": "servicetemplates",
    "HelmRepository": "helmrepositories",
    "WorkspaceClass": "workspaceclasses",
}
"""The StateManagementProvider k0rdent installs services with (Sveltos)."""
POLL_FIRST = 1.0
POLL_CAP = 2.0
"""Seconds between looks while waiting: 1 s, then every 2 s (free for the workflow's history)."""

_ = EXALSIUS_WORKSPACES  # the stored class's apiVersion, built by `workspace_class_object`


def _seconds_until(deadline: datetime) -> float:
    return (deadline - datetime.now(UTC)).total_seconds()


def _service_set_summary(name: str, obj: Obj) -> ServiceSetStatusSummary:
    status = obj.get("status") or {}
    return ServiceSetStatusSummary(
        name=name,
        deployed=bool(status.get("deployed")),
        services=[
            ServiceStateSummary(
                name=str(entry.get("name", "")),
                state=str(entry.get("state", "")),
                failure_message=str(entry.get("failureMessage") or entry.get("message") or ""),
            )
            for entry in status.get("services") or []
            if isinstance(entry, dict)
        ],
    )


def service_set_observed(obj: Obj, generation: int) -> bool:
    """Whether the ServiceSet's status speaks of `generation` (or a later one).

    Only what k0rdent's CRD defines is read: the `observedGeneration` of the status' conditions
    and of each service's (`status.services[*].conditions`), which KCM sets to the generation it
    reconciled. The status itself has no `observedGeneration` in that CRD (an API server prunes
    one a writer puts there), so it is never looked at. A status whose conditions all predate
    the spec we wrote still shows the previous install's states. Without any observed
    generation there is nothing to compare: the status is taken as current.
    """
    if generation <= 0:
        return True
    status = obj.get("status") or {}
    conditions = list(_dicts(status.get("conditions")))
    for service in _dicts(status.get("services")):
        conditions += _dicts(service.get("conditions"))
    observed = [
        c["observedGeneration"] for c in conditions if isinstance(c.get("observedGeneration"), int)
    ]
    return not observed or max(observed) >= generation


def cluster_owner_of(deployment: Obj, name: str) -> str:
    """The workflow of the cluster whose ClusterDeployment `deployment` (named `name`) is, from its
    marks; empty unless they are Colony's, name a cluster workflow, and that cluster's
    ClusterDeployment is this very name (the identity is injective: only one cluster's can be)."""
    found = marked_entity(deployment)
    if found is None or found[0] is not Entity.CLUSTER:
        return ""
    _, organization, cluster = found
    if cluster_deployment_name(organization, cluster) != name:
        return ""
    return entity_workflow_id(Entity.CLUSTER, organization, cluster)


def class_organization(obj: Obj) -> str | None:
    """Whose catalog a `WorkspaceClass` object is in: "" for the shared one (no organization
    mark), the organization for one's own class (Colony's marks, the catalog's workflow, the class
    name annotated, and the object named as `models.identity` derives it from both); None when
    its marks contradict themselves (no one's class)."""
    meta = obj.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    organization = str(labels.get(ORGANIZATION_LABEL) or "")
    if not organization:
        return ""
    name = str(annotations.get(CLASS_NAME_ANNOTATION) or "")
    owner = Owner(workflow_id=CATALOG_WORKFLOW_ID, organization=organization)
    if not owner.owns(obj) or meta.get("name") != workspace_class_object_name(organization, name):
        return None
    return organization


def _class_body(spec: WorkspaceClassSpec, organization: str) -> Obj:
    """The stored class: shared under its name; an organization's under its derived name, with
    the catalog workflow's marks for that organization and the class name annotated."""
    if not organization:
        return workspace_class_object(spec, {MANAGED_BY_LABEL: MANAGED_BY})
    owner = Owner(workflow_id=CATALOG_WORKFLOW_ID, organization=organization)
    return workspace_class_object(
        spec,
        owner.labels(),
        name=workspace_class_object_name(organization, spec.name),
        annotations={**owner.annotations(), CLASS_NAME_ANNOTATION: spec.name},
    )


def _foreign(kind: str, where: str, name: str, ownership: Ownership) -> ApplicationError:
    """The refusal to take over an object of the name asked for that is not the owner's."""
    return permanent(ErrorType.FOREIGN_OBJECT, refusal(kind, where, name, ownership))


def _uid(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _only(obj: Obj) -> Obj:
    """Delete options that delete exactly the object read and judged (a replacement in between
    answers 409, and is read and judged again on the retry)."""
    return {"preconditions": {"uid": _uid(obj)}}


def _dicts(value: Any) -> list[Obj]:
    """The objects of a list read from the API (anything else: none)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


ROUTE_ACCEPTED = "Accepted"
ROUTE_PENDING = "Pending"
"""The Gateway API's reasons: a route accepted, and one no controller has answered for yet."""


def route_state(name: str, route: Obj) -> RouteState:
    """How the gateway's controller answered for a route: accepted (with every backend resolved),
    or the reason and message of the first condition that is not True, and whether the answer is
    for the route's current spec (its conditions' `observedGeneration`)."""
    generation = int((route.get("metadata") or {}).get("generation") or 1)
    parents = _dicts((route.get("status") or {}).get("parents"))
    if not parents:
        return RouteState(
            name=name, reason=ROUTE_PENDING, message="waiting for the gateway controller"
        )
    settled = True
    for parent in parents:
        conditions = {c.get("type"): c for c in _dicts(parent.get("conditions"))}
        for kind in ("Accepted", "ResolvedRefs"):
            found = conditions.get(kind)
            observed = (found or {}).get("observedGeneration")
            if found is None or (isinstance(observed, int) and observed < generation):
                settled = False
                continue
            if found.get("status") != "True":
                reason = str(found.get("reason") or ROUTE_PENDING)
                message = f"{kind}: {reason}: {found.get('message', '')}".rstrip(": ")
                return RouteState(name=name, settled=True, reason=reason, message=message)
    if not settled:
        return RouteState(
            name=name, reason=ROUTE_PENDING, message="waiting for the gateway controller"
        )
    return RouteState(name=name, accepted=True, settled=True, reason=ROUTE_ACCEPTED)


class WorkspaceActivities:
    """Classes, ServiceSets, namespaces, GPU inventory and routes, through the official client."""

    def __init__(
        self,
        management_api: client.ApiClient,
        clients: ChildClients | None = None,
        unsealer: Unsealer | None = None,
    ) -> None:
        self._core = client.CoreV1Api(management_api)
        self._custom = client.CustomObjectsApi(management_api)
        self._clients = clients or ChildClients()
        self._unsealer = unsealer

    async def _child(self, ref: Any) -> client.ApiClient:
        return await self._clients.for_ref(self._core, ref)

    # --- Classes -------------------------------------------------------------------------------

    async def _get_class_object(self, name: str) -> Obj | None:
        return await call_or_none(
            f"read WorkspaceClass {name}",
            self._custom.get_cluster_custom_object,
            *EXALSIUS,
            "workspaceclasses",
            name,
        )

    @staticmethod
    def _class_of(obj: Obj) -> WorkspaceClassSpec:
        meta = obj.get("metadata") or {}
        name = (meta.get("annotations") or {}).get(CLASS_NAME_ANNOTATION) or meta["name"]
        return WorkspaceClassSpec.model_validate({**(obj.get("spec") or {}), "name": name})

    async def _class_object(self, organization: str, name: str) -> Obj | None:
        """The object of `organization`'s class `name` ("" the shared catalog's), when its marks
        say it is that: a shared name never finds an organization's class, nor the reverse."""
        obj = await self._get_class_object(workspace_class_object_name(organization, name))
        if obj is None or class_organization(obj) != organization:
            return None
        return obj

    @activity.defn(name=WorkspaceActivity.GET_WORKSPACE_CLASS)
    @heartbeating
    async def get_workspace_class(
        self, request: GetWorkspaceClassRequest
    ) -> GetWorkspaceClassResult:
        """The class of that exact name the organization sees (its own, else the shared
        catalog's), or `found=False`."""
        obj = None
        if request.organization:
            obj = await self._class_object(request.organization, request.name)
        if obj is None:
            obj = await self._class_object("", request.name)
        if obj is None:
            return GetWorkspaceClassResult(found=False)
        try:
            return GetWorkspaceClassResult(found=True, spec=self._class_of(obj))
        except ValidationError as exc:
            return GetWorkspaceClassResult(found=True, problem=str(exc.errors()[0]["msg"]))

    @activity.defn(name=WorkspaceActivity.LIST_WORKSPACE_CLASSES)
    @heartbeating
    async def list_workspace_classes(
        self, request: ListWorkspaceClassesRequest
    ) -> ListWorkspaceClassesResult:
        """Every stored class, the shared catalog's and each organization's own (those that do
        not validate are named with their problem; objects whose marks contradict their name are
        no one's class)."""
        listed = await call_or_none(
            "list WorkspaceClasses",
            self._custom.list_cluster_custom_object,
            *EXALSIUS,
            "workspaceclasses",
        )
        result = ListWorkspaceClassesResult()
        for obj in (listed or {}).get("items") or []:
            organization = class_organization(obj)
            if organization is None:
                continue
            try:
                spec = self._class_of(obj)
            except ValidationError as exc:
                result.unreadable.append(f"{obj['metadata']['name']}: {exc.errors()[0]['msg']}")
                continue
            if organization:
                result.private.setdefault(organization, []).append(spec)
            else:
                result.classes.append(spec)
        result.classes.sort(key=lambda spec: spec.name)
        for classes in result.private.values():
            classes.sort(key=lambda spec: spec.name)
        return result

    @activity.defn(name=WorkspaceActivity.PUBLISH_WORKSPACE_CLASS)
    @heartbeating
    async def publish_workspace_class(
        self, request: PublishWorkspaceClassRequest
    ) -> PublishWorkspaceClassResult:
        """Create the class's objects (ServiceTemplates ...) when absent, then the class; refuse a
        class of the same name with another definition (`ClassConflict`). An organization's own
        class is stored under its derived name with its marks; it publishes no objects and may not
        take a shared class's name."""
        spec, organization = request.spec, request.organization
        result = PublishWorkspaceClassResult(created=False)
        object_name = workspace_class_object_name(organization, spec.name)
        if organization:
            if request.objects:
                raise permanent(
                    ErrorType.INVALID_SPEC,
                    f"workspace class '{spec.name}' of organization '{organization}' publishes no "
                    "objects: ServiceTemplates belong to the shared catalog",
                )
            if await self._class_object("", spec.name) is not None:
                raise permanent(
                    ErrorType.CLASS_CONFLICT,
                    f"workspace class '{spec.name}' is in the catalog every organization shares: "
                    "an organization's own class needs a name of its own",
                )
        existing = await self._get_class_object(object_name)
        if existing is not None:
            if class_organization(existing) != organization:
                raise permanent(
                    ErrorType.CLASS_CONFLICT,
                    f"WorkspaceClass '{object_name}' exists and is not this catalog's; publish "
                    "under a new name",
                )
            try:
                stored = self._class_of(existing)
            except ValidationError as exc:
                raise permanent(
                    ErrorType.CLASS_CONFLICT,
                    f"WorkspaceClass '{spec.name}' exists and is not a valid class "
                    f"({exc.errors()[0]['msg']}); publish under a new name",
                ) from exc
            conflict = class_conflict(stored, spec)
            if conflict:
                raise permanent(ErrorType.CLASS_CONFLICT, conflict)
        for obj in request.objects:
            label = f"{obj['kind']}/{obj['metadata']['name']}"
            try:
                if await self._create_if_absent(obj):
                    result.objects_created.append(label)
            except ApplicationError as exc:
                # A kind the cluster does not serve (Flux's HelmRepository on a bare cluster) is
                # reported, not fatal: the class's templates say where their charts come from.
                if exc.type != ErrorType.NOT_SERVED:
                    raise
                result.objects_skipped.append(f"{label}: {exc.message}")
        if existing is None:
            result.created = await self._create_if_absent(_class_body(spec, organization))
        return result

    @activity.defn(name=WorkspaceActivity.PUBLISH_OBJECTS)
    @heartbeating
    async def publish_objects(self, request: PublishObjectsRequest) -> PublishObjectsResult:
        """Create each object unless one of that name exists (then it is left as it is)."""
        result = PublishObjectsResult()
        for obj in request.objects:
            label = f"{obj['kind']}/{obj['metadata']['name']}"
            try:
                created = await self._create_if_absent(obj)
            except ApplicationError as exc:
                if exc.type != ErrorType.NOT_SERVED:
                    raise
                result.skipped.append(f"{label}: {exc.message}")
                continue
            (result.created if created else result.existing).append(label)
        return result

    async def _create_if_absent(self, obj: Obj) -> bool:
        """Create a namespaced or cluster-wide custom object unless one of that name exists.

        Raises:
            ApplicationError: `NotServed` (permanent) when the cluster does not serve the kind.
        """
        group, _, version = str(obj["apiVersion"]).partition("/")
        plural = PLURALS.get(str(obj["kind"]), str(obj["kind"]).lower() + "s")
        meta = obj.get("metadata") or {}
        what = f"create {obj['kind']} {meta.get('name')}"
        try:
            if meta.get("namespace"):
                await call(
                    what,
                    self._custom.create_namespaced_custom_object,
                    group,
                    version,
                    meta["namespace"],
                    plural,
                    obj,
                )
            else:
                await call(
                    what, self._custom.create_cluster_custom_object, group, version, plural, obj
                )
        except ApiException as exc:
            if exc.status == 409:
                return False
            if exc.status == 404:
                raise permanent(
                    ErrorType.NOT_SERVED,
                    f"{what}: the management cluster does not serve {group}/{version}",
                ) from exc
            raise kube_error(exc, what) from exc
        return True

    @activity.defn(name=WorkspaceActivity.CHECK_SERVICE_TEMPLATE)
    @heartbeating
    async def check_service_template(
        self, request: CheckServiceTemplateRequest
    ) -> CheckServiceTemplateResult:
        """Does the ServiceTemplate exist, and is it valid (k0rdent's `status.valid`)?"""
        obj = await call_or_none(
            f"read ServiceTemplate {request.namespace}/{request.name}",
            self._custom.get_namespaced_custom_object,
            *K0RDENT,
            request.namespace,
            "servicetemplates",
            request.name,
        )
        if obj is None:
            return CheckServiceTemplateResult(found=False)
        status = obj.get("status") or {}
        return CheckServiceTemplateResult(
            found=True,
            valid=bool(status.get("valid")),
            message=str(
                status.get("validationError")
                or ("" if status.get("valid") else "not validated yet")
            ),
        )

    # --- ServiceSets ---------------------------------------------------------------------------

    async def _get_service_set(self, namespace: str, name: str) -> Obj | None:
        return await call_or_none(
            f"read ServiceSet {namespace}/{name}",
            self._custom.get_namespaced_custom_object,
            *K0RDENT,
            namespace,
            "servicesets",
            name,
        )

    @activity.defn(name=WorkspaceActivity.APPLY_SERVICE_SET)
    @heartbeating
    async def apply_service_set(self, request: ApplyServiceSetRequest) -> ApplyServiceSetResult:
        """Create the ServiceSet, or bring its services up to what is asked (a resume, new values)."""
        services = []
        for service in request.services:
            entry: Obj = {
                "name": service.name,
                "namespace": service.namespace,
                "template": service.template,
                "values": yaml.safe_dump(service.values, sort_keys=True),
            }
            if service.values_from_secret:
                entry["valuesFrom"] = [{"kind": "Secret", "name": service.values_from_secret}]
            services.append(entry)
        body: Obj = {
            "apiVersion": "/".join(K0RDENT),
            "kind": "ServiceSet",
            "metadata": request.owner.mark(
                {"name": request.name, "namespace": request.namespace, "labels": request.labels}
            ),
            "spec": {
                "cluster": request.cluster_deployment,
                "provider": {"name": SVELTOS, "selfManagement": False},
                "services": services,
            },
        }
        what = f"create ServiceSet {request.namespace}/{request.name}"
        try:
            created = await call(
                what,
                self._custom.create_namespaced_custom_object,
                *K0RDENT,
                request.namespace,
                "servicesets",
                body,
            )
            return ApplyServiceSetResult(
                created=True, generation=int(created["metadata"].get("generation") or 1)
            )
        except ApiException as exc:
            if exc.status != 409:
                raise kube_error(exc, what) from exc
        existing = await self._get_service_set(request.namespace, request.name)
        if existing is None:
            raise permanent(
                ErrorType.NOT_FOUND, f"ServiceSet {request.namespace}/{request.name} vanished"
            )
        ownership = request.owner.judge(existing)
        if ownership is not Ownership.OURS:
            raise _foreign("ServiceSet", f"{request.namespace}/", request.name, ownership)
        if (existing.get("spec") or {}).get("services") == services:
            return ApplyServiceSetResult(
                created=False, generation=int(existing["metadata"].get("generation") or 1)
            )
        patched = await call_or_raise(
            f"update ServiceSet {request.namespace}/{request.name}",
            self._custom.patch_namespaced_custom_object,
            *K0RDENT,
            request.namespace,
            "servicesets",
            request.name,
            {"spec": {"services": services}},
            _content_type=MERGE_PATCH,
        )
        return ApplyServiceSetResult(
            created=False, generation=int(patched["metadata"].get("generation") or 1)
        )

    @activity.defn(name=WorkspaceActivity.AWAIT_SERVICE_SET)
    @heartbeating
    async def await_service_set(self, request: AwaitServiceSetRequest) -> AwaitServiceSetResult:
        """Wait until the service is Deployed or Failed, its state changes, or the deadline; each
        pause ends early at the ServiceSet's next change (`activities.watch`)."""
        async with self._service_set_watch(request.namespace, request.name) as watch:
            return await self._await_service_set(request, watch)

    def _service_set_watch(self, namespace: str, name: str) -> ObjectWatch:
        return ObjectWatch(
            self._custom.api_client, collection_path(*K0RDENT, "servicesets", namespace), name
        )

    async def _await_service_set(
        self, request: AwaitServiceSetRequest, watch: ObjectWatch
    ) -> AwaitServiceSetResult:
        pause = POLL_FIRST
        while True:
            obj = await self._get_service_set(request.namespace, request.name)
            if obj is None or not request.owner.owns(obj):
                return AwaitServiceSetResult(outcome=ServiceSetOutcome.GONE)
            summary = _service_set_summary(request.name, obj)
            entry = next((s for s in summary.services if s.name == request.service), None)
            current = service_set_observed(obj, request.generation)
            state = entry.state if entry and current else ""
            message = entry.failure_message if entry else ""
            report(summary)
            outcome: ServiceSetOutcome | None = None
            if state == "Deployed":
                outcome = ServiceSetOutcome.DEPLOYED
            elif state == "Failed":
                outcome = ServiceSetOutcome.FAILED
            elif state != request.known_state:
                outcome = ServiceSetOutcome.CHANGED
            left = _seconds_until(request.deadline)
            if outcome is None and left <= 0:
                outcome = ServiceSetOutcome.DEADLINE
            if outcome is not None:
                return AwaitServiceSetResult(
                    outcome=outcome, status=summary, state=state, message=message
                )
            await watch.changed(obj, min(pause, left))
            pause = min(pause * 2, POLL_CAP)

    @activity.defn(name=WorkspaceActivity.DELETE_SERVICE_SET)
    @heartbeating
    async def delete_service_set(self, request: DeleteServiceSetRequest) -> DeleteServiceSetResult:
        """Delete the ServiceSet if it is the owner's (k0rdent uninstalls its releases first);
        optionally wait till gone. Another's of that name is left alone."""
        existing = await self._get_service_set(request.namespace, request.name)
        if existing is None:
            return DeleteServiceSetResult(existed=False)
        if not request.owner.owns(existing):
            return DeleteServiceSetResult(existed=True, foreign=True)
        deleted = await call_or_none(
            f"delete ServiceSet {request.namespace}/{request.name}",
            self._custom.delete_namespaced_custom_object,
            *K0RDENT,
            request.namespace,
            "servicesets",
            request.name,
            body=_only(existing),
        )
        if request.wait_until is None:
            return DeleteServiceSetResult(existed=deleted is not None)
        # Gone is what frees the workspace's GPUs for the next in line: seen at the ServiceSet's
        # DELETED event (k0rdent removes its finalizer once the releases are uninstalled), with
        # a look every second as the fallback.
        async with self._service_set_watch(request.namespace, request.name) as watch:
            while (
                found := await self._get_service_set(request.namespace, request.name)
            ) is not None:
                if _uid(found) != _uid(existing):
                    break  # ours is gone; another took the name meanwhile
                left = _seconds_until(request.wait_until)
                if left <= 0:
                    return DeleteServiceSetResult(existed=True, gone=False)
                await watch.changed(found, min(POLL_FIRST, left))
        return DeleteServiceSetResult(existed=deleted is not None, gone=True)

    @activity.defn(name=WorkspaceActivity.FIND_SERVICE_SETS)
    @heartbeating
    async def find_service_sets(self, request: FindServiceSetsRequest) -> FindServiceSetsResult:
        """ServiceSets of the cluster that install the template, whoever created them."""
        listed = await call_or_none(
            f"list ServiceSets in {request.namespace}",
            self._custom.list_namespaced_custom_object,
            *K0RDENT,
            request.namespace,
            "servicesets",
        )
        result = FindServiceSetsResult()
        for obj in (listed or {}).get("items") or []:
            spec = obj.get("spec") or {}
            if spec.get("cluster") != request.cluster_deployment:
                continue
            labels = (obj.get("metadata") or {}).get("labels") or {}
            states = {
                e.get("name"): str(e.get("state", ""))
                for e in (obj.get("status") or {}).get("services") or []
            }
            for service in spec.get("services") or []:
                if service.get("template") != request.template:
                    continue
                result.found.append(
                    FoundServiceSet(
                        name=obj["metadata"]["name"],
                        service=str(service.get("name", "")),
                        service_namespace=str(service.get("namespace", "")),
                        state=states.get(service.get("name"), ""),
                        colony_prerequisite=PREREQUISITE_LABEL in labels,
                    )
                )
        return result

    # --- Values Secrets ------------------------------------------------------------------------

    @activity.defn(name=WorkspaceActivity.WRITE_VALUES_SECRET)
    @heartbeating
    async def write_values_secret(
        self, request: WriteValuesSecretRequest
    ) -> WriteValuesSecretResult:
        """Unseal the secret values into a values YAML in a Secret (create or replace)."""
        if self._unsealer is None:
            raise permanent(
                ErrorType.INVALID_SPEC,
                "this worker has no sealing key (COLONY_SEALING_PRIVATE_KEY_FILE): it cannot "
                "install workspaces with secret values",
            )
        try:
            values = unseal_secret_values(
                request.workspace,
                request.secret_values,
                self._unsealer,
                request.owner.organization,
            )
        except (SealingError, ValueError) as exc:
            # Sealed for another key, workspace or path, or altered: no retry opens it.
            raise permanent(ErrorType.INVALID_SPEC, f"secret values: {exc}") from exc
        data = base64.b64encode(yaml.safe_dump(values).encode()).decode()
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": request.owner.mark(
                {"name": request.name, "namespace": request.namespace, "labels": request.labels}
            ),
            "type": "Opaque",
            "data": {"values": data},
        }
        what = f"write Secret {request.namespace}/{request.name}"
        try:
            await call(what, self._core.create_namespaced_secret, request.namespace, body)
        except ApiException as exc:
            if exc.status != 409:
                raise kube_error(exc, what) from exc
            existing = await call_or_none(
                f"read Secret {request.namespace}/{request.name}",
                self._core.read_namespaced_secret,
                request.name,
                request.namespace,
            )
            if existing is None:
                raise kube_error(exc, what) from exc  # deleted in between: the retry creates it
            ownership = request.owner.judge(existing)
            if ownership is not Ownership.OURS:
                raise _foreign("Secret", f"{request.namespace}/", request.name, ownership) from exc
            body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            await call_or_raise(
                what, self._core.replace_namespaced_secret, request.name, request.namespace, body
            )
        return WriteValuesSecretResult(keys=len(request.secret_values))

    @activity.defn(name=WorkspaceActivity.DELETE_VALUES_SECRET)
    @heartbeating
    async def delete_values_secret(
        self, request: DeleteValuesSecretRequest
    ) -> DeleteValuesSecretResult:
        """Delete the values Secret if it is the owner's; another's is left alone."""
        existing = await call_or_none(
            f"read Secret {request.namespace}/{request.name}",
            self._core.read_namespaced_secret,
            request.name,
            request.namespace,
        )
        if existing is None:
            return DeleteValuesSecretResult(existed=False)
        if not request.owner.owns(existing):
            return DeleteValuesSecretResult(existed=True, foreign=True)
        deleted = await call_or_none(
            f"delete Secret {request.namespace}/{request.name}",
            self._core.delete_namespaced_secret,
            request.name,
            request.namespace,
            body=_only(existing),
        )
        return DeleteValuesSecretResult(existed=deleted is not None)

    # --- Child cluster: namespaces, GPUs, events -------------------------------------------------

    @activity.defn(name=WorkspaceActivity.ENSURE_NAMESPACE)
    @heartbeating
    async def ensure_namespace(self, request: EnsureNamespaceRequest) -> EnsureNamespaceResult:
        """Create the namespace with the owner's marks; one that exists is taken only if it is
        the owner's (an earlier attempt's): a user's own is refused, untouched."""
        core = client.CoreV1Api(await self._child(request.kubeconfig))
        what = f"create namespace {request.name}"
        body = {"metadata": request.owner.mark({"name": request.name, "labels": request.labels})}
        try:
            await call(what, core.create_namespace, body)
        except ApiException as exc:
            if exc.status != 409:
                raise kube_error(exc, what) from exc
            existing = await call_or_none(
                f"read namespace {request.name}", core.read_namespace, request.name
            )
            if existing is None:
                raise kube_error(exc, what) from exc  # deleted in between: the retry creates it
            ownership = request.owner.judge(existing)
            if ownership is not Ownership.OURS:
                raise _foreign("namespace", "", request.name, ownership) from exc
            if (existing.get("metadata") or {}).get("deletionTimestamp"):
                # Ours, still terminating after an earlier delete: the retry creates it anew.
                raise kube_error(exc, f"{what} (the previous one is still being deleted)") from exc
            return EnsureNamespaceResult(created=False)
        return EnsureNamespaceResult(created=True)

    @activity.defn(name=WorkspaceActivity.DELETE_NAMESPACE)
    @heartbeating
    async def delete_namespace(self, request: DeleteNamespaceRequest) -> DeleteNamespaceResult:
        """Delete the namespace if it is the owner's (and, with `wait_until`, wait till it is gone);
        any other of that name, a user's own above all, is left as it is."""
        child = await self._child(request.kubeconfig)
        core = client.CoreV1Api(child)
        existing = await call_or_none(
            f"read namespace {request.name}", core.read_namespace, request.name
        )
        if existing is None:
            return DeleteNamespaceResult(existed=False)
        if not request.owner.owns(existing):
            return DeleteNamespaceResult(existed=True, foreign=True)
        deleted = await call_or_none(
            f"delete namespace {request.name}",
            core.delete_namespace,
            request.name,
            body=_only(existing),
        )
        if request.wait_until is None:
            return DeleteNamespaceResult(existed=deleted is not None)
        namespaces = collection_path("", "v1", "namespaces")
        async with ObjectWatch(child, namespaces, request.name) as watch:
            while (
                found := await call_or_none(
                    f"read namespace {request.name}", core.read_namespace, request.name
                )
            ) is not None and _uid(found) == _uid(existing):
                left = _seconds_until(request.wait_until)
                if left <= 0:
                    return DeleteNamespaceResult(existed=True, gone=False)
                await watch.changed(found, min(POLL_FIRST, left))
        return DeleteNamespaceResult(existed=deleted is not None, gone=True)

    @activity.defn(name=WorkspaceActivity.READ_GPU_INVENTORY)
    @heartbeating
    async def read_gpu_inventory(self, request: ReadGpuInventoryRequest) -> ReadGpuInventoryResult:
        """Every node's GPUs, and the GPUs requested by running pods outside workspace namespaces."""
        core = client.CoreV1Api(await self._child(request.kubeconfig))
        nodes = (await call_or_raise("list nodes", core.list_node)).get("items") or []
        pods = (
            await call_or_raise(
                "list pods",
                core.list_pod_for_all_namespaces,
                field_selector="status.phase!=Succeeded,status.phase!=Failed",
            )
        ).get("items") or []
        foreign: dict[str, int] = {}
        for pod in pods:
            meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
            node = spec.get("nodeName")
            if not node or str(meta.get("namespace", "")).startswith(
                request.workspace_namespace_prefix
            ):
                continue
            for container in spec.get("containers") or []:
                limits = (container.get("resources") or {}).get("limits") or {}
                requested = limits.get("nvidia.com/gpu") or limits.get("amd.com/gpu") or 0
                foreign[node] = foreign.get(node, 0) + int(requested)
        inventory = []
        for node in nodes:
            meta, status = node.get("metadata") or {}, node.get("status") or {}
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or []
            )
            allocatable = {
                key: int(value)
                for key, value in (status.get("allocatable") or {}).items()
                if key.endswith("/gpu") and str(value).isdigit()
            }
            inventory.append(
                gpu_node(
                    str(meta["name"]),
                    dict(meta.get("labels") or {}),
                    allocatable,
                    ready=ready,
                    schedulable=not (node.get("spec") or {}).get("unschedulable"),
                    foreign_used=foreign.get(str(meta["name"]), 0),
                )
            )
        owner = ""
        if request.cluster_deployment:
            deployment = await call_or_none(
                f"read ClusterDeployment {request.cluster_deployment}",
                self._custom.get_namespaced_custom_object,
                *K0RDENT,
                request.kubeconfig.namespace,
                "clusterdeployments",
                request.cluster_deployment,
            )
            owner = cluster_owner_of(deployment or {}, request.cluster_deployment)
        return ReadGpuInventoryResult(
            nodes=sorted(inventory, key=lambda n: n.name), cluster_workflow_id=owner
        )

    @activity.defn(name=WorkspaceActivity.RECENT_EVENTS)
    @heartbeating
    async def recent_events(self, request: RecentEventsRequest) -> RecentEventsResult:
        """The namespace's last events (for a failure's context)."""
        core = client.CoreV1Api(await self._child(request.kubeconfig))
        listed = await call_or_none(
            f"list events in {request.namespace}", core.list_namespaced_event, request.namespace
        )
        events = []
        for event in (listed or {}).get("items") or []:
            involved = event.get("involvedObject") or {}
            seen = event.get("lastTimestamp") or event.get("eventTime") or ""
            events.append(
                EventSummary(
                    type=str(event.get("type") or "Normal"),
                    reason=str(event.get("reason", "")),
                    message=f"{involved.get('kind', '')}/{involved.get('name', '')}: "
                    f"{event.get('message', '')}",
                    last_seen=datetime.fromisoformat(str(seen).replace("Z", "+00:00"))
                    if seen
                    else None,
                )
            )
        events.sort(key=lambda e: e.last_seen or datetime.min.replace(tzinfo=UTC))
        return RecentEventsResult(events=events[-request.limit :])

    # --- Child cluster: the tenant gateway and routes -------------------------------------------

    @activity.defn(name=WorkspaceActivity.FIND_TENANT_GATEWAY)
    @heartbeating
    async def find_tenant_gateway(
        self, request: FindTenantGatewayRequest
    ) -> FindTenantGatewayResult:
        """The cluster's tenant gateway as it is now: the Gateway labelled
        `colony.dev/tenant-gateway=true` in its child (the first by namespace and name when there
        are several), and, with `cluster_deployment`, the domain the ClusterDeployment's label
        `colony.dev/tenant-gateway-domain` attaches the cluster to."""
        expected = await self._attached_domain(request)
        custom = client.CustomObjectsApi(await self._child(request.kubeconfig))
        listed = await call_or_none(
            "list Gateways",
            custom.list_cluster_custom_object,
            GATEWAY_API,
            "v1",
            "gateways",
            label_selector=f"{TENANT_GATEWAY_LABEL}=true",
        )
        items = sorted(
            (listed or {}).get("items") or [],
            key=lambda g: (g["metadata"].get("namespace", ""), g["metadata"]["name"]),
        )
        if not items:
            return FindTenantGatewayResult(expected_domain=expected)
        gateway = items[0]
        meta, spec = gateway["metadata"], gateway.get("spec") or {}
        listeners = spec.get("listeners") or []
        domain = str((meta.get("annotations") or {}).get(DOMAIN_ANNOTATION) or "")
        if not domain:
            hostname = next((str(x.get("hostname")) for x in listeners if x.get("hostname")), "")
            domain = hostname.removeprefix("*.")
        https = any(listener.get("protocol") == "HTTPS" for listener in listeners)
        # The listener HTTPRoutes attach to (sectionName "https" or "http"): a URL must name its
        # port when it is not the scheme's own.
        http_port = next(
            (
                int(listener["port"])
                for listener in listeners
                if listener.get("name") == ("https" if https else "http") and listener.get("port")
            ),
            None,
        )
        pool = sorted(
            int(listener["port"]) for listener in listeners if listener.get("protocol") == "TCP"
        )
        routes = await call_or_none(
            "list TCPRoutes",
            custom.list_cluster_custom_object,
            GATEWAY_API,
            "v1alpha2",
            "tcproutes",
        )
        taken: set[int] = set()
        for route in (routes or {}).get("items") or []:
            for parent in (route.get("spec") or {}).get("parentRefs") or []:
                section = str(parent.get("sectionName") or "")
                if parent.get("name") == meta["name"] and section.startswith("tcp-"):
                    with_port = section.removeprefix("tcp-")
                    if with_port.isdigit():
                        taken.add(int(with_port))
        return FindTenantGatewayResult(
            gateway=GatewayInfo(domain=domain, https=https, tcp_ports=pool, http_port=http_port),
            gateway_namespace=str(meta.get("namespace", "")),
            gateway_name=str(meta["name"]),
            gateway_uid=str(meta.get("uid", "")),
            gateway_generation=int(meta.get("generation") or 0),
            taken_ports=sorted(taken),
            expected_domain=expected,
        )

    async def _attached_domain(self, request: FindTenantGatewayRequest) -> str:
        """The domain the ClusterDeployment's label attaches the cluster to ("" when none)."""
        if not request.cluster_deployment:
            return ""
        deployment = await call_or_none(
            f"read ClusterDeployment {request.cluster_deployment}",
            self._custom.get_namespaced_custom_object,
            *K0RDENT,
            request.kubeconfig.namespace,
            "clusterdeployments",
            request.cluster_deployment,
        )
        labels = ((deployment or {}).get("metadata") or {}).get("labels") or {}
        return str(labels.get(TENANT_GATEWAY_DOMAIN_LABEL) or "")

    @staticmethod
    def _route_body(request: ApplyRoutesRequest, route: RouteSpec) -> Obj:
        version, _ = ROUTE_VERSIONS[route.kind]
        section = (
            route.section_name or "https"
            if route.kind == "HTTPRoute"
            else f"tcp-{route.listener_port}"
        )
        spec: Obj = {
            "parentRefs": [
                {
                    "group": GATEWAY_API,
                    "kind": "Gateway",
                    "name": request.gateway_name,
                    "namespace": request.gateway_namespace,
                    "sectionName": section,
                }
            ],
            "rules": [{"backendRefs": [{"name": route.service, "port": route.port}]}],
        }
        if route.kind == "HTTPRoute":
            spec["hostnames"] = [route.hostname]
        return {
            "apiVersion": f"{GATEWAY_API}/{version}",
            "kind": route.kind,
            "metadata": request.owner.mark(
                {"name": route.name, "namespace": request.namespace, "labels": request.labels}
            ),
            "spec": spec,
        }

    @activity.defn(name=WorkspaceActivity.APPLY_ROUTES)
    @heartbeating
    async def apply_routes(self, request: ApplyRoutesRequest) -> ApplyRoutesResult:
        """Create the routes; one that exists already is brought to the spec asked for when it is
        the owner's (an earlier attempt's, or routes to a Gateway that moved), and refused when it
        is not."""
        custom = client.CustomObjectsApi(await self._child(request.kubeconfig))
        result = ApplyRoutesResult()
        for route in request.routes:
            version, plural = ROUTE_VERSIONS[route.kind]
            what = f"create {route.kind} {request.namespace}/{route.name}"
            body = self._route_body(request, route)
            try:
                await call(
                    what,
                    custom.create_namespaced_custom_object,
                    GATEWAY_API,
                    version,
                    request.namespace,
                    plural,
                    body,
                )
            except ApiException as exc:
                if exc.status != 409:
                    raise kube_error(exc, what) from exc
                existing = await self._get_route(custom, request.namespace, route)
                if existing is None:
                    raise kube_error(exc, what) from exc  # deleted in between: the retry creates it
                ownership = request.owner.judge(existing)
                if ownership is not Ownership.OURS:
                    where = f"{request.namespace}/"
                    raise _foreign(route.kind, where, route.name, ownership) from exc
                if existing.get("spec") != body["spec"]:
                    await call_or_raise(
                        f"update {route.kind} {request.namespace}/{route.name}",
                        custom.patch_namespaced_custom_object,
                        GATEWAY_API,
                        version,
                        request.namespace,
                        plural,
                        route.name,
                        {"metadata": {"labels": body["metadata"]["labels"]}, "spec": body["spec"]},
                        _content_type=MERGE_PATCH,
                    )
                    result.updated.append(route.name)
                continue
            result.created.append(route.name)
        return result

    @staticmethod
    async def _get_route(
        custom: client.CustomObjectsApi, namespace: str, route: RouteSpec
    ) -> Obj | None:
        version, plural = ROUTE_VERSIONS[route.kind]
        return await call_or_none(
            f"read {route.kind} {namespace}/{route.name}",
            custom.get_namespaced_custom_object,
            GATEWAY_API,
            version,
            namespace,
            plural,
            route.name,
        )

    @activity.defn(name=WorkspaceActivity.AWAIT_ROUTES)
    @heartbeating
    async def await_routes(self, request: AwaitRoutesRequest) -> AwaitRoutesResult:
        """Wait until the gateway's controller has answered for every route's current spec (or
        the deadline), and report each: accepted, or why not. A route refused for good (its
        Service missing: `BackendNotFound`) is an answer, not a reason to wait on."""
        custom = client.CustomObjectsApi(await self._child(request.kubeconfig))
        pause = POLL_FIRST
        while True:
            states = []
            for route in request.routes:
                obj = await self._get_route(custom, request.namespace, route)
                if obj is None or not request.owner.owns(obj):
                    states.append(
                        RouteState(
                            name=route.name,
                            settled=True,
                            reason="RouteNotFound",
                            message=f"{route.kind} {request.namespace}/{route.name} not found",
                        )
                    )
                    continue
                states.append(route_state(route.name, obj))
            result = AwaitRoutesResult(routes=states, all_accepted=all(s.accepted for s in states))
            report(result)
            left = _seconds_until(request.deadline)
            if all(s.settled for s in states) or left <= 0:
                return result
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, POLL_CAP)

    @activity.defn(name=WorkspaceActivity.DELETE_ROUTES)
    @heartbeating
    async def delete_routes(self, request: DeleteRoutesRequest) -> DeleteRoutesResult:
        """Delete the routes that are the owner's; any other of those names is left alone."""
        custom = client.CustomObjectsApi(await self._child(request.kubeconfig))
        result = DeleteRoutesResult()
        for route in request.routes:
            existing = await self._get_route(custom, request.namespace, route)
            if existing is None or not request.owner.owns(existing):
                continue
            version, plural = ROUTE_VERSIONS[route.kind]
            deleted = await call_or_none(
                f"delete {route.kind} {request.namespace}/{route.name}",
                custom.delete_namespaced_custom_object,
                GATEWAY_API,
                version,
                request.namespace,
                plural,
                route.name,
                body=_only(existing),
            )
            if deleted is not None:
                result.deleted.append(route.name)
        return result
