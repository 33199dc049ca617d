"""An organization's quotas: one client, two transports, to show and set them; and the admission
every entity client asks before it starts an entity of an organization.

`Quotas` declares what a caller can do: read an organization's quotas and use, and (an operator)
change them. `TemporalQuotas` does it through the organization's ledger (`QuotaWorkflow`,
`quota/<organization>`: `colonyctl quota` in direct mode, and the HTTP API), `HttpQuotas`
through the API (`/v1/quota`, `/v1/organizations/{organization}/quota`, remote mode).

**Admission** (`admit`) is the one validation path of quotas for both front doors: the Temporal
transport of clusters, colonies and workspaces calls it before it starts an entity's workflow
(`colonyctl` in direct mode, and the API for its callers through the same clients), so the same
request is refused with the same words (`QuotaExceededError`: the quota, its use and its limit)
whichever door it came through. It counts the need by the host provider's catalog (GPUs per host,
the location's hosts per SKU), which it reads here; an organization's request for hosts that
cannot be counted (no catalog) is refused as unavailable rather than admitted blind. A start that
fails after its admission gives the holder back (`Admitted.release`). What belongs to no
organization (an operator's, in direct mode) has no quota.

Growth of a running cluster (a pool's add or scale-up) is admitted by the cluster's own workflow
(`admit_quota`), whose refusal reaches the clients as the same error.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from temporalio.client import WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from clients.errors import ConflictError, InvalidRequestError, UnavailableError
from clients.http import RemoteClient, parsed
from clients.provider import DirectCatalog
from clients.temporal import TemporalSession, reported
from infra.config import ColonySettings, SettingsError
from models.names import name_problem
from models.quota import (
    AdmitQuotaRequest,
    OrganizationQuota,
    QuotaAdmission,
    QuotaFacts,
    QuotaHolding,
    QuotaLedgerInput,
    QuotaLedgerStatus,
    QuotaLimits,
    QuotaReleased,
    ReleaseQuotaRequest,
    SetQuotaRequest,
    catalog_facts,
    gpu_model_of,
    quota_workflow_id,
)
from workflows.quota import QUOTA

OWN_QUOTA = "/v1/quota"
ORGANIZATIONS = "/v1/organizations"


def organization_checked(organization: str) -> str:
    """An organization as a quota command names it (an operator's: it must name one)."""
    if not organization:
        raise InvalidRequestError(
            "organization: name the organization whose quotas to show or set (--organization)"
        )
    problem = name_problem("organization", organization)
    if problem:
        raise InvalidRequestError(f"organization: {problem}")
    return organization


class Quotas(ABC):
    """What a caller can do with quotas, whichever transport carries it."""

    @abstractmethod
    async def get(self, organization: str = "") -> OrganizationQuota:
        """An organization's quotas and use ("": the caller's own, through the API)."""

    @abstractmethod
    async def set(
        self, organization: str, limits: QuotaLimits, reset: list[str]
    ) -> OrganizationQuota:
        """Set an organization's quotas (the set fields of `limits`); `reset` ones go back to the
        defaults. An operator's (the API: a key with Quota Manage)."""


# --- through Temporal ------------------------------------------------------------------------


async def ledger(session: TemporalSession, organization: str) -> WorkflowHandle[Any, Any]:
    """The organization's ledger, started when it does not run."""
    client = await session.client()
    with reported(
        f"cannot reach the quota ledger of organization '{organization}'",
        UnavailableError(f"the quota ledger of organization '{organization}' is gone"),
    ):
        return await client.start_workflow(
            QUOTA.workflow_type,
            QuotaLedgerInput(organization=organization),
            id=quota_workflow_id(organization),
            task_queue=session.settings.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=f"quota ledger of organization {organization}",
        )


class TemporalQuotas(Quotas):
    """Quotas through the organizations' ledgers (an operator's view: any organization)."""

    def __init__(self, session: TemporalSession) -> None:
        self.session = session

    @property
    def defaults(self) -> QuotaLimits:
        return self.session.settings.quota_defaults

    async def get(self, organization: str = "") -> OrganizationQuota:
        organization = organization_checked(organization or self.session.organization)
        client = await self.session.client()
        handle = client.get_workflow_handle(quota_workflow_id(organization))
        try:
            with reported(
                f"cannot read the quotas of organization '{organization}'",
                UnavailableError("no ledger"),
            ):
                status: QuotaLedgerStatus = await handle.query(
                    QUOTA.status.name, result_type=QuotaLedgerStatus
                )
        except UnavailableError:
            # A ledger starts with the organization's first admission: none yet, nothing held.
            if not await _missing(handle):
                raise
            status = QuotaLedgerStatus(organization=organization)
        return OrganizationQuota.of(status, self.defaults)

    async def set(
        self, organization: str, limits: QuotaLimits, reset: list[str]
    ) -> OrganizationQuota:
        organization = organization_checked(organization)
        handle = await ledger(self.session, organization)
        with reported(
            f"cannot set the quotas of organization '{organization}'",
            UnavailableError(f"the quota ledger of organization '{organization}' is gone"),
            update=QUOTA.set_limits.name,
        ):
            status: QuotaLedgerStatus = await handle.execute_update(
                QUOTA.set_limits.name,
                SetQuotaRequest(limits=limits, reset=reset),
                result_type=QuotaLedgerStatus,
            )
        return OrganizationQuota.of(status, self.defaults)


async def _missing(handle: WorkflowHandle[Any, Any]) -> bool:
    """True when the ledger has never been started."""
    try:
        await handle.describe()
    except RPCError as exc:
        return exc.status == RPCStatusCode.NOT_FOUND
    return False


# --- admission -------------------------------------------------------------------------------


@dataclass
class Admitted:
    """An admission made before a start: `release` gives it back when the start fails."""

    session: TemporalSession | None = None
    organization: str = ""
    holder: str = ""
    request_id: str = ""
    created: bool = False

    async def release(self) -> None:
        """Give back the holder this admission made (nothing when it made none)."""
        if self.session is None or not self.created:
            return
        handle = await ledger(self.session, self.organization)
        with reported(
            f"cannot release {self.holder}'s quota",
            UnavailableError(f"the quota ledger of organization '{self.organization}' is gone"),
        ):
            await handle.execute_update(
                QUOTA.release.name,
                ReleaseQuotaRequest(holder=self.holder, request_id=self.request_id),
                result_type=QuotaReleased,
            )


async def quota_facts(settings: ColonySettings, need: QuotaHolding) -> QuotaFacts:
    """The catalog's facts `need` is counted by: GPUs per host of its GPU models, its locations'
    hosts per SKU.

    Raises:
        UnavailableError: the host provider is not configured or does not answer.
    """
    if not need.hosts:
        return QuotaFacts()
    catalog = DirectCatalog(settings)
    try:
        models = (
            await catalog.fetch("gpu-model") if any(gpu_model_of(key) for key in need.hosts) else []
        )
        hosts: list[dict[str, Any]] = []
        for location in sorted({key.partition("/")[0] for key in need.hosts}):
            hosts += await catalog.hosts(location)
    except (SettingsError, UnavailableError) as exc:
        why = exc.message if isinstance(exc, UnavailableError) else str(exc)
        raise UnavailableError(
            f"quota: the request's hosts cannot be counted against the organization's quotas "
            f"without the host provider's catalog: {why}"
        ) from exc
    return catalog_facts(models, hosts)


async def admit(
    session: TemporalSession,
    organization: str,
    *,
    holder: str,
    request_id: str,
    need: QuotaHolding,
    subject: str,
) -> Admitted:
    """Admit `holder` (a new entity's workflow) with its need, before it is started.

    Args:
        subject: the entity as a name conflict names it (`cluster 'training'`).

    Raises:
        QuotaExceededError: the organization would exceed a quota (the ledger's words).
        ConflictError: another request's entity holds that name.
    """
    if not organization:
        return Admitted()
    request = AdmitQuotaRequest(
        holder=holder,
        request_id=request_id,
        need=need,
        creates=True,
        defaults=session.settings.quota_defaults,
        facts=await quota_facts(session.settings, need),
    )
    handle = await ledger(session, organization)
    with reported(
        "quota",
        UnavailableError(f"the quota ledger of organization '{organization}' is gone"),
        update="quota",
    ):
        answer: QuotaAdmission = await handle.execute_update(
            QUOTA.admit.name,
            request,
            id=f"{holder}/{request_id}",
            result_type=QuotaAdmission,
        )
    if answer.taken:
        raise ConflictError(
            f"name: {subject} already exists (names are unique until a deletion completes)"
        )
    return Admitted(session, organization, holder, request_id, answer.created)


# --- through the HTTP API --------------------------------------------------------------------


def patch_body(limits: QuotaLimits, reset: list[str]) -> dict[str, Any]:
    """An operator's change as the API's merge patch: a number sets, null resets."""
    body: dict[str, Any] = limits.model_dump(mode="json", by_alias=True, exclude_none=True)
    for name in reset:
        body[QuotaLimits.model_fields[name].alias or name] = None
    return body


class HttpQuotas(Quotas):
    """Quotas through the HTTP API: the key's own organization's, or (a key with Quota Manage)
    any organization's."""

    def __init__(self, remote: RemoteClient) -> None:
        self.remote = remote

    @staticmethod
    def path(organization: str) -> str:
        return f"{ORGANIZATIONS}/{quote(organization, safe='')}/quota"

    async def get(self, organization: str = "") -> OrganizationQuota:
        path = self.path(organization_checked(organization)) if organization else OWN_QUOTA
        return parsed(OrganizationQuota, await self.remote.call("GET", path))

    async def set(
        self, organization: str, limits: QuotaLimits, reset: list[str]
    ) -> OrganizationQuota:
        body = await self.remote.call(
            "PATCH", self.path(organization_checked(organization)), json=patch_body(limits, reset)
        )
        return parsed(OrganizationQuota, body)
