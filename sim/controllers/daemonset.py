"""SIMULATOR. DaemonSet and Deployment controllers for one emulated cluster.

Started per child cluster by the k0rdent controller. The DaemonSet controller keeps one pod per
eligible node (Ready, matching the template's nodeSelector/affinity, tolerating the node's taints
with the tolerations the real controller adds to every DaemonSet pod, among them
`node.kubernetes.io/unschedulable`), pinned there by node affinity on `metadata.name` as the real one
does, owned by the DaemonSet (`controller: true`) so drains meet DaemonSet pods as in real clusters.

The Deployment controller turns `replicas` into pods owned by the Deployment (the sim has no
ReplicaSets: nothing in Colony looks past the pod's controller), replacing pods of an older
template and keeping `status` (replicas, readyReplicas, availableReplicas, updatedReplicas).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from sim.apiserver.errors import ApiError
from sim.apiserver.registry import DAEMONSETS, DEPLOYMENTS, NODES, PODS
from sim.apiserver.store import SUFFIX_ALPHABET, ClusterStore, WatchEvent, random_suffix
from sim.controllers.scheduler import (
    node_is_ready,
    node_matches_selector,
    pod_is_terminated,
    untolerated_taints,
)
from sim.controllers.workqueue import ReconcileLoop

log = logging.getLogger(__name__)

Key = tuple[str, str]

# The tolerations the DaemonSet controller adds to every pod it creates (pkg/controller/daemon/util).
DAEMON_TOLERATIONS: tuple[dict[str, str], ...] = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def template_hash(template: Mapping[str, Any]) -> str:
    """A stable short hash of a pod template (the sim's `pod-template-hash`)."""
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
    return "".join(SUFFIX_ALPHABET[int(c, 16) % len(SUFFIX_ALPHABET)] for c in digest[:10])


def owner_reference(owner: Mapping[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    """A controller ownerReference to `owner`."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"].get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_uid(obj: Mapping[str, Any]) -> str | None:
    """The uid of the object's controller owner, if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def controller_key(obj: Mapping[str, Any], kind: str) -> list[Key]:
    """[(namespace, name)] of the object's controller when it is of `kind`."""
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == kind:
            return [(meta.get("namespace") or "", str(ref.get("name")))]
    return []


def pod_is_ready(pod: Mapping[str, Any]) -> bool:
    """Running, and Ready unless the kubelet reports no Ready condition at all."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return True


def _active(pod: Mapping[str, Any]) -> bool:
    return not (pod.get("metadata") or {}).get("deletionTimestamp") and not pod_is_terminated(pod)


def new_pod(
    template: Mapping[str, Any],
    name: str,
    namespace: str,
    owner: dict[str, Any],
    extra_labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A pod from a pod template, owned by `owner`."""
    template_meta = template.get("metadata") or {}
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {**(template_meta.get("labels") or {}), **(extra_labels or {})},
        "ownerReferences": [owner],
    }
    if template_meta.get("annotations"):
        metadata["annotations"] = dict(template_meta["annotations"])
    spec = copy.deepcopy(template.get("spec") or {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def _delete_pod(store: ClusterStore, pod: Mapping[str, Any]) -> None:
    meta = pod["metadata"]
    try:
        store.delete(PODS, meta.get("namespace"), meta["name"])
    except ApiError as exc:
        if exc.code != 404:
            raise


class DaemonSetController:
    """One pod per eligible node for every DaemonSet of one `ClusterStore`."""

    def __init__(self, store: ClusterStore) -> None:
        self.store = store
        self._loop: ReconcileLoop[Key] = ReconcileLoop(
            store, f"daemonsets[{store.name}]", self._keys_for, self._reconcile, self._all_keys
        )

    async def run(self) -> None:
        """Reconcile DaemonSets on DaemonSet, node and owned-pod changes until cancelled."""
        await self._loop.run()

    def _all_keys(self) -> list[Key]:
        items, _ = self.store.list(DAEMONSETS)
        return [(d["metadata"]["namespace"], d["metadata"]["name"]) for d in items]

    def _keys_for(self, event: WatchEvent) -> Iterable[Key]:
        key = event.rt.key
        if key == DAEMONSETS.key:
            meta = event.object["metadata"]
            return [(meta["namespace"], meta["name"])]
        if key == NODES.key:
            return self._all_keys()
        if key == PODS.key:
            return controller_key(event.object, "DaemonSet")
        return []

    @staticmethod
    def eligible(ds: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
        """Whether the DaemonSet should run a pod on `node` (Ready, selector, taints)."""
        if not node_is_ready(node) or (node.get("metadata") or {}).get("deletionTimestamp"):
            return False
        pod_spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
        if not node_matches_selector(pod_spec, node):
            return False
        tolerations = [*(pod_spec.get("tolerations") or []), *DAEMON_TOLERATIONS]
        return not untolerated_taints(tolerations, (node.get("spec") or {}).get("taints") or [])

    @staticmethod
    def may_stay(ds: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
        """Whether a pod already on `node` keeps running (nodeShouldRunDaemonPod's
        shouldContinueRunning): readiness and NoSchedule taints do not matter, NoExecute ones do,
        so an unreachable node keeps its daemon pods, as on a real cluster."""
        if (node.get("metadata") or {}).get("deletionTimestamp"):
            return False
        pod_spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
        if not node_matches_selector(pod_spec, node):
            return False
        tolerations = [*(pod_spec.get("tolerations") or []), *DAEMON_TOLERATIONS]
        taints = [
            t
            for t in (node.get("spec") or {}).get("taints") or []
            if t.get("effect") == "NoExecute"
        ]
        return not untolerated_taints(tolerations, taints)

    async def _reconcile(self, key: Key) -> float | None:
        namespace, name = key
        ds = self.store.try_get(DAEMONSETS, namespace, name)
        if ds is None or ds["metadata"].get("deletionTimestamp"):
            return None
        uid = ds["metadata"].get("uid")
        template = (ds.get("spec") or {}).get("template") or {}
        revision = template_hash(template)
        # The store's own objects, only read here (a pod to delete is deleted by name): a
        # reconcile runs on every node change, and copying every node and pod for each was a
        # third of the simulator's time in a 100-node drain (`bench.drain_scale`).
        nodes, _ = self.store.list(NODES, copy_objects=False)
        wanted = {n["metadata"]["name"] for n in nodes if self.eligible(ds, n)}
        staying = {n["metadata"]["name"] for n in nodes if self.may_stay(ds, n)}
        pods, _ = self.store.list(PODS, namespace, copy_objects=False)
        owned = [p for p in pods if controller_uid(p) == uid]
        by_node: dict[str, list[dict[str, Any]]] = {}
        for pod in owned:
            if not _active(pod):
                if pod_is_terminated(pod):
                    _delete_pod(self.store, pod)
                continue
            target = self._target_node(pod)
            stale = pod["metadata"].get("labels", {}).get("controller-revision-hash") != revision
            if (target not in wanted and target not in staying) or stale:
                _delete_pod(self.store, pod)
                continue
            by_node.setdefault(target, []).append(pod)
        for node_name in sorted(wanted):
            existing = by_node.get(node_name, [])
            for extra in existing[1:]:
                _delete_pod(self.store, extra)
            if not existing:
                self._create_pod(ds, template, revision, node_name)
        self._update_status(ds, wanted, revision)
        return None

    @staticmethod
    def _target_node(pod: Mapping[str, Any]) -> str:
        spec = pod.get("spec") or {}
        if spec.get("nodeName"):
            return str(spec["nodeName"])
        terms = (
            ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
            or {}
        ).get("nodeSelectorTerms") or []
        for term in terms:
            for expression in term.get("matchFields") or []:
                if expression.get("key") == "metadata.name" and expression.get("values"):
                    return str(expression["values"][0])
        return ""

    def _create_pod(
        self, ds: dict[str, Any], template: Mapping[str, Any], revision: str, node_name: str
    ) -> None:
        meta = ds["metadata"]
        pod = new_pod(
            template,
            f"{meta['name']}-{random_suffix()}",
            meta["namespace"],
            owner_reference(ds, "apps/v1", "DaemonSet"),
            {
                "controller-revision-hash": revision,
                "pod-template-generation": str(meta.get("generation", 1)),
            },
        )
        spec = pod["spec"]
        spec["tolerations"] = [*(spec.get("tolerations") or []), *map(dict, DAEMON_TOLERATIONS)]
        # The real controller pins the pod with node affinity and lets the scheduler bind it.
        spec["affinity"] = {
            **(spec.get("affinity") or {}),
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node_name]}
                            ]
                        }
                    ]
                }
            },
        }
        self.store.create(PODS, pod, namespace=meta["namespace"])

    def _update_status(self, ds: dict[str, Any], wanted: set[str], revision: str) -> None:
        meta = ds["metadata"]
        pods, _ = self.store.list(PODS, meta["namespace"], copy_objects=False)
        owned = [p for p in pods if controller_uid(p) == meta.get("uid") and _active(p)]
        scheduled = [p for p in owned if (p.get("spec") or {}).get("nodeName")]
        on_wanted = [p for p in scheduled if p["spec"]["nodeName"] in wanted]
        ready = [p for p in on_wanted if pod_is_ready(p)]
        updated = [
            p
            for p in on_wanted
            if p["metadata"].get("labels", {}).get("controller-revision-hash") == revision
        ]
        status = {
            "currentNumberScheduled": len(on_wanted),
            "desiredNumberScheduled": len(wanted),
            "numberMisscheduled": len(scheduled) - len(on_wanted),
            "numberReady": len(ready),
            "numberAvailable": len(ready),
            "numberUnavailable": max(len(wanted) - len(ready), 0),
            "updatedNumberScheduled": len(updated),
            "observedGeneration": meta.get("generation", 1),
        }
        current = ds.get("status") or {}
        if any(current.get(k) != v for k, v in status.items()):
            self.store.update_status(
                DAEMONSETS, meta["namespace"], meta["name"], {**current, **status}
            )


class DeploymentController:
    """`spec.replicas` pods per Deployment of one `ClusterStore`, owned by the Deployment."""

    def __init__(self, store: ClusterStore) -> None:
        self.store = store
        self._loop: ReconcileLoop[Key] = ReconcileLoop(
            store, f"deployments[{store.name}]", self._keys_for, self._reconcile, self._all_keys
        )

    async def run(self) -> None:
        """Reconcile Deployments on Deployment and owned-pod changes until cancelled."""
        await self._loop.run()

    def _all_keys(self) -> list[Key]:
        items, _ = self.store.list(DEPLOYMENTS)
        return [(d["metadata"]["namespace"], d["metadata"]["name"]) for d in items]

    @staticmethod
    def _keys_for(event: WatchEvent) -> Iterable[Key]:
        if event.rt.key == DEPLOYMENTS.key:
            meta = event.object["metadata"]
            return [(meta["namespace"], meta["name"])]
        if event.rt.key == PODS.key:
            return controller_key(event.object, "Deployment")
        return []

    async def _reconcile(self, key: Key) -> float | None:
        namespace, name = key
        deployment = self.store.try_get(DEPLOYMENTS, namespace, name)
        if deployment is None or deployment["metadata"].get("deletionTimestamp"):
            return None
        meta = deployment["metadata"]
        spec = deployment.get("spec") or {}
        replicas = int(spec.get("replicas", 1))
        template = spec.get("template") or {}
        revision = template_hash(template)
        pods, _ = self.store.list(PODS, namespace)
        owned = [p for p in pods if controller_uid(p) == meta.get("uid")]
        current: list[dict[str, Any]] = []
        for pod in owned:
            if not _active(pod):
                if pod_is_terminated(pod):
                    _delete_pod(self.store, pod)
                continue
            if pod["metadata"].get("labels", {}).get("pod-template-hash") != revision:
                _delete_pod(self.store, pod)
                continue
            current.append(pod)
        if len(current) > replicas:
            # Scale down the least advanced pods first: unscheduled, then not ready, then newest.
            current.sort(
                key=lambda p: (
                    bool((p.get("spec") or {}).get("nodeName")),
                    pod_is_ready(p),
                    [-ord(c) for c in p["metadata"].get("creationTimestamp") or ""],
                )
            )
            for pod in current[: len(current) - replicas]:
                _delete_pod(self.store, pod)
            current = current[len(current) - replicas :]
        for _ in range(replicas - len(current)):
            pod = new_pod(
                template,
                f"{name}-{revision}-{random_suffix()}",
                namespace,
                owner_reference(deployment, "apps/v1", "Deployment"),
                {"pod-template-hash": revision},
            )
            current.append(self.store.create(PODS, pod, namespace=namespace))
        ready = sum(1 for p in current if pod_is_ready(p))
        available = ready >= replicas
        status: dict[str, Any] = {
            "observedGeneration": meta.get("generation", 1),
            "replicas": len(current),
            "updatedReplicas": len(current),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "unavailableReplicas": max(replicas - ready, 0),
        }
        old = deployment.get("status") or {}
        conditions: list[dict[str, Any]] = [
            {
                "type": "Available",
                "status": "True" if available else "False",
                "reason": "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                "message": "Deployment has minimum availability."
                if available
                else "Deployment does not have minimum availability.",
            }
        ]
        for condition in conditions:
            previous: dict[str, Any] = next(
                (c for c in old.get("conditions") or [] if c.get("type") == condition["type"]), {}
            )
            same = previous.get("status") == condition["status"]
            condition["lastTransitionTime"] = str(
                previous.get("lastTransitionTime") if same else _now()
            )
            condition["lastUpdateTime"] = condition["lastTransitionTime"]
        status["conditions"] = conditions
        comparable = {k: v for k, v in status.items() if k != "conditions"}
        changed = any(old.get(k) != v for k, v in comparable.items()) or [
            (c.get("type"), c.get("status")) for c in old.get("conditions") or []
        ] != [(c["type"], c["status"]) for c in conditions]
        if changed:
            self.store.update_status(DEPLOYMENTS, namespace, name, {**old, **status})
        return None
