"""API errors shaped exactly like kube-apiserver `Status` objects.

Raised by the store and the HTTP layer; the HTTP layer turns them into JSON `Status` bodies, so the
official client raises `ApiException` with the same `status`, `reason` and body a real server gives.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sim.apiserver.registry import ResourceType


class ApiError(Exception):
    """A failed API call: HTTP `code`, machine `reason` (e.g. "NotFound") and a human message."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        causes: list[dict[str, Any]] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        # The Status's ListMeta, e.g. {"continue": ...} on a 410 for an expired continue token.
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.code = code
        self.reason = reason
        self.message = message
        self.details: dict[str, Any] = dict(details or {})
        if causes:
            self.details["causes"] = causes

    def status_body(self) -> dict[str, Any]:
        """The v1 `Status` object a real kube-apiserver answers with."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": dict(self.metadata),
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.reason!r}, {self.message!r})"


def _resource_details(rt: ResourceType, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": rt.plural}
    if rt.group:
        details["group"] = rt.group
    return details


def _qualified(rt: ResourceType) -> str:
    # The real server names resources "pods" for core and "daemonsets.apps" for groups.
    return f"{rt.plural}.{rt.group}" if rt.group else rt.plural


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        404, "NotFound", f'{_qualified(rt)} "{name}" not found', details=_resource_details(rt, name)
    )


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{_qualified(rt)} "{name}" already exists',
        details=_resource_details(rt, name),
    )


def conflict(rt: ResourceType, name: str, msg: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(rt)} "{name}": {msg}',
        details=_resource_details(rt, name),
    )


def invalid(rt: ResourceType, name: str, causes: Iterable[tuple[str, str, str]]) -> ApiError:
    """422 Invalid; `causes` are (field_path, message, reason) triples."""
    cause_list = [
        {"reason": reason, "message": message, "field": field} for field, message, reason in causes
    ]
    parts = [f"{c['field']}: {c['message']}" if c["field"] else c["message"] for c in cause_list]
    summary = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    qualified_kind = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    details: dict[str, Any] = {"name": name, "kind": rt.kind}
    if rt.group:
        details["group"] = rt.group
    return ApiError(
        422,
        "Invalid",
        f'{qualified_kind} "{name}" is invalid: {summary}',
        details=details,
        causes=cause_list,
    )


def too_many_requests(msg: str, *, causes: list[dict[str, Any]] | None = None) -> ApiError:
    return ApiError(429, "TooManyRequests", msg, causes=causes)


def gone(msg: str) -> ApiError:
    return ApiError(410, "Expired", msg)


def bad_request(msg: str) -> ApiError:
    return ApiError(400, "BadRequest", msg)


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def forbidden(msg: str) -> ApiError:
    return ApiError(403, "Forbidden", msg)


def forbidden_object(rt: ResourceType, name: str, why: str) -> ApiError:
    """403 about one object, worded as kube-apiserver words it (`configmaps "x" is forbidden:
    <why>`)."""
    return ApiError(
        403,
        "Forbidden",
        f'{_qualified(rt)} "{name}" is forbidden: {why}',
        details=_resource_details(rt, name),
    )


def internal(msg: str) -> ApiError:
    return ApiError(500, "InternalError", msg)


def method_not_allowed(msg: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", msg)


def unsupported_media_type(msg: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", msg)
