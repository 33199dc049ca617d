"""Server processes that never outlive their owner: started under `components/guard.py`, logging to
a file, stopped by process group.

`GuardedProcess.start(name, command, log)` runs `command` in a process group of its own behind a
guard process; `stop()` ends it (SIGTERM, then SIGKILL after the grace period), and if the owner
dies first the guard ends it anyway (see guard.py for how). `rss()` reads the server's resident
memory from /proc, for the figures the control plane reports.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

GUARD = Path(__file__).resolve().with_name("guard.py")
STOP_GRACE = 10.0
"""Seconds a server has to stop after SIGTERM before SIGKILL (kube-apiserver drains in about 1 s)."""


class ProcessError(RuntimeError):
    """A server exited or could not start; the message holds the tail of its log."""


def log_tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a log file (empty when there is none)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def rss_bytes(pid: int) -> int:
    """Resident memory of a process (VmRSS), 0 when it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class GuardedProcess:
    """One server process in a process group of its own, behind a guard.

    Attributes:
        name: what it is, for messages ("kube-apiserver").
        pid: the server's pid (also its process group's id).
        log: the file its stdout and stderr go to.
    """

    def __init__(self, name: str, guard: subprocess.Popen[bytes], pid: int, log: Path) -> None:
        self.name = name
        self.pid = pid
        self.log = log
        self._guard = guard

    @classmethod
    def start(
        cls,
        name: str,
        command: Sequence[str | Path],
        log: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        grace: float = STOP_GRACE,
    ) -> GuardedProcess:
        """Start `command` (its first element an absolute path) with stdout and stderr appended
        to `log`.

        Raises:
            ProcessError: the guard did not report the server's pid (it could not start).
        """
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as log_file:
            guard = subprocess.Popen(
                [sys.executable, "-I", "-S", str(GUARD), str(grace), str(log_file.fileno()), "--"]
                + [str(part) for part in command],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log_file,
                pass_fds=(log_file.fileno(),),
                env=dict(env) if env is not None else None,
                cwd=cwd,
            )
        assert guard.stdout is not None
        line = guard.stdout.readline()
        guard.stdout.close()
        if not line.strip().isdigit():
            guard.wait()
            raise ProcessError(f"{name} did not start:\n{log_tail(log)}")
        return cls(name, guard, int(line), log)

    def alive(self) -> bool:
        """Whether the server still runs (its guard ends with it)."""
        return self._guard.poll() is None

    def check(self) -> None:
        """Raise `ProcessError` with the log's tail when the server has exited."""
        code = self._guard.poll()
        if code is not None:
            raise ProcessError(f"{self.name} exited with {code}:\n{log_tail(self.log)}")

    def rss(self) -> int:
        """The server's resident memory in bytes (0 once it is gone)."""
        return rss_bytes(self.pid) if self.alive() else 0

    def request_stop(self) -> None:
        """Tell the guard to stop the server, without waiting (`stop` waits)."""
        if self._guard.stdin is not None and not self._guard.stdin.closed:
            self._guard.stdin.close()

    def stop(self, timeout: float = STOP_GRACE + 20) -> int | None:
        """Stop the server and wait for it: its guard sends SIGTERM, then SIGKILL after the grace
        period. Idempotent; answers the guard's exit code."""
        self.request_stop()
        try:
            return self._guard.wait(timeout)
        except subprocess.TimeoutExpired:
            # The guard itself is stuck: take both down (the server dies with its guard anyway).
            self._guard.kill()
            _kill_group(self.pid)
            return self._guard.wait()


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def wait_until_gone(pid: int, timeout: float) -> bool:
    """Whether `pid` is gone within `timeout` seconds (for tests of the clean-up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if _zombie(pid):
            return True
        time.sleep(0.05)
    return False


def _zombie(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return True
    return fields[0] == "Z"
