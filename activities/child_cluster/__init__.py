"""Activities inside child clusters, each reaching its cluster through the kubeconfig Secret on the
management cluster (`clients.py`: `ChildClusterActivities`, their base, and the shared cache of
child clients):

- `nodes.py`: `NodeActivities`, nodes joining and labelled, cordons, drains, deletes, the GPU
  inventory;
- `namespaces.py`: `NamespaceActivities`, a workspace's namespace and its recent events;
- `routes.py`: `RouteActivities`, the tenant Gateway and a workspace's routes to it.
"""
