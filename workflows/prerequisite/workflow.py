"""`PrerequisiteWorkflow`: installs one prerequisite (a ServiceTemplate a workspace class needs
first) on one cluster, once, id `prereq/<ClusterDeployment>/<template>` (its contract:
`workflows/prerequisite/__init__.py`).

Every workspace that needs it signals `prerequisite` (with a request id and the workflow to answer)
through signal-with-start, so concurrent workspaces meet in one run and share one installation (one
ServiceSet, `wsprereq-<cluster>-<template>--<hash>`, `models.identity`, marked as this workflow's:
one of that name that is not is refused, never taken over; labelled `colony.dev/prerequisite` and,
as the exalsius operator labels its own, `workspaces.exalsius.ai/role=prerequisite` with the
ClusterDeployment and template). It installs into the namespace the class gives, else one of its
own, `<template>-system` (`PrerequisiteSpec.install_namespace`).

It runs in the kit's single-writer mode (`workflows.kit.service`): the requests are its inbox,
handled one at a time, each once. The first installs; each is answered by the signal
`prerequisite_answer`: Satisfied (installed now, or found already deployed on the cluster by other
means), or Failed with the reason (template missing or invalid, install failed, deploy timeout),
which fails the workspaces waiting on it. Once every request is answered, it ends; the
installation stays: prerequisites outlive the workspaces that needed them, and the next request
finds Colony's own ServiceSet deployed and is satisfied at once.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from workflows.kit.engine import is_failure, reason_of
from workflows.kit.run_limit import RunLimit
from workflows.kit.service import Service
from workflows.workspace_calls import (
    CHECK_SERVICE_TEMPLATE,
    FIND_SERVICE_SETS,
    deploy_service_set,
)

with workflow.unsafe.imports_passed_through():
    from models.cluster import DEFAULT_NAMESPACE
    from models.identity import prerequisite_service_set_name
    from models.names import shorten_name
    from models.ownership import Owner
    from models.workspace import PrerequisitePhase, PrerequisiteSource
    from models.workspace_api import (
        ApplyServiceSetRequest,
        CheckServiceTemplateRequest,
        FindServiceSetsRequest,
        PrerequisiteAnswer,
        PrerequisiteInput,
        PrerequisiteMessage,
        PrerequisiteState,
        ServiceSetOutcome,
        ServiceSetService,
        prerequisite_labels,
    )
    from workflows.prerequisite import PREREQUISITE
    from workflows.workspace import WORKSPACE

HELM_RELEASE_NAME_MAX = 53
"""Helm's limit on release names."""

Outcome = tuple[PrerequisitePhase, PrerequisiteSource | None, str]
"""How an installation ended: its phase, where the prerequisite comes from, and why."""


def _failed(message: str) -> Outcome:
    return PrerequisitePhase.FAILED, None, message


@workflow.defn(name=PREREQUISITE.workflow_type)
class PrerequisiteWorkflow:
    """One prerequisite on one cluster (see the module docstring)."""

    @workflow.init
    def __init__(self, input: PrerequisiteInput) -> None:
        self._input = input
        self._state = input.state or PrerequisiteState()
        self._limit = RunLimit(input.continue_as_new)
        self._service = Service(self._state.inbox, self._limit)

    @workflow.signal(name=PREREQUISITE.prerequisite.name)
    def prerequisite(self, message: PrerequisiteMessage) -> None:
        """A workspace needs the prerequisite: it is answered once the outcome is known."""
        self._service.post(message, message.request_id)

    @workflow.query(name=PREREQUISITE.status.name)
    def status(self) -> PrerequisiteAnswer:
        """The outcome, or Installing."""
        return self._state.result or PrerequisiteAnswer(
            request_id="",
            template=self._input.template,
            phase=PrerequisitePhase.INSTALLING,
            namespace=self._input.namespace,
        )

    @workflow.run
    async def run(self, input: PrerequisiteInput) -> PrerequisiteAnswer:
        """Install (or find) the prerequisite, answering every workspace that asked, then end."""
        await self._service.serve(
            self._answer,
            closed=lambda: self._state.result is not None and not self._service.pending,
            carry=lambda: input.model_copy(
                update={"state": self._state, "continue_as_new": self._limit.policy}
            ),
        )
        return self.status()

    async def _answer(self, message: PrerequisiteMessage) -> None:
        """The first request installs; every request hears the outcome."""
        if self._state.result is None:
            phase, source, why = await self._install()
            self._state.result = PrerequisiteAnswer(
                request_id="",
                template=self._input.template,
                phase=phase,
                source=source,
                namespace=self._input.namespace,
                message=why,
            )
        self._service.send(
            WORKSPACE.prerequisite_answer,
            message.reply_to,
            self._state.result.model_copy(update={"request_id": message.request_id}),
        )

    async def _install(self) -> Outcome:
        try:
            return (
                await self._deployed_already()
                or await self._template_problem()
                or await self._deploy()
            )
        except Exception as error:
            if not is_failure(error):
                raise
            return _failed(reason_of(error))

    async def _deployed_already(self) -> Outcome | None:
        """Installed on the cluster by other means (a ServiceSet that is not Colony's)."""
        spec = self._input
        found = await FIND_SERVICE_SETS(
            FindServiceSetsRequest(
                namespace=DEFAULT_NAMESPACE,
                cluster_deployment=spec.cluster_deployment,
                template=spec.template,
            )
        )
        theirs = [f for f in found.found if not f.colony_prerequisite and f.state == "Deployed"]
        if not theirs:
            return None
        return (
            PrerequisitePhase.SATISFIED,
            PrerequisiteSource.COLONY,
            f"{spec.template} is already deployed on cluster '{spec.cluster}' "
            f"(ServiceSet {theirs[0].name})",
        )

    async def _template_problem(self) -> Outcome | None:
        spec = self._input
        template = await CHECK_SERVICE_TEMPLATE(
            CheckServiceTemplateRequest(namespace=spec.template_namespace, name=spec.template)
        )
        if not template.found:
            return _failed(
                f"ServiceTemplate '{spec.template}' not found in '{spec.template_namespace}'"
            )
        if not template.valid:
            return _failed(f"ServiceTemplate '{spec.template}' is not valid: {template.message}")
        return None

    async def _deploy(self) -> Outcome:
        """Colony's own ServiceSet for it, waited on until deployed, failed or gone, or the
        deploy timeout."""
        spec = self._input
        where = f"on cluster '{spec.cluster}'"
        name = prerequisite_service_set_name(spec.organization, spec.cluster, spec.template)
        release = shorten_name(spec.template, HELM_RELEASE_NAME_MAX)
        seen = await deploy_service_set(
            ApplyServiceSetRequest(
                namespace=DEFAULT_NAMESPACE,
                name=name,
                cluster_deployment=spec.cluster_deployment,
                services=[
                    ServiceSetService(
                        name=release,
                        namespace=spec.namespace,
                        template=spec.template,
                        values=spec.values,
                    )
                ],
                owner=Owner(
                    workflow_id=workflow.info().workflow_id, organization=spec.organization
                ),
                labels=prerequisite_labels(spec.template, spec.cluster_deployment),
            ),
            deadline=workflow.now() + timedelta(seconds=spec.deploy_timeout_seconds),
        )
        match seen.outcome:
            case ServiceSetOutcome.DEPLOYED:
                return PrerequisitePhase.SATISFIED, PrerequisiteSource.WORKSPACE, ""
            case ServiceSetOutcome.FAILED:
                return _failed(f"{spec.template} failed to install {where}: {seen.message}")
            case ServiceSetOutcome.GONE:
                return _failed(f"ServiceSet {name} was deleted")
        return _failed(
            f"{spec.template} was not deployed {where} within "
            f"{spec.deploy_timeout_seconds // 60} minutes (state: {seen.state or 'none'})"
        )
