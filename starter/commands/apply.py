"""`colonyctl apply -f FILE`: what `kubectl apply` of the same manifests would have made an operator
do, done by Colony's workflows.

A file holds one or more YAML documents (`---`, or `kind: List`; `-f -` reads stdin; `-f` may be
repeated). Each is an exalsius or Colony manifest (`models/manifests.py` lists the kinds):

| document | what apply does |
| --- | --- |
| k0rdent ServiceTemplate | published with the class of the same apply that needs it, else on its own (left as it is when one of that name exists) |
| WorkspaceClass (exalsius or Colony) | published; the same definition again changes nothing, another one under its name is refused |
| WorkspaceDeployment (exalsius), Workspace (Colony) | deployed (secrets sealed here); one that exists is left as it is and reported |
| Cluster (Colony) | created, or its pools added and scaled to the file |
| Colony (exalsius or Colony) | its `ColonyWorkflow` started, or given the changed manifest (clusters added and removed), as `colonyctl colony apply` |

A file of one bare cluster spec (no `apiVersion`) is a Cluster, as before. Everything is validated
before anything starts: every document against its schema, every workspace against its cluster
(it exists and takes workspaces, unless this apply creates it), its class (from the same apply or
the catalog) and its prompts, every class against the catalog (a conflicting one is refused). `--dry-run` stops after the schemas, without contacting Colony.

Imports beyond Typer happen inside the command (see `starter/commands/__init__.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from starter.options import OutputFormat, Submission, WaitForCapacityOption, submits

if TYPE_CHECKING:
    from clients.classes import TemporalClasses
    from clients.temporal import TemporalSession
    from clients.workspaces import TemporalWorkspaces
    from models.cluster import ClusterSpec, ClusterStatus
    from models.manifests import ColonySpec, Manifest, ServiceTemplateManifest
    from models.workspace import WorkspaceSpec
    from models.workspace_api import CatalogStatus, PublishWorkspaceClassRequest
    from models.workspace_class import WorkspaceClassSpec


@dataclass
class Plan:
    """What one apply does, in the order it does it."""

    templates: list[ServiceTemplateManifest] = field(default_factory=list)
    """ServiceTemplates no class of this apply needs: published on their own."""
    classes: list[PublishWorkspaceClassRequest] = field(default_factory=list)
    clusters: list[ClusterSpec] = field(default_factory=list)
    colonies: list[ColonySpec] = field(default_factory=list)
    workspaces: list[WorkspaceSpec] = field(default_factory=list)


def _bare_cluster(document: dict[str, Any], wait_for_capacity: bool) -> ClusterSpec:
    """A file written before manifests: one cluster spec, bare or as `{kind, metadata, spec}`."""
    from clients.parsing import spec_of, validated
    from models.cluster import ClusterSpec

    data = spec_of(document)
    if wait_for_capacity:
        data["waitForCapacity"] = True
    return validated(ClusterSpec, data)


def read_documents(paths: list[Path], wait_for_capacity: bool) -> tuple[list[Manifest], Plan]:
    """Every manifest of the files, validated, and the bare cluster specs among them.

    Raises:
        InvalidRequestError: unreadable YAML, or any document refused (all refusals, one line).
    """
    from clients.errors import InvalidRequestError
    from clients.parsing import read_text
    from models.bounds import InputError, load_yaml_documents
    from models.manifests import ManifestError, parse_manifests, unreadable

    manifests: list[Manifest] = []
    bare = Plan()
    problems: list[str] = []
    for path in paths:
        source, text = read_text(path)
        try:
            documents = [d for d in load_yaml_documents(text, what=source) if d is not None]
        except InputError as exc:
            if exc.syntax:
                raise InvalidRequestError(f"file: {source} is {exc.message}") from exc
            problems.extend(str(unreadable(exc, source)).splitlines())
            continue
        if (
            len(documents) == 1
            and isinstance(documents[0], dict)
            and "apiVersion" not in documents[0]
        ):
            bare.clusters.append(_bare_cluster(documents[0], wait_for_capacity))
            continue
        try:
            manifests.extend(parse_manifests(text, source))
        except ManifestError as exc:
            problems.extend(str(exc).splitlines())
    if problems:
        raise InvalidRequestError("; ".join(problems))
    return manifests, bare


def plan(manifests: list[Manifest], bare: Plan, wait_for_capacity: bool) -> Plan:
    """Sort the documents into what apply does."""
    from models.cluster import ClusterSpec
    from models.manifests import ColonySpec, ServiceTemplateManifest
    from models.workspace import WorkspaceSpec
    from models.workspace_class import WorkspaceClassSpec
    from starter.commands.workspace_class import publish_requests

    result = Plan(clusters=list(bare.clusters))
    classes: list[WorkspaceClassSpec] = []
    templates: list[ServiceTemplateManifest] = []
    for manifest in manifests:
        request = manifest.request
        if isinstance(request, WorkspaceClassSpec):
            classes.append(request)
        elif isinstance(request, ServiceTemplateManifest):
            templates.append(request)
        elif isinstance(request, WorkspaceSpec):
            result.workspaces.append(request)
        elif isinstance(request, ClusterSpec):
            result.clusters.append(
                request.model_copy(update={"wait_for_capacity": True})
                if wait_for_capacity
                else request
            )
        elif isinstance(request, ColonySpec):
            result.colonies.append(request)
    result.classes = publish_requests(classes, templates)
    used = {o["metadata"]["name"] for r in result.classes for o in r.objects}
    result.templates = [t for t in templates if t.name not in used]
    return result


def _dry_run(manifests: list[Manifest], bare: Plan, fmt: OutputFormat) -> None:
    from starter import output

    rows = [
        {"kind": m.kind.value, "name": m.name, "apiVersion": m.api_version, "document": m.index}
        for m in manifests
    ] + [
        {"kind": "Cluster", "name": c.name, "apiVersion": "", "document": 1} for c in bare.clusters
    ]
    if output.emit(rows, fmt):
        return
    for row in rows:
        output.write(f"{str(row['kind']).lower()}/{row['name']} valid (dry run: nothing applied)")


@submits
def apply(
    files: Annotated[
        list[Path],
        typer.Option(
            "--file",
            "-f",
            help="Manifests (exalsius, k0rdent, Colony), several documents per file; '-' reads "
            "stdin; repeatable.",
        ),
    ],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Validate every document; apply nothing.")
    ] = False,
    wait_for_capacity: WaitForCapacityOption = False,
    *,
    submission: Submission,
) -> None:
    """Apply manifests: publish classes and templates, deploy workspaces, create or update
    clusters, as kubectl apply would have made an operator do."""
    manifests, bare = read_documents(files, wait_for_capacity)
    if dry_run:
        _dry_run(manifests, bare, submission.fmt)
        return
    steps = plan(manifests, bare, wait_for_capacity)
    workspaces = _prepare_and_publish(steps, request_id=submission.request_id)
    from starter.commands.cluster import apply_cluster

    for index, spec in enumerate(steps.clusters):
        apply_cluster(spec, submission.one_of(f"cluster-{index}"))
    if steps.colonies:
        from starter.commands.colony import apply_colonies

        apply_colonies(steps.colonies, request_id=submission.request_id)
    _deploy(workspaces, submission)


@dataclass
class _Deploy:
    spec: WorkspaceSpec
    workspace_class: WorkspaceClassSpec | None
    """None: the workspace exists, left as it is."""


def _prepare_and_publish(steps: Plan, *, request_id: str | None) -> list[_Deploy]:
    """Check every workspace against its class and every class against the catalog, then publish
    the templates and classes; the workspaces ready to deploy (sealed)."""
    from clients.classes import TemporalClasses, check_class_conflicts
    from starter import output
    from starter.backend import remote, temporal_session
    from starter.session import run

    if not (steps.templates or steps.classes or steps.workspaces):
        return []  # clusters only: the catalog has nothing to do with them
    if remote():
        from clients.errors import InvalidRequestError

        raise InvalidRequestError(
            "kind: classes, ServiceTemplates and workspaces are not applied through the HTTP API "
            "yet: use colonyctl class publish -f and colonyctl workspace deploy, or log out to "
            "apply them through Temporal"
        )
    session = temporal_session()
    catalog = TemporalClasses(session)
    lines: list[str] = []

    async def go() -> list[_Deploy]:
        published = await catalog.catalog()
        check_class_conflicts(steps.classes, published)
        deploys = await _prepared(steps, session, published)
        # Everything is valid: now change things, in order.
        lines.extend(await _publish(steps, catalog, request_id))
        return deploys

    deploys = run(go)
    for line in lines:
        output.write(line)
    return deploys


async def _prepared(steps: Plan, session: TemporalSession, catalog: CatalogStatus) -> list[_Deploy]:
    """Every workspace of the apply checked as `workspace deploy` checks it, before anything of
    this apply starts (a cluster this apply creates is there by its deploy), and sealed."""
    from clients.classes import class_not_found
    from clients.workspaces import (
        TemporalWorkspaces,
        check_gpu_model,
        prepare_workspace,
    )
    from starter.commands.workspace import terminal_asker

    ask = terminal_asker()
    published = {r.spec.name: r.spec for r in steps.classes}
    created = {(cluster.organization, cluster.name): cluster for cluster in steps.clusters}
    deploys: list[_Deploy] = []
    for spec in steps.workspaces:
        spaces = TemporalWorkspaces(session).acting_for(spec.organization)
        if await spaces.exists(spec.name):
            deploys.append(_Deploy(spec, None))
            continue
        planned = created.get((spec.organization, spec.cluster))
        cluster = (
            await spaces.check_cluster(spec.cluster)
            if planned is None
            else await _as_applied(spaces, planned)
        )
        # The classes the workspace's organization sees: the shared ones (and those this apply
        # publishes to them), and its own.
        known = {c.name: c for c in catalog.for_organization(spec.organization).classes}
        pinned = published.get(spec.class_name) or known.get(spec.class_name)
        if pinned is None:
            raise class_not_found(spec.class_name, known)
        check_gpu_model(spec, pinned, cluster)
        deploys.append(_Deploy(prepare_workspace(spec, pinned, ask=ask), pinned))
    return deploys


async def _as_applied(spaces: TemporalWorkspaces, spec: ClusterSpec) -> ClusterStatus:
    """A cluster this apply creates or brings to its file, as it will be: its pools now (if it
    exists) and the file's, for the workspaces' checks."""
    from clients.clusters import TemporalClusters
    from clients.errors import NotFoundError
    from models.cluster import ClusterPhase, ClusterStatus
    from models.node_pool import NodePoolStatus

    try:
        status = await TemporalClusters(spaces.session).get(spec.name)
    except NotFoundError:
        status = ClusterStatus(
            name=spec.name, location_id=spec.location_id, phase=ClusterPhase.CREATING
        )
    pools = [*status.node_pools, *(NodePoolStatus.of(pool) for pool in spec.node_pools)]
    return status.model_copy(update={"node_pools": pools})


async def _publish(steps: Plan, catalog: TemporalClasses, request_id: str | None) -> list[str]:
    """Publish the apply's templates, then its classes; a line for each."""
    lines: list[str] = []
    if steps.templates:
        one_id = f"{request_id}-templates" if request_id else None
        done = await catalog.publish_objects(
            [t.to_object() for t in steps.templates], request_id=one_id
        )
        lines.extend(f"{label.lower()} created" for label in done.created)
        lines.extend(f"{label.lower()} unchanged (exists)" for label in done.existing)
        lines.extend(f"{label.lower()} skipped" for label in done.skipped)
    for index, request in enumerate(steps.classes):
        one_id = f"{request_id}-class-{index}" if request_id else None
        result = await catalog.publish(request, request_id=one_id)
        lines.append(
            f"workspaceclass/{request.spec.name} "
            + ("published" if result.created else "unchanged")
        )
        lines.extend(f"{label.lower()} created" for label in result.objects_created)
    return lines


def _deploy(deploys: list[_Deploy], submission: Submission) -> None:
    from starter import output
    from starter.commands.workspace import deploy_workspace

    for index, deploy in enumerate(deploys):
        if deploy.workspace_class is None:
            output.write(
                f"workspace/{deploy.spec.name} unchanged (it exists; apply does not change a "
                "deployed workspace: delete it first, or suspend and resume it)"
            )
            continue
        deploy_workspace(
            deploy.spec, submission.one_of(f"workspace-{index}"), deploy.workspace_class
        )
