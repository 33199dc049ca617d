"""`colonyctl catalog`: the host provider's locations (with what each stocks and has free now),
GPU models and CPU SKUs. Read-only.

Imports beyond Typer happen inside each command (see `starter/commands/__init__.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from starter.commands import Group
from starter.options import OutputFormat, OutputOption

if TYPE_CHECKING:
    from models.catalog import LocationStock, SkuKind

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


def _stock_cell(stock: LocationStock, kind: SkuKind) -> str:
    """`h100-80gb 6/8 free, a100-80gb 6/6 free`: free/total per SKU of one kind."""
    return ", ".join(f"{s.id} {s.free}/{s.total}" for s in stock.of_kind(kind)) or "-"


@location_app.command("list")
def location_list(fmt: OutputOption = OutputFormat.TABLE) -> None:
    """Every location, with the GPU models and CPU SKUs it stocks (free/total hosts)."""
    from models.catalog import SkuKind
    from starter import output
    from starter.backend import catalog
    from starter.session import run

    provider = catalog()
    locations = run(lambda: provider.stock())
    if not output.emit(locations, fmt):
        output.print_table(
            ["ID", "NAME", "COUNTRY", "GPU (FREE/TOTAL)", "CPU (FREE/TOTAL)"],
            [
                (
                    s.id,
                    s.name,
                    s.country,
                    _stock_cell(s, SkuKind.GPU),
                    _stock_cell(s, SkuKind.CPU),
                )
                for s in locations
            ],
        )


@location_app.command("get")
def location_get(
    location: Annotated[str, typer.Argument(help="Location id (fra1).", show_default=False)],
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """One location: each SKU it stocks, and how many hosts of it are free now."""
    from starter import output
    from starter.backend import catalog
    from starter.session import run

    provider = catalog()
    stock = run(lambda: provider.location_stock(location))
    if output.emit(stock, fmt):
        return
    output.write(f"location {stock.id}  {stock.name}  {stock.country}")
    output.write()
    output.print_table(
        ["KIND", "SKU", "FREE", "TOTAL"],
        [(s.kind.value, s.id, s.free, s.total) for s in stock.skus],
    )


def _list(kind: str, columns: list[str], fmt: OutputFormat) -> None:
    from starter import output
    from starter.backend import catalog
    from starter.session import run

    provider = catalog()
    items = run(lambda: provider.fetch(kind))
    if not output.emit(items, fmt):
        output.print_table(
            [c.upper() for c in columns], [[item.get(c, "") for c in columns] for item in items]
        )


@gpu_model_app.command("list")
def gpu_model_list(fmt: OutputOption = OutputFormat.TABLE) -> None:
    """GPU models (a GPU node is a whole host of one model)."""
    _list("gpu-model", ["id", "name", "product", "memoryGib", "gpusPerHost"], fmt)


@cpu_sku_app.command("list")
def cpu_sku_list(fmt: OutputOption = OutputFormat.TABLE) -> None:
    """Whole-host CPU SKUs."""
    _list("cpu-sku", ["id", "name", "cpuCores", "memory"], fmt)
