"""OpenAPI v3 documents (/openapi/v3 and /openapi/v3/<api|apis/group>/<version>) from a registry.

Served so kubectl works without `--validate=false`. What kubectl reads from them:
- `kubectl apply/create` (default `--validate=strict`) looks for the PATCH operation of the
  object's group/version/kind (its `x-kubernetes-group-version-kind`) and, when it lists the
  `fieldValidation` parameter, leaves validation to the server (it sends fieldValidation=Strict)
  instead of downloading schemas to validate client-side.
- `kubectl apply` on an existing object computes a strategic merge patch from the v3 schema only
  when the PATCH operation accepts application/strategic-merge-patch+json. The built-in schemas
  here are permissive (object + x-kubernetes-preserve-unknown-fields), so they do not offer it:
  kubectl then uses its compiled-in types for built-ins (proper list merge keys) and a JSON merge
  patch for custom resources, exactly as it does against a real server for CRs.
- `kubectl explain` renders the schema in components.schemas whose x-kubernetes-group-version-kind
  matches: CRDs get their own openAPIV3Schema (every served version), built-ins a short
  description with apiVersion, kind, metadata, spec and status.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sim.apiserver import errors
from sim.apiserver.registry import ResourceRegistry, ResourceType

Obj = dict[str, Any]

_PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
)
_META = {
    "apiVersion": {
        "type": "string",
        "description": "APIVersion defines the versioned schema of this representation of an object.",
    },
    "kind": {
        "type": "string",
        "description": "Kind is a string value representing the REST resource this object represents.",
    },
    "metadata": {
        "type": "object",
        "description": "Standard object's metadata.",
        "x-kubernetes-preserve-unknown-fields": True,
    },
}


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _group_versions(registry: ResourceRegistry) -> dict[tuple[str, str], list[ResourceType]]:
    out: dict[tuple[str, str], list[ResourceType]] = {}
    for rt in registry.all():
        for version in rt.served_versions:
            out.setdefault((rt.group, version), []).append(rt)
    return out


def schema_name(rt: ResourceType, version: str) -> str:
    """The components.schemas key, named like the real server's (io.k8s.api.apps.v1.Deployment
    for built-ins, the reversed group for CRDs: com.mirantis.k0rdent.v1beta1.ClusterDeployment)."""
    if rt.schema is None:
        group = rt.group.split(".")[0] if rt.group else "core"
        return f"io.k8s.api.{group}.{version}.{rt.kind}"
    return ".".join([*reversed(rt.group.split(".")), version, rt.kind])


def _type_schema(rt: ResourceType, version: str, crd_schema: Obj | None) -> Obj:
    gvk = [{"group": rt.group, "version": version, "kind": rt.kind}]
    if crd_schema is not None:
        schema: Obj = json.loads(json.dumps(crd_schema))
        properties = schema.setdefault("properties", {})
        for key, value in _META.items():
            properties.setdefault(key, value)
        schema.setdefault("type", "object")
    else:
        schema = {
            "type": "object",
            "description": f"{rt.kind} ({rt.api_version_for(version)}), served by the Colony sim with a permissive schema: the server validates.",  # one sentence kubectl explain shows
            "properties": {
                **_META,
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
            "x-kubernetes-preserve-unknown-fields": True,
        }
    schema["x-kubernetes-group-version-kind"] = gvk
    return schema


def _query(name: str) -> Obj:
    return {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}


def _operation(rt: ResourceType, version: str, action: str, ref: str, *, body: bool) -> Obj:
    op: Obj = {
        "operationId": f"{action}{rt.kind}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": rt.group, "version": version, "kind": rt.kind},
        "parameters": [_query("dryRun")],
        "responses": {
            "200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": ref}}}}
        },
    }
    if action in ("post", "put", "patch"):
        op["parameters"] += [_query("fieldValidation"), _query("fieldManager")]
    if body:
        types = _PATCH_TYPES if action == "patch" else ("application/json", "application/yaml")
        schema = {"type": "object"} if action == "patch" else {"$ref": ref}
        op["requestBody"] = {"content": {t: {"schema": schema} for t in types}, "required": True}
    return op


def discovery(registry: ResourceRegistry) -> Obj:
    """/openapi/v3: one entry per served group-version, with a hash to cache by."""
    paths: Obj = {}
    for (group, version), types in sorted(_group_versions(registry).items()):
        digest = hashlib.sha512(
            json.dumps([(rt.kind, rt.schema) for rt in types], sort_keys=True, default=str).encode()
        ).hexdigest()[:32]
        path = _gv_path(group, version)
        paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest.upper()}"}
    return {"paths": paths}


def group_version(registry: ResourceRegistry, path: str, crds: dict[str, Obj]) -> Obj:
    """The OpenAPI v3 document of one group-version ("api/v1", "apis/apps/v1"); 404 if unserved.

    `crds` maps "<plural>.<group>" to the CRD object, for every served version's schema.
    """
    parts = path.strip("/").split("/")
    if parts[:1] == ["api"] and len(parts) == 2:
        group, version = "", parts[1]
    elif parts[:1] == ["apis"] and len(parts) == 3:
        group, version = parts[1], parts[2]
    else:
        raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
    types = _group_versions(registry).get((group, version))
    if not types:
        raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
    schemas: Obj = {}
    paths: Obj = {}
    for rt in types:
        name = schema_name(rt, version)
        ref = f"#/components/schemas/{name}"
        schemas[name] = _type_schema(rt, version, _crd_schema(rt, version, crds))
        prefix = f"/{_gv_path(group, version)}"
        scope = f"{prefix}/namespaces/{{namespace}}/{rt.plural}" if rt.namespaced else f"{prefix}/{rt.plural}"  # fmt: skip
        paths[scope] = {
            "get": _operation(rt, version, "list", ref, body=False),
            "post": _operation(rt, version, "post", ref, body=True),
            "delete": _operation(rt, version, "deletecollection", ref, body=False),
        }
        paths[f"{scope}/{{name}}"] = {
            "get": _operation(rt, version, "get", ref, body=False),
            "put": _operation(rt, version, "put", ref, body=True),
            "patch": _operation(rt, version, "patch", ref, body=True),
            "delete": _operation(rt, version, "delete", ref, body=False),
        }
        if rt.namespaced:
            paths[f"{prefix}/{rt.plural}"] = {"get": _operation(rt, version, "list", ref, body=False)}  # fmt: skip
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.37.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def _crd_schema(rt: ResourceType, version: str, crds: dict[str, Obj]) -> Obj | None:
    if rt.schema is None:
        return None
    crd = crds.get(f"{rt.plural}.{rt.group}")
    for served in ((crd or {}).get("spec") or {}).get("versions") or []:
        if served.get("name") == version:
            found = (served.get("schema") or {}).get("openAPIV3Schema")
            if isinstance(found, dict):
                return found
    return rt.schema
