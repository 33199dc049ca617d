"""`colonyctl`, the command line that starts, steers and watches Colony's workflows.

- `cli.py`: the entry point (start-up, the token fast path, exit codes, `os._exit`);
- `app.py`: the Typer application and the one place errors become lines and exit codes;
- `commands/`: one module per noun (cluster and `apply`, node-pool, node, operation, credentials,
  catalog, auth, apikey, sim);
- `clients/`: one client per entity (clusters, workspaces, classes, colonies, the host provider's
  catalog), each with two transports behind one interface: Temporal (also what the HTTP API,
  `api/`, uses) and the HTTP API (remote mode); `checks.py`: the catalog checks the Temporal
  transport runs before sending; `login.py`: the stored login; `backend.py`: which transport the
  commands use;
- `parsing.py`: flags and files to models; `submit.py`: send, follow and finish an operation;
  `watch.py`: `cluster get -w`; `output.py`: tables, JSON/YAML and live views;
- `errors.py`: the typed errors and their exit codes;
- `credentials.py` and `token_cache.py`: the kubeconfig and the cached exec-plugin token;
- `dev/`: `make run` and its demo (`devenv.py`, `scenario.py`), and the development state it keeps
  (`devstate.py`: Temporal and the simulated world together, its reset, who holds its ports).
"""
