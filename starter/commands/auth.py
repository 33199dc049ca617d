"""`colonyctl auth login|logout|status`: remote mode, through Colony's HTTP API with an API key.

After `auth login --url URL --api-key KEY` (the key is checked against the API first, then stored
by `clients.login`, mode 0600), every cluster, node-pool, node, operation and catalog command, and
the exec plugin behind `colonyctl kubeconfig`, goes through the API (`clients`' HTTP transport) with the
same exit codes and messages; `auth logout` forgets the key and returns to Temporal.
Imports beyond Typer happen inside each command (see `starter/commands/__init__.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from starter.commands import Group
from starter.options import OutputFormat, OutputOption

if TYPE_CHECKING:
    from clients.http import RemoteClient

app = typer.Typer(
    help="Log in to Colony's HTTP API with an API key (remote mode), or out.", no_args_is_help=True
)
GROUP = Group("auth", rank=90)


def _whoami(client: RemoteClient) -> dict[str, Any]:
    from starter.session import run

    async def go() -> Any:
        return await client.call("GET", "/v1/api-key")

    answer = run(go)
    return answer if isinstance(answer, dict) else {}


def _describe(url: str, key: dict[str, Any]) -> str:
    permissions = ", ".join(key.get("effectivePermissions") or []) or "none"
    return (
        f"{url}: key {key.get('id', '?')} of organization {key.get('organization', '?')} "
        f"({permissions})"
    )


@app.command("login")
def login(
    url: Annotated[
        str, typer.Option("--url", help="The API, e.g. http://127.0.0.1:8080.", show_default=False)
    ],
    api_key: Annotated[
        str,
        typer.Option(
            "--api-key",
            help="colony_<id>_<secret>, or - to read it from stdin (keeps it out of shell history).",
            show_default=False,
        ),
    ],
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """Check the key against the API and store URL and key (mode 0600): from now on, commands go
    through the API."""
    import os
    import sys

    from clients import login as stored_login
    from clients.errors import InvalidRequestError
    from clients.http import RemoteClient
    from starter import output

    if api_key == "-":
        api_key = sys.stdin.readline().strip()
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise InvalidRequestError(f"url: '{url}' is not an http:// or https:// URL")
    if not api_key:
        raise InvalidRequestError("apiKey: empty")
    key = _whoami(RemoteClient(url, api_key))
    path = stored_login.write_login(os.environ, url, api_key)
    if not output.emit({"url": url, "file": path, "key": key}, fmt):
        output.write(f"logged in to {_describe(url, key)}")
        output.info(f"stored in {path}; `colonyctl auth logout` returns to Temporal")


@app.command("logout")
def logout() -> None:
    """Forget the stored key: commands talk to Temporal directly again."""
    import os

    from clients import login as stored_login
    from starter import output

    if stored_login.remove_login(os.environ):
        output.write("logged out")
    else:
        output.write("not logged in")


@app.command("status")
def status(fmt: OutputOption = OutputFormat.TABLE) -> None:
    """Where commands go: the API (and as which key), or Temporal."""
    import os

    from clients import login as stored_login
    from clients.http import RemoteClient
    from starter import output

    stored = stored_login.read_login(os.environ)
    if stored is None:
        from starter.session import settings

        address = settings().temporal_address
        if not output.emit({"mode": "temporal", "temporal": address}, fmt):
            output.write(f"not logged in: commands talk to Temporal at {address}")
        return
    url, key = stored
    answer = _whoami(RemoteClient(url, key))
    if not output.emit({"mode": "api", "url": url, "key": answer}, fmt):
        output.write(f"logged in to {_describe(url, answer)}")
