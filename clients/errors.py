"""The errors `colonyctl` and the HTTP API report, and the exit code each one means.

The entity clients (`clients`) raise these typed domain errors, each transport mapping
what it meets once (`clients.temporal.failure`, `clients.http.error_of`); the CLI
prints one line (`error: <message>`) and exits with the error's `exit_code`, and the HTTP API
(`api.errors`) maps the same classes to HTTP statuses (which the HTTP transport maps back). The
exit code and the status are decided by the error's type, never by its text.

Standard library only: the CLI's entry module imports this at start-up.
"""

from __future__ import annotations

from enum import IntEnum

from infra import unreachable


class ExitCode(IntEnum):
    """What `colonyctl` exits with; scripts may rely on these."""

    OK = 0
    FAILED = 1
    """The operation failed, or could not be carried out (Temporal or an API unreachable)."""
    USAGE = 2
    """The request was invalid or refused before anything started."""
    NOT_FOUND = 3
    """The cluster, node pool, node, operation or location does not exist."""


class ColonyError(Exception):
    """An error reported to the user as one line; `message` is `<field>: <rule>` or a sentence."""

    exit_code = ExitCode.FAILED

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequestError(ColonyError):
    """Refused before anything started: bad input, a rule the request breaks, a validator's no."""

    exit_code = ExitCode.USAGE


class ConflictError(InvalidRequestError):
    """Refused because of the state things are in, not the request's shape: a name taken, or an
    operation the cluster cannot accept now (being created or deleted, a pool that exists). The
    CLI exits 2 as for any refusal; the API answers 409."""


class QuotaExceededError(ConflictError):
    """Refused because the organization would exceed a quota (`models.quota`): the message names
    the quota, its use and its limit. The CLI exits 2; the API answers 409 `quota_exceeded`."""


class NotFoundError(ColonyError):
    """The cluster (or pool, node, operation, location) the request names does not exist."""

    exit_code = ExitCode.NOT_FOUND


class OperationFailedError(ColonyError):
    """An accepted operation ended failed or cancelled, or could not be followed to its end."""


class UnavailableError(ColonyError):
    """Temporal or an API could not be reached or answered with a server error."""


TEMPORAL_HINT = "set TEMPORAL_ADDRESS, or start it with make run"
"""What a `colonyctl` user can do when Temporal is out of reach."""


def temporal_unreachable(address: str, cause: BaseException, *, hint: str = "") -> UnavailableError:
    """Temporal could not be reached, as one line: `temporal: cannot reach <address>: <why>
    (<hint>)` (`infra.unreachable.temporal_unreachable`, which the worker and the watcher say too;
    the SDK's error stays the exception's cause). Mapped here once, for `colonyctl`
    (`clients.temporal.connect`, with `TEMPORAL_HINT`) and the HTTP API (`api.context`,
    whose callers cannot change its settings: no hint).
    """
    line = unreachable.temporal_unreachable(address, cause)
    return UnavailableError(line + (f" ({hint})" if hint else ""))
