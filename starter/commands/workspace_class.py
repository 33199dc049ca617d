"""`colonyctl class publish|list|get`: the workspace class catalog (the classes workspaces are
deployed from), kept by Colony's catalog workflow on the management cluster.

A class file is an exalsius `workspaces.exalsius.ai/v1` WorkspaceClass (or Colony's
`colony.dev/v1` form), with the k0rdent ServiceTemplates it deploys when the file has them.
Classes are immutable: publishing a different definition under an existing name is refused with
the rule (a new version is a new name); publishing the same one again changes nothing.

Every command talks through `starter.backend.classes()`: Temporal directly, or the HTTP API.
Imports beyond Typer happen inside each command (see `starter/commands/__init__.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from starter.commands import Group
from starter.options import OutputFormat, OutputOption, RequestIdOption

if TYPE_CHECKING:
    from models.manifests import Manifest, ServiceTemplateManifest
    from models.workspace_api import PublishWorkspaceClassRequest
    from models.workspace_class import WorkspaceClassSpec

app = typer.Typer(help="Publish and inspect workspace classes.", no_args_is_help=True)
GROUP = Group("class", rank=70, operations=True)


def read_manifests(path: Path) -> list[Manifest]:
    """Every document of a manifest file ('-' for stdin), validated; the refusals of all
    documents on one line (`error: <file>: document 2 (WorkspaceClass x): <field>: <rule>`)."""
    from clients.errors import InvalidRequestError
    from clients.parsing import read_text
    from models.manifests import ManifestError, parse_manifests

    source, text = read_text(path)
    try:
        return parse_manifests(text, source)
    except ManifestError as exc:
        raise InvalidRequestError("; ".join(str(exc).splitlines())) from exc


def publish_requests(
    classes: list[WorkspaceClassSpec], templates: list[ServiceTemplateManifest]
) -> list[PublishWorkspaceClassRequest]:
    """One publish per class, each with the ServiceTemplates of the file it (or a prerequisite of
    it) names."""
    from models.workspace_api import PublishWorkspaceClassRequest

    requests = []
    for spec in classes:
        needed = {
            spec.service_template.name,
            *(p.service_template.name for p in spec.prerequisites),
        }
        objects = [t.to_object() for t in templates if t.name in needed]
        requests.append(PublishWorkspaceClassRequest(spec=spec, objects=objects))
    return requests


@app.command("publish")
def publish(
    file: Annotated[
        Path,
        typer.Option(
            "--file",
            "-f",
            help="WorkspaceClass manifest(s), with their ServiceTemplates ('-': stdin).",
        ),
    ],
    request_id: RequestIdOption = None,
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """Publish the workspace classes of FILE (and the ServiceTemplates they need from it)."""
    from clients.classes import check_class_conflicts
    from clients.errors import InvalidRequestError
    from models.manifests import ServiceTemplateManifest
    from models.workspace_api import PublishWorkspaceClassResult
    from models.workspace_class import WorkspaceClassSpec
    from starter import output
    from starter.backend import classes as catalog_client
    from starter.session import run

    manifests = read_manifests(file)
    classes = [m.request for m in manifests if isinstance(m.request, WorkspaceClassSpec)]
    templates = [m.request for m in manifests if isinstance(m.request, ServiceTemplateManifest)]
    other = next(
        (
            m
            for m in manifests
            if not isinstance(m.request, WorkspaceClassSpec | ServiceTemplateManifest)
        ),
        None,
    )
    if other is not None:
        raise InvalidRequestError(
            f"kind: document {other.index} is a {other.kind.value}; class publish takes "
            "WorkspaceClass and ServiceTemplate documents (colonyctl apply -f takes the others)"
        )
    if not classes:
        raise InvalidRequestError(f"file: {file} holds no WorkspaceClass")
    requests = publish_requests(classes, templates)
    used = {o["metadata"]["name"] for r in requests for o in r.objects}
    unused = [t.name for t in templates if t.name not in used]
    if unused:
        raise InvalidRequestError(
            f"kind: ServiceTemplate {unused[0]} is not used by a class of this file "
            "(colonyctl apply -f publishes templates on their own)"
        )
    catalog = catalog_client()

    async def go() -> list[PublishWorkspaceClassResult]:
        check_class_conflicts(requests, await catalog.catalog())
        results = []
        for index, request in enumerate(requests):
            one_id = f"{request_id}-{index}" if request_id else None
            results.append(await catalog.publish(request, request_id=one_id))
        return results

    results = run(go)
    rows = [
        {
            "class": request.spec.name,
            "created": result.created,
            "objectsCreated": result.objects_created,
            "objectsSkipped": result.objects_skipped,
        }
        for request, result in zip(requests, results, strict=True)
    ]
    if output.emit(rows, fmt):
        return
    for request, result in zip(requests, results, strict=True):
        created = ", ".join(result.objects_created)
        output.write(
            f"workspaceclass/{request.spec.name} "
            + ("published" if result.created else "unchanged (already published)")
            + (f"; created {created}" if created else "")
        )
        for skipped in result.objects_skipped:
            output.info(f"note: {skipped}")


@app.command("list")
def list_(fmt: OutputOption = OutputFormat.TABLE) -> None:
    """List the published workspace classes."""
    from starter import output
    from starter.backend import classes
    from starter.session import run
    from starter.workspace_output import CLASS_COLUMNS, class_rows

    catalog = classes()
    found = run(lambda: catalog.catalog())
    if not output.emit(found.classes, fmt):
        output.print_table(CLASS_COLUMNS, class_rows(found.classes))
    for unreadable in found.unreadable:
        output.info(f"note: a stored WorkspaceClass is not valid: {unreadable}")


@app.command("get")
def get(
    name: Annotated[str, typer.Argument(help="Class name (exact, versioned).", show_default=False)],
    fmt: OutputOption = OutputFormat.TABLE,
) -> None:
    """Show one workspace class: resources, endpoints, prompts. Exit 3 when it does not exist."""
    from starter.backend import classes
    from starter.session import show
    from starter.workspace_output import print_class

    catalog = classes()
    show(lambda: catalog.get(name), fmt, print_class)
