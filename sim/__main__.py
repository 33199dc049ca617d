"""SIMULATOR. `python -m sim`: run the simulated world until Ctrl-C or SIGTERM.

Everything it serves is simulated (no real Kubernetes, k0rdent, cloud or machines); it says so on
start and prints where the kubeconfig, the host provider credentials and the fault endpoints are.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path

import yaml

from sim.timing import SimTiming
from sim.world import DEFAULT_STATE_DIR, SimWorld, WorldConfig


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m sim",
        description="Run Colony's SIMULATED infrastructure (management cluster, k0rdent, host provider).",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=DEFAULT_STATE_DIR,
        help="where to write kubeconfig/JSON files",
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="multiplies every simulated delay (default 1.0)",
    )
    parser.add_argument(
        "--instant", action="store_true", help="every simulated step happens at once"
    )
    parser.add_argument("--inventory", type=Path, default=None, help="host inventory YAML")
    parser.add_argument(
        "--faults", type=Path, default=None, help="fault config YAML (see sim/faults.py)"
    )
    parser.add_argument(
        "--management-port",
        type=int,
        default=0,
        help="fixed port of the management cluster (0: free)",
    )
    parser.add_argument(
        "--hostprovider-port", type=int, default=0, help="fixed port of the host provider (0: free)"
    )
    parser.add_argument(
        "--hostprovider-api-key",
        default=None,
        help="API key of the host provider (default: random)",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING...")
    return parser.parse_args(argv)


def config_from_args(args: argparse.Namespace) -> WorldConfig:
    timing = SimTiming.instant() if args.instant else SimTiming.scaled(args.time_scale)
    faults = None
    if args.faults is not None:
        faults = yaml.safe_load(args.faults.read_text()) or {}
    return WorldConfig(
        state_dir=args.state_dir,
        timing=timing,
        inventory_path=args.inventory,
        faults=faults,
        management_port=args.management_port,
        hostprovider_port=args.hostprovider_port,
        hostprovider_api_key=args.hostprovider_api_key,
    )


def banner(world: SimWorld) -> str:
    info = world.describe()
    return "\n".join(
        [
            "=" * 72,
            " COLONY SIMULATOR: nothing here is real infrastructure.",
            "=" * 72,
            f" management cluster  {info['management']['url']}  (emulated kube-apiserver)",
            f"   kubeconfig        {world.management_kubeconfig_path}",
            f" host provider       {info['hostProvider']['url']}",
            f"   url + apiKey      {world.hostprovider_json_path}",
            f" world info          {world.world_json_path}",
            f" faults              GET/PUT <any server>{info['faultsPath']}",
            "                     (rates, scripted errors, evictions, kubelets_stopped, nodes_lost)",
            f" records             GET <any server>{info['recordsPath']}?since=N",
            "                     (clients' creates, evictions, hosts claimed and released)",
            f" time scale          {info['timeScale']}",
            "",
            f" export KUBECONFIG={world.management_kubeconfig_path}",
            " Ctrl-C stops the simulator.",
            "=" * 72,
        ]
    )


async def run(config: WorldConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    async with SimWorld(config) as world:
        print(banner(world), flush=True)
        await stop.wait()
        print("SIMULATOR stopping...", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    asyncio.run(run(config_from_args(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
