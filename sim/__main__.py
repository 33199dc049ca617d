"""SIMULATOR. `python -m sim`: run the simulated world until Ctrl-C or SIGTERM.

Everything it serves is simulated (no real k0rdent, cloud or machines); it says so on start and
prints where the kubeconfig, the host provider credentials and the fault endpoints are. Its
clusters are the emulator's (`sim.apiserver`, instant, the default) or, with `--world real` (or
`COLONY_WORLD=real`), real Kubernetes control planes (`sim.real`: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, KWOK; built on first use).

With `--persist` the world is kept in `--state-dir` and resumed by the next `--persist` start
(`sim.persistence`); `--state-id` names the development state it belongs to (`make run` passes
the id it keeps beside Temporal's database), and a saved world of another is refused (exit 2).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path

import yaml

from sim.persistence import StateMismatch
from sim.timing import SimTiming
from sim.world import (
    DEFAULT_STATE_DIR,
    REAL,
    WORLD_ENV,
    WORLDS,
    World,
    WorldConfig,
    make_world,
    world_kind,
)


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
    parser.add_argument(
        "--persist",
        action="store_true",
        help="keep the world in --state-dir and resume it at the next start",
    )
    parser.add_argument(
        "--state-id",
        default=None,
        help="the development state the world belongs to (a saved world of another is refused)",
    )
    parser.add_argument(
        "--world",
        choices=WORLDS,
        default=None,
        help=f"emulated clusters (instant, the default) or real control planes "
        f"(default: ${WORLD_ENV}, else emulated)",
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
        persist=args.persist,
        state_id=args.state_id,
        world=args.world or world_kind(os.environ.get(WORLD_ENV)),
    )


def banner(world: World) -> str:
    info = world.describe()
    real = world.kind == REAL
    return "\n".join(
        [
            "=" * 72,
            " COLONY SIMULATOR: simulated k0rdent, hosts and workloads"
            + (" on REAL Kubernetes control planes." if real else "; emulated clusters."),
            "=" * 72,
            f" management cluster  {info['management']['url']}  "
            + (
                "(kube-apiserver v1.37, through the simulator's front)"
                if real
                else "(emulated kube-apiserver)"
            ),
            *(
                [
                    " child clusters      real control planes with KWOK nodes (their kubeconfig Secrets)"
                ]
                if real
                else []
            ),
            f"   kubeconfig        {world.management_kubeconfig_path}",
            f" host provider       {info['hostProvider']['url']}",
            f"   url + apiKey      {world.hostprovider_json_path}",
            f" world info          {world.world_json_path}",
            f" CA certificate      {world.ca_path}  (every server, tenant gateways included)",
            " tenant gateways     on 127.0.0.1, ports in each child's Gateway colony-gateway/tenant:",
            f"   curl --cacert {world.ca_path} --resolve <ws>.<domain>:<port>:127.0.0.1 \\",
            "        https://<ws>.<domain>:<port>/   (workloads answer with SIMULATED pages)",
            f" faults              GET/PUT <any server>{info['faultsPath']}",
            "                     (rates, scripted errors, evictions, kubelets_stopped, nodes_lost)",
            f" records             GET <any server>{info['recordsPath']}?since=N",
            "                     (clients' creates, evictions, hosts claimed and released)",
            f" time scale          {info['timeScale']}",
            f" state               {_state_line(world)}",
            "",
            f" export KUBECONFIG={world.management_kubeconfig_path}",
            " Ctrl-C stops the simulator.",
            "=" * 72,
        ]
    )


def _state_line(world: World) -> str:
    if not world.config.persist:
        return "in memory (gone when it stops)"
    return f"kept in {world.state_path} (development state {world.state_id})"


async def run(config: WorldConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    async with make_world(config) as world:
        print(banner(world), flush=True)
        await stop.wait()
        print("SIMULATOR stopping...", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # One line per request (a real world's control planes are polled while they start).
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    try:
        asyncio.run(run(config_from_args(args)))
    except (StateMismatch, ValueError) as exc:
        print(f"sim: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
