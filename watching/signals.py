"""Signalling the workflow that owns an object, through Temporal.

`TemporalSignals` is what `watching.service` sends through (tests give it a recording fake with the
same `send`). A workflow that does not exist, or no longer runs (a deleted cluster whose objects
are still going away), is not an error: there is nobody left to tell. Anything else (Temporal
unreachable) raises, and the watcher retries the same signal (same request id) until it lands.
"""

from __future__ import annotations

import logging
from typing import Protocol

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from watching.mapping import Signal

log = logging.getLogger("colony.watcher")


class SignalSender(Protocol):
    async def send(self, signal: Signal) -> bool:
        """Deliver `signal`; False when its workflow is not there (not an error)."""
        ...


class TemporalSignals:
    """Signals through a Temporal client (with the pydantic data converter)."""

    def __init__(self, client: Client) -> None:
        self._client = client

    async def send(self, signal: Signal) -> bool:
        handle = self._client.get_workflow_handle(signal.workflow_id)
        try:
            await handle.signal(signal.name, signal.payload)
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                # Absent, or completed (deleted): nothing to tell.
                log.debug("no workflow %s for %s", signal.workflow_id, signal.request_id)
                return False
            raise
        return True
