"""The rules a workspace deploy request must pass before anything is sent, whichever front door it
came through: `colonyctl workspace deploy` and `apply -f` in direct mode or through the API, and
`POST /v1/workspaces`. Pure: they answer a problem (`<field>: <rule>`), and the caller
(`starter.clients.workspaces`, the one deploy path of both transports) refuses with it.

- `missing_prompt_problem`: every required prompt of the class is answered (asked for first when
  a person can be asked);
- `cluster_problem`: the cluster can take workspaces (not failed, not being deleted);
- `resources_from_flags`: the shortcuts `--gpus`, `--gpu-model`, `--replicas` (the API's `gpus`,
  `gpuModel`, `replicas`) as the request's `resources`.
"""

from __future__ import annotations

from typing import Any

from models.cluster import ClusterPhase, ClusterStatus
from models.value_paths import MISSING, get_path, parse_value_path
from models.values import split_plaintext_secrets
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
