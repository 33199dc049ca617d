"""`infra.ports`: the ports the test stacks and benchmarks give their servers are never ones the
kernel may hand to a program asking for any free port, and never picked twice in one test run."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from infra import ports


def test_a_pick_lies_below_the_ephemeral_range_and_is_free(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    picked = [ports.free_port() for _ in range(50)]

    assert len(set(picked)) == len(picked)
    assert all(port in ports.pick_range("gw1", 2, ports.ephemeral_start()) for port in picked)
    assert max(picked) < ports.ephemeral_start()
    with socket.socket() as server:
        server.bind(("0.0.0.0", picked[-1]))  # free when handed out


def test_the_ephemeral_range_is_the_kernels(tmp_path: Path) -> None:
    setting = tmp_path / "ip_local_port_range"
    setting.write_text("40000\t60999\n")
    assert ports.ephemeral_start(setting) == 40_000
    assert ports.ephemeral_start(tmp_path / "absent") == ports.LINUX_EPHEMERAL_START
    if ports.EPHEMERAL_RANGE_FILE.exists():
        low = int(ports.EPHEMERAL_RANGE_FILE.read_text().split()[0])
        assert ports.ephemeral_start() == low


@pytest.mark.parametrize("workers", [1, 2, 3, 8])
def test_parallel_workers_pick_from_slices_of_their_own(workers: int) -> None:
    slices = [ports.pick_range(f"gw{index}", workers, 32_768) for index in range(workers)]

    for index, one in enumerate(slices):
        assert len(one) >= 1_000
        assert one.start >= ports.LOWEST
        assert one.stop <= 32_768
        for other in slices[index + 1 :]:
            assert not set(one) & set(other)
    assert ports.pick_range("", 1, 32_768) == range(ports.LOWEST, 32_768)


def test_a_port_someone_holds_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        held = holder.getsockname()[1]
        monkeypatch.setattr(ports, "pick_range", lambda *_: range(held, held + 1))
        with pytest.raises(RuntimeError, match="no free port"):
            ports.free_port()


def test_a_port_is_handed_out_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    port = ports.free_port()
    monkeypatch.setattr(ports, "_handed_out", set())
    monkeypatch.setattr(ports, "RESERVATIONS", tmp_path)
    monkeypatch.setattr(ports, "pick_range", lambda *_: range(port, port + 1))

    assert ports.free_port() == port
    with pytest.raises(RuntimeError, match="no free port"):
        ports.free_port()


def test_a_port_another_process_reserved_is_never_handed_out(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Two test runs side by side pick in the same slices; the first one's pick is not the second's."""
    monkeypatch.setenv("COLONY_PORT_RESERVATIONS", str(tmp_path))
    other = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from infra import ports; print(ports.free_port(), flush=True); input()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout is not None
        reserved = int(other.stdout.readline())
        monkeypatch.setattr(ports, "RESERVATIONS", tmp_path)
        monkeypatch.setattr(ports, "pick_range", lambda *_: range(reserved, reserved + 1))
        with pytest.raises(RuntimeError, match="no free port"):
            ports.free_port()
    finally:
        other.communicate("\n", timeout=30)
    assert ports.free_port() == reserved  # the reservation ends with the process that held it
