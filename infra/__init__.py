"""Colony's shared infrastructure, used by every layer: the worker, the watcher, `colonyctl` and
the HTTP API alike.

What lives here is plumbing every front door and back end needs the same way, and none of them
owns: it imports no web framework, no command-line library and no Temporal error type, and
nothing of `starter/`, `api/`, `workflows/` or `sim/`.

- `keys.py`: API keys (format, permissions, scrypt hashes) and the store that keeps them as
  Secrets on the management cluster: the API verifies them, `colonyctl apikey` makes them;
- `settings.py`: the HTTP API's settings (`COLONY_API_*`), which `colonyctl` reads too;
- `ratelimit.py`: token buckets, per API key and client address, and for the key store's hashes.

Colony's other shared pieces (settings, tracing, metrics, the Kubernetes client factory,
sealing) still live in `activities/`, which `infra.settings` reaches for `SettingsError`; they
move here in later steps of issue 14.
"""
