"""Activities on the management cluster for clusters: k0rdent's ClusterTemplates, Credentials and
ClusterDeployments, and a colony's kubeconfigs Secret.

`ClusterDeploymentActivities` receives an `ApiClient` for the management cluster (built by
`worker.py` from the kubeconfig named in the settings) and is called by `ClusterWorkflow` and
`ColonyWorkflow` through the declarations in `workflows.cluster_calls`. Every method is idempotent: creates tolerate an existing object
that is ours, deletes tolerate absence, and machine changes are read-modify-write with the
object's resourceVersion, so a lost answer or a concurrent writer never applies a change twice.

Ownership: what Colony creates carries its cluster's owner key (`colony.dev/owner`: workflow id and
first run id); a delete only touches an object with the key it is given, so a cluster never deletes
a ClusterDeployment it did not create (a name taken by someone else, or an earlier cluster's).

`await_cluster_deployment` is the one long wait here: it polls inside a heartbeating activity and
returns when the conditions change, the deployment is ready, failed or gone, or at the deadline.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from activities.addresses import SecretAddress
from activities.declarations import cluster_calls, implements
from activities.errors import kube_error
from activities.heartbeat import report
from activities.kube import call, call_or_none, call_or_raise
from activities.objects import (
    CLUSTER_DEPLOYMENT,
    CLUSTER_TEMPLATE,
    CREDENTIAL,
    K0RDENT,
    delete_owned,
    only,
)
from infra.kube import Obj
from models.activity_api import (
    CLUSTER_LABEL,
    OWNER_ANNOTATION,
    TENANT_GATEWAY_DOMAIN_LABEL,
    WORKFLOW_ID_LABEL,
    AddClusterMachinesRequest,
    AwaitClusterDeploymentRequest,
    AwaitClusterDeploymentResult,
    CheckClusterPrerequisitesRequest,
    CheckClusterPrerequisitesResult,
    ClusterMachinesResult,
    Condition,
    CreateClusterDeploymentRequest,
    CreateClusterDeploymentResult,
    DeleteClusterDeploymentRequest,
    DeleteClusterDeploymentResult,
    DeploymentOutcome,
    DeploymentWait,
    GetClusterDeploymentStatusResult,
    RemoveClusterMachinesRequest,
)
from models.colony import (
    WriteColonyKubeconfigsRequest,
    WriteColonyKubeconfigsResult,
    kubeconfig_reference,
)
from models.errors import ErrorType, permanent
from models.ownership import Owner, Ownership, refusal
from models.templates import (
    TemplatePool,
    config_problems,
    merged_values,
    schema_problem,
    template_pool,
)

GROUP, VERSION = K0RDENT
API_VERSION = f"{GROUP}/{VERSION}"

WORKFLOW_ID_ANNOTATION = WORKFLOW_ID_LABEL
COLONY_LABEL = "colony.dev/colony"
"""Label on a colony's kubeconfigs Secret: the colony's name."""
"""The owning workflow id verbatim; the label holds it label-safe ("cluster/x" -> "cluster.x")."""

MACHINE_UPDATE_ATTEMPTS = 5
"""Read-modify-write attempts on a resourceVersion conflict before leaving it to the retry policy."""
POLL_FIRST = 1.0
POLL_CAP = 1.0
"""Seconds between looks at a ClusterDeployment while waiting: every second, so the workflow goes
on within a second of it turning Ready. Polls cost the workflow's history nothing (they happen
inside the activity), and one GET a second per cluster being created is nothing to an API server."""
SCHEMA_KEY = "schema"
"""The key of a template's values schema in its ConfigMap (KCM's)."""
FAILED_REASON = "Failed"
"""KCM's reason on the Ready condition when a step failed (a missing credential, a failed release)."""


def conditions_of(obj: Obj) -> list[Obj]:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return [c for c in conditions if isinstance(c, dict)]


def condition(obj: Obj, type_: str) -> Obj | None:
    return next((c for c in conditions_of(obj) if c.get("type") == type_), None)


def _condition_key(conditions: list[Condition]) -> list[tuple[str, str, str]]:
    # Messages carry counters and timestamps; a change worth a return changes status or reason.
    return sorted((c.type, c.status, c.reason) for c in conditions)


def _owner_of(obj: Obj) -> str:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(OWNER_ANNOTATION) or "")


def label_safe(value: str) -> str:
    """A workflow id as a label value: label values may not contain "/" (cluster names have no ".")."""
    return value.replace("/", ".")[:63].strip("-_.")


def _machine_key(machine: dict[str, Any]) -> tuple[str, int]:
    return str(machine.get("address", "")), int(machine.get("port") or 22)


def _machines(obj: Obj) -> list[dict[str, Any]]:
    machines = ((obj.get("spec") or {}).get("config") or {}).get("machines") or []
    return [m for m in machines if isinstance(m, dict)]


def _removes(addresses: list[str]) -> Callable[[dict[str, Any]], bool]:
    """Whether a machine is named by `addresses`: "address" names every machine at that address,
    "address:port" only the one behind that SSH port (hosts behind one bastion share an address)."""
    exact = set()
    plain = set()
    for entry in addresses:
        host, sep, port = entry.rpartition(":")
        if sep and port.isdigit() and "." in host:
            exact.add((host, int(port)))
        else:
            plain.add(entry)
    return lambda m: _machine_key(m) in exact or _machine_key(m)[0] in plain


class ClusterDeploymentActivities:
    """k0rdent objects on the management cluster, through the official client."""

    def __init__(self, management_api: client.ApiClient) -> None:
        self._custom = client.CustomObjectsApi(management_api)

    # --- reads -------------------------------------------------------------------------------

    async def _get_deployment(self, namespace: str, name: str) -> Obj | None:
        return await CLUSTER_DEPLOYMENT.at(self._custom, namespace, name).read()

    @implements(cluster_calls.CHECK_CLUSTER_PREREQUISITES)
    async def check_cluster_prerequisites(
        self, request: CheckClusterPrerequisitesRequest
    ) -> CheckClusterPrerequisitesResult:
        """Facts about the ClusterTemplate and the Credential, and (given a config) whether the
        config satisfies the template's own values schema and which pool its MachineDeployment is;
        the workflow decides what they mean."""
        template = await CLUSTER_TEMPLATE.at(
            self._custom, request.namespace, request.template
        ).read()
        config_problems: list[str] = []
        pool = None
        if template is not None and request.config is not None:
            config_problems, pool = await self._check_config(
                request.namespace, template, request.config
            )
        credential = await CREDENTIAL.at(self._custom, request.namespace, request.credential).read()
        template_status = (template or {}).get("status") or {}
        credential_status = (credential or {}).get("status") or {}
        ready_condition = condition(credential or {}, "CredentialReady") or {}
        return CheckClusterPrerequisitesResult(
            template_found=template is not None,
            template_valid=bool(template_status.get("valid")),
            template_message=str(
                template_status.get("validationError")
                or ("" if template_status.get("valid") else "not validated yet")
            )
            if template is not None
            else "",
            credential_found=credential is not None,
            credential_ready=bool(credential_status.get("ready")),
            credential_message=str(ready_condition.get("message") or "")
            if credential is not None and not credential_status.get("ready")
            else "",
            config_problems=config_problems,
            template_pool=pool,
        )

    async def _check_config(
        self, namespace: str, template: Obj, config: dict[str, Any]
    ) -> tuple[list[str], TemplatePool | None]:
        """The config against the template's values schema (KCM's ConfigMap
        `status.schemaConfigMapName`, key `schema`, over the template's default `status.config`);
        a template without one has no schema to satisfy and no pool Colony can size."""
        status = template.get("status") or {}
        schema_name = str(status.get("schemaConfigMapName") or "")
        if not schema_name:
            return [], None
        core = client.CoreV1Api(self._custom.api_client)
        what = f"read the values schema ConfigMap {namespace}/{schema_name}"
        config_map = await call_or_none(
            what, core.read_namespaced_config_map, schema_name, namespace
        )
        text = ((config_map or {}).get("data") or {}).get(SCHEMA_KEY)
        if not text:
            return [
                f"config: the template's values schema ({namespace}/{schema_name}) is missing"
            ], None
        try:
            schema = json.loads(text)
        except ValueError as error:
            return [f"config: the template's values schema is not JSON: {error}"], None
        problem = schema_problem(schema)
        if problem:
            return [f"config: {problem}"], None
        defaults = status.get("config") if isinstance(status.get("config"), dict) else {}
        problems = config_problems(schema, config, defaults)
        return problems, template_pool(schema, merged_values(defaults or {}, config))

    async def _status(
        self, namespace: str, name: str, owner: Owner | None = None
    ) -> GetClusterDeploymentStatusResult:
        obj = await self._get_deployment(namespace, name)
        if obj is None or (owner is not None and not owner.owns(obj)):
            # Not the owner's: as far as the caller may know, there is none (never a word of
            # whose it is: it may be another organization's).
            return GetClusterDeploymentStatusResult(exists=False)
        meta = obj.get("metadata") or {}
        ready = condition(obj, "Ready") or {}
        return GetClusterDeploymentStatusResult(
            exists=True,
            ready=ready.get("status") == "True",
            generation=int(meta.get("generation") or 0),
            observed_generation=int((obj.get("status") or {}).get("observedGeneration") or 0),
            deleting=bool(meta.get("deletionTimestamp")),
            conditions=[
                Condition(
                    type=str(c.get("type", "")),
                    status=str(c.get("status", "Unknown")),
                    reason=str(c.get("reason") or ""),
                    message=str(c.get("message") or ""),
                )
                for c in conditions_of(obj)
            ],
            machine_addresses=[str(m.get("address", "")) for m in _machines(obj)],
        )

    @implements(cluster_calls.AWAIT_CLUSTER_DEPLOYMENT)
    async def await_cluster_deployment(
        self, request: AwaitClusterDeploymentRequest
    ) -> AwaitClusterDeploymentResult:
        """Wait until the ClusterDeployment is what the request wants, fails, changes, or the
        deadline passes (see `AwaitClusterDeploymentRequest`)."""
        known = _condition_key(request.known_conditions)
        pause = POLL_FIRST
        while True:
            status = await self._status(request.namespace, request.name, request.owner)
            report(status)
            outcome = self._outcome(request.want, status, known)
            left = (request.deadline - datetime.now(UTC)).total_seconds()
            if outcome is None and left <= 0:
                outcome = DeploymentOutcome.DEADLINE
            if outcome is not None:
                return AwaitClusterDeploymentResult(outcome=outcome, status=status)
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, POLL_CAP)

    @staticmethod
    def _outcome(
        want: DeploymentWait,
        status: GetClusterDeploymentStatusResult,
        known: list[tuple[str, str, str]],
    ) -> DeploymentOutcome | None:
        if not status.exists:
            return DeploymentOutcome.GONE
        if want is DeploymentWait.READY:
            current = status.observed_generation == status.generation
            if status.ready and current:
                return DeploymentOutcome.READY
            ready = next((c for c in status.conditions if c.type == "Ready"), None)
            if ready is not None and ready.status == "False" and ready.reason == FAILED_REASON:
                return DeploymentOutcome.FAILED
        if _condition_key(status.conditions) != known:
            return DeploymentOutcome.CHANGED
        return None

    # --- writes ------------------------------------------------------------------------------

    @staticmethod
    def _body(request: CreateClusterDeploymentRequest) -> Obj:
        """The ClusterDeployment of k0rdent's SSH "remote-cluster" template over claimed hosts.

        `spec.config` holds the template chart's values (remote-cluster values.yaml): the machines
        reached over SSH, the cluster's networks and labels, and the k0s version.
        """
        if request.deployment_spec is not None:
            # Given as is (an exalsius Colony entry): its template builds the cluster.
            spec: Obj = dict(request.deployment_spec)
        else:
            spec = {
                "template": request.template,
                "credential": request.credential,
                "propagateCredentials": True,
                "config": {
                    "clusterLabels": {CLUSTER_LABEL: request.name},
                    "clusterNetwork": {
                        "pods": {"cidrBlocks": [request.pod_cidr]},
                        "services": {"cidrBlocks": [request.service_cidr]},
                    },
                    "k0s": {"version": request.kubernetes_version},
                    "k0smotron": {"service": {"type": "LoadBalancer"}},
                    "machines": [m.model_dump(mode="json") for m in request.machines],
                },
            }
        owner = Owner(workflow_id=request.workflow_id, organization=request.organization)
        return {
            "apiVersion": API_VERSION,
            "kind": "ClusterDeployment",
            "metadata": owner.mark(
                {
                    "name": request.name,
                    "namespace": request.namespace,
                    "labels": {
                        **request.labels,
                        CLUSTER_LABEL: request.name,
                        WORKFLOW_ID_LABEL: label_safe(request.workflow_id),
                        **(
                            {TENANT_GATEWAY_DOMAIN_LABEL: request.tenant_gateway_domain}
                            if request.tenant_gateway_domain
                            else {}
                        ),
                    },
                    "annotations": {
                        **request.annotations,
                        **({OWNER_ANNOTATION: request.owner} if request.owner else {}),
                    },
                }
            ),
            "spec": spec,
        }

    @implements(cluster_calls.CREATE_CLUSTER_DEPLOYMENT)
    async def create_cluster_deployment(
        self, request: CreateClusterDeploymentRequest
    ) -> CreateClusterDeploymentResult:
        """Create the ClusterDeployment; one that exists already is success when it is ours."""
        what = f"create ClusterDeployment {request.namespace}/{request.name}"
        try:
            created = await call(
                what,
                self._custom.create_namespaced_custom_object,
                GROUP,
                VERSION,
                request.namespace,
                "clusterdeployments",
                self._body(request),
            )
            return CreateClusterDeploymentResult(
                created=True, generation=int(created.get("metadata", {}).get("generation") or 1)
            )
        except ApiException as exc:
            if exc.status != 409:
                raise kube_error(exc, what) from exc
            conflict = exc
        existing = await self._get_deployment(request.namespace, request.name)
        if existing is None:
            # Deleted between our create and our read: a retry will create it.
            raise kube_error(conflict, what) from conflict
        meta = existing.get("metadata") or {}
        workflow_id = (meta.get("annotations") or {}).get(WORKFLOW_ID_ANNOTATION)
        owner = _owner_of(existing)
        ours = owner == request.owner if request.owner else workflow_id == request.workflow_id
        if not ours:
            raise permanent(
                ErrorType.INVALID_SPEC,
                f"ClusterDeployment {request.namespace}/{request.name} already exists and is not "
                f"this cluster's (owner: {owner or workflow_id or 'none'})",
            ) from conflict
        if meta.get("deletionTimestamp"):
            # Ours, but an earlier cluster of the same name is still being torn down.
            raise kube_error(conflict, f"{what} (the previous one is still being deleted)")
        return CreateClusterDeploymentResult(
            created=False, generation=int(meta.get("generation") or 1)
        )

    async def _update_machines(
        self, namespace: str, name: str, change: Callable[[list[dict[str, Any]]], list[Any]]
    ) -> ClusterMachinesResult:
        """Read-modify-write of `spec.config.machines`, guarded by resourceVersion."""
        what = f"update machines of ClusterDeployment {namespace}/{name}"
        for attempt in range(MACHINE_UPDATE_ATTEMPTS):
            obj = await self._get_deployment(namespace, name)
            if obj is None:
                raise permanent(
                    ErrorType.NOT_FOUND, f"ClusterDeployment {namespace}/{name} not found"
                )
            current = _machines(obj)
            wanted = change(current)
            if wanted == current:
                return ClusterMachinesResult(
                    machine_addresses=[str(m.get("address")) for m in current],
                    generation=int(obj["metadata"].get("generation") or 0),
                )
            patch = {
                "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                "spec": {"config": {"machines": wanted}},
            }
            try:
                updated = await call(
                    what,
                    self._custom.patch_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    namespace,
                    "clusterdeployments",
                    name,
                    patch,
                    _content_type="application/merge-patch+json",
                )
            except ApiException as exc:
                if exc.status == 409 and attempt + 1 < MACHINE_UPDATE_ATTEMPTS:
                    continue  # someone wrote in between: read again and reapply the change
                raise kube_error(exc, what) from exc
            return ClusterMachinesResult(
                machine_addresses=[str(m.get("address")) for m in _machines(updated)],
                generation=int(updated["metadata"].get("generation") or 0),
            )
        raise AssertionError("unreachable")  # pragma: no cover

    @implements(cluster_calls.ADD_CLUSTER_MACHINES)
    async def add_cluster_machines(
        self, request: AddClusterMachinesRequest
    ) -> ClusterMachinesResult:
        """Append machines not present yet (by address and SSH port)."""

        def add(current: list[dict[str, Any]]) -> list[Any]:
            present = {_machine_key(m) for m in current}
            new = [
                m.model_dump(mode="json")
                for m in request.machines
                if (m.address, m.port) not in present
            ]
            return [*current, *new]

        return await self._update_machines(request.namespace, request.name, add)

    @implements(cluster_calls.REMOVE_CLUSTER_MACHINES)
    async def remove_cluster_machines(
        self, request: RemoveClusterMachinesRequest
    ) -> ClusterMachinesResult:
        """Remove machines by address ("address:port" for one behind a shared bastion)."""
        removes = _removes(request.addresses)

        def remove(current: list[dict[str, Any]]) -> list[Any]:
            return [m for m in current if not removes(m)]

        return await self._update_machines(request.namespace, request.name, remove)

    @implements(cluster_calls.DELETE_CLUSTER_DEPLOYMENT)
    async def delete_cluster_deployment(
        self, request: DeleteClusterDeploymentRequest
    ) -> DeleteClusterDeploymentResult:
        """Delete the ClusterDeployment (k0rdent's finalizer then tears the cluster down)."""
        deletion = await delete_owned(
            lambda existing: not request.owner or _owner_of(existing) == request.owner,
            CLUSTER_DEPLOYMENT.at(self._custom, request.namespace, request.name),
        )
        return deletion.result(DeleteClusterDeploymentResult)

    @implements(cluster_calls.WRITE_COLONY_KUBECONFIGS)
    async def write_colony_kubeconfigs(
        self, request: WriteColonyKubeconfigsRequest
    ) -> WriteColonyKubeconfigsResult:
        """Write the colony's kubeconfigs Secret in the exalsius operator's shape (ClusterDeployment
        -> a JSON ObjectReference to its kubeconfig Secret), or delete it
        when the colony has no cluster left; one of that name that is not the colony's is refused
        (`ForeignObject`) and never deleted."""
        core = client.CoreV1Api(self._custom.api_client)
        what = f"write Secret {request.namespace}/{request.name}"
        secret = SecretAddress(core, request.namespace, request.name)
        existing = await secret.read()
        ownership = request.owner.judge(existing) if existing is not None else None
        if not request.clusters:
            if existing is not None and ownership is Ownership.OURS:
                await secret.delete(only(existing))
            return WriteColonyKubeconfigsResult(written=False)
        if ownership is not None and ownership is not Ownership.OURS:
            raise permanent(
                ErrorType.FOREIGN_OBJECT,
                refusal("Secret", f"{request.namespace}/", request.name, ownership),
            )
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": request.owner.mark(
                {
                    "name": request.name,
                    "namespace": request.namespace,
                    "labels": {COLONY_LABEL: request.colony},
                }
            ),
            "type": "Opaque",
            "stringData": {
                deployment: kubeconfig_reference(secret)
                for deployment, secret in sorted(request.clusters.items())
            },
        }
        if existing is None:
            try:
                await call(what, core.create_namespaced_secret, request.namespace, body)
                return WriteColonyKubeconfigsResult(written=True)
            except ApiException as exc:
                # Created in between: read and judged again on the retry.
                raise kube_error(exc, what) from exc
        body["metadata"]["resourceVersion"] = existing["metadata"].get("resourceVersion")
        await call_or_raise(
            what, core.replace_namespaced_secret, request.name, request.namespace, body
        )
        return WriteColonyKubeconfigsResult(written=True)
