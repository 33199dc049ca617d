"""The pods/log subresource: the nodes' container log files and how the API server reads them.

In a real cluster the kubelet writes each container's output to a file on its node and
kube-apiserver proxies GET .../pods/{name}/log to that kubelet. Here the kubelet controller
(`sim.controllers.kubelet`) writes into `ContainerLogs` (one per cluster, `store.container_logs`),
keyed by container ID so a restarted container's previous run stays readable, and the HTTP layer
calls `read_request` then `render` / `follow` from here.

Checks, in kube's order and with its words:
1. `PodLogOptions` validation (422): tailLines >= 0, limitBytes > 0, sinceSeconds > 0, not both
   sinceSeconds and sinceTime.
2. The pod (404), then the container (400): `a container name must be specified for pod X,
   choose one of: [a b]` (plus ` or one of the init containers: [...]`), `container c is not valid
   for pod X`.
3. A pod not bound to a node answers 200 with an empty body (LogLocation has no kubelet to ask).
4. The kubelet's own checks (400, validateContainerLogStatus): `previous terminated container "c"
   in pod "p" not found`, `container "c" in pod "p" is waiting to start: ContainerCreating`,
   `container "c" in pod "p" is terminated`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sim.apiserver import errors
from sim.apiserver.errors import ApiError
from sim.apiserver.registry import ResourceType

# The options kind kube names in its 422 answers.
_LOG_OPTIONS = ResourceType("", "v1", "podlogoptions", "PodLogOptions", True)


@dataclass(frozen=True)
class LogLine:
    """One line a container wrote, with the time the runtime saw it."""

    time: dt.datetime
    text: str  # without the trailing newline


class ContainerLog:
    """The output of one container run (one container ID), appended to by the kubelet."""

    def __init__(self) -> None:
        self.lines: list[LogLine] = []
        self.finished = False
        self._partial = ""
        self._changed = asyncio.Event()

    def write(self, text: str, when: dt.datetime) -> None:
        """Append output; complete lines become visible, a partial one waits for its newline."""
        pending = self._partial + text
        *complete, self._partial = pending.split("\n")
        for line in complete:
            self.lines.append(LogLine(when, line))
        if complete:
            self._notify()

    def finish(self, when: dt.datetime) -> None:
        """The process ended: flush a partial last line and wake followers for good."""
        if self._partial:
            self.lines.append(LogLine(when, self._partial))
            self._partial = ""
        self.finished = True
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def changed(self, timeout: float) -> None:
        """Return when something was written or the run ended, or after `timeout` seconds."""
        event = self._changed
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return


class ContainerLogs:
    """Every container run's log in one cluster, by container ID (`containerd://...`)."""

    def __init__(self) -> None:
        self._logs: dict[str, ContainerLog] = {}
        self._by_pod: dict[str, list[str]] = {}

    def open(self, pod_uid: str, container_id: str) -> ContainerLog:
        """A fresh log for a container run that is starting."""
        log = self._logs[container_id] = ContainerLog()
        self._by_pod.setdefault(pod_uid, []).append(container_id)
        return log

    def get(self, container_id: str) -> ContainerLog | None:
        return self._logs.get(container_id)

    def snapshot(self) -> list[dict[str, Any]]:
        """Every pod's container runs with their lines, JSON-shaped (see `restore`)."""
        return [
            {
                "podUID": pod_uid,
                "containers": [
                    {
                        "containerID": container_id,
                        "finished": log.finished,
                        "lines": [[line.time.isoformat(), line.text] for line in log.lines],
                    }
                    for container_id in container_ids
                    if (log := self._logs.get(container_id)) is not None
                ],
            }
            for pod_uid, container_ids in self._by_pod.items()
        ]

    def restore(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """The logs of a `snapshot()`: a persisted world's pods keep their logs across a restart
        (a partial last line not yet ended by a newline is not kept)."""
        for pod in pods:
            for container in pod.get("containers") or ():
                log = self.open(str(pod["podUID"]), str(container["containerID"]))
                log.lines = [
                    LogLine(dt.datetime.fromisoformat(when), text)
                    for when, text in container.get("lines") or ()
                ]
                log.finished = bool(container.get("finished"))

    def drop_pod(self, pod_uid: str) -> None:
        """The pod is gone: its log files go with it (the kubelet removes /var/log/pods/<uid>)."""
        for container_id in self._by_pod.pop(pod_uid, []):
            log = self._logs.pop(container_id, None)
            if log is not None and not log.finished:
                log.finished = True
                log._notify()


@dataclass
class LogOptions:
    """The PodLogOptions of one request."""

    container: str = ""
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    tail_lines: int | None = None
    limit_bytes: int | None = None
    since_seconds: int | None = None
    since_time: dt.datetime | None = None
    extra: dict[str, str] = field(default_factory=dict)


def _bool(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def _int(query: Mapping[str, str], key: str) -> int | None:
    raw = query.get(key)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise errors.bad_request(
            f'couldn\'t parse "{key}": strconv.ParseInt: parsing "{raw}": invalid syntax'
        ) from None


def parse_options(query: Mapping[str, str], pod_name: str) -> LogOptions:
    """PodLogOptions from the query string, validated as kube does (422 PodLogOptions)."""
    since_time = None
    if query.get("sinceTime"):
        try:
            since_time = dt.datetime.fromisoformat(query["sinceTime"].replace("Z", "+00:00"))
        except ValueError:
            raise errors.bad_request(
                f'parsing time "{query["sinceTime"]}" as "2006-01-02T15:04:05Z07:00": cannot parse'
            ) from None
    options = LogOptions(
        container=query.get("container", ""),
        follow=_bool(query.get("follow")),
        previous=_bool(query.get("previous")),
        timestamps=_bool(query.get("timestamps")),
        tail_lines=_int(query, "tailLines"),
        limit_bytes=_int(query, "limitBytes"),
        since_seconds=_int(query, "sinceSeconds"),
        since_time=since_time,
    )
    causes: list[tuple[str, str, str]] = []
    if options.tail_lines is not None and options.tail_lines < 0:
        causes.append(("tailLines", f"Invalid value: {options.tail_lines}: must be greater than or equal to 0", "FieldValueInvalid"))  # fmt: skip
    if options.limit_bytes is not None and options.limit_bytes < 1:
        causes.append(("limitBytes", f"Invalid value: {options.limit_bytes}: must be greater than 0", "FieldValueInvalid"))  # fmt: skip
    if options.since_seconds is not None and options.since_time is not None:
        causes.append(("", "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified", "FieldValueForbidden"))  # fmt: skip
    elif options.since_seconds is not None and options.since_seconds < 1:
        causes.append(("sinceSeconds", f"Invalid value: {options.since_seconds}: must be greater than 0", "FieldValueInvalid"))  # fmt: skip
    if causes:
        raise errors.invalid(_LOG_OPTIONS, pod_name, causes)
    return options


def _names(containers: Iterable[Mapping[str, Any]]) -> str:
    return " ".join(str(c.get("name", "")) for c in containers)


def resolve_container(pod: Mapping[str, Any], requested: str) -> str:
    """The container a log request is about (kube's validateContainer); 400 when ambiguous."""
    spec = pod.get("spec") or {}
    name = pod["metadata"]["name"]
    containers = spec.get("containers") or []
    init = spec.get("initContainers") or []
    if not requested:
        if len(containers) == 1:
            return str(containers[0].get("name", ""))
        if not containers:
            raise errors.bad_request(f"a container name must be specified for pod {name}")
        message = f"a container name must be specified for pod {name}, choose one of: [{_names(containers)}]"  # fmt: skip
        if init:
            message += f" or one of the init containers: [{_names(init)}]"
        raise errors.bad_request(message)
    every = [*init, *containers, *(spec.get("ephemeralContainers") or [])]
    if not any(c.get("name") == requested for c in every):
        raise errors.bad_request(f"container {requested} is not valid for pod {name}")
    return requested


def container_id_for_logs(pod: Mapping[str, Any], container: str, previous: bool) -> str:
    """The run whose log to read, or the kubelet's 400 (validateContainerLogStatus)."""
    name = pod["metadata"]["name"]
    status = pod.get("status") or {}
    statuses = [
        *(status.get("containerStatuses") or []),
        *(status.get("initContainerStatuses") or []),
        *(status.get("ephemeralContainerStatuses") or []),
    ]
    found = next((s for s in statuses if s.get("name") == container), None)
    if found is None:
        # The kubelet reports a container it admitted but has not started as ContainerCreating.
        raise errors.bad_request(
            f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating'
        )
    last = (found.get("lastState") or {}).get("terminated")
    state = found.get("state") or {}
    if previous:
        if not last or not last.get("containerID"):
            raise errors.bad_request(
                f'previous terminated container "{container}" in pod "{name}" not found'
            )
        return str(last["containerID"])
    if state.get("running") is not None:
        return str(found.get("containerID") or "")
    terminated = state.get("terminated")
    if terminated is not None:
        if terminated.get("containerID"):
            return str(terminated["containerID"])
        if last and last.get("containerID"):
            return str(last["containerID"])
        raise errors.bad_request(f'container "{container}" in pod "{name}" is terminated')
    if last is not None:
        if not last.get("containerID"):
            raise errors.bad_request(f'container "{container}" in pod "{name}" is terminated')
        return str(last["containerID"])
    waiting = state.get("waiting")
    if waiting is not None:
        reason = waiting.get("reason") or ""
        if reason == "ErrImagePull":
            raise errors.bad_request(
                f'container "{container}" in pod "{name}" is waiting to start: image can\'t be pulled'
            )
        if reason == "ImagePullBackOff":
            raise errors.bad_request(
                f'container "{container}" in pod "{name}" is waiting to start: trying and failing to pull image'
            )
        raise errors.bad_request(
            f'container "{container}" in pod "{name}" is waiting to start: {reason}'
        )
    raise errors.bad_request(
        f'container "{container}" in pod "{name}" is waiting to start - no logs yet'
    )


def format_timestamp(when: dt.datetime) -> str:
    """RFC 3339 with nanoseconds, as the kubelet prefixes lines with `timestamps=true`."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def _since(options: LogOptions, now: dt.datetime) -> dt.datetime | None:
    if options.since_time is not None:
        return options.since_time
    if options.since_seconds is not None:
        return now - dt.timedelta(seconds=options.since_seconds)
    return None


def _line(line: LogLine, options: LogOptions) -> bytes:
    text = f"{format_timestamp(line.time)} {line.text}" if options.timestamps else line.text
    return (text + "\n").encode()


def render(log: ContainerLog | None, options: LogOptions, now: dt.datetime) -> tuple[bytes, int]:
    """The body for a non-follow read, and how many lines of the log it covered."""
    if log is None:
        return b"", 0
    since = _since(options, now)
    lines = [line for line in log.lines if since is None or line.time >= since]
    if options.tail_lines is not None:
        lines = lines[-options.tail_lines :] if options.tail_lines else []
    body = b"".join(_line(line, options) for line in lines)
    if options.limit_bytes is not None:
        body = body[: options.limit_bytes]
    return body, len(log.lines)


async def follow(
    log: ContainerLog,
    options: LogOptions,
    now: Callable[[], dt.datetime],
    write: Callable[[bytes], Any],
    *,
    still_wanted: Callable[[], bool],
    poll: float = 1.0,
) -> None:
    """Stream the log: what `render` gives, then each new line until the run ends, the limit is
    reached or `still_wanted()` says the client or the pod went away."""
    body, seen = render(log, options, now())
    sent = len(body)
    if body:
        await write(body)
    while not log.finished or seen < len(log.lines):
        if options.limit_bytes is not None and sent >= options.limit_bytes:
            return
        if seen < len(log.lines):
            chunk = b"".join(_line(line, options) for line in log.lines[seen:])
            seen = len(log.lines)
            if options.limit_bytes is not None:
                chunk = chunk[: options.limit_bytes - sent]
            sent += len(chunk)
            await write(chunk)
            continue
        if not still_wanted():
            return
        await log.changed(poll)


def kubelet_unreachable(node_ip: str, namespace: str, pod: str, container: str) -> ApiError:
    """What the API server answers when the node's kubelet does not answer (node down)."""
    return ApiError(
        500,
        "InternalError",
        f'Get "https://{node_ip}:10250/containerLogs/{namespace}/{pod}/{container}": '
        f"dial tcp {node_ip}:10250: connect: no route to host",
    )
