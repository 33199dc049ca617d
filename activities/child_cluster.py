"""Activities inside a child cluster: nodes, pods, evictions, labels, cordons.

`ChildClusterActivities` receives the management cluster's `ApiClient` only. To reach a child it
reads the kubeconfig from the `<name>-kubeconfig` Secret named by the request's `KubeconfigRef`,
inside the activity: the kubeconfig never enters a request, a result, a log line or workflow
history. `ApiClient`s are cached per kubeconfig content, so a recreated cluster of the same name
(a new server, a new token) gets a new client while the steady state costs one Secret read.

Called by `ClusterWorkflow` (create, scale, drain, delete). Each method is idempotent: patches are
declarative, deletes tolerate absence, and an eviction of a pod already gone is a result.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from datetime import datetime
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio import activity

from activities.errors import kube_error, kube_status
from activities.kube import (
    MERGE_PATCH,
    Obj,
    api_client_from_dict,
    call,
    call_or_none,
    close_client,
)
from models.activity_api import (
    ActivityName,
    CordonNodeRequest,
    CordonNodeResult,
    DeleteNodeRequest,
    DeleteNodeResult,
    DeletePodRequest,
    DeletePodResult,
    EvictionOutcome,
    EvictPodRequest,
    EvictPodResult,
    KubeconfigRef,
    LabelNodeRequest,
    LabelNodeResult,
    ListNodesRequest,
    ListNodesResult,
    ListPodsOnNodeRequest,
    ListPodsOnNodeResult,
    NodeInfo,
    NodeTaint,
    PodInfo,
    Toleration,
    UncordonNodeRequest,
    UncordonNodeResult,
)
from models.drain import PodDrainClass, classify_pod
from models.errors import ErrorType, permanent

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
LABEL_ATTEMPTS = 5
"""Read-modify-write attempts of a node's taints on a resourceVersion conflict."""
CLIENT_CACHE_SIZE = 64
"""Child clusters whose clients are kept; the oldest is closed beyond that."""


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


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
        created_at=_parse_time(meta.get("creationTimestamp")),
        pod_count=len(pods),
        evictable_pod_count=sum(1 for p in pods if classify_pod(p) is PodDrainClass.EVICT),
    )


class _ClientCache:
    """Child `ApiClient`s by kubeconfig digest; thread-safe (activities run on several threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[str, client.ApiClient] = {}

    def get(self, kubeconfig: bytes) -> client.ApiClient:
        digest = hashlib.sha256(kubeconfig).hexdigest()
        with self._lock:
            cached = self._clients.get(digest)
            if cached is not None:
                return cached
        loaded = yaml.safe_load(kubeconfig)
        if not isinstance(loaded, dict):
            raise permanent(
                ErrorType.INVALID_SPEC, "the kubeconfig Secret does not hold a kubeconfig"
            )
        api = api_client_from_dict(loaded)
        with self._lock:
            self._clients[digest] = api
            while len(self._clients) > CLIENT_CACHE_SIZE:
                oldest = next(iter(self._clients))
                close_client(self._clients.pop(oldest))
        return api

    def close(self) -> None:
        with self._lock:
            for api in self._clients.values():
                close_client(api)
            self._clients.clear()


async def read_kubeconfig(core: client.CoreV1Api, ref: KubeconfigRef) -> bytes:
    """The kubeconfig bytes in the Secret `ref` names (raises NotFound when it is absent)."""
    where = f"kubeconfig Secret {ref.namespace}/{ref.secret_name}"
    secret = await call_or_none(
        f"read {where}", core.read_namespaced_secret, ref.secret_name, ref.namespace
    )
    if secret is None:
        raise permanent(ErrorType.NOT_FOUND, f"{where} not found")
    value = (secret.get("data") or {}).get(ref.key)
    if not value:
        raise permanent(ErrorType.NOT_FOUND, f"{where} has no key '{ref.key}'")
    return base64.b64decode(value)


class ChildClusterActivities:
    """Nodes and pods of child clusters, reached through their kubeconfig Secrets."""

    def __init__(self, management_api: client.ApiClient) -> None:
        self._management = client.CoreV1Api(management_api)
        self._clients = _ClientCache()

    def close(self) -> None:
        """Close every cached child client (the worker calls this on shutdown)."""
        self._clients.close()

    async def _core(self, ref: KubeconfigRef) -> client.CoreV1Api:
        return client.CoreV1Api(self._clients.get(await read_kubeconfig(self._management, ref)))

    async def _pods(self, core: client.CoreV1Api, node_name: str | None = None) -> list[Obj]:
        selector = f"spec.nodeName={node_name}" if node_name else None
        what = f"list pods on node {node_name}" if node_name else "list pods"
        listed = await call_or_none(what, core.list_pod_for_all_namespaces, field_selector=selector)
        return list((listed or {}).get("items") or [])

    @activity.defn(name=ActivityName.LIST_NODES)
    async def list_nodes(self, request: ListNodesRequest) -> ListNodesResult:
        """Every node (matching the selector), with its pod counts."""
        core = await self._core(request.kubeconfig)
        listed = await call_or_none(
            "list nodes", core.list_node, label_selector=request.label_selector or None
        )
        by_node: dict[str, list[PodInfo]] = {}
        for pod in await self._pods(core):
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name:
                by_node.setdefault(node_name, []).append(pod_info(pod))
        nodes = [
            node_info(node, by_node.get(node["metadata"]["name"], []))
            for node in (listed or {}).get("items") or []
        ]
        return ListNodesResult(nodes=sorted(nodes, key=lambda n: n.name))

    async def _patch_node(
        self, core: client.CoreV1Api, name: str, patch: Obj, what: str
    ) -> Obj | None:
        return await call_or_none(what, core.patch_node, name, patch, _content_type=MERGE_PATCH)

    @activity.defn(name=ActivityName.LABEL_NODE)
    async def label_node(self, request: LabelNodeRequest) -> LabelNodeResult:
        """Merge labels and taints into the node (others are kept; a taint is keyed by key+effect)."""
        core = await self._core(request.kubeconfig)
        what = f"label node {request.node_name}"
        for attempt in range(LABEL_ATTEMPTS):
            node = await call_or_none(
                f"read node {request.node_name}", core.read_node, request.node_name
            )
            if node is None:
                return LabelNodeResult(found=False)
            wanted = {(t.key, t.effect): t for t in request.taints}
            taints = [
                t
                for t in (node.get("spec") or {}).get("taints") or []
                if (t.get("key"), t.get("effect")) not in wanted
            ]
            taints += [t.model_dump(mode="json") for t in request.taints]
            patch: Obj = {
                "metadata": {
                    "labels": request.labels,
                    "resourceVersion": node["metadata"]["resourceVersion"],
                },
            }
            if request.taints:
                patch["spec"] = {"taints": taints}
            try:
                patched = await call(
                    what, core.patch_node, request.node_name, patch, _content_type=MERGE_PATCH
                )
            except ApiException as exc:
                if exc.status == 404:
                    return LabelNodeResult(found=False)
                if exc.status == 409 and attempt + 1 < LABEL_ATTEMPTS:
                    continue  # the kubelet or a controller wrote in between: merge again
                raise kube_error(exc, what) from exc
            return LabelNodeResult(found=bool(patched))
        raise AssertionError("unreachable")  # pragma: no cover

    @activity.defn(name=ActivityName.CORDON_NODE)
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

    @activity.defn(name=ActivityName.UNCORDON_NODE)
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

    @activity.defn(name=ActivityName.LIST_PODS_ON_NODE)
    async def list_pods_on_node(self, request: ListPodsOnNodeRequest) -> ListPodsOnNodeResult:
        """Every pod bound to the node, terminating ones included."""
        core = await self._core(request.kubeconfig)
        pods = [pod_info(pod) for pod in await self._pods(core, request.node_name)]
        return ListPodsOnNodeResult(pods=sorted(pods, key=lambda p: (p.namespace, p.name)))

    @activity.defn(name=ActivityName.EVICT_POD)
    async def evict_pod(self, request: EvictPodRequest) -> EvictPodResult:
        """Ask the Eviction API to remove the pod; a budget's refusal (429) is an outcome."""
        core = await self._core(request.kubeconfig)
        what = f"evict pod {request.namespace}/{request.name}"
        body: Obj = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": request.name, "namespace": request.namespace},
        }
        if request.uid:
            body["deleteOptions"] = {"preconditions": {"uid": request.uid}}
        try:
            await call(
                what, core.create_namespaced_pod_eviction, request.name, request.namespace, body
            )
        except ApiException as exc:
            status = kube_status(exc)
            message = str(status.get("message") or "")
            causes = (status.get("details") or {}).get("causes") or []
            detail = "; ".join(str(c.get("message")) for c in causes if c.get("message"))
            if exc.status == 404:
                return EvictPodResult(outcome=EvictionOutcome.GONE, message=message)
            if exc.status == 409 and request.uid:
                # The uid precondition failed: the name now belongs to another pod.
                return EvictPodResult(outcome=EvictionOutcome.GONE, message=message)
            if exc.status == 429 and ("disruption budget" in message or causes):
                return EvictPodResult(
                    outcome=EvictionOutcome.BLOCKED_BY_BUDGET,
                    message=f"{message} {detail}".strip(),
                )
            # A 429 without a budget is the API server throttling: retried like any overload.
            raise kube_error(exc, what) from exc
        return EvictPodResult(outcome=EvictionOutcome.EVICTED)

    @activity.defn(name=ActivityName.DELETE_POD)
    async def delete_pod(self, request: DeletePodRequest) -> DeletePodResult:
        """Delete the pod without the Eviction API (a forced drain)."""
        core = await self._core(request.kubeconfig)
        deleted = await call_or_none(
            f"delete pod {request.namespace}/{request.name}",
            core.delete_namespaced_pod,
            request.name,
            request.namespace,
            grace_period_seconds=request.grace_period_seconds,
        )
        return DeletePodResult(existed=deleted is not None)

    @activity.defn(name=ActivityName.DELETE_NODE)
    async def delete_node(self, request: DeleteNodeRequest) -> DeleteNodeResult:
        """Delete the Node object."""
        core = await self._core(request.kubeconfig)
        deleted = await call_or_none(
            f"delete node {request.node_name}", core.delete_node, request.node_name
        )
        return DeleteNodeResult(existed=deleted is not None)
