"""Colony's watcher (`watcher.py`, or inside the worker): Kubernetes watch events in, Temporal
signals out.

It watches the management cluster's ClusterDeployments that Colony created, and through each
ClusterDeployment's kubeconfig Secret the Nodes and tenant Gateways of its child cluster, and tells
the workflow that owns each object (the annotation `colony.dev/workflow-id`; for a Gateway, the
workspaces with a namespace in that child) what changed, through the workflows' contracts
(`workflows/<entity>/__init__.py`). Workflows keep a slow fallback of their own, so the watcher
makes Colony fast, never correct: when it is down, nothing hangs.

Modules, by concern:
- `mapping`: pure: which signal (name, payload, request id) an event becomes, and which events
  are worth one;
- `kubeapi`: a small asyncio client for list, watch, get, create and replace (raw watch requests,
  so a watch is cancelled at once when leadership is lost);
- `streams`: one resumable watch (resourceVersion, relist on 410 Gone);
- `state`: the last resourceVersion of every stream, persisted in a ConfigMap;
- `leader`: leader election on a `coordination.k8s.io/v1` Lease;
- `signals`: signalling workflows through Temporal;
- `service`: the watcher itself, run by `watcher.py` or inside the worker
  (`COLONY_WATCHER_IN_WORKER=1`).
"""
