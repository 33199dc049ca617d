"""Tests of `SimWorld`: starts fast, writes its state files, serves the preloaded k0rdent objects."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, cast

import httpx
import yaml
from kubernetes import client, config

from sim.timing import SimTiming
from sim.world import HOSTED_TEMPLATE, REMOTE_TEMPLATE, SimWorld, WorldConfig


def list_cluster_templates(kubeconfig: Path) -> list[dict[str, Any]]:
    configuration = client.Configuration()
    config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]
        yaml.safe_load(kubeconfig.read_text()),
        client_configuration=configuration,
        persist_config=False,
    )
    with client.ApiClient(configuration) as api:
        result = client.CustomObjectsApi(api).list_namespaced_custom_object(
            "k0rdent.mirantis.com", "v1beta1", "kcm-system", "clustertemplates"
        )
    return cast(list[dict[str, Any]], cast(dict[str, Any], result)["items"])


async def test_world_starts_and_serves_preloaded_templates(tmp_path: Path) -> None:
    began = time.monotonic()
    async with SimWorld(WorldConfig(state_dir=tmp_path, timing=SimTiming.instant())) as world:
        assert time.monotonic() - began < 2.0
        items = await asyncio.to_thread(list_cluster_templates, world.management_kubeconfig_path)
        by_name = {i["metadata"]["name"]: i for i in items}
        assert {REMOTE_TEMPLATE, HOSTED_TEMPLATE} <= set(by_name)
        assert by_name[REMOTE_TEMPLATE]["status"]["valid"] is True

        hostprovider = json.loads(world.hostprovider_json_path.read_text())
        assert hostprovider["url"].startswith("http://127.0.0.1:")
        assert hostprovider["apiKey"]
        info = json.loads(world.world_json_path.read_text())
        assert info["management"]["port"] == world.management.port
        assert info["simulator"] is True

        templates, _ = world.store.list(
            world.store.registry.get("k0rdent.mirantis.com", "servicetemplates"), "kcm-system"
        )
        names = {t["metadata"]["name"]: t for t in templates}
        assert names["jupyter-notebook-0-3-0"]["status"]["valid"] is True
        assert {"marimo-0-3-0", "devpod-0-2-0", "llm-d-model-0-3-0", "llm-d-infra-0-3-0"} <= set(
            names
        )

        async with httpx.AsyncClient() as http:
            faults = await http.get(f"{hostprovider['url']}/sim/v1/faults")
        assert faults.status_code == 200
