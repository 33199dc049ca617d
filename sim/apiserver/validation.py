"""Validation of built-in types on create and update: the rules of kube-apiserver clients hit.

Called by the store (`ClusterStore.create` and every update path) after defaulting, before CRD
schema validation and before anything is stored; dry runs pass here too. Failures raise
`ApiError` 422 Invalid with one cause per problem, worded like the real server (the messages of
k8s.io/apimachinery/pkg/util/validation and pkg/apis/*/validation). What the real server refuses
while decoding (a quantity that does not parse, a label value that is not a string) is 400
BadRequest, as there.

Covered: object names (DNS-1123 subdomain; DNS-1123 label for namespaces and, as of 1.37, services), label keys and values on every object, Pod specs
(containers, names, images, restartPolicy, resource quantities) and pod update immutability,
Service ports and type, PodDisruptionBudget minAvailable/maxUnavailable, Deployment and DaemonSet
selectors and templates, core/v1 Events' involved object namespace, coordination.k8s.io Lease specs (ValidateLeaseSpec, and MicroTime decoding:
`acquireTime`/`renewTime` need exactly six fractional digits and are stored as UTC, as
kube-apiserver re-encodes them). Not covered: everything else kube validates (annotations, volumes,
probes, affinity...): the sim stores those unchecked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from sim.apiserver import errors
from sim.apiserver.registry import (
    DAEMONSETS,
    DEPLOYMENTS,
    EVENTS,
    LEASES,
    NAMESPACES,
    PDBS,
    PODS,
    SERVICES,
    ResourceType,
)
from sim.apiserver.selectors import LabelSelector

Obj = dict[str, Any]
Cause = tuple[str, str, str]  # (field path, message, reason)

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

# The messages of k8s.io/apimachinery/pkg/util/validation.
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_QUALIFIED_NAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',"
    "  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
_QUANTITY_MSG = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
# pkg/apis/core/validation: the one message for every forbidden pod spec change.
POD_UPDATE_FORBIDDEN = (
    "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
    "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set "
    "to 1 if it was previously negative)"
)
_RESTART_POLICIES = ("Always", "OnFailure", "Never")
_SERVICE_TYPES = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")
_BINARY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SUFFIXES = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
}  # fmt: skip
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")


def parse_quantity(value: Any) -> Decimal | None:
    """A resource.Quantity ("100m", "64Gi", "1e3", 2) as a Decimal; None if it does not parse."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return Decimal(str(value))
    if not isinstance(value, str):
        return None
    match = _QUANTITY.match(value.strip())
    if match is None:
        return None
    number, suffix = match.groups()
    try:
        amount = Decimal(number)
    except InvalidOperation:
        return None
    if suffix in _BINARY_SUFFIXES:
        return amount * _BINARY_SUFFIXES[suffix]
    if suffix in _DECIMAL_SUFFIXES:
        return amount * _DECIMAL_SUFFIXES[suffix]
    if suffix[0] in "eE":
        try:
            return amount * Decimal(10) ** int(suffix[1:])
        except ValueError:
            return None
    return None


# ---------------------------------------------------------------------- names and labels


def name_causes(rt: ResourceType, name: str) -> list[Cause]:
    """Problems with an object name: the rule depends on the kind, as in kube."""
    if rt.key in (NAMESPACES.key, SERVICES.key):
        # Services too since 1.37 (no longer DNS-1035: "1svc" is a valid Service name).
        messages = _dns1123_label(name, dots=True)
    else:
        messages = _dns1123_subdomain(name)
    return [("metadata.name", f'Invalid value: "{name}": {m}', "FieldValueInvalid") for m in messages]  # fmt: skip


def check_name(rt: ResourceType, name: str) -> None:
    causes = name_causes(rt, name)
    if causes:
        raise errors.invalid(rt, name, causes)


def _dns1123_label(value: str, *, dots: bool = False) -> list[str]:
    """With `dots`, a name that would be a valid subdomain gets kube 1.37's shorter message for
    namespace and Service names, "must not contain dots"."""
    out = []
    if len(value) > 63:
        out.append("must be no more than 63 characters")
    if not _DNS1123_LABEL.match(value):
        if dots and "." in value and _DNS1123_SUBDOMAIN.match(value):
            out.append("must not contain dots")
        else:
            out.append(_LABEL_MSG)
    return out


def _dns1123_subdomain(value: str) -> list[str]:
    out = []
    if len(value) > 253:
        out.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN.match(value):
        out.append(_SUBDOMAIN_MSG)
    return out


def _qualified_name(key: str) -> list[str]:
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
        prefix_msgs: list[str] = []
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            prefix_msgs = ["prefix part must be non-empty"]
        else:
            prefix_msgs = [f"prefix part {m}" for m in _dns1123_subdomain(prefix)]
    else:
        return [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
            "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') "
            "with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        return [*prefix_msgs, "name part must be non-empty"]
    out = list(prefix_msgs)
    if len(name) > 63:
        out.append("name part must be no more than 63 bytes")
    if not _QUALIFIED_NAME.match(name):
        out.append(_QUALIFIED_NAME_MSG)
    return out


def _label_causes(labels: Any, path: str) -> list[Cause]:
    if labels is None:
        return []
    if not isinstance(labels, Mapping):
        raise errors.bad_request(f"json: cannot unmarshal {type(labels).__name__} into Go struct field ObjectMeta.{path} of type map[string]string")  # fmt: skip
    causes: list[Cause] = []
    for key, value in labels.items():
        if not isinstance(value, str):
            raise errors.bad_request(
                f"json: cannot unmarshal {_json_type(value)} into Go struct field "
                f"ObjectMeta.{path} of type string"
            )
        for message in _qualified_name(key):
            causes.append((path, f'Invalid value: "{key}": {message}', "FieldValueInvalid"))
        if len(value) > 63:
            causes.append((path, f'Invalid value: "{value}": must be no more than 63 bytes', "FieldValueInvalid"))  # fmt: skip
        if not _LABEL_VALUE.match(value):
            causes.append((path, f'Invalid value: "{value}": {_LABEL_VALUE_MSG}', "FieldValueInvalid"))  # fmt: skip
    return causes


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null" if value is None else "string"


# ---------------------------------------------------------------------- pods


def _pod_spec_causes(rt: ResourceType, spec: Any, path: str, *, restart: tuple[str, ...]) -> list[Cause]:  # fmt: skip
    if not isinstance(spec, Mapping):
        return [(path, "Required value", "FieldValueRequired")]
    causes: list[Cause] = []
    containers = spec.get("containers")
    if not containers:
        causes.append((f"{path}.containers", "Required value", "FieldValueRequired"))
    seen: set[str] = set()
    for key in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(key) or []):
            causes += _container_causes(rt, container, f"{path}.{key}[{i}]", seen)
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in restart:
        supported = ", ".join(f'"{p}"' for p in restart)
        causes.append((f"{path}.restartPolicy", f'Unsupported value: "{policy}": supported values: {supported}', "FieldValueNotSupported"))  # fmt: skip
    return causes


def _container_causes(rt: ResourceType, container: Any, path: str, seen: set[str]) -> list[Cause]:
    if not isinstance(container, Mapping):
        return [(path, "Invalid value: must be an object", "FieldValueTypeInvalid")]
    causes: list[Cause] = []
    name = container.get("name")
    if not name:
        causes.append((f"{path}.name", "Required value", "FieldValueRequired"))
    else:
        for message in _dns1123_label(str(name)):
            causes.append((f"{path}.name", f'Invalid value: "{name}": {message}', "FieldValueInvalid"))  # fmt: skip
        if name in seen:
            causes.append((f"{path}.name", f'Duplicate value: "{name}"', "FieldValueDuplicate"))
        seen.add(str(name))
    if not container.get("image"):
        causes.append((f"{path}.image", "Required value", "FieldValueRequired"))
    resources = container.get("resources") or {}
    parsed: dict[str, dict[str, Decimal]] = {}
    for kind in ("limits", "requests"):
        for resource, raw in (resources.get(kind) or {}).items():
            amount = parse_quantity(raw)
            if amount is None:
                # The real server fails decoding the body: 400, not 422.
                raise errors.bad_request(
                    f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {_QUANTITY_MSG}'
                )
            if amount < 0:
                causes.append((f"{path}.resources.{kind}[{resource}]", f'Invalid value: "{raw}": must be greater than or equal to 0', "FieldValueInvalid"))  # fmt: skip
            parsed.setdefault(kind, {})[resource] = amount
    for kind in ("limits", "requests"):
        for resource, amount in parsed.get(kind, {}).items():
            # Extended resources (nvidia.com/gpu) are counted in whole devices.
            if _is_extended(resource) and amount != amount.to_integral_value():
                raw = resources[kind][resource]
                causes.append((f"{path}.resources.{kind}[{resource}]", f'Invalid value: "{raw}": must be an integer', "FieldValueInvalid"))  # fmt: skip
    for resource, request in parsed.get("requests", {}).items():
        limit = parsed.get("limits", {}).get(resource)
        raw = resources["requests"][resource]
        if limit is not None and request != limit and _is_extended(resource):
            # ValidateResourceRequirements: a GPU can be neither overcommitted nor undercommitted.
            causes.append((f"{path}.resources.requests", f'Invalid value: "{raw}": must be equal to {resource} limit of {resources["limits"][resource]}', "FieldValueInvalid"))  # fmt: skip
        elif limit is not None and request > limit:
            causes.append((f"{path}.resources.requests", f'Invalid value: "{raw}": must be less than or equal to {resource} limit of {resources["limits"][resource]}', "FieldValueInvalid"))  # fmt: skip
        elif limit is None and _is_extended(resource):
            causes.append((f"{path}.resources.limits", "Required value: Limit must be set for non overcommitable resources", "FieldValueRequired"))  # fmt: skip
    return causes


def _is_extended(resource: str) -> bool:
    """Extended resources: names outside kube's own namespace (v1helper.IsExtendedResourceName),
    the ones that cannot be overcommitted."""
    if "/" not in resource:
        return False
    prefix = resource.split("/", 1)[0]
    return not (
        prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io")
    ) and not resource.startswith("requests.")


def _pod_update_causes(new: Obj, old: Obj) -> list[Cause]:
    """kube's ValidatePodUpdate: only images, activeDeadlineSeconds, added tolerations and
    removed scheduling gates may change in a pod's spec (nodeName is set through pods/binding)."""
    new_spec = dict(new.get("spec") or {})
    old_spec = old.get("spec") or {}
    for key in ("containers", "initContainers"):
        new_list, old_list = new_spec.get(key), old_spec.get(key)
        if isinstance(new_list, list) and isinstance(old_list, list) and len(new_list) == len(old_list):  # fmt: skip
            new_spec[key] = [
                {**n, "image": o.get("image")} if isinstance(n, dict) and isinstance(o, dict) else n
                for n, o in zip(new_list, old_list, strict=True)
            ]
    for key in ("activeDeadlineSeconds",):
        if key in old_spec:
            new_spec[key] = old_spec[key]
        else:
            new_spec.pop(key, None)
    old_tolerations = old_spec.get("tolerations") or []
    new_tolerations = new_spec.get("tolerations") or []
    if all(t in new_tolerations for t in old_tolerations):
        new_spec.pop("tolerations", None)
        old_spec = {k: v for k, v in old_spec.items() if k != "tolerations"}
    old_gates = old_spec.get("schedulingGates") or []
    if all(g in old_gates for g in new_spec.get("schedulingGates") or []):
        new_spec.pop("schedulingGates", None)
        old_spec = {k: v for k, v in old_spec.items() if k != "schedulingGates"}
    if new_spec != old_spec:
        return [("spec", POD_UPDATE_FORBIDDEN, "FieldValueForbidden")]
    return []


# ---------------------------------------------------------------------- other kinds


def _go_map(labels: Mapping[str, Any]) -> str:
    """A label map as kube 1.37 prints it in messages: compact JSON, keys sorted."""
    return json.dumps(dict(labels), separators=(",", ":"), sort_keys=True)


def _workload_causes(rt: ResourceType, obj: Obj, old: Obj | None) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        spec = {}
    causes: list[Cause] = []
    selector = spec.get("selector")
    template = spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    if not selector:
        causes.append(("spec.selector", "Required value", "FieldValueRequired"))
    else:
        parsed = LabelSelector.from_object(selector)
        if parsed.empty:
            causes.append(("spec.selector", f"Invalid value: {json.dumps(selector)}: empty selector is invalid for deployment", "FieldValueInvalid"))  # fmt: skip
        elif not parsed.matches(labels):
            causes.append(("spec.template.metadata.labels", f"Invalid value: {_go_map(labels)}: `selector` does not match template `labels`", "FieldValueInvalid"))  # fmt: skip
        if old is not None and (old.get("spec") or {}).get("selector") not in (None, selector):
            causes.append(("spec.selector", f"Invalid value: {json.dumps(selector)}: field is immutable", "FieldValueInvalid"))  # fmt: skip
    replicas = spec.get("replicas")
    if isinstance(replicas, int) and replicas < 0:
        causes.append(("spec.replicas", f"Invalid value: {replicas}: must be greater than or equal to 0", "FieldValueInvalid"))  # fmt: skip
    causes += _label_causes(labels, "spec.template.metadata.labels")
    causes += _pod_spec_causes(rt, template.get("spec"), "spec.template.spec", restart=("Always",))
    return causes


def _service_causes(obj: Obj) -> list[Cause]:
    spec = obj.get("spec") or {}
    kind = spec.get("type") or "ClusterIP"
    if kind not in _SERVICE_TYPES:
        supported = ", ".join(f'"{t}"' for t in _SERVICE_TYPES)
        return [("spec.type", f'Unsupported value: "{kind}": supported values: {supported}', "FieldValueNotSupported")]  # fmt: skip
    causes: list[Cause] = []
    ports = spec.get("ports") or []
    if not ports and kind != "ExternalName" and spec.get("clusterIP") != "None":
        causes.append(("spec.ports", "Required value", "FieldValueRequired"))
    for i, port in enumerate(ports):
        number = port.get("port") if isinstance(port, Mapping) else None
        if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= 65535:
            causes.append((f"spec.ports[{i}].port", f"Invalid value: {json.dumps(number)}: must be between 1 and 65535, inclusive", "FieldValueInvalid"))  # fmt: skip
    return causes


def _pdb_causes(obj: Obj) -> list[Cause]:
    spec = obj.get("spec") or {}
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        return [("spec", f"Invalid value: {json.dumps(spec, sort_keys=True)}: minAvailable and maxUnavailable cannot be both set", "FieldValueInvalid")]  # fmt: skip
    return []


_MICRO_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\.(\d{6})(Z|[+-]\d{2}:\d{2})$")
RFC3339_MICRO = "2006-01-02T15:04:05.000000Z07:00"
"""metav1.MicroTime's layout: Go's time.Parse wants exactly six fractional digits."""
_LEASE_INTS = ("leaseDurationSeconds", "leaseTransitions")


def _micro_time(value: str) -> str | None:
    """A MicroTime as kube-apiserver re-encodes it (UTC, `Z`), or None when Go cannot parse it."""
    match = _MICRO_TIME.match(value)
    if match is None:
        return None
    zone = "+00:00" if match.group(3) == "Z" else match.group(3)
    try:
        parsed = datetime.fromisoformat(f"{match.group(1)}.{match.group(2)}{zone}")
    except ValueError:
        return None
    return parsed.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _lease_causes(obj: Obj) -> list[Cause]:
    """pkg/apis/coordination/validation.ValidateLeaseSpec; MicroTimes are normalized in place
    (the stored object is what the server would encode back)."""
    spec = obj.get("spec")
    if spec is None:
        return []
    bad_body = 'Lease in version "v1" cannot be handled as a Lease: '
    if not isinstance(spec, dict):
        raise errors.bad_request(f"{bad_body}json: cannot unmarshal {_json_type(spec)} into Go struct field Lease.spec of type v1.LeaseSpec")  # fmt: skip
    for field in ("acquireTime", "renewTime"):
        value = spec.get(field)
        if value is None:
            continue
        normalized = _micro_time(value) if isinstance(value, str) else None
        if normalized is None:
            raise errors.bad_request(
                f"{bad_body}parsing time {json.dumps(value)} as {json.dumps(RFC3339_MICRO)}: "
                "cannot parse as a MicroTime"
            )
        spec[field] = normalized
    for field in _LEASE_INTS:
        value = spec.get(field)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise errors.bad_request(f"{bad_body}json: cannot unmarshal {_json_type(value)} into Go struct field LeaseSpec.spec.{field} of type int32")  # fmt: skip
    for field in ("holderIdentity", "strategy", "preferredHolder"):
        value = spec.get(field)
        if value is not None and not isinstance(value, str):
            raise errors.bad_request(f"{bad_body}json: cannot unmarshal {_json_type(value)} into Go struct field LeaseSpec.spec.{field} of type string")  # fmt: skip
    causes: list[Cause] = []
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and duration <= 0:
        causes.append(("spec.leaseDurationSeconds", f"Invalid value: {duration}: must be greater than 0", "FieldValueInvalid"))  # fmt: skip
    transitions = spec.get("leaseTransitions")
    if transitions is not None and transitions < 0:
        causes.append(("spec.leaseTransitions", f"Invalid value: {transitions}: must be greater than or equal to 0", "FieldValueInvalid"))  # fmt: skip
    # The fields of coordinated leader election are dropped, not validated: its feature gate
    # (CoordinatedLeaderElection, beta) is off by default in 1.37 (dropDisabledFields).
    spec.pop("strategy", None)
    spec.pop("preferredHolder", None)
    return causes


# ---------------------------------------------------------------------- entry points


def _event_causes(obj: Obj) -> list[Cause]:
    """core/v1 Events without eventTime (legacyValidateEvent): the involved object's namespace
    is the event's own; an empty one only in the default namespace (for old clients)."""
    if obj.get("eventTime"):
        return []
    namespace = (obj.get("metadata") or {}).get("namespace") or ""
    involved = str((obj.get("involvedObject") or {}).get("namespace") or "")
    if (not involved and namespace not in ("", "default")) or (involved and involved != namespace):
        return [
            (
                "involvedObject.namespace",
                f'Invalid value: "{involved}": does not match event.namespace',
                "FieldValueInvalid",
            )
        ]
    return []


def _same(new: Any, old: Any) -> bool:
    return new is old or new == old


def check(rt: ResourceType, obj: Obj, old: Obj | None = None, *, pod_update: bool = False) -> None:
    """Raise 422 Invalid (or 400 for undecodable values) if `obj` breaks a rule of its kind.

    `old` is the stored object on updates; `pod_update` applies pod spec immutability (client
    writes of the main resource: the binding subresource and controllers may set nodeName).
    """
    meta = obj.get("metadata") or {}
    old_meta = (old.get("metadata") or {}) if old is not None else None
    causes: list[Cause] = []
    # The stored version passed these checks: parts an update leaves equal need no second look
    # (merge patches share unchanged subtrees, so this is usually an identity test).
    if old_meta is None or not _same(meta.get("labels"), old_meta.get("labels")):
        causes += _label_causes(meta.get("labels"), "metadata.labels")
    key = rt.key
    if old is not None and _same(obj.get("spec"), old.get("spec")):
        pass
    elif key == PODS.key:
        causes += _pod_spec_causes(rt, obj.get("spec"), "spec", restart=_RESTART_POLICIES)
        if pod_update and old is not None:
            causes += _pod_update_causes(obj, old)
    elif key in (DEPLOYMENTS.key, DAEMONSETS.key):
        causes += _workload_causes(rt, obj, old)
    elif key == SERVICES.key:
        causes += _service_causes(obj)
    elif key == PDBS.key:
        causes += _pdb_causes(obj)
    elif key == LEASES.key:
        causes += _lease_causes(obj)
    elif key == EVENTS.key:
        causes += _event_causes(obj)
    if causes:
        raise errors.invalid(rt, meta.get("name", ""), causes)
