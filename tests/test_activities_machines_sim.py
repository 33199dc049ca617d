"""A template pool's activities against the simulated world: a cluster of k0rdent's
`aws-standalone-cp` template, its config checked against the template's own schema, its
MachineDeployment sized through `workersNumber`, its Machines marked and waited on
(`activities.management.machines`).

The sim's cloud templates carry k0rdent's real values schemas, read at test time from
`../shared/k0rdent-templates/` (skipped when absent).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.management.cluster_deployments import ClusterDeploymentActivities
from activities.management.machines import MachineActivities
from models.activity_api import (
    DELETE_MACHINE_ANNOTATION,
    PRE_DRAIN_HOOK,
    AwaitMachinesRequest,
    AwaitMachinesResult,
    CheckClusterPrerequisitesRequest,
    CreateClusterDeploymentRequest,
    MarkMachinesRequest,
    ScaleMachineDeploymentRequest,
)
from models.cluster import POD_CIDR, SERVICE_CIDR
from models.errors import ErrorType
from sim.cloud import load_cloud_templates
from sim.world import SimWorld
from tests.helpers import eventually, unique
from tests.simenv import (
    NAMESPACE,
    call,
    close_client,
    deployment_status,
    management_api,
    started_world,
)

AWS = "aws-standalone-cp-1-0-43"
AWS_CREDENTIAL = "aws-credential"

pytestmark = pytest.mark.slow


def aws_config(workers: int) -> dict[str, Any]:
    return {
        "controlPlaneNumber": 1,
        "workersNumber": workers,
        "region": "eu-central-1",
        "clusterIdentity": {"name": "aws-cluster-identity", "namespace": NAMESPACE},
        "worker": {"instanceType": "g6e.xlarge", "iamInstanceProfile": "nodes"},
    }


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SimWorld]:
    async with started_world(tmp_path_factory.mktemp("sim")) as world:
        assert isinstance(world, SimWorld)
        if not load_cloud_templates(world.config.k0rdent_templates):
            pytest.skip("k0rdent's template values not found (COLONY_K0RDENT_TEMPLATES)")
        yield world


@pytest.fixture(scope="module")
def mgmt(world: SimWorld) -> Iterator[client.ApiClient]:
    api = management_api(world)
    yield api
    close_client(api)


@pytest.fixture
def deployments(mgmt: client.ApiClient) -> ClusterDeploymentActivities:
    return ClusterDeploymentActivities(mgmt)


@pytest.fixture
def machines(mgmt: client.ApiClient) -> MachineActivities:
    return MachineActivities(mgmt)


async def run(fn: Any, request: Any) -> Any:
    return await ActivityEnvironment().run(fn, request)


def soon(seconds: float = 30) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


async def create_aws(deployments: ClusterDeploymentActivities, workers: int) -> tuple[str, str]:
    """A ClusterDeployment of `aws-standalone-cp` as the cluster workflow creates it; (name,
    owner) once Ready."""
    name = unique("aws")
    owner = f"cluster/{name}/run-1"
    await run(
        deployments.create_cluster_deployment,
        CreateClusterDeploymentRequest(
            namespace=NAMESPACE,
            name=name,
            template=AWS,
            credential=AWS_CREDENTIAL,
            workflow_id=f"cluster/{name}",
            owner=owner,
            kubernetes_version="v1.37.1",
            pod_cidr=POD_CIDR,
            service_cidr=SERVICE_CIDR,
            deployment_spec={
                "template": AWS,
                "credential": AWS_CREDENTIAL,
                "config": aws_config(workers),
            },
        ),
    )
    await eventually(
        lambda: deployment_status(deployments, name),
        until=lambda status: status.ready,
        what=f"{name} Ready",
    )
    return name, owner


async def settled(machines: MachineActivities, name: str, count: int, **more: Any) -> Any:
    """Call the wait again with what it saw, as the workflow does, until it settles."""
    deadline = soon()
    known: list[Any] = []
    while True:
        found: AwaitMachinesResult = await run(
            machines.await_machines,
            AwaitMachinesRequest(
                namespace=NAMESPACE, cluster=name, count=count, deadline=deadline, known=known,
                **more,
            ),
        )  # fmt: skip
        if found.settled or found.deadline_passed:
            assert found.settled, found
            return found
        known = found.machines


async def test_config_is_checked_against_the_templates_own_schema(
    deployments: ClusterDeploymentActivities,
) -> None:
    def check(config: dict[str, Any]) -> CheckClusterPrerequisitesRequest:
        return CheckClusterPrerequisitesRequest(
            namespace=NAMESPACE, template=AWS, credential=AWS_CREDENTIAL, config=config
        )

    fine = await run(deployments.check_cluster_prerequisites, check(aws_config(2)))
    assert fine.config_problems == []
    assert fine.template_pool is not None
    assert (fine.template_pool.instance_type, fine.template_pool.count) == ("g6e.xlarge", 2)

    refused = await run(
        deployments.check_cluster_prerequisites, check({**aws_config(2), "workersNumber": -3})
    )
    assert refused.config_problems == ["config.workersNumber: -3 is less than the minimum of 0"]


async def test_a_pool_is_sized_and_its_machines_marked(
    deployments: ClusterDeploymentActivities, machines: MachineActivities
) -> None:
    name, owner = await create_aws(deployments, 2)
    other, _ = await create_aws(deployments, 1)
    first = await settled(machines, name, 2)
    assert all(m.ready and m.node_name for m in first.machines)

    def scale(count: int, expected: int, **more: Any) -> ScaleMachineDeploymentRequest:
        return ScaleMachineDeploymentRequest(
            namespace=NAMESPACE, name=name, owner=owner, count=count, expected=expected, **more
        )

    grown = await run(machines.scale_machine_deployment, scale(3, 2))
    assert (grown.found, grown.written) == (2, True)
    again = await run(machines.scale_machine_deployment, scale(3, 2))
    assert (again.found, again.written) == (3, False)  # a retry changes nothing
    three = await settled(machines, name, 3)

    victim = three.machines[0].name
    other_machine = (await settled(machines, other, 1)).machines[0].name
    marked = await run(
        machines.mark_machines,
        MarkMachinesRequest(
            namespace=NAMESPACE, cluster=name, machines=[victim, other_machine], mark=True
        ),
    )
    assert marked.changed == [victim]
    assert marked.missing == [other_machine]  # another cluster's Machine is never touched
    found = (await settled(machines, name, 3)).machines
    assert [m.name for m in found if m.marked] == [victim]

    lowered = await run(machines.scale_machine_deployment, scale(2, 3, only_lower=True))
    assert lowered.written
    held = await run(
        machines.await_machines,
        AwaitMachinesRequest(
            namespace=NAMESPACE, cluster=name, count=2, gone=[victim], deadline=soon(0.5),
            min_interval_seconds=1.0,
        ),
    )  # fmt: skip
    assert held.deadline_passed  # the hook holds it
    assert [m.name for m in held.machines if m.deleting] == [victim]
    await run(
        machines.mark_machines,
        MarkMachinesRequest(
            namespace=NAMESPACE, cluster=name, machines=[victim], mark=False, hook_only=True
        ),
    )
    after = await settled(machines, name, 2, gone=[victim])
    assert victim not in {m.name for m in after.machines}
    assert {m.name for m in after.machines} == {m.name for m in three.machines[1:]}
    # A later, larger lower never raises it back.
    not_raised = await run(machines.scale_machine_deployment, scale(3, 2, only_lower=True))
    assert not not_raised.written


async def test_workers_changed_outside_colony_are_reported_not_fought(
    deployments: ClusterDeploymentActivities, machines: MachineActivities, mgmt: client.ApiClient
) -> None:
    name, owner = await create_aws(deployments, 1)
    custom = client.CustomObjectsApi(mgmt)
    await call(
        custom.patch_namespaced_custom_object,
        "k0rdent.mirantis.com", "v1beta1", NAMESPACE, "clusterdeployments", name,
        {"spec": {"config": {"workersNumber": 4}}},
    )  # fmt: skip
    with pytest.raises(ApplicationError) as caught:
        await run(
            machines.scale_machine_deployment,
            ScaleMachineDeploymentRequest(
                namespace=NAMESPACE, name=name, owner=owner, count=2, expected=1
            ),
        )
    assert caught.value.type == ErrorType.WORKERS_CHANGED_OUTSIDE
    assert caught.value.non_retryable
    assert "is 4, not the 1 Colony set" in caught.value.message
    obj = await call(
        custom.get_namespaced_custom_object,
        "k0rdent.mirantis.com", "v1beta1", NAMESPACE, "clusterdeployments", name,
    )  # fmt: skip
    assert obj["spec"]["config"]["workersNumber"] == 4


async def test_an_unmark_takes_off_both_marks(
    deployments: ClusterDeploymentActivities, machines: MachineActivities, mgmt: client.ApiClient
) -> None:
    name, _ = await create_aws(deployments, 1)
    machine = (await settled(machines, name, 1)).machines[0].name
    request = MarkMachinesRequest(namespace=NAMESPACE, cluster=name, machines=[machine], mark=True)
    await run(machines.mark_machines, request)
    await run(machines.mark_machines, request.model_copy(update={"mark": False}))
    obj = await call(
        client.CustomObjectsApi(mgmt).get_namespaced_custom_object,
        "cluster.x-k8s.io", "v1beta2", NAMESPACE, "machines", machine,
    )  # fmt: skip
    annotations = obj["metadata"].get("annotations") or {}
    assert PRE_DRAIN_HOOK not in annotations
    assert DELETE_MACHINE_ANNOTATION not in annotations
