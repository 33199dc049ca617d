"""Creating a cluster: check its ClusterTemplate and Credential, create its ClusterDeployment, wait
for the control plane, then add the create request's pools in parallel.

Called by `ClusterWorkflow` for its first operation. A failure before the control plane is Ready
fails the cluster (its delete removes what was made); a pool that fails after it leaves the
others, and the cluster, as they are: the operation fails naming each failed pool, with one error
type when they share it (HostsUnavailable stays that), and the cluster records what it misses
(`ClusterState.shortfall`), so its status reads `degraded`, with the `NodePoolsReady` condition
and the operation's reason, never `ready` without what it was asked for.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow

from workflows.cluster.context import ClusterContext, human
from workflows.cluster.scale_up import ScaleUp
from workflows.cluster_calls import (
    CHECK_CLUSTER_PREREQUISITES,
    CREATE_CLUSTER_DEPLOYMENT,
    await_cluster_deployment,
)
from workflows.kit.engine import Interrupted, error_type_of, is_failure, reason_of

with workflow.unsafe.imports_passed_through():
    from models.activity_api import (
        AwaitClusterDeploymentRequest,
        AwaitClusterDeploymentResult,
        CheckClusterPrerequisitesRequest,
        Condition,
        CreateClusterDeploymentRequest,
        DeploymentOutcome,
        DeploymentWait,
        KubeconfigRef,
    )
    from models.cluster import (
        KUBERNETES_VERSION,
        POD_CIDR,
        SERVICE_CIDR,
        ClusterPhase,
        PoolShortfall,
        kubeconfig_secret_name,
    )
    from models.errors import ErrorType, permanent
    from models.node_pool import NodePoolStatus, NodeSku, PoolSupply
    from models.operations import Operation


async def create(cluster: ClusterContext, operation: Operation) -> None:
    """Check, create, wait for the control plane, then add the pools (module docstring)."""
    state = cluster.state
    try:
        await _check_prerequisites(cluster)
        await _create_deployment(cluster)
        await _wait_control_plane_ready(cluster)
    except Interrupted as error:
        cluster.set_phase(
            ClusterPhase.FAILED,
            reason_of(error)
            if is_failure(error)
            else "the create was cancelled before the control plane was ready: delete the "
            "cluster to remove what it created",
        )
        state.node_pools = []
        raise
    # By reference only: activities read the Secret; the kubeconfig never enters history.
    state.kubeconfig = KubeconfigRef(
        namespace=cluster.spec.namespace,
        secret_name=kubeconfig_secret_name(cluster.deployment),
    )
    cluster.set_phase(ClusterPhase.READY)
    await _add_pools(cluster, operation)


async def _add_pools(cluster: ClusterContext, operation: Operation) -> None:
    pools = [pool.name for pool in cluster.state.node_pools]
    scale_up = ScaleUp(cluster, operation)
    try:
        results = await asyncio.gather(
            *(
                scale_up.run(pool, wait_for_capacity=cluster.spec.wait_for_capacity)
                for pool in pools
            ),
            return_exceptions=True,
        )
    finally:
        for name in pools:
            cluster.drop_if_empty(name)
    failures = [
        (name, result)
        for name, result in zip(pools, results, strict=True)
        if isinstance(result, BaseException)
    ]
    for _, error in failures:
        if not is_failure(error):
            raise error
    asked = {pool.name: pool.count for pool in cluster.spec.node_pools}
    cluster.state.shortfall = [
        PoolShortfall(
            pool=name,
            asked=asked.get(name, 0),
            got=len(found.nodes) if (found := cluster.state.pool(name)) else 0,
            error_type=error_type_of(error),
            reason=reason_of(error),
        )
        for name, error in failures
    ]
    if failures:
        types = {error_type_of(error) for _, error in failures}
        only = next(iter(types)) if len(types) == 1 else None
        raise permanent(
            ErrorType(only)
            if only in {str(member) for member in ErrorType}
            else ErrorType.NODE_POOLS_FAILED,
            "; ".join(f"node pool '{name}': {reason_of(error)}" for name, error in failures),
        )


async def _check_prerequisites(cluster: ClusterContext) -> None:
    spec = cluster.spec
    config = (spec.deployment_spec or {}).get("config") if spec.deployment_spec else None
    found = await CHECK_CLUSTER_PREREQUISITES(
        CheckClusterPrerequisitesRequest(
            namespace=spec.namespace,
            template=spec.template,
            credential=spec.credential,
            config=config if isinstance(config, dict) else None,
        )
    )
    where = f"in namespace '{spec.namespace}'"
    template, credential = f"ClusterTemplate '{spec.template}'", f"Credential '{spec.credential}'"
    checks = [
        (found.template_found, ErrorType.TEMPLATE_NOT_FOUND, f"{template} not found {where}"),
        (
            found.template_valid,
            ErrorType.TEMPLATE_INVALID,
            f"{template} {where} is not valid: {found.template_message}",
        ),
        (found.credential_found, ErrorType.CREDENTIAL_NOT_FOUND, f"{credential} not found {where}"),
        (
            found.credential_ready,
            ErrorType.CREDENTIAL_NOT_READY,
            f"{credential} {where} is not ready: {found.credential_message}",
        ),
    ]
    for holds, error_type, message in checks:
        if not holds:
            raise permanent(error_type, message)
    if found.config_problems:
        # Before anything is created: the template's own schema refuses the config.
        raise permanent(
            ErrorType.TEMPLATE_CONFIG_INVALID,
            f"{template} refuses the config: " + "; ".join(found.config_problems),
        )
    pool = found.template_pool
    if pool is not None and pool.count > 0 and cluster.state.pool(pool.name) is None:
        # The template's MachineDeployment is the cluster's one pool (`workflows.cluster.supply`).
        cluster.state.node_pools.append(
            NodePoolStatus(
                name=pool.name,
                sku=NodeSku(instance_type=pool.instance_type or "default"),
                count=pool.count,
                supply=PoolSupply.MACHINE_DEPLOYMENT,
                workers_number=pool.count,
            )
        )


async def _create_deployment(cluster: ClusterContext) -> None:
    spec = cluster.spec
    await CREATE_CLUSTER_DEPLOYMENT(
        CreateClusterDeploymentRequest(
            namespace=spec.namespace,
            name=spec.deployment_name,
            template=spec.template,
            credential=spec.credential,
            workflow_id=workflow.info().workflow_id,
            organization=spec.organization,
            owner=cluster.state.owner,
            kubernetes_version=KUBERNETES_VERSION,
            pod_cidr=POD_CIDR,
            service_cidr=SERVICE_CIDR,
            deployment_spec=spec.deployment_spec,
            labels=spec.cluster_labels,
            annotations=spec.cluster_annotations,
            tenant_gateway_domain=spec.tenant_gateway_domain,
        )
    )
    cluster.state.deployment_created = True


async def _wait_control_plane_ready(cluster: ClusterContext) -> None:
    """Wait (inside one heartbeating activity per change of conditions) until Ready; a terminal
    failure fails at once with the condition's reason and message."""
    spec, state = cluster.spec, cluster.state

    def seen(found: AwaitClusterDeploymentResult) -> None:
        state.conditions = found.status.conditions
        waiting_on = _waiting_on(state.conditions) or "no conditions yet"
        ready = found.outcome is DeploymentOutcome.READY
        state.reason = "" if ready else f"waiting for the control plane: {waiting_on}"
        cluster.shown_changed()

    found = await await_cluster_deployment(
        AwaitClusterDeploymentRequest(
            namespace=spec.namespace,
            name=spec.deployment_name,
            want=DeploymentWait.READY,
            deadline=workflow.now() + spec.ready_deadline,
            owner=cluster.owner(),
        ),
        settled=lambda found: found.outcome is not DeploymentOutcome.CHANGED,
        seen=seen,
    )
    waiting_on = _waiting_on(state.conditions)
    match found.outcome:
        case DeploymentOutcome.FAILED:
            message = f"failed: {waiting_on or 'no conditions'}"
        case DeploymentOutcome.GONE:
            message = "was deleted while the cluster was created"
        case DeploymentOutcome.DEADLINE:
            raise permanent(
                ErrorType.CLUSTER_DEPLOYMENT_FAILED,
                f"the control plane was not ready within "
                f"{human(spec.ready_deadline.total_seconds())}: "
                f"{waiting_on or 'no conditions reported'}",
            )
        case _:
            return
    raise permanent(
        ErrorType.CLUSTER_DEPLOYMENT_FAILED, f"ClusterDeployment '{spec.deployment_name}' {message}"
    )


def _waiting_on(conditions: list[Condition]) -> str:
    return "; ".join(
        f"{c.type}={c.status}" + (f" ({c.reason}: {c.message})" if c.reason or c.message else "")
        for c in conditions
        if c.status != "True"
    )
