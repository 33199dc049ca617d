"""The invariants the reliability scenarios check, from the simulator's records and from samples.

Pure: each check takes what was recorded (`GET /sim/v1/records`, in its JSON form) or sampled and
returns a `Check`: the violations it found (none when the invariant holds) and the figures it
counted, so a scenario asserts `check.holds` and reports the figures. `test_invariants.py` shows
each check catching what it must catch.

Definitions (what "once" means):

- **An eviction** of a pod is its first eviction the API accepted: the one that set its
  deletionTimestamp (record `repeat: false`). An accepted eviction of a pod that is already
  terminating (`repeat: true`) changes nothing: it is that same eviction sent again, as a drain
  retried after a crash sends it, and is counted apart. Every pod of a drained node (DaemonSet
  pods excepted: a drain leaves them) must have exactly one eviction; no other pod may have any.
- **A host** is claimed once and released once when its changes of hands at the provider for one
  owner (a cluster's workflow run), in order, are exactly `claimed`, `released` (clusters made one
  after another may hold the same host in turn). A claim answered again from its idempotency key
  (`claim-repeated`) hands nothing over and is counted apart.
- **An object** is created once when no two creates stored the same (cluster, resource,
  namespace, name), unless the scenario itself had it deleted and made again (a suspend and a
  resume reinstall a workspace: its ServiceSet and values Secret are made twice, no more); and it has one identity when no two objects Colony made carry the same marks
  (its `colony.dev/*` labels and annotations, `app.kubernetes.io/managed-by`) for one kind in one
  cluster under different names: two objects for one workspace's ServiceSet, say.
- **A GPU** is held by one workspace at a time when, at every sample, the ledger's holders fit
  each node's GPUs and the child cluster's pods bound to a node (running or still terminating)
  request no more GPUs than the node has, and no pod was refused by its kubelet for lack of GPUs.
- **First come, first served**: requests are admitted in the order the ledger received them:
  none is admitted while one received before it still waits (every request is one GPU).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

COLONY_MARK_PREFIXES = ("colony.dev/",)
MANAGED_BY = "app.kubernetes.io/managed-by"
GPU_RESOURCE = "nvidia.com/gpu"


@dataclass
class Check:
    """What one invariant check found."""

    name: str
    violations: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def holds(self) -> bool:
        return not self.violations

    def explain(self, limit: int = 20) -> str:
        shown = "\n  ".join(self.violations[:limit])
        more = len(self.violations) - limit
        return f"{self.name}: {len(self.violations)} violations\n  {shown}" + (
            f"\n  ... and {more} more" if more > 0 else ""
        )


@dataclass(frozen=True)
class PodRef:
    """A pod of a child cluster, as listed before an operation."""

    cluster: str
    namespace: str
    name: str
    uid: str
    node: str
    daemon_set: bool = False


def check_evictions(
    evictions: Iterable[Mapping[str, Any]], pods: Iterable[PodRef], drained: set[str]
) -> Check:
    """Every pod on a node of `drained` (DaemonSet pods excepted) evicted once; no other pod.

    Args:
        evictions: the records' evictions of the operation's window.
        pods: every pod of the clusters concerned when the operation began.
        drained: the nodes the operation removed.
    """
    check = Check("every pod evicted once")
    known = {pod.uid: pod for pod in pods}
    expected = {uid for uid, pod in known.items() if pod.node in drained and not pod.daemon_set}
    first: Counter[str] = Counter()
    repeats = 0
    for record in sorted(evictions, key=lambda r: int(r["seq"])):
        uid = str(record["uid"])
        where = f"{record['cluster']}/{record['namespace']}/{record['name']} on {record['node']}"
        if record["repeat"]:
            repeats += 1
            if not first[uid]:
                check.violations.append(f"{where}: repeated eviction before any eviction")
            continue
        first[uid] += 1
        if first[uid] == 2:
            check.violations.append(f"{where}: evicted twice")
        if uid not in expected:
            pod = known.get(uid)
            why = (
                "a DaemonSet pod"
                if pod is not None and pod.daemon_set
                else "on a node that was not drained"
                if pod is not None
                else "a pod that was not there when the drain began"
            )
            check.violations.append(f"{where}: evicted, but it is {why}")
    for uid in sorted(expected - set(first)):
        pod = known[uid]
        check.violations.append(
            f"{pod.cluster}/{pod.namespace}/{pod.name} on {pod.node}: never evicted"
        )
    check.figures = {
        "pods_on_drained_nodes": len(expected),
        "evictions": sum(first.values()),
        "repeated_evictions": repeats,
    }
    return check


def check_hosts(
    hosts: Iterable[Mapping[str, Any]], *, must_end_free: bool = True, owners: Sequence[str] = ()
) -> Check:
    """Each host that changed hands was claimed once and released once, in that order.

    Args:
        hosts: the records' host changes of the scenario's window.
        must_end_free: every host claimed in the window must have been released by its end.
        owners: when given, every claim must be made for an owner starting with one of these.
    """
    check = Check("every host claimed once and released once")
    changes: dict[tuple[str, str], list[str]] = defaultdict(list)
    repeated = 0
    for record in sorted(hosts, key=lambda r: int(r["seq"])):
        host, owner = str(record["hostId"]), str(record.get("owner") or "")
        if record["change"] == "claim-repeated":
            repeated += 1
            continue
        changes[host, owner].append(str(record["change"]))
        if record["change"] == "claimed" and owners and not owner.startswith(tuple(owners)):
            check.violations.append(f"{host}: claimed for {owner!r}, not this scenario's")
    for (host, owner), seen in sorted(changes.items()):
        if seen == ["claimed", "released"] or (seen == ["claimed"] and not must_end_free):
            continue
        if seen == ["claimed"]:
            check.violations.append(f"{host}: claimed by {owner!r} and never released")
        else:
            check.violations.append(
                f"{host}: changed hands {seen} for {owner!r}, not claimed then released"
            )
    check.figures = {
        "hosts": len({host for host, _ in changes}),
        "claims": sum(seen.count("claimed") for seen in changes.values()),
        "releases": sum(seen.count("released") for seen in changes.values()),
        "claims_answered_again": repeated,
    }
    return check


def colony_marks(record: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """An object's ownership marks: Colony's labels and annotations (its identity, name aside)."""
    marks: dict[str, str] = {}
    for source in ("labels", "annotations"):
        for key, value in (record.get(source) or {}).items():
            if key.startswith(COLONY_MARK_PREFIXES) or key == MANAGED_BY:
                marks[f"{source}:{key}"] = str(value)
    return tuple(sorted(marks.items()))


def check_creates(
    created: Iterable[Mapping[str, Any]],
    lifetimes: Callable[[Mapping[str, Any]], int] = lambda record: 1,
) -> Check:
    """No object created twice; no two objects Colony made for one identity.

    Args:
        created: the records' creates of the scenario's window.
        lifetimes: how many times the object of a create record may be made in the window: 1,
            unless the scenario deletes it on purpose and makes it again (a suspended workspace's
            ServiceSet and values Secret, made again by its resume).
    """
    check = Check("no object created twice")
    by_name: Counter[tuple[str, str, str, str, str]] = Counter()
    allowed: dict[tuple[str, str, str, str, str], int] = {}
    names_by_identity: dict[tuple[Any, ...], set[str]] = defaultdict(set)
    resources: Counter[str] = Counter()
    for record in created:
        key = (
            str(record["cluster"]),
            str(record["group"]),
            str(record["resource"]),
            str(record["namespace"]),
            str(record["name"]),
        )
        by_name[key] += 1
        allowed[key] = lifetimes(record)
        resources[str(record["resource"])] += 1
        marks = colony_marks(record)
        if marks:
            identity = (key[0], key[1], key[2], marks)
            names_by_identity[identity].add(f"{key[3]}/{key[4]}" if key[3] else key[4])
    for key, count in sorted(by_name.items()):
        if count > allowed[key]:
            cluster, _, resource, namespace, name = key
            where = f"{namespace}/{name}" if namespace else name
            check.violations.append(f"{cluster} {resource} {where}: created {count} times")
    for (cluster, _, resource, marks), names in sorted(
        names_by_identity.items(), key=lambda item: repr(item[0])
    ):
        if len(names) > 1:
            shown = ", ".join(f"{k.split(':', 1)[1]}={v}" for k, v in marks)
            check.violations.append(
                f"{cluster} {resource}: {len(names)} objects for one identity ({shown}): "
                f"{sorted(names)}"
            )
    check.figures = {"objects_created": sum(by_name.values()), "by_resource": dict(resources)}
    return check


# --- GPUs ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodGpus:
    """A pod of a child cluster as sampled: where it is bound and the GPUs it requests."""

    namespace: str
    name: str
    node: str
    gpus: int
    phase: str
    terminating: bool
    reason: str = ""


@dataclass(frozen=True)
class GpuSample:
    """One look at a cluster's GPUs: its ledger's holders and its pods."""

    at: float
    node_gpus: Mapping[str, int]
    """Each node's allocatable GPUs (from the child cluster's Nodes)."""
    holders: Sequence[tuple[str, int, tuple[str, ...]]]
    """The ledger's holders: (workspace, GPUs, nodes)."""
    pods: Sequence[PodGpus]


def gpu_pods_holding(sample: GpuSample) -> dict[str, list[PodGpus]]:
    """By node: the pods that hold GPUs there (bound, not finished; terminating ones too)."""
    holding: dict[str, list[PodGpus]] = defaultdict(list)
    for pod in sample.pods:
        if pod.gpus and pod.node and pod.phase not in ("Succeeded", "Failed"):
            holding[pod.node].append(pod)
    return holding


def check_gpu_samples(samples: Sequence[GpuSample], capacity: int) -> Check:
    """At every sample, no GPU held twice: see the module docstring."""
    check = Check("no two workspaces ever held the same GPU")
    peak_ledger = peak_pods = 0
    for sample in samples:
        when = f"t={sample.at:.2f}"
        held = sum(gpus for _, gpus, _ in sample.holders)
        peak_ledger = max(peak_ledger, held)
        if held > capacity:
            check.violations.append(f"{when}: the ledger's holders hold {held} of {capacity} GPUs")
        per_node: Counter[str] = Counter()
        for workspace, gpus, nodes in sample.holders:
            if len(nodes) == 1:
                per_node[nodes[0]] += gpus
            elif not nodes:
                check.violations.append(f"{when}: {workspace} holds {gpus} GPUs on no node")
        for node, gpus in per_node.items():
            if gpus > sample.node_gpus.get(node, 0):
                check.violations.append(
                    f"{when}: the ledger places {gpus} GPUs on {node}, which has "
                    f"{sample.node_gpus.get(node, 0)}"
                )
        in_use = 0
        for node, pods in gpu_pods_holding(sample).items():
            requested = sum(p.gpus for p in pods)
            in_use += requested
            if requested > sample.node_gpus.get(node, 0):
                shown = ", ".join(f"{p.namespace}/{p.name}:{p.gpus}" for p in pods)
                check.violations.append(
                    f"{when}: pods on {node} hold {requested} GPUs of "
                    f"{sample.node_gpus.get(node, 0)}: {shown}"
                )
        peak_pods = max(peak_pods, in_use)
        for pod in sample.pods:
            if pod.reason.startswith("OutOf"):
                check.violations.append(
                    f"{when}: {pod.namespace}/{pod.name} refused by its kubelet ({pod.reason})"
                )
    check.figures = {
        "samples": len(samples),
        "peak_gpus_held_by_ledger": peak_ledger,
        "peak_gpus_held_by_pods": peak_pods,
        "gpus": capacity,
    }
    return check


def check_first_come(arrivals: Sequence[str], admissions: Sequence[str]) -> Check:
    """Admitted in the order the ledger received the requests (each one GPU).

    Args:
        arrivals: workspaces in the order their requests reached the ledger.
        admissions: workspaces in the order they were admitted.
    """
    check = Check("first come, first served")
    rank = {name: index for index, name in enumerate(arrivals)}
    for name in admissions:
        if name not in rank:
            check.violations.append(f"{name}: admitted without a request the ledger received")
    admitted: set[str] = set()
    for name in admissions:
        earlier = [n for n in arrivals[: rank.get(name, 0)] if n not in admitted]
        if earlier:
            check.violations.append(
                f"{name} (arrived {rank[name] + 1}) admitted while {earlier[0]} "
                f"(arrived {rank[earlier[0]] + 1}) still waited"
            )
        admitted.add(name)
    check.figures = {"requests": len(arrivals), "admissions": len(admissions)}
    return check
