"""Colony's shared infrastructure, used by every process: the worker, the watcher, `colonyctl` and
the HTTP API alike.

What lives here is plumbing each of them needs the same way and none of them owns:
- `config.py`: Colony's settings (`ColonySettings`: Temporal, the task queue, the management
  cluster's kubeconfig, the host provider, the watcher, metrics and tracing), read from the
  environment, and `SettingsError`;
- `kube.py`: the Kubernetes client factory (an `ApiClient` of its own per kubeconfig) and the one
  way to make a call with it (in a thread, never abandoned half-way, traced);
- `inflight.py`: a request already sent is never abandoned when its caller is cancelled;
- `crds.py`: the CustomResourceDefinitions Colony brings to the management cluster;
- `sealing.py`: sealing secret values with Colony's public key, unsealing them with its private one;
- `tracing.py`: OpenTelemetry, one trace from `colonyctl` to each Kubernetes call;
- `metrics.py`: Colony's Prometheus metrics and the endpoint that serves them;
- `process.py`: how the worker and the watcher start (logging, settings, exit status).
"""
