"""Colony's domain error types: the `type` of every `ApplicationError` activities and workflows raise.

Activities translate library errors (`ApiException`, `httpx.HTTPStatusError`) into these at the
boundary: a permanent failure becomes `ApplicationError(message, type=ErrorType.X, non_retryable=True)`,
a temporary one is re-raised as is and left to the retry policy. Workflows list `NON_RETRYABLE` in
every `RetryPolicy` so a permanent failure is never retried, whoever raised it.
"""

from __future__ import annotations

from enum import StrEnum

from temporalio.exceptions import ApplicationError


class ErrorType(StrEnum):
    """The `type` of an `ApplicationError`; the value is what Temporal records."""

    INVALID_SPEC = "InvalidSpec"
    """A request or manifest breaks a rule (the message names the rule)."""
    TEMPLATE_NOT_FOUND = "TemplateNotFound"
    """The ClusterTemplate does not exist in the namespace."""
    TEMPLATE_INVALID = "TemplateInvalid"
    """The ClusterTemplate exists but its status is not valid."""
    CREDENTIAL_NOT_FOUND = "CredentialNotFound"
    """The Credential does not exist in the namespace."""
    CREDENTIAL_NOT_READY = "CredentialNotReady"
    """The Credential exists but is not ready."""
    FORBIDDEN = "Forbidden"
    """The API refused Colony's own identity (403/401): retrying cannot help."""
    NOT_FOUND = "NotFound"
    """An object the activity needs is gone (for example the kubeconfig Secret)."""
    HOSTS_UNAVAILABLE = "HostsUnavailable"
    """The host provider has fewer free hosts of the SKU in the location than asked for."""
    UNKNOWN_SKU = "UnknownSku"
    """The host provider does not offer the SKU (or the location) at all."""
    CLUSTER_DEPLOYMENT_FAILED = "ClusterDeploymentFailed"
    """The ClusterDeployment did not become ready (deadline or a failed condition)."""
    NODE_POOLS_FAILED = "NodePoolsFailed"
    """Several node pools of one create failed, for different reasons (the message lists each)."""
    NODES_DID_NOT_JOIN = "NodesDidNotJoin"
    """Claimed hosts did not join the cluster within the join deadline."""
    DRAIN_TIMEOUT = "DrainTimeout"
    """A drain did not finish within the drain deadline; the message lists the blocking pods."""
    NODE_REMOVAL_FAILED = "NodeRemovalFailed"
    """A node could not be removed for a reason other than its drain deadline."""
    OPERATION_REJECTED = "OperationRejected"
    """An update validator refused an operation; nothing was written or queued."""
    NOT_SERVED = "NotServed"
    """The cluster does not serve the kind of an object (its CRD is not installed)."""
    CLASS_CONFLICT = "ClassConflict"
    """A workspace class of that name exists with another definition (classes are immutable)."""
    QUOTA_EXCEEDED = "QuotaExceeded"
    """An admission would take an organization past one of its quotas (`models.quota`): the
    message names the quota, its use and its limit, the details the field (`quota.hosts`)."""
    FOREIGN_OBJECT = "ForeignObject"
    """An object of the name Colony would create exists and is not its owner's (no Colony marks,
    or another owner's): it is never adopted (`models.ownership`)."""
    TEMPLATE_CONFIG_INVALID = "TemplateConfigInvalid"
    """A cluster's config does not satisfy its template's own values schema: the message names
    each field and rule (`config.workersNumber: -1 is less than the minimum of 0`)."""
    WORKERS_CHANGED_OUTSIDE = "WorkersChangedOutside"
    """A template pool's `workersNumber` is not what Colony last set: someone changed it outside
    Colony. Colony reports it and does not write over it."""
    WORKSPACES_UNRESPONSIVE = "WorkspacesUnresponsive"
    """A cluster's delete met workspaces whose workflows cannot answer it (`models.purge`): the
    message names them and the command that clears each."""


NON_RETRYABLE: list[str] = [
    ErrorType.INVALID_SPEC,
    ErrorType.TEMPLATE_NOT_FOUND,
    ErrorType.TEMPLATE_INVALID,
    ErrorType.TEMPLATE_CONFIG_INVALID,
    ErrorType.WORKERS_CHANGED_OUTSIDE,
    ErrorType.CREDENTIAL_NOT_FOUND,
    ErrorType.CREDENTIAL_NOT_READY,
    ErrorType.FORBIDDEN,
    ErrorType.NOT_FOUND,
    ErrorType.HOSTS_UNAVAILABLE,
    ErrorType.UNKNOWN_SKU,
    ErrorType.CLASS_CONFLICT,
    ErrorType.NOT_SERVED,
    ErrorType.FOREIGN_OBJECT,
    ErrorType.QUOTA_EXCEEDED,
    ErrorType.WORKSPACES_UNRESPONSIVE,
]
"""Error types no retry policy retries: permanent by nature, whoever raises them."""


def permanent(error_type: ErrorType, message: str) -> ApplicationError:
    """A non-retryable `ApplicationError` of a domain type, for activities to raise (`raise ... from exc`)."""
    return ApplicationError(message, type=error_type, non_retryable=True)


REJECTED_NOT_FOUND = "NotFound"
"""The `reason` in a refusal's details when what the request names does not exist (clients map it
to "not found", exit code 3, without reading the message)."""
REJECTED_FIELD = "field"
"""The key in a refusal's details of the request field it is about (clients name it, as they name
the field of any refusal: `pool: node pool 'x' does not exist ...`)."""


def over_quota(message: str, field: str) -> ApplicationError:
    """The refusal of an admission past a quota: the ledger's, and a cluster's update handler
    passing it on (clients map the type, and name `field`, as for any refusal)."""
    return ApplicationError(
        message, {REJECTED_FIELD: field}, type=ErrorType.QUOTA_EXCEEDED, non_retryable=True
    )


def rejected(message: str, *, not_found: bool = False, field: str = "") -> ApplicationError:
    """The error an update validator raises to refuse an operation with a message for the user.

    Args:
        message: the rule broken, for the user.
        not_found: the request names a pool, node or operation that does not exist; the details
            then carry `{"reason": "NotFound"}`.
        field: the request's field the refusal is about (`pool`, `count`, ...), in the details.
    """
    detail: dict[str, str] = {}
    if not_found:
        detail["reason"] = REJECTED_NOT_FOUND
    if field:
        detail[REJECTED_FIELD] = field
    details = [detail] if detail else []
    return ApplicationError(
        message, *details, type=ErrorType.OPERATION_REJECTED, non_retryable=True
    )
