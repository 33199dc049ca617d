"""Translation of client-library errors into Colony's domain errors, at the activity boundary.

Every activity calls these in its `except` clauses and raises the result `from` the library error,
so the cause stays chained in Temporal's failure while the message a user reads is short.

Permanent (as kopf splits them; `non_retryable=True`, see `models.errors.NON_RETRYABLE`):
    401/403 -> Forbidden, 404 -> NotFound (or the caller's more precise type), 400/422 -> InvalidSpec.
Temporary (left to the workflow's retry policy):
    409 Conflict, 429 throttling, 5xx, timeouts and refused connections. A 429 that names a
    `Retry-After` sets the next retry delay to it.

Every failed attempt is counted once, by activity and domain type (`ActivityErrorCounter`, the
worker's interceptor, into `infra.metrics`).

Messages never include request headers (they carry credentials), only the API's own message, and
name the failure as the system gave it: `<HTTP status> <reason>: <message>` (see `status_name`).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import httpx
from kubernetes.client.exceptions import ApiException
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from infra import metrics
from infra.provider_errors import http_error_body
from models.errors import ErrorType, permanent

CONFLICT = "Conflict"
THROTTLED = "Throttled"
SERVER_ERROR = "ServerError"
UNAVAILABLE = "Unavailable"
"""Types of the retryable errors (not in `NON_RETRYABLE`): they show in the Web UI's attempts."""


GENERIC_REASONS: dict[str, frozenset[int]] = {
    "BadRequest": frozenset({400}),
    "Unauthorized": frozenset({401}),
    "Forbidden": frozenset({403}),
    "NotFound": frozenset({404}),
    "MethodNotAllowed": frozenset({405}),
    "NotAcceptable": frozenset({406}),
    "AlreadyExists": frozenset({409}),
    "Conflict": frozenset({409}),
    "Gone": frozenset({410}),
    "Expired": frozenset({410}),
    "RequestEntityTooLarge": frozenset({413}),
    "UnsupportedMediaType": frozenset({415}),
    "Invalid": frozenset({422}),
    "UnprocessableEntity": frozenset({422}),
    "TooManyRequests": frozenset({429}),
    "InternalError": frozenset({500}),
    "ServerTimeout": frozenset({500, 504}),
    "ServiceUnavailable": frozenset({503}),
    "Timeout": frozenset({504}),
}
"""Kubernetes' generic `StatusReason`s (apimachinery metav1) and the HTTP statuses each goes with;
the host provider's error codes use the same names for the same cases."""


def status_name(status: int, reason: str | None, phrase: str | None) -> str:
    """`<status> <reason>`: the body's reason when it fits the status, else the status line's.

    A body whose generic reason contradicts the HTTP status (a proxy's or a fault injector's
    `InternalError` on a 403) is not believed: the status line is what the system answered, so a
    403 reads "403 Forbidden", never "403 InternalError". A specific reason the body gives
    (`AlreadyExists` on a 409, `InsufficientCapacity`) is kept: it says more than the status line.
    """
    fits = reason and status in GENERIC_REASONS.get(reason, frozenset({status}))
    return f"{status} {reason if fits else (phrase or reason or 'Error')}"


def _temporary(message: str, error_type: str, retry_after: float | None = None) -> ApplicationError:
    return ApplicationError(
        message,
        type=error_type,
        non_retryable=False,
        next_retry_delay=timedelta(seconds=retry_after) if retry_after else None,
    )


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


def kube_status(exc: ApiException) -> dict[str, Any]:
    """The v1 Status body of a Kubernetes API error ({} when the body is not one)."""
    body = exc.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not body:
        return {}
    try:
        status = json.loads(body)
    except ValueError:
        return {}
    return status if isinstance(status, dict) else {}


def kube_message(exc: ApiException) -> str:
    """The API's own message for a Kubernetes error (never headers)."""
    status = kube_status(exc)
    message = str(status.get("message") or exc.reason or "")
    return f"{status_name(exc.status or 0, status.get('reason'), exc.reason)}: {message}"


def kube_error(exc: ApiException, what: str) -> ApplicationError:
    """The domain error for a Kubernetes API error met while doing `what`.

    Args:
        exc: the client's exception.
        what: what the activity was doing, e.g. "create ClusterDeployment kcm-system/training".
    """
    message = f"{what}: {kube_message(exc)}"
    code = exc.status or 0
    if code in (401, 403):
        return permanent(ErrorType.FORBIDDEN, message)
    if code == 404:
        return permanent(ErrorType.NOT_FOUND, message)
    if code in (400, 422):
        return permanent(ErrorType.INVALID_SPEC, message)
    if code == 409:
        return _temporary(message, CONFLICT)
    if code == 429:
        headers = exc.headers or {}
        return _temporary(message, THROTTLED, _retry_after(headers.get("Retry-After")))
    if code == 0:
        # The client raises ApiException(status=0) for transport problems it wraps itself.
        return _temporary(message, UNAVAILABLE)
    return _temporary(message, SERVER_ERROR)


def transport_error(exc: BaseException, what: str) -> ApplicationError:
    """A temporary error for a request that got no answer (refused, reset, timed out)."""
    return _temporary(f"{what}: {type(exc).__name__}: {exc}", UNAVAILABLE)


def http_error(exc: httpx.HTTPStatusError, what: str) -> ApplicationError:
    """The domain error for a host-provider HTTP error met while doing `what`.

    The provider's codes: 409 InsufficientCapacity -> HostsUnavailable, 409 IdempotencyKeyReused ->
    InvalidSpec (a bug, never healed by a retry), 422 (unknown location, SKU) -> UnknownSku.
    """
    response = exc.response
    error = http_error_body(response)
    code = str(error.get("code") or response.reason_phrase)
    name = status_name(response.status_code, code, response.reason_phrase)
    message = f"{what}: {name}: {error.get('message') or response.text[:200]}"
    status = response.status_code
    if status in (401, 403):
        return permanent(ErrorType.FORBIDDEN, message)
    if status == 404:
        return permanent(ErrorType.NOT_FOUND, message)
    if status == 409 and code == "InsufficientCapacity":
        return permanent(ErrorType.HOSTS_UNAVAILABLE, message)
    if status == 409 and code == "IdempotencyKeyReused":
        return permanent(ErrorType.INVALID_SPEC, message)
    if status == 422:
        return permanent(ErrorType.UNKNOWN_SKU, message)
    if status == 400:
        return permanent(ErrorType.INVALID_SPEC, message)
    if status == 409:
        return _temporary(message, CONFLICT)
    if status == 429:
        return _temporary(message, THROTTLED, _retry_after(response.headers.get("Retry-After")))
    return _temporary(message, SERVER_ERROR)


# --- Activity errors, counted at one place for every activity -------------------------------------


def error_type(error: BaseException) -> str:
    """The type an activity error is counted under: the domain type of an `ApplicationError`
    (what the functions above translated it to), else the exception's class."""
    if isinstance(error, ApplicationError):
        return error.type or "ApplicationError"
    return type(error).__name__


class _CountErrors(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        try:
            return await super().execute_activity(input)
        except BaseException as error:
            # A cancellation is the workflow's decision, not an error of the activity.
            if not activity.is_cancelled():
                metrics.activity_failed(activity.info().activity_type, error_type(error))
            raise


class ActivityErrorCounter(Interceptor):
    """Worker interceptor: every failed activity attempt counts once, by activity and type."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _CountErrors(super().intercept_activity(next))
