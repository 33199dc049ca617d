"""The activity through which an entity's workflow asks its organization's quota ledger for more
(`admit_quota`): a cluster's workflow, before it queues a node pool's add or scale-up.

`QuotaActivities` receives the worker's Temporal client and task queue, the host provider's client
and the quota defaults of the worker's settings (`worker.py`). A workflow cannot send another an
update, nor read the catalog, so this does both: it reads the catalog's facts the need is counted
by (GPUs per host of each GPU model it names, its locations' hosts per SKU) from the host
provider, then sends the ledger (`quota/<organization>`, started when it does not run) the
`admit` update. The ledger's refusal comes back as the same `QuotaExceeded` error, not retried:
the cluster's update handler passes its words on to the caller. Anything else (the provider or
Temporal not answering) is temporary and retried.
"""

from __future__ import annotations

from typing import Any

import httpx
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError

from activities.declarations import QUOTA, cluster_calls, implements
from activities.errors import http_error, transport_error
from models.errors import ErrorType, over_quota
from models.quota import (
    AdmitQuotaRequest,
    QuotaAdmission,
    QuotaClaim,
    QuotaFacts,
    QuotaHolding,
    QuotaLedgerInput,
    QuotaLimits,
    catalog_facts,
    gpu_model_of,
    quota_workflow_id,
)

REQUEST_TIMEOUT = httpx.Timeout(20.0, connect=5.0)


class QuotaActivities:
    """Admissions asked by workflows (see the module docstring)."""

    def __init__(
        self,
        temporal: Client,
        task_queue: str,
        host_provider: httpx.AsyncClient,
        defaults: QuotaLimits,
    ) -> None:
        self._temporal = temporal
        self._task_queue = task_queue
        self._host_provider = host_provider
        self._defaults = defaults

    async def _get(self, what: str, path: str, params: dict[str, str] | None = None) -> Any:
        try:
            response = await self._host_provider.get(path, params=params, timeout=REQUEST_TIMEOUT)
            response.raise_for_status()
        except httpx.HTTPStatusError as exc:
            raise http_error(exc, what) from exc
        except httpx.TransportError as exc:
            raise transport_error(exc, what) from exc
        body = response.json()
        items = body.get("items") if isinstance(body, dict) else None
        return [item for item in items or [] if isinstance(item, dict)]

    async def _facts(self, need: QuotaHolding) -> QuotaFacts:
        """The catalog's facts `need` is counted by (none for a need of no hosts)."""
        if not need.hosts:
            return QuotaFacts()
        models = (
            await self._get("read the GPU models", "/v1/gpu-models")
            if any(gpu_model_of(key) for key in need.hosts)
            else []
        )
        hosts: list[dict[str, Any]] = []
        for location in sorted({key.partition("/")[0] for key in need.hosts}):
            hosts += await self._get(
                f"read the hosts of {location}", "/v1/hosts", {"location": location}
            )
        return catalog_facts(models, hosts)

    @implements(cluster_calls.ADMIT_QUOTA)
    async def admit_quota(self, claim: QuotaClaim) -> QuotaAdmission:
        """Ask the organization's ledger to let the holder hold its need (see the module doc).

        Raises:
            ApplicationError: `QuotaExceeded` (not retried), in the ledger's words.
        """
        request = AdmitQuotaRequest(
            holder=claim.holder,
            request_id=claim.request_id,
            need=claim.need,
            defaults=self._defaults,
            facts=await self._facts(claim.need),
        )
        handle = await self._temporal.start_workflow(
            QUOTA.workflow_type,
            QuotaLedgerInput(organization=claim.organization),
            id=quota_workflow_id(claim.organization),
            task_queue=self._task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=f"quota ledger of organization {claim.organization}",
        )
        try:
            answer: QuotaAdmission = await handle.execute_update(
                QUOTA.admit.name,
                request,
                id=f"{claim.holder}/{claim.request_id}",
                result_type=QuotaAdmission,
            )
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            if isinstance(cause, ApplicationError) and cause.type == ErrorType.QUOTA_EXCEEDED:
                first = cause.details[0] if cause.details else {}
                field = first.get("field", "") if isinstance(first, dict) else ""
                raise over_quota(cause.message, str(field)) from exc
            raise
        return answer
