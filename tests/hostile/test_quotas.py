"""Quotas end to end (issue 25), through the HTTP API and remote-mode `colonyctl`, on the API's
test stack (dev server, sim, the real worker): one organization exhausting its quotas leaves
another able to create; a refusal names the quota, its use and its limit in the same words in
the API's answer and on `colonyctl`'s stderr (a create, admitted by the client layer, and a
scale-up, admitted by the cluster's workflow); many creates at once never pass a quota; an
operator sets and shows quotas through the API (a key with Quota Manage) and `colonyctl quota`;
a tenant reads its own.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api import conftest as api_fixtures
from tests.api import test_cli_remote as remote
from tests.api.conftest import ALL_PERMISSIONS, CPU_SKU, GPU, ApiStack
from tests.helpers import eventually, unique

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

api_stack = api_fixtures.api_stack
api_url = remote.api_url

CLUSTERS = "/v1/kubernetes/clusters"
OPERATOR = "quota:manage"


def error_of(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


def cpu_cluster(name: str, count: int = 1, location: str = "fra1") -> dict[str, Any]:
    pools = [{"name": "cpu", "sku": {"cpuSku": CPU_SKU}, "count": count}]
    return {"name": name, "locationId": location, "nodePools": pools}


async def delete_all(stack: ApiStack, http: httpx.AsyncClient, names: list[str]) -> None:
    for name in names:
        await http.delete(f"{CLUSTERS}/{name}")
    for name in names:
        await stack.wait_gone(http, name)


async def test_one_organization_exhausting_its_quota_leaves_the_other_able_to_create(
    api_stack: ApiStack,
) -> None:
    """The report: evil's six 1-host clusters took all six cpu-32c-256g hosts of fra1 and acme
    was refused. With the default share (half of a location's hosts of a SKU), evil gets three."""
    evil, acme = unique("evil"), unique("acme")
    app = api_stack.app()
    created: list[str] = []
    async with (
        api_stack.http(app, await api_stack.key(evil)) as evil_http,
        api_stack.http(app, await api_stack.key(acme)) as acme_http,
    ):
        try:
            answers = []
            for index in range(6):
                name = f"small-{index}"
                answer = await evil_http.post(CLUSTERS, json=cpu_cluster(name))
                answers.append(answer)
                if answer.status_code == 202:
                    created.append(name)
            assert [a.status_code for a in answers] == [202, 202, 202, 409, 409, 409]
            refused = error_of(answers[3])
            assert refused == {
                "code": "quota_exceeded",
                "field": "quota.locationShare",
                "message": f"quota.locationShare: organization '{evil}' would exceed its location "
                "share of 50% of location 'fra1''s 6 cpu-32c-256g hosts (at most 3): 3 in use, "
                "1 more asked",
            }
            for name in created:
                await api_stack.wait_status(evil_http, name, "ready")
            ours = await acme_http.post(CLUSTERS, json=cpu_cluster("mine"))
            assert ours.status_code == 202, ours.text
            await api_stack.wait_status(acme_http, "mine", "ready")
            own = (await evil_http.get("/v1/quota")).json()
            assert own["usage"] == {"hosts": 3, "gpus": 0, "clusters": 3, "workspaces": 0}
            assert own["locations"] == [
                {"locationId": "fra1", "sku": f"cpu:{CPU_SKU}", "hosts": 3, "stock": 6}
            ]
            await delete_all(api_stack, acme_http, ["mine"])
        finally:
            await delete_all(api_stack, evil_http, created)
        # Deleted clusters give their holdings back.
        await eventually(
            lambda: evil_http.get("/v1/quota"),
            until=lambda got: got.json()["usage"]["clusters"] == 0,
            what="evil's clusters given back",
        )


async def test_many_creates_at_once_never_pass_the_quota(api_stack: ApiStack) -> None:
    organization = unique("racer")
    app = api_stack.app()
    operator_key = await api_stack.key(unique("operators"), OPERATOR)
    async with api_stack.http(app, operator_key) as operator:
        limited = await operator.patch(
            f"/v1/organizations/{organization}/quota", json={"clusters": 3}
        )
        assert limited.status_code == 200, limited.text
        assert limited.json()["limits"]["clusters"] == 3
        assert limited.json()["overrides"]["clusters"] == 3
    async with api_stack.http(app, await api_stack.key(organization)) as http:
        answers = await asyncio.gather(
            *(
                http.post(CLUSTERS, json={"name": f"race-{i}", "locationId": "fra1"})
                for i in range(12)
            )
        )
        codes = sorted(answer.status_code for answer in answers)
        assert codes == [202] * 3 + [409] * 9
        refusals = {error_of(a)["message"] for a in answers if a.status_code == 409}
        assert refusals == {
            f"quota.clusters: organization '{organization}' would exceed its quota of 3 "
            "clusters: 3 in use, 1 more asked"
        }
        listed = (await http.get(CLUSTERS)).json()["items"]
        assert len(listed) == 3
        await delete_all(api_stack, http, [c["name"] for c in listed])


async def test_operators_set_quotas_tenants_read_their_own(api_stack: ApiStack) -> None:
    tenant = unique("tenant")
    app = api_stack.app()
    async with api_stack.http(app, await api_stack.key(tenant, *ALL_PERMISSIONS)) as http:
        own = await http.get("/v1/quota")
        assert own.status_code == 200
        assert own.json()["limits"] == {
            "hosts": 32,
            "gpus": 128,
            "clusters": 20,
            "workspaces": 250,
            "locationShare": 0.5,
        }
        denied = await http.patch(f"/v1/organizations/{tenant}/quota", json={"hosts": 1000})
        assert denied.status_code == 403
        assert "Quota: Manage (quota:manage)" in error_of(denied)["message"]
        other = await http.get(f"/v1/organizations/{unique('other')}/quota")
        assert other.status_code == 403
    async with api_stack.http(app, await api_stack.key(unique("ops"), OPERATOR)) as operator:
        path = f"/v1/organizations/{tenant}/quota"
        changed = await operator.patch(path, json={"hosts": 4, "gpus": 8})
        assert (changed.json()["limits"]["hosts"], changed.json()["limits"]["gpus"]) == (4, 8)
        reset = await operator.patch(path, json={"hosts": None})
        assert reset.json()["limits"]["hosts"] == 32
        assert reset.json()["overrides"] == {"gpus": 8}
        wrong = await operator.patch(path, json={"locationShare": 2})
        assert wrong.status_code == 422
        assert error_of(wrong)["field"] == "locationShare"
        unknown = await operator.patch(path, json={"nodes": 3})
        assert unknown.status_code == 422


async def test_a_refusal_reads_the_same_through_the_api_and_remote_colonyctl(
    api_stack: ApiStack, api_url: str, tmp_path: Path
) -> None:
    organization = unique("same")
    await remote.operator(
        api_stack, "quota", "set", "--organization", organization, "--clusters", "1",
        "--hosts", "1",
    )  # fmt: skip
    key = await api_stack.key(organization, *ALL_PERMISSIONS)
    me = remote.user(tmp_path)
    await me.ctl("auth", "login", "--url", api_url, "--api-key", "-", stdin=key + "\n")
    gpu_pool = {"name": "gpu", "sku": {"gpuModelId": GPU}, "count": 1}
    async with api_stack.http(api_stack.app(), key) as http:
        first = await http.post(
            CLUSTERS, json={"name": "first", "locationId": "fra1", "nodePools": [gpu_pool]}
        )
        assert first.status_code == 202, first.text
        await api_stack.wait_status(http, "first", "ready")
        try:
            # A create: admitted by the client layer, before anything starts.
            second = await http.post(CLUSTERS, json={"name": "second", "locationId": "fra1"})
            assert second.status_code == 409
            message = error_of(second)["message"]
            assert message == (
                f"quota.clusters: organization '{organization}' would exceed its quota of 1 "
                "clusters: 1 in use, 1 more asked"
            )
            cli = await me.ctl("cluster", "create", "second", "--location-id", "fra1", expect=2)
            assert cli.stderr == f"error: {message}\n"

            # A scale-up: admitted by the cluster's workflow, before it is queued.
            scale = await http.patch(f"{CLUSTERS}/first/node-pools/gpu", json={"count": 2})
            assert scale.status_code == 409
            message = error_of(scale)["message"]
            assert message == (
                f"quota.hosts: organization '{organization}' would exceed its quota of 1 "
                "hosts: 1 in use, 1 more asked"
            )
            cli = await me.ctl("node-pool", "scale", "first", "gpu", "--count", "2", expect=2)
            assert cli.stderr == f"error: {message}\n"
            status = (await http.get(f"{CLUSTERS}/first")).json()
            assert [op["kind"] for op in status.get("queuedOperations", [])] == []

            shown = (await me.ctl("quota", "get", "-o", "json")).json()
            assert shown["usage"] == {"hosts": 1, "gpus": 8, "clusters": 1, "workspaces": 0}
            assert shown["overrides"] == {"hosts": 1, "clusters": 1}
            denied = await me.ctl(
                "quota", "set", "--organization", organization, "--hosts", "9", expect=2
            )
            assert "lacks the permission Quota: Manage (quota:manage)" in denied.stderr
        finally:
            await delete_all(api_stack, http, ["first"])


async def test_an_operator_reads_and_sets_quotas_with_colonyctl_in_direct_mode(
    api_stack: ApiStack,
) -> None:
    organization = unique("direct")
    env = {**os.environ, **api_stack.env}
    done = await remote.run(
        remote.COLONYCTL, "quota", "set", "--organization", organization, "--workspaces", "7",
        "--location-share", "0.25", "-o", "json", env=env,
    )  # fmt: skip
    assert done.code == 0, done.stderr
    assert done.json()["limits"]["workspaces"] == 7
    assert done.json()["limits"]["locationShare"] == 0.25
    table = await remote.run(
        remote.COLONYCTL, "quota", "get", "--organization", organization, env=env
    )
    assert table.code == 0, table.stderr
    assert "workspaces" in table.stdout
    assert "operator" in table.stdout
    bad = await remote.run(
        remote.COLONYCTL, "quota", "set", "--organization", organization, "--hosts", "many",
        env=env,
    )  # fmt: skip
    assert (bad.code, bad.stderr) == (
        2,
        "error: hosts: 'many' is not a whole number (or 'default')\n",
    )
    missing = await remote.run(remote.COLONYCTL, "quota", "get", env=env)
    assert missing.code == 2
    assert "organization: name the organization" in missing.stderr
