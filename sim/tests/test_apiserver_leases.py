"""coordination.k8s.io/v1 Leases as kube-apiserver serves them, through the official client and kubectl.

Leader election (Colony's watcher, client-go's `leaderelection`) relies on exactly these: create
answers 409 when the Lease exists, an update with a stale resourceVersion answers 409 Conflict
(optimistic concurrency is the whole lock), MicroTimes come back in UTC with six fractional digits
(and a time without them is refused while decoding, as Go's `time.Parse(RFC3339Micro)` does), and
`ValidateLeaseSpec`'s rules answer 422.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sim.apiserver.server import ClusterServer
from sim.tests.conftest import Kube
from sim.tests.test_apiserver_kubectl import KUBECTL, kubectl

call = asyncio.to_thread
NS = "kube-system"


def lease(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": spec,
    }


async def test_create_get_update_with_optimistic_concurrency(kube: Kube) -> None:
    api = client.CoordinationV1Api(kube.api)
    now = "2026-03-01T10:00:00.123456Z"
    created = await call(
        api.create_namespaced_lease,
        kube.namespace,
        lease(
            "colony-watcher",
            holderIdentity="a",
            leaseDurationSeconds=15,
            acquireTime=now,
            renewTime=now,
            leaseTransitions=0,
        ),
    )
    assert created.spec.holder_identity == "a"
    assert created.spec.renew_time == datetime(2026, 3, 1, 10, 0, 0, 123456, tzinfo=UTC)
    with pytest.raises(ApiException) as exists:
        await call(
            api.create_namespaced_lease, kube.namespace, lease("colony-watcher", holderIdentity="b")
        )
    assert exists.value.status == 409
    assert json.loads(exists.value.body)["reason"] == "AlreadyExists"

    # The holder renews with the resourceVersion it read; a contender holding an older one loses.
    # (The official client re-encodes time strings with `isoformat()`, which drops a zero
    # fraction, and kube-apiserver refuses such a MicroTime: hence .000001 here, and Colony's
    # elector writes its Leases as raw JSON.)
    stale = created.metadata.resource_version
    renewed = await call(
        api.replace_namespaced_lease,
        "colony-watcher",
        kube.namespace,
        {
            **lease(
                "colony-watcher",
                holderIdentity="a",
                leaseDurationSeconds=15,
                renewTime="2026-03-01T10:00:05.000001Z",
            ),
            "metadata": {"name": "colony-watcher", "resourceVersion": stale},
        },
    )
    assert int(renewed.metadata.resource_version) > int(stale)
    with pytest.raises(ApiException) as conflict:
        await call(
            api.replace_namespaced_lease,
            "colony-watcher",
            kube.namespace,
            {
                **lease("colony-watcher", holderIdentity="b", leaseDurationSeconds=15),
                "metadata": {"name": "colony-watcher", "resourceVersion": stale},
            },
        )
    assert conflict.value.status == 409
    assert json.loads(conflict.value.body)["reason"] == "Conflict"
    read = await call(api.read_namespaced_lease, "colony-watcher", kube.namespace)
    assert read.spec.holder_identity == "a"


async def test_micro_times_come_back_in_utc_with_six_digits(kube: Kube) -> None:
    created: Any = await call(
        client.CoordinationV1Api(kube.api).create_namespaced_lease,
        kube.namespace,
        lease("tz", holderIdentity="a", renewTime="2026-03-01T12:00:00.500000+02:00"),
        _preload_content=False,
    )
    assert json.loads(created.data)["spec"]["renewTime"] == "2026-03-01T10:00:00.500000Z"


@pytest.mark.parametrize(
    ("spec", "status", "message"),
    [
        pytest.param(
            {"leaseDurationSeconds": 0},
            422,
            "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0",
            id="zero-duration",
        ),
        pytest.param(
            {"leaseTransitions": -1},
            422,
            "spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0",
            id="negative-transitions",
        ),
        pytest.param(
            {"renewTime": "2026-03-01T10:00:00Z"},
            400,
            'parsing time "2026-03-01T10:00:00+00:00" as "2006-01-02T15:04:05.000000Z07:00"',
            id="time-without-micros",
        ),
    ],
)
async def test_invalid_specs_are_refused_as_kube_does(
    kube: Kube, spec: dict[str, Any], status: int, message: str
) -> None:
    with pytest.raises(ApiException) as refused:
        await call(
            client.CoordinationV1Api(kube.api).create_namespaced_lease,
            kube.namespace,
            lease("bad", **spec),
        )
    assert refused.value.status == status
    assert message in json.loads(refused.value.body)["message"]


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"preferredHolder": "b"}, id="preferred-without-strategy"),
        pytest.param({"strategy": "Newest"}, id="unknown-strategy"),
        pytest.param({"strategy": "OldestEmulationVersion", "preferredHolder": "b"}, id="valid"),
    ],
)
async def test_coordinated_leader_election_fields_are_dropped(
    kube: Kube, spec: dict[str, Any]
) -> None:
    """Its feature gate (CoordinatedLeaderElection, beta) is off by default in 1.37: the fields
    are dropped as a disabled feature's are, valid or not."""
    created = await call(
        client.CoordinationV1Api(kube.api).create_namespaced_lease,
        kube.namespace,
        lease("cle", holderIdentity="a", **spec),
    )
    assert (created.spec.strategy, created.spec.preferred_holder) == (None, None)
    assert created.spec.holder_identity == "a"


@pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl is not installed in the venv")
async def test_kubectl_apply_get_and_describe_a_lease(
    cluster: ClusterServer, kubeconfig_file: Path, tmp_path: Path
) -> None:
    manifest = tmp_path / "lease.yaml"
    manifest.write_text(
        json.dumps(
            lease(
                "colony-watcher",
                holderIdentity="watcher-1",
                leaseDurationSeconds=15,
                renewTime="2026-03-01T10:00:00.000000Z",
            )
            | {"metadata": {"name": "colony-watcher", "namespace": NS}}
        )
    )
    assert "created" in await kubectl(kubeconfig_file, "apply", "-f", str(manifest))
    table = await kubectl(kubeconfig_file, "get", "lease", "-n", NS)
    assert "HOLDER" in table
    assert "colony-watcher" in table
    assert "watcher-1" in table
    described = await kubectl(kubeconfig_file, "describe", "lease", "colony-watcher", "-n", NS)
    assert "Holder Identity:" in described
    assert "watcher-1" in described
    got = json.loads(
        await kubectl(kubeconfig_file, "get", "lease", "colony-watcher", "-n", NS, "-o", "json")
    )
    assert got["spec"]["leaseDurationSeconds"] == 15
