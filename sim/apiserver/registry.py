"""The resource types a simulated cluster serves: built-ins plus CRDs registered at run time.

The store and the HTTP layer look every type up here; creating a CustomResourceDefinition calls
`register`, deleting it `unregister`. Each cluster store owns its own registry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sim.apiserver.errors import ApiError


@dataclass(frozen=True)
class ResourceType:
    """One served resource, e.g. core/v1 pods or apps/v1 daemonsets."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    schema: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    categories: tuple[str, ...] = ()
    # Every served version (CRDs may serve several without conversion); `version` is the storage one.
    versions: tuple[str, ...] = ()
    # A CRD's additionalPrinterColumns (storage version): the columns of `kubectl get`.
    printer_columns: tuple[dict[str, Any], ...] = field(default=(), compare=False, hash=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def served_versions(self) -> tuple[str, ...]:
        return self.versions or (self.version,)

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    def api_version_for(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version


_STATUS = frozenset({"status"})

NAMESPACES = ResourceType("", "v1", "namespaces", "Namespace", False, "namespace", ("ns",), _STATUS)
NODES = ResourceType("", "v1", "nodes", "Node", False, "node", ("no",), _STATUS)
PODS = ResourceType(
    "",
    "v1",
    "pods",
    "Pod",
    True,
    "pod",
    ("po",),
    frozenset({"status", "eviction", "binding", "log", "portforward"}),
    categories=("all",),
)
SECRETS = ResourceType("", "v1", "secrets", "Secret", True, "secret")
CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap", True, "configmap", ("cm",))
SERVICES = ResourceType(
    "", "v1", "services", "Service", True, "service", ("svc",), _STATUS, categories=("all",)
)
SERVICEACCOUNTS = ResourceType(
    "", "v1", "serviceaccounts", "ServiceAccount", True, "serviceaccount", ("sa",),
    frozenset({"token"}),
)  # fmt: skip
EVENTS = ResourceType("", "v1", "events", "Event", True, "event", ("ev",))
DAEMONSETS = ResourceType(
    "apps", "v1", "daemonsets", "DaemonSet", True, "daemonset", ("ds",), _STATUS,
    categories=("all",),
)  # fmt: skip
DEPLOYMENTS = ResourceType(
    "apps", "v1", "deployments", "Deployment", True, "deployment", ("deploy",), _STATUS,
    categories=("all",),
)  # fmt: skip
PDBS = ResourceType(
    "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, "poddisruptionbudget",
    ("pdb",), _STATUS,
)  # fmt: skip
# Gateway API (gateway.networking.k8s.io), served as built-ins with the printer columns, versions
# and short names of its standard-channel CRDs (TCPRoute from the experimental channel). The sim
# has no schemas for them: nothing is defaulted or validated server-side (see CONTRACT.md).
_GATEWAY_API = "gateway.networking.k8s.io"


def _column(name: str, json_path: str, type_: str = "string", priority: int = 0) -> dict[str, Any]:
    return {"name": name, "type": type_, "jsonPath": json_path, "priority": priority}


_AGE_COLUMN = _column("Age", ".metadata.creationTimestamp", "date")
GATEWAYCLASSES = ResourceType(
    _GATEWAY_API, "v1", "gatewayclasses", "GatewayClass", False, "gatewayclass", ("gc",), _STATUS,
    categories=("gateway-api",), versions=("v1", "v1beta1"),
    printer_columns=(
        _column("Controller", ".spec.controllerName"),
        _column("Accepted", '.status.conditions[?(@.type=="Accepted")].status'),
        _AGE_COLUMN,
        _column("Description", ".spec.description", priority=1),
    ),
)  # fmt: skip
GATEWAYS = ResourceType(
    _GATEWAY_API, "v1", "gateways", "Gateway", True, "gateway", ("gtw",), _STATUS,
    categories=("gateway-api",), versions=("v1", "v1beta1"),
    printer_columns=(
        _column("Class", ".spec.gatewayClassName"),
        _column("Address", ".status.addresses[*].value"),
        _column("Programmed", '.status.conditions[?(@.type=="Programmed")].status'),
        _AGE_COLUMN,
    ),
)  # fmt: skip
HTTPROUTES = ResourceType(
    _GATEWAY_API, "v1", "httproutes", "HTTPRoute", True, "httproute", (), _STATUS,
    categories=("gateway-api",), versions=("v1", "v1beta1"),
    printer_columns=(_column("Hostnames", ".spec.hostnames"), _AGE_COLUMN),
)  # fmt: skip
TCPROUTES = ResourceType(
    _GATEWAY_API, "v1alpha2", "tcproutes", "TCPRoute", True, "tcproute", (), _STATUS,
    categories=("gateway-api",), printer_columns=(_AGE_COLUMN,),
)  # fmt: skip
REFERENCEGRANTS = ResourceType(
    _GATEWAY_API, "v1beta1", "referencegrants", "ReferenceGrant", True, "referencegrant",
    ("refgrant",), categories=("gateway-api",), versions=("v1beta1", "v1alpha2"),
    printer_columns=(_AGE_COLUMN,),
)  # fmt: skip
CRDS = ResourceType(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False,
    "customresourcedefinition", ("crd", "crds"), _STATUS,
)  # fmt: skip
# kubectl describe node reads the node's lease; serving the type keeps describe quiet.
LEASES = ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True, "lease")

# RBAC objects are stored and served so clients can bind roles as on a real cluster; the sim does
# not enforce them: every token the cluster issued is authorized (see the `sim` package docstring).
CLUSTERROLES = ResourceType(
    "rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, "clusterrole"
)
CLUSTERROLEBINDINGS = ResourceType(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False,
    "clusterrolebinding",
)  # fmt: skip
ROLES = ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", True, "role")
ROLEBINDINGS = ResourceType(
    "rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, "rolebinding"
)

BUILTINS: tuple[ResourceType, ...] = (
    NAMESPACES, NODES, PODS, SECRETS, CONFIGMAPS, SERVICES, SERVICEACCOUNTS, EVENTS,
    DAEMONSETS, DEPLOYMENTS, PDBS, GATEWAYCLASSES, GATEWAYS, HTTPROUTES, TCPROUTES,
    REFERENCEGRANTS, CRDS, LEASES,
    CLUSTERROLES, CLUSTERROLEBINDINGS, ROLES, ROLEBINDINGS,
)  # fmt: skip


WITHOUT_GENERATION: frozenset[tuple[str, str]] = frozenset(
    rt.key
    for rt in (
        NAMESPACES, NODES, SECRETS, CONFIGMAPS, SERVICES, SERVICEACCOUNTS, EVENTS, LEASES,
        CLUSTERROLES, CLUSTERROLEBINDINGS, ROLES, ROLEBINDINGS,
    )
)  # fmt: skip
"""Types whose objects have no metadata.generation on a real API server (their strategies never
set it; seen on kube-apiserver 1.37); pods, workloads, PodDisruptionBudgets, CRDs and custom
resources have one."""


def tracks_generation(rt: ResourceType) -> bool:
    """Whether kube-apiserver keeps metadata.generation for objects of `rt`."""
    return rt.key not in WITHOUT_GENERATION


class ResourceRegistry:
    """Mutable set of served types, keyed by (group, plural)."""

    def __init__(self, types: list[ResourceType] | None = None) -> None:
        self._by_key: dict[tuple[str, str], ResourceType] = {}
        self._by_kind: dict[tuple[str, str], ResourceType] = {}
        for rt in types or []:
            self.register(rt)

    @classmethod
    def builtin(cls) -> ResourceRegistry:
        """A registry holding every built-in type the sim serves."""
        return cls(list(BUILTINS))

    def get(self, group: str, plural: str) -> ResourceType:
        """The type served as `plural` in `group`; 404 NotFound if nothing is."""
        rt = self._by_key.get((group, plural))
        if rt is None:
            raise ApiError(
                404, "NotFound", "the server could not find the requested resource",
                details={"group": group, "kind": plural},
            )  # fmt: skip
        return rt

    def try_get(self, group: str, plural: str) -> ResourceType | None:
        return self._by_key.get((group, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceType:
        """The type for an object's apiVersion and kind; 404 if not served."""
        group, _, version = api_version.rpartition("/")
        rt = self._by_kind.get((group, kind))
        if rt is None or version not in rt.served_versions:
            raise ApiError(
                404, "NotFound", f'no matches for kind "{kind}" in version "{api_version}"'
            )
        return rt

    def register(self, rt: ResourceType) -> None:
        self._by_key[rt.key] = rt
        self._by_kind[(rt.group, rt.kind)] = rt

    def unregister(self, group: str, plural: str) -> None:
        rt = self._by_key.pop((group, plural), None)
        if rt is not None:
            self._by_kind.pop((rt.group, rt.kind), None)

    def all(self) -> list[ResourceType]:
        return list(self._by_key.values())


def resource_type_from_crd(crd: dict[str, Any]) -> ResourceType:
    """The type a CustomResourceDefinition object makes served (storage version's schema)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    versions = [v for v in spec.get("versions") or [] if v.get("served", True)]
    if not versions:
        versions = list(spec.get("versions") or [])
    storage = next((v for v in versions if v.get("storage")), versions[0] if versions else {})
    subresources: set[str] = set()
    if "status" in (storage.get("subresources") or {}):
        subresources.add("status")
    schema = (storage.get("schema") or {}).get("openAPIV3Schema")
    plural = names.get("plural", "")
    return ResourceType(
        group=spec.get("group", ""),
        version=storage.get("name", "v1"),
        plural=plural,
        kind=names.get("kind", ""),
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
        singular=names.get("singular") or plural.rstrip("s") or plural,
        short_names=tuple(names.get("shortNames") or ()),
        subresources=frozenset(subresources),
        schema=schema,
        categories=tuple(names.get("categories") or ()),
        versions=tuple(v.get("name", "") for v in versions),
        printer_columns=tuple(storage.get("additionalPrinterColumns") or ()),
    )
