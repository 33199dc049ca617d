"""A workspace's resolved resources and Helm values: class defaults, user values, prompts, injection.

Pure and deterministic: `WorkspaceWorkflow` calls `merge_workspace` once it has resolved the class
(step 2 of a deploy), `colonyctl workspace deploy` calls `user_values` to turn `-f values.yaml` and
`--set path=value` into the request's values, and `split_plaintext_secrets` to take secrets out of
a request before they are sealed (`infra/sealing.py`).

The rules, in the order they apply:

1. Resources: the request's resources override the class's defaults field by field (`gpuType` and
   `gpuNodeSelector` come from the request only: a class may not pin a cluster's GPUs).
2. Values: the request's values are merged over the class's default values exactly as Helm merges
   values files (`helm install -f class.yaml -f user.yaml`): maps merge recursively, lists and
   scalars replace, and a `null` replaces too, which Helm then reads as "delete this key" (also
   from the chart's own defaults) when it installs.
3. Prompts: each prompt's answer (the request's `answers`, else the value already at its path,
   else the prompt's default) is checked (required, type, options) and written at its path.
   Secret prompts take sealed answers only; those go to `secret_values`, never to `values`, and
   an activity writes them into a Secret the ServiceSet reads through `valuesFrom`.
4. Injection: the resolved resources are written at `_exalsius.resources` (replicas, and per
   replica cpu, memory, storage, gpuCount, gpuVendor, gpuType, gpuResourceName) and the GPU node
   selector at `_exalsius.scheduling.nodeSelector`, as the exalsius operator does, and at the
   class's `resourceInjection` paths; Colony's value wins over a user's at those paths, with a
   warning.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import Field

from models.base import ColonyModel
from models.bounds import MAX_VALUE_DEPTH
from models.capacity import CapacityRequest, GpuSelector
from models.quantity import canonical_quantity
from models.sealed import SealedValue
from models.value_paths import (
    MISSING,
    ValuePathError,
    delete_path,
    get_path,
    parse_value_path,
    set_path,
)
from models.workspace import WorkspaceSpec
from models.workspace_class import (
    RESERVED_VALUES_KEY,
    PerReplicaResources,
    Prompt,
    PromptType,
    WorkspaceClassSpec,
    WorkspaceResources,
)

HOSTNAME_LABEL = "kubernetes.io/hostname"
"""The node label the kubelet sets to the node's name; pins a replica to the node the ledger chose."""


class ValuesError(ValueError):
    """The request's values or answers break the class's rules; `problems` lists every one."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


# --- Helm's merge -------------------------------------------------------------------------------


def merge_values(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`override` merged over `base` as Helm merges two values files (its `mergeMaps`).

    Maps merge key by key, recursively; anything else in `override` (a list, a scalar, `None`)
    replaces what `base` has. `None` is kept: Helm deletes such keys when it coalesces the values
    with the chart's defaults, so the key disappears from the chart's view too (`effective_values`
    shows that view). Neither argument is modified.
    """
    merged: dict[str, Any] = {key: copy.deepcopy(value) for key, value in base.items()}
    for key, value in override.items():
        current = merged.get(key)
        if isinstance(value, Mapping) and isinstance(current, dict):
            merged[key] = merge_values(current, value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def effective_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """The values as a chart without defaults for those keys sees them: `null` keys deleted."""
    return {
        key: effective_values(value) if isinstance(value, Mapping) else copy.deepcopy(value)
        for key, value in values.items()
        if value is not None
    }


# --- helm --set ---------------------------------------------------------------------------------

MAX_SET_INDEX = 65536
"""Helm's limit on a list index in `--set` (`strvals.MaxIndex`)."""


class SetError(ValueError):
    """A `--set` expression Helm would refuse; the message names the expression."""


class _SetParser:
    """Helm's `strvals` grammar for `--set` and `--set-string` (the common cases).

    `a.b=1,c[0]=x,d={1,2},e\\.f=g`; `\\` escapes the next character; values are typed as Helm
    types them (integers, `true`/`false`, `null`; everything else, floats included, is a string)
    unless `force_string`.
    """

    def __init__(self, text: str, force_string: bool) -> None:
        self.text = text
        self.pos = 0
        self.force_string = force_string

    def fail(self, message: str) -> SetError:
        shown = self.text if len(self.text) <= 80 else self.text[:77] + "..."
        return SetError(f"--set '{shown}': {message}")

    def parse_into(self, data: dict[str, Any]) -> None:
        if not self.text:
            raise self.fail("is empty")
        while self.pos < len(self.text):
            self.key(data)

    def read_until(self, stops: str) -> tuple[str, str | None]:
        buffer: list[str] = []
        while self.pos < len(self.text):
            char = self.text[self.pos]
            self.pos += 1
            if char == "\\":
                if self.pos < len(self.text):
                    buffer.append(self.text[self.pos])
                    self.pos += 1
                continue
            if char in stops:
                return "".join(buffer), char
            buffer.append(char)
        return "".join(buffer), None

    def deeper(self, depth: int) -> int:
        # Each '.' or '[' nests one level (and one call): bounded before it could recurse far.
        if depth >= MAX_VALUE_DEPTH:
            raise self.fail(
                f"nests more than {MAX_VALUE_DEPTH} levels deep; at most {MAX_VALUE_DEPTH} are "
                "allowed"
            )
        return depth + 1

    def key(self, data: dict[str, Any], depth: int = 1) -> None:
        key, stop = self.read_until("=[,.")
        if stop is None or stop == ",":
            raise self.fail(f"key '{key}' has no value")
        if not key:
            raise self.fail("a key is empty")
        if stop == "=":
            data[key] = self.value()
        elif stop == ".":
            child = data.get(key)
            if not isinstance(child, dict):
                child = {}
            data[key] = child
            self.key(child, self.deeper(depth))
        else:
            items = data.get(key)
            data[key] = self.list_item(
                items if isinstance(items, list) else [], self.index(), self.deeper(depth)
            )

    def index(self) -> int:
        text, stop = self.read_until("]")
        if stop is None:
            raise self.fail("an index is missing its closing ']'")
        try:
            index = int(text)
        except ValueError as exc:
            raise self.fail(f"index '{text}' is not a number") from exc
        if index < 0:
            raise self.fail(f"negative index {index}")
        if index > MAX_SET_INDEX:
            raise self.fail(
                f"index {index} is greater than the maximum supported index {MAX_SET_INDEX}"
            )
        return index

    def list_item(self, items: list[Any], index: int, depth: int) -> list[Any]:
        if self.pos >= len(self.text):
            raise self.fail(f"list item [{index}] has no value")
        char = self.text[self.pos]
        self.pos += 1
        items = items + [None] * (index + 1 - len(items))
        if char == "=":
            items[index] = self.value()
        elif char == ".":
            child = items[index] if isinstance(items[index], dict) else {}
            self.key(child, self.deeper(depth))
            items[index] = child
        elif char == "[":
            inner = items[index] if isinstance(items[index], list) else []
            items[index] = self.list_item(inner, self.index(), self.deeper(depth))
        else:
            raise self.fail(f"unexpected '{char}' after index [{index}]")
        return items

    def value(self) -> Any:
        if self.pos < len(self.text) and self.text[self.pos] == "{":
            self.pos += 1
            values: list[Any] = []
            while True:
                text, stop = self.read_until(",}")
                if stop is None:
                    raise self.fail("a list value is missing its closing '}'")
                values.append(self.typed(text))
                if stop == "}":
                    break
            if self.pos < len(self.text):
                if self.text[self.pos] != ",":
                    raise self.fail(f"unexpected '{self.text[self.pos]}' after a list value")
                self.pos += 1
            return values
        text, _ = self.read_until(",")
        return self.typed(text)

    def typed(self, text: str) -> Any:
        # Helm's strvals.typedVal: no floats, and numbers with a leading zero stay strings.
        if self.force_string:
            return text
        lowered = text.lower()
        if lowered == "true":
            return True
        if lowered == "false":
            return False
        if lowered == "null":
            return None
        if text == "0":
            return 0
        if text and text[0] != "0" and re.fullmatch(r"[+-]?[0-9]+", text):
            number = int(text)
            if -(2**63) <= number < 2**63:
                return number
        return text


def apply_set(values: dict[str, Any], expression: str, *, force_string: bool = False) -> None:
    """Apply one `--set` (or, with `force_string`, `--set-string`) expression to `values` in place.

    Raises:
        SetError: a malformed expression, naming it.
    """
    _SetParser(expression, force_string).parse_into(values)


def parse_set(expression: str, *, force_string: bool = False) -> dict[str, Any]:
    """The values one `--set` expression describes: `parse_set("a.b=1")` is `{"a": {"b": 1}}`."""
    values: dict[str, Any] = {}
    apply_set(values, expression, force_string=force_string)
    return values


def user_values(
    files: Iterable[Mapping[str, Any]] = (),
    sets: Iterable[str] = (),
    string_sets: Iterable[str] = (),
) -> dict[str, Any]:
    """A request's values from `-f` files (merged in order), then `--set`, then `--set-string`.

    Helm's order: values files first, each over the last; then every `--set` over them.

    Raises:
        SetError: a malformed `--set`.
    """
    values: dict[str, Any] = {}
    for document in files:
        values = merge_values(values, document)
    for expression in sets:
        apply_set(values, expression)
    for expression in string_sets:
        apply_set(values, expression, force_string=True)
    return values


# --- Resources ----------------------------------------------------------------------------------


def resolve_resources(
    class_defaults: WorkspaceResources, overrides: WorkspaceResources | None
) -> WorkspaceResources:
    """The request's resources over the class's defaults, field by field (replicas default to 1).

    `gpuType` and `gpuNodeSelector` come from the request only, as in the exalsius operator.
    """
    base = class_defaults.per_replica
    given = overrides.per_replica if overrides else PerReplicaResources()
    per_replica = PerReplicaResources(
        cpu=given.cpu if given.cpu is not None else base.cpu,
        memory=given.memory if given.memory is not None else base.memory,
        storage=given.storage if given.storage is not None else base.storage,
        gpu_count=given.gpu_count if given.gpu_count is not None else base.gpu_count,
        gpu_vendor=given.gpu_vendor if given.gpu_vendor is not None else base.gpu_vendor,
        gpu_type=given.gpu_type,
        gpu_node_selector=given.gpu_node_selector,
    )
    replicas = (overrides.replicas if overrides else None) or class_defaults.replicas or 1
    return WorkspaceResources(replicas=replicas, per_replica=per_replica)


def gpu_selector(resources: WorkspaceResources) -> GpuSelector:
    """Which GPUs the workspace accepts: its `gpuType` (canonical model label) or raw selector."""
    per_replica = resources.per_replica
    return GpuSelector.for_request(
        per_replica.gpu_type, per_replica.gpu_node_selector, per_replica.gpu_vendor
    )


def capacity_request(
    request_id: str, workspace: str, resources: WorkspaceResources
) -> CapacityRequest | None:
    """The GPU request a workspace makes to its cluster's ledger; None when it needs no GPUs."""
    gpus = resources.per_replica.gpu_count or 0
    if gpus == 0:
        return None
    return CapacityRequest(
        request_id=request_id,
        workspace=workspace,
        replicas=resources.replicas or 1,
        gpus_per_replica=gpus,
        selector=gpu_selector(resources),
    )


# --- Prompts ------------------------------------------------------------------------------------

_PUBLIC_KEY = re.compile(
    r"^(ssh-ed25519|ssh-rsa|ssh-dss|ecdsa-sha2-nistp(256|384|521)|sk-ssh-ed25519@openssh\.com|"
    r"sk-ecdsa-sha2-nistp256@openssh\.com)\s+\S+(\s+.*)?$"
)


def _label(prompt: Prompt) -> str:
    return f"prompt '{prompt.display_name}' ({prompt.helm_value_path})"


def _coerce(prompt: Prompt, value: Any) -> tuple[Any, str | None]:
    """The answer typed as the prompt says, or a problem."""
    label = _label(prompt)
    match prompt.type:
        case PromptType.INT:
            if isinstance(value, int) and not isinstance(value, bool):
                typed: Any = value
            elif isinstance(value, str) and re.fullmatch(r"\s*[+-]?[0-9]+\s*", value):
                typed = int(value)
            else:
                return value, f"{label} must be an integer, got {value!r}"
        case PromptType.BOOL:
            if isinstance(value, bool):
                typed = value
            elif isinstance(value, str) and value.strip().lower() in ("true", "false"):
                typed = value.strip().lower() == "true"
            else:
                return value, f"{label} must be true or false, got {value!r}"
        case PromptType.STRING | PromptType.PUBLIC_KEY:
            # `--set model=123` types the answer as an int; a string prompt takes its text.
            if isinstance(value, str):
                typed = value
            elif isinstance(value, int | float) and not isinstance(value, bool):
                typed = str(value)
            else:
                return value, f"{label} must be a string, got {value!r}"
            if prompt.type is PromptType.PUBLIC_KEY:
                bad = [
                    line
                    for line in typed.splitlines()
                    if line.strip() and not _PUBLIC_KEY.match(line.strip())
                ]
                if bad:
                    return value, (
                        f"{label} must be SSH public keys, one per line "
                        f"(\"ssh-ed25519 AAAA... user@host\"); '{bad[0][:40]}' is not one"
                    )
        case _:  # pragma: no cover - secret prompts never reach here
            typed = value
    if prompt.options is not None and str(typed) not in prompt.options:
        return value, f"{label} must be one of {', '.join(prompt.options)}, got {typed!r}"
    return typed, None


def _normal(path: str) -> tuple[str, ...]:
    return tuple(parse_value_path(path))


def apply_prompts(
    workspace_class: WorkspaceClassSpec,
    values: dict[str, Any],
    user_supplied: Mapping[str, Any],
    answers: Mapping[str, Any],
    sealed_answers: Mapping[str, SealedValue],
) -> tuple[dict[str, SealedValue], list[str]]:
    """Check and write the class's prompts into `values` (in place).

    Args:
        workspace_class: the class, with its prompts.
        values: the merged values (class defaults and the user's); modified.
        user_supplied: the user's own values, to tell a user's plaintext secret from nothing.
        answers: the request's plain answers, by path.
        sealed_answers: the request's sealed answers, by path.

    Returns:
        The sealed values by prompt path, and the problems found (empty when all is well).
    """
    problems: list[str] = []
    secret_values: dict[str, SealedValue] = {}
    plain = {_normal(path): value for path, value in answers.items()}
    sealed = {_normal(path): value for path, value in sealed_answers.items()}
    prompts = {_normal(p.helm_value_path): p for p in workspace_class.prompts}
    names = ", ".join(p.helm_value_path for p in workspace_class.prompts) or "none"
    for path in sorted(set(plain) - set(prompts)):
        problems.append(
            f"answers: '{'.'.join(path)}' is not a prompt of class '{workspace_class.name}' "
            f"(its prompts: {names})"
        )
    for path, prompt in prompts.items():
        segments = list(path)
        if prompt.type is PromptType.SECRET:
            given_plain = path in plain or get_path(user_supplied, segments) not in (MISSING, None)
            if given_plain:
                problems.append(
                    f"{_label(prompt)} is a secret and arrived in plaintext: seal it with Colony's "
                    "public key (colonyctl does this for you) and give it in sealedAnswers"
                )
            delete_path(values, segments)
            if path in sealed:
                secret_values[prompt.helm_value_path] = sealed[path]
            elif prompt.required and not given_plain:
                problems.append(f"{_label(prompt)} is required")
            continue
        if path in sealed:
            problems.append(
                f"{_label(prompt)} is not a secret: give it in answers, not sealedAnswers"
            )
            continue
        value = plain[path] if path in plain else get_path(values, segments)
        if value is MISSING or value is None:
            value = prompt.default
        if value is None or (value == "" and prompt.required):
            if prompt.required:
                problems.append(f"{_label(prompt)} is required")
            continue
        typed, problem = _coerce(prompt, value)
        if problem:
            problems.append(problem)
            continue
        set_path(values, segments, typed)
    for path in sorted(set(sealed) - set(prompts)):
        problems.append(
            f"sealedAnswers: '{'.'.join(path)}' is not a prompt of class '{workspace_class.name}'"
        )
    return secret_values, problems


def split_plaintext_secrets(
    spec: WorkspaceSpec, workspace_class: WorkspaceClassSpec
) -> tuple[WorkspaceSpec, dict[str, str]]:
    """Take the plaintext answers to secret prompts out of a request, for the client to seal.

    Users (and exalsius manifests) write a notebook password straight into `values` or `answers`;
    before the request leaves the client, those become sealed answers. Returns the request without
    them, and `{prompt path: plaintext}` (non-string answers are turned into their text).
    """
    values = copy.deepcopy(spec.values)
    answers = dict(spec.answers)
    by_path = {_normal(path): path for path in answers}
    found: dict[str, str] = {}
    for prompt in workspace_class.prompts:
        if prompt.type is not PromptType.SECRET:
            continue
        segments = parse_value_path(prompt.helm_value_path)
        key = by_path.get(tuple(segments))
        in_values = delete_path(values, segments)
        value = answers.pop(key) if key is not None else in_values
        if value not in (MISSING, None):
            found[prompt.helm_value_path] = value if isinstance(value, str) else str(value)
    return spec.model_copy(update={"values": values, "answers": answers}), found


# --- Injection ----------------------------------------------------------------------------------


def _resolved_fields(resources: WorkspaceResources) -> list[tuple[str, Any]]:
    per_replica = resources.per_replica
    fields: list[tuple[str, Any]] = [("replicas", resources.replicas or 1)]
    for name in ("cpu", "memory", "storage"):
        value = getattr(per_replica, name)
        if value is not None:
            fields.append((name, canonical_quantity(value)))
    if per_replica.gpu_count is not None:
        fields.append(("gpuCount", per_replica.gpu_count))
    if per_replica.gpu_vendor is not None:
        fields.append(("gpuVendor", per_replica.gpu_vendor.value))
    if per_replica.gpu_type is not None:
        fields.append(("gpuType", per_replica.gpu_type))
    return fields


def inject_resources(
    values: dict[str, Any],
    resources: WorkspaceResources,
    workspace_class: WorkspaceClassSpec,
    *,
    gpu_resource_name: str | None = None,
    node_selector: Mapping[str, str] | None = None,
) -> list[str]:
    """Write the resolved resources where charts read them (in place); returns warnings.

    `_exalsius.resources.replicas`, `_exalsius.resources.perReplica.<field>` (quantities in
    Kubernetes' canonical form, as the operator writes them) and `gpuResourceName`;
    `_exalsius.scheduling.nodeSelector`; then every `resourceInjection` path of the class. A user's
    value at an injection path is overwritten (the structured resources are authoritative) and
    reported in the warnings, with the operator's wording.
    """
    warnings: list[str] = []
    fields = _resolved_fields(resources)
    exalsius = values.setdefault(RESERVED_VALUES_KEY, {})
    resource_node = exalsius.setdefault("resources", {})
    per_replica = resource_node.setdefault("perReplica", {})
    for name, value in fields:
        if name == "replicas":
            resource_node["replicas"] = value
        else:
            per_replica[name] = value
    vendor = resources.per_replica.gpu_vendor
    resource_name = gpu_resource_name or (vendor.resource_name if vendor else None)
    if resource_name and (resources.per_replica.gpu_count or 0) > 0:
        per_replica["gpuResourceName"] = resource_name
    if node_selector:
        exalsius.setdefault("scheduling", {})["nodeSelector"] = dict(sorted(node_selector.items()))
    by_field = workspace_class.resource_injection.by_field()
    for name, value in fields:
        for path in by_field.get(name, []):
            previous = set_path(values, parse_value_path(path), value)
            if previous in (MISSING, None) or previous == value:
                continue
            instead = "resources.replicas" if name == "replicas" else f"resources.perReplica.{name}"
            warnings.append(
                f"Colony overwrote values.{path} ({previous!r}) with the resolved {name} "
                f"({value!r}): use {instead} instead"
            )
    return warnings


# --- The whole merge ----------------------------------------------------------------------------


class MergedWorkspace(ColonyModel):
    """A workspace's resolved resources and Helm values, ready for its ServiceSet."""

    resources: WorkspaceResources
    values: dict[str, Any]
    """Plain values: the ServiceSet's `values` (no secret ever)."""
    secret_values: dict[str, SealedValue] = Field(default_factory=dict)
    """Sealed answers by Helm value path: unsealed only in the activity that writes the Secret the
    ServiceSet reads through `valuesFrom`."""
    warnings: list[str] = Field(default_factory=list)
    """User values Colony overwrote (the `ResourcesInjected` condition's message)."""

    @property
    def gpu_selector(self) -> GpuSelector:
        return gpu_selector(self.resources)


def scheduling_selector(resources: WorkspaceResources, nodes: Iterable[str] = ()) -> dict[str, str]:
    """The node selector a GPU workspace's pods get: its GPU selector, and the node when the ledger
    placed every replica on one node (`kubernetes.io/hostname`), so the scheduler agrees with the
    ledger. Empty for a CPU-only workspace."""
    if (resources.per_replica.gpu_count or 0) == 0:
        return {}
    selector = dict(gpu_selector(resources).labels)
    distinct = list(dict.fromkeys(nodes))
    if len(distinct) == 1:
        selector[HOSTNAME_LABEL] = distinct[0]
    return selector


def merge_workspace(
    workspace_class: WorkspaceClassSpec,
    spec: WorkspaceSpec,
    *,
    gpu_resource_name: str | None = None,
    nodes: Iterable[str] = (),
) -> MergedWorkspace:
    """Resolve a request against its class: resources, values, prompts and injection (module doc).

    Args:
        workspace_class: the pinned class.
        spec: the request.
        gpu_resource_name: the extended resource of the admitted GPUs (from the ledger's nodes).
        nodes: the nodes the ledger placed the workspace's GPUs on.

    Raises:
        ValuesError: every problem found (missing or mistyped answers, a secret in plaintext,
            unknown prompts), each naming the prompt and the rule.
    """
    resources = resolve_resources(workspace_class.default_resources, spec.resources)
    values = merge_values(workspace_class.default_values, spec.values)
    secret_values, problems = apply_prompts(
        workspace_class, values, spec.values, spec.answers, spec.sealed_answers
    )
    if problems:
        raise ValuesError(problems)
    try:
        warnings = inject_resources(
            values,
            resources,
            workspace_class,
            gpu_resource_name=gpu_resource_name,
            node_selector=scheduling_selector(resources, nodes),
        )
    except ValuePathError as exc:  # pragma: no cover - class validation refuses bad paths
        raise ValuesError([str(exc)]) from exc
    return MergedWorkspace(
        resources=resources, values=values, secret_values=secret_values, warnings=warnings
    )
