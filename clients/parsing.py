"""Turning what a user typed into Colony's models: flag values, `-f` files, and validation.

Every helper refuses a bad value with an `InvalidRequestError` whose message is `<field>: <rule>`,
so the command line prints it on one line and exits 2 before anything starts. Models are always
built through `models.base.user_input` (strict: a field the model does not know is refused by name,
and integers and booleans must be of their type). What the command line holds as text (`count=2` in
a `--node-pool`) is converted here, before the model, so that a file's or an HTTP body's `"2"`
stays refused. Called by the command modules (`starter/commands/`) and the HTTP API (`api/`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic.alias_generators import to_camel

from clients.errors import InvalidRequestError
from models.base import user_input, user_rule
from models.bounds import MAX_DOCUMENT_BYTES, InputError, load_json
from models.bounds import load_yaml as load_yaml_text

ModelT = TypeVar("ModelT", bound=BaseModel)

_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_WHOLE = re.compile(r"^[+-]?\d+$")


def _field(location: Sequence[int | str]) -> str:
    path = ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += ("." if path else "") + to_camel(part)
    return path


def validation_message(exc: ValidationError) -> str:
    """The first problem of a validation error as `<field>: <rule>`."""
    first = exc.errors(include_url=False)[0]
    location = [part for part in first["loc"] if not str(part).startswith("function-")]
    field = _field(location) or to_camel(str(first["type"]))
    return f"{field}: {user_rule(first)}"


def validated(model: type[ModelT], data: Any, *, prefix: str = "") -> ModelT:
    """`model` validated from user data; a problem is an `InvalidRequestError` naming the field.

    Args:
        model: the request model.
        data: what the user gave (flags gathered in a dict, or a file's content).
        prefix: prepended to the field path, e.g. "pool." when the data is one part of a request.
    """
    try:
        return user_input(model, data)
    except ValidationError as exc:
        raise InvalidRequestError(prefix + validation_message(exc)) from exc


def refusal(error: InputError, field: str) -> InvalidRequestError:
    """A document refused as it was read (`models.bounds`), naming where in `field` it is."""
    where = error.where()
    return InvalidRequestError(f"{field}{'.' + where if where else ''}: {error.detail}")


def json_flag(text: str, field: str) -> Any:
    """The JSON a flag (`--node-pool`, `--sku`) holds, read strictly (`models.bounds.load_json`)."""
    try:
        return load_json(text, what=field)
    except InputError as exc:
        raise refusal(exc, field) from exc


def duration(text: str, field: str) -> timedelta:
    """ "90s", "5m", "1h30m", "30d" or plain seconds."""
    if text.isdigit():
        return timedelta(seconds=int(text))
    match = _DURATION.match(text)
    if not text or match is None:
        raise InvalidRequestError(f"{field}: '{text}' is not a duration (like 90s, 5m or 1h)")
    days, hours, minutes, seconds = (int(group or 0) for group in match.groups())
    return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)


_POOL_KEYS = {
    "name": "name",
    "count": "count",
    "gpuModelId": "gpuModelId",
    "gpu-model-id": "gpuModelId",
    "gpu": "gpuModelId",
    "cpuSku": "cpuSku",
    "cpu-sku": "cpuSku",
    "cpu": "cpuSku",
    "drainParallelism": "drainParallelism",
    "drain-parallelism": "drainParallelism",
}
_POOL_INTEGERS = ("count", "drainParallelism")


def parse_pool(text: str, field: str = "nodePools") -> dict[str, Any]:
    """A `--node-pool`: JSON (`{"name": ..., "sku": {...}, "count": 2}`) or
    `name=gpu,count=2,gpuModelId=h100-80gb` (or `cpuSku=...`; `drainParallelism=10`)."""
    text = text.strip()
    if text.startswith("{"):
        data = json_flag(text, field)
        if not isinstance(data, dict):
            raise InvalidRequestError(f"{field}: a node pool must be a JSON object")
        return data
    pool: dict[str, Any] = {}
    sku: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise InvalidRequestError(f"{field}: '{part}' is not key=value")
        canonical = _POOL_KEYS.get(key.strip())
        if canonical is None:
            raise InvalidRequestError(
                f"{field}: unknown key '{key.strip()}' "
                "(name, count, gpuModelId, cpuSku, drainParallelism)"
            )
        if canonical in ("gpuModelId", "cpuSku"):
            sku[canonical] = value
        elif canonical in _POOL_INTEGERS and _WHOLE.match(value.strip()):
            # Text on the command line: the model takes integers only (see the module docstring).
            pool[canonical] = int(value)
        else:
            pool[canonical] = value
    if sku:
        pool["sku"] = sku
    return pool


def parse_labels(items: Sequence[str]) -> dict[str, str]:
    """`key=value` flags as a dict."""
    labels: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise InvalidRequestError(f"labels: '{item}' is not key=value")
        labels[key] = value
    return labels


def parse_taints(items: Sequence[str]) -> list[dict[str, str]]:
    """`key=value:Effect` or `key:Effect`, as `kubectl taint` writes them."""
    taints: list[dict[str, str]] = []
    for item in items:
        head, sep, effect = item.rpartition(":")
        if not sep:
            raise InvalidRequestError(f"taints: '{item}' is not key[=value]:Effect")
        key, _, value = head.partition("=")
        taints.append({"key": key, "value": value, "effect": effect})
    return taints


def parse_sku(
    sku_json: str | None, gpu_model_id: str | None, cpu_sku: str | None
) -> dict[str, Any]:
    """A pool's SKU from `--sku JSON` and/or `--gpu-model-id` / `--cpu-sku`."""
    data: dict[str, Any] = {}
    if sku_json:
        loaded = json_flag(sku_json, "sku")
        if not isinstance(loaded, dict):
            raise InvalidRequestError("sku: must be a JSON object")
        data = loaded
    if gpu_model_id is not None:
        data["gpuModelId"] = gpu_model_id
    if cpu_sku is not None:
        data["cpuSku"] = cpu_sku
    return data


def read_text(path: Path, field: str = "file", *, stdin: bool = True) -> tuple[str, str]:
    """(where it came from, its text) of a `-f` file; `-` reads stdin (when the flag takes it).

    Args:
        field: the flag's field, for a refusal (`file: cannot read x.yaml: ...`).
    """
    if stdin and str(path) == "-":
        source, text = "stdin", sys.stdin.read(MAX_DOCUMENT_BYTES + 1)
    else:
        try:
            with path.open(encoding="utf-8") as opened:
                # One byte past the limit is enough to refuse it: a huge file is never read whole.
                source, text = str(path), opened.read(MAX_DOCUMENT_BYTES + 1)
        except OSError as exc:
            raise InvalidRequestError(f"{field}: cannot read {path}: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise InvalidRequestError(f"{field}: {path} is not UTF-8 text: {exc.reason}") from exc
    if len(text.encode()) > MAX_DOCUMENT_BYTES:
        raise InvalidRequestError(
            f"{field}: {source} is larger than {MAX_DOCUMENT_BYTES // 1024} KiB, the most a file "
            "may hold"
        )
    return source, text


def load_yaml(path: Path, field: str = "file", *, stdin: bool = True) -> Any:
    """The YAML (or JSON) document of a `-f` file, read strictly (`models.bounds.load_yaml`: too
    deep, too large or a key given twice is refused), refused with `field` when it is not one."""
    source, text = read_text(path, field, stdin=stdin)
    try:
        return load_yaml_text(text, what=source)
    except InputError as exc:
        if exc.syntax:
            raise InvalidRequestError(f"{field}: {source} is {exc.message}") from exc
        if exc.kind == "depth":
            # The file is the field's value: it is what nests too deep.
            raise InvalidRequestError(f"{field}: {exc.message}") from exc
        raise refusal(exc, field) from exc


def load_file(path: Path) -> dict[str, Any]:
    """A cluster spec from YAML or JSON: a bare spec, or a manifest `{kind, metadata, spec}`."""
    data = load_yaml(path, stdin=False)
    if not isinstance(data, dict):
        raise InvalidRequestError(f"file: {path} must hold a mapping (a cluster spec)")
    return spec_of(data)


def spec_of(document: dict[str, Any]) -> dict[str, Any]:
    """The spec a file written before manifests holds: bare, or as `{kind, metadata, spec}` (its
    name from the metadata when the spec has none)."""
    if isinstance(document.get("spec"), dict):
        spec = dict(document["spec"])
        name = (document.get("metadata") or {}).get("name")
        if name and "name" not in spec:
            spec["name"] = name
        return spec
    # A bare spec: `kind`/`apiVersion` written out of habit are not fields of the spec.
    return {key: value for key, value in document.items() if key not in ("kind", "apiVersion")}
