"""PATCH bodies: JSON merge patch (RFC 7386), strategic merge patch, JSON patch (RFC 6902).

Pure functions over plain dicts; the store applies them to a copy of the stored object. Strategic
merge follows the real server where it matters to clients: maps merge, `null` deletes, `$patch:
delete|replace` directives, lists of known kinds merge by their key (containers by name, conditions
by type, ...), `finalizers` merges as a set with `$deleteFromPrimitiveList/finalizers`, merged
lists take the order kube gives them (`_element_order`), and every other list is replaced.
"""

from __future__ import annotations

import copy
from typing import Any, cast

from sim.apiserver.errors import ApiError, bad_request, unsupported_media_type

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

# patchMergeKey of list fields from the Kubernetes API types that clients patch in practice.
_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "conditions": "type",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "addresses": "type",
    "containerStatuses": "name",
}
# Primitive lists with patchStrategy=merge: merged as sets.
_SET_LISTS = frozenset({"finalizers"})


def apply_patch(obj: dict[str, Any], patch: Any, patch_type: str) -> dict[str, Any]:
    """Return `obj` (not modified) with `patch` applied according to its content type."""
    if patch_type in (MERGE_PATCH, APPLY_PATCH):
        # Server-side apply is approximated by a merge patch (no field ownership is tracked).
        if not isinstance(patch, dict):
            raise bad_request("merge patch must be a JSON object")
        return cast(dict[str, Any], merge_patch(obj, patch))
    if patch_type == STRATEGIC_MERGE_PATCH:
        if not isinstance(patch, dict):
            raise bad_request("strategic merge patch must be a JSON object")
        return cast(dict[str, Any], strategic_merge_patch(obj, patch))
    if patch_type == JSON_PATCH:
        if not isinstance(patch, list):
            raise bad_request("json patch must be a JSON array")
        return json_patch(obj, patch)
    raise unsupported_media_type(f"the body of the request was in an unknown format - {patch_type}")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, `null` removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: dict[str, Any]) -> Any:
    """Strategic merge with the directives and merge keys listed in the module docstring."""
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            drop = set(value or [])
            result[field] = [v for v in result.get(field) or [] if v not in drop]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = strategic_merge_patch(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list) and key in _SET_LISTS:
            # An empty list merges to what was there: `{"metadata":{"finalizers":[]}}` keeps
            # every finalizer (kube-apiserver 1.37; null or a merge patch clears them).
            current = list(result.get(key) or [])
            merged = current + [v for v in value if v not in current]
            result[key] = _element_order(merged, value, current, None)
        elif isinstance(value, list) and key in _MERGE_KEYS:
            current = list(result.get(key) or [])
            merged = _merge_list(current, value, _MERGE_KEYS[key])
            result[key] = _element_order(merged, value, current, _MERGE_KEYS[key])
        else:
            result[key] = copy.deepcopy(value)
    return result


def _element_order(
    merged: list[Any], patch: list[Any], original: list[Any], merge_key: str | None
) -> list[Any]:
    """The order kube gives a merged list (strategicpatch.normalizeElementOrder): the patch's
    items in the patch's order and the server-only items in the server's order, interleaved by
    their places in the original list; an item new to the server goes before the server's
    items it is compared with (`[a, b]` patched with `[c]` is `[c, a, b]`)."""

    def ident(item: Any) -> Any:
        return item.get(merge_key) if merge_key and isinstance(item, dict) else item

    patch_ids = [ident(p) for p in patch]
    server_ids = [ident(o) for o in original]

    def place(ids: list[Any], item: Any) -> int:
        return ids.index(ident(item)) if ident(item) in ids else -1

    from_patch = sorted(
        (m for m in merged if ident(m) in patch_ids), key=lambda m: place(patch_ids, m)
    )
    server_only = sorted(
        (m for m in merged if ident(m) not in patch_ids), key=lambda m: place(server_ids, m)
    )
    ordered: list[Any] = []
    left, right = 0, 0
    while left < len(server_only) or right < len(from_patch):
        if right >= len(from_patch):
            ordered.append(server_only[left])
            left += 1
        elif left >= len(server_only):
            ordered.append(from_patch[right])
            right += 1
        else:
            here = place(server_ids, server_only[left])
            there = place(server_ids, from_patch[right])
            if here >= 0 and there >= 0 and here < there:
                ordered.append(server_only[left])
                left += 1
            else:
                ordered.append(from_patch[right])
                right += 1
    return ordered


def _merge_list(current: list[Any], patch: list[Any], merge_key: str) -> list[Any]:
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [copy.deepcopy(p) for p in patch if not (isinstance(p, dict) and "$patch" in p)]
    result = list(current)
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            result.append(copy.deepcopy(item))
            continue
        index = next(
            (
                i
                for i, existing in enumerate(result)
                if isinstance(existing, dict) and existing.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del result[index]
        elif index is None:
            result.append({k: copy.deepcopy(v) for k, v in item.items() if k != "$patch"})
        else:
            result[index] = strategic_merge_patch(result[index], item)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"invalid JSON pointer: {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _patch_error(msg: str) -> ApiError:
    return ApiError(422, "Invalid", msg)


def _resolve(doc: Any, parts: list[str]) -> Any:
    for part in parts:
        if isinstance(doc, dict):
            if part not in doc:
                raise _patch_error(f"the server rejected our request: path {part!r} not found")
            doc = doc[part]
        elif isinstance(doc, list):
            doc = doc[_index(doc, part, allow_end=False)]
        else:
            raise _patch_error(f"cannot descend into a scalar at {part!r}")
    return doc


def _index(seq: list[Any], part: str, *, allow_end: bool) -> int:
    if part == "-" and allow_end:
        return len(seq)
    try:
        index = int(part)
    except ValueError:
        raise _patch_error(f"invalid array index {part!r}") from None
    limit = len(seq) if allow_end else len(seq) - 1
    if index < 0 or index > limit:
        raise _patch_error(f"array index {index} out of bounds")
    return index


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _resolve(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise _patch_error("cannot add to a scalar")
    return doc


def _remove(doc: Any, parts: list[str]) -> Any:
    if not parts:
        raise _patch_error("cannot remove the whole document")
    parent = _resolve(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _patch_error(f"unable to remove nonexistent key: {last}")
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, allow_end=False))
    raise _patch_error("cannot remove from a scalar")


def json_patch(obj: dict[str, Any], operations: list[Any]) -> dict[str, Any]:
    """RFC 6902 add/remove/replace/move/copy/test, applied to a deep copy of `obj`."""
    doc: Any = copy.deepcopy(obj)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request("each json patch operation needs 'op' and 'path'")
        kind, parts = op["op"], _pointer(op["path"])
        if kind == "add":
            doc = _add(doc, parts, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            _remove(doc, parts)
        elif kind == "replace":
            _resolve(doc, parts)  # must exist
            if parts:
                _remove(doc, parts)
            doc = _add(doc, parts, copy.deepcopy(op.get("value")))
        elif kind in ("move", "copy"):
            source = _pointer(op.get("from", ""))
            value = copy.deepcopy(_resolve(doc, source))
            if kind == "move":
                _remove(doc, source)
            doc = _add(doc, parts, value)
        elif kind == "test":
            if _resolve(doc, parts) != op.get("value"):
                raise _patch_error(f"testing value {op['path']} failed")
        else:
            raise bad_request(f"unknown json patch op {kind!r}")
    if not isinstance(doc, dict):
        raise _patch_error("json patch must leave an object")
    return doc
