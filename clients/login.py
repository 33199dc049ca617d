"""Where `colonyctl auth login` keeps the HTTP API's URL and key, and whether `colonyctl` runs in
remote mode (a login exists) or talks to Temporal directly (none).

The file is `$COLONY_CONFIG_DIR/login`, else `$XDG_CONFIG_HOME/colony/login`, else
`~/.config/colony/login`: `url=...` and `key=...` lines, mode 0600 in a 0700 directory, written
atomically. Read by `starter.backend` (which client the commands use), `starter.token_cache` (the
exec plugin's fast path keys its cache by the API URL) and `clients.http`.

Standard library only, and only `os`: the exec plugin's cache hit imports this (see
`starter.token_cache` for why every import there counts), so the format is not JSON.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

CONFIG_DIR_ENV = "COLONY_CONFIG_DIR"
LOGIN_FILE = "login"


def user_dir(env: Mapping[str, str], own: str, xdg: str, under_home: str) -> str:
    """Where `colonyctl` keeps a kind of file of this user's: `$<own>`, else `$<xdg>/colony`, else
    `~/<under_home>/colony` (the XDG base directories)."""
    if env.get(own):
        return env[own]
    home = env.get("HOME") or os.path.expanduser("~")
    return os.path.join(env.get(xdg) or os.path.join(home, under_home), "colony")


def config_dir(env: Mapping[str, str]) -> str:
    """$COLONY_CONFIG_DIR, $XDG_CONFIG_HOME/colony or ~/.config/colony."""
    return user_dir(env, CONFIG_DIR_ENV, "XDG_CONFIG_HOME", ".config")


def login_path(env: Mapping[str, str]) -> str:
    return os.path.join(config_dir(env), LOGIN_FILE)


def read_login(env: Mapping[str, str]) -> tuple[str, str] | None:
    """(url, key) of the stored login; None when there is none (or it is unreadable)."""
    try:
        with open(login_path(env), encoding="utf-8") as stored:
            lines = stored.read().splitlines()
    except (OSError, ValueError):
        return None
    entry = dict(line.partition("=")[::2] for line in lines)
    url, key = entry.get("url", ""), entry.get("key", "")
    return (url, key) if url and key else None


def write_login(env: Mapping[str, str], url: str, key: str) -> str:
    """Store the login (replacing any), readable by its owner only; the file's path."""
    if any(c in value for value in (url, key) for c in "\r\n"):
        raise ValueError("a login value holds a line break")
    path = login_path(env)
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    temporary = os.path.join(directory, f".{LOGIN_FILE}.{os.getpid()}.tmp")
    if os.path.lexists(temporary):
        os.unlink(temporary)
    # Created 0600 before a byte is written, then renamed over the old one: the key is never
    # readable by others, even briefly.
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(f"url={url}\nkey={key}\n")
        os.replace(temporary, path)
    except BaseException:
        if os.path.lexists(temporary):
            os.unlink(temporary)
        raise
    return path


def remove_login(env: Mapping[str, str]) -> bool:
    """Forget the login; False when there was none."""
    try:
        os.unlink(login_path(env))
    except FileNotFoundError:
        return False
    return True
