"""The workspace path end to end on the real world (real Kubernetes control planes: `sim.real`),
in every `make test`: the tests of `tests/test_e2e_workspaces.py` that deploy a notebook and reach
it through the `kubectl port-forward` Colony prints (kube-apiserver -> KWOK -> the simulated
app), and a notebook and a dev box behind the tenant gateway (their URLs and SSH port, suspend
and resume), on a real management cluster and real child control planes with KWOK nodes.

The whole suite runs on the real world with
`COLONY_WORLD=real pytest tests/test_e2e_workspaces.py`; this module keeps its core path on it
whatever `COLONY_WORLD` says. The components are built on first use (`components.build`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from temporalio.testing import WorkflowEnvironment

from sim.world import REAL
from tests.test_e2e_workspaces import (
    Colony,
    _no_faults,
    colony_in,
    test_cpu_notebook_runs_and_is_reached_by_port_forward,
    test_tenant_gateway_urls_ssh_port_suspend_and_resume,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.real]

__all__ = [
    "_no_faults",
    "test_cpu_notebook_runs_and_is_reached_by_port_forward",
    "test_tenant_gateway_urls_ssh_port_suspend_and_resume",
]


@pytest.fixture(scope="module")
async def colony(
    dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Colony]:
    async with colony_in(dev_env, tmp_path_factory, world=REAL) as running:
        yield running
