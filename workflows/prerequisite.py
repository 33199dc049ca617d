"""`PrerequisiteWorkflow`: installs one prerequisite (a ServiceTemplate a workspace class needs
first) on one cluster, once, id `prereq/<ClusterDeployment>/<template>`.

Every workspace that needs it signals `prerequisite` (with a request id and the workflow to answer)
through signal-with-start, so concurrent workspaces meet in one run and share one installation (one
ServiceSet, `wsprereq-<cluster>-<template>--<hash>`, `models.identity`, marked as this workflow's:
one of that name that is not is refused, never taken over; labelled `colony.dev/prerequisite` and,
as the exalsius operator labels its own, `workspaces.exalsius.ai/role=prerequisite` with the
ClusterDeployment and template). It installs into the namespace the class gives, else one of its
own, `<template>-system` (`PrerequisiteSpec.install_namespace`). The run answers every requester by the signal
`prerequisite_answer`: Satisfied (installed now, or found already deployed on the cluster by other
means), or Failed with the reason (template missing or invalid, install failed, deploy timeout),
which fails the workspaces waiting on it. Then it ends; the installation stays: prerequisites
outlive the workspaces that needed them, and the next request finds Colony's own ServiceSet
deployed and is satisfied at once.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from workflows.engine import RequestIds, is_failure, reason_of
from workflows.workspace_calls import (
    APPLY_SERVICE_SET,
    AWAIT_SERVICE_SET,
    CHECK_SERVICE_TEMPLATE,
    FIND_SERVICE_SETS,
    SIGNAL_WORKFLOW,
)

with workflow.unsafe.imports_passed_through():
    from models.cluster import DEFAULT_NAMESPACE
    from models.identity import prerequisite_service_set_name
    from models.names import shorten_name
    from models.operations import OperationBook
    from models.ownership import Owner
    from models.workspace import PrerequisitePhase, PrerequisiteSource
    from models.workspace_api import (
        ApplyServiceSetRequest,
        AwaitServiceSetRequest,
        CheckServiceTemplateRequest,
        FindServiceSetsRequest,
        PrerequisiteAnswer,
        PrerequisiteInput,
        PrerequisiteMessage,
        ServiceSetOutcome,
        ServiceSetService,
        SignalWorkflowRequest,
        WorkspaceSignal,
        prerequisite_labels,
    )

PREREQUISITE_SIGNAL = "prerequisite"
HELM_RELEASE_NAME_MAX = 53
"""Helm's limit on release names."""


@workflow.defn
class PrerequisiteWorkflow:
    """One prerequisite on one cluster (see the module docstring)."""

    @workflow.init
    def __init__(self, input: PrerequisiteInput) -> None:
        self._input = input
        self._ids = RequestIds(OperationBook())
        self._waiters: dict[str, str] = {}
        self._answered: set[str] = set()
        self._result: PrerequisiteAnswer | None = None

    @workflow.signal(name=PREREQUISITE_SIGNAL)
    def prerequisite(self, message: PrerequisiteMessage) -> None:
        """A workspace needs the prerequisite: it is answered once the outcome is known."""
        if self._ids.first_time(message.request_id):
            self._waiters[message.request_id] = message.reply_to

    @workflow.query
    def status(self) -> PrerequisiteAnswer:
        """The outcome, or Installing."""
        return self._result or PrerequisiteAnswer(
            request_id="",
            template=self._input.template,
            phase=PrerequisitePhase.INSTALLING,
            namespace=self._input.namespace,
        )

    @workflow.run
    async def run(self, input: PrerequisiteInput) -> PrerequisiteAnswer:
        """Install (or find) the prerequisite, then answer every workspace that asked."""
        phase, source, message = await self._install()
        self._result = PrerequisiteAnswer(
            request_id="",
            template=input.template,
            phase=phase,
            source=source,
            namespace=input.namespace,
            message=message,
        )
        # Answer everyone, including requests that arrive while answering, before the run ends.
        while True:
            for request_id, reply_to in list(self._waiters.items()):
                if request_id not in self._answered:
                    self._answered.add(request_id)
                    await SIGNAL_WORKFLOW(
                        SignalWorkflowRequest(
                            workflow_id=reply_to,
                            signal=WorkspaceSignal.PREREQUISITE_ANSWER,
                            payload=self._result.model_copy(
                                update={"request_id": request_id}
                            ).model_dump(mode="json"),
                        )
                    )
            await workflow.wait_condition(workflow.all_handlers_finished)
            if set(self._waiters) <= self._answered:
                return self._result

    async def _install(self) -> tuple[PrerequisitePhase, PrerequisiteSource | None, str]:
        spec = self._input
        where = f"on cluster '{spec.cluster}'"
        try:
            found = await FIND_SERVICE_SETS(
                FindServiceSetsRequest(
                    namespace=DEFAULT_NAMESPACE,
                    cluster_deployment=spec.cluster_deployment,
                    template=spec.template,
                )
            )
            theirs = [f for f in found.found if not f.colony_prerequisite and f.state == "Deployed"]
            if theirs:
                return (
                    PrerequisitePhase.SATISFIED,
                    PrerequisiteSource.COLONY,
                    f"{spec.template} is already deployed {where} (ServiceSet {theirs[0].name})",
                )
            template = await CHECK_SERVICE_TEMPLATE(
                CheckServiceTemplateRequest(namespace=spec.template_namespace, name=spec.template)
            )
            if not template.found:
                return (
                    PrerequisitePhase.FAILED,
                    None,
                    f"ServiceTemplate '{spec.template}' not found in '{spec.template_namespace}'",
                )
            if not template.valid:
                return (
                    PrerequisitePhase.FAILED,
                    None,
                    f"ServiceTemplate '{spec.template}' is not valid: {template.message}",
                )
            name = prerequisite_service_set_name(spec.organization, spec.cluster, spec.template)
            release = shorten_name(spec.template, HELM_RELEASE_NAME_MAX)
            owner = Owner(workflow_id=workflow.info().workflow_id, organization=spec.organization)
            applied = await APPLY_SERVICE_SET(
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
                    owner=owner,
                    labels=prerequisite_labels(spec.template, spec.cluster_deployment),
                )
            )
            timeout = timedelta(seconds=spec.deploy_timeout_seconds)
            deadline = workflow.now() + timeout
            known = ""
            while True:
                seen = await AWAIT_SERVICE_SET(
                    AwaitServiceSetRequest(
                        namespace=DEFAULT_NAMESPACE,
                        name=name,
                        service=release,
                        owner=owner,
                        deadline=deadline,
                        known_state=known,
                        generation=applied.generation,
                    ),
                    wait=max(deadline - workflow.now(), timedelta(seconds=1)),
                )
                match seen.outcome:
                    case ServiceSetOutcome.DEPLOYED:
                        return PrerequisitePhase.SATISFIED, PrerequisiteSource.WORKSPACE, ""
                    case ServiceSetOutcome.FAILED:
                        return (
                            PrerequisitePhase.FAILED,
                            None,
                            f"{spec.template} failed to install {where}: {seen.message}",
                        )
                    case ServiceSetOutcome.GONE:
                        return PrerequisitePhase.FAILED, None, f"ServiceSet {name} was deleted"
                    case ServiceSetOutcome.DEADLINE:
                        return (
                            PrerequisitePhase.FAILED,
                            None,
                            f"{spec.template} was not deployed {where} within "
                            f"{spec.deploy_timeout_seconds // 60} minutes (state: {seen.state or 'none'})",
                        )
                    case _:
                        known = seen.state
        except Exception as error:
            if not is_failure(error):
                raise
            return PrerequisitePhase.FAILED, None, reason_of(error)
