"""Where one Kubernetes object is, and what reads, deletes and watches it there.

An `Address` is one object of one kind at one name (and namespace) on one cluster, with the
official client it is reached through. It reads the object and deletes it (`call_or_none`: None
when there is none, every other API error translated by `activities.errors`), names it the same
way in every error those calls raise ("read ServiceSet kcm-system/ws-1: 403 Forbidden: ..."), and
gives the watch of its changes (`activities.watch`). It never judges whose the object is:
`activities.objects.delete_owned` takes an address and does that.

Used by the activities of `activities.management` and `activities.child_cluster`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from kubernetes import client

from activities.kube import call_or_none
from activities.watch import ObjectWatch
from infra.kube import Obj
from infra.kubeapi import collection_path


class Address(ABC):
    """One object on one cluster, reached through the official client; `str()` is how error
    messages name it ("ServiceSet kcm-system/ws-1", "namespace ws-nb")."""

    @abstractmethod
    async def read(self) -> Obj | None:
        """The object (None when there is none)."""

    @abstractmethod
    async def delete(self, options: Obj) -> Obj | None:
        """Delete the object with the delete `options` (`activities.objects.only`: exactly the
        object judged); None when it was gone already."""

    @abstractmethod
    def watch(self) -> ObjectWatch:
        """The object's changes, to wait on between two reads."""


@dataclass(frozen=True)
class NamespaceAddress(Address):
    """A namespace."""

    core: client.CoreV1Api
    name: str

    def __str__(self) -> str:
        return f"namespace {self.name}"

    async def read(self) -> Obj | None:
        return await call_or_none(f"read {self}", self.core.read_namespace, self.name)

    async def delete(self, options: Obj) -> Obj | None:
        return await call_or_none(
            f"delete {self}", self.core.delete_namespace, self.name, body=options
        )

    def watch(self) -> ObjectWatch:
        return ObjectWatch(self.core.api_client, collection_path("", "v1", "namespaces"), self.name)


@dataclass(frozen=True)
class SecretAddress(Address):
    """A Secret in its namespace."""

    core: client.CoreV1Api
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"Secret {self.namespace}/{self.name}"

    async def read(self) -> Obj | None:
        return await call_or_none(
            f"read {self}", self.core.read_namespaced_secret, self.name, self.namespace
        )

    async def delete(self, options: Obj) -> Obj | None:
        return await call_or_none(
            f"delete {self}",
            self.core.delete_namespaced_secret,
            self.name,
            self.namespace,
            body=options,
        )

    def watch(self) -> ObjectWatch:
        secrets = collection_path("", "v1", "secrets", self.namespace)
        return ObjectWatch(self.core.api_client, secrets, self.name)


@dataclass(frozen=True)
class CustomKind:
    """A kind of namespaced custom object: its API group, version and plural, and its name."""

    group: str
    version: str
    plural: str
    name: str
    """The kind's name, as the object's `kind` and messages give it ("ServiceSet")."""
    propagation_policy: str | None = None
    """How its deletes reach its dependents (None: as the API server decides)."""

    def at(self, custom: client.CustomObjectsApi, namespace: str, name: str) -> CustomObjectAddress:
        """The object of this kind named `name` in `namespace`, reached through `custom`."""
        return CustomObjectAddress(custom, self, namespace, name)


@dataclass(frozen=True)
class CustomObjectAddress(Address):
    """A namespaced custom object (a k0rdent ServiceSet, a Gateway API route, ...)."""

    custom: client.CustomObjectsApi
    kind: CustomKind
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind.name} {self.namespace}/{self.name}"

    def _place(self) -> tuple[str, str, str, str, str]:
        """Group, version, namespace, plural and name: the object's place, as the client's
        custom object calls take it."""
        kind = self.kind
        return kind.group, kind.version, self.namespace, kind.plural, self.name

    async def read(self) -> Obj | None:
        return await call_or_none(
            f"read {self}", self.custom.get_namespaced_custom_object, *self._place()
        )

    async def delete(self, options: Obj) -> Obj | None:
        return await call_or_none(
            f"delete {self}",
            self.custom.delete_namespaced_custom_object,
            *self._place(),
            propagation_policy=self.kind.propagation_policy,
            body=options,
        )

    def watch(self) -> ObjectWatch:
        kind = self.kind
        collection = collection_path(kind.group, kind.version, kind.plural, self.namespace)
        return ObjectWatch(self.custom.api_client, collection, self.name)
