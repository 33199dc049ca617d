"""Free ports for the servers Colony's own tooling starts side by side on one machine (the test
stacks and the benchmarks: Temporal servers, the simulator, workers' metrics, the HTTP API).

A port is picked, released, and bound later by the server it is given to. Between the two, any
program that asks the kernel for a free port (binding port 0) may be handed the same one. The
Temporal dev server does exactly that for its internal services while it starts, after it was
given its front end's port: a pick from the kernel's ephemeral range could then be taken by the
very server it was picked for (seen in a loaded run: its worker service failed with "address
already in use" on the front end's port, and the server died). So `free_port` picks below the
ephemeral range, where the kernel never hands out ports: such a race cannot happen.

Parallel pytest-xdist workers each pick in a slice of their own (`PYTEST_XDIST_WORKER`), and a
process never hands out a port twice, so the picks of one test run never collide either. Several
test runs at once on one machine (worktrees side by side, a benchmark beside a suite) pick in the
same slices, so a pick is also reserved across processes: an advisory lock on a file named after
the port (`RESERVATIONS`), held until the picking process ends (the kernel drops it then, however
the process ends). A port another live process has reserved is never handed out.
"""

from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
import threading
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LINUX_EPHEMERAL_START = 32_768
"""Linux's default start of the ephemeral range (macOS and the IANA range start at 49152)."""
LOWEST = 20_000
"""The lowest port picked: above the well-known services that listen below it."""
ATTEMPTS = 200
RESERVATIONS = Path(
    os.environ.get("COLONY_PORT_RESERVATIONS", Path(tempfile.gettempdir()) / "colony-ports")
)
"""Where picks are reserved across processes: one lock file per port, shared by every process of
this machine that picks ports (`COLONY_PORT_RESERVATIONS` moves it)."""

_picker = random.Random()
_handed_out: set[int] = set()
_reservations: dict[int, int] = {}
"""Port -> the open lock file that reserves it; kept open (and so locked) for the process's life."""
_lock = threading.Lock()


def ephemeral_start(range_file: Path = EPHEMERAL_RANGE_FILE) -> int:
    """The first port of the kernel's ephemeral range (Linux's default where it cannot be read)."""
    try:
        return int(range_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return LINUX_EPHEMERAL_START


def pick_range(worker: str, workers: int, ephemeral: int) -> range:
    """The ports a pytest-xdist worker (`gw<N>` of `workers`; "" outside xdist) picks from: its
    slice of those from `LOWEST` up to the ephemeral range."""
    top = max(ephemeral, LOWEST + 1_000)
    if not worker.startswith("gw") or workers < 2:
        return range(LOWEST, top)
    index = int(worker.removeprefix("gw")) % workers
    size = (top - LOWEST) // workers
    return range(LOWEST + index * size, LOWEST + (index + 1) * size)


def port_free(port: int) -> bool:
    """Whether a server can bind `port` on every address. Servers reuse addresses (Temporal's,
    aiohttp's, uvicorn's, `infra.metrics.serve`), so a port in TIME_WAIT is free for them."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something listens on `host:port` (it accepts a connection within 0.2 s)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


def free_port() -> int:
    """A port free now on every address, below the ephemeral range, in this worker's slice, and never
    handed out before by this process.

    Raises:
        RuntimeError: no such port was found in `ATTEMPTS` tries (the slice is full).
    """
    ports = pick_range(
        os.environ.get("PYTEST_XDIST_WORKER", ""),
        int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")),
        ephemeral_start(),
    )
    with _lock:
        for _ in range(ATTEMPTS):
            port = _picker.choice(ports)
            if port not in _handed_out and port_free(port) and _reserve(port):
                _handed_out.add(port)
                return port
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1} after {ATTEMPTS} tries")


def _reserve(port: int) -> bool:
    """Reserve `port` for this process's life; False when another live process holds it."""
    RESERVATIONS.mkdir(parents=True, exist_ok=True)
    handle = os.open(RESERVATIONS / str(port), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(handle)
        return False
    _reservations[port] = handle
    return True
