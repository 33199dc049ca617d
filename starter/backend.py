"""Which transport `colonyctl`'s commands talk through: Temporal directly (the `Temporal*` clients
of `clients`, the operator's view), or Colony's HTTP API (the `Http*` clients) once
`colonyctl auth login` stored a URL and key (`clients.login`), until `auth logout`.

The commands call `clusters()`, `workspaces()`, `classes()`, `colonies()`, `quotas()`,
`catalog()` and `purges()` and use
what they get through the entity's interface (`clients.clusters.Clusters`, ...), so a
command reads the same in both modes. `colonyctl apikey` (operator side) and `colonyctl sim` never
go through the API. Every function reads the settings first, in both modes: an incomplete
configuration is refused (exit 2) before anything is asked of anyone.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

from clients import login
from infra.config import ColonySettings
from starter import session

if TYPE_CHECKING:  # importing the clients costs Temporal's import
    from clients.classes import WorkspaceClasses
    from clients.clusters import Clusters
    from clients.colonies import Colonies
    from clients.http import RemoteClient
    from clients.provider import ProviderCatalog
    from clients.purges import Purges
    from clients.quotas import Quotas
    from clients.temporal import TemporalSession
    from clients.workspaces import Workspaces

C = TypeVar("C")


def remote(env: Mapping[str, str] = os.environ) -> bool:
    """True once `colonyctl auth login` stored a login (and until `auth logout`)."""
    return login.read_login(env) is not None


def pick(
    direct: Callable[[ColonySettings], C],
    through_api: Callable[[RemoteClient], C],
    env: Mapping[str, str] = os.environ,
) -> C:
    """The client of this mode: `through_api` the stored login's API, else `direct` with the
    settings from the environment."""
    from clients.http import RemoteClient

    settings = session.settings()
    stored = login.read_login(env)
    if stored is not None:
        return through_api(RemoteClient(*stored))
    return direct(settings)


def temporal_session(settings: ColonySettings | None = None) -> TemporalSession:
    """The operator's session with Temporal (what `colonyctl` reaches in direct mode)."""
    from clients.temporal import TemporalSession

    return TemporalSession(settings or session.settings())


def clusters() -> Clusters:
    """The cluster client of this mode."""
    from clients.clusters import HttpClusters, TemporalClusters

    return pick(lambda conf: TemporalClusters(temporal_session(conf)), HttpClusters)


def workspaces() -> Workspaces:
    """The workspace client of this mode."""
    from clients.workspaces import HttpWorkspaces, TemporalWorkspaces

    return pick(lambda conf: TemporalWorkspaces(temporal_session(conf)), HttpWorkspaces)


def classes() -> WorkspaceClasses:
    """The workspace class catalog's client of this mode."""
    from clients.classes import HttpClasses, TemporalClasses

    return pick(lambda conf: TemporalClasses(temporal_session(conf)), HttpClasses)


def colonies() -> Colonies:
    """The colony client of this mode."""
    from clients.colonies import HttpColonies, TemporalColonies

    return pick(lambda conf: TemporalColonies(temporal_session(conf)), HttpColonies)


def quotas() -> Quotas:
    """The quota client of this mode (direct: any organization's, the operator's view)."""
    from clients.quotas import HttpQuotas, TemporalQuotas

    return pick(lambda conf: TemporalQuotas(temporal_session(conf)), HttpQuotas)


def catalog() -> ProviderCatalog:
    """The host provider's catalog as this mode reads it."""
    from clients.provider import DirectCatalog, HttpCatalog

    return pick(DirectCatalog, HttpCatalog)


def purges() -> Purges:
    """The purge client of this mode (remote: the operator API, with a key that has Operator
    Purge)."""
    from clients.purges import HttpPurges, TemporalPurges

    return pick(lambda conf: TemporalPurges(temporal_session(conf)), HttpPurges)
