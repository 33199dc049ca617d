"""Small helpers over the official `kubernetes` client, shared by the Kubernetes activities and the CLI.

The client is blocking, so every call runs in a thread (`asyncio.to_thread`) and never stalls the
worker's event loop. A call is never abandoned half-way: when the activity is cancelled, the request
in its thread is allowed to finish (within `REQUEST_TIMEOUT`) before the cancellation goes on, so
nothing an interrupted activity asked for lands after the workflow was told it stopped. Responses are read as plain JSON dicts (`_preload_content=False`): the
activities only pick a few fields, and dicts map straight onto `models/`.

Every call is an OpenTelemetry span (`kube <method>`, with the API server and the HTTP status) when
tracing is configured (`infra.tracing`), a child of the activity's span.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from activities.errors import kube_error, transport_error
from infra import tracing

REQUEST_TIMEOUT = (5.0, 20.0)
"""(connect, read) seconds: below the 30 s start-to-close of a Kubernetes activity, so a hung
request fails in time to be retried rather than outliving its attempt."""

MERGE_PATCH = "application/merge-patch+json"

Obj = dict[str, Any]


def api_client_from_dict(kubeconfig: dict[str, Any]) -> client.ApiClient:
    """An `ApiClient` of its own (never the global default) for a kubeconfig dict."""
    configuration = client.Configuration()
    config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]
        kubeconfig, client_configuration=configuration, persist_config=False
    )
    return client.ApiClient(configuration)


def api_client_from_file(path: Path) -> client.ApiClient:
    """An `ApiClient` of its own for a kubeconfig file."""
    configuration = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(path), client_configuration=configuration, persist_config=False
    )
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


async def call(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
    """Run one client call in a thread and return its JSON body.

    `ApiException` is passed through for the caller to treat the statuses it expects (404 on a
    delete, 409 on a create); transport failures become a retryable error here.

    Args:
        what: what the call does, for error messages ("read Node gpu-1").
        fn: a bound API method, e.g. `CoreV1Api(api).read_node`.
    """
    with tracing.span(f"kube {_method_name(fn)}", _span_attributes(what, fn)) as span:
        running = asyncio.ensure_future(asyncio.to_thread(_call_blocking, fn, *args, **kwargs))
        try:
            try:
                result = await asyncio.shield(running)
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    await running
                raise
        except ApiException as exc:
            tracing.set_attribute(span, "http.response.status_code", exc.status)
            raise
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise transport_error(exc, what) from exc
        tracing.set_attribute(span, "http.response.status_code", 200)
        return result


def _method_name(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__name__", "call"))


def _span_attributes(what: str, fn: Callable[..., Any]) -> dict[str, Any]:
    if not tracing.enabled():
        return {}
    api = getattr(getattr(fn, "__self__", None), "api_client", None)
    host = getattr(getattr(api, "configuration", None), "host", None)
    return {"colony.call": what, "k8s.client.method": _method_name(fn), "server.address": host}


async def call_or_none(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj | None:
    """`call`, with None for 404 and every other API error translated (`kube_error`)."""
    try:
        return await call(what, fn, *args, **kwargs)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise kube_error(exc, what) from exc


async def call_or_raise(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
    """`call`, with every API error translated (`kube_error`)."""
    try:
        return await call(what, fn, *args, **kwargs)
    except ApiException as exc:
        raise kube_error(exc, what) from exc


def conditions_of(obj: Obj) -> list[Obj]:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return [c for c in conditions if isinstance(c, dict)]


def condition(obj: Obj, type_: str) -> Obj | None:
    return next((c for c in conditions_of(obj) if c.get("type") == type_), None)
