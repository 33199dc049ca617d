"""Ties one server process to the life of the process that started it (`components.process`).

Run as a script, never imported: `python -I -S guard.py GRACE LOG_FD -- COMMAND [ARG ...]`.

The guard forks COMMAND into a session (and so a process group) of its own, writes its pid on
stdout, and then waits. Its stdin is a pipe whose write end only the owner holds: the pipe reaches
end-of-file when the owner closes it (an orderly stop) or when the owner is gone, however it went
(SIGKILL included: the kernel closes a dead process's files, whichever of its threads started the
guard). Then, or on SIGTERM, the server's process group gets SIGTERM, and SIGKILL after GRACE
seconds. The server itself is killed when the guard dies (PR_SET_PDEATHSIG, set in the guard's
single thread, so it means the guard's death and nothing else). A pytest worker killed by a timeout
thus leaves no etcd or kube-apiserver behind.

Why a process of its own and not PR_SET_PDEATHSIG in the owner: that signal fires when the *thread*
that forked exits, and owners start servers from whatever thread they are on (`asyncio.to_thread`).
SIGINT is ignored: a Ctrl-C in a terminal reaches the owner's whole process group, and the owner's
clean-up, not the guard, decides when its servers stop.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
"""From <linux/prctl.h>."""


def _start(command: list[str], log_fd: int) -> int:
    guard = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before fork: the child only calls it
    pid = os.fork()
    if pid:
        return pid
    try:
        os.setsid()
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != guard:  # the guard died before prctl: nobody would stop us
            os._exit(1)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        for number in (signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM):
            signal.signal(number, signal.SIG_DFL)  # ignored ones would stay ignored after exec
        os.execv(command[0], command)
    except BaseException as error:
        os.write(2, f"guard: cannot run {command[0]}: {error}\n".encode())
    os._exit(127)


def _stop(pid: int, grace: float, wakeup: int) -> int:
    """SIGTERM to the server's group, SIGKILL after `grace`; the server's exit status."""
    deadline = time.monotonic() + grace
    status = _signal_and_wait(pid, signal.SIGTERM, deadline, wakeup)
    if status is None:
        status = _signal_and_wait(pid, signal.SIGKILL, time.monotonic() + 30, wakeup)
    _signal_group(pid, signal.SIGKILL)  # anything the server started and left behind
    return status if status is not None else -signal.SIGKILL


def _signal_group(pid: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, number)


def _signal_and_wait(pid: int, number: int, deadline: float, wakeup: int) -> int | None:
    _signal_group(pid, number)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        if select.select([wakeup], [], [], min(left, 0.5))[0]:
            _drain(wakeup)


def _drain(fd: int) -> bytes:
    try:
        return os.read(fd, 512)
    except BlockingIOError:
        return b""


def main(argv: list[str]) -> int:
    grace, log_fd, separator, *command = argv
    if separator != "--" or not command:
        os.write(2, b"usage: guard.py GRACE LOG_FD -- COMMAND [ARG ...]\n")
        return 2
    wakeup, wakeup_write = os.pipe()
    os.set_blocking(wakeup, False)
    os.set_blocking(wakeup_write, False)
    signal.set_wakeup_fd(wakeup_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    pid = _start(command, int(log_fd))
    sys.stdout.write(f"{pid}\n")
    sys.stdout.flush()
    os.close(1)
    while True:
        ready = select.select([0, wakeup], [], [])[0]
        if wakeup in ready and signal.SIGTERM in _drain(wakeup):
            return _stop(pid, float(grace), wakeup)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:  # the server ended by itself: its status is the guard's
            _signal_group(pid, signal.SIGKILL)  # anything it started and left behind
            return os.waitstatus_to_exitcode(status)
        if 0 in ready and not os.read(0, 512):  # the owner closed the pipe, or is gone
            return _stop(pid, float(grace), wakeup)


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.exit(code if 0 <= code < 256 else 128 - code)
