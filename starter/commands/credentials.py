"""`colonyctl kubeconfig` and `colonyctl token`: credentials for kubectl.

`token` usually never gets here: `starter.cli` answers a plain `token --cluster C` through
`starter.token_cache` before the command line is built (kubectl runs it before every command).
This declaration is for `--help` and for the calls that path leaves to the parser.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

DEFAULT_NAMESPACE = "kcm-system"
"""k0rdent's namespace (`models.cluster.DEFAULT_NAMESPACE`; a test keeps them equal)."""


def kubeconfig(
    cluster: Annotated[str, typer.Option("--cluster", help="Cluster name.", show_default=False)],
    path: Annotated[
        Path, typer.Option("--output", help="Where to write the kubeconfig.", show_default=False)
    ],
    namespace: Annotated[str, typer.Option(hidden=True)] = DEFAULT_NAMESPACE,
) -> None:
    """Write a kubeconfig without credentials: kubectl runs `colonyctl token` for a token."""
    import os

    from starter import credentials, output, token_cache

    management = Path(token_cache.management_kubeconfig(os.environ))
    credentials.write_kubeconfig(path, credentials.build_kubeconfig(management, cluster, namespace))
    output.write(
        f"wrote {path} (kubectl runs `colonyctl token --cluster {cluster}` for credentials)"
    )


def token(
    cluster: Annotated[str, typer.Option("--cluster", help="Cluster name.", show_default=False)],
    namespace: Annotated[str, typer.Option(hidden=True)] = DEFAULT_NAMESPACE,
) -> None:
    """Print a client.authentication.k8s.io/v1 ExecCredential: a one-hour cluster-admin token,
    cached until 5 minutes before it expires."""
    import os

    from starter import output, token_cache

    output.write(token_cache.credential(os.environ, cluster, namespace))
