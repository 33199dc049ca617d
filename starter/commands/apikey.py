"""`colonyctl apikey create|list|revoke`: the HTTP API's keys, operator side.

Keys live as Secrets on the management cluster (`infra.keys.KubernetesKeyStore`), so these commands
need its kubeconfig (COLONY_MANAGEMENT_KUBECONFIG), never the API: they are how the first key of
an organization comes to be. A key is printed once, when created; only its hash is stored. The
store's errors become the command line's here, once: a refused request exits 2, a store that
cannot be reached 1.
Imports beyond Typer happen inside each command (see `starter/commands/__init__.py`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from starter.commands import Group
from starter.options import OutputFormat, OutputOption

if TYPE_CHECKING:
    from infra.keys import ApiKey, KubernetesKeyStore

app = typer.Typer(
    help="API keys of Colony's HTTP API (operator side: needs the management cluster).",
    no_args_is_help=True,
)
GROUP = Group("apikey", rank=100)

T = TypeVar("T")

PERMISSIONS_HELP = (
    "Repeatable: read (kubernetes:read), connect (kubernetes:connect), manage "
    "(kubernetes:manage), catalog_publish (catalog:publish: publish classes to the catalog "
    "every organization shares, an operator's), quota_manage (quota:manage: read and set any "
    "organization's quotas, an operator's), purge (operator:purge: end any organization's "
    "cluster or workspace whose workflow cannot make progress, an operator's), or the legacy "
    "clusters:read / clusters:write."
)


def _with_store(step: Callable[[KubernetesKeyStore], Awaitable[T]]) -> T:
    """Run `step` with the key store on the management cluster, and close its client after."""
    from clients.errors import InvalidRequestError, UnavailableError
    from infra.config import SettingsError
    from infra.keys import KeyRequestError, KeyStoreUnavailableError, KubernetesKeyStore
    from infra.kube import api_client_from_file, close_client
    from infra.settings import ApiSettings
    from starter.session import run, settings

    conf = settings()
    try:
        namespace = ApiSettings.from_env().namespace
        kubeconfig = conf.require_management_kubeconfig()
    except SettingsError as exc:
        raise InvalidRequestError(str(exc)) from exc

    async def go() -> T:
        management = api_client_from_file(kubeconfig)
        store = KubernetesKeyStore(management, namespace)
        try:
            return await step(store)
        except KeyRequestError as exc:
            raise InvalidRequestError(exc.message) from exc
        except KeyStoreUnavailableError as exc:
            raise UnavailableError(exc.message) from exc
        finally:
            await store.close()
            close_client(management)

    return run(go)


def _row(key: ApiKey) -> tuple[str, ...]:
    from starter.output import timestamp

    return (
        key.id,
        key.organization,
        ",".join(key.permissions),
        key.name or "-",
        timestamp(key.created_at),
        timestamp(key.last_used_at),
        timestamp(key.expires_at) if key.expires_at else "never",
    )


COLUMNS = ("ID", "ORGANIZATION", "PERMISSIONS", "NAME", "CREATED", "LAST USED", "EXPIRES")


@app.command("create")
def create(
    organization: Annotated[
        str, typer.Option("--organization", help="The organization the key acts for.")
    ],
    permission: Annotated[list[str], typer.Option("--permission", help=PERMISSIONS_HELP)],
    name: Annotated[str, typer.Option("--name", help="What the key is for (shown in list).")] = "",
    expires_in: Annotated[
        str | None, typer.Option("--expires-in", help="e.g. 30d, 12h; default: never.")
    ] = None,
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """Create a key and print it, once: it is stored only as a salted hash."""
    from datetime import UTC, datetime

    from clients.parsing import duration
    from starter import output

    expires_at = datetime.now(UTC) + duration(expires_in, "expiresIn") if expires_in else None

    async def go(store: KubernetesKeyStore) -> tuple[ApiKey, str]:
        return await store.create(organization, permission, name=name, expires_at=expires_at)

    record, key = _with_store(go)
    data = {**record.model_dump(mode="json", by_alias=True), "key": key}
    if output.emit(data, fmt):
        return
    output.write(key)
    output.info(
        f"API key {record.id} of organization {record.organization} "
        f"({', '.join(record.permissions)}): shown once, store it now"
    )


@app.command("list")
def list_(
    organization: Annotated[
        str | None, typer.Option("--organization", help="Only this organization's keys.")
    ] = None,
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """Every key (never a secret): organization, permissions, creation, last use, expiry."""
    from starter import output

    async def go(store: KubernetesKeyStore) -> list[ApiKey]:
        return await store.list_keys(organization)

    keys = _with_store(go)
    if not output.emit(keys, fmt):
        output.print_table(COLUMNS, [_row(key) for key in keys])


@app.command("revoke")
def revoke(
    key_id: Annotated[
        str, typer.Argument(help="The key's id (colony_<id>_...).", show_default=False)
    ],
) -> None:
    """Revoke a key: refused from then on (at most COLONY_API_KEY_CACHE_SECONDS later by an API
    that verified it just before). Exit 3 when there is no such key."""
    from clients.errors import NotFoundError
    from starter import output

    async def go(store: KubernetesKeyStore) -> bool:
        return await store.revoke(key_id)

    if not _with_store(go):
        raise NotFoundError(f"apikey: no API key '{key_id}'")
    output.write(f"API key {key_id} revoked")
