"""Workspace classes: the catalog entries users deploy workspaces from, their rules and their identity.

A `WorkspaceClassSpec` has every field of the exalsius `WorkspaceClass` CRD
(`workspaces.exalsius.ai/v1`), under the same JSON names, plus its name: the ServiceTemplate it
deploys, default resources, prerequisites, access endpoints, user-facing prompts, deploy timeouts,
default values and resource injection paths. `models/manifests.py` builds it from exalsius and
Colony manifests, `colonyctl class publish` validates it through `user_input`, the catalog in
`catalog/` ships some, and the workspace workflow reads it to merge values (`models/values.py`).

Classes are versioned and immutable (a running workspace's definition never changes underneath it):
`canonical_class` gives one definition's canonical form, and `class_conflict` is the rule that
refuses to publish a different definition under an existing name.

The resource shapes (`WorkspaceResources`, `PerReplicaResources`) are shared with workspace requests
(`models/workspace.py`), as in the CRDs.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from datetime import timedelta
from enum import StrEnum
from functools import partial
from typing import Annotated, Any, Self

from pydantic import AfterValidator, Field, field_serializer, field_validator, model_validator
from pydantic_core import PydanticCustomError

from models.base import ColonyModel, rule
from models.bounds import bounded, user_bound
from models.identity import DERIVED_MARK, readable
from models.names import (
    RESERVED_LABEL_PREFIX,
    label_key_problem,
    label_value_problem,
    shorten_name,
)
from models.quantity import (
    canonical_quantity,
    format_go_duration,
    parse_go_duration,
    parse_quantity,
    quantity_problem,
)
from models.value_paths import MISSING, get_path, parse_value_path, value_path_problem

DNS_LABEL_MAX = 63
"""63: RFC 1123 labels, the limit of Kubernetes namespace, Service and most object names."""
OBJECT_NAME_MAX = 253
"""253: RFC 1123 subdomains, the limit of Kubernetes object names such as ServiceTemplates."""
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

DEFAULT_DEPLOY_TIMEOUT = timedelta(minutes=15)
"""15 minutes: the exalsius operator's default when a class sets no `deployTimeout`."""
MAX_DEPLOY_TIMEOUT = timedelta(hours=24)
"""A day: a Helm release that takes longer to become ready is stuck, not slow (large images take
minutes to pull, not hours)."""
MAX_GPUS_PER_REPLICA = 64
"""The largest GPU count a single node offers (8-GPU boards are usual; 64 leaves room)."""
INT32_MAX = 2**31 - 1
"""`format: int32` in the CRDs."""

RESERVED_VALUES_KEY = "_exalsius"
"""The top-level Helm values key the operator (and Colony) writes resolved resources to; charts read
it, users and classes must not set it (see `models/values.py`)."""
GPU_MODEL_LABEL = "exalsius.ai/gpu-model"
"""The canonical GPU model node label exalsius provisioning (and Colony) puts on every GPU node;
`gpuType` matches it (exalsius-operator internal/gpu/offering.go `DefaultModelLabel`)."""


def _fail(code: str, message: str) -> PydanticCustomError:
    # PydanticCustomError keeps the message as is (a ValueError would gain a "Value error, " prefix).
    return PydanticCustomError(code, message)


def dns_label_problem(kind: str, name: str, max_length: int = DNS_LABEL_MAX) -> str | None:
    """Why `name` is not a lowercase RFC 1123 label of at most `max_length` characters, or None.

    Args:
        kind: what is named, as the user knows it ("workspace class", "access endpoint").
        name: the proposed name.
        max_length: 63 for a DNS label; less where a prefix or suffix is added (workspaces: 60).
    """
    if not name:
        return f"{kind} name must not be empty"
    if len(name) > max_length:
        return (
            f"{kind} name '{name}' is {len(name)} characters long; at most {max_length} are allowed"
        )
    if not _DNS_LABEL.match(name):
        return (
            f"{kind} name '{name}' must be a DNS label: lowercase letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return None


def object_name_problem(kind: str, name: str) -> str | None:
    """Why `name` is not a Kubernetes object name (an RFC 1123 subdomain), or None."""
    if not name:
        return f"{kind} name must not be empty"
    if len(name) > OBJECT_NAME_MAX:
        return f"{kind} name '{name}' is {len(name)} characters long; at most {OBJECT_NAME_MAX} are allowed"
    if not _DNS_SUBDOMAIN.match(name):
        return (
            f"{kind} name '{name}' must be lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit"
        )
    return None


def dns_label(kind: str) -> AfterValidator:
    """The rule of a field holding a DNS label that names a `kind` (`dns_label_problem`)."""
    return rule(partial(dns_label_problem, kind))


WorkspaceClassName = Annotated[str, dns_label("workspace class")]
"""A workspace class, by its exact, versioned name (`colony-jupyter-1-0-0`)."""


def required_text(message: str) -> AfterValidator:
    """The rule of a text field that must hold more than blanks, refused with `message`."""

    def blank(text: str) -> str | None:
        return None if text.strip() else message

    return rule(blank)


def reserved_values_problem(field: str, values: Mapping[str, Any], advice: str = "") -> str | None:
    """Why Helm values in `field` may not be given: they set `RESERVED_VALUES_KEY`, or None."""
    if RESERVED_VALUES_KEY not in values:
        return None
    return (
        f"{field} must not set '{RESERVED_VALUES_KEY}': Colony writes it from the resources{advice}"
    )


def writable_path_problem(path: str, *, field: str, reserved: str) -> str | None:
    """Why a class may not write to the Helm value `path`, or None.

    Args:
        path: the value path ("jupyter.password").
        field: where it is given, naming a malformed path (`<field>: <problem>`).
        reserved: the refusal of a path under `RESERVED_VALUES_KEY` (its `{path}` and `{key}`
            filled in).
    """
    problem = value_path_problem(path)
    if problem:
        return f"{field}: {problem}"
    if parse_value_path(path)[0] == RESERVED_VALUES_KEY:
        return reserved.format(path=path, key=RESERVED_VALUES_KEY)
    return None


def selector_problem(selector: dict[str, str]) -> str | None:
    """Why a node-label selector is malformed, or None (Colony's own label keys may be read here)."""
    for key, value in selector.items():
        problem = label_key_problem(key)
        if problem and not key.startswith(RESERVED_LABEL_PREFIX):
            return problem
        problem = label_value_problem(key, value)
        if problem:
            return problem
    return None


class GpuVendor(StrEnum):
    """A GPU vendor, as the CRDs spell it."""

    NVIDIA = "NVIDIA"
    AMD = "AMD"

    @property
    def resource_name(self) -> str:
        """The extended resource a pod requests for one whole GPU of this vendor."""
        return {GpuVendor.NVIDIA: "nvidia.com/gpu", GpuVendor.AMD: "amd.com/gpu"}[self]


def _quantity(field: str, value: Any) -> str | None:
    if value is None:
        return None
    problem = quantity_problem(field, value)
    if problem:
        raise _fail("quantity", problem)
    if parse_quantity(value)[0] < 0:
        raise _fail("quantity", f"{field} '{value}' must not be negative")
    return str(value)


class PerReplicaResources(ColonyModel):
    """What one replica asks for (`perReplica` in the CRDs); unset fields inherit or stay unset.

    `gpuType` and `gpuNodeSelector` are choices of a deployment on a given cluster: a class may not
    set them (checked by `WorkspaceClassSpec`).
    """

    cpu: str | None = None
    """CPU cores, a Kubernetes quantity ("4", "500m")."""
    memory: str | None = None
    """Memory, a Kubernetes quantity ("16Gi")."""
    storage: str | None = None
    """Persistent storage, a Kubernetes quantity ("100Gi")."""
    gpu_count: int | None = None
    """Whole GPUs per replica (`gpuCount`)."""
    gpu_vendor: GpuVendor | None = None
    """NVIDIA or AMD: a chart's vendor compatibility (CUDA or ROCm)."""
    gpu_type: str | None = None
    """A GPU model, matched against the node label `exalsius.ai/gpu-model` ("H100", "L40")."""
    gpu_node_selector: dict[str, str] | None = None
    """Node labels matched exactly, e.g. `{"nvidia.com/gpu.product": "NVIDIA-L40"}`."""

    @field_validator("cpu", mode="before")
    @classmethod
    def _cpu(cls, value: Any) -> str | None:
        return _quantity("cpu", value)

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> str | None:
        return _quantity("memory", value)

    @field_validator("storage", mode="before")
    @classmethod
    def _storage(cls, value: Any) -> str | None:
        return _quantity("storage", value)

    @field_validator("gpu_count")
    @classmethod
    def _gpu_count(cls, value: int | None) -> int | None:
        if value is not None and not 0 <= value <= MAX_GPUS_PER_REPLICA:
            raise _fail(
                "gpu_count",
                f"gpuCount must be from 0 to {MAX_GPUS_PER_REPLICA} GPUs per replica, got {value}",
            )
        return value

    @field_validator("gpu_type")
    @classmethod
    def _gpu_type(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value or label_value_problem(GPU_MODEL_LABEL, value):
            raise _fail(
                "gpu_type",
                f"gpuType '{value}' must be a node label value (it is matched against "
                f"{GPU_MODEL_LABEL}): 1 to 63 alphanumerics, '-', '_' or '.', starting and ending "
                "with an alphanumeric",
            )
        return value

    @field_validator("gpu_node_selector")
    @classmethod
    def _gpu_node_selector(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        if not value:
            raise _fail("gpu_node_selector", "gpuNodeSelector must name at least one node label")
        problem = selector_problem(value)
        if problem:
            raise _fail("gpu_node_selector", f"gpuNodeSelector: {problem}")
        return value

    @model_validator(mode="after")
    def _one_gpu_choice(self) -> Self:
        if self.gpu_type is not None and self.gpu_node_selector is not None:
            raise _fail(
                "gpu_choice",
                "give gpuType or gpuNodeSelector, not both: each one alone selects the GPU nodes",
            )
        return self


class WorkspaceResources(ColonyModel):
    """Replicas and per-replica resources (`defaultResources`, `resources`, `resolvedResources`)."""

    replicas: int | None = None
    """Pod-shaped instances; unset inherits (the class's, or 1)."""
    per_replica: PerReplicaResources = Field(default_factory=PerReplicaResources)

    @field_validator("replicas")
    @classmethod
    def _replicas(cls, value: int | None) -> int | None:
        if value is not None and not 1 <= value <= INT32_MAX:
            raise _fail("replicas", f"replicas must be at least 1, got {value}")
        return value

    @property
    def gpus(self) -> int:
        """GPUs of the whole workspace: replicas x gpuCount (unset counts as 1 x 0)."""
        return (self.replicas or 1) * (self.per_replica.gpu_count or 0)


TEMPLATE_NAMESPACE = "kcm-system"
"""k0rdent's system namespace: Colony writes every ServiceSet there, and a ServiceSet finds the
ServiceTemplates it names in its own namespace (`models.cluster.DEFAULT_NAMESPACE`, the same)."""


def template_namespace_problem(namespace: str) -> str | None:
    """Why a class may not name a ServiceTemplate's namespace, or None: only the one where k0rdent
    reads templates has an effect; any other would be accepted and ignored."""
    if namespace == TEMPLATE_NAMESPACE:
        return None
    return (
        f"a ServiceTemplate is read from namespace '{TEMPLATE_NAMESPACE}', where the ServiceSets "
        f"Colony writes find it; '{namespace}' would be ignored: leave it out or give "
        f"{TEMPLATE_NAMESPACE}"
    )


def version_constraint_problem(constraint: str) -> str:
    """Why a class may not give a ServiceTemplate's `versionConstraint`: Colony does not check it
    (the template's name pins its chart's version), so it would be accepted and ignored."""
    return (
        f"'{constraint}' would not be checked: Colony pins a ServiceTemplate by its name (a "
        "new chart version is a new template name); leave versionConstraint out"
    )


class ServiceTemplateRef(ColonyModel):
    """A k0rdent ServiceTemplate, by name (in k0rdent's system namespace, `TEMPLATE_NAMESPACE`)."""

    name: Annotated[str, rule(partial(object_name_problem, "ServiceTemplate"))]
    namespace: Annotated[
        str | None, dns_label("namespace"), user_bound(template_namespace_problem)
    ] = None
    """`kcm-system` or unset: the only namespace k0rdent reads a ServiceSet's templates from
    (another is refused from users; stored classes are read as they are)."""
    version_constraint: Annotated[str | None, user_bound(version_constraint_problem)] = None
    """The exalsius CRD's SemVer constraint (">=1.2.0"): refused from users, since Colony does not
    check it (the name pins the chart version); stored classes are read as they are."""


class PrerequisiteSpec(ColonyModel):
    """A ServiceTemplate a cluster needs before the workspace (installed once per cluster)."""

    service_template: ServiceTemplateRef
    namespace: Annotated[str | None, dns_label("prerequisite namespace")] = None
    """Where it is installed on the child cluster (`<template>-system` when unset); one per
    cluster."""
    values: Annotated[dict[str, Any] | None, bounded()] = None
    """Helm values for its install; the chart's defaults when unset."""

    @property
    def install_namespace(self) -> str:
        """Where it is installed: the class's `namespace`, else a namespace of its own,
        `<template>-system` (dots made hyphens, cut with a hash past 63 characters), never
        `default`, where its objects would mix with whatever else is there."""
        if self.namespace:
            return self.namespace
        return shorten_name(
            f"{readable(self.service_template.name)}{PREREQUISITE_NAMESPACE_SUFFIX}"
        )


PREREQUISITE_NAMESPACE_SUFFIX = "-system"
"""A prerequisite without a namespace is installed into `<template>-system`."""


class EndpointProtocol(StrEnum):
    """The wire protocol of an access endpoint: HTTP gets a hostname, TCP and SSH a port."""

    HTTP = "HTTP"
    TCP = "TCP"
    SSH = "SSH"


class AccessEndpoint(ColonyModel):
    """A network endpoint the workspace exposes (a Service port of its chart)."""

    name: Annotated[str, dns_label("access endpoint")]
    protocol: EndpointProtocol
    port: int
    """The Service port (not necessarily the container port)."""
    service_name: Annotated[str | None, dns_label("Service")] = None
    """The child-cluster Service, when the chart does not name it `<release>-<endpoint>`."""
    description: str = ""

    @field_validator("port")
    @classmethod
    def _port(cls, port: int) -> int:
        if not 1 <= port <= 65535:
            raise _fail("port", f"port must be from 1 to 65535, got {port}")
        return port


class PromptType(StrEnum):
    """How a prompt's answer is typed, checked and shown."""

    STRING = "string"
    INT = "int"
    BOOL = "bool"
    SECRET = "secret"
    """A string that is sealed on the client and never travels or persists in plaintext."""
    PUBLIC_KEY = "publicKey"
    """An SSH public key (or several, one per line)."""


class Prompt(ColonyModel):
    """One value users are asked for when they deploy (`userFacingConfig[]` in the CRD)."""

    helm_value_path: Annotated[
        str,
        rule(
            partial(
                writable_path_problem,
                field="helmValuePath",
                reserved="helmValuePath '{path}' is under '{key}', which Colony writes",
            )
        ),
    ]
    """Where the answer goes in the Helm values ("jupyter.password")."""
    display_name: Annotated[str, required_text("a prompt's displayName must not be empty")]
    description: str = ""
    type: PromptType = PromptType.STRING
    required: bool = False
    default: Annotated[Any, bounded()] = None
    options: Annotated[list[str] | None, bounded()] = None
    """A closed set of allowed answers (string and int prompts)."""

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        problem = self._consistency_problem()
        if problem:
            raise _fail("prompt", f"prompt '{self.helm_value_path}': {problem}")
        return self

    def _consistency_problem(self) -> str | None:
        if self.options is not None:
            if self.type not in (PromptType.STRING, PromptType.INT):
                return f"options are for string and int prompts, not {self.type.value}"
            if not self.options:
                return "options must list at least one answer"
            if len(set(self.options)) != len(self.options):
                return "options must not repeat an answer"
            if self.type is PromptType.INT and not all(_is_int_text(o) for o in self.options):
                return "the options of an int prompt must be integers"
        if self.default is None:
            return None
        if self.type is PromptType.SECRET:
            return "a secret prompt cannot have a default: a class is public, its defaults are not secret"
        expected: type | tuple[type, ...] = {
            PromptType.STRING: str,
            PromptType.PUBLIC_KEY: str,
            PromptType.INT: int,
            PromptType.BOOL: bool,
        }[self.type]
        type_ok = isinstance(self.default, expected) and not (
            self.type is PromptType.INT and isinstance(self.default, bool)
        )
        if not type_ok:
            return f"default {self.default!r} is not a {self.type.value}"
        if self.options is not None and str(self.default) not in self.options:
            return f"default {self.default!r} is not one of the options {self.options}"
        return None


def _is_int_text(text: str) -> bool:
    return bool(re.fullmatch(r"[+-]?[0-9]+", text.strip()))


class ResourceInjection(ColonyModel):
    """Extra Helm value paths that receive the resolved resources (besides `_exalsius.resources`)."""

    replicas: list[str] = Field(default_factory=list)
    cpu: list[str] = Field(default_factory=list)
    memory: list[str] = Field(default_factory=list)
    storage: list[str] = Field(default_factory=list)
    gpu_count: list[str] = Field(default_factory=list)
    gpu_vendor: list[str] = Field(default_factory=list)
    gpu_type: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _paths(self) -> Self:
        for field, paths in self.by_field().items():
            if len(set(paths)) != len(paths):
                raise _fail("resource_injection", f"resourceInjection.{field} lists a path twice")
            for path in paths:
                problem = writable_path_problem(
                    path,
                    field=f"resourceInjection.{field}",
                    reserved=f"resourceInjection.{field} path '{{path}}' is under '{{key}}', "
                    "which Colony writes itself",
                )
                if problem:
                    raise _fail("resource_injection", problem)
        return self

    def by_field(self) -> dict[str, list[str]]:
        """The paths per resolved field, under the names `_exalsius.resources` uses."""
        return {
            "replicas": self.replicas,
            "cpu": self.cpu,
            "memory": self.memory,
            "storage": self.storage,
            "gpuCount": self.gpu_count,
            "gpuVendor": self.gpu_vendor,
            "gpuType": self.gpu_type,
        }


def _duration(value: Any, field: str) -> Any:
    if isinstance(value, str):
        try:
            return parse_go_duration(value)
        except ValueError as exc:
            # ISO 8601 ("PT15M") is what pydantic itself writes; let it try before refusing.
            if value.startswith(("P", "p")):
                return value
            raise _fail("duration", f"{field}: {exc}") from exc
    return value


SHIPPED_PREFIX = "colony-"
"""The names Colony ships its catalog under (`catalog/`: classes such as `colony-jupyter-1-0-0`,
ServiceTemplates such as `colony-inference-stack-1-0-0`), present and to come."""


def class_name_mark_problem(name: str) -> str | None:
    """Why a class a user publishes may not take `name`: it holds the mark of the names Colony
    derives (an organization's class is stored as `<organization>-<name>--<hash>`), or None."""
    if DERIVED_MARK in name:
        return (
            f"workspace class name '{name}' must not contain '{DERIVED_MARK}': Colony reserves it "
            "for the names it derives (an organization's class is stored as "
            f"<organization>-<name>{DERIVED_MARK}<hash>)"
        )
    return None


def reserved_class_name_problem(name: str) -> str | None:
    """Why a class published through `colonyctl` or the API may not take `name`: Colony's shipped
    catalog (classes and ServiceTemplates alike) is named `colony-...`, and a class named so would
    pass for Colony's own, or take a name Colony ships next (the worker seeds the shipped classes
    itself); or it holds the mark of derived names; or None."""
    if name.startswith(SHIPPED_PREFIX):
        return (
            f"workspace class name '{name}' starts with '{SHIPPED_PREFIX}', which Colony reserves "
            "for the classes and ServiceTemplates it ships: choose another name"
        )
    return class_name_mark_problem(name)


class WorkspaceClassSpec(ColonyModel):
    """A workspace class: its name and every field of the exalsius WorkspaceClass spec.

    `{"name": "colony-jupyter-1-0-0", "displayName": "Jupyter Notebook", "serviceTemplate":
    {"name": "colony-jupyter-1-0-0"}, "defaultResources": {"perReplica": {"cpu": "2"}}, ...}`
    """

    name: Annotated[WorkspaceClassName, user_bound(class_name_mark_problem)]
    """Versioned by convention (`jupyter-notebook-0-3-0`): a new version is a new name."""
    display_name: Annotated[str, required_text("displayName must not be empty")]
    description: str = ""
    service_template: ServiceTemplateRef
    default_resources: WorkspaceResources
    prerequisites: list[PrerequisiteSpec] = Field(default_factory=list)
    access_endpoints: list[AccessEndpoint] = Field(default_factory=list)
    user_facing_config: list[Prompt] = Field(default_factory=list)
    """The prompts (the CRD's name for them)."""
    deploy_timeout: timedelta = DEFAULT_DEPLOY_TIMEOUT
    """How long the Helm release may take to become ready; Colony enforces it itself."""
    prerequisite_deploy_timeout: timedelta | None = None
    """The same for prerequisites; `deploy_timeout` when unset."""
    default_values: Annotated[
        dict[str, Any], rule(partial(reserved_values_problem, "defaultValues")), bounded()
    ] = Field(default_factory=dict)
    """Helm values always applied, under the user's."""
    resource_injection: ResourceInjection = Field(default_factory=ResourceInjection)

    @field_validator("deploy_timeout", "prerequisite_deploy_timeout", mode="before")
    @classmethod
    def _go_duration(cls, value: Any) -> Any:
        return _duration(value, "deployTimeout")

    @field_validator("deploy_timeout", "prerequisite_deploy_timeout")
    @classmethod
    def _timeout_bounds(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and not timedelta(0) < value <= MAX_DEPLOY_TIMEOUT:
            raise _fail(
                "deploy_timeout",
                f"a deploy timeout must be more than 0 and at most {format_go_duration(MAX_DEPLOY_TIMEOUT)}, "
                f"got {format_go_duration(value)}",
            )
        return value

    @field_serializer("deploy_timeout", "prerequisite_deploy_timeout", when_used="json")
    def _write_go_duration(self, value: timedelta | None) -> str | None:
        # The CRDs' syntax, so a class reads the same in `-o yaml`, in history and on the cluster.
        return None if value is None else format_go_duration(value)

    @model_validator(mode="after")
    def _class_rules(self) -> Self:
        per_replica = self.default_resources.per_replica
        # The CRD's own CEL rules, with its messages.
        if per_replica.gpu_type is not None:
            raise _fail(
                "default_resources",
                "gpuType cannot be set on a WorkspaceClass — it is a per-deployment cluster-dependent choice",
            )
        if per_replica.gpu_node_selector is not None:
            raise _fail(
                "default_resources",
                "gpuNodeSelector cannot be set on a WorkspaceClass — it is a per-deployment "
                "cluster-dependent choice",
            )
        _unique("access endpoint", [e.name for e in self.access_endpoints], "accessEndpoints")
        _unique(
            "prompt helmValuePath", [p.helm_value_path for p in self.prompts], "userFacingConfig"
        )
        for prompt in self.prompts:
            if prompt.type is not PromptType.SECRET:
                continue
            default = get_path(self.default_values, parse_value_path(prompt.helm_value_path))
            if default is not MISSING and default is not None:
                raise _fail(
                    "default_values",
                    f"defaultValues sets '{prompt.helm_value_path}', a secret prompt: a class is "
                    "public, its values are not secret",
                )
        templates = [p.service_template.name for p in self.prerequisites]
        _unique("prerequisite ServiceTemplate", templates, "prerequisites")
        if self.service_template.name in templates:
            raise _fail(
                "prerequisites",
                f"prerequisites: ServiceTemplate '{self.service_template.name}' is the class's own template",
            )
        return self

    @property
    def prompts(self) -> list[Prompt]:
        """The user-facing prompts (`userFacingConfig`)."""
        return self.user_facing_config

    @property
    def effective_prerequisite_deploy_timeout(self) -> timedelta:
        """How long each prerequisite's release may take: its own timeout, or the class's."""
        return self.prerequisite_deploy_timeout or self.deploy_timeout

    def endpoint(self, name: str) -> AccessEndpoint | None:
        """The access endpoint called `name`, or None."""
        return next((e for e in self.access_endpoints if e.name == name), None)

    def prompt(self, path: str) -> Prompt | None:
        """The prompt writing to `path`, or None."""
        return next((p for p in self.prompts if p.helm_value_path == path), None)


def _unique(kind: str, names: list[str], field: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise _fail("duplicate", f"{field}: {kind} '{name}' is given twice; it must be unique")
        seen.add(name)


# --- Identity: canonical form, digest, immutability -----------------------------------------------


def canonical_class(spec: WorkspaceClassSpec) -> dict[str, Any]:
    """The definition of a class in one normal form: equal forms mean the same class.

    Quantities are canonical ("0.5" and "500m" are the same CPU), defaults are explicit (replicas 1,
    a 15-minute timeout), the prerequisite timeout is resolved, injection paths (sets in the CRD)
    are sorted, and unset fields are left out. Order stays where it means something (endpoints: the
    first HTTP one is the primary hostname; prompts: the order users are asked in).
    """
    per_replica = spec.default_resources.per_replica
    normal = spec.model_copy(
        update={
            "default_resources": WorkspaceResources(
                replicas=spec.default_resources.replicas or 1,
                per_replica=per_replica.model_copy(
                    update={
                        field: canonical_quantity(value)
                        for field in ("cpu", "memory", "storage")
                        if (value := getattr(per_replica, field)) is not None
                    }
                ),
            ),
            "prerequisite_deploy_timeout": spec.effective_prerequisite_deploy_timeout,
            "resource_injection": ResourceInjection.model_validate(
                {f: sorted(p) for f, p in spec.resource_injection.by_field().items()}
            ),
        }
    )
    data = normal.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {key: value for key, value in data.items() if value not in ({}, [], "")}


def class_digest(spec: WorkspaceClassSpec) -> str:
    """A SHA-256 of the canonical form: the same for the same definition, whoever wrote it how."""
    text = json.dumps(canonical_class(spec), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


_VERSIONED = re.compile(r"^(?P<base>.+)-(?P<major>\d+)-(?P<minor>\d+)-(?P<patch>\d+)$")


def next_version_name(name: str) -> str:
    """A name for the next version of a class: `jupyter-notebook-0-3-0` -> `jupyter-notebook-0-3-1`."""
    match = _VERSIONED.match(name)
    if match:
        patch = int(match["patch"]) + 1
        return f"{match['base']}-{match['major']}-{match['minor']}-{patch}"
    return f"{name}-1-0-0"


def _differences(old: Any, new: Any, path: str) -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        found: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            found.extend(_differences(old.get(key), new.get(key), f"{path}.{key}"))
        return found
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        found = []
        for index, (a, b) in enumerate(zip(old, new, strict=True)):
            found.extend(_differences(a, b, f"{path}[{index}]"))
        return found
    return [] if old == new else [path]


def class_conflict(existing: WorkspaceClassSpec, new: WorkspaceClassSpec) -> str | None:
    """Why `new` may not be published over `existing`, or None (a different name, or the same class).

    Publishing the same definition again is fine (idempotent); a different definition under an
    existing name is refused, because running workspaces pin the class by name.
    """
    if existing.name != new.name:
        return None
    old_form, new_form = canonical_class(existing), canonical_class(new)
    if old_form == new_form:
        return None
    differences = _differences(old_form, new_form, "spec")
    shown = ", ".join(d.replace("spec.name", "name") for d in differences[:3])
    more = f" and {len(differences) - 3} more" if len(differences) > 3 else ""
    return (
        f"workspace class '{new.name}' already exists with a different definition "
        f"(it differs at {shown}{more}); classes are immutable so that running workspaces keep "
        f"theirs: a new version is a new name, such as '{next_version_name(new.name)}'"
    )
