"""Paths into a Helm values tree ("a.b.c", 'limits["nvidia.com/gpu"]'): parsing, reading and writing.

The exalsius operator's "JSONPath-lite" syntax, used by a WorkspaceClass's prompts
(`userFacingConfig[].helmValuePath`) and its `resourceInjection` paths: dot-separated segments, with
single- or double-quoted bracket segments for keys holding dots or slashes. `models/workspace_class.py`
validates paths with `parse_value_path`; `models/values.py` reads and writes values with the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class ValuePathError(ValueError):
    """A malformed value path; the message says what is wrong with it."""


def parse_value_path(path: str) -> list[str]:
    """The segments of a value path: `a["b.c"].d` is `["a", "b.c", "d"]`.

    The same rules as the exalsius operator's `parsePath`, so a class accepted there is accepted
    here and writes to the same place.

    Raises:
        ValuePathError: empty path or segment, a dangling dot, an unquoted or unclosed bracket.
    """
    if not path:
        raise ValuePathError("path is empty")
    segments: list[str] = []
    buffer: list[str] = []
    emitted_since_dot = False
    i, n = 0, len(path)

    def flush() -> None:
        nonlocal emitted_since_dot
        if buffer:
            segments.append("".join(buffer))
            buffer.clear()
            emitted_since_dot = True

    while i < n:
        char = path[i]
        if char == ".":
            flush()
            if not emitted_since_dot:
                raise ValuePathError(f"path '{path}' has an empty segment")
            emitted_since_dot = False
            i += 1
            if i == n:
                raise ValuePathError(f"path '{path}' ends with a dot")
        elif char == "[":
            flush()
            i += 1
            if i >= n or path[i] not in "\"'":
                raise ValuePathError(
                    f"path '{path}' has a bracket segment without quotes; write it as [\"key\"]"
                )
            quote = path[i]
            i += 1
            end = path.find(quote, i)
            if end < 0:
                raise ValuePathError(f"path '{path}' has an unterminated quoted segment")
            if end == i:
                raise ValuePathError(f"path '{path}' has an empty quoted segment")
            segments.append(path[i:end])
            emitted_since_dot = True
            i = end + 1
            if i >= n or path[i] != "]":
                raise ValuePathError(f"path '{path}' is missing a closing bracket")
            i += 1
            if i < n and path[i] not in ".[":
                raise ValuePathError(
                    f"path '{path}' has '{path[i]}' right after a bracket segment; "
                    "a '.' or '[' must follow it"
                )
        else:
            buffer.append(char)
            i += 1
    flush()
    if not emitted_since_dot:
        raise ValuePathError(f"path '{path}' ends with a dot")
    return segments


def value_path_problem(path: str) -> str | None:
    """Why `path` is not a valid value path, or None."""
    try:
        parse_value_path(path)
    except ValuePathError as exc:
        return str(exc)
    return None


_MISSING = object()


def get_path(values: Mapping[str, Any], segments: list[str]) -> Any:
    """The value at `segments`, or `MISSING` when any map along the way lacks the key."""
    node: Any = values
    for segment in segments:
        if not isinstance(node, Mapping) or segment not in node:
            return _MISSING
        node = node[segment]
    return node


MISSING: Any = _MISSING
"""What `get_path` returns for an absent path (distinct from a present `None`)."""


def set_path(values: dict[str, Any], segments: list[str], value: Any) -> Any:
    """Write `value` at `segments`, creating maps along the way; returns what was there (or MISSING).

    A non-map found along the way is replaced by a map, as the exalsius operator does.
    """
    node = values
    for segment in segments[:-1]:
        child = node.get(segment)
        if not isinstance(child, dict):
            child = {}
            node[segment] = child
        node = child
    previous = node.get(segments[-1], _MISSING)
    node[segments[-1]] = value
    return previous


def delete_path(values: dict[str, Any], segments: list[str]) -> Any:
    """Remove the key at `segments` (and maps it leaves empty); returns the removed value or MISSING."""
    trail: list[tuple[dict[str, Any], str]] = []
    node: Any = values
    for segment in segments[:-1]:
        child = node.get(segment) if isinstance(node, dict) else None
        if not isinstance(child, dict):
            return _MISSING
        trail.append((node, segment))
        node = child
    if not isinstance(node, dict) or segments[-1] not in node:
        return _MISSING
    removed = node.pop(segments[-1])
    # Drop maps the removal emptied, so a sealed secret leaves no `{}` behind in plain values.
    for parent, key in reversed(trail):
        if parent[key]:
            break
        del parent[key]
    return removed


def nest_values(flat: Mapping[str, Any]) -> dict[str, Any]:
    """A values tree from `{path: value}` (e.g. unsealed secrets, keyed by their prompt's path).

    Raises:
        ValuePathError: a malformed path.
    """
    tree: dict[str, Any] = {}
    for path in sorted(flat):
        set_path(tree, parse_value_path(path), flat[path])
    return tree
