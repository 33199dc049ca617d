"""Where each watch stream stopped: its last acknowledged resourceVersion, kept in a ConfigMap.

A restarted watcher (or the standby that takes over) reads it and watches from there, so nothing
that changed while no watcher ran is missed (and nothing is relisted, unless the API server no
longer keeps that far back: 410, then a relist). Used by `watching.service`; only the leader writes.

ConfigMap `colony-watcher-state` in Colony's namespace (`colony-system`), one key per stream
(`clusterdeployments`, `nodes.<namespace>.<ClusterDeployment>`, `gateways.<namespace>.<ClusterDeployment>`), value
`<resourceVersion>` or, for a child cluster's stream, `<ClusterDeployment uid>/<resourceVersion>`:
a recreated cluster of the same name is another API server, whose versions have nothing to do
with the old one's.

Writes are batched (`FLUSH_EVERY`): a crash costs at most that much re-sent signals, which their
request ids make harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from infra.kubeapi import KubeApi, KubeError, Obj, collection_path

log = logging.getLogger("colony.watcher")

STATE_CONFIGMAP = "colony-watcher-state"
FLUSH_EVERY = 1.0
"""Seconds between writes of the ConfigMap while streams move."""
MANAGED_BY = {"app.kubernetes.io/managed-by": "colony-watcher"}


def _key(stream: str) -> str:
    # ConfigMap keys allow [-._a-zA-Z0-9]; stream names are built from DNS names and dots.
    return "".join(c if c.isalnum() or c in "-._" else "_" for c in stream)


class ResumeStore:
    """The persisted versions, read once at start and written back in batches."""

    def __init__(self, api: KubeApi, namespace: str, name: str = STATE_CONFIGMAP) -> None:
        self._api = api
        self._namespace = namespace
        self._name = name
        self._values: dict[str, str] = {}
        self._dirty = False
        self._resource_version = ""
        self._changed = asyncio.Event()

    @property
    def _path(self) -> str:
        return collection_path("", "v1", "configmaps", self._namespace)

    async def load(self) -> dict[str, str]:
        """Read the ConfigMap (creating Colony's namespace's ConfigMap lazily, on first write)."""
        try:
            found = await self._api.get(f"{self._path}/{self._name}")
        except KubeError as exc:
            if exc.status != 404:
                raise
            found = {}
        self._resource_version = str((found.get("metadata") or {}).get("resourceVersion") or "")
        self._values = {str(k): str(v) for k, v in (found.get("data") or {}).items()}
        return dict(self._values)

    def get(self, stream: str) -> str:
        return self._values.get(_key(stream), "")

    def set(self, stream: str, value: str) -> None:
        key = _key(stream)
        if self._values.get(key) != value:
            self._values[key] = value
            self._dirty = True
            self._changed.set()

    def drop(self, stream: str) -> None:
        if self._values.pop(_key(stream), None) is not None:
            self._dirty = True
            self._changed.set()

    async def flush(self) -> None:
        """Write the values if they changed since the last write."""
        if not self._dirty:
            return
        self._dirty = False
        body: Obj = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self._name,
                "namespace": self._namespace,
                "labels": MANAGED_BY,
                **({"resourceVersion": self._resource_version} if self._resource_version else {}),
            },
            "data": dict(self._values),
        }
        try:
            if self._resource_version:
                written = await self._api.replace(f"{self._path}/{self._name}", body)
            else:
                written = await self._api.create(self._path, body)
        except KubeError as exc:
            self._dirty = True
            if exc.status in (404, 409):
                # Created or written by another run since we read it (a handover): the leader's
                # view wins, which is ours; read its version and write again next time.
                with contextlib.suppress(KubeError):
                    current = await self._api.get(f"{self._path}/{self._name}")
                    self._resource_version = str(current["metadata"]["resourceVersion"])
                if exc.status == 404:
                    self._resource_version = ""
            raise
        self._resource_version = str(written["metadata"]["resourceVersion"])

    async def run(self) -> None:
        """Flush every `FLUSH_EVERY` seconds while something changed, until cancelled (then flush
        a last time)."""
        try:
            while True:
                await self._changed.wait()
                self._changed.clear()
                try:
                    await self.flush()
                except KubeError as exc:
                    log.warning("watcher state not saved (%s); retrying", exc)
                    self._changed.set()
                await asyncio.sleep(FLUSH_EVERY)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.flush())
