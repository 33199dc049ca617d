"""Activities on the management cluster for a template pool: the Cluster API MachineDeployment a
cloud template renders, sized by the ClusterDeployment's `spec.config.workersNumber`, and its
Machines.

`MachineActivities` receives the management cluster's `ApiClient` (built by `worker.py`) and is
called by `ClusterWorkflow`'s machine-deployment supply (`workflows.cluster.supply`) through the
declarations in `workflows.cluster_calls`. Every method is idempotent:
- `scale_machine_deployment` is a read-modify-write guarded by the object's resourceVersion, and
  compares what it finds with what Colony last set: a value changed outside Colony is reported
  (`WorkersChangedOutside`), never written over; a scale-down's write never raises the value;
- `mark_machines` puts or takes off annotations (a second call finds them as wanted), and only on
  Machines labelled with the cluster's name: a Machine of another cluster is never touched;
- `await_machines` reads only, polling inside one heartbeating activity.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from activities.declarations import cluster_calls, implements
from activities.errors import kube_error
from activities.heartbeat import report
from activities.kube import call, call_or_raise
from activities.objects import CLUSTER_DEPLOYMENT, K0RDENT, seconds_until
from infra.kube import Obj
from models.activity_api import (
    DELETE_MACHINE_ANNOTATION,
    MACHINE_CLUSTER_LABEL,
    OWNER_ANNOTATION,
    PRE_DRAIN_HOOK,
    AwaitMachinesRequest,
    AwaitMachinesResult,
    MachineInfo,
    MarkMachinesRequest,
    MarkMachinesResult,
    ScaleMachineDeploymentRequest,
    ScaleMachineDeploymentResult,
)
from models.errors import ErrorType, permanent
from models.templates import WORKERS_FIELD

CAPI = ("cluster.x-k8s.io", "v1beta2")
UPDATE_ATTEMPTS = 5
"""Read-modify-write attempts on a resourceVersion conflict before leaving it to the retry policy."""
POLL_SECONDS = 1.0
"""Between looks at the Machines while waiting (inside the activity: the history pays nothing)."""


def _annotations(obj: Obj) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def machine_info(machine: Obj) -> MachineInfo:
    """A Machine as the workflow reads it: its Node, whether it is Ready, and why not."""
    meta = machine.get("metadata") or {}
    status = machine.get("status") or {}
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    problems = [
        f"{c.get('type')}: {c.get('message') or c.get('reason')}"
        for c in conditions
        if c.get("status") != "True"
        and c.get("type") not in ("Ready", "Available", "Deleting")
        and (c.get("message") or c.get("reason"))
    ]
    return MachineInfo(
        name=str(meta.get("name") or ""),
        node_name=str((status.get("nodeRef") or {}).get("name") or ""),
        phase=str(status.get("phase") or ""),
        ready=ready,
        deleting=bool(meta.get("deletionTimestamp")),
        marked=PRE_DRAIN_HOOK in _annotations(machine),
        problem="; ".join(problems),
    )


class MachineActivities:
    """A template pool's MachineDeployment and Machines, through the official client."""

    def __init__(self, management_api: client.ApiClient) -> None:
        self._custom = client.CustomObjectsApi(management_api)

    async def _machines(self, namespace: str, cluster: str) -> list[Obj]:
        listed = await call_or_raise(
            f"list Machines of cluster {namespace}/{cluster}",
            self._custom.list_namespaced_custom_object,
            *CAPI,
            namespace,
            "machines",
            label_selector=f"{MACHINE_CLUSTER_LABEL}={cluster}",
        )
        return [m for m in listed.get("items") or [] if isinstance(m, dict)]

    @implements(cluster_calls.SCALE_MACHINE_DEPLOYMENT)
    async def scale_machine_deployment(
        self, request: ScaleMachineDeploymentRequest
    ) -> ScaleMachineDeploymentResult:
        """Set `spec.config.workersNumber` (see the request's rules)."""
        what = f"scale ClusterDeployment {request.namespace}/{request.name}"
        address = CLUSTER_DEPLOYMENT.at(self._custom, request.namespace, request.name)
        for attempt in range(UPDATE_ATTEMPTS):
            obj = await address.read()
            if obj is None or _annotations(obj).get(OWNER_ANNOTATION) != request.owner:
                raise permanent(
                    ErrorType.NOT_FOUND,
                    f"ClusterDeployment {request.namespace}/{request.name} not found",
                )
            config = (obj.get("spec") or {}).get("config") or {}
            found_value = config.get(WORKERS_FIELD)
            found = int(found_value) if isinstance(found_value, int | float) else 0
            if found == request.count or (request.only_lower and found < request.count):
                return ScaleMachineDeploymentResult(found=found, written=False)
            if found != request.expected:
                raise permanent(
                    ErrorType.WORKERS_CHANGED_OUTSIDE,
                    f"config.workersNumber of ClusterDeployment {request.namespace}/{request.name} "
                    f"is {found}, not the {request.expected} Colony set: it was changed outside "
                    f"Colony; Colony leaves it as it is (scale the pool to {found} to adopt it)",
                )
            patch = {
                "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                "spec": {"config": {WORKERS_FIELD: request.count}},
            }
            try:
                await call(
                    what,
                    self._custom.patch_namespaced_custom_object,
                    *K0RDENT,
                    request.namespace,
                    "clusterdeployments",
                    request.name,
                    patch,
                    _content_type="application/merge-patch+json",
                )
            except ApiException as exc:
                if exc.status == 409 and attempt + 1 < UPDATE_ATTEMPTS:
                    continue  # written in between: read again, judge again
                raise kube_error(exc, what) from exc
            return ScaleMachineDeploymentResult(found=found, written=True)
        raise AssertionError("unreachable")  # pragma: no cover

    @implements(cluster_calls.MARK_MACHINES)
    async def mark_machines(self, request: MarkMachinesRequest) -> MarkMachinesResult:
        """Put or take off Colony's pre-drain hook and the delete-machine annotation."""
        by_name = {
            str(m["metadata"]["name"]): m
            for m in await self._machines(request.namespace, request.cluster)
        }
        result = MarkMachinesResult()
        keys = (
            [PRE_DRAIN_HOOK] if request.hook_only else [PRE_DRAIN_HOOK, DELETE_MACHINE_ANNOTATION]
        )
        for name in request.machines:
            machine = by_name.get(name)
            if machine is None:
                result.missing.append(name)
                continue
            present = _annotations(machine)
            if request.mark:
                changes: dict[str, Any] = {k: "colony" for k in keys if present.get(k) is None}
            else:
                changes = {k: None for k in keys if k in present}
            if not changes:
                continue
            what = f"annotate Machine {request.namespace}/{name}"
            try:
                await call(
                    what,
                    self._custom.patch_namespaced_custom_object,
                    *CAPI,
                    request.namespace,
                    "machines",
                    name,
                    {"metadata": {"annotations": changes}},
                    _content_type="application/merge-patch+json",
                )
            except ApiException as exc:
                if exc.status == 404:
                    result.missing.append(name)
                    continue
                raise kube_error(exc, what) from exc
            result.changed.append(name)
        return result

    @implements(cluster_calls.AWAIT_MACHINES)
    async def await_machines(self, request: AwaitMachinesRequest) -> AwaitMachinesResult:
        """Wait until the cluster has `count` Machines with a Node and none of `gone` exists
        (see the request); heartbeats while it waits."""
        started = asyncio.get_running_loop().time()
        known = sorted(request.known, key=lambda m: m.name)
        while True:
            machines = sorted(
                (machine_info(m) for m in await self._machines(request.namespace, request.cluster)),
                key=lambda m: m.name,
            )
            alive = [m for m in machines if not m.deleting]
            names = {m.name for m in machines}
            settled = (
                len(alive) == request.count
                and all(m.node_name for m in alive)
                and not names & set(request.gone)
            )
            passed = seconds_until(request.deadline) <= 0
            waited = asyncio.get_running_loop().time() - started
            changed = machines != known and waited >= request.min_interval_seconds
            if settled or passed or changed:
                return AwaitMachinesResult(
                    machines=machines, settled=settled, deadline_passed=passed and not settled
                )
            report(AwaitMachinesResult(machines=machines, settled=False))
            await asyncio.sleep(min(POLL_SECONDS, max(seconds_until(request.deadline), 0.05)))
