"""Colony's shared infrastructure, used by every layer: the worker, the watcher, `colonyctl` and
the HTTP API alike.

What lives here is plumbing every front door and back end needs the same way, and none of them
owns: it imports no web framework, no command-line library and no Temporal error type, and
nothing of `starter/`, `api/`, `workflows/` or `sim/`.

- `config.py`: Colony's settings (`ColonySettings`: Temporal, the task queue, the management
  cluster's kubeconfig, the host provider, the watcher, metrics and tracing), read from the
  environment, and `SettingsError`;
- `settings.py`: the HTTP API's settings (`COLONY_API_*`), which `colonyctl` reads too;
- `keys.py`: API keys (format, permissions, scrypt hashes) and the store that keeps them as
  Secrets on the management cluster: the API verifies them, `colonyctl apikey` makes them;
- `ratelimit.py`: token buckets, per API key and client address, and for the key store's hashes;
- `kube.py`: the Kubernetes client factory (an `ApiClient` of its own per kubeconfig) and the one
  way to make a call with it (in a thread, never abandoned half-way, traced);
- `inflight.py`: a request already sent is never abandoned when its caller is cancelled;
- `crds.py`: the CustomResourceDefinitions Colony brings to the management cluster;
- `sealing.py`: sealing secret values with Colony's public key, unsealing them with its private one;
- `tracing.py`: OpenTelemetry, one trace from `colonyctl` to each Kubernetes call;
- `metrics.py`: Colony's Prometheus metrics and the endpoint that serves them;
- `process.py`: how the worker and the watcher start (logging, settings, exit status);
- `ports.py`: free ports for the servers the test stacks and benchmarks start side by side (below
  the kernel's ephemeral range, so no server's own port picks can take them).
"""
