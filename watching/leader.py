"""Leader election on a `coordination.k8s.io/v1` Lease: one watcher signals, the others wait.

The algorithm is client-go's `leaderelection` (the one every Kubernetes controller manager runs):

- acquire: create the Lease, or take it over with an optimistic-concurrency PUT (the
  resourceVersion read) when it is free or expired; two contenders cannot both win a PUT;
- expiry is judged on the contender's own clock, from when it last saw the Lease record change,
  never from the timestamps inside it: clocks of two machines may disagree, a duration measured
  on one clock cannot;
- renew every `retry_period`; a leader that could not renew for `renew_deadline` stops leading
  (its work is cancelled) before `lease_duration` runs out, so the next leader starts only after
  the previous one stopped: never two watchers signalling at once;
- on a clean stop the leader releases the Lease (empty holder), so a standby takes over at its
  next try instead of waiting for the expiry.

Used by `watching.service.run_watcher` with the Lease `colony-watcher` in `colony-system`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx

from infra.kubeapi import KubeApi, KubeError, Obj, collection_path

log = logging.getLogger("colony.watcher")

LEASE_NAME = "colony-watcher"
LEASE_DURATION = 15.0
RENEW_DEADLINE = 10.0
RETRY_PERIOD = 2.0
"""client-go's defaults for controllers (15 s, 10 s, 2 s): a crashed leader is replaced within
about 17 s; a live one renews 5 times per lease."""


def micro_time(moment: datetime) -> str:
    """A metav1.MicroTime: UTC with exactly six fractional digits (the API refuses fewer)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _number(value: object, default: float) -> float:
    return (
        float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default
    )


@dataclass(frozen=True)
class LeaseTiming:
    lease_duration: float = LEASE_DURATION
    renew_deadline: float = RENEW_DEADLINE
    retry_period: float = RETRY_PERIOD

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("need 0 < retry_period < renew_deadline < lease_duration")


class LeaseElector:
    """Holds (or waits for) one Lease on behalf of `identity`."""

    def __init__(
        self,
        api: KubeApi,
        namespace: str,
        identity: str,
        *,
        name: str = LEASE_NAME,
        timing: LeaseTiming | None = None,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self._api = api
        self._namespace = namespace
        self._name = name
        self.identity = identity
        self.timing = timing or LeaseTiming()
        self._on_change = on_change
        self._observed: tuple[str, str, str] | None = None
        self._observed_at = 0.0
        self.leading = False

    @property
    def _collection(self) -> str:
        return collection_path("coordination.k8s.io", "v1", "leases", self._namespace)

    def _body(self, spec: Obj, resource_version: str = "") -> Obj:
        metadata: Obj = {"name": self._name, "namespace": self._namespace}
        if resource_version:
            metadata["resourceVersion"] = resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        }

    async def try_acquire_or_renew(self) -> bool:
        """One attempt: True when this identity holds the Lease afterwards."""
        now = micro_time(datetime.now(UTC))
        duration = max(1, round(self.timing.lease_duration))
        try:
            lease = await self._api.get(f"{self._collection}/{self._name}")
        except KubeError as exc:
            if exc.status != 404:
                raise
            spec = {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": duration,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            }
            try:
                await self._api.create(self._collection, self._body(spec))
            except KubeError as conflict:
                if conflict.status == 409:
                    return False  # another contender created it first
                raise
            return True
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        record = (holder, str(spec.get("renewTime") or ""), str(spec.get("acquireTime") or ""))
        if record != self._observed:
            self._observed = record
            self._observed_at = time.monotonic()
        held_for = _number(spec.get("leaseDurationSeconds"), duration)
        if holder and holder != self.identity and time.monotonic() < self._observed_at + held_for:
            return False
        ours = holder == self.identity
        transitions = int(_number(spec.get("leaseTransitions"), 0))
        new_spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": duration,
            "acquireTime": str(spec.get("acquireTime") or now) if ours else now,
            "renewTime": now,
            "leaseTransitions": transitions if ours else transitions + 1,
        }
        version = str((lease.get("metadata") or {}).get("resourceVersion") or "")
        try:
            await self._api.replace(
                f"{self._collection}/{self._name}", self._body(new_spec, version)
            )
        except KubeError as exc:
            if exc.status == 409:
                return False  # someone wrote since we read: they won this round
            raise
        if not ours:
            log.info("%s took the lease %s over from %r", self.identity, self._name, holder)
        return True

    async def release(self) -> None:
        """Give the Lease up now (only if still ours), so a standby need not wait for it to expire."""
        lease = await self._api.get(f"{self._collection}/{self._name}")
        spec = lease.get("spec") or {}
        if spec.get("holderIdentity") != self.identity:
            return
        released = {
            **spec,
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "renewTime": micro_time(datetime.now(UTC)),
        }
        version = str((lease.get("metadata") or {}).get("resourceVersion") or "")
        await self._api.replace(f"{self._collection}/{self._name}", self._body(released, version))

    def _set_leading(self, leading: bool) -> None:
        if leading != self.leading:
            self.leading = leading
            log.info("%s %s", self.identity, "leads" if leading else "no longer leads")
            if self._on_change is not None:
                self._on_change(leading)

    async def _attempt(self) -> bool:
        try:
            # `asyncio.timeout`, not `wait_for`: on Python 3.11, `wait_for` cancelled just as its
            # call completes returns the result and drops the cancellation, and a watcher told to
            # stop would go on electing forever.
            async with asyncio.timeout(self.timing.renew_deadline):
                return await self.try_acquire_or_renew()
        except (KubeError, httpx.HTTPError, OSError, TimeoutError, ValueError) as exc:
            # The API server is unreachable or refuses: the next attempt retries.
            log.warning("%s: lease %s: %s", self.identity, self._name, exc)
            return False

    async def run(self, lead: Callable[[], Awaitable[None]]) -> None:
        """Until cancelled: wait for the Lease, run `lead()` while holding it, cancel it as soon
        as the Lease cannot be renewed in time, and wait again. Releases the Lease on the way out."""
        try:
            while True:
                if await self._attempt():
                    await self._lead_while_renewed(lead)
                else:
                    # A standby polls: the Lease's expiry is judged on our clock, by looking.
                    await asyncio.sleep(self.timing.retry_period)
        finally:
            if self.leading:
                self._set_leading(False)
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.release())

    async def _lead_while_renewed(self, lead: Callable[[], Awaitable[None]]) -> None:
        self._set_leading(True)
        renewed_at = time.monotonic()
        work = asyncio.ensure_future(lead())
        try:
            while not work.done():
                await asyncio.wait({work}, timeout=self.timing.retry_period)
                if work.done():
                    break
                if await self._attempt():
                    renewed_at = time.monotonic()
                elif time.monotonic() - renewed_at >= self.timing.renew_deadline:
                    log.warning("%s: lease %s not renewed in time", self.identity, self._name)
                    # No longer the leader from this moment: nobody may see it leading while its
                    # work winds down (another may be about to take the Lease).
                    self._set_leading(False)
                    break
            if work.done() and not work.cancelled() and work.exception() is not None:
                log.error("%s: leading failed: %r", self.identity, work.exception())
        finally:
            work.cancel()
            # Wait for the work to have stopped (its own outcome is not ours to raise); our
            # cancellation, if that is why we are here, still propagates.
            await asyncio.wait({work})
        # Cancelled, `run` releases the Lease while still leading; here it was lost or ended.
        self._set_leading(False)
        # Lost (or ended): before trying again, let the Lease be seen as the others see it.
        await asyncio.sleep(self.timing.retry_period)
