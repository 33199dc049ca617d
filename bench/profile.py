"""Where a process spends its time during a benchmark: py-spy, attached from outside.

`profiled(pid, path)` samples the process (py-spy `record --format raw`, 50 samples a second,
without pausing it) for as long as its block runs; `hot_spots(path)` reads the collapsed stacks
back: the share of the samples that were busy, and the functions that hold the most of them, by
themselves (the leaf) and with what they call (inclusive). py-spy comes with the dev extras; where
it is missing (or may not attach), profiling is skipped and says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

RATE = 50
"""Samples a second: enough for a wave of a minute or more, little work for py-spy itself."""


def py_spy() -> str | None:
    found = Path(sys.executable).parent / "py-spy"
    return str(found) if found.exists() else shutil.which("py-spy")


@contextlib.asynccontextmanager
async def profiled(pid: int, path: Path) -> AsyncIterator[bool]:
    """Sample process `pid` into `path` while the block runs; yields False when py-spy is absent."""
    binary = py_spy()
    if binary is None:
        yield False
        return
    recorder = await asyncio.create_subprocess_exec(
        binary, "record", "--pid", str(pid), "--format", "raw", "--rate", str(RATE),
        "--nonblocking", "--output", str(path),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield True
    finally:
        recorder.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            await asyncio.wait_for(recorder.wait(), 60)
        except TimeoutError:
            recorder.kill()


def _function(frame: str) -> str:
    """`name (path/to/module.py:12)` as `name (module.py)`: lines merged."""
    name, _, where = frame.partition(" (")
    return f"{name} ({Path(where.split(':')[0]).name})" if where else name


PLUMBING = (
    "(runners.py)",
    "(base_events.py)",
    "(events.py)",
    "(threading.py)",
    "(thread.py)",
    "(<frozen runpy>)",
    "(ceiling.py)",
    "(worker.py)",
)
"""Frames every busy stack passes through (the event loop, the thread pool, the entry point):
left out of the inclusive list, which is about what the work is."""


def hot_spots(path: Path, seconds: float, top: int = 15) -> dict[str, Any]:
    """What the samples in `path` (py-spy raw output over `seconds`) say (module docstring), with
    the heaviest whole stacks (`stacks`: their frames, leaf last, and share)."""
    if not path.exists():
        return {"samples": 0}
    leaves: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    stacks: Counter[str] = Counter()
    samples = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_function(f) for f in stack.split(";")][1:]  # the first frame is the thread
        if not frames:
            continue
        samples += count
        leaves[frames[-1]] += count
        stacks[" > ".join(f for f in frames if not f.endswith(PLUMBING))] += count
        for function in set(frames):
            if not function.endswith(PLUMBING):
                inclusive[function] += count
    expected = seconds * RATE
    return {
        "samples": samples,
        "busy_share": round(samples / expected, 2) if expected else None,
        "self": {name: round(n / samples, 3) for name, n in leaves.most_common(top)},
        "inclusive": {name: round(n / samples, 3) for name, n in inclusive.most_common(top * 2)},
        "stacks": {name: round(n / samples, 3) for name, n in stacks.most_common(top)},
    }
