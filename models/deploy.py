"""The rules a workspace deploy request must pass before anything is sent, whichever front door it
came through: `colonyctl workspace deploy` and `apply -f` in direct mode or through the API, and
`POST /v1/workspaces`. Pure: they answer a problem (`<field>: <rule>`), and the caller
(`clients.workspaces`, the one deploy path of both transports) refuses with it.

- `missing_prompt_problem`: every required prompt of the class is answered (asked for first when
  a person can be asked);
- `cluster_problem`: the cluster can take workspaces (not failed, not being deleted);
- `gpu_model_problem`: the GPU model asked for (`--gpu-model`, `gpuType`) is one of the cluster's
  node pools' models, as `cluster create` refuses a SKU the catalog lacks;
- `resources_from_flags`: the shortcuts `--gpus`, `--gpu-model`, `--replicas` (the API's `gpus`,
  `gpuModel`, `replicas`) as the request's `resources`.
"""

from __future__ import annotations

from typing import Any

from models.cluster import ClusterPhase, ClusterStatus
from models.operations import AddNodePoolRequest
from models.value_paths import MISSING, get_path, parse_value_path
from models.values import resolve_resources, split_plaintext_secrets
from models.workspace import WorkspaceSpec
from models.workspace_class import Prompt, PromptType, WorkspaceClassSpec

NO_WORKSPACES_PHASES = (ClusterPhase.FAILED, ClusterPhase.DELETING, ClusterPhase.DELETED)
"""A cluster in these phases takes no new workspace: a failed one has nothing to run it on (its
ClusterDeployment may never have been made), a deleting one deletes its workspaces. A creating
cluster takes them: they wait in line for its GPUs."""


def _answered(spec: WorkspaceSpec, plaintext_secrets: dict[str, str], prompt: Prompt) -> bool:
    path = prompt.helm_value_path
    segments = tuple(parse_value_path(path))
    if any(tuple(parse_value_path(p)) == segments for p in spec.answers):
        return True
    if any(tuple(parse_value_path(p)) == segments for p in spec.sealed_answers):
        return True
    if path in plaintext_secrets:
        return True
    if get_path(spec.values, list(segments)) not in (MISSING, None, ""):
        return True
    return prompt.type is not PromptType.SECRET and prompt.default is not None


def missing_prompts(spec: WorkspaceSpec, workspace_class: WorkspaceClassSpec) -> list[Prompt]:
    """The class's required prompts the request leaves unanswered, in the class's order."""
    _, plaintext = split_plaintext_secrets(spec, workspace_class)
    return [
        prompt
        for prompt in workspace_class.prompts
        if prompt.required and not _answered(spec, plaintext, prompt)
    ]


def missing_prompt_problem(missing: list[Prompt], class_name: str, hint: str) -> str | None:
    """The refusal of a request that leaves `missing` unanswered, naming the first (and the
    others); None when nothing is missing.

    Args:
        hint: how the caller's front door answers a prompt, with `{path}` and `{others}` (the
            other missing prompts) to fill in.
    """
    if not missing:
        return None
    first = missing[0]
    others = f" (and {', '.join(p.helm_value_path for p in missing[1:])})" if missing[1:] else ""
    return (
        f"{first.helm_value_path}: required by class '{class_name}' (prompt "
        f"'{first.display_name}'): " + hint.format(path=first.helm_value_path, others=others)
    )


def cluster_problem(cluster: str, status: ClusterStatus) -> str | None:
    """Why the cluster a workspace is to run on cannot take it, naming `cluster` and its phase;
    None when it can."""
    if status.phase not in NO_WORKSPACES_PHASES:
        return None
    reason = f" ({status.reason})" if status.phase is ClusterPhase.FAILED and status.reason else ""
    return f"cluster: cluster '{cluster}' is {status.phase.value}{reason}: it takes no workspaces"


def cluster_gpu_models(status: ClusterStatus) -> set[str] | None:
    """The GPU models of the cluster's node pools, those it has and those it is adding (an
    add queued or running); None when it has no node pool at all: a cluster of a raw
    ClusterDeployment spec, whose template makes its workers, has GPUs Colony cannot list (the
    ledger decides from its nodes' labels)."""
    pools = [pool.sku for pool in status.node_pools]
    for operation in [status.current_operation, *status.queued_operations]:
        if operation is not None and isinstance(operation.request, AddNodePoolRequest):
            pools.append(operation.request.pool.sku)
    if not pools:
        return None
    return {sku.gpu_model_id for sku in pools if sku.gpu_model_id}


def gpu_model_problem(
    cluster: str, status: ClusterStatus, spec: WorkspaceSpec, workspace_class: WorkspaceClassSpec
) -> str | None:
    """Why the GPU model the request asks for (`gpuType`) can never be served on the cluster,
    listing the models it has; None when it has it, when no model or no GPU is asked for, or
    when Colony cannot list the cluster's models (`cluster_gpu_models`).

    Its nodes carry their pool's GPU model as the label `exalsius.ai/gpu-model`, which `gpuType`
    is matched against exactly: a model none of its pools has would fail the deploy at once
    (`GpuOfferingUnavailable`), so it is refused before anything starts."""
    per_replica = resolve_resources(workspace_class.default_resources, spec.resources).per_replica
    if not per_replica.gpu_count or not per_replica.gpu_type:
        return None
    models = cluster_gpu_models(status)
    if models is None or per_replica.gpu_type in models:
        return None
    has = f"its GPU models: {', '.join(sorted(models))}" if models else "it has no GPUs"
    return (
        f"resources.perReplica.gpuType: cluster '{cluster}' has no GPU model "
        f"'{per_replica.gpu_type}' ({has})"
    )


def resources_from_flags(
    gpus: int | None, gpu_model: str | None, replicas: int | None
) -> dict[str, Any] | None:
    """The `resources` of a request from `--gpus`, `--gpu-model` and `--replicas` (the HTTP API's
    `gpus`, `gpuModel`, `replicas`); None when none is given (the class's defaults)."""
    per_replica: dict[str, Any] = {}
    if gpus is not None:
        per_replica["gpuCount"] = gpus
    if gpu_model:
        per_replica["gpuType"] = gpu_model
    if not per_replica and replicas is None:
        return None
    resources: dict[str, Any] = {"perReplica": per_replica}
    if replicas is not None:
        resources["replicas"] = replicas
    return resources
