"""Which client `colonyctl`'s commands talk through: Temporal directly (`starter.client`,
`starter.workspace_client`, `starter.colony_client` and `starter.catalog`), or Colony's HTTP API
(`starter.remote`, `starter.remote_workspaces`, `starter.remote_colonies`) once `colonyctl auth
login` stored a URL and key (`starter.login`).

The commands call `clusters()`, `workspaces()`, `colonies()` and `catalog()` and use what they get
through the protocols below,
which both sides implement with the same signatures (mypy checks the modules against them), so a
command reads the same in both modes. `colonyctl apikey` (operator side) and `colonyctl sim` never
go through the API.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel

from activities.settings import ColonySettings
from models.catalog import LocationStock
from models.cluster import ClusterSpec, ClusterStatus
from models.operations import Operation, OperationAccepted
from models.workspace import WorkspaceSpec, WorkspaceStatus
from models.workspace_api import (
    CatalogStatus,
    PublishWorkspaceClassRequest,
    PublishWorkspaceClassResult,
)
from models.workspace_class import WorkspaceClassSpec
from models.workspace_operations import WorkspaceOperationAccepted
from starter import login

if TYPE_CHECKING:  # importing starter.client costs Temporal's import
    from models.colony import ColonyOperationAccepted, ColonyStatus
    from models.manifests import ColonySpec
    from starter.client import ClusterSummary, Started, WorkflowRef
    from starter.colony_client import AppliedColony, ColonySummary
    from starter.workspace_client import Asker, StartedWorkspace, WorkspaceSummary


class ClusterBackend(Protocol):
    """`starter.client`'s functions, as the commands use them."""

    CHECKS_LOCALLY: bool
    """True when the command must run the catalog checks (`starter.checks`) before sending."""

    async def connect(self, settings: ColonySettings) -> Any: ...

    async def start_cluster(
        self,
        client: Any,
        settings: ColonySettings,
        spec: ClusterSpec,
        *,
        request_id: str | None = ...,
    ) -> Started: ...

    async def query_status(
        self, client: Any, name: str, *, organization: str = ...
    ) -> ClusterStatus: ...

    async def send(
        self,
        client: Any,
        name: str,
        update: str,
        request: BaseModel,
        *,
        request_id: str | None = ...,
        organization: str = ...,
    ) -> OperationAccepted: ...

    async def cancel_operation(
        self,
        client: Any,
        name: str,
        operation_id: str,
        *,
        reason: str = ...,
        request_id: str | None = ...,
        organization: str = ...,
    ) -> Operation: ...

    async def get_operation(
        self, client: Any, name: str, operation_id: str, *, organization: str = ...
    ) -> Operation: ...

    async def list_clusters(
        self, client: Any, *, organization: str | None = ...
    ) -> list[ClusterSummary]: ...

    async def wait_for_operation(
        self,
        client: Any,
        name: str,
        operation_id: str,
        on_status: Callable[[ClusterStatus, Operation | None], None],
        *,
        give_up_after: float | None = ...,
        organization: str = ...,
    ) -> Operation | None: ...

    def watch_status(
        self, client: Any, name: str, *, interval: float = ..., organization: str = ...
    ) -> AsyncIterator[ClusterStatus]: ...

    def operations(self, status: ClusterStatus) -> list[Operation]: ...

    def cluster_workflow(
        self, settings: ColonySettings, client: Any, name: str, organization: str = ...
    ) -> WorkflowRef: ...


class WorkspaceBackend(Protocol):
    """`starter.workspace_client`'s functions, as the `workspace` and `class` commands use them."""

    async def connect(self, settings: ColonySettings) -> Any: ...

    async def catalog(self, client: Any) -> CatalogStatus: ...

    async def get_class(self, client: Any, name: str) -> WorkspaceClassSpec: ...

    async def publish_class(
        self, client: Any, request: PublishWorkspaceClassRequest, *, request_id: str | None = ...
    ) -> PublishWorkspaceClassResult: ...

    async def deploy(
        self,
        client: Any,
        settings: ColonySettings,
        spec: WorkspaceSpec,
        *,
        workspace_class: WorkspaceClassSpec | None = ...,
        ask: Asker | None = ...,
        request_id: str | None = ...,
    ) -> StartedWorkspace: ...

    async def workspace_status(
        self, client: Any, name: str, *, organization: str = ...
    ) -> WorkspaceStatus: ...

    async def send(
        self,
        client: Any,
        name: str,
        update: str,
        request: BaseModel,
        *,
        request_id: str | None = ...,
        organization: str = ...,
    ) -> WorkspaceOperationAccepted: ...

    async def list_workspaces(
        self, client: Any, *, cluster: str | None = ..., organization: str | None = ...
    ) -> list[WorkspaceSummary]: ...

    async def wait_for_workspace(
        self,
        client: Any,
        name: str,
        done: Callable[[WorkspaceStatus], bool],
        on_status: Callable[[WorkspaceStatus], None],
        *,
        give_up_after: float | None = ...,
        organization: str = ...,
    ) -> WorkspaceStatus | None: ...

    def workspace_workflow(
        self, settings: ColonySettings, client: Any, name: str
    ) -> WorkflowRef: ...


class ColonyBackend(Protocol):
    """`starter.colony_client`'s functions, as the `colony` commands and `apply -f` use them."""

    async def connect(self, settings: ColonySettings) -> Any: ...

    async def apply_colony(
        self,
        client: Any,
        settings: ColonySettings,
        spec: ColonySpec,
        *,
        request_id: str | None = ...,
    ) -> AppliedColony: ...

    async def colony_status(
        self, client: Any, name: str, *, organization: str = ...
    ) -> ColonyStatus: ...

    async def list_colonies(
        self, client: Any, *, organization: str | None = ...
    ) -> list[ColonySummary]: ...

    async def delete_colony(
        self, client: Any, name: str, *, request_id: str | None = ..., organization: str = ...
    ) -> ColonyOperationAccepted: ...

    def colony_workflow(
        self, settings: ColonySettings, client: Any, name: str, organization: str = ...
    ) -> WorkflowRef: ...


class CatalogBackend(Protocol):
    """`starter.catalog`'s functions, as the commands use them."""

    async def fetch(self, settings: ColonySettings, kind: str) -> list[dict[str, Any]]: ...

    async def stock(self, settings: ColonySettings) -> list[LocationStock]: ...

    async def location_stock(self, settings: ColonySettings, location_id: str) -> LocationStock: ...


def remote() -> bool:
    """True once `colonyctl auth login` stored a login (and until `auth logout`)."""
    return login.read_login(os.environ) is not None


def clusters() -> ClusterBackend:
    """The cluster client of this mode."""
    if remote():
        from starter import remote as through_api

        return through_api
    from starter import client as through_temporal

    return through_temporal


def workspaces() -> WorkspaceBackend:
    """The workspace and class client of this mode."""
    if remote():
        from starter import remote_workspaces as through_api

        return through_api
    from starter import workspace_client as through_temporal

    return through_temporal


def colonies() -> ColonyBackend:
    """The colony client of this mode."""
    if remote():
        from starter import remote_colonies as through_api

        return through_api
    from starter import colony_client as through_temporal

    return through_temporal


def catalog() -> CatalogBackend:
    """The catalog client of this mode."""
    if remote():
        from starter import remote as through_api

        return through_api
    from starter import catalog as from_provider

    return from_provider
