"""Activities on the management cluster (k0rdent, through the Kubernetes API), one class per kind
of object, each receiving the management cluster's `ApiClient`:

- `cluster_deployments.py`: `ClusterDeploymentActivities`, a cluster's ClusterTemplate and
  Credential checked, its ClusterDeployment created, waited on, given or relieved of machines and
  deleted; a colony's kubeconfigs Secret;
- `classes.py`: `WorkspaceClassActivities`, the workspace class catalog (WorkspaceClasses, the
  objects they need, ServiceTemplate checks);
- `service_sets.py`: `ServiceSetActivities`, a workspace's ServiceSet and its values Secret.
"""
