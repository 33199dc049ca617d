"""One client per entity, each with two transports behind one interface: Temporal (direct mode,
and the HTTP API itself) and Colony's HTTP API (`colonyctl`'s remote mode).

- `clusters.py`: clusters, their node pools, nodes, operations and credentials;
- `workspaces.py`: workspaces (the deploy path: cluster, class, prompts, sealing);
- `classes.py`: the workspace class catalog;
- `colonies.py`: colonies (groups of clusters);
- `provider.py`: the host provider's catalog and stock.

Each entity module declares its operations once, in an abstract class whose shared steps
(following an operation, watching a status) are written once too, and implements them twice:
`Temporal<Entities>` on `temporal.TemporalEntity`, `Http<Entities>` on `http.HttpEntity`. What a
transport reports is mapped to `clients.errors` once per transport: `temporal.failure` (RPC
statuses, query and update failures), `http.error_of` (HTTP statuses). Requests are validated by
the same functions (`models/` for the pure rules) before either transport sends anything.
`starter.backend` picks the transport; the commands (`starter/commands/`) and the API's routers
(`api/`) are thin shells over these clients. No Typer, rich or FastAPI here, and no printing.
"""
