"""SIMULATOR. The simulated host provider: a JSON HTTP API that claims and releases whole hosts."""
