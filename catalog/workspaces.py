"""Colony's ready-made workspace catalog: the classes it ships, their ServiceTemplates, their charts' repository.

The content is YAML beside this module, written as a user would write it (exalsius
`WorkspaceClass` and k0rdent `ServiceTemplate` manifests, one file per chart), so it goes through
the same validation as `colonyctl apply -f` (`models.manifests`). The worker or `make run` publishes
it on the management cluster (the HelmRepository and ServiceTemplates as they are, each class as
an exalsius WorkspaceClass object); tests check it against the real CRDs.

| class | chart (repository `colony-catalog`) | access |
| --- | --- | --- |
| `colony-jupyter-1-0-0` | `colony-jupyter` 1.0.0, CPU or GPU | HTTP 8888 |
| `colony-vllm-1-0-0` | `colony-vllm` 1.0.0, GPU; needs `colony-inference-stack` 1.0.0 in `colony-inference` | HTTP 8000 |
| `colony-devbox-1-0-0` | `colony-devbox` 1.0.0, optional GPU | SSH 22 |
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from models.manifests import ServiceTemplateManifest, parse_manifests
from models.workspace_class import WorkspaceClassSpec

CATALOG_DIR = Path(__file__).resolve().parent
REPOSITORY_FILE = "colony-catalog-repository.yaml"
REPOSITORY_NAME = "colony-catalog"
"""The HelmRepository every catalog ServiceTemplate names (oci://ghcr.io/colony-dev/charts)."""
CONTENT_FILES = (
    "colony-jupyter.yaml",
    "colony-inference-stack.yaml",
    "colony-vllm.yaml",
    "colony-devbox.yaml",
)
"""In publishing order: a class's templates (and its prerequisites') come before it."""


class CatalogError(Exception):
    """The shipped catalog is inconsistent (a test catches this before a release does)."""


@dataclass(frozen=True)
class WorkspaceCatalog:
    """The catalog's content, validated."""

    helm_repository: dict[str, Any]
    """The Flux HelmRepository object, applied as it is."""
    service_templates: list[ServiceTemplateManifest]
    classes: list[WorkspaceClassSpec]

    def workspace_class(self, name: str) -> WorkspaceClassSpec | None:
        """The shipped class called `name`, or None."""
        return next((c for c in self.classes if c.name == name), None)

    def service_template(self, name: str) -> ServiceTemplateManifest | None:
        """The shipped ServiceTemplate called `name`, or None."""
        return next((t for t in self.service_templates if t.name == name), None)


def load_workspace_catalog(directory: Path = CATALOG_DIR) -> WorkspaceCatalog:
    """Read and check the catalog: every document valid, every template a class names shipped too.

    Raises:
        models.manifests.ManifestError: a document breaks a rule.
        CatalogError: a class names a ServiceTemplate the catalog lacks, or a template points
            somewhere other than the catalog's repository.
    """
    repository = yaml.safe_load((directory / REPOSITORY_FILE).read_text(encoding="utf-8"))
    templates: list[ServiceTemplateManifest] = []
    classes: list[WorkspaceClassSpec] = []
    for name in CONTENT_FILES:
        for manifest in parse_manifests((directory / name).read_text(encoding="utf-8"), name):
            if isinstance(manifest.request, ServiceTemplateManifest):
                templates.append(manifest.request)
            elif isinstance(manifest.request, WorkspaceClassSpec):
                classes.append(manifest.request)
            else:
                raise CatalogError(
                    f"{name}: the catalog holds classes and templates, not {manifest.kind}"
                )
    catalog = WorkspaceCatalog(repository, templates, classes)
    for template in templates:
        chart = template.chart
        if chart is None or chart[0] != REPOSITORY_NAME:
            raise CatalogError(
                f"ServiceTemplate {template.name} does not use HelmRepository {REPOSITORY_NAME}"
            )
    for workspace_class in classes:
        needed = [workspace_class.service_template.name]
        needed += [p.service_template.name for p in workspace_class.prerequisites]
        for template_name in needed:
            if catalog.service_template(template_name) is None:
                raise CatalogError(
                    f"class {workspace_class.name} needs ServiceTemplate {template_name}, "
                    "which the catalog does not ship"
                )
    return catalog
