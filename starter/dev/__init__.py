"""`make run` and its demo: the development environment, apart from the command line it drives.

- `devenv.py`: `make run` / `make reset` (`python -m starter.dev.devenv`): the Temporal dev server,
  the simulated infrastructure, the worker, the watcher and the HTTP API, then the demo;
- `devstate.py`: the development state it keeps (Temporal's database and the simulated world
  together, in `.colony/`), its reset, and who holds its ports;
- `scenario.py`: the demo (`python -m starter.dev.scenario`), run through `colonyctl` as a user
  would.
"""
