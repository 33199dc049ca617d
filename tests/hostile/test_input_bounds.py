"""Bounded input, refused before anything starts, at every door: a hostile tenant's `values`
nested 200, 500 and 1,000 deep (which on the old code answered 503 after starting a workflow its
worker could not decode, 500 with a RecursionError, and 400), too many labels, answers or keys, a
string or a body too large. Each is a 422 naming the field and the limit through the HTTP API,
and exit 2 with one line through remote-mode `colonyctl`; nothing is started. The limits
themselves (`models.bounds`) are unit-tested first; a workspace whose values nest exactly as deep
as allowed is deployed and runs, so the limit is one the worker holds.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from api.views import ColonyApplyRequest, WorkspaceDeployRequest
from clients.errors import InvalidRequestError
from clients.parsing import validated
from models.base import user_input
from models.bounds import (
    MAX_DOCUMENT_BYTES,
    MAX_STRING_BYTES,
    MAX_VALUE_BYTES,
    MAX_VALUE_DEPTH,
    MAX_VALUE_NODES,
    InputError,
    annotations_bound_problem,
    field_of,
    load_json,
    load_yaml,
    value_problem,
)
from models.cluster import ClusterSpec
from models.values import SetError, parse_set
from models.workspace import WorkspaceSpec
from tests.api.conftest import ALL_PERMISSIONS, CPU_SKU, JUPYTER, WORKSPACES, ApiStack
from tests.api.test_api_endpoints import error_of
from tests.api.test_api_workspaces import cpu_cluster, notebook, workflow_exists
from tests.api.test_cli_remote import user
from tests.helpers import unique

TOO_DEEP = f"nested more than {MAX_VALUE_DEPTH} levels deep; at most {MAX_VALUE_DEPTH} are allowed"
HOSTILE_DEPTHS = [pytest.param(depth, id=f"{depth}-deep") for depth in (200, 500, 1000)]
"""The depths the report tried (503, 500 RecursionError, 400 on the old code)."""


def nested(depth: int, leaf: Any = "x") -> Any:
    """`{"a": {"a": ... leaf}}`, `depth` maps deep (built without recursion)."""
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def nested_json(depth: int) -> str:
    """The same as JSON text, written without a recursive encoder."""
    return '{"a":' * depth + '"x"' + "}" * depth


def nested_yaml(depth: int) -> str:
    """A values file nesting `depth` maps in block style, as a person would write it."""
    return "".join("  " * level + "a:\n" for level in range(depth)) + "  " * depth + "b: x\n"


# --- the limits ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        pytest.param(nested(MAX_VALUE_DEPTH), None, id="32-deep"),
        pytest.param(nested(MAX_VALUE_DEPTH + 1), TOO_DEEP, id="33-deep"),
        pytest.param(nested(MAX_VALUE_DEPTH + 1, leaf=[]), TOO_DEEP, id="list-at-33"),
        pytest.param({f"k{i}": i for i in range(MAX_VALUE_NODES)}, None, id="10000-keys"),
        pytest.param(
            {f"k{i}": i for i in range(MAX_VALUE_NODES + 1)},
            "holds more than 10000 keys and items; at most 10000 are allowed",
            id="10001-keys",
        ),
        pytest.param({"a": [0] * (MAX_VALUE_NODES + 1)}, "holds more than 10000", id="items"),
        pytest.param({"s": "x" * MAX_STRING_BYTES}, None, id="64KiB-string"),
        pytest.param(
            {"s": {"t": "x" * (MAX_STRING_BYTES + 1)}},
            "the text at 's.t' is 65537 bytes long; at most 64 KiB are allowed in one string",
            id="string-too-long",
        ),
        pytest.param(
            {f"k{i}": "x" * 60_000 for i in range(3)},
            "holds more than 128 KiB of text; at most 128 KiB is allowed",
            id="field-too-large",
        ),
        pytest.param({"n": 2**63 - 1, "m": -(2**63)}, None, id="int64"),
        pytest.param({"n": 2**63}, "does not fit 64 bits", id="int-too-large"),
        pytest.param({"f": float("nan")}, "is nan, which JSON cannot carry", id="nan"),
        pytest.param({"f": float("inf")}, "is inf, which JSON cannot carry", id="inf"),
        pytest.param({"a": {1: "x"}}, "key 1 at 'a' is not text", id="int-key"),
        pytest.param(
            {"d": datetime.date(2026, 1, 1)}, "the date at 'd' is no JSON value", id="date"
        ),
    ],
)
def test_a_free_form_value_is_bounded(value: Any, problem: str | None) -> None:
    found = value_problem(value)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert problem in found


def test_every_limit_sits_well_inside_what_the_worker_decodes() -> None:
    # pydantic's JSON parser (which decodes every workflow input on the worker) stops at 200
    # levels across the whole payload; a value sits a handful of levels inside it.
    assert MAX_VALUE_DEPTH + 10 < 200
    # Temporal warns at 512 KiB a payload and refuses 2 MiB: a body, and a field, stay inside.
    assert MAX_VALUE_BYTES * 3 <= 512 * 1024 <= MAX_DOCUMENT_BYTES < 2 * 1024 * 1024


@pytest.mark.parametrize("depth", [65, 200, 500, 1000, 100_000])
def test_a_json_document_nested_past_the_limit_is_refused_before_it_is_parsed(depth: int) -> None:
    body = '{"name": "nb", "values": ' + nested_json(depth) + "}"
    with pytest.raises(InputError) as caught:
        load_json(body)
    assert (caught.value.kind, caught.value.message) == ("depth", TOO_DEEP)
    # The refusal names the field the nesting is in, as the request model has it.
    assert field_of(WorkspaceDeployRequest, caught.value.path) == "values"


@pytest.mark.parametrize("depth", [65, 200, 1000, 100_000])
def test_a_yaml_document_nested_past_the_limit_is_refused_before_it_is_composed(
    depth: int,
) -> None:
    flow = "v: " + "[" * depth + "]" * depth
    # Block style takes two bytes a level of indentation: past 1,000 levels it is too large first.
    for text in (nested_yaml(depth), flow) if depth <= 1000 else (flow,):
        with pytest.raises(InputError) as caught:
            load_yaml(text)
        assert (caught.value.kind, caught.value.message) == ("depth", TOO_DEEP)


def test_a_document_nested_within_the_limit_is_read() -> None:
    assert load_json(nested_json(60)) == nested(60)
    assert load_yaml(nested_yaml(60)) == nested(60, leaf={"b": "x"})


def test_a_document_too_large_or_too_long_is_refused_before_it_is_parsed() -> None:
    with pytest.raises(InputError) as caught:
        load_json(b" " * (MAX_DOCUMENT_BYTES + 1))
    assert caught.value.kind == "size"
    with pytest.raises(InputError) as caught:
        load_json("[" + ",".join(["0"] * 200_000) + "]")
    assert caught.value.kind == "tokens"


def test_field_of_follows_the_request_model_down_to_the_free_form_field() -> None:
    assert field_of(WorkspaceDeployRequest, ("answers", "x", "y")) == "answers"
    assert field_of(ColonyApplyRequest, ("colonyClusters", 1, "nodePools", 0, "labels", "k")) == (
        "colonyClusters[1].nodePools[0].labels"
    )
    assert field_of(ColonyApplyRequest, ()) == ""


def test_a_users_request_is_bounded_and_a_persisted_one_is_read_as_it_is() -> None:
    deep = {"name": "nb", "class": JUPYTER, "cluster": "c", "values": nested(MAX_VALUE_DEPTH + 8)}
    with pytest.raises(InvalidRequestError) as caught:
        validated(WorkspaceSpec, deep)
    assert caught.value.message == f"values: {TOO_DEEP}"
    # History and state are not user input: what an older release accepted still replays.
    assert WorkspaceSpec.model_validate(deep).values == deep["values"]
    many = {
        "name": "nb",
        "class": JUPYTER,
        "cluster": "c",
        "answers": {f"a{i}": 1 for i in range(101)},
    }
    with pytest.raises(InvalidRequestError) as caught:
        validated(WorkspaceSpec, many)
    assert caught.value.message == "answers: gives 101 answers; at most 100 are allowed"


def test_labels_and_annotations_are_bounded() -> None:
    labels = {f"k{i}": "v" for i in range(65)}
    with pytest.raises(ValidationError) as caught:
        user_input(ClusterSpec, {"name": "c", "locationId": "fra1", "clusterLabels": labels})
    assert "gives 65 labels; at most 64 are allowed" in str(caught.value)
    assert annotations_bound_problem({"bad key!": "x"}) == (
        "annotation key 'bad key!' is invalid: the name part must be 1 to 63 characters, "
        "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
    )
    assert "at most 64 KiB are allowed in all" in str(
        annotations_bound_problem({f"k{i}": "x" * 2000 for i in range(40)})
    )


def test_set_expressions_nest_at_most_as_deep_as_values() -> None:
    assert parse_set(".".join(["a"] * MAX_VALUE_DEPTH) + "=1") == nested(MAX_VALUE_DEPTH, 1)
    for expression in (".".join(["a"] * 1000) + "=1", "a" + "[0]" * 1000 + "=1"):
        with pytest.raises(SetError) as caught:
            parse_set(expression)
        assert str(caught.value).endswith(
            f"nests more than {TOO_DEEP.removeprefix('nested more than ')}"
        )


# --- through the HTTP API -----------------------------------------------------------------------


@pytest.mark.e2e
async def test_values_nested_200_500_and_1000_deep_are_refused_and_start_nothing(
    catalog: ApiStack,
) -> None:
    organization = unique("evil")
    key = await catalog.key(organization)
    async with catalog.http(catalog.app(), key) as http:
        cluster = await cpu_cluster(catalog, http)
        secret = {"notebookPassword": "hunter2hunter2"}
        for depth in (200, 500, 1000, 100_000, MAX_VALUE_DEPTH + 1):
            name = f"deep{depth}"
            body = json.dumps(notebook(name, cluster, secretValues=secret))
            raw = body[:-1] + ', "values": ' + nested_json(depth) + "}"
            refused = await http.post(
                WORKSPACES, content=raw, headers={"Content-Type": "application/json"}
            )
            assert refused.status_code == 422, (depth, refused.text)
            assert error_of(refused) == {
                "code": "invalid",
                "field": "values",
                "message": f"values: {TOO_DEEP}",
            }
            assert not await workflow_exists(catalog, name, organization), depth
        # The tenant's own reads keep answering: nothing of it is wedged.
        listed = await http.get(WORKSPACES)
        assert (listed.status_code, listed.json()["items"]) == (200, [])
        gone = await http.delete(f"/v1/kubernetes/clusters/{cluster}")
        assert gone.status_code == 202, gone.text
        await catalog.wait_gone(http, cluster)


@pytest.mark.e2e
async def test_values_nested_as_deep_as_allowed_are_deployed_and_run(catalog: ApiStack) -> None:
    key = await catalog.key(unique("deep"))
    async with catalog.http(catalog.app(), key) as http:
        cluster = await cpu_cluster(catalog, http)
        name = unique("deep32")
        deployed = await http.post(
            WORKSPACES,
            json=notebook(
                name,
                cluster,
                values={"extra": nested(MAX_VALUE_DEPTH - 1)},
                secretValues={"notebookPassword": "hunter2hunter2"},
            ),
        )
        assert deployed.status_code == 202, deployed.text
        await catalog.wait_workspace(http, name, "Running")
        assert (await http.delete(f"{WORKSPACES}/{name}")).status_code == 202
        await catalog.wait_workspace_gone(http, name)
        await http.delete(f"/v1/kubernetes/clusters/{cluster}")
        await catalog.wait_gone(http, cluster)


@pytest.mark.e2e
async def test_every_bound_is_a_422_naming_the_field_and_the_limit(api_stack: ApiStack) -> None:
    key = await api_stack.key(unique("bounds"))
    async with api_stack.http(api_stack.app(), key) as http:
        clusters = "/v1/kubernetes/clusters"
        pool = {"name": "cpu", "sku": {"cpuSku": CPU_SKU}, "count": 1}
        labels = {f"team-{i}": "x" for i in range(65)}
        many = await http.post(
            clusters,
            json={
                "name": unique("b"),
                "locationId": "fra1",
                "nodePools": [{**pool, "labels": labels}],
            },
        )
        assert (many.status_code, error_of(many)) == (
            422,
            {
                "code": "invalid",
                "field": "nodePools[0].labels",
                "message": "nodePools[0].labels: gives 65 labels; at most 64 are allowed",
            },
        )
        huge = await http.post(
            clusters,
            content=b'{"name": "' + b"x" * MAX_DOCUMENT_BYTES + b'"}',
            headers={"Content-Type": "application/json"},
        )
        assert (huge.status_code, error_of(huge)["field"]) == (422, "body")
        assert error_of(huge)["message"] == (
            "body: larger than 1024 KiB, the most a request body may be"
        )
        answers = {f"a{i}": "x" for i in range(101)}
        deploy = await http.post(
            WORKSPACES, json={"name": "nb", "class": JUPYTER, "cluster": "c", "answers": answers}
        )
        assert (deploy.status_code, error_of(deploy)["message"]) == (
            422,
            "answers: gives 101 answers; at most 100 are allowed",
        )
        long = await http.post(
            WORKSPACES,
            json={"name": "nb", "class": JUPYTER, "cluster": "c", "values": {"s": "x" * 70_000}},
        )
        assert (long.status_code, error_of(long)["message"]) == (
            422,
            "values: the text at 's' is 70000 bytes long; at most 64 KiB are allowed in one string",
        )


# --- through remote-mode colonyctl --------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.slow
async def test_remote_colonyctl_refuses_deep_values_with_one_line(
    catalog: ApiStack, api_url: str, tmp_path: Path
) -> None:
    me = user(tmp_path)
    key = await catalog.key(unique("evil"), *ALL_PERMISSIONS)
    await me.ctl("auth", "login", "--url", api_url, "--api-key", key)
    deploy = ("workspace", "deploy", "nb", "--class", JUPYTER, "--cluster", "c")
    for depth in (200, 1000):
        values = tmp_path / f"deep{depth}.yaml"
        values.write_text(nested_yaml(depth))
        done = await me.ctl(*deploy, "-f", str(values), expect=2)
        assert done.stderr == f"error: values: {TOO_DEEP}\n"
    deep_set = await me.ctl(*deploy, "--set", ".".join(["a"] * 200) + "=1", expect=2)
    assert deep_set.stderr.startswith("error: set: --set 'a.a.a")
    assert deep_set.stderr.endswith(
        f"nests more than {TOO_DEEP.removeprefix('nested more than ')}\n"
    )
    manifest = tmp_path / "workspace.yaml"
    manifest.write_text(
        "apiVersion: colony.dev/v1\nkind: Workspace\nmetadata:\n  name: nb\nspec:\n"
        "  class: colony-jupyter-1-0-0\n  cluster: c\n  values:\n"
        + "".join("    " + "  " * level + "a:\n" for level in range(500))
        + "    "
        + "  " * 500
        + "b: x\n"
    )
    applied = await me.ctl("apply", "-f", str(manifest), expect=2)
    assert applied.stderr.startswith(f"error: {manifest}: document 1: spec.values: line ")
    assert applied.stderr.endswith(f": {TOO_DEEP}\n")
