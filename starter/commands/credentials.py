"""`colonyctl kubeconfig` and `colonyctl token`: credentials for kubectl, from the management
cluster or, in remote mode (`colonyctl auth login`), from Colony's HTTP API.

`token` usually never gets here: `starter.cli` answers a plain `token --cluster C` through
`starter.token_cache` before the command line is built (kubectl runs it before every command).
This declaration is for `--help` and for the calls that path leaves to the parser.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

DEFAULT_NAMESPACE = "kcm-system"
"""k0rdent's namespace (`models.cluster.DEFAULT_NAMESPACE`; a test keeps them equal)."""


def kubeconfig(
    path: Annotated[
        Path, typer.Option("--output", help="Where to write the kubeconfig.", show_default=False)
    ],
    cluster_argument: Annotated[
        str | None, typer.Argument(metavar="CLUSTER", help="Cluster name.", show_default=False)
    ] = None,
    cluster_option: Annotated[
        str | None, typer.Option("--cluster", hidden=True, show_default=False)
    ] = None,
    namespace: Annotated[str, typer.Option(hidden=True)] = DEFAULT_NAMESPACE,
) -> None:
    """Write a kubeconfig without credentials: kubectl runs `colonyctl token` for a token."""
    import os

    from clients import credentials
    from starter import output, token_cache
    from starter.backend import remote

    cluster = _one_cluster(cluster_argument, cluster_option)

    if remote():
        credentials.write_kubeconfig(path, _remote_kubeconfig(cluster, namespace))
    else:
        management = Path(token_cache.management_kubeconfig(os.environ))
        credentials.write_kubeconfig(
            path, credentials.build_kubeconfig(management, cluster, namespace)
        )
    output.write(
        f"wrote {path} (kubectl runs `colonyctl token --cluster {cluster}` for credentials)"
    )


def _one_cluster(argument: str | None, option: str | None) -> str:
    """The cluster, as every command takes it (an argument); `--cluster`, this command's former
    spelling, still works (scripts and kubeconfigs written with it)."""
    from clients.errors import InvalidRequestError

    if argument and option and argument != option:
        raise InvalidRequestError(
            f"cluster: given twice, as '{argument}' and '{option}' (give CLUSTER once)"
        )
    cluster = argument or option
    if not cluster:
        raise InvalidRequestError("cluster: required (CLUSTER)")
    return cluster


def _remote_kubeconfig(cluster: str, namespace: str) -> dict[str, Any]:
    """The kubeconfig of remote mode: the server and CA from the API's kubeconfig, and the exec
    plugin (its token, issued for this call, is dropped: kubectl asks the plugin, which asks the
    API and caches)."""
    import os

    from clients import credentials, login
    from clients.clusters import HttpClusters
    from clients.http import RemoteClient
    from starter.session import run, settings

    settings()
    through_api = HttpClusters(RemoteClient.of_login())
    server = credentials.server_of(run(lambda: through_api.kubeconfig(cluster)))
    command, args, env = credentials.token_plugin(cluster, namespace)
    # Where the plugin finds the login, wherever kubectl runs it from: a directory, not the key.
    env[login.CONFIG_DIR_ENV] = os.path.abspath(login.config_dir(os.environ))
    return credentials.kubeconfig_for(cluster, server, credentials.exec_user(command, args, env))


def token(
    cluster: Annotated[str, typer.Option("--cluster", help="Cluster name.", show_default=False)],
    namespace: Annotated[str, typer.Option(hidden=True)] = DEFAULT_NAMESPACE,
) -> None:
    """Print a client.authentication.k8s.io/v1 ExecCredential: a one-hour cluster-admin token,
    cached until 5 minutes before it expires."""
    import os

    from starter import output, token_cache

    output.write(token_cache.credential(os.environ, cluster, namespace))
