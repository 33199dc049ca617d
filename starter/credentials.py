"""`colonyctl kubeconfig` and `colonyctl token`: the documented exception where the CLI talks to
Kubernetes itself.

The kubeconfig it writes holds no credential: the child cluster's server and CA, and an `exec`
user that runs `colonyctl token`, which asks the child for a one-hour ServiceAccount token
(TokenRequest) of `colony-admin`, bound to cluster-admin. The child's admin kubeconfig is read from
the `<name>-kubeconfig` Secret on the management cluster and used only in this process; neither it
nor the tokens ever pass through a workflow.
"""

from __future__ import annotations

import base64
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from activities.kube import api_client_from_dict, api_client_from_file, close_client
from activities.settings import ColonySettings
from models.cluster import DEFAULT_NAMESPACE, kubeconfig_secret_name
from starter.clusters import CliError, ExitCode

SERVICE_ACCOUNT = "colony-admin"
SERVICE_ACCOUNT_NAMESPACE = "kube-system"
BINDING = "colony-admin"
TOKEN_SECONDS = 3600
"""One hour: what the product promises ("a cluster token ... which expires after one hour")."""
EXEC_API_VERSION = "client.authentication.k8s.io/v1"


def _admin_kubeconfig(settings: ColonySettings, cluster: str, namespace: str) -> dict[str, Any]:
    """The child's admin kubeconfig from its Secret (kept in memory only)."""
    management = api_client_from_file(settings.require_management_kubeconfig())
    try:
        secret = client.CoreV1Api(management).read_namespaced_secret(
            kubeconfig_secret_name(cluster), namespace
        )
    except ApiException as exc:
        if exc.status == 404:
            raise CliError(
                f"cluster: cluster '{cluster}' has no kubeconfig (not found, or not ready yet)",
                ExitCode.NOT_FOUND,
            ) from exc
        raise CliError(f"cannot read the kubeconfig of cluster '{cluster}': {exc.reason}") from exc
    finally:
        close_client(management)
    value = (secret.data or {}).get("value")
    if not value:
        raise CliError(f"the kubeconfig Secret of cluster '{cluster}' is empty")
    loaded = yaml.safe_load(base64.b64decode(value))
    if not isinstance(loaded, dict):
        raise CliError(f"the kubeconfig Secret of cluster '{cluster}' holds no kubeconfig")
    return loaded


def _current_cluster(kubeconfig: dict[str, Any]) -> dict[str, Any]:
    """The `cluster` entry of the kubeconfig's current context."""
    contexts = {c["name"]: c.get("context") or {} for c in kubeconfig.get("contexts") or []}
    clusters = {c["name"]: c.get("cluster") or {} for c in kubeconfig.get("clusters") or []}
    context = contexts.get(kubeconfig.get("current-context", ""), {})
    entry = clusters.get(context.get("cluster", "")) or next(iter(clusters.values()), None)
    if not entry:
        raise CliError("the cluster's kubeconfig names no cluster")
    return dict(entry)


def colonyctl_command() -> tuple[str, list[str]]:
    """How kubectl should run `colonyctl`: its absolute path, or this Python with `-m starter.cli`."""
    argv0 = Path(sys.argv[0])
    if argv0.name == "colonyctl" and argv0.exists():
        return str(argv0.resolve()), []
    beside = Path(sys.executable).parent / "colonyctl"
    if beside.exists():
        return str(beside), []
    found = shutil.which("colonyctl")
    if found:
        return str(Path(found).resolve()), []
    return sys.executable, ["-m", "starter.cli"]


def build_kubeconfig(settings: ColonySettings, cluster: str, namespace: str) -> dict[str, Any]:
    """A kubeconfig for the cluster without any credential (exec plugin: `colonyctl token`)."""
    entry = _current_cluster(_admin_kubeconfig(settings, cluster, namespace))
    ca_data = entry.get("certificate-authority-data")
    if not ca_data and entry.get("certificate-authority"):
        ca_data = base64.b64encode(Path(entry["certificate-authority"]).read_bytes()).decode()
    cluster_entry: dict[str, Any] = {"server": entry["server"]}
    if ca_data:
        cluster_entry["certificate-authority-data"] = ca_data
    command, prefix = colonyctl_command()
    args = [*prefix, "token", "--cluster", cluster]
    if namespace != DEFAULT_NAMESPACE:
        args += ["--namespace", namespace]
    # Where `colonyctl token` finds the management cluster, wherever kubectl runs it from: a path
    # to a kubeconfig, not a credential.
    env = [
        {
            "name": "COLONY_MANAGEMENT_KUBECONFIG",
            "value": str(settings.management_kubeconfig.resolve()),
        }
    ]
    user = f"colony-{cluster}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": cluster_entry}],
        "users": [
            {
                "name": user,
                "user": {
                    "exec": {
                        "apiVersion": EXEC_API_VERSION,
                        "command": command,
                        "args": args,
                        "env": env,
                        "interactiveMode": "Never",
                        "provideClusterInfo": False,
                    }
                },
            }
        ],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
        "current-context": cluster,
        "preferences": {},
    }


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


def _issue_token(child: client.ApiClient) -> dict[str, Any]:
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
        raise CliError("the cluster answered the TokenRequest without a token")
    return {
        "apiVersion": EXEC_API_VERSION,
        "kind": "ExecCredential",
        "status": {
            "token": status.token,
            "expirationTimestamp": status.expiration_timestamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    }


def exec_credential(settings: ColonySettings, cluster: str, namespace: str) -> dict[str, Any]:
    """An ExecCredential with a one-hour token that only this cluster accepts."""
    child = api_client_from_dict(_admin_kubeconfig(settings, cluster, namespace))
    try:
        return _issue_token(child)
    except ApiException as exc:
        raise CliError(
            f"cannot issue a token for cluster '{cluster}': {exc.status} {exc.reason}"
        ) from exc
    finally:
        close_client(child)
