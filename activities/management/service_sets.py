"""Activities on the management cluster for installing workspaces: k0rdent ServiceSets, and the
values Secrets their services read.

`ServiceSetActivities` receives the management cluster's `ApiClient` and the worker's `Unsealer`
(None: a worker without the sealing key refuses secret values); `worker.py` registers its methods.
Called by `WorkspaceWorkflow` and `PrerequisiteWorkflow` through the declarations in
`workflows.workspace_calls`.

Ownership (`models.ownership`): everything created here carries its owner's marks, and an object
of the name asked for is only ever taken over, changed, waited on or deleted when it is that
owner's; another's is refused on create (`ForeignObject`, naming it) and left alone on delete.
Every method is idempotent: creates tolerate an existing object that is ours (and bring it to what
is asked), deletes tolerate absence. The waits (`await_service_set`, `delete_service_set` with
`wait_until`) look inside the activity, heartbeating, and react to the ServiceSet's next change
through a watch, polling only as a fallback (`activities.watch`): a deleted workspace's ServiceSet
is seen gone the moment k0rdent lets it go, not at the next second's look.

Secret prompt values arrive sealed and are unsealed only in `write_values_secret`, straight into
the Secret: they never appear in a result, a log line or workflow history.
"""

from __future__ import annotations

import base64

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from activities.addresses import CustomObjectAddress, SecretAddress
from activities.declarations import implements, workspace_calls
from activities.errors import kube_error
from activities.heartbeat import report
from activities.kube import call, call_or_none, call_or_raise
from activities.objects import (
    K0RDENT,
    SERVICE_SET,
    delete_owned,
    dicts,
    foreign,
    seconds_until,
)
from activities.watch import ObjectWatch
from infra.kube import MERGE_PATCH, Obj
from infra.sealing import SealingError, Unsealer, unseal_secret_values
from models.errors import ErrorType, permanent
from models.ownership import Ownership
from models.workspace import ServiceSetStatusSummary, ServiceStateSummary
from models.workspace_api import (
    PREREQUISITE_LABEL,
    ApplyServiceSetRequest,
    ApplyServiceSetResult,
    AwaitServiceSetRequest,
    AwaitServiceSetResult,
    DeleteServiceSetRequest,
    DeleteServiceSetResult,
    DeleteValuesSecretRequest,
    DeleteValuesSecretResult,
    FindServiceSetsRequest,
    FindServiceSetsResult,
    FoundServiceSet,
    ServiceSetOutcome,
    WriteValuesSecretRequest,
    WriteValuesSecretResult,
)

SVELTOS = "ksm-projectsveltos"
"""The StateManagementProvider k0rdent installs services with (Sveltos)."""
POLL_FIRST = 1.0
POLL_CAP = 2.0
"""Seconds between looks while waiting: 1 s, then every 2 s (free for the workflow's history)."""


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
    conditions = list(dicts(status.get("conditions")))
    for service in dicts(status.get("services")):
        conditions += dicts(service.get("conditions"))
    observed = [
        c["observedGeneration"] for c in conditions if isinstance(c.get("observedGeneration"), int)
    ]
    return not observed or max(observed) >= generation


class ServiceSetActivities:
    """ServiceSets and values Secrets on the management cluster, through the official client."""

    def __init__(self, management_api: client.ApiClient, unsealer: Unsealer | None = None) -> None:
        self._core = client.CoreV1Api(management_api)
        self._custom = client.CustomObjectsApi(management_api)
        self._unsealer = unsealer

    def _service_set(self, namespace: str, name: str) -> CustomObjectAddress:
        return SERVICE_SET.at(self._custom, namespace, name)

    def _secret(self, namespace: str, name: str) -> SecretAddress:
        return SecretAddress(self._core, namespace, name)

    @implements(workspace_calls.APPLY_SERVICE_SET)
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
        existing = await self._service_set(request.namespace, request.name).read()
        if existing is None:
            raise permanent(
                ErrorType.NOT_FOUND, f"ServiceSet {request.namespace}/{request.name} vanished"
            )
        ownership = request.owner.judge(existing)
        if ownership is not Ownership.OURS:
            raise foreign("ServiceSet", f"{request.namespace}/", request.name, ownership)
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

    @implements(workspace_calls.AWAIT_SERVICE_SET)
    async def await_service_set(self, request: AwaitServiceSetRequest) -> AwaitServiceSetResult:
        """Wait until the service is Deployed or Failed, its state changes, or the deadline; each
        pause ends early at the ServiceSet's next change (`activities.watch`)."""
        service_set = self._service_set(request.namespace, request.name)
        async with service_set.watch() as watch:
            return await self._await_service_set(request, service_set, watch)

    async def _await_service_set(
        self,
        request: AwaitServiceSetRequest,
        service_set: CustomObjectAddress,
        watch: ObjectWatch,
    ) -> AwaitServiceSetResult:
        pause = POLL_FIRST
        while True:
            obj = await service_set.read()
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
            left = seconds_until(request.deadline)
            if outcome is None and left <= 0:
                outcome = ServiceSetOutcome.DEADLINE
            if outcome is not None:
                return AwaitServiceSetResult(
                    outcome=outcome, status=summary, state=state, message=message
                )
            await watch.changed(obj, min(pause, left))
            pause = min(pause * 2, POLL_CAP)

    @implements(workspace_calls.DELETE_SERVICE_SET)
    async def delete_service_set(self, request: DeleteServiceSetRequest) -> DeleteServiceSetResult:
        """Delete the ServiceSet if it is the owner's (k0rdent uninstalls its releases first);
        optionally wait till gone. Another's of that name is left alone."""
        # Gone is what frees the workspace's GPUs for the next in line: seen at the ServiceSet's
        # DELETED event (k0rdent removes its finalizer once the releases are uninstalled), with
        # a look every second as the fallback.
        deletion = await delete_owned(
            request.owner.owns,
            self._service_set(request.namespace, request.name),
            wait_until=request.wait_until,
            pause=POLL_FIRST,
        )
        return deletion.result(DeleteServiceSetResult)

    @implements(workspace_calls.FIND_SERVICE_SETS)
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

    @implements(workspace_calls.WRITE_VALUES_SECRET)
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
            existing = await self._secret(request.namespace, request.name).read()
            if existing is None:
                raise kube_error(exc, what) from exc  # deleted in between: the retry creates it
            ownership = request.owner.judge(existing)
            if ownership is not Ownership.OURS:
                raise foreign("Secret", f"{request.namespace}/", request.name, ownership) from exc
            body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            await call_or_raise(
                what, self._core.replace_namespaced_secret, request.name, request.namespace, body
            )
        return WriteValuesSecretResult(keys=len(request.secret_values))

    @implements(workspace_calls.DELETE_VALUES_SECRET)
    async def delete_values_secret(
        self, request: DeleteValuesSecretRequest
    ) -> DeleteValuesSecretResult:
        """Delete the values Secret if it is the owner's; another's is left alone."""
        secret = self._secret(request.namespace, request.name)
        deletion = await delete_owned(request.owner.owns, secret)
        return deletion.result(DeleteValuesSecretResult)
