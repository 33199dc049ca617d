"""Strict JSON and YAML: a key given twice in one object is refused, naming the key, where a
lenient parser quietly keeps the last value (the old API took `{"name": "a", "name": "b"}` as
`b`); JSON's `NaN` and `Infinity` are refused. Through the HTTP API (422, nothing created),
`colonyctl -f` files and `apply -f` manifests in remote mode (exit 2, one line).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from models.bounds import InputError, load_json, load_yaml
from models.manifests import ManifestError, parse_manifests
from tests.api.conftest import ALL_PERMISSIONS, CPU_SKU, JUPYTER, WORKSPACES, ApiStack
from tests.api.test_api_endpoints import error_of
from tests.api.test_cli_remote import user
from tests.helpers import unique

CLUSTERS = "/v1/kubernetes/clusters"
TWICE = "is given more than once in one object (its last value would win unseen): give it once"


@pytest.mark.parametrize(
    ("text", "path"),
    [
        pytest.param('{"name": "a", "name": "b"}', ("name",), id="top"),
        pytest.param('{"a": {"b": 1, "c": 2, "b": 3}}', ("a", "b"), id="nested"),
        pytest.param('{"p": [{"x": 1}, {"x": 1, "x": 2}]}', ("p", 1, "x"), id="in-a-list"),
        pytest.param('{"a": 1, "\\u0061": 2}', ("a",), id="escaped-alike"),
    ],
)
def test_a_json_key_given_twice_is_refused_naming_it(
    text: str, path: tuple[str | int, ...]
) -> None:
    with pytest.raises(InputError) as caught:
        load_json(text)
    assert (caught.value.kind, caught.value.path) == ("duplicate", path)
    assert caught.value.message == f"key '{path[-1]}' {TWICE}"


def test_keys_repeated_in_different_objects_are_fine() -> None:
    assert load_json('[{"a": 1}, {"a": 2}, {"b": {"a": 3}}]') == [
        {"a": 1},
        {"a": 2},
        {"b": {"a": 3}},
    ]
    assert load_json('{"a": "\\"a\\": 1, \\"a\\": 2"}') == {"a": '"a": 1, "a": 2'}


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_json_numbers_json_cannot_carry_are_refused(constant: str) -> None:
    with pytest.raises(InputError) as caught:
        load_json(f'{{"x": {constant}}}')
    assert caught.value.kind == "value"
    assert caught.value.message.startswith(f"{constant} is not a JSON number Colony takes")


def test_a_yaml_key_given_twice_is_refused_naming_it_and_its_line() -> None:
    with pytest.raises(InputError) as caught:
        load_yaml("a: 1\nb:\n  c: 1\n  c: 2\n")
    assert (caught.value.kind, caught.value.line) == ("duplicate", 4)
    assert caught.value.message == f"key 'c' {TWICE}"
    # JSON is YAML: the same in a JSON manifest.
    with pytest.raises(InputError):
        load_yaml('{"a": 1, "a": 1}')
    # A merge key is no duplicate: its keys are overridden on purpose.
    assert load_yaml("base: &b {x: 1, y: 1}\nuse:\n  <<: *b\n  y: 2\n")["use"] == {"x": 1, "y": 2}


def test_a_manifest_with_a_key_given_twice_is_refused_naming_its_document() -> None:
    text = (
        "apiVersion: colony.dev/v1\nkind: Cluster\nmetadata: {name: a}\nspec: {locationId: fra1}\n"
        "---\napiVersion: colony.dev/v1\nkind: Cluster\nmetadata: {name: b}\n"
        "spec:\n  locationId: fra1\n  locationId: fra2\n"
    )
    with pytest.raises(ManifestError) as caught:
        parse_manifests(text, "two.yaml")
    assert str(caught.value) == (f"two.yaml: document 2: yaml: line 11: key 'locationId' {TWICE}")


@pytest.mark.e2e
async def test_the_api_refuses_a_key_given_twice_and_creates_nothing(api_stack: ApiStack) -> None:
    key = await api_stack.key(unique("evil"))
    async with api_stack.http(api_stack.app(), key) as http:

        async def post(path: str, raw: str) -> tuple[int, dict[str, str]]:
            response = await http.post(
                path, content=raw.encode(), headers={"Content-Type": "application/json"}
            )
            return response.status_code, error_of(response)

        first, second = unique("first"), unique("second")
        assert await post(
            CLUSTERS, f'{{"name": "{first}", "locationId": "fra1", "name": "{second}"}}'
        ) == (422, {"code": "invalid", "field": "name", "message": f"name: key 'name' {TWICE}"})
        pool = f'{{"name": "cpu", "sku": {{"cpuSku": "{CPU_SKU}"}}, "count": 1, "count": 2}}'
        code, error = await post(
            CLUSTERS, f'{{"name": "{first}", "locationId": "fra1", "nodePools": [{pool}]}}'
        )
        assert (code, error["field"]) == (422, "nodePools[0].count")
        for name in (first, second):
            assert (await http.get(f"{CLUSTERS}/{name}")).status_code == 404
        code, error = await post(
            WORKSPACES,
            f'{{"name": "nb", "class": "{JUPYTER}", "cluster": "c", '
            '"values": {"image": {"tag": "1", "tag": "2"}}}',
        )
        assert (code, error["field"], error["message"]) == (
            422,
            "values.image.tag",
            f"values.image.tag: key 'tag' {TWICE}",
        )
        code, error = await post(CLUSTERS, '{"name": "x", "locationId": "fra1", "extra": NaN}')
        assert (code, error["field"]) == (422, "body")


@pytest.mark.e2e
@pytest.mark.slow
async def test_remote_colonyctl_refuses_a_key_given_twice_in_its_files(
    api_stack: ApiStack, api_url: str, tmp_path: Path
) -> None:
    me = user(tmp_path)
    key = await api_stack.key(unique("evil"), *ALL_PERMISSIONS)
    await me.ctl("auth", "login", "--url", api_url, "--api-key", key)
    name = unique("twice")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(f"name: {name}\nlocationId: fra1\nlocationId: fra1\n")
    created = await me.ctl("cluster", "create", "-f", str(cluster), expect=2)
    assert created.stderr == f"error: file: line 3: key 'locationId' {TWICE}\n"
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(
        "apiVersion: colony.dev/v1\nkind: Cluster\nmetadata:\n"
        f"  name: {name}\n  name: other\nspec:\n  locationId: fra1\n"
    )
    applied = await me.ctl("apply", "-f", str(manifest), expect=2)
    assert applied.stderr == f"error: {manifest}: document 1: yaml: line 5: key 'name' {TWICE}\n"
    values = tmp_path / "values.yaml"
    values.write_text("image:\n  tag: '1'\n  tag: '2'\n")
    deployed = await me.ctl(
        "workspace", "deploy", "nb", "--class", JUPYTER, "--cluster", "c", "-f", str(values),
        expect=2,
    )  # fmt: skip
    assert deployed.stderr == f"error: values: line 3: key 'tag' {TWICE}\n"
    await me.ctl("cluster", "get", name, expect=3)
