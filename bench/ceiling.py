"""`python -m bench.ceiling`: Colony's worker (`worker.py`, unchanged) and, in the same process,
a worker of the Temporal ceiling (`bench.ceiling_workflow`) on `<COLONY_TASK_QUEUE>-ceiling`.

One process, one event loop and one Temporal runtime run both, with the worker options of
`worker.build_worker`, so `bench.throughput` compares a workspace's deploy and delete with trivial
workflows making the same number of activity calls on the same server and the same worker.
Only `bench.throughput` starts it (as its stack's worker); it stops on SIGTERM like `worker.py`.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

import worker
from activities.errors import ActivityErrorCounter
from activities.heartbeat import HEARTBEAT_THROTTLE
from bench.ceiling_workflow import CeilingWorkflow, noop
from infra.compiled import compile_once
from infra.config import ColonySettings, SettingsError


def ceiling_task_queue(task_queue: str) -> str:
    return f"{task_queue}-ceiling"


async def serve(settings: ColonySettings) -> None:
    """The ceiling's worker around `worker.run` (which returns on SIGINT/SIGTERM)."""
    client = await Client.connect(
        **settings.temporal_connect, data_converter=pydantic_data_converter
    )
    compile_once("bench")  # as `worker.build_worker` does for Colony's workflows
    ceiling = Worker(
        client,
        task_queue=ceiling_task_queue(settings.task_queue),
        workflows=[CeilingWorkflow],
        activities=[noop],
        graceful_shutdown_timeout=worker.GRACEFUL_SHUTDOWN,
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        default_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        interceptors=[ActivityErrorCounter()],
    )
    async with ceiling:
        await worker.run(settings)


def main() -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        asyncio.run(serve(ColonySettings.from_env()))
    except SettingsError as exc:
        logging.getLogger("colony.worker").error("%s", exc)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
