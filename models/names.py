"""Rules for the names users choose (clusters, node pools) and for Kubernetes labels and taints.

Pure functions returning the message a user sees, or None when the value is fine, and the field
types that carry the rules every request shares (`OrganizationName`, `ClusterName`): a model
declares `organization: OrganizationName = ""` and validates it the same way as every other
(`models.base.rule`). The HTTP API and the CLI call the functions for path parameters and flags.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from functools import partial
from typing import Annotated

from models.base import rule
from models.identity import DERIVED_MARK

NAME_MAX_LENGTH = 63
"""63: a DNS label, so a name can be part of a hostname or a Kubernetes object name."""

_NAME_CHARS = re.compile(r"^[a-z0-9-]+$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

RESERVED_LABEL_PREFIX = "colony.dev/"
"""Labels and taints under this prefix are Colony's own (node pool, SKU, host), never a user's."""


def name_problem(kind: str, name: str) -> str | None:
    """Why `name` is not a valid cluster or node pool name, or None.

    Args:
        kind: what is being named, as the user knows it ("cluster", "node pool").
        name: the proposed name.
    """
    if not name:
        return f"{kind} name must not be empty"
    if len(name) > NAME_MAX_LENGTH:
        return f"{kind} name '{name}' is {len(name)} characters long; at most {NAME_MAX_LENGTH} are allowed"
    if not _NAME_CHARS.fullmatch(name):
        return f"{kind} name '{name}' may contain only lowercase letters, digits and hyphens"
    if not name[0].isalpha():
        return f"{kind} name '{name}' must start with a letter"
    if name.endswith("-"):
        return f"{kind} name '{name}' must not end with a hyphen"
    return None


def organization_problem(name: str) -> str | None:
    """Why `name` cannot name an organization, or None; empty is the default mode (no
    organization: an operator working through Temporal directly)."""
    return name_problem("organization", name) if name else None


def derived_mark_problem(kind: str, name: str) -> str | None:
    """Why `name` cannot be a name users give: it holds the mark of the names Colony derives
    (`models.identity`), or None."""
    if DERIVED_MARK in name:
        return (
            f"{kind} name '{name}' must not contain '{DERIVED_MARK}': Colony reserves it for the "
            "names it derives (a colony's clusters are <colony>--<clusterName>)"
        )
    return None


OrganizationName = Annotated[str, rule(organization_problem)]
"""The organization a request belongs to (set by the HTTP API from the caller's key)."""
ClusterName = Annotated[str, rule(partial(name_problem, "cluster"))]
"""A Colony cluster, by the name its organization gave it."""


def label_key_problem(key: str) -> str | None:
    """Why `key` is not a valid Kubernetes label (or taint) key, or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return f"label key '{key}' has an empty prefix"
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return f"label key '{key}' has an invalid prefix: it must be a DNS subdomain"
    if not name or len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        return (
            f"label key '{key}' is invalid: the name part must be 1 to 63 characters, "
            "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
        )
    if key.startswith(RESERVED_LABEL_PREFIX):
        return f"label key '{key}' uses the prefix '{RESERVED_LABEL_PREFIX}', which Colony reserves"
    return None


def label_value_problem(key: str, value: str) -> str | None:
    """Why `value` is not a valid Kubernetes label (or taint) value for `key`, or None."""
    if value == "":
        return None
    if len(value) > 63 or not _LABEL_NAME.fullmatch(value):
        return (
            f"label value '{value}' for key '{key}' is invalid: it must be at most 63 characters, "
            "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
        )
    return None


def label_problem(key: str, value: str) -> str | None:
    """Why `key: value` is not a valid Kubernetes label (or taint), or None."""
    return label_key_problem(key) or label_value_problem(key, value)


def labels_problem(labels: Mapping[str, str]) -> str | None:
    """Why a set of labels is not valid (its first bad key or value), or None."""
    return next(
        (problem for key, value in labels.items() if (problem := label_problem(key, value))), None
    )


def domain_problem(field: str, domain: str) -> str | None:
    """Why `domain` cannot be a tenant gateway's domain, or None.

    It becomes a label value (at most 63 characters) and the suffix of workspace hostnames
    (`<workspace>.<domain>`, under a wildcard certificate): a lowercase DNS name of two labels or
    more.
    """
    if not domain:
        return f"{field} must not be empty"
    if len(domain) > 63:
        return f"{field} '{domain}' is {len(domain)} characters long; at most 63 are allowed"
    if "." not in domain or not _DNS_SUBDOMAIN.match(domain):
        return (
            f"{field} '{domain}' must be a DNS name such as 'dos-lab.example': lowercase labels "
            "of letters, digits and '-', separated by dots"
        )
    return None


def shorten_name(name: str, limit: int = NAME_MAX_LENGTH) -> str:
    """`name` if it fits `limit`, else its head and a stable hash of all of it (still unique).

    `wsd-<a very long cluster>-<a very long workspace>` becomes `wsd-<head>-<8 hex digits>`:
    the same input always gives the same name, so retries and restarts find their objects.
    """
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    head = name[: limit - len(digest) - 1].rstrip("-.")
    return f"{head}-{digest}"


_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[tuple[int, int, str], ...]:
    """A sort key that orders names as people count: `burst-2` before `burst-10`.

    Runs of digits compare by their value (then by their text, so `a-01` and `a-1` keep one
    order), everything else by its text.
    """
    return tuple(
        (1, int(part), part) if part.isdigit() else (0, 0, part)
        for part in _DIGITS.split(name)
        if part
    )
