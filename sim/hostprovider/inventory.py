"""The simulated host provider's inventory: locations, SKUs, hosts and claims, in memory.

Owned by the host provider; shared in-process with the k0rdent simulation, which looks up the
machines of a ClusterDeployment with `Inventory.host_by_address(address, port)`. The HTTP layer
(`app.py`) translates `InventoryError`s into JSON error bodies.

Hosts are whole machines: a claim takes N hosts of one SKU in one location, or none. Addresses
are documentation-range IPs only (RFC 5737: 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24); nothing
ever connects to them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from sim.records import HostChange, WorldRecords

__all__ = [
    "DEFAULT_INVENTORY",
    "Claim",
    "ClaimConflict",
    "CpuSku",
    "GpuModel",
    "Host",
    "HostGroup",
    "InsufficientCapacity",
    "Inventory",
    "InventoryError",
    "InventoryFile",
    "Location",
    "NotFound",
    "Sku",
    "UnknownReference",
    "load_inventory",
]

DEFAULT_INVENTORY = Path(__file__).with_name("default_inventory.yaml")

# RFC 5737 documentation ranges: never routed, so a bug can never reach a real machine.
_DOC_NETWORKS = tuple(
    ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")
)

HostState = Literal["free", "claimed"]


class _Model(BaseModel):
    """camelCase on the wire (`gpuModelId`), snake_case in Python."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    def wire(self) -> dict[str, Any]:
        """The JSON body the API answers with."""
        return self.model_dump(mode="json", by_alias=True)


def _check_documentation_address(address: str) -> str:
    ip = ipaddress.ip_address(address)
    if not any(ip in network for network in _DOC_NETWORKS):
        raise ValueError(f"{address} is not in a documentation range (RFC 5737)")
    return address


class Location(_Model):
    id: str
    name: str
    country: str = ""


class GpuModel(_Model):
    id: str
    name: str
    product: str = Field(
        description='nvidia.com/gpu.product label value, e.g. "NVIDIA-H100-80GB-HBM3"'
    )
    memory_gib: int
    gpus_per_host: int = 8


class CpuSku(_Model):
    id: str
    name: str
    cpu_cores: int
    memory: str


class Sku(_Model):
    """What a claim asks for: exactly one of a GPU model or a CPU SKU."""

    gpu_model_id: str | None = None
    cpu_sku: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Sku:
        if (self.gpu_model_id is None) == (self.cpu_sku is None):
            raise ValueError("sku needs exactly one of gpuModelId or cpuSku")
        return self


class Host(_Model):
    id: str
    location: str
    gpu_model_id: str | None = None
    cpu_sku: str | None = None
    gpu_count: int = 0
    gpu_product: str | None = None
    cpu_cores: int
    memory: str
    address: str
    ssh_port: int = 22
    ssh_user: str = "root"
    state: HostState = "free"
    claimed_by: str | None = Field(None, description="idempotency key of the claim holding it")
    owner: str | None = None

    @field_validator("address")
    @classmethod
    def _documentation_address(cls, value: str) -> str:
        return _check_documentation_address(value)


class Claim(_Model):
    idempotency_key: str
    location: str
    sku: Sku
    count: int
    owner: str | None = None
    state: Literal["active", "released"] = "active"
    host_ids: list[str]
    created_at: datetime


class HostGroup(_Model):
    """A run of identical hosts in the inventory file, numbered from `first_address`.

    With `ssh_port_base` set, every host of the group shares `first_address` (a bastion forwarding
    one port per machine) and gets port `ssh_port_base + n`.
    """

    location: str
    gpu_model_id: str | None = None
    cpu_sku: str | None = None
    count: int = Field(ge=1)
    first_address: str
    ssh_port_base: int | None = None
    ssh_user: str = "root"
    cpu_cores: int | None = None
    memory: str | None = None
    id_prefix: str | None = None

    @field_validator("first_address")
    @classmethod
    def _documentation_address(cls, value: str) -> str:
        return _check_documentation_address(value)


class InventoryFile(_Model):
    """The YAML inventory file."""

    locations: list[Location]
    gpu_models: list[GpuModel] = Field(default_factory=list)
    cpu_skus: list[CpuSku] = Field(default_factory=list)
    hosts: list[Host] = Field(default_factory=list)
    host_groups: list[HostGroup] = Field(default_factory=list)


class InventoryError(Exception):
    """A request the inventory refuses; `code` is the JSON error code, `status` the HTTP status."""

    status = 400
    code = "BadRequest"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class UnknownReference(InventoryError):
    status = 422
    code = "UnprocessableEntity"


class NotFound(InventoryError):
    status = 404
    code = "NotFound"


class InsufficientCapacity(InventoryError):
    status = 409
    code = "InsufficientCapacity"


class ClaimConflict(InventoryError):
    """The idempotency key was used before for a different request."""

    status = 409
    code = "IdempotencyKeyReused"


class Inventory:
    """All hosts and claims of the simulated provider; every method is synchronous and atomic.

    With `records`, every host changing hands (claimed, released) and every claim answered again
    from its idempotency key is recorded there (`sim.records`).
    """

    def __init__(self, data: InventoryFile, records: WorldRecords | None = None) -> None:
        self.records = records
        self.locations = {loc.id: loc for loc in data.locations}
        self.gpu_models = {m.id: m for m in data.gpu_models}
        self.cpu_skus = {s.id: s for s in data.cpu_skus}
        self._hosts: dict[str, Host] = {}
        self._claims: dict[str, Claim] = {}
        # Counts claims and releases: a persisted world saves the inventory when it moved.
        self.changes = 0
        for host in [*data.hosts, *self._expand(data.host_groups)]:
            self._add_host(host)

    # ------------------------------------------------------------ building

    def _expand(self, groups: Iterable[HostGroup]) -> list[Host]:
        hosts: list[Host] = []
        for group in groups:
            sku_id = group.gpu_model_id or group.cpu_sku
            if sku_id is None:
                raise ValueError(f"host group in {group.location} needs gpuModelId or cpuSku")
            gpu = self.gpu_models.get(group.gpu_model_id) if group.gpu_model_id else None
            cpu = self.cpu_skus.get(group.cpu_sku) if group.cpu_sku else None
            if gpu is None and cpu is None:
                raise ValueError(f"host group in {group.location}: unknown SKU {sku_id}")
            base = ipaddress.ip_address(group.first_address)
            prefix = group.id_prefix or f"{group.location}-{sku_id}"
            for n in range(group.count):
                bastion = group.ssh_port_base is not None
                hosts.append(
                    Host(
                        id=f"{prefix}-{n + 1:02d}",
                        location=group.location,
                        gpu_model_id=group.gpu_model_id,
                        cpu_sku=group.cpu_sku,
                        gpu_count=gpu.gpus_per_host if gpu else 0,
                        gpu_product=gpu.product if gpu else None,
                        cpu_cores=group.cpu_cores or (cpu.cpu_cores if cpu else 96),
                        memory=group.memory or (cpu.memory if cpu else "2Ti"),
                        address=str(base if bastion else base + n),
                        ssh_port=(group.ssh_port_base or 0) + n + 1 if bastion else 22,
                        ssh_user=group.ssh_user,
                    )
                )
        return hosts

    def _add_host(self, host: Host) -> None:
        if host.id in self._hosts:
            raise ValueError(f"duplicate host id {host.id}")
        if host.location not in self.locations:
            raise ValueError(f"host {host.id}: unknown location {host.location}")
        if self.host_by_address(host.address, host.ssh_port) is not None:
            raise ValueError(f"host {host.id}: {host.address}:{host.ssh_port} used twice")
        self._hosts[host.id] = host

    # ------------------------------------------------------------ queries

    def hosts(
        self,
        *,
        location: str | None = None,
        gpu_model_id: str | None = None,
        cpu_sku: str | None = None,
        state: HostState | None = None,
    ) -> list[Host]:
        """Hosts matching every given filter, sorted by id (copies)."""
        return [
            host.model_copy()
            for host in sorted(self._hosts.values(), key=lambda h: h.id)
            if (location is None or host.location == location)
            and (gpu_model_id is None or host.gpu_model_id == gpu_model_id)
            and (cpu_sku is None or host.cpu_sku == cpu_sku)
            and (state is None or host.state == state)
        ]

    def host(self, host_id: str) -> Host | None:
        host = self._hosts.get(host_id)
        return host.model_copy() if host else None

    def host_by_address(self, address: str, port: int | None = None) -> Host | None:
        """The host reached at `address` (and SSH `port`, needed for hosts behind a bastion)."""
        for host in self._hosts.values():
            if host.address == address and (port is None or host.ssh_port == port):
                return host.model_copy()
        return None

    def claim_info(self, key: str) -> Claim:
        claim = self._claims.get(key)
        if claim is None:
            raise NotFound(f"no claim with idempotency key {key!r}", idempotencyKey=key)
        return claim.model_copy(deep=True)

    def claim_hosts(self, claim: Claim) -> list[Host]:
        return [self._hosts[host_id].model_copy() for host_id in claim.host_ids]

    # ------------------------------------------------------------ changes

    def claim(
        self, key: str, location: str, sku: Sku, count: int, owner: str | None = None
    ) -> tuple[Claim, bool]:
        """Claim `count` free hosts of `sku` in `location`, all or none.

        Idempotent under `key`: repeating a request returns the claim made the first time.

        Returns:
            The claim and whether it was created by this call.

        Raises:
            UnknownReference: unknown location or SKU, or a count below 1.
            InsufficientCapacity: fewer than `count` matching hosts are free (`free` in details).
            ClaimConflict: `key` was used for a different request.
        """
        existing = self._claims.get(key)
        if existing is not None:
            if (existing.location, existing.sku, existing.count) != (location, sku, count):
                raise ClaimConflict(
                    f"idempotency key {key!r} was used for a different claim",
                    idempotencyKey=key,
                )
            for host_id in existing.host_ids:
                self._record(host_id, "claim-repeated", key, existing.owner)
            return existing.model_copy(deep=True), False
        if location not in self.locations:
            raise UnknownReference(f"unknown location {location!r}", field="location")
        if sku.gpu_model_id is not None and sku.gpu_model_id not in self.gpu_models:
            raise UnknownReference(
                f"unknown GPU model {sku.gpu_model_id!r}", field="sku.gpuModelId"
            )
        if sku.cpu_sku is not None and sku.cpu_sku not in self.cpu_skus:
            raise UnknownReference(f"unknown CPU SKU {sku.cpu_sku!r}", field="sku.cpuSku")
        if count < 1:
            raise UnknownReference("count must be at least 1", field="count")
        free = [
            h
            for h in sorted(self._hosts.values(), key=lambda h: h.id)
            if h.location == location
            and h.state == "free"
            and h.gpu_model_id == sku.gpu_model_id
            and h.cpu_sku == sku.cpu_sku
        ]
        if len(free) < count:
            raise InsufficientCapacity(
                f"{count} hosts of {sku.gpu_model_id or sku.cpu_sku} requested in {location},"
                f" {len(free)} free",
                free=len(free),
                requested=count,
            )
        chosen = free[:count]
        for host in chosen:
            host.state = "claimed"
            host.claimed_by = key
            host.owner = owner
            self._record(host.id, "claimed", key, owner)
        claim = Claim(
            idempotency_key=key,
            location=location,
            sku=sku,
            count=count,
            owner=owner,
            host_ids=[h.id for h in chosen],
            created_at=datetime.now(UTC),
        )
        self._claims[key] = claim
        self.changes += 1
        return claim.model_copy(deep=True), True

    def release_host(self, host_id: str) -> Host:
        """Free one host; releasing a free host is fine. A claim whose hosts are all free ends."""
        host = self._hosts.get(host_id)
        if host is None:
            raise NotFound(f"no host {host_id!r}", hostId=host_id)
        key = host.claimed_by
        if host.state == "claimed":
            self._record(host.id, "released", key or "", host.owner)
        host.state, host.claimed_by, host.owner = "free", None, None
        claim = self._claims.get(key) if key else None
        if claim is not None and all(self._hosts[h].claimed_by != key for h in claim.host_ids):
            claim.state = "released"
        self.changes += 1
        return host.model_copy()

    def release_claim(self, key: str) -> Claim:
        """Free every host still held by a claim; releasing a released claim is fine."""
        claim = self._claims.get(key)
        if claim is None:
            raise NotFound(f"no claim with idempotency key {key!r}", idempotencyKey=key)
        for host_id in claim.host_ids:
            host = self._hosts[host_id]
            if host.claimed_by == key:
                self._record(host.id, "released", key, host.owner)
                host.state, host.claimed_by, host.owner = "free", None, None
        claim.state = "released"
        self.changes += 1
        return claim.model_copy(deep=True)

    def _record(self, host_id: str, change: HostChange, key: str, owner: str | None) -> None:
        if self.records is not None:
            self.records.host_changed(host_id, change, key, owner or "")

    # ------------------------------------------------------------ persistence

    def snapshot(self) -> dict[str, Any]:
        """Who holds which host, and every claim: what a persisted world keeps (`restore`).

        The hosts themselves come from the inventory file, read again at each start."""
        return {
            "hosts": [
                {"id": h.id, "claimedBy": h.claimed_by, "owner": h.owner}
                for h in self._hosts.values()
                if h.state == "claimed"
            ],
            "claims": [claim.wire() for claim in self._claims.values()],
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Claims and host states of a `snapshot()`; a host the inventory file no longer has is
        dropped from its claim (the file is the truth about what exists)."""
        for entry in snapshot.get("claims") or ():
            claim = Claim.model_validate(entry)
            claim.host_ids = [h for h in claim.host_ids if h in self._hosts]
            self._claims[claim.idempotency_key] = claim
        for entry in snapshot.get("hosts") or ():
            host = self._hosts.get(str(entry["id"]))
            if host is not None:
                host.state, host.claimed_by, host.owner = (
                    "claimed",
                    entry["claimedBy"],
                    entry["owner"],
                )


def load_inventory(
    path: str | Path | None = None, records: WorldRecords | None = None
) -> Inventory:
    """An inventory from a YAML file, or from `default_inventory.yaml` beside this module."""
    source = Path(path) if path is not None else DEFAULT_INVENTORY
    data = yaml.safe_load(source.read_text(encoding="utf-8"))
    return Inventory(InventoryFile.model_validate(data), records)
