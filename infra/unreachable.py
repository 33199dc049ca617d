"""How Colony says that Temporal is out of reach, in one line, wherever it is found: `colonyctl`
(`clients.errors`), the HTTP API, the worker and the watcher (`infra.process`).

Standard library only: the CLI's entry module imports it (through `clients.errors`) at start-up.
"""

from __future__ import annotations

import re

_TRANSPORT_MESSAGE = re.compile(r'message: "([^"]+)"')


def transport_reason(cause: BaseException) -> str:
    """Why a connection to Temporal failed, in a few words (`connection refused`, `its name does
    not resolve`, `timed out`; empty when the SDK's error says nothing usable). The SDK raises the
    debug text of a Rust transport error (`tonic::transport::Error(Transport, ConnectError(...))`):
    only its reason is kept."""
    text = str(cause)
    found = _TRANSPORT_MESSAGE.search(text)
    if "dns error" in text:
        return "its name does not resolve"
    if found:
        return f"{found.group(1)[:1].lower()}{found.group(1)[1:]}"
    if "timed out" in text.lower() or "deadline" in text.lower():
        return "timed out"
    return ""


def temporal_unreachable(address: str, cause: BaseException) -> str:
    """`temporal: cannot reach <address>[: <why>]`: the one line every front door and process
    says when Temporal is out of reach."""
    why = transport_reason(cause)
    return f"temporal: cannot reach {address}" + (f": {why}" if why else "")
