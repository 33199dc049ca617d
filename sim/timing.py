"""SIMULATOR. Named delays of the simulated controllers, scaled by one `time_scale`.

Every controller in `sim/` asks `SimTiming.delay(name)` how long a step takes instead of hard-coding
a sleep, so `python -m sim` can feel like a real (if fast) system while tests run with
`SimTiming.instant()`, where every step happens as soon as the event loop gets to it.

Timeouts are scaled separately (`timeout_scale`): a Helm timeout of 5 minutes must not become
0 seconds in instant mode, or every install would fail before the scheduler had a chance to run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

# Seconds each simulated step takes at time_scale 1.0: "a few seconds" end to end, the order of
# magnitude a real k0rdent hosted control plane would need, divided by roughly a hundred.
DEFAULT_DELAYS: Mapping[str, float] = MappingProxyType(
    {
        # ClusterDeployment (KCM): one step per condition it reports.
        "cluster.credential": 0.2,
        "cluster.template": 0.2,
        "cluster.helm_chart": 0.5,
        "cluster.helm_release": 1.0,
        "cluster.control_plane": 1.5,
        "cluster.upgrade": 0.5,
        "cluster.delete": 1.0,
        # Worker machines: SSH bootstrap until the kubelet registers, then CNI until Ready.
        "node.register": 1.0,
        "node.ready": 1.5,
        # ServiceSet (Sveltos installing a Helm release).
        "service.install": 0.5,
        "service.uninstall": 0.3,
        # Sveltos retrying a failed install (a missing prerequisite chart).
        "service.retry": 2.0,
        # Kubelet: container start and graceful termination.
        "pod.start": 0.5,
        "pod.terminate": 0.5,
    }
)

# Used for a name nobody registered, so a controller written elsewhere never crashes on a lookup.
FALLBACK_DELAY = 0.5

# Timeouts shrink less than delays by default: 5 minutes of Helm timeout become 30 s at scale 1.
DEFAULT_TIMEOUT_SCALE = 0.1

# In instant mode a 5-minute Helm timeout becomes 1.5 s: long enough for the in-process
# scheduler to place pods, short enough for a test of the Failed path.
INSTANT_TIMEOUT_SCALE = 0.005


@dataclass(frozen=True)
class SimTiming:
    """Delays of the simulated world.

    Attributes:
        time_scale: multiplies every named delay (0 makes every step immediate).
        delays: seconds per named step at scale 1; unknown names fall back to `FALLBACK_DELAY`.
        timeout_scale: multiplies timeouts declared in objects (Helm timeouts), separately from
            delays so that instant mode keeps a usable timeout.
    """

    time_scale: float = 1.0
    delays: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_DELAYS))
    timeout_scale: float = DEFAULT_TIMEOUT_SCALE

    @classmethod
    def instant(cls) -> SimTiming:
        """All delays zero: for tests, where waiting is done by polling, never by sleeping."""
        return cls(time_scale=0.0, timeout_scale=INSTANT_TIMEOUT_SCALE)

    @classmethod
    def scaled(cls, time_scale: float) -> SimTiming:
        """Default delays multiplied by `time_scale`; timeouts scale along (never above 1x)."""
        if time_scale < 0:
            raise ValueError(f"time_scale must be >= 0, got {time_scale}")
        timeout_scale = max(min(DEFAULT_TIMEOUT_SCALE * time_scale, 1.0), INSTANT_TIMEOUT_SCALE)
        return cls(time_scale=time_scale, timeout_scale=timeout_scale)

    def with_delays(self, **overrides: float) -> SimTiming:
        """A copy with some named delays replaced (names use `_` for `.`: `node_ready=3`)."""
        delays = dict(self.delays)
        for key, value in overrides.items():
            delays[key.replace("_", ".", 1)] = value
        return replace(self, delays=delays)

    def delay(self, name: str) -> float:
        """Scaled seconds the named step takes."""
        return max(self.delays.get(name, FALLBACK_DELAY) * self.time_scale, 0.0)

    def timeout(self, seconds: float) -> float:
        """Scaled seconds of a timeout declared in an object (e.g. a ServiceSet's Helm timeout)."""
        return max(seconds * self.timeout_scale, 0.0)

    async def sleep(self, name: str) -> None:
        """Wait for the named step; yields to the loop even when the delay is zero."""
        await asyncio.sleep(self.delay(name))
