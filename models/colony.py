"""Colonies: a group of clusters, possibly in several locations (the exalsius `Colony`).

`ColonyWorkflow` (`workflows/colony/workflow.py`, id `colony/[<organization>/]<name>`) takes a
`ColonyWorkflowInput` built from a `models.manifests.ColonySpec` (an exalsius
`infra.exalsius.ai/v1` Colony or Colony's own form), runs one `ClusterWorkflow` per entry (its
cluster named `<colony>--<clusterName>`, of the colony's organization: `models.identity`), hears
each cluster's `ClusterReport` by signal, and answers its `status` query with a `ColonyStatus`.

A colony belongs to an organization as a cluster does: the HTTP API sets `ColonySpec.organization`
from the caller's key (empty for the colonies an operator applies through Temporal directly), and
names are unique within an organization, so its id carries the organization as a cluster's does.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field

from models import identity
from models.base import ColonyModel
from models.identity import Entity
from models.manifests import ColonySpec
from models.operations import (
    AcceptedOperation,
    ContinueAsNewPolicy,
    OperationBook,
    OperationRecord,
)
from models.ownership import Owner
from models.purge import Unresponsive
from models.workspace import StatusCondition


def colony_workflow_id(name: str, organization: str = "") -> str:
    """The id of the one workflow that owns colony `name` of `organization`."""
    return identity.entity_workflow_id(Entity.COLONY, organization, name)


def colony_kubeconfigs_secret(name: str, organization: str = "") -> str:
    """The Secret on the management cluster listing the colony's clusters' kubeconfig Secrets."""
    return identity.colony_kubeconfigs_secret_name(organization, name)


class ColonyPhase(StrEnum):
    PROVISIONING = "Provisioning"
    """Some clusters are still being created."""
    READY = "Ready"
    """Every cluster is ready."""
    DEGRADED = "Degraded"
    """At least one cluster failed (the others are not held back)."""
    DELETING = "Deleting"
    DELETED = "Deleted"


class ClusterReport(ColonyModel):
    """From a cluster's workflow to its colony (signal `cluster_report`): where it stands."""

    request_id: str
    cluster: str
    phase: str
    reason: str = ""
    nodes: int = 0
    ready_nodes: int = 0


class GpuOffering(ColonyModel):
    """One kind of GPU a cluster has (exalsius Colony status `gpuInventory`)."""

    model: str
    vendor: str = ""
    resource_name: str = "nvidia.com/gpu"
    total: int = 0
    nodes: int = 0
    node_selector: dict[str, str] = Field(default_factory=dict)


class ColonyClusterStatus(ColonyModel):
    """One cluster of the colony, as it last reported."""

    entry: str
    """The entry's `clusterName`."""
    cluster: str
    """The Colony cluster's name (`<colony>--<clusterName>`)."""
    phase: str = "creating"
    reason: str = ""
    nodes: int = 0
    ready_nodes: int = 0
    gpus: list[GpuOffering] = Field(default_factory=list)


class ColonyCondition(StatusCondition):
    """A condition of the colony (`ClustersReady`)."""


class ApplyColonyRequest(ColonyModel):
    """Bring the colony to this spec: clusters added for new entries, deleted for removed ones."""

    kind: Literal["apply"] = "apply"
    spec: ColonySpec


class DeleteColonyRequest(ColonyModel):
    """Delete every cluster of the colony (and their workspaces), then the colony."""

    kind: Literal["delete"] = "delete"
    reason: str = ""


ColonyOperationRequest = Annotated[
    ApplyColonyRequest | DeleteColonyRequest, Field(discriminator="kind")
]


class ColonyOperation(OperationRecord[ColonyOperationRequest]):
    """One accepted colony operation: queued, running or finished."""

    @property
    def kind(self) -> str:
        return self.request.kind


class ColonyOperationAccepted(AcceptedOperation[str]):
    """What a colony update returns."""


class ColonyState(ColonyModel):
    """Everything `ColonyWorkflow` knows; carried across continue-as-new (lenient)."""

    spec: ColonySpec
    phase: ColonyPhase = ColonyPhase.PROVISIONING
    clusters: list[ColonyClusterStatus] = Field(default_factory=list)
    conditions: list[ColonyCondition] = Field(default_factory=list)
    queue: list[ColonyOperation] = Field(default_factory=list)
    completed: list[ColonyOperation] = Field(default_factory=list)
    book: OperationBook = Field(default_factory=OperationBook)
    secret_written_for: list[str] = Field(default_factory=list)
    """The ready clusters the kubeconfigs Secret lists now."""
    reports_due: list[str] = Field(default_factory=list)
    """Clusters that reported since the colony last followed their reports (read their GPUs,
    rewrote the kubeconfigs Secret): taken between operations."""


class ColonyWorkflowInput(ColonyModel):
    """The input of `ColonyWorkflow`: the manifest, and the state when continuing as new."""

    spec: ColonySpec
    state: ColonyState | None = None
    continue_as_new: ContinueAsNewPolicy = Field(default_factory=ContinueAsNewPolicy)


class ColonyStatus(ColonyModel):
    """What `colonyctl colony get` shows."""

    name: str
    organization: str = ""
    phase: ColonyPhase
    ready_clusters: int
    total_clusters: int
    conditions: list[ColonyCondition] = Field(default_factory=list)
    clusters: list[ColonyClusterStatus] = Field(default_factory=list)
    kubeconfigs_secret: str = ""
    current_operation: ColonyOperation | None = None
    completed_operations: list[ColonyOperation] = Field(default_factory=list)
    unresponsive: Unresponsive | None = None
    """Set when its workflow cannot answer (`models.purge`): the rest is what its marks say."""


class WriteColonyKubeconfigsRequest(ColonyModel):
    """Write (or, with no clusters, delete) the colony's kubeconfigs Secret as the exalsius
    operator keeps one: keyed by ClusterDeployment name, each value a JSON `ObjectReference` to its
    kubeconfig Secret (`kubeconfig_reference`). Only the colony's own (its owner's marks) is
    replaced or deleted."""

    namespace: str
    name: str
    colony: str
    owner: Owner
    clusters: dict[str, str] = Field(default_factory=dict)
    """ClusterDeployment name -> its kubeconfig Secret as `<namespace>/<name>`."""


def kubeconfig_reference(secret: str) -> str:
    """The exalsius operator's value for one cluster of a kubeconfigs Secret: a JSON
    `corev1.ObjectReference` to the kubeconfig Secret `<namespace>/<name>` (`secret`), byte for
    byte what the operator's Go `json.Marshal` writes (its struct's field order, no spaces), so
    a reader that compares values sees the same as from the operator."""
    namespace, _, name = secret.rpartition("/")
    reference = {"kind": "Secret", "namespace": namespace, "name": name, "apiVersion": "v1"}
    return json.dumps(reference, separators=(",", ":"))


class WriteColonyKubeconfigsResult(ColonyModel):
    written: bool
