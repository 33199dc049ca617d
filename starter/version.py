"""`colonyctl --version`'s text, read by the entry point (`starter.cli`, before the command line
is built) and by the command line itself (`starter.app`). Standard library only: the entry point
imports it at start-up."""

from __future__ import annotations


def version_text() -> str:
    """`colonyctl --version`: Colony's version and the Temporal SDK's, from the installed packages'
    metadata (importing temporalio for its version would cost the start-up a second)."""
    from importlib import metadata

    def of(package: str) -> str:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return "unknown"

    return f"Colony {of('colony')} (Temporal Python SDK {of('temporalio')})"
