"""Bounded input: the limits on what users send, and the strict reading of the JSON and YAML it
comes in.

Every door reads user data through here before anything starts (the HTTP API's bodies,
`colonyctl`'s `-f` files and JSON flags, `apply -f` manifests, and the models' rules for free-form
fields), so a request that is too deep, too large or ambiguous is refused naming the field and the
limit, and nothing behind the doors (pydantic, the data converter, Temporal, Helm) ever meets it.

| what | limit | why |
| --- | --- | --- |
| nesting of a free-form value (Helm `values`, prompt answers, a class's `defaultValues`, raw specs) | 32 levels | the worker decodes every workflow input with pydantic's JSON parser, which stops at 200 levels across the whole payload (a value sits several levels inside its workflow's input and state); charts' values rarely nest past 10 |
| keys and list items of one free-form value | 10,000 | each is copied, merged and serialized on every deploy |
| one string (a key or a value) in a free-form value | 64 KiB | a certificate or a script fits |
| one free-form field, all its text | 128 KiB | values, answers and a class's defaults end up in one workflow input and one ServiceSet: Temporal warns at 512 KiB a payload and refuses 2 MiB, Helm keeps a release in a Secret of at most 1 MiB |
| prompt answers of one request | 100 | a class asks fewer |
| labels, annotations of one object | 64 each; annotations 64 KiB in all | Kubernetes allows 256 KiB of annotations an object, Colony adds its own |
| a request body, a manifest or values file | 1 MiB, 64 levels, 100,000 tokens | measured before a parser sees it |
| a workflow's input or update, as the data converter encodes it | 512 KiB | Temporal's warning size for one payload (its limit is 2 MiB) |

Depth is counted with an explicit stack, and text is measured before any parser that recurses
(Python's `json`, PyYAML's composer) reads it, so no input reaches Python's recursion limit: a
`RecursionError` is impossible, not caught. Strict reading: a key given twice in one object
(JSON) or mapping (YAML) is refused naming it, where a lenient parser keeps the last; JSON's
`NaN` and `Infinity` are refused; YAML timestamps stay text, as Helm and Kubernetes read them.

Pure: no IO. Used by `models/` rules (`bounded`, `labels_bound_problem`), `api.bodies`,
`clients.parsing`, `models.manifests` and `starter.commands.apply`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any, get_args, get_origin

from pydantic import AfterValidator, BaseModel, BeforeValidator, ValidationInfo
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from models.base import USER_INPUT

if TYPE_CHECKING:
    import yaml

KIB = 1024

MAX_VALUE_DEPTH = 32
"""Levels of nesting of a free-form value (see the module docstring)."""
MAX_VALUE_NODES = 10_000
"""Keys and list items of one free-form value."""
MAX_STRING_BYTES = 64 * KIB
"""One string of a free-form value, a key or a value."""
MAX_VALUE_BYTES = 128 * KIB
"""The text of one free-form field: its strings and numbers, counted as UTF-8."""
MAX_ANSWERS = 100
"""Prompt answers (plain, sealed or secret) one request gives."""
MAX_LABELS = 64
"""Labels (or annotations) of one object."""
MAX_ANNOTATION_BYTES = 64 * KIB
"""All annotations of one object (Kubernetes allows 256 KiB; Colony adds its own)."""
MAX_DOCUMENT_BYTES = 1024 * KIB
"""A request body, or one `-f` file (manifests, values)."""
MAX_DOCUMENT_DEPTH = 2 * MAX_VALUE_DEPTH
"""Nesting of a whole body or manifest document: a free-form field (32 levels) under the few
levels of structure a request has."""
MAX_DOCUMENT_TOKENS = 100_000
"""Keys, strings, brackets and commas (JSON), or nodes (YAML), of one document."""
MAX_WORKFLOW_PAYLOAD_BYTES = 512 * KIB
"""A workflow's input or an update's request as the data converter encodes it: Temporal's warning
size for one payload (`BlobSizeLimitWarn`; its error limit is 2 MiB)."""
INT64 = 2**63
"""Helm and Kubernetes read integers as 64-bit (Go's `int64`)."""


def _kib(size: int) -> str:
    return f"{size // KIB} KiB" if size % KIB == 0 else f"{size} bytes"


def _shown_path(path: tuple[str | int, ...]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else ("." if text else "") + str(part)
    return text if len(text) <= 80 else text[:77] + "..."


def _at(path: tuple[str | int, ...]) -> str:
    return f" at '{_shown_path(path)}'" if path else ""


# --- free-form values -------------------------------------------------------------------------


def value_problem(value: Any, *, max_bytes: int = MAX_VALUE_BYTES) -> str | None:
    """Why a free-form value (Helm values, an answer, a raw spec) is more than Colony takes, or None.

    Walks the value with an explicit stack (never recursion), and stops at the first limit passed:
    nesting, keys and items, one string's size, the whole text's size; and a value no JSON can
    carry (a key that is not text, an integer beyond 64 bits, NaN, a date or bytes).
    """
    stack: list[tuple[Any, int, tuple[str | int, ...]]] = [(value, 0, ())]
    nodes = 0
    size = 0
    while stack:
        node, depth, path = stack.pop()
        if isinstance(node, Mapping | list):
            if depth >= MAX_VALUE_DEPTH:
                return (
                    f"nested more than {MAX_VALUE_DEPTH} levels deep; at most {MAX_VALUE_DEPTH} "
                    "are allowed"
                )
            items = list(node.items()) if isinstance(node, Mapping) else list(enumerate(node))
            nodes += len(items)
            if nodes > MAX_VALUE_NODES:
                return (
                    f"holds more than {MAX_VALUE_NODES} keys and items; at most "
                    f"{MAX_VALUE_NODES} are allowed"
                )
            for key, child in reversed(items):
                if isinstance(node, Mapping):
                    if not isinstance(key, str):
                        return (
                            f"key {key!r}{_at(path)} is not text: quote it (JSON and Helm "
                            "keys are strings)"
                        )
                    size += len(key.encode())
                stack.append((child, depth + 1, (*path, key)))
            continue
        problem, taken = _scalar_problem(node, path)
        if problem:
            return problem
        size += taken
        if size > max_bytes:
            return (
                f"holds more than {_kib(max_bytes)} of text; at most {_kib(max_bytes)} is allowed"
            )
    return None


def _scalar_problem(node: Any, path: tuple[str | int, ...]) -> tuple[str | None, int]:
    """(why a leaf is no JSON value Colony takes, or None; the bytes it counts for)."""
    if node is None or isinstance(node, bool):
        return None, 4
    if isinstance(node, str):
        taken = len(node.encode())
        if taken > MAX_STRING_BYTES:
            return (
                f"the text{_at(path)} is {taken} bytes long; at most {_kib(MAX_STRING_BYTES)} "
                "are allowed in one string"
            ), taken
        return None, taken
    if isinstance(node, int):
        if not -INT64 <= node < INT64:
            return f"the integer{_at(path)} does not fit 64 bits (Helm's and Kubernetes')", 0
        return None, 8
    if isinstance(node, float):
        if not math.isfinite(node):
            return f"the number{_at(path)} is {node}, which JSON cannot carry", 0
        return None, 8
    return (
        f"the {type(node).__name__}{_at(path)} is no JSON value: give text, a number, true, "
        "false, null, a list or a map",
        0,
    )


def bounded(*, max_bytes: int = MAX_VALUE_BYTES) -> BeforeValidator:
    """The bounds of a free-form field (`value_problem`), checked before pydantic or anything
    else looks into it, on data a user sent (`models.base.user_input`): persisted state and
    history are read as they are, so that tomorrow's release replays today's histories."""

    def check(value: Any, info: ValidationInfo) -> Any:
        if info.context and info.context.get(USER_INPUT):
            problem = value_problem(value, max_bytes=max_bytes)
            if problem:
                raise PydanticCustomError(info.field_name or "value", problem)
        return value

    return BeforeValidator(check)


def user_bound(problem: Callable[[Any], str | None]) -> AfterValidator:
    """A bound of a field (`answers_bound_problem`, `labels_bound_problem`), checked on data a user
    sent only, as `bounded` is; its message word for word, located at the field."""

    def check(value: Any, info: ValidationInfo) -> Any:
        if value is not None and info.context and info.context.get(USER_INPUT):
            found = problem(value)
            if found:
                raise PydanticCustomError(info.field_name or "value", found)
        return value

    return AfterValidator(check)


def answers_bound_problem(answers: Mapping[str, Any]) -> str | None:
    """Why a request's prompt answers are too many, or None."""
    if len(answers) > MAX_ANSWERS:
        return f"gives {len(answers)} answers; at most {MAX_ANSWERS} are allowed"
    return None


def labels_bound_problem(labels: Mapping[str, str]) -> str | None:
    """Why an object's labels are too many, or None (each is checked by `models.names`)."""
    if len(labels) > MAX_LABELS:
        return f"gives {len(labels)} labels; at most {MAX_LABELS} are allowed"
    return None


def annotations_bound_problem(annotations: Mapping[str, str]) -> str | None:
    """Why an object's annotations are too many, too large, or one's key is no Kubernetes
    annotation key (a qualified name, as a label's), or None."""
    from models.names import label_key_problem  # names needs nothing of this module

    for key in annotations:
        problem = label_key_problem(key)
        if problem:
            return problem.replace("label key", "annotation key", 1)
    if len(annotations) > MAX_LABELS:
        return f"gives {len(annotations)} annotations; at most {MAX_LABELS} are allowed"
    size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())
    if size > MAX_ANNOTATION_BYTES:
        return (
            f"annotations hold {size} bytes; at most {_kib(MAX_ANNOTATION_BYTES)} are allowed in "
            "all"
        )
    return None


# --- documents ---------------------------------------------------------------------------------


class InputError(ValueError):
    """A document refused before it was parsed, or while it was.

    Attributes:
        path: where in the document the problem is (empty: the document as a whole).
        kind: what is wrong: `syntax` (a malformed document, which the API answers 400), or a
            well-formed one refused (422): `size`, `depth`, `tokens`, `duplicate`, `value`.
        line: the line of a YAML text the problem is on (1-based), when known.
        document: which document of a YAML text it is in (1-based), when known.
        heads: that document's top-level `apiVersion` and `kind`, when read before the problem.
    """

    def __init__(
        self,
        path: tuple[str | int, ...],
        message: str,
        *,
        kind: str,
        line: int | None = None,
        document: int | None = None,
    ) -> None:
        super().__init__(message)
        self.path = path
        self.message = message
        self.kind = kind
        self.line = line
        self.document = document
        self.heads: dict[str, str] = {}

    @property
    def syntax(self) -> bool:
        """The document is malformed (not JSON, not YAML), not refused for what it holds."""
        return self.kind == "syntax"

    @property
    def detail(self) -> str:
        """The message, with the line it is on when known."""
        return f"line {self.line}: {self.message}" if self.line else self.message

    def where(self, document: str = "") -> str:
        """`<path>` (or `document` for the whole), as a message's field."""
        return _shown_path(self.path) or document

    def where_first(self, steps: int) -> str:
        """The path's first `steps` steps, as a message's field."""
        return _shown_path(self.path[:steps])


def _too_large(raw: bytes | str, what: str) -> InputError | None:
    size = len(raw.encode() if isinstance(raw, str) else raw)
    if size > MAX_DOCUMENT_BYTES:
        return InputError(
            (),
            f"{what} is {size} bytes long; at most {_kib(MAX_DOCUMENT_BYTES)} are allowed",
            kind="size",
        )
    return None


def _too_deep(path: tuple[str | int, ...]) -> InputError:
    return InputError(
        path,
        f"nested more than {MAX_VALUE_DEPTH} levels deep; at most {MAX_VALUE_DEPTH} are allowed",
        kind="depth",
    )


def _too_many(what: str) -> InputError:
    return InputError(
        (),
        f"{what} holds more than {MAX_DOCUMENT_TOKENS} keys, items and brackets; at most "
        f"{MAX_DOCUMENT_TOKENS} are allowed",
        kind="tokens",
    )


def _duplicate(path: tuple[str | int, ...], key: Any, line: int | None = None) -> InputError:
    return InputError(
        path,
        f"key '{key}' is given more than once in one object (its last value would win "
        "unseen): give it once",
        kind="duplicate",
        line=line,
    )


_STRING = rb'"[^"\\]*(?:\\.[^"\\]*)*"'
_JSON_TOKEN = re.compile(
    rb"(?P<key>" + _STRING + rb")\s*:|(?P<string>" + _STRING + rb")|(?P<open>[\[{])"
    rb"|(?P<close>[\]}])|(?P<comma>,)",
    re.DOTALL,
)


@dataclass
class _Frame:
    """One open object or array while a document is scanned."""

    is_object: bool
    key: str | None = None
    index: int = 0
    keys: set[str] = field(default_factory=set)

    @property
    def segment(self) -> str | int:
        return (self.key or "") if self.is_object else self.index


def _scan_json(raw: bytes, what: str) -> None:
    """Refuse, before any parser recurses into it, a JSON document nested too deep, too long, or
    with a key given twice; malformed JSON is left to the parser."""
    frames: list[_Frame] = []
    for tokens, match in enumerate(_JSON_TOKEN.finditer(raw), start=1):
        if tokens > MAX_DOCUMENT_TOKENS:
            raise _too_many(what)
        kind = match.lastgroup
        if kind == "open":
            frames.append(_Frame(is_object=match.group() == b"{"))
            if len(frames) > MAX_DOCUMENT_DEPTH:
                raise _too_deep(tuple(f.segment for f in frames[:-1]))
        elif kind == "close":
            if frames:
                frames.pop()
        elif kind == "key" and frames and frames[-1].is_object:
            top = frames[-1]
            try:
                key = json.loads(match.group("key"))
            except ValueError:
                continue  # malformed: the parser says so
            if key in top.keys:
                raise _duplicate((*(f.segment for f in frames[:-1]), key), key)
            top.keys.add(key)
            top.key = key
        elif kind == "comma" and frames and not frames[-1].is_object:
            frames[-1].index += 1


def _no_constant(name: str) -> Any:
    raise InputError(
        (), f"{name} is not a JSON number Colony takes (give a finite number)", kind="value"
    )


def load_json(raw: bytes | str, *, what: str = "body") -> Any:
    """A JSON document read strictly (module docstring).

    Args:
        raw: the document's text.
        what: what it is, for a refusal of the whole (`body`, `--node-pool`).

    Raises:
        InputError: too large, too deep, a key twice, `NaN`; or (`syntax`) not JSON at all.
    """
    data = raw.encode() if isinstance(raw, str) else raw
    refused = _too_large(data, what)
    if refused:
        raise refused
    _scan_json(data, what)
    try:
        return json.loads(data, parse_constant=_no_constant)
    except InputError:
        raise
    except ValueError as exc:  # JSONDecodeError, and bad UTF-8
        raise InputError((), f"not valid JSON: {exc}", kind="syntax") from None


# --- YAML --------------------------------------------------------------------------------------

_TIMESTAMP = "tag:yaml.org,2002:timestamp"


@cache
def _strict_loader() -> type[yaml.SafeLoader]:
    """PyYAML's safe loader, refusing a key given twice in one mapping, with timestamps as text
    (as Helm and Kubernetes read YAML: through JSON, where a date is a string). Made on first use:
    only `-f` files and manifests need a YAML parser, and a refusal of a flag must not import one
    (`tests/test_cli_startup.py`)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if (
                    not isinstance(key_node, yaml.ScalarNode)
                    or key_node.tag == "tag:yaml.org,2002:merge"
                ):
                    continue
                key = self.construct_object(key_node)
                if key in seen:
                    raise _duplicate((), key, key_node.start_mark.line + 1)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    StrictLoader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    return StrictLoader


HEADS = ("apiVersion", "kind")
"""A manifest's top-level keys that say what its `spec` is (`InputError.heads`)."""


@dataclass
class _YamlFrame:
    mapping: bool
    expect_key: bool = True
    key: Any = None
    index: int = 0

    @property
    def segment(self) -> str | int:
        return str(self.key) if self.mapping else self.index

    def item_read(self) -> None:
        if self.mapping:
            self.expect_key = not self.expect_key
        else:
            self.index += 1


def _scan_yaml(text: str, what: str) -> None:
    """Refuse, before PyYAML's composer (which recurses) builds it, a YAML text nested too deep or
    holding too many nodes; PyYAML's parser is a state machine, so reading its events is safe."""
    import yaml

    frames: list[_YamlFrame] = []
    heads: dict[str, str] = {}
    events = documents = 0
    try:
        for event in yaml.parse(text, Loader=_strict_loader()):
            events += 1
            if events > MAX_DOCUMENT_TOKENS:
                raise _too_many(what)
            if isinstance(event, yaml.DocumentStartEvent):
                frames, heads = [], {}
                documents += 1
            elif isinstance(event, yaml.CollectionStartEvent):
                frames.append(_YamlFrame(mapping=isinstance(event, yaml.MappingStartEvent)))
                if len(frames) > MAX_DOCUMENT_DEPTH:
                    error = _too_deep(tuple(f.segment for f in frames[:-1]))
                    error.line = event.start_mark.line + 1 if event.start_mark else None
                    error.document = documents
                    error.heads = heads
                    raise error
            elif isinstance(event, yaml.CollectionEndEvent):
                if frames:
                    frames.pop()
                if frames:
                    frames[-1].item_read()
            elif isinstance(event, yaml.ScalarEvent | yaml.AliasEvent) and frames:
                top = frames[-1]
                if top.mapping and top.expect_key and isinstance(event, yaml.ScalarEvent):
                    top.key = event.value
                elif len(frames) == 1 and top.mapping and top.key in HEADS:
                    heads[str(top.key)] = str(getattr(event, "value", ""))
                top.item_read()
    except yaml.YAMLError as exc:
        raise InputError(
            (), f"not valid YAML: {' '.join(str(exc).split())}", kind="syntax"
        ) from None


def load_yaml_documents(text: str, *, what: str = "file") -> list[Any]:
    """Every document of a YAML (or JSON) text, read strictly (module docstring).

    Raises:
        InputError: too large, too deep, too many nodes, a key twice; or (`syntax`) not YAML.
    """
    refused = _too_large(text, what)
    if refused:
        raise refused
    import yaml

    _scan_yaml(text, what)
    documents: list[Any] = []
    try:
        for document in yaml.load_all(text, Loader=_strict_loader()):
            documents.append(document)
    except InputError as exc:
        exc.document = len(documents) + 1
        raise
    except yaml.YAMLError as exc:
        raise InputError(
            (), f"not valid YAML: {' '.join(str(exc).split())}", kind="syntax"
        ) from None
    return documents


def load_yaml(text: str, *, what: str = "file") -> Any:
    """The one document of a YAML (or JSON) text (None when empty), read strictly."""
    documents = load_yaml_documents(text, what=what)
    if len(documents) > 1:
        raise InputError(
            (), f"{what} holds {len(documents)} YAML documents; give one", kind="value"
        )
    return documents[0] if documents else None


# --- naming the field ------------------------------------------------------------------------


def _model_of(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """(the model a field holds, whether in a list), unwrapping `X | None` and `Annotated`."""
    for _ in range(8):  # Annotated[list[X] | None, ...] unwraps in a few steps
        origin = get_origin(annotation)
        if origin is None:
            break
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        if origin is list and args:
            inner, _ = _model_of(args[0])
            return inner, True
        if not args:
            break
        annotation = args[0]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    return None, False


def field_of(model: type[BaseModel], path: tuple[str | int, ...]) -> str:
    """The field of `model` a path in its JSON document is in: the path followed through the
    model's own fields (and lists of models) down to the first field that holds free-form data
    (`("values", "a", "a")` of a deploy is `values`). Empty for the document as a whole."""
    shown: list[str | int] = []
    current: type[BaseModel] | None = model
    in_list = False
    for segment in path:
        if in_list:
            if not isinstance(segment, int):
                break
            shown.append(segment)
            in_list = False
            continue
        if current is None or isinstance(segment, int):
            break
        found = next(
            (
                info
                for name, info in current.model_fields.items()
                if segment in (name, info.alias or to_camel(name))
            ),
            None,
        )
        shown.append(segment)
        if found is None:
            break
        current, in_list = _model_of(found.annotation)
        if current is None:
            break
    return _shown_path(tuple(shown))
