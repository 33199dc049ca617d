"""Identity: the names of what Colony makes on shared infrastructure, and the ids of its workflows,
as injective functions of (organization, kind, name).

Everything an organization owns lives beside every other organization's: ClusterDeployments,
ServiceSets and Secrets in one namespace of the management cluster, workflows in one Temporal
namespace, routes on gateways that may be shared. A name built by gluing names together
(`<organization>-<cluster>`, `wsd-<cluster>-<workspace>`) is not injective: `acme` + `labs-cx`
and `acme-labs` + `cx` give the same string, and one tenant then finds, adopts or deletes another's
objects. So every name here is derived from an `Identity`, (organization, kind, names), in one of
two ways:

- a **derived name** (`<readable head>--<hash>`): the head says what it is to a person running
  kubectl (`wsd-training-nb`), the hash is 80 bits of SHA-256 over the identity's key, the parts
  joined with "/", which no part can contain (names are DNS labels or subdomains): different
  identities have different keys, and so (short of a SHA-256 collision) different names, whatever
  the hyphens in their parts. Heads are cut to fit the object's limit (63, 53 for Helm release
  names, 52 for ClusterDeployments, whose `<name>-kubeconfig` Secret must fit 63); the hash never;
- a **workflow id** (`cluster/<organization>/<name>`, `workspace/<organization>/<name>`,
  `colony/<organization>/<name>`, `capacity/<ClusterDeployment>`,
  `prereq/<ClusterDeployment>/<template>`): "/"-joined, so injective as they are (the default mode,
  no organization, drops that segment: `cluster/<name>` has one "/" less and cannot be confused).

The default mode (an operator using Temporal directly, organization "") keeps one plain name: a
cluster's ClusterDeployment is the cluster's name, which operators see in kubectl. It cannot be
confused with a derived name, because derived names contain "--" and the names users give clusters
never do (`models.cluster.ClusterSpec` refuses it; a colony's member clusters are
`<colony>--<entry>`, so their ClusterDeployments are derived too). Exalsius-facing names stay as
they are: a workspace's namespace `ws-<name>` (in its organization's child cluster) and its
hostnames `<workspace>.<domain>`.

Colony has had no release (0.1.0): nothing named the old way runs anywhere, so no migration exists.

Pure: no IO. Called wherever a name or a workflow id is made (models, workflows, starter, api).
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass
from enum import StrEnum

SEPARATOR = "/"
"""Joins an identity's parts into its key, and the segments of workflow ids: no part contains it."""
DERIVED_MARK = "--"
"""Between a derived name's head and its hash; plain names (default-mode clusters) never hold it."""
HASH_CHARS = 16
"""16 base32 characters: 80 bits of SHA-256, beyond a birthday collision among any number of
objects a management cluster holds, and beyond a brute-forced second preimage of a chosen name."""
NAME_MAX = 63
"""A DNS label: the limit of a Service's, a namespace's, a label value's name."""
HELM_RELEASE_MAX = 53
"""Helm's limit on release names (it appends suffixes to reach the 63 of a label)."""
CLUSTER_DEPLOYMENT_MAX = NAME_MAX - len("-kubeconfig")
"""52: k0rdent writes the child's kubeconfig to Secret `<ClusterDeployment>-kubeconfig`."""

_NOT_LABEL_CHARS = re.compile(r"[^a-z0-9-]+")
_HYPHENS = re.compile(r"-{2,}")


class Kind(StrEnum):
    """What an identity names; part of the key, so equal names of different kinds never meet."""

    CLUSTER_DEPLOYMENT = "ClusterDeployment"
    WORKSPACE_SERVICE_SET = "WorkspaceServiceSet"
    WORKSPACE_VALUES_SECRET = "WorkspaceValuesSecret"
    WORKSPACE_RELEASE = "WorkspaceRelease"
    PREREQUISITE_SERVICE_SET = "PrerequisiteServiceSet"
    ROUTE = "Route"
    COLONY_KUBECONFIGS_SECRET = "ColonyKubeconfigsSecret"
    WORKSPACE_CLASS = "WorkspaceClass"


class Entity(StrEnum):
    """The entities that have one workflow each, addressed `<entity>/[<organization>/]<name>`."""

    CLUSTER = "cluster"
    WORKSPACE = "workspace"
    COLONY = "colony"


@dataclass(frozen=True)
class Identity:
    """Whose (organization, "" for the default mode), what (kind), and which (the names that pick
    it out: a cluster; a cluster and a workspace; ...)."""

    organization: str
    kind: Kind
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.names or any(not name for name in self.names):
            raise ValueError(f"an identity of kind {self.kind} needs non-empty names")
        for part in (self.organization, *self.names):
            if SEPARATOR in part:
                raise ValueError(f"'{part}' contains '{SEPARATOR}', which joins identity parts")

    @property
    def key(self) -> str:
        """`<organization>/<kind>/<name>/...`: every part, joined by a character none contains."""
        return SEPARATOR.join((self.organization, self.kind.value, *self.names))

    @classmethod
    def parse(cls, key: str) -> Identity:
        """The identity whose `key` this is (the inverse of `key`: keys are injective)."""
        organization, kind, *names = key.split(SEPARATOR)
        return cls(organization, Kind(kind), tuple(names))

    def digest(self) -> str:
        """80 bits of SHA-256 over the key, in lowercase base32 (letters and 2-7: label-safe)."""
        raw = hashlib.sha256(self.key.encode()).digest()
        return base64.b32encode(raw).decode().lower()[:HASH_CHARS]


def readable(text: str) -> str:
    """`text` as the head of a name: lowercase letters, digits and single hyphens, no hyphen at
    either end (dots of template names become hyphens; "--" stays the derived mark's alone)."""
    return _HYPHENS.sub("-", _NOT_LABEL_CHARS.sub("-", text.lower())).strip("-")


def derived_name(identity: Identity, head: str, limit: int = NAME_MAX) -> str:
    """`<head>--<hash of the identity>`, the head cut to fit `limit` characters.

    Args:
        identity: what is named; the hash is of its key, so the name is as injective as the key.
        head: what a person reads; any text (made label-safe here), ideally starting with a letter.
        limit: the object's limit on names (63; 53 for Helm releases; 52 for ClusterDeployments).
    """
    room = limit - len(DERIVED_MARK) - HASH_CHARS
    if room < 1:
        raise ValueError(f"a derived name cannot fit {limit} characters")
    cut = readable(head)[:room].rstrip("-") or identity.kind.value.lower()[:room]
    return f"{cut}{DERIVED_MARK}{identity.digest()}"


def is_derived(name: str) -> bool:
    """True for a derived name (the mark and a hash end it); plain cluster names never are."""
    head, mark, digest = name.rpartition(DERIVED_MARK)
    return bool(head and mark) and len(digest) == HASH_CHARS


# --- The management cluster ------------------------------------------------------------------------


def cluster_deployment_name(organization: str, cluster: str) -> str:
    """The cluster's ClusterDeployment (and, with `-kubeconfig`, the Secret of its kubeconfig).

    A default-mode cluster's is its name (operators see it in kubectl); every other's is derived:
    an organization's (`<organization>-<cluster>--<hash>`) and a colony's member's
    (`<colony>-<entry>--<hash>`).
    """
    if not organization and DERIVED_MARK not in cluster:
        return cluster
    head = f"{organization}-{cluster}" if organization else cluster
    identity = Identity(organization, Kind.CLUSTER_DEPLOYMENT, (cluster,))
    return derived_name(identity, head, CLUSTER_DEPLOYMENT_MAX)


def colony_member_name(colony: str, entry: str) -> str:
    """The cluster a colony runs for one entry of its manifest: `<colony>--<entry>`.

    Injective over (colony, entry) because neither part may contain "--" (nor start or end with a
    hyphen): the mark is found exactly once, between them.
    """
    return f"{colony}{DERIVED_MARK}{entry}"


def colony_member_entry(colony: str, cluster: str) -> str | None:
    """The entry of `colony` that `cluster` is the member cluster of, or None (another's)."""
    prefix = f"{colony}{DERIVED_MARK}"
    return cluster.removeprefix(prefix) if cluster.startswith(prefix) else None


def workspace_service_set_name(organization: str, cluster: str, workspace: str) -> str:
    """The workspace's ServiceSet: `wsd-<cluster>-<workspace>--<hash>`."""
    identity = Identity(organization, Kind.WORKSPACE_SERVICE_SET, (cluster, workspace))
    return derived_name(identity, f"wsd-{cluster}-{workspace}")


def workspace_values_secret_name(organization: str, cluster: str, workspace: str) -> str:
    """The Secret beside the workspace's ServiceSet holding its unsealed secret values."""
    identity = Identity(organization, Kind.WORKSPACE_VALUES_SECRET, (cluster, workspace))
    return derived_name(identity, f"wsd-{cluster}-{workspace}-values")


def workspace_release_name(organization: str, cluster: str, workspace: str) -> str:
    """The workspace's Helm release (the ServiceSet's service): charts name Services after it, so
    it is a DNS-1035 label (it starts with `wsd-`), at most 53 characters."""
    identity = Identity(organization, Kind.WORKSPACE_RELEASE, (cluster, workspace))
    return derived_name(identity, f"wsd-{cluster}-{workspace}", HELM_RELEASE_MAX)


def prerequisite_service_set_name(organization: str, cluster: str, template: str) -> str:
    """The ServiceSet installing prerequisite `template` on a cluster (exalsius' `wsprereq-`)."""
    identity = Identity(organization, Kind.PREREQUISITE_SERVICE_SET, (cluster, template))
    return derived_name(identity, f"wsprereq-{cluster}-{template}")


def route_name(organization: str, cluster: str, workspace: str, endpoint: str) -> str:
    """The HTTPRoute or TCPRoute of one endpoint of a workspace (a gateway may serve many
    organizations' routes)."""
    identity = Identity(organization, Kind.ROUTE, (cluster, workspace, endpoint))
    return derived_name(identity, f"{workspace}-{endpoint}")


def colony_kubeconfigs_secret_name(organization: str, colony: str) -> str:
    """The Secret listing a colony's clusters' kubeconfig Secrets: `<colony>-kubeconfigs` in the
    default mode (as the exalsius operator names it), derived for an organization's colony."""
    if not organization:
        return f"{colony}-kubeconfigs"
    identity = Identity(organization, Kind.COLONY_KUBECONFIGS_SECRET, (colony,))
    return derived_name(identity, f"{organization}-{colony}-kubeconfigs")


def workspace_class_object_name(organization: str, name: str) -> str:
    """The `WorkspaceClass` object storing a class: its name for the catalog every organization
    shares, derived (`<organization>-<name>--<hash>`) for an organization's own class, which its
    name alone must never find for anyone else."""
    if not organization:
        return name
    identity = Identity(organization, Kind.WORKSPACE_CLASS, (name,))
    return derived_name(identity, f"{organization}-{name}")


# --- Workflow ids --------------------------------------------------------------------------------


def entity_workflow_id(entity: Entity, organization: str, name: str) -> str:
    """`<entity>/<organization>/<name>`, or `<entity>/<name>` in the default mode."""
    for part in (organization, name):
        if SEPARATOR in part:
            raise ValueError(f"'{part}' contains '{SEPARATOR}'")
    segments = (entity.value, organization, name) if organization else (entity.value, name)
    return SEPARATOR.join(segments)


def parse_entity_workflow_id(workflow_id: str) -> tuple[Entity, str, str] | None:
    """(entity, organization, name) of an entity's workflow id; None for any other id."""
    segments = workflow_id.split(SEPARATOR)
    if len(segments) not in (2, 3) or segments[0] not in Entity.__members__.values():
        return None
    organization, name = (segments[1], segments[2]) if len(segments) == 3 else ("", segments[1])
    if not name or (len(segments) == 3 and not organization):
        return None
    return Entity(segments[0]), organization, name


def capacity_workflow_id(cluster_deployment: str) -> str:
    """The GPU ledger of the cluster whose ClusterDeployment this is."""
    return SEPARATOR.join(("capacity", cluster_deployment))


def prerequisite_workflow_id(cluster_deployment: str, template: str) -> str:
    """The workflow installing prerequisite `template` on that ClusterDeployment's cluster."""
    return SEPARATOR.join(("prereq", cluster_deployment, template))


def owner_key(workflow_id: str, first_run_id: str) -> str:
    """What a cluster's host claims (and its ClusterDeployment's `colony.dev/owner`) carry: its
    workflow id and first run, so a name used again never sweeps an earlier cluster's hosts."""
    return SEPARATOR.join((workflow_id, first_run_id))
