"""`colonyctl`, the command line that starts, steers and watches Colony's workflows.

- `cli.py`: the entry point (start-up, the token fast path, exit codes, `os._exit`);
- `app.py`: the Typer application and the one place errors become lines and exit codes;
- `commands/`: one module per noun (cluster and `apply`, node-pool, node, operation, credentials,
  catalog, auth, apikey, sim);
- `client.py`: every call to Temporal (`ClusterWorkflow`), shared with the HTTP API (`api/`);
  `catalog.py`: the host provider's catalog and stock; `checks.py`: catalog checks before sending;
- `remote.py`: the same functions over the HTTP API (remote mode), `login.py`: the stored login,
  `backend.py`: which of the two the commands use;
- `parsing.py`: flags and files to models; `submit.py`: send, follow and finish an operation;
  `watch.py`: `cluster get -w`; `output.py`: tables, JSON/YAML and live views;
- `errors.py`: the typed errors and their exit codes;
- `credentials.py` and `token_cache.py`: the kubeconfig and the cached exec-plugin token;
- `devenv.py` and `scenario.py`: `make run` and its demo; `devstate.py`: the development state
  it keeps (Temporal and the simulated world together), its reset, and who holds its ports.
"""
