"""What each location stocks (hosts per SKU, free now), and the checks that refuse, before anything
starts, a SKU a location does not stock or has too few free hosts of (issue 10); advice to wait for
capacity only where waiting can help: never for more hosts than the location has in all (issue 16).

Stock is computed from the host provider's `GET /v1/hosts`; the CLI tests run against the sim's
host provider only (Temporal points nowhere: a request that passes the checks fails to connect,
exit 1, which shows that the checks let it through).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from clients.provider import stock_of
from models.advice import for_command_line, set_option
from models.catalog import LocationStock, SkuKind, SkuStock, stock_problem
from models.node_pool import NodeSku
from sim.world import SimWorld
from starter.cli import app, normalize_argv
from tests.helpers import unique
from tests.simenv import colony_env, started_world

FRA1 = LocationStock(
    id="fra1",
    skus=[
        SkuStock(kind=SkuKind.GPU, id="h100-80gb", total=8, free=3),
        SkuStock(kind=SkuKind.CPU, id="cpu-32c-256g", total=6, free=6),
    ],
)


def host(
    location: str, state: str, gpu: str | None = None, cpu: str | None = None
) -> dict[str, Any]:
    return {"location": location, "state": state, "gpuModelId": gpu, "cpuSku": cpu}


def test_stock_counts_hosts_per_sku_of_the_location_only() -> None:
    hosts = [
        host("fra1", "free", gpu="h100-80gb"),
        host("fra1", "claimed", gpu="h100-80gb"),
        host("fra1", "free", cpu="cpu-32c-256g"),
        host("hel1", "free", gpu="h100-80gb"),
        host("fra1", "free", gpu="a100-80gb"),
    ]
    stock = stock_of({"id": "fra1", "name": "Frankfurt 1", "country": "DE"}, hosts)
    assert [(s.kind.value, s.id, s.free, s.total) for s in stock.skus] == [
        ("gpu", "a100-80gb", 1, 1),
        ("gpu", "h100-80gb", 1, 2),
        ("cpu", "cpu-32c-256g", 1, 1),
    ]


H100 = NodeSku(gpu_model_id="h100-80gb")
SHORT = "4 more host(s) of h100-80gb needed in fra1, 3 free now (of 8)"


@pytest.mark.parametrize(
    ("sku", "asked", "others", "wait", "problem"),
    [
        pytest.param(H100, 3, 0, False, None, id="enough"),
        pytest.param(
            H100,
            4,
            0,
            False,
            ("count", f"{SHORT}; set waitForCapacity to true to queue and wait for them"),
            id="short-now-waiting-helps",
        ),
        pytest.param(H100, 4, 0, True, None, id="short-but-waits"),
        pytest.param(
            H100,
            4,
            0,
            None,
            ("count", f"{SHORT}; apply it again once enough are free"),
            id="short-and-cannot-wait",
        ),
        pytest.param(
            H100,
            50,
            0,
            True,
            ("count", "50 hosts of h100-80gb asked, location fra1 has 8 in all; ask for at most 8"),
            id="more-than-in-all-even-waiting",
        ),
        pytest.param(
            H100,
            50,
            0,
            False,
            ("count", "50 hosts of h100-80gb asked, location fra1 has 8 in all; ask for at most 8"),
            id="more-than-in-all-no-wait-advice",
        ),
        pytest.param(
            H100,
            4,
            6,
            True,
            (
                "count",
                "10 hosts of h100-80gb asked (4 by this pool, 6 by the cluster's other pools of "
                "it), location fra1 has 8 in all; ask for at most 2",
            ),
            id="with-the-clusters-other-pools",
        ),
        pytest.param(
            H100,
            1,
            8,
            True,
            (
                "count",
                "9 hosts of h100-80gb asked (1 by this pool, 8 by the cluster's other pools of "
                "it), location fra1 has 8 in all; the cluster's other pools have them all",
            ),
            id="other-pools-have-them-all",
        ),
        pytest.param(
            NodeSku(gpu_model_id="l40s-48gb"),
            1,
            0,
            True,
            (
                "sku.gpuModelId",
                "location 'fra1' does not stock GPU model 'l40s-48gb' "
                "(it stocks: h100-80gb, cpu-32c-256g)",
            ),
            id="not-stocked-waiting-cannot-help",
        ),
        pytest.param(
            NodeSku(cpu_sku="h100-80gb"),
            1,
            0,
            False,
            (
                "sku.cpuSku",
                "location 'fra1' does not stock CPU SKU 'h100-80gb' "
                "(it stocks: h100-80gb, cpu-32c-256g)",
            ),
            id="kind-matters",
        ),
    ],
)
def test_stock_problem(
    sku: NodeSku, asked: int, others: int, wait: bool | None, problem: tuple[str, str] | None
) -> None:
    assert (
        stock_problem(FRA1, sku, asked=asked, more=asked, others=others, wait_for_capacity=wait)
        == problem
    )


def test_advice_is_in_the_api_words_and_the_command_line_renders_its_flag() -> None:
    problem = stock_problem(FRA1, H100, asked=4, more=4, wait_for_capacity=False)
    assert problem is not None
    assert for_command_line(problem[1]) == (
        f"{SHORT}; add --wait-for-capacity to queue and wait for them"
    )
    assert for_command_line("scaling ...; or set force to true (they go back ...)") == (
        "scaling ...; or add --force (they go back ...)"
    )
    with pytest.raises(ValueError, match="no flag renders option 'drain'"):
        set_option("drain")


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SimWorld]:
    async with started_world(tmp_path_factory.mktemp("sim")) as world:
        yield world


async def ctl(world: SimWorld, *args: str) -> Result:
    env = colony_env(world, TEMPORAL_ADDRESS="127.0.0.1:1")
    return await asyncio.to_thread(CliRunner().invoke, app, normalize_argv(args), env=env)


async def test_location_list_and_get_show_stock(world: SimWorld) -> None:
    claimed = world.inventory.claim("stock-test", "fra1", _sku("h100-80gb"), 2, "someone")
    assert claimed
    try:
        listed = await ctl(world, "catalog", "location", "list", "-o", "json")
        assert listed.exit_code == 0, listed.stderr
        fra1 = next(loc for loc in json.loads(listed.stdout) if loc["id"] == "fra1")
        h100 = next(s for s in fra1["skus"] if s["id"] == "h100-80gb")
        assert (h100["kind"], h100["free"], h100["total"]) == ("gpu", 6, 8)

        table = await ctl(world, "catalog", "location", "list")
        row = next(line for line in table.stdout.splitlines() if line.startswith("fra1"))
        assert "h100-80gb 6/8" in row
        assert "cpu-64c-512g 4/4" in row

        got = await ctl(world, "catalog", "location", "get", "fra1")
        assert got.exit_code == 0, got.stderr
        lines = got.stdout.splitlines()
        assert lines[0] == "location fra1  Frankfurt 1  DE"
        assert lines[2].split() == ["KIND", "SKU", "FREE", "TOTAL"]
        assert ["gpu", "h100-80gb", "6", "8"] in [line.split() for line in lines[3:]]
    finally:
        world.inventory.release_claim("stock-test")
    missing = await ctl(world, "catalog", "location", "get", "mars1")
    assert missing.exit_code == 3
    assert missing.stderr.startswith("error: location: unknown location 'mars1' (catalog: ")


def _sku(gpu: str) -> Any:
    from sim.hostprovider.inventory import Sku

    return Sku(gpu_model_id=gpu)


@pytest.mark.parametrize(
    ("args", "code", "line"),
    [
        pytest.param(
            ("--location-id", "ber1", "--node-pool", "name=gpu,count=1,gpuModelId=h100-80gb"),
            2,
            "error: nodePools[0].sku.gpuModelId: location 'ber1' does not stock GPU model "
            "'h100-80gb' (it stocks: a100-80gb, cpu-64c-512g)",
            id="not-stocked",
        ),
        pytest.param(
            ("--location-id", "fra1", "--node-pool", "name=huge,count=13,gpuModelId=h100-80gb"),
            2,
            "error: nodePools[0].count: 13 hosts of h100-80gb asked, location fra1 has 8 in all; "
            "ask for at most 8",
            id="more-than-in-all",
        ),
        pytest.param(
            (
                "--location-id", "fra1", "--wait-for-capacity",
                "--node-pool", "name=huge,count=13,gpuModelId=h100-80gb",
            ),
            2,
            "error: nodePools[0].count: 13 hosts of h100-80gb asked, location fra1 has 8 in all; "
            "ask for at most 8",
            id="more-than-in-all-even-waiting",
        ),
        pytest.param(
            (
                "--location-id", "fra1",
                "--node-pool", "name=cpu,count=1,cpuSku=cpu-32c-256g",
                "--node-pool", "name=a,count=5,gpuModelId=h100-80gb",
                "--node-pool", "name=b,count=5,gpuModelId=h100-80gb",
            ),
            2,
            "error: nodePools[1].count: 10 hosts of h100-80gb asked (5 by this pool, 5 by the "
            "cluster's other pools of it), location fra1 has 8 in all; ask for at most 3",
            id="pools-of-one-sku-add-up",
        ),
        pytest.param(
            ("--location-id", "fra1", "--node-pool", "name=gpu,count=7,gpuModelId=h100-80gb"),
            2,
            "error: nodePools[0].count: 7 more host(s) of h100-80gb needed in fra1, 6 free now "
            "(of 8); add --wait-for-capacity to queue and wait for them",
            id="short-now",
        ),
        pytest.param(
            (
                "--location-id", "fra1", "--wait-for-capacity",
                "--node-pool", "name=gpu,count=7,gpuModelId=h100-80gb",
            ),
            1,
            "error: temporal: cannot reach 127.0.0.1:1",
            id="short-now-but-waits",
        ),
        pytest.param(
            (
                "--location-id", "ber1", "--wait-for-capacity",
                "--node-pool", "name=gpu,count=1,gpuModelId=h100-80gb",
            ),
            2,
            "error: nodePools[0].sku.gpuModelId: location 'ber1' does not stock GPU model "
            "'h100-80gb' (it stocks: a100-80gb, cpu-64c-512g)",
            id="not-stocked-even-waiting",
        ),
    ],
)  # fmt: skip
async def test_cluster_create_is_refused_what_the_location_cannot_serve(
    world: SimWorld, args: tuple[str, ...], code: int, line: str
) -> None:
    # Two of fra1's eight H100 hosts are someone else's: six are free.
    hold = unique("someone-else")  # a claim's key is idempotent: a new one per case
    world.inventory.claim(hold, "fra1", _sku("h100-80gb"), 2, "someone")
    try:
        result = await ctl(world, "cluster", "create", "stocked", *args)
    finally:
        world.inventory.release_claim(hold)
    assert result.exit_code == code, result.stderr
    assert result.stderr.splitlines()[0].startswith(line), result.stderr
    if code == 2:
        assert len(result.stderr.splitlines()) == 1
