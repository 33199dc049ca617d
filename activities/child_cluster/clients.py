"""How activities reach a child cluster: through its kubeconfig Secret on the management cluster.

A child's kubeconfig is read from the `<name>-kubeconfig` Secret a request's `KubeconfigRef`
names, inside the activity: the kubeconfig never enters a request, a result, a log line or
workflow history. `ApiClient`s are cached per kubeconfig content (`ChildClients`), so a recreated
cluster of the same name (a new server, a new token) gets a new client while the steady state
costs one Secret read.

`ChildClusterActivities` is what every activity class of this package builds on: the management
cluster's client (for the Secrets, and the ClusterDeployment a child belongs to) and the shared
cache of child clients. `worker.py` makes one `ChildClients` for all of them and closes it on exit.
"""

from __future__ import annotations

import base64
import hashlib
import threading

import yaml
from kubernetes import client

from activities.kube import call_or_none
from activities.objects import CLUSTER_DEPLOYMENT
from activities.shared_answer import SharedAnswers
from infra.kube import Obj, api_client_from_dict, close_client
from models.activity_api import KubeconfigRef
from models.errors import ErrorType, permanent

CLIENT_CACHE_SIZE = 64
"""Child clusters whose clients are kept; the oldest is closed beyond that."""
KUBECONFIG_SHARED = 0.0
"""Seconds one read of a kubeconfig Secret answers later reads too: none. Reads of the same Secret
made while one is under way share its answer (`activities.shared_answer`), so a burst of workspace
deploys reads it once a moment, not once per activity; a read after that reads again, so a deleted
cluster's kubeconfig is not found at once."""


class ChildClients:
    """Child `ApiClient`s by kubeconfig digest; thread-safe (activities run on several threads).

    Shared by every activity class that reaches child clusters (`ChildClusterActivities`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[str, client.ApiClient] = {}
        self._kubeconfigs: SharedAnswers[bytes] = SharedAnswers(KUBECONFIG_SHARED)

    def get(self, kubeconfig: bytes) -> client.ApiClient:
        digest = hashlib.sha256(kubeconfig).hexdigest()
        with self._lock:
            cached = self._clients.get(digest)
            if cached is not None:
                return cached
        loaded = yaml.safe_load(kubeconfig)
        if not isinstance(loaded, dict):
            raise permanent(
                ErrorType.INVALID_SPEC, "the kubeconfig Secret does not hold a kubeconfig"
            )
        api = api_client_from_dict(loaded)
        with self._lock:
            self._clients[digest] = api
            while len(self._clients) > CLIENT_CACHE_SIZE:
                oldest = next(iter(self._clients))
                close_client(self._clients.pop(oldest))
        return api

    async def for_ref(self, management: client.CoreV1Api, ref: KubeconfigRef) -> client.ApiClient:
        """The child's client, from the kubeconfig Secret `ref` names, read each time (reads
        under way at once share one, `KUBECONFIG_SHARED`): a recreated cluster of the same name
        gets a new client."""
        kubeconfig = await self._kubeconfigs.get(
            f"{ref.namespace}/{ref.secret_name}/{ref.key}",
            lambda: read_kubeconfig(management, ref),
        )
        return self.get(kubeconfig)

    def close(self) -> None:
        with self._lock:
            for api in self._clients.values():
                close_client(api)
            self._clients.clear()


async def read_kubeconfig(core: client.CoreV1Api, ref: KubeconfigRef) -> bytes:
    """The kubeconfig bytes in the Secret `ref` names (raises NotFound when it is absent)."""
    where = f"kubeconfig Secret {ref.namespace}/{ref.secret_name}"
    secret = await call_or_none(
        f"read {where}", core.read_namespaced_secret, ref.secret_name, ref.namespace
    )
    if secret is None:
        raise permanent(ErrorType.NOT_FOUND, f"{where} not found")
    value = (secret.get("data") or {}).get(ref.key)
    if not value:
        raise permanent(ErrorType.NOT_FOUND, f"{where} has no key '{ref.key}'")
    return base64.b64decode(value)


class ChildClusterActivities:
    """What the child-cluster activity classes share: the management cluster's client, and the
    child clients they reach through it.

    Args:
        management_api: the management cluster's client (kubeconfig Secrets, ClusterDeployments).
        clients: the cache of child clients, shared by every activity class (one of its own when
            not given).
    """

    def __init__(
        self, management_api: client.ApiClient, clients: ChildClients | None = None
    ) -> None:
        self._management = client.CoreV1Api(management_api)
        self._management_custom = client.CustomObjectsApi(management_api)
        self._clients = clients or ChildClients()

    def close(self) -> None:
        """Close every cached child client (the worker closes its shared cache itself)."""
        self._clients.close()

    async def _child(self, ref: KubeconfigRef) -> client.ApiClient:
        """The child's client, from the kubeconfig Secret `ref` names."""
        return await self._clients.for_ref(self._management, ref)

    async def _core(self, ref: KubeconfigRef) -> client.CoreV1Api:
        return client.CoreV1Api(await self._child(ref))

    async def _custom(self, ref: KubeconfigRef) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(await self._child(ref))

    async def _cluster_deployment(self, namespace: str, name: str) -> Obj | None:
        """The child's ClusterDeployment on the management cluster (None when there is none)."""
        return await CLUSTER_DEPLOYMENT.at(self._management_custom, namespace, name).read()
