"""Quotas per organization: what an organization may hold (hosts, GPUs, clusters, workspaces, and
a share of any location's hosts of one SKU), what each of its entities holds, and the pure
decisions of its ledger (`QuotaBook`).

An organization's ledger is `QuotaWorkflow` (`quota/<organization>`, `workflows/quota/`), the only
writer of its `QuotaLedgerState`. Everything that makes an organization hold more asks it first,
before anything starts:

- a cluster's create, a colony's new clusters, a workspace's deploy: the client layer
  (`clients.quotas.admit`), before it starts the entity's workflow;
- a node pool's add or scale-up: the cluster's workflow, in the update's handler, before the
  operation is queued (`ADMIT_QUOTA`), so the need is worked out from the cluster's exact
  state and queue, and two updates racing cannot both fit in the same room.

Each entity is a **holder**, keyed by its workflow id, holding a `QuotaHolding`: counts of
clusters and workspaces, and hosts per `<location>/<sku>` (GPUs follow from the GPU model's GPUs
per host). A cluster holds the peak of what its pools have and what its queued operations will
give them (`cluster_need`), so what runs or waits to run never holds more than was admitted.
Entities tell the ledger when they hold less (`HoldingReport`: after each operation, and at the end,
`closed`); a report only ever lowers a holding (an admission is the only way up), so reports and
admissions arriving in any order never undercount.

Admission is refused naming the quota, its use and its limit (`QuotaProblem.message`), one
sentence for both front doors: `quota.hosts: organization 'evil' would exceed its quota of 6
hosts: 6 in use, 1 more asked`.

Defaults come from the settings of whoever asks (`COLONY_QUOTA_*`, `infra.config`, sent with each
admission); an operator's overrides live in the ledger (`SetQuotaRequest`). Pure: no IO.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import Field

from models.base import ColonyModel
from models.node_pool import NodePoolStatus, NodeSku
from models.operations import (
    AddNodePoolRequest,
    ContinueAsNewPolicy,
    DeleteNodePoolRequest,
    Inbox,
    ScaleNodePoolRequest,
)

QUOTA_WORKFLOW_PREFIX = "quota/"

DEFAULT_HOSTS = 32
"""Hosts one organization may hold in all, by default."""
DEFAULT_GPUS = 128
"""GPUs (whole hosts' GPUs: a host of 8 H100 counts 8) one organization may hold, by default."""
DEFAULT_CLUSTERS = 20
DEFAULT_WORKSPACES = 250
DEFAULT_LOCATION_SHARE = 0.5
"""At most half of a location's hosts of any one SKU (rounded down, at least one host) for one
organization, by default: no organization can take a whole location's stock of a SKU (issue 25:
`evil`'s six small clusters took all six `cpu-32c-256g` hosts of fra1 and `acme` was refused)."""

PENDING_GRACE = timedelta(minutes=10)
"""How long a holder admitted by a client (a create) counts without its workflow running: the
client starts it right after the admission, a colony's member within its apply. A client that died
in between leaves a holder that an audit drops once this has passed."""
AUDIT_INTERVAL = timedelta(seconds=30)
"""Audits (which holders' workflows still run) at most this often: one runs when an admission
would be refused (or a create finds its name held), so a stream of refused requests costs one
activity per interval, not one each."""


def quota_workflow_id(organization: str) -> str:
    """The ledger of `organization`: `quota/<organization>` (organization names hold no "/")."""
    return f"{QUOTA_WORKFLOW_PREFIX}{organization}"


class QuotaName(StrEnum):
    """The quotas, as messages, flags and the API name them."""

    HOSTS = "hosts"
    GPUS = "gpus"
    CLUSTERS = "clusters"
    WORKSPACES = "workspaces"
    LOCATION_SHARE = "locationShare"


class QuotaLimits(ColonyModel):
    """Limits of one organization; None: the default (an operator's override sets one)."""

    hosts: int | None = Field(default=None, ge=0)
    gpus: int | None = Field(default=None, ge=0)
    clusters: int | None = Field(default=None, ge=0)
    workspaces: int | None = Field(default=None, ge=0)
    location_share: float | None = Field(default=None, gt=0, le=1)
    """The share of a location's hosts of one SKU the organization may hold (0.5: half, rounded
    down, at least one host)."""

    def over(self, defaults: QuotaLimits) -> QuotaLimits:
        """These limits, each unset one taken from `defaults`."""
        return QuotaLimits.model_validate(
            {
                name: value
                if (value := getattr(self, name)) is not None
                else getattr(defaults, name)
                for name in QuotaLimits.model_fields
            }
        )

    def changed(self, changes: QuotaLimits, reset: Iterable[str]) -> QuotaLimits:
        """These overrides with `changes` (its set fields) applied and `reset` ones cleared."""
        values = self.model_dump()
        values.update({k: v for k, v in changes.model_dump().items() if v is not None})
        for name in reset:
            values[name] = None
        return QuotaLimits.model_validate(values)


DEFAULT_LIMITS = QuotaLimits(
    hosts=DEFAULT_HOSTS,
    gpus=DEFAULT_GPUS,
    clusters=DEFAULT_CLUSTERS,
    workspaces=DEFAULT_WORKSPACES,
    location_share=DEFAULT_LOCATION_SHARE,
)


def host_key(location_id: str, sku: NodeSku) -> str:
    """What hosts are counted by: `<location>/gpu:<model>` or `<location>/cpu:<sku>`."""
    return f"{location_id}/{sku}"


def gpu_model_of(key: str) -> str | None:
    """The GPU model of a host key, or None for a CPU SKU."""
    sku = key.partition("/")[2]
    return sku.removeprefix("gpu:") if sku.startswith("gpu:") else None


class QuotaHolding(ColonyModel):
    """What one entity holds: clusters and workspaces (0 or 1), and hosts per host key."""

    clusters: int = 0
    workspaces: int = 0
    hosts: dict[str, int] = Field(default_factory=dict)

    def merged(self, other: QuotaHolding) -> QuotaHolding:
        """The larger of the two in every count."""
        return QuotaHolding(
            clusters=max(self.clusters, other.clusters),
            workspaces=max(self.workspaces, other.workspaces),
            hosts={
                key: n
                for key in sorted({*self.hosts, *other.hosts})
                if (n := max(self.hosts.get(key, 0), other.hosts.get(key, 0)))
            },
        )

    def lowered(self, other: QuotaHolding) -> QuotaHolding:
        """The smaller of the two in every count (a report never raises a holding)."""
        return QuotaHolding(
            clusters=min(self.clusters, other.clusters),
            workspaces=min(self.workspaces, other.workspaces),
            hosts={
                key: n
                for key in sorted(self.hosts)
                if (n := min(self.hosts[key], other.hosts.get(key, 0)))
            },
        )

    def within(self, other: QuotaHolding) -> bool:
        """True when this holds no more than `other` in any count."""
        return (
            self.clusters <= other.clusters
            and self.workspaces <= other.workspaces
            and all(count <= other.hosts.get(key, 0) for key, count in self.hosts.items())
        )


def cluster_need(
    location_id: str,
    pools: Sequence[NodePoolStatus],
    queued: Iterable[object] = (),
) -> QuotaHolding:
    """What a cluster holds or will hold: one cluster, and per host key the peak over its pools
    now (their count, or their nodes while more are still there) and after each queued operation
    in order (an add or a scale sets a pool's count, a pool's delete ends it; a node's delete is
    not counted down: erring high is safe). Peaks are per key, so their sum may exceed the peak
    of the sum: also safe."""
    # A template's machine-deployment pool holds no host of the provider: its cloud bills it.
    counts: dict[str, tuple[str, int]] = {
        pool.name: (host_key(location_id, pool.sku), max(pool.count, len(pool.nodes)))
        for pool in pools
        if pool.sku.instance_type is None
    }
    peak: dict[str, int] = {}

    def record() -> None:
        totals: dict[str, int] = {}
        for key, count in counts.values():
            totals[key] = totals.get(key, 0) + count
        for key, total in totals.items():
            peak[key] = max(peak.get(key, 0), total)

    record()
    for request in queued:
        match request:
            case AddNodePoolRequest(pool=spec):
                counts[spec.name] = (host_key(location_id, spec.sku), spec.count)
            case ScaleNodePoolRequest(pool=name, count=count) if name in counts:
                counts[name] = (counts[name][0], count)
            case DeleteNodePoolRequest(pool=name) if name in counts:
                counts[name] = (counts[name][0], 0)
            case _:
                continue
        record()
    return QuotaHolding(clusters=1, hosts={key: n for key, n in sorted(peak.items()) if n})


WORKSPACE_NEED = QuotaHolding(workspaces=1)
"""What a workspace holds: itself (its GPUs are its cluster's hosts', counted there)."""


class QuotaFacts(ColonyModel):
    """What holdings are counted by, from the host provider's catalog: GPUs per host of each GPU
    model, and each location's hosts of each SKU (for the location share)."""

    gpus_per_host: dict[str, int] = Field(default_factory=dict)
    stock: dict[str, int] = Field(default_factory=dict)
    """Hosts in all, per host key."""

    def updated(self, newer: QuotaFacts) -> QuotaFacts:
        return QuotaFacts(
            gpus_per_host={**self.gpus_per_host, **newer.gpus_per_host},
            stock={**self.stock, **newer.stock},
        )


def catalog_facts(
    gpu_models: Iterable[Mapping[str, Any]], hosts: Iterable[Mapping[str, Any]]
) -> QuotaFacts:
    """Facts from the host provider's `/v1/gpu-models` and `/v1/hosts` items (one location's, or
    every location's)."""
    stock: dict[str, int] = {}
    for host in hosts:
        gpu, cpu = host.get("gpuModelId"), host.get("cpuSku")
        if not (gpu or cpu) or not host.get("location"):
            continue
        sku = NodeSku(gpu_model_id=str(gpu)) if gpu else NodeSku(cpu_sku=str(cpu))
        key = host_key(str(host["location"]), sku)
        stock[key] = stock.get(key, 0) + 1
    return QuotaFacts(
        gpus_per_host={
            str(model["id"]): int(model.get("gpusPerHost") or 0)
            for model in gpu_models
            if model.get("id") is not None
        },
        stock=stock,
    )


# --- the ledger's messages ------------------------------------------------------------------


class AdmitQuotaRequest(ColonyModel):
    """Let `holder` hold `need` (its whole holding, not an increase), if the organization's
    quotas allow it.

    Sent by the client layer before it starts an entity (`creates`: the holder must be new, or
    made by this very `request_id`), and by a cluster's workflow before it queues growth.
    """

    holder: str
    """The entity's workflow id."""
    request_id: str
    need: QuotaHolding
    creates: bool = False
    defaults: QuotaLimits = Field(default_factory=lambda: DEFAULT_LIMITS)
    """The asker's configured defaults, for the limits the organization's operator did not set."""
    facts: QuotaFacts = Field(default_factory=QuotaFacts)


class QuotaClaim(ColonyModel):
    """What an entity's workflow asks its organization's ledger for (`admit_quota`, which adds
    the worker's defaults and the catalog's facts to make it an `AdmitQuotaRequest`)."""

    organization: str
    holder: str
    request_id: str
    need: QuotaHolding


class QuotaAdmission(ColonyModel):
    """An admission's answer (a refusal is an `ApplicationError` of type `QuotaExceeded`)."""

    taken: bool = False
    """A create whose holder is another request's: the name is taken (nothing changed)."""
    created: bool = False
    """The holder was made by this admission (a failed start releases it)."""


class ReleaseQuotaRequest(ColonyModel):
    """Forget a holder a create admitted and whose start failed (only while its workflow never
    confirmed it, and only the create's own: `request_id`)."""

    holder: str
    request_id: str


class QuotaReleased(ColonyModel):
    """A release's answer: whether the holder was forgotten."""

    released: bool


class HoldingReport(ColonyModel):
    """An entity tells its ledger what it holds now (lower or the same: a report never raises),
    or that it is gone (`closed`)."""

    request_id: str
    holder: str
    holding: QuotaHolding = Field(default_factory=QuotaHolding)
    closed: bool = False


class SetQuotaRequest(ColonyModel):
    """An operator's change: `limits` (its set fields) become overrides, `reset` ones go back to
    the defaults."""

    limits: QuotaLimits = Field(default_factory=QuotaLimits)
    reset: list[str] = Field(default_factory=list)


QuotaMessage = AdmitQuotaRequest | ReleaseQuotaRequest | HoldingReport | SetQuotaRequest


class QuotaHolder(ColonyModel):
    """One entity's holding in the ledger."""

    holding: QuotaHolding
    request_id: str = ""
    """The create's request id when a client admitted it (empty: its workflow reported it)."""
    confirmed: bool = False
    """Its workflow has reported or asked itself: it runs, or ran."""
    since: datetime | None = None


class QuotaLedgerState(ColonyModel):
    """Everything `QuotaWorkflow` knows; carried whole across continue-as-new."""

    organization: str
    overrides: QuotaLimits = Field(default_factory=QuotaLimits)
    holders: dict[str, QuotaHolder] = Field(default_factory=dict)
    facts: QuotaFacts = Field(default_factory=QuotaFacts)
    audited_at: datetime | None = None
    inbox: Inbox[QuotaMessage] = Field(default_factory=Inbox)


class QuotaLedgerInput(ColonyModel):
    organization: str
    state: QuotaLedgerState | None = None
    continue_as_new: ContinueAsNewPolicy = Field(default_factory=ContinueAsNewPolicy)


# --- what the ledger shows --------------------------------------------------------------------


class QuotaUsage(ColonyModel):
    hosts: int = 0
    gpus: int = 0
    clusters: int = 0
    workspaces: int = 0


class LocationUse(ColonyModel):
    """The organization's hosts of one SKU in one location, against its share."""

    location_id: str
    sku: str
    hosts: int
    stock: int | None = None
    """The location's hosts of that SKU in all (None: not known to the ledger yet)."""


class QuotaHolderView(ColonyModel):
    holder: str
    holding: QuotaHolding
    confirmed: bool


class QuotaLedgerStatus(ColonyModel):
    """The ledger's `status` query: overrides, use and holders (the limits in force need the
    reader's defaults: `OrganizationQuota`)."""

    organization: str
    overrides: QuotaLimits = Field(default_factory=QuotaLimits)
    usage: QuotaUsage = Field(default_factory=QuotaUsage)
    locations: list[LocationUse] = Field(default_factory=list)
    holders: list[QuotaHolderView] = Field(default_factory=list)


class OrganizationQuota(ColonyModel):
    """One organization's quotas as `colonyctl quota get` and the API show them: the limits in
    force (overrides over the defaults), which of them an operator set, and the use."""

    organization: str
    limits: QuotaLimits
    overrides: QuotaLimits
    usage: QuotaUsage
    locations: list[LocationUse] = Field(default_factory=list)
    holders: list[QuotaHolderView] = Field(default_factory=list)

    @classmethod
    def of(cls, status: QuotaLedgerStatus, defaults: QuotaLimits) -> OrganizationQuota:
        return cls(
            organization=status.organization,
            limits=status.overrides.over(defaults),
            overrides=status.overrides,
            usage=status.usage,
            locations=status.locations,
            holders=status.holders,
        )


# --- decisions --------------------------------------------------------------------------------


class QuotaProblem(ColonyModel):
    """A quota an admission would exceed: which, its use, what was asked, its limit."""

    quota: QuotaName
    used: int
    asked: int
    limit: int
    location_id: str = ""
    sku: str = ""
    stock: int = 0
    share: float = 0.0

    @property
    def field(self) -> str:
        return f"quota.{self.quota.value}"

    def message(self, organization: str) -> str:
        use = f"{self.used} in use, {self.asked} more asked"
        if self.quota is QuotaName.LOCATION_SHARE:
            return (
                f"organization '{organization}' would exceed its location share of "
                f"{self.share:.0%} of location '{self.location_id}''s {self.stock} {self.sku} "
                f"hosts (at most {self.limit}): {use}"
            )
        unit = {QuotaName.GPUS: "GPUs"}.get(self.quota, self.quota.value)
        return f"organization '{organization}' would exceed its quota of {self.limit} {unit}: {use}"


def share_limit(stock: int, share: float) -> int:
    """Hosts of a location's SKU one organization may hold: `share` of `stock`, rounded down, at
    least one (a location with a single host of a SKU can still serve someone)."""
    return max(1, math.floor(stock * share + 1e-9))


class QuotaBook:
    """The pure decisions of one organization's ledger over its state (`QuotaLedgerState`)."""

    def __init__(self, state: QuotaLedgerState) -> None:
        self.state = state

    # --- counting ---

    def gpus(self, hosts: Mapping[str, int], facts: QuotaFacts | None = None) -> int:
        per_host = (facts or self.state.facts).gpus_per_host
        return sum(
            count * per_host.get(model, 0)
            for key, count in hosts.items()
            if (model := gpu_model_of(key)) is not None
        )

    def hosts_by_key(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for holder in self.state.holders.values():
            for key, count in holder.holding.hosts.items():
                totals[key] = totals.get(key, 0) + count
        return totals

    def usage(self) -> QuotaUsage:
        hosts = self.hosts_by_key()
        holders = self.state.holders.values()
        return QuotaUsage(
            hosts=sum(hosts.values()),
            gpus=self.gpus(hosts),
            clusters=sum(h.holding.clusters for h in holders),
            workspaces=sum(h.holding.workspaces for h in holders),
        )

    # --- admitting ---

    def problem(self, request: AdmitQuotaRequest) -> QuotaProblem | None:
        """The first quota `request` would exceed, or None (nothing written)."""
        facts = self.state.facts.updated(request.facts)
        limits = self.state.overrides.over(request.defaults)
        held = self.state.holders.get(request.holder)
        current = held.holding if held is not None else QuotaHolding()
        after = current.merged(request.need)
        hosts = self.hosts_by_key()
        used_hosts = sum(hosts.values())
        usage = self.usage()
        asked = {
            QuotaName.CLUSTERS: (usage.clusters, after.clusters - current.clusters),
            QuotaName.WORKSPACES: (usage.workspaces, after.workspaces - current.workspaces),
            QuotaName.HOSTS: (
                used_hosts,
                sum(after.hosts.values()) - sum(current.hosts.values()),
            ),
            QuotaName.GPUS: (
                self.gpus(hosts, facts),
                self.gpus(after.hosts, facts) - self.gpus(current.hosts, facts),
            ),
        }
        for name, (used, more) in asked.items():
            limit = getattr(limits, name.value)
            if more > 0 and limit is not None and used + more > limit:
                return QuotaProblem(quota=name, used=used, asked=more, limit=limit)
        share = limits.location_share
        for key, count in after.hosts.items():
            more = count - current.hosts.get(key, 0)
            stock = facts.stock.get(key)
            if more <= 0 or share is None or stock is None:
                continue
            cap = share_limit(stock, share)
            if hosts.get(key, 0) + more > cap:
                location, _, sku = key.partition("/")
                return QuotaProblem(
                    quota=QuotaName.LOCATION_SHARE,
                    used=hosts.get(key, 0),
                    asked=more,
                    limit=cap,
                    location_id=location,
                    sku=sku.partition(":")[2],
                    stock=stock,
                    share=share,
                )
        return None

    def taken(self, request: AdmitQuotaRequest) -> bool:
        """A create whose holder exists and is another request's."""
        held = self.state.holders.get(request.holder)
        return request.creates and held is not None and held.request_id != request.request_id

    def admit(self, request: AdmitQuotaRequest, now: datetime) -> QuotaAdmission:
        """Write the admission (call `taken` and `problem` first)."""
        self.state.facts = self.state.facts.updated(request.facts)
        held = self.state.holders.get(request.holder)
        if held is None:
            self.state.holders[request.holder] = QuotaHolder(
                holding=request.need,
                request_id=request.request_id if request.creates else "",
                confirmed=not request.creates,
                since=now,
            )
            return QuotaAdmission(created=True)
        held.holding = held.holding.merged(request.need)
        if not request.creates:
            held.confirmed = True
        return QuotaAdmission()

    # --- entities telling ---

    def report(self, report: HoldingReport, now: datetime) -> None:
        """A holder's report: closed ones go; others are lowered (or recorded, when unknown)."""
        if report.closed:
            self.state.holders.pop(report.holder, None)
            return
        held = self.state.holders.get(report.holder)
        if held is None:
            self.state.holders[report.holder] = QuotaHolder(
                holding=report.holding, confirmed=True, since=now
            )
            return
        held.holding = held.holding.lowered(report.holding)
        held.confirmed = True

    def release(self, request: ReleaseQuotaRequest) -> bool:
        """Forget a create's holder whose start failed; False when it is not that (confirmed, or
        another request's)."""
        held = self.state.holders.get(request.holder)
        if held is None or held.confirmed or held.request_id != request.request_id:
            return False
        del self.state.holders[request.holder]
        return True

    # --- audits ---

    def audit_due(self, now: datetime) -> bool:
        audited = self.state.audited_at
        return audited is None or now - audited >= AUDIT_INTERVAL

    def forget_gone(self, running: Iterable[str], now: datetime) -> list[str]:
        """After an audit found which holders' workflows run: forget those that do not, unless
        a client admitted them less than `PENDING_GRACE` ago (their start may be on its way)."""
        alive = set(running)
        gone = [
            holder
            for holder, held in self.state.holders.items()
            if holder not in alive
            and (held.confirmed or held.since is None or now - held.since >= PENDING_GRACE)
        ]
        for holder in gone:
            del self.state.holders[holder]
        self.state.audited_at = now
        return gone

    def status(self) -> QuotaLedgerStatus:
        stock = self.state.facts.stock
        return QuotaLedgerStatus(
            organization=self.state.organization,
            overrides=self.state.overrides,
            usage=self.usage(),
            locations=[
                LocationUse(
                    location_id=key.partition("/")[0],
                    sku=key.partition("/")[2],
                    hosts=count,
                    stock=stock.get(key),
                )
                for key, count in sorted(self.hosts_by_key().items())
                if count
            ],
            holders=[
                QuotaHolderView(holder=name, holding=held.holding, confirmed=held.confirmed)
                for name, held in sorted(self.state.holders.items())
            ],
        )
