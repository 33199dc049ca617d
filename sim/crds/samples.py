"""Sample k0rdent objects of the shapes Colony and the sim create, for tests across the project.

Each function returns a fresh dict. The CRD tests check every sample against Colony's sim CRDs and,
when they are available, against k0rdent's real CRDs.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "API_VERSION",
    "cluster_deployment_hosted",
    "cluster_deployment_remote",
    "cluster_deployment_status",
    "cluster_template",
    "credential",
    "multi_cluster_service",
    "service_set",
    "service_set_status",
    "service_template",
    "state_management_provider",
]

API_VERSION = "k0rdent.mirantis.com/v1beta1"
_TIME = "2025-01-01T00:00:00Z"


def _meta(name: str, namespace: str | None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(labels)
    return meta


def _condition(type_: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": _TIME,
        "observedGeneration": 1,
    }


def credential(name: str = "ssh-cred", namespace: str = "kcm-system") -> dict[str, Any]:
    """A Credential whose identity is a Secret holding an SSH key (remote-cluster templates)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Credential",
        "metadata": _meta(name, namespace),
        "spec": {
            "description": "SSH key for the host provider's machines",
            "identityRef": {
                "apiVersion": "v1",
                "kind": "Secret",
                "name": f"{name}-ssh-key",
                "namespace": namespace,
            },
        },
    }


def cluster_template(
    name: str = "remote-cluster-1-0-0", namespace: str = "kcm-system"
) -> dict[str, Any]:
    """A ClusterTemplate pointing at a Helm chart in a HelmRepository."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterTemplate",
        "metadata": _meta(name, namespace),
        "spec": {
            "helm": {
                "chartSpec": {
                    "chart": name.rsplit("-", 3)[0],
                    "version": "1.0.0",
                    "interval": "10m",
                    "sourceRef": {"kind": "HelmRepository", "name": "kcm-templates"},
                }
            },
            "providers": ["k0sproject-k0smotron"],
        },
        "status": {"valid": True, "k8sVersion": "v1.32.5+k0s.0", "providers": ["k0smotron"]},
    }


def cluster_deployment_remote(
    name: str = "gpu-cluster",
    namespace: str = "kcm-system",
    machines: list[dict[str, Any]] | None = None,
    template: str = "remote-cluster-1-0-0",
) -> dict[str, Any]:
    """A ClusterDeployment of the SSH "remote-cluster" template over claimed hosts."""
    if machines is None:
        machines = [
            {"address": "192.0.2.10", "port": 22, "user": "root"},
            {"address": "192.0.2.11", "port": 2201, "user": "ubuntu"},
        ]
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterDeployment",
        "metadata": _meta(name, namespace, {"colony.dev/cluster": name}),
        "spec": {
            "template": template,
            "credential": "ssh-cred",
            "propagateCredentials": True,
            "config": {
                "clusterLabels": {"colony.dev/cluster": name},
                "machines": [dict(m) for m in machines],
                "k0smotron": {"service": {"type": "LoadBalancer"}},
            },
        },
    }


def cluster_deployment_hosted(
    name: str = "hcp-cluster", namespace: str = "kcm-system", workers: int = 2
) -> dict[str, Any]:
    """A ClusterDeployment of a hosted-control-plane template sized by workersNumber."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterDeployment",
        "metadata": _meta(name, namespace),
        "spec": {
            "template": "aws-hosted-cp-1-0-0",
            "credential": "aws-cred",
            "dryRun": False,
            "config": {"workersNumber": workers, "region": "us-east-2"},
            "serviceSpec": {
                "services": [
                    {
                        "name": "ingress-nginx",
                        "namespace": "ingress-nginx",
                        "template": "ingress-nginx-4-11-0",
                    }
                ]
            },
        },
    }


def cluster_deployment_status(ready: bool = True) -> dict[str, Any]:
    """A ClusterDeployment status as the sim's controller writes it."""
    status = "True" if ready else "False"
    reason = "Succeeded" if ready else "Failed"
    return {
        "observedGeneration": 1,
        "k8sVersion": "v1.32.5+k0s.0",
        "conditions": [_condition("Ready", status, reason, "" if ready else "machine failed")],
    }


def service_template(
    name: str = "jupyter-notebook-0-3-0",
    namespace: str = "kcm-system",
    chart: str = "jupyter-notebook",
) -> dict[str, Any]:
    """A ServiceTemplate wrapping one chart version, like the workspace hub's."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ServiceTemplate",
        "metadata": _meta(name, namespace, {"app": chart}),
        "spec": {
            "helm": {
                "chartSpec": {
                    "chart": chart,
                    "version": "0.3.0",
                    "interval": "10m",
                    "sourceRef": {"kind": "HelmRepository", "name": "exalsius-workspace-hub"},
                }
            }
        },
        "status": {"valid": True, "chartVersion": "0.3.0"},
    }


def service_set(
    name: str = "gpu-cluster-workspaces",
    namespace: str = "kcm-system",
    cluster: str = "gpu-cluster",
    services: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A ServiceSet deploying workspace services onto a cluster through the built-in provider."""
    if services is None:
        services = [
            {
                "name": "ws-alice",
                "namespace": "workspaces",
                "template": "jupyter-notebook-0-3-0",
                "values": "resources:\n  gpus: 1\n",
                "helmOptions": {"timeout": "10m", "wait": True},
                "helmAction": "Install",
            }
        ]
    return {
        "apiVersion": API_VERSION,
        "kind": "ServiceSet",
        "metadata": _meta(name, namespace),
        "spec": {
            "cluster": cluster,
            "provider": {"name": "ksm-projectsveltos", "selfManagement": False, "config": {}},
            "services": [dict(s) for s in services],
        },
    }


def service_set_status(state: str = "Deployed", failure: str | None = None) -> dict[str, Any]:
    """A ServiceSet status with one service in `state`."""
    service: dict[str, Any] = {
        "name": "ws-alice",
        "namespace": "workspaces",
        "template": "jupyter-notebook-0-3-0",
        "type": "Helm",
        "state": state,
        "lastStateTransitionTime": _TIME,
    }
    if failure is not None:
        service["failureMessage"] = failure
    return {
        "deployed": state == "Deployed",
        "provider": {"ready": True, "suspended": False},
        "services": [service],
        "conditions": [_condition("ServicesInReadyState", "True", "Succeeded", "1/1")],
    }


def multi_cluster_service(name: str = "gpu-operator") -> dict[str, Any]:
    """A cluster-scoped MultiClusterService installing a service on every labelled cluster."""
    return {
        "apiVersion": API_VERSION,
        "kind": "MultiClusterService",
        "metadata": _meta(name, None),
        "spec": {
            "clusterSelector": {"matchLabels": {"colony.dev/gpu": "true"}},
            "serviceSpec": {
                "services": [
                    {
                        "name": "gpu-operator",
                        "namespace": "gpu-operator",
                        "template": "gpu-operator-v25-3-0",
                    }
                ],
                "priority": 100,
            },
        },
    }


def state_management_provider(name: str = "ksm-projectsveltos") -> dict[str, Any]:
    """The built-in StateManagementProvider as k0rdent's docs show it (cluster-scoped)."""
    rule = "self.status.availableReplicas == self.status.replicas"
    return {
        "apiVersion": API_VERSION,
        "kind": "StateManagementProvider",
        "metadata": _meta(name, None),
        "spec": {
            "adapter": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": "kcm-controller-manager",
                "namespace": "kcm-system",
                "readinessRule": rule,
            },
            "provisioner": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": "addon-controller",
                    "namespace": "projectsveltos",
                    "readinessRule": rule,
                }
            ],
            "provisionerCRDs": [
                {
                    "group": "config.projectsveltos.io",
                    "version": "v1beta1",
                    "resources": ["profiles"],
                }
            ],
            "selector": {"matchLabels": {"ksm.k0rdent.mirantis.com/adapter": name}},
        },
        "status": {"ready": True},
    }
