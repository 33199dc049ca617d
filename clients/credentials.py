"""`colonyctl kubeconfig` and the issuing half of `colonyctl token`: the documented exception
where the CLI talks to Kubernetes itself. The HTTP API's kubeconfig and token endpoints
(`api.credentials`) issue their tokens with the same functions; nothing here prints or knows Typer.

The kubeconfig it writes holds no credential: the child cluster's server and CA, and an `exec`
user that runs `colonyctl token`, which asks the child for a one-hour ServiceAccount token
(TokenRequest) of `colony-admin`, bound to cluster-admin. The child's admin kubeconfig is read from
the `<name>-kubeconfig` Secret on the management cluster and used only in this process; neither it
nor the tokens ever pass through a workflow. `starter.token_cache` calls `issue_token` only when it
has no usable token cached; it imports this module (and the Kubernetes client) only then.
"""

from __future__ import annotations

import base64
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from clients.errors import ColonyError, InvalidRequestError, NotFoundError, UnavailableError
from infra.kube import api_client_from_dict, api_client_from_file, close_client
from models.cluster import DEFAULT_NAMESPACE, cluster_deployment_name, kubeconfig_secret_name

SERVICE_ACCOUNT = "colony-admin"
SERVICE_ACCOUNT_NAMESPACE = "kube-system"
BINDING = "colony-admin"
TOKEN_SECONDS = 3600
"""One hour: what the product promises ("a cluster token ... which expires after one hour")."""
EXEC_API_VERSION = "client.authentication.k8s.io/v1"
"""Also in `starter.token_cache`, which must not import this module on a cache hit."""


def _management_client(management_kubeconfig: Path) -> client.ApiClient:
    if not management_kubeconfig.is_file():
        raise InvalidRequestError(
            f"management cluster kubeconfig {management_kubeconfig} does not exist: "
            "set COLONY_MANAGEMENT_KUBECONFIG (or start the simulator: colonyctl sim up)"
        )
    return api_client_from_file(management_kubeconfig)


@contextmanager
def _calling(
    api: client.ApiClient, doing: str, where: str, *, missing: ColonyError | None = None
) -> Iterator[None]:
    """Calls to a cluster through `api`, closed after: an API error is `UnavailableError` saying
    what could not be done (`missing` for a 404, when given), a transport error one saying what
    could not be reached."""
    try:
        yield
    except ApiException as exc:
        if exc.status == 404 and missing is not None:
            raise missing from exc
        raise UnavailableError(f"cannot {doing}: {exc.status} {exc.reason}") from exc
    except urllib3.exceptions.HTTPError as exc:
        raise UnavailableError(f"cannot reach {where}: {exc}") from exc
    finally:
        close_client(api)


def _admin_kubeconfig(
    management_kubeconfig: Path, cluster: str, namespace: str, secret_name: str | None = None
) -> dict[str, Any]:
    """The child's admin kubeconfig from its Secret (kept in memory only).

    Args:
        secret_name: the Secret, as the cluster's status references it
            (`<ClusterDeployment>-kubeconfig`); default: the default-mode cluster's, named after
            its ClusterDeployment (`models.identity`: plain, or derived for a colony's member).
    """
    management = _management_client(management_kubeconfig)
    missing = NotFoundError(
        f"cluster: cluster '{cluster}' has no kubeconfig (not found, or not ready yet)"
    )
    with _calling(
        management,
        f"read the kubeconfig of cluster '{cluster}'",
        "the management cluster",
        missing=missing,
    ):
        secret = client.CoreV1Api(management).read_namespaced_secret(
            secret_name or kubeconfig_secret_name(cluster_deployment_name(cluster)), namespace
        )
    value = (secret.data or {}).get("value")
    if not value:
        raise ColonyError(f"the kubeconfig Secret of cluster '{cluster}' is empty")
    loaded = yaml.safe_load(base64.b64decode(value))
    if not isinstance(loaded, dict):
        raise ColonyError(f"the kubeconfig Secret of cluster '{cluster}' holds no kubeconfig")
    return loaded


def server_entry(
    management_kubeconfig: Path, cluster: str, namespace: str, secret_name: str | None = None
) -> dict[str, Any]:
    """The child's API server and CA (`server`, `certificate-authority-data`): public, no
    credential."""
    return server_of(_admin_kubeconfig(management_kubeconfig, cluster, namespace, secret_name))


def server_of(kubeconfig: dict[str, Any]) -> dict[str, Any]:
    """The server and CA of a kubeconfig's current context."""
    entry = _current_cluster(kubeconfig)
    ca_data = entry.get("certificate-authority-data")
    if not ca_data and entry.get("certificate-authority"):
        ca_data = base64.b64encode(Path(entry["certificate-authority"]).read_bytes()).decode()
    cluster_entry: dict[str, Any] = {"server": entry["server"]}
    if ca_data:
        cluster_entry["certificate-authority-data"] = ca_data
    return cluster_entry


def kubeconfig_for(cluster: str, server: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    """A one-cluster kubeconfig: `server` (from `server_entry`) and the `user` entry (an exec
    plugin, or a token)."""
    user_name = f"colony-{cluster}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": server}],
        "users": [{"name": user_name, "user": user}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user_name}}],
        "current-context": cluster,
        "preferences": {},
    }


def exec_user(command: str, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """A kubeconfig user whose credential comes from an exec plugin (`colonyctl token`)."""
    return {
        "exec": {
            "apiVersion": EXEC_API_VERSION,
            "command": command,
            "args": args,
            "env": [{"name": name, "value": value} for name, value in env.items()],
            "interactiveMode": "Never",
            "provideClusterInfo": False,
        }
    }


def exec_credential(token: str, expiry: datetime) -> dict[str, Any]:
    """The client.authentication.k8s.io/v1 ExecCredential of a token."""
    from datetime import UTC

    return {
        "apiVersion": EXEC_API_VERSION,
        "kind": "ExecCredential",
        "status": {
            "token": token,
            "expirationTimestamp": expiry.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    }


def _current_cluster(kubeconfig: dict[str, Any]) -> dict[str, Any]:
    """The `cluster` entry of the kubeconfig's current context."""
    contexts = {c["name"]: c.get("context") or {} for c in kubeconfig.get("contexts") or []}
    clusters = {c["name"]: c.get("cluster") or {} for c in kubeconfig.get("clusters") or []}
    context = contexts.get(kubeconfig.get("current-context", ""), {})
    entry = clusters.get(context.get("cluster", "")) or next(iter(clusters.values()), None)
    if not entry:
        raise ColonyError("the cluster's kubeconfig names no cluster")
    return dict(entry)


PLUGIN_CODE = "import starter.token_cache as t; t.main()"
"""What the plugin's Python runs (`-c`, not `-m`: runpy's imports cost more than the module)."""


def token_plugin(cluster: str, namespace: str) -> tuple[str, list[str], dict[str, str]]:
    """How kubectl runs `colonyctl token`: command, args and environment.

    This Python, without `site` (`-S`) and without the working directory on its path (`-P`),
    runs `starter.token_cache` found through `PYTHONPATH`: a cached token is then handed out in a
    few milliseconds, where the `colonyctl` console script pays for `site` and every installed
    package's start-up hooks before its first line (see `starter.token_cache`). A miss re-executes
    the full `colonyctl` with `site`.
    """
    # `starter` sits beside `clients` (the same installed tree), so this file's tree is its.
    package_parent = Path(__file__).resolve().parent.parent
    args = ["-S", "-P", "-c", PLUGIN_CODE, "token", "--cluster", cluster]
    if namespace != DEFAULT_NAMESPACE:
        args += ["--namespace", namespace]
    return sys.executable, args, {"PYTHONPATH": str(package_parent)}


def build_kubeconfig(management_kubeconfig: Path, cluster: str, namespace: str) -> dict[str, Any]:
    """A kubeconfig for the cluster without any credential (exec plugin: `colonyctl token`)."""
    server = server_entry(management_kubeconfig, cluster, namespace)
    command, args, plugin_env = token_plugin(cluster, namespace)
    # Where `colonyctl token` finds the management cluster, wherever kubectl runs it from: a path
    # to a kubeconfig, not a credential.
    plugin_env["COLONY_MANAGEMENT_KUBECONFIG"] = str(management_kubeconfig.resolve())
    return kubeconfig_for(cluster, server, exec_user(command, args, plugin_env))


def write_kubeconfig(path: Path, kubeconfig: dict[str, Any]) -> None:
    """Write the kubeconfig owner-readable only, as kubectl does."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        yaml.safe_dump(kubeconfig, out, sort_keys=False)


def _ensure(create: Any, *args: Any) -> None:
    """Create an object; one that exists already is fine (idempotent)."""
    try:
        create(*args)
    except ApiException as exc:
        if exc.status != 409:
            raise


def _issue(child: client.ApiClient) -> tuple[str, datetime]:
    core = client.CoreV1Api(child)
    _ensure(
        core.create_namespaced_service_account,
        SERVICE_ACCOUNT_NAMESPACE,
        {
            "metadata": {
                "name": SERVICE_ACCOUNT,
                "labels": {"app.kubernetes.io/managed-by": "colony"},
            }
        },
    )
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": BINDING, "labels": {"app.kubernetes.io/managed-by": "colony"}},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": SERVICE_ACCOUNT,
                "namespace": SERVICE_ACCOUNT_NAMESPACE,
            }
        ],
    }
    _ensure(client.RbacAuthorizationV1Api(child).create_cluster_role_binding, binding)
    request = client.AuthenticationV1TokenRequest(
        api_version="authentication.k8s.io/v1",
        kind="TokenRequest",
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=TOKEN_SECONDS),
    )
    response = core.create_namespaced_service_account_token(
        SERVICE_ACCOUNT, SERVICE_ACCOUNT_NAMESPACE, request
    )
    status = response.status
    if status is None or not status.token or status.expiration_timestamp is None:
        raise ColonyError("the cluster answered the TokenRequest without a token")
    return status.token, status.expiration_timestamp


def issue_token(
    management_kubeconfig: Path | str,
    cluster: str,
    namespace: str,
    secret_name: str | None = None,
) -> tuple[str, datetime]:
    """A new one-hour token that only this cluster accepts, and when it expires (blocking: the
    API runs it in a thread)."""
    issued = issue(management_kubeconfig, cluster, namespace, secret_name)
    return issued.token, issued.expiry


@dataclass(frozen=True)
class Issued:
    """A token just issued, and the server (and CA) that accepts it."""

    server: dict[str, Any]
    token: str
    expiry: datetime


def issue(
    management_kubeconfig: Path | str,
    cluster: str,
    namespace: str,
    secret_name: str | None = None,
) -> Issued:
    """A new one-hour token with the cluster's server entry, reading its admin kubeconfig once
    (blocking)."""
    admin = _admin_kubeconfig(Path(management_kubeconfig), cluster, namespace, secret_name)
    server = server_of(admin)
    child = api_client_from_dict(admin)
    with _calling(child, f"issue a token for cluster '{cluster}'", f"cluster '{cluster}'"):
        token, expiry = _issue(child)
    return Issued(server, token, expiry)
