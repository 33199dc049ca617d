"""`colonyctl quota get|set`: an organization's quotas (hosts, GPUs, clusters, workspaces, its
share of a location's hosts of a SKU) and what it uses of each.

In direct mode (Temporal: the operator's tool) any organization's, named with `--organization`;
through the API, `get` without `--organization` is the key's own organization's, and naming one
(or `set`) needs a key with Quota Manage. `set` changes only the quotas it names; `default` gives
one back to the default (`COLONY_QUOTA_*`). The same refusals as every other command: exit 2 for a
refused request, 1 for what could not be reached.
Imports beyond Typer happen inside each command (see `starter/commands/__init__.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from starter.commands import Group
from starter.options import OutputFormat, OutputOption

if TYPE_CHECKING:
    from models.quota import OrganizationQuota

app = typer.Typer(
    help="Organizations' quotas: hosts, GPUs, clusters, workspaces, a location's share.",
    no_args_is_help=True,
)
GROUP = Group("quota", rank=95)


def _print(quota: OrganizationQuota) -> None:
    from starter import output

    limits, overrides, usage = quota.limits, quota.overrides, quota.usage
    rows: list[tuple[object, ...]] = []
    for name, used in (
        ("hosts", usage.hosts),
        ("gpus", usage.gpus),
        ("clusters", usage.clusters),
        ("workspaces", usage.workspaces),
    ):
        set_by = "operator" if getattr(overrides, name) is not None else "default"
        rows.append((name, used, getattr(limits, name), set_by))
    share = limits.location_share
    shown = "operator" if overrides.location_share is not None else "default"
    rows.append(("locationShare", "-", f"{share:g}" if share is not None else "-", shown))
    output.print_table(
        ("QUOTA", "USED", "LIMIT", "SET BY"), rows, title=f"organization {quota.organization}"
    )
    if quota.locations:
        from models.quota import share_limit

        output.write()
        output.print_table(
            ("LOCATION", "SKU", "HOSTS", "OF", "AT MOST"),
            [
                (
                    use.location_id,
                    use.sku,
                    use.hosts,
                    use.stock if use.stock is not None else "-",
                    share_limit(use.stock, share)
                    if use.stock is not None and share is not None
                    else "-",
                )
                for use in quota.locations
            ],
        )


@app.command("get")
def get(
    organization: Annotated[
        str,
        typer.Option(
            "--organization",
            help="Whose quotas (direct mode: required; through the API: default the key's own, "
            "another's needs Quota Manage).",
        ),
    ] = "",
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """An organization's quotas in force (who set each), what it uses of each, and its hosts per
    location and SKU against its share of the location's stock."""
    from starter.backend import quotas
    from starter.session import show

    client = quotas()
    show(lambda: client.get(organization), fmt, _print)


@app.command("set")
def set_(
    organization: Annotated[
        str, typer.Option("--organization", help="Whose quotas to set.", show_default=False)
    ],
    hosts: Annotated[
        str | None,
        typer.Option("--hosts", help="Hosts in all.", show_default=False, metavar="N|default"),
    ] = None,
    gpus: Annotated[
        str | None,
        typer.Option("--gpus", help="GPUs in all.", show_default=False, metavar="N|default"),
    ] = None,
    clusters: Annotated[
        str | None,
        typer.Option("--clusters", help="Clusters.", show_default=False, metavar="N|default"),
    ] = None,
    workspaces: Annotated[
        str | None,
        typer.Option("--workspaces", help="Workspaces.", show_default=False, metavar="N|default"),
    ] = None,
    location_share: Annotated[
        str | None,
        typer.Option(
            "--location-share",
            help="Share of a location's hosts of one SKU, above 0 and at most 1.",
            show_default=False,
            metavar="X|default",
        ),
    ] = None,
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """Set an organization's quotas (only those named; `default` gives one back to the
    default). Admissions from then on count against them; what is held already stays."""
    from clients.errors import InvalidRequestError
    from clients.parsing import validated
    from models.quota import QuotaLimits
    from starter.backend import quotas
    from starter.session import show

    given = {
        "hosts": hosts,
        "gpus": gpus,
        "clusters": clusters,
        "workspaces": workspaces,
        "locationShare": location_share,
    }
    values: dict[str, float] = {}
    reset: list[str] = []
    for key, text in given.items():
        if text is None:
            continue
        field = next(
            name for name, info in QuotaLimits.model_fields.items() if (info.alias or name) == key
        )
        if text.strip().lower() == "default":
            reset.append(field)
            continue
        try:
            values[key] = float(text) if key == "locationShare" else int(text)
        except ValueError:
            kind = "a number above 0, at most 1" if key == "locationShare" else "a whole number"
            raise InvalidRequestError(f"{key}: '{text}' is not {kind} (or 'default')") from None
    if not values and not reset:
        raise InvalidRequestError(
            "quota: name at least one of --hosts, --gpus, --clusters, --workspaces, "
            "--location-share"
        )
    limits = validated(QuotaLimits, values)
    client = quotas()
    show(lambda: client.set(organization, limits, reset), fmt, _print)
