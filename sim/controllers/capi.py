"""SIMULATOR. Cluster API's worker machinery: MachineDeployment -> MachineSet -> Machine -> Node.

Started by `sim.controllers.k0rdent.K0rdentControllers` on the management cluster's API
(`sim.clusterapi`: the emulator's store, or a real API server). The objects are
`cluster.x-k8s.io/v1beta2`, shaped to validate under Cluster API's own CRDs (v1.14); the
ClusterDeployment controller renders the MachineDeployment `<cluster>-md` of a cloud template
(`sim.cloud`), as the template's Helm chart does.

What Cluster API does and this controller does too:
- a MachineDeployment keeps one MachineSet (`<md>-<hash>`) of its replicas (no rollouts: the sim's
  machines never change template); its status sums the MachineSet's;
- a MachineSet creates Machines up to its replicas, and on scale-down deletes the surplus by
  deletion priority: Machines annotated `cluster.x-k8s.io/delete-machine` first, then Machines
  without a Node, then by `spec.deletion.order` (Random, the default; Newest; Oldest);
- a Machine provisions (`node.register` delay), its Node registers in the child cluster,
  NotReady, then Ready (`node.ready`; the FaultInjector's `nodes_never_ready` keeps it NotReady,
  the Machine then says why in its NodeReady condition); `status.nodeRef` names it;
- a deleted Machine (finalizer `machine.cluster.x-k8s.io`) waits while any
  `pre-drain.delete.hook.machine.cluster.x-k8s.io/<owner>` annotation is on it, then drains its
  Node itself (cordon, then evict every pod but DaemonSet and mirror pods, respecting
  PodDisruptionBudgets, up to `spec.deletion.nodeDrainTimeoutSeconds`; none when annotated
  `machine.cluster.x-k8s.io/exclude-node-draining`, or when its cluster is being deleted), then
  deletes the Node and lets the Machine go.

CAPI's own drain is counted: `drains` holds, per Machine deleted, the pods its drain evicted (and
every drain leaves a `Drained` Event on the Machine), so a test can tell whether the drain someone
did before left anything for Cluster API to evict.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import random
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sim.apiserver.errors import ApiError
from sim.apiserver.registry import NODES, PODS, ResourceType
from sim.apiserver.store import ClusterStore, WatchEvent
from sim.cloud import (
    API_VERSION,
    CLUSTER_NAME_LABEL,
    MACHINE_DEPLOYMENTS,
    MACHINE_SETS,
    MACHINES,
    instance_type,
)
from sim.clusterapi import ClusterApi, cluster_api
from sim.controllers.gpus import GPU_RESOURCE, gfd_labels
from sim.controllers.k0rdent_cluster import (
    K8S_VERSION,
    ChildClusters,
    now_iso,
    record_event,
    rt_for,
    set_condition,
    write_status_if_changed,
)
from sim.controllers.workqueue import ReconcileLoop
from sim.faults import FaultInjector
from sim.timing import SimTiming

log = logging.getLogger(__name__)

CLUSTER_DEPLOYMENTS = ("k0rdent.mirantis.com", "clusterdeployments")

# Cluster API's label, annotation and finalizer names (cluster-api api/core/v1beta2/common_types.go).
DEPLOYMENT_NAME_LABEL = "cluster.x-k8s.io/deployment-name"
SET_NAME_LABEL = "cluster.x-k8s.io/set-name"
DELETE_MACHINE_ANNOTATION = "cluster.x-k8s.io/delete-machine"
PRE_DRAIN_HOOK_PREFIX = "pre-drain.delete.hook.machine.cluster.x-k8s.io"
EXCLUDE_DRAIN_ANNOTATION = "machine.cluster.x-k8s.io/exclude-node-draining"
MACHINE_ANNOTATION = "cluster.x-k8s.io/machine"
MACHINE_FINALIZER = "machine.cluster.x-k8s.io"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"

DRAIN_RETRY_SECONDS = 0.1
"""How often a drain whose evictions a budget refused, or whose pods still terminate, looks again."""
CHILD_POLL_SECONDS = 0.1
"""How often a Machine of a cluster whose control plane is not up yet looks again."""
HOOK_POLL_SECONDS = 0.5
"""A Machine held by a pre-drain hook is reconciled on its own update too; this is a backstop."""


def machine_set_name(deployment: str, template_hash: str) -> str:
    return f"{deployment}-{template_hash}"[:63]


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def pre_drain_hooks(machine: Mapping[str, Any]) -> list[str]:
    """The pre-drain hook annotations on a Machine (`pre-drain.delete.hook...[/<owner>]`)."""
    annotations = machine["metadata"].get("annotations") or {}
    return sorted(a for a in annotations if a.split("/")[0] == PRE_DRAIN_HOOK_PREFIX)


def deletion_priority(
    machines: Iterable[Mapping[str, Any]], order: str, rng: random.Random
) -> list[Mapping[str, Any]]:
    """Machines in the order a MachineSet scaling down deletes them (cluster-api
    internal/controllers/machineset/machineset_delete_policy.go): annotated
    `cluster.x-k8s.io/delete-machine` first, then those without a Node, then by `order`."""

    def created(machine: Mapping[str, Any]) -> str:
        return str(machine["metadata"].get("creationTimestamp") or "")

    listed = list(machines)
    if order == "Newest":
        listed.sort(key=created, reverse=True)
    elif order == "Oldest":
        listed.sort(key=created)
    else:
        rng.shuffle(listed)

    def rank(machine: Mapping[str, Any]) -> int:
        if DELETE_MACHINE_ANNOTATION in (machine["metadata"].get("annotations") or {}):
            return 0
        if not (machine.get("status") or {}).get("nodeRef"):
            return 1
        return 2

    return sorted(listed, key=rank)  # stable: `order` decides within a rank


@dataclass
class MachineDrain:
    """What Cluster API's own drain of one Machine's Node did."""

    machine: str
    node: str
    evicted: list[str] = field(default_factory=list)
    """namespace/name of every pod its evictions took."""
    skipped: str = ""
    """Why it did not drain ("exclude-node-draining", "cluster deleting"), else empty."""


@dataclass
class _MachineState:
    first_seen: float
    drain_started: float | None = None
    drained: bool = False


class ClusterApiControllers:
    """The MachineDeployment, MachineSet and Machine controllers of one management cluster.

    Args:
        management: the management cluster's store or API.
        timing: delays of provisioning and joining.
        faults: `nodes_never_ready` applies to the Machines' Nodes.
        children: the child clusters (where the Machines' Nodes live).
        inventory_gpu_models: GPU model id -> the inventory's model (its `product`, `memory_gib`).
        seed: of the Random deletion order.
    """

    def __init__(
        self,
        management: ClusterStore | ClusterApi,
        timing: SimTiming,
        faults: FaultInjector,
        children: ChildClusters,
        inventory_gpu_models: Mapping[str, Any] | None = None,
        *,
        seed: int = 0,
    ) -> None:
        self.api = cluster_api(management)
        self.timing = timing
        self.faults = faults
        self.children = children
        self.gpu_models = dict(inventory_gpu_models or {})
        self.rng = random.Random(seed)
        self.drains: list[MachineDrain] = []
        self._machines: dict[tuple[str, str], _MachineState] = {}
        watched = (MACHINE_DEPLOYMENTS, MACHINE_SETS, MACHINES)
        self._deployments: ReconcileLoop[tuple[str, str]] = ReconcileLoop(
            self.api, "capi-machinedeployments", self._deployment_keys,
            self._reconcile_deployment, lambda: self._all(MACHINE_DEPLOYMENTS), watched=watched,
        )  # fmt: skip
        self._sets: ReconcileLoop[tuple[str, str]] = ReconcileLoop(
            self.api, "capi-machinesets", self._set_keys, self._reconcile_set,
            lambda: self._all(MACHINE_SETS), watched=watched,
        )  # fmt: skip
        self._machine_loop: ReconcileLoop[tuple[str, str]] = ReconcileLoop(
            self.api, "capi-machines", self._machine_keys, self._reconcile_machine,
            lambda: self._all(MACHINES), watched=watched,
        )  # fmt: skip

    async def run(self) -> None:
        unsubscribe = self.faults.on_change(self._requeue_machines)
        try:
            await asyncio.gather(
                self._deployments.run(), self._sets.run(), self._machine_loop.run()
            )
        finally:
            unsubscribe()

    def _requeue_machines(self) -> None:
        for key in list(self._machines):
            self._machine_loop.queue.add(key)

    def requeue_cluster_machines(self, namespace: str) -> None:
        """A child cluster came up or changed: its Machines look again."""
        for key in list(self._machines):
            if key[0] == namespace:
                self._machine_loop.queue.add(key)

    def drain_of(self, machine: str) -> MachineDrain | None:
        """Cluster API's drain of the Machine named, once it ran (or was skipped)."""
        return next((d for d in self.drains if d.machine == machine), None)

    # ------------------------------------------------------------------ keys

    async def _all(self, key: tuple[str, str]) -> list[tuple[str, str]]:
        rt = rt_for(self.api, key)
        if rt is None:
            return []
        return [
            (o["metadata"]["namespace"], o["metadata"]["name"]) for o in await self.api.list(rt)
        ]

    @staticmethod
    def _owner(obj: Mapping[str, Any], kind: str) -> str | None:
        for ref in obj["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == kind:
                return str(ref.get("name"))
        return None

    def _deployment_keys(self, event: WatchEvent) -> list[tuple[str, str]]:
        meta = event.object.get("metadata") or {}
        if event.rt.key == MACHINE_DEPLOYMENTS:
            return [(meta["namespace"], meta["name"])]
        if event.rt.key == MACHINE_SETS:
            owner = self._owner(event.object, "MachineDeployment")
            return [(meta["namespace"], owner)] if owner else []
        return []

    def _set_keys(self, event: WatchEvent) -> list[tuple[str, str]]:
        meta = event.object.get("metadata") or {}
        if event.rt.key == MACHINE_SETS:
            return [(meta["namespace"], meta["name"])]
        if event.rt.key == MACHINES:
            owner = self._owner(event.object, "MachineSet")
            return [(meta["namespace"], owner)] if owner else []
        return []

    def _machine_keys(self, event: WatchEvent) -> list[tuple[str, str]]:
        meta = event.object.get("metadata") or {}
        if event.rt.key == MACHINES:
            return [(meta["namespace"], meta["name"])]
        return []

    # ------------------------------------------------------------------ MachineDeployment

    async def _reconcile_deployment(self, key: tuple[str, str]) -> float | None:
        namespace, name = key
        md_rt, ms_rt = rt_for(self.api, MACHINE_DEPLOYMENTS), rt_for(self.api, MACHINE_SETS)
        if md_rt is None or ms_rt is None:
            return None
        deployment = await self.api.try_get(md_rt, namespace, name)
        if deployment is None or deployment["metadata"].get("deletionTimestamp"):
            await self._delete_owned(ms_rt, namespace, "MachineDeployment", name)
            return None
        spec = deployment.get("spec") or {}
        replicas = int(spec.get("replicas", 1))
        set_name = machine_set_name(name, _hash(repr(spec.get("template"))))
        machine_set = await self.api.try_get(ms_rt, namespace, set_name)
        if machine_set is None:
            template = _with_labels(spec.get("template") or {}, {DEPLOYMENT_NAME_LABEL: name})
            machine_set = await self.api.create(
                ms_rt,
                {
                    "apiVersion": API_VERSION,
                    "kind": "MachineSet",
                    "metadata": {
                        "name": set_name,
                        "namespace": namespace,
                        "labels": {
                            CLUSTER_NAME_LABEL: spec["clusterName"],
                            DEPLOYMENT_NAME_LABEL: name,
                        },
                        "ownerReferences": [_owner_ref(deployment)],
                    },
                    "spec": {
                        "clusterName": spec["clusterName"],
                        "replicas": replicas,
                        "selector": {"matchLabels": {DEPLOYMENT_NAME_LABEL: name}},
                        "template": template,
                        **({"deletion": spec["deletion"]} if spec.get("deletion") else {}),
                    },
                },
            )
        elif (machine_set.get("spec") or {}).get("replicas") != replicas or (
            machine_set.get("spec") or {}
        ).get("deletion") != spec.get("deletion"):

            def scale(ms: dict[str, Any]) -> None:
                ms["spec"]["replicas"] = replicas
                if spec.get("deletion"):
                    ms["spec"]["deletion"] = spec["deletion"]
                else:
                    ms["spec"].pop("deletion", None)

            machine_set = await self.api.mutate(ms_rt, namespace, set_name, scale)
        set_status = machine_set.get("status") or {}
        current = int(set_status.get("replicas") or 0)
        ready = int(set_status.get("readyReplicas") or 0)
        phase = "Running"
        if current < replicas or ready < replicas:
            phase = "ScalingUp"
        if current > replicas:
            phase = "ScalingDown"
        status = dict(deployment.get("status") or {})
        conditions = [dict(c) for c in status.get("conditions") or []]
        generation = int(deployment["metadata"].get("generation", 1))
        available = ready >= replicas
        set_condition(
            conditions, "Available", "True" if available else "False",
            "Available" if available else "NotAvailable",
            "" if available else f"{ready} available replicas, at least {replicas} required",
            generation,
        )  # fmt: skip
        status.update(
            observedGeneration=generation,
            selector=f"{DEPLOYMENT_NAME_LABEL}={name}",
            replicas=current,
            readyReplicas=ready,
            availableReplicas=ready,
            upToDateReplicas=current,
            phase=phase,
            conditions=conditions,
        )
        await write_status_if_changed(self.api, md_rt, deployment, status)
        return None

    async def _delete_owned(
        self, rt: ResourceType, namespace: str, owner_kind: str, owner: str
    ) -> None:
        """What the garbage collector does for objects of a deleted owner (done here too, so the
        emulator and a real API server delete them at the same moment)."""
        for obj in await self.api.list(rt, namespace):
            if self._owner(obj, owner_kind) == owner and not obj["metadata"].get(
                "deletionTimestamp"
            ):
                with contextlib.suppress(ApiError):
                    await self.api.delete(rt, namespace, obj["metadata"]["name"])

    # ------------------------------------------------------------------ MachineSet

    async def _reconcile_set(self, key: tuple[str, str]) -> float | None:
        namespace, name = key
        ms_rt, m_rt = rt_for(self.api, MACHINE_SETS), rt_for(self.api, MACHINES)
        if ms_rt is None or m_rt is None:
            return None
        machine_set = await self.api.try_get(ms_rt, namespace, name)
        if machine_set is None or machine_set["metadata"].get("deletionTimestamp"):
            await self._delete_owned(m_rt, namespace, "MachineSet", name)
            return None
        spec = machine_set.get("spec") or {}
        replicas = int(spec.get("replicas", 1))
        owned = [
            m for m in await self.api.list(m_rt, namespace) if self._owner(m, "MachineSet") == name
        ]
        alive = [m for m in owned if not m["metadata"].get("deletionTimestamp")]
        if len(alive) < replicas:
            for _ in range(replicas - len(alive)):
                await self.api.create(m_rt, self._new_machine(machine_set))
        elif len(alive) > replicas:
            order = str((spec.get("deletion") or {}).get("order") or "Random")
            for machine in deletion_priority(alive, order, self.rng)[: len(alive) - replicas]:
                log.info("%s: scaling down, deleting Machine %s", name, machine["metadata"]["name"])
                with contextlib.suppress(ApiError):
                    await self.api.delete(m_rt, namespace, machine["metadata"]["name"])
        ready = sum(1 for m in alive if _condition_true(m, "Ready"))
        status = dict(machine_set.get("status") or {})
        status.update(
            observedGeneration=int(machine_set["metadata"].get("generation", 1)),
            selector=",".join(f"{k}={v}" for k, v in (spec.get("selector") or {}).get("matchLabels", {}).items()),
            replicas=len(owned),
            readyReplicas=ready,
            availableReplicas=ready,
            upToDateReplicas=len(owned),
        )  # fmt: skip
        await write_status_if_changed(self.api, ms_rt, machine_set, status)
        return None

    def _new_machine(self, machine_set: Mapping[str, Any]) -> dict[str, Any]:
        meta = machine_set["metadata"]
        template = machine_set["spec"].get("template") or {}
        template_meta = template.get("metadata") or {}
        name = f"{meta['name']}-{uuid.uuid4().hex[:5]}"[:63]
        labels = {
            **(template_meta.get("labels") or {}),
            CLUSTER_NAME_LABEL: machine_set["spec"]["clusterName"],
            SET_NAME_LABEL: meta["name"],
        }
        spec = dict(template.get("spec") or {})
        return {
            "apiVersion": API_VERSION,
            "kind": "Machine",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": dict(template_meta.get("annotations") or {}),
                "finalizers": [MACHINE_FINALIZER],
                "ownerReferences": [_owner_ref(machine_set)],
            },
            "spec": spec,
        }

    # ------------------------------------------------------------------ Machine

    async def _reconcile_machine(self, key: tuple[str, str]) -> float | None:
        namespace, name = key
        m_rt = rt_for(self.api, MACHINES)
        if m_rt is None:
            return None
        machine = await self.api.try_get(m_rt, namespace, name)
        if machine is None:
            self._machines.pop(key, None)
            return None
        now = asyncio.get_running_loop().time()
        state = self._machines.setdefault(key, _MachineState(first_seen=now))
        cluster = str(machine["spec"].get("clusterName") or "")
        child = self.children.get(namespace, cluster)
        if machine["metadata"].get("deletionTimestamp"):
            return await self._reconcile_machine_delete(m_rt, machine, state, child, now)
        status = dict(machine.get("status") or {})
        conditions = [dict(c) for c in status.get("conditions") or []]
        generation = int(machine["metadata"].get("generation", 1))
        node_name = name
        wait: float | None = None
        provisioned_at = state.first_seen + self.timing.delay("node.register")
        if child is None:
            status["phase"] = "Pending"
            set_condition(conditions, "InfrastructureReady", "False", "NotReady",
                          "Waiting for the cluster's control plane", generation)  # fmt: skip
            wait = CHILD_POLL_SECONDS
        elif now < provisioned_at:
            status["phase"] = "Provisioning"
            set_condition(conditions, "InfrastructureReady", "False", "NotReady",
                          "Instance is being created", generation)  # fmt: skip
            wait = provisioned_at - now
        else:
            set_condition(conditions, "BootstrapConfigReady", "True", "Ready", "", generation)
            set_condition(conditions, "InfrastructureReady", "True", "Ready", "", generation)
            node = await child.api.try_get(NODES, None, node_name)
            if node is None:
                await child.register_node(await self._node(machine))
                node = await child.api.try_get(NODES, None, node_name)
            ready_at = provisioned_at + self.timing.delay("node.ready")
            node_ready = _condition_true(node or {}, "Ready")
            if not node_ready:
                if self.faults.node_never_ready_matches(node_name):
                    wait = 0.5  # lifted over HTTP, perhaps
                elif now < ready_at:
                    wait = ready_at - now
                else:
                    await child.ready_node(node_name)
                    node_ready = True
            status["phase"] = "Running"
            status["nodeRef"] = {"name": node_name}
            status["addresses"] = [{"type": "Hostname", "address": node_name}]
            if node_ready:
                set_condition(conditions, "NodeReady", "True", "NodeReady", "", generation)
            else:
                set_condition(
                    conditions, "NodeReady", "False", "NodeNotReady",
                    f"* Node.Ready: container runtime network not ready on Node {node_name}",
                    generation,
                )  # fmt: skip
        ready = _condition_true({"status": {"conditions": conditions}}, "NodeReady")
        set_condition(
            conditions, "Ready", "True" if ready else "False",
            "Ready" if ready else "NotReady",
            "" if ready else _summary(conditions), generation,
        )  # fmt: skip
        set_condition(conditions, "Available", "True" if ready else "False",
                      "Available" if ready else "NotReady", "", generation)  # fmt: skip
        status.update(observedGeneration=generation, conditions=conditions)
        await write_status_if_changed(self.api, m_rt, machine, status)
        return wait

    async def _node(self, machine: Mapping[str, Any]) -> dict[str, Any]:
        """The Node a Machine's instance boots into, sized from its instance type."""
        meta = machine["metadata"]
        cluster = str(machine["spec"]["clusterName"])
        chart, config = await self._cluster_values(meta["namespace"], cluster)
        type_name, size = instance_type(chart, config)
        node_name = meta["name"]
        labels = {
            "kubernetes.io/hostname": node_name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            INSTANCE_TYPE_LABEL: type_name or "generic",
        }
        capacity = {
            "cpu": str(size.cpu or 8),
            "memory": f"{size.memory_gib or 32}Gi",
            "pods": "110",
            "ephemeral-storage": "200Gi",
        }
        if size.gpu_model_id and size.gpu_count:
            model = self.gpu_models.get(size.gpu_model_id)
            product = str(getattr(model, "product", None) or size.gpu_model_id)
            memory_gib = getattr(model, "memory_gib", None)
            capacity[GPU_RESOURCE] = str(size.gpu_count)
            labels.update(gfd_labels(product, size.gpu_count, memory_gib))
        now = now_iso()
        kubelet = f"{K8S_VERSION}+k0s"
        return {
            "metadata": {
                "name": node_name,
                "labels": labels,
                "annotations": {
                    CLUSTER_NAME_LABEL: cluster,
                    "cluster.x-k8s.io/cluster-namespace": meta["namespace"],
                    MACHINE_ANNOTATION: node_name,
                },
            },
            "spec": {
                "providerID": f"{chart.split('-')[0]}://sim/{node_name}",
                "taints": [
                    {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule", "timeAdded": now}
                ],
            },
            "status": {
                "capacity": capacity,
                "allocatable": dict(capacity),
                "addresses": [{"type": "Hostname", "address": node_name}],
                "conditions": [
                    {
                        "type": "Ready", "status": "False", "reason": "KubeletNotReady",
                        "message": "container runtime network not ready",
                        "lastHeartbeatTime": now, "lastTransitionTime": now,
                    }
                ],
                "nodeInfo": {
                    "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, node_name).hex,
                    "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{cluster}.{node_name}")),
                    "bootID": str(uuid.uuid4()),
                    "kernelVersion": "6.8.0-60-generic",
                    "kubeProxyVersion": kubelet,
                    "kubeletVersion": kubelet,
                    "containerRuntimeVersion": "containerd://1.7.27",
                    "operatingSystem": "linux",
                    "architecture": "amd64",
                    "osImage": "Ubuntu 24.04.2 LTS",
                },
            },
        }  # fmt: skip

    async def _cluster_values(self, namespace: str, cluster: str) -> tuple[str, dict[str, Any]]:
        """(chart, config) of the ClusterDeployment a Machine belongs to."""
        cd_rt = rt_for(self.api, CLUSTER_DEPLOYMENTS)
        deployment = None if cd_rt is None else await self.api.try_get(cd_rt, namespace, cluster)
        if deployment is None:
            return "", {}
        spec = deployment.get("spec") or {}
        template_rt = rt_for(self.api, ("k0rdent.mirantis.com", "clustertemplates"))
        template = (
            None
            if template_rt is None
            else await self.api.try_get(template_rt, namespace, str(spec.get("template") or ""))
        )
        chart = str(
            (((template or {}).get("spec") or {}).get("helm") or {})
            .get("chartSpec", {})
            .get("chart")
            or ""
        )
        return chart, dict(spec.get("config") or {})

    async def _cluster_deleting(self, namespace: str, cluster: str) -> bool:
        cd_rt = rt_for(self.api, CLUSTER_DEPLOYMENTS)
        deployment = None if cd_rt is None else await self.api.try_get(cd_rt, namespace, cluster)
        return deployment is None or bool(deployment["metadata"].get("deletionTimestamp"))

    async def _reconcile_machine_delete(
        self,
        rt: ResourceType,
        machine: dict[str, Any],
        state: _MachineState,
        child: Any,
        now: float,
    ) -> float | None:
        meta = machine["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        status = dict(machine.get("status") or {})
        conditions = [dict(c) for c in status.get("conditions") or []]
        generation = int(meta.get("generation", 1))
        status["phase"] = "Deleting"
        hooks = pre_drain_hooks(machine)
        if hooks:
            set_condition(
                conditions, "Deleting", "True", "WaitingForPreDrainHook",
                f"Waiting for pre-drain hooks to succeed (hooks: {', '.join(hooks)})", generation,
            )  # fmt: skip
            status["conditions"] = conditions
            await write_status_if_changed(self.api, rt, machine, status)
            return HOOK_POLL_SECONDS
        node_name = str((status.get("nodeRef") or {}).get("name") or "")
        cluster = str(machine["spec"].get("clusterName") or "")
        if node_name and child is not None and not state.drained:
            skip = ""
            if EXCLUDE_DRAIN_ANNOTATION in (meta.get("annotations") or {}):
                skip = "exclude-node-draining"
            elif await self._cluster_deleting(namespace, cluster):
                skip = "cluster deleting"
            if not skip:
                if state.drain_started is None:
                    state.drain_started = now
                    status["deletion"] = {"nodeDrainStartTime": now_iso()}
                timeout = int(
                    ((machine["spec"].get("deletion") or {}).get("nodeDrainTimeoutSeconds")) or 0
                )
                left = await self._drain(child, node_name, name)
                timed_out = timeout > 0 and now - state.drain_started >= self.timing.timeout(
                    timeout
                )
                if left and not timed_out:
                    set_condition(
                        conditions, "Deleting", "True", "DrainingNode",
                        f"Drain not completed yet: {len(left)} pods ({', '.join(left[:5])})",
                        generation,
                    )  # fmt: skip
                    status["conditions"] = conditions
                    await write_status_if_changed(self.api, rt, machine, status)
                    return DRAIN_RETRY_SECONDS
            state.drained = True
            drain = self._drain_record(name, node_name)
            drain.skipped = skip
            await record_event(
                self.api, machine, "Drained" if not skip else "DrainSkipped",
                f"Node {node_name}: {len(drain.evicted)} pods evicted by Cluster API's drain"
                + (f" (skipped: {skip})" if skip else ""),
                component="machine-controller",
            )  # fmt: skip
        if node_name and child is not None:
            with contextlib.suppress(ApiError):
                await child.remove_node(node_name)
        if MACHINE_FINALIZER in (meta.get("finalizers") or []):
            await self.api.mutate(
                rt, namespace, name,
                lambda o: o["metadata"].update(
                    finalizers=[f for f in o["metadata"].get("finalizers") or [] if f != MACHINE_FINALIZER]
                ),
            )  # fmt: skip
        return None

    def _drain_record(self, machine: str, node: str) -> MachineDrain:
        found = self.drain_of(machine)
        if found is None:
            found = MachineDrain(machine, node)
            self.drains.append(found)
        return found

    async def _drain(self, child: Any, node_name: str, machine: str) -> list[str]:
        """Cordon the Node, evict what runs there (not DaemonSet or mirror pods); the pods still
        on it (empty: drained)."""
        with contextlib.suppress(ApiError):
            await child.api.mutate(
                NODES,
                None,
                node_name,
                lambda n: n.setdefault("spec", {}).update(unschedulable=True),
            )
        pending: list[str] = []
        record = self._drain_record(machine, node_name)
        for pod in await child.api.list(PODS, field_selector=f"spec.nodeName={node_name}"):
            pod_meta = pod["metadata"]
            owners = pod_meta.get("ownerReferences") or []
            if any(ref.get("kind") == "DaemonSet" for ref in owners):
                continue
            if "kubernetes.io/config.mirror" in (pod_meta.get("annotations") or {}):
                continue
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            key = f"{pod_meta['namespace']}/{pod_meta['name']}"
            pending.append(key)
            if pod_meta.get("deletionTimestamp"):
                continue
            try:
                await child.api.evict(pod_meta["namespace"], pod_meta["name"])
            except ApiError as error:
                if error.code != 404:
                    log.info("CAPI drain of %s: eviction of %s refused: %s", node_name, key, error)
                continue
            record.evicted.append(key)
        return pending


def _condition_true(obj: Mapping[str, Any], type_: str) -> bool:
    return any(
        c.get("type") == type_ and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def _summary(conditions: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"* {c['type']}: {c.get('message') or c.get('reason')}"
        for c in conditions
        if c.get("status") != "True" and c.get("type") not in ("Ready", "Available")
    )


def _owner_ref(owner: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _with_labels(template: Mapping[str, Any], labels: Mapping[str, str]) -> dict[str, Any]:
    out = dict(template)
    meta = dict(out.get("metadata") or {})
    meta["labels"] = {**(meta.get("labels") or {}), **labels}
    out["metadata"] = meta
    return out
