"""Activities on a child cluster's nodes: nodes joining and labelled, cordons, drains (pods and
their evictions), deletes, and the GPU inventory.

`NodeActivities` reaches the child through its kubeconfig Secret (`activities.child_cluster.clients`).
Called by `ClusterWorkflow` (create, scale, drain, delete) through the declarations in
`workflows.cluster_calls`, and by `CapacityLedgerWorkflow` (`read_gpu_inventory`, declared in
`workflows.workspace_calls`). Each method is idempotent: patches are
declarative, deletes tolerate absence, and an eviction of a pod already gone is a result.

The long waits (`await_nodes`, `drain_node`, `delete_node` with a deadline) poll inside one
heartbeating activity and report their progress in the heartbeat details: the workflow's history
grows with what changes, never with how long a boot or a drain takes. What they return is what the
workflow needs and no more: the expected nodes, one node's drain, one pool's nodes; never every
pod of the cluster.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio import activity

from activities.child_cluster.clients import ChildClusterActivities
from activities.declarations import cluster_calls, implements, workspace_calls
from activities.errors import kube_error, kube_status
from activities.heartbeat import previous_details, report, write_ahead
from activities.kube import call, call_or_none, call_or_raise
from activities.objects import seconds_until
from activities.watch import GoneWatch
from infra import metrics
from infra.kube import MERGE_PATCH, Obj, parse_time
from infra.kubeapi import collection_path
from models.activity_api import (
    AwaitNodesRequest,
    AwaitNodesResult,
    CordonNodeRequest,
    CordonNodeResult,
    DeleteNodeRequest,
    DeleteNodeResult,
    DrainHeartbeat,
    DrainNodeRequest,
    DrainNodeResult,
    EvictionOutcome,
    ExpectedNode,
    ListNodesRequest,
    ListNodesResult,
    NodeInfo,
    NodeTaint,
    ObservedNode,
    PodInfo,
    Toleration,
    UncordonNodeRequest,
    UncordonNodeResult,
)
from models.capacity import gpu_node
from models.drain import DrainTally, PodDrainClass, classify_pod, pods_to_evict
from models.identity import Entity, cluster_deployment_name, entity_workflow_id
from models.ownership import marked_entity
from models.workspace_api import ReadGpuInventoryRequest, ReadGpuInventoryResult

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
LABEL_ATTEMPTS = 5
"""Read-modify-write attempts of a node's taints on a resourceVersion conflict."""
NODE_POLL = 1.0
"""Seconds between looks at the nodes while waiting for them to join or go: a small cluster
answers in seconds, and polls cost the workflow's history nothing."""
EVICTION_RETRY_FIRST = 1.0
EVICTION_RETRY_CAP = 5.0
"""Evictions refused by a budget are retried, not failed (the budget may relax): after 1 s,
backing off to every 5 s, as `kubectl drain` retries every 5 s. The same pauses bound the wait for
evicted pods to go, which ends as soon as the watch of the node's pods has seen them all deleted
(a pod's grace period is its own: 30 s by default, a second for one that exits at SIGTERM)."""
POD_COLLECTION = collection_path("", "v1", "pods")


def _labelled(node: Obj, expected: ExpectedNode) -> bool:
    """The expected labels and taints are on the node."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    if any(labels.get(key) != value for key, value in expected.labels.items()):
        return False
    taints = {
        (str(t.get("key")), str(t.get("value") or ""), str(t.get("effect")))
        for t in (node.get("spec") or {}).get("taints") or []
        if isinstance(t, dict)
    }
    return all((t.key, t.value, t.effect) in taints for t in expected.taints)


def _ready(node: Obj) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def match_nodes(nodes: Sequence[Obj], expected: Sequence[ExpectedNode]) -> dict[str, Obj]:
    """The Node of each expected host that has registered, by host id.

    A node registers under its host's id (k0s names nodes after the host); otherwise an address
    identifies a node only when no other node has it (hosts behind one bastion share one).
    """
    by_name = {str(n["metadata"]["name"]): n for n in nodes}
    owners: dict[str, list[Obj]] = {}
    for node in nodes:
        for address in (node.get("status") or {}).get("addresses") or []:
            if address.get("address"):
                owners.setdefault(str(address["address"]), []).append(node)
    found: dict[str, Obj] = {}
    for want in expected:
        match = by_name.get(want.host_id)
        if match is None and len(owners.get(want.address, [])) == 1:
            match = owners[want.address][0]
        if match is not None:
            found[want.host_id] = match
    return found


def pod_info(pod: Obj) -> PodInfo:
    """The facts a drain decides on, from a Pod object."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    controller = next(
        (ref for ref in meta.get("ownerReferences") or [] if ref.get("controller")), None
    )
    return PodInfo(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid") or ""),
        controller_kind=str((controller or {}).get("kind") or ""),
        mirror=MIRROR_ANNOTATION in (meta.get("annotations") or {}),
        tolerations=[
            Toleration(
                key=str(t.get("key") or ""),
                operator=str(t.get("operator") or "Equal"),
                value=str(t.get("value") or ""),
                effect=str(t.get("effect") or ""),
            )
            for t in spec.get("tolerations") or []
            if isinstance(t, dict)
        ],
        phase=str((pod.get("status") or {}).get("phase") or "Pending"),
        terminating=bool(meta.get("deletionTimestamp")),
    )


def node_info(node: Obj, pods: list[PodInfo]) -> NodeInfo:
    """What the workflow needs to know about a Node, with the pods bound to it."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    ready = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Ready"),
        {"status": "Unknown"},
    )
    return NodeInfo(
        name=str(meta.get("name", "")),
        addresses=[
            str(a.get("address")) for a in status.get("addresses") or [] if a.get("address")
        ],
        labels=dict(meta.get("labels") or {}),
        ready=ready.get("status") == "True",
        ready_status=str(ready.get("status") or "Unknown"),
        unschedulable=bool(spec.get("unschedulable")),
        taints=[
            NodeTaint(
                key=str(t.get("key", "")), value=str(t.get("value") or ""), effect=str(t["effect"])
            )
            for t in spec.get("taints") or []
            if isinstance(t, dict) and t.get("effect")
        ],
        created_at=parse_time(meta.get("creationTimestamp")),
        pod_count=len(pods),
        evictable_pod_count=sum(1 for p in pods if classify_pod(p) is PodDrainClass.EVICT),
    )


def _drain_finished(outcome: str) -> None:
    """The drain's duration from its first attempt's scheduling (a retried drain resumes from its
    heartbeat, so the duration spans every attempt)."""
    started = activity.info().scheduled_time
    metrics.drain_finished((datetime.now(UTC) - started).total_seconds(), outcome)


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


class NodeActivities(ChildClusterActivities):
    """Nodes and pods of child clusters, reached through their kubeconfig Secrets."""

    async def _pods_on(self, core: client.CoreV1Api, node_name: str) -> list[Obj]:
        return (await self._pods_listed(core, node_name))[0]

    async def _pods_listed(self, core: client.CoreV1Api, node_name: str) -> tuple[list[Obj], str]:
        """The node's pods, and the list's resourceVersion (where a watch of them starts)."""
        listed = await call_or_none(
            f"list pods on node {node_name}",
            core.list_pod_for_all_namespaces,
            field_selector=f"spec.nodeName={node_name}",
        )
        version = str(((listed or {}).get("metadata") or {}).get("resourceVersion") or "")
        return list((listed or {}).get("items") or []), version

    async def _nodes(self, core: client.CoreV1Api, selector: str = "") -> list[Obj]:
        listed = await call_or_none("list nodes", core.list_node, label_selector=selector or None)
        return list((listed or {}).get("items") or [])

    @implements(cluster_calls.LIST_NODES)
    async def list_nodes(self, request: ListNodesRequest) -> ListNodesResult:
        """The nodes matching the selector; with `count_pods`, each with its own pods counted."""
        core = await self._core(request.kubeconfig)
        found = await self._nodes(core, request.label_selector)
        by_node: dict[str, list[PodInfo]] = {}
        if request.count_pods and found:
            # One list of the cluster's pods, not one per node: a scale-down of a 100-node pool
            # chooses its nodes from this, and 100 lists held its start by seconds.
            listed = await call_or_none("list pods", core.list_pod_for_all_namespaces)
            for pod in (listed or {}).get("items") or []:
                node_name = str((pod.get("spec") or {}).get("nodeName") or "")
                by_node.setdefault(node_name, []).append(pod_info(pod))
        nodes = [node_info(node, by_node.get(node["metadata"]["name"], [])) for node in found]
        return ListNodesResult(nodes=sorted(nodes, key=lambda n: n.name))

    async def _patch_node(
        self, core: client.CoreV1Api, name: str, patch: Obj, what: str
    ) -> Obj | None:
        return await call_or_none(what, core.patch_node, name, patch, _content_type=MERGE_PATCH)

    async def _label(
        self,
        core: client.CoreV1Api,
        node_name: str,
        labels: dict[str, str],
        taints: list[NodeTaint],
    ) -> bool:
        """Merge labels and taints into the node (others kept; a taint is keyed by key+effect);
        False when the node is gone."""
        what = f"label node {node_name}"
        for attempt in range(LABEL_ATTEMPTS):
            node = await call_or_none(f"read node {node_name}", core.read_node, node_name)
            if node is None:
                return False
            wanted = {(t.key, t.effect): t for t in taints}
            kept = [
                t
                for t in (node.get("spec") or {}).get("taints") or []
                if (t.get("key"), t.get("effect")) not in wanted
            ]
            kept += [t.model_dump(mode="json") for t in taints]
            patch: Obj = {
                "metadata": {
                    "labels": labels,
                    "resourceVersion": node["metadata"]["resourceVersion"],
                },
            }
            if taints:
                patch["spec"] = {"taints": kept}
            try:
                patched = await call(
                    what, core.patch_node, node_name, patch, _content_type=MERGE_PATCH
                )
            except ApiException as exc:
                if exc.status == 404:
                    return False
                if exc.status == 409 and attempt + 1 < LABEL_ATTEMPTS:
                    continue  # the kubelet or a controller wrote in between: merge again
                raise kube_error(exc, what) from exc
            return bool(patched)
        raise AssertionError("unreachable")  # pragma: no cover

    @implements(cluster_calls.AWAIT_NODES)
    async def await_nodes(self, request: AwaitNodesRequest) -> AwaitNodesResult:
        """Label the expected nodes as they register; return on a change, when all are Ready, or
        at the deadline (see `AwaitNodesRequest`)."""
        core = await self._core(request.kubeconfig)
        started = time.monotonic()
        known = {o.host_id: o for o in request.known}
        while True:
            found = match_nodes(await self._nodes(core), request.expected)
            observed: list[ObservedNode] = []
            for want in request.expected:
                node = found.get(want.host_id)
                if node is None:
                    observed.append(ObservedNode(host_id=want.host_id))
                    continue
                name = str(node["metadata"]["name"])
                labelled = _labelled(node, want)
                if not labelled:
                    # Labelled as it registers, before it counts as joined: a pool's selector
                    # and the GPU admission rely on these labels from the first moment.
                    labelled = await self._label(core, name, want.labels, want.taints)
                observed.append(
                    ObservedNode(
                        host_id=want.host_id, node_name=name, labelled=labelled, ready=_ready(node)
                    )
                )
            report(AwaitNodesResult(observed=observed, all_ready=False))
            all_ready = all(o.ready and o.labelled for o in observed)
            left = seconds_until(request.deadline)
            changed = any(known.get(o.host_id) != o for o in observed)
            if (
                all_ready
                or left <= 0
                or (changed and time.monotonic() - started >= request.min_interval_seconds)
            ):
                return AwaitNodesResult(
                    observed=observed,
                    all_ready=all_ready,
                    deadline_passed=not all_ready and left <= 0,
                )
            await asyncio.sleep(min(NODE_POLL, max(left, 0.05)))

    @implements(cluster_calls.CORDON_NODE)
    async def cordon_node(self, request: CordonNodeRequest) -> CordonNodeResult:
        """Mark the node unschedulable; reports whether it already was."""
        core = await self._core(request.kubeconfig)
        node = await call_or_none(
            f"read node {request.node_name}", core.read_node, request.node_name
        )
        if node is None:
            return CordonNodeResult(found=False)
        was = bool((node.get("spec") or {}).get("unschedulable"))
        if not was:
            patched = await self._patch_node(
                core,
                request.node_name,
                {"spec": {"unschedulable": True}},
                f"cordon node {request.node_name}",
            )
            if patched is None:
                return CordonNodeResult(found=False)
        return CordonNodeResult(found=True, was_cordoned=was)

    @implements(cluster_calls.UNCORDON_NODE)
    async def uncordon_node(self, request: UncordonNodeRequest) -> UncordonNodeResult:
        """Make the node schedulable again."""
        core = await self._core(request.kubeconfig)
        # null removes the field in a merge patch, as `kubectl uncordon` leaves it.
        patched = await self._patch_node(
            core,
            request.node_name,
            {"spec": {"unschedulable": None}},
            f"uncordon node {request.node_name}",
        )
        return UncordonNodeResult(found=patched is not None)

    @implements(cluster_calls.DRAIN_NODE)
    async def drain_node(self, request: DrainNodeRequest) -> DrainNodeResult:
        """Evict the node's pods (those a drain evicts), retry what budgets refuse, and wait until
        they are gone, until the deadline; with `force`, delete what is left at the deadline.

        `progress.pods_evicted` counts every eviction accepted across attempts: an attempt after
        a crash resumes the ledger of the last heartbeat (`DrainLedger`), whose requests were
        written ahead of the evictions, and counts those whose pod is gone or terminating."""
        core = await self._core(request.kubeconfig)
        async with GoneWatch(
            core.api_client, POD_COLLECTION, f"spec.nodeName={request.node_name}"
        ) as watch:
            return await self._drain(core, watch, request)

    async def _drain(
        self, core: client.CoreV1Api, watch: GoneWatch, request: DrainNodeRequest
    ) -> DrainNodeResult:
        """`drain_node`'s loop: look, evict, then wait for the evicted pods to go (a watch of the
        node's pods, `activities.watch.GoneWatch`), at most until the next retry's pause."""
        before = previous_details(DrainHeartbeat)
        drain = DrainTally.resume(before)
        pause = EVICTION_RETRY_FIRST
        settled = before is None
        while True:
            node = await call_or_none(
                f"read node {request.node_name}", core.read_node, request.node_name
            )
            if node is None:
                # Gone (removed by someone else): its pods went with it.
                _drain_finished("node_gone")
                return DrainNodeResult(drained=True, node_found=False, progress=drain.progress())
            listed, version = await self._pods_listed(core, request.node_name)
            pods = [pod_info(p) for p in listed]
            if not settled:
                drain.settle(pods)
                settled = True
            remaining = pods_to_evict(pods)
            drain.pods_remaining = len(remaining)
            if not remaining:
                drain.blocking_pods = []
                report(drain.heartbeat())
                _drain_finished("drained")
                return DrainNodeResult(drained=True, progress=drain.progress())
            to_evict = [pod for pod in remaining if not pod.terminating]  # others: evicted already
            if drain.request(to_evict):
                await write_ahead(drain.heartbeat())
            blocking: list[str] = []
            refused: set[str] = set()
            # All at once, as `kubectl drain` does: each pod's grace period starts with its own
            # eviction, so one after the other would add their round trips to the drain.
            outcomes = await asyncio.gather(
                *(self._evict(core, pod) for pod in to_evict), return_exceptions=True
            )
            failure: BaseException | None = None
            for pod, outcome in zip(to_evict, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    failure = failure or outcome
                    continue
                kind, message = outcome
                if kind is EvictionOutcome.BLOCKED_BY_BUDGET:
                    metrics.eviction_refused()
                    blocking.append(f"{pod.ref}: {message}" if message else pod.ref)
                    refused.add(pod.ref)
                elif kind is EvictionOutcome.EVICTED:
                    drain.evicted(pod)
            drain.blocking_pods = blocking
            report(drain.heartbeat())
            if failure is not None:
                raise failure  # the accepted ones are counted (and in the heartbeat) first
            left = seconds_until(request.deadline)
            if left <= 0:
                if not request.force:
                    _drain_finished("timed_out")
                    return DrainNodeResult(drained=False, progress=drain.progress())
                # A forced drain deletes what the budgets protect, and does not wait for it.
                for pod in remaining:
                    if await self._delete_pod(core, pod.namespace, pod.name):
                        drain.pods_deleted.append(pod.ref)
                drain.blocking_pods = []
                drain.pods_remaining = 0
                report(drain.heartbeat())
                _drain_finished("forced")
                return DrainNodeResult(drained=True, progress=drain.progress())
            # The next look comes when every pod that is going has gone (their grace periods,
            # or sooner), or at the retry's pause, whichever is first; with only refused pods
            # left, at the retry's pause.
            going = {pod.ref for pod in remaining if pod.ref not in refused}
            if going:
                await watch.gone(going, version, min(pause, left))
            else:
                await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, EVICTION_RETRY_CAP)

    async def _evict(self, core: client.CoreV1Api, pod: PodInfo) -> tuple[EvictionOutcome, str]:
        """Ask the Eviction API to remove the pod; a budget's refusal (429) is an outcome."""
        what = f"evict pod {pod.namespace}/{pod.name}"
        body: Obj = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
        }
        if pod.uid:
            body["deleteOptions"] = {"preconditions": {"uid": pod.uid}}
        try:
            await call(what, core.create_namespaced_pod_eviction, pod.name, pod.namespace, body)
        except ApiException as exc:
            status = kube_status(exc)
            message = str(status.get("message") or "")
            causes = (status.get("details") or {}).get("causes") or []
            detail = "; ".join(str(c.get("message")) for c in causes if c.get("message"))
            if exc.status == 404:
                return EvictionOutcome.GONE, message
            if exc.status == 409 and pod.uid:
                # The uid precondition failed: the name now belongs to another pod.
                return EvictionOutcome.GONE, message
            if exc.status == 429 and ("disruption budget" in message or causes):
                return EvictionOutcome.BLOCKED_BY_BUDGET, f"{message} {detail}".strip()
            # A 429 without a budget is the API server throttling: retried like any overload.
            raise kube_error(exc, what) from exc
        return EvictionOutcome.EVICTED, ""

    async def _delete_pod(self, core: client.CoreV1Api, namespace: str, name: str) -> bool:
        deleted = await call_or_none(
            f"delete pod {namespace}/{name}", core.delete_namespaced_pod, name, namespace
        )
        return deleted is not None

    @implements(cluster_calls.DELETE_NODE)
    async def delete_node(self, request: DeleteNodeRequest) -> DeleteNodeResult:
        """Delete the Node object; with `wait_until`, wait until it is gone or that time passes."""
        core = await self._core(request.kubeconfig)
        what = f"delete node {request.node_name}"
        deleted = await call_or_none(what, core.delete_node, request.node_name)
        if request.wait_until is None:
            return DeleteNodeResult(existed=deleted is not None)
        while True:
            node = await call_or_none(
                f"read node {request.node_name}", core.read_node, request.node_name
            )
            if node is None:
                return DeleteNodeResult(existed=deleted is not None, gone=True)
            left = seconds_until(request.wait_until)
            if left <= 0:
                return DeleteNodeResult(existed=True, gone=False)
            await asyncio.sleep(min(NODE_POLL, left))

    @implements(workspace_calls.READ_GPU_INVENTORY)
    async def read_gpu_inventory(self, request: ReadGpuInventoryRequest) -> ReadGpuInventoryResult:
        """Every node's GPUs, and the GPUs requested by running pods outside workspace namespaces."""
        core = await self._core(request.kubeconfig)
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
            deployment = await self._cluster_deployment(
                request.kubeconfig.namespace, request.cluster_deployment
            )
            owner = cluster_owner_of(deployment or {}, request.cluster_deployment)
        return ReadGpuInventoryResult(
            nodes=sorted(inventory, key=lambda n: n.name), cluster_workflow_id=owner
        )
