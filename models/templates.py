"""k0rdent cluster templates as Colony reads them: a template's values checked against the
template's own JSON schema, and the node pool a template's Cluster API MachineDeployment is.

The schema is the one KCM keeps for the template (its ConfigMap `status.schemaConfigMapName`,
key `schema`), read from the management cluster by the `check_cluster_prerequisites` activity;
the rules here are pure, so the activity, the workflow and the tests share them.

Which templates have a machine-deployment pool: those whose values schema takes `workersNumber`
and a `worker` object sized by `instanceType` (AWS, GCP), `vmSize` (Azure) or `vmTemplate`
(vSphere): k0rdent's `*-standalone-cp` charts, which render one MachineDeployment `<cluster>-md`
of `workersNumber` replicas. Its pool is `workers`, its SKU the instance type.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from jsonschema.validators import validator_for

from models.base import ColonyModel

MACHINE_DEPLOYMENT_POOL = "workers"
"""The name of the pool a template's MachineDeployment is."""
WORKERS_FIELD = "workersNumber"
WORKER_SIZE_FIELDS = ("instanceType", "vmSize", "vmTemplate")
"""The `worker` values that name what every worker is, by cloud: AWS and GCP, Azure, vSphere."""
MAX_PROBLEMS = 5
"""Refusals name at most this many fields (the first, in document order)."""


class TemplatePool(ColonyModel):
    """The pool a template's MachineDeployment is, as a config sizes it."""

    name: str = MACHINE_DEPLOYMENT_POOL
    instance_type: str
    count: int
    minimum: int = 0
    """The schema's minimum of `workersNumber` (0: the template runs workloads on its control
    plane without workers)."""


def _path(error: ValidationError) -> str:
    parts = [str(p) if not isinstance(p, int) else f"[{p}]" for p in error.absolute_path]
    field = "config"
    for part in parts:
        field += part if part.startswith("[") else f".{part}"
    if error.validator == "required":
        missing = re.match(r"'([^']+)' is a required property", error.message)
        if missing:
            field += f".{missing.group(1)}"
    return field


def merged_values(defaults: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """The values Helm renders a chart with: the chart's defaults with the config over them, maps
    merged key by key, anything else replaced."""
    out = dict(defaults)
    for key, value in config.items():
        base = out.get(key)
        if isinstance(base, Mapping) and isinstance(value, Mapping):
            out[key] = merged_values(base, value)
        else:
            out[key] = value
    return out


def config_problems(
    schema: Mapping[str, Any],
    config: Mapping[str, Any],
    defaults: Mapping[str, Any] | None = None,
) -> list[str]:
    """Why `config` (over the template's `defaults`, as Helm merges them) does not satisfy the
    template's values schema, one line per field (`config.worker.instanceType: 'instanceType' is a
    required property`); empty: it does."""
    validator_class = validator_for(schema, default=Draft202012Validator)
    validator = validator_class(schema)
    values = merged_values(defaults or {}, config)
    errors = sorted(validator.iter_errors(values), key=lambda e: [str(p) for p in e.path])
    return [f"{_path(error)}: {error.message}" for error in errors[:MAX_PROBLEMS]]


def schema_problem(schema: Any) -> str | None:
    """Why a template's schema cannot be used (it is not a JSON schema), or None."""
    if not isinstance(schema, Mapping):
        return "the template's values schema is not a JSON object"
    try:
        validator_for(schema, default=Draft202012Validator).check_schema(dict(schema))
    except Exception as error:  # jsonschema's SchemaError and friends: reported, never raised
        return f"the template's values schema is not a valid JSON schema: {error}"
    return None


def template_pool(schema: Mapping[str, Any], config: Mapping[str, Any]) -> TemplatePool | None:
    """The machine-deployment pool of a template with this schema and config, or None when the
    template has none (module docstring)."""
    properties = schema.get("properties") or {}
    worker_schema = (properties.get("worker") or {}).get("properties") or {}
    size_fields = [name for name in WORKER_SIZE_FIELDS if name in worker_schema]
    if WORKERS_FIELD not in properties or not size_fields:
        return None
    worker = config.get("worker") or {}
    instance_type = next(
        (
            str(worker[name])
            for name in size_fields
            if isinstance(worker, Mapping) and worker.get(name)
        ),
        "",
    )
    workers = config.get(WORKERS_FIELD)
    count = (
        int(workers) if isinstance(workers, int | float) and not isinstance(workers, bool) else 0
    )
    minimum = properties[WORKERS_FIELD].get("minimum", 0)
    return TemplatePool(
        instance_type=instance_type,
        count=count,
        minimum=int(minimum) if isinstance(minimum, int | float) else 0,
    )
