"""Fault injection for the whole simulation: failing, throttled and slow requests, and scripted faults.

One `FaultInjector` is shared in-process by every sim server and controller:

- the HTTP layers (kube API server per cluster, host provider) call `await before_request(target,
  method, path)` first on every request; it sleeps for injected latency and raises
  `sim.apiserver.errors.ApiError` (429 TooManyRequests with `details.retryAfterSeconds = 1`, which
  the HTTP layer turns into a `Retry-After: 1` header, or 500 InternalError / 503
  ServiceUnavailable) that the layer renders in its own error format;
- the API server's eviction handler calls `take_eviction_fault(cluster, namespace, pod)`;
- controllers ask `node_never_ready_matches(...)`, `cluster_deployment_failure(...)` and
  `service_set_failure(...)`;
- nodes changing outside any operation: `stop_kubelet(node)` makes a node's kubelet stop posting
  status (the child's node lifecycle controller then marks it Ready=Unknown/NodeStatusUnknown and
  taints it `node.kubernetes.io/unreachable` after the grace period), `start_kubelet(node)` brings
  it back; `lose_node(node)` makes the machine vanish (its Node object is deleted and its pods are
  garbage-collected; it registers again after `restore_node(node)`). Controllers ask
  `kubelet_stopped(cluster, node)` and `node_lost(cluster, node)`, and `on_change(callback)` tells
  them when the configuration changed (the HTTP endpoint changes it without any store event).

Probabilistic faults draw from one seeded `random.Random`, so a run with a seed repeats itself.
The configuration is a `FaultConfig` (pydantic): loaded at start (`FaultInjector.from_config`, e.g.
from YAML) and replaced at run time over HTTP on `/sim/v1/faults` (`add_fault_routes`), whose
requests are never faulted themselves. What was injected is counted (`requests`, `injected`;
GET `/sim/v1/faults/injected`), so a scenario can say how many of its requests failed.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sim.apiserver.errors import ApiError

__all__ = [
    "FAULTS_PATH",
    "INJECTED_PATH",
    "EvictionFault",
    "FaultConfig",
    "FaultInjector",
    "NodeFault",
    "ObjectFailure",
    "RequestFault",
    "ScriptedResponse",
    "add_fault_routes",
    "faults_routes",
]

FAULTS_PATH = "/sim/v1/faults"
INJECTED_PATH = f"{FAULTS_PATH}/injected"
"""GET: requests seen and faults answered so far, by target (and status code)."""
SIM_PATH = "/sim/"

# 1 second: what kube-apiserver's max-in-flight filter answers in Retry-After when it throttles.
RETRY_AFTER_SECONDS = 1

_REASONS = {
    429: "TooManyRequests",
    500: "InternalError",
    502: "BadGateway",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RequestFault(_Model):
    """Probabilistic faults for the requests matching a scope (every unset scope field matches)."""

    target: str | None = Field(None, description='cluster name, or "hostprovider"')
    path: str | None = Field(None, description="substring of the request path")
    method: str | None = Field(None, description="HTTP method, e.g. GET")
    error_rate: float = Field(0.0, ge=0.0, le=1.0, description="share answered 500 or 503")
    throttle_rate: float = Field(0.0, ge=0.0, le=1.0, description="share answered 429")
    latency_seconds: float = Field(0.0, ge=0.0, description="delay added before answering")
    error_codes: list[int] = Field(default_factory=lambda: [500, 503])

    def matches(self, target: str, method: str, path: str) -> bool:
        return (
            (self.target is None or self.target == target)
            and (self.path is None or self.path in path)
            and (self.method is None or self.method.upper() == method.upper())
        )


class ScriptedResponse(_Model):
    """The next `times` requests matching the scope answer `code` (e.g. 429, 500, 503)."""

    target: str | None = None
    path: str | None = None
    """Substring of the request's path with its query string (`/api/v1/nodes?watch=1`: a watch of
    the nodes, not their list)."""
    method: str | None = None
    code: int = Field(503, ge=400, le=599)
    times: int = Field(1, ge=0)
    message: str = "injected fault"

    def matches(self, target: str, method: str, path: str) -> bool:
        return (
            (self.target is None or self.target == target)
            and (self.path is None or self.path in path)
            and (self.method is None or self.method.upper() == method.upper())
        )


class EvictionFault(_Model):
    """The next `times` evictions of a pod answer 429, as if a PodDisruptionBudget refused them."""

    namespace: str
    pod: str
    times: int = Field(1, ge=0)
    cluster: str | None = Field(None, description="child cluster name; None matches every cluster")


class ObjectFailure(_Model):
    """A k0rdent object the controllers drive to a failed state with `message`."""

    namespace: str
    name: str
    message: str = "injected failure"


class NodeFault(_Model):
    """A node of a child cluster (`cluster` is the ClusterDeployment name; None: every cluster)."""

    node: str
    cluster: str | None = None

    def matches(self, cluster: str, node: str) -> bool:
        return self.node == node and (self.cluster is None or self.cluster == cluster)


class FaultConfig(_Model):
    """Everything the injector does; the body of GET/PUT /sim/v1/faults and the start-up YAML.

    The top-level rates apply to every request in the top-level scope (`target`, `path`, `method`);
    `rules` add more scoped rates.
    """

    seed: int | None = None
    error_rate: float = Field(0.0, ge=0.0, le=1.0)
    throttle_rate: float = Field(0.0, ge=0.0, le=1.0)
    latency_seconds: float = Field(0.0, ge=0.0)
    target: str | None = None
    path: str | None = None
    method: str | None = None
    error_codes: list[int] = Field(default_factory=lambda: [500, 503])
    rules: list[RequestFault] = Field(default_factory=list)
    scripted: list[ScriptedResponse] = Field(default_factory=list)
    evictions: list[EvictionFault] = Field(default_factory=list)
    nodes_never_ready: list[str] = Field(default_factory=list)
    cluster_deployment_failures: list[ObjectFailure] = Field(default_factory=list)
    service_set_failures: list[ObjectFailure] = Field(default_factory=list)
    kubelets_stopped: list[NodeFault] = Field(default_factory=list)
    nodes_lost: list[NodeFault] = Field(default_factory=list)

    def global_rule(self) -> RequestFault:
        return RequestFault(
            target=self.target,
            path=self.path,
            method=self.method,
            error_rate=self.error_rate,
            throttle_rate=self.throttle_rate,
            latency_seconds=self.latency_seconds,
            error_codes=self.error_codes,
        )


def fault_error(code: int, message: str = "injected fault") -> ApiError:
    """The ApiError a faulted request raises, worded like kube-apiserver's own answers."""
    reason = _REASONS.get(code, "InternalError")
    if code == 429:
        return ApiError(
            429,
            reason,
            f"Too many requests, please try again later. ({message})",
            details={"retryAfterSeconds": RETRY_AFTER_SECONDS},
        )
    if code == 500:
        return ApiError(500, reason, f"Internal error occurred: {message}")
    return ApiError(code, reason, message)


class FaultInjector:
    """Decides which requests fail, are throttled or slowed, and holds the scripted faults.

    Args:
        config: the initial configuration (no faults when None).
        sleep: how latency is waited for; tests may pass a recorder.
    """

    def __init__(
        self,
        config: FaultConfig | None = None,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._sleep = sleep
        self._config = FaultConfig()
        self._rng = random.Random()
        self.requests: Counter[str] = Counter()
        """Requests decided, by target (cluster name or "hostprovider"), faulted or not."""
        self.injected: Counter[tuple[str, int]] = Counter()
        """Faults answered, by (target, status code)."""
        self._listeners: list[Callable[[], None]] = []
        self.replace(config or FaultConfig())

    @classmethod
    def from_config(cls, data: dict[str, Any] | FaultConfig | None) -> FaultInjector:
        """An injector from a dict (e.g. loaded from YAML); raises pydantic's ValidationError."""
        if data is None or isinstance(data, FaultConfig):
            return cls(data)
        return cls(FaultConfig.model_validate(data))

    # ---------------------------------------------------------------- configuration

    @property
    def config(self) -> FaultConfig:
        """A copy of the current configuration, remaining scripted counts included."""
        return self._config.model_copy(deep=True)

    def replace(self, config: FaultConfig) -> None:
        """Replace every fault; a config with a seed reseeds the random generator."""
        self._config = config.model_copy(deep=True)
        if config.seed is not None:
            self._rng.seed(config.seed)
        self._changed()

    def clear(self) -> None:
        """Remove every fault (the random generator keeps its state)."""
        self._config = FaultConfig(seed=self._config.seed)
        self._changed()

    def on_change(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback` after every configuration change; returns the unsubscribe function."""
        self._listeners.append(callback)

        def unsubscribe() -> None:
            if callback in self._listeners:
                self._listeners.remove(callback)

        return unsubscribe

    def _changed(self) -> None:
        for callback in list(getattr(self, "_listeners", ())):
            callback()

    def seed(self, seed: int) -> None:
        self._config.seed = seed
        self._rng.seed(seed)

    def set_rates(
        self,
        *,
        error_rate: float | None = None,
        throttle_rate: float | None = None,
        latency_seconds: float | None = None,
    ) -> None:
        """Change the global rates, keeping everything else."""
        data = self._config.model_dump()
        if error_rate is not None:
            data["error_rate"] = error_rate
        if throttle_rate is not None:
            data["throttle_rate"] = throttle_rate
        if latency_seconds is not None:
            data["latency_seconds"] = latency_seconds
        self._config = FaultConfig.model_validate(data)

    def add_rule(self, rule: RequestFault) -> None:
        """Add scoped probabilistic faults."""
        self._config.rules.append(rule)

    def fail_next(
        self,
        code: int,
        times: int = 1,
        *,
        target: str | None = None,
        path: str | None = None,
        method: str | None = None,
        message: str = "injected fault",
    ) -> None:
        """Answer the next `times` matching requests with `code`."""
        self._config.scripted.append(
            ScriptedResponse(
                target=target, path=path, method=method, code=code, times=times, message=message
            )
        )

    def evict_429(
        self, namespace: str, pod: str, times: int = 1, *, cluster: str | None = None
    ) -> None:
        """The next `times` evictions of `namespace/pod` answer 429."""
        self._config.evictions.append(
            EvictionFault(namespace=namespace, pod=pod, times=times, cluster=cluster)
        )

    def node_never_ready(self, name_or_address: str) -> None:
        """The node with this name or address (a host's IP) never becomes Ready."""
        if name_or_address not in self._config.nodes_never_ready:
            self._config.nodes_never_ready.append(name_or_address)
        self._changed()

    def fail_cluster_deployment(
        self, namespace: str, name: str, message: str = "injected failure"
    ) -> None:
        """The ClusterDeployment `namespace/name` fails with `message` instead of becoming Ready."""
        self._config.cluster_deployment_failures.append(
            ObjectFailure(namespace=namespace, name=name, message=message)
        )
        self._changed()

    def fail_service_set(
        self, namespace: str, name: str, message: str = "injected failure"
    ) -> None:
        """Every service of the ServiceSet `namespace/name` ends Failed with `message`."""
        self._config.service_set_failures.append(
            ObjectFailure(namespace=namespace, name=name, message=message)
        )
        self._changed()

    def stop_kubelet(self, node: str, *, cluster: str | None = None) -> None:
        """The kubelet of `node` stops posting status (a crash, a network partition)."""
        if not any(f.node == node and f.cluster == cluster for f in self._config.kubelets_stopped):
            self._config.kubelets_stopped.append(NodeFault(node=node, cluster=cluster))
        self._changed()

    def start_kubelet(self, node: str, *, cluster: str | None = None) -> None:
        """Undo `stop_kubelet`: the kubelet posts Ready again."""
        self._config.kubelets_stopped = [
            f
            for f in self._config.kubelets_stopped
            if not (f.node == node and f.cluster == cluster)
        ]
        self._changed()

    def lose_node(self, node: str, *, cluster: str | None = None) -> None:
        """The machine behind `node` vanishes: its Node is deleted and it does not register."""
        if not any(f.node == node and f.cluster == cluster for f in self._config.nodes_lost):
            self._config.nodes_lost.append(NodeFault(node=node, cluster=cluster))
        self._changed()

    def restore_node(self, node: str, *, cluster: str | None = None) -> None:
        """Undo `lose_node`: the machine boots again and its node registers anew."""
        self._config.nodes_lost = [
            f for f in self._config.nodes_lost if not (f.node == node and f.cluster == cluster)
        ]
        self._changed()

    # ---------------------------------------------------------------- queries (controllers)

    def kubelet_stopped(self, cluster: str, node: str) -> bool:
        """True while the kubelet of `node` in `cluster` posts nothing."""
        return any(f.matches(cluster, node) for f in self._config.kubelets_stopped)

    def node_lost(self, cluster: str, node: str) -> bool:
        """True while the machine of `node` in `cluster` is gone."""
        return any(f.matches(cluster, node) for f in self._config.nodes_lost)

    def take_eviction_fault(self, cluster: str, namespace: str, pod: str) -> bool:
        """True when this eviction must answer 429; uses up one of the scripted times."""
        for rule in self._config.evictions:
            if (
                rule.times > 0
                and rule.namespace == namespace
                and rule.pod == pod
                and (rule.cluster is None or rule.cluster == cluster)
            ):
                rule.times -= 1
                return True
        return False

    def node_never_ready_matches(self, *names_or_addresses: str | None) -> bool:
        """True when any of the node's name or addresses was declared never-ready."""
        wanted = set(self._config.nodes_never_ready)
        return any(candidate in wanted for candidate in names_or_addresses if candidate)

    def cluster_deployment_failure(self, namespace: str, name: str) -> str | None:
        """The failure message scripted for this ClusterDeployment, if any."""
        return _failure(self._config.cluster_deployment_failures, namespace, name)

    def service_set_failure(self, namespace: str, name: str) -> str | None:
        """The failure message scripted for this ServiceSet, if any."""
        return _failure(self._config.service_set_failures, namespace, name)

    # ---------------------------------------------------------------- requests (HTTP layers)

    def decide(self, target: str, method: str, path: str) -> tuple[float, ApiError | None]:
        """The latency to add and the error to answer (None: serve normally) for one request.

        Scripted responses are used up first; then each matching rule may throttle, then fail.
        """
        if path.startswith(FAULTS_PATH):
            return 0.0, None
        config = self._config
        if not (
            config.rules
            or config.scripted
            or config.error_rate
            or config.throttle_rate
            or config.latency_seconds
        ):
            # Nothing to inject (the usual case): skip building the global rule, a pydantic
            # model, on every request of every sim server.
            return 0.0, None
        rules = [config.global_rule(), *config.rules]
        matching = [r for r in rules if r.matches(target, method, path)]
        latency = sum(r.latency_seconds for r in matching)
        for scripted in self._config.scripted:
            if scripted.times > 0 and scripted.matches(target, method, path):
                scripted.times -= 1
                return latency, fault_error(scripted.code, scripted.message)
        for rule in matching:
            # Draw only for non-zero rates so that adding a rule elsewhere does not shift
            # the random sequence of an unrelated, seeded scenario.
            if rule.throttle_rate > 0 and self._rng.random() < rule.throttle_rate:
                return latency, fault_error(429)
            if rule.error_rate > 0 and self._rng.random() < rule.error_rate:
                code = self._rng.choice(rule.error_codes) if rule.error_codes else 500
                return latency, fault_error(code)
        return latency, None

    async def before_request(self, target: str, method: str, path: str) -> None:
        """Sleep for injected latency, then raise the injected `ApiError`, if any."""
        latency, error = self.decide(target, method, path)
        if not path.startswith(SIM_PATH):
            self.requests[target] += 1
            if error is not None:
                self.injected[target, error.code] += 1
        if latency > 0:
            await self._sleep(latency)
        if error is not None:
            raise error


def _failure(failures: Iterable[ObjectFailure], namespace: str, name: str) -> str | None:
    for failure in failures:
        if failure.namespace == namespace and failure.name == name:
            return failure.message
    return None


# -------------------------------------------------------------------- HTTP


def faults_routes(injector: FaultInjector) -> web.RouteTableDef:
    """GET (current config), PUT (replace; body = FaultConfig JSON) and DELETE (clear) on
    /sim/v1/faults; GET /sim/v1/faults/injected: every request seen by target and the faults
    answered by target and status code, since the start."""
    routes = web.RouteTableDef()

    @routes.get(FAULTS_PATH)
    async def get_faults(request: web.Request) -> web.Response:
        return web.json_response(injector.config.model_dump(mode="json"))

    @routes.put(FAULTS_PATH)
    async def put_faults(request: web.Request) -> web.Response:
        try:
            body = await request.json()
            config = FaultConfig.model_validate(body)
        except (ValueError, ValidationError) as exc:
            error = ApiError(400, "BadRequest", f"invalid fault configuration: {exc}")
            return web.json_response(error.status_body(), status=400)
        injector.replace(config)
        return web.json_response(injector.config.model_dump(mode="json"))

    @routes.get(INJECTED_PATH)
    async def get_injected(request: web.Request) -> web.Response:
        faulted: dict[str, dict[str, int]] = {}
        for (target, code), count in sorted(injector.injected.items()):
            faulted.setdefault(target, {})[str(code)] = count
        return web.json_response({"requests": dict(injector.requests), "faulted": faulted})

    @routes.delete(FAULTS_PATH)
    async def delete_faults(request: web.Request) -> web.Response:
        injector.clear()
        return web.json_response(injector.config.model_dump(mode="json"))

    return routes


def add_fault_routes(app: web.Application, injector: FaultInjector) -> None:
    """Mount the /sim/v1/faults endpoints on a sim server's application."""
    app.add_routes(faults_routes(injector))
