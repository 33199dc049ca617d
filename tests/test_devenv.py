"""`make run`'s metrics ports (`starter.devenv.metrics_ports`): one port per process, checked before
anything starts. (The processes serving them are scraped in `tests/test_observability.py`.)"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator

import pytest

from activities.settings import (
    METRICS_PORT_ENV,
    WATCHER_METRICS_PORT_ENV,
    ColonySettings,
    SettingsError,
)
from starter.devenv import MetricsPorts, metrics_ports


@pytest.fixture
def taken() -> Iterator[int]:
    """A port something listens on, for as long as the test runs."""
    with socket.socket() as listener:
        listener.bind(("0.0.0.0", 0))
        listener.listen()
        yield int(listener.getsockname()[1])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        return int(probe.getsockname()[1])


def test_without_a_port_nothing_is_served() -> None:
    environ: dict[str, str] = {}
    ports = metrics_ports(environ)
    assert ports == MetricsPorts(worker=None, watcher=None)
    assert environ == {}
    assert "off" in ports.banner()


def test_the_watcher_gets_the_first_free_port_after_the_workers() -> None:
    worker = free_port()
    environ = {METRICS_PORT_ENV: str(worker)}
    ports = metrics_ports(environ)
    assert ports.worker == worker
    assert ports.watcher is not None
    assert ports.watcher > worker
    # The watcher process reads it from the environment it inherits.
    assert environ[WATCHER_METRICS_PORT_ENV] == str(ports.watcher)
    assert str(ports.watcher) in ports.banner()


def test_a_taken_port_after_the_workers_is_skipped() -> None:
    # Find a free port whose successor can be held by a listener of the test's.
    for _ in range(50):
        worker = free_port()
        with socket.socket() as listener:
            try:
                listener.bind(("0.0.0.0", worker + 1))
            except OSError:
                continue
            listener.listen()
            ports = metrics_ports({METRICS_PORT_ENV: str(worker)})
            assert ports.watcher is not None
            assert ports.watcher > worker + 1
            return
    pytest.fail("no free pair of ports found")


def test_an_explicit_watcher_port_is_kept() -> None:
    worker, watcher = free_port(), free_port()
    environ = {METRICS_PORT_ENV: str(worker), WATCHER_METRICS_PORT_ENV: str(watcher)}
    assert metrics_ports(environ) == MetricsPorts(worker=worker, watcher=watcher)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        pytest.param(
            {METRICS_PORT_ENV: "19464", WATCHER_METRICS_PORT_ENV: "19464"},
            f"{WATCHER_METRICS_PORT_ENV} must differ from {METRICS_PORT_ENV} (19464)",
            id="same-port-twice",
        ),
        pytest.param(
            {METRICS_PORT_ENV: "nineteen"},
            f"{METRICS_PORT_ENV}: 'nineteen' is not a port number (0-65535)",
            id="not-a-number",
        ),
        pytest.param(
            {METRICS_PORT_ENV: "19464", WATCHER_METRICS_PORT_ENV: "70000"},
            f"{WATCHER_METRICS_PORT_ENV}: '70000' is not a port number (0-65535)",
            id="watcher-out-of-range",
        ),
    ],
)
def test_refused_before_anything_starts(environ: dict[str, str], message: str) -> None:
    with pytest.raises(SystemExit, match=re.escape(message)):
        metrics_ports(environ)


@pytest.mark.parametrize("variable", [METRICS_PORT_ENV, WATCHER_METRICS_PORT_ENV])
def test_a_port_in_use_is_named(taken: int, variable: str) -> None:
    environ = {METRICS_PORT_ENV: str(free_port()), variable: str(taken)}
    with pytest.raises(SystemExit, match=f"{variable}: port {taken} is already in use"):
        metrics_ports(environ)


def test_each_process_reads_its_own_setting() -> None:
    settings = ColonySettings.from_env({METRICS_PORT_ENV: "9464", WATCHER_METRICS_PORT_ENV: "9465"})
    assert (settings.metrics_port, settings.watcher_metrics_port) == (9464, 9465)
    assert ColonySettings.from_env({METRICS_PORT_ENV: "9464"}).watcher_metrics_port is None
    with pytest.raises(SettingsError, match=WATCHER_METRICS_PORT_ENV):
        ColonySettings.from_env({WATCHER_METRICS_PORT_ENV: "-1"})
