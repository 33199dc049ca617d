"""The catalog entity: its contract (`contract.py`, importable without the workflow) and its workflow."""
