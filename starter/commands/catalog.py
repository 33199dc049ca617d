"""`colonyctl catalog`: the host provider's locations (with what each stocks and has free now),
GPU models and CPU SKUs. Read-only.

Imports beyond Typer happen inside each command (see `starter/commands/__init__.py`).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from starter.commands import Group
from starter.options import OutputFormat, OutputOption

app = typer.Typer(help="The host provider's catalog (read-only).", no_args_is_help=True)
GROUP = Group("catalog", rank=80)
location_app = typer.Typer(
    help="Locations (data centers), with the hosts each stocks and has free now.",
    no_args_is_help=True,
)
gpu_model_app = typer.Typer(
    help="GPU models (a GPU node is a whole host of one model).", no_args_is_help=True
)
cpu_sku_app = typer.Typer(help="Whole-host CPU SKUs.", no_args_is_help=True)
app.add_typer(location_app, name="location")
app.add_typer(gpu_model_app, name="gpu-model")
app.add_typer(cpu_sku_app, name="cpu-sku")


@location_app.command("list")
def location_list(fmt: OutputOption = OutputFormat.TABLE) -> None:
    """Every location, with the GPU models and CPU SKUs it stocks (free/total hosts)."""
    from starter import output
    from starter.backend import catalog
    from starter.session import show

    provider = catalog()
    show(lambda: provider.stock(), fmt, output.print_locations)


@location_app.command("get")
def location_get(
    location: Annotated[str, typer.Argument(help="Location id (fra1).", show_default=False)],
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """One location: each SKU it stocks, and how many hosts of it are free now."""
    from starter import output
    from starter.backend import catalog
    from starter.session import show

    provider = catalog()
    show(lambda: provider.location_stock(location), fmt, output.print_location)


def _list(kind: str, columns: list[str], fmt: OutputFormat) -> None:
    from starter import output
    from starter.backend import catalog
    from starter.session import show

    def print_items(items: list[dict[str, Any]]) -> None:
        output.print_table(
            [c.upper() for c in columns], [[item.get(c, "") for c in columns] for item in items]
        )

    provider = catalog()
    show(lambda: provider.fetch(kind), fmt, print_items)


@gpu_model_app.command("list")
def gpu_model_list(fmt: OutputOption = OutputFormat.TABLE) -> None:
    """GPU models (a GPU node is a whole host of one model)."""
    _list("gpu-model", ["id", "name", "product", "memoryGib", "gpusPerHost"], fmt)


@cpu_sku_app.command("list")
def cpu_sku_list(fmt: OutputOption = OutputFormat.TABLE) -> None:
    """Whole-host CPU SKUs."""
    _list("cpu-sku", ["id", "name", "cpuCores", "memory"], fmt)
