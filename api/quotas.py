"""`/v1/quota` and `/v1/organizations/{organization}/quota`: an organization's quotas (hosts, GPUs,
clusters, workspaces, its share of a location's hosts of a SKU) with what it uses of each, through
`clients.quotas.TemporalQuotas`, as `colonyctl quota get|set` shows and changes them in
direct mode.

Any key with Read reads its own organization's (`GET /v1/quota`); a key with Quota Manage (an
operator's) reads and sets any organization's. A change is a JSON merge patch of the limits: a
number sets one, `null` gives it back to the default (`COLONY_QUOTA_*`), an absent one stays.
Admission itself is not here: every create, deploy and scale-up is admitted by the same client
code the routes of its entity use (`clients.quotas.admit`, the cluster's workflow).
Mounted by `api.app.create_app`.
"""

from __future__ import annotations

from api.bodies import read_body
from api.errors import error_responses
from api.routes import QUOTA_MANAGE, READ, Call, entity_router, reads, writes
from clients.quotas import organization_checked
from models.quota import OrganizationQuota, QuotaLimits

router, ROUTERS = entity_router("/v1", "quotas")
"""The routes this module adds to the API (`api.app.entity_routers`)."""

OPERATOR = error_responses(401, 403, 422, 429, 503)
CHANGES = error_responses(400, 401, 403, 415, 422, 429, 503)


@reads(router, "/quota", OrganizationQuota, "The caller's organization's quotas and use")
async def own_quota(call: Call = READ) -> OrganizationQuota:
    """The limits in force for the key's organization (an operator's overrides over the
    defaults), which of them an operator set, what the organization holds of each, and its hosts
    per location and SKU against the location's stock."""
    return await call.context.quotas(call.organization).get(call.organization)


@reads(
    router,
    "/organizations/{organization}/quota",
    OrganizationQuota,
    "An organization's quotas and use (an operator's)",
    responses=OPERATOR,
)
async def organization_quota(organization: str, call: Call = QUOTA_MANAGE) -> OrganizationQuota:
    """Any organization's quotas and use: a key with Quota Manage (`quota:manage`)."""
    organization_checked(organization)
    return await call.context.quotas(organization).get(organization)


@writes(
    router,
    "PATCH",
    "/organizations/{organization}/quota",
    OrganizationQuota,
    "Set an organization's quotas (an operator's)",
    body=QuotaLimits,
    status_code=200,
    responses=CHANGES,
    description="A JSON merge patch of the limits: a number sets one, `null` gives it back to "
    "the default, an absent one stays as it is. A key with Quota Manage (`quota:manage`).",
)
async def set_organization_quota(organization: str, call: Call = QUOTA_MANAGE) -> OrganizationQuota:
    organization_checked(organization)
    limits = await read_body(call.request, QuotaLimits)
    reset = [name for name in limits.model_fields_set if getattr(limits, name) is None]
    return await call.context.quotas(organization).set(organization, limits, reset)
