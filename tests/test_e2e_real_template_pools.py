"""The template pool's path end to end on the real world (real Kubernetes control planes:
`sim.real`): the test of `tests/test_e2e_template_pools.py` that scales a cloud template's workers
pool up and down, with the sim's Cluster API controller on a real management API server (Cluster
API's objects under the sim's CRDs there, its drain's evictions through the real eviction API) and
KWOK nodes in a real child control plane."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from temporalio.testing import WorkflowEnvironment

from sim.world import REAL
from tests.test_e2e_clusters import Colony
from tests.test_e2e_template_pools import (
    template_colony,
    test_a_cloud_template_pool_scales_and_drains_through_its_machine_deployment,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.real]

__all__ = ["test_a_cloud_template_pool_scales_and_drains_through_its_machine_deployment"]


@pytest.fixture(scope="module")
async def colony(
    dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Colony]:
    async with template_colony(dev_env, tmp_path_factory, REAL) as running:
        yield running
