"""Activities on the management cluster for the workspace class catalog: WorkspaceClasses, the
objects a class needs (ServiceTemplates, HelmRepositories) and the check of a ServiceTemplate.

`WorkspaceClassActivities` receives the management cluster's `ApiClient`; `worker.py` registers its
methods. Called by `CatalogWorkflow` (publishing, listing) and `WorkspaceWorkflow` (its class, its
templates) through the declarations in `workflows.workspace_calls`.

Whose a class is: the shared catalog's (no organization mark) or one organization's own, stored
under a name derived from both (`models.identity`) with the catalog workflow's marks; a name of one
never finds the other's (`class_organization`). Publishing is idempotent: objects that exist are
left as they are, and a class of the same name with another definition is refused
(`ClassConflict`: classes are immutable).
"""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError

from activities.declarations import implements, workspace_calls
from activities.errors import kube_error
from activities.kube import call, call_or_none
from activities.objects import SERVICE_TEMPLATE
from infra.kube import Obj
from models import workspace_api
from models.errors import ErrorType, permanent
from models.identity import workspace_class_object_name
from models.manifests import EXALSIUS_WORKSPACES, workspace_class_object
from models.ownership import MANAGED_BY, MANAGED_BY_LABEL, ORGANIZATION_LABEL, Owner
from models.workspace_class import WorkspaceClassSpec, class_conflict

EXALSIUS = tuple(EXALSIUS_WORKSPACES.split("/"))
"""Group and version of the stored WorkspaceClasses (the apiVersion `workspace_class_object` writes)."""
PLURALS = {
    "ServiceTemplate": "servicetemplates",
    "HelmRepository": "helmrepositories",
    "WorkspaceClass": "workspaceclasses",
}


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
    name = str(annotations.get(workspace_api.CLASS_NAME_ANNOTATION) or "")
    owner = Owner(workflow_id=workspace_api.CATALOG_WORKFLOW_ID, organization=organization)
    if not owner.owns(obj) or meta.get("name") != workspace_class_object_name(organization, name):
        return None
    return organization


def _class_body(spec: WorkspaceClassSpec, organization: str) -> Obj:
    """The stored class: shared under its name; an organization's under its derived name, with
    the catalog workflow's marks for that organization and the class name annotated."""
    if not organization:
        return workspace_class_object(spec, {MANAGED_BY_LABEL: MANAGED_BY})
    owner = Owner(workflow_id=workspace_api.CATALOG_WORKFLOW_ID, organization=organization)
    return workspace_class_object(
        spec,
        owner.labels(),
        name=workspace_class_object_name(organization, spec.name),
        annotations={**owner.annotations(), workspace_api.CLASS_NAME_ANNOTATION: spec.name},
    )


class WorkspaceClassActivities:
    """WorkspaceClasses and the objects they need, through the official client."""

    def __init__(self, management_api: client.ApiClient) -> None:
        self._custom = client.CustomObjectsApi(management_api)

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
        name = (meta.get("annotations") or {}).get(workspace_api.CLASS_NAME_ANNOTATION) or meta[
            "name"
        ]
        return WorkspaceClassSpec.model_validate({**(obj.get("spec") or {}), "name": name})

    async def _class_object(self, organization: str, name: str) -> Obj | None:
        """The object of `organization`'s class `name` ("" the shared catalog's), when its marks
        say it is that: a shared name never finds an organization's class, nor the reverse."""
        obj = await self._get_class_object(workspace_class_object_name(organization, name))
        if obj is None or class_organization(obj) != organization:
            return None
        return obj

    @implements(workspace_calls.GET_WORKSPACE_CLASS)
    async def get_workspace_class(
        self, request: workspace_api.GetWorkspaceClassRequest
    ) -> workspace_api.GetWorkspaceClassResult:
        """The class of that exact name the organization sees (its own, else the shared
        catalog's), or `found=False`."""
        obj = None
        if request.organization:
            obj = await self._class_object(request.organization, request.name)
        if obj is None:
            obj = await self._class_object("", request.name)
        if obj is None:
            return workspace_api.GetWorkspaceClassResult(found=False)
        try:
            return workspace_api.GetWorkspaceClassResult(found=True, spec=self._class_of(obj))
        except ValidationError as exc:
            return workspace_api.GetWorkspaceClassResult(
                found=True, problem=str(exc.errors()[0]["msg"])
            )

    @implements(workspace_calls.LIST_WORKSPACE_CLASSES)
    async def list_workspace_classes(
        self, request: workspace_api.ListWorkspaceClassesRequest
    ) -> workspace_api.ListWorkspaceClassesResult:
        """Every stored class, the shared catalog's and each organization's own (those that do
        not validate are named with their problem; objects whose marks contradict their name are
        no one's class)."""
        listed = await call_or_none(
            "list WorkspaceClasses",
            self._custom.list_cluster_custom_object,
            *EXALSIUS,
            "workspaceclasses",
        )
        result = workspace_api.ListWorkspaceClassesResult()
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

    @implements(workspace_calls.PUBLISH_WORKSPACE_CLASS)
    async def publish_workspace_class(
        self, request: workspace_api.PublishWorkspaceClassRequest
    ) -> workspace_api.PublishWorkspaceClassResult:
        """Create the class's objects (ServiceTemplates ...) when absent, then the class; refuse a
        class of the same name with another definition (`ClassConflict`). An organization's own
        class is stored under its derived name with its marks; it publishes no objects and may not
        take a shared class's name."""
        spec, organization = request.spec, request.organization
        result = workspace_api.PublishWorkspaceClassResult(created=False)
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
        published = await self._publish(request.objects)
        result.objects_created, result.objects_skipped = published.created, published.skipped
        if existing is None:
            result.created = await self._create_if_absent(_class_body(spec, organization))
        return result

    @implements(workspace_calls.PUBLISH_OBJECTS)
    async def publish_objects(
        self, request: workspace_api.PublishObjectsRequest
    ) -> workspace_api.PublishObjectsResult:
        """Create each object unless one of that name exists (then it is left as it is)."""
        return await self._publish(request.objects)

    async def _publish(self, objects: list[Obj]) -> workspace_api.PublishObjectsResult:
        """Create each object unless one of that name exists. A kind the cluster does not serve
        (Flux's HelmRepository on a bare cluster) is reported, not fatal: a class's templates say
        where their charts come from."""
        result = workspace_api.PublishObjectsResult()
        for obj in objects:
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

    @implements(workspace_calls.CHECK_SERVICE_TEMPLATE)
    async def check_service_template(
        self, request: workspace_api.CheckServiceTemplateRequest
    ) -> workspace_api.CheckServiceTemplateResult:
        """Does the ServiceTemplate exist, and is it valid (k0rdent's `status.valid`)?"""
        obj = await SERVICE_TEMPLATE.at(self._custom, request.namespace, request.name).read()
        if obj is None:
            return workspace_api.CheckServiceTemplateResult(found=False)
        status = obj.get("status") or {}
        return workspace_api.CheckServiceTemplateResult(
            found=True,
            valid=bool(status.get("valid")),
            message=str(
                status.get("validationError")
                or ("" if status.get("valid") else "not validated yet")
            ),
        )
