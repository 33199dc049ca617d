"""`colonyctl`'s commands, one module per noun: cluster, node-pool, node, operation, colony,
workspace, class (workspace classes), credentials (`kubeconfig`, `token`), catalog, auth (remote
mode through the HTTP API), apikey (the API's keys, operator side), sim and dev (`make run`'s
state); `apply -f` (every manifest kind) in `apply.py`.

Each module's top level imports only Typer, the standard library and `starter.options`: the parser
is built from these at every start, so `colonyctl --help` and a refused flag stay fast. Models,
Temporal, httpx, the Kubernetes client and rich are imported inside the command that needs them.

A module with a `GROUP` is one noun's commands: `starter.app` adds its `app` under that noun,
found where it is (a new entity's commands need no line elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Group:
    """How `colonyctl` shows one module's commands."""

    noun: str
    """The word after `colonyctl` (`node-pool`)."""
    rank: int
    """Where `colonyctl --help` lists it: by rank, then by noun."""
    operations: bool = False
    """Its commands change entities (their help lists the exit codes)."""
