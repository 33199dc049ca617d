"""The cluster-lifecycle path end to end on the real world (real Kubernetes control planes:
`sim.real`), in every `make test`: the test of `tests/test_e2e_clusters.py` that walks a cluster's
whole life (create, kubectl through `colonyctl kubeconfig`, scale up, a DaemonSet and a
PodDisruptionBudget holding a drain, scale down, a node deleted without a drain, delete, the name
reused), on a real management cluster and real child control planes with KWOK nodes.

The whole suite runs on the real world with `COLONY_WORLD=real pytest tests/test_e2e_clusters.py`;
this module keeps its core path on it whatever `COLONY_WORLD` says. The components are built on
first use (`components.build`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from temporalio.testing import WorkflowEnvironment

from sim.world import REAL
from tests.test_e2e_clusters import (
    Colony,
    _no_faults,
    colony_in,
    test_cluster_life_create_scale_drain_delete,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.real]

__all__ = ["_no_faults", "test_cluster_life_create_scale_drain_delete"]


@pytest.fixture(scope="module")
async def colony(
    dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Colony]:
    async with colony_in(dev_env, tmp_path_factory, world=REAL) as running:
        yield running
