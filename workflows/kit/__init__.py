"""The entity kit: what every Colony workflow is built from (see `workflows/kit/engine.py`).

Nothing is imported here, so `workflows.kit.contract` (the typed names clients use) can be imported
without the workflow machinery.
"""
