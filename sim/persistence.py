"""SIMULATOR. A persisted world's files: its state, its resourceVersion reservations, its saver.

Used by `sim.world.SimWorld` when `WorldConfig.persist` is set (`python -m sim --persist`, which
`make run` uses): the world is written to `state_dir` while it runs and read back at the next
start, so a rerun resumes where the last one stopped. Without it nothing here runs and the world
lives in memory only (the tests' worlds).

Files, in `state_dir`:
    state.json              the world: `{"stateId", "format", "savedAt", "ca", "management",
                            "hostProvider", "k0rdent"}` (each cluster's `ClusterStore.snapshot()`,
                            the host provider's claims, the controllers' progress); mode 0600, it
                            holds the CA key and the tokens. Written whole (temporary file, then
                            rename) on a clean stop and within `SAVE_INTERVAL_SECONDS` of any
                            change, so a killed sim loses at most that much.
    resource-versions.json  per cluster ("management", "<namespace>/<name>" of a child), the
                            resourceVersion it may hand out up to: written before a store goes past
                            it, `RESOURCE_VERSION_BLOCK` at a time. A restart after a kill resumes
                            above it, so a client never sees a resourceVersion go back or mean two
                            different things.

`stateId` names the development state the world belongs to (`make run` writes the same id beside
Temporal's database): a world is only ever loaded under the id it was saved with.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import os
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from typing import Any

import orjson

from sim.apiserver.store import ClusterStore

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
RESERVATIONS_FILE = "resource-versions.json"
FORMAT = 1
"""The layout of state.json; a world saved in another is refused rather than misread."""
SAVE_INTERVAL_SECONDS = 0.5
"""How often the saver looks for changes: what a killed sim may lose (a controller redoes it)."""
RESOURCE_VERSION_BLOCK = 1000
"""resourceVersions reserved per write of resource-versions.json: one small write per thousand
writes of a cluster."""


class StateMismatch(Exception):
    """The saved world cannot be loaded: another development state's, or an unknown format."""


def read_state(state_dir: Path) -> dict[str, Any] | None:
    """The saved world in `state_dir`, or None when there is none."""
    path = state_dir / STATE_FILE
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except orjson.JSONDecodeError as exc:
        raise StateMismatch(f"{path} is not a saved world ({exc})") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else None
        raise StateMismatch(f"{path} has format {found!r}, this simulator reads {FORMAT}")
    return data


def _write_atomically(path: Path, data: bytes) -> None:
    """Whole or not at all: a reader (or the next start after a kill) never sees half a file."""
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(temporary, path)


class Reservations:
    """resource-versions.json: how far each cluster's resourceVersions may go (module docstring)."""

    def __init__(self, state_dir: Path) -> None:
        self._path = state_dir / RESERVATIONS_FILE
        try:
            saved = json.loads(self._path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            saved = {}
        self._upto: dict[str, int] = {str(k): int(v) for k, v in saved.items()}

    def floor(self, cluster: str) -> int:
        """The highest resourceVersion `cluster` may have handed out before the last stop."""
        return self._upto.get(cluster, 0)

    def attach(self, cluster: str, store: ClusterStore) -> None:
        """Make `store` reserve its resourceVersions here, as `cluster`."""

        def reserve(upto: int) -> None:
            self._upto[cluster] = upto
            self._write()

        store.reserve_resource_versions(reserve, RESOURCE_VERSION_BLOCK)

    def _write(self) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(self._path, json.dumps(self._upto, sort_keys=True).encode())


class WorldSaver:
    """Writes state.json whenever the world changed, checking every `SAVE_INTERVAL_SECONDS`.

    Args:
        state_dir: where state.json goes.
        snapshot: the whole world, JSON-shaped; called on the event loop, so it is one instant.
        version: anything that differs once the world changed (resourceVersions, claims).
    """

    def __init__(
        self,
        state_dir: Path,
        snapshot: Callable[[], dict[str, Any]],
        version: Callable[[], Hashable],
    ) -> None:
        self.path = state_dir / STATE_FILE
        self._snapshot = snapshot
        self._version = version
        self._saved: Hashable = None
        self._lock = asyncio.Lock()
        self.saves = 0

    async def run(self) -> None:
        """Save after every change until cancelled."""
        while True:
            await asyncio.sleep(SAVE_INTERVAL_SECONDS)
            if self._version() != self._saved:
                try:
                    await self.save()
                except OSError:
                    # A full disk must not stop the world; the next change tries again.
                    log.exception("saving the simulated world to %s failed", self.path)

    async def save(self) -> None:
        """Write the world as it is now (serialized on the loop, written off it)."""
        async with self._lock:
            version = self._version()
            data = self._snapshot()
            data["savedAt"] = dt.datetime.now(dt.UTC).isoformat()
            payload = orjson.dumps(data)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            await asyncio.to_thread(_write_atomically, self.path, payload)
            self._saved = version
            self.saves += 1

    async def stop(self, task: asyncio.Task[None] | None) -> None:
        """Stop the periodic saves (`task` runs `run`) and write the world one last time."""
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.save()


def ca_pem(saved: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """The CA of a saved world, as `CertificateAuthority(pem=...)` takes it."""
    ca = saved["ca"]
    return str(ca["cert"]).encode(), str(ca["key"]).encode()
