"""`colonyctl`'s commands, one module per noun: cluster, node-pool, node, operation, colony,
workspace, class (workspace classes), credentials (`kubeconfig`, `token`), catalog, auth (remote
mode through the HTTP API), apikey (the API's keys, operator side), sim and dev (`make run`'s
state); `apply -f` (every manifest kind) in `apply.py`.

Each module's top level imports only Typer, the standard library and `starter.options`: the parser
is built from these at every start, so `colonyctl --help` and a refused flag stay fast. Models,
Temporal, httpx, the Kubernetes client and rich are imported inside the command that needs them.
"""
