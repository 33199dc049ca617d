"""`colonyctl`'s entry point: create, size and delete GPU Kubernetes clusters run by Colony's
workflows (the commands themselves are in `starter/commands/`, assembled in `starter/app.py`).

What this module owns is how a `colonyctl` process starts and ends:

- Start-up is cheap: this module imports the standard library only, and `colonyctl token` (which
  kubectl runs before each of its commands) is answered from the token cache without building the
  command line at all (`starter/token_cache.py`); so is `colonyctl --version`.
- The end is `os._exit` with the documented code (0 ok, 1 failed, 2 refused, 3 not found), after
  stdout and stderr are flushed. A normal interpreter shutdown could kill the process with SIGABRT
  or SIGSEGV after its work was done: the Temporal client's Rust threads may still touch Python
  while it finalizes (temporalio/sdk-python issue 300). Everything a command writes is closed before
  it returns (files are written through context managers), so skipping finalization loses nothing.

Configuration comes from the environment (see `infra.config`): TEMPORAL_ADDRESS (default
127.0.0.1:7233), COLONY_TASK_QUEUE, COLONY_MANAGEMENT_KUBECONFIG, COLONY_HOST_PROVIDER_CONFIG or
COLONY_HOST_PROVIDER_URL/_API_KEY, COLONY_WEB_UI, COLONY_CACHE_DIR (token cache).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from starter.version import version_text

_BOOL_FLAG = re.compile(r"^--(drain|force)=(.*)$")
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """Accept `--drain=false` (the product's spelling) as `--no-drain`, and alike."""
    result: list[str] = []
    for arg in argv:
        match = _BOOL_FLAG.match(arg)
        if match and match.group(2).lower() in _TRUE:
            result.append(f"--{match.group(1)}")
        elif match and match.group(2).lower() in _FALSE:
            result.append(f"--no-{match.group(1)}")
        else:
            result.append(arg)
    return result


def run(argv: Sequence[str]) -> int:
    """Run `colonyctl ARGV` in this process and return its exit code."""
    if list(argv) == ["--version"]:
        sys.stdout.write(version_text() + "\n")
        return 0
    if argv[:1] == ["token"]:
        from starter.token_cache import token_command

        code = token_command(argv, os.environ)
        if code is not None:
            return code
    from starter.app import run as run_app

    return run_app(normalize_argv(argv))


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        # A closed pipe (`colonyctl ... | head`) or stream: nothing more can be said on it.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


def main() -> None:
    """The `colonyctl` console script: run, flush, and leave with the exit code (see above)."""
    code = 1
    try:
        code = run(sys.argv[1:])
    except KeyboardInterrupt:
        code = 130
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        _flush()
        os._exit(code)


def __getattr__(name: str) -> Any:
    # `from starter.cli import app` (tests, Typer's runner) keeps working without this module
    # importing Typer and every command at start-up.
    if name == "app":
        from starter.app import app

        return app
    raise AttributeError(name)


if __name__ == "__main__":
    main()
