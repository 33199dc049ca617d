"""`colonyctl token`, the kubectl exec plugin: a cluster token from a per-user cache, issued anew
only when needed.

kubectl runs its exec plugin once per kubectl process, so every `kubectl get` used to pay for a new
TokenRequest (2.5-3.2 s). Tokens come from the cluster itself (`clients.credentials`, through the
management cluster) or, in remote mode (`colonyctl auth login`), from Colony's HTTP API
(`clients.clusters.HttpClusters.token`); the cache is keyed by where they came from (`source`). Tokens are now cached per cluster in a file of mode 0600 under
`$COLONY_CACHE_DIR`, else `$XDG_CACHE_HOME/colony`, else `~/.cache/colony`, and handed out until
`RENEW_BEFORE` before they expire, with their real `expirationTimestamp`.

A token the cluster refuses is dropped and renewed, using kubectl's exec-plugin contract
(client-go `plugin/pkg/client/auth/exec`): within one kubectl process the plugin runs again only
when the credential it gave has expired by its `expirationTimestamp` or the server answered 401.
kubectl sets `KUBERNETES_EXEC_INFO` for its plugins; when it is set, the cache records which
process (kubectl's pid and start time) it handed the token to, and the same process asking again
means the token was refused: a new one is issued instead. Without `KUBERNETES_EXEC_INFO` (a person
or a script running `colonyctl token`), a cached token is simply handed out until it is due.

Start-up cost is the point of this module: a cache hit must cost kubectl a few milliseconds, not a
second. So a hit imports only os, sys and time (no Temporal, Typer, rich, pydantic or Kubernetes
client; not even json, datetime, pathlib or tempfile), and the kubeconfig
`colonyctl kubeconfig` writes runs it directly, without `site` and without `runpy` (`python -S -P
-c "import starter.token_cache as t; t.main()" token --cluster C`, `PYTHONPATH` naming where
`starter` lives): importing `site` and the installed packages' .pth hooks alone costs more than
the rest. A miss needs the
Kubernetes client, so without `site` it re-executes itself through the full `colonyctl`
(`starter.cli`), which issues the token (`clients.credentials`) and caches it.
"""

from __future__ import annotations

import os
import sys
import time

from clients.login import read_login, user_dir

# Not `typing.TYPE_CHECKING`: importing typing is one of the costs this module avoids.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

CACHE_DIR_ENV = "COLONY_CACHE_DIR"
EXEC_INFO_ENV = "KUBERNETES_EXEC_INFO"
"""Set by kubectl (client-go) for every exec plugin it runs."""
RENEW_BEFORE = 5 * 60
"""A cached token is renewed 5 minutes before it expires: long enough for a kubectl command that
starts just before to finish with it (tokens live one hour). In seconds."""
EXEC_API_VERSION = "client.authentication.k8s.io/v1"
MANAGEMENT_KUBECONFIG_ENV = "COLONY_MANAGEMENT_KUBECONFIG"
DEFAULT_MANAGEMENT_KUBECONFIG = ".colony/sim/management.kubeconfig"
"""The same default as `infra.config` (a test keeps them equal); importing that module
would import Temporal's env config, which a cache hit must not pay for."""
DEFAULT_NAMESPACE = "kcm-system"
"""k0rdent's namespace, as `models.cluster.DEFAULT_NAMESPACE` (a test keeps them equal)."""
TIMESTAMP = "%Y-%m-%dT%H:%M:%SZ"

FIELDS = (
    "cluster",
    "namespace",
    "management",
    "token",
    "expirationTimestamp",
    "expires",
    "handedTo",
)
"""One cache file: a `name=value` line each (`expires` in Unix seconds). Not JSON: importing the
json module (and the re and enum modules it needs) would be most of a cache hit's cost."""
SAFE_TOKEN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~+/=")
"""Characters of a JWT or an opaque bearer token; a token with others is written by `json`."""

Entry = dict[str, str]


def cache_dir(env: Mapping[str, str]) -> str:
    """Where tokens are cached: $COLONY_CACHE_DIR, $XDG_CACHE_HOME/colony or ~/.cache/colony."""
    return user_dir(env, CACHE_DIR_ENV, "XDG_CACHE_HOME", ".cache")


def management_kubeconfig(env: Mapping[str, str]) -> str:
    """The management cluster's kubeconfig, as an absolute path (part of the cache key)."""
    return os.path.abspath(env.get(MANAGEMENT_KUBECONFIG_ENV) or DEFAULT_MANAGEMENT_KUBECONFIG)


def source(env: Mapping[str, str]) -> str:
    """Where this user's tokens come from, part of the cache key: `api:<url>:<key id>` in remote
    mode (another key may be another organization, whose cluster of the same name is another
    cluster), else the management cluster's kubeconfig path."""
    stored = read_login(env)
    if stored is None:
        return management_kubeconfig(env)
    url, key = stored
    parts = key.split("_")
    return f"api:{url}:{parts[1] if len(parts) == 3 else ''}"


def _fnv1a(text: str) -> int:
    """A stable 32-bit hash (FNV-1a): `hash()` changes per process, hashlib costs an import."""
    value = 0x811C9DC5
    for byte in text.encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def cache_path(env: Mapping[str, str], cluster: str, namespace: str) -> str:
    """One file per cluster of one source (cluster names repeat across management clusters and
    organizations; the file records its source and is ignored when that differs)."""
    management = _fnv1a(source(env))
    return os.path.join(cache_dir(env), "tokens", f"{cluster}.{namespace}.{management:08x}")


def read(path: str, env: Mapping[str, str], cluster: str, namespace: str) -> Entry | None:
    """The cached entry, or None when there is none, it is unreadable or it is another cluster's."""
    try:
        with open(path, encoding="utf-8") as cached:
            lines = cached.read().splitlines()
    except (OSError, ValueError):
        return None
    entry = dict(line.partition("=")[::2] for line in lines)
    wanted = {"cluster": cluster, "namespace": namespace, "management": source(env)}
    if any(entry.get(key) != value for key, value in wanted.items()):
        return None
    if not entry.get("token") or not entry.get("expires", "").isdigit():
        return None
    return entry


def write(path: str, entry: Entry) -> None:
    """Replace the cache file atomically, readable by its owner only (mode 0600, directory 0700).

    The token is written to a file created with mode 0600 and renamed over the old one, so it is
    never readable by others, even briefly, and a reader never sees half a file.
    """
    if any("\n" in value for value in entry.values()):
        raise ValueError("a token cache value holds a line break")
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    temporary = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    if os.path.lexists(temporary):
        os.unlink(temporary)  # left by a killed process whose pid this one reuses
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write("".join(f"{key}={entry.get(key, '')}\n" for key in FIELDS))
        os.replace(temporary, path)
    except BaseException:
        # (not contextlib.suppress: contextlib is among the imports this module avoids)
        if os.path.lexists(temporary):
            os.unlink(temporary)
        raise


def kubectl_caller(env: Mapping[str, str]) -> str:
    """`<pid>:<start time>` of the kubectl process running this plugin; empty outside kubectl.

    The start time (field 22 of /proc/<pid>/stat) tells a reused pid apart; where /proc is
    missing the pid alone is used.
    """
    if EXEC_INFO_ENV not in env:
        return ""
    parent = os.getppid()
    try:
        with open(f"/proc/{parent}/stat", encoding="utf-8") as stat:
            # The fields after the command name, which is in parentheses and may hold spaces.
            started = stat.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        started = ""
    return f"{parent}:{started}"


def usable(entry: Entry, caller: str, now: float) -> bool:
    """True when the cached token may be handed out (see the module docstring)."""
    if int(entry["expires"]) - RENEW_BEFORE <= now:
        return False
    # The same kubectl process asking twice: the token was refused (or kubectl thinks it expired).
    return not (caller and entry.get("handedTo") == caller)


def exec_credential(entry: Entry) -> str:
    """The client.authentication.k8s.io/v1 ExecCredential kubectl reads from the plugin (JSON)."""
    token, expiry = entry["token"], entry["expirationTimestamp"]
    if set(token) <= SAFE_TOKEN and set(expiry) <= SAFE_TOKEN | {":"}:
        # Nothing to escape: the JSON is written directly (see FIELDS for why not with json).
        return (
            f'{{"apiVersion": "{EXEC_API_VERSION}", "kind": "ExecCredential", '
            f'"status": {{"token": "{token}", "expirationTimestamp": "{expiry}"}}}}'
        )
    import json

    return json.dumps(
        {
            "apiVersion": EXEC_API_VERSION,
            "kind": "ExecCredential",
            "status": {"token": token, "expirationTimestamp": expiry},
        }
    )


def cached_credential(
    env: Mapping[str, str], cluster: str, namespace: str, now: float | None = None
) -> str | None:
    """The ExecCredential of the cached token when it may be handed out (recording to whom);
    None when a new token is needed."""
    path = cache_path(env, cluster, namespace)
    entry = read(path, env, cluster, namespace)
    caller = kubectl_caller(env)
    if entry is None or not usable(entry, caller, time.time() if now is None else now):
        return None
    if entry.get("handedTo", "") != caller:
        entry["handedTo"] = caller
        write(path, entry)
    return exec_credential(entry)


def issued_credential(env: Mapping[str, str], cluster: str, namespace: str) -> str:
    """Issue a new token through the cluster (the Kubernetes client: slow), or through the API in
    remote mode; cache it, and return its ExecCredential."""
    from datetime import UTC

    stored = read_login(env)
    if stored is not None:
        from clients.clusters import issue_token as issue_through_api

        token, expiry = issue_through_api(*stored, cluster)
    else:
        from clients.credentials import issue_token

        token, expiry = issue_token(management_kubeconfig(env), cluster, namespace)
    entry = {
        "cluster": cluster,
        "namespace": namespace,
        "management": source(env),
        "token": token,
        "expirationTimestamp": expiry.astimezone(UTC).strftime(TIMESTAMP),
        "expires": str(int(expiry.timestamp())),
        "handedTo": kubectl_caller(env),
    }
    write(cache_path(env, cluster, namespace), entry)
    return exec_credential(entry)


def credential(env: Mapping[str, str], cluster: str, namespace: str) -> str:
    """The ExecCredential to hand out now: the cached token when usable, else a new one."""
    return cached_credential(env, cluster, namespace) or issued_credential(env, cluster, namespace)


def parse_token_argv(argv: Sequence[str]) -> tuple[str, str] | None:
    """(cluster, namespace) of a plain `token --cluster C [--namespace N]`; None for anything
    else (help, a typo), which the full command line then handles and explains."""
    if not argv or argv[0] != "token":
        return None
    options: dict[str, str] = {}
    rest = list(argv[1:])
    while rest:
        flag = rest.pop(0)
        name, equals, value = flag.partition("=")
        if name not in ("--cluster", "--namespace") or name in options:
            return None
        if not equals:
            if not rest:
                return None
            value = rest.pop(0)
        if not value or value.startswith("-"):
            return None
        options[name] = value
    if "--cluster" not in options:
        return None
    return options["--cluster"], options.get("--namespace", DEFAULT_NAMESPACE)


def token_command(argv: Sequence[str], env: Mapping[str, str]) -> int | None:
    """Answer a plain `colonyctl token` from the cache, or issue a token; None when `argv` is not
    one (the full command line handles it). The exit code otherwise."""
    parsed = parse_token_argv(argv)
    if parsed is None:
        return None
    cluster, namespace = parsed
    cached = cached_credential(env, cluster, namespace)
    if cached is not None:
        sys.stdout.write(cached + "\n")
        return 0
    from clients.errors import ColonyError

    try:
        sys.stdout.write(issued_credential(env, cluster, namespace) + "\n")
    except ColonyError as exc:
        sys.stderr.write(f"error: {' '.join(exc.message.split())}\n")
        return int(exc.exit_code)
    return 0


def main() -> None:
    """The exec plugin as the kubeconfig runs it (`python -S -P -c "...; main()" token ...`)."""
    argv = sys.argv[1:]
    parsed = parse_token_argv(argv)
    cached = cached_credential(os.environ, *parsed) if parsed else None
    if cached is not None:
        sys.stdout.write(cached + "\n")
        sys.stdout.flush()
        os._exit(0)
    # A miss (or an unexpected argv): the full colonyctl, with site and its packages.
    python = sys.executable
    os.execv(python, [python, "-m", "starter.cli", *argv])
