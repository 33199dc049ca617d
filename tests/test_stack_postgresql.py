"""The local PostgreSQL of the production-shaped stacks (`starter.dev.postgresql`): found where
Debian installs it, installed with apt-get when missing (as root, without the package's own
`main` cluster), refused with the command to run when not root, never run as root, reachable
by the user that runs it, serving loopback TCP only.

The apt-get path is exercised against a stand-in for apt-get (the machine's PostgreSQL stays as
it is); `make stack` and the reliability suite run the real one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from starter.dev import postgresql
from starter.dev.postgresql import LocalPostgres, PostgresError, ServerUser, data_directory_for


@pytest.fixture
def packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "usr-lib-postgresql"
    root.mkdir()
    monkeypatch.setattr(postgresql, "PACKAGES_ROOT", root)
    monkeypatch.setattr(postgresql, "INSTALL_LOCK", tmp_path / "install.lock")
    monkeypatch.setattr(postgresql, "CREATECLUSTER_CONF", tmp_path / "createcluster.conf")
    return root


def fake_install(root: Path, major: int) -> None:
    (root / str(major) / "bin").mkdir(parents=True)
    (root / str(major) / "bin" / "postgres").write_text("#!/bin/sh\n")


def test_an_installed_postgresql_is_found_without_apt(
    packages: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_install(packages, 15)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("apt-get ran"))
    assert postgresql.ensure_installed(15) == packages / "15" / "bin"


def test_missing_and_not_root_names_the_command(
    packages: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(PostgresError, match=r"sudo apt-get install postgresql-15"):
        postgresql.ensure_installed(15)


def test_missing_as_root_installs_without_a_main_cluster(
    packages: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[list[str]] = []
    conf = postgresql.CREATECLUSTER_CONF
    conf.write_text("ssl = on\n")

    def apt(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        ran.append(argv)
        assert kwargs["env"]["DEBIAN_FRONTEND"] == "noninteractive"
        if argv[-1] == "postgresql-15":
            # The package's own cluster must be off before the server package is installed.
            assert "create_main_cluster = false" in conf.read_text()
            fake_install(packages, 15)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(subprocess, "run", apt)
    assert postgresql.ensure_installed(15) == packages / "15" / "bin"
    assert [argv[1] for argv in ran] == ["update", "install", "install"]
    assert ran[1][-1] == "postgresql-common"
    assert ran[2][-1] == "postgresql-15"
    assert conf.read_text().startswith("ssl = on\n")


def test_a_failed_apt_get_says_why(packages: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def apt(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 100, "", "E: Unable to locate package")

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(subprocess, "run", apt)
    with pytest.raises(PostgresError, match="apt-get update -q failed:\nE: Unable to locate"):
        postgresql.ensure_installed(15)


def test_the_server_user_cannot_enter_a_folder_only_root_may() -> None:
    base = Path(tempfile.mkdtemp(prefix="colony-test-reach-"))  # under /tmp: anyone may enter
    try:
        os.chmod(base, 0o755)
        private = base / "private"
        private.mkdir()
        os.chmod(private, 0o700)
        stranger = ServerUser("postgres", uid=os.geteuid() + 4242, gid=os.getegid() + 4242)
        assert not stranger.can_reach(private / "data")
        os.chmod(private, 0o711)
        assert stranger.can_reach(private / "data")
        assert ServerUser(None, os.geteuid(), os.getegid()).can_reach(private / "data")
    finally:
        shutil.rmtree(base)


def test_an_unreachable_data_directory_moves_to_one_the_server_user_owns(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    os.chmod(private, 0o700)
    me = ServerUser("me", uid=os.geteuid(), gid=os.getegid())
    stranger = ServerUser("postgres", uid=os.geteuid() + 4242, gid=os.getegid() + 4242)
    assert data_directory_for(private / "data", me) == (private / "data", False)
    if os.geteuid() != 0:
        pytest.skip("handing a folder to another user needs root")
    moved, temporary = data_directory_for(private / "data", stranger)
    try:
        assert temporary
        assert moved.name == "data"
        assert moved.parent.stat().st_uid == stranger.uid
    finally:
        moved.parent.rmdir()


def test_the_server_listens_on_loopback_tcp_only() -> None:
    server = LocalPostgres(
        bin=Path("/usr/lib/postgresql/15/bin"),
        data=Path("/srv/data"),
        port=25432,
        superuser="temporal",
        password="secret",
        settings=("max_connections=200",),
    )
    argv = server.argv()
    assert argv[:5] == ["/usr/lib/postgresql/15/bin/postgres", "-D", "/srv/data", "-p", "25432"]
    settings = [argv[i + 1] for i, word in enumerate(argv) if word == "-c"]
    assert settings == [
        "listen_addresses=127.0.0.1",
        "unix_socket_directories=",
        "max_connections=200",
    ]
    assert "secret" not in " ".join(argv)
