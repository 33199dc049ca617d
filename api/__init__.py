"""Colony's HTTP API: the managed-Kubernetes REST interface, with API keys and permissions.

A thin, strict front door to the same workflows `colonyctl` drives: every endpoint is a shell over
the entity clients `colonyctl` uses in direct mode (`clients`, through Temporal), acting
for the organization of the caller's key, so the CLI and the API cannot drift apart.

- `app.py`: `create_app(settings, temporal_client_factory, key_store)`, the access log, OpenAPI;
- `clusters.py`: clusters, node pools, nodes, operations, kubeconfig and token;
  `workspaces.py`: workspace classes, and workspaces on the organization's clusters (secret
  answers sealed here with Colony's public key);
  `catalog.py`: locations, GPU models and CPU SKUs with their stock;
- `views.py`: request and response bodies, the documented status of a cluster;
  `bodies.py`: strict reading of request bodies;
- `context.py`: what requests share (the clients among it), and authentication (key, rate,
  permission); `routes.py`: how a route is declared (permissions, refusals, reads and writes);
  `errors.py`: every refusal as `{"error": {"code", "field", "message"}}` with its status;
- `__main__.py`: `python -m api` (uvicorn).

The API keys, their store, the rate limiters and the API's settings (`COLONY_API_*`) are shared
infrastructure (`infra/`): `colonyctl apikey` makes the keys this API verifies. Nothing here
imports `sim`, and `starter/` imports nothing of this package.
"""
