"""`/v1/operator/...`: what an operator does for any organization, with a key that has Operator
Purge (`operator:purge`; made with `colonyctl apikey create --permission purge`): end a cluster or
workspace whose workflow cannot make progress and remove what it made, found by its ownership
marks (`clients.purges.TemporalPurges`, the client `colonyctl ... purge` uses in local
mode; `models.purge` says what a purge does).

The organization is the path's, never the key's: these routes are the one place a key acts
outside its own organization, so they need their own permission, which no tenant's key has.
A purge answers 200 with its report once it has finished (within `PURGE_WAIT`), 202 with the
report so far while it still runs; `GET` of the same path reads the last purge's report. Safe
to repeat: a purge of an entity that answers deletes it the normal way (`deleted`), and one
run again sweeps what is left (`swept`).

Mounted by `api.app.create_app`.
"""

from __future__ import annotations

from fastapi import Response

from api.errors import error_responses
from api.routes import OPERATOR_READ, PURGE, Call, entity_router, reads, writes
from api.views import PurgeView
from clients.purges import checked_target
from models.identity import Entity
from models.purge import PurgeOutcome

router, ROUTERS = entity_router("/v1/operator/organizations", "operator")
"""The routes this module adds to the API (`api.app.entity_routers`)."""

PURGES = {
    **error_responses(401, 403, 404, 409, 422, 429, 503),
    202: {"model": PurgeView, "description": "The purge still runs: its report so far."},
}


def _purge_routes(entity: Entity, collection: str, noun: str) -> None:
    """`POST` and `GET` `/{organization}/<collection>/{name}/purge` for one kind of entity."""
    path = f"/{{organization}}/{collection}/{{name}}/purge"

    async def purge(
        organization: str, name: str, response: Response, call: Call = PURGE
    ) -> PurgeView:
        report = await call.purges().purge(checked_target(entity, organization, name))
        response.status_code = 202 if report.outcome is PurgeOutcome.RUNNING else 200
        return PurgeView.of(report)

    async def last_purge(organization: str, name: str, call: Call = OPERATOR_READ) -> PurgeView:
        return PurgeView.of(await call.purges().report(checked_target(entity, organization, name)))

    purge.__name__ = f"purge_{entity.value}"
    purge.__doc__ = (
        f"End the organization's {noun} if its workflow cannot make progress (its workflow task "
        "fails on every attempt) and remove what it made, found by its ownership marks; one whose "
        "workflow answers is deleted the normal way. 200 with the report once finished, 202 while "
        "it runs."
    )
    last_purge.__name__ = f"get_{entity.value}_purge"
    last_purge.__doc__ = (
        f"The last purge of the organization's {noun}: how far it got, or what it did."
    )
    writes(router, "POST", path, PurgeView, f"Purge a {noun}", status_code=200, responses=PURGES)(
        purge
    )
    reads(router, path, PurgeView, f"Get the purge of a {noun}")(last_purge)


_purge_routes(Entity.WORKSPACE, "workspaces", "workspace")
_purge_routes(Entity.CLUSTER, "kubernetes/clusters", "cluster")
