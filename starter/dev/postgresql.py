"""A local PostgreSQL server for the production-shaped stacks (`make stack`, the reliability
suite's, the benchmarks'): Debian's packages, a data directory made by `initdb`, and one `postgres`
process on a loopback port, started and stopped by its caller.

- **Installed when missing**: `ensure_installed(15)` finds `/usr/lib/postgresql/15/bin`; on a
  fresh machine (CI) it installs `postgresql-<major>` with apt-get when it runs as root, with
  Debian's automatic `main` cluster turned off first (nothing of ours would stop it), under a file
  lock so test processes started side by side install once.
- **Never as root**: `initdb` and `postgres` refuse to run as root. As root, they run as the
  `postgres` system user the package creates, and the data directory is made its own; it must be
  reachable by that user, so a data directory under a folder only root may enter (pytest's
  temporary folders) is refused with a line saying so (`data_directory_for` picks one that works).
- **Loopback TCP only**: `listen_addresses=127.0.0.1`, no Unix socket (no folder of the system's
  to write to, no clash between servers side by side); the superuser and its password are
  docker-compose.yml's `POSTGRES_USER` / `POSTGRES_PASSWORD`, checked with scram-sha-256 as the
  `postgres` image does.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGES_ROOT = Path("/usr/lib/postgresql")
SERVER_USER = "postgres"
"""The system user the Debian package creates, which runs the server when we are root."""
INSTALL_LOCK = Path(tempfile.gettempdir()) / "colony-postgresql-install.lock"
CREATECLUSTER_CONF = Path("/etc/postgresql-common/createcluster.conf")
APT_ENV = {"DEBIAN_FRONTEND": "noninteractive"}


class PostgresError(Exception):
    """PostgreSQL cannot be installed or set up here; the message is one line saying why."""


def bin_dir(major: int) -> Path:
    return PACKAGES_ROOT / str(major) / "bin"


def installed(major: int) -> bool:
    return (bin_dir(major) / "postgres").is_file()


def ensure_installed(major: int) -> Path:
    """The folder of PostgreSQL `major`'s programs, installed with apt-get first when missing.

    Raises:
        PostgresError: missing, and this process is not root (the line names the command).
    """
    if installed(major):
        return bin_dir(major)
    if os.geteuid() != 0:
        raise PostgresError(
            f"PostgreSQL {major} is not installed ({bin_dir(major)} is missing): "
            f"sudo apt-get install postgresql-{major}"
        )
    with _locked(INSTALL_LOCK):
        if not installed(major):
            _apt_install(major)
    if not installed(major):
        raise PostgresError(f"apt-get installed postgresql-{major}, but {bin_dir(major)} is empty")
    return bin_dir(major)


def _apt_install(major: int) -> None:
    env = {**os.environ, **APT_ENV}

    def apt(*args: str) -> None:
        done = subprocess.run(["apt-get", *args], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
            raise PostgresError(f"apt-get {' '.join(args)} failed:\n{tail}")

    apt("update", "-q")
    apt("install", "-y", "-q", "--no-install-recommends", "postgresql-common")
    # The package would create and start a `main` cluster on 5432 that nothing of ours stops.
    conf = CREATECLUSTER_CONF.read_text() if CREATECLUSTER_CONF.exists() else ""
    if "create_main_cluster = false" not in conf:
        CREATECLUSTER_CONF.write_text(conf + "\ncreate_main_cluster = false\n")
    apt("install", "-y", "-q", "--no-install-recommends", f"postgresql-{major}")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass(frozen=True)
class ServerUser:
    """Who runs initdb and postgres: this process's user, or `postgres` when we are root."""

    name: str | None
    """None: this process's own user."""
    uid: int
    gid: int

    @classmethod
    def for_this_process(cls) -> ServerUser:
        if os.geteuid() != 0:
            return cls(None, os.geteuid(), os.getegid())
        try:
            entry = pwd.getpwnam(SERVER_USER)
        except KeyError:
            raise PostgresError(
                f"running as root, PostgreSQL needs the system user {SERVER_USER!r} "
                "(the Debian package creates it)"
            ) from None
        return cls(SERVER_USER, entry.pw_uid, entry.pw_gid)

    def process_identity(self) -> dict[str, object]:
        """What `subprocess` needs to run a program as this user (nothing for our own)."""
        if self.name is None:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def can_reach(self, path: Path) -> bool:
        """Whether this user may enter every folder above `path` (and `path`, if it exists)."""
        if self.name is None:
            return True
        for folder in [*reversed(path.parents), path]:
            if not folder.exists():
                break
            info = folder.stat()
            if info.st_uid == self.uid:
                bits = stat.S_IXUSR
            elif info.st_gid == self.gid:
                bits = stat.S_IXGRP
            else:
                bits = stat.S_IXOTH
            if not info.st_mode & bits:
                return False
        return True


def data_directory_for(preferred: Path, user: ServerUser) -> tuple[Path, bool]:
    """`preferred` when the server's user can reach it, else a new folder in the system's
    temporary directory; and whether that folder is a temporary one (the caller removes it)."""
    if user.can_reach(preferred.parent):
        return preferred, False
    folder = Path(tempfile.mkdtemp(prefix="colony-postgresql-"))
    os.chown(folder, user.uid, user.gid)  # made 0700 for us: the server's user must enter it
    return folder / "data", True


@dataclass(frozen=True)
class LocalPostgres:
    """One local server: its programs, data directory, port, superuser, and who runs it."""

    bin: Path
    data: Path
    port: int
    superuser: str
    password: str
    settings: tuple[str, ...] = ()
    """`-c name=value` settings beyond ours (docker-compose.yml's postgresql command)."""
    user: ServerUser = ServerUser(None, 0, 0)

    @property
    def initialized(self) -> bool:
        return (self.data / "PG_VERSION").exists()

    def initdb(self) -> None:
        """A new cluster in `data` (which must not hold one), its superuser with its password."""
        self.data.mkdir(parents=True, exist_ok=True)
        os.chmod(self.data, 0o700)
        os.chown(self.data, self.user.uid, self.user.gid)
        with tempfile.NamedTemporaryFile("w", delete=False, prefix="colony-pw-") as secret:
            secret.write(self.password + "\n")
        os.chown(secret.name, self.user.uid, self.user.gid)
        try:
            done = subprocess.run(
                [
                    str(self.bin / "initdb"), "-D", str(self.data), "-U", self.superuser,
                    f"--pwfile={secret.name}", "--auth=scram-sha-256", "-E", "UTF8",
                    "--locale=C.UTF-8", "--no-instructions",
                ],
                capture_output=True, text=True, cwd="/", env=self._env(),
                **self.user.process_identity(),  # type: ignore[call-overload]
            )  # fmt: skip
        finally:
            os.unlink(secret.name)
        if done.returncode != 0:
            raise PostgresError(f"initdb {self.data} failed: {done.stderr.strip()}")

    def argv(self) -> list[str]:
        """The server's command line: loopback TCP on `port`, no Unix socket."""
        argv = [
            str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port),
            "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
        ]  # fmt: skip
        for setting in self.settings:
            argv += ["-c", setting]
        return argv

    def ready(self) -> bool:
        """Whether the server accepts connections (`pg_isready`)."""
        done = subprocess.run(
            [str(self.bin / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)],
            capture_output=True,
            env=self._env(),
        )
        return done.returncode == 0

    def _env(self) -> dict[str, str]:
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"}

    def remove(self) -> None:
        shutil.rmtree(self.data, ignore_errors=True)
