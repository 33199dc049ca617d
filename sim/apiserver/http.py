"""REST onto the store: the aiohttp application of one emulated kube-apiserver.

`create_app(store, faults=..., records=...)` returns an `aiohttp.web.Application` serving discovery,
CRUD, watch, PATCH, the pods/eviction, pods/binding, pods/log, pods/portforward (`portforward.py`),
serviceaccounts/token and status subresources, with bearer
token authentication against the store's `TokenAuthority`. Writes honour `dryRun` and
`fieldValidation` (`fieldvalidation.py`; its warnings become `Warning` response headers). Every
request first passes the `FaultInjector`, when one is given; a client's creates and accepted
evictions are kept in the world's `WorldRecords` (`sim.records`), when given. `server.ClusterServer`
wraps it in HTTPS.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Iterable
from typing import Any

import orjson
import yaml
from aiohttp import web

from sim.apiserver import discovery, errors, openapi, podlogs, portforward, tables
from sim.apiserver.errors import ApiError
from sim.apiserver.fieldvalidation import FieldValidation, warning_header
from sim.apiserver.patch import APPLY_PATCH
from sim.apiserver.registry import CRDS, NODES, PODS, SERVICEACCOUNTS, ResourceType
from sim.apiserver.requests import RequestCounter
from sim.apiserver.store import ClusterStore, Obj, Watcher
from sim.faults import FaultInjector, add_fault_routes
from sim.records import WorldRecords, add_records_routes

log = logging.getLogger(__name__)

# kube-apiserver's --min-request-timeout: watches without timeoutSeconds end after this long.
DEFAULT_WATCH_TIMEOUT = 1800.0
# How often an idle watch checks whether its client went away.
_WATCH_POLL = 1.0
_STORE_KEY = web.AppKey("store", ClusterStore)
_JSON = "application/json"


def _encode(value: Any) -> bytes:
    """Compact JSON. orjson is ~10x faster than json on the hot path (GET, LIST, watch); the
    standard library takes what orjson refuses (integers beyond 64 bits, non-string keys)."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(value, separators=(",", ":")).encode()


def _decode(raw: bytes) -> Any:
    """JSON into Python values; what orjson refuses (NaN, huge integers) goes through json."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def _json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=_encode(body), status=status, content_type=_JSON, charset="utf-8")


def _error_response(error: ApiError) -> web.Response:
    response = _json_response(error.status_body(), error.code)
    retry = error.details.get("retryAfterSeconds")
    if retry is not None:
        response.headers["Retry-After"] = str(retry)
    return response


def _with_warnings(response: web.Response, validation: FieldValidation) -> web.Response:
    # One header per warning, as kube's warning recorder writes them; kubectl prints each one.
    for text in validation.warnings:
        response.headers.add("Warning", warning_header(text))
    return response


def _field_validation(request: web.Request, options_kind: str) -> FieldValidation:
    return FieldValidation.from_query(request.query.get("fieldValidation"), options_kind)


def _success(code: int = 200, details: dict[str, Any] | None = None) -> Obj:
    body: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if details:
        body["details"] = details
    body["code"] = code
    return body


class _Route:
    """A parsed resource path."""

    __slots__ = ("name", "namespace", "rt", "subresource", "version")

    def __init__(
        self,
        rt: ResourceType,
        version: str,
        namespace: str | None,
        name: str | None,
        subresource: str | None,
    ) -> None:
        self.rt = rt
        self.version = version
        self.namespace = namespace
        self.name = name
        self.subresource = subresource


def _dry_run(request: web.Request, options_kind: str, body_values: Any = None) -> bool:
    """Whether the request is a dry run: `?dryRun=All` (or DeleteOptions.dryRun ["All"]).

    Like kube, any other value is 422 Invalid against the request's options kind.
    """
    values = list(request.query.getall("dryRun", ()))
    if isinstance(body_values, list):
        values += [str(v) for v in body_values]
    unsupported = [v for v in values if v != "All"]
    if unsupported:
        shown = ", ".join(f'"{v}"' for v in values)
        raise ApiError(
            422, "Invalid",
            f'{options_kind}.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{{{shown}}}: supported values: "All"',
            details={"group": "meta.k8s.io", "kind": options_kind, "causes": [{
                "reason": "FieldValueNotSupported", "field": "dryRun",
                "message": f'Unsupported value: []string{{{shown}}}: supported values: "All"',
            }]},
        )  # fmt: skip
    return bool(values)


def _not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


class ApiHandler:
    """Dispatches every request of one cluster."""

    def __init__(
        self,
        store: ClusterStore,
        faults: FaultInjector | None,
        records: WorldRecords | None = None,
        requests: RequestCounter | None = None,
    ) -> None:
        self.store = store
        self.faults = faults
        self.records = records
        self.requests = requests
        self.watchers: set[Watcher] = set()

    # ----------------------------------------------------------------- entry

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if self.requests is not None:
            self.requests.count(request.method, request.path, request.query)
        try:
            self._authenticate(request)
            if self.faults is not None:
                await self.faults.before_request(self.store.name, request.method, request.path_qs)
            return await self._dispatch(request)
        except ApiError as error:
            return _error_response(error)
        except Exception as exc:
            log.exception("internal error serving %s %s", request.method, request.path)
            return _error_response(errors.internal(f"sim apiserver error: {exc!r}"))

    def _authenticate(self, request: web.Request) -> None:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or self.store.tokens.authenticate(token.strip()) is None:
            raise errors.unauthorized()

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if not parts:
            return _json_response({"paths": ["/api", "/api/v1", "/apis", "/version"]})
        head = parts[0]
        if head == "version" and len(parts) == 1:
            return _json_response(discovery.KUBE_VERSION)
        if head in ("healthz", "readyz", "livez"):
            return web.Response(text="ok")
        registry = self.store.registry
        if head == "openapi" and request.method == "GET":
            return self._openapi(parts[1:])
        if head == "api":
            if len(parts) == 1:
                return _json_response(discovery.api_versions(request.host))
            group, version, rest = "", parts[1], parts[2:]
        elif head == "apis":
            if len(parts) == 1:
                return _json_response(discovery.api_group_list(registry))
            if len(parts) == 2:
                return _json_response(discovery.api_group(registry, parts[1]))
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise _not_found()
        if not rest:
            if request.method != "GET":
                raise errors.method_not_allowed("discovery is read-only")
            return _json_response(discovery.resource_list(registry, group, version))
        return await self._resource(request, self._route(group, version, rest))

    def _openapi(self, parts: list[str]) -> web.Response:
        """/openapi/v3 and its group-version documents; /openapi/v2 stays 404 (kubectl only
        falls back to it when v3 is missing)."""
        if parts[:1] != ["v3"]:
            raise _not_found()
        registry = self.store.registry
        if len(parts) == 1:
            return _json_response(openapi.discovery(registry))
        crds = {crd["metadata"]["name"]: crd for crd in self.store._iter(CRDS, None)}
        return _json_response(openapi.group_version(registry, "/".join(parts[1:]), crds))

    def _route(self, group: str, version: str, rest: list[str]) -> _Route:
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise _not_found()
        rt = self.store.registry.get(group, rest[0])
        if version not in rt.served_versions:
            raise _not_found()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and sub not in rt.subresources:
            raise _not_found()
        if namespace is not None and not rt.namespaced:
            raise _not_found()
        if rt.namespaced and namespace is None and name is not None:
            raise _not_found()
        return _Route(rt, version, namespace, name, sub)

    # ----------------------------------------------------------------- resources

    def _out(self, route: _Route, obj: Obj) -> Obj:
        # CRDs serving several versions convert with strategy None: only apiVersion changes.
        if route.version != route.rt.version:
            return {**obj, "apiVersion": route.rt.api_version_for(route.version)}
        return obj

    async def _resource(self, request: web.Request, route: _Route) -> web.StreamResponse:
        method = request.method
        store = self.store
        rt = route.rt
        query = request.query
        if route.name is None:
            if method == "GET":
                if query.get("watch") in ("true", "1"):
                    return await self._watch(request, route)
                return self._list(request, route)
            if method == "POST":
                body = await self._body(request)
                dry_run = _dry_run(request, "CreateOptions")
                validation = _field_validation(request, "CreateOptions")
                created = store.create(
                    rt, body, namespace=route.namespace, dry_run=dry_run,
                    field_validation=validation,
                )  # fmt: skip
                if self.records is not None and not dry_run:
                    self.records.object_created(store.name, rt.group, rt.plural, created)
                return _with_warnings(_json_response(self._out(route, created), 201), validation)
            if method == "DELETE":
                options = await self._delete_options(request)
                deleted = store.delete_collection(
                    rt,
                    route.namespace,
                    label_selector=query.get("labelSelector"),
                    field_selector=query.get("fieldSelector"),
                    grace_period_seconds=options.get("gracePeriodSeconds"),
                    propagation_policy=options.get("propagationPolicy"),
                    dry_run=_dry_run(request, "DeleteOptions", options.get("dryRun")),
                )
                return _json_response(self._list_body(route, deleted, store.resource_version))
            raise errors.method_not_allowed(f"{method} is not supported on collections")
        name = route.name
        sub = route.subresource
        if rt.key == PODS.key and sub == "portforward":
            if method not in ("GET", "POST"):
                raise errors.method_not_allowed(f"{method} is not supported on portforward")
            return await portforward.serve(request, store, route.namespace or "", name, self.faults)
        if method == "GET":
            if rt.key == PODS.key and sub == "log":
                return await self._pod_log(request, route)
            if sub not in (None, "status"):
                raise errors.method_not_allowed(f"GET is not supported on {sub}")
            obj = store.get(rt, route.namespace, name, copy_objects=False)
            if _wants_table(request):
                return _json_response(
                    tables.table(rt, [obj], obj["metadata"]["resourceVersion"], store.clock())
                )
            return _json_response(self._out(route, obj))
        if method == "POST":
            return await self._post_subresource(request, route)
        if method == "PUT":
            body = await self._body(request)
            if sub not in (None, "status"):
                raise errors.method_not_allowed(f"PUT is not supported on {sub}")
            dry_run = _dry_run(request, "UpdateOptions")
            validation = _field_validation(request, "UpdateOptions")
            updated = store.replace(
                rt, route.namespace, name, body, subresource=sub, dry_run=dry_run,
                field_validation=validation,
            )  # fmt: skip
            return _with_warnings(_json_response(self._out(route, updated)), validation)
        if method == "PATCH":
            content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
            raw = await request.read()
            try:
                patch = (
                    yaml.safe_load(raw) if content_type == APPLY_PATCH else _decode(raw or b"{}")
                )
            except (ValueError, yaml.YAMLError) as exc:
                raise errors.bad_request(f"invalid patch body: {exc}") from None
            if sub not in (None, "status"):
                raise errors.method_not_allowed(f"PATCH is not supported on {sub}")
            dry_run = _dry_run(request, "PatchOptions")
            validation = _field_validation(request, "PatchOptions")
            patched = store.patch(
                rt, route.namespace, name, patch, content_type, subresource=sub,
                dry_run=dry_run, copy_objects=False, field_validation=validation,
            )  # fmt: skip
            return _with_warnings(_json_response(self._out(route, patched)), validation)
        if method == "DELETE":
            if sub is not None:
                raise errors.method_not_allowed(f"DELETE is not supported on {sub}")
            options = await self._delete_options(request)
            dry_run = _dry_run(request, "DeleteOptions", options.get("dryRun"))
            last = store.delete(
                rt,
                route.namespace,
                name,
                grace_period_seconds=options.get("gracePeriodSeconds"),
                propagation_policy=options.get("propagationPolicy"),
                preconditions=options.get("preconditions"),
                dry_run=dry_run,
            )
            # Still there (graceful or finalizers): the object; gone: a Status (pods and CRDs
            # answer with the object either way, as kube's registries do).
            remains = (
                bool(last["metadata"].get("deletionTimestamp"))
                if dry_run
                else store._peek(rt, route.namespace, name) is not None
            )
            if remains or rt.key in (PODS.key, CRDS.key):
                return _json_response(self._out(route, last))
            meta = last["metadata"]
            details = {"name": name, "kind": rt.plural, "uid": meta.get("uid")}
            if rt.group:
                details["group"] = rt.group
            return _json_response(_success(200, details))
        raise errors.method_not_allowed(f"{method} is not supported")

    async def _post_subresource(self, request: web.Request, route: _Route) -> web.Response:
        store = self.store
        body = await self._body(request)
        namespace = route.namespace or ""
        name = route.name or ""
        if route.rt.key == PODS.key and route.subresource == "eviction":
            pod = store.get(PODS, namespace, name)  # 404 before any fault
            if self.faults is not None and self.faults.take_eviction_fault(
                store.name, namespace, name
            ):
                raise errors.too_many_requests(
                    "Cannot evict pod as it would violate the pod's disruption budget."
                )
            dry_run = _dry_run(request, "CreateOptions")
            store.evict(namespace, name, body.get("deleteOptions"), dry_run=dry_run)
            if self.records is not None and not dry_run:
                terminating = bool(pod["metadata"].get("deletionTimestamp"))
                self.records.evicted(store.name, pod, repeat=terminating)
            return _json_response(_success(201), 201)
        if route.rt.key == PODS.key and route.subresource == "binding":
            target = (body.get("target") or {}).get("name")
            if not target:
                raise errors.invalid(
                    PODS, name, [("target.name", "Required value", "FieldValueRequired")]
                )
            store.bind(namespace, name, target, dry_run=_dry_run(request, "CreateOptions"))
            return _json_response(_success(201), 201)
        if route.rt.key == SERVICEACCOUNTS.key and route.subresource == "token":
            return _json_response(store.request_token(namespace, name, body), 201)
        raise errors.method_not_allowed(f"POST is not supported on {route.rt.plural}/{name}")

    async def _body(self, request: web.Request) -> Obj:
        raw = await request.read()
        if not raw:
            return {}
        content_type = request.headers.get("Content-Type", "")
        if "protobuf" in content_type or "cbor" in content_type:
            # The sim speaks JSON (and YAML) only. 415 is what a server that does not serve an
            # encoding answers, and client-go then retries the request as JSON.
            raise errors.ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f'include: application/json, application/yaml ("{content_type}" is not)',
            )
        try:
            body = yaml.safe_load(raw) if "yaml" in content_type else _decode(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise errors.bad_request(f"invalid request body: {exc}") from None
        if not isinstance(body, dict):
            raise errors.bad_request("request body must be a JSON object")
        return body

    async def _delete_options(self, request: web.Request) -> Obj:
        options = await self._body(request) if request.can_read_body else {}
        query = request.query
        if "gracePeriodSeconds" in query:
            try:
                options["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
            except ValueError:
                raise errors.bad_request("gracePeriodSeconds must be an integer") from None
        if "propagationPolicy" in query:
            options["propagationPolicy"] = query["propagationPolicy"]
        orphan = query.get("orphanDependents", options.get("orphanDependents"))
        if orphan in (True, "true") and "propagationPolicy" not in options:
            options["propagationPolicy"] = "Orphan"
        if options.get("gracePeriodSeconds") is not None:
            options["gracePeriodSeconds"] = int(options["gracePeriodSeconds"])
        return options

    def _list_body(
        self, route: _Route, items: list[Obj], rv: int, list_meta: Obj | None = None
    ) -> Obj:
        rt = route.rt
        return {
            "kind": f"{rt.kind}List",
            "apiVersion": rt.api_version_for(route.version),
            "metadata": {"resourceVersion": str(rv), **(list_meta or {})},
            "items": [self._out(route, o) for o in items],
        }

    def _list(self, request: web.Request, route: _Route) -> web.Response:
        query = request.query
        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            raise errors.bad_request(f"invalid limit: {query.get('limit')!r}") from None
        continue_token = query.get("continue") or None
        if continue_token and query.get("resourceVersion"):
            raise errors.bad_request(
                "specifying resource version is not allowed when using continue"
            )
        chunk = self.store.list_chunk(
            route.rt,
            route.namespace,
            label_selector=query.get("labelSelector"),
            field_selector=query.get("fieldSelector"),
            limit=limit,
            continue_token=continue_token,
            copy_objects=False,
        )
        list_meta: Obj = {}
        if chunk.continue_token:
            list_meta["continue"] = chunk.continue_token
        if chunk.remaining_item_count is not None:
            list_meta["remainingItemCount"] = chunk.remaining_item_count
        rv = chunk.resource_version
        if _wants_table(request):
            table = tables.table(route.rt, chunk.items, str(rv), self.store.clock())
            table["metadata"].update(list_meta)
            return _json_response(table)
        return _json_response(self._list_body(route, chunk.items, rv, list_meta))

    # ----------------------------------------------------------------- pods/log

    async def _pod_log(self, request: web.Request, route: _Route) -> web.StreamResponse:
        """GET pods/{name}/log: what kube-apiserver proxies from the node's kubelet
        (`podlogs.py` has the checks and their messages)."""
        namespace, name = route.namespace or "default", route.name or ""
        options = podlogs.parse_options(request.query, name)
        pod = self.store.get(PODS, namespace, name, copy_objects=False)
        container = podlogs.resolve_container(pod, options.container)
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name:
            # LogLocation has no kubelet to ask: kube answers 200 with nothing.
            return web.Response(body=b"", content_type="text/plain")
        if self.faults is not None and self.faults.kubelet_stopped(self.store.name, node_name):
            node = self.store.try_get(NODES, None, node_name) or {}
            addresses = (node.get("status") or {}).get("addresses") or []
            ip = next((a["address"] for a in addresses if a.get("type") == "InternalIP"), node_name)
            raise podlogs.kubelet_unreachable(ip, namespace, name, container)
        container_id = podlogs.container_id_for_logs(pod, container, options.previous)
        log_file = self.store.container_logs.get(container_id)
        if not options.follow or log_file is None or log_file.finished:
            body, _ = podlogs.render(log_file, options, self.store.clock())
            return web.Response(body=body, content_type="text/plain")
        response = web.StreamResponse(status=200)
        response.content_type = "text/plain"
        response.enable_chunked_encoding()
        await response.prepare(request)
        uid = pod["metadata"]["uid"]

        def still_wanted() -> bool:
            transport = request.transport
            current = self.store._peek(PODS, namespace, name)
            return (
                transport is not None
                and not transport.is_closing()
                and current is not None
                and current["metadata"]["uid"] == uid
            )

        with contextlib.suppress(ConnectionResetError):
            await podlogs.follow(
                log_file, options, self.store.clock, response.write,
                still_wanted=still_wanted, poll=_WATCH_POLL,
            )  # fmt: skip
            await response.write_eof()
        return response

    # ----------------------------------------------------------------- watch

    async def _watch(self, request: web.Request, route: _Route) -> web.StreamResponse:
        query = request.query
        raw_rv = query.get("resourceVersion") or ""
        try:
            rv = int(raw_rv) if raw_rv else None
            timeout = float(query.get("timeoutSeconds") or DEFAULT_WATCH_TIMEOUT)
        except ValueError:
            raise errors.bad_request("resourceVersion and timeoutSeconds must be numbers") from None
        response = web.StreamResponse(status=200)
        response.content_type = _JSON
        response.enable_chunked_encoding()
        try:
            watcher = self.store.watch(
                route.rt,
                route.namespace,
                resource_version=rv,
                label_selector=query.get("labelSelector"),
                field_selector=query.get("fieldSelector"),
                copy_objects=False,
            )
        except ApiError as error:
            if error.code != 410:
                raise
            # Like kube-apiserver: a 200 stream carrying one ERROR event with the 410 Status.
            await response.prepare(request)
            await response.write(_encode({"type": "ERROR", "object": error.status_body()}) + b"\n")
            await response.write_eof()
            return response
        self.watchers.add(watcher)
        await response.prepare(request)
        deadline = time.monotonic() + timeout
        as_table = _wants_table(request)
        events = watcher.__aiter__()
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    event = await asyncio.wait_for(
                        events.__anext__(), timeout=min(remaining, _WATCH_POLL)
                    )
                except TimeoutError:
                    transport = request.transport
                    if transport is None or transport.is_closing():
                        break
                    continue
                except StopAsyncIteration:
                    break
                obj = self._out(route, event.object)
                if as_table:
                    rv = obj["metadata"].get("resourceVersion", "")
                    obj = tables.table(route.rt, [obj], rv, self.store.clock())
                await response.write(_encode({"type": event.type, "object": obj}) + b"\n")
        except ConnectionResetError:
            # The client closed the watch while an event was written to it (it stopped, or its
            # read timed out): it is gone, nothing is wrong here.
            return response
        finally:
            watcher.close()
            self.watchers.discard(watcher)
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response

    async def close_watches(self, _app: web.Application) -> None:
        for watcher in list(self.watchers):
            watcher.close()


def _wants_table(request: web.Request) -> bool:
    return "as=Table" in request.headers.get("Accept", "")


def create_app(
    store: ClusterStore,
    *,
    faults: FaultInjector | None = None,
    records: WorldRecords | None = None,
    routes: Iterable[web.AbstractRouteDef] = (),
    requests: RequestCounter | None = None,
) -> web.Application:
    """The aiohttp application serving `store` (and /sim/v1/faults when `faults` is given,
    /sim/v1/records when `records` is: a client's creates and evictions are recorded there, and
    the sim's own `routes`, e.g. /sim/v1/identity, ahead of the Kubernetes API); `requests`
    counts every Kubernetes API request it answers."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    handler = ApiHandler(store, faults, records, requests)
    app[_STORE_KEY] = store
    if faults is not None:
        add_fault_routes(app, faults)
    if records is not None:
        add_records_routes(app, records)
    app.add_routes(routes)
    app.router.add_route("*", "/{tail:.*}", handler.handle)
    app.on_shutdown.append(handler.close_watches)
    return app
