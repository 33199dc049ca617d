"""Discovery documents (/version, /api, /apis, /api/v1, /apis/<group>/<version>) from a registry.

Answers plain (non-aggregated) discovery whatever the Accept header asks for: client-go and kubectl
fall back to it when the server does not answer as APIGroupDiscoveryList, and the Python
DynamicClient only knows this form.
"""

from __future__ import annotations

from typing import Any

from sim.apiserver import errors
from sim.apiserver.registry import ResourceRegistry, ResourceType

KUBE_VERSION = {
    "major": "1",
    "minor": "37",
    "gitVersion": "v1.37.0-colony-sim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.25.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
# Subresources whose request and response kinds live in other groups.
_SUBRESOURCE_KINDS: dict[str, tuple[str, str, str, list[str]]] = {
    "eviction": ("policy", "v1", "Eviction", ["create"]),
    "binding": ("", "v1", "Binding", ["create"]),
    "token": ("authentication.k8s.io", "v1", "TokenRequest", ["create"]),
    "log": ("", "v1", "Pod", ["get"]),
    "portforward": ("", "v1", "PodPortForwardOptions", ["create", "get"]),
}


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group_versions(registry: ResourceRegistry) -> dict[str, tuple[str, list[str]]]:
    """group -> (preferred version, all versions), in registration order."""
    groups: dict[str, tuple[str, list[str]]] = {}
    for rt in registry.all():
        if not rt.group:
            continue
        _, versions = groups.setdefault(rt.group, (rt.version, []))
        for version in rt.served_versions:
            if version not in versions:
                versions.append(version)
    return groups


def _group_doc(group: str, preferred: str, versions: list[str]) -> dict[str, Any]:
    return {
        "name": group,
        "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
        "preferredVersion": {"groupVersion": f"{group}/{preferred}", "version": preferred},
    }


def api_group_list(registry: ResourceRegistry) -> dict[str, Any]:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group_doc(g, p, vs) for g, (p, vs) in _group_versions(registry).items()],
    }


def api_group(registry: ResourceRegistry, group: str) -> dict[str, Any]:
    found = _group_versions(registry).get(group)
    if found is None:
        raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_doc(group, *found)}


def _resource_doc(rt: ResourceType) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": rt.plural,
        "singularName": rt.singular or rt.kind.lower(),
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": _VERBS,
    }
    if rt.short_names:
        doc["shortNames"] = list(rt.short_names)
    if rt.categories:
        doc["categories"] = list(rt.categories)
    return doc


def resource_list(registry: ResourceRegistry, group: str, version: str) -> dict[str, Any]:
    """APIResourceList of one group/version, subresources included (kubectl drain needs
    pods/eviction to find the eviction API)."""
    types = [rt for rt in registry.all() if rt.group == group and version in rt.served_versions]
    if not types:
        raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
    resources: list[dict[str, Any]] = []
    for rt in types:
        resources.append(_resource_doc(rt))
        for sub in sorted(rt.subresources):
            entry: dict[str, Any] = {
                "name": f"{rt.plural}/{sub}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": ["get", "patch", "update"],
            }
            if sub in _SUBRESOURCE_KINDS:
                sub_group, sub_version, kind, verbs = _SUBRESOURCE_KINDS[sub]
                entry.update(group=sub_group, version=sub_version, kind=kind, verbs=verbs)
            resources.append(entry)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }
