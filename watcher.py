"""Colony's watcher as its own process: `python watcher.py` (or a `watcher` container).

Reads the same environment as the worker (`infra.config`): Temporal's connection, the
management cluster's kubeconfig (`COLONY_MANAGEMENT_KUBECONFIG`), Colony's namespace
(`COLONY_SYSTEM_NAMESPACE`, default colony-system), where to look (`COLONY_WATCH_NAMESPACE`,
default everywhere), its Lease identity (`COLONY_WATCHER_ID`), its Prometheus endpoint
(`COLONY_WATCHER_METRICS_PORT`: its own, not the worker's `COLONY_METRICS_PORT`, so the two run side
by side on one host) and `COLONY_TRACE_EXPORT`. Run as many as you like: one leads (the Lease `colony-watcher`), the others
wait to take over. SIGINT/SIGTERM release the Lease, so a standby takes over at once.

The logic is the `watching` package (named apart from this entry point, which it would shadow); `worker.py` runs the same watcher in-process when
`COLONY_WATCHER_IN_WORKER=1`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from infra import metrics, tracing
from infra.config import ColonySettings
from infra.kubeapi import KubeApi
from infra.process import configure_logging, reach_temporal, run_service
from watching.service import Watcher, WatcherConfig
from watching.signals import TemporalSignals

log = logging.getLogger("colony.watcher")


async def run(settings: ColonySettings) -> None:
    """Watch (when elected) until SIGINT/SIGTERM."""
    kubeconfig = settings.require_management_kubeconfig()
    provider = tracing.configure("colony-watcher", settings.trace_export)
    interceptor = tracing.interceptor()
    temporal = await reach_temporal(
        settings.temporal_address,
        lambda: Client.connect(
            **settings.temporal_connect,
            data_converter=pydantic_data_converter,
            interceptors=[interceptor] if interceptor else [],
        ),
    )
    if settings.watcher_metrics_port is not None:
        port = metrics.serve(settings.watcher_metrics_port)
        log.info("metrics on :%d/metrics", port)
    management = KubeApi.from_kubeconfig(kubeconfig)
    config = WatcherConfig.from_settings(settings)
    watcher = Watcher(management, TemporalSignals(temporal), config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        "watcher %s: management cluster %s, Lease %s/colony-watcher, Temporal %s",
        config.identity,
        management.host,
        config.system_namespace,
        settings.temporal_address,
    )
    running = asyncio.create_task(watcher.run())
    try:
        await asyncio.wait(
            {running, asyncio.create_task(stop.wait())}, return_when="FIRST_COMPLETED"
        )
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        await management.aclose()
        if provider is not None:
            provider.shutdown()
    log.info("watcher stopped")


def main() -> int:
    configure_logging()
    return run_service(run, log)


if __name__ == "__main__":
    sys.exit(main())
