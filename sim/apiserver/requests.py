"""SIMULATOR. How many requests each emulated kube-apiserver answered, by verb and resource.

Every `ClusterServer` counts what reaches its Kubernetes API (`RequestCounter`, kept by the
server and fed by `http.ApiHandler.handle`), faulted and refused requests included: they were
sent all the same. The world serves every cluster's counts on `GET /sim/v1/requests`
(`sim.world`), so a benchmark can read how many Kubernetes API calls a workspace deployment or a
node drain costs, as the API servers of a real system would count them (`apiserver_request_total`
by verb and resource). Counts only grow; readers take differences.

Verbs are kube-apiserver's: `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
`deletecollection`; resources are `<plural>[.<group>][/<subresource>]` (`pods/eviction`,
`clusterdeployments.k0rdent.mirantis.com`); what is not a resource (discovery, `/version`,
`/openapi`, health) is counted as `get` of `nonResource`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

NON_RESOURCE = "nonResource"


def classify(method: str, path: str, query: Mapping[str, str]) -> tuple[str, str]:
    """(verb, resource) of one request, as kube-apiserver's request info resolves them."""
    parts = [part for part in path.split("/") if part]
    if parts[:1] == ["api"] and len(parts) > 2:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) > 3:
        group, rest = parts[1], parts[3:]
    else:
        return "get", NON_RESOURCE
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
        rest = rest[2:]  # a namespaced resource: /namespaces/<ns>/<plural>/...
    resource = rest[0] + (f".{group}" if group else "")
    named = len(rest) > 1
    if len(rest) > 2:
        resource += f"/{rest[2]}"
    verb = {
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if named else "deletecollection",
    }.get(method.upper())
    if verb is None:
        watching = query.get("watch") in ("true", "1")
        verb = "watch" if watching else ("get" if named else "list")
    return verb, resource


class RequestCounter:
    """Requests answered by one emulated API server (see the module docstring)."""

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()

    def count(self, method: str, path: str, query: Mapping[str, str]) -> None:
        self._counts[classify(method, path, query)] += 1

    @property
    def total(self) -> int:
        return sum(self._counts.values())

    def snapshot(self) -> dict[str, int]:
        """`{"<verb> <resource>": count}`, sorted by key."""
        return {f"{verb} {resource}": n for (verb, resource), n in sorted(self._counts.items())}
