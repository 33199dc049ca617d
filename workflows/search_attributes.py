"""Custom search attributes Colony's workflows set, so the Web UI and `colonyctl list` can filter.

Registered by `worker.py`/`starter.devenv` on the dev server and by the test harness.
"""

from temporalio.common import SearchAttributeKey

COLONY_KIND = SearchAttributeKey.for_keyword("ColonyKind")
"""What a workflow is: cluster, workspace, capacity, colony, prereq."""

COLONY_CLUSTER = SearchAttributeKey.for_keyword("ColonyCluster")
"""The cluster name a workflow acts on."""

COLONY_ORGANIZATION = SearchAttributeKey.for_keyword("ColonyOrganization")
"""The organization owning the entity (HTTP API keys); empty for operator-managed ones."""

COLONY_NAME = SearchAttributeKey.for_keyword("ColonyName")
"""The colony a cluster belongs to (and a colony's own name)."""

COLONY_GPU_MODEL = SearchAttributeKey.for_keyword("ColonyGpuModel")
"""The GPU model a workspace asks for (`ColonyPhase = "Waiting" AND ColonyGpuModel = "h100"`)."""

COLONY_PHASE = SearchAttributeKey.for_keyword("ColonyPhase")
"""The entity's current phase (creating, ready, deleting, deleted, failed)."""

ALL = (
    COLONY_KIND,
    COLONY_CLUSTER,
    COLONY_ORGANIZATION,
    COLONY_NAME,
    COLONY_GPU_MODEL,
    COLONY_PHASE,
)
