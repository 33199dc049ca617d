"""The host provider's error bodies, as both its callers read them: the activities (which turn them
into domain errors, `activities.errors`) and the catalog client (`clients.provider`)."""

from __future__ import annotations

from typing import Any

import httpx


def http_error_body(response: httpx.Response) -> dict[str, Any]:
    """The `error` object of a host-provider error body ({} when it has none)."""
    try:
        body = response.json()
    except ValueError:
        return {}
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else {}
