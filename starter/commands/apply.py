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

from starter.options import (
    OutputFormat,
    OutputOption,
    RequestIdOption,
    TimeoutOption,
    WaitForCapacityOption,
    WaitOption,
)

if TYPE_CHECKING:
    from models.cluster import ClusterSpec
    from models.manifests import ColonySpec, Manifest, ServiceTemplateManifest
    from models.workspace import WorkspaceSpec
    from models.workspace_api import PublishWorkspaceClassRequest
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


def read_file(path: Path) -> tuple[str, str]:
    """(where it came from, its text) of a `-f` file; `-` is stdin."""
    import sys

    from starter.errors import InvalidRequestError

    if str(path) == "-":
        return "stdin", sys.stdin.read()
    try:
        return str(path), path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidRequestError(f"file: cannot read {path}: {exc.strerror}") from exc


def _bare_cluster(document: dict[str, Any], wait_for_capacity: bool) -> ClusterSpec:
    """A file written before manifests: one cluster spec, bare or as `{kind, metadata, spec}`."""
    from models.cluster import ClusterSpec
    from starter.parsing import validated

    if isinstance(document.get("spec"), dict):
        data = dict(document["spec"])
        name = (document.get("metadata") or {}).get("name")
        if name and "name" not in data:
            data["name"] = name
    else:
        data = {k: v for k, v in document.items() if k not in ("kind", "apiVersion")}
    if wait_for_capacity:
        data["waitForCapacity"] = True
    return validated(ClusterSpec, data)


def read_documents(paths: list[Path], wait_for_capacity: bool) -> tuple[list[Manifest], Plan]:
    """Every manifest of the files, validated, and the bare cluster specs among them.

    Raises:
        InvalidRequestError: unreadable YAML, or any document refused (all refusals, one line).
    """
    import yaml

    from models.manifests import ManifestError, parse_manifests
    from starter.errors import InvalidRequestError

    manifests: list[Manifest] = []
    bare = Plan()
    problems: list[str] = []
    for path in paths:
        source, text = read_file(path)
        try:
            documents = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as exc:
            raise InvalidRequestError(
                f"file: {source} is not valid YAML: {' '.join(str(exc).split())}"
            ) from exc
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
    wait: WaitOption = False,
    timeout: TimeoutOption = None,
    request_id: RequestIdOption = None,
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """Apply manifests: publish classes and templates, deploy workspaces, create or update
    clusters, as kubectl apply would have made an operator do."""
    manifests, bare = read_documents(files, wait_for_capacity)
    if dry_run:
        _dry_run(manifests, bare, fmt)
        return
    steps = plan(manifests, bare, wait_for_capacity)
    workspaces = _prepare_and_publish(steps, request_id=request_id)
    from starter.commands.cluster import apply_cluster

    for index, spec in enumerate(steps.clusters):
        one_id = f"{request_id}-cluster-{index}" if request_id else None
        apply_cluster(spec, wait=wait, timeout=timeout, fmt=fmt, request_id=one_id)
    if steps.colonies:
        from starter.commands.colony import apply_colonies

        apply_colonies(steps.colonies, request_id=request_id)
    _deploy(workspaces, wait=wait, timeout=timeout, fmt=fmt, request_id=request_id)


@dataclass
class _Deploy:
    spec: WorkspaceSpec
    workspace_class: WorkspaceClassSpec | None
    """None: the workspace exists, left as it is."""


def _prepare_and_publish(steps: Plan, *, request_id: str | None) -> list[_Deploy]:
    """Check every workspace against its class and every class against the catalog, then publish
    the templates and classes; the workspaces ready to deploy (sealed)."""
    from starter import output
    from starter import workspace_client as spaces
    from starter.client import connect
    from starter.commands.workspace import terminal_asker
    from starter.commands.workspace_class import check_conflicts
    from starter.session import run, settings

    if not (steps.templates or steps.classes or steps.workspaces):
        return []  # clusters only: the catalog has nothing to do with them
    from starter.backend import remote

    if remote():
        from starter.errors import InvalidRequestError

        raise InvalidRequestError(
            "kind: classes, ServiceTemplates and workspaces are not applied through the HTTP API "
            "yet: use colonyctl class publish -f and colonyctl workspace deploy, or log out to "
            "apply them through Temporal"
        )
    conf = settings()
    ask = terminal_asker()
    lines: list[str] = []

    async def go() -> list[_Deploy]:
        client = await connect(conf)
        catalog = await spaces.catalog(client)
        check_conflicts(steps.classes, catalog)
        published = {r.spec.name: r.spec for r in steps.classes}
        deploys: list[_Deploy] = []
        created = {(cluster.organization, cluster.name) for cluster in steps.clusters}
        for spec in steps.workspaces:
            if await spaces.workspace_exists(client, spec.name, spec.organization):
                deploys.append(_Deploy(spec, None))
                continue
            if (spec.organization, spec.cluster) not in created:
                # As `workspace deploy` checks it (`workspace_client.deploy`), before anything
                # of this apply starts; a cluster this apply creates is there by its deploy.
                await spaces.check_cluster(client, spec.cluster, organization=spec.organization)
            # The classes the workspace's organization sees: the shared ones (and those this
            # apply publishes to them), and its own.
            known = {c.name: c for c in catalog.for_organization(spec.organization).classes}
            pinned = published.get(spec.class_name) or known.get(spec.class_name)
            if pinned is None:
                raise spaces.class_not_found(spec.class_name, known)
            deploys.append(_Deploy(spaces.prepare_workspace(spec, pinned, ask=ask), pinned))
        # Everything is valid: now change things, in order.
        if steps.templates:
            one_id = f"{request_id}-templates" if request_id else None
            done = await spaces.publish_objects(
                client, [t.to_object() for t in steps.templates], request_id=one_id
            )
            lines.extend(f"{label.lower()} created" for label in done.created)
            lines.extend(f"{label.lower()} unchanged (exists)" for label in done.existing)
            lines.extend(f"{label.lower()} skipped" for label in done.skipped)
        for index, request in enumerate(steps.classes):
            one_id = f"{request_id}-class-{index}" if request_id else None
            result = await spaces.publish_class(client, request, request_id=one_id)
            lines.append(
                f"workspaceclass/{request.spec.name} "
                + ("published" if result.created else "unchanged")
            )
            lines.extend(f"{label.lower()} created" for label in result.objects_created)
        return deploys

    deploys = run(go)
    for line in lines:
        output.write(line)
    return deploys


def _deploy(
    deploys: list[_Deploy],
    *,
    wait: bool,
    timeout: float | None,
    fmt: OutputFormat,
    request_id: str | None,
) -> None:
    from starter import output
    from starter.commands.workspace import deploy_workspace

    for index, deploy in enumerate(deploys):
        if deploy.workspace_class is None:
            output.write(
                f"workspace/{deploy.spec.name} unchanged (it exists; apply does not change a "
                "deployed workspace: delete it first, or suspend and resume it)"
            )
            continue
        one_id = f"{request_id}-workspace-{index}" if request_id else None
        deploy_workspace(
            deploy.spec,
            wait=wait,
            timeout=timeout,
            fmt=fmt,
            request_id=one_id,
            workspace_class=deploy.workspace_class,
        )
