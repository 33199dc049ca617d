"""A small asyncio Kubernetes client: get, list, watch, create, replace, as JSON (the watcher's
streams, and the waits of activities that follow an object by a watch of their own).

Why not the official client's `watch.Watch`: it is blocking, so each stream would hold a thread
(one per child cluster), and a thread blocked in a read cannot be stopped when leadership is lost;
raw watch requests on `httpx` are cancelled at once and cost a coroutine each. The official client
still does what it is good at: reading kubeconfigs (CA data, client certificates, bearer tokens,
exec plugins and their refresh), through `kubernetes.config` into a `Configuration`.

Used by `watching.streams`, `watching.state`, `watching.leader` and `watching.service`, and by
the activities' waits on one object (`activities.watch`), which react to its next change instead
of its next poll.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncGenerator, Mapping
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client, config

Obj = dict[str, Any]

REQUEST_TIMEOUT = httpx.Timeout(20.0, connect=5.0)
"""Ordinary requests: a hung API server fails the call in time for the caller to retry."""
WATCH_SLACK = 15.0
"""A watch's read timeout is its server-side timeoutSeconds plus this: the server ends it first."""
LIST_PAGE = 500
"""Items per list page, as kubectl and client-go's reflector page."""


class KubeError(Exception):
    """An API error with its HTTP status and the Status' reason and message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class Gone(KubeError):
    """410 Gone: the resourceVersion is older than the server keeps; list again."""


def _error(status: int, body: Any) -> KubeError:
    reason = message = ""
    if isinstance(body, dict):
        reason = str(body.get("reason") or "")
        message = str(body.get("message") or "")
    kind = Gone if status == 410 else KubeError
    return kind(status, reason or httpx.codes.get_reason_phrase(status), message)


def collection_path(group: str, version: str, plural: str, namespace: str | None = None) -> str:
    """The URL path of a collection: `/api/v1/nodes`, `/apis/g/v/namespaces/ns/plural`."""
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    return f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"


class KubeApi:
    """One API server, reached with what a kubeconfig says."""

    def __init__(self, configuration: client.Configuration) -> None:
        self._configuration = configuration
        verify: ssl.SSLContext | bool = False
        if configuration.verify_ssl:
            verify = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
            if configuration.cert_file:
                verify.load_cert_chain(configuration.cert_file, configuration.key_file)
        self._http = httpx.AsyncClient(
            base_url=str(configuration.host), verify=verify, timeout=REQUEST_TIMEOUT
        )

    @classmethod
    def from_kubeconfig(cls, kubeconfig: Path | Mapping[str, Any]) -> KubeApi:
        """From a kubeconfig file or an already parsed kubeconfig."""
        configuration = client.Configuration()
        if isinstance(kubeconfig, Path):
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(kubeconfig),
                client_configuration=configuration,
                persist_config=False,
            )
        else:
            config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]
                dict(kubeconfig), client_configuration=configuration, persist_config=False
            )
        return cls(configuration)

    @property
    def host(self) -> str:
        return str(self._configuration.host)

    async def aclose(self) -> None:
        await self._http.aclose()

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        # The client's own auth settings: a bearer token, refreshed by its hook when it came from
        # an exec plugin or a token file (the hook runs inside `auth_settings`).
        settings: Mapping[str, Any] = self._configuration.auth_settings()
        for setting in settings.values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[str(setting["key"])] = str(setting["value"])
        return headers

    async def _request(self, method: str, path: str, **kwargs: Any) -> Obj:
        response = await self._http.request(method, path, headers=self._headers(), **kwargs)
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code >= 400:
            raise _error(response.status_code, body)
        return body if isinstance(body, dict) else {}

    async def get(self, path: str) -> Obj:
        return await self._request("GET", path)

    async def create(self, path: str, body: Obj) -> Obj:
        return await self._request("POST", path, json=body)

    async def replace(self, path: str, body: Obj) -> Obj:
        """PUT: with `metadata.resourceVersion` set, a 409 Conflict when someone wrote since."""
        return await self._request("PUT", path, json=body)

    async def list(self, path: str, *, label_selector: str | None = None) -> tuple[list[Obj], str]:
        """Every item of a collection (paged), and the list's resourceVersion to watch from."""
        items: list[Obj] = []
        params: dict[str, str | int] = {"limit": LIST_PAGE}
        if label_selector:
            params["labelSelector"] = label_selector
        version = ""
        while True:
            page = await self._request("GET", path, params=params)
            items.extend(i for i in page.get("items") or [] if isinstance(i, dict))
            metadata = page.get("metadata") or {}
            version = version or str(metadata.get("resourceVersion") or "")
            token = metadata.get("continue")
            if not token:
                return items, version
            params["continue"] = str(token)

    async def watch(
        self,
        path: str,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncGenerator[tuple[str, Obj], None]:
        """(type, object) events from `resource_version` until the server ends the watch.

        Raises:
            Gone: the version is too old (as an HTTP 410 or as the ERROR event kube sends).
            KubeError: any other error, as a status or an ERROR event.
        """
        params: dict[str, str | int] = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_seconds,
        }
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        timeout = httpx.Timeout(timeout_seconds + WATCH_SLACK, connect=5.0)
        async with self._http.stream(
            "GET", path, params=params, headers=self._headers(), timeout=timeout
        ) as response:
            if response.status_code >= 400:
                body = await response.aread()
                try:
                    parsed = json.loads(body)
                except ValueError:
                    parsed = None
                raise _error(response.status_code, parsed)
            async for line in response.aiter_lines():
                if not line.strip():
                    continue
                event = json.loads(line)
                kind = str(event.get("type") or "")
                obj = event.get("object") if isinstance(event.get("object"), dict) else {}
                if kind == "ERROR":
                    raise _error(int(obj.get("code") or 500), obj)
                yield kind, obj
