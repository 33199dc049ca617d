"""`colonyctl cluster get NAME -w`: follow a cluster's status until interrupted, as `kubectl get -w`.

On a terminal the table view is redrawn in place on every change; anywhere else each change is
printed anew (a block of text, one JSON document per line with `-o json`, a `---` YAML document
with `-o yaml`) and flushed at once, so a pipe sees it when it happens. It ends on Ctrl-C (exit 0)
or once the cluster's workflow has ended (its final status, phase deleted, is the last change).
"""

from __future__ import annotations

import sys
from typing import Any

from clients.clusters import Clusters
from starter import output
from starter.options import OutputFormat
from starter.session import run


def watch_cluster(colony: Clusters, name: str, fmt: OutputFormat) -> None:
    """Print the cluster now and on every change; `NotFoundError` when it does not exist."""

    async def go() -> None:
        live: Any = None
        if fmt is OutputFormat.TABLE and output.stdout_is_terminal():
            from rich.live import Live

            # Redrawn when the status changes only (auto-refresh would repaint an unchanged view).
            live = Live(console=output.console(), auto_refresh=False, transient=False)
        first = True
        try:
            async for status in colony.watch(name):
                if live is not None:
                    if first:
                        live.start()
                    live.update(output.cluster_view(status), refresh=True)
                elif not output.emit(status, fmt, compact=True):
                    if not first:
                        output.write()
                    output.print_cluster(status)
                sys.stdout.flush()
                first = False
        finally:
            if live is not None:
                live.stop()

    try:
        run(go)
    except KeyboardInterrupt:
        # Ctrl-C is how a watch ends: not a failure.
        return
