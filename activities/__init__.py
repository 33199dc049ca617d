"""Temporal activities: all of Colony's IO, one module per system talked to."""
