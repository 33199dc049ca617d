"""Reserved class names: no class is published under the names of Colony's shipped catalog
(`colony-...`: the shipped classes, and templates such as `colony-inference-stack-1-0-0`, which
the old API let a tenant take for its own class; the worker seeds the shipped classes itself),
and none holds `--`, the mark of the names Colony derives (an organization's class is stored as
`<organization>-<name>--<hash>`). Refused before anything is published, through the HTTP API
(422) and remote-mode `colonyctl` (exit 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from models.workspace_class import reserved_class_name_problem
from tests.api.conftest import ALL_PERMISSIONS, JUPYTER, ApiStack
from tests.api.test_api_endpoints import error_of
from tests.api.test_cli_remote import user
from tests.helpers import unique

CLASSES = "/v1/workspace-classes"
SHIPPED_TEMPLATE = "colony-inference-stack-1-0-0"


@pytest.mark.parametrize(
    ("name", "refused"),
    [
        pytest.param("team-notebook-1-0-0", False, id="own-name"),
        pytest.param(JUPYTER, True, id="shipped-class"),
        pytest.param(SHIPPED_TEMPLATE, True, id="shipped-template"),
        pytest.param("colony-next-2-0-0", True, id="shipped-prefix"),
        pytest.param("acme-notebook--1a2b3c4d", True, id="derived-mark"),
    ],
)
def test_a_published_class_name_is_checked(name: str, refused: bool) -> None:
    assert (reserved_class_name_problem(name) is not None) is refused


async def shipped_class(http: Any) -> dict[str, Any]:
    got = await http.get(f"{CLASSES}/{JUPYTER}")
    assert got.status_code == 200, got.text
    shipped: dict[str, Any] = got.json()
    return shipped


@pytest.mark.e2e
async def test_the_api_refuses_reserved_class_names(catalog: ApiStack) -> None:
    organization = unique("evil")
    key = await catalog.key(organization)
    async with catalog.http(catalog.app(), key) as http:
        jupyter = await shipped_class(http)
        for name in (SHIPPED_TEMPLATE, "colony-next-2-0-0", JUPYTER):
            refused = await http.post(CLASSES, json={"class": {**jupyter, "name": name}})
            assert (refused.status_code, error_of(refused)) == (
                422,
                {
                    "code": "invalid",
                    "field": "name",
                    "message": f"name: workspace class name '{name}' starts with 'colony-', which "
                    "Colony reserves for the classes and ServiceTemplates it ships: choose another "
                    "name",
                },
            ), name
        marked = await http.post(CLASSES, json={"class": {**jupyter, "name": "team--nb"}})
        assert (marked.status_code, error_of(marked)["field"]) == (422, "class.name")
        assert error_of(marked)["message"].startswith(
            "class.name: workspace class name 'team--nb' must not contain '--'"
        )
        listed = (await http.get(CLASSES)).json()["items"]
        assert [c["name"] for c in listed if c["name"] in (SHIPPED_TEMPLATE, "team--nb")] == []
    # Nor in the shared catalog: the mark would collide with an organization's stored classes.
    operator = await catalog.key(unique("ops"), *ALL_PERMISSIONS, "catalog:publish")
    async with catalog.http(catalog.app(), operator) as http:
        shared = await http.post(
            CLASSES, json={"class": {**jupyter, "name": f"{organization}-nb--1a2b3c4d"}}
        )
        assert (shared.status_code, error_of(shared)["field"]) == (422, "class.name")
        # Nor Colony's prefix: the worker seeds the shipped classes, no publish takes their names.
        prefixed = await http.post(
            CLASSES, json={"class": {**jupyter, "name": "colony-next-2-0-0"}}
        )
        assert (prefixed.status_code, error_of(prefixed)["field"]) == (422, "name")


@pytest.mark.e2e
@pytest.mark.slow
async def test_remote_colonyctl_refuses_reserved_class_names(
    catalog: ApiStack, api_url: str, tmp_path: Path
) -> None:
    me = user(tmp_path)
    await me.ctl("auth", "login", "--url", api_url, "--api-key", await catalog.key(unique("evil")))
    jupyter = (await me.ctl("class", "get", JUPYTER, "-o", "json")).json()
    spec = {key: value for key, value in jupyter.items() if key != "name"}

    def class_file(name: str) -> Path:
        path = tmp_path / f"{name}.yaml"
        document = {
            "apiVersion": "colony.dev/v1",
            "kind": "WorkspaceClass",
            "metadata": {"name": name},
            "spec": spec,
        }
        path.write_text(yaml.safe_dump(document))
        return path

    taken = await me.ctl("class", "publish", "-f", str(class_file(SHIPPED_TEMPLATE)), expect=2)
    assert taken.stderr == (
        f"error: name: workspace class name '{SHIPPED_TEMPLATE}' starts with 'colony-', which "
        "Colony reserves for the classes and ServiceTemplates it ships: choose another name\n"
    )
    marked = await me.ctl("class", "publish", "-f", str(class_file("team--nb")), expect=2)
    assert "metadata.name: workspace class name 'team--nb' must not contain '--'" in marked.stderr
    assert marked.stderr.count("\n") == 1
