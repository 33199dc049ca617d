"""The Kubernetes client, as every Colony process uses it: an `ApiClient` of its own per kubeconfig,
and one way to make a call with it.

The official client is blocking, so every call runs in a thread of the calls' own pool
(`KUBE_THREADS`) and never stalls the event loop. A call is never abandoned half-way (`infra.inflight`): when the caller is
cancelled, the request in its thread is allowed to finish (within `REQUEST_TIMEOUT`) before the
cancellation goes on, so nothing an interrupted activity asked for lands after the workflow was
told it stopped.
Responses are read as plain JSON dicts (`_preload_content=False`): callers pick a few fields, and
dicts map straight onto `models/`.

Errors pass through untranslated (`ApiException`, and `TRANSPORT_ERRORS` for a request that got
no answer): each caller says what they mean to it, activities as domain errors
(`activities.kube`), the worker's start-up (`infra.crds`) and `colonyctl` in their own words.

Every call is an OpenTelemetry span (`kube <method>`, with the API server and the HTTP status) when
tracing is configured (`infra.tracing`), a child of the caller's span.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from infra import tracing
from infra.inflight import finish

KUBE_THREADS = 32
"""Kubernetes calls in flight at once in one process (and each `ApiClient`'s connection pool).
The calls wait on the network, not the CPU: asyncio's default pool (cores + 4 threads: 6 here)
let a 20-node drain's evictions queue behind each other (`bench.drain_scale`), and a pool of
connections smaller than the calls in flight reconnects (a TLS handshake) for each call beyond it."""
_CALLS = ThreadPoolExecutor(max_workers=KUBE_THREADS, thread_name_prefix="kube")

REQUEST_TIMEOUT = (5.0, 20.0)
"""(connect, read) seconds: below the 30 s start-to-close of a Kubernetes activity, so a hung
request fails in time to be retried rather than outliving its attempt."""

MERGE_PATCH = "application/merge-patch+json"

Obj = dict[str, Any]

TRANSPORT_ERRORS = (urllib3.exceptions.HTTPError, OSError)
"""What a request that got no answer raises (refused, reset, timed out)."""


def api_client_from_dict(kubeconfig: dict[str, Any]) -> client.ApiClient:
    """An `ApiClient` of its own (never the global default) for a kubeconfig dict."""
    configuration = client.Configuration()
    config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]
        kubeconfig, client_configuration=configuration, persist_config=False
    )
    configuration.connection_pool_maxsize = KUBE_THREADS
    return client.ApiClient(configuration)


def api_client_from_file(path: Path) -> client.ApiClient:
    """An `ApiClient` of its own for a kubeconfig file."""
    configuration = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(path), client_configuration=configuration, persist_config=False
    )
    configuration.connection_pool_maxsize = KUBE_THREADS
    return client.ApiClient(configuration)


def close_client(api: client.ApiClient) -> None:
    """Close an `ApiClient`'s connection pool."""
    api.close()  # type: ignore[no-untyped-call]


def _call_blocking(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
    response = fn(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
    data = response.data
    if not data:
        return {}
    parsed = json.loads(data)
    return parsed if isinstance(parsed, dict) else {"items": parsed}


async def request(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
    """Run one client call in a thread and return its JSON body.

    Raises:
        ApiException: the API server answered with an error (the caller treats the statuses it
            expects: 404 on a delete, 409 on a create).
        urllib3.exceptions.HTTPError, OSError: no answer (`TRANSPORT_ERRORS`).

    Args:
        what: what the call does, for the span ("read Node gpu-1").
        fn: a bound API method, e.g. `CoreV1Api(api).read_node`.
    """
    with tracing.span(f"kube {_method_name(fn)}", _span_attributes(what, fn)) as span:
        try:
            result = await finish(_in_thread(_call_blocking, fn, *args, **kwargs))
        except ApiException as exc:
            tracing.set_attribute(span, "http.response.status_code", exc.status)
            raise
        tracing.set_attribute(span, "http.response.status_code", 200)
        return result


async def _in_thread(fn: Callable[..., Obj], *args: Any, **kwargs: Any) -> Obj:
    """`fn(*args, **kwargs)` in the calls' pool, in the caller's context (its span), as
    `asyncio.to_thread` runs it in the default pool."""
    context = contextvars.copy_context()
    call = functools.partial(context.run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_CALLS, call)


def _method_name(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__name__", "call"))


def _span_attributes(what: str, fn: Callable[..., Any]) -> dict[str, Any]:
    if not tracing.enabled():
        return {}
    api = getattr(getattr(fn, "__self__", None), "api_client", None)
    host = getattr(getattr(api, "configuration", None), "host", None)
    return {"colony.call": what, "k8s.client.method": _method_name(fn), "server.address": host}


def parse_time(value: object) -> datetime | None:
    """A Kubernetes timestamp (`2026-01-02T03:04:05Z`); None when absent or not one."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


async def none_when_missing(
    answer: Awaitable[Any], translate: Callable[[ApiException], Exception]
) -> Any:
    """The call's answer, None for a 404, every other `ApiException` as `translate(exc)`."""
    try:
        return await answer
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise translate(exc) from exc
