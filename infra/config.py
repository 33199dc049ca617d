"""Where Colony finds its infrastructure: one settings model read from the environment.

`worker.py` builds the activities' clients from it and `colonyctl` (starter/) uses the same values,
so both sides of a deployment agree on the Temporal endpoint, the task queue, the management
cluster's kubeconfig and the host provider. Nothing here knows whether the infrastructure is real or
the simulator: the sim writes files in the same shapes a real deployment would provide.

Environment:
    Temporal: Temporal's own environment configuration (`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`,
        `TEMPORAL_API_KEY`, `TEMPORAL_PROFILE`, the TOML config file), default 127.0.0.1:7233.
    COLONY_TASK_QUEUE: default `colony`.
    COLONY_MANAGEMENT_KUBECONFIG: default `.colony/sim/management.kubeconfig`.
    COLONY_HOST_PROVIDER_URL / COLONY_HOST_PROVIDER_API_KEY: default the `url`/`apiKey` of the
        JSON file named by COLONY_HOST_PROVIDER_CONFIG (default `.colony/sim/hostprovider.json`).
    COLONY_WEB_UI: base URL of the Temporal Web UI, default http://127.0.0.1:8233.
    COLONY_SYSTEM_NAMESPACE: Colony's namespace on the management cluster (the watcher's Lease and
        state ConfigMap), default `colony-system`.
    COLONY_WATCH_NAMESPACE: where the watcher looks for ClusterDeployments and ServiceSets, default
        every namespace.
    COLONY_WATCHER_ID: the watcher's identity in its Lease, default `<hostname>-<pid>`.
    COLONY_WATCHER_IN_WORKER: `1` runs the watcher inside `worker.py` (elected like a separate one).
    COLONY_METRICS_PORT: the worker's Prometheus endpoint (`worker.py`, and the watcher running in
        it with COLONY_WATCHER_IN_WORKER=1); unset: none.
    COLONY_WATCHER_METRICS_PORT: the Prometheus endpoint of `watcher.py`; unset: none. Its own
        setting, because a worker and a watcher on one host cannot bind the same port (`make run`
        picks the first free port after COLONY_METRICS_PORT when it is unset).
    COLONY_TRACE_EXPORT: `otlp` (to OTEL_EXPORTER_OTLP_ENDPOINT, default http://localhost:4318),
        `console`, or empty: no tracing.
    COLONY_QUOTA_HOSTS, COLONY_QUOTA_GPUS, COLONY_QUOTA_CLUSTERS, COLONY_QUOTA_WORKSPACES,
    COLONY_QUOTA_LOCATION_SHARE: each organization's quotas where an operator set none
        (`models.quota`: 32 hosts, 128 GPUs, 20 clusters, 250 workspaces, and at most 0.5 of a
        location's hosts of one SKU). Read by whoever admits (the HTTP API and `colonyctl` for
        creates, the worker for a pool's growth): give them the same values.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError
from temporalio.envconfig import ClientConfig

from models.base import user_rule
from models.quota import DEFAULT_LIMITS, QuotaLimits

DEFAULT_TEMPORAL_ADDRESS = "127.0.0.1:7233"
DEFAULT_NAMESPACE = "default"
DEFAULT_TASK_QUEUE = "colony"
DEFAULT_MANAGEMENT_KUBECONFIG = ".colony/sim/management.kubeconfig"
DEFAULT_HOST_PROVIDER_CONFIG = ".colony/sim/hostprovider.json"
DEFAULT_WEB_UI = "http://127.0.0.1:8233"
DEFAULT_SYSTEM_NAMESPACE = "colony-system"
TRACE_EXPORTERS = ("", "otlp", "console")
METRICS_PORT_ENV = "COLONY_METRICS_PORT"
WATCHER_METRICS_PORT_ENV = "COLONY_WATCHER_METRICS_PORT"
_TRUE = ("1", "true", "yes", "on")
QUOTA_ENV = {
    "hosts": "COLONY_QUOTA_HOSTS",
    "gpus": "COLONY_QUOTA_GPUS",
    "clusters": "COLONY_QUOTA_CLUSTERS",
    "workspaces": "COLONY_QUOTA_WORKSPACES",
    "location_share": "COLONY_QUOTA_LOCATION_SHARE",
}


class SettingsError(Exception):
    """The configuration is incomplete or unreadable; the message says what to set."""


class ColonySettings(BaseModel):
    """Colony's configuration (see the module docstring for the environment variables)."""

    model_config = ConfigDict(frozen=True)

    temporal_connect: dict[str, Any]
    """Keyword arguments for `temporalio.client.Client.connect`, from Temporal's env config."""
    task_queue: str = DEFAULT_TASK_QUEUE
    management_kubeconfig: Path = Path(DEFAULT_MANAGEMENT_KUBECONFIG)
    host_provider_url: str = ""
    host_provider_api_key: SecretStr = SecretStr("")
    web_ui: str = DEFAULT_WEB_UI
    system_namespace: str = DEFAULT_SYSTEM_NAMESPACE
    watch_namespace: str = ""
    """Empty: every namespace."""
    watcher_id: str = ""
    """Empty: `<hostname>-<pid>`, chosen by the watcher."""
    watcher_in_worker: bool = False
    metrics_port: int | None = None
    """The worker's `/metrics` port (None: no endpoint)."""
    watcher_metrics_port: int | None = None
    """`watcher.py`'s `/metrics` port (None: no endpoint)."""
    trace_export: str = ""
    quota_defaults: QuotaLimits = Field(default_factory=lambda: DEFAULT_LIMITS)
    """Each organization's quotas where an operator set none."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ColonySettings:
        """Read the settings from `env` (default: the process environment).

        The host provider's values are optional here; `require_host_provider` checks them where
        they are needed, so `colonyctl cluster get` works without them.
        """
        environ = dict(os.environ if env is None else env)
        connect = dict(ClientConfig.load_client_connect_config(override_env_vars=environ))
        connect.setdefault("target_host", DEFAULT_TEMPORAL_ADDRESS)
        connect.setdefault("namespace", DEFAULT_NAMESPACE)
        url = environ.get("COLONY_HOST_PROVIDER_URL", "")
        key = environ.get("COLONY_HOST_PROVIDER_API_KEY", "")
        if not (url and key):
            file_url, file_key = _read_host_provider_file(
                Path(environ.get("COLONY_HOST_PROVIDER_CONFIG", DEFAULT_HOST_PROVIDER_CONFIG))
            )
            url, key = url or file_url, key or file_key
        return cls(
            temporal_connect=connect,
            task_queue=environ.get("COLONY_TASK_QUEUE", DEFAULT_TASK_QUEUE),
            management_kubeconfig=Path(
                environ.get("COLONY_MANAGEMENT_KUBECONFIG", DEFAULT_MANAGEMENT_KUBECONFIG)
            ),
            host_provider_url=url.rstrip("/"),
            host_provider_api_key=SecretStr(key),
            web_ui=environ.get("COLONY_WEB_UI", DEFAULT_WEB_UI).rstrip("/"),
            system_namespace=environ.get("COLONY_SYSTEM_NAMESPACE") or DEFAULT_SYSTEM_NAMESPACE,
            watch_namespace=environ.get("COLONY_WATCH_NAMESPACE", ""),
            watcher_id=environ.get("COLONY_WATCHER_ID", ""),
            watcher_in_worker=environ.get("COLONY_WATCHER_IN_WORKER", "").lower() in _TRUE,
            metrics_port=parse_port(METRICS_PORT_ENV, environ.get(METRICS_PORT_ENV, "")),
            watcher_metrics_port=parse_port(
                WATCHER_METRICS_PORT_ENV, environ.get(WATCHER_METRICS_PORT_ENV, "")
            ),
            trace_export=_trace_export(environ.get("COLONY_TRACE_EXPORT", "")),
            quota_defaults=_quota_defaults(environ),
        )

    @property
    def namespace(self) -> str:
        """The Temporal namespace."""
        return str(self.temporal_connect.get("namespace", DEFAULT_NAMESPACE))

    @property
    def temporal_address(self) -> str:
        return str(self.temporal_connect.get("target_host", DEFAULT_TEMPORAL_ADDRESS))

    def workflow_link(self, workflow_id: str) -> str:
        """The Web UI page of a workflow (the id is URL-quoted: cluster ids contain a slash)."""
        return f"{self.web_ui}/namespaces/{quote(self.namespace, safe='')}/workflows/{quote(workflow_id, safe='')}"

    def require_host_provider(self) -> tuple[str, str]:
        """The host provider's URL and API key, or a `SettingsError` saying what to set."""
        key = self.host_provider_api_key.get_secret_value()
        if not self.host_provider_url or not key:
            raise SettingsError(
                "the host provider is not configured: set COLONY_HOST_PROVIDER_URL and "
                "COLONY_HOST_PROVIDER_API_KEY, or COLONY_HOST_PROVIDER_CONFIG to a JSON file "
                "with url and apiKey"
            )
        return self.host_provider_url, key

    def require_management_kubeconfig(self) -> Path:
        """The management cluster's kubeconfig file, or a `SettingsError`."""
        if not self.management_kubeconfig.is_file():
            raise SettingsError(
                f"management cluster kubeconfig {self.management_kubeconfig} does not exist: "
                "set COLONY_MANAGEMENT_KUBECONFIG (or start the simulator: colonyctl sim up)"
            )
        return self.management_kubeconfig


def parse_port(variable: str, value: str) -> int | None:
    """The port number `value` of the environment variable `variable`; None when it is empty."""
    if not value.strip():
        return None
    if not value.strip().isdigit() or not 0 <= int(value) <= 65535:
        raise SettingsError(f"{variable}: {value!r} is not a port number (0-65535)")
    return int(value)


def _quota_defaults(environ: Mapping[str, str]) -> QuotaLimits:
    """`DEFAULT_LIMITS`, with each one the environment sets instead."""
    given: dict[str, float] = {}
    for field, variable in QUOTA_ENV.items():
        text = environ.get(variable, "").strip()
        if not text:
            continue
        try:
            given[field] = float(text) if field == "location_share" else int(text)
        except ValueError:
            kind = "a number from 0 to 1" if field == "location_share" else "a whole number"
            raise SettingsError(f"{variable}: {text!r} is not {kind}") from None
    try:
        return DEFAULT_LIMITS.changed(QuotaLimits(**given), ())
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        variable = QUOTA_ENV.get(str(first["loc"][0]), str(first["loc"][0]))
        raise SettingsError(f"{variable}: {user_rule(first)}") from exc


def _trace_export(value: str) -> str:
    value = value.strip().lower()
    if value not in TRACE_EXPORTERS:
        raise SettingsError(
            f"COLONY_TRACE_EXPORT: unknown exporter {value!r} (use 'otlp', 'console' or nothing)"
        )
    return value


def _read_host_provider_file(path: Path) -> tuple[str, str]:
    """`url` and `apiKey` of a host provider JSON file; empty strings when it does not exist."""
    if not path.is_file():
        return "", ""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SettingsError(f"host provider config {path} is not readable JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise SettingsError(f"host provider config {path} must be a JSON object")
    return str(data.get("url", "")), str(data.get("apiKey", ""))
