"""Kubernetes calls as activities make them: `infra.kube.request`, with the client library's
errors turned into domain errors (`activities.errors`) at the activity boundary.

- `call`: `ApiException` passes through for the caller to treat the statuses it expects (404 on a
  delete, 409 on a create); a request that got no answer is a temporary error;
- `call_or_none`: None for a 404, every other error translated;
- `call_or_raise`: every error translated.

Reads and deletes of one object go through its address (`activities.addresses`).

Used by the activities of `activities.management` and `activities.child_cluster`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException

from activities.errors import kube_error, transport_error
from infra.kube import TRANSPORT_ERRORS, Obj, none_when_missing, request


async def call(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
    """Run one client call (`infra.kube.request`); a transport failure becomes a retryable error.

    Args:
        what: what the call does, for error messages ("read Node gpu-1").
        fn: a bound API method, e.g. `CoreV1Api(api).read_node`.
    """
    try:
        return await request(what, fn, *args, **kwargs)
    except TRANSPORT_ERRORS as exc:
        raise transport_error(exc, what) from exc


async def call_or_none(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj | None:
    """`call`, with None for 404 and every other API error translated (`kube_error`)."""
    found: Obj | None = await none_when_missing(
        call(what, fn, *args, **kwargs), lambda exc: kube_error(exc, what)
    )
    return found


async def call_or_raise(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
    """`call`, with every API error translated (`kube_error`)."""
    try:
        return await call(what, fn, *args, **kwargs)
    except ApiException as exc:
        raise kube_error(exc, what) from exc
